"""The cluster's HTTP opener and verify's probe: no proxy from the environment, and the bearer key
never follows a redirect to another origin (two real HTTP servers on loopback)."""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from sparkctl.clients.api import probe
from sparkctl.cluster_http import OPENER, Failure, fetch
from tests.http_stub import QuietHandler


class _Recorder(QuietHandler):
    seen: list[tuple[str, str | None]]
    redirect_to: str | None = None

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append((self.path, self.headers.get("Authorization")))
        if self.redirect_to and self.path.endswith("/models") and "moved" not in self.path:
            self.answer(302, headers={"Location": self.redirect_to})
            return
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.answer(200, body, {"Content-Type": "application/json"})


@pytest.fixture
def servers() -> Iterator[tuple[ThreadingHTTPServer, ThreadingHTTPServer]]:
    made = []
    for _ in range(2):
        handler = type("H", (_Recorder,), {"seen": []})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        made.append(srv)
    yield made[0], made[1]
    for srv in made:
        srv.shutdown()
        srv.server_close()


def _url(srv: ThreadingHTTPServer, path: str = "") -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}{path}"


def test_a_redirect_to_another_origin_drops_the_key(servers, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = servers
    a.RequestHandlerClass.redirect_to = _url(b, "/v1/moved/models")
    info = probe(_url(a), "m", "sk-secret", 5)
    assert info.models == ["m"]
    assert a.RequestHandlerClass.seen == [("/v1/models", "Bearer sk-secret")]
    assert b.RequestHandlerClass.seen == [("/v1/moved/models", None)]


def test_a_redirect_within_the_origin_keeps_the_key(servers) -> None:
    a, _b = servers
    a.RequestHandlerClass.redirect_to = _url(a, "/v1/moved/models")
    import urllib.request

    with OPENER.open(urllib.request.Request(_url(a, "/v1/models"), headers={"Authorization": "Bearer k"})):
        pass
    assert a.RequestHandlerClass.seen == [("/v1/models", "Bearer k"), ("/v1/moved/models", "Bearer k")]


def test_no_proxy_from_the_environment(servers, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY points at server b: the probe still goes straight to a, and b sees nothing."""
    a, b = servers
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, _url(b))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    import urllib.request

    monkeypatch.setattr(urllib.request, "_opener", None)  # urlopen's cached opener would hide a regression
    probe(_url(a), "m", "sk-secret", 5)
    assert a.RequestHandlerClass.seen and not b.RequestHandlerClass.seen


class _Status(QuietHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.answer(401, b'{"error": "no key"}')


class _Boom(Exception):
    pass


def _failure_of(url: str, timeout: float = 5) -> Failure:
    seen: list[Failure] = []

    def fail(f: Failure) -> _Boom:
        seen.append(f)
        return _Boom()

    with pytest.raises(_Boom):
        fetch(urllib.request.Request(url), timeout, fail)
    return seen[0]


def test_fetch_tells_a_status_from_no_answer_and_from_a_timeout() -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Status)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        got = _failure_of(_url(srv, "/v1/models"))
    finally:
        srv.shutdown()
        srv.server_close()
    assert (got.code, got.timed_out) == (401, False) and "no key" in got.detail
    refused = _failure_of(_url(srv, "/v1/models"))  # closed: nothing listens there now
    assert refused.code is None and not refused.timed_out and refused.detail
    with socket.socket() as silent:  # accepts (backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        slow = _failure_of(f"http://127.0.0.1:{silent.getsockname()[1]}/", timeout=0.2)
    assert slow.code is None and slow.timed_out


def test_fetch_returns_body_and_content_type(servers) -> None:
    a, _ = servers
    body, ctype = fetch(urllib.request.Request(_url(a, "/v1/models")), 5, lambda f: _Boom())
    assert json.loads(body) == {"data": [{"id": "m"}]} and ctype == "application/json"


def test_fetch_maps_a_reply_that_is_not_http_to_no_answer() -> None:
    """A listener that answers with something else than HTTP (http.client's BadStatusLine, not an
    OSError) is 'no answer' with its reason, like a refused connect: no exception escapes."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()

        def garbage() -> None:
            conn, _ = srv.accept()
            conn.recv(1024)
            conn.sendall(b"HELLO THERE\r\n\r\n")
            conn.close()

        threading.Thread(target=garbage, daemon=True).start()
        url = f"http://127.0.0.1:{srv.getsockname()[1]}/v1/models"
        seen: list[Failure] = []

        def fail(f: Failure) -> Exception:
            seen.append(f)
            return RuntimeError("mapped")

        with pytest.raises(RuntimeError, match="mapped"):
            fetch(urllib.request.Request(url), 5, fail)
    assert seen[0].code is None and "BadStatusLine" in seen[0].detail
