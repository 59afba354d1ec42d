"""Run workloads for a bounded number of repetitions and time; optionally across two modes.

Bounds: --timeout per request (and per gap in a stream), --budget (no repetition starts after
it), --deadline (a hard end: requests still running are abandoned and the run stops with one line).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkctl.benchmark.measure import BenchRequestError, Sample, stream_once
from sparkctl.benchmark.stats import Spread, spread
from sparkctl.benchmark.workloads import Workload, sized
from sparkctl.errors import SparkctlError

STAT_KEYS = ("ttft_s", "itl_s", "decode_tps", "e2e_s", "prefill_tps", "completion_tokens", "prompt_tokens")


@dataclass
class WorkloadResult:
    workload: Workload
    samples: list[Sample] = field(default_factory=list)
    batch_walls: list[float] = field(default_factory=list)  # wall time of each rep (all streams)
    truncated: str | None = None  # why fewer reps ran than asked

    def stats(self) -> dict[str, Spread | None]:
        s = self.samples
        agg = [
            sum(x.completion_tokens for x in s if x.rep == rep) / wall
            for rep, wall in enumerate(self.batch_walls)
            if wall > 0
        ]
        out = {key: spread([getattr(x, key) for x in s]) for key in STAT_KEYS}
        out["cached_tokens"] = spread([x.cached_tokens for x in s])
        out["aggregate_tps"] = spread(agg)  # all streams' tokens / batch wall time: throughput
        return out

    def to_json(self) -> dict:
        w = self.workload
        return {
            "name": w.name,
            "kind": w.kind,
            "concurrency": w.concurrency,
            "max_tokens": w.max_tokens,
            "thinking": w.thinking,
            "prefix_words": w.prefix_words,
            "truncated": self.truncated,
            "stats": {k: (v.to_json() if v else None) for k, v in self.stats().items()},
            "samples": [x.to_json() for x in self.samples],  # the raw per-request records
        }


@dataclass
class BenchResult:
    url: str
    model: str
    mode: str | None
    config_hash: str | None
    reps: int
    started_at: str
    workloads: list[WorkloadResult]
    context: int | None = None  # tokens the prompts were sized to
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "sparkctl_bench": 2,
            "url": self.url,
            "model": self.model,
            "mode": self.mode,
            "config_hash": self.config_hash,
            "reps": self.reps,
            "started_at": self.started_at,
            "context": self.context,
            "notes": self.notes,
            "workloads": [w.to_json() for w in self.workloads],
        }


def _batch(fns: list[Callable[[], Sample]], until: float) -> list[Sample]:
    """Run the requests of one repetition at once, in daemon threads (abandoned at `until`)."""
    boxes: list[dict] = [{} for _ in fns]

    def target(fn: Callable[[], Sample], box: dict) -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    threads = [
        threading.Thread(target=target, args=(f, b), daemon=True) for f, b in zip(fns, boxes, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, until - time.monotonic()))
        if t.is_alive():
            raise SparkctlError(
                "--deadline reached while requests were running", fix="raise --deadline or --budget"
            )
    for b in boxes:
        if "error" in b:
            raise b["error"]
    return [b["value"] for b in boxes]


def request_error(w: Workload, exc: BaseException, timeout_s: float) -> SparkctlError:
    """One line for whatever a request raised."""
    import openai

    from sparkctl.verify.client import describe_error

    if isinstance(exc, openai.APITimeoutError | TimeoutError):
        return SparkctlError(
            f"workload {w.name}: no token for --timeout {timeout_s:g}s (the stream stalled)",
            fix="the engine is stalled or overloaded: read its log (sparkctl logs); raise --timeout if it is only slow",
        )
    if isinstance(exc, openai.OpenAIError):
        return SparkctlError(
            f"workload {w.name}: {describe_error(exc)}",
            fix="run `sparkctl verify` to see which API feature fails",
        )
    return SparkctlError(
        f"workload {w.name}: malformed reply ({type(exc).__name__}: {exc})",
        fix="the endpoint does not speak the OpenAI streaming format: run `sparkctl verify`",
    )


def run_workload(
    client: Any, model: str, w: Workload, reps: int, *, budget_until: float, until: float, timeout_s: float
) -> WorkloadResult:
    result = WorkloadResult(w)

    def one(rep: int, i: int) -> Callable[[], Sample]:
        return lambda: stream_once(client, model, w, rep, i, timeout_s)

    # The first request of a workload pays one-off costs (graph capture, cold cache): not counted.
    (warm,) = _batch([one(-1, 0)], until)
    if w.thinking and not warm.reasoning_events:
        raise BenchRequestError(
            f"workload {w.name}: thinking was on but the reply carries no reasoning",
            fix="start the server with a reasoning parser, or leave this workload out (-w ...)",
        )
    for rep in range(reps):
        if time.monotonic() > budget_until:
            result.truncated = f"--budget reached after {rep} of {reps} repetitions"
            break
        t0 = time.perf_counter()
        result.samples.extend(_batch([one(rep, i) for i in range(w.concurrency)], until))
        result.batch_walls.append(time.perf_counter() - t0)
    return result


def fit_prefix_words(
    client: Any, model: str, suite: list[Workload], context: int
) -> tuple[list[Workload], str | None]:
    """Cut the long prompts so prompt + max_tokens fits `context`, from one measured sample of
    this tokenizer's tokens per filler word."""
    from sparkctl.benchmark.workloads import filler

    longest = max((w for w in suite if w.prefix_words), key=lambda w: w.prefix_words, default=None)
    if longest is None:
        return suite, None
    probe_words = 200
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": filler(probe_words)}], max_tokens=1
    )
    per_word = r.usage.prompt_tokens / probe_words  # template overhead included: errs on the safe side
    fits = int((context - longest.max_tokens - 128) / per_word)
    if fits >= longest.prefix_words:
        return suite, None
    if fits < 50:
        raise SparkctlError(
            f"a {context}-token context leaves no room for the long prompts",
            fix="pass -w to skip prefill/long-prefix",
        )
    note = f"long prompts cut from {longest.prefix_words} to {fits} words to fit the {context}-token context"
    return sized(suite, fits), note


