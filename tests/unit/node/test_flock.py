"""The one flock helper (node/flock.py) of the cluster lock, the supervisor and the guard: a probe's
momentary shared lock only delays a new holder; a live holder keeps others out; the kernel names
the holder whatever its file says."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from sparkctl.node.flock import kernel_holder, probe, take, write_record


def test_a_probes_shared_lock_only_delays_the_new_holder(tmp_path: Path) -> None:
    lock = tmp_path / "c.lock"
    lock.touch()
    probe_fd = os.open(lock, os.O_RDONLY)
    fcntl.flock(probe_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # what probe() holds while it reads
    threading.Timer(0.1, lambda: os.close(probe_fd)).start()
    fd = os.open(lock, os.O_RDWR)
    try:
        assert take(fd)  # LOCK_EX|LOCK_NB once gave up at once: "another one runs"
    finally:
        os.close(fd)


def test_a_live_holder_keeps_a_second_one_out(tmp_path: Path) -> None:
    lock = tmp_path / "c.lock"
    lock.touch()
    live = os.open(lock, os.O_RDWR)
    fcntl.flock(live, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fd = os.open(lock, os.O_RDWR)
    try:
        assert not take(fd, wait_s=0.2)
    finally:
        os.close(fd)
        os.close(live)


def test_probe_reads_the_live_holders_record_and_the_kernel_names_it(tmp_path: Path) -> None:
    lock = tmp_path / "c.lock"
    assert probe(lock) is None and kernel_holder(lock) is None  # no file
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        assert probe(lock) is None  # a file nobody holds
        assert take(fd)
        write_record(fd, {"pid": 1, "mode": "solo"})  # the file says pid 1 ...
        assert probe(lock) == {"pid": 1, "mode": "solo"}
        assert kernel_holder(lock) == os.getpid()  # ... the kernel says who holds it
    finally:
        os.close(fd)
    assert probe(lock) is None and kernel_holder(lock) is None


def test_kernel_holder_reads_proc_locks_lines(tmp_path: Path) -> None:
    lock = tmp_path / "c.lock"
    lock.touch()
    st = os.stat(lock)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    text = f"1: POSIX  ADVISORY  WRITE 7 {dev} 0 EOF\n2: FLOCK  ADVISORY  READ 8 {dev} 0 EOF\n"
    assert kernel_holder(lock, text) is None  # a POSIX lock, a shared flock: not a holder
    assert kernel_holder(lock, text + f"3: FLOCK  ADVISORY  WRITE 9 {dev} 0 EOF\n") == 9
