"""The router's part of the lifecycle (modes with replicas): start sglang-router's container after
the replicas are ready, wait until it routes to every replica, keep a running one whose config is
unchanged (its worker set reconciled through its API, so requests never stop), and what `status`
shows of it.

The router checks the replicas itself (`router.health_check_interval`): one that fails is taken
out of rotation, listed unhealthy by `GET /workers`, and reported by `status`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkctl.clients.router import RouterClient, RouterError, Worker
from sparkctl.connectors.pool import NodePool
from sparkctl.errors import SparkctlError
from sparkctl.lifecycle.logs import plain
from sparkctl.planning.build import LABEL_PREFIX, Plan, RankSpec
from sparkctl.runtime import containers
from sparkctl.runtime.containers import ContainerInfo
from sparkctl.secrets import redact, resolve, resolve_known, secret_values

POLL_S = 0.25
CLIENT_TIMEOUT = 3.0
FAIL_LOG_LINES = 40


class RouterFailedError(SparkctlError):
    """The router's container exited, or it did not route to every replica by the deadline."""

    def __init__(self, message: str, *, node: str, lines: list[str], fix: str | None = None) -> None:
        super().__init__(message, fix=fix, node=node)
        self.lines = lines

    @property
    def logs(self) -> list:  # what `up` prints on failure, like a rank's (watch.RankLog)
        from sparkctl.lifecycle.watch import RankLog

        return [RankLog(-1, self.node or "?", self.lines)] if self.lines else []

    @property
    def json_extra(self) -> dict:
        return {"logs": [{"router": True, "node": self.node, "lines": self.lines}]}


def worker_urls(plan: Plan) -> list[str]:
    """The replicas' URLs the router routes to, one per group, in order."""
    return [g.worker_url for g in plan.groups]


def client(pool: NodePool, plan: Plan, timeout: float = CLIENT_TIMEOUT) -> RouterClient:
    """A client for the plan's router, with the API key (a file-held one is read on its node):
    sglang-router answers its worker API only with the key it was started with."""
    assert plan.router is not None
    ref = plan.endpoint.api_key
    key = None
    if ref is not None and ref.file:
        with contextlib.suppress(SparkctlError):
            key = resolve(ref, pool.get(plan.router.node))
    key = key or resolve_known(ref)
    return RouterClient(plan.endpoint.url, api_key=key, timeout=timeout)


def matches(info: ContainerInfo | None, spec: RankSpec) -> bool:
    """A running router with the plan's router config: kept, only its worker set is changed."""
    want = spec.labels.get(f"{LABEL_PREFIX}config_hash")
    return info is not None and info.running and info.config_hash == want


def bring_up(
    pool: NodePool,
    plan: Plan,
    deadline: float,
    phase: Callable[[str], None],
    start: Callable[[RankSpec], None],
    *,
    restarted: bool = True,
) -> list[Worker]:
    """Keep the running router (same config) or replace it (`start` creates the container and is
    what rollback knows about), then wait until it lists every replica healthy. `restarted`: the
    replicas were just (re)started, so a kept router gets them as new workers (what it knew of
    the old processes, e.g. an open circuit breaker after a crash, would keep them out)."""
    spec = plan.router
    assert spec is not None
    conn = pool.get(spec.node)
    info = containers.inspect(conn, spec.container_name)
    if matches(info, spec):
        if restarted:
            phase(f"keeping the router on {spec.node} (same config): giving it the restarted replicas")
            renew(client(pool, plan), worker_urls(plan), deadline)
    else:
        if info is not None:  # stopped, or another config: it has no requests to save
            containers.remove(conn, spec.container_name, grace=None)
        phase(f"starting the router on {spec.node} ({spec.container_name})")
        start(spec)
    if restarted or not matches(info, spec):
        phase(f"waiting for the router at {plan.endpoint.url} to route to {plan.replicas} replicas")
    return wait_routing(pool, plan, deadline)


def renew(rc: RouterClient, urls: list[str], deadline: float) -> None:
    """Take these workers out of the router (they come back through sync_workers as new)."""
    gone = [url for url in urls if rc.remove(url)]
    if gone:
        rc.wait_for(
            "the restarted replicas out of its worker list",
            lambda ws: not {w.url for w in ws} & set(gone),
            timeout=max(0.1, deadline - time.monotonic()),
        )


def put_back(rc: RouterClient, url: str, index: int, timeout: float) -> None:
    """Add a replica that serves again and wait until the router lists it healthy."""
    rc.add(url)
    rc.wait_for(
        f"replica {index} healthy in the router",
        lambda ws: any(w.url == url and w.healthy for w in ws),
        timeout=timeout,
    )


