"""clients/router.py: the router's worker listing and its errors (one line each, with a fix)
against a small HTTP server on loopback."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sparkctl.clients.router import RouterClient, RouterError, Worker


class _Router(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps({"workers": [{"id": "w1", "url": "http://a:1/", "is_healthy": True, "load": 2}]})
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


def _serve(status: int) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Router,), {"status": status}))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_workers_are_read_from_the_listing() -> None:
    srv = _serve(200)
    try:
        assert RouterClient(f"http://127.0.0.1:{srv.server_address[1]}").workers() == [
            Worker("w1", "http://a:1", True, 2)
        ]
    finally:
        srv.shutdown()
        srv.server_close()


def test_an_http_status_and_no_answer_are_each_one_error_with_its_fix() -> None:
    srv = _serve(401)
    try:
        with pytest.raises(RouterError, match=r"router GET /workers: HTTP 401") as refused:
            RouterClient(f"http://127.0.0.1:{srv.server_address[1]}").workers()
    finally:
        srv.shutdown()
        srv.server_close()
    assert "API key" in (refused.value.fix or "")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    with pytest.raises(RouterError, match="not reachable") as gone:
        RouterClient(f"http://127.0.0.1:{port}").workers()
    assert "sparkctl status" in (gone.value.fix or "")
