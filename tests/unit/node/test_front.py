"""The filtering front (node/front.py) against a real local HTTP server: path normalisation,
refused routes, and everything else passed unchanged (bodies, status, headers, keep-alive,
streaming per chunk); and its `front` op exits when its container stops."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkctl.node.front import listen_socket, make_server
from sparkctl.node.front_routes import is_private, normal_path
from sparkctl.node.pack import node_argv

ROUTES = ("/server_info", "/get_server_info")
REFUSED = [
    "/server_info",
    "/get_server_info",
    "/SERVER_INFO",
    "/Server_Info/",
    "/server_info/",
    "//server_info",
    "/./server_info",
    "/v1/../server_info",
    "/%73erver_info",
    "/server%5Finfo",
    "/%2573erver_info",  # double-encoded
    "/a%2F..%2Fserver_info",
    "/server_info;x=1",
    "/server_info?x=1",
    "/server_info#f",
    "/prefix/server_info",  # a root_path prefix
    "/server_info/more",
    "\\server_info",
    "http://example/server_info",  # absolute-form
]
SETTINGS = {
    "served_model_name": "qwen",
    "model_path": "/models/qwen",
    "api_key": "sk-front-canary",
    "admin_api_key": "sk-front-admin-canary",
    "tokenizer_path": {"nested": "sk-front-canary"},  # not a scalar: not let out either
    "argv": ["--api-key", "sk-front-canary"],
}
PASSED = ["/v1/models", "/health", "/server_infos", "/my_server_info", "/v1/chat/completions", "/"]


@pytest.mark.parametrize("target", REFUSED)
def test_every_spelling_of_a_private_route_is_refused(target: str) -> None:
    assert is_private(target, ROUTES), normal_path(target)


@pytest.mark.parametrize("target", PASSED)
def test_other_routes_pass(target: str) -> None:
    assert not is_private(target, ROUTES)


class Upstream:
    """A real HTTP/1.1 server standing in for the engine; records what reached it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict, bytes]] = []
        self.step = threading.Event()
        self.idle_timeout: float | None = None
        up = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                self.timeout = up.idle_timeout
                super().setup()

            def log_message(self, *args: object) -> None:
                pass

            def _body(self) -> bytes:
                if "chunked" in (self.headers.get("Transfer-Encoding") or ""):
                    out = b""
                    while size := int(self.rfile.readline().strip(), 16):
                        out += self.rfile.read(size)
                        self.rfile.readline()
                    self.rfile.readline()
                    return out
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _send(self, code: int, body: bytes, **headers: str) -> None:
                self.send_response(code)
                for k, v in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - BaseHTTPRequestHandler's name
                up.seen.append((self.command, self.path, dict(self.headers), b""))
                if self.path.startswith("/status/"):
                    return self._send(int(self.path.rsplit("/", 1)[1]), b'{"teapot":1}')
                if self.path == "/stream":
                    return self._stream()
                if self.path.endswith("server_info"):  # SGLang's: every setting, its keys included
                    return self._send(200, json.dumps(SETTINGS).encode())
                echo = {"path": self.path, "headers": dict(self.headers)}
                self._send(200, json.dumps(echo).encode(), **{"X-Engine": "yes"})

            do_HEAD = do_GET  # noqa: N815

            def do_POST(self) -> None:  # noqa: N802
                body = self._body()
                up.seen.append((self.command, self.path, dict(self.headers), body))
                self._send(201, body)

            def _stream(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(5):
                    data = f"data: {i}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                    # The next piece only once the client holds this one: a front that buffers
                    # would hang here (until the timeout fails the test).
                    assert up.step.wait(30), "the client never got the piece"
                    up.step.clear()
                self.wfile.write(b"0\r\n\r\n")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def pair():
    up = Upstream()
    front = make_server(listen_socket("127.0.0.1", 0), up.port, ROUTES)
    threading.Thread(target=front.serve_forever, daemon=True).start()
    yield up, front.server_address[1]
    front.shutdown()
    front.server_close()
    up.close()


def _conn(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=30)


def test_private_routes_are_refused_and_never_reach_the_engine(pair) -> None:
    up, port = pair
    conn = _conn(port)
    for target in ["/server_info", "/%73erver_info", "//get_server_info/", "/x/../SERVER_INFO?a=b"]:
        conn.request("GET", target, headers={"Authorization": "Bearer k"})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        assert resp.status == 403 and resp.getheader("Content-Type") == "application/json", target
        assert body["error"]["code"] == 403
    conn.request("POST", "/server_info", body=b"x" * 1000)  # its body is read: the connection stays usable
    assert conn.getresponse().read() and conn.sock is not None
    assert up.seen == []


def test_everything_else_passes_unchanged_over_one_kept_connection(pair) -> None:
    up, port = pair
    conn = _conn(port)
    conn.request("GET", "/v1/models?x=1", headers={"Authorization": "Bearer k", "X-Mine": "a"})
    resp = conn.getresponse()
    echo = json.loads(resp.read())
    first = conn.sock
    assert resp.status == 200 and resp.getheader("X-Engine") == "yes"
    assert echo["path"] == "/v1/models?x=1"
    assert echo["headers"]["Authorization"] == "Bearer k" and echo["headers"]["X-Mine"] == "a"
    assert echo["headers"]["Host"] == f"127.0.0.1:{port}"  # the client's own Host
    conn.request(
        "POST", "/v1/chat/completions", body=b'{"a": 1}', headers={"Content-Type": "application/json"}
    )
    resp = conn.getresponse()
    assert (resp.status, resp.read()) == (201, b'{"a": 1}')
    conn.request("GET", "/status/418")
    resp = conn.getresponse()
    assert (resp.status, resp.read()) == (418, b'{"teapot":1}')
    conn.request("HEAD", "/v1/models")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read() == b""
    assert conn.sock is first  # keep-alive: one client connection for all of them


def test_hop_by_hop_headers_stop_at_the_front(pair) -> None:
    up, port = pair
    conn = _conn(port)
    conn.request(
        "GET",
        "/v1/models",
        headers={
            "Connection": "keep-alive, X-Private",
            "X-Private": "1",
            "Keep-Alive": "timeout=5",
            "TE": "x",
        },
    )
    headers = json.loads(conn.getresponse().read())["headers"]
    assert not {"Connection", "X-Private", "Keep-Alive", "TE"} & set(headers)


def test_a_chunked_request_body_arrives_whole(pair) -> None:
    up, port = pair
    conn = _conn(port)
    conn.request("POST", "/v1/completions", body=iter([b"abc", b"", b"defg"]), encode_chunked=True)
    resp = conn.getresponse()
    assert (resp.status, resp.read()) == (201, b"abcdefg")
    assert up.seen[-1][2].get("Transfer-Encoding") == "chunked"


def test_a_stream_arrives_piece_by_piece(pair) -> None:
    up, port = pair
    conn = _conn(port)
    conn.request("GET", "/stream")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    pieces = []
    while True:
        piece = resp.read1(1 << 16)
        if not piece:
            break
        pieces.append(piece)
        up.step.set()  # only now does the engine write the next one
    assert b"".join(pieces) == b"".join(f"data: {i}\n\n".encode() for i in range(5))
    assert len(pieces) == 5


def test_an_engine_that_dropped_an_idle_connection_is_reconnected(pair) -> None:
    up, port = pair
    up.idle_timeout = 0.2  # the engine closes a kept connection idle this long (uvicorn: 5 s)
    conn = _conn(port)
    for _ in range(3):
        conn.request("GET", "/v1/models")
        assert conn.getresponse().read()
        time.sleep(0.5)  # let the engine drop its side
    assert len(up.seen) == 3


def test_no_engine_is_a_502_json() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # bound, not listening: refused
        front = make_server(listen_socket("127.0.0.1", 0), dead, ROUTES)
        threading.Thread(target=front.serve_forever, daemon=True).start()
        try:
            conn = _conn(front.server_address[1])
            conn.request("GET", "/v1/models")
            resp = conn.getresponse()
            assert resp.status == 502 and "did not answer" in json.loads(resp.read())["error"]["message"]
        finally:
            front.shutdown()
            front.server_close()


class FakeDocker:
    """The node's Docker engine API on a unix socket: one container whose wait returns when the test
    says it stopped."""

    def __init__(self, path: Path) -> None:
        self.stopped = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, doc: dict) -> None:
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802
                fake.stopped.wait(60)
                self._send(200, {"StatusCode": 0})

            def do_GET(self) -> None:  # noqa: N802
                self._send(200, {"State": {"Running": not fake.stopped.is_set()}})

        class UnixServer(ThreadingHTTPServer):
            address_family = socket.AF_UNIX
            daemon_threads = True

            def server_bind(self) -> None:
                self.socket.bind(self.server_address)
                self.server_name, self.server_port = "docker", 0

        self.server = UnixServer(str(path), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie: exited, not yet reaped by init
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    return False


def _front_op(upstream: int, tmp_path: Path) -> tuple[FakeDocker, int, Path, int]:
    """Run the node program's `front` op for container c0ffee of a fake Docker engine: (that
    engine, the front's port, the rank log, the pid the op printed)."""
    docker = FakeDocker(tmp_path / "docker.sock")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "rank.log"
    cfg = {"listen": "127.0.0.1", "port": port, "upstream": upstream, "routes": list(ROUTES)}
    cfg |= {"container": "c0ffee", "log": str(log)}
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path / 'docker.sock'}"}
    res = subprocess.run(
        node_argv("front"), input=json.dumps(cfg) + "\n", capture_output=True, text=True, env=env, timeout=60
    )  # returns once the child let go of the pipes: it is detached
    assert res.returncode == 0, res.stderr
    return docker, port, log, json.loads(res.stdout)["pid"]


