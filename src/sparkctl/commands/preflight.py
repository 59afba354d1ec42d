"""`sparkctl preflight [MODE]`: every node and fabric check at once, each with its fix."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_service, print_json
from sparkctl.commands._findings import COLORS

ModeArg = Annotated[
    str | None, typer.Argument(metavar="MODE", help="Mode to check (default: the profile's default mode).")
]
IgnoreOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--ignore",
        metavar="CHECK",
        help="Downgrade a check's errors to warnings (repeatable; 'all' for every check).",
    ),
]
OnlyOpt = Annotated[
    list[str] | None, typer.Option("--only", metavar="CHECK", help="Run only these checks (repeatable).")
]
AcceptOpt = Annotated[
    bool,
    typer.Option(
        "--accept-new-host-keys", help="Trust and record unknown SSH host keys (changed ones are refused)."
    ),
]
SysfsOpt = Annotated[str, typer.Option("--sysfs-root", hidden=True, help="sysfs root on every node (tests).")]


@handle_errors
def preflight_cmd(
    mode: ModeArg = None,
    profile: ProfileOpt = None,
    ignore: IgnoreOpt = None,
    only: OnlyOpt = None,
    json_out: JsonOpt = False,
    accept_new_host_keys: AcceptOpt = False,
    sysfs_root: SysfsOpt = "/sys",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Every check in a table.")] = False,
    deep: Annotated[
        bool,
        typer.Option(
            "--deep",
            help="WeightsContent rehashes every byte on every node instead of "
            "trusting the quick check (size+mtime+inode, like rsync).",
        ),
    ] = False,
) -> None:
    """Check every node of MODE (SSH, fabric MTU/ping/RoCE, Docker, GPUs, image, weights, disk,
    ports, stray containers, memory). Exit 0 only without errors; --ignore CHECK downgrades."""
    from sparkctl.connectors import NodePool
    from sparkctl.planning.build import build_plan
    from sparkctl.preflight import run_preflight, validate_names

    # kubeadm style `--ignore Mtu,PingDf` too; unknown names are usage errors before any connection.
    ignore = [n for item in ignore or [] for n in item.split(",") if n]
    only = [n for item in only or [] for n in item.split(",") if n]
    validate_names(set(ignore), "--ignore")
    if only:
        validate_names(set(only), "--only")
    prof, mode = load_service(profile, mode, judge=True)
    plan = build_plan(prof, mode)
    with NodePool(prof, accept_new_host_keys=accept_new_host_keys, once=True) as pool:
        report = run_preflight(
            prof,
            plan,
            pool,
            only=set(only) if only else None,
            ignore=set(ignore or []),
            sysfs_root=sysfs_root,
            deep=deep,
        )
    if json_out:
        print_json(report.to_json())
    else:
        render_report(report, verbose)
    if not report.ok:
        raise typer.Exit(1)


def render_report(report, verbose: bool = False, out=None) -> None:  # preflight.Report, Console
    """Compact: one entry per error/warning (+ fix), then counts; `verbose`: every check in a table."""
    from rich.markup import escape

    from sparkctl.commands._findings import render_findings

    out = out or console()
    out.print(
        f"[bold]preflight[/] {escape(report.cluster)} / mode {escape(report.mode)} "
        f"({escape(', '.join(report.nodes))})",
        soft_wrap=True,
    )
    if verbose:
        out.print(_table(report))
    else:
        render_findings([f for f in report.findings if f.severity.value in ("error", "warn")], out=out)
    parity = _parity_table(report, verbose)
    if parity is not None:
        out.print(parity)
    counts = {sev: sum(f.severity.value == sev for f in report.findings) for sev in ("ok", "skip")}
    more = "" if verbose else "  (-v: every check)"
    out.print(f"{counts['ok']} passed, {counts['skip']} skipped{more}", soft_wrap=True)
    verdict = "[bold green]passed[/]" if report.ok else "[bold red]failed[/]"
    n_err, n_warn = len(report.errors), len(report.warnings)
    out.print(
        f"preflight {verdict}: {n_err} error{'s' * (n_err != 1)}, {n_warn} warning{'s' * (n_warn != 1)} "
        f"in {report.elapsed_s:.2f}s"
    )
    if not report.ok:
        out.print("fix the errors, or `--ignore CHECK` to downgrade one")


def _parity_table(report, verbose: bool):  # rich Table or None
    """NodeParity's one table (field x node), when it found a difference or with -v."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    found = [f for f in report.findings if f.check == "NodeParity"]
    rows = next((f.data["table"] for f in found if "table" in f.data), None)
    if rows is None or not (verbose or any(f.severity.value in ("error", "warn") for f in found)):
        return None
    sev = {f.data.get("field"): f.severity.value for f in found if f.data.get("field")}
    nodes = list(dict.fromkeys(n for per in rows.values() for n in per))
    table = Table(title="node parity", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("")
    for n in nodes:
        table.add_column(n, overflow="fold")
    for name, per in rows.items():
        color = COLORS.get(sev.get(name, "ok"), "")
        table.add_row(f"[{color}]{name}[/]", *(escape(per.get(n) or "?") for n in nodes))
    return table


def _table(report):  # rich Table from a preflight Report
    """Every finding; the fix goes under the detail in the same cell, wrapped by word."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("node", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("detail / fix", overflow="fold", ratio=1)
    for f in report.findings:
        sev = f.severity.value
        place = (f.node or "-") + ("" if f.rank is None else f" r{f.rank}")
        detail = escape(f.message) + (f"\n[yellow]fix:[/] {escape(f.fix)}" if f.fix and sev != "ok" else "")
        table.add_row(place, f.check, f"[{COLORS[sev]}]{sev.upper()}[/]", detail)
    return table


def register(app: typer.Typer) -> None:
    app.command("preflight")(preflight_cmd)
