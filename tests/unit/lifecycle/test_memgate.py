"""Before every start on unified memory (lifecycle/memgate.py): which nodes settle, and the `fit`
planner admission asks for the fix."""

from __future__ import annotations

from sparkctl.lifecycle.admission import GIB, NodeMemory, judge
from sparkctl.lifecycle.memgate import RECENT_STOP_S, settle_targets


def mem(avail: float) -> NodeMemory:
    return NodeMemory("spark1", int(avail * GIB), int(avail * GIB), int(128 * GIB), 0)


def test_settle_waits_only_where_ranks_stopped_since_the_last_start() -> None:
    now = 10_000.0
    data = {
        "a": {"before": 100 * GIB, "at": now - 60, "stopped_at": now - 5},  # stopped after its start
        "b": {"before": 100 * GIB, "at": now - 60},  # never stopped since
        "c": {"before": 100 * GIB, "at": now - 5000, "stopped_at": now - RECENT_STOP_S - 1},  # long ago
        "d": {"before": 100 * GIB, "at": now - 5, "stopped_at": now - 60},  # started again since
    }
    assert settle_targets(data, ["a", "b", "c", "d", "e"], now, 2 * GIB) == {"a": 98 * GIB}


def test_the_fit_planner_says_what_the_lower_fraction_serves(tmp_path) -> None:
    """The real planner on a real model's config and safetensors headers (a fixture), as admission
    runs it when the model is on the controller."""
    from pathlib import Path

    from sparkctl.lifecycle.memgate import _planner
    from sparkctl.planning.build import build_plan
    from sparkctl.profile import load_profile_text

    models = Path(__file__).resolve().parents[2] / "fixtures" / "models"
    prof = load_profile_text(
        "cluster: gb\n"
        "nodes:\n"
        "  - {name: spark1, address: local, gpu: {name: NVIDIA GB10, memory_gib: 119.7,"
        ' compute_capability: "12.1", unified_memory: true}}\n'
        "image: {ref: img:1}\n"
        f"model: {{hf_cache: {models}, target: {{id: meta-llama/llama-3.1-8b}}}}\n"
        'engine: {sglang_version: "0.5.23", args: {context-length: 32768, mem-fraction-static: 0.95}}\n'
        "modes: {solo: {nodes: [spark1], tp: 1}}\n"
    )
    spec = build_plan(prof, "solo").ranks[0]
    planner = _planner(prof, spec)
    served = planner(0.8, 100 * GIB)
    assert served is not None and served.fits and served.requests > 0 and served.kv_tokens > 32768
    v = judge(
        mem(100), fraction=0.95, ranks=1, shm=0, reserve=8 * GIB, flag="mem-fraction-static", planner=planner
    )
    assert v.fixes[0].startswith(
        f"--mem-fraction-static 0.92: still serves {planner(0.92, 100 * GIB).requests} "
    )
