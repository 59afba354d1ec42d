"""Wait for the endpoint(s) while watching every rank's container, under one deadline.

The reference script polled rank 0's HTTP port only: a dead rank 1 meant waiting for the
timeout with no message. Here each poll inspects every rank's container through the Docker API
of its node; the first rank found exited ends the wait at once with its own last log lines.
With replicas, every rank of every group is watched in the same polls and the wait ends when
each replica's head endpoint is ready (the router comes after: lifecycle/router.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sparkctl.connectors.pool import NodePool
from sparkctl.errors import SparkctlError
from sparkctl.fanout import fan_out
from sparkctl.lifecycle.orphans import is_connection_loss, lost
from sparkctl.planning.build import Endpoint, Plan, RankSpec
from sparkctl.runtime.containers import ContainerInfo, inspect, tail_logs
from sparkctl.runtime.readiness import EndpointHealth, Prober
from sparkctl.secrets import redact, secret_values

POLL_S = 0.25
LAST_LINE_EVERY_S = 1.0
KILL_SETTLE_S = 5.0  # at most, for a killed rank's engine to record its exit
CLOSE_S = 0.25  # deaths closer than this may be recorded out of order (scheduling on loaded nodes)
FAIL_LOG_LINES = 40


@dataclass
class RankView:
    rank: int
    node: str
    container: str
    status: str = "starting"
    last_line: str = ""


@dataclass(frozen=True)
class WaitProgress:
    elapsed: float
    remaining: float
    ranks: list[RankView]
    endpoint: EndpointHealth


@dataclass(frozen=True)
class RankLog:
    rank: int
    node: str
    lines: list[str]


class RankFailedError(SparkctlError):
    """A rank's container exited (or vanished) before the endpoint became ready."""

    def __init__(self, message: str, *, node: str, rank: int, logs: list[RankLog], fix: str | None = None):
        super().__init__(message, fix=fix, node=node, rank=rank)
        self.logs = logs

    @property
    def json_extra(self) -> dict:
        return {"logs": [{"rank": x.rank, "node": x.node, "lines": x.lines} for x in self.logs]}


class ReadyTimeoutError(SparkctlError):
    """The deadline passed with every rank still running but the endpoint not ready."""

    def __init__(
        self,
        message: str,
        *,
        logs: list[RankLog],
        fix: str | None = None,
        node: str | None = None,
        rank: int = 0,
    ):
        super().__init__(message, fix=fix, node=node, rank=rank)
        self.logs = logs

    json_extra = RankFailedError.json_extra


@dataclass
class WaitResult:
    elapsed: float
    endpoint: EndpointHealth
    ready_at: float  # time.monotonic() when the endpoint first answered ready
    views: list[RankView] = field(default_factory=list)


def _rank_logs(pool: NodePool, spec: RankSpec, lines: int) -> RankLog:
    try:
        text = tail_logs(pool.get(spec.node), spec.container_name, lines)
        masks = secret_values(spec.secret_refs(), pool.get(spec.node))
    except Exception as exc:  # noqa: BLE001 - logs are best effort on the failure path
        text, masks = [f"(could not read the log: {exc})"], []
    return RankLog(spec.rank, spec.node, [redact(line, masks) for line in text])


def replica_of(spec: RankSpec) -> int | None:
    """The replica a rank belongs to when its mode has several (containers named `-g<k>-r<n>`)."""
    return spec.group if spec.container_name.endswith(f"-g{spec.group}-r{spec.node_rank}") else None


def rank_label(spec: RankSpec) -> str:
    """`rank 1`; a rank of a replica also names the replica and its node rank there:
    `rank 3 (replica 1, node rank 1)`."""
    if replica_of(spec) is not None:
        return f"rank {spec.rank} (replica {spec.group}, node rank {spec.node_rank})"
    return f"rank {spec.rank}"


def endpoints(plan: Plan) -> list[Endpoint]:
    """Each replica's head endpoint (the plan's own when it has no groups)."""
    return [g.endpoint for g in plan.groups] or [plan.endpoint]


def combined(states: list[EndpointHealth]) -> EndpointHealth:
    """One health for several replicas: ready when each is; the detail names those that are not."""
    if len(states) == 1:
        return states[0]
    waiting = [f"replica {i}: {s.detail}" for i, s in enumerate(states) if not s.ready]
    return EndpointHealth(
        all(s.models_ok for s in states),
        states[0].served,
        all(s.health_ok for s in states),
        "; ".join(waiting) or "ready",
    )


