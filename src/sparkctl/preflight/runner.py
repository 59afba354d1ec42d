"""Run the selected preflight checks: a generic loop over the registered `Check`s.

Phase 1 gathers each node's facts, all nodes in parallel: the probes every applicable check
asks for run in ONE batch on the node's one connection, beside the connector `Task`s (Docker
API, manifests). Phase 2 runs the follow-up probes that depend on several nodes' facts (snapshot
sizes). Phase 3 is pure: each check judges the facts. A node that cannot be reached yields one
SshReachable error and SKIPs for its own checks; everything else still runs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkctl.facts.probe import Probe, run_batch
from sparkctl.fanout import fan_out
from sparkctl.findings import Finding, Severity
from sparkctl.planning.build import Plan
from sparkctl.preflight.base import Check, Ctx, NodeFacts, Task
from sparkctl.preflight.registry import CHECKS, REGISTRY, group_of, validate_names
from sparkctl.profile.schema import Profile

if TYPE_CHECKING:
    from sparkctl.connectors.base import Connector
    from sparkctl.connectors.pool import NodePool

OK, WARN, ERROR, SKIP = Severity.OK, Severity.WARN, Severity.ERROR, Severity.SKIP


@dataclass
class Report:
    cluster: str
    mode: str
    nodes: list[str]
    findings: list[Finding]
    elapsed_s: float = 0.0
    ignored: frozenset[str] = frozenset()

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is WARN]

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self) -> dict:
        return {
            "cluster": self.cluster,
            "mode": self.mode,
            "nodes": self.nodes,
            "ok": self.ok,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "elapsed_s": round(self.elapsed_s, 3),
            "ignored": sorted(self.ignored),
            "findings": [f.to_json() for f in self.findings],
        }


def _active(ctx: Ctx) -> list[Check]:
    return [c for c in REGISTRY.values() if c.selected(ctx) and c.applies(ctx)]


# ----------------------------------------------------------------------------- phase 1
def _wanted(checks: list[Check], ctx: Ctx, node: str) -> tuple[dict[str, Probe], dict[str, Task]]:
    """Every fact this node must gather for the active checks (same name = gathered once)."""
    probes: dict[str, Probe] = {}
    tasks: dict[str, Task] = {}
    for check in (c for c in checks if ctx.covers(c, node)):
        for name, want in check.probes(ctx, node).items():
            (tasks if isinstance(want, Task) else probes).setdefault(name, want)  # type: ignore[arg-type]
    return probes, tasks


def _chain(conn: Connector, root: str, tasks: Mapping[str, Task], facts: NodeFacts) -> None:
    """Run a root task, then (only if it succeeded) the tasks that come after it, in order."""
    got: dict[str, Any] = {}
    for name in [root, *(n for n, t in tasks.items() if t.after == root)]:
        try:
            got[name] = facts.values[name] = tasks[name].run(conn, got)
        except Exception as exc:  # noqa: BLE001 - this fact's failure, judged by its checks
            facts.errors[name] = exc
            if name == root:
                return


def _gather(ctx: Ctx, checks: list[Check], pool: NodePool, node: str) -> NodeFacts:
    facts = NodeFacts(node)
    try:
        facts.conn = pool.get(node)
    except Exception as exc:  # noqa: BLE001 - ConnectError (expected) or anything else: the node's error
        facts.connect_error = exc
        return facts
    conn = facts.conn
    probes, tasks = _wanted(checks, ctx, node)
    jobs: dict[str, Callable[[], Any]] = {"": lambda: _store(facts, run_batch(conn, probes))}
    for root in (n for n, t in tasks.items() if t.after is None):
        jobs[root] = lambda root=root: _chain(conn, root, tasks, facts)
    for name, err in fan_out(jobs, lambda k: jobs[k](), where=lambda _: (node, None)).errors.items():
        if name:
            facts.errors[name] = err
        else:  # the batch itself failed: every probe of it did
            facts.errors.update({p: err for p in probes})
    return facts


def _store(facts: NodeFacts, results: Mapping[str, Any]) -> None:
    for name, value in results.items():
        if isinstance(value, Exception):
            facts.errors[name] = value
        else:
            facts.values[name] = value


# ----------------------------------------------------------------------------- phase 2
def _followups(ctx: Ctx, checks: list[Check], live: dict[str, NodeFacts]) -> None:
    want: dict[str, dict[str, Probe]] = {}
    for check in checks:
        for node, probes in check.followups(ctx, _covered(ctx, check, live)).items():
            for name, probe in probes.items():
                want.setdefault(node, {}).setdefault(name, probe)
    done = fan_out(list(want), lambda n: run_batch(live[n].conn, want[n]))  # type: ignore[arg-type]
    for node, outcome in done.items():
        if outcome.ok:
            _store(live[node], outcome.value)
        else:
            live[node].errors.update({name: outcome.error for name in want[node]})  # type: ignore[misc]


def _covered(ctx: Ctx, check: Check, facts: dict[str, NodeFacts]) -> dict[str, NodeFacts]:
    """The facts of the nodes `check` runs on (a router-only node only for router checks)."""
    return {n: f for n, f in facts.items() if ctx.covers(check, n)}


# ----------------------------------------------------------------------------- phase 3
def _unreachable(ctx: Ctx, checks: list[Check], f: NodeFacts) -> list[Finding]:
    exc = f.connect_error
    msg = getattr(exc, "message", None) or str(exc)
    out = [Finding("SshReachable", ERROR, msg, getattr(exc, "fix", None), node=f.node)]
    for check in checks:
        if ctx.covers(check, f.node) and check.skips_node(ctx, f.node):
            out.append(Finding(check.name, SKIP, f"skipped: {f.node} unreachable", node=f.node))
    return out


def run_preflight(
    profile: Profile,
    plan: Plan,
    pool: NodePool,
    *,
    only: set[str] | frozenset[str] | None = None,
    ignore: set[str] | frozenset[str] = frozenset(),
    sysfs_root: str = "/sys",
    deep: bool = False,
) -> Report:
    """Run the selected checks on the plan's nodes; never raises for what it finds (see Report)."""
    start = time.monotonic()
    selected = validate_names(set(only), "--only") if only is not None else set(CHECKS)
    ignored = validate_names(set(ignore), "--ignore")
    ctx = Ctx(profile, plan, frozenset(selected), sysfs_root, REGISTRY, pool, deep)
    checks = _active(ctx)
    nodes = [*ctx.nodes, *([ctx.router_only] if ctx.router_only else [])]
    # One connection and one probe batch per node, all nodes at once: pairwise checks (PingDf,
    # SshRank0ToPeer, RouterReach) put each node's targets in its own batch (preflight/pairs.py).
    gathered = fan_out(nodes, lambda n: _gather(ctx, checks, pool, n))
    facts = {n: o.value if o.ok else NodeFacts(n, connect_error=o.error) for n, o in gathered.items()}
    live = {n: f for n, f in facts.items() if f.connect_error is None}
    _followups(ctx, checks, live)
    findings: list[Finding] = []
    for f in facts.values():
        if f.connect_error is not None:
            findings += _unreachable(ctx, checks, f)
    for check in checks:
        findings += check.judge(ctx, _covered(ctx, check, live))
    findings = _apply_ignore(findings, ignored)
    order = {c: i for i, c in enumerate(CHECKS)}
    ranks = {n: i for i, n in enumerate(nodes)}
    findings.sort(
        key=lambda f: (ranks.get(f.node or "", len(ranks)), order.get(group_of(f.check), len(order)))
    )
    return Report(profile.cluster, plan.mode, nodes, findings, time.monotonic() - start, frozenset(ignored))


def _apply_ignore(findings: list[Finding], ignored: set[str]) -> list[Finding]:
    """--ignore downgrades errors of the named checks to warnings (kubeadm style)."""
    out = []
    for f in findings:
        names = {f.check, group_of(f.check), f.data.get("group")}
        if f.severity is ERROR and names & ignored:
            f = dataclasses.replace(
                f, severity=WARN, message=f"{f.message} [ignored]", data={**f.data, "ignored": True}
            )
        out.append(f)
    return out
