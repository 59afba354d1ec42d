"""Pick the network NCCL uses: a subnet every node has an address in. Pure: facts in, choice out.

Preference: RoCE-backed on every node, then not the management network (the one SSH reached the
peers over: NCCL on the LAN is the classic slow or hung TP), then MTU >= 9000, then the slowest
link's speed. The management subnet is only chosen automatically when it is RoCE-backed; `--fabric
NETDEV|CIDR` picks any shared subnet explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Interface, IPv4Network, ip_address, ip_network

from sparkctl.errors import UsageError
from sparkctl.facts.net import Netdev
from sparkctl.facts.rdma import RdmaDevice, hca_candidates

# Container, VPN and overlay links: an address there says nothing about the node-to-node fabric
# (docker0 even has the same address on every node).
VIRTUAL_PREFIXES = (
    "lo",
    "docker",
    "br-",
    "veth",
    "virbr",
    "cni",
    "flannel",
    "cali",
    "tun",
    "tap",
    "wg",
    "tailscale",
    "zt",
    "vxlan",
    "kube",
    "podman",
    "lxc",
    "lxd",
)
JUMBO = 9000


@dataclass(frozen=True)
class NodeNet:
    """The facts about one node that the choice needs (a slice of NodeDiscovery)."""

    name: str
    netdevs: dict[str, Netdev]
    rdma: dict[str, RdmaDevice]
    ssh_ip: str | None = None


@dataclass(frozen=True)
class FabricEnd:
    node: str
    netdev: str
    ip: str
    prefixlen: int
    mtu: int
    speed_mbps: int | None
    hcas: tuple[str, ...]


@dataclass(frozen=True)
class FabricOption:
    subnet: IPv4Network
    ends: tuple[FabricEnd, ...]  # one per node, in node order
    management: bool  # SSH reached a peer over this subnet

    @property
    def roce(self) -> bool:
        return all(e.hcas for e in self.ends)

    @property
    def mtu(self) -> int:
        return min(e.mtu for e in self.ends)

    @property
    def speed_mbps(self) -> int:
        return min(e.speed_mbps or 0 for e in self.ends)

    def score(self) -> tuple:
        return (self.roce, not self.management, self.mtu >= JUMBO, self.speed_mbps, self.mtu)

    def end(self, node: str) -> FabricEnd:
        return next(e for e in self.ends if e.node == node)

    def describe(self) -> str:
        speed = f", {self.speed_mbps // 1000} Gb/s" if self.speed_mbps else ""
        kind = "RoCE" if self.roce else "TCP"
        mgmt = ", carries SSH" if self.management else ""
        return f"{self.subnet} ({kind}, MTU {self.mtu}{speed}{mgmt})"


def is_virtual(netdev: str) -> bool:
    return netdev.startswith(VIRTUAL_PREFIXES)


def _ends(node: NodeNet) -> dict[IPv4Network, FabricEnd]:
    """The node's best end per subnet (RoCE-backed, then MTU, then speed)."""
    best: dict[IPv4Network, FabricEnd] = {}
    for dev in node.netdevs.values():
        if is_virtual(dev.name) or not dev.up:
            continue
        for addr in dev.ipv4:
            iface = IPv4Interface(addr)
            if iface.ip.is_loopback or iface.ip.is_link_local or iface.network.prefixlen == 32:
                continue
            found = hca_candidates(node.rdma, [dev.name], str(iface.ip)) if node.rdma else []
            # The device bound to the netdev first, then its other PCIe half (as NCCL_IB_HCA lists them).
            hcas = tuple(sorted(found, key=lambda h: dev.name not in node.rdma[h].bound_netdevs()))
            end = FabricEnd(
                node.name, dev.name, str(iface.ip), iface.network.prefixlen, dev.mtu, dev.speed_mbps, hcas
            )
            old = best.get(iface.network)
            key = (bool(hcas), dev.mtu, dev.speed_mbps or 0)
            if old is None or key > (bool(old.hcas), old.mtu, old.speed_mbps or 0):
                best[iface.network] = end
    return best


