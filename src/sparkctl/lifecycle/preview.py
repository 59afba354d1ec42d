"""`up --dry-run`: what `up` would stop and start, from the same read-only steps."""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.connectors.pool import NodePool
from sparkctl.lifecycle.modes import resolve_mode
from sparkctl.lifecycle.reconcile import involved_nodes, reconcile, settle
from sparkctl.lifecycle.steps import observe, resolve_plan
from sparkctl.planning.build import Plan, RankSpec, build_plan
from sparkctl.profile.schema import Profile
from sparkctl.runtime.containers import ContainerInfo
from sparkctl.runtime.readiness import probe


@dataclass(frozen=True)
class Preview:
    """What `up` would do, computed read-only (`up --dry-run`)."""

    plan: Plan
    stop: list[ContainerInfo]
    start: list[RankSpec]  # in start order: each group's ranks >= 1, then rank 0s, then the router
    rolling: str | None = None  # "replicas 1, 0 one at a time" or "not rolling: <why>"; None: n/a

    @property
    def noop(self) -> bool:
        return not self.stop and not self.start

    def to_json(self) -> dict:
        return {
            "plan": self.plan.to_json(),
            "noop": self.noop,
            "rolling": self.rolling,
            "stop": [c.to_json() for c in self.stop],
            "start": [
                {"rank": s.rank, "role": s.role, "node": s.node, "container": s.container_name}
                for s in self.start
            ],
        }


def preview(
    profile: Profile, pool: NodePool, *, mode: str | None = None, tp: int | None = None, rolling: bool = True
) -> Preview:
    """The same decisions as `up` (resolve, observe, reconcile, health, rolling), changing nothing."""
    plan = resolve_plan(profile, build_plan(profile, resolve_mode(profile, mode, tp=tp)), pool)
    observed = observe(pool, plan.cluster, involved_nodes(plan, profile))
    rec = reconcile(plan, observed)
    rec = settle(rec, observed, healthy=rec.up_to_date and probe(plan.endpoint).ready)
    router = [plan.router] if plan.router is not None and rec.router is None else []  # else kept
    if rec.up_to_date:
        return Preview(plan, rec.leftovers, router)
    rolled, note = _rolling_preview(profile, pool, plan, observed) if rolling else (None, None)
    if rolled is not None:
        return rolled
    peers = [s for s in plan.ranks if s.node_rank > 0]
    heads = [s for s in plan.ranks if s.node_rank == 0]
    return Preview(plan, rec.remove, [*peers, *heads, *router], rolling=note)


def _rolling_preview(
    profile: Profile, pool: NodePool, plan: Plan, observed: list[ContainerInfo]
) -> tuple[Preview | None, str | None]:
    """(what a rolling switch would replace replica by replica, None) when it rolls, else
    (None, why not); (None, None) when neither side has replicas."""
    from sparkctl.lifecycle.rolling import decide, replica_containers

    d = decide(profile, pool, plan, observed)
    if d.verdict is None:
        return None, None
    if not d.verdict.ok or d.old is None:
        return None, f"not rolling: {d.verdict.reason}"
    modes = {d.old.mode, plan.mode}
    order = d.verdict.order
    stop = [c for i in order for c in replica_containers(d.observed, plan, i, modes)]
    start = [r for i in order for r in sorted(plan.group_ranks(i), key=lambda r: r.node_rank == 0)]
    return Preview(plan, stop, start, rolling=f"replicas {', '.join(map(str, order))} one at a time"), None
