"""`top` shows the memory guard: its probe's output parsed, and a warning after a recent trip."""

from __future__ import annotations

import json

from sparkctl.top.alerts import evaluate
from sparkctl.top.nodes import parse_guard
from sparkctl.top.snapshot import NodeView, Snapshot


def test_guard_probe_output_parses_and_a_recent_trip_warns() -> None:
    state = {"at": 1000.0, "mem_available": 5 << 30}
    trip = {"at": 990.0, "reason": "MemAvailable 3.90 GiB < 6.00 GiB", "killed": [{"name": "r0"}]}
    guard = parse_guard(f"true\n{json.dumps(state)}\n{json.dumps(trip)}\n")
    assert guard == {"running": True, "state": state, "last_trip": trip}
    assert parse_guard("") is None
    assert parse_guard(f"false\n{json.dumps(state)}\n\n") == {
        "running": False,
        "state": state,
        "last_trip": None,
    }
    snap = Snapshot("c", "solo", "t", 2.0, nodes=[NodeView("spark1", guard=guard)])
    (alert,) = [a for a in evaluate(snap) if a.code == "MemoryGuardTripped"]
    assert "memory guard killed r0: MemAvailable 3.90 GiB < 6.00 GiB" in alert.reason
    old = {**guard, "last_trip": {**trip, "at": 0.0}}
    assert not [
        a
        for a in evaluate(Snapshot("c", "solo", "t", 2.0, nodes=[NodeView("spark1", guard=old)]))
        if a.code == "MemoryGuardTripped"
    ]
