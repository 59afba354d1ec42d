"""One way to print findings as lines: `error Check [node rank]: message` + `fix:`."""

from __future__ import annotations

from sparkctl.commands._common import console

COLORS = {"ok": "green", "warn": "yellow", "error": "bold red", "skip": "dim"}


def render_findings(findings: list, detail_key: str | None = None) -> None:  # noqa: ANN001 - list[Finding]
    """`detail_key`: a list of lines in `finding.data` printed dimmed under errors (e.g. NCCL's)."""
    from rich.markup import escape

    out = console()
    for f in findings:
        sev = f.severity.value
        place = " ".join(x for x in (f.node, None if f.rank is None else f"rank {f.rank}") if x)
        where = escape(f" [{place}]") if place else ""
        out.print(f"[{COLORS[sev]}]{sev:5}[/] {f.check}{where}: {escape(f.message)}")
        if f.fix and sev != "ok":
            out.print(f"      [yellow]fix:[/] {escape(f.fix)}")
        for line in f.data.get(detail_key, []) if detail_key and sev == "error" else []:
            out.print(f"      [dim]{escape(line)}[/]")
