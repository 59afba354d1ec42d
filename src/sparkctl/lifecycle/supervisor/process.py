"""Group restart: after `up --supervise`, watch the ranks and restart the whole group together.

TP ranks cannot be restarted alone (the survivors hold a dead communicator), so, like
LeaderWorkerSet's RecreateGroupOnPodRestart, any rank exiting - or a real generation canary
failing N times in a row - kills every rank and starts the group again from the same plan, with
exponential backoff and a restart limit. Every event goes to the cluster's event log
(state.py), which `status` and `logs` show.

Where it runs: a detached process on the controller (`setsid`, no terminal, output to a file
under the state dir), reaching the nodes over the same verified SSH connections as every other
command. It survives the terminal closing; run `up` on rank 0's node (as recommended) and it
lives as long as that machine. Liveness is an flock held for the process's life (like the
cluster lock), so a dead supervisor is never reported as running. `down`, and an `up`/`switch`
that changes the cluster, stop it first. docs/operations.md says why not a container holding
the Docker socket.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sparkctl.lifecycle.lock import private_dir, state_dir
from sparkctl.node import flock

POLL_S = 0.5


@dataclass(frozen=True)
class Policy:
    max_restarts: int = 5  # within `window` seconds; then give up and leave the group as it is
    window: float = 3600.0
    backoff: float = 2.0  # first restart at once, then 2, 4, 8 ... s (capped at 60 s)
    canary_every: float = 10.0  # seconds between generation canaries (0: none)
    canary_failures: int = 3  # consecutive failed canaries that count as a failure
    guard: bool | None = None  # `--guard/--no-guard` (None: the profile's memory.guard.enabled)
    wait: bool = False  # `--wait`: nothing to supervise yet (nodes down, nothing runs) -> wait for it

    def delay(self, recent: int) -> float:
        return 0.0 if recent == 0 else min(60.0, self.backoff * 2 ** (recent - 1))


def lock_file(cluster: str) -> Path:
    return state_dir() / "supervise" / f"{cluster}.lock"


def log_file(cluster: str) -> Path:
    return state_dir() / "supervise" / f"{cluster}.log"


def running(cluster: str) -> dict | None:
    """The live supervisor's {pid, mode, since, ...}, or None (a dead one holds no flock)."""
    return flock.probe(lock_file(cluster))


def hold(cluster: str, mode: str) -> int:
    """Called by the supervisor itself: take the liveness flock for its whole life (retried for a
    moment: `spawn()` probes it every 50 ms while this starts)."""
    path = lock_file(cluster)
    private_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    if not flock.take(fd):
        os.close(fd)
        from sparkctl.errors import LockHeldError

        raise LockHeldError(f"cluster '{cluster}' already has a supervisor", fix="`sparkctl down` stops it")
    flock.write_record(fd, {"pid": os.getpid(), "mode": mode, "since": time.time()})
    return fd


def spawn(profile_path: Path, cluster: str, mode: str, policy: Policy, argument: str | None = None) -> dict:
    """Start `sparkctl supervise MODE` detached (`argument` in MODE's place: a fleet's
    SERVICE:MODE, or "" for the fleet's on-demand loop); return its record once it holds its flock."""
    log = log_file(cluster)
    private_dir(log.parent)
    argv = [
        sys.executable,
        "-m",
        "sparkctl",
        "supervise",
        *([mode if argument is None else argument] if (mode if argument is None else argument) else []),
        "-p",
        str(profile_path),
        "--max-restarts",
        str(policy.max_restarts),
        "--canary-every",
        str(policy.canary_every),
        "--canary-failures",
        str(policy.canary_failures),
        "--backoff",
        str(policy.backoff),
        *([] if policy.guard is None else ["--guard" if policy.guard else "--no-guard"]),
    ]
    with os.fdopen(os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as out:
        proc = subprocess.Popen(  # noqa: S603 - our own CLI, argv list
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = running(cluster)
        if info and info.get("pid") == proc.pid:
            return info
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    from sparkctl.errors import SparkctlError

    tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
    raise SparkctlError(
        f"the supervisor did not start: {' | '.join(tail) or 'no output'}",
        fix=f"see {log}; `sparkctl supervise {mode}` runs it in the foreground",
    )


def stop(cluster: str, timeout: float = 15.0) -> str | None:
    """SIGTERM the running supervisor and wait until it is gone (SIGKILL after `timeout`)."""
    info = running(cluster)
    if info is None:
        return None
    pid = flock.kernel_holder(lock_file(cluster)) or int(info.get("pid") or 0)  # the kernel's first
    if pid <= 0:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while running(cluster) is not None:
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
        time.sleep(0.05)
    return f"stopped the supervisor (pid {pid}, mode {info.get('mode')})"


class StopFlag:
    """Set by SIGTERM/SIGINT; the loop's sleeps wake on it."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.wake = threading.Event()  # a stop, or news (a rank's container died): look now
        self.interrupt = False  # during a restart: stop it at once (it rolls back what it started)

    def install(self) -> StopFlag:
        def on_signal(signum: int, frame: object) -> None:
            self.event.set()
            self.wake.set()
            if self.interrupt:
                raise KeyboardInterrupt

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_signal)
        return self

    def wait(self, seconds: float) -> bool:
        return self.event.wait(max(0.0, seconds))

    def nap(self, seconds: float) -> bool:
        """Until `seconds` pass, news comes (`wake`) or a stop; True when stopped."""
        self.wake.wait(max(0.0, seconds))
        self.wake.clear()
        return self.set

    @property
    def set(self) -> bool:
        return self.event.is_set()
