"""PortFree (every port the plan binds, on its node) and StrayContainers (nothing of ours left behind)."""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.facts.docker import ContainerFacts
from sparkctl.facts.net import ports_probe
from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding
from sparkctl.planning.build import Plan
from sparkctl.preflight.base import ERROR, OK, WARN, Check, Ctx, NodeFacts, Task
from sparkctl.preflight.checks.docker import docker_tasks
from sparkctl.profile.schema import Profile


class PortFree(Check):
    name = "PortFree"
    summary = (
        "every port the plan binds is free on its node (each replica head's HTTP, its engine's behind the "
        "gateway, dist-init and launch gate, the router's)"
    )
    order = 140
    fast = True
    router_node = True

    def skips_node(self, ctx: Ctx, node: str) -> bool:
        return node in planned_ports(ctx.plan)

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe | Task]:
        if node not in planned_ports(ctx.plan):
            return {}
        # The containers tell whether this plan's own running container holds the port.
        return {"ports": ports_probe(), **docker_tasks(ctx, containers=True)}

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        for node, wanted in planned_ports(ctx.plan).items():
            f = facts.get(node)
            if f is None or ctx.failed(out, "ports", self.name, f) or f.get("ports") is None:
                continue
            out += check_ports(node, f.get("ports"), wanted, f.get("containers"), ctx.plan)
        return out


def planned_ports(plan: Plan) -> dict[str, dict[int, str]]:
    """node -> {port: what binds it}: each replica head's HTTP port (its gateway's), the engine's
    own port behind that gateway, (groups over several nodes) its dist-init port and, in a gated
    start, its launch gate; and the router's port on its node (and its own behind its gateway).
    One replica: plain "HTTP"/"dist-init"."""
    out: dict[str, dict[int, str]] = {}
    many = plan.replicas > 1
    for g in plan.groups:
        who = f"replica {g.index} " if many else ""
        ports = out.setdefault(g.head_node, {})
        ports[g.endpoint.port] = f"{who}HTTP"
        if g.dist_init_addr:
            ports[int(g.dist_init_addr.rsplit(":", 1)[1])] = f"{who}dist-init"
        gate = plan.ranks[g.ranks[0]].gateway if g.ranks else None
        if gate is not None:  # the engine's own port behind the gateway
            ports[gate.upstream_port] = f"{who}engine (behind the gateway)"
        if g.gate is not None:  # a gated start's control server (memory.gated_start)
            ports[g.gate.port] = f"{who}launch gate"
    if plan.router is not None:
        ports = out.setdefault(plan.router.node, {})
        ports[plan.endpoint.port] = "router HTTP"
        if plan.router.gateway is not None:
            ports[plan.router.gateway.upstream_port] = "router (behind the gateway)"
    return out


class StrayContainers(Check):
    name = "StrayContainers"
    summary = "no container with sparkctl labels or the planned names that is not the plan's"
    order = 150
    fast = True
    router_node = True  # the router's own container is planned there

    def probes(self, ctx: Ctx, node: str) -> dict[str, Task]:
        return docker_tasks(ctx, containers=True)

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        for node, f in facts.items():
            if ctx.failed(out, "docker", self.name, f) or ctx.failed(out, "containers", self.name, f):
                continue
            if f.get("containers") is not None:
                out += check_stray(node, f.get("containers"), ctx.plan, ctx.profile)
        return out


def _plan_containers(plan: Plan, node: str) -> dict[str, str]:
    """This plan's containers on `node` (ranks, router, gateways) -> the config hash each one carries."""
    from sparkctl.planning.gateway_container import gateway_container

    specs = [s for s in [*plan.ranks, *([plan.router] if plan.router else [])] if s.node == node]
    specs += [gateway_container(s) for s in specs if s.gateway is not None]
    return {s.container_name: s.labels.get("sparkctl.config_hash", plan.config_hash) for s in specs}


