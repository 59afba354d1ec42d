"""What a bench run found: each workload's samples and their spreads, and the whole run (what
`report`, `chart` and `--json` read)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkctl.benchmark.measure import Sample
from sparkctl.benchmark.stats import Spread, spread
from sparkctl.benchmark.workloads import Workload
from sparkctl.clients.stream import Limits

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

    def bursts(self) -> list[str]:
        """Why each stream that arrived in one burst has no per-stream rate."""
        return [x.burst for x in self.samples if x.burst]

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
            "burst_streams": len(self.bursts()),  # streams with no per-stream rate (see samples)
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
    context_source: str | None = None  # server (max_model_len), given (--context), assumed
    skipped: list[dict] = field(default_factory=list)  # {"name", "reason"}: workloads not run
    warnings: list[str] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)

    def to_json(self) -> dict:
        return {
            "sparkctl_bench": 3,
            "url": self.url,
            "model": self.model,
            "mode": self.mode,
            "config_hash": self.config_hash,
            "reps": self.reps,
            "started_at": self.started_at,
            "context": self.context,
            "context_source": self.context_source,
            "limits": self.limits.to_json(),
            "notes": self.notes,
            "warnings": self.warnings,
            "skipped": self.skipped,
            "workloads": [w.to_json() for w in self.workloads],
        }