def first_dead(infos: dict[int, ContainerInfo | None]) -> int | None:
    """The rank whose container finished first (Docker's FinishedAt, the nodes' clocks), so a
    peer that exited *because* a rank died is not blamed; a vanished container sorts last."""
    dead = [
        (info.finished_at if info else None, r)
        for r, info in infos.items()
        if info is None or not info.running
    ]
    if not dead:
        return None
    far = datetime.max.replace(tzinfo=UTC)
    return min(dead, key=lambda d: (d[0] or far, d[1]))[1]


def wait_ready(
    pool: NodePool,
    plan: Plan,
    deadline: float,
    *,
    budget: float | None = None,
    on_update: Callable[[WaitProgress], None] | None = None,
    log_hint: Callable[[RankSpec], str] | None = None,
    poll: float = POLL_S,
) -> WaitResult:
    """Block until every replica's head endpoint is ready, a rank exits, or `deadline`
    (time.monotonic())."""
    start = time.monotonic()
    views = {s.rank: RankView(s.rank, s.node, s.container_name) for s in plan.ranks}
    woken = threading.Event()  # a prober that turns ready ends the poll's sleep at once
    probers = [Prober(ep, on_ready=woken).start() for ep in endpoints(plan)]
    next_lines = start
    try:
        while True:
            fetch_lines = on_update is not None and time.monotonic() >= next_lines
            infos = _look(pool, plan, [s.rank for s in plan.ranks], views, fetch_lines)
            if fetch_lines:
                next_lines = time.monotonic() + LAST_LINE_EVERY_S
            if any(i is None or not i.running for i in infos.values()):
                raise _rank_failed(pool, plan, infos, start, log_hint)
            now = time.monotonic()
            health = combined([p.state for p in probers])
            if all(p.ready_at is not None for p in probers):
                # Ready means every rank still runs now too (one may have died since the last look).
                infos = _look(pool, plan, [s.rank for s in plan.ranks], views, False)
                if any(i is None or not i.running for i in infos.values()):
                    raise _rank_failed(pool, plan, infos, start, log_hint)
                ready_at = max(p.ready_at for p in probers if p.ready_at is not None)
                return WaitResult(now - start, health, ready_at, list(views.values()))
            if on_update is not None:
                on_update(WaitProgress(now - start, max(0.0, deadline - now), list(views.values()), health))
            if now >= deadline:
                raise _timed_out(pool, plan, probers, budget or now - start, log_hint)
            woken.wait(poll)
            woken.clear()
    finally:
        for p in probers:
            p.stop()


def _look(
    pool: NodePool, plan: Plan, ranks: list[int], views: dict[int, RankView], fetch_lines: bool
) -> dict[int, ContainerInfo | None]:
    """Inspect the ranks' containers in parallel (and their last log line); a node that stopped
    answering ends the wait as a ConnectError naming it."""

    def look(rank: int) -> tuple[ContainerInfo | None, str | None]:
        spec = plan.rank(rank)
        conn = pool.get(spec.node)
        info = inspect(conn, spec.container_name)
        line = None
        if fetch_lines and info is not None:
            tail = tail_logs(conn, spec.container_name, 1)
            line = redact(tail[-1], secret_values(spec.secret_refs(), conn)) if tail else ""
        return info, line

    results = fan_out(ranks, look, where=lambda r: (plan.rank(r).node, r))
    for o in results.failed:
        if is_connection_loss(o.error):  # type: ignore[arg-type]
            raise lost(o.node or "?", o.rank, o.error, f"watching rank {o.rank} start", True)  # type: ignore[arg-type]
    infos: dict[int, ContainerInfo | None] = {}
    for rank, (info, line) in results.values_or_raise().items():
        infos[rank] = info
        views[rank].status = info.status if info else "gone"
        if line is not None:
            views[rank].last_line = line
    return infos


