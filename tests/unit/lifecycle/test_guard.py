"""Controller side of the memory guard (lifecycle/guard.py) and the settle decision (memgate.py)."""

from __future__ import annotations

from sparkctl.lifecycle import guard
from sparkctl.profile import load_profile_text

GIB = 1 << 30

PROFILE = """
cluster: c1
nodes:
  - {name: a, address: 10.0.0.1, gpu: {name: NVIDIA GB10, memory_gib: 119.7, compute_capability: "12.1", unified_memory: true}}
  - {name: b, address: 10.0.0.2}
image: {ref: img:1}
model: {target: {id: org/m}}
modes: {dp2: {nodes: [a, b], replicas: 2}}
"""


def profile(extra: str = ""):
    return load_profile_text(PROFILE + extra)


def test_the_guard_runs_on_unified_nodes_by_default_and_as_told() -> None:
    p = profile()
    assert guard.unified_nodes(p, ["a", "b", "a"]) == ["a"]
    assert guard.guarded_nodes(p, ["a", "b"]) == ["a"]
    assert guard.guarded_nodes(guard.with_guard(p, True), ["a", "b"]) == ["a", "b"]
    assert guard.guarded_nodes(guard.with_guard(p, False), ["a", "b"]) == []
    assert guard.unified_nodes(profile("memory: {unified: true}\n"), ["a", "b"]) == ["a", "b"]


def test_node_config_carries_the_gb10_defaults() -> None:
    cfg = guard.node_config(profile())
    assert cfg["cluster"] == "c1" and cfg["min_available"] == 6 * GIB and cfg["interval_s"] == 1.0
    assert any("NV_ERR_NO_MEMORY" in p for p in cfg["kernel_patterns"])
    assert any("Xid" in p for p in cfg["kernel_patterns"])


def test_a_trip_reads_as_one_line() -> None:
    trip = {
        "at": 0,
        "reason": "MemAvailable 3.90 GiB < 6.00 GiB",
        "mem_available": 4 * GIB,
        "mem_total": 120 * GIB,
        "killed": [{"name": "sparkctl-c1-tp2-r0"}],
        "gone_ms": 41.5,
    }
    line = guard.describe_trip("a", trip)
    assert (
        "memory guard on a tripped: MemAvailable 3.90 GiB < 6.00 GiB (MemAvailable 4.0 GiB of 120.0 GiB)"
        in line
    )
    assert line.endswith("killed sparkctl-c1-tp2-r0, gone 42 ms after")
