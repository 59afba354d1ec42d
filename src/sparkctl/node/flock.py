"""A process's liveness as an flock held for its whole life, and who holds it (python3 stdlib only;
imports nothing of sparkctl): the one helper of the cluster lock, the supervisor and the memory
guard (the guard ships it in its program, lifecycle imports it from here).

flock, not a pid file: the kernel drops the lock when its holder dies, however it dies. The file's
content (a JSON record) only describes the holder; the pid to signal is the kernel's (/proc/locks),
never the file's, which anything that can write the file could rewrite.
"""

import contextlib
import fcntl
import json
import os
import time

# `probe()` holds LOCK_SH for microseconds; a starter polls it (every 10-50 ms) while its holder
# starts. Taken once, LOCK_EX|LOCK_NB fails against such a probe: the new holder then gave up as if
# another one ran (seen in CI for the guard; the supervisor had the same race). A live holder keeps
# LOCK_EX for its whole life, so a lock still taken after WAIT_S is one.
WAIT_S = 1.0


def take(fd, wait_s=WAIT_S):
    """LOCK_EX on `fd`, retried for `wait_s` against momentary probes; False when another holds it."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)


def write_record(fd, record):
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)


def read_record(fd, size=8192):
    with contextlib.suppress(OSError, ValueError):
        return json.loads(os.pread(fd, size, 0) or b"{}")
    return {}


def probe(path):
    """The live holder's record ({} when unreadable), or None when no process holds the lock."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return read_record(fd)
    finally:
        os.close(fd)
    return None


def kernel_holder(path, locks_text=None):
    """The pid the kernel says holds an exclusive flock on `path` (/proc/locks), or None."""
    try:
        st = os.stat(path)
        text = locks_text if locks_text is not None else open("/proc/locks").read()  # noqa: SIM115
    except OSError:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in text.splitlines():
        f = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:02:5678 0 EOF" ("->" marks a blocked waiter)
        if len(f) >= 6 and f[1] == "FLOCK" and f[3] == "WRITE" and f[5] == want and f[4].isdigit():
            return int(f[4])
    return None
