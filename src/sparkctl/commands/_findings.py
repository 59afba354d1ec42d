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


def place_flags(findings: list, path, mode: str) -> list:  # list[Finding], Path | None
    """A finding about a flag the profile sets (`--mem-fraction-static 1.5: ...`, or its data's
    `flag`: a misspelled one) names the file,
    line and key that set it (modes.MODE.args before engine.args, `_` spellings too); a flag
    sparkctl renders itself, or any other finding, is left as it is."""
    import dataclasses
    import re

    from sparkctl.yaml_compose import key_line, key_lines

    if path is None:
        return findings
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return findings
    lines, out = key_lines(text), []
    for f in findings:
        named = re.match(r"--([A-Za-z0-9][A-Za-z0-9-]*)\b", str(f.data.get("flag") or f.message))
        flag = named.group(1) if named and f.severity.value != "ok" else None
        for key in [f"{where}.{name}" for where in (f"modes.{mode}.args", "engine.args")
                    for name in dict.fromkeys((flag, flag.replace("-", "_")))] if flag else []:  # fmt: skip
            line = key_line(text, f"{key}: ", lines)
            if line is not None:
                f = dataclasses.replace(f, message=f"{path}:{line}: {key}: {f.message}")
                break
        out.append(f)
    return out
