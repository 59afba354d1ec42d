"""RoceHca: the RoCE devices the engine will be told to use exist, are ACTIVE and serve the fabric."""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.findings import Finding
from sparkctl.preflight import probes as P
from sparkctl.preflight.base import ERROR, Check, Ctx, NodeFacts
from sparkctl.preflight.rdma import NoRdma, check_hcas


class RoceHca(Check):
    name = "RoceHca"
    summary = "named RoCE devices exist, are ACTIVE, bound to the fabric netdev, with a GID for the IP"
    order = 60
    multi_node = True

    def applies(self, ctx: Ctx) -> bool:
        return super().applies(ctx) and ctx.profile.fabric.transport == "roce"

    def probes(self, ctx: Ctx, node: str) -> dict[str, P.Probe]:
        return {"rdma": P.rdma_probe(ctx.sysfs_root)}

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        for node, f in facts.items():
            fab = ctx.profile.node(node).fabric
            if fab is None:
                continue
            exc = f.errors.get("rdma")
            if isinstance(exc, NoRdma):
                where = f"{ctx.sysfs_root}/class/infiniband"
                out.append(Finding(self.name, ERROR, f"no RDMA devices under {where}", exc.fix, node=node))
            elif not ctx.failed(out, "rdma", self.name, f) and f.get("rdma") is not None:
                out += check_hcas(node, f.get("rdma"), fab.netdevs, str(fab.ip), fab.hcas, ctx.sysfs_root)
        return out
