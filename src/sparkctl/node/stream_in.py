"""Runs ON a node (python3 stdlib only), part of the node program: a file stream read from stdin.

`recv` (recv.py) reads header lines and, after each, exactly the bytes of one file or range: this
reader keeps its own buffer, so it knows where a header ends, and moves the bytes past it from a
pipe into the file by splice(2), never through Python (plain reads where stdin is not a pipe).
"""

import errno
import os

from .base import CHUNK  # node: strip


class Reader:
    """stdin by descriptor with its own buffer: a header line is read ahead in blocks, so what
    follows it is known exactly, and a file's bytes past that buffer can go from the pipe to the
    file by splice (no copy through this process; a plain read where stdin is not a pipe)."""

    def __init__(self, fd):
        self.fd, self.buf = fd, bytearray()
        self.splice = getattr(os, "splice", None)

    def readline(self):
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line = bytes(self.buf[: i + 1])
                del self.buf[: i + 1]
                return line
            data = os.read(self.fd, 1 << 16)
            if not data:
                line = bytes(self.buf)
                self.buf.clear()
                return line
            self.buf += data

    def copy(self, out, left, view, h=None):
        """Exactly `left` bytes of the stream into descriptor `out`, through `h` when given."""
        take = min(len(self.buf), left)
        if take:
            chunk = bytes(self.buf[:take])
            del self.buf[:take]
            if h is not None:
                h.update(chunk)
            _write_all(out, memoryview(chunk))
            left -= take
        while left:
            n = min(CHUNK, left)
            if h is None and self.splice is not None:
                try:
                    n = self.splice(self.fd, out, n)
                except OSError as exc:
                    if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                        raise
                    self.splice = None  # stdin is not a pipe (or the file system says no): read
                    continue
            else:
                n = os.readv(self.fd, [view[:n]])
                if n:
                    if h is not None:
                        h.update(view[:n])
                    _write_all(out, view[:n])
            if not n:
                raise EOFError("stream ended")
            left -= n


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data) :]
