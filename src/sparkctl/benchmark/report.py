"""Render bench results: the per-workload table with percentiles, the concurrency sweep, and the
side-by-side for `--compare`."""

from __future__ import annotations

from typing import Any

from sparkctl.benchmark.results import BenchResult, WorkloadResult
from sparkctl.benchmark.stats import Spread

# A percentile q is shown only from 100 / (100 - q) requests on: p90 from 10, p99 from 100.
MIN_N = {50: 1, 90: 10, 99: 100}


def pct(s: Spread | None, digits: int = 1, scale: float = 1.0) -> str:
    """`p50 / p90 / p99`, with `-` for a percentile that too few requests cannot support (the
    tables carry the count)."""
    if s is None:
        return "-"
    vals = ((50, s.p50), (90, s.p90), (99, s.p99))
    return " / ".join(f"{v * scale:.{digits}f}" if s.n >= MIN_N[q] else "-" for q, v in vals)


def one(s: Spread | None, digits: int = 1, scale: float = 1.0) -> str:
    return "-" if s is None else f"{s.p50 * scale:.{digits}f}"


def _title(result: BenchResult) -> str:
    title = f"{result.model} @ {result.url}"
    if result.mode:
        title += f"  mode {result.mode}"
    if result.config_hash:
        title += f"  config {result.config_hash}"
    return title


def _table(title: str | None, caption: str | None, cols: list[str]) -> Any:
    """A table that fits 80 columns: no side edges, headers wrap by word and are never cut."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in cols:
        t.add_column(
            col,
            justify="left" if col == "workload" else "right",
            no_wrap=col == "workload",
            min_width=max(len(word) for word in col.split()),
        )
    return t


def _per_stream(w: WorkloadResult, st: dict, key: str, digits: int, scale: float = 1.0) -> str:
    """A per-stream rate, or `burst` when every stream arrived in one burst (not measurable)."""
    if st[key] is None and w.bursts():
        return "burst"
    return one(st[key], digits, scale)


def _name(w: WorkloadResult) -> str:
    return w.workload.name + ("*" if w.truncated else "")


def bench_table(result: BenchResult) -> Any:
    """p50 of every metric, one row per workload (the spread: `spread_table`)."""
    cols = [
        "workload",
        "streams",
        "out tok",
        "TTFT s",
        "ITL ms",
        "tok/s per stream",
        "total tok/s",
        "prefill tok/s",
        "cached tok",
    ]
    t = _table(_title(result), "p50 over requests; tokens from server usage", cols)
    for w in result.workloads:
        st = w.stats()
        t.add_row(
            _name(w),
            str(w.workload.concurrency),
            one(st["completion_tokens"], 0),
            one(st["ttft_s"], 3),
            _per_stream(w, st, "itl_s", 1, 1000),
            _per_stream(w, st, "decode_tps", 1),
            one(st["aggregate_tps"]),
            _per_stream(w, st, "prefill_tps", 0),
            one(st["cached_tokens"], 0),
        )
    return t


def spread_table(result: BenchResult) -> Any:
    """TTFT and ITL as p50 / p90 / p99 with the number of requests behind them."""
    cols = ["workload", "requests", "TTFT s p50 / p90 / p99", "ITL ms p50 / p90 / p99"]
    t = _table(None, "p90 from 10 requests, p99 from 100; - below that", cols)
    for w in result.workloads:
        st = w.stats()
        t.add_row(_name(w), str(len(w.samples)), pct(st["ttft_s"], 3), pct(st["itl_s"], 1, 1000))
    return t


def table_notes(result: BenchResult) -> list[str]:
    """What the tables cannot say in a cell: truncated rows, streams that came in a burst."""
    notes = []
    for w in result.workloads:
        if w.truncated:
            notes.append(f"{w.workload.name}*: {w.truncated}")
        if bursts := w.bursts():
            notes.append(
                f"{w.workload.name}: ITL, tok/s per stream and prefill rate not measurable for "
                f"{len(bursts)} of {len(w.samples)} streams: {bursts[0]}"
            )
    return notes


def sweep_rows(result: BenchResult) -> list[WorkloadResult]:
    """The `code` workloads by concurrency: the sweep (empty when fewer than two levels ran)."""
    rows = sorted(
        (w for w in result.workloads if w.workload.kind == "code"), key=lambda w: w.workload.concurrency
    )
    return rows if len(rows) > 1 else []


def sweep_table(result: BenchResult) -> Any:
    """Throughput and p50 latency by concurrency (their spread is in `spread_table`)."""
    cols = ["streams", "requests", "throughput tok/s", "tok/s per stream", "TTFT s", "ITL ms"]
    caption = "p50 over requests; throughput = all streams' tokens / batch wall time"
    t = _table("concurrency sweep (code)", caption, cols)
    for w in sweep_rows(result):
        st = w.stats()
        t.add_row(
            str(w.workload.concurrency),
            str(len(w.samples)),
            one(st["aggregate_tps"]),
            _per_stream(w, st, "decode_tps", 1),
            one(st["ttft_s"], 3),
            _per_stream(w, st, "itl_s", 1, 1000),
        )
    return t


# (label, stat key, digits, scale)
_COMPARE_ROWS = [
    ("tok/s per stream p50", "decode_tps", 1, 1.0),
    ("throughput tok/s", "aggregate_tps", 1, 1.0),
    ("TTFT s p50", "ttft_s", 3, 1.0),
    ("ITL ms p50", "itl_s", 1, 1000.0),
    ("prefill tok/s p50", "prefill_tps", 0, 1.0),
]


def compare_table(results: list[BenchResult]) -> Any:
    from rich.table import Table

    a, b = results
    t = Table(title=f"{a.mode} vs {b.mode}", caption="p50 over requests; ratio = B / A")
    for col, right in (
        ("workload", False),
        ("metric", False),
        (f"A: {a.mode}", True),
        (f"B: {b.mode}", True),
        ("B/A", True),
    ):
        t.add_column(col, justify="right" if right else "left")
    by_name = {w.workload.name: w for w in b.workloads}
    for wa in a.workloads:
        wb = by_name.get(wa.workload.name)
        if wb is None:
            continue
        sa, sb = wa.stats(), wb.stats()
        for label, key, digits, scale in _COMPARE_ROWS:
            if key == "aggregate_tps" and wa.workload.concurrency == 1:
                continue
            if sa[key] is None and sb[key] is None:
                continue
            va = sa[key].p50 * scale if sa[key] else None
            vb = sb[key].p50 * scale if sb[key] else None
            ratio = f"{vb / va:.2f}x" if va and vb else "-"
            cell = [f"{v:.{digits}f}" if v is not None else "-" for v in (va, vb)]
            t.add_row(wa.workload.name, label, *cell, ratio)
    return t
