"""Cabling: each point-to-point link of the layout reaches the cage the addresses say (neighbours).

A cable plugged port 0 to port 0 in a triangle leaves every address right and every link up, yet
two links reach the wrong cage: pings and NCCL fail between nodes whose every check passes. Each
cage's netdevs ping the IPv6 all-nodes group (link-local: no address plan needed) and the MAC
that answers names the far end's node and cage.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.facts.cabling import Fault, cable_faults
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, SKIP, Ctx, NodeFacts
from sparkctl.preflight.checks.fabric_layout import LayoutCheck, group_layouts


class Cabling(LayoutCheck):
    name = "Cabling"
    summary = (
        "every cable of the layout reaches the node and cage its subnet says (no crossed or missing link)"
    )
    order = 56

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        for lay, cages in group_layouts(ctx, facts, self.name, out):
            head = lay.nodes[0]
            faults = cable_faults(lay, cages)
            if not lay.links:
                out.append(Finding(self.name, OK, f"{lay.kind}: no point-to-point cable to trace", node=head))
            elif faults is None:
                msg = "no link-layer neighbours seen on any node (IPv6 off on the fabric?): cables not traced"
                out.append(Finding(self.name, SKIP, msg, node=head))
            elif not faults:
                out.append(Finding(self.name, OK, f"{len(lay.links)} cable(s) as addressed", node=head))
            out += [fault_finding(f) for f in faults or []]
        return out


def fault_finding(f: Fault) -> Finding:
    data = {
        "kind": f.kind,
        "subnet": f.subnet,
        "cage": [f.cage.node, f.cage.name],
        "want": [f.want.node, f.want.name],
    }
    if f.got is None:
        msg = f"missing link: {f.cage.label} has no carrier; it should reach {f.want.node} {f.want.name} ({f.subnet})"
        fix = f"plug the cable between {f.cage.node} {f.cage.name} and {f.want.node} {f.want.name}, or reseat it"
        return Finding("Cabling", ERROR, msg, fix, node=f.cage.node, data=data)
    data["got"] = [f.got.node, f.got.name]
    msg = (
        f"crossed cable: {f.cage.label} carries {f.subnet} for {f.want.node} {f.want.name} but is "
        f"cabled to {f.got.node} {f.got.name}"
    )
    fix = (
        f"move the cable so {f.cage.node} {f.cage.name} reaches {f.want.node} {f.want.name}, "
        f"or readdress both ends of each cable on one /24"
    )
    return Finding("Cabling", ERROR, msg, fix, node=f.cage.node, data=data)
