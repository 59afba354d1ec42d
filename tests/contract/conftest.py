"""What the contract suites share: one XDG cache for the session, so that the local SGLang
parser's answer for a flag set (torch imported: seconds) is computed once, not once per test; and a
local Docker engine that answers but holds no image (rank 0 before `ship`)."""

from __future__ import annotations

import json
import socketserver
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("xdg-cache")


class _DockerWithoutImages(BaseHTTPRequestHandler):
    """Docker's engine API as an engine that holds no image and runs no container answers it."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        path = self.path.split("?")[0]
        if path.endswith("/_ping"):
            return self._send(200, "OK")
        if path.endswith("/version"):
            return self._send(200, {"ApiVersion": "1.43", "Version": "24.0.7", "MinAPIVersion": "1.12"})
        if path.endswith("/info"):
            info = {
                "ServerVersion": "24.0.7",
                "Runtimes": {"runc": {}, "nvidia": {}},
                "DefaultRuntime": "runc",
            }
            return self._send(200, {**info, "DockerRootDir": "/var/lib/docker"})
        if path.endswith(("/containers/json", "/images/json")):
            return self._send(200, [])
        return self._send(404, {"message": f"No such image or container: {path}"})

    do_GET = do_POST = do_DELETE = do_HEAD = _answer

    def _send(self, code: int, body: object) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hangs up early (the node program's raw reads) is no failure of ours


@pytest.fixture(scope="session")
def docker_without_images() -> Iterator[str]:
    """DOCKER_HOST of a local Docker that answers but lacks the image: rank 0 before `ship`."""
    where = Path(tempfile.mkdtemp(dir="/tmp")) / "docker.sock"  # a unix socket path: < 108 bytes
    server = _UnixServer(str(where), _DockerWithoutImages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"unix://{where}"
    server.shutdown()
    server.server_close()
