"""Move a byte stream from a source to a sink with the read and the write overlapped.

Reading (Docker API socket, a source node's pipe) and writing (the peer's SSH channel) both
release the GIL, so a reader thread plus a small bounded queue keeps both links busy instead of
alternating between them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable

DEPTH = 8  # chunks in flight (~8-16 MiB): enough to ride out hiccups, little memory


def pump(chunks: Iterable[bytes], write: Callable[[bytes], object], on_bytes: Callable[[int], None]) -> int:
    """Write every chunk in order; returns the byte count. Errors on either side are raised here."""
    q: queue.Queue = queue.Queue(maxsize=DEPTH)
    stop = threading.Event()
    _END = object()

    def read() -> None:
        try:
            for chunk in chunks:
                if stop.is_set():
                    return
                q.put(chunk)
            q.put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the writer, which raises it
            q.put(exc)

    reader = threading.Thread(target=read, name="sparkctl-pump", daemon=True)
    reader.start()
    total = 0
    try:
        while True:
            item = q.get()
            if item is _END:
                break
            if isinstance(item, BaseException):
                raise item
            write(item)
            total += len(item)
            on_bytes(len(item))
    finally:
        stop.set()
        while reader.is_alive():  # unblock a reader waiting on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                reader.join(0.05)
    return total


def read_chunks(read: Callable[[int], bytes], size: int) -> Iterable[bytes]:
    """Chunks from a file-like `read` until EOF."""
    while True:
        chunk = read(size)
        if not chunk:
            return
        yield chunk
