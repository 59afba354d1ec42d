"""A real third-party OpenAI-compatible server for `verify`/`bench` tests: `transformers serve` on
CPU with a tiny Qwen3 model built here (tests/server/tinymodel.py), on 127.0.0.1.

Outside CI the tests skip when transformers/torch are missing; with env CI set that is a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

READY_TIMEOUT_S = 180  # cold torch import + model load; about 10 s on the project machine


@dataclass(frozen=True)
class Server:
    url: str
    model: str
    hf_home: Path
    log: Path


def _require(module: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        reason = f"{module} not installed (pip install 'transformers[serving]==5.18.*' torch==2.13.0 openai)"
        if os.environ.get("CI"):
            pytest.fail(reason + " (CI must run the server tests)", pytrace=False)
        pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"transformers serve exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"transformers serve not ready after {READY_TIMEOUT_S}s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    for module in ("torch", "transformers", "fastapi", "uvicorn", "openai", "tokenizers"):
        _require(module)
    from tests.server import tinymodel

    root = tmp_path_factory.mktemp("hf")
    model = tinymodel.build(root)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = root / "serve.log"
    exe = shutil.which("transformers") or sys.executable
    argv = [exe] if exe.endswith("transformers") else [exe, "-m", "transformers.cli.transformers"]
    env = {
        **os.environ,
        "HF_HOME": str(root),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
        "OMP_NUM_THREADS": "1",
    }  # one thread: steadier timings on a shared 2-core machine
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*argv, "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "info"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        _wait_ready(url, proc, log)
        yield Server(url=url, model=model, hf_home=root, log=log)
    finally:
        # Stop exactly the process we started, by pid.
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture(scope="session")
def proxy(server: Server) -> Iterator:
    """One fault-injecting proxy in front of the session's server (tests/server/proxy.py)."""
    from tests.server.proxy import start

    p = start(server.url)
    try:
        yield p
    finally:
        p.close()
