"""GatewayImage: the gateway's image is on every node where a gateway serves an API (each group's
rank 0 and the router: planning/gateway_container.py), before `up` would fail at its step."""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.facts.docker import ImageFacts, probe_image
from sparkctl.findings import Finding
from sparkctl.planning.gateway_container import plan_gateways
from sparkctl.preflight.base import ERROR, OK, Check, Ctx, NodeFacts, Task
from sparkctl.preflight.checks.docker import docker_tasks


class GatewayImage(Check):
    name = "GatewayImage"
    summary = "the gateway's image is on each node that serves an API (engine.gateway)"
    order = 96
    fast = True
    router_node = True

    def applies(self, ctx: Ctx) -> bool:
        return bool(plan_gateways(ctx.plan))

    def probes(self, ctx: Ctx, node: str) -> dict[str, Task]:
        refs = {g.image for g in plan_gateways(ctx.plan) if g.node == node}
        return {
            **docker_tasks(ctx),
            **{
                f"image:{ref}": Task(lambda conn, _, r=ref: probe_image(conn, r), after="docker")
                for ref in refs
            },
        }

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        for node, ref in sorted({(g.node, g.image) for g in plan_gateways(ctx.plan)}):
            f = facts.get(node)
            if (
                f is None
                or ctx.failed(out, "docker", self.name, f)
                or ctx.failed(out, f"image:{ref}", self.name, f)
            ):
                continue
            out.append(check_gateway_image(node, ref, f.get(f"image:{ref}")))
        return out


def check_gateway_image(node: str, ref: str, img: ImageFacts | None) -> Finding:
    """Present: OK with its ID. Absent: an error naming the node, with how to build it."""
    if img is not None:
        return Finding(
            "GatewayImage", OK, f"gateway image {ref} {img.id[:19]}", node=node, data={"id": img.id}
        )
    return Finding(
        "GatewayImage",
        ERROR,
        f"gateway image {ref} not on {node}",
        f"`docker build -t {ref} images/gateway` on {node} (or build once and `docker save | ssh {node} "
        "docker load`), or set engine.gateway: false (docs/security.md)",
        node=node,
    )
