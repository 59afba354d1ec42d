"""RoceGidIndex: the RoCE v2 GID index of the fabric IP on each HCA NCCL will use, against the
NCCL_IB_GID_INDEX the ranks get, and across the nodes.

A stock Spark has the IPv4 RoCE v2 GID at index 3; an IPv6 address added first moves it to 5 on
that kit only, and a cluster-wide `NCCL_IB_GID_INDEX=3` then builds RoCE v1 or wrong-address
queue pairs there (`ibv_modify_qp` failures, hangs at the first collective).
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkctl.facts.rdma import RdmaDevice, hca_candidates, roce_v2_gid_index
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, WARN, Ctx, NodeFacts
from sparkctl.preflight.checks.roce import RoceCheck


class RoceGidIndex(RoceCheck):
    name = "RoceGidIndex"
    summary = "NCCL_IB_GID_INDEX is the RoCE v2 GID of the fabric IP on every HCA of every node"
    order = 61

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        seen: dict[str, int] = {}
        for node, f in facts.items():
            fab = ctx.profile.node(node).fabric
            devs = f.get("rdma")
            if fab is None or not isinstance(devs, dict):
                continue  # RoceHca reports a missing RDMA stack
            hcas = fab.hcas if isinstance(fab.hcas, list) else hca_candidates(devs, fab.netdevs, str(fab.ip))
            env = {k: str(v) for r in ctx.plan.ranks if r.node == node for k, v in r.env.items()}
            found = judge_node(node, devs, hcas, str(fab.ip), env.get("NCCL_IB_GID_INDEX"))
            out += found
            oks = [x.data["index"] for x in found if x.severity is OK and x.data]
            if oks:
                seen[node] = oks[0]
        if len(set(seen.values())) > 1:
            parts = ", ".join(f"{n}: {i}" for n, i in seen.items())
            msg = f"the RoCE v2 GID index differs across nodes ({parts}); one cluster-wide NCCL_IB_GID_INDEX breaks some"
            fix = "set NCCL_IB_GID_INDEX per node (nodes[].fabric.gid_index, or 'auto'), never in engine.env or the image"
            out.append(Finding(self.name, WARN, msg, fix, node=next(iter(seen)), data={"index": seen}))
        return out


def judge_node(
    node: str, devs: Mapping[str, RdmaDevice], hcas: list[str], ip: str, env_index: str | None
) -> list[Finding]:
    idx = {h: roce_v2_gid_index(devs[h], ip) for h in hcas if h in devs}
    known = {h: i for h, i in idx.items() if i is not None}
    if not known:
        return []  # no HCA holds the fabric IP's GID: RoceHca's error
    values = sorted(set(known.values()))
    listing = ", ".join(f"{h}: {i}" for h, i in known.items())
    if env_index is not None:
        bad = {h: i for h, i in known.items() if str(i) != env_index}
        if bad:
            msg = f"NCCL_IB_GID_INDEX={env_index} but the RoCE v2 GID of {ip} is at {listing}"
            fix = f"set nodes[{node}].fabric.gid_index: {values[0] if len(values) == 1 else 'auto'} and drop NCCL_IB_GID_INDEX from engine.env/mode env/the image"
            return [Finding("RoceGidIndex", ERROR, msg, fix, node=node, data={"gids": idx})]
    if len(values) > 1:
        msg = (
            f"the HCAs disagree on the RoCE v2 GID index ({listing}); NCCL_IB_GID_INDEX is one value per rank"
        )
        fix = (
            "leave NCCL_IB_GID_INDEX unset (NCCL picks RoCE v2 per device), or address both PCIe halves alike"
        )
        return [Finding("RoceGidIndex", WARN, msg, fix, node=node, data={"gids": idx})]
    return [
        Finding(
            "RoceGidIndex",
            OK,
            f"RoCE v2 GID of {ip} at index {values[0]} ({', '.join(known)})",
            node=node,
            data={"index": values[0]},
        )
    ]
