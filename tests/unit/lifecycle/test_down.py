"""lifecycle/down.py: what `down` says and exits with when a node cannot be asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.errors import DockerDownError, ExitCode, SparkctlError
from sparkctl.lifecycle import down as down_mod
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).resolve().parents[3]


def test_a_node_whose_docker_is_down_exits_5_with_the_start_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """README: 5 = a node cannot be reached or its Docker engine is not running (was exit 3)."""
    prof = load_profile_file(ROOT / "profiles" / "two-gpu-box.yaml")
    why = DockerDownError("Docker is not running", node="box", fix="start it: `sudo systemctl start docker`")
    monkeypatch.setattr(down_mod.containers, "list_nodes", lambda *_a: ([], {"box": why}))
    monkeypatch.setattr(down_mod.supervisor, "running", lambda _c: None)
    with pytest.raises(SparkctlError) as exc:
        down_mod.down(prof, pool=None, dry_run=True)  # type: ignore[arg-type]
    assert exc.value.exit_code == ExitCode.CONNECT
    assert "systemctl start docker" in (exc.value.fix or "")
