"""The fabric's layout across nodes: which cage of which node is cabled to which, and what NCCL needs.

Pure: built from each node's facts (`ip -j addr` netdevs, RoCE sysfs devices, and the link-layer
neighbours each fabric netdev sees), no I/O. A DGX Spark (GB10) has two QSFP cages; each cage is
two PCIe x4 endpoints, so one cable shows up as two netdevs and two RoCE devices, e.g. cage 1 =
`enp1s0f1np1`/`rocep1s0f1` + `enP2p1s0f1np1`/`roceP2p1s0f1` (the second half in PCI domain 2).
NCCL needs both halves in `NCCL_IB_HCA` (one alone caps near 98 Gb/s).

Logical links come from addresses: a /24 (any prefix) that exactly two nodes carry on one cage each
is a point-to-point cable; one that three or more nodes carry is a switch. Physical links come from
neighbours: the MAC a cage's netdev hears belongs to one cage of one peer. A crossed cable is a
logical link whose cage physically reaches another cage (or node) than the one with the subnet.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Interface

from sparkctl.facts.net import Netdev
from sparkctl.facts.probe import ParseError, Probe, checked, sh_argv
from sparkctl.facts.rdma import RdmaDevice, roce_v2_gid_index

# enp1s0f1np1 / enP2p1s0f1np1: PCI domain (absent = 0), bus, slot, function, port.
_CX_RE = re.compile(r"^en(?:P(\d+))?p(\d+)s(\d+)f(\d+)np(\d+)$")


def _halves_first(name: str) -> tuple[bool, str]:
    """Sort key: the first PCIe half (PCI domain 0: rocep1s0f1, enp1s0f1np1) before the second."""
    return (bool(re.match(r"^(?:roce|en)P\d", name)), name)


def cage_of(netdev: str) -> str | None:
    """The QSFP cage a ConnectX netdev belongs to ("port 1"), the same for both PCIe halves."""
    m = _CX_RE.match(netdev)
    return f"port {m.group(5)}" if m else None


@dataclass(frozen=True)
class Cage:
    """One QSFP cage of one node: its netdevs (both PCIe halves), HCAs, addresses and neighbours."""

    node: str
    name: str  # "port 1"
    netdevs: tuple[str, ...]
    hcas: tuple[str, ...]
    subnets: tuple[str, ...]  # "10.0.1.0/24"
    ips: tuple[str, ...]
    up: bool
    macs: tuple[str, ...]
    heard: tuple[str, ...] = ()  # MACs its netdevs see as neighbours (the far end of the cable)
    gid_index: Mapping[str, int | None] = field(default_factory=dict)  # hca -> RoCE v2 IPv4 GID index

    @property
    def label(self) -> str:
        return f"{self.node} {self.name} ({'+'.join(self.netdevs)})"


def node_cages(
    node: str,
    netdevs: Mapping[str, Netdev],
    rdma: Mapping[str, RdmaDevice] | None,
    heard: Mapping[str, list[str]] | None = None,
    extra: tuple[str, ...] = (),
) -> dict[str, Cage]:
    """Every ConnectX cage of a node (plus `extra` netdevs, e.g. a profile's non-CX fabric netdev)."""
    names = sorted({n for n in netdevs if cage_of(n)} | {n for n in extra if n in netdevs}, key=_halves_first)
    by_cage: dict[str, list[str]] = {}
    for n in names:
        by_cage.setdefault(cage_of(n) or n, []).append(n)
    out: dict[str, Cage] = {}
    for cage, devs in by_cage.items():
        nds = [netdevs[d] for d in devs]
        hcas = sorted(
            (h for h, d in (rdma or {}).items() if d.bound_netdevs() & set(devs)), key=_halves_first
        )
        ips = tuple(a for nd in nds for a in nd.ipv4)
        out[cage] = Cage(
            node=node,
            name=cage,
            netdevs=tuple(devs),
            hcas=tuple(hcas),
            subnets=tuple(sorted({str(IPv4Interface(a).network) for a in ips})),
            ips=tuple(a.split("/")[0] for a in ips),
            up=any(nd.up for nd in nds),
            macs=tuple(nd.mac for nd in nds if nd.mac),
            heard=tuple(sorted({m for d in devs for m in (heard or {}).get(d, [])})),
            gid_index={h: _gid_index(rdma[h], nds) for h in hcas} if rdma else {},
        )
    return out


def _gid_index(dev: RdmaDevice, nds: list[Netdev]) -> int | None:
    """The RoCE v2 GID index of the first IPv4 of a netdev the device is bound to."""
    ips = [a.split("/")[0] for nd in nds if nd.name in dev.bound_netdevs() for a in nd.ipv4]
    return next((i for ip in ips if (i := roce_v2_gid_index(dev, ip)) is not None), None)


@dataclass(frozen=True)
class Link:
    a: Cage
    b: Cage
    subnet: str

    def describe(self) -> str:
        return f"{self.a.node} {self.a.name} <-> {self.b.node} {self.b.name} ({self.subnet})"


@dataclass
class Layout:
    """How a group's nodes are cabled: kind, the point-to-point links, shared (switch) subnets."""

    kind: str  # single | direct | ring | mesh | switch | partial | none
    nodes: list[str]
    links: list[Link] = field(default_factory=list)
    switch: dict[str, list[Cage]] = field(default_factory=dict)  # subnet -> cages on it
    missing: list[tuple[str, str]] = field(default_factory=list)  # node pairs with no link (partial)
    lonely: list[tuple[Cage, str]] = field(default_factory=list)  # a subnet no other node carries

    def cages(self, node: str) -> list[Cage]:
        mine = [c for link in self.links for c in (link.a, link.b) if c.node == node]
        mine += [c for cages in self.switch.values() for c in cages if c.node == node]
        return list({c.name: c for c in mine}.values())

    def hcas(self, node: str) -> list[str]:
        """Every HCA of every cage that carries this node's traffic: both PCIe halves of each."""
        return [h for c in sorted(self.cages(node), key=lambda c: c.name) for h in c.hcas]

    def gid_index(self, node: str) -> int | None:
        """The one RoCE v2 GID index of every addressed HCA of the node, or None (none or several)."""
        found = {i for c in self.cages(node) for i in c.gid_index.values() if i is not None}
        return found.pop() if len(found) == 1 else None

    @property
    def switchless_ring(self) -> bool:
        return self.kind in ("ring", "partial") and len(self.nodes) >= 3

    def describe(self) -> str:
        if self.kind == "switch":
            return f"switch: {', '.join(self.switch)} shared by {len(self.nodes)} nodes"
        links = "; ".join(link.describe() for link in self.links)
        return f"{self.kind}: {links or 'no links'}"

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "nodes": self.nodes,
            "links": [
                {"a": [x.a.node, x.a.name], "b": [x.b.node, x.b.name], "subnet": x.subnet} for x in self.links
            ],
            "switch": {s: [[c.node, c.name] for c in cs] for s, cs in self.switch.items()},
            "missing": [list(p) for p in self.missing],
            "hcas": {n: self.hcas(n) for n in self.nodes},
            "gid_index": {n: self.gid_index(n) for n in self.nodes},
        }


