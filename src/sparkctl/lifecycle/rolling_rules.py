"""The rules of a rolling switch (pure): whether two plans, the running containers and the
router's listing allow replacing replicas one at a time, and in which order."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkctl.clients.router import Worker
from sparkctl.planning.build import Plan
from sparkctl.planning.gateway_container import ROLE as GATEWAY_ROLE
from sparkctl.runtime.containers import ContainerInfo

GROUP_LABEL = "sparkctl.group"
HASH_LABEL = "sparkctl.config_hash"


@dataclass(frozen=True)
class Verdict:
    """Whether old -> new rolls; `order` is the replicas to replace (unhealthy ones first), `skip`
    those already on the new config and serving; `reason` says why not, in one line."""

    ok: bool
    reason: str = ""
    order: list[int] = field(default_factory=list)
    skip: list[int] = field(default_factory=list)


def is_router(c: ContainerInfo) -> bool:
    return c.role == "router"


def is_serving_rank(c: ContainerInfo) -> bool:
    """A rank's container: not the router, not a gateway (which `up` replaces on its own hash and
    which goes with the container it serves)."""
    return c.role not in ("router", GATEWAY_ROLE)


def running_mode(observed: list[ContainerInfo], new_mode: str) -> str | None:
    """The mode the running replicas belong to (the new one itself for an upgrade or a roll to
    resume); None when nothing runs or several other modes do."""
    modes = {c.mode for c in observed if c.running and is_serving_rank(c) and c.mode}
    others = modes - {new_mode}
    if len(others) == 1:
        return others.pop()
    return new_mode if not others and new_mode in modes else None


def replica_containers(
    observed: list[ContainerInfo], plan: Plan, index: int, modes: set[str]
) -> list[ContainerInfo]:
    """The containers (any state) of replica `index` of the given modes, on that replica's nodes."""
    nodes = {r.node for r in plan.group_ranks(index)}
    return [
        c
        for c in observed
        if is_serving_rank(c)
        and c.mode in modes
        and c.labels.get(GROUP_LABEL) == str(index)
        and c.node in nodes
    ]


def on_new_config(containers: list[ContainerInfo], new: Plan, index: int) -> bool:
    """Replica `index` runs exactly the new plan's containers with its config hash."""
    want = {(r.node, r.container_name) for r in new.group_ranks(index)}
    have = {(c.node, c.name) for c in containers}
    return have == want and all(c.running and c.config_hash == new.config_hash for c in containers)


def layout_blocker(old: Plan, new: Plan) -> str | None:
    """Why the layouts do not allow replacing replica i by replica i (pure); None when they do."""
    for p in (old, new):
        if p.replicas < 2:
            return f"mode {p.mode} has {p.replicas} replica: a rolling switch needs 2 or more on both sides"
    if old.replicas != new.replicas:
        return f"the replica count changes ({old.replicas} -> {new.replicas})"
    for a, b in zip(old.groups, new.groups, strict=True):
        na = [r.node for r in old.group_ranks(a.index)]
        nb = [r.node for r in new.group_ranks(b.index)]
        if na != nb:
            return f"replica {a.index} moves from {'+'.join(na)} to {'+'.join(nb)}"
        if a.worker_url != b.worker_url:
            return f"replica {a.index}'s address changes ({a.worker_url} -> {b.worker_url})"
    if old.router is None or new.router is None:
        return "no router in the plan"
    if old.router.node != new.router.node:
        return f"the router moves from {old.router.node} to {new.router.node}"
    if old.router.labels.get(HASH_LABEL) != new.router.labels.get(HASH_LABEL):
        return "the router's own settings change (router.policy, image or health checks): it must restart"
    return None


def can_roll(
    old: Plan | None, new: Plan, observed: list[ContainerInfo], workers: list[Worker] | None
) -> Verdict:
    """Pure: old = the running mode's plan (None: no single mode runs), `workers` = the router's
    listing (None: it did not answer)."""
    if old is None:
        return Verdict(False, "no single mode with replicas is running")
    if (why := layout_blocker(old, new)) is not None:
        return Verdict(False, why)
    assert new.router is not None
    router = [c for c in observed if is_router(c) and c.node == new.router.node and c.running]
    if not router:
        return Verdict(False, f"the router is not running on {new.router.node}")
    if router[0].config_hash != new.router.labels.get(HASH_LABEL):
        return Verdict(False, "the running router has other settings than the profile's: it must restart")
    if workers is None:
        return Verdict(False, f"the router on {new.router.node} does not answer")
    healthy = {w.url for w in workers if w.healthy}
    serving, order, skip = [], [], []
    for g in new.groups:
        conts = replica_containers(observed, new, g.index, {old.mode, new.mode})
        if g.worker_url in healthy:
            serving.append(g.index)
        if g.worker_url in healthy and on_new_config(conts, new, g.index):
            skip.append(g.index)
        else:
            order.append(g.index)
    if not serving:
        return Verdict(False, "the router lists no healthy replica: nothing would serve during a roll")
    if not order:  # what is wrong is not a replica (the router, say): restarting replicas won't fix it
        return Verdict(False, "every replica already runs the new config and serves")
    # Replicas that serve nothing go first: replacing them costs no capacity.
    order.sort(key=lambda i: i in serving)
    return Verdict(True, order=order, skip=skip)


# ------------------------------------------------------------------------------------ I/O steps
