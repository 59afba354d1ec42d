"""`up`: reconcile the cluster to the plan, start ranks >= 1 then rank 0, wait, roll back on failure.

The plan object `sparkctl plan` prints is the one executed here: its ranks' argv/env/mounts/labels
go to Docker unchanged, `plan.stop_first` and every other container of the cluster are removed
first, and only the containers this run created are rolled back when something fails (a rank
exits, the deadline passes, Ctrl-C).
"""

from __future__ import annotations

import contextlib
import time

from sparkctl.connectors.pool import NodePool
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.lifecycle import memgate, orphans
from sparkctl.lifecycle.lock import ClusterLock
from sparkctl.lifecycle.modes import resolve_mode
from sparkctl.lifecycle.reconcile import involved_nodes, reconcile, settle
from sparkctl.lifecycle.starting import restart_gateways
from sparkctl.lifecycle.steps import (
    GATEWAY_SETTLE_S,
    QuietReporter,
    Reporter,
    UpResult,
    observe,
    remove_all,
    resolve_plan,
    serving,
    start_group,
)
from sparkctl.lifecycle.supervisor import process as supervisor
from sparkctl.lifecycle.timeline import Timeline
from sparkctl.planning.build import Plan, build_plan
from sparkctl.profile.schema import Profile
from sparkctl.runtime.secret_files import seal


class PreflightFailedError(SparkctlError):
    exit_code = ExitCode.CHECK_FAILED

    # What `sparkctl ship` can fix: something missing or different that another node has.
    SHIPPABLE = frozenset({"ImagePresent", "ImageSame", "Weights", "WeightsOffline"})

    def __init__(self, message: str, *, fix: str | None = None, errors: list | None = None) -> None:
        super().__init__(message, fix=fix)
        self.errors = errors or []

    @property
    def shippable(self) -> set[str]:
        """{"image", "weights"} when every error is one `ship` fixes, else empty."""
        checks = {f.check for f in self.errors}
        if not checks or not checks <= self.SHIPPABLE:
            return set()
        return {"weights" if c == "Weights" else "image" for c in checks}


def run_fast_preflight(profile: Profile, plan: Plan, pool: NodePool, ignore: set[str]) -> str:
    """The quick subset of preflight; raises PreflightFailedError listing every error."""
    from sparkctl.preflight import FAST_CHECKS, run_preflight

    report = run_preflight(profile, plan, pool, only=set(FAST_CHECKS), ignore=ignore)
    if report.errors:
        lines = "; ".join(f"[{f.check}{'-' + f.node if f.node else ''}] {f.message}" for f in report.errors)
        raise PreflightFailedError(
            f"preflight found {len(report.errors)} error(s): {lines}",
            fix="fix them (`sparkctl preflight` shows every check with its fix; missing image or weights: "
            "`sparkctl ship` or `up --ship`) or pass --skip-preflight",
            errors=report.errors,
        )
    return f"preflight ok ({len(report.findings)} checks)"


# ------------------------------------------------------------------------------------ up
def up(
    profile: Profile,
    pool: NodePool,
    *,
    mode: str | None = None,
    tp: int | None = None,
    skip_preflight: bool = False,
    timeout: float | None = None,
    reporter: Reporter | None = None,
    lock: bool = True,
    rolling: bool = True,  # replace replicas one at a time behind the router when possible
) -> UpResult:
    rep = reporter or QuietReporter()
    plan = build_plan(profile, resolve_mode(profile, mode, tp=tp))
    with ClusterLock(plan.cluster) if lock else contextlib.nullcontext():
        return _up_locked(profile, pool, plan, skip_preflight, timeout, rep, rolling)


def _up_locked(
    profile: Profile,
    pool: NodePool,
    plan: Plan,
    skip_preflight: bool,
    timeout: float | None,
    rep: Reporter,
    rolling: bool = True,
) -> UpResult:
    t0 = time.monotonic()
    tl = Timeline(origin=t0)
    budget = timeout if timeout is not None else profile.engine.ready_timeout
    deadline = t0 + budget  # one deadline for the whole `up`, preflight and starting included
    with tl.step("node facts"):
        plan = resolve_plan(profile, plan, pool)
    with tl.step(
        "secrets"
    ):  # each rank's read once: a missing one (unset HF_TOKEN) stops us before anything is stopped
        sealed = {s.container_name: seal(s, pool.get(s.node)) for s in plan.ranks}
    settled, still_lost = orphans.settle_pending(pool, plan.cluster)  # a node still lost keeps its record
    for line in settled:
        rep.phase(line)
    for node in still_lost:
        rep.phase(f"{node} still unreachable: what a lost `up` left there is still recorded for cleanup")
    with tl.step("observe"):
        observed = observe(pool, plan.cluster, involved_nodes(plan, profile))
        rec = reconcile(plan, observed)
    listed = observed  # still what runs, unless serving() below starts a router
    if rec.up_to_date:
        listed = None
        if rec.gateways:  # the ranks run the plan; only their gateways changed or went
            with tl.step("gateway"):
                restart_gateways(pool, rec.gateways, tl)
            rep.phase("restarted the gateway of " + ", ".join(s.container_name for s in rec.gateways))
        gateway_settle = GATEWAY_SETTLE_S if rec.gateways else 0.0
        health, router_started = serving(profile, pool, plan, deadline, rep, gateway_settle)
        if health.ready:
            if rec.leftovers:
                remove_all(pool, rec.leftovers, grace=None)
            memgate.guard_running(profile, pool, plan, rep.phase)  # (re)started if it is not
            action = "router" if router_started else "gateway" if rec.gateways else "noop"
            if not router_started and not rec.gateways:
                rep.phase(f"mode {plan.mode} already up with config {plan.config_hash}: nothing to do")
            elapsed = time.monotonic() - t0
            return UpResult(
                plan, action, health, rec.leftovers, elapsed, settled=settled, timeline=tl.to_json()
            )
        rep.phase(
            f"mode {plan.mode} runs config {plan.config_hash} but is not healthy ({health.detail}): restarting"
        )
        rec = settle(rec, observed, healthy=False)
    stopped = supervisor.stop(plan.cluster)  # it would fight this run (it restarts what it watched)
    if stopped:
        rep.phase(stopped)

    if not skip_preflight:
        # Our own containers that are about to be removed hold the port and look stray: expected.
        ignore = {"StrayContainers", "PortFree"} if rec.remove else set()
        with tl.step("checks"):
            rep.phase(run_fast_preflight(profile, plan, pool, ignore))
    if rolling and rec.remove:
        from sparkctl.lifecycle.rolling import roll_if_possible

        if (rolled := roll_if_possible(profile, pool, plan, budget, rep, listed)) is not None:
            return rolled
    if rec.remove:
        rep.phase("stopping " + ", ".join(f"{c.name} on {c.node}" for c in rec.remove))
        with tl.step("stop old"):
            remove_all(pool, rec.remove, grace=profile.engine.stop_grace)
    result = start_group(profile, pool, plan, deadline, budget, rep, sealed, tl)
    elapsed = time.monotonic() - t0
    return UpResult(
        plan, "started", result.endpoint, rec.remove, elapsed, result.ready_at, settled, tl.to_json()
    )
