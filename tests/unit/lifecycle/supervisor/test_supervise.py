"""Unit tests: JSON error objects for every --json command, blame by FinishedAt, pending cleanup
and event records, the supervisor's backoff and liveness flock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
import typer
from typer.testing import CliRunner

from sparkctl.cli import app
from sparkctl.commands._common import error_json
from sparkctl.lifecycle import state
from sparkctl.lifecycle.orphans import is_connection_loss
from sparkctl.lifecycle.supervisor import process as supervisor
from sparkctl.lifecycle.supervisor.process import Policy
from sparkctl.lifecycle.watch import RankFailedError, RankLog, first_dead
from sparkctl.runtime.containers import ContainerInfo


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _json_commands() -> list[tuple[list[str], object]]:
    """(argv prefix, command) for every command, nested groups included, that takes --json."""
    root = typer.main.get_command(app)
    found = []

    def walk(cmd, path: list[str]) -> None:  # typer's click command or group
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
        elif any("--json" in getattr(p, "opts", []) for p in cmd.params):
            found.append((path, cmd))

    walk(root, [])
    return found


def test_every_json_command_prints_one_error_object_on_failure(tmp_path):
    commands = _json_commands()
    assert len(commands) >= 10  # up, down, switch, status, plan, preflight, ship, verify, ...
    runner = CliRunner()
    missing = str(tmp_path / "no-such-profile.yaml")
    for path, cmd in commands:
        args = ["x" for p in cmd.params if p.param_type_name == "argument" and p.required]
        profile = ["-p", missing] if any("-p" in getattr(p, "opts", []) for p in cmd.params) else []
        res = runner.invoke(app, [*path, *args, *profile, "--json"], env={"SPARKCTL_PROFILE": missing})
        if res.exit_code == 0:
            continue  # a command that needs no profile and succeeded with dummy arguments
        obj = json.loads(res.stdout)  # exactly one JSON document on stdout
        assert obj["ok"] is False, (path, res.stdout)
        assert set(obj["error"]) >= {"code", "message", "fix", "node", "rank"}, path
        assert obj["error"]["code"] == res.exit_code, (path, res.stdout)


def test_error_json_carries_node_rank_fix_and_the_rank_log():
    exc = RankFailedError(
        "rank 1 exited", node="spark2", rank=1, fix="see the log", logs=[RankLog(1, "spark2", ["boom"])]
    )
    obj = error_json(exc, 3)
    assert obj == {
        "ok": False,
        "error": {
            "code": 3,
            "message": "rank 1 exited",
            "fix": "see the log",
            "node": "spark2",
            "rank": 1,
            "logs": [{"rank": 1, "node": "spark2", "lines": ["boom"]}],
        },
    }


def _info(rank: int, status: str, finished: datetime | None) -> ContainerInfo:
    return ContainerInfo(
        "n",
        f"r{rank}",
        "id",
        status,
        1 if status == "exited" else None,
        False,
        None,
        finished,
        "img",
        "sha",
        {"sparkctl.rank": str(rank)},
    )


def test_first_dead_is_the_first_to_finish_not_the_lowest_rank():
    t = datetime(2025, 1, 1, tzinfo=UTC)
    infos = {0: _info(0, "exited", t + timedelta(milliseconds=40)), 1: _info(1, "exited", t)}
    assert first_dead(infos) == 1
    assert first_dead({0: _info(0, "running", None), 1: _info(1, "exited", t)}) == 1
    assert first_dead({0: None, 1: _info(1, "exited", t)}) == 1  # vanished sorts after a known death
    assert first_dead({0: _info(0, "running", None)}) is None


def test_connection_loss_is_told_from_other_failures():
    import requests

    assert is_connection_loss(requests.exceptions.ConnectionError(("Connection aborted.", OSError("closed"))))
    assert is_connection_loss(OSError("Socket is closed")) and is_connection_loss(EOFError())
    assert not is_connection_loss(ValueError("bad")) and not is_connection_loss(KeyboardInterrupt())


def test_pending_cleanup_is_recorded_merged_and_dropped():
    a = state.Pending("spark2", "c-r1", 1, "tp2", time.time(), "lost")
    b = state.Pending("spark3", "c-r2", 2, "tp2", time.time(), "lost")
    state.add_pending("lab", [a])
    state.add_pending("lab", [a, b])  # the same container twice is one entry
    assert [p.container for p in state.pending("lab")] == ["c-r1", "c-r2"]
    assert "c-r1 (rank 1 of tp2), left when spark2 was lost" in a.describe()
    state.drop_pending("lab", [a])
    assert state.pending("lab") == [b]
    state.drop_pending("lab", [b])
    assert state.pending("lab") == [] and not state.cluster_file("lab", ".pending.json").exists()


def test_events_round_trip_and_read_as_lines():
    state.record_event("lab", "restarted", cause="rank 1 on spark2 exited (exit code 137)", ready_s=3.2)
    before = time.time()
    state.record_event("lab", "gave_up", cause="rank 0 on spark1 exited (exit code 1)", detail="5 restarts")
    assert [e["event"] for e in state.events("lab")] == ["restarted", "gave_up"]
    assert [e["event"] for e in state.events("lab", since=before)] == ["gave_up"]
    line = state.describe_event(state.events("lab")[0])
    assert line.endswith(
        "group restarted because rank 1 on spark2 exited (exit code 137); serving again 3.2s later"
    )


def test_backoff_first_restart_at_once_then_doubling_capped():
    p = Policy(backoff=2.0)
    assert [p.delay(n) for n in range(7)] == [0.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0]


def test_supervisor_liveness_is_its_flock(tmp_path):
    assert supervisor.running("lab") is None
    code = (
        "import time; from sparkctl.lifecycle.supervisor import process as supervisor; supervisor.hold('lab', 'tp2'); "
        "print('held', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert proc.stdout.readline().strip() == "held"
        info = supervisor.running("lab")
        assert info["pid"] == proc.pid and info["mode"] == "tp2"
        assert supervisor.stop("lab") == f"stopped the supervisor (pid {proc.pid}, mode tp2)"
        assert proc.wait(timeout=10) != 0  # it died of the SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    assert supervisor.running("lab") is None  # a dead holder's file is not "running"
    assert supervisor.stop("lab") is None
