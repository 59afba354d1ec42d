"""Runs ON a node (python3 stdlib only), part of the node program (op `front`): the filtering front
of a rank's API. See docs/security.md ("The filtering front").

The engine binds 127.0.0.1:<internal port>; the front listens on the address and port the plan
gives the API and forwards every request there unchanged (method, target, headers but the
hop-by-hop ones, the body as it arrives, keep-alive), streaming the answer back as it comes
(chunked/SSE: one write and flush per upstream chunk). It refuses the routes the engine declares
key-revealing (an engine's settings route answers api_key and admin_api_key) with a 403 JSON error,
matched on the path as any server could read it: percent-decoded until stable, `\\` as `/`,
`//` collapsed, `.`/`..` resolved, `;params` cut, lower case, trailing `/` dropped, and any
prefix or suffix (`/x/server_info`, `/server_info/x`).

Op `front` (config as one JSON line on stdin: listen, port, upstream, routes, container, log):
binds the port (retrying while the previous front of a replaced container lets go of it), forks a
detached keeper, prints its {"pid": N} and exits. The keeper forks the server and forks it again
if it dies while the container runs. Both run as the node user (no container, no root) and live
exactly as long as the container: the server waits on it through the node's Docker engine API and
exits when it stops or is removed, and the keeper then exits too.
"""

import json
import os
import socket
import sys
import time

from .container_watch import container_running, wait_container  # node: strip
from .front_routes import is_private, public_fields  # node: strip

HOP_BY_HOP = frozenset(
    (
        "connection",
        "expect",  # answered here (100 Continue) before the body is read
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    )
)
NO_BODY = (204, 304)
PIECE = 1 << 16
BIND_RETRY_S = 20.0  # the previous front of a replaced container exits within ms of its removal


def _hop_names(headers):
    """Hop-by-hop header names: the fixed ones and those the Connection header lists."""
    names = set(HOP_BY_HOP)
    for value in headers.get_all("Connection") or []:
        names.update(v.strip().lower() for v in value.split(",") if v.strip())
    return names


def _read_chunked(rfile):
    """A chunked request body, decoded, piece by piece."""
    while True:
        line = rfile.readline(1 << 16)
        size = int(line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while rfile.readline(1 << 16) not in (b"\r\n", b"\n", b""):
                pass  # trailers: dropped (hop-by-hop)
            return
        yield rfile.read(size)
        rfile.readline(8)


def _read_sized(rfile, n):
    while n > 0:
        data = rfile.read(min(PIECE, n))
        if not data:
            raise ConnectionError("the client closed inside the request body")
        n -= len(data)
        yield data


class FrontMethods:
    """The front's request handling, mixed into http.server's handler by `make_handler` (imported
    only when a front starts: every other node op starts faster)."""

    upstream = 0  # the engine's port on 127.0.0.1
    routes = ()  # kept on the node (the engine's private routes)
    fields = ()  # of a private route's JSON, what a GET may still get (the router's served name)
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # a streamed chunk leaves at once
    timeout = 900  # an idle keep-alive client lets go of its thread
    server_version = "sparkctl-front"
    conn = None

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass  # no per-request log (the engine logs its own)

    def _json(self, code, message):
        kind = {403: "forbidden", 502: "bad_gateway"}.get(code, "error")
        body = json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _upstream(self):
        """The kept connection to the engine, unless the engine closed it while idle (uvicorn
        drops an idle keep-alive connection after 5 s): then a new one."""
        import http.client
        import select

        sock = self.conn.sock if self.conn is not None else None
        if sock is not None and select.select([sock], [], [], 0)[0]:  # EOF (or stray bytes): stale
            self._drop_upstream()
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=None)
        return self.conn

    def forward(self):
        import http.client

        if is_private(self.path, self.routes):
            self._drain_body()
            if self.command == "GET" and self.fields:
                return self._answer_fields()
            return self._json(403, "this route is not served outside the node (sparkctl front)")
        bodyless = not self.headers.get("Content-Length") and not self.headers.get("Transfer-Encoding")
        try:
            try:
                resp = self._send_upstream()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                if not bodyless:
                    raise
                self._drop_upstream()  # closed under us between the check and the send: once more
                resp = self._send_upstream()
        except (OSError, http.client.HTTPException) as exc:
            self.close_connection = True
            self._drop_upstream()
            return self._json(502, f"the engine behind the front did not answer: {exc}")
        self._relay(resp)

    def _answer_fields(self):
        """The private route's answer (asked by its own name) cut to `fields`; else its status."""
        import http.client

        route = next(r for r in self.routes if is_private(self.path, (r,)))
        hop = _hop_names(self.headers) | {"content-length"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in hop}
        try:
            conn = self._upstream()
            conn.request("GET", route, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            self.close_connection = True
            self._drop_upstream()
            return self._json(502, f"the engine behind the front did not answer: {exc}")
        if resp.will_close:
            self._drop_upstream()
        cut = public_fields(body, self.fields) if resp.status == 200 else None
        if cut is None:
            code = resp.status if resp.status != 200 else 403
            return self._json(code, "this route's settings are not served outside the node (sparkctl front)")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(cut)))
        self.end_headers()
        self.wfile.write(cut)

    def _drain_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        for _ in _read_sized(self.rfile, n):
            pass
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            for _ in _read_chunked(self.rfile):
                pass

    def _send_upstream(self):
        conn = self._upstream()
        hop = _hop_names(self.headers)
        chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
        conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for name, value in self.headers.items():
            if name.lower() not in hop and not (chunked and name.lower() == "content-length"):
                conn.putheader(name, value)
        if chunked:
            conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        if chunked:
            for piece in _read_chunked(self.rfile):
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            conn.send(b"0\r\n\r\n")
        else:
            for piece in _read_sized(self.rfile, int(self.headers.get("Content-Length") or 0)):
                conn.send(piece)
        return conn.getresponse()

    def _drop_upstream(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _relay(self, resp):
        hop = _hop_names(resp.headers)
        self.send_response_only(resp.status, resp.reason)
        for name, value in resp.getheaders():
            if name.lower() not in hop:
                self.send_header(name, value)
        bodyless = self.command == "HEAD" or resp.status in NO_BODY or resp.status < 200
        sized = resp.getheader("Content-Length") is not None and not resp.chunked
        chunk_out = not bodyless and not sized and self.request_version == "HTTP/1.1"
        if chunk_out:
            self.send_header("Transfer-Encoding", "chunked")
        elif not bodyless and not sized:
            self.close_connection = True  # an HTTP/1.0 client: the body ends with the connection
        self.end_headers()
        try:
            while not bodyless:
                piece = resp.read1(PIECE)
                if not piece:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunk_out else piece)
            if chunk_out:
                self.wfile.write(b"0\r\n\r\n")
        finally:
            if resp.will_close or not resp.isclosed():
                resp.close()
                self._drop_upstream()

    def finish(self):
        self._drop_upstream()
        super().finish()


