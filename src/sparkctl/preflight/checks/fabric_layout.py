"""FabricLayout: how each replica group's nodes are cabled (direct, ring, mesh, switch) and what NCCL
needs for it; the profile's HCAs, netdevs and rendezvous address judged against that layout.

The layout comes from facts/cabling.py (addresses per QSFP cage, both PCIe halves of each); the
physical cables (crossed, missing) are Cabling's (cables.py), the GID index is RoceGidIndex's.
"""

from __future__ import annotations

from collections.abc import Mapping
from ipaddress import IPv4Address, IPv4Network

from sparkctl.facts.cabling import Cage, Layout, build_layout, layout_env, neighbours_probe, node_cages
from sparkctl.facts.net import netdevs_probe
from sparkctl.facts.rdma import rdma_probe
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, WARN, Check, Ctx, NodeFacts, probe_failure
from sparkctl.preflight.pairs import group_nodes


def layout_probes(ctx: Ctx, node: str) -> dict:
    fab = ctx.profile.node(node).fabric
    extra = tuple(fab.netdevs) if fab else ()
    out = {"netdevs": netdevs_probe(), "neighbours": neighbours_probe(extra)}
    if ctx.profile.fabric.transport == "roce":
        out["rdma"] = rdma_probe(ctx.sysfs_root)
    return out


def group_layouts(
    ctx: Ctx, facts: Mapping[str, NodeFacts], check: str, out: list[Finding]
) -> list[tuple[Layout, dict[str, dict[str, Cage]]]]:
    """Each multi-node group whose nodes' netdevs were all gathered: its layout and cages."""
    found = []
    for nodes in group_nodes(ctx.plan):
        if len(nodes) < 2 or not all(n in facts for n in nodes):
            continue
        cages: dict[str, dict[str, Cage]] = {}
        for n in nodes:
            f = facts[n]
            if "netdevs" in f.errors:
                if check == "FabricLayout":
                    out.append(probe_failure(check, n, f.errors["netdevs"]))
                break
            fab = ctx.profile.node(n).fabric
            rdma = f.get("rdma") if isinstance(f.get("rdma"), dict) else None
            heard = f.get("neighbours") if isinstance(f.get("neighbours"), dict) else None
            cages[n] = node_cages(n, f.get("netdevs") or {}, rdma, heard, tuple(fab.netdevs) if fab else ())
        else:
            found.append((build_layout(nodes, cages), cages))
    return found


class LayoutCheck(Check):
    """A base (names no check): multi-node checks judged from each group's cabling layout."""

    multi_node = True

    def probes(self, ctx: Ctx, node: str) -> dict:
        return layout_probes(ctx, node)


class FabricLayout(LayoutCheck):
    name = "FabricLayout"
    summary = (
        "each group's cabling (direct, ring, mesh, switch) and the HCAs, netdevs and rendezvous it needs"
    )
    order = 55

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        for lay, _ in group_layouts(ctx, facts, self.name, out):
            out += judge_layout(ctx, lay)
        return out


