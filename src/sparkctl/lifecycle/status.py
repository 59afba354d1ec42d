"""`status`: per node and rank, what runs (state, uptime, image, mode, config) and whether it serves."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from sparkctl.connectors.pool import NodePool
from sparkctl.errors import SparkctlError
from sparkctl.lifecycle import containers
from sparkctl.lifecycle.containers import ContainerInfo
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
    containers: list[ContainerInfo] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)
    modes: list[ModeStatus] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "cluster": self.cluster,
            "containers": [c.to_json() for c in self.containers],
            "unreachable": self.unreachable,
            "modes": [m.to_json() for m in self.modes],
        }


def status(profile: Profile, pool: NodePool) -> ClusterStatus:
    """Read-only (no lock): every profile node in parallel; an unreachable node is reported, not fatal."""
    out = ClusterStatus(profile.cluster)
    out.containers, failed = containers.list_nodes(pool, profile.cluster, [n.name for n in profile.nodes])
    for node, exc in failed.items():
        # The error says what failed (SSH, or Docker on a local node) and how to fix it.
        why = exc.message + (f"; fix: {exc.fix}" if exc.fix else "") if isinstance(exc, SparkctlError) else str(exc)
        out.unreachable[node] = why
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
