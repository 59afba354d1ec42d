"""Render bench results: one table readable at a glance, and the side-by-side for `--compare`."""

from __future__ import annotations

from typing import Any

from sparkctl.benchmark.runner import BenchResult
from sparkctl.benchmark.stats import Spread


def fmt(s: Spread | None, digits: int = 1, sd: bool = True) -> str:
    if s is None:
        return "-"
    text = f"{s.mean:.{digits}f}"
    if sd and s.n > 1:
        text += f" ±{s.stdev:.{digits}f}"
    return text


def bench_table(result: BenchResult) -> Any:
    from rich.table import Table

    title = f"{result.model} @ {result.url}"
    if result.mode:
        title += f"  mode {result.mode}"
    if result.config_hash:
        title += f"  config {result.config_hash}"
    from rich import box

    # Headers wrap onto two short lines rather than being cut at 80 columns.
    t = Table(title=title, caption=f"{result.reps} reps each; tokens from server usage; ± is stdev",
              box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("workload", "streams", "out tok", "tok/s per stream", "total tok/s", "TTFT s", "prefill tok/s",
                "cached tok"):
        t.add_column(col, justify="left" if col == "workload" else "right", no_wrap=col == "workload")
    for w in result.workloads:
        st = w.stats()
        name = w.workload.name + (" [yellow](truncated)[/]" if w.truncated else "")
        t.add_row(
            name,
            str(w.workload.concurrency),
            fmt(st["completion_tokens"], 0, sd=False),
            fmt(st["decode_tps"]),
            fmt(st["aggregate_tps"]) if w.workload.concurrency > 1 else "",
            fmt(st["ttft_s"], 3),
            fmt(st["prefill_tps"], 0),
            fmt(st["cached_tokens"], 0, sd=False),
        )
    return t


# (label, stat key, digits, higher is better)
_COMPARE_ROWS = [
    ("tok/s per stream", "decode_tps", 1, True),
    ("total tok/s", "aggregate_tps", 1, True),
    ("TTFT s", "ttft_s", 3, False),
    ("prefill tok/s", "prefill_tps", 0, True),
]


def compare_table(results: list[BenchResult]) -> Any:
    from rich.table import Table

    a, b = results
    t = Table(title=f"{a.mode} vs {b.mode}", caption="mean ±stdev over reps; ratio = B / A")
    t.add_column("workload")
    t.add_column("metric")
    t.add_column(f"A: {a.mode}", justify="right")
    t.add_column(f"B: {b.mode}", justify="right")
    t.add_column("B/A", justify="right")
    by_name = {w.workload.name: w for w in b.workloads}
    for wa in a.workloads:
        wb = by_name.get(wa.workload.name)
        if wb is None:
            continue
        sa, sb = wa.stats(), wb.stats()
        for label, key, digits, _ in _COMPARE_ROWS:
            if key == "aggregate_tps" and wa.workload.concurrency == 1:
                continue
            if sa[key] is None and sb[key] is None:
                continue
            ratio = f"{sb[key].mean / sa[key].mean:.2f}x" if sa[key] and sb[key] and sa[key].mean else "-"
            t.add_row(wa.workload.name, label, fmt(sa[key], digits), fmt(sb[key], digits), ratio)
    return t
