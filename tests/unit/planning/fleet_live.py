"""The fleet gateway run by the host's real haproxy on loopback, in front of stand-in service
gateways (tests/http_stub.py) that answer /health and a POST with their own name."""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path

from sparkctl.planning import fleet_gateway as fg
from sparkctl.planning.gateway import KEYS_PATH
from tests.http_stub import QuietHandler

KEY, OPERATOR_KEY = "sk-client", "sk-operator"
DEADLINE_S = 30  # a bound on a hang, never an assertion on time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class QuietServer(ThreadingHTTPServer):
    allow_reuse_address = True  # stopped and started again on its port

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # HAProxy's check closes with a reset once it has its answer


class StandIn:
    """A service's gateway: /health 200, a POST answered {"served_by": name}; start() and stop()."""

    def __init__(self, name: str) -> None:
        self.name, self.port, self.server = name, free_port(), None

    def start(self) -> None:
        name = self.name

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                self.answer(200 if self.path == "/health" else 404, b"{}")

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                auth = self.headers.get("Authorization") or ""
                self.answer(200, json.dumps({"served_by": name, "authorization": auth}).encode())

        self.server = QuietServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def until(check: Callable[[], bool]) -> None:
    end = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < end, "the state never came"
        time.sleep(0.05)


def write_files(tmp: Path, spec: fg.FleetGatewaySpec) -> Path:
    """The spec's files and the two keys' hashes under `tmp`, container paths rewritten: the config."""
    files = fg.fleet_files(spec)
    digest = [hashlib.sha256(f"Bearer {k}".encode()).hexdigest() for k in (KEY, OPERATOR_KEY)]
    files[KEYS_PATH] = "".join(f"{h}\n" for h in digest)
    files[fg.OPERATORS_PATH] = digest[1] + "\n"
    for path, text in files.items():
        for other in files:
            text = text.replace(other, str(tmp / Path(other).name))
        (tmp / Path(path).name).write_text(text)
    return tmp / "haproxy.cfg"


class Fleet:
    """haproxy -db with the spec's files under `tmp`; request() returns (status, headers, body)."""

    def __init__(self, tmp: Path, spec: fg.FleetGatewaySpec) -> None:
        self.spec = spec
        self.config = write_files(tmp, spec)
        self.proc = subprocess.Popen(
            ["haproxy", "-db", "-f", str(self.config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        until(self._listening)

    def _listening(self) -> bool:
        assert self.proc.poll() is None, self.proc.stderr.read().decode() if self.proc.stderr else ""
        try:
            return self.request("GET", "/health", key=None)[0] == 200
        except OSError:
            return False

    def request(
        self, method: str, path: str, body: dict | bytes | None = None, key: str | None = KEY
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.spec.port, timeout=DEADLINE_S)
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def raw(self, head: bytes) -> bytes:
        """`head` sent as is (framing tricks http.client will not send); the status line back."""
        with socket.create_connection(("127.0.0.1", self.spec.port), timeout=DEADLINE_S) as s:
            s.sendall(head)
            return s.recv(4096).split(b"\r\n", 1)[0]

    def state(self) -> dict:
        status, _, body = self.request("GET", "/sparkctl/fleet-state", key=OPERATOR_KEY)
        assert status == 200, body
        return json.loads(body)["services"]

    def loaded(self, service: str) -> bool:
        return self.state()[service]["loaded"]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()
