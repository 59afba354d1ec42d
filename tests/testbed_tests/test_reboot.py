"""A simulated reboot of every lab node, then what the controller's `sparkctl persist` unit runs,
started as systemd would start it (its ExecStart and Environment, no terminal, no command typed):
the mode serves again. A node still down when the supervisor starts is waited for, logged, and
picked up when it returns; the state file, removed, is rebuilt from the containers' labels."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sparkctl.planning.build import build_plan
from sparkctl.profile import load_profile_file
from tests.testbed.lab import NODE_MOUNT
from tests.testbed.profiles import write_lab_profile
from tests.testbed_tests.conftest import SOLO, TP2, cli

pytestmark = pytest.mark.testbed


def unit_command(unit: Path) -> tuple[list[str], dict[str, str]]:
    """ExecStart's argv and the Environment= of a unit (the words persist writes: no specifiers)."""
    argv, env = [], {}
    for line in unit.read_text().splitlines():
        if line.startswith("ExecStart="):
            argv = shlex.split(line.removeprefix("ExecStart=").replace("$$", "$"))
        elif line.startswith("Environment="):
            key, _, value = shlex.split(line.removeprefix("Environment="))[0].partition("=")
            env[key] = value
    return argv, env


def events(state: Path, cluster: str) -> list[dict]:
    path = state / "sparkctl" / "clusters" / f"{cluster}.events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def wait_for(what: str, cond, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_rebooted_cluster_serves_again_from_the_unit_with_no_command_typed(lab, setup, tmp_path):
    _, state = setup
    setup[0]()
    path = write_lab_profile(lab, tmp_path / "sparkctl.yaml", modes={"solo": SOLO, "tp2": TP2})
    prof = load_profile_file(path)
    cluster, plan = prof.cluster, build_plan(prof, "tp2")
    assert cli(state, path, "up", "tp2", "--skip-preflight").returncode == 0
    unit_dir = f"{NODE_MOUNT}/systemd"
    res = cli(state, path, "persist", "install", "tp2", "--unit-dir", unit_dir)
    assert res.returncode == 0, res.stderr
    argv, unit_env = unit_command(
        Path(lab.node("spark1").node_root, "systemd", f"sparkctl-supervise-{cluster}.service")
    )
    assert argv[1:6] == ["-m", "sparkctl", "supervise", "tp2", "--wait"] and unit_env[
        "XDG_STATE_HOME"
    ] == str(state)

    # The reboot: every rank killed, every node's dockerd restarted, the controller's state lost,
    # and spark2 not back yet when the unit starts.
    for spec in plan.ranks:
        lab.kill_container(spec.node, spec.container_name)
    for node in lab.nodes:
        lab.restart_dockerd(node)
    (state / "sparkctl" / "clusters" / f"{cluster}.json").unlink()
    lab.stop_sshd("spark2", kill_sessions=True)
    before = {c.name: c.status for c in lab.docker("spark1").containers.list(all=True)}
    assert before[plan.ranks[0].container_name] == "exited"

    # What systemd runs: the unit's command, its environment (PATH, HOME, the unit's Environment=;
    # PYTHONPATH only so that it runs this tree), stdin from /dev/null, its own session.
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **unit_env}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    t0 = time.monotonic()
    sup = subprocess.Popen(
        argv,
        env=env,
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(
            "the wait for spark2",
            lambda: any(e["event"] == "waiting_for_node" for e in events(state, cluster)),
        )
        lab.start_sshd("spark2")
        wait_for(
            "the group restarted", lambda: any(e["event"] == "restarted" for e in events(state, cluster))
        )
        served = time.monotonic() - t0
        st = json.loads(cli(state, path, "status", "--json").stdout)
        mode = next(m for m in st["modes"] if m["mode"] == "tp2")
        assert mode["health"]["ready"], mode
        kinds = [e["event"] for e in events(state, cluster)]
        for kind in (
            "waiting_for_node",
            "node_back",
            "state_rebuilt",
            "reconciling",
            "supervising",
            "restarted",
        ):
            assert kind in kinds, kinds
        assert kinds.index("reconciling") < kinds.index("restarted")
        restarted = next(e for e in events(state, cluster) if e["event"] == "restarted")
        reconciling = next(e for e in events(state, cluster) if e["event"] == "reconciling")
        assert reconciling["detail"] == "reconcile at start: rank 0 exited, rank 1 exited"
        assert restarted["cause"] == reconciling["cause"] and " exited (" in restarted["cause"]
        attempt = json.loads((state / "sparkctl" / "clusters" / f"{cluster}.json").read_text())
        assert attempt["mode"] == "tp2" and attempt["outcome"] == "ready"
        print(f"reboot -> serving again in {served:.1f}s (spark2 held down for part of it)")
    finally:
        os.killpg(sup.pid, signal.SIGTERM)
        out = sup.communicate(timeout=60)[0]
        lab.start_sshd("spark2")
    assert sup.returncode == 0, out
    assert cli(state, path, "persist", "remove", "tp2", "--unit-dir", unit_dir).returncode == 0
