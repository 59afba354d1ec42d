"""Pure parts of `bench`: percentiles, per-sample rates, workload requests, the sweep, the chart,
compare ordering."""

from __future__ import annotations

import pytest

from sparkctl.benchmark.measure import Sample, request_kwargs
from sparkctl.benchmark.results import BenchResult
from sparkctl.benchmark.runner import compare
from sparkctl.benchmark.stats import percentile, spread
from sparkctl.benchmark.workloads import Workload, default_suite, parse_levels, select, sized
from sparkctl.errors import UsageError


def _sample(**kw) -> Sample:
    base = dict(
        workload="w",
        rep=0,
        stream=0,
        prompt_tokens=1000,
        completion_tokens=101,
        cached_tokens=600,
        ttft_s=0.5,
        e2e_s=2.5,
        text_events=30,
        finish_reason="length",
    )
    return Sample(**{**base, **kw})


def test_spread_mean_stdev_range() -> None:
    s = spread([6.0, 2.0, None, 4.0])
    assert (s.mean, s.stdev, s.min, s.max, s.n, s.median) == (4.0, 2.0, 2.0, 6.0, 3, 4.0)
    assert (s.p90, s.p99) == pytest.approx((5.6, 5.96))
    assert spread([1.0, 2.0, 100.0]).median == 2.0
    assert s.contains(7.9) and not s.contains(8.1) and s.contains(0.0) and not s.contains(-0.1)
    assert spread([None]) is None
    assert spread([3.0]).stdev == 0.0


def test_percentiles_interpolate_like_numpy() -> None:
    vals = [float(v) for v in range(1, 101)]  # 1..100
    assert [percentile(vals, q) for q in (0, 50, 90, 99, 100)] == pytest.approx([1, 50.5, 90.1, 99.01, 100])
    s = spread(list(reversed(vals)))
    assert (s.p50, s.p90, s.p99, s.n) == (pytest.approx(50.5), pytest.approx(90.1), pytest.approx(99.01), 100)
    one = {"mean": 7.0, "stdev": 0.0, "min": 7.0, "max": 7.0, "n": 1, "p50": 7.0, "p90": 7.0, "p99": 7.0}
    assert spread([7.0]).to_json() == one


def test_rates_come_from_usage_not_events() -> None:
    s = _sample()
    # 100 tokens after the first over the 2.0 s after first token; 30 events don't enter into it
    assert s.decode_tps == pytest.approx(50.0)
    assert s.itl_s == pytest.approx(0.02)  # 20 ms per token after the first
    # only the 400 uncached prompt tokens were prefilled during the 0.5 s TTFT
    assert s.prefill_tps == pytest.approx(800.0)
    assert _sample(completion_tokens=1).decode_tps is None
    assert _sample(cached_tokens=None).prefill_tps == pytest.approx(2000.0)
    assert _sample(cached_tokens=1000).prefill_tps is None


def test_workload_requests_are_deterministic_and_prefix_kinds_differ() -> None:
    cold = Workload("prefill", "prefill", 8, prefix_words=50)
    warm = Workload("long-prefix", "long-prefix", 8, prefix_words=50)
    assert cold.messages(0) != cold.messages(1)  # a new leading line: nothing to reuse
    assert warm.messages(0)[0] == warm.messages(1)[0]  # same long system prompt every time
    assert warm.messages(0)[1] != warm.messages(1)[1]
    kw = request_kwargs("m", Workload("thinking", "thinking", 64, thinking=True), 0)
    assert kw["temperature"] == 0.0 and kw["max_tokens"] == 64
    assert kw["extra_body"] == {"chat_template_kwargs": {"enable_thinking": True}}


def test_suite_selection_and_sweep_levels() -> None:
    suite = default_suite(concurrency=4)
    assert [w.name for w in suite] == ["code", "prose", "thinking", "prefill", "long-prefix", "code x4"]
    sweep = default_suite(concurrency=parse_levels("16,1,2,4,8"))
    levels = [(w.name, w.concurrency) for w in sweep if w.kind == "code"]
    assert levels == [("code", 1), ("code x2", 2), ("code x4", 4), ("code x8", 8), ("code x16", 16)]
    for bad in ("0,2", "a,b", "", "1,999"):
        with pytest.raises(UsageError, match="--concurrency"):
            parse_levels(bad)
    cut = sized(suite, 300)
    assert [w.prefix_words for w in cut if w.prefix_words] == [300, 300]
    assert [w.name for w in cut] == [w.name for w in suite]
    assert [w.name for w in default_suite(concurrency=1)][-1] == "long-prefix"
    assert [w.name for w in select(suite, ["prose"])] == ["prose"]
    with pytest.raises(UsageError, match="unknown workload"):
        select(suite, ["nope"])


def test_compare_switches_then_runs_each_mode_in_order() -> None:
    calls: list[str] = []

    def run(mode: str) -> BenchResult:
        calls.append(f"run {mode}")
        return BenchResult("u", "m", mode, None, 1, "t", [])

    out = compare(("solo", "tp2"), lambda m: calls.append(f"switch {m}"), run)
    assert calls == ["switch solo", "run solo", "switch tp2", "run tp2"]
    assert [r.mode for r in out] == ["solo", "tp2"]


def test_chart_draws_every_run_on_one_png(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from sparkctl.benchmark.chart import write_chart
    from sparkctl.benchmark.results import WorkloadResult

    def run(mode: str, slow: float) -> BenchResult:
        rows = []
        for n in (1, 2, 4):
            w = WorkloadResult(Workload(f"code x{n}", "code", 32, concurrency=n))
            w.samples = [_sample(rep=0, stream=i, ttft_s=0.1 * n * slow, e2e_s=1.0 * slow) for i in range(n)]
            w.batch_walls = [1.0 * slow]
            rows.append(w)
        return BenchResult("u", "m", mode, None, 1, "t", rows)

    path = write_chart([run("solo", 1.0), run("tp2", 0.5)], tmp_path / "c.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
