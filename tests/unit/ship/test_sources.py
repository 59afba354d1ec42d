"""ship's node states: a node whose Docker does not answer is said so, never "image absent"."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.connectors import NodePool
from sparkctl.errors import DockerDownError, ExitCode
from sparkctl.fanout import CancelToken
from sparkctl.profile import load_profile_file
from sparkctl.ship.sources import gather, image_source

ROOT = Path(__file__).resolve().parents[3]


def test_docker_not_running_is_an_exit_5_error_not_an_absent_image(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real node program on this machine (the profile's node is `local`), its engine socket
    # pointing where no Docker listens: what a node with Docker stopped answers.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    prof = load_profile_file(ROOT / "profiles" / "solo-spark.yaml")
    with NodePool(prof) as pool:
        states = gather(prof, pool, ["spark1"], "sglang-dflash:spark", [], deep=False, cancel=CancelToken())
    state = states["spark1"]
    assert state.error is None and isinstance(state.docker_error, DockerDownError)
    with pytest.raises(DockerDownError) as err:
        image_source(states, ["spark1"], "sglang-dflash:spark", None)
    assert err.value.exit_code == ExitCode.CONNECT and err.value.node == "spark1"
    assert "Docker is not answering" in err.value.message and "absent" not in err.value.message
    assert "systemctl start docker" in (err.value.fix or "")


def test_unreachable_nodes_are_exit_5_naming_each_not_an_image_on_no_node() -> None:
    """ship --dry-run with every node unreachable exited 3 saying the image "is on no node"."""
    from sparkctl.errors import ConnectError, SparkctlError
    from sparkctl.ship.sources import NodeState

    states = {
        "spark1": NodeState("spark1", error=ConnectError("SSH connection refused", node="spark1")),
        "spark2": NodeState("spark2", error=OSError("timed out")),
    }
    with pytest.raises(SparkctlError) as err:
        image_source(states, ["spark1", "spark2"], "sglang-dflash:spark", None)
    errors = [err.value, *err.value.also]
    assert err.value.exit_code == ExitCode.CONNECT and "no node" not in err.value.message
    assert [e.node for e in errors] == ["spark1", "spark2"], errors
