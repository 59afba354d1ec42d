"""The supervisor's liveness flock (lifecycle/supervisor/process.py) through the shared helper
(node/flock.py): `hold()` while `running()` probes succeeds; two supervisors racing for the lock
get exactly one holder (real processes); `supervise` with nothing to supervise says why and exits,
or waits saying so with `--wait`."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time

import pytest

from sparkctl.errors import ConnectError, UsageError
from sparkctl.lifecycle.supervisor import process as supervisor
from sparkctl.lifecycle.supervisor.process import Policy, StopFlag


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_hold_succeeds_while_running_probes() -> None:
    path = supervisor.lock_file("lab")
    path.parent.mkdir(parents=True)
    path.touch()
    stop = threading.Event()

    def probe() -> None:  # what spawn() does every 50 ms while its supervisor starts (here 10)
        while not stop.wait(0.01):
            supervisor.running("lab")

    probing = threading.Thread(target=probe)
    probing.start()
    held = os.open(path, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_SH)  # one probe caught at the wrong moment, for certain
    threading.Timer(0.1, lambda: os.close(held)).start()
    try:
        fd = supervisor.hold("lab", "tp2")  # the old LOCK_EX|LOCK_NB raised "already has a supervisor"
    finally:
        stop.set()
        probing.join()
    try:
        assert supervisor.running("lab")["pid"] == os.getpid()
    finally:
        os.close(fd)


def test_two_supervisors_racing_for_the_lock_get_exactly_one(tmp_path) -> None:
    go = tmp_path / "go"
    code = (
        "import os, sys, time\n"
        "from sparkctl.errors import LockHeldError\n"
        "from sparkctl.lifecycle.supervisor import process as supervisor\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.001)\n"
        "try:\n"
        "    supervisor.hold('lab', 'tp2')\n"
        "except LockHeldError:\n"
        "    print('refused', flush=True); sys.exit(0)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"  # holds until the test closes its stdin
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=os.environ,
        )
        for _ in range(2)
    ]
    try:
        time.sleep(0.2)  # both waiting at the start line (not a bound: the race is the point)
        go.touch()
        answers = {p.stdout.readline().strip(): p for p in procs}
        assert sorted(answers) == ["held", "refused"]
        assert supervisor.running("lab")["pid"] == answers["held"].pid
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=10)
    assert supervisor.running("lab") is None


class _Pool:  # what _look touches of a NodePool: get() and the dead connections it drops
    _connectors: dict = {}

    def get(self, node: str) -> str:
        return node


def _supervise(monkeypatch, inspect, policy: Policy):  # noqa: ANN001
    """supervise.run on the two-node profile of the guard tests, containers.inspect replaced; the
    lines it said. A StopFlag set after a few looks ends a `--wait`."""
    from sparkctl.lifecycle.supervisor import supervise
    from tests.unit.lifecycle.test_guard import profile

    monkeypatch.setattr(supervise.containers, "inspect", inspect)
    monkeypatch.setattr(supervise, "POLL_S", 0.001)
    flag, said = StopFlag(), []
    looks = []

    def say(line: str) -> None:
        said.append(line)

    def counting(conn, name):  # noqa: ANN001
        looks.append(name)
        if len(looks) > 6:
            flag.event.set()
        return inspect(conn, name)

    monkeypatch.setattr(supervise.containers, "inspect", counting)
    code = supervise.run(profile(), _Pool(), "dp2", policy, flag, say=say)
    return code, said


def test_supervise_with_every_node_unreachable_says_so_per_node_and_exits(monkeypatch) -> None:
    def down(conn, name):  # noqa: ANN001
        raise ConnectError(f"cannot reach node {conn}: timed out", node=conn, fix=f"check {conn}'s sshd")

    with pytest.raises(ConnectError) as err:
        _supervise(monkeypatch, down, Policy())
    lines = [err.value, *err.value.also]
    assert sorted(e.node for e in lines) == ["a", "b"]  # one line per node, each with its fix
    assert all("nothing to supervise" in e.message and e.fix == f"check {e.node}'s sshd" for e in lines)
    assert supervisor.running("c1") is None  # it let go of its lock


def test_supervise_with_nothing_running_says_so_or_waits_visibly(monkeypatch) -> None:
    with pytest.raises(UsageError) as err:
        _supervise(monkeypatch, lambda conn, name: None, Policy())
    assert "nothing of mode dp2 runs" in err.value.message and "--wait" in err.value.fix
    code, said = _supervise(monkeypatch, lambda conn, name: None, Policy(wait=True))
    assert code == 0 and len(said) == 1 and said[0].startswith("waiting (--wait): nothing of mode dp2 runs")
