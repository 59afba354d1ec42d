"""The node's `state` reads its Docker engine through the API socket: a fake engine on a real unix
socket (HTTP/1.0, as the node program speaks it) answers, and counts queries in flight."""

from __future__ import annotations

import json
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from sparkctl.node import docker_api

IMAGES = {f"sha256:{i:064x}": [f"sha256:{i + 1000:064x}", f"sha256:{i + 2000:064x}"] for i in range(24)}
REF_ID = next(iter(IMAGES))


class FakeEngine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    # dockerd listens with Go's backlog (the kernel's somaxconn); socketserver's default of 5 made
    # a burst of 8 parallel connects fail with EAGAIN now and then (a unix socket with a timeout)
    request_queue_size = 128

    def __init__(self, path: str, broken: str | None = None) -> None:
        self.in_flight = self.most = 0
        self.paths: list[str] = []
        self.lock = threading.Lock()
        self.broken = broken
        super().__init__(path, Handler)


class Handler(BaseHTTPRequestHandler):
    server: FakeEngine

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        with self.server.lock:
            self.server.in_flight += 1
            self.server.most = max(self.server.most, self.server.in_flight)
            self.server.paths.append(self.path)
        try:
            time.sleep(0.01)  # long enough for queries sent together to overlap here
            if self.server.broken and self.path.startswith(self.server.broken):
                self._send(500, b"not json")
            else:
                self._send(200, json.dumps(self._answer()).encode())
        finally:
            with self.server.lock:
                self.server.in_flight -= 1

    def _answer(self) -> object:
        if self.path == "/info":
            return {"DockerRootDir": "/"}
        if self.path.startswith("/images/json"):
            return [{"Id": i} for i in IMAGES]
        if self.path.endswith("/history"):
            return [{"Size": 5}, {"Size": 7}]
        image_id = self.path.split("/")[2]
        if image_id == "bench:1":
            image_id = REF_ID
        return {"Id": image_id, "Size": 12, "RootFS": {"Layers": IMAGES[image_id]}}

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):
    server = FakeEngine(str(tmp_path / "docker.sock"), getattr(request, "param", None))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'docker.sock'}")
    monkeypatch.setenv("PATH", str(tmp_path))  # no docker CLI: a fallback would show as an error
    yield server
    server.shutdown()
    server.server_close()


def test_state_reads_every_image_with_queries_in_parallel(engine: FakeEngine) -> None:
    got = docker_api.image_state("bench:1")
    assert got["id"] == REF_ID and got["layers"] == IMAGES[REF_ID] and got["size"] == 12
    assert got["history"] == [7, 5]
    assert len(got["chains"]) == len(IMAGES) and got["free"] > 0
    assert "error" not in got
    assert engine.most > 1  # /info and the inspects overlapped


def test_the_wanted_image_is_one_query_and_another_is_read_in_full(engine: FakeEngine) -> None:
    """A re-ship of nothing new: the node's ref is the image the source has, so nothing of the other
    images, the history or the free space is read; any other ID gets the full state."""
    got = docker_api.image_state("bench:1", REF_ID)
    assert got == {"id": REF_ID, "layers": IMAGES[REF_ID], "size": 12, "same": True}
    assert engine.paths == ["/images/bench:1/json"]
    full = docker_api.image_state("bench:1", "sha256:" + "f" * 64)
    assert "same" not in full and "/info" in engine.paths and len(engine.paths) > len(IMAGES)


@pytest.mark.parametrize("engine", ["/info", "/images/sha256:"], indirect=True)
def test_a_query_the_engine_fails_falls_back_to_the_cli(engine: FakeEngine) -> None:
    got = docker_api.image_state("bench:1")
    assert "error" in got  # the CLI path ran (and found no docker here), not a half-read state
    assert "id" not in got
