"""NodeParity: the software stack of every node of the mode, side by side in one table.

A difference known to break ranks that talk (an NVIDIA driver branch, a DOCA/OFED release between
the nodes of one replica group) is an error; other differences are warnings; `CmaTotal: 0 kB` on
a unified-memory node (a kernel built without CMA) is an error on its own. Unknown values (a tool
missing on a node) are not evidence of a difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from sparkctl.facts.versions import FIELDS, NodeVersions, versions_probe
from sparkctl.findings import Finding
from sparkctl.preflight.base import ERROR, OK, WARN, Check, Ctx, NodeFacts
from sparkctl.preflight.pairs import group_nodes

LABELS = {
    "kernel": "kernel",
    "driver": "NVIDIA driver",
    "cuda": "CUDA (driver)",
    "ofed": "DOCA/MLNX OFED",
    "doca": "DOCA runtime",
    "firmware": "ConnectX firmware",
    "cma_kb": "CmaTotal",
    "toolkit": "container toolkit",
    "docker": "Docker",
}
FIXES = {
    "kernel": "run the same kernel on every node (`uname -r`; DGX OS updates keep them in step)",
    "driver": "install the same NVIDIA driver on every node and reboot",
    "cuda": "the CUDA version follows the driver: install the same driver on every node",
    "ofed": "install the same DOCA-OFED release on every node (`ofed_info -s`)",
    "doca": "install the same DOCA release on every node",
    "firmware": "flash the same ConnectX firmware on every node (`mlxfwmanager`)",
    "cma_kb": "boot the same kernel and CMA setting (cma= on the kernel command line) on every node",
    "toolkit": "install the same nvidia-container-toolkit on every node",
    "docker": "install the same Docker Engine on every node",
}


def breaks(name: str, values: set[str]) -> bool:
    """Whether this difference between ranks of one group is known to break serving."""
    if name == "driver":
        return True  # ranks load different libcuda/NCCL-facing driver interfaces
    if name in ("ofed", "doca"):
        return len({v.split("-")[0] for v in values}) > 1  # another release, not another build
    return False


class NodeParity(Check):
    name = "NodeParity"
    summary = (
        "kernel, driver, CUDA, DOCA/OFED, ConnectX firmware, CmaTotal, toolkit and Docker agree across nodes"
    )
    order = 26

    def applies(self, ctx: Ctx) -> bool:
        return len(ctx.nodes) > 1

    def probes(self, ctx: Ctx, node: str) -> dict:
        return {"versions": versions_probe(ctx.sysfs_root)}

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        got: dict[str, NodeVersions] = {}
        for node, f in facts.items():
            if not ctx.failed(out, "versions", self.name, f) and f.get("versions") is not None:
                got[node] = f.get("versions")
        unified = {n for n in got if (g := ctx.profile.node(n).gpu) is not None and g.unified_memory}
        return out + compare(got, [g for g in group_nodes(ctx.plan) if len(g) > 1], unified)


def table(got: Mapping[str, NodeVersions]) -> dict[str, dict[str, str]]:
    return {name: {n: v.value(name) for n, v in got.items()} for name in FIELDS}


def compare(got: Mapping[str, NodeVersions], groups: list[list[str]], unified: set[str]) -> list[Finding]:
    """One summary finding holding the table, then one finding per field that differs."""
    if not got:
        return []
    rows = table(got)
    out: list[Finding] = []
    for name, per in rows.items():
        known = {n: v for n, v in per.items() if v}
        if len(set(known.values())) < 2:
            continue
        grouped = [g for g in groups if len({known[n] for n in g if n in known}) > 1]
        sev = ERROR if grouped and breaks(name, set(known.values())) else WARN
        where = ", ".join(f"{n} {v}" for n, v in known.items())
        scope = f" within the replica group {'+'.join(grouped[0])}" if grouped else " (between replicas)"
        out.append(
            Finding(
                "NodeParity",
                sev,
                f"{LABELS[name]} differs{scope}: {where}",
                FIXES[name],
                node=next(iter(known)),
                data={"field": name, "values": known},
            )
        )
    for n in sorted(unified):
        if got[n].cma_kb == 0:
            msg = "CmaTotal: 0 kB: this kernel reserves no contiguous memory, reported to break multi-Spark serving"
            out.append(
                Finding(
                    "NodeParity", ERROR, msg, "boot NVIDIA's DGX OS kernel (or one with CMA enabled)", node=n
                )
            )
    if not out:
        msg = f"{len(got)} nodes agree: " + ", ".join(
            f"{LABELS[k]} {next(iter(v.values()))}" for k, v in rows.items() if any(v.values())
        )
        return [Finding("NodeParity", OK, msg, node=next(iter(got)), data={"table": rows})]
    out[0] = replace(out[0], data={**out[0].data, "table": rows})  # the whole table, once
    return out