def make_handler(upstream, routes, fields=()):
    """The request handler class forwarding to 127.0.0.1:`upstream`, keeping `routes` on the node
    (a GET of one gets only `fields` of its answer)."""
    from http.server import BaseHTTPRequestHandler

    attrs = {"upstream": upstream, "routes": tuple(routes), "fields": tuple(fields)}
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"):
        attrs["do_" + method] = FrontMethods.forward
    return type("Front", (FrontMethods, BaseHTTPRequestHandler), attrs)


def listen_socket(host, port, retry_s=BIND_RETRY_S):
    """A listening TCP socket on host:port (any address form a bind reads); retries EADDRINUSE."""
    infos = socket.getaddrinfo(host or None, port, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    family, kind, proto, _name, addr = infos[0]
    deadline = time.monotonic() + retry_s
    while True:
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
            sock.listen(1024)
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno != 98 or time.monotonic() > deadline:  # EADDRINUSE
                raise
            time.sleep(0.05)


def make_server(sock, upstream, routes, fields=()):
    """A threading HTTP server on an already listening socket."""
    from http.server import ThreadingHTTPServer

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

        def server_bind(self):
            pass  # the socket is bound already

        def server_activate(self):
            pass

    server = Server(sock.getsockname()[:2], make_handler(upstream, routes, fields), bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.server_address = sock.getsockname()[:2]
    return server


def _log(path, text):
    """One line in the rank's log file, stamped like Docker's lines (`logs` merges by the stamp)."""
    if not path:
        return
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000000000Z"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return
    with os.fdopen(fd, "a") as fh:
        fh.write(f"{stamp} sparkctl-front: {text}\n")


def op_front(cfg):
    """Bind, fork the detached server, print {"pid": N} (or {"error": ...}, exit 1)."""
    try:
        sock = listen_socket(
            cfg.get("listen"), int(cfg["port"]), float(cfg.get("bind_retry_s", BIND_RETRY_S))
        )
    except OSError as exc:
        sys.stdout.write(json.dumps({"error": f"cannot listen on {cfg.get('listen')}:{cfg['port']}: {exc}"}))
        sys.stdout.write("\n")
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    pid = os.fork()
    if pid:
        sock.close()
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()
        os._exit(0)
    os.setsid()
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    _serve_detached(sock, cfg)


RESTART_BURST = 5  # more server deaths than this within RESTART_WINDOW_S: wait before the next
RESTART_WINDOW_S = 60.0
RESTART_PAUSE_S = 5.0


def _serve_detached(sock, cfg):
    """The keeper: holds the listening socket and forks the server; when the server dies while its
    container still runs (the OOM killer, a stray kill), it forks a new one on the same socket, so
    the API is back in milliseconds instead of after the supervisor's canary restarts the group.
    The keeper has no threads (it forks); the server watches the container itself, so a killed
    keeper leaves a server that still exits with its container."""
    import signal

    where = f"{cfg.get('listen')}:{cfg['port']}"
    deaths = []
    while True:
        pid = os.fork()
        if pid == 0:
            _serve(sock, cfg, where)
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            os._exit(0)  # its container stopped: the server logged it
        if container_running(cfg["container"]) is False:
            _log(cfg.get("log"), f"{where}: its container stopped, exiting")
            os._exit(0)
        if os.WIFSIGNALED(status):
            why = f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
        else:
            why = f"exit {os.WEXITSTATUS(status)}"
        now = time.monotonic()
        deaths = [t for t in deaths if now - t < RESTART_WINDOW_S] + [now]
        pause = RESTART_PAUSE_S if len(deaths) > RESTART_BURST else 0.0
        _log(cfg.get("log"), f"{where}: the front's server died ({why}); serving again")
        time.sleep(pause)


def _serve(sock, cfg, where):
    """The server (a child of the keeper): never returns. Exits 0 when its container stops."""
    import threading

    routes = tuple(cfg.get("routes") or ())
    server = make_server(sock, int(cfg["upstream"]), routes, tuple(cfg.get("fields") or ()))
    _log(cfg.get("log"), f"{where} -> 127.0.0.1:{cfg['upstream']}, refusing {', '.join(routes) or 'nothing'}")

    def watch():
        wait_container(cfg["container"])
        _log(cfg.get("log"), f"{where}: its container stopped, exiting")
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
    try:
        server.serve_forever(poll_interval=3600)
    except BaseException:
        os._exit(1)
    os._exit(1)  # serve_forever returned without a shutdown request: not the container's end
