"""The guard's lock (node/guard/memguard.py): a probe by `running()` never makes a new guard
think another one runs; a live guard's lock does."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from sparkctl.node.guard.memguard import take_lock


def test_a_probes_shared_lock_only_delays_the_new_guard(tmp_path: Path) -> None:
    lock = tmp_path / "c.lock"
    lock.touch()
    probe = os.open(lock, os.O_RDONLY)
    fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)  # what running() holds while it reads
    threading.Timer(0.1, lambda: os.close(probe)).start()
    fd = os.open(lock, os.O_RDWR)
    try:
        assert take_lock(fd)  # the old code gave up at once: "another guard runs", exit 0
    finally:
        os.close(fd)


def test_a_live_guards_lock_keeps_a_second_guard_out(tmp_path: Path) -> None:
    lock = tmp_path / "c.lock"
    lock.touch()
    live = os.open(lock, os.O_RDWR)
    fcntl.flock(live, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fd = os.open(lock, os.O_RDWR)
    try:
        assert not take_lock(fd, wait_s=0.2)
    finally:
        os.close(fd)
        os.close(live)
