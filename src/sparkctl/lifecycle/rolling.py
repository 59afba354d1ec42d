"""Rolling `switch` / `upgrade`: replace a mode's replicas one at a time behind the router, so
clients see no failed request.

Per replica: take it out of the router, wait until it serves no request (drain.py), stop it, start
it with the new config (`steps.start_group` on `Plan.replica(i)`), wait ready, put it back; then the
next one. `can_roll` (pure) decides from the two plans, the containers and the router's listing;
when it says no, `up` stops everything and starts the new mode as before, saying why in one line.
A replica already on the new config and healthy in the router is skipped, so rerunning the same
command after a failed or interrupted roll continues where it stopped.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

from sparkctl.clients.router import RouterClient, RouterError, Worker
from sparkctl.connectors.pool import NodePool
from sparkctl.engines.capabilities import MetricNames
from sparkctl.errors import SparkctlError
from sparkctl.lifecycle import router as routers
from sparkctl.lifecycle.drain import NoInFlightSignal, in_flight, wait_drained
from sparkctl.lifecycle.reconcile import involved_nodes
from sparkctl.lifecycle.rolling_rules import (
    Verdict,
    can_roll,
    is_router,
    layout_blocker,
    replica_containers,
    running_mode,
)
from sparkctl.lifecycle.steps import Reporter, UpResult, observe, remove_all, start_group
from sparkctl.planning.build import Plan, PlanFacts, build_plan
from sparkctl.profile.schema import Profile
from sparkctl.runtime.containers import ContainerInfo
from sparkctl.runtime.readiness import probe
from sparkctl.secrets import resolve_known

__all__ = ["Verdict", "can_roll", "is_router", "layout_blocker", "running_mode"]  # the rules, re-exported


class RollError(SparkctlError):
    """A replica did not come back; the message says what runs where now."""


@dataclass
class ReplicaRoll:
    """One replica's roll, for progress lines and `--json`."""

    index: int
    nodes: list[str]
    url: str
    old: dict[str, str | None]  # {"mode", "config_hash"} before
    new: dict[str, str | None]  # after (the old one again when it was restored)
    action: str = "pending"  # rolled, skipped (already on the new config), failed
    in_router: bool = True
    in_flight: int = 0  # requests it served when it left the router
    drain_s: float = 0.0
    stop_s: float = 0.0
    start_s: float = 0.0
    total_s: float = 0.0

    def to_json(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if not k.endswith("_s")}
        return out | {k: round(v, 3) for k, v in self.__dict__.items() if k.endswith("_s")}


@dataclass
class RolledUp(UpResult):
    replicas: list[ReplicaRoll] = field(default_factory=list)

    def to_json(self) -> dict:
        return {**super().to_json(), "rolling": [r.to_json() for r in self.replicas]}


@dataclass
class _Roll:
    """What every step of one roll needs."""

    profile: Profile
    pool: NodePool
    old: Plan
    new: Plan
    client: RouterClient
    budget: float
    rep: Reporter
    key: str | None = None

    def settle_timeout(self) -> float:
        """How long the router may take to act on an add or remove (health checks included)."""
        r = self.profile.router
        return 30.0 + r.health_check_interval * (r.health_failure_threshold + 2)


@dataclass
class Decision:
    """What `up` sees before a roll (read-only): the verdict and what the roll would use."""

    verdict: Verdict | None  # None: one replica on both sides, nothing to roll or say
    old: Plan | None = None
    observed: list[ContainerInfo] = field(default_factory=list)
    client: RouterClient | None = None
    key: str | None = None


def decide(
    profile: Profile, pool: NodePool, new: Plan, observed: list[ContainerInfo] | None = None
) -> Decision:
    """Read the running mode and the router's listing, and rule (`up --dry-run` shows the verdict).
    `observed`: the containers the caller already listed (else they are listed here)."""
    if observed is None:
        observed = observe(pool, new.cluster, involved_nodes(new, profile))
    mode = running_mode(observed, new.mode)
    old = build_plan(profile, mode, _hcas(new)) if mode in profile.modes else None
    if new.router is None and (old is None or old.router is None):
        return Decision(None)
    workers: list[Worker] | None = None
    client = routers.client(pool, new) if new.router is not None else None
    key = resolve_known(new.endpoint.api_key)  # read by client()
    if client is not None:
        with contextlib.suppress(RouterError):
            workers = client.workers()
    verdict = can_roll(old, new, observed, workers)
    if verdict.ok:
        verdict = _check_signal(new, verdict, workers or [], key, _metrics(profile))
    return Decision(verdict, old, observed, client, key)


