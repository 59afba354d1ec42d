"""Run workloads for a bounded number of repetitions and time; optionally across two modes."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sparkctl.benchmark.measure import Sample, stream_once
from sparkctl.benchmark.stats import Spread, spread
from sparkctl.benchmark.workloads import Workload


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
        return {
            "ttft_s": spread([x.ttft_s for x in s]),
            "decode_tps": spread([x.decode_tps for x in s]),
            "prefill_tps": spread([x.prefill_tps for x in s]),
            "e2e_s": spread([x.e2e_s for x in s]),
            "completion_tokens": spread([x.completion_tokens for x in s]),
            "prompt_tokens": spread([x.prompt_tokens for x in s]),
            "cached_tokens": spread([x.cached_tokens for x in s]),
            "aggregate_tps": spread(agg),  # all streams' tokens / batch wall time
        }

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
            "samples": [x.to_json() for x in self.samples],
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

    def to_json(self) -> dict:
        return {
            "sparkctl_bench": 1,
            "url": self.url,
            "model": self.model,
            "mode": self.mode,
            "config_hash": self.config_hash,
            "reps": self.reps,
            "started_at": self.started_at,
            "workloads": [w.to_json() for w in self.workloads],
        }


def run_workload(
    client: Any, model: str, w: Workload, reps: int, deadline: float, warmup: bool = True
) -> WorkloadResult:
    result = WorkloadResult(w)
    if warmup:  # first request of a workload pays one-off costs (graph capture, cold cache)
        stream_once(client, model, w, rep=-1)
    with ThreadPoolExecutor(max_workers=w.concurrency) as pool:
        for rep in range(reps):
            if time.monotonic() > deadline:
                result.truncated = f"time budget reached after {rep} of {reps} repetitions"
                break
            t0 = time.perf_counter()
            futures = [pool.submit(stream_once, client, model, w, rep, i) for i in range(w.concurrency)]
            result.samples.extend(f.result() for f in futures)
            result.batch_walls.append(time.perf_counter() - t0)
    return result


def run_bench(
    url: str,
    model: str,
    workloads: list[Workload],
    *,
    reps: int = 3,
    budget_s: float = 600.0,
    timeout_s: float = 300.0,
    mode: str | None = None,
    config_hash: str | None = None,
    on_workload: Callable[[WorkloadResult], None] | None = None,
) -> BenchResult:
    """Every workload gets `reps` repetitions unless the whole run passes `budget_s`."""
    import datetime

    import openai

    from sparkctl.verify.client import make_client, unreachable

    client = make_client(url, timeout_s)
    try:
        client.models.list()
    except openai.APIConnectionError as exc:
        raise unreachable(url, exc) from None
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    deadline = time.monotonic() + budget_s
    results = []
    for w in workloads:
        try:
            res = run_workload(client, model, w, reps, deadline)
        except openai.OpenAIError as exc:
            from sparkctl.errors import SparkctlError
            from sparkctl.verify.client import describe_error

            raise SparkctlError(
                f"workload {w.name}: {describe_error(exc)}",
                fix="run `sparkctl verify` to see which API feature fails",
            ) from None
        results.append(res)
        if on_workload:
            on_workload(res)
    return BenchResult(url, model, mode, config_hash, reps, started, results)


def compare(
    modes: tuple[str, str], switch: Callable[[str], None], run: Callable[[str], BenchResult]
) -> list[BenchResult]:
    """Switch to each mode in turn and run the same bench there (`switch` is the lifecycle's)."""
    out = []
    for mode in modes:
        switch(mode)
        out.append(run(mode))
    return out
