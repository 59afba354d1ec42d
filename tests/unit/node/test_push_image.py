"""node/push_image.py, run for real: the node program's `push-image` with a chain of one local
link (`load`, no ssh) against a stand-in engine on a unix socket that answers `GET /images/get`
with a tar and takes `POST /images/load` (parsed with h11): the image arrives unpacked whether it
crossed the link through zstd or plain, and the result says what crossed it."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path

import h11
import pytest

from sparkctl.node.pack import load_argv, node_argv, node_script
from sparkctl.ship.hop import chain_entry

IMAGE = b"".join(bytes([i % 199]) * 8192 for i in range(400))  # 3.2 MB, compressible


class Engine:
    """Serves the saved image and keeps what a load uploaded."""

    def __init__(self, path: Path) -> None:
        self.loaded = b""
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(4)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        http, body = h11.Connection(h11.SERVER), b""
        with conn:
            while True:
                event = http.next_event()
                if event is h11.NEED_DATA:
                    http.receive_data(conn.recv(1 << 16))
                elif isinstance(event, h11.Request):
                    target = bytes(event.target)
                elif isinstance(event, h11.Data):
                    body += bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    break
            if target.startswith(b"/images/get"):  # HTTP/1.0: the tar as is, closed at its end
                answer = IMAGE
                head = h11.Response(status_code=200, headers=[("Content-Type", "application/x-tar")])
            else:
                self.loaded = body
                answer = json.dumps({"stream": "Loaded image: x:1\n"}).encode()
                head = h11.Response(status_code=200, headers=[("Content-Length", str(len(answer)))])
            conn.sendall(http.send(head) + http.send(h11.Data(data=answer)) + http.send(h11.EndOfMessage()))


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Engine:
    path = tmp_path / "docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    monkeypatch.setenv("HOME", str(tmp_path))
    return Engine(path)


def _push(codec: str | None) -> tuple[dict, list[int]]:
    req = {
        "ref": "x:1",
        "diff_ids": [],
        "skip": [],
        "chain": [chain_entry("here", [], load_argv(codec))],
        "prog": node_script(),
        "codec": codec,
        "threads": 1,
    }
    proc = subprocess.Popen(node_argv("push-image"), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(req) + "\n").encode())
    proc.stdin.flush()  # stdin stays open: its end would stop the push
    progress = []
    for line in proc.stdout:
        doc = json.loads(line)
        if "result" in doc:
            proc.stdin.close()
            proc.wait(30)
            return doc["result"], progress
        progress.append(doc["progress"])
    raise AssertionError("no result")


def test_a_compressed_push_loads_the_image_and_says_what_crossed_the_link(engine: Engine) -> None:
    res, progress = _push("zstd")
    assert res["peers"]["here"]["rc"] == 0, res
    assert res["codec"] == "zstd" and res["codec_rc"] == 0
    assert 0 < res["wire"] < len(IMAGE) // 10  # zstd's output: what ssh would have sent
    assert len(IMAGE) <= progress[-1] < len(IMAGE) + (1 << 20)  # the image's bytes, not the wire's
    # (what zstd read: the image and its own start-up reads)
    assert engine.loaded == IMAGE


def test_a_plain_push_loads_the_same_and_claims_no_codec(engine: Engine) -> None:
    res, progress = _push(None)
    assert res["peers"]["here"]["rc"] == 0, res
    assert "codec" not in res and "wire" not in res
    # what the link's reader read: here the `load` op's python, with its start-up reads (ssh's are few)
    assert len(IMAGE) <= progress[-1] < len(IMAGE) + (4 << 20)
    assert engine.loaded == IMAGE