def roll_if_possible(
    profile: Profile,
    pool: NodePool,
    new: Plan,
    budget: float,
    rep: Reporter,
    observed: list[ContainerInfo] | None = None,
) -> RolledUp | None:
    """Roll onto `new` when can_roll says so (None after saying why not: `up` goes on as before).
    `observed`: what `up` already listed (a rolling `up` lists the containers once)."""
    t0 = time.monotonic()
    d = decide(profile, pool, new, observed)
    if d.verdict is None:
        return None
    if not d.verdict.ok:
        rep.phase(f"not rolling: {d.verdict.reason}; stopping all replicas, then starting the new ones")
        return None
    old, observed, verdict = d.old, d.observed, d.verdict
    assert old is not None and d.client is not None
    ctx = _Roll(profile, pool, old, new, d.client, budget, rep, d.key)
    results = {i: _record(ctx, observed, i) for i in range(new.replicas)}
    for i in verdict.skip:
        results[i].action = "skipped"
        rep.phase(f"replica {i}: already on config {new.config_hash} and serving")
    for i in verdict.order:
        _roll_one(ctx, observed, results, i)
    stopped = [c for i in verdict.order for c in replica_containers(observed, new, i, {old.mode, new.mode})]
    health = probe(new.endpoint)
    return RolledUp(new, "rolled", health, stopped, time.monotonic() - t0, replicas=list(results.values()))


def _hcas(plan: Plan) -> PlanFacts:
    """The facts `up` resolved for the new plan (fabric.hcas: auto, node IPs) hold for the old one too."""
    hcas: dict[str, list[str]] = {}
    gids: dict[str, int | None] = {}
    for r in plan.ranks:
        if "NCCL_IB_HCA" in r.env:
            hcas[r.node] = str(r.env["NCCL_IB_HCA"]).split(",")
        gids[r.node] = int(str(r.env["NCCL_IB_GID_INDEX"])) if "NCCL_IB_GID_INDEX" in r.env else None
    return PlanFacts(hcas=hcas, gid_index=gids, addresses=dict(plan.node_ips))


def _metrics(profile: Profile) -> MetricNames:
    from sparkctl.engines import get_engine

    return get_engine(profile.engine.kind).metrics or MetricNames()  # none: no in-flight signal


def _check_signal(
    new: Plan, verdict: Verdict, workers: list[Worker], key: str | None, names: MetricNames
) -> Verdict:
    """Every serving replica to replace must say how many requests it serves, or no drain is possible."""
    listed = {w.url for w in workers if w.healthy}
    for i in verdict.order:
        url = new.groups[i].worker_url
        if url in listed:
            try:
                in_flight(url, key, names)
            except NoInFlightSignal as exc:
                return Verdict(False, f"replica {i} cannot be drained ({exc.message}; fix: {exc.fix})")
    return verdict


def _record(ctx: _Roll, observed: list[ContainerInfo], i: int) -> ReplicaRoll:
    conts = replica_containers(observed, ctx.new, i, {ctx.old.mode, ctx.new.mode})
    running = [c for c in conts if c.running]
    was = (
        {"mode": running[0].mode, "config_hash": running[0].config_hash}
        if running
        else {"mode": None, "config_hash": None}
    )
    nodes = [r.node for r in ctx.new.group_ranks(i)]
    return ReplicaRoll(i, nodes, ctx.new.groups[i].worker_url, was, dict(was))


def _roll_one(ctx: _Roll, observed: list[ContainerInfo], results: dict[int, ReplicaRoll], i: int) -> None:
    """Out of the router, drain, stop, start new, back in. On failure or Ctrl-C the router is left
    listing exactly the replicas that serve, and RollError says which replica runs what."""
    rr, url, t0 = results[i], ctx.new.groups[i].worker_url, time.monotonic()
    conts = replica_containers(observed, ctx.new, i, {ctx.old.mode, ctx.new.mode})
    stage = "serving"
    try:
        listed = ctx.client.find(url)
        if listed is not None:
            stage = "listed"  # runs, and if Ctrl-C comes while it drains it goes back in
            _take_out(ctx, rr, drain=listed.healthy)
        stage, t = "stopping", time.monotonic()
        ctx.rep.phase(
            f"replica {i}: stopping " + (", ".join(f"{c.name} on {c.node}" for c in conts) or "nothing")
        )
        remove_all(ctx.pool, conts, grace=ctx.profile.engine.stop_grace)
        rr.stop_s, rr.new, stage = time.monotonic() - t, {"mode": None, "config_hash": None}, "stopped"
        t = time.monotonic()
        ctx.rep.phase(f"replica {i}: starting mode {ctx.new.mode} (config {ctx.new.config_hash})")
        start_group(
            ctx.profile, ctx.pool, ctx.new.replica(i), time.monotonic() + ctx.budget, ctx.budget, ctx.rep
        )
        rr.start_s, stage = time.monotonic() - t, "started"
        rr.new = {"mode": ctx.new.mode, "config_hash": ctx.new.config_hash}
        _put_back(ctx, rr)
    except BaseException as exc:
        rr.action = "failed"
        _recover(ctx, rr, stage, exc)
        err = _stopped_at(ctx, results, i, exc)
        if not isinstance(exc, Exception):  # Ctrl-C: say what runs where, then stop as interrupted
            ctx.rep.phase(err.message)
            raise
        raise err from exc
    rr.action, rr.total_s = "rolled", time.monotonic() - t0
    ctx.rep.phase(f"replica {i}: on config {ctx.new.config_hash}, back in the router ({rr.total_s:.1f}s)")


