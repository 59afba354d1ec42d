"""RoceHca: the RoCE devices the engine will be told to use exist, are ACTIVE and serve the fabric."""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.facts.rdma import NoRdma, RdmaDevice, hca_candidates, ipv4_gid, rdma_probe, serves
from sparkctl.findings import Finding, Severity
from sparkctl.preflight.base import ERROR, Check, Ctx, NodeFacts

CHECK = "RoceHca"


class RoceCheck(Check):
    """A base (names no check): multi-node RoCE checks, judged from each node's RDMA sysfs."""

    multi_node = True

    def applies(self, ctx: Ctx) -> bool:
        return super().applies(ctx) and ctx.profile.fabric.transport == "roce"

    def probes(self, ctx: Ctx, node: str) -> dict:
        return {"rdma": rdma_probe(ctx.sysfs_root)}


class RoceHca(RoceCheck):
    name = "RoceHca"
    summary = "named RoCE devices exist, are ACTIVE, bound to the fabric netdev, with a GID for the IP"
    order = 60

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


def check_hcas(
    node: str,
    devs: dict[str, RdmaDevice],
    netdevs: list[str],
    ip: str | None,
    hcas: str | list[str],
    sysfs: str,
) -> list[Finding]:
    """Judge the profile's `fabric.hcas` (a list or 'auto') against the node's sysfs."""
    right = hca_candidates(devs, netdevs, ip)
    where = f"{sysfs.rstrip('/')}/class/infiniband"
    listing = "; ".join(d.summary() for d in sorted(devs.values(), key=lambda d: d.name)) or "none"
    data = {"candidates": right, "devices": {n: d.to_json() for n, d in devs.items()}}
    fabric = ",".join(netdevs)

    def err(msg: str, fix: str) -> Finding:
        return Finding(CHECK, Severity.ERROR, msg, fix, node=node, data=data)

    suggest = (
        f"set nodes[{node}].fabric.hcas: [{', '.join(right)}] (or 'auto')"
        if right
        else f"no ACTIVE RoCE device is bound to {fabric}; devices: {listing}. Check cabling "
        "and the netdev names (e.g. `rdma link show`), or set fabric.transport: tcp"
    )
    if hcas == "auto":
        if not right:
            return [err(f"hcas: auto found no ACTIVE RoCE device for {fabric} in {where}", suggest)]
        return [
            Finding(CHECK, Severity.OK, f"auto -> {','.join(right)}", node=node, data={**data, "hcas": right})
        ]
    findings: list[Finding] = []
    missing = [h for h in hcas if h not in devs]
    if missing:
        findings.append(
            err(
                f"RoCE device(s) {', '.join(missing)} not found in {where} (present: {', '.join(sorted(devs)) or 'none'})",
                suggest,
            )
        )
    present = [devs[h] for h in hcas if h in devs]
    for dev in present:
        if not dev.active:
            findings.append(
                err(f"{dev.summary()}: no port is ACTIVE", f"check the cable/link of {dev.name}; " + suggest)
            )
    gid = ipv4_gid(ip) if ip else None
    if gid and present and not any(d.has_gid(gid) for d in present):
        holders = [d.name for d in devs.values() if d.has_gid(gid)]
        findings.append(
            err(
                f"none of {', '.join(d.name for d in present)} has a GID for the fabric IP {ip}"
                + (f" (held by {', '.join(holders)})" if holders else ""),
                suggest if holders or right else f"assign {ip} to {fabric}; " + suggest,
            )
        )
    for dev in present:
        if dev.active and not serves(dev, netdevs, gid):
            findings.append(
                Finding(
                    CHECK,
                    Severity.WARN,
                    f"{dev.summary()} is not bound to {fabric}",
                    f"NCCL would send fabric traffic over {'/'.join(sorted(dev.bound_netdevs())) or 'another link'}; "
                    f"use {', '.join(right) or 'the devices of the fabric netdev'}",
                    node=node,
                    data=data,
                )
            )
    if not any(f.severity is Severity.ERROR for f in findings):
        findings.insert(
            0,
            Finding(
                CHECK,
                Severity.OK,
                f"{','.join(hcas)} ACTIVE on {fabric}",
                node=node,
                data={**data, "hcas": list(hcas)},
            ),
        )
    return findings
