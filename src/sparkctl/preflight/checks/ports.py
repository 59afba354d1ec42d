"""PortFree (rank 0's HTTP and dist-init ports) and StrayContainers (nothing of ours left behind)."""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.facts.docker import ContainerFacts
from sparkctl.facts.net import ports_probe
from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding
from sparkctl.plan import Plan
from sparkctl.preflight.base import ERROR, OK, WARN, Check, Ctx, NodeFacts, Task
from sparkctl.preflight.checks.docker import docker_tasks
from sparkctl.profile.schema import Profile


class PortFree(Check):
    name = "PortFree"
    summary = "the HTTP port and the dist-init port are free on rank 0"
    order = 140
    fast = True

    def skips_node(self, ctx: Ctx, node: str) -> bool:
        return node == ctx.rank0

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe | Task]:
        if node != ctx.rank0:
            return {}
        # The containers tell whether this plan's own running container holds the port.
        return {"ports": ports_probe(), **docker_tasks(ctx, containers=True)}

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        f = facts.get(ctx.rank0)
        if f is None or ctx.failed(out, "ports", self.name, f) or f.get("ports") is None:
            return out
        wanted = {ctx.profile.engine.port: "HTTP"}
        if ctx.multi:
            wanted[ctx.profile.fabric.dist_init_port] = "dist-init"
        return check_ports(f.node, f.get("ports"), wanted, f.get("containers"), ctx.plan)


class StrayContainers(Check):
    name = "StrayContainers"
    summary = "no container with sparkctl labels or the planned names that is not the plan's"
    order = 150
    fast = True

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


def _plan_container(plan: Plan, node: str) -> tuple[str, str] | None:
    for spec in plan.ranks:
        if spec.node == node:
            return spec.container_name, plan.config_hash
    return None


def check_ports(
    node: str, ports: set[int], wanted: Mapping[int, str], containers: list[ContainerFacts] | None, plan: Plan
) -> list[Finding]:
    """PortFree on rank 0: a port held by this very plan's running container is fine (up is a no-op)."""
    ours = _plan_container(plan, node)
    ours_running = bool(ours) and any(
        c.name == ours[0]
        and c.state == "running"
        and c.labels.get("sparkctl.config_hash") == plan.config_hash
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
    planned = {s.container_name: s for s in plan.ranks if s.node == node}
    other_modes = {c.name for c in plan.stop_first}
    out = []
    for c in containers:
        labels = c.labels
        cluster = labels.get("sparkctl.cluster")
        state = f"{c.name} ({c.state}, {c.image})"
        if c.name in planned:
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
            elif labels.get("sparkctl.config_hash") == plan.config_hash:
                out.append(Finding("StrayContainers", OK, f"{state} is this plan (up is a no-op)", node=node))
            else:
                out.append(
                    Finding(
                        "StrayContainers",
                        WARN,
                        f"{state} runs an older config "
                        f"({labels.get('sparkctl.config_hash', '?')} != {plan.config_hash})",
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
