"""The node program's stream reader (node/stream_in.py), in process, on real descriptors."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from sparkctl.node.base import frame
from sparkctl.node.stream_in import Reader


def _feed(kind: str, data: bytes, tmp_path: Path) -> int:
    """A descriptor that yields `data`: a pipe (as sshd gives `recv`), a socket, a regular file."""
    import socket
    import threading

    if kind == "file":
        path = tmp_path / "stream"
        path.write_bytes(data)
        return os.open(path, os.O_RDONLY)
    if kind == "pipe":
        r, w = os.pipe()
    else:
        a, b = socket.socketpair()
        r, w = a.detach(), b.detach()

    def write() -> None:
        with os.fdopen(w, "wb") as fh:
            fh.write(data)

    threading.Thread(target=write, daemon=True).start()
    return r


@pytest.mark.parametrize("kind", ["pipe", "socket", "file"])
def test_the_receiver_writes_exactly_the_streamed_bytes_by_splice_or_by_read(
    tmp_path: Path, kind: str
) -> None:
    """Header lines read ahead into the receiver's own buffer, then each file's bytes: from a pipe
    by splice (no copy through Python), from anything else by plain reads; the same bytes land
    either way, and only what follows a header goes into its file."""
    files = [os.urandom(n) for n in (0, 7, 70_000, (3 << 20) + 5, 1)]
    data = b"".join(frame({"i": i, "size": len(f)}) + f for i, f in enumerate(files)) + frame({"end": True})
    reader = Reader(_feed(kind, data, tmp_path))
    view = memoryview(bytearray(1 << 20))
    for i, want in enumerate(files):
        head = json.loads(reader.readline())
        assert head == {"i": i, "size": len(want)}
        out = tmp_path / f"out{i}"
        fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o600)
        h = hashlib.sha256() if i % 2 else None
        reader.copy(fd, head["size"], view, h)
        os.close(fd)
        assert out.read_bytes() == want
        if h is not None:
            assert h.hexdigest() == hashlib.sha256(want).hexdigest()
    assert json.loads(reader.readline()) == {"end": True}
    assert reader.readline() == b""
    assert (reader.splice is not None) == (kind == "pipe")  # socket and file: fell back to reads


def test_a_stream_that_ends_inside_a_file_is_reported_truncated(tmp_path: Path) -> None:
    reader = Reader(_feed("pipe", frame({"size": 10}) + b"12345", tmp_path))
    json.loads(reader.readline())
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    with pytest.raises(EOFError):
        reader.copy(fd, 10, memoryview(bytearray(16)))
    os.close(fd)