def sync_workers(rc: RouterClient, listing: list[Worker], want: list[str]) -> bool:
    """Add the planned replicas it lacks, remove those not planned. True when it changed anything."""
    have = {w.url for w in listing}
    for url in want:
        if url not in have:
            rc.add(url)
    extra = [w.url for w in listing if w.url not in want]
    for url in extra:
        rc.remove(url)
    return bool(extra) or not set(want) <= have


def wait_routing(pool: NodePool, plan: Plan, deadline: float) -> list[Worker]:
    """Poll until the router answers and lists exactly the planned replicas, all healthy; its
    worker set is reconciled once it answers. The router's container is watched meanwhile."""
    spec = plan.router
    assert spec is not None
    rc, want = client(pool, plan), worker_urls(plan)
    synced, listing, why = False, [], "not answering yet"
    while True:
        info = containers.inspect(pool.get(spec.node), spec.container_name)
        if info is None or not info.running:
            raise _died(pool, spec, info)
        try:
            listing = rc.workers()
            if not synced:
                synced = True
                if sync_workers(rc, listing, want):
                    listing = rc.workers()
            healthy = {w.url for w in listing if w.healthy}
            if set(want) <= healthy and {w.url for w in listing} <= set(want):
                return listing
            why = ""
        except RouterError as exc:
            why = exc.message
        if time.monotonic() >= deadline:
            raise _not_routing(plan, listing, why)
        time.sleep(POLL_S)


def _router_log(pool: NodePool, spec: RankSpec, lines: int) -> list[str]:
    try:
        conn = pool.get(spec.node)
        text = containers.tail_logs(conn, spec.container_name, lines)
        masks = secret_values(spec.secret_refs(), conn)
    except Exception as exc:  # noqa: BLE001 - logs are best effort on the failure path
        return [f"(could not read the router's log: {exc})"]
    return [plain(redact(line, masks)) for line in text]


def _died(pool: NodePool, spec: RankSpec, info: ContainerInfo | None) -> RouterFailedError:
    how = f"exited ({info.describe_exit()})" if info else "disappeared (removed by someone else?)"
    return RouterFailedError(
        f"the router ({spec.container_name}) {how} while starting",
        node=spec.node,
        lines=_router_log(pool, spec, FAIL_LOG_LINES),
        fix="its log is above (`sparkctl logs --router`); check router.image/router.command "
        "(the image must ship sglang-router)",
    )


def _not_routing(plan: Plan, listing: list[Worker], why: str) -> RouterFailedError:
    assert plan.router is not None
    seen = {w.url: w for w in listing}
    missing = [
        f"replica {g.index} on {g.head_node} ({g.worker_url}): "
        + ("unhealthy" if g.worker_url in seen else "not listed")
        for g in plan.groups
        if g.worker_url not in seen or not seen[g.worker_url].healthy
    ]
    what = "; ".join(missing) or why or "it lists replicas the plan does not have"
    return RouterFailedError(
        f"the router at {plan.endpoint.url} did not route to every replica by the deadline: {what}",
        node=plan.router.node,
        lines=[],
        fix="each replica answered /health to sparkctl: check that the router's node reaches the "
        "replicas' addresses (`sparkctl logs --router`), or raise --timeout",
    )


# ------------------------------------------------------------------------------ status
@dataclass
class RouterView:
    """What `status` shows of the router: its container and its own view of the replicas."""

    node: str
    url: str
    container: ContainerInfo | None
    workers: list[Worker] = field(default_factory=list)
    error: str | None = None  # why the worker list could not be read

    def health_of(self, url: str) -> str | None:
        """How the router sees a replica: "healthy", "unhealthy" or "not listed"; None without a view."""
        if self.error is not None:
            return None
        w = next((w for w in self.workers if w.url == url.rstrip("/")), None)
        return "not listed" if w is None else "healthy" if w.healthy else "unhealthy"

    def to_json(self) -> dict:
        return {
            "node": self.node,
            "url": self.url,
            "container": self.container.to_json() if self.container else None,
            "workers": [{"url": w.url, "healthy": w.healthy, "load": w.load} for w in self.workers],
            "error": self.error,
        }


def view(pool: NodePool, plan: Plan, info: ContainerInfo | None) -> RouterView:
    """The router's container (as observed) and, when it runs, its `GET /workers`."""
    assert plan.router is not None
    out = RouterView(plan.router.node, plan.endpoint.url, info)
    if info is None or not info.running:
        out.error = "the router's container is " + (info.status if info else "missing")
        return out
    try:
        out.workers = sorted(client(pool, plan).workers(), key=lambda w: w.url)
    except RouterError as exc:
        out.error = exc.message
    return out
