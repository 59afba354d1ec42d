"""`fabric-test --links`: the fabric test over every cable of a ring or mesh, pair by pair, then the
whole group. A ring that passes as a group can still hide one slow or dead cable (NCCL routes
around nothing in a switchless ring: that link is the group's bandwidth).

Each link gets a two-rank plan cut from the group's: the two nodes' ranks with the link's own
cage as their only NCCL device (`NCCL_IB_HCA` = both PCIe halves of that cage, socket ifname = its
netdev) and the rendezvous on the first end's address on that cable (in a switchless ring, rank
0's fabric IP is not on every cable). The layout comes from facts/cabling.py.
"""

from __future__ import annotations

from dataclasses import replace
from ipaddress import IPv4Address, IPv4Network
from typing import TYPE_CHECKING

from sparkctl.facts.cabling import Cage, Layout, build_layout, neighbours_probe, node_cages

if TYPE_CHECKING:
    from sparkctl.connectors.pool import NodePool
    from sparkctl.planning.model import Plan, RankSpec


def _on_cage(spec: RankSpec, cage: Cage) -> RankSpec:
    env = dict(spec.env)
    if cage.hcas:
        env["NCCL_IB_HCA"] = ",".join(cage.hcas)
    env["NCCL_SOCKET_IFNAME"] = env["GLOO_SOCKET_IFNAME"] = cage.netdevs[0]
    return replace(spec, env=env)


def _ip_on(cage: Cage, subnet: str) -> str | None:
    return next((ip for ip in cage.ips if IPv4Address(ip) in IPv4Network(subnet)), None)


def link_pairs(lay: Layout) -> list[tuple[Cage, Cage, str]]:
    """Every point-to-point cable, and on a switch every pair of nodes through it."""
    out = [(x.a, x.b, x.subnet) for x in lay.links]
    for subnet, cages in lay.switch.items():
        out += [(a, b, subnet) for i, a in enumerate(cages) for b in cages[i + 1 :] if a.node != b.node]
    return out


def link_plans(plan: Plan, lay: Layout) -> list[tuple[str, Plan]]:
    """(label, two-rank plan) per link of the group's layout (plan: one replica)."""
    port = (plan.dist_init_addr or ":0").rsplit(":", 1)[1]
    out = []
    for a, b, subnet in link_pairs(lay):
        ip = _ip_on(a, subnet)
        if ip is None:
            continue
        ends = {a.node: a, b.node: b}
        ranks = [_on_cage(r, ends[r.node]) for r in plan.ranks if r.node in ends]
        label = f"{a.node} {a.name} <-> {b.node} {b.name} ({subnet})"
        out.append((label, replace(plan, ranks=ranks, dist_init_addr=f"{ip}:{port}")))
    return out


def gather_layout(pool: NodePool, profile, nodes: list[str], sysfs_root: str = "/sys") -> Layout:
    """Each node's netdevs, RoCE devices and neighbours (one batch per node), then the layout."""
    from sparkctl.facts.net import netdevs_probe
    from sparkctl.facts.probe import run_batch
    from sparkctl.facts.rdma import rdma_probe
    from sparkctl.fanout import fan_out

    def one(node: str):
        fab = profile.node(node).fabric
        extra = tuple(fab.netdevs) if fab else ()
        probes = {"netdevs": netdevs_probe(), "neighbours": neighbours_probe(extra)}
        if profile.fabric.transport == "roce":
            probes["rdma"] = rdma_probe(sysfs_root)
        got = run_batch(pool.get(node), probes)
        if isinstance(got["netdevs"], Exception):
            raise got["netdevs"]
        rdma, heard = got.get("rdma"), got["neighbours"]
        return node_cages(
            node,
            got["netdevs"],
            rdma if isinstance(rdma, dict) else None,
            heard if isinstance(heard, dict) else None,
            extra,
        )

    return build_layout(nodes, fan_out(nodes, one).values_or_raise())


def run_links(pool: NodePool, profile, plan: Plan, run, sysfs_root: str = "/sys") -> list[tuple[str, object]]:
    """`run(plan, connectors) -> FabricReport` on every link of the plan's group, in turn."""
    nodes = list(dict.fromkeys(plan.nodes))
    lay = gather_layout(pool, profile, nodes, sysfs_root)
    out = []
    for label, sub in link_plans(plan, lay):
        conns = {n: pool.get(n) for n in dict.fromkeys(sub.nodes)}
        out.append((label, run(sub, conns)))
    return out
