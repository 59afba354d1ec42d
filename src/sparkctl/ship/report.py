"""What one `ship` did: per item and node its result, the failures, and the first one raised
(its own module: `ship.run` builds it and the package re-exports it, with no circle between them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkctl.errors import SparkctlError


@dataclass
class ShipReport:
    source: str
    targets: list[str]
    check: str = "quick"  # how content was compared: "quick" (size+mtime+inode) or "deep" (rehashed)
    results: list = field(default_factory=list)  # ImageResult | WeightsResult
    errors: list[tuple[str, str, SparkctlError]] = field(default_factory=list)  # (node, what, error)

    @property
    def bytes_sent(self) -> int:
        return sum(r.bytes_sent for r in self.results)

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "targets": self.targets,
            "check": self.check,
            "ok": self.ok,
            "bytes_sent": self.bytes_sent,
            "results": [r.to_json() for r in self.results],
            "errors": [{"node": n, "what": w, "error": e.message, "fix": e.fix} for n, w, e in self.errors],
        }


def raise_first(report: ShipReport) -> None:
    """Raise the first failure as itself (its type and exit code), with `.report` attached."""
    _node, _what, first = report.errors[0]
    if len(report.errors) > 1:
        others = ", ".join(f"{n} {w}" for n, w, _ in report.errors[1:])
        first.message += f" (also failed: {others})"
    first.report = report  # type: ignore[attr-defined]
    raise first
