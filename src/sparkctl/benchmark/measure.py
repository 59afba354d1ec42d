"""One streamed chat request, timed event by event (sparkctl.clients.stream). Token counts come from
the server's `usage`, never chunks: speculative decoding (DFlash) packs several tokens into one
SSE event. A stream whose text arrived in one burst gives no decode rate (see `Sample.burst`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sparkctl.benchmark.workloads import Workload
from sparkctl.clients.stream import Limits, burst, max_gap, median_gap, repeats, text_times, watch
from sparkctl.errors import SparkctlError


class BenchRequestError(SparkctlError):
    """A request answered, but not with something a rate can be computed from."""


@dataclass(frozen=True)
class Usage:
    """The stream's `usage` chunk: the server's own token counts."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None  # None: the server does not report it


def _usage(doc: dict) -> Usage:
    details = doc.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(int(doc.get("prompt_tokens") or 0), int(doc.get("completion_tokens") or 0), cached)


@dataclass(frozen=True)
class Sample:
    workload: str
    rep: int
    stream: int  # index within a concurrent batch
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None  # None: the server does not report it
    ttft_s: float  # request sent -> first generated text (content or reasoning)
    e2e_s: float  # request sent -> stream finished
    text_events: int  # SSE events that carried text (for contrast with completion_tokens)
    finish_reason: str | None
    reasoning_events: int = 0  # events that carried reasoning (the thinking workload needs some)
    max_gap_s: float = 0.0  # longest silence between two text events
    median_gap_s: float | None = None  # the typical one (None: not recorded)
    text_span_s: float | None = None  # first text event -> last (None: not recorded)

    @property
    def burst(self) -> str | None:
        """Why this stream's text came in one burst (buffered on the way), or None: such a
        stream has no per-stream decode rate, ITL or prefill rate to report."""
        gap = self.max_gap_s if self.median_gap_s is None else self.median_gap_s
        span = self.e2e_s - self.ttft_s if self.text_span_s is None else self.text_span_s
        return burst(self.completion_tokens, self.ttft_s, span, gap)

    @property
    def decode_tps(self) -> float | None:
        """Tokens/s after the first token: (n - 1) / (e2e - ttft)."""
        if self.burst:
            return None
        gen = self.e2e_s - self.ttft_s
        return (self.completion_tokens - 1) / gen if self.completion_tokens > 1 and gen > 0 else None

    @property
    def itl_s(self) -> float | None:
        """Mean inter-token latency of this request (time per output token after the first)."""
        tps = self.decode_tps
        return 1.0 / tps if tps else None

    @property
    def prefill_tps(self) -> float | None:
        """Uncached prompt tokens per second of TTFT."""
        new = self.prompt_tokens - (self.cached_tokens or 0)
        if self.burst:  # its TTFT is the time to the burst: decoding included
            return None
        return new / self.ttft_s if self.ttft_s > 0 and new > 0 else None

    def to_json(self) -> dict:
        derived = {
            "decode_tps": self.decode_tps,
            "itl_s": self.itl_s,
            "prefill_tps": self.prefill_tps,
            "burst": self.burst,
        }
        return {**asdict(self), **derived}


def request_kwargs(model: str, workload: Workload, rep: int) -> dict[str, Any]:
    """The exact chat request `bench` sends (also used by tests to replay it)."""
    return dict(
        model=model,
        messages=workload.messages(rep),
        max_tokens=workload.max_tokens,
        temperature=0.0,  # greedy: the same request generates the same tokens on every run
        extra_body={"chat_template_kwargs": {"enable_thinking": workload.thinking}},
    )


def _text_of(delta: dict) -> tuple[bool, bool, bool]:
    """(carries generated text of any kind, carries real reasoning, carries visible text).
    Whitespace counts as a token for TTFT but not as reasoning: some parsers emit the newlines
    of an empty think block."""
    thought = _str(delta.get("reasoning_content")) or _str(delta.get("reasoning"))
    content = _str(delta.get("content"))
    tools = delta.get("tool_calls")
    visible = bool(content.strip() or thought.strip() or tools)
    return (
        bool(content or thought or tools),
        bool(thought.strip()) or "<think>" in content,
        visible,
    )


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _choices(chunk: Any) -> list[dict]:
    got = chunk.get("choices") if isinstance(chunk, dict) else None
    return [c for c in got if isinstance(c, dict)] if isinstance(got, list) else []


def _delta(choice: dict) -> dict:
    delta = choice.get("delta")
    return delta if isinstance(delta, dict) else {}


def _has_text(chunk: Any) -> bool:
    return any(_text_of(_delta(ch))[0] for ch in _choices(chunk))


def _open_stream(client: Any, kwargs: dict[str, Any], socket_s: float) -> Any:
    """The SDK's stream of the chat request with each chunk left as the JSON object the server sent:
    the SDK's typed model per chunk costs ~250 us of CPU, ~6x a plain client's whole cost per token
    (bench/client_cost.py), and on a host where the engine is CPU-bound that CPU is the engine's.
    The SDK still sends, times out and wraps transport errors as it does for `create`."""
    import openai

    body = {k: v for k, v in kwargs.items() if k != "extra_body"} | kwargs.get("extra_body", {})
    body |= {"stream": True, "stream_options": {"include_usage": True}}
    return client.post(
        "/chat/completions",
        body=body,
        cast_to=object,
        options={"timeout": socket_s},
        stream=True,
        stream_cls=openai.Stream[object],
    )


def stream_once(
    client: Any, model: str, workload: Workload, rep: int, stream_idx: int = 0, limits: Limits | None = None
) -> Sample:
    """Raises BenchRequestError when no text or no usage came back (no made-up TTFT), or when the
    stream repeats deltas; TimedOut/StreamCut from the watcher."""
    kwargs = request_kwargs(model, workload, rep)
    timed = watch(lambda socket_s: _open_stream(client, kwargs, socket_s), limits or Limits(), _has_text)
    events = reasoning = visible = 0
    usage = finish = None
    for chunk in timed.events:
        got = chunk.get("usage") if isinstance(chunk, dict) else None
        usage = _usage(got) if isinstance(got, dict) else usage
        for ch in _choices(chunk):
            text, thought, seen = _text_of(_delta(ch))
            events += text
            reasoning += text and thought
            visible += seen
            finish = ch.get("finish_reason") or finish
    times = text_times(timed, _has_text)
    where = f"workload {workload.name}"
    if usage is None:
        raise BenchRequestError(
            f"{where}: the server sent no usage on the stream (stream_options.include_usage)",
            fix="bench needs exact token counts; run `sparkctl verify --only ChatStream`",
        )
    if not times:
        raise BenchRequestError(
            f"{where}: a request returned no text ({usage.completion_tokens} completion tokens, "
            f"finish_reason={finish}): no TTFT to measure",
            fix="run `sparkctl verify --only Chat` to see what the server answers",
        )
    if why := repeats(visible, usage.completion_tokens):
        raise BenchRequestError(
            f"{where}: {why}",
            fix="the server (or a proxy) sends each delta more than once; run `sparkctl verify --only ChatStream`",
        )
    return Sample(
        workload=workload.name,
        rep=rep,
        stream=stream_idx,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_tokens=usage.cached_tokens,
        ttft_s=times[0],
        e2e_s=timed.end_s,
        text_events=events,
        finish_reason=finish,
        reasoning_events=reasoning,
        max_gap_s=max_gap(times),
        median_gap_s=median_gap(times),
        text_span_s=times[-1] - times[0],
    )
