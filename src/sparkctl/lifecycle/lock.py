"""One lifecycle operation per cluster at a time: a controller-side flock with its holder written in.

flock (not a pid file) because the kernel drops the lock when its holder dies, however it dies:
a lock left by a killed `up` is recovered by the next one without any stale-pid guessing. The
file's content only describes the holder for the refusal message.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import sys
import time
from pathlib import Path

from sparkctl.errors import LockHeldError
from sparkctl.node import flock


def state_dir() -> Path:
    """Controller-side state: $XDG_STATE_HOME/sparkctl or ~/.local/state/sparkctl."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "sparkctl"


def private_dir(path: Path) -> Path:
    """`path` (under the state dir) created 0700, and the state dir itself 0700: events, holders'
    commands and the supervisor's log are this user's alone."""
    root = state_dir()
    below = [p for p in (path, *path.parents) if root in p.parents]  # deepest first
    for d in [root, *reversed(below)]:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        if d.stat().st_mode & 0o077:
            d.chmod(0o700)
    return path


# Options whose value is a secret (`bench --compare A B --api-key K`): never written to a lock.
_SECRET_OPTION = re.compile(r"^--?[\w-]*(key|token|secret|password)[\w-]*$", re.IGNORECASE)


def redacted_command(argv: list[str]) -> str:
    """The command line for the lock's holder note, secret option values as ***."""
    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        name, eq, _value = word.partition("=")
        if _SECRET_OPTION.match(name):
            if eq:
                out.append(f"{name}=***")
                continue
            hide_next = True
        out.append(word)
    return shlex.join(out)


def lock_path(cluster: str) -> Path:
    return state_dir() / "locks" / f"{cluster}.lock"


def describe_holder(info: dict) -> str:
    since = info.get("since")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if since else "?"
    return (
        f"pid {info.get('pid', '?')} on {info.get('host', '?')} running "
        f"`{info.get('command', '?')}` since {when}"
    )


class ClusterLock:
    """`with ClusterLock(cluster, command):` holds the lock or raises LockHeldError naming the holder."""

    def __init__(self, cluster: str, command: str | None = None, path: Path | None = None) -> None:
        self.cluster = cluster
        self.command = command or redacted_command(["sparkctl", *sys.argv[1:]])
        self.path = path or lock_path(cluster)
        self._fd: int | None = None

    def acquire(self) -> ClusterLock:
        if state_dir() in self.path.parents:
            private_dir(self.path.parent)
        else:  # a lock path given by a test or a caller
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # O_CLOEXEC: a detached process started by this run must never inherit (and keep) the lock.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if not flock.take(fd):
            holder = self.holder(fd)
            os.close(fd)
            raise LockHeldError(
                f"cluster '{self.cluster}' is locked by another sparkctl: {describe_holder(holder)}",
                fix="wait for it to finish (or stop it); a lock whose process died is released "
                f"automatically. Lock file: {self.path}",
            ) from None
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": self.command,
            "since": time.time(),
        }
        flock.write_record(fd, info)
        self._fd = fd
        return self

    @staticmethod
    def holder(fd: int) -> dict:
        return flock.read_record(fd)

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the last fd drops the flock
            self._fd = None

    def __enter__(self) -> ClusterLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
