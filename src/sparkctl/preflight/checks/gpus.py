"""Gpus: GPUs visible to nvidia-smi (count, model, memory, compute capability), no drift between nodes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sparkctl.facts.gpu import gpus_probe, meminfo_probe
from sparkctl.facts.probe import Probe
from sparkctl.findings import Finding, Severity, version_drift
from sparkctl.preflight.base import ERROR, OK, SKIP, WARN, Check, Ctx, NodeFacts
from sparkctl.profile.schema import Node

if TYPE_CHECKING:
    from sparkctl.facts.gpu import GpuReport


def gpu_probes() -> dict[str, Probe]:
    return {"meminfo": meminfo_probe(), "gpus": gpus_probe()}


def gpu_report(f: NodeFacts) -> GpuReport | None:
    """nvidia-smi's report with MemAvailable (what a unified-memory GPU can use)."""
    gpus = f.get("gpus")
    return gpus.with_meminfo(f.get("meminfo")) if gpus is not None else None


class Gpus(Check):
    name = "Gpus"
    summary = "GPUs visible with nvidia-smi: count, model, memory, compute capability; no drift"
    order = 80
    aliases = ("DriverDrift", "CudaDrift", "GpuArchDrift")

    def probes(self, ctx: Ctx, node: str) -> dict[str, Probe]:
        return gpu_probes()

    def judge(self, ctx: Ctx, facts: Mapping[str, NodeFacts]) -> list[Finding]:
        out: list[Finding] = []
        reports = {}
        for node, f in facts.items():
            if ctx.failed(out, "gpus", self.name, f):
                continue
            report = gpu_report(f)
            # Replicas sharing a node each hold their own GPUs there: the node needs their sum.
            need = sum(s.gpus for s in ctx.plan.ranks if s.node == node) if ctx.gpus_requested else 0
            out += check_gpus(ctx.profile.node(node), report, need, ctx.gpus_requested)
            if report is not None:
                reports[node] = report
        if len(reports) > 1:
            out += compare_nodes(reports)
        return out


def check_gpus(node: Node, report: GpuReport | None, need: int, gpus_requested: bool) -> list[Finding]:
    if report is None:
        if gpus_requested:
            return [
                Finding(
                    "Gpus",
                    ERROR,
                    "nvidia-smi not found: no NVIDIA driver visible",
                    "install the NVIDIA driver (nvidia-smi must work on the node)",
                    node=node.name,
                )
            ]
        return [Finding("Gpus", SKIP, "no nvidia-smi (engine.container.gpus is false)", node=node.name)]
    gpus = report.gpus
    desc = ", ".join(sorted({f"{g.name} cc {g.compute_cap or '?'}" for g in gpus}))
    mem = report.usable_memory_mib
    memtxt = (
        f", usable {mem / 1024:.0f} GiB" + (" (unified, MemAvailable)" if report.unified_memory else "")
        if mem
        else ""
    )
    data = report.to_json()
    out: list[Finding] = []
    if len(gpus) < need:
        out.append(
            Finding(
                "Gpus",
                ERROR,
                f"{len(gpus)} GPU(s) visible, the mode needs {need} here",
                f"fix nodes[{node.name}].gpus or the mode's tp",
                node=node.name,
                data=data,
            )
        )
    else:
        out.append(
            Finding(
                "Gpus",
                OK,
                f"{len(gpus)} x {desc}{memtxt}, driver {report.driver_version or '?'}",
                node=node.name,
                data=data,
            )
        )
    facts = node.gpu
    if facts is not None:
        caps = {g.compute_cap for g in gpus if g.compute_cap}
        if caps and caps != {facts.compute_capability}:
            out.append(
                Finding(
                    "Gpus",
                    WARN,
                    f"profile says compute capability {facts.compute_capability}, "
                    f"nvidia-smi says {','.join(sorted(caps))}",
                    f"update nodes[{node.name}].gpu (the launch rules use it)",
                    node=node.name,
                )
            )
    return out


def compare_nodes(reports: dict[str, GpuReport]) -> list[Finding]:
    """Drift across nodes: driver, CUDA, GPU model/capability (for preflight)."""
    findings = []
    findings += version_drift(
        {n: r.driver_version for n, r in reports.items()}, "NVIDIA driver", "DriverDrift"
    )
    findings += version_drift({n: r.cuda_version for n, r in reports.items()}, "CUDA version", "CudaDrift")
    # Unknown capabilities (an old nvidia-smi, a table parse) are not evidence of drift.
    caps = {n: ",".join(sorted({g.compute_cap for g in r.gpus if g.compute_cap})) for n, r in reports.items()}
    findings += version_drift(caps, "GPU compute capability", "GpuArchDrift", Severity.ERROR)
    return findings
