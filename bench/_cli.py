"""The sparkctl CLI as the lifecycle benches run it: a subprocess with its own state directory,
timed from the outside (what a user waits for)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cli(
    state: str, profile: Path, *args: str, check: bool = False, env: dict[str, str] | None = None
) -> tuple[float, subprocess.CompletedProcess]:
    """(seconds, process) of `sparkctl ARGS -p PROFILE`; `check`: exit naming the command on failure."""
    full_env = {**os.environ, "XDG_STATE_HOME": state, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "sparkctl", *args, "-p", str(profile)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=600,
    )
    if check:
        must(proc, " ".join(args))
    return time.monotonic() - t0, proc


def must(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
