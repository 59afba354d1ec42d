"""`status`: per node and rank, what runs (state, uptime, image, mode, config) and whether it serves."""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field

from sparkctl.connectors.pool import NodePool
from sparkctl.errors import EngineDownError, LockHeldError, SparkctlError
from sparkctl.lifecycle import containers, orphans, state, supervisor
from sparkctl.lifecycle.containers import ContainerInfo
from sparkctl.lifecycle.lock import ClusterLock
from sparkctl.lifecycle.readiness import EndpointHealth, probe
from sparkctl.plan import Plan, build_plan
from sparkctl.profile.schema import Profile


@dataclass
class ModeStatus:
    mode: str
    plan: Plan | None  # None when the mode is no longer in the profile
    ranks: list[ContainerInfo]
    health: EndpointHealth
    running_hash: str | None

    @property
    def profile_hash(self) -> str | None:
        """The hash the profile gives now; None when it depends on discovery (hcas: auto)."""
        return self.plan.settled_hash if self.plan is not None else None

    @property
    def drift(self) -> bool | None:
        if self.profile_hash is None:
            return None
        return self.running_hash != self.profile_hash

    def to_json(self) -> dict:
        ep = self.plan.endpoint if self.plan else None
        return {
            "mode": self.mode,
            "endpoint": ep.url if ep else None,
            "model": ep.served_model_name if ep else None,
            "health": self.health.to_json(),
            "config_hash": self.running_hash,
            "profile_config_hash": self.profile_hash,
            "config_changed": self.drift,
            "ranks": sorted(c.rank for c in self.ranks if c.rank is not None),
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

    @property
    def restarts(self) -> list[dict]:
        return [e for e in self.events if e.get("event") in ("restarted", "restart_failed", "gave_up")]

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


def status(profile: Profile, pool: NodePool) -> ClusterStatus:
    """Every profile node in parallel; an unreachable node is reported (unknown), not fatal. The
    only change it makes: removing what a lost node still owed (see orphans.py), and saying so."""
    out = ClusterStatus(profile.cluster, [n.name for n in profile.nodes])
    out.settled = _settle(profile, pool)
    out.pending = state.pending(profile.cluster)
    out.supervisor = supervisor.running(profile.cluster)
    since = (out.supervisor or {}).get("since")
    out.events = state.events(profile.cluster, since=since) if since else state.events(profile.cluster)[-10:]
    out.containers, failed = containers.list_nodes(pool, profile.cluster, [n.name for n in profile.nodes])
    for node, exc in failed.items():
        # The error says what failed (SSH, or Docker on a local node) and how to fix it.
        why = (
            exc.message + (f"; fix: {exc.fix}" if exc.fix else "")
            if isinstance(exc, SparkctlError)
            else str(exc)
        )
        out.unreachable[node] = why
        out.unknown_why[node] = "Docker not answering" if isinstance(exc, EngineDownError) else "unreachable"
    out.containers.sort(key=lambda c: (c.mode or "", c.rank if c.rank is not None else 99, c.node))
    for mode in dict.fromkeys(c.mode for c in out.containers if c.running and c.mode):
        ranks = [c for c in out.containers if c.mode == mode]
        plan = build_plan(profile, mode) if mode in profile.modes else None
        hashes = {c.config_hash for c in ranks if c.running}
        if plan and plan.endpoint.api_key and plan.endpoint.api_key.file:  # read the key on rank 0's node
            with contextlib.suppress(SparkctlError):
                plan.endpoint.api_key.reveal_on(pool.get(plan.ranks[0].node))
        health = probe(plan.endpoint) if plan else EndpointHealth(detail="mode no longer in the profile")
        out.modes.append(ModeStatus(mode, plan, ranks, health, hashes.pop() if len(hashes) == 1 else None))
    return out


def running_mode(profile: Profile, pool: NodePool) -> str | None:
    """The one mode whose containers run now (None if none, several, or nodes unreachable)."""
    found, _ = containers.list_nodes(pool, profile.cluster, [n.name for n in profile.nodes])
    modes = {c.mode for c in found if c.running and c.mode in profile.modes}
    return modes.pop() if len(modes) == 1 else None
