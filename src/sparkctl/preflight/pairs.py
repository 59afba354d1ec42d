"""Which node must reach which: the pairs preflight's pairwise checks probe, read from the plan.

Only nodes that will talk are paired: the nodes of one replica group that spans several nodes
(NCCL and the rendezvous run between them: tp4 = 6 pairs, tp2x2 = 1 pair in each group, dp = none),
and the router's node to each replica head on another node. Each node probes ITS peers in its own
probe batch (one remote command per node, run in parallel), so a run costs the controller one
session per node, not one per pair. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkctl.planning.build import Plan


def group_nodes(plan: Plan) -> list[list[str]]:
    """The distinct nodes of each replica group, node rank 0 first."""
    return [list(dict.fromkeys(r.node for r in plan.group_ranks(g.index))) for g in plan.groups]


def fabric_peers(plan: Plan) -> dict[str, list[str]]:
    """node -> the nodes it exchanges fabric traffic with (its group's other nodes), in rank order.

    Both directions are listed (a->b and b->a): an MTU problem may show in one direction only."""
    peers: dict[str, list[str]] = {}
    for nodes in group_nodes(plan):
        for src in nodes:
            mine = peers.setdefault(src, [])
            mine += [dst for dst in nodes if dst != src and dst not in mine]
    return {n: p for n, p in peers.items() if p}


def ssh_peers(plan: Plan) -> dict[str, list[str]]:
    """Each multi-node group's head -> the other nodes of its group (the recipe's SSH path)."""
    out: dict[str, list[str]] = {}
    for nodes in group_nodes(plan):
        if len(nodes) > 1:
            mine = out.setdefault(nodes[0], [])
            mine += [n for n in nodes[1:] if n not in mine]
    return out


@dataclass(frozen=True)
class ReplicaHead:
    """Where the router sends one replica's requests (the replica's worker URL)."""

    group: int
    node: str
    host: str
    port: int


def router_targets(plan: Plan) -> list[ReplicaHead]:
    """The replica heads the router reaches over the network (heads on its own node are local)."""
    if plan.router is None:
        return []
    return [
        ReplicaHead(g.index, g.head_node, g.endpoint.host, g.endpoint.port)
        for g in plan.groups
        if g.head_node != plan.router.node
    ]


def pair_count(peers: dict[str, list[str]]) -> int:
    """Unordered pairs in a peers map (tp4: 6)."""
    return len({frozenset((a, b)) for a, bs in peers.items() for b in bs})
