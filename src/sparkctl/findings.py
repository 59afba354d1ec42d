"""One result type for every check sparkctl makes (preflight probes, launch rules, verify).

A finding names a stable check, where it applies (node/rank), what was seen, and the fix.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum


class Severity(StrEnum):
    OK = "ok"
    WARN = "warn"
    ERROR = "error"
    SKIP = "skip"  # could not be checked (say why in `message` and how to enable in `fix`)

    @property
    def rank(self) -> int:
        return {"ok": 0, "skip": 1, "warn": 2, "error": 3}[self.value]


@dataclass(frozen=True)
class Finding:
    check: str  # stable name, e.g. "Mtu", "HcaNames", "FlagsValid" (documented in docs/)
    severity: Severity
    message: str
    fix: str | None = None
    node: str | None = None
    rank: int | None = None
    data: dict = field(default_factory=dict, compare=False)  # parsed facts for --json

    @property
    def key(self) -> str:
        """kubeadm-style id: Check-node, e.g. Mtu-spark2."""
        return f"{self.check}-{self.node}" if self.node else self.check

    def to_json(self) -> dict:
        out = asdict(self)
        out["severity"] = self.severity.value
        return out


def worst(findings: list[Finding]) -> Severity:
    return max((f.severity for f in findings), key=lambda s: s.rank, default=Severity.OK)


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
