"""Runs ON a node (python3 stdlib only), part of the node program: one container's life seen
through the node's Docker engine API (the CLI as fallback), for what lives exactly as long as a
rank's container (the filtering front, node/front.py).
"""

import json
import socket
import time

from .docker_api import docker_socket  # node: strip


def _docker_call(method, path, timeout):
    """(status, doc) of one request to the node's engine API; None without a unix socket."""
    where = docker_socket()
    if where is None:
        return None
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(timeout)
        sock.connect(where)
        sock.sendall(f"{method} {path} HTTP/1.0\r\nHost: docker\r\nContent-Length: 0\r\n\r\n".encode())
        data = b"".join(iter(lambda: sock.recv(1 << 16), b""))
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(body) if body.strip() else None
    except ValueError:
        return status, None


def container_running(container):
    """True/False; None when the engine cannot be asked."""
    try:
        got = _docker_call("GET", f"/containers/{container}/json", 30)
    except OSError:
        return None
    if got is None:
        import subprocess

        res = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Running}}", container], capture_output=True, timeout=60
        )
        return res.returncode == 0 and res.stdout.strip() == b"true"
    status, doc = got
    return status == 200 and bool((doc or {}).get("State", {}).get("Running"))


def wait_container(container, gone_s=30.0):
    """Block while the container runs; return once it stopped, was removed, or its engine stayed
    unreachable for `gone_s`."""
    lost_since = None
    while True:
        try:
            if docker_socket() is None:
                import subprocess

                subprocess.run(["docker", "wait", container], capture_output=True)
            else:
                _docker_call("POST", f"/containers/{container}/wait?condition=not-running", None)
        except OSError:
            pass
        running = container_running(container)
        if running is False:
            return
        if running is None:
            lost_since = lost_since or time.monotonic()
            if time.monotonic() - lost_since > gone_s:
                return
            time.sleep(1)
        else:
            lost_since = None