def _take_out(ctx: _Roll, rr: ReplicaRoll, drain: bool) -> None:
    """Remove the replica from the router (only while another one serves), then wait for its
    requests (a replica the router already found unhealthy gets none to wait for)."""
    url, wait = rr.url, ctx.settle_timeout()
    ctx.client.wait_for(
        "another healthy replica (the router must never be left empty)",
        lambda ws: any(w.healthy and w.url != url for w in ws),
        timeout=wait,
    )
    ctx.rep.phase(f"replica {rr.index} ({'+'.join(rr.nodes)}): taking it out of the router")
    rr.in_router = False  # from here on a Ctrl-C puts it back (adding a listed URL is harmless)
    ctx.client.remove(url)
    ctx.client.wait_for(
        f"replica {rr.index} out of the router", lambda ws: all(w.url != url for w in ws), timeout=wait
    )
    if not drain:
        return
    t = time.monotonic()
    names = _metrics(ctx.profile)
    rr.in_flight = max(0, _read(rr.url, ctx.key, names))
    drained, left = wait_drained(lambda: in_flight(url, ctx.key, names), ctx.profile.router.drain_timeout)
    rr.drain_s = time.monotonic() - t
    if drained:
        ctx.rep.phase(
            f"replica {rr.index}: drained ({rr.in_flight} request(s) in flight finished, {rr.drain_s:.1f}s)"
        )
    elif left < 0:
        ctx.rep.phase(f"replica {rr.index}: stopped answering /metrics while draining: stopping it")
    else:
        ctx.rep.phase(
            f"replica {rr.index}: still {left} request(s) in flight after router.drain_timeout "
            f"({ctx.profile.router.drain_timeout:.0f}s): stopping it anyway"
        )


def _read(url: str, key: str | None, names: MetricNames) -> int:
    try:
        return in_flight(url, key, names)
    except NoInFlightSignal:
        return -1


def _put_back(ctx: _Roll, rr: ReplicaRoll) -> None:
    routers.put_back(ctx.client, rr.url, rr.index, ctx.settle_timeout())
    rr.in_router = True


def _recover(ctx: _Roll, rr: ReplicaRoll, stage: str, exc: BaseException) -> None:
    """Leave the router listing what serves: the old replica when it still runs (taken out, not
    stopped yet), the new one once it started, else the old config again when the profile still
    describes it and this was no Ctrl-C; else nothing for this replica."""
    interrupted = not isinstance(exc, Exception)
    try:
        if (stage == "listed" and not rr.in_router) or stage == "started":
            ctx.client.add(rr.url)  # it runs (the old one not stopped yet, or the new one ready)
            rr.in_router = True
        elif stage == "stopped" and not interrupted and rr.old["config_hash"] == ctx.old.config_hash:
            ctx.rep.phase(f"replica {rr.index}: starting its old config {ctx.old.config_hash} again")
            start_group(
                ctx.profile,
                ctx.pool,
                ctx.old.replica(rr.index),
                time.monotonic() + ctx.budget,
                ctx.budget,
                ctx.rep,
            )
            rr.new = dict(rr.old)
            _put_back(ctx, rr)
    except Exception as again:  # noqa: BLE001 - the first failure is the one to report
        ctx.rep.phase(f"replica {rr.index}: could not put it back ({again})")


def _stopped_at(ctx: _Roll, results: dict[int, ReplicaRoll], i: int, exc: BaseException) -> RollError:
    def where(r: ReplicaRoll) -> str:
        runs = f"{r.new['mode']} (config {r.new['config_hash']})" if r.new["config_hash"] else "nothing"
        return f"replica {r.index} runs {runs}{'' if r.in_router else ', not in the router'}"

    cause = exc.message if isinstance(exc, SparkctlError) else str(exc)
    fix = getattr(exc, "fix", None)
    return RollError(
        f"rolling switch to {ctx.new.mode} stopped at replica {i}: {cause}. Now: "
        + "; ".join(where(r) for r in results.values()),
        fix=(f"{fix}; then " if fix else "fix that, then ")
        + f"rerun the same command: it replaces only the replicas not on config {ctx.new.config_hash} yet"
        + (
            f" (`sparkctl switch {ctx.old.mode}` rolls back the same way)"
            if ctx.old.mode != ctx.new.mode
            else ""
        ),
    )
