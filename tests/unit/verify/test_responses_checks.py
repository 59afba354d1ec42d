"""ResponsesStream's judgement of what a stream carried (the stream itself is read by
clients.stream.watch, tested with real sockets in tests/server)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from sparkctl.clients.stream import Timed
from sparkctl.verify import responses_checks
from sparkctl.verify.base import CheckFailed, Context


def _stream(deltas: int, output_tokens: int) -> Timed:
    events = [NS(type="response.created")]
    events += [NS(type="response.output_text.delta", delta="7") for _ in range(deltas)]
    usage = {"input_tokens": 5, "output_tokens": output_tokens}
    events.append(NS(type="response.completed", response={"usage": usage}))
    return Timed(arrivals=[(0.01 * i, e) for i, e in enumerate(events)], end_s=0.1)


def _run(monkeypatch: pytest.MonkeyPatch, *streams: Timed) -> tuple[object, int]:
    calls = []

    def drain(ctx, open_stream, is_token):  # noqa: ANN001, ARG001 - drain's signature
        calls.append(1)
        return streams[len(calls) - 1]

    monkeypatch.setattr(responses_checks, "drain", drain)
    try:
        return responses_checks.responses_stream(Context(client=None, model="m")), len(calls)
    except CheckFailed as failed:
        return failed, len(calls)


def test_a_model_that_stopped_before_any_text_is_asked_once_more(monkeypatch) -> None:
    passed, calls = _run(monkeypatch, _stream(0, 0), _stream(3, 3))
    assert calls == 2 and "3 text deltas" in passed.summary


def test_a_server_that_generated_tokens_without_deltas_fails_at_once(monkeypatch) -> None:
    failed, calls = _run(monkeypatch, _stream(0, 4), _stream(3, 3))
    assert calls == 1 and isinstance(failed, CheckFailed)
    assert "4 output tokens in response.completed" in str(failed)
    assert "response.created, response.completed" in str(failed)


def test_twice_no_text_is_a_failure_that_says_so(monkeypatch) -> None:
    failed, calls = _run(monkeypatch, _stream(0, 0), _stream(0, 0))
    assert calls == 2 and isinstance(failed, CheckFailed)
    assert "0 output tokens" in str(failed)
