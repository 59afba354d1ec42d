"""LinkSpeed: every fabric netdev's negotiated rate (/sys/class/net/<dev>/speed) vs the fabric's.

A DGX Spark's ConnectX-7 negotiates 200 Gb/s per cable; a link that came up at 100 or 25 Gb/s
(bad cable, wrong port, auto-negotiation) still works, just slower, so this is a warning. The
sysfs rate is what the link negotiated, not what it carries: `sparkctl fabric-test` measures.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.facts.net import Netdev, netdevs_probe
from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding
from sparkctl.preflight.base import OK, SKIP, WARN, Check, Ctx, NodeFacts, probe_failure


class LinkSpeed(Check):
    name = "LinkSpeed"
    summary = "each fabric netdev negotiated at least fabric.min_link_gbps (sysfs speed)"
    order = 45
    multi_node = True

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe]:
        return {"netdevs": netdevs_probe()}  # NETDEV_SCRIPT reads every /sys/class/net/*/speed

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        want = ctx.profile.fabric.min_link_gbps
        for node, f in facts.items():
            fab = ctx.profile.node(node).fabric
            if fab is None:
                continue
            if "netdevs" in f.errors:
                out.append(probe_failure(self.name, node, f.errors["netdevs"]))
            elif f.get("netdevs") is not None:
                out += check_link_speed(node, fab.netdevs, f.get("netdevs"), want)
        return out


def check_link_speed(
    node: str, names: list[str], netdevs: Mapping[str, Netdev], want_gbps: float
) -> list[Finding]:
    out = []
    for name in names:
        dev = netdevs.get(name)
        mbps = dev.speed_mbps if dev is not None else None
        if mbps is None:
            why = "netdev missing" if dev is None else "no speed reported (link down or virtual)"
            out.append(Finding("LinkSpeed", SKIP, f"{name}: {why}", node=node))
            continue
        data = {"netdev": name, "speed_mbps": mbps, "want_gbps": want_gbps}
        have = f"{name} negotiated {mbps / 1000:g} Gb/s"
        if mbps < want_gbps * 1000:
            fix = (
                f"reseat or replace the cable and check `ethtool {name}` on {node} (speed, "
                "auto-negotiation); if this fabric is slower by design, lower fabric.min_link_gbps"
            )
            out.append(
                Finding(
                    "LinkSpeed",
                    WARN,
                    f"{have}, below fabric.min_link_gbps {want_gbps:g}",
                    fix,
                    node=node,
                    data=data,
                )
            )
        else:
            out.append(Finding("LinkSpeed", OK, f"{have} (>= {want_gbps:g})", node=node, data=data))
    return out
