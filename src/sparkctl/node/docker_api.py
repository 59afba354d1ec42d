"""Runs ON a node (python3 stdlib only), part of the node program: the node's Docker engine, through
its API on the unix socket (no docker CLI process per query or per stream), the CLI as fallback.

  image_state(ref)  -> image ID, layers and sizes, every image's layer chain, free space
  SaveStream(ref)   -> `docker save REF` as a readable fd: the engine's own socket, positioned at
                       the tar (an HTTP/1.0 answer is the raw tar until the engine closes), so the
                       ssh client reads the image straight from the engine
"""

import contextlib
import json
import os
import socket

from .base import free_bytes  # node: strip
from .tarfilter import chain_ids  # node: strip


def docker_socket():
    """The engine's unix socket as the docker CLI would reach it; None when the CLI would go
    elsewhere (DOCKER_HOST tcp:// or ssh://, a docker context other than the default)."""
    host = os.environ.get("DOCKER_HOST")
    if not host:
        if os.environ.get("DOCKER_CONTEXT") not in (None, "", "default"):
            return None
        try:
            with open(
                os.path.join(
                    os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker"), "config.json"
                )
            ) as fh:
                if json.load(fh).get("currentContext") not in (None, "", "default"):
                    return None
        except (OSError, ValueError, AttributeError):
            pass
        host = "unix:///var/run/docker.sock"
    return host[len("unix://") :] if host.startswith("unix://") else None


def _quote(text, safe):
    from urllib.parse import quote  # imported where used: the node program starts faster

    return quote(text, safe=safe)


def _docker(args, timeout=60):
    import subprocess

    try:
        res = subprocess.run(["docker", *args], capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, "", str(exc)
    return res.returncode, res.stdout.decode(errors="replace"), res.stderr.decode(errors="replace")


def _api(url):
    """GET on the node's engine API over its unix socket: (status, doc). No process per query (the
    docker CLI costs ~0.1-0.5 s to start); None when DOCKER_HOST is not a unix socket."""
    where = docker_socket()
    if where is None:
        return None
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(60)
        sock.connect(where)
        sock.sendall(("GET %s HTTP/1.0\r\nHost: docker\r\n\r\n" % _quote(url, "/:@?=&")).encode())  # noqa: UP031
        data = b"".join(iter(lambda: sock.recv(1 << 16), b""))
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), (json.loads(body) if body.strip() else None)


def _api_all(urls, workers=8):
    """`_api` for every URL, several at a time (the engine answers them in parallel): `/info`
    alone takes ~5-12 ms, and a node with a hundred images needs an inspect for each."""
    import threading

    got, todo = [None] * len(urls), list(enumerate(urls))

    def work():
        while todo:
            try:
                i, url = todo.pop()
            except IndexError:
                return
            with contextlib.suppress(Exception):  # left None: the caller falls back to the CLI
                got[i] = _api(url)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(workers, len(urls)))]
    for t in threads:
        t.start()
    return threads, got


def _joined(threads, got):
    for t in threads:
        t.join()
    if any(g is None for g in got):
        raise OSError("the engine API did not answer every query")
    return got


def _image_state_api(ref, want=None):
    if docker_socket() is None:
        return None
    info = None if want else _api_all(["/info"])  # meanwhile: the image, its history, every image's layers
    out = {}
    status, doc = _api("/images/%s/json" % ref)  # noqa: UP031
    if status == 200:
        out["id"], out["layers"], out["size"] = (
            doc["Id"],
            doc["RootFS"].get("Layers") or [],
            int(doc.get("Size") or 0),
        )
        if want and doc["Id"] == want:
            return dict(out, same=True)
    info = info or _api_all(["/info"])
    if status == 200:
        status, hist = _api("/images/%s/history" % doc["Id"])  # noqa: UP031
        out["history"] = [int(h.get("Size") or 0) for h in reversed(hist)] if status == 200 else []
    elif status != 404:
        out["error"] = "docker engine answered %s: %s" % (status, (doc or {}).get("message"))  # noqa: UP031
    _status, images = _api("/images/json?all=1")
    docs = _joined(*_api_all(["/images/%s/json" % img["Id"] for img in images or []]))  # noqa: UP031
    out["chains"] = [chain_ids(d["RootFS"].get("Layers") or []) for _s, d in docs if d]
    ((status, info),) = _joined(*info)
    if status == 200 and info.get("DockerRootDir"):
        with contextlib.suppress(OSError):
            out["free"] = free_bytes(info["DockerRootDir"])
    return out


