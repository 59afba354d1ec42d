"""top and the rolling switch's drain read a real vLLM 0.32 /metrics (tests/fixtures/vllm/, captured
from the testbed's real engine after one chat request) through the engine's metric names."""

from __future__ import annotations

from pathlib import Path

from sparkctl.engines import get_engine
from sparkctl.lifecycle.drain import count_in_flight
from sparkctl.top.metrics import engine_stats, parse_metrics

TEXT = (Path(__file__).parents[2] / "fixtures" / "vllm" / "metrics-0.32.0.txt").read_text()
NAMES = get_engine("vllm").metrics


def test_top_reads_vllms_gauges_counters_and_histograms() -> None:
    scrape = parse_metrics(TEXT, 0.0, NAMES)
    stats = engine_stats(scrape, None, NAMES)
    assert stats.running == 0 and stats.queued == 0 and stats.token_usage == 0
    assert stats.requests_total == 1  # vllm:request_success_total, summed over finished_reason
    assert stats.ttft_s["p50"] is not None and stats.itl_s["p50"] is not None
    assert stats.accept_length is None  # no such gauge in vLLM: shown as absent, not 0
    # The default engine's names find nothing in vLLM's text.
    assert engine_stats(parse_metrics(TEXT, 0.0)).running is None


def test_drain_sums_running_and_waiting() -> None:
    busy = TEXT.replace(
        'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0',
        'vllm:num_requests_running{engine="0",model_name="tiny"} 3.0',
    ).replace(
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0',
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 2.0',
    )
    assert count_in_flight(TEXT, NAMES) == 0 and count_in_flight(busy, NAMES) == 5
    assert count_in_flight(TEXT) is None  # SGLang's gauge is not there
