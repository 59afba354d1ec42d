"""One way to print findings as lines: `error Check: message` + `fix:` (fit, plan --check)."""

from __future__ import annotations

from sparkctl.commands._common import console

COLORS = {"ok": "green", "warn": "yellow", "error": "red", "skip": "dim"}


def render_findings(findings: list) -> None:  # noqa: ANN001 - list[Finding], imported lazily
    from rich.markup import escape

    out = console()
    for f in findings:
        sev = f.severity.value
        where = escape(f" [{f.node}]") if f.node else ""
        out.print(f"[{COLORS[sev]}]{sev:5}[/] {f.check}{where}: {escape(f.message)}")
        if f.fix and sev != "ok":
            out.print(f"      [yellow]fix:[/] {escape(f.fix)}")
