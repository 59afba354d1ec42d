"""Replica groups from a mode's layout: which node runs which rank of which group, on which GPUs
and ports. Pure: no I/O; `layout` takes plain values and `mode_layout` reads a profile's mode, so
`profile check`, `plan` and the tests share one set of rules.

A mode is `nodes` x (`tp`, `pp`, `replicas`):
- more nodes than replicas: the nodes are cut, in order, into `replicas` groups of equal size,
  and each group runs TP x PP over its nodes (`tp2x2` = 4 nodes, 2 groups of 2);
- fewer nodes than replicas: every node hosts `replicas / len(nodes)` single-node groups, each on
  its own GPUs and ports (one box with two GPUs, one replica per GPU).
Each rule that rejects a layout has a name, so `profile check` can say which one failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkctl.profile.schema import Mode, Profile

# Ports a group binds beyond its API port: an engine may bind dist_init_port+1..+6 (DP attention),
# so groups that share a node keep their rendezvous ports this far apart.
DIST_PORT_STRIDE = 10
DIST_PORT_SPAN = 7  # dist_init_port .. +6
GATE_PORT_OFFSET = DIST_PORT_SPAN  # a gated group's launch gate: dist_init_port + 7 (inside the stride)


class TopologyError(ValueError):
    """A layout that cannot run; `rule` names the rule it breaks."""

    def __init__(self, rule: str, message: str, fix: str | None = None) -> None:
        super().__init__(f"[{rule}] {message}" + (f" (fix: {fix})" if fix else ""))
        self.rule = rule
        self.message = message
        self.fix = fix


@dataclass(frozen=True)
class Slot:
    """One rank of one group: the engine's node rank on `node`, using `gpu_ids` there."""

    group: int
    node_rank: int
    node: str
    gpu_ids: tuple[int, ...]


@dataclass(frozen=True)
class Group:
    """One replica: a TP x PP engine over `slots` (slot 0 is its head, which serves HTTP)."""

    index: int
    slots: tuple[Slot, ...]
    tp: int
    pp: int
    port: int
    dist_init_port: int

    @property
    def head(self) -> Slot:
        return self.slots[0]

    @property
    def nodes(self) -> list[str]:
        return [s.node for s in self.slots]

    @property
    def nnodes(self) -> int:
        return len(self.slots)

    @property
    def gate_port(self) -> int:
        """Where a gated start's control server listens on the head (memory.gated_start)."""
        return self.dist_init_port + GATE_PORT_OFFSET


@dataclass(frozen=True)
class Layout:
    groups: tuple[Group, ...]

    @property
    def replicas(self) -> int:
        return len(self.groups)

    @property
    def slots(self) -> list[Slot]:
        return [s for g in self.groups for s in g.slots]


