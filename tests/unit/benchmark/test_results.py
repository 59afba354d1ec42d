"""benchmark/results.py: a workload's spreads (throughput over each repetition's wall time) and
the run's JSON, the record `--out` keeps."""

from __future__ import annotations

from sparkctl.benchmark.measure import Sample
from sparkctl.benchmark.results import BenchResult, WorkloadResult
from sparkctl.benchmark.workloads import Workload


def _sample(rep: int, stream: int, tokens: int) -> Sample:
    return Sample("code x2", rep, stream, 10, tokens, None, 0.1, 1.1, tokens, "stop", max_gap_s=0.02)


def test_aggregate_throughput_is_every_streams_tokens_over_the_batch_wall() -> None:
    w = WorkloadResult(Workload("code x2", "code", 32, concurrency=2))
    w.samples = [_sample(0, 0, 30), _sample(0, 1, 50), _sample(1, 0, 40), _sample(1, 1, 40)]
    w.batch_walls = [2.0, 4.0]
    stats = w.stats()
    agg = stats["aggregate_tps"]
    assert agg is not None and (agg.n, agg.min, agg.max, agg.mean) == (2, 20.0, 40.0, 30.0)  # 80/4, 80/2
    assert stats["cached_tokens"] is None  # the server reported none


def test_the_runs_json_carries_every_workload_and_its_samples() -> None:
    w = WorkloadResult(Workload("code x2", "code", 32, concurrency=2), [_sample(0, 0, 30)], [1.0])
    doc = BenchResult("http://h:1", "m", "solo", "abc", 1, "t0", [w], context=4096).to_json()
    assert doc["sparkctl_bench"] == 3 and doc["mode"] == "solo" and doc["context"] == 4096
    (one,) = doc["workloads"]
    assert one["name"] == "code x2" and one["concurrency"] == 2 and len(one["samples"]) == 1
