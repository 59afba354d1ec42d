"""One way to print findings as lines: `error Check [node rank]: message` + `fix:`, wrapped as
every error line is (`_common.print_wrapped`)."""

from __future__ import annotations

from sparkctl.commands._common import console, print_wrapped

COLORS = {"ok": "green", "warn": "yellow", "error": "bold red", "skip": "dim"}


def where(f) -> str:  # Finding
    place = " ".join(x for x in (f.node, None if f.rank is None else f"rank {f.rank}") if x)
    return f" [{place}]" if place else ""


def render_findings(
    findings: list, detail_key: str | None = None, out=None
) -> None:  # list[Finding], Console
    """`detail_key`: a list of lines in `finding.data` printed dimmed under errors (e.g. NCCL's)."""
    from rich.markup import escape

    out = out or console()
    for f in findings:
        sev = f.severity.value
        head = f"{sev:5} {f.check}{where(f)}: "
        print_wrapped(out, f"[{COLORS[sev]}]{sev:5}[/] {escape(head[6:])}", len(head), f.message, 6)
        if f.fix and sev != "ok":
            print_wrapped(out, "      [yellow]fix:[/] ", 11, f.fix, 11)
        for line in f.data.get(detail_key, []) if detail_key and sev == "error" else []:
            out.print(f"      [dim]{escape(line)}[/]", soft_wrap=True)
