"""PingDf: a don't-fragment ping at the full MTU between every pair of nodes that will talk.

The pairs come from the plan (preflight/pairs.py): the nodes of each multi-node replica group,
both directions. Each node pings ITS peers from its own probe batch, beside a small ping per
peer that tells "the path MTU is short" from "there is no path"; the node's netdev facts name
the end whose MTU is below the profile's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparkctl.facts.net import PingResult, netdevs_probe, path_mtu_hint, ping_probe
from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, Check, Ctx, NodeFacts, probe_failure
from sparkctl.preflight.pairs import fabric_peers
from sparkctl.profile.schema import Profile


def iface(profile: Profile, node: str) -> str | None:
    """The netdev to ping out of: the fabric netdev when there is one (with several, routing picks)."""
    fab = profile.node(node).fabric
    return fab.netdevs[0] if fab is not None and len(fab.netdevs) == 1 else None


@dataclass(frozen=True)
class PairPing:
    """What `src` saw pinging `dst`'s fabric IP: the full-size DF ping and a small one."""

    src: str
    dst: str
    ip: str
    mtu: int  # the profile's fabric.mtu (the DF payload is mtu - 28)
    df: PingResult
    small: PingResult | None = None  # None: not gathered
    via: str | None = None


class PingDf(Check):
    name = "PingDf"
    summary = "a don't-fragment ping at the full MTU crosses the fabric both ways within each replica group"
    order = 50
    multi_node = True

    def applies(self, ctx: Ctx) -> bool:
        return super().applies(ctx) and bool(fabric_peers(ctx.plan))

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe]:
        out = {"netdevs": netdevs_probe()}  # names the end whose MTU is short
        via = iface(ctx.profile, node)
        for dst in fabric_peers(ctx.plan).get(node, []):
            dfab = ctx.profile.node(dst).fabric
            if dfab is not None:
                ip = str(dfab.ip)
                out[f"pingdf:{dst}"] = ping_probe(ip, size=ctx.profile.fabric.mtu - 28, iface=via)
                out[f"pingsmall:{dst}"] = ping_probe(ip, iface=via, count=1)
        return out

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out = []
        mtu = ctx.profile.fabric.mtu
        ends = {n: fabric_mtu(ctx.profile, n, f.get("netdevs")) for n, f in facts.items()}
        for src, f in facts.items():
            for dst, res in f.with_prefix("pingdf").items():
                if isinstance(res, Exception):
                    out.append(probe_failure(self.name, src, res))
                    continue
                small = f.result(f"pingsmall:{dst}")
                ip = str(ctx.profile.node(dst).fabric.ip)  # type: ignore[union-attr]
                pair = PairPing(
                    src, dst, ip, mtu, res, small if isinstance(small, PingResult) else None,
                    iface(ctx.profile, src),
                )  # fmt: skip
                out.append(check_pair(pair, {n: e for n, e in ends.items() if n in (src, dst) and e}))
        return out


def fabric_mtu(profile: Profile, node: str, netdevs: Mapping | None) -> tuple[str, int] | None:
    """(netdev, MTU) of the node's fabric netdev with the smallest MTU, from its netdev facts."""
    fab = profile.node(node).fabric
    if fab is None or not netdevs:
        return None
    have = [(netdevs[d].mtu, d) for d in fab.netdevs if d in netdevs]
    if not have:
        return None
    mtu, dev = min(have)
    return dev, mtu


def check_pair(p: PairPing, ends: Mapping[str, tuple[str, int]]) -> Finding:
    """PingDf for one direction of one pair; a failure names both ends, the likely cause and the fix."""
    where = f"{p.src} -> {p.dst} ({p.ip})"
    data = {
        "src": p.src,
        "dst": p.dst,
        "ip": p.ip,
        "size": p.mtu - 28,
        "via": p.via,
        "sent": p.df.sent,
        "received": p.df.received,
    }
    if p.df.ok:
        msg = f"{where}: DF ping at MTU {p.mtu} passes ({p.df.received}/{p.df.sent} replies)"
        return Finding("PingDf", OK, msg, node=p.src, data=data)
    short = [(n, dev, m) for n, (dev, m) in ends.items() if m < p.mtu]
    hint = path_mtu_hint(p.df.error) or min((m for _, _, m in short), default=None)
    no_path = p.small is not None and not p.small.ok
    if no_path:
        why = f"no path: even a small ping fails ({p.small.error})"  # type: ignore[union-attr]
    else:
        why = f"path MTU {hint}?" if hint else f"path MTU below {p.mtu}?"
        if hint is None and p.df.error and p.df.error != "100% packet loss":
            why += f" {p.df.error}"
        why += "; small packets pass" if p.small is not None else ""
    return Finding(
        "PingDf",
        ERROR,
        f"{where}: DF ping at MTU {p.mtu} fails ({why})",
        _pair_fix(p, short, no_path),
        node=p.src,
        data={**data, "error": p.df.error, "path_mtu": hint, "no_path": no_path},
    )


def _pair_fix(p: PairPing, short: list[tuple[str, str, int]], no_path: bool) -> str:
    if no_path:
        return (
            f"{p.dst}'s fabric IP {p.ip} is not reachable from {p.src}: check the link (FabricNetdev), "
            f"the addresses and `ip route get {p.ip}` on {p.src}"
        )
    if short:
        sets = "; ".join(
            f"`sudo ip link set dev {dev} mtu {p.mtu}` on {n} (it is at {m})" for n, dev, m in short
        )
        return f"{sets}; persist it in netplan/NetworkManager"
    return (
        f"both ends' fabric netdevs are at MTU {p.mtu}: a switch port or bridge between {p.src} and "
        f"{p.dst} has a smaller MTU; enable jumbo frames ({p.mtu}) on it"
    )
