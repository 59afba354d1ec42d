"""HostIpReachable: the address each rank advertises is on its node and reachable from the peers."""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.engines import get_engine
from sparkctl.facts.net import Netdev, PingResult, netdevs_probe, ping_probe
from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, WARN, Check, Ctx, NodeFacts, probe_failure


def _host_ip_env(ctx: Ctx) -> str | None:
    multi = get_engine(ctx.profile.engine.kind).multi_node
    return multi.host_ip_env if multi else None


def _host_ips(ctx: Ctx) -> list[tuple[int, str, str, list[str]]]:
    """(rank, node, advertised IP, the other nodes of its replica group, which ping it) of every
    rank that advertises one (the engine names the env var). Other groups never talk to it."""
    env = _host_ip_env(ctx)
    out = []
    for spec in ctx.plan.ranks:
        ip = spec.env.get(env) if env else None
        if isinstance(ip, str):
            group = dict.fromkeys(r.node for r in ctx.plan.group_ranks(spec.group))
            out.append((spec.rank, spec.node, ip, [n for n in group if n != spec.node]))
    return out


class HostIpReachable(Check):
    name = "HostIpReachable"
    summary = "each rank's advertised host IP is assigned on its node and reachable from its group's peers"
    order = 170
    multi_node = True

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe]:
        out: dict[str, Probe] = {"netdevs": netdevs_probe()}
        for rank, _, ip, peers in _host_ips(ctx):
            if node in peers:
                out[f"hostip:{rank}"] = ping_probe(ip, count=1)
        return out

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        env = _host_ip_env(ctx) or "advertised host IP"
        for rank, owner, ip, _ in _host_ips(ctx):
            pings: dict[str, PingResult] = {}
            for src, f in facts.items():
                res = f.result(f"hostip:{rank}")
                if isinstance(res, Exception):
                    out.append(probe_failure(self.name, src, res))
                elif res is not None:
                    pings[src] = res
            nf = facts.get(owner)
            n = ctx.profile.node(owner)
            netdevs = nf.get("netdevs") if nf else None
            fabric = n.fabric.netdevs if n.fabric else []
            out += check_host_ip(rank, owner, ip, netdevs, fabric, pings, env=env)
        return out


def check_host_ip(
    rank: int,
    node: str,
    host_ip: str,
    netdevs: Mapping[str, Netdev] | None,
    fabric_netdevs: list[str],
    pings: Mapping[str, PingResult],
    *,
    env: str = "advertised host IP",  # the engine's variable that carries it (MultiNode.host_ip_env)
) -> list[Finding]:
    """HostIpReachable: the advertised host IP of one rank: assigned on its node, reachable from every peer."""
    out: list[Finding] = []
    if netdevs is not None:
        holders = [d.name for d in netdevs.values() if host_ip in d.ips]
        if not holders:
            out.append(
                Finding(
                    "HostIpReachable",
                    ERROR,
                    f"{env} {host_ip} of rank {rank} is not assigned on {node}",
                    f"set nodes[{node}].fabric.ip to an address of {node}'s fabric netdev "
                    f"(or fix the {env} override in engine/mode env)",
                    node=node,
                    rank=rank,
                )
            )
        elif fabric_netdevs and not set(holders) & set(fabric_netdevs):
            out.append(
                Finding(
                    "HostIpReachable",
                    WARN,
                    f"{env} {host_ip} of rank {rank} is on "
                    f"{','.join(holders)}, not the fabric ({','.join(fabric_netdevs)})",
                    "rendezvous traffic would take the LAN; use the fabric IP",
                    node=node,
                    rank=rank,
                )
            )
    for peer, res in sorted(pings.items()):
        if res.ok:
            out.append(
                Finding(
                    "HostIpReachable",
                    OK,
                    f"rank {rank} {host_ip} reachable from {peer}",
                    node=node,
                    rank=rank,
                )
            )
        else:
            out.append(
                Finding(
                    "HostIpReachable",
                    ERROR,
                    f"rank {rank} {host_ip} not reachable from {peer} ({res.error})",
                    f"the engine on {peer} cannot reach rank {rank}'s advertised address: check routing "
                    "and firewalls between the fabric IPs",
                    node=node,
                    rank=rank,
                )
            )
    return out
