"""The guard (node/guard/memguard.py): only a kernel record acts, and with memory low; `stop` signals
the lock's holder as the kernel knows it; the node runs only the bytes of the digest it was given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl.node.flock import take, write_record
from sparkctl.node.guard import memguard
from sparkctl.node.guard.memsense import GIB, kmsg_record
from tests.unit.lifecycle.test_guard import profile as guard_profile
from tests.unit.node.guard.test_memsense import FORGED_COMM, FORGED_FILE, FORGED_USER, XID


def _guard(monkeypatch: pytest.MonkeyPatch, records: list[str], avail_gib: float) -> list[dict]:
    """A Guard fed `records` as /dev/kmsg's and MemAvailable `avail_gib` (floor 6 GiB); its trips."""
    from sparkctl.lifecycle.guard import node_config

    cfg = node_config(guard_profile())  # the defaults: floor 6 GiB, the default patterns
    monkeypatch.setattr(memguard, "open_kmsg", lambda: (None, "test"))
    monkeypatch.setattr(memguard, "read_kmsg", lambda fd: [kmsg_record(r) for r in records])
    monkeypatch.setattr(memguard, "meminfo", lambda: {"MemAvailable": int(avail_gib * GIB)})
    g = memguard.Guard(cfg)
    g.targets.known = {"c1": {"id": "c1", "name": "rank0", "pid": 1, "start": None}}
    trips: list[dict] = []
    monkeypatch.setattr(g, "trip", lambda cause, now: trips.append(cause))
    g.kernel()
    return trips


def test_the_guard_ignores_user_space_and_comm_led_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _guard(monkeypatch, [FORGED_USER, FORGED_COMM, FORGED_FILE], avail_gib=1.0) == []


def test_a_real_xid_acts_with_memory_low_and_only_then(monkeypatch: pytest.MonkeyPatch) -> None:
    trips = _guard(monkeypatch, [XID], avail_gib=1.0)
    assert [t["kind"] for t in trips] == ["kernel"] and trips[0]["line"].startswith("NVRM: Xid (PCI:")
    assert _guard(monkeypatch, [XID], avail_gib=100.0) == []  # memory not low: seen, not acted on


def test_stop_signals_the_kernels_holder_not_the_records_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memguard, "here", lambda: str(tmp_path))
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    fd = os.open(tmp_path / "c.lock", os.O_RDWR | os.O_CREAT)
    try:
        assert take(fd)  # this process is the live guard
        write_record(fd, {"pid": victim.pid})  # what a process able to write the file could do
        out = memguard.op_stop("c", wait=0.1)
        assert out["stopped"] is None and f"pid {victim.pid}" in out["error"]
        assert victim.poll() is None  # not signalled
    finally:
        victim.kill()
        victim.wait()
        os.close(fd)


def test_the_node_runs_only_the_program_of_the_digest_it_was_given() -> None:
    from sparkctl.lifecycle.guard import guard_argv as node_argv
    from sparkctl.lifecycle.guard import program

    ok = subprocess.run(node_argv("status", "nothere"), input=program().encode(), capture_output=True)
    assert ok.returncode == 0 and ok.stdout.startswith(b'{"running": null')
    changed = program().replace("def op_status(", "def op_status_(", 1).encode()
    bad = subprocess.run(node_argv("status", "nothere"), input=changed, capture_output=True)
    assert bad.returncode != 0 and b"does not match its digest" in bad.stderr and not bad.stdout
