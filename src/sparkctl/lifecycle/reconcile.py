"""`up`'s pure decisions: which mode, what already runs as planned, what must go first.

The router of a mode with replicas is planned like a rank, but kept apart: a running router with
the plan's router config stays (its worker set is reconciled through its API, lifecycle/router.py)
even when the replicas behind it restart, so its endpoint never goes away.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkctl.errors import UsageError
from sparkctl.lifecycle.router import matches
from sparkctl.planning.build import LABEL_PREFIX, Plan, RankSpec
from sparkctl.planning.gateway_container import gateway_container
from sparkctl.profile.schema import Profile
from sparkctl.runtime.containers import ContainerInfo


def choose_mode(profile: Profile, mode: str | None, tp: int | None) -> str:
    """MODE argument, or the mode with `--tp N`, or the profile's default."""
    if tp is None:
        return mode or profile.default_mode()
    matches = [name for name, m in profile.modes.items() if m.tp == tp]
    if mode is not None:
        if mode in profile.modes and profile.modes[mode].tp != tp:
            raise UsageError(f"mode '{mode}' has tp={profile.modes[mode].tp}, not --tp {tp}")
        return mode
    if not matches:
        have = ", ".join(f"{n} (tp={m.tp})" for n, m in profile.modes.items())
        raise UsageError(f"no mode with tp={tp} in this profile", fix=f"modes: {have}")
    if len(matches) > 1:
        raise UsageError(
            f"several modes have tp={tp}: {', '.join(matches)}", fix="name the mode instead of --tp"
        )
    return matches[0]


@dataclass(frozen=True)
class Reconcile:
    up_to_date: bool  # every planned rank runs the plan's config (the router: see `router`)
    remove: list[ContainerInfo]  # what must go before starting (other modes, changed or dead ranks)
    # Not planned and not serving (exited containers, a router the mode does not have): removed
    # when the mode is found up to date.
    leftovers: list[ContainerInfo]
    router: ContainerInfo | None = None  # the running router with the plan's router config: kept
    # Up to date, but these ranks' (or the kept router's) gateways are gone or changed: `up`
    # restarts only the gateways.
    gateways: list[RankSpec] = field(default_factory=list)


def _served(plan: Plan) -> list[RankSpec]:
    return [s for s in [*plan.ranks, *([plan.router] if plan.router else [])] if s.gateway is not None]


def _hash(spec: RankSpec) -> str:
    return spec.labels.get(f"{LABEL_PREFIX}config_hash", "")


def router_container(plan: Plan, observed: list[ContainerInfo]) -> ContainerInfo | None:
    """The plan's router container as observed (any state), None if absent or not planned."""
    spec = plan.router
    if spec is None:
        return None
    return next((c for c in observed if (c.node, c.name) == (spec.node, spec.container_name)), None)


def reconcile(plan: Plan, observed: list[ContainerInfo]) -> Reconcile:
    """Ranks decide: all running the plan's hash (and no other mode serving) is up to date. The
    router is then kept if it runs the plan's router config, else replaced by `up` (router.py)
    without touching the ranks; when the ranks restart, only a kept router survives."""
    # Gateways are judged apart: a gateway gone or changed beside up-to-date ranks is restarted
    # alone (a revoked key: no engine restart); each one is removed with what it serves.
    served = {(g.node, g.container_name): s for s in _served(plan) if (g := gateway_container(s))}
    hashes = {(g.node, g.container_name): _hash(g) for g in map(gateway_container, served.values())}
    running = {(c.node, c.name): c.config_hash for c in observed if c.running}
    stale_gates = [s for key, s in served.items() if running.get(key) != hashes[key]]
    observed = [c for c in observed if (c.node, c.name) not in served]
    planned = {(s.node, s.container_name) for s in plan.ranks}
    router = router_container(plan, observed)
    kept = router if router is not None and plan.router and matches(router, plan.router) else None
    mine = {(c.node, c.name): c for c in observed if (c.node, c.name) in planned}
    others = [c for c in observed if (c.node, c.name) not in planned and c is not router]
    up_to_date = len(mine) == len(planned) and all(
        c.running and c.config_hash == plan.config_hash for c in mine.values()
    )
    serving = [c for c in others if c.running and c.role == "engine"]  # another mode's ranks
    if up_to_date and not serving:
        gates = [
            s for s in stale_gates if s.role != "router" or kept is not None
        ]  # a new router brings its own
        return Reconcile(True, [], [c for c in others if c not in serving], kept, gates)
    stale = [router] if router is not None and kept is None else []
    return Reconcile(False, [*others, *mine.values(), *stale], [], kept)


def settle(rec: Reconcile, observed: list[ContainerInfo], healthy: bool) -> Reconcile:
    """The right config running but not serving: restart it, i.e. stop everything observed (but
    a kept router: it waits for the replicas to come back)."""
    if rec.up_to_date and not healthy:
        return Reconcile(False, [c for c in observed if c is not rec.router], [], rec.router)
    return rec


def involved_nodes(plan: Plan, profile: Profile | None = None) -> list[str]:
    """Nodes holding the plan's ranks or router, anything plan.stop_first names, and the profile's
    router node (a router left by another mode) - order kept, no repeats."""
    router = [profile.router.node] if profile is not None and profile.router.node else []
    return list(dict.fromkeys([*plan.all_nodes, *(c.node for c in plan.stop_first), *router]))
