"""sparkctl.clients.stream: which limit fires when (a fake clock for the long cases), the watcher
on real in-process streams (a stall, a whole-request limit, a cut), and the burst signature."""

from __future__ import annotations

import time

import pytest

from sparkctl.clients.stream import (
    Limits,
    StreamCut,
    TimedOut,
    burst,
    median_gap,
    next_limit,
    repeats,
    watch,
)


def _fired(limits: Limits, arrivals: list[float], tokens_from: int = 0) -> str | None:
    """Replay event arrival times (seconds from the request) against the limits the watcher
    applies before each event; the first limit an event misses, or None."""
    first = last = None
    for i, at in enumerate(arrivals):
        limit, which = next_limit(limits, 0.0, first, last)
        if at > limit:
            return which
        if first is None and i >= tokens_from:
            first = at
        if first is not None:
            last = at
    return None


def test_defaults_never_fail_a_slow_healthy_stream() -> None:
    # 2 s before the first token, then a token every 2 s for 70 s (35 tokens): passes by default
    slow = [2.0 + 2.0 * i for i in range(36)]
    assert _fired(Limits(), slow) is None
    # ...and the old rule (one 60 s clock for the whole request) would have failed it
    assert _fired(Limits(request_s=60.0), slow) == "request"
    # a long prefill (two minutes) before a slow stream passes too
    assert _fired(Limits(), [120.0 + 2.0 * i for i in range(40)]) is None


def test_each_limit_fires_on_its_own_case() -> None:
    limits = Limits(first_token_s=10.0, stall_s=3.0)
    assert _fired(limits, [11.0]) == "first-token"  # nothing before the first token for 11 s
    assert _fired(limits, [1.0, 2.0, 6.0]) == "stall"  # 4 s of silence mid-stream
    # events before the first token (a role chunk) do not start the stall clock
    assert _fired(limits, [0.1, 8.0, 9.0], tokens_from=1) is None
    assert _fired(Limits(first_token_s=10.0, stall_s=3.0, request_s=5.0), [1.0, 2.0, 4.0, 5.5]) == "request"


class _FakeStream:
    """An SDK-like stream: a context manager that yields events after the given delays."""

    def __init__(self, delays: list[float], error: BaseException | None = None) -> None:
        self.delays, self.error, self.closed = delays, error, False

    def __enter__(self) -> _FakeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True

    def __iter__(self):  # noqa: ANN204
        for i, delay in enumerate(self.delays):
            time.sleep(delay)
            yield f"token {i}"
        if self.error is not None:
            raise self.error


def _watch(stream: _FakeStream, limits: Limits):  # noqa: ANN202
    return watch(lambda socket_s: stream, limits, lambda event: True)


def test_watch_times_every_event_and_names_the_stall() -> None:
    timed = _watch(_FakeStream([0.0, 0.01, 0.01]), Limits(first_token_s=5, stall_s=5))
    assert timed.events == ["token 0", "token 1", "token 2"]
    times = [at for at, _ in timed.arrivals]
    assert times == sorted(times) and timed.end_s >= times[-1]
    stream = _FakeStream([0.0, 5.0])
    with pytest.raises(TimedOut, match="stalled: no event for --stall-timeout 0.2s after 1 events") as exc:
        _watch(stream, Limits(first_token_s=5, stall_s=0.2))
    assert exc.value.which == "stall" and stream.closed


def test_watch_names_the_first_token_and_whole_request_limits() -> None:
    with pytest.raises(TimedOut, match="no first token within --first-token-timeout 0.2s"):
        _watch(_FakeStream([5.0]), Limits(first_token_s=0.2, stall_s=5))
    # a healthy stream that goes on longer than the whole-request limit: named as such
    with pytest.raises(TimedOut, match=r"ran past --timeout 0.3s \(the whole-request limit\)") as exc:
        _watch(_FakeStream([0.1] * 20), Limits(first_token_s=5, stall_s=5, request_s=0.3))
    assert exc.value.which == "request" and "stalled" not in str(exc.value)


def test_a_connection_error_after_the_stream_began_is_a_cut() -> None:
    import httpx2
    import openai

    request = httpx2.Request("POST", "http://127.0.0.1:1/v1/chat/completions")
    error = openai.APIConnectionError(request=request)
    error.__cause__ = httpx2.RemoteProtocolError("peer closed connection")
    with pytest.raises(StreamCut, match="cut mid-way after 2 events .*peer closed connection"):
        _watch(_FakeStream([0.0, 0.0], error), Limits())

    def refused(socket_s: float) -> None:  # before any stream: the error as it is
        raise openai.APIConnectionError(request=request)

    with pytest.raises(openai.APIConnectionError):
        watch(refused, Limits(), lambda event: True)


def test_burst_signature() -> None:
    # 16 tokens back to back 3.8 s after the request: buffered
    assert "arrived in one burst 3.80s after the request" in burst(16, 3.8, 0.0003, 0.00002)
    assert burst(16, 3.8, 0.005, 0.0)  # a buffered body that came in two reads
    assert burst(16, 0.03, 1.2, 0.07) is None  # a healthy stream: text over its whole life
    assert burst(8, 5.0, 0.07, 0.01) is None  # long prefill, short reply, real gaps
    assert burst(4, 3.8, 0.0, 0.0) is None  # too few tokens to tell
    assert burst(64, 0.3, 6.0, 0.0) is None  # coalesced events, but spread over the request
    assert median_gap([0.0, 0.0, 0.0, 0.5]) == 0.0 and median_gap([1.0]) == 0.0


def test_repeated_deltas() -> None:
    assert repeats(30, 16) == "30 events with text for 16 tokens: the stream repeats deltas"
    assert repeats(16, 16) is None and repeats(5, 16) is None  # packing: fewer events than tokens
