"""lifecycle/fleet_supervise.py: the fleet's supervisor holds its liveness flock under the fleet's
name while the on-demand loop runs (`supervise --stop` and `down` find it), and lets go after."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.lifecycle import fleet_supervise
from sparkctl.lifecycle.supervisor import process
from sparkctl.profile import load_profile_file

ROOT = Path(__file__).resolve().parents[3]


def test_the_loop_runs_under_the_fleets_supervisor_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    prof = load_profile_file(ROOT / "profiles" / "fleet-two-sparks.yaml")
    seen: dict = {}

    def loop(profile, flag, start, stop, url, key, say) -> int:
        seen.update(record=process.running("fleetduo"), url=url)
        return 7

    monkeypatch.setattr(fleet_supervise, "run_fleet", loop)
    monkeypatch.setattr(fleet_supervise.StopFlag, "install", lambda self: self)  # no signal handler left
    said: list[str] = []
    assert fleet_supervise.supervise(prof, said.append) == 7
    assert seen["record"]["mode"] == fleet_supervise.ROLE and seen["url"] == "http://127.0.0.1:8000"
    assert "on-demand services start on a request at http://127.0.0.1:8000/v1" in said[0]
    assert process.running("fleetduo") is None  # the flock is let go with the loop