def build_layout(nodes: list[str], cages: Mapping[str, Mapping[str, Cage]]) -> Layout:
    """The group's layout from each node's cages (`node_cages`), judged from shared subnets."""
    if len(nodes) < 2:
        return Layout("single", list(nodes))
    on: dict[str, list[Cage]] = {}
    for n in nodes:
        for cage in cages.get(n, {}).values():
            for s in cage.subnets:
                on.setdefault(s, []).append(cage)
    lay = Layout("none", list(nodes))
    for subnet, cs in sorted(on.items()):
        owners = {c.node for c in cs}
        if len(owners) >= 3:
            lay.switch[subnet] = cs
        elif len(owners) == 2:
            a, b = sorted(cs, key=lambda c: nodes.index(c.node))[:2]
            lay.links.append(Link(a, b, subnet))
        else:
            lay.lonely += [(c, subnet) for c in cs]
    lay.kind = _kind(nodes, lay)
    return lay


def _kind(nodes: list[str], lay: Layout) -> str:
    if lay.switch and all({c.node for c in cs} >= set(nodes) for cs in lay.switch.values()):
        return "switch"
    pairs = {frozenset((x.a.node, x.b.node)) for x in lay.links}
    every = [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1 :]]
    lay.missing = [(a, b) for a, b in every if frozenset((a, b)) not in pairs]
    if not pairs:
        return "none"
    if len(nodes) == 2:
        return "direct"
    degree = {n: sum(n in p for p in pairs) for n in nodes}
    if not lay.missing:
        return "ring" if len(nodes) == 3 else "mesh"  # 3 nodes: the triangle is both
    if all(d == 2 for d in degree.values()) and _connected(nodes, pairs):
        lay.missing = []  # a ring's non-neighbours are not missing links
        return "ring"
    return "partial"