def _split(nodes: Sequence[str], replicas: int) -> list[list[str]]:
    """Node lists of each group, in order."""
    n = len(nodes)
    if replicas < 1:
        raise TopologyError("replicas-positive", f"replicas={replicas} must be at least 1")
    if n >= replicas:
        if n % replicas:
            raise TopologyError(
                "replicas-divide-nodes",
                f"{n} node(s) do not split into {replicas} equal replica groups",
                fix=f"list a multiple of {replicas} nodes, or set replicas to a divisor of {n}",
            )
        size = n // replicas
        return [list(nodes[i * size : (i + 1) * size]) for i in range(replicas)]
    if replicas % n:
        raise TopologyError(
            "replicas-divide-nodes",
            f"{replicas} replicas do not spread evenly over {n} node(s)",
            fix=f"set replicas to a multiple of {n}",
        )
    per_node = replicas // n
    return [[nodes[i // per_node]] for i in range(replicas)]


def _only_gpus(nodes: Sequence[str], gpus: Mapping[str, int], gpu_ids: Sequence[int]) -> dict[str, int]:
    """The GPU count each node offers when a mode names its GPUs (`gpu_ids`), each checked."""
    if len(set(gpu_ids)) != len(gpu_ids):
        raise TopologyError("gpu-ids", f"gpu_ids {list(gpu_ids)} names a GPU twice", fix="list each GPU once")
    for node in nodes:
        have = gpus.get(node, 0)
        if any(i >= have for i in gpu_ids):
            raise TopologyError(
                "gpu-ids",
                f"node '{node}' has {have} GPU(s) (ids 0-{have - 1}) but gpu_ids names {max(gpu_ids)}",
                fix=f"name GPUs below {have}, or fix nodes[{node}].gpus",
            )
    return {node: len(gpu_ids) for node in nodes}


def layout(
    nodes: Sequence[str],
    gpus: Mapping[str, int],
    *,
    tp: int,
    pp: int = 1,
    replicas: int = 1,
    port: int = 30000,
    dist_init_port: int = 50051,
    gpu_ids: Sequence[int] | None = None,
) -> Layout:
    """The groups of a mode, or TopologyError naming the rule the layout breaks. `gpu_ids`: the
    GPUs of each node the mode may use, in order (default: all of them, from GPU 0)."""
    if tp < 1 or pp < 1:
        raise TopologyError("sizes-positive", f"tp={tp} and pp={pp} must be at least 1")
    if len(set(nodes)) != len(nodes):
        raise TopologyError("node-once", "a node is listed twice", fix="list each node once")
    if gpu_ids is not None:
        gpus = _only_gpus(nodes, gpus, gpu_ids)
    members = _split(nodes, replicas)
    world = tp * pp
    used_gpus: dict[str, int] = {}
    on_node: dict[str, int] = {}  # groups already headed on a node: ports must differ
    groups = []
    for index, group_nodes in enumerate(members):
        g = len(group_nodes)
        if world % g:
            raise TopologyError(
                "nodes-divide-tp-pp",
                f"group {index} spans {g} node(s), which do not divide tp x pp = {world}",
                fix=f"use tp x pp a multiple of {g}, or {g} node(s) per group that divide {world}",
            )
        per_node = world // g
        slots = []
        for node_rank, node in enumerate(group_nodes):
            first = used_gpus.get(node, 0)
            have = gpus.get(node, 0)
            if first + per_node > have:
                raise TopologyError(
                    "gpus-per-node",
                    f"node '{node}' needs {first + per_node} GPU(s) for its groups but has {have}",
                    fix="lower tp or replicas, or add nodes",
                )
            used_gpus[node] = first + per_node
            ids = range(first, first + per_node)
            slots.append(
                Slot(index, node_rank, node, tuple(gpu_ids[i] for i in ids) if gpu_ids else tuple(ids))
            )
        k = on_node.get(group_nodes[0], 0)
        on_node[group_nodes[0]] = k + 1
        groups.append(
            Group(
                index=index,
                slots=tuple(slots),
                tp=tp,
                pp=pp,
                port=port + k,
                dist_init_port=dist_init_port + DIST_PORT_STRIDE * k,
            )
        )
    return Layout(tuple(groups))


FRONT_OFFSET = 10000  # an engine's own port searches start at its --port + 100..1000: never the API port


def internal_offset(engine_port: int, internal_port: int | None) -> int:
    """How far the engine's own port behind the gateway sits from its API port:
    engine.internal_port - engine.port, else -10000 (+10000 where that falls below 1024). Below
    30000-ish, not above: Linux hands out 32768-60999 as outgoing connections' local ports, and one
    of those holding the engine's port made its bind fail (EADDRINUSE with nothing listening)."""
    if internal_port is not None:
        return internal_port - engine_port
    return -FRONT_OFFSET if engine_port - FRONT_OFFSET >= 1024 else FRONT_OFFSET


def _check_ports(
    lay: Layout, router: tuple[str, int, int] | None, front: int | None = None, gated: bool = False
) -> dict[str, dict[int, str]]:
    """No port bound twice on one node: API ports, multi-node rendezvous ranges, the router's
    (`router`: its node, API port and metrics port), the engines' and the router's own behind
    their gateways (`front`: their offset from the API port), a gated group's launch gate.
    Returns node -> port -> what binds it."""
    used: dict[str, dict[int, str]] = {}

    def take(node: str, port: int, what: str) -> None:
        taken = used.setdefault(node, {})
        if port in taken:
            raise TopologyError(
                "ports-distinct",
                f"port {port} on node '{node}' is both {taken[port]} and {what}",
                fix="move engine.port, fabric.dist_init_port or the router apart",
            )
        taken[port] = what

    def take_inner(node: str, port: int, what: str) -> None:
        assert front is not None
        inner = port + front
        if not 1 <= inner <= 65535:
            raise TopologyError(
                "ports-distinct",
                f"{what} behind the gateway would be {inner}",
                fix="set engine.internal_port to a free port between 1 and 65535",
            )
        take(node, inner, f"{what} behind the gateway")

    if router is not None:
        node, port, metrics_port = router
        take(node, port, "the router's port")
        take(node, metrics_port, "the router's metrics port")
        if front is not None:
            take_inner(node, port, "the router's own port")
    for g in lay.groups:
        take(g.head.node, g.port, f"replica {g.index}'s API port")
        if front is not None:
            take_inner(g.head.node, g.port, f"replica {g.index}'s engine port")
        if g.nnodes > 1:
            for p in range(g.dist_init_port, g.dist_init_port + DIST_PORT_SPAN):
                take(g.head.node, p, f"replica {g.index}'s rendezvous port")
            if gated:
                take(g.head.node, g.gate_port, f"replica {g.index}'s launch gate")
    return used


def worker_port_base(engine_port: int, replicas: int) -> int:
    """Replicas listen above the router, which takes engine.port (the user's one endpoint)."""
    return engine_port + 1 if replicas > 1 else engine_port


def mode_layout(profile: Profile, mode: Mode) -> Layout:
    """The layout of a profile's mode, with its ports checked (the router's included)."""
    return _mode_layout_ports(profile, mode)[0]


def mode_ports(profile: Profile, mode: Mode) -> dict[str, dict[int, str]]:
    """node -> port -> what binds it, of every rank (and the router) of a mode: what a fleet's
    services must not share (profile/fleet.py)."""
    return _mode_layout_ports(profile, mode)[1]


def _mode_layout_ports(profile: Profile, mode: Mode) -> tuple[Layout, dict[str, dict[int, str]]]:
    lay = layout(
        mode.nodes,
        {n.name: n.gpus for n in profile.nodes},
        tp=mode.tp,
        pp=mode.pp,
        replicas=mode.replicas,
        port=worker_port_base(profile.engine.port, mode.replicas),
        dist_init_port=profile.fabric.dist_init_port,
        gpu_ids=mode.gpu_ids,
    )
    router = None
    if lay.replicas > 1:
        node = profile.router.node or lay.groups[0].head.node
        router = (node, profile.engine.port, profile.router.metrics_port)
    eng = profile.engine
    front = internal_offset(eng.port, eng.internal_port) if eng.gateway else None
    used = _check_ports(lay, router, front, gated=profile.memory.gated_start)
    return lay, used