def check_ports(
    node: str, ports: set[int], wanted: Mapping[int, str], containers: list[ContainerFacts] | None, plan: Plan
) -> list[Finding]:
    """PortFree on one node: a port held by this very plan's running container is fine (up is a no-op)."""
    ours = _plan_containers(plan, node)
    ours_running = any(
        c.name in ours and c.state == "running" and c.labels.get("sparkctl.config_hash") == ours[c.name]
        for c in containers or []
    )
    out = []
    for port, what in sorted(wanted.items()):
        if port not in ports:
            out.append(Finding("PortFree", OK, f"{what} port {port} free", node=node))
        elif ours_running:
            out.append(
                Finding(
                    "PortFree", OK, f"{what} port {port} held by this plan's running container", node=node
                )
            )
        else:
            out.append(
                Finding(
                    "PortFree",
                    ERROR,
                    f"{what} port {port} already in use on {node}",
                    f"find the owner with `sudo ss -ltnp 'sport = :{port}'` on {node} and stop it, "
                    "or change the port in the profile",
                    node=node,
                    data={"port": port},
                )
            )
    return out


def check_stray(node: str, containers: list[ContainerFacts], plan: Plan, profile: Profile) -> list[Finding]:
    """StrayContainers: sparkctl-labelled or planned-name containers that are not this plan's."""
    planned = _plan_containers(plan, node)
    other_modes = {c.name for c in plan.stop_first}
    out = []
    for c in containers:
        labels = c.labels
        cluster = labels.get("sparkctl.cluster")
        state = f"{c.name} ({c.state}, {c.image})"
        if c.name not in planned and cluster == profile.cluster and labels.get("sparkctl.role") == "router":
            out.append(_unused_router(node, c, state, plan.mode))
        elif c.name in planned:
            if cluster != profile.cluster:
                out.append(
                    Finding(
                        "StrayContainers",
                        ERROR,
                        f"{state} has a planned name but is not sparkctl's",
                        f"rename or remove it: `docker rm -f {c.name}` on {node}",
                        node=node,
                    )
                )
            elif labels.get("sparkctl.config_hash") == planned[c.name]:
                out.append(Finding("StrayContainers", OK, f"{state} is this plan (up is a no-op)", node=node))
            else:
                out.append(
                    Finding(
                        "StrayContainers",
                        WARN,
                        f"{state} runs an older config "
                        f"({labels.get('sparkctl.config_hash', '?')} != {planned[c.name]})",
                        "`sparkctl up` replaces it",
                        node=node,
                    )
                )
        elif cluster == profile.cluster:
            if c.name in other_modes or labels.get("sparkctl.mode") in profile.modes:
                sev = WARN if c.state == "running" else OK
                out.append(
                    Finding(
                        "StrayContainers",
                        sev,
                        f"{state} of mode {labels.get('sparkctl.mode')}",
                        "`sparkctl up` stops it first" if sev is WARN else None,
                        node=node,
                    )
                )
            else:
                out.append(
                    Finding(
                        "StrayContainers",
                        ERROR,
                        f"{state} is labelled for this cluster but no mode plans it",
                        f"`docker rm -f {c.name}` on {node}",
                        node=node,
                    )
                )
        elif cluster is not None and c.state == "running":
            out.append(
                Finding(
                    "StrayContainers",
                    WARN,
                    f"{state} belongs to sparkctl cluster {cluster}",
                    "it may hold GPUs and ports: `sparkctl down` with that cluster's profile",
                    node=node,
                )
            )
    if not out:
        out.append(Finding("StrayContainers", OK, "no stray container", node=node))
    return out


def _unused_router(node: str, c: ContainerFacts, state: str, mode: str) -> Finding:
    """This cluster's router where this mode runs none (another mode's, or on another node)."""
    sev = WARN if c.state == "running" else OK
    fix = f"`docker rm -f {c.name}` on {node} if no mode uses it" if sev is WARN else None
    return Finding(
        "StrayContainers", sev, f"{state} is a router mode {mode} does not use here", fix, node=node
    )
