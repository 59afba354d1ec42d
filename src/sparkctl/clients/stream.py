"""Streams timed event by event, under three limits that each mean one thing, for `verify` and
`bench`:

- first token: request sent -> the first event that carries generated text (prefill, queueing);
  a non-streaming request sends nothing until it is done, so for it this bounds the whole reply;
- stall: the longest silence between two events after the first token (a stream that stops);
- request (optional, off by default): the whole request, wall clock.

The timeout that fires is named in its message. The arrival time of every event is kept, so a
stream whose text arrives in one burst at the end (a buffering proxy, a server that does not
flush) is recognised instead of yielding a made-up decode rate.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FIRST_TOKEN_S = 180.0  # a long prompt's prefill on a large model, queued behind others
STALL_S = 60.0  # no event for this long after the first token: the stream has stopped
PROBE_S = 5.0  # GET /v1/models and other metadata: no generation, a short limit of its own
SOCKET_SLACK_S = 5.0  # the SDK's own read timeout stays behind the watcher's limits

# The burst signature: many tokens, text events back to back, and all of it at the end.
BURST_MIN_TOKENS = 8
BURST_GAP_S = 0.001  # 1 ms: no model decodes one stream at 1000 tok/s on this hardware
BURST_TAIL = 0.1  # all the text within a tenth of the time to its end


@dataclass(frozen=True)
class Limits:
    first_token_s: float = FIRST_TOKEN_S
    stall_s: float = STALL_S
    request_s: float | None = None

    @property
    def reply_s(self) -> float:
        """The limit of a non-streaming request (its reply is its first and only event)."""
        return min(self.first_token_s, self.request_s or self.first_token_s)

    @property
    def socket_s(self) -> float:
        """The SDK's read timeout for a stream: a backstop behind the watcher's own limits."""
        return max(self.first_token_s, self.stall_s, self.request_s or 0.0) + SOCKET_SLACK_S

    def reply_timeout(self) -> str:
        """What a non-streaming request that timed out ran past."""
        if self.request_s and self.request_s < self.first_token_s:
            return f"no reply within --timeout {self.request_s:g}s (the whole-request limit)"
        return (
            f"no reply within --first-token-timeout {self.first_token_s:g}s "
            "(a non-streaming request answers only when done)"
        )

    def to_json(self) -> dict:
        return {"first_token_s": self.first_token_s, "stall_s": self.stall_s, "request_s": self.request_s}


class Stalled(Exception):
    """A request ran past one of its time limits (Limits)."""


class TimedOut(Stalled):
    """One of the limits fired: `which` is first-token, stall or request."""

    def __init__(self, which: str, message: str) -> None:
        super().__init__(message)
        self.which = which


class StreamCut(Exception):
    """The stream had begun and then broke off before its end."""

    fix = (
        "the server (or a proxy on the way) closed the stream before its end: read the server log "
        "(sparkctl logs) and the proxy's read/idle timeouts"
    )

    def __init__(self, events: int, cause: BaseException) -> None:
        why = getattr(cause, "__cause__", None) or cause
        super().__init__(f"the stream was cut mid-way after {events} events ({type(why).__name__}: {why})")


@dataclass
class Timed:
    arrivals: list[tuple[float, Any]]  # (seconds since the request was sent, event), in order
    end_s: float  # seconds until the stream ended

    @property
    def events(self) -> list[Any]:
        return [event for _, event in self.arrivals]


def _timeout(which: str, limits: Limits, events: int) -> TimedOut:
    if which == "request":
        msg = f"the request ran past --timeout {limits.request_s:g}s (the whole-request limit)"
        if events:
            msg += f"; it was still streaming ({events} events so far)"
        return TimedOut(which, msg)
    if which == "first-token":
        return TimedOut(which, f"no first token within --first-token-timeout {limits.first_token_s:g}s")
    return TimedOut(
        which, f"the stream stalled: no event for --stall-timeout {limits.stall_s:g}s after {events} events"
    )


def next_limit(limits: Limits, start: float, first: float | None, last: float | None) -> tuple[float, str]:
    """When the next event must arrive at the latest, and which limit says so: before the first
    token the first-token limit, after it the stall limit from the last event; the whole-request
    limit when it comes sooner."""
    if first is None or last is None:
        limit, which = start + limits.first_token_s, "first-token"
    else:
        limit, which = last + limits.stall_s, "stall"
    if limits.request_s and start + limits.request_s < limit:
        limit, which = start + limits.request_s, "request"
    return limit, which


def watch(open_stream: Callable[[float], Any], limits: Limits, is_token: Callable[[Any], bool]) -> Timed:
    """Open a stream (`open_stream(socket_timeout)` returns an SDK stream) and read it in a daemon
    thread, timing every event. Raises TimedOut (which limit fired), StreamCut (an error after the
    stream began), or whatever opening the stream raised (HTTP errors, refused connections)."""
    import openai

    q: queue.SimpleQueue = queue.SimpleQueue()
    held: dict[str, Any] = {}

    def produce() -> None:
        try:
            held["stream"] = stream = open_stream(limits.socket_s)
            read_at = _stamp_reads(stream)
            with stream:
                for event in stream:
                    q.put(("event", read_at[0] or time.perf_counter(), event))
            q.put(("end", time.perf_counter(), None))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            q.put(("error", time.perf_counter(), exc))

    start = time.perf_counter()
    threading.Thread(target=produce, daemon=True, name="sparkctl-stream").start()
    arrivals: list[tuple[float, Any]] = []
    first = last = None
    while True:
        limit, which = next_limit(limits, start, first, last)
        try:
            kind, at, item = q.get(timeout=max(0.0, limit - time.perf_counter()))
        except queue.Empty:
            _close(held)
            raise _timeout(which, limits, len(arrivals)) from None
        if kind == "end":
            return Timed(arrivals, at - start)
        if kind == "error":
            if isinstance(item, openai.APITimeoutError):  # the SDK's backstop: the watcher's limit
                raise _timeout(which, limits, len(arrivals)) from None
            if "stream" in held and _is_transport(item):
                raise StreamCut(len(arrivals), item) from None
            raise item
        arrivals.append((at - start, item))
        if first is None and is_token(item):
            first = at
        if first is not None:
            last = at


def _stamp_reads(stream: Any) -> list[float]:
    """An event's arrival is the network read that completed it, not the moment the SDK hands it
    over: events that came in one read (a buffered body) then share one time, whatever the
    parsing or thread switching costs. Wraps the SDK stream's `response.iter_bytes` (read
    lazily, on the first event); without it, the hand-over time is used."""
    read_at = [0.0]
    response = getattr(stream, "response", None)
    inner = getattr(response, "iter_bytes", None)
    if inner is None:
        return read_at

    def iter_bytes(*args: Any, **kwargs: Any) -> Any:
        for chunk in inner(*args, **kwargs):
            read_at[0] = time.perf_counter()
            yield chunk

    with contextlib.suppress(AttributeError, TypeError):
        response.iter_bytes = iter_bytes
    return read_at


def _is_transport(exc: BaseException) -> bool:
    """The SDK wraps every transport error (a reset, an incomplete body) in APIConnectionError."""
    import openai

    return isinstance(exc, openai.APIConnectionError)


def _close(held: dict) -> None:
    """Best effort: close the abandoned stream so its socket does not linger."""
    stream = held.get("stream")
    try:
        if stream is not None:
            stream.close()
    except Exception:  # noqa: BLE001 - the reader thread owns it; a failed close changes nothing
        pass


def repeats(solid_events: int, tokens: int) -> str | None:
    """More events with visible text than tokens generated: deltas sent twice (each token is
    at most one event; whitespace-only events do not count, reasoning parsers emit the newlines
    of an empty think block on their own)."""
    if solid_events <= tokens:
        return None
    return f"{solid_events} events with text for {tokens} tokens: the stream repeats deltas"


def text_times(timed: Timed, is_token: Callable[[Any], bool]) -> list[float]:
    return [at for at, event in timed.arrivals if is_token(event)]


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def max_gap(times: list[float]) -> float:
    return max(gaps(times), default=0.0)


def median_gap(times: list[float]) -> float:
    import statistics

    return statistics.median(gaps(times)) if len(times) > 1 else 0.0


def burst(tokens: int, ttft_s: float, span_s: float, median_gap_s: float) -> str | None:
    """Why a stream's text is not a measurement of decoding, or None. The signature: many tokens,
    text events back to back (their median gap below BURST_GAP_S: most came in the same network
    read as the one before), all within a span that is a sliver of the wait before it (a
    buffering proxy, a server that does not flush). The median, not the longest gap: a buffered
    body can come in two reads."""
    if tokens < BURST_MIN_TOKENS or median_gap_s >= BURST_GAP_S or span_s > BURST_TAIL * (ttft_s + span_s):
        return None
    return (
        f"its {tokens} tokens arrived in one burst {ttft_s:.2f}s after the request, within "
        f"{span_s * 1000:.1f} ms: the stream is buffered on the way (a proxy buffering, or a server "
        "that does not flush)"
    )
