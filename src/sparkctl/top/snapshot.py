"""One `top` refresh: containers + node probes (one fan-out, one exec per node) and rank 0's /metrics.

A source that cannot be read becomes an error on its row or cell (a degraded row), never an
exception: `top` keeps showing what it can. Rates need the previous refresh, so `Collector`
keeps the last scrape and node sample; `--once` takes two refreshes one interval apart.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from sparkctl.top.metrics import EngineStats, Scrape, engine_stats, parse_metrics
from sparkctl.top.nodes import GpuStat, NodeSample, net_rates, read_node

if TYPE_CHECKING:
    from sparkctl.connectors.pool import NodePool
    from sparkctl.planning.build import Plan
    from sparkctl.profile.schema import Profile
    from sparkctl.runtime.containers import ContainerInfo
    from sparkctl.top.alerts import Alert

METRICS_TIMEOUT = 2.0
METRICS_LIMIT = 64 << 20  # an engine's exposition text (histograms: hundreds of KB); bounded all the same
HISTORY = 10  # refreshes of queue length kept for the "queue growing" rule


@dataclass
class RankRow:
    rank: int
    node: str
    container: str
    state: str  # running | missing | unknown (its node could not be asked)
    detail: str = ""
    uptime_s: float | None = None

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class EngineRow:
    """One group's engine (rank 0's /metrics); several with replicas."""

    mode: str
    url: str
    stats: EngineStats | None = None
    error: str | None = None
    replica: int | None = None  # set when the mode runs several replicas

    @property
    def name(self) -> str:
        return self.mode if self.replica is None else f"{self.mode} replica {self.replica}"

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "replica": self.replica,
            "url": self.url,
            "error": self.error,
            **(self.stats.to_json() if self.stats else {}),
        }


@dataclass
class NodeView:
    node: str
    error: str | None = None  # the node itself could not be asked: a degraded row
    gpus: list[GpuStat] = field(default_factory=list)
    gpu_error: str | None = None
    mem_available_mib: int | None = None
    mem_total_mib: int | None = None
    unified_memory: bool = False
    mem_error: str | None = None
    fabric: dict[str, dict[str, float | None]] = field(default_factory=dict)  # netdev -> rx/tx bytes/s
    fabric_error: str | None = None
    guard: dict | None = None  # the memory guard on this node: {running, state, last_trip}

    def to_json(self) -> dict:
        out = dict(self.__dict__)
        out["gpus"] = [g.to_json() for g in self.gpus]
        return out


@dataclass
class Snapshot:
    cluster: str
    mode: str
    taken_at: str
    interval_s: float | None
    ranks: list[RankRow] = field(default_factory=list)
    engines: list[EngineRow] = field(default_factory=list)
    nodes: list[NodeView] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "cluster": self.cluster,
            "mode": self.mode,
            "taken_at": self.taken_at,
            "interval_s": self.interval_s,
            "ranks": [r.to_json() for r in self.ranks],
            "engines": [e.to_json() for e in self.engines],
            "nodes": [n.to_json() for n in self.nodes],
            "warnings": [a.to_json() for a in self.alerts],
        }


def node_view(now: NodeSample | None, before: NodeSample | None, error: str | None, node: str) -> NodeView:
    if now is None:
        return NodeView(node, error=error or "no answer")
    return NodeView(
        node,
        gpus=now.gpus,
        gpu_error=now.gpu_error,
        mem_available_mib=now.mem_available_mib,
        mem_total_mib=now.mem_total_mib,
        unified_memory=now.unified_memory,
        mem_error=now.mem_error,
        fabric=net_rates(now, before),
        fabric_error=now.net_error,
        guard=now.guard,
    )


def rank_rows(plan: Plan, containers: list[ContainerInfo], unreachable: dict[str, str]) -> list[RankRow]:
    """The plan's ranks against what runs: a stopped or absent container is a missing rank."""
    rows = []
    for spec in plan.ranks:
        found = [c for c in containers if c.node == spec.node and c.name == spec.container_name]
        row = RankRow(spec.rank, spec.node, spec.container_name, "running")
        if spec.node in unreachable:
            row.state, row.detail = "unknown", f"node {spec.node} unreachable"
        elif not found:
            row.state, row.detail = "missing", f"no container {spec.container_name} on {spec.node}"
        elif not found[0].running:
            row.state, row.detail = "missing", f"container {found[0].status} ({found[0].describe_exit()})"
        else:
            row.uptime_s = found[0].uptime_s()
        rows.append(row)
    return rows


class ScrapeError(Exception):
    """/metrics could not be read: the message is the cell's text."""


def scrape(
    url: str, timeout: float = METRICS_TIMEOUT, key: str | None = None, enable_flag: str | None = None
) -> str:
    """GET /metrics through the cluster's one opener (no proxy), with the API key where there is
    one (the gateway asks for it on every route but /health); a failure is a ScrapeError whose
    text says what failed (a 404 with the engine's flag that turns metrics on)."""
    import urllib.request

    from sparkctl.cluster_http import Failure, fetch

    def fail(f: Failure) -> ScrapeError:
        if f.code == 404 and enable_flag:
            return ScrapeError(f"/metrics: HTTP 404 (set engine.args {enable_flag}: true)")
        return ScrapeError(f"/metrics: HTTP {f.code}" if f.code is not None else f"/metrics: {f.detail}")

    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    body, _ = fetch(req, timeout, fail, limit=METRICS_LIMIT)
    return body.decode("utf-8", errors="replace")


