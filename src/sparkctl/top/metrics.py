"""An engine's Prometheus `/metrics` (rank 0 of each group): parse one scrape, derive what `top` shows.

The metric names are the engine's (`Engine.metrics`: each engine's are listed with what each
is used for in docs/top.md); a role the engine does not export stays None. Counters (`*_total`) are differenced between two
scrapes to get rates; histograms give TTFT / inter-token latency percentiles over the interval
(bucket counts differenced), or over the engine's lifetime when nothing finished meanwhile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkctl.engines.capabilities import MetricNames


def _names(names: MetricNames | None) -> MetricNames:
    if names is not None:
        return names
    from sparkctl.engines import get_engine
    from sparkctl.engines.capabilities import MetricNames

    return get_engine().metrics or MetricNames()  # the default engine's


# How label sets of one gauge combine (dp ranks, priorities): counts add up, ratios take the worst
# (usage) or the mean (acceptance).
COMBINE = {
    "running": "sum",
    "queued": "sum",
    "gen_throughput": "sum",
    "token_usage": "max",
    "accept_length": "mean",
    "accept_rate": "mean",
    "cache_hit_rate": "mean",
    "max_tokens": "sum",
}
COUNTER_ROLES = ("prompt_tokens", "generation_tokens", "requests", "aborted")
HISTOGRAM_ROLES = ("ttft", "itl", "e2e")
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
    """One `/metrics` text, reduced to the series `top` uses (keyed by metric name); `t` is
    time.monotonic() of the scrape."""

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


def parse_metrics(text: str, t: float = 0.0, names: MetricNames | None = None) -> Scrape:
    """Parse an engine's exposition text (prometheus-client's own parser, imported here: CLI start)."""
    from prometheus_client.parser import text_string_to_metric_families

    n = _names(names)
    gauge_combine = {getattr(n, role): how for role, how in COMBINE.items() if getattr(n, role) is not None}
    counter_names = {getattr(n, r) for r in COUNTER_ROLES} - {None}
    hist_names = {getattr(n, r) for r in HISTOGRAM_ROLES} - {None}

    gauges: dict[str, list[float]] = {}
    counters: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, dict[str, float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in gauge_combine:
                    gauges.setdefault(s.name, []).append(s.value)
                elif s.name in counter_names:
                    counters[s.name] = counters.get(s.name, 0.0) + s.value
                elif s.name.endswith("_bucket") and s.name[: -len("_bucket")] in hist_names:
                    le = float(s.labels["le"])
                    per = buckets.setdefault(s.name[: -len("_bucket")], {})
                    per[le] = per.get(le, 0.0) + s.value
                else:
                    base, _, kind = s.name.rpartition("_")
                    if base in hist_names and kind in ("count", "sum"):
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
        gauges={k: _combine(v, gauge_combine[k]) for k, v in gauges.items()},
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


def _rate(now: Scrape, before: Scrape | None, name: str | None) -> float | None:
    if before is None or name is None or name not in now.counters or name not in before.counters:
        return None
    dt, dv = now.t - before.t, now.counters[name] - before.counters[name]
    if dt <= 0 or dv < 0:  # same instant, or the engine restarted (counters reset)
        return None
    return dv / dt


def _percentiles(h: Histogram | None) -> dict[str, float | None]:
    if h is None:
        return {}
    return {f"p{round(q * 100)}": h.quantile(q) for q in QUANTILES}


def _get(table: dict, name: str | None) -> float | None:
    return table.get(name) if name is not None else None


def engine_stats(now: Scrape, before: Scrape | None = None, names: MetricNames | None = None) -> EngineStats:
    """Derive the numbers; rates need `before` (a previous scrape of the same engine)."""
    n = _names(names)
    g = now.gauges
    gen = _rate(now, before, n.generation_tokens)
    ttft, itl = now.histograms.get(n.ttft or ""), now.histograms.get(n.itl or "")
    window = "lifetime"
    if before is not None and ttft is not None and n.ttft in before.histograms:
        recent = ttft.minus(before.histograms[n.ttft])
        if recent.count > 0 and recent is not ttft:
            window, ttft = "interval", recent
            if itl is not None and n.itl in before.histograms:
                itl = itl.minus(before.histograms[n.itl])
    return EngineStats(
        running=_get(g, n.running),
        queued=_get(g, n.queued),
        prompt_tok_s=_rate(now, before, n.prompt_tokens),
        gen_tok_s=gen if gen is not None else _get(g, n.gen_throughput),  # a gauge: one scrape
        req_s=_rate(now, before, n.requests),
        token_usage=_get(g, n.token_usage),
        accept_length=_get(g, n.accept_length),
        accept_rate=_get(g, n.accept_rate),
        cache_hit_rate=_get(g, n.cache_hit_rate),
        ttft_s=_percentiles(ttft),
        itl_s=_percentiles(itl),
        latency_window=window,
        requests_total=_get(now.counters, n.requests),
    )
