"""Per-key counts from a real HAProxy running the config sparkctl renders for named keys (the
host's Debian haproxy, as in CI), in front of a loopback upstream that records what it was sent."""

from __future__ import annotations

import http.server
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sparkctl.clients.gateway import KeyCount, key_counts, parse_key_counts
from sparkctl.errors import SparkctlError
from sparkctl.planning import gateway as gw
from sparkctl.secrets import SecretFile, SecretRef, render_files
from tests.http_stub import QuietHandler

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy (Debian) not installed")
RUN_DIR = "/run/sparkctl-gateway"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Upstream(QuietHandler):
    seen: list[list[str]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).seen.append(self.headers.get_all("Authorization") or [])
        self.answer(200, b'{"data": []}')


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OP_KEY", "sk-operator-1")
    monkeypatch.setenv("ALICE_KEY", "sk-alice-2")
    op, alice = SecretRef(name="api-key", env="OP_KEY"), SecretRef(name="api-key-alice", env="ALICE_KEY")
    up_port, port = _free_port(), _free_port()
    spec = gw.GatewaySpec(
        "n", "127.0.0.1", port, "127.0.0.1", up_port, keyed=True, key=op,
        named=(gw.NamedKey("alice", alice, per_minute=2),),
    )  # fmt: skip
    from sparkctl.planning.gateway_container import key_files

    files: list[SecretFile] = key_files(spec)
    for target, content in render_files(files, None).items():
        (tmp_path / Path(target).name).write_bytes(content)
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(gw.haproxy_config(spec).replace(RUN_DIR, str(tmp_path)))
    _Upstream.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", up_port), _Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proc = subprocess.Popen(
        ["haproxy", "-db", "-f", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):  # until it listens
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    yield base
    proc.kill()
    proc.wait()
    server.shutdown()


def _get(base: str, key: str | None, path: str = "/v1/models") -> int:
    req = urllib.request.Request(base + path)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_each_key_is_counted_under_its_name_and_limited(gateway: str) -> None:
    assert [_get(gateway, "sk-alice-2") for _ in range(3)] == [200, 200, 429]  # per_minute: 2
    assert _get(gateway, "sk-operator-1") == 200 and _get(gateway, "sk-wrong") == 401
    # the engine only ever sees its own key, whoever asked
    assert _Upstream.seen == [["Bearer sk-operator-1"]] * 3
    # HAProxy adds a request to its backend's count as the stream ends, which may be just after
    # the client has its answer: ask until the last request is in (or the rounds run out)
    for _ in range(50):
        counts = {c.name: c for c in key_counts(gateway, "sk-operator-1")}
        if counts["sparkctl"].requests == 1:
            break
        time.sleep(0.1)
    assert counts["alice"] == KeyCount(
        "alice", requests=3, ok=2, client_errors=1, limited=1, bytes_out=counts["alice"].bytes_out
    )
    assert counts["alice"].bytes_out > 0
    assert (counts["sparkctl"].requests, counts["sparkctl"].ok) == (1, 1)


def test_the_counts_are_the_operators_alone(gateway: str) -> None:
    assert _get(gateway, "sk-alice-2", "/sparkctl/gateway-metrics") == 403
    assert _get(gateway, None, "/sparkctl/gateway-metrics") == 401
    with pytest.raises(SparkctlError, match="HTTP 403"):
        key_counts(gateway, "sk-alice-2")


def test_the_parser_reads_only_the_key_backends() -> None:
    text = (
        "# TYPE haproxy_backend_http_requests_total counter\n"
        'haproxy_backend_http_requests_total{proxy="engine"} 9\n'
        'haproxy_backend_http_requests_total{proxy="key_ci"} 4\n'
    )
    assert parse_key_counts(text) == [KeyCount("ci", requests=4)]
