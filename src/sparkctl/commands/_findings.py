"""One way to print findings as lines: `error Check [node rank]: message` + `fix:`.

Lines are wrapped here, by word, to the console width, with a hanging indent: a `command` in
backticks is never split (one that does not fit starts its own line), so a fix stays copyable
at 80 columns and when piped.
"""

from __future__ import annotations

import re

from sparkctl.commands._common import console

COLORS = {"ok": "green", "warn": "yellow", "error": "bold red", "skip": "dim"}
_TOKEN = re.compile(r"`[^`]*`\S*|\S+")


def wrap_words(text: str, width: int, indent: int = 0, first: int | None = None) -> list[str]:
    """Greedy word wrap; backticked spans are one token. `first`: room on the first line (else width).
    Continuation lines are returned without their indent (the caller adds it)."""
    lines: list[str] = []
    line, room = "", (width if first is None else first)
    for tok in _TOKEN.findall(text):
        if line and len(line) + 1 + len(tok) > room:
            lines.append(line)
            line, room = tok, width - indent
        else:
            line = f"{line} {tok}" if line else tok
    lines.append(line)
    return lines


def print_wrapped(
    out, prefix_markup: str, prefix_len: int, text: str, indent: int, style: str = ""
) -> None:  # rich Console
    """`prefix` then `text` wrapped to the console, continuation lines indented by `indent`."""
    from rich.markup import escape

    width = max(out.width, 40)
    parts = wrap_words(text, width, indent, first=width - prefix_len)
    for i, part in enumerate(parts):
        body = f"[{style}]{escape(part)}[/]" if style else escape(part)
        out.print((prefix_markup if i == 0 else " " * indent) + body, soft_wrap=True)


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
