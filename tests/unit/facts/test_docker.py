"""facts/docker.py: the Docker probe's error keeps the connector's fix for the cause it found."""

from __future__ import annotations

import pytest

from sparkctl.errors import DockerDownError
from sparkctl.facts.docker import probe_docker
from sparkctl.facts.probe import ProbeError


class Down:
    node = "box"

    def docker(self) -> object:
        raise DockerDownError(
            "Docker is not running", node="box", fix="start it: `sudo systemctl start docker`"
        )


def test_a_stopped_local_docker_says_start_it_not_the_docker_group() -> None:
    """preflight's DockerEngine said "add the user to the docker group" where `down` says start it."""
    with pytest.raises(ProbeError) as exc:
        probe_docker(Down())  # type: ignore[arg-type]
    assert "systemctl start docker" in (exc.value.fix or "")
    assert "docker group" not in (exc.value.fix or "")
