"""The steps `up`, a rolling switch, `preview`, `down` and the supervisor share: observe the
cluster's containers, remove them, resolve a plan's node facts, start a group and wait for it,
tell whether a running mode serves, record the attempt. They import nothing above them (up.py,
rolling.py and preview.py import these, never each other's internals).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from sparkctl.connectors.pool import NodePool
from sparkctl.errors import ConnectError, SparkctlError, UsageError
from sparkctl.fanout import fan_out
from sparkctl.lifecycle import gated, logs, memgate, orphans, state
from sparkctl.lifecycle import router as routers
from sparkctl.lifecycle.starting import prepare_nodes, remove_started, start_specs
from sparkctl.lifecycle.timeline import Timeline
from sparkctl.lifecycle.watch import WaitProgress, WaitResult, combined, endpoints, rank_label, wait_ready
from sparkctl.planning.build import Plan, PlanFacts, RankSpec, build_plan
from sparkctl.planning.gateway import served_container
from sparkctl.profile.schema import Profile
from sparkctl.runtime import containers
from sparkctl.runtime.containers import ContainerInfo
from sparkctl.runtime.readiness import EndpointHealth, probe
from sparkctl.runtime.secret_files import Sealed


class Reporter(Protocol):
    def phase(self, text: str) -> None: ...
    def update(self, snapshot: WaitProgress) -> None: ...


class QuietReporter:
    def phase(self, text: str) -> None:
        pass

    def update(self, snapshot: WaitProgress) -> None:
        pass


@dataclass
class UpResult:
    plan: Plan
    action: str  # "noop", "started", or "router" (the ranks ran as planned; only the router started)
    endpoint: EndpointHealth
    removed: list[ContainerInfo] = field(default_factory=list)
    elapsed: float = 0.0
    ready_at: float | None = None  # time.monotonic() the endpoint first answered ready
    settled: list[str] = field(default_factory=list)  # leftovers of lost nodes removed now
    timeline: list[dict] = field(default_factory=list)  # Timeline.to_json(): where the seconds went

    def to_json(self) -> dict:
        ep = self.plan.endpoint
        return {
            "action": self.action,
            "cluster": self.plan.cluster,
            "mode": self.plan.mode,
            "config_hash": self.plan.config_hash,
            "endpoint": {"url": ep.url, "api_base": ep.api_base, "model": ep.served_model_name},
            "health": self.endpoint.to_json(),
            "removed": [c.to_json() for c in self.removed],
            "elapsed_s": round(self.elapsed, 3),
            "settled": self.settled,
            "timeline": self.timeline,
            "ranks": [
                {"rank": r.rank, "replica": r.group, "node": r.node, "container": r.container_name}
                for r in self.plan.ranks
            ],
            "replicas": [{"index": g.index, "url": g.worker_url, "ranks": g.ranks} for g in self.plan.groups],
            "router": (
                {"node": self.plan.router.node, "container": self.plan.router.container_name}
                if self.plan.router
                else None
            ),
        }


# ------------------------------------------------------------------------------------ I/O steps
def observe(pool: NodePool, cluster: str, nodes: list[str]) -> list[ContainerInfo]:
    found, failed = containers.list_nodes(pool, cluster, nodes)
    if failed:  # `up` must see every node it may change
        node, exc = next(iter(failed.items()))
        if orphans.is_connection_loss(exc):
            raise orphans.lost(node, None, exc, "listing its containers")
        if isinstance(exc, SparkctlError) or not isinstance(exc, Exception):
            raise exc
        raise SparkctlError(f"listing containers: {exc}", node=node)
    return found


def remove_all(pool: NodePool, infos: list[ContainerInfo], grace: int | None = containers.STOP_GRACE) -> None:
    """Stop (SIGTERM, SIGKILL after `grace` s; None: SIGKILL) and remove, every container in
    parallel; raise naming the first node that failed."""
    items = {(c.node, c.name): c for c in infos}
    for node, name in list(items):  # a rank's removal takes its gateway after it (never twice)
        served = served_container(name)
        if served is not None and (node, served) in items:
            del items[(node, name)]

    def remove_one(key: tuple[str, str]) -> None:
        c = items[key]
        containers.remove(pool.get(c.node), c.name, grace=grace)

    def where(key: tuple[str, str]) -> tuple[str, int | None]:
        return key[0], items[key].rank

    results = fan_out(list(items), remove_one, where=where)
    stopped = [c for c in infos if c.running and (c.node, c.name) in results.ok]
    memgate.note_stopped(stopped[0].cluster if stopped else None, [c.node for c in stopped])
    for o in results.failed:
        if orphans.is_connection_loss(o.error):  # type: ignore[arg-type]
            raise orphans.lost(o.node or "?", o.rank, o.error, "stopping its containers")  # type: ignore[arg-type]
    results.values_or_raise()


log_path = logs.rank_log_path


def resolve_plan(profile: Profile, plan: Plan, pool: NodePool) -> Plan:
    """Fill what only the nodes can tell (fabric.hcas and fabric.gid_index: auto, from sysfs; the IP
    of a node addressed by name, on the node itself) and rebuild the same plan."""
    if not plan.unresolved and not plan.addresses_pending:
        return plan
    from sparkctl.facts.rdma import hca_candidates, probe_rdma, roce_v2_gid_index
    from sparkctl.lifecycle.addresses import node_addresses

    def auto(n: str) -> bool:  # only where the plan asked (a tcp fabric never probes RDMA)
        f = profile.node(n).fabric
        asked = any(u.startswith(f"{n}: fabric.") for u in plan.unresolved)
        return asked and f is not None and "auto" in (f.hcas, f.gid_index)

    def discover(node: str) -> tuple[list[str], int | None]:
        fabric = profile.node(node).fabric
        assert fabric is not None
        devices = probe_rdma(pool.get(node))  # NoRdma: fan_out's outcome names the node
        found = hca_candidates(devices, fabric.netdevs, str(fabric.ip))
        if not found:
            raise UsageError(
                f"fabric.hcas is 'auto' but no ACTIVE RoCE device is bound to {','.join(fabric.netdevs)}",
                node=node,
                fix="run `sparkctl preflight` (RoceHca shows the devices), set nodes[].fabric.hcas, "
                "or use fabric.transport: tcp",
            )
        named = found if fabric.hcas == "auto" else [h for h in fabric.hcas if h in devices]
        gids = {roce_v2_gid_index(devices[h], str(fabric.ip)) for h in named} - {None}
        return found, (gids.pop() if len(gids) == 1 else None)  # several: leave it to NCCL

    got = fan_out([n for n in dict.fromkeys(plan.nodes) if auto(n)], discover).values_or_raise()
    hcas = {n: h for n, (h, _) in got.items() if (f := profile.node(n).fabric) and f.hcas == "auto"}
    gids = {n: g for n, (_, g) in got.items()}
    addresses = node_addresses(profile, pool, plan.all_nodes) if plan.addresses_pending else {}
    resolved = build_plan(profile, plan.mode, PlanFacts(hcas=hcas, gid_index=gids, addresses=addresses))
    if resolved.unresolved:
        raise UsageError("could not resolve: " + "; ".join(resolved.unresolved))
    return resolved


def record_attempt(plan: Plan, outcome: str) -> None:
    state.record_attempt(plan.cluster, plan.mode, plan.config_hash, outcome)


def start_group(
    profile: Profile,
    pool: NodePool,
    plan: Plan,
    deadline: float,
    budget: float,
    rep: Reporter,
    sealed: Mapping[str, Sealed] | None = None,
    tl: Timeline | None = None,
) -> WaitResult:
    """Start every rank of every replica group in the plan (each group's ranks >= 1, then its rank
    0, as the recipe does), wait for each replica's endpoint while watching every rank; then, with
    replicas, bring up the router (a running one with this config is kept) until it routes to
    each. A gated group (GroupSpec.gate) is admitted and its gate opened once every rank
    rendezvoused, before readiness is polled (lifecycle/gated.py). On any failure (a refusal at
    the gate included) kill what this call started (SIGKILL: nothing to save) and raise.
    A replica's sub-plan (`plan.replica(i)`: no router) starts that group alone."""
    record_attempt(plan, "starting")
    started: list[RankSpec] = []
    tl = tl or Timeline()
    try:
        with tl.step("admission"):
            memgate.gate(profile, pool, plan, rep.phase)  # settle, admit, guard (unified memory)
        with tl.step("prepare nodes"):
            prepare_nodes(profile, pool, plan)
        peers = [s for s in plan.ranks if s.node_rank > 0]
        heads = [s for s in plan.ranks if s.node_rank == 0]
        if peers:
            rep.phase("starting " + ", ".join(f"{rank_label(s)} on {s.node}" for s in peers))
            start_specs(profile, pool, peers, started, sealed, tl)
        rep.phase("starting " + ", ".join(f"{rank_label(s)} on {s.node}" for s in heads))
        start_specs(profile, pool, heads, started, sealed, tl)
        if any(g.gate for g in plan.groups):  # admission at the rendezvous; a refusal rolls back below
            with tl.step("launch gate"):
                gated.open_gates(
                    profile, pool, plan, deadline, rep.phase, dead=gated.exited_rank(pool, plan.ranks)
                )
        eps = endpoints(plan)
        what = eps[0].api_base if len(eps) == 1 else f"{len(eps)} replicas ({', '.join(e.url for e in eps)})"
        rep.phase(f"waiting for {what} (deadline {deadline - time.monotonic():.0f}s)")
        waited = time.monotonic()
        result = wait_ready(
            pool,
            plan,
            deadline,
            budget=budget,
            on_update=rep.update,
            log_hint=lambda s: _log_hint(profile, s),
        )
        _loads(tl, plan, waited, result)
        if plan.router is not None:
            with tl.step("router"):
                routers.bring_up(
                    pool, plan, deadline, rep.phase, lambda s: start_specs(profile, pool, [s], started)
                )
    except BaseException as exc:
        record_attempt(plan, "failed")
        rep.phase("rolling back the containers this run started")
        problems, left = remove_started(pool, plan, started)
        note = orphans.record_leftovers(plan.cluster, left)
        final = as_node_loss(exc, left)
        if isinstance(final, SparkctlError):
            extra = "; ".join([*problems, note] if note else problems)
            if extra:
                final.fix = ((final.fix + "; ") if final.fix else "") + "rollback: " + extra
        if final is not exc:
            raise final from exc
        raise
    record_attempt(plan, "ready")
    return result


