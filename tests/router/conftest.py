"""The real sglang-router (PyPI) on loopback in front of stdlib stand-in workers that answer
the routes its health checks and requests use, each with its own name so tests see the spread."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandinWorker:
    """An OpenAI-ish worker whose chat answer is its own name."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.port = free_port()
        self.requests = 0
        worker = self

        class Handler(BaseHTTPRequestHandler):
            def _json(self, obj: dict) -> None:
                body = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.startswith("/v1/models"):
                    self._json({"object": "list", "data": [{"id": "m", "object": "model"}]})
                else:  # /health, /server_info, /model_info
                    self._json({"model_path": "m", "is_generation": True})

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                worker.requests += 1
                message = {"role": "assistant", "content": worker.name}
                self._json(
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                )

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One router per module (it imports slowly); tests add and remove their own workers."""
    port = free_port()
    argv = [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port)]
    argv += [
        "--policy",
        "round_robin",
        "--health-check-interval-secs",
        "1",
        "--health-failure-threshold",
        "1",
    ]
    argv += ["--shutdown-grace-period-secs", "0", "--worker-startup-check-interval", "1"]
    # The router's Prometheus exporter defaults to 0.0.0.0:29000: another router on this host
    # (another test session) would make it panic at start.
    argv += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
    log_path = tmp_path_factory.mktemp("router") / "router.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        from sparkctl.clients.router import RouterClient, RouterError

        client = RouterClient(base, timeout=1)
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log_path.read_text()[-2000:]
            try:
                client.workers()
                break
            except RouterError:
                assert time.monotonic() < deadline, "router did not come up"
                time.sleep(0.2)
        yield base
        proc.kill()
        proc.wait(10)


@pytest.fixture
def workers(router: str) -> Iterator[list[StandinWorker]]:
    """Two fresh workers registered with the router and healthy; removed afterwards."""
    from sparkctl.clients.router import RouterClient

    client = RouterClient(router)
    ws = [StandinWorker("w1"), StandinWorker("w2")]
    for w in ws:
        client.add(w.url)
    urls = {w.url for w in ws}
    client.wait_for(
        "both workers healthy", lambda seen: urls <= {x.url for x in seen if x.healthy}, timeout=30
    )
    yield ws
    for w in client.workers():
        client.remove(w.url)
    client.wait_for("no workers", lambda seen: not seen, timeout=30)
    for w in ws:
        w.close()
