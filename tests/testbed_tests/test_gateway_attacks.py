"""The HTTP attack corpus against the real gateway (issue 38): HAProxy 2.6 from Debian, run with the
exact config planning/gateway.py renders, in front of a stand-in engine that answers every path
with canary keys and records what reached it.

Every attack must fail: no private target answered 2xx, no canary (the engine's admin key, the
client's own key; raw or base64) in any answer, and the engine received only allowlisted targets.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

import pytest

from sparkctl.planning import gateway as gw
from tests.testbed import gateway_attacks as attacks
from tests.testbed.canary_engine import CANARY, CanaryEngine

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [
    pytest.mark.testbed,
    pytest.mark.skipif(shutil.which("haproxy") is None, reason="needs haproxy"),
]
KEY = "sk-gateway-canary-client-31337"
ALLOWED = {(m, t) for m, t in gw.OPENAI_ROUTES} | {("GET", "/health")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, path: str, key: str | None) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {key}"} if key else {}
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except urllib.error.URLError:
        return 0  # not listening yet


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, CanaryEngine]]:
    tmp = tmp_path_factory.mktemp("gw")
    with CanaryEngine() as engine:
        port = _free_port()
        spec = gw.GatewaySpec(
            node="n",
            listen="127.0.0.1",
            port=port,
            upstream_host="127.0.0.1",
            upstream_port=engine.port,
            keyed=True,
        )
        keys = tmp / "keys"
        keys.write_text(gw.key_file_text([KEY]))
        keys.chmod(0o400)
        cfg = tmp / "haproxy.cfg"
        cfg.write_text(gw.haproxy_config(spec).replace(gw.KEYS_PATH, str(keys)))
        proc = subprocess.Popen(
            ["haproxy", "-db", "-f", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            for _ in range(100):  # the engine check (inter 2s) must pass before /health says 200
                if proc.poll() is None and _get(port, "/health", None) == 200:
                    break
                time.sleep(0.1)
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            yield port, engine
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_keyed_chat_works_and_keyless_is_refused(gateway: tuple[int, CanaryEngine]) -> None:
    port, engine = gateway
    assert _get(port, "/health", None) == 200
    assert _get(port, "/v1/models", None) == 401
    assert _get(port, "/v1/models", "wrong") == 401
    assert _get(port, "/v1/models", KEY) == 200
    ans = attacks.send(
        port, attacks._head("POST", "/v1/chat/completions", KEY, body=b'{"model":"fake","messages":[]}')
    )
    assert attacks.statuses(ans) == [200] and b"chat.completion" in ans
    assert ("POST", "/v1/chat/completions", f"Bearer {KEY}") in engine.seen  # the engine keeps its own check


def _run(port: int, engine: CanaryEngine, corpus: list[tuple[str, bytes]]) -> list[str]:
    failures = []
    secrets = attacks.canaries([KEY, CANARY])
    for name, data in corpus:
        before = len(engine.seen)
        answer = attacks.send(port, data)
        time.sleep(0.01)  # let the engine's thread record what reached it
        leaked = [s for s in secrets if s in answer]
        reached = [(m, t) for m, t, _ in engine.seen[before:] if (m, t) not in ALLOWED]
        if leaked or reached:
            failures.append(f"{name}: leaked={leaked} reached={reached}")
    return failures


def test_private_routes_in_every_spelling_never_reach_the_engine(gateway: tuple[int, CanaryEngine]) -> None:
    port, engine = gateway
    corpus = attacks.path_attacks(KEY)
    assert len(attacks.spellings("/server_info")) >= 50
    assert _run(port, engine, corpus) == []


def test_framing_and_smuggling_attacks_fail(gateway: tuple[int, CanaryEngine]) -> None:
    port, engine = gateway
    corpus = attacks.framing_attacks(KEY)
    assert _run(port, engine, corpus) == []
    # the refusals are the gateway's, before any byte reaches the engine
    for name, data in corpus:
        if name.startswith(("connection names", "CL then TE", "TE then CL", "duplicate CL differing")):
            assert attacks.statuses(attacks.send(port, data))[:1] == [400], name


def test_wrong_methods_are_refused(gateway: tuple[int, CanaryEngine]) -> None:
    port, engine = gateway
    corpus = attacks.method_attacks(KEY)
    assert _run(port, engine, corpus) == []
    for name, data in corpus:
        codes = attacks.statuses(attacks.send(port, data))
        assert codes and all(c >= 400 for c in codes), (name, codes)


def test_a_body_over_the_bound_is_refused_before_the_engine(gateway: tuple[int, CanaryEngine]) -> None:
    port, engine = gateway
    big = gw.Bounds().max_body_bytes + 1
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {KEY}\r\nContent-Length: {big}\r\n\r\n"
    before = len(engine.seen)
    # the body never comes: the answer must not wait for it
    assert attacks.statuses(attacks.send(port, head.encode(), timeout=2, half_close=False))[:1] == [413]
    assert engine.seen[before:] == []


def test_a_request_head_over_the_buffer_is_refused(gateway: tuple[int, CanaryEngine]) -> None:
    """Refused before the engine: a 400/431, or the gateway resets the socket while the head still
    arrives (the answer can then be lost in the reset)."""
    port, engine = gateway
    before = len(engine.seen)
    filler = "X-Fill: " + "a" * gw.Bounds().max_header_bytes + "\r\n"
    head = f"GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {KEY}\r\n{filler}\r\n"
    assert attacks.statuses(attacks.send(port, head.encode()))[:1] in ([], [400], [431])
    assert engine.seen[before:] == []
