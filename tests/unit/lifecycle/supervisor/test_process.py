"""The supervisor's liveness flock (lifecycle/supervisor/process.py) through the shared helper
(node/flock.py): `hold()` while `running()` probes succeeds; two supervisors racing for the lock
get exactly one holder (real processes)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time

import pytest

from sparkctl.lifecycle.supervisor import process as supervisor


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_hold_succeeds_while_running_probes() -> None:
    path = supervisor.lock_file("lab")
    path.parent.mkdir(parents=True)
    path.touch()
    stop = threading.Event()

    def probe() -> None:  # what spawn() does every 50 ms while its supervisor starts
        while not stop.is_set():
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