def run_bench(
    url: str,
    model: str,
    workloads: list[Workload],
    *,
    reps: int = 3,
    budget_s: float = 600.0,
    timeout_s: float = 60.0,
    deadline_s: float | None = None,
    context: int | None = None,
    api_key: str | None = None,
    mode: str | None = None,
    config_hash: str | None = None,
    on_workload: Callable[[WorkloadResult], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    started: float | None = None,
) -> BenchResult:
    """Every workload gets `reps` repetitions unless the run passes `budget_s`; nothing runs past
    `deadline_s`. The prompts fit the server's context (max_model_len when reported, else `context`)."""
    import datetime

    from sparkctl.verify.client import make_client, probe, probe_deadline
    from sparkctl.verify.deadline import TimeUp, bounded

    start = started or time.monotonic()  # `started`: when the command began
    until = start + (deadline_s if deadline_s is not None else budget_s + 10 * timeout_s)
    budget_until = start + budget_s
    try:
        info = bounded(lambda: probe(url, model, api_key, max(0.1, min(timeout_s, until - start))), until)
    except TimeUp:
        raise probe_deadline(url) from None
    import openai  # after the probe: on a loaded machine this import alone takes seconds

    client = make_client(url, timeout_s, api_key)
    ctx_tokens = info.max_model_len or context
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    result = BenchResult(url, model, mode, config_hash, reps, started, [], ctx_tokens)
    current = workloads[0]
    try:
        if ctx_tokens:
            workloads, note = bounded(lambda: fit_prefix_words(client, model, workloads, ctx_tokens), until)
            result.notes += [note] if note else []
            if note and on_note:
                on_note(note)
        for current in workloads:
            res = run_workload(
                client, model, current, reps, budget_until=budget_until, until=until, timeout_s=timeout_s
            )
            result.workloads.append(res)
            if on_workload:
                on_workload(res)
    except TimeUp:
        raise SparkctlError("--deadline reached while sizing the prompts", fix="raise --deadline") from None
    except (openai.OpenAIError, TimeoutError, ValueError) as exc:  # HTTP, stalls, malformed streams
        raise request_error(current, exc, timeout_s) from None
    return result


def compare(
    modes: tuple[str, str], switch: Callable[[str], None], run: Callable[[str], BenchResult]
) -> list[BenchResult]:
    """Switch to each mode in turn and run the same bench there (`switch` is the lifecycle's)."""
    out = []
    for mode in modes:
        switch(mode)
        out.append(run(mode))
    return out
