"""`status`: per node and rank, what runs (state, uptime, image, mode, config) and whether it serves."""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field

from sparkctl.clients.gateway import KeyCount, key_counts
from sparkctl.connectors.pool import NodePool
from sparkctl.errors import DockerDownError, LockHeldError, SparkctlError
from sparkctl.fanout import fan_out
from sparkctl.lifecycle import guard as guards
from sparkctl.lifecycle import orphans, state
from sparkctl.lifecycle.lock import ClusterLock
from sparkctl.lifecycle.router import RouterView
from sparkctl.lifecycle.supervisor import process as supervisor
from sparkctl.planning.build import Plan, build_plan
from sparkctl.profile.schema import Profile
from sparkctl.runtime import containers
from sparkctl.runtime.containers import ContainerInfo
from sparkctl.runtime.readiness import EndpointHealth, probe
from sparkctl.secrets import resolve, resolve_known


@dataclass
class ReplicaStatus:
    """One replica of a mode with several: its head endpoint, its ranks, and the router's view."""

    index: int
    node: str  # its rank 0's node
    url: str
    health: EndpointHealth
    ranks: dict[int, ContainerInfo | None]  # planned rank -> its container (None: missing)
    routed: str | None  # the router's view: "healthy", "unhealthy", "not listed"; None: no view
    mode: str = ""
    rank_nodes: dict[int, str] = field(default_factory=dict)  # where each rank is planned

    def problem(self) -> tuple[str, str] | None:
        """(what is wrong, the fix), or None when it serves and the router sends it requests."""
        again = f"`sparkctl up {self.mode}` restarts the replicas and puts them back in the router"
        for rank, c in self.ranks.items():
            if c is None or not c.running:
                how = "is missing" if c is None else f"is {c.status} ({c.describe_exit()})"
                where = c.node if c else self.rank_nodes.get(rank, self.node)
                return f"rank {rank} on {where} {how}", f"`sparkctl logs --rank {rank}` shows why; {again}"
        if not self.health.ready:
            return f"not serving ({self.health.detail})", f"`sparkctl logs --rank {min(self.ranks)}`; {again}"
        if self.routed == "unhealthy":
            return (
                "the router marks it unhealthy and sends it no requests",
                f"it answers sparkctl: check that the router's node reaches {self.url}; {again}",
            )
        if self.routed == "not listed":
            return "the router does not route to it (not in its worker list)", again
        return None

    @property
    def state(self) -> str:
        problem = self.problem()
        if problem is None:
            return "ready"
        return "down" if not self.health.ready else "unhealthy"

    def to_json(self) -> dict:
        problem = self.problem()
        return {
            "index": self.index,
            "node": self.node,
            "url": self.url,
            "state": self.state,
            "health": self.health.to_json(),
            "ranks": {str(r): (c.status if c else "missing") for r, c in self.ranks.items()},
            "router": self.routed,
            "problem": problem[0] if problem else None,
            "fix": problem[1] if problem else None,
        }


@dataclass
class ModeStatus:
    mode: str
    plan: Plan | None  # None when the mode is no longer in the profile
    ranks: list[ContainerInfo]
    health: EndpointHealth
    running_hash: str | None
    replicas: list[ReplicaStatus] = field(default_factory=list)  # modes with several only
    router: RouterView | None = None  # modes with a router
    keys: list[KeyCount] | None = None  # engine.api_keys: each key's counts at the gateway
    keys_error: str | None = None

    @property
    def profile_hash(self) -> str | None:
        """The hash the profile gives now; None when it depends on discovery (hcas: auto)."""
        return self.plan.settled_hash if self.plan is not None else None

    @property
    def drift(self) -> bool | None:
        if self.profile_hash is None:
            return None
        return self.running_hash != self.profile_hash

    def dead_rank(self) -> str | None:
        """The first planned rank whose container is not running (a single group: with replicas,
        each replica says it). An engine's /health may not notice: one answers 200 with a TP peer
        dead, and its rank 0 may exit with code 0 after one; both are failures here."""
        if self.plan is None or self.replicas:
            return None
        found = {(c.node, c.name): c for c in self.ranks}
        for spec in self.plan.ranks:
            c = found.get((spec.node, spec.container_name))
            if c is None or not c.running:
                how = "is missing" if c is None else f"is {c.status} ({c.describe_exit()})"
                return f"rank {spec.rank} on {spec.node} {how}"
        return None

    def to_json(self) -> dict:
        ep = self.plan.endpoint if self.plan else None
        return {
            "mode": self.mode,
            "endpoint": ep.url if ep else None,
            "model": ep.served_model_name if ep else None,
            "health": self.health.to_json(),
            "broken": self.dead_rank(),
            "config_hash": self.running_hash,
            "profile_config_hash": self.profile_hash,
            "config_changed": self.drift,
            "ranks": sorted(c.rank for c in self.ranks if c.rank is not None),
            "replicas": [r.to_json() for r in self.replicas],
            "router": self.router.to_json() if self.router else None,
            "keys": [k.to_json() for k in self.keys] if self.keys is not None else None,
            "keys_error": self.keys_error,
        }


