"""pump: ordered, counted, and failures on either side surface in the caller."""

from __future__ import annotations

import io

import pytest

from sparkctl.ship.pump import pump, read_chunks


def test_pump_keeps_order_and_counts() -> None:
    out = io.BytesIO()
    seen: list[int] = []
    chunks = [bytes([i]) * (i + 1) for i in range(50)]
    assert pump(iter(chunks), out.write, seen.append) == sum(map(len, chunks))
    assert out.getvalue() == b"".join(chunks) and seen == [len(c) for c in chunks]


def test_source_error_is_raised_in_the_caller() -> None:
    def broken():  # noqa: ANN202
        yield b"abc"
        raise ConnectionResetError("source went away")

    with pytest.raises(ConnectionResetError, match="source went away"):
        pump(broken(), io.BytesIO().write, lambda n: None)


def test_sink_error_stops_the_reader() -> None:
    produced: list[int] = []

    def endless():  # noqa: ANN202
        while True:
            produced.append(1)
            yield b"x" * 1024

    def sink(_: bytes) -> None:
        raise BrokenPipeError("peer closed")

    with pytest.raises(BrokenPipeError):
        pump(endless(), sink, lambda n: None)
    stopped_at = len(produced)
    assert stopped_at < 100  # the reader thread was stopped, not left producing


def test_read_chunks_until_eof() -> None:
    data = bytes(range(256)) * 100
    assert b"".join(read_chunks(io.BytesIO(data).read, 1000)) == data
