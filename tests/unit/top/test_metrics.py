"""SGLang 0.5.23 /metrics parsing and the numbers `top` derives (fixtures: tests/fixtures/sglang/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.engines.sglang import METRICS
from sparkctl.top.metrics import Histogram, MetricsParseError, engine_stats, parse_metrics

RUNNING, QUEUED, ACCEPT_LENGTH = METRICS.running, METRICS.queued, METRICS.accept_length
PROMPT_TOKENS, GENERATION_TOKENS = METRICS.prompt_tokens, METRICS.generation_tokens
TTFT, ITL = METRICS.ttft, METRICS.itl

FIX = Path(__file__).parents[2] / "fixtures" / "sglang"
A = (FIX / "metrics-0.5.23-a.txt").read_text()
B = (FIX / "metrics-0.5.23-b.txt").read_text()


def test_fixture_uses_sglang_names_and_buckets():
    # The names top reads are in the captured-style text, with SGLang's TTFT bucket bounds.
    for name in (RUNNING, QUEUED, ACCEPT_LENGTH, PROMPT_TOKENS, GENERATION_TOKENS):
        assert f"\n{name}{{" in A
    assert (
        'sglang:time_to_first_token_seconds_bucket{engine_type="unified",is_streaming="true",le="400.0"' in A
    )


def test_parse_gauges_counters_histograms():
    s = parse_metrics(A, t=10.0)
    assert s.gauges[RUNNING] == 6 and s.gauges[QUEUED] == 2
    assert s.gauges[ACCEPT_LENGTH] == pytest.approx(3.62)
    # counters: both is_streaming label sets summed
    assert s.counters[PROMPT_TOKENS] == 1_250_000 and s.counters[GENERATION_TOKENS] == 380_000
    ttft = s.histograms[TTFT]
    assert ttft.count == 950 and ttft.buckets[-1] == (float("inf"), 950)
    assert [b for b, _ in ttft.buckets][:3] == [0.1, 0.2, 0.4]
    assert s.histograms[ITL].count == 3800


def test_stats_one_scrape_uses_sglang_gauge_for_generation():
    st = engine_stats(parse_metrics(A, 0.0))
    assert st.gen_tok_s == pytest.approx(212.4)  # SGLang's own gauge
    assert st.prompt_tok_s is None and st.req_s is None  # rates need two scrapes
    assert st.token_usage == pytest.approx(0.41) and st.accept_rate == pytest.approx(0.654)
    assert st.latency_window == "lifetime"
    assert 0.2 < st.ttft_s["p50"] < 0.4 and st.ttft_s["p50"] < st.ttft_s["p90"] < st.ttft_s["p99"]
    assert 0.010 < st.itl_s["p50"] < 0.015


def test_stats_two_scrapes_difference_counters():
    st = engine_stats(parse_metrics(B, 2.0), parse_metrics(A, 0.0))
    assert st.prompt_tok_s == pytest.approx(8000 / 2)
    assert st.gen_tok_s == pytest.approx(430 / 2)  # counter difference wins over the gauge (215.0 too)
    assert st.req_s == pytest.approx(5 / 2)
    assert st.latency_window == "interval"  # 5 requests finished in between: their TTFTs only
    assert st.ttft_s["p50"] is not None


def test_counter_reset_gives_no_rate():
    st = engine_stats(parse_metrics(A, 2.0), parse_metrics(B, 0.0))  # B is "older": counters went down
    assert st.prompt_tok_s is None and st.latency_window == "lifetime"


def test_histogram_quantile_interpolates_like_prometheus():
    h = Histogram(((0.1, 10.0), (0.2, 30.0), (float("inf"), 40.0)), 40.0, 5.0)
    assert h.quantile(0.25) == pytest.approx(0.1)  # rank 10: the top of the first bucket
    assert h.quantile(0.5) == pytest.approx(0.15)  # rank 20: halfway through (0.1, 0.2]
    assert h.quantile(0.99) == pytest.approx(0.2)  # in +Inf: the last finite bound
    assert Histogram((), 0.0, 0.0).quantile(0.5) is None


def test_missing_series_are_none_not_errors():
    st = engine_stats(parse_metrics("sglang:num_running_reqs 3\n"))
    assert st.running == 3 and st.queued is None and st.ttft_s == {}
    assert st.accept_length is None and st.token_usage is None


def test_not_prometheus_text_is_a_parse_error():
    with pytest.raises(MetricsParseError):
        parse_metrics("<html>this is not it</html>\n")
