"""Drift between nodes (or ranks): driver, CUDA, GPU capability, library versions -> findings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.findings import Finding, Severity

if TYPE_CHECKING:
    from sparkctl.facts.gpu import GpuReport


def version_drift(
    values: dict[str, str | None], what: str, check: str, severity: Severity = Severity.WARN
) -> list[Finding]:
    """One finding if the nodes (or ranks) disagree on `what`; none if all agree or all unknown."""
    known = {k: v for k, v in values.items() if v}
    if len(set(known.values())) <= 1:
        return []
    seen = ", ".join(f"{k}={v}" for k, v in sorted(known.items()))
    return [
        Finding(
            check=check,
            severity=severity,
            message=f"{what} differs: {seen}",
            fix=f"use the same {what} on every node (same image, same driver)",
            data={"values": known},
        )
    ]


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