def _management(nodes: list[NodeNet]) -> set[IPv4Network]:
    """Subnets holding an address SSH connected to."""
    out = set()
    for node in nodes:
        if node.ssh_ip is None:
            continue
        ip = ip_address(node.ssh_ip)
        for dev in node.netdevs.values():
            for addr in dev.ipv4:
                iface = IPv4Interface(addr)
                if iface.ip == ip:
                    out.add(iface.network)
    return out


def fabric_options(nodes: list[NodeNet]) -> list[FabricOption]:
    """Every subnet in which each node has its own (distinct) address, best first."""
    per_node = [_ends(n) for n in nodes]
    shared = set.intersection(*(set(e) for e in per_node)) if per_node else set()
    mgmt = _management(nodes)
    out = []
    for net in shared:
        ends = tuple(e[net] for e in per_node)
        if len({e.ip for e in ends}) == len(ends):
            out.append(FabricOption(net, ends, net in mgmt))
    return sorted(out, key=lambda o: (o.score(), str(o.subnet)), reverse=True)


def _inventory(nodes: list[NodeNet], mgmt: set[IPv4Network]) -> str:
    parts = []
    for node in nodes:
        addrs = []
        for dev in sorted(node.netdevs.values(), key=lambda d: d.name):
            if is_virtual(dev.name):
                continue
            for addr in dev.ipv4:
                tag = " (SSH)" if IPv4Interface(addr).network in mgmt else ""
                state = "" if dev.up else f" [{dev.operstate}]"
                addrs.append(f"{dev.name} {addr}{state}{tag}")
        parts.append(f"{node.name} has {', '.join(addrs) or 'no IPv4 address'}")
    return "; ".join(parts)


def pick_fabric(nodes: list[NodeNet], want: str | None = None) -> FabricOption:
    """The fabric for multi-node modes; UsageError naming each node's addresses when there is none."""
    options = fabric_options(nodes)
    mgmt = _management(nodes)
    names = ", ".join(n.name for n in nodes)
    if want:
        try:
            net = ip_network(want, strict=False)
        except ValueError:
            net = None
        hits = [o for o in options if o.subnet == net or all(e.netdev == want for e in o.ends)]
        if not hits:
            raise UsageError(
                f"--fabric {want}: not a subnet every node ({names}) has an address in; "
                + _inventory(nodes, mgmt),
                fix="pass a netdev name or CIDR from the list above, shared by every node",
            )
        return hits[0]
    usable = [o for o in options if o.roce or not o.management]
    if usable:
        return usable[0]
    skipped = [o for o in options if o not in usable]
    parts = [f"no fabric subnet shared by {names}"]
    missing = _missing_from_first(nodes, mgmt)
    if missing:
        parts.append(missing)
    if skipped:
        parts.append(
            "only the management network "
            + ", ".join(str(o.subnet) for o in skipped)
            + " (carries SSH, no RoCE device) is shared"
        )
    raise UsageError(
        "; ".join(parts) + ". Addresses: " + _inventory(nodes, mgmt),
        fix="give every node's fabric netdev an address in one subnet (`sudo ip addr add IP/PREFIX dev "
        "NETDEV` on the node, persisted in netplan), or pick a shared network with --fabric NETDEV|CIDR",
    )


def _missing_from_first(nodes: list[NodeNet], mgmt: set[IPv4Network]) -> str:
    """'spark2 has no address in 10.0.0.0/24 (spark1's enp1s0f1np1)' for rank 0's likeliest fabric."""
    ends = [e for net, e in _ends(nodes[0]).items() if net not in mgmt]
    if not ends:
        return f"{nodes[0].name} has no candidate fabric address outside the management network"
    best = max(ends, key=lambda e: (bool(e.hcas), e.mtu, e.speed_mbps or 0))
    net = IPv4Interface(f"{best.ip}/{best.prefixlen}").network
    lacking = [n.name for n in nodes[1:] if net not in _ends(n)]
    if not lacking:
        return ""
    return f"{', '.join(lacking)} {'has' if len(lacking) == 1 else 'have'} no address in {net} ({nodes[0].name}'s {best.netdev})"
