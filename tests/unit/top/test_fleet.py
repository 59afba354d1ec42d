"""top/fleet.py: `top` of a whole fleet asks each service's collector and shows each under its name."""

from __future__ import annotations

from rich.console import Console

from sparkctl.top.fleet import FleetCollector, FleetSnapshot, fleet_screen
from sparkctl.top.snapshot import NodeView, Snapshot


class Stand:
    def __init__(self, cluster: str, error: str | None = None) -> None:
        self.cluster, self.error, self.calls = cluster, error, 0

    def sample(self) -> Snapshot:
        self.calls += 1
        node = NodeView(node="spark1", error=self.error) if self.error else None
        return Snapshot(self.cluster, "solo", "12:00:00", 2.0, nodes=[node] if node else [])


def test_each_service_is_sampled_and_shown_under_its_name() -> None:
    chat, coder = Stand("fleetduo-chat"), Stand("fleetduo-coder", error="unreachable")
    snap = FleetCollector("fleetduo", {"chat": chat, "coder": coder}).sample()  # type: ignore[dict-item]
    assert isinstance(snap, FleetSnapshot) and (chat.calls, coder.calls) == (1, 1)
    doc = snap.to_json()
    assert [s["service"] for s in doc["services"]] == ["chat", "coder"]
    assert doc["services"][1]["cluster"] == "fleetduo-coder"
    assert [n.error for n in snap.nodes] == ["unreachable"]  # what `top --once` exits 3 on
    out = Console(width=120, record=True)
    out.print(fleet_screen(snap))
    text = out.export_text()
    assert text.index("service chat") < text.index("fleetduo-chat") < text.index("service coder")
