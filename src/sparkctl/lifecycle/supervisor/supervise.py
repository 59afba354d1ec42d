"""The supervisor's loop (see supervisor.py): watch every rank and a generation canary; on a
failure, restart the failed group under the cluster lock, with backoff and a restart limit: with
replicas, only the replica whose rank died (the router serves from the others meanwhile)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

from sparkctl.clients.router import RouterError
from sparkctl.connectors.pool import NodePool
from sparkctl.errors import ConnectError, LockHeldError, SparkctlError, UsageError, several
from sparkctl.fanout import fan_out
from sparkctl.lifecycle import guard as guards
from sparkctl.lifecycle import orphans, state
from sparkctl.lifecycle import router as routers
from sparkctl.lifecycle.lock import ClusterLock
from sparkctl.lifecycle.rolling_rules import replica_containers
from sparkctl.lifecycle.steps import QuietReporter, remove_all, resolve_plan, start_group
from sparkctl.lifecycle.supervisor import heartbeat, startup
from sparkctl.lifecycle.supervisor.canary import Canary, api_key
from sparkctl.lifecycle.supervisor.checker import Checks
from sparkctl.lifecycle.supervisor.deathwatch import DeathWatch
from sparkctl.lifecycle.supervisor.process import POLL_S, Policy, StopFlag, hold
from sparkctl.lifecycle.watch import first_dead
from sparkctl.planning.build import Plan, build_plan
from sparkctl.profile.schema import Profile
from sparkctl.runtime import containers
from sparkctl.runtime.containers import ContainerInfo

FALLBACK_POLL_S = 2.0  # between looks when Docker's events say nothing (and a stream is down)
GUARD_EVERY = 60.0  # seconds between checks that the memory guard still runs on its nodes


def _hold_for_link(
    pool: NodePool, plan: Plan, links: list[heartbeat.Link], cause: dict, flag: StopFlag
) -> bool:
    """A partition: the group's ranks removed at once (every request to it would hang; the memory
    they hold is freed), then held until every fabric link answers again (a heartbeat of its own:
    the checker's is paused). False when stopped."""
    t0 = time.monotonic()
    try:
        observed, _ = containers.list_nodes(pool, plan.cluster, plan.nodes)
        remove_all(pool, [c for c in observed if c.mode == plan.mode], grace=None)
        done = {"removed_s": round(time.monotonic() - t0, 2)}
    except SparkctlError as exc:  # the restart removes what is left
        done = {"detail": f"removing the group: {exc.message}"}
    state.record_event(plan.cluster, "partition_hold", **cause, **done)
    beat = heartbeat.Heartbeat(links, time.monotonic())
    while not flag.wait(heartbeat.EVERY_S):
        beat.check(pool, time.monotonic)
        if beat.healthy():
            state.record_event(
                plan.cluster, "link_back", link=cause.get("link"), held_s=round(time.monotonic() - t0, 2)
            )
            return True
    return False


def _look(pool: NodePool, plan: Plan) -> tuple[dict[int, ContainerInfo | None], dict[str, SparkctlError]]:
    """Each rank's container, and {node: why} for nodes that do not answer (dialled again next time)."""
    res = fan_out(
        [s.rank for s in plan.ranks],
        lambda r: containers.inspect(pool.get(plan.rank(r).node), plan.rank(r).container_name),
        where=lambda r: (plan.rank(r).node, r),
    )
    lost: dict[str, SparkctlError] = {}
    for o in res.failed:
        if not orphans.is_connection_loss(o.error):  # type: ignore[arg-type]
            raise o.as_error()
        orphans.forget_connection(pool, o.node or "")
        lost[o.node or "?"] = o.as_error()
    return {r: v for r, v in res.ok.items()}, lost


def _cause(
    plan: Plan, infos: dict[int, ContainerInfo | None], deaths: DeathWatch | None = None
) -> dict | None:
    """The first rank that died, and how long ago (Docker's time of the exit on its node)."""
    dead = first_dead(infos)
    if dead is None:
        return None
    info, spec = infos[dead], plan.rank(dead)
    how = f"exited ({info.describe_exit()})" if info else "disappeared"
    cause = {"cause": f"rank {dead} on {spec.node} {how}", "rank": dead, "node": spec.node}
    ago = deaths.since_exit(spec.container_name) if deaths is not None else None
    if ago is None and info is not None and info.finished_at is not None:
        ago = round(max(0.0, time.time() - info.finished_at.timestamp()), 3)
    if deaths is not None and spec.container_name in deaths.exits:
        cause["seen_by"] = "docker events"
    return {**cause, "since_exit_s": ago} if ago is not None else cause


def _guard_cause(
    profile: Profile, pool: NodePool, plan: Plan, cause: dict, infos: dict[int, ContainerInfo | None]
) -> dict:
    """The cause, told by the memory guard when it killed the group on the dead rank's node (a trip
    since that rank's container started, both by the node's clock), recorded as its own event
    with the numbers."""
    node, info = cause.get("node"), infos.get(cause.get("rank", -1))
    started = info.started_at.timestamp() if info is not None and info.started_at else time.time() - 3600
    if node is None or node not in guards.guarded_nodes(profile, plan.nodes):
        return cause
    try:
        trips = guards.read(profile, pool, [node]).get(node, {}).get("trips", [])
    except SparkctlError:
        return cause
    trip = next((t for t in reversed(trips) if t.get("at", 0) >= started), None)
    if trip is None:
        return cause
    keys = ("kind", "reason", "mem_available", "mem_total", "line", "gone_ms")
    state.record_event(plan.cluster, "guard_tripped", node=node, **{k: trip.get(k) for k in keys})
    return {**cause, "cause": f"the memory guard on {node} killed the group: {trip.get('reason')}"}


def _ensure_guard(profile: Profile, pool: NodePool, plan: Plan) -> None:
    try:
        guards.ensure(profile, pool, plan.nodes)
    except SparkctlError as exc:
        state.record_event(plan.cluster, "guard_failed", node=exc.node, detail=exc.message)


def nothing_to_supervise(plan: Plan, pool: NodePool) -> SparkctlError | None:
    """Why there is nothing to supervise now: every node unreachable (one error per node, each with
    its fix), or no container of any rank of the mode; None when something runs or ran."""
    infos, lost = _look(pool, plan)
    if lost and set(lost) >= set(plan.nodes):
        errors = [
            ConnectError(f"nothing to supervise: {e.message}", node=n, fix=e.fix or f"check that {n} is up")
            for n, e in lost.items()
        ]
        return several(errors)  # type: ignore[arg-type]
    if not lost and all(i is None for i in infos.values()):
        return UsageError(
            f"nothing of mode {plan.mode} runs to supervise (no container of any rank)",
            fix=f"`sparkctl up {plan.mode} --supervise` starts and supervises it; `--wait` waits for it",
        )
    return None


def wait_for_something(
    plan: Plan, pool: NodePool, policy: Policy, flag: StopFlag, say: Callable[[str], None]
) -> bool:
    """Until there is something to supervise: False at once without `--wait` (the reason raised),
    else a visible line per new reason and a look every few seconds; False when stopped."""
    said = ""
    while not flag.set:
        why = nothing_to_supervise(plan, pool)
        if why is None:
            return True
        if not policy.wait:
            raise why
        line = "; ".join(f"{e.where()}: {e.message}" if e.where() else e.message for e in [why, *why.also])
        if line != said:
            say(f"waiting (--wait): {line}")
            said = line
        flag.wait(POLL_S * 10)
    return False


def run(
    profile: Profile,
    pool: NodePool,
    mode: str,
    policy: Policy,
    flag: StopFlag,
    say: Callable[[str], None] = print,
) -> int:
    """Supervise until stopped (0) or the restart limit is reached (1); nothing to supervise at the
    start (every node unreachable, nothing of the mode runs) raises why, or waits with `--wait`."""
    fd = hold(profile.cluster, mode)  # the flock, held for the supervisor's life
    try:
        return _supervise(profile, pool, mode, policy, flag, say)
    finally:
        os.close(fd)


def _supervise(
    profile: Profile, pool: NodePool, mode: str, policy: Policy, flag: StopFlag, say: Callable[[str], None]
) -> int:
    cluster = profile.cluster
    plan = resolve_plan(profile, build_plan(profile, mode), pool)
    if not wait_for_something(plan, pool, policy, flag, say):
        return 0
    if policy.wait:  # the persist unit's way (after a reboot): every node back, state rebuilt, reconcile
        plan = startup.begin(profile, pool, mode, flag)
        if plan is None:
            state.record_event(cluster, "supervisor_stopped", mode=mode)
            return 0
    probe = Canary(plan, api_key(plan, pool), policy)
    beat = heartbeat.Heartbeat(heartbeat.links(profile, plan), time.monotonic())
    _ensure_guard(profile, pool, plan)  # the memory guard runs as part of supervise
    deaths = DeathWatch(pool, cluster, plan.nodes, flag.wake).start()
    state.record_event(
        cluster, "supervising", mode=mode, policy=policy.__dict__, fabric_links=len(beat.links)
    )  # after the death watch started: a test may kill a rank from here on
    checks = Checks(pool, probe, beat, flag.wake, cluster).start()
    try:
        return _loop(profile, pool, plan, policy, flag, checks, beat.links, deaths)
    finally:
        checks.stop()
        deaths.stop()


def _loop(
    profile: Profile,
    pool: NodePool,
    plan: Plan,
    policy: Policy,
    flag: StopFlag,
    checks: Checks,
    links: list[heartbeat.Link],
    deaths: DeathWatch,
) -> int:
    """Woken by a container's death (deathwatch.py) and by a check's cause: the heartbeat and the
    canary run on threads of their own (checker.py), so no check waits on another."""
    cluster, mode = plan.cluster, plan.mode
    next_guard = time.monotonic() + GUARD_EVERY
    restarts: list[float] = []
    unreachable: set[str] = set()
    while not flag.set:
        try:
            infos, lost = _look(pool, plan)
        except SparkctlError as exc:  # e.g. an engine answering 500: say so, look again
            state.record_event(cluster, "watch_failed", detail=exc.message, node=exc.node, rank=exc.rank)
            flag.wait(POLL_S * 4)
            continue
        for node in set(lost) - unreachable:
            state.record_event(cluster, "node_unreachable", node=node, detail=lost[node].message)
        unreachable = set(lost)
        checks.node_lost(bool(lost))
        cause = _cause(plan, infos, deaths) if not lost else None
        if cause is not None:
            cause = _guard_cause(profile, pool, plan, cause, infos)
        if time.monotonic() >= next_guard:
            _ensure_guard(profile, pool, plan)
            next_guard = time.monotonic() + GUARD_EVERY
        posted = checks.take()
        if cause is None and posted.get("heartbeat") is not None:
            cause = posted["heartbeat"]
            state.record_event(cluster, "partition", **{k: v for k, v in cause.items() if k != "cause"})
        if cause is None:
            cause = posted.get("canary")
        if cause is None:
            flag.nap(FALLBACK_POLL_S)  # woken at once by a death or a check's cause
            continue
        checks.pause()  # the group is acted on: what the checks would see meanwhile is the restart
        now = time.time()
        restarts = [t for t in restarts if now - t < policy.window]
        if len(restarts) >= policy.max_restarts:
            state.record_event(
                cluster,
                "gave_up",
                **cause,
                detail=f"{len(restarts)} restarts within {policy.window:.0f}s (limit)",
            )
            return 1
        delay = policy.delay(len(restarts))
        replica = failed_replica(plan, cause)
        state.record_event(
            cluster,
            "restarting",
            **cause,
            **({"replica": replica} if replica is not None else {}),
            attempt=len(restarts) + 1,
            delay_s=delay,
        )
        if flag.wait(delay):
            break
        if cause.get("link") and not _hold_for_link(pool, plan, links, cause, flag):
            break
        restarts.append(time.time())
        if not _restart(profile, pool, plan, cause, flag):
            restarts.pop()  # deferred (another sparkctl holds the lock): not an attempt
        checks.resume()  # reset: the canary's count and the links' clocks start with the new group
    state.record_event(cluster, "supervisor_stopped", mode=mode)
    return 0


def failed_replica(plan: Plan, cause: dict) -> int | None:
    """The replica to restart alone: the group of the rank that died, when the mode has several
    (the router keeps serving from the others). None: the whole plan restarts (one group, or a
    failed canary, which goes through the router and so speaks for every replica)."""
    rank = cause.get("rank")
    return plan.rank(rank).group if plan.replicas > 1 and rank is not None else None


def _restart(profile: Profile, pool: NodePool, plan: Plan, cause: dict, flag: StopFlag) -> bool:
    """Kill the failed group's ranks (a group restarts together) and start it again from the plan,
    under the lock: one replica of several, or the whole plan. False when it could not even try
    (the lock is held by another sparkctl)."""
    t0, replica = time.monotonic(), failed_replica(plan, cause)
    where = {"replica": replica} if replica is not None else {}
    what = f"replica {replica}" if replica is not None else "group"
    try:
        with ClusterLock(plan.cluster, f"sparkctl supervise {plan.mode} ({what} restart)"):
            flag.interrupt = True
            try:
                if replica is None:
                    _restart_all(profile, pool, plan, cause)
                else:
                    restart_replica(profile, pool, plan, replica)
            finally:
                flag.interrupt = False
    except LockHeldError as exc:
        state.record_event(plan.cluster, "restart_deferred", **cause, **where, detail=exc.message)
        flag.wait(POLL_S * 4)
        return False
    except KeyboardInterrupt:
        state.record_event(plan.cluster, "restart_interrupted", **cause, **where)
        return True
    except SparkctlError as exc:
        state.record_event(
            plan.cluster,
            "restart_failed",
            **cause,
            **where,
            detail=str(exc.message),
            failed_rank=exc.rank,
            failed_node=exc.node,
        )
        return True
    state.record_event(plan.cluster, "restarted", **cause, **where, ready_s=round(time.monotonic() - t0, 2))
    return True


def _restart_all(profile: Profile, pool: NodePool, plan: Plan, cause: dict) -> None:
    t0, observed = time.monotonic(), containers.list_nodes(pool, plan.cluster, plan.nodes)[0]
    remove_all(pool, observed, grace=None)  # nothing to save in a broken group
    # The survivors (a headless rank whose rank 0 died lives on alone) are gone: say when.
    survivors = sorted(c.name for c in observed if c.running)
    ago = cause.get("since_exit_s")
    extra = {"since_exit_s": round(ago + time.monotonic() - t0, 3)} if ago is not None else {}
    state.record_event(plan.cluster, "group_removed", **{**cause, **extra}, stopped=survivors)
    budget = profile.engine.ready_timeout
    start_group(profile, pool, plan, time.monotonic() + budget, budget, QuietReporter())


def restart_replica(profile: Profile, pool: NodePool, plan: Plan, index: int) -> None:
    """Replica `index` alone: out of the router, its containers removed, started again, back in
    and healthy. The other replicas and the router are not touched and serve meanwhile."""
    url, sub = plan.groups[index].worker_url, plan.replica(index)
    rc = routers.client(pool, plan)
    with contextlib.suppress(RouterError):
        rc.remove(url)  # re-added once it serves: the router's circuit breaker starts afresh
    observed, _ = containers.list_nodes(pool, plan.cluster, sub.nodes)
    remove_all(pool, replica_containers(observed, plan, index, {plan.mode}), grace=None)
    budget = profile.engine.ready_timeout
    deadline = time.monotonic() + budget
    start_group(profile, pool, sub, deadline, budget, QuietReporter())
    routers.put_back(rc, url, index, max(1.0, deadline - time.monotonic()))
