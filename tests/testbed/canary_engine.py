"""A stand-in engine for the gateway's attack corpus: answers every path, puts canary keys (raw and
base64) in every private answer, and records every request it receives (the witness of what got
past the gateway). Stdlib only; run in a thread on loopback."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CANARY = "CANARY-ADMIN-KEY-4c1d"  # what the engine's /server_info would leak (its keys)
MODELS = {"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "test"}]}
CHAT = {
    "id": "c1",
    "object": "chat.completion",
    "model": "fake",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
}


class CanaryEngine:
    def __init__(self, port: int = 0, log: str | None = None) -> None:
        self.seen: list[tuple[str, str, str | None]] = []  # (method, target, authorization)
        self.log = log  # also one JSON line per request there (an engine in another process)
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                engine.record(self.command, self.path, self.headers.get("Authorization"))
                body = self._body(self.path.split("?")[0])
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _body(self, path: str) -> bytes:
                if path == "/health":
                    return b""
                if path == "/v1/models":
                    return json.dumps(MODELS).encode()
                if path == "/v1/chat/completions":
                    return json.dumps(CHAT).encode()
                b64 = base64.b64encode(CANARY.encode()).decode()
                return json.dumps({"path": path, "admin_api_key": CANARY, "b64": b64}).encode()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _answer

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client the gateway cut off mid-request: not the test's business

        self.server = Server(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def record(self, method: str, target: str, auth: str | None) -> None:
        self.seen.append((method, target, auth))
        if self.log:
            with open(self.log, "a") as fh:
                fh.write(json.dumps([method, target, auth]) + "\n")

    def __enter__(self) -> CanaryEngine:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def read_log(path: str) -> list[tuple[str, str, str | None]]:
    try:
        with open(path) as fh:
            return [tuple(json.loads(line)) for line in fh if line.strip()]  # type: ignore[misc]
    except FileNotFoundError:
        return []


if __name__ == "__main__":  # python -m tests.testbed.canary_engine PORT LOG (inside a lab node)
    import sys

    with CanaryEngine(int(sys.argv[1]), sys.argv[2]) as eng:
        eng._thread.join()
