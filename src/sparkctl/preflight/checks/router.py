"""RouterReach: the router's node reaches every replica head at the address the router will use.

The replicas are not started yet, so this tests the path, not the service: a TCP connect from
the router's node to each head's worker URL, in the router node's own probe batch. "Connection
refused" means the head answered (nothing listens yet): the path works. A timeout, "no route"
or a name that does not resolve there means the router would mark the replica unhealthy forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sparkctl.facts.net import TcpReach, tcp_probe
from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, Check, Ctx, NodeFacts, Task, probe_failure
from sparkctl.preflight.pairs import ReplicaHead, router_targets

if TYPE_CHECKING:
    from sparkctl.planning.model import RankSpec


class OnRouterNode(Check):
    """A check whose facts come from the router's node alone (modes with a router), also when that
    node holds no rank."""

    router_node = True

    def skips_node(self, ctx: Ctx, node: str) -> bool:
        return ctx.plan.router is not None and node == ctx.plan.router.node

    def probes(self, ctx: Ctx, node: str) -> Mapping[str, Probe | Task]:
        router = ctx.plan.router
        return self.router_probes(ctx, router) if router is not None and node == router.node else {}

    def router_probes(self, ctx: Ctx, router: RankSpec) -> Mapping[str, Probe | Task]:
        return {}

    def router_facts(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> tuple[RankSpec, NodeFacts] | None:
        router = ctx.plan.router
        f = facts.get(router.node) if router is not None else None
        return (router, f) if router is not None and f is not None else None


class RouterReach(OnRouterNode):
    name = "RouterReach"
    summary = "the router's node reaches each replica head's worker address (TCP path, before start)"
    order = 55

    def applies(self, ctx: Ctx) -> bool:
        return bool(router_targets(ctx.plan))

    def router_probes(self, ctx: Ctx, router: RankSpec) -> dict[str, Probe]:
        return {f"router:{h.group}": tcp_probe(h.host, h.port) for h in router_targets(ctx.plan)}

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        got = self.router_facts(ctx, facts)
        if got is None:
            return []
        f, out = got[1], []
        for head in router_targets(ctx.plan):
            res = f.result(f"router:{head.group}")
            if isinstance(res, Exception):
                out.append(probe_failure(self.name, f.node, res))
            elif res is not None:
                out.append(check_router_reach(f.node, head, res))
        return out


def check_router_reach(router: str, head: ReplicaHead, res: TcpReach) -> Finding:
    """One router -> replica head path; a failure names both ends and the address the router uses."""
    url = f"http://{head.host}:{head.port}"
    where = f"{router} -> replica {head.group} on {head.node} ({head.host}:{head.port})"
    data = {"src": router, "dst": head.node, "group": head.group, "url": url, "state": res.state}
    if res.ok:
        seen = "something already listens" if res.state == "open" else "path works, nothing listens yet"
        return Finding("RouterReach", OK, f"{where}: {seen}", node=router, data=data)
    detail = f"{res.state}: {res.detail}" if res.detail else res.state
    if res.state == "unresolved":
        fix = (
            f"{head.host} does not resolve on {router}: put {head.node}'s IP in nodes[{head.node}].address "
            f"or make the name resolve there (/etc/hosts, mDNS)"
        )
    else:
        fix = (
            f"the router on {router} will send requests to {url}: make {head.host} reachable from "
            f"{router} (routing, firewall), or set nodes[{head.node}].address / engine.host to an "
            "address both reach"
        )
    return Finding("RouterReach", ERROR, f"{where}: not reachable ({detail})", fix, node=router, data=data)
