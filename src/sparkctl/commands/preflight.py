"""`sparkctl preflight [MODE]`: every node and fabric check at once, each with its fix."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_profile, print_json
from sparkctl.commands._findings import COLORS

ModeArg = Annotated[str | None, typer.Argument(help="Mode to check (default: the profile's default mode).")]
IgnoreOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--ignore", help="Downgrade a check's errors to warnings (repeatable; 'all' for every check)."
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
def preflight(
    mode: ModeArg = None,
    profile: ProfileOpt = None,
    ignore: IgnoreOpt = None,
    only: OnlyOpt = None,
    json_out: JsonOpt = False,
    accept_new_host_keys: AcceptOpt = False,
    sysfs_root: SysfsOpt = "/sys",
    deep: Annotated[
        bool,
        typer.Option("--deep", help="WeightsContent rehashes every byte on every node instead of "
                     "trusting the quick check (size+mtime+inode, like rsync)."),
    ] = False,
) -> None:
    """Check every node of MODE (SSH, fabric MTU/ping/RoCE, Docker, GPUs, image, weights, disk,
    ports, stray containers, memory). Exit 0 only without errors; --ignore CHECK downgrades."""
    from sparkctl.connectors import NodePool
    from sparkctl.plan import build_plan
    from sparkctl.preflight import run_preflight, validate_names

    # kubeadm style `--ignore Mtu,PingDf` too; unknown names are usage errors before any connection.
    ignore = [n for item in ignore or [] for n in item.split(",") if n]
    only = [n for item in only or [] for n in item.split(",") if n]
    validate_names(set(ignore), "--ignore")
    if only:
        validate_names(set(only), "--only")
    prof = load_profile(profile)
    plan = build_plan(prof, mode)
    with NodePool(prof, accept_new_host_keys=accept_new_host_keys) as pool:
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
        render_report(report)
    if not report.ok:
        raise typer.Exit(1)


def render_report(report) -> None:  # noqa: ANN001 - sparkctl.preflight.Report, imported lazily
    from rich.markup import escape
    from rich.table import Table

    out = console()
    table = Table(title=f"preflight {report.cluster} / mode {report.mode} ({', '.join(report.nodes)})")
    for col, kw in (("node", {"no_wrap": True}), ("check", {"no_wrap": True}), ("status", {"no_wrap": True}),
                    ("detail", {"overflow": "fold"}), ("fix", {"overflow": "fold"})):  # fmt: skip
        table.add_column(col, **kw)
    for f in report.findings:
        sev = f.severity.value
        where = f.node or "-"
        if f.rank is not None:
            where += f" r{f.rank}"
        table.add_row(
            where, f.check, f"[{COLORS[sev]}]{sev.upper()}[/]", escape(f.message), escape(f.fix or "")
        )
    out.print(table)
    for f in report.errors:
        out.print(f"[bold red]\\[ERROR {escape(f.key)}][/] {escape(f.message)}")
    verdict = "[bold green]passed[/]" if report.ok else "[bold red]failed[/]"
    out.print(
        f"preflight {verdict}: {len(report.errors)} error(s), {len(report.warnings)} warning(s) "
        f"in {report.elapsed_s:.2f}s" + ("" if report.ok else "  (fix them, or --ignore CHECK to downgrade)")
    )


def register(app: typer.Typer) -> None:
    app.command("preflight")(preflight)
