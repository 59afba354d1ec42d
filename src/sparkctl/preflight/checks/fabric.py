"""FabricNetdev and Mtu: the fabric netdevs as the profile names them (PingDf: pingdf.py)."""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.facts.net import Netdev, netdevs_probe
from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, SKIP, WARN, Check, Ctx, NodeFacts, probe_failure
from sparkctl.profile.schema import Node


class _Netdevs(Check):
    """Judged from the node's netdev facts (`ip -j addr` + sysfs speed)."""

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe]:
        return {"netdevs": netdevs_probe()}

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        for node, f in facts.items():
            n = ctx.profile.node(node)
            if n.fabric is None or self.netdevs_failed(ctx, out, f):
                continue
            if f.get("netdevs") is not None:
                found = check_fabric_netdevs(n, f.get("netdevs"), ctx.profile.fabric.mtu)
                out += [x for x in found if x.check == self.name]
        return out

    def netdevs_failed(self, ctx: Ctx, out: list[Finding], f: NodeFacts) -> bool:
        # One probe failure, reported as FabricNetdev's (Mtu says it only when FabricNetdev is off).
        if "netdevs" not in f.errors:
            return False
        if self.name == "FabricNetdev" or not ctx.applies("FabricNetdev"):
            out.append(probe_failure("FabricNetdev", f.node, f.errors["netdevs"]))
        return True


class FabricNetdev(_Netdevs):
    name = "FabricNetdev"
    summary = "each fabric netdev exists, is up and holds the node's fabric IP"
    order = 30
    multi_node = True


class Mtu(_Netdevs):
    name = "Mtu"
    summary = "each fabric netdev has the profile's MTU"
    order = 40
    fast = True
    multi_node = True


# ----------------------------------------------------------------------------- fabric
def check_fabric_netdevs(node: Node, netdevs: Mapping[str, Netdev], mtu: int) -> list[Finding]:
    """FabricNetdev + Mtu for one node."""
    assert node.fabric is not None
    out: list[Finding] = []
    ip = str(node.fabric.ip)
    for name in node.fabric.netdevs:
        dev = netdevs.get(name)
        if dev is None:
            present = ", ".join(n for n in sorted(netdevs) if n != "lo")
            out.append(
                Finding(
                    "FabricNetdev",
                    ERROR,
                    f"netdev {name} does not exist (present: {present})",
                    f"fix nodes[{node.name}].fabric.netdevs (`ip -br link` on {node.name})",
                    node=node.name,
                )
            )
            out.append(Finding("Mtu", SKIP, f"{name}: netdev missing", node=node.name))
            continue
        if not dev.up:
            out.append(
                Finding(
                    "FabricNetdev",
                    ERROR,
                    f"{name} is {dev.operstate} (flags {','.join(dev.flags)})",
                    f"`sudo ip link set {name} up` on {node.name}; check the cable",
                    node=node.name,
                    data=dev.to_json(),
                )
            )
        else:
            speed = f", {dev.speed_mbps // 1000} Gb/s" if dev.speed_mbps else ""
            out.append(
                Finding(
                    "FabricNetdev",
                    OK,
                    f"{name} up{speed} {','.join(dev.ipv4) or 'no IPv4'}",
                    node=node.name,
                    data=dev.to_json(),
                )
            )
        if dev.mtu != mtu:
            sev = ERROR if dev.mtu < mtu else WARN
            out.append(
                Finding(
                    "Mtu",
                    sev,
                    f"{node.name} {name} has MTU {dev.mtu}, profile fabric.mtu is {mtu}",
                    f"`sudo ip link set dev {name} mtu {mtu}` on {node.name} (and persist it in "
                    "netplan/NetworkManager); every fabric netdev on every node must match",
                    node=node.name,
                    data={"netdev": name, "mtu": dev.mtu, "want": mtu},
                )
            )
        else:
            out.append(Finding("Mtu", OK, f"{name} MTU {dev.mtu}", node=node.name))
    holders = [d.name for d in netdevs.values() if ip in d.ips]
    if not any(h in node.fabric.netdevs for h in holders):
        where = f"it is on {', '.join(holders)}" if holders else "no netdev has it"
        out.append(
            Finding(
                "FabricNetdev",
                ERROR,
                f"fabric IP {ip} is not on {','.join(node.fabric.netdevs)} ({where})",
                f"assign it: `sudo ip addr add {ip}/24 dev {node.fabric.netdevs[0]}` on {node.name} "
                "(persist in netplan), or fix nodes[].fabric.ip",
                node=node.name,
            )
        )
    return out