def image_state(ref, want=None):
    """Image ID, layers and sizes of REF, the layer chains of every image, free space of the data root.
    `want`: the ID sparkctl expects the source to have (pinned, or seen there last time): when REF
    is that image here, only {id, layers, size, same: true}, after one query (nothing to send to
    this node, so no other image, history or free space is read: a re-ship of nothing new)."""
    try:
        got = _image_state_api(ref, want)
        if got is not None:
            return got
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        pass  # an engine API we cannot read this way: the CLI below
    out = {}
    rc, text, err = _docker(["image", "inspect", "--", ref])
    if rc == 0:
        doc = json.loads(text)[0]
        out["id"], out["layers"], out["size"] = (
            doc["Id"],
            doc["RootFS"].get("Layers") or [],
            int(doc.get("Size") or 0),
        )
        if want and doc["Id"] == want:
            return dict(out, same=True)
        rc, text, _err = _docker(["image", "history", "--human=false", "--format", "{{.Size}}", doc["Id"]])
        out["history"] = [int(x) for x in text.split() if x.isdigit()][::-1] if rc == 0 else []
    elif "no such image" not in err.lower():
        out["error"] = (err.strip().splitlines() or ["docker failed"])[-1]
    rc, text, _err = _docker(["image", "ls", "-aq", "--no-trunc"])
    ids = sorted(set(text.split()))
    rc, text, _err = _docker(["image", "inspect", "--", *ids]) if ids and rc == 0 else (1, "", "")
    out["chains"] = [
        chain_ids(d["RootFS"].get("Layers") or []) for d in (json.loads(text) if rc == 0 else [])
    ]
    rc, text, _err = _docker(["info", "-f", "{{.DockerRootDir}}"])
    if rc == 0 and text.strip():
        with contextlib.suppress(OSError):
            out["free"] = free_bytes(text.strip())
    return out


def _read_head(sock):
    """The HTTP status line and headers, byte by byte: not one byte of the body is consumed."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = sock.recv(1)
        if not byte:
            raise EOFError("the engine closed the connection")
        head += byte
        if len(head) > 65536:
            raise ValueError("no end of the engine's answer headers")
    return int(head.split(b" ", 2)[1]), head.lower()


class SaveStream:
    """`docker save REF`: .fd to read the tar from; .finish() -> (rc, error text)."""

    def __init__(self, ref, spawn):
        self.sock, self.proc, self.error = None, None, ""
        path = docker_socket()
        if path is not None:
            with contextlib.suppress(OSError, ValueError, EOFError, IndexError):
                self._open_api(path, ref)
        if self.sock is None and not self.error:  # not a unix socket, or an unexpected answer
            pipe = -1  # subprocess.PIPE
            self.proc = spawn(["docker", "save", "--", ref], stdout=pipe, stderr=pipe)
        self.fd = self.sock.fileno() if self.sock else self.proc.stdout.fileno() if self.proc else None

    def _open_api(self, path, ref):
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(path)
        # HTTP/1.0: the engine sends the tar as is (no chunked encoding) and closes at its end.
        sock.sendall(b"GET /images/get?names=%s HTTP/1.0\r\nHost: docker\r\n\r\n" % _quote(ref, "").encode())
        status, head = _read_head(sock)
        if status == 200 and b"transfer-encoding" not in head:
            self.sock = sock
            return
        if status == 200:  # an encoding this does not expect: the CLI below (the tar is not read)
            sock.close()
            return
        body = b"".join(iter(lambda: sock.recv(1 << 16), b""))
        sock.close()
        try:
            self.error = json.loads(body).get("message") or str(status)
        except (ValueError, AttributeError):
            self.error = body.decode(errors="replace").strip() or str(status)

    def detach(self):
        """The reading end now belongs to a child (the ssh client's stdin): close ours."""
        if self.sock is not None:
            self.sock.close()
        elif self.proc is not None:
            self.proc.stdout.close()

    def read(self, n):
        return os.read(self.fd, n)

    def finish(self):
        if self.error:
            return 1, self.error
        if self.proc is None:
            if self.sock is not None:
                self.sock.close()
            return 0, ""
        rc = self.proc.wait()
        return rc, self.proc.stderr.read().decode(errors="replace")[-2000:]
