"""Render bench results: the per-workload table with percentiles, the concurrency sweep, and the
side-by-side for `--compare`."""

from __future__ import annotations

from typing import Any

from sparkctl.benchmark.runner import BenchResult, WorkloadResult
from sparkctl.benchmark.stats import Spread


def pct(s: Spread | None, digits: int = 1, scale: float = 1.0) -> str:
    """`p50 / p90 / p99`."""
    if s is None:
        return "-"
    return " / ".join(f"{v * scale:.{digits}f}" for v in (s.p50, s.p90, s.p99))


def one(s: Spread | None, digits: int = 1) -> str:
    return "-" if s is None else f"{s.p50:.{digits}f}"


def _title(result: BenchResult) -> str:
    title = f"{result.model} @ {result.url}"
    if result.mode:
        title += f"  mode {result.mode}"
    if result.config_hash:
        title += f"  config {result.config_hash}"
    return title


def bench_table(result: BenchResult) -> Any:
    from rich import box
    from rich.table import Table

    caption = f"{result.reps} reps each; p50 / p90 / p99 over requests; tokens from server usage"

    # Headers are words that wrap onto more lines rather than being cut at 80 columns.
    t = Table(
        title=_title(result), caption=caption, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
    )
    cols = (
        "workload",
        "streams",
        "out tok",
        "TTFT s",
        "ITL ms",
        "tok/s per stream",
        "total tok/s",
        "prefill tok/s",
        "cached tok",
    )
    for col in cols:  # min_width: rich may narrow a column below its longest word; never cut one
        t.add_column(
            col,
            justify="left" if col == "workload" else "right",
            no_wrap=col == "workload",
            min_width=max(len(word) for word in col.split()),
        )
    for w in result.workloads:
        st = w.stats()
        name = w.workload.name + (" [yellow](truncated)[/]" if w.truncated else "")
        t.add_row(
            name,
            str(w.workload.concurrency),
            one(st["completion_tokens"], 0),
            pct(st["ttft_s"], 3),
            pct(st["itl_s"], 1, 1000),
            pct(st["decode_tps"]),
            one(st["aggregate_tps"]),
            one(st["prefill_tps"], 0),
            one(st["cached_tokens"], 0),
        )
    return t


def sweep_rows(result: BenchResult) -> list[WorkloadResult]:
    """The `code` workloads by concurrency: the sweep (empty when fewer than two levels ran)."""
    rows = sorted(
        (w for w in result.workloads if w.workload.kind == "code"), key=lambda w: w.workload.concurrency
    )
    return rows if len(rows) > 1 else []


def sweep_table(result: BenchResult) -> Any:
    from rich.table import Table

    t = Table(title="concurrency sweep (code)", caption="throughput = all streams' tokens / batch wall time")
    for col in (
        "streams",
        "requests",
        "throughput tok/s",
        "tok/s/stream p50",
        "TTFT s p50/p90/p99",
        "ITL ms p50/p90/p99",
    ):
        t.add_column(col, justify="right")
    for w in sweep_rows(result):
        st = w.stats()
        t.add_row(
            str(w.workload.concurrency),
            str(len(w.samples)),
            one(st["aggregate_tps"]),
            one(st["decode_tps"]),
            pct(st["ttft_s"], 3),
            pct(st["itl_s"], 1, 1000),
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
