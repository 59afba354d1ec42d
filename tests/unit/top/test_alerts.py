"""Each `top` warning rule: one case that fires (with its reason) and one that does not."""

from __future__ import annotations

import pytest

from sparkctl.top.alerts import (
    Knobs,
    acceptance_collapsed,
    evaluate,
    kv_cache_full,
    mem_available_low,
    queue_growing,
    rank_missing,
    throttling,
)
from sparkctl.top.metrics import EngineStats
from sparkctl.top.nodes import GpuStat
from sparkctl.top.snapshot import EngineRow, NodeView, RankRow, Snapshot

BUSY = EngineStats(running=8, queued=0, gen_tok_s=200.0, token_usage=0.5, accept_length=3.4, accept_rate=0.6)


def gb10(avail_mib: int) -> NodeView:
    return NodeView(
        "spark1",
        gpus=[GpuStat(0, "NVIDIA GB10")],
        mem_available_mib=avail_mib,
        mem_total_mib=124610,
        unified_memory=True,
    )


def test_queue_growing():
    why = queue_growing([0, 1, 3, 6])
    assert why is not None and "0 -> 1 -> 3 -> 6" in why
    assert queue_growing([0, 1, 3, 3]) is None  # flat at the end
    assert queue_growing([1, 3, 6]) is None  # not enough refreshes yet
    assert queue_growing([0, None, 3, 6]) is None  # an unreadable refresh breaks the run


def test_kv_cache_full():
    why = kv_cache_full(EngineStats(token_usage=0.97))
    assert why is not None and "97%" in why
    assert kv_cache_full(EngineStats(token_usage=0.95)) is None
    assert kv_cache_full(EngineStats()) is None


@pytest.mark.parametrize(
    ("kind", "cap", "fraction"),
    [
        ("sglang", "max-running-requests", "mem-fraction-static"),
        ("vllm", "max-num-seqs", "gpu-memory-utilization"),
    ],
)
def test_hints_name_the_engines_own_flags(kind, cap, fraction):
    from sparkctl.engines import get_engine

    knobs = Knobs.of(get_engine(kind).memory)
    kv = kv_cache_full(EngineStats(token_usage=0.97), knobs=knobs) or ""
    assert f"lower {cap} or raise {fraction}" in kv
    assert f"lower {fraction}" in (mem_available_low(gb10(3000), knobs=knobs) or "")
    snap = Snapshot(
        "c", "tp2", "now", 1.0, engines=[EngineRow("tp2", "u", stats=EngineStats(token_usage=0.97))]
    )
    (alert,) = [a for a in evaluate(snap, knobs=knobs) if a.code == "KvCacheFull"]
    assert cap in alert.reason


def test_an_engine_without_a_memory_model_gets_the_generic_words():
    from sparkctl.engines import get_engine

    assert Knobs.of(get_engine("llamacpp").memory) == Knobs()


def test_acceptance_collapsed():
    low_rate = EngineStats(running=4, accept_rate=0.05, accept_length=1.2)
    assert "acceptance rate 5%" in (acceptance_collapsed(low_rate) or "")
    low_len = EngineStats(running=4, accept_length=1.1)
    assert "accept length 1.10" in (acceptance_collapsed(low_len) or "")
    assert acceptance_collapsed(BUSY) is None
    idle = EngineStats(running=0, gen_tok_s=0.0, accept_rate=0.05, accept_length=1.0)
    assert acceptance_collapsed(idle) is None  # stale gauges of an idle engine


def test_mem_available_low_on_unified_only():
    why = mem_available_low(gb10(3000))
    assert why is not None and "MemAvailable 2.9 GiB" in why
    assert mem_available_low(gb10(60000)) is None
    discrete = NodeView(
        "h200",
        gpus=[GpuStat(0, "NVIDIA H200", mem_total_mib=143771)],
        mem_available_mib=3000,
        mem_total_mib=124610,
        unified_memory=False,
    )
    assert mem_available_low(discrete) is None