class Collector:
    """Keeps the previous refresh, so every `sample()` can difference counters."""

    def __init__(self, profile: Profile, pool: NodePool, mode: str | None = None) -> None:
        self.profile = profile
        self.pool = pool
        self.mode = mode
        self.queued: deque[float | None] = deque(maxlen=HISTORY)
        self._scrape: dict[str, Scrape] = {}
        self._nodes: dict[str, NodeSample] = {}
        self._last_mode: str | None = None

    def _read_nodes(self) -> tuple[list[ContainerInfo], dict[str, NodeSample], dict[str, str]]:
        from sparkctl.fanout import fan_out
        from sparkctl.runtime.containers import list_cluster

        def one(node: str) -> tuple[list[ContainerInfo], NodeSample]:
            conn = self.pool.get(node)
            cfg = self.profile.node(node)
            netdevs = list(cfg.fabric.netdevs) if cfg.fabric else []
            try:
                return list_cluster(conn, self.profile.cluster), read_node(
                    conn, netdevs, time.monotonic(), self.profile.cluster
                )
            except Exception:
                conn.close()  # a dead session is reopened at the next refresh: a node that comes back recovers
                raise

        results = fan_out([n.name for n in self.profile.nodes], one)
        containers: list[ContainerInfo] = []
        samples: dict[str, NodeSample] = {}
        for node, (found, sample) in results.ok.items():
            containers += found
            samples[node] = sample
        unreachable = {o.key: _message(o.error) for o in results.failed}
        return containers, samples, unreachable

    def _engine(self, plan: Plan, replica: int | None = None) -> EngineRow:
        """One replica's head /metrics (the router's port serves no engine metrics)."""
        from sparkctl.engines import get_engine

        names = get_engine(self.profile.engine.kind).metrics
        url = f"{plan.endpoint.url}/metrics"
        row = EngineRow(plan.mode, url, replica=replica)
        if names is None:  # the engine has no metrics capability: nothing to scrape
            row.error = f"engine '{self.profile.engine.kind}' exports no metrics"
            return row
        try:
            text = scrape(url, key=self._key(plan), enable_flag=names.enable_flag)
            now = parse_metrics(text, time.monotonic(), names)
        except Exception as exc:  # noqa: BLE001 - any failure to read the engine is that cell's state
            row.error = str(exc) if isinstance(exc, ScrapeError) else f"/metrics: {exc}"
            self._scrape.pop(url, None)
            return row
        row.stats = engine_stats(now, self._scrape.get(url), names)
        self._scrape[url] = now
        return row

    def _key(self, plan: Plan) -> str | None:
        from sparkctl.secrets import resolve_known

        ref = plan.endpoint.api_key
        if ref is None:
            return None
        return resolve_known(ref, self.pool.get(plan.ranks[0].node) if ref.file else None)

    def _engines(self, plan: Plan) -> list[EngineRow]:
        if plan.replicas <= 1:
            return [self._engine(plan)]
        from sparkctl.fanout import fan_out

        rows = fan_out([g.index for g in plan.groups], lambda i: self._engine(plan.replica(i), i))
        return [rows.ok[g.index] for g in plan.groups]

    def sample(self) -> Snapshot:
        from sparkctl.engines import get_engine
        from sparkctl.planning.build import build_plan
        from sparkctl.top.alerts import Knobs, evaluate

        containers, samples, unreachable = self._read_nodes()
        mode = (
            self.mode
            or _running_mode(containers, self.profile)
            or self._last_mode
            or self.profile.default_mode()
        )
        self._last_mode = mode
        plan = build_plan(self.profile, mode)
        before = self._nodes
        self._nodes = samples
        taken = datetime.now(timezone.utc).isoformat(timespec="seconds")  # noqa: UP017 - py3.11 alias
        dt = [s.t - before[n].t for n, s in samples.items() if n in before]
        snap = Snapshot(self.profile.cluster, mode, taken, round(dt[0], 3) if dt else None)
        snap.ranks = rank_rows(plan, containers, unreachable)
        snap.nodes = [node_view(samples.get(n), before.get(n), unreachable.get(n), n) for n in plan.nodes]
        snap.engines = self._engines(plan)
        queued = [e.stats.queued for e in snap.engines if e.stats and e.stats.queued is not None]
        self.queued.append(sum(queued) if queued else None)
        knobs = Knobs.of(get_engine(self.profile.engine.kind).memory)
        snap.alerts = evaluate(snap, list(self.queued), knobs)
        return snap


def _running_mode(containers: list[ContainerInfo], profile: Profile) -> str | None:
    """The mode that runs; else the mode of this cluster's stopped containers (its ranks died)."""
    for alive in (True, False):
        modes = {
            c.mode
            for c in containers
            if (c.running or not alive) and c.role == "engine" and c.mode in profile.modes
        }
        if modes:
            return sorted(modes)[0]
    return None


def _message(exc: BaseException | None) -> str:
    from sparkctl.errors import SparkctlError

    if isinstance(exc, SparkctlError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"