@dataclass
class ClusterStatus:
    cluster: str
    nodes: list[str] = field(default_factory=list)  # the profile's nodes, all asked
    containers: list[ContainerInfo] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)  # what runs there is unknown
    unknown_why: dict[str, str] = field(default_factory=dict)  # short: "unreachable", "Docker not answering"
    modes: list[ModeStatus] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)  # leftovers of lost nodes removed by this call
    pending: list[state.Pending] = field(default_factory=list)  # still owed (node not reachable yet)
    supervisor: dict | None = None  # the live supervisor's record
    events: list[dict] = field(default_factory=list)  # the supervisor's events since it started
    guards: dict[str, dict] = field(
        default_factory=dict
    )  # node -> the memory guard's {running, state, trips}

    @property
    def restarts(self) -> list[dict]:
        shown = ("restarted", "restart_failed", "gave_up", "node_still_down", "node_back", "reconciling")
        return [e for e in self.events if e.get("event") in shown]

    def to_json(self) -> dict:
        return {
            "cluster": self.cluster,
            "containers": [c.to_json() for c in self.containers],
            "unreachable": self.unreachable,
            "unknown": sorted(self.unreachable),
            "modes": [m.to_json() for m in self.modes],
            "settled": self.settled,
            "pending_cleanup": [asdict(p) for p in self.pending],
            "supervisor": {**self.supervisor, "running": True} if self.supervisor else None,
            "restarts": self.restarts,
            "events": self.events,
            "memory_guard": self.guards,
        }


def _settle(profile: Profile, pool: NodePool) -> list[str]:
    """Finish a lost node's rollback when it answers again - unless another command is at work."""
    if not state.pending(profile.cluster):
        return []
    try:
        with ClusterLock(profile.cluster, "sparkctl status (cleanup of a lost node)"):
            return orphans.settle_pending(pool, profile.cluster)[0]
    except LockHeldError:
        return []