def _connected(nodes: list[str], pairs: set[frozenset[str]]) -> bool:
    seen, todo = {nodes[0]}, [nodes[0]]
    while todo:
        n = todo.pop()
        for p in pairs:
            if n in p:
                (other,) = p - {n}
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
    return seen == set(nodes)


def layout_env(lay: Layout, node: str) -> dict[str, str]:
    """The NCCL env this layout needs on `node` (besides NCCL_SOCKET_IFNAME from the profile)."""
    env: dict[str, str] = {}
    hcas = lay.hcas(node)
    if hcas:
        env["NCCL_IB_HCA"] = ",".join(hcas)
    gid = lay.gid_index(node)
    if gid is not None:
        env["NCCL_IB_GID_INDEX"] = str(gid)
    if lay.switchless_ring or (lay.kind == "mesh" and len(lay.nodes) >= 4):
        env["NCCL_ALGO"] = "Ring"
    return env


@dataclass(frozen=True)
class Fault:
    """A cable that is not where the addresses say: `crossed` (reaches another cage or node than the
    one with the subnet) or `missing` (no carrier, or nothing answers on it)."""

    kind: str  # crossed | missing
    cage: Cage  # where the fault is seen
    want: Cage  # the cage of the peer that carries the same subnet
    got: Cage | None  # what the cable reaches instead (crossed)
    subnet: str


def cable_faults(lay: Layout, cages: Mapping[str, Mapping[str, Cage]]) -> list[Fault] | None:
    """Each point-to-point link checked against the neighbours its cages hear (None: no neighbour
    facts on any node, so cabling cannot be told from addressing)."""
    owner = {m: c for per in cages.values() for c in per.values() for m in c.macs}
    if not any(c.heard for per in cages.values() for c in per.values()):
        return None
    out: list[Fault] = []
    for link in lay.links:
        for mine, want in ((link.a, link.b), (link.b, link.a)):
            if not mine.up:
                out.append(Fault("missing", mine, want, None, link.subnet))
                continue
            far = {(c.node, c.name): c for m in mine.heard if (c := owner.get(m)) and c.node != mine.node}
            if (want.node, want.name) in far:
                continue
            if far:  # nothing known heard (IPv6 off, a switch port): addressing is all we know
                out.append(Fault("crossed", mine, want, next(iter(far.values())), link.subnet))
    return out


# ----------------------------------------------------------------------------- neighbours
NEIGH_MARK = "#sparkctl-neigh"
# Wakes every ConnectX netdev's link partner (IPv6 all-nodes, link-local: needs no address plan),
# then prints the neighbour table. $@ = extra netdevs to include.
NEIGH_SCRIPT = f"""for d in /sys/class/net/en*np[0-9]* "$@"; do
  d=${{d##*/}}; [ -e "/sys/class/net/$d" ] || continue
  ping -6 -n -c 2 -i 0.2 -W 1 "ff02::1%$d" >/dev/null 2>&1 &
done
wait
echo '{NEIGH_MARK}'
ip -j neigh show
"""


def parse_neighbours(text: str) -> dict[str, list[str]]:
    """netdev -> MACs its neighbours answered from (entries without a link-layer address dropped)."""
    _, mark, body = text.partition(NEIGH_MARK)
    if not mark:
        raise ParseError(f"neighbour probe printed no marker: {text[:120]!r}")
    try:
        entries = json.loads(body or "[]")
    except json.JSONDecodeError as exc:
        raise ParseError(f"`ip -j neigh show` printed no JSON: {body[:120]!r}") from exc
    out: dict[str, list[str]] = {}
    for e in entries:
        mac, dev = str(e.get("lladdr", "")).lower(), e.get("dev")
        if mac and dev and mac not in out.setdefault(dev, []):
            out[dev].append(mac)
    return out


def neighbours_probe(extra: tuple[str, ...] = ()) -> Probe:
    """The link-layer neighbours of every ConnectX netdev (and `extra`), after a link-local ping."""
    return Probe(tuple(sh_argv(NEIGH_SCRIPT, *extra)), checked("ip -j neigh show", parse_neighbours))
