"""The bench chart (PNG): throughput and latency against concurrency, one line per run, so
`bench --compare solo tp2` puts both modes on the same axes. matplotlib is imported here only."""

from __future__ import annotations

from pathlib import Path

from sparkctl.benchmark.results import BenchResult
from sparkctl.errors import UsageError


def _points(result: BenchResult) -> list[tuple[int, dict]]:
    code = [w for w in result.workloads if w.workload.kind == "code"] or result.workloads
    return sorted(((w.workload.concurrency, w.stats()) for w in code), key=lambda p: p[0])


def write_chart(results: list[BenchResult], path: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UsageError(
            "the chart needs matplotlib", fix="pip install 'sparkctl[verify]' (or: pip install matplotlib)"
        ) from exc
    fig, (thr, lat) = plt.subplots(1, 2, figsize=(11, 4.2))
    for result in results:
        label = result.mode or result.model
        pts = _points(result)
        xs = [c for c, _ in pts]
        thr.plot(xs, [s["aggregate_tps"].p50 if s["aggregate_tps"] else 0 for _, s in pts], "o-", label=label)
        ttft = [s["ttft_s"] for _, s in pts]
        itl = [s["itl_s"] for _, s in pts]
        line = lat.plot(xs, [t.p50 * 1000 if t else 0 for t in ttft], "o-", label=f"{label} TTFT p50")[0]
        lo = [t.p50 * 1000 if t else 0 for t in ttft]
        hi = [t.p99 * 1000 if t else 0 for t in ttft]
        lat.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.15, label=f"{label} TTFT p50-p99")
        lat.plot(
            xs,
            [t.p50 * 1000 if t else 0 for t in itl],
            "s--",
            color=line.get_color(),
            label=f"{label} ITL p50",
        )
    thr.set(title="throughput (all streams)", xlabel="concurrent streams", ylabel="output tok/s")
    lat.set(title="latency", xlabel="concurrent streams", ylabel="ms")
    levels = sorted({c for r in results for c, _ in _points(r)})
    thr.set_ylim(bottom=0)
    lat.set_ylim(bottom=0)
    for ax in (thr, lat):
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(c) for c in levels])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    first = results[0]
    fig.suptitle(f"sparkctl bench: {first.model}", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
