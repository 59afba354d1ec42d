"""A shipped profile whose nodes sit at 127.0.0.x on a closed port (refused at once, nothing leaves
loopback), and a runner of the real CLI against it: shared by the command tests that need nodes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
API_KEY = "commands-test-canary-key-7f3a"


def unreachable_copy(tmp: Path, name: str = "dual-spark.yaml") -> Path:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = yaml.safe_load((ROOT / "profiles" / name).read_text())
    for i, node in enumerate(data["nodes"]):
        node["address"], node["port"] = f"127.0.0.{11 + i}", port
    data["ssh"] = {**data.get("ssh", {}), "connect_timeout": 2, "known_hosts": str(tmp / "known_hosts")}
    copy = tmp / name
    copy.write_text(yaml.safe_dump(data, sort_keys=False))
    return copy


def sparkctl(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKCTL_DEBUG", "SPARKCTL_PROFILE")}
    env.update(
        PYTHONPATH=str(ROOT / "src"),
        COLUMNS="200",
        HOME=str(tmp),
        XDG_STATE_HOME=str(tmp / "state"),
        SPARKCTL_API_KEY=API_KEY,
        HF_TOKEN="commands-test-hf-token",
    )
    res = subprocess.run(
        [sys.executable, "-m", "sparkctl", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
        timeout=120,
    )
    assert "Traceback" not in res.stdout + res.stderr, res.stderr
    return res
