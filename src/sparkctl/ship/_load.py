"""Runs ON a peer (python3 stdlib only), as `python3 -S -c <this file>`: `docker load -q` of the
image stream on stdin, straight into the node's engine API over its unix socket.

The docker CLI copies its stdin to the engine in small reads (measured here: ~0.6 s of CPU per
260 MB, a quarter of the whole load); this moves the bytes with splice(2) from the stdin pipe into
the engine's socket (HTTP chunked upload), so the kernel copies them once. Output and exit code
as `docker load -q`: "Loaded image: ..." on stdout, the engine's error on stderr and exit 1. An
engine that is not a unix socket (DOCKER_HOST=tcp://, ssh://) gets the docker CLI itself.
"""

import contextlib
import errno
import fcntl
import json
import os
import select
import socket
import struct
import sys
import termios

FIONREAD = termios.FIONREAD
F_SETPIPE_SZ = 1031


def _upload(sock, inp):
    """stdin -> the socket as HTTP chunks; splice when stdin is a pipe, else plain copies."""
    with contextlib.suppress(OSError):  # fewer, larger chunks; a pipe only (and only if allowed)
        fcntl.fcntl(inp, F_SETPIPE_SZ, 1 << 20)
    use_splice = hasattr(os, "splice")
    avail = bytearray(4)
    while True:
        select.select([inp], [], [])
        fcntl.ioctl(inp, FIONREAD, avail)
        n = struct.unpack("i", bytes(avail))[0]
        if n <= 0:
            data = os.read(inp, 1 << 20)  # 0 bytes readable: EOF (or a non-pipe that cannot tell)
            if not data:
                break
            sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))
            continue
        sock.sendall(b"%x\r\n" % n)
        while n:
            moved = 0
            if use_splice:
                try:
                    moved = os.splice(inp, sock.fileno(), n)
                except OSError as exc:
                    if exc.errno not in (errno.EINVAL, errno.ENOSYS):
                        raise
                    use_splice = False
            if not use_splice:
                data = os.read(inp, n)
                sock.sendall(data)
                moved = len(data)
            if not moved:
                raise EOFError("stdin ended inside a chunk")
            n -= moved
        sock.sendall(b"\r\n")
    sock.sendall(b"0\r\n\r\n")


def _answer(sock):
    """(HTTP status, the engine's JSON messages)."""
    data = b"".join(iter(lambda: sock.recv(1 << 16), b""))
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head.lower():
        plain, rest = b"", body
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size.split(b";")[0] or b"0", 16)
            if not n:
                break
            plain, rest = plain + rest[:n], rest[n + 2 :]
        body = plain
    docs = []
    for line in body.splitlines():
        try:
            docs.append(json.loads(line))
        except ValueError:
            if line.strip():
                docs.append({"error": line.decode(errors="replace")})
    return status, docs


def main():
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not host.startswith("unix://"):
        os.execvp("docker", ["docker", "load", "-q"])
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(host[len("unix://") :])
    sock.sendall(
        b"POST /images/load?quiet=1 HTTP/1.1\r\nHost: docker\r\nContent-Type: application/x-tar\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    failed = None
    try:
        _upload(sock, sys.stdin.fileno())
    except (OSError, EOFError) as exc:  # the engine hung up (it says why below) or stdin broke
        failed = "sending the image to the engine: %s" % exc  # noqa: UP031
        sock.shutdown(socket.SHUT_WR)  # an unfinished upload: the engine sees it end and aborts
        sock.settimeout(30)
    try:
        status, docs = _answer(sock)
    except (OSError, ValueError, IndexError):
        status, docs = 0, []
    if failed:
        docs.append({"error": failed})
    errors = [d.get("errorDetail", {}).get("message") or d.get("error") or d.get("message") for d in docs]
    errors = [e for e in errors if e]
    for d in docs:
        if d.get("stream"):
            sys.stdout.write(d["stream"])
    if status != 200 or errors:
        sys.stderr.write("Error response from daemon: %s\n" % (errors[-1] if errors else status))  # noqa: UP031
        sys.exit(1)


main()
