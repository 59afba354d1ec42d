"""SGLang's Prometheus `/metrics` (rank 0 of each group): parse one scrape, derive what `top` shows.

The metric names are SGLang 0.5.23's (sglang/srt/observability/metrics_collector.py); the list
with what each is used for is in docs/top.md. Counters (`*_total`) are differenced between two
scrapes to get rates; histograms give TTFT / inter-token latency percentiles over the interval
(bucket counts differenced), or over the engine's lifetime when nothing finished meanwhile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Gauges (one value per scheduler; several label sets are combined as noted in GAUGE_COMBINE).
RUNNING = "sglang:num_running_reqs"
QUEUED = "sglang:num_queue_reqs"
GEN_THROUGHPUT = "sglang:gen_throughput"
TOKEN_USAGE = "sglang:token_usage"
ACCEPT_LENGTH = "sglang:spec_accept_length"
ACCEPT_RATE = "sglang:spec_accept_rate"
CACHE_HIT_RATE = "sglang:cache_hit_rate"
MAX_TOKENS = "sglang:max_total_num_tokens"
# Counters (prometheus_client exposes them with the `_total` suffix).
PROMPT_TOKENS = "sglang:prompt_tokens_total"
GENERATION_TOKENS = "sglang:generation_tokens_total"
REQUESTS = "sglang:num_requests_total"
ABORTED = "sglang:num_aborted_requests_total"
# Histograms.
TTFT = "sglang:time_to_first_token_seconds"
ITL = "sglang:inter_token_latency_seconds"
E2E = "sglang:e2e_request_latency_seconds"

GAUGES = (
    RUNNING,
    QUEUED,
    GEN_THROUGHPUT,
    TOKEN_USAGE,
    ACCEPT_LENGTH,
    ACCEPT_RATE,
    CACHE_HIT_RATE,
    MAX_TOKENS,
)
COUNTERS = (PROMPT_TOKENS, GENERATION_TOKENS, REQUESTS, ABORTED)
HISTOGRAMS = (TTFT, ITL, E2E)
# How label sets of one gauge combine (dp ranks, priorities): counts add up, ratios take the worst
# (usage) or the mean (acceptance).
GAUGE_COMBINE = {
    RUNNING: "sum",
    QUEUED: "sum",
    GEN_THROUGHPUT: "sum",
    TOKEN_USAGE: "max",
    ACCEPT_LENGTH: "mean",
    ACCEPT_RATE: "mean",
    CACHE_HIT_RATE: "mean",
    MAX_TOKENS: "sum",
}
QUANTILES = (0.5, 0.9, 0.99)


class MetricsParseError(ValueError):
    """The text is not Prometheus exposition format."""


@dataclass(frozen=True)
class Histogram:
    """Cumulative buckets (upper bound, count), the last one +Inf; label sets summed."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    total: float

    def minus(self, older: Histogram) -> Histogram:
        """Observations made since `older` (same buckets; a reset engine gives self)."""
        if [b for b, _ in older.buckets] != [b for b, _ in self.buckets] or older.count > self.count:
            return self
        diff = tuple((b, c - o) for (b, c), (_, o) in zip(self.buckets, older.buckets, strict=True))
        return Histogram(diff, self.count - older.count, self.total - older.total)

    def quantile(self, q: float) -> float | None:
        """Prometheus' histogram_quantile: linear inside the bucket; None without observations."""
        if self.count <= 0 or not self.buckets:
            return None
        rank, lower, below = q * self.count, 0.0, 0.0
        for upper, cum in self.buckets:
            if cum >= rank:
                if math.isinf(upper):
                    return lower  # beyond the last finite bound: that bound is all we know
                if cum == below:
                    return upper
                return lower + (upper - lower) * (rank - below) / (cum - below)
            lower, below = upper, cum
        return lower


@dataclass(frozen=True)
class Scrape:
    """One `/metrics` text, reduced to the series `top` uses; `t` is time.monotonic() of the scrape."""

    t: float
    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)


def _combine(values: list[float], how: str) -> float:
    if how == "sum":
        return sum(values)
    if how == "max":
        return max(values)
    return sum(values) / len(values)


