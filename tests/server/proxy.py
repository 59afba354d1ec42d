"""A fault-injecting HTTP proxy for the verify tests: a real server on 127.0.0.1 between the openai
SDK and a real upstream (`transformers serve`). It breaks, strips or (to prove a check can pass
at all) supplies exactly one API feature per named mutation.

The mutations are chosen per request by the path: `http://127.0.0.1:PORT/m/NAME+NAME/v1/...` applies
NAME, then NAME, to that request; `/v1/...` passes through. Request hooks run in order before the
upstream call, response hooks in order after it, so `effort_ignored+fake_reasoning` fakes reasoning
from the effort the upstream really received. Streams (SSE) are parsed event by event and, when
a mutation is active, buffered so a hook sees the whole stream.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from tests.server.mutations import MUTATIONS, Mutation

DRIP_S = 0.25  # between two events of a `drip` stream: slow, healthy
CUT_AFTER = 3  # text events a `cut` stream delivers before it breaks off


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict | None


@dataclass
class Proxy:
    url: str  # http://127.0.0.1:PORT, no mutation
    upstream: str
    seen: list[Seen] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    def base(self, *mutations: str) -> str:
        """The URL a client uses to get `mutations` applied."""
        unknown = [m for m in mutations if m not in MUTATIONS]
        assert not unknown, f"unknown mutation(s) {unknown}"
        return f"{self.url}/m/{'+'.join(mutations)}" if mutations else self.url

    def close(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()


def _split(path: str) -> tuple[list[Mutation], str]:
    if path.startswith("/m/"):
        names, _, rest = path[3:].partition("/")
        return [MUTATIONS[n] for n in names.split("+") if n], "/" + rest
    return [], path


def _events(raw: bytes) -> list[Any]:
    """SSE body -> list of dicts (JSON data events) or raw strings (anything else, [DONE])."""
    out: list[Any] = []
    for block in raw.decode().split("\n\n"):
        data = "\n".join(line[5:].strip() for line in block.splitlines() if line.startswith("data:"))
        if not data:
            continue
        try:
            out.append(json.loads(data))
        except ValueError:
            out.append(data)
    return out


def _sse(events: list[Any]) -> bytes:
    return b"".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events)


def make_handler(proxy: Proxy) -> type[BaseHTTPRequestHandler]:
    up = urlsplit(proxy.upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # the body ends when the connection closes: streams need no framing

        def log_message(self, *args: Any) -> None:  # quiet test output
            pass

        def _reply(self, status: int, body: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._forward(None)

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            self._forward(json.loads(self.rfile.read(length) or b"null"))

        def _forward(self, body: dict | None) -> None:
            mutations, path = _split(self.path)
            proxy.seen.append(Seen(path, dict(self.headers), body))
            for m in mutations:
                if m.request and body is not None:
                    out = m.request(path, body)
                    if isinstance(out, tuple):  # the mutation answers itself: (status, json)
                        self._reply(out[0], json.dumps(out[1]).encode(), "application/json")
                        return
                    body = out
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=120)
            headers = {
                k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")
            }
            payload = None if body is None else json.dumps(body).encode()
            conn.request(self.command, path, body=payload, headers=headers)
            resp = conn.getresponse()
            ctype = resp.getheader("Content-Type", "")
            if "text/event-stream" in ctype:
                self._stream(resp, body, path, mutations)
            else:
                self._whole(resp, body, path, mutations, ctype)
            conn.close()

        def _whole(self, resp: Any, req: Any, path: str, mutations: list[Mutation], ctype: str) -> None:
            raw = resp.read()
            if resp.status == 200 and "json" in ctype:
                data = json.loads(raw)
                for m in mutations:
                    data = m.response(path, req, data) if m.response else data
                raw = json.dumps(data).encode()
            self._reply(resp.status, raw, ctype)

        def _stream(self, resp: Any, req: Any, path: str, mutations: list[Mutation]) -> None:
            timing = next((m.timing for m in mutations if m.timing), None)
            if timing == "cut":  # chunked framing: the client can tell a cut from an end
                self.protocol_version = "HTTP/1.1"
                self.close_connection = True
            self.send_response(resp.status)
            self.send_header("Content-Type", "text/event-stream")
            if timing == "cut":
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if timing:
                # a client that gave up (a timeout under test) leaves nothing to deliver to
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    _deliver(self.wfile, resp, timing)
                return
            hooks: list[Callable] = [m.events for m in mutations if m.events]
            if not hooks:  # pass through as it arrives: timing stays the server's
                while chunk := resp.read1(65536):
                    self.wfile.write(chunk)
                    self.wfile.flush()
                return
            events = _events(resp.read())
            for hook in hooks:
                events = hook(path, req, events)
            self.wfile.write(_sse(events))

    return Handler


def _blocks(resp: Any) -> Any:
    """The upstream's SSE events (raw, with their blank line) as they arrive."""
    buf = b""
    while chunk := resp.read1(65536):
        buf += chunk
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            yield block + b"\n\n"
    if buf.strip():
        yield buf


def _has_text(block: bytes) -> bool:
    events = _events(block)
    return (
        bool(events)
        and isinstance(events[0], dict)
        and any(
            (ch.get("delta") or {}).get("content") or ch.get("text") for ch in events[0].get("choices") or []
        )
    )


def _deliver(out: Any, resp: Any, timing: str) -> None:
    if timing == "buffered":  # nothing until the upstream is done, then everything at once
        out.write(resp.read())
        out.flush()
        return
    texts = 0
    for block in _blocks(resp):
        if timing == "drip":
            time.sleep(DRIP_S)
        copies = 2 if timing == "duplicated" and _has_text(block) else 1
        for _ in range(copies):
            out.write(f"{len(block):x}\r\n".encode() + block + b"\r\n" if timing == "cut" else block)
        out.flush()
        texts += _has_text(block)
        if timing == "cut" and texts >= CUT_AFTER:
            return  # no terminating chunk: the connection closes mid-stream


def start(upstream: str) -> Proxy:
    proxy = Proxy(url="", upstream=upstream)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(proxy))
    server.daemon_threads = True
    proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
    proxy._server = server
    threading.Thread(target=server.serve_forever, daemon=True, name="verify-proxy").start()
    return proxy
