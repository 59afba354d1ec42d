"""Runs ON a node (python3 stdlib only), part of the node program: its children (each dies with
it), and the byte meter that turns a transfer's progress into {"progress": bytes} lines."""

import contextlib
import json
import os
import sys
import threading

CHILDREN = []
LIBC = []  # [libc or None], loaded by the first spawn: ops that start no child never import ctypes


def _libc():
    try:
        import ctypes

        return ctypes.CDLL(None)
    except (ImportError, OSError):
        return None


def _die_with_parent():
    if LIBC[0] is not None:
        LIBC[0].prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL


def spawn(argv, **kw):
    """A child that dies with this process; only from the main thread (the death signal is per thread)."""
    import subprocess  # node program: imported where used (~10 ms per start saved for the others)

    if not LIBC:  # loaded before forking: nothing may be imported between fork and exec
        LIBC.append(_libc())
    proc = subprocess.Popen(argv, preexec_fn=_die_with_parent, **kw)  # noqa: PLW1509 - async-signal-safe
    CHILDREN.append(proc)
    return proc


def kill_children():
    for proc in CHILDREN:
        with contextlib.suppress(OSError):
            proc.kill()


class Meter:
    """Bytes moved so far, printed as progress lines by the main thread."""

    def __init__(self):
        self.n = 0
        self.lock = threading.Lock()
        self.wake = threading.Event()  # set when a worker ends: the result goes out at once

    def run(self, target, *args):
        """A worker thread that wakes the reporter when it ends."""

        def body():
            try:
                target(*args)
            finally:
                self.wake.set()

        t = threading.Thread(target=body, daemon=True)
        t.start()
        return t

    def add(self, n):
        with self.lock:
            self.n += n

    def report_until(self, done, extra=None):
        last = -1
        while True:
            finished = done()
            now = max(last, self.n + (extra() if extra else 0))  # never backwards
            if now != last:
                sys.stdout.write(json.dumps({"progress": now}) + "\n")
                sys.stdout.flush()
                last = now
            if finished:
                return
            self.wake.wait(0.2)
            self.wake.clear()


def io_count(pid, field="rchar:"):
    """Bytes a process has read so far (its stdin, for ssh fed straight from `docker save`), or
    written with field "wchar:"."""
    try:
        with open("/proc/%d/io" % pid) as fh:  # noqa: UP031
            return int(next(line for line in fh if line.startswith(field)).split()[1])
    except (OSError, StopIteration, ValueError):
        return 0


def wait_exited(proc):
    """Wait for a child's exit without reaping it: a zombie's /proc/PID/io stays readable."""
    with contextlib.suppress(OSError):
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
