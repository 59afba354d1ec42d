"""`top`'s screen at 80 columns (golden files in tests/golden/), built from the parser fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkctl.facts.gpu import parse_meminfo
from sparkctl.top.alerts import Knobs, evaluate
from sparkctl.top.metrics import engine_stats, parse_metrics
from sparkctl.top.nodes import NodeSample, parse_gpu_stats, parse_net
from sparkctl.top.render import render_text
from sparkctl.top.snapshot import EngineRow, RankRow, Snapshot, node_view

ROOT = Path(__file__).parents[3]
FIX = ROOT / "tests" / "fixtures"
GOLDEN = ROOT / "tests" / "golden"
NET = ["enp1s0f1np1"]


def gb10_sample(node: str, t: float, rx: int, tx: int, avail_kb: int | None = None) -> NodeSample:
    meminfo = parse_meminfo((FIX / "gpu" / "gb10" / "meminfo.txt").read_text())
    if avail_kb is not None:
        meminfo["MemAvailable"] = avail_kb
    return NodeSample(
        node,
        t,
        gpus=parse_gpu_stats((FIX / "gpu" / "gb10" / "query-gpu-top.csv").read_text()),
        meminfo=meminfo,
        net=parse_net(f"{rx}\n{tx}\n", NET),
    )


def fixture_snapshot(degraded: bool = False) -> Snapshot:
    """Dual Spark tp2 from the fixtures: SGLang metrics a -> b (2 s), GB10 nvidia-smi + meminfo."""
    a = parse_metrics((FIX / "sglang" / "metrics-0.5.23-a.txt").read_text(), 100.0)
    b = parse_metrics((FIX / "sglang" / "metrics-0.5.23-b.txt").read_text(), 102.0)
    snap = Snapshot("dual-spark", "tp2", "2026-11-30T07:00:00+00:00", 2.0)
    snap.engines = [EngineRow("tp2", "http://192.168.100.10:30000/metrics", engine_stats(b, a))]
    s1 = node_view(
        gb10_sample("spark1", 102.0, 9_000_000_000, 8_800_000_000),
        gb10_sample("spark1", 100.0, 6_600_000_000, 6_500_000_000),
        None,
        "spark1",
    )
    snap.ranks = [RankRow(0, "spark1", "sparkctl-dual-spark-tp2-r0", "running", uptime_s=3600.0)]
    if degraded:
        snap.ranks.append(
            RankRow(1, "spark2", "sparkctl-dual-spark-tp2-r1", "unknown", "node spark2 unreachable")
        )
        s2 = node_view(
            None, None, "cannot connect to 192.168.1.12:22: timed out; check the node is up", "spark2"
        )
        s1 = node_view(gb10_sample("spark1", 102.0, 1, 1, avail_kb=2_500_000), None, None, "spark1")
    else:
        snap.ranks.append(RankRow(1, "spark2", "sparkctl-dual-spark-tp2-r1", "running", uptime_s=3600.0))
        s2 = node_view(
            gb10_sample("spark2", 102.0, 8_800_000_000, 9_000_000_000),
            gb10_sample("spark2", 100.0, 6_500_000_000, 6_600_000_000),
            None,
            "spark2",
        )
    snap.nodes = [s1, s2]
    knobs = Knobs(
        request_cap="max-running-requests", mem_fraction="mem-fraction-static"
    )  # dual-spark's engine
    snap.alerts = evaluate(snap, [0, 1, 2, 3] if degraded else [3, 3, 2, 3], knobs)
    return snap


@pytest.mark.parametrize("name", ["healthy", "degraded"])
def test_screen_golden_80_columns(name: str) -> None:
    text = render_text(fixture_snapshot(degraded=name == "degraded"), width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    path = GOLDEN / f"top-tp2-{name}-80.txt"
    if os.environ.get("SPARKCTL_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), (
        "top's screen changed; review and regenerate with SPARKCTL_UPDATE_GOLDEN=1"
    )


def test_screen_shows_the_numbers() -> None:
    text = render_text(fixture_snapshot(), width=80)
    assert "run 7  queue 3  2.5/s" in text and "KV cache 43%" in text
    assert "prompt 4000  gen 215" in text and "spec accept 3.58 tok/step (65%)" in text
    assert "unified" in text and "1.1G/1.1G" in text  # GB10 memory; 2.4e9 B over 2 s per direction
    assert "no warnings" in text


def test_degraded_screen_names_each_problem() -> None:
    text = render_text(fixture_snapshot(degraded=True), width=80)
    assert "unknown" in text and "NodeDegraded spark2" in text and "MemAvailableLow spark1" in text
    assert "QueueGrowing engine tp2" in text


def test_docs_show_the_golden_screens() -> None:
    """docs/top.md and docs/operations.md carry the 80-column samples as rendered today."""
    healthy = (GOLDEN / "top-tp2-healthy-80.txt").read_text()
    assert healthy in (ROOT / "docs" / "top.md").read_text()
    assert (GOLDEN / "top-tp2-degraded-80.txt").read_text() in (ROOT / "docs" / "top.md").read_text()
    assert healthy in (ROOT / "docs" / "operations.md").read_text()