def test_the_front_op_detaches_serves_and_exits_when_its_container_stops(pair, tmp_path: Path) -> None:
    docker, port, log, pid = _front_op(pair[0].port, tmp_path)
    try:
        conn = _conn(port)
        conn.request("GET", "/server_info")
        resp = conn.getresponse()
        assert resp.status == 403 and resp.read()
        conn.request("GET", "/v1/models")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read()
        assert os.getsid(pid) == pid  # its own session: the SSH session ending does not end it
        docker.stopped.set()  # the container stops: the front goes
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)
        assert "its container stopped, exiting" in log.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
        docker.close()


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                kids.append(int(stat.parent.name))
    return kids


def _wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + 30
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_killed_front_server_is_forked_again_while_its_container_runs(pair, tmp_path: Path) -> None:
    docker, port, log, keeper = _front_op(pair[0].port, tmp_path)
    try:
        _wait_for(lambda: len(_children(keeper)) == 1, "the keeper forks one server")
        (server,) = _children(keeper)
        os.kill(server, signal.SIGKILL)  # what the OOM killer does
        _wait_for(lambda: _children(keeper) not in ([], [server]), "a new server")
        conn = _conn(port)
        conn.request("GET", "/v1/models")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read()
        conn.request("GET", "/server_info")  # the new server filters as the first did
        resp = conn.getresponse()
        assert resp.status == 403 and resp.read()
        assert "the front's server died (killed by SIGKILL); serving again" in log.read_text()
        (second,) = _children(keeper)
        docker.stopped.set()  # the container stops: server and keeper go
        _wait_for(lambda: not _alive(keeper) and not _alive(second), "both exit with the container")
    finally:
        for pid in [keeper, *_children(keeper)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        docker.close()


def test_a_busy_port_is_an_error_line_not_a_hang(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        cfg = {"listen": "127.0.0.1", "port": s.getsockname()[1], "upstream": 1, "container": "x"}
        cfg["bind_retry_s"] = 0.3  # a replaced front's port is retried (20 s by default)
        res = subprocess.run(
            node_argv("front"), input=json.dumps(cfg) + "\n", capture_output=True, text=True, timeout=120
        )
    assert res.returncode == 1 and "cannot listen on 127.0.0.1" in json.loads(res.stdout)["error"]


def test_a_get_of_a_private_route_gets_only_the_listed_fields() -> None:
    """sglang-router reads a worker's served_model_name from /server_info: through the front a GET
    gets the engine's listed scalar fields and nothing else (no key, no argv); other methods, and
    an engine whose route answers no JSON object, get 403."""
    up = Upstream()
    front = make_server(
        listen_socket("127.0.0.1", 0), up.port, ROUTES, ("served_model_name", "model_path", "tokenizer_path")
    )
    threading.Thread(target=front.serve_forever, daemon=True).start()
    try:
        conn = _conn(front.server_address[1])
        for target in ["/server_info", "/get_server_info", "/%73erver_info", "/x/../SERVER_INFO"]:
            conn.request("GET", target, headers={"Authorization": "Bearer k"})
            resp = conn.getresponse()
            raw = resp.read()
            assert resp.status == 200, (target, raw)
            assert json.loads(raw) == {"served_model_name": "qwen", "model_path": "/models/qwen"}
            assert b"canary" not in raw
        conn.request("POST", "/server_info", body=b"{}")
        resp = conn.getresponse()
        assert (resp.status, b"canary" in resp.read()) == (403, False)
        conn.request("GET", "/status/401")  # a passed route: the engine's own answer
        assert conn.getresponse().status == 401
    finally:
        front.shutdown()
        front.server_close()
        up.close()
