"""One streamed chat request, timed. Token counts come from the server's `usage`, never chunks:
speculative decoding (DFlash) packs several tokens into one SSE event."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from sparkctl.benchmark.workloads import Workload


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

    @property
    def decode_tps(self) -> float | None:
        """Tokens/s after the first token: (n - 1) / (e2e - ttft)."""
        gen = self.e2e_s - self.ttft_s
        return (self.completion_tokens - 1) / gen if self.completion_tokens > 1 and gen > 0 else None

    @property
    def prefill_tps(self) -> float | None:
        """Uncached prompt tokens per second of TTFT."""
        new = self.prompt_tokens - (self.cached_tokens or 0)
        return new / self.ttft_s if self.ttft_s > 0 and new > 0 else None

    def to_json(self) -> dict:
        return {**asdict(self), "decode_tps": self.decode_tps, "prefill_tps": self.prefill_tps}


def request_kwargs(model: str, workload: Workload, rep: int) -> dict[str, Any]:
    """The exact chat request `bench` sends (also used by tests to replay it)."""
    return dict(
        model=model,
        messages=workload.messages(rep),
        max_tokens=workload.max_tokens,
        temperature=0.0,  # greedy: the same request generates the same tokens on every run
        extra_body={"chat_template_kwargs": {"enable_thinking": workload.thinking}},
    )


def stream_once(client: Any, model: str, workload: Workload, rep: int, stream_idx: int = 0) -> Sample:
    kwargs = request_kwargs(model, workload, rep)
    start = time.perf_counter()
    first: float | None = None
    events = 0
    usage = None
    finish = None
    stream = client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    with stream:
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for ch in chunk.choices:
                delta = ch.delta
                extra = getattr(delta, "model_extra", None) or {}
                if delta.content or extra.get("reasoning_content") or delta.tool_calls:
                    events += 1
                    if first is None:
                        first = time.perf_counter()
                finish = ch.finish_reason or finish
    end = time.perf_counter()
    if usage is None:
        from sparkctl.errors import SparkctlError

        raise SparkctlError(
            f"{workload.name}: the server sent no usage on the stream (stream_options.include_usage)",
            fix="bench needs exact token counts; run `sparkctl verify` (check ChatStreamUsage)",
        )
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Sample(
        workload=workload.name,
        rep=rep,
        stream=stream_idx,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_tokens=cached,
        ttft_s=(first if first is not None else end) - start,
        e2e_s=end - start,
        text_events=events,
        finish_reason=finish,
    )