def judge_layout(ctx: Ctx, lay: Layout) -> list[Finding]:
    """Findings for one group's layout against the profile."""
    head = lay.nodes[0]
    data = lay.to_json() | {"env": {n: layout_env(lay, n) for n in lay.nodes}}
    if lay.kind in ("none", "partial"):
        pairs = ", ".join(f"{a}-{b}" for a, b in lay.missing) or "?"
        why = "no subnet is shared by two nodes" if lay.kind == "none" else f"no link between {pairs}"
        fix = (
            "cable and address every pair that must talk (one /24 per point-to-point cable, or one "
            "/24 for all on a switch); `ip -br addr` on each node shows which cage carries which subnet"
        )
        return [Finding("FabricLayout", ERROR, f"{lay.describe()}: {why}", fix, node=head, data=data)]
    out = [Finding("FabricLayout", OK, lay.describe(), node=head, data=data)]
    declared = ctx.profile.fabric.layout
    if declared != "auto" and not _same_kind(declared, lay):
        fix = f"set fabric.layout: {lay.kind} (or recable as {declared})"
        msg = f"fabric.layout is {declared} but the nodes are cabled as {lay.kind}"
        out.append(Finding("FabricLayout", ERROR, msg, fix, node=head, data=data))
    if lay.switchless_ring and declared != "ring":
        fix = "set fabric.layout: ring (the plan then sets NCCL_ALGO=Ring on every rank)"
        msg = f"{len(lay.nodes)} nodes in a switchless ring without NCCL_ALGO=Ring: NCCL's tree needs links the ring lacks"
        out.append(Finding("FabricLayout", WARN, msg, fix, node=head, data=data))
    for cage, subnet in lay.lonely:
        msg = f"{cage.label} carries {subnet}, which no other node of the group has"
        fix = "address the far end of that cable on the same /24, or take the address off"
        out.append(Finding("FabricLayout", WARN, msg, fix, node=cage.node))
    for n in lay.nodes:
        out += _node_findings(ctx, lay, n)
    return out


def _same_kind(declared: str, lay: Layout) -> bool:
    return declared == lay.kind or (
        declared in ("ring", "mesh") and lay.kind in ("ring", "mesh") and len(lay.nodes) == 3
    )


def _node_findings(ctx: Ctx, lay: Layout, node: str) -> list[Finding]:
    fab = ctx.profile.node(node).fabric
    if fab is None:
        return []
    out = []
    cages = lay.cages(node)
    unnamed = [c for c in cages if not set(c.netdevs) & set(fab.netdevs)]
    if unnamed:
        names = [c.netdevs[0] for c in cages]
        msg = (
            f"{', '.join(c.label for c in unnamed)} carries the group's traffic but is not in fabric.netdevs"
        )
        fix = f"set nodes[{node}].fabric.netdevs: [{', '.join(names)}]"
        out.append(Finding("FabricLayout", WARN, msg, fix, node=node))
    if isinstance(fab.hcas, list) and ctx.profile.fabric.transport == "roce":
        for c in cages:
            left = [h for h in c.hcas if h not in fab.hcas]
            if left and len(left) < len(c.hcas):
                msg = (
                    f"NCCL_IB_HCA names {', '.join(h for h in c.hcas if h in fab.hcas)} but not {', '.join(left)}: "
                    f"one QSFP cage ({c.label}) is two PCIe x4 endpoints, one alone carries about half"
                )
                out.append(
                    Finding(
                        "FabricLayout",
                        WARN,
                        msg,
                        f"set nodes[{node}].fabric.hcas: [{', '.join(lay.hcas(node))}] (or 'auto')",
                        node=node,
                    )
                )
            elif left:
                msg = f"no HCA of {c.label} is in NCCL_IB_HCA: NCCL cannot use that link over RDMA"
                out.append(
                    Finding(
                        "FabricLayout",
                        ERROR,
                        msg,
                        f"set nodes[{node}].fabric.hcas: [{', '.join(lay.hcas(node))}] (or 'auto')",
                        node=node,
                    )
                )
    head_fab = ctx.profile.node(lay.nodes[0]).fabric
    if head_fab is not None and node != lay.nodes[0]:
        ip = IPv4Address(str(head_fab.ip))
        mine = [s for c in cages for s in c.subnets if ip in IPv4Network(s)]
        if not mine:
            msg = (
                f"rank 0's fabric IP {ip} ({lay.nodes[0]}) is on no subnet {node} is cabled to: "
                "the rendezvous and the advertised host IP cannot reach it"
            )
            fix = (
                "in a switchless ring no cable reaches every node: give the nodes one shared network "
                "for the rendezvous (fabric.ip on an address every node reaches), or route between the links"
            )
            out.append(Finding("FabricLayout", ERROR, msg, fix, node=node))
    return out
