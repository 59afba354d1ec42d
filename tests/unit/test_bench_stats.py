"""Pure parts of `bench`: spread, per-sample rates, workload requests, compare ordering."""

from __future__ import annotations

import pytest

from sparkctl.benchmark.measure import Sample, request_kwargs
from sparkctl.benchmark.runner import BenchResult, compare
from sparkctl.benchmark.stats import spread
from sparkctl.benchmark.workloads import Workload, default_suite, select
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
    s = spread([2.0, 4.0, None, 6.0])
    assert (s.mean, s.stdev, s.min, s.max, s.n, s.median) == (4.0, 2.0, 2.0, 6.0, 3, 4.0)
    assert spread([1.0, 2.0, 100.0]).median == 2.0
    assert s.contains(7.9) and not s.contains(8.1) and s.contains(0.0) and not s.contains(-0.1)
    assert spread([None]) is None
    assert spread([3.0]).stdev == 0.0


def test_rates_come_from_usage_not_events() -> None:
    s = _sample()
    # 100 tokens after the first over the 2.0 s after first token; 30 events don't enter into it
    assert s.decode_tps == pytest.approx(50.0)
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


def test_suite_selection() -> None:
    suite = default_suite(concurrency=4)
    assert [w.name for w in suite] == ["code", "prose", "thinking", "prefill", "long-prefix", "code x4"]
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
