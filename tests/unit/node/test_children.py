"""node/children.py: a child's byte counters read after it exits and before it is reaped (how a
push counts what ssh or zstd read from `docker save` when no byte passes through Python)."""

from __future__ import annotations

import subprocess

from sparkctl.node.children import io_count, wait_exited


def test_a_childs_counts_are_read_after_its_exit_before_it_is_reaped() -> None:
    n = 3 << 20
    proc = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert proc.stdin is not None
    proc.stdin.write(b"x" * n)
    proc.stdin.close()
    wait_exited(proc)
    assert proc.returncode is None  # not reaped: its /proc entry is still there to read
    assert n <= io_count(proc.pid) < n + (1 << 16)  # what it read (plus its own start-up reads)
    assert io_count(proc.pid, "wchar:") >= n  # what it wrote
    assert proc.wait() == 0
    assert io_count(proc.pid) == 0  # reaped: nothing left to read, never an exception
