"""sparkctl.benchmark.report: percentiles shown only with enough requests behind them, tables that
fit 80 columns with one line per row, and streams that came in a burst shown as not measurable."""

from __future__ import annotations

import io

from rich.console import Console

from sparkctl.benchmark.measure import Sample
from sparkctl.benchmark.report import bench_table, pct, spread_table, sweep_table, table_notes
from sparkctl.benchmark.results import BenchResult, WorkloadResult
from sparkctl.benchmark.stats import spread
from sparkctl.benchmark.workloads import Workload


def _sample(rep: int, stream: int = 0, **kw) -> Sample:
    base = dict(
        workload="w",
        rep=rep,
        stream=stream,
        prompt_tokens=12345,
        completion_tokens=256,
        cached_tokens=12000,
        ttft_s=12.345,
        e2e_s=40.0,
        text_events=256,
        finish_reason="length",
        max_gap_s=0.2,
        median_gap_s=0.1,
        text_span_s=27.0,
    )
    return Sample(**{**base, **kw})


def _result(truncated: bool = False, buffered: bool = False) -> BenchResult:
    rows = []
    for name, n, reps in (("long-prefix", 1, 3), ("code", 1, 3), ("code x16", 16, 8), ("prose", 1, 120)):
        w = WorkloadResult(Workload(name, "code" if name.startswith("code") else name, 256, concurrency=n))
        w.samples = [_sample(r, i) for r in range(reps) for i in range(n)]
        if buffered and name == "prose":  # the whole reply in one burst at the end
            w.samples = [
                _sample(r, ttft_s=3.8, e2e_s=3.81, median_gap_s=0.0, text_span_s=0.0003) for r in range(reps)
            ]
        w.batch_walls = [40.0] * reps
        w.truncated = "--budget reached after 3 of 5 repetitions" if truncated and n == 1 else None
        rows.append(w)
    long_url = "http://spark-node-with-a-long-name.example.internal:30000"
    return BenchResult(long_url, "org/a-rather-long-served-model-name", "tp2", "abc123", 3, "t", rows)


def _render(table: object, width: int = 80) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False, color_system=None).print(table)
    return out.getvalue().splitlines()


def test_percentiles_need_enough_requests() -> None:
    three = spread([1.0, 2.0, 3.0])
    assert pct(three, 1) == "2.0 / - / -"  # p90 and p99 from 3 requests would be the max
    assert pct(spread([float(v) for v in range(10)]), 1) == "4.5 / 8.1 / -"
    assert pct(spread([float(v) for v in range(100)]), 1) == "49.5 / 89.1 / 98.0"
    assert pct(None) == "-"


def test_tables_fit_80_columns_one_line_per_row() -> None:
    result = _result(truncated=True)
    for table, rows in ((bench_table(result), 4), (spread_table(result), 4), (sweep_table(result), 2)):
        lines = _render(table)
        assert max(len(line) for line in lines) <= 80, "\n".join(lines)
        rule = next(i for i, ln in enumerate(lines) if "───" in ln)
        body = lines[
            rule + 1 : rule + 1 + next(i for i, ln in enumerate(lines[rule + 1 :]) if not ln.strip())
        ]
        assert len(body) == rows, "\n".join(lines)  # one line per row: no cell wrapped
    head = "\n".join(_render(bench_table(result)))
    for word in ("workload", "streams", "TTFT", "ITL", "stream", "total", "prefill", "cached"):
        assert word in head  # headers wrap by word, never cut
    spread_lines = "\n".join(_render(spread_table(result)))
    assert "requests" in spread_lines and " 3 " in spread_lines and "120" in spread_lines
    assert "12.345 / - / -" in spread_lines  # 3 requests: p50 only
    assert "12.345 / 12.345 / 12.345" in spread_lines  # 120 requests: all three
    assert any("long-prefix*: --budget reached after 3 of 5" in n for n in table_notes(result))


def test_a_burst_stream_has_no_per_stream_rate() -> None:
    result = _result(buffered=True)
    prose = next(w for w in result.workloads if w.workload.name == "prose")
    st = prose.stats()
    assert st["decode_tps"] is None and st["itl_s"] is None and st["prefill_tps"] is None
    assert st["aggregate_tps"] is not None  # throughput is wall-clock based: still true
    row = next(ln for ln in _render(bench_table(result)) if ln.strip().startswith("prose"))
    assert row.count("burst") == 3, row  # ITL, tok/s per stream, prefill
    (note,) = [n for n in table_notes(result) if n.startswith("prose")]
    assert "not measurable for 120 of 120 streams" in note and "arrived in one burst 3.80s" in note
    assert prose.to_json()["burst_streams"] == 120