def _loads(tl: Timeline, plan: Plan, waited: float, result: WaitResult) -> None:
    """Readiness (the wait, to the first ready probe) and each rank's load: from its container's
    start to that ready answer (a group serves once all its ranks have loaded)."""
    ready = result.ready_at or time.monotonic()
    tl.add("readiness", waited, ready)
    for s in plan.ranks:
        started = tl.ended("create+start", s.rank)
        if started is not None:
            tl.add("load", started, ready, node=s.node, rank=s.rank)


def as_node_loss(exc: BaseException, left: list) -> BaseException:
    """The error `up` ends with. A node the rollback could not reach is a lost node: exit 5
    (CONNECT) naming it, whatever another thread happened to notice first (a rank that looked
    dead, a Docker call cut mid-way). Decided after the rollback, which visits every node this
    run started a rank on, so the exit code does not depend on timing."""
    if not left or not isinstance(exc, Exception) or isinstance(exc, ConnectError):
        return exc
    first = left[0]
    return orphans.lost(first.node, first.rank, exc, "starting the ranks", True)


GATEWAY_SETTLE_S = 15.0  # a gateway just started: its bind and the owner check's first round


def serving(
    profile: Profile, pool: NodePool, plan: Plan, deadline: float, rep: Reporter, settle: float = 0.0
) -> tuple[EndpointHealth, bool]:
    """Whether a mode found running as planned serves: every replica's endpoint ready, and with
    replicas the router routing to each (its worker set reconciled; a missing router is started,
    and removed again if it fails to route). A kept router that does not route to a replica
    within a few of its health checks means not serving: `up` then restarts the replicas.
    Also says whether it started the router. `settle`: a gateway was just restarted, so a probe
    that meets it still starting is retried for up to that long (not read as the engine's failure)."""
    health = combined([probe(ep) for ep in endpoints(plan)])
    settled = min(deadline, time.monotonic() + settle)
    while not health.ready and time.monotonic() < settled:
        time.sleep(0.25)
        health = combined([probe(ep) for ep in endpoints(plan)])
    if not health.ready or plan.router is None:
        return health, False
    started: list[RankSpec] = []

    def start_router(spec: RankSpec) -> None:
        prepare_nodes(profile, pool, replace(plan, ranks=[]))  # the router's log directory
        start_specs(profile, pool, [spec], started)

    spec, r = plan.router, profile.router
    if routers.matches(containers.inspect(pool.get(spec.node), spec.container_name), spec):
        deadline = min(
            deadline, time.monotonic() + r.health_check_interval * (r.health_failure_threshold + 1) + 5
        )
    try:
        routers.bring_up(pool, plan, deadline, rep.phase, start_router, restarted=False)
    except routers.RouterFailedError as exc:
        if not started:  # the kept router shuns a replica sparkctl finds ready
            return EndpointHealth(True, health.served, False, f"router: {exc.message}"), False
        remove_started(pool, plan, started)
        raise
    except BaseException:
        remove_started(pool, plan, started)
        raise
    return probe(plan.endpoint), bool(started)


def _log_hint(profile: Profile, spec: RankSpec) -> str:
    return f"full log: `sparkctl logs --rank {spec.rank}` (file {spec.node}:{log_path(profile, spec)})"
