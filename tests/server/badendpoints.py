"""Real misbehaving endpoints on 127.0.0.1 for the `verify`/`bench` error-path tests: a port that
accepts and never answers, servers answering 500/404 or a non-JSON 200, and one that lists its
model but never finishes generating. Each records the requests it got (headers included)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "served/model"
MODELS = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "test"}]}


@contextmanager
def silent() -> Iterator[str]:
    """Accepts connections (the kernel's backlog) and never reads or answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # released on close: nothing listens


@contextmanager
def serving(behaviour: str) -> Iterator[tuple[str, list[dict]]]:
    """behaviour: "500", "404", "html" (200, not JSON), "stall" (models fine, POST never answers),
    "stall-stream" (models fine, a stream that starts then goes silent), "ok" (a minimal server),
    "ok-then-stall" (non-streaming requests answered, streaming ones never)."""
    seen: list[dict] = []
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _common(self) -> bool:
            seen.append({"path": self.path, "headers": dict(self.headers)})
            if behaviour in ("500", "404"):
                self._send(
                    int(behaviour),
                    json.dumps({"detail": "boom" if behaviour == "500" else "Not Found"}).encode(),
                )
            elif behaviour == "html":
                self._send(200, b"<html><body>router login</body></html>", "text/html")
            elif self.path.endswith("/models"):
                self._send(200, json.dumps(MODELS).encode())
            else:
                return False
            return True

        def do_GET(self) -> None:  # noqa: N802
            self._common()

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self._common():
                return
            if behaviour == "ok-then-stall" and body.get("stream"):
                release.wait(600)  # until the test ends
                return
            if behaviour == "stall-stream":
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                delta = {"index": 0, "delta": {"content": "Hi"}}
                chunk = {
                    "id": "1",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": MODEL,
                    "choices": [delta],
                }
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            if behaviour.startswith("stall"):
                release.wait(600)  # until the test ends
                return
            self._send(200, json.dumps(_completion()).encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def _completion() -> dict:
    return {
        "id": "1",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
