"""node/load.py, run for real (python3 + zstd subprocesses) against an engine socket that parses
the upload with h11: a zstd stream is unpacked on the way, a corrupt one is cut, never ended.
zstd comes from scripts/install-deps, as on the nodes (DGX OS has it)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path

import h11
import pytest

from sparkctl.node.pack import load_argv


class Engine:
    """One `POST /images/load` on a unix socket: the body as h11 decoded it, and whether the
    upload ended (its last chunk) or was cut."""

    def __init__(self, path: Path) -> None:
        self.path, self.body, self.ended = path, b"", False
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        http = h11.Connection(h11.SERVER)
        with conn:
            while True:
                try:
                    event = http.next_event()
                except h11.RemoteProtocolError:  # the client hung up inside the chunked body
                    return
                if event is h11.NEED_DATA:
                    http.receive_data(conn.recv(1 << 16))
                elif isinstance(event, h11.Data):
                    self.body += bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    self.ended = True
                    break
            answer = json.dumps({"stream": "Loaded image: x:1\n"}).encode()
            head = h11.Response(status_code=200, headers=[("Content-Length", str(len(answer)))])
            conn.sendall(http.send(head) + http.send(h11.Data(data=answer)) + http.send(h11.EndOfMessage()))


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Engine:
    path = tmp_path / "docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    monkeypatch.setenv("HOME", str(tmp_path))
    return Engine(path)


def test_a_zstd_stream_reaches_the_engine_unpacked(engine: Engine) -> None:
    image = b"".join(bytes([i % 251]) * 4096 for i in range(600))  # 2.4 MB, compressible
    packed = subprocess.run(["zstd", "-1", "-q", "-c"], input=image, capture_output=True, check=True).stdout
    assert len(packed) < len(image) // 10
    res = subprocess.run(load_argv("zstd"), input=packed, capture_output=True, timeout=60)
    engine.thread.join(10)
    assert res.returncode == 0, res.stderr
    assert res.stdout == b"Loaded image: x:1\n"
    assert engine.ended and engine.body == image


def test_a_corrupt_zstd_stream_is_cut_so_the_engine_loads_nothing(engine: Engine) -> None:
    packed = subprocess.run(["zstd", "-1", "-q", "-c"], input=b"a" * 300_000, capture_output=True).stdout
    res = subprocess.run(load_argv("zstd"), input=packed[: len(packed) // 2], capture_output=True, timeout=60)
    engine.thread.join(10)
    assert res.returncode == 1
    assert b"zstd -d failed" in res.stderr
    assert not engine.ended  # no last chunk: the engine aborts the load instead of reading a short tar


def test_a_plain_stream_is_passed_as_it_is(engine: Engine) -> None:
    res = subprocess.run(load_argv(), input=b"tar bytes" * 1000, capture_output=True, timeout=60)
    engine.thread.join(10)
    assert res.returncode == 0, res.stderr
    assert engine.ended and engine.body == b"tar bytes" * 1000