def status(profile: Profile, pool: NodePool, mode: str | None = None) -> ClusterStatus:
    """Every profile node in parallel (`mode`: that mode's nodes and containers only); an
    unreachable node is reported (unknown), not fatal. The only change it makes: removing what a
    lost node still owed (see orphans.py), and saying so."""
    from sparkctl.lifecycle.down import mode_nodes, of_mode

    nodes = [n.name for n in profile.nodes] if mode is None else mode_nodes(profile, mode)
    out = ClusterStatus(profile.cluster, nodes)
    out.settled = _settle(profile, pool)
    out.pending = state.pending(profile.cluster)
    out.supervisor = supervisor.running(profile.cluster)
    since = (out.supervisor or {}).get("since")
    out.events = state.events(profile.cluster, since=since) if since else state.events(profile.cluster)[-10:]
    out.containers, failed = containers.list_nodes(pool, profile.cluster, nodes)
    if mode is not None:
        out.containers = [c for c in out.containers if of_mode(c, mode, profile)]
    for node, exc in failed.items():
        # The error says what failed (SSH, or Docker on a local node) and how to fix it.
        why = (
            exc.message + (f"; fix: {exc.fix}" if exc.fix else "")
            if isinstance(exc, SparkctlError)
            else str(exc)
        )
        out.unreachable[node] = why
        out.unknown_why[node] = "Docker not answering" if isinstance(exc, DockerDownError) else "unreachable"
    out.containers.sort(key=lambda c: (c.mode or "", c.rank if c.rank is not None else 99, c.node))
    out.guards = guards.read(
        profile, pool, [n for n in guards.nodes_to_read(profile) if n not in out.unreachable]
    )
    # a mode runs while one of its engine ranks does (its gateway outlives a rank that exited)
    for mode in dict.fromkeys(c.mode for c in out.containers if c.running and c.mode and c.role == "engine"):
        ranks = [c for c in out.containers if c.mode == mode and c.role == "engine"]
        plan = _resolved(profile, pool, build_plan(profile, mode)) if mode in profile.modes else None
        hashes = {c.config_hash for c in ranks if c.running}
        if plan and plan.endpoint.api_key and plan.endpoint.api_key.file:  # read the key on rank 0's node
            with contextlib.suppress(SparkctlError):
                resolve(plan.endpoint.api_key, pool.get(plan.ranks[0].node))
        health = probe(plan.endpoint) if plan else EndpointHealth(detail="mode no longer in the profile")
        st = ModeStatus(mode, plan, ranks, health, hashes.pop() if len(hashes) == 1 else None)
        if plan is not None and plan.replicas > 1:
            _replicas(pool, plan, out.containers, st)
        if plan is not None:
            _key_counts(plan, st)
        out.modes.append(st)
    return out


def _key_counts(plan: Plan, st: ModeStatus) -> None:
    """Each named key's counts, from the gateway that owns the endpoint (the router's, else rank 0's)."""
    api = plan.router if plan.router is not None else plan.ranks[0]
    if api.gateway is None or not api.gateway.named:
        return
    key = resolve_known(plan.endpoint.api_key)
    if key is None:
        st.keys_error = "the operator's key (engine.api_key) cannot be read here"
        return
    try:
        st.keys = key_counts(plan.endpoint.url, key)
    except SparkctlError as exc:
        st.keys_error = exc.message


def _resolved(profile: Profile, pool: NodePool, plan: Plan) -> Plan:
    """Named nodes' IPs as `up` read them: the endpoint probed from here and the replicas the router
    knows by IP match what runs (best effort: an unreachable node keeps the name)."""
    if not plan.addresses_pending:
        return plan
    from sparkctl.lifecycle.addresses import node_addresses
    from sparkctl.planning.model import PlanFacts

    try:
        addresses = node_addresses(profile, pool, plan.all_nodes)
    except SparkctlError:
        return plan
    return build_plan(profile, plan.mode, PlanFacts(addresses=addresses))


def _replicas(pool: NodePool, plan: Plan, found: list[ContainerInfo], st: ModeStatus) -> None:
    """Each replica's head endpoint (probed in parallel), its ranks' containers, the router's view."""
    from sparkctl.lifecycle import router as routers

    by_name = {(c.node, c.name): c for c in found}
    if plan.router is not None:
        info = by_name.get((plan.router.node, plan.router.container_name))
        st.router = routers.view(pool, plan, info)
    healths = fan_out([g.index for g in plan.groups], lambda i: probe(plan.groups[i].endpoint)).ok
    for g in plan.groups:
        ranks = {n: by_name.get((plan.rank(n).node, plan.rank(n).container_name)) for n in g.ranks}
        health = healths.get(g.index) or EndpointHealth(detail="not probed")
        routed = st.router.health_of(g.worker_url) if st.router else None
        nodes = {n: plan.rank(n).node for n in g.ranks}
        st.replicas.append(
            ReplicaStatus(g.index, g.head_node, g.worker_url, health, ranks, routed, plan.mode, nodes)
        )


def running_mode(profile: Profile, pool: NodePool) -> str | None:
    """The one mode whose containers run now (None if none, several, or nodes unreachable)."""
    found, _ = containers.list_nodes(pool, profile.cluster, [n.name for n in profile.nodes])
    modes = {c.mode for c in found if c.running and c.role == "engine" and c.mode in profile.modes}
    return modes.pop() if len(modes) == 1 else None