def parse_metrics(text: str, t: float = 0.0) -> Scrape:
    """Parse SGLang's exposition text (prometheus-client's own parser, imported here: CLI start)."""
    from prometheus_client.parser import text_string_to_metric_families

    gauges: dict[str, list[float]] = {}
    counters: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, dict[str, float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in GAUGE_COMBINE:
                    gauges.setdefault(s.name, []).append(s.value)
                elif s.name in COUNTERS:
                    counters[s.name] = counters.get(s.name, 0.0) + s.value
                elif s.name.endswith("_bucket") and s.name[: -len("_bucket")] in HISTOGRAMS:
                    le = float(s.labels["le"])
                    per = buckets.setdefault(s.name[: -len("_bucket")], {})
                    per[le] = per.get(le, 0.0) + s.value
                else:
                    base, _, kind = s.name.rpartition("_")
                    if base in HISTOGRAMS and kind in ("count", "sum"):
                        per_kind = sums.setdefault(base, {})
                        per_kind[kind] = per_kind.get(kind, 0.0) + s.value
    except (ValueError, KeyError, TypeError) as exc:
        raise MetricsParseError(f"not Prometheus text: {exc}") from exc
    hists = {
        name: Histogram(
            tuple(sorted(b.items())), sums.get(name, {}).get("count", 0.0), sums.get(name, {}).get("sum", 0.0)
        )
        for name, b in buckets.items()
    }
    return Scrape(
        t=t,
        gauges={k: _combine(v, GAUGE_COMBINE[k]) for k, v in gauges.items()},
        counters=counters,
        histograms=hists,
    )


@dataclass(frozen=True)
class EngineStats:
    """What `top` shows for one group's engine. None: the engine does not export it (yet)."""

    running: float | None = None
    queued: float | None = None
    prompt_tok_s: float | None = None
    gen_tok_s: float | None = None
    req_s: float | None = None
    token_usage: float | None = None  # 0..1 of the KV-cache token pool
    accept_length: float | None = None
    accept_rate: float | None = None
    cache_hit_rate: float | None = None
    ttft_s: dict[str, float | None] = field(default_factory=dict)  # {"p50": .., "p90": .., "p99": ..}
    itl_s: dict[str, float | None] = field(default_factory=dict)
    latency_window: str = "lifetime"  # "interval" when the percentiles cover only the last interval
    requests_total: float | None = None

    def to_json(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _rate(now: Scrape, before: Scrape | None, name: str) -> float | None:
    if before is None or name not in now.counters or name not in before.counters:
        return None
    dt, dv = now.t - before.t, now.counters[name] - before.counters[name]
    if dt <= 0 or dv < 0:  # same instant, or the engine restarted (counters reset)
        return None
    return dv / dt


def _percentiles(h: Histogram | None) -> dict[str, float | None]:
    if h is None:
        return {}
    return {f"p{round(q * 100)}": h.quantile(q) for q in QUANTILES}


def engine_stats(now: Scrape, before: Scrape | None = None) -> EngineStats:
    """Derive the numbers; rates need `before` (a previous scrape of the same engine)."""
    g = now.gauges
    gen = _rate(now, before, GENERATION_TOKENS)
    ttft, itl = now.histograms.get(TTFT), now.histograms.get(ITL)
    window = "lifetime"
    if before is not None and ttft is not None and TTFT in before.histograms:
        recent = ttft.minus(before.histograms[TTFT])
        if recent.count > 0 and recent is not ttft:
            window, ttft = "interval", recent
            if itl is not None and ITL in before.histograms:
                itl = itl.minus(before.histograms[ITL])
    return EngineStats(
        running=g.get(RUNNING),
        queued=g.get(QUEUED),
        prompt_tok_s=_rate(now, before, PROMPT_TOKENS),
        gen_tok_s=gen if gen is not None else g.get(GEN_THROUGHPUT),  # SGLang's own gauge: one scrape
        req_s=_rate(now, before, REQUESTS),
        token_usage=g.get(TOKEN_USAGE),
        accept_length=g.get(ACCEPT_LENGTH),
        accept_rate=g.get(ACCEPT_RATE),
        cache_hit_rate=g.get(CACHE_HIT_RATE),
        ttft_s=_percentiles(ttft),
        itl_s=_percentiles(itl),
        latency_window=window,
        requests_total=now.counters.get(REQUESTS),
    )
