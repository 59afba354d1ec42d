"""`sparkctl top` of a whole fleet: each service's own snapshot (its view, its ranks, its engine's
metrics), taken in turn at every refresh and shown one under the other (docs/fleet.md)."""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.top.snapshot import Collector, NodeView, Snapshot


@dataclass(frozen=True)
class FleetSnapshot:
    cluster: str
    services: list[tuple[str, Snapshot]]

    @property
    def nodes(self) -> list[NodeView]:
        return [n for _, snap in self.services for n in snap.nodes]

    def to_json(self) -> dict:
        return {
            "cluster": self.cluster,
            "services": [{"service": n, **s.to_json()} for n, s in self.services],
        }


class FleetCollector:
    """One Collector per service; `sample()` asks each (their rates are their own)."""

    def __init__(self, cluster: str, collectors: dict[str, Collector]) -> None:
        self.cluster = cluster
        self.collectors = collectors

    def sample(self) -> FleetSnapshot:
        return FleetSnapshot(self.cluster, [(n, c.sample()) for n, c in self.collectors.items()])


def fleet_screen(snap: FleetSnapshot):  # -> rich Group
    from rich.console import Group
    from rich.rule import Rule

    from sparkctl.top.render import screen

    parts: list = []
    for name, one in snap.services:
        parts += [Rule(f"service {name}", align="left"), screen(one)]
    return Group(*parts)