def _end_group(pool: NodePool, plan: Plan, infos: dict[int, ContainerInfo | None]) -> dict[int, tuple]:
    """Per rank, in parallel: SIGKILL it if it still runs (the group is rolled back anyway), wait
    until its engine records the exit, read its log tail. -> {rank: (info, killed, log)}.

    Killing first is what makes the blame right without a fixed wait: an engine may record a
    death late (the rank that died first can still look running), but it records every exit
    with its true time, and a rank killed now finishes after any rank that died on its own."""
    import docker.errors

    def end(rank: int) -> tuple[ContainerInfo | None, bool, RankLog]:
        spec, info = plan.rank(rank), infos[rank]
        killed = False
        if info is not None and info.running:
            conn = pool.get(spec.node)
            try:
                conn.docker().api.kill(spec.container_name)
                killed = True
            except docker.errors.APIError:
                pass  # it stopped (or went) meanwhile: what inspect says next is the truth
            deadline = time.monotonic() + KILL_SETTLE_S
            while info is not None and info.running and time.monotonic() < deadline:
                time.sleep(0.02)
                info = inspect(conn, spec.container_name)
        return info, killed, _rank_logs(pool, spec, FAIL_LOG_LINES)

    return fan_out(list(infos), end, where=lambda r: (plan.rank(r).node, r)).values_or_raise()


def _rank_failed(
    pool: NodePool,
    plan: Plan,
    infos: dict[int, ContainerInfo | None],
    start: float,
    log_hint: Callable[[RankSpec], str] | None,
) -> RankFailedError:
    ended = _end_group(pool, plan, infos)
    dead = first_dead({r: info for r, (info, _k, _log) in ended.items()})
    assert dead is not None
    spec, (info, _killed, log) = plan.rank(dead), ended[dead]
    how = f"exited ({info.describe_exit()})" if info else "disappeared (removed by someone else?)"
    # Ranks that died on their own too (not by the SIGKILL sent just now).
    others = [
        r
        for r, (i, killed, _log) in ended.items()
        if r != dead and (i is None or (not i.running and not (killed and i.exit_code == 137)))
    ]
    also = f"; rank(s) {', '.join(map(str, others))} exited too" if others else ""
    logs = [log]
    close = [r for r in others if _gap(info, ended[r][0]) is not None and _gap(info, ended[r][0]) < CLOSE_S]
    if close:  # exit times this close can be recorded out of order: say so, show both
        also = "; " + ", ".join(
            f"rank {r} exited ({ended[r][0].describe_exit()}) "  # type: ignore[union-attr]
            f"{_gap(info, ended[r][0]):.2f}s later"
            for r in close
        )
        also += " (which one failed first is not certain: both logs above)"
        logs += [ended[r][2] for r in close]
    return RankFailedError(
        f"{rank_label(spec)} {how} while starting, after {time.monotonic() - start:.1f}s{also}",
        node=spec.node,
        rank=dead,
        logs=logs,
        fix=log_hint(spec) if log_hint else None,
    )


def _gap(first: ContainerInfo | None, later: ContainerInfo | None) -> float | None:
    if first is None or later is None or first.finished_at is None or later.finished_at is None:
        return None
    return (later.finished_at - first.finished_at).total_seconds()


def _timed_out(
    pool: NodePool,
    plan: Plan,
    probers: list[Prober],
    budget: float,
    log_hint: Callable[[RankSpec], str] | None,
) -> ReadyTimeoutError:
    # The first replica not ready; its head serves the endpoint (a plan without groups: rank 0).
    # Group rank lists hold rank numbers (indices of the full plan): plan.rank finds them in a sub-plan.
    late = next(i for i, p in enumerate(probers) if p.ready_at is None)
    members = [plan.rank(n) for n in plan.groups[late].ranks] if plan.groups else plan.ranks
    spec0 = members[0]
    logs = [_rank_logs(pool, spec0, FAIL_LOG_LINES)]
    logs += [_rank_logs(pool, s, 10) for s in members[1:]]
    which = "endpoint" if replica_of(spec0) is None else f"replica {spec0.group}'s endpoint"
    return ReadyTimeoutError(
        f"{which} {probers[late].endpoint.url} not ready within the {budget:.0f}s deadline "
        f"(last probe: {probers[late].state.detail}); all ranks still running",
        node=spec0.node,
        rank=spec0.rank,
        logs=logs,
        fix="raise engine.ready_timeout (or --timeout) if it is still loading; "
        + (log_hint(spec0) if log_hint else "check the logs"),
    )