def test_throttling():
    hot = GpuStat(
        0, "NVIDIA H200", temp_c=91, sm_clock_mhz=1100, sm_clock_max_mhz=1980, throttle_mask=0x40 | 0x1
    )
    why = throttling(hot)
    assert why is not None and "HW thermal slowdown" in why and "1100/1980 MHz" in why and "91 C" in why
    assert throttling(GpuStat(0, "NVIDIA H200", throttle_mask=0x1)) is None  # idle
    assert throttling(GpuStat(0, "NVIDIA H200")) is None  # unknown


def test_rank_missing():
    gone = RankRow(1, "spark2", "c1", "missing", "container exited (exit code 137)")
    assert "sparkctl logs --rank 1" in (rank_missing(gone) or "")
    assert rank_missing(RankRow(1, "spark2", "c1", "running")) is None
    assert rank_missing(RankRow(1, "spark2", "c1", "unknown", "node spark2 unreachable")) is None


def test_evaluate_collects_all_with_where():
    snap = Snapshot("c", "tp2", "t", 2.0)
    snap.ranks = [
        RankRow(0, "spark1", "c0", "running"),
        RankRow(1, "spark2", "c1", "missing", "no container"),
    ]
    snap.nodes = [gb10(1000), NodeView("spark2", error="ssh: connection refused")]
    snap.engines = [EngineRow("tp2", "http://x/metrics", EngineStats(running=2, token_usage=0.99))]
    codes = [(a.code, a.where) for a in evaluate(snap, [1, 2, 3, 4])]
    assert codes == [
        ("RankMissing", "rank 1 (spark2)"),
        ("MemAvailableLow", "spark1"),
        ("NodeDegraded", "spark2"),
        ("QueueGrowing", "engine tp2"),
        ("KvCacheFull", "engine tp2"),
    ]
    snap.engines = [EngineRow("tp2", "http://x/metrics", error="/metrics: connection refused")]
    assert ("EngineMetricsDown", "engine tp2") in [(a.code, a.where) for a in evaluate(snap)]
    quiet = Snapshot(
        "c",
        "solo",
        "t",
        2.0,
        ranks=[RankRow(0, "spark1", "c0", "running")],
        nodes=[gb10(60000)],
        engines=[EngineRow("solo", "u", BUSY)],
    )
    assert evaluate(quiet, [0, 0, 0, 0]) == []


def test_a_recent_memory_guard_trip_warns_and_an_old_one_does_not() -> None:
    from sparkctl.top.alerts import evaluate

    trip = {"at": 990.0, "reason": "MemAvailable 3.90 GiB < 6.00 GiB", "killed": [{"name": "r0"}]}
    guard = {"running": False, "now": 1000.0, "state": {"at": 995.0}, "last_trip": trip}
    snap = Snapshot("c", "solo", "t", 2.0, nodes=[NodeView("spark1", guard=guard)])
    (alert,) = [a for a in evaluate(snap) if a.code == "MemoryGuardTripped"]
    assert "memory guard killed r0: MemAvailable 3.90 GiB < 6.00 GiB" in alert.reason
    old = {**guard, "last_trip": {**trip, "at": 0.0}}
    snap = Snapshot("c", "solo", "t", 2.0, nodes=[NodeView("spark1", guard=old)])
    assert not [a for a in evaluate(snap) if a.code == "MemoryGuardTripped"]
    # The group was started again after the trip (a rank younger than the trip): history, no alert;
    # a rank older than the trip (it survived on another GPU, or a stale view) keeps it.
    young = RankRow(0, "spark1", "r0", "running", uptime_s=5.0)
    snap = Snapshot("c", "solo", "t", 2.0, ranks=[young], nodes=[NodeView("spark1", guard=guard)])
    assert not [a for a in evaluate(snap) if a.code == "MemoryGuardTripped"]
    old_rank = RankRow(0, "spark1", "r0", "running", uptime_s=50.0)
    snap = Snapshot("c", "solo", "t", 2.0, ranks=[old_rank], nodes=[NodeView("spark1", guard=guard)])
    assert [a for a in evaluate(snap) if a.code == "MemoryGuardTripped"]
