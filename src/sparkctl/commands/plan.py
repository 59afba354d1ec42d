"""`sparkctl plan [MODE]`: print exactly what `up` would run on every rank."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sparkctl.commands import _common
from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_profile, print_json
from sparkctl.commands._findings import place_flags

if TYPE_CHECKING:
    from sparkctl.secrets import SecretFile

ModeArg = Annotated[
    str | None,
    typer.Argument(
        metavar="MODE",
        help="Mode to plan (default: the profile's default mode); a fleet: SERVICE:MODE[,SERVICE:MODE], "
        "the other services in their default modes.",
    ),
]


CheckOpt = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Also run the launch-safety checks (flags with the engine's parser in the image "
        "on rank 0's node, GPU rules, memory fit); exit 1 on errors.",
    ),
]


ParserTimeoutOpt = Annotated[
    float, typer.Option(help="With --check: seconds to wait for the engine's parser inside the image.")
]


@handle_errors
def plan_cmd(
    mode: ModeArg = None,
    profile: ProfileOpt = None,
    check: CheckOpt = False,
    json_out: JsonOpt = False,
    parser_timeout: ParserTimeoutOpt = 30.0,
) -> None:
    """Show the plan: per rank the node, container, image, argv, env (secrets masked), mounts; of a
    fleet, every service's, with its memory budget per node and the sum per node."""
    from sparkctl.planning.build import build_plan

    prof = load_profile(profile, fleet=True)
    if prof.models:
        plan_fleet_cmd(prof, mode, check, json_out, parser_timeout)
        return
    result = build_plan(prof, mode)
    checked = launch_check(prof, result, parser_timeout, quiet=json_out) if check else None
    findings = place_flags(checked.findings, _common.loaded_profile, result.mode) if checked else []
    layouts = checked.layouts if checked else []
    if json_out:
        extra = {"check": [f.to_json() for f in findings], "layouts": [o.to_json() for o in layouts]}
        print_json({**result.to_json(), **(extra if check else {})})
    else:
        render_plan(result)
        if check:
            from sparkctl.commands._findings import render_findings
            from sparkctl.commands._layouts import render_layouts

            render_findings(findings)
            if layouts:
                render_layouts(result, layouts)
    if any(f.severity == "error" for f in findings):
        raise typer.Exit(1)


def plan_fleet_cmd(prof, selection: str | None, check: bool, json_out: bool, parser_timeout: float) -> None:
    """`plan` of a fleet: refused (exit 2) when the budgets do not fit; --check runs each service's
    launch check on its own plan (exit 1 on errors)."""
    from sparkctl.planning.fleet import plan_fleet
    from sparkctl.profile.fleet import service_profile

    fleet = plan_fleet(prof, selection)
    checked = {
        s.name: launch_check(service_profile(prof, s.name), s.plan, parser_timeout, quiet=json_out)
        for s in (fleet.services if check else [])
    }
    if json_out:
        doc = fleet.to_json()
        if check:
            doc["check"] = {name: [f.to_json() for f in c.findings] for name, c in checked.items()}
        print_json(doc)
    else:
        from sparkctl.commands._findings import render_findings

        out = console()
        for s in fleet.services:
            out.print(f"[bold magenta]service {s.name}[/] mode {s.mode}: {s.plan.shape}")
            render_plan(s.plan)
            if s.name in checked:
                render_findings(checked[s.name].findings)
        render_budgets(fleet)
    if any(f.severity == "error" for c in checked.values() for f in c.findings):
        raise typer.Exit(1)


def render_budgets(fleet, out=None) -> None:  # sparkctl.planning.fleet.FleetPlan (lazy imports)
    """Every service's memory budget on each node it runs on, and the sum per node."""
    from rich.markup import escape
    from rich.table import Table

    out = out or console()
    table = Table(title="memory per node (GiB)", title_justify="left")
    for col in ("node", "service", "mode", "budget", "from"):
        table.add_column(col, justify="right" if col == "budget" else "left")
    modes = {s.name: s.mode for s in fleet.services}
    for n in fleet.nodes:
        for sh in n.shares:
            mode = modes.get(sh.service, "")
            table.add_row(n.node, sh.service, mode, f"{sh.gib:.1f}", escape(sh.basis))
        verdict = "[green]fits[/]" if n.fits else "[red]does not fit[/]"
        cap = "?" if n.capacity_gib is None else f"{n.capacity_gib:.1f}"
        table.add_row(
            n.node,
            "[bold]sum[/]",
            "",
            f"[bold]{n.used_gib:.1f}[/]",
            f"of {cap} ({escape(n.basis)}): {verdict}",
        )
    out.print(table)


def launch_check(prof, plan, parser_timeout: float = 30.0, quiet: bool = False):  # LaunchCheck
    """The engine's launch check: its parser in the image on rank 0's node (a local one when that
    fails), its rules, its memory plan with probed GPU memory."""
    from sparkctl.engines import launch_safety
    from sparkctl.engines.support.launch_check import LaunchRequest
    from sparkctl.planning.build import build_plan

    err = console(stderr=True)
    progress = None if quiet else (lambda msg: err.print(f"[dim]{msg}...[/]"))
    request = LaunchRequest(parser_timeout=parser_timeout, progress=progress, build=build_plan)
    return launch_safety(prof.engine.kind, "plan --check").launch_check(plan, prof, request)


def render_plan(plan) -> None:  # sparkctl.planning.build.Plan, imported lazily
    import shlex

    from rich.panel import Panel
    from rich.table import Table

    out = console()
    out.print(
        f"[bold]cluster[/] {plan.cluster}  [bold]mode[/] {plan.mode}  {plan.shape}  "
        f"[bold]config[/] {plan.config_hash}  [bold]image[/] "
        f"{plan.ranks[0].image} ({plan.image_source})"
    )
    if plan.stop_first:
        out.print("[bold]stops first:[/] " + ", ".join(f"{c.name} on {c.node}" for c in plan.stop_first))
    for spec in [*plan.ranks, *([plan.router] if plan.router else [])]:
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column(overflow="fold")
        table.add_row("container", f"{spec.container_name} ({spec.options.describe()})")
        if spec.env:
            table.add_row("env", "\n".join(f"{k}={shlex.quote(v)}" for k, v in spec.env_masked().items()))
        if spec.secrets:
            table.add_row("secrets", "\n".join(_secret_line(f) for f in spec.secrets))
        if spec.mounts:
            table.add_row(
                "mounts",
                "\n".join(
                    f"{m.source} -> {m.target}" + (" (ro)" if m.read_only else "") for m in spec.mounts
                ),
            )
        if spec.gateway is not None:
            g = spec.gateway
            where = f"{g.listen}:{g.port} -> {g.upstream_host}:{g.upstream_port} ({g.image})"
            routes = ", ".join(f"{m} {t}" for m, t in g.routes)
            key = f"key {g.key.describe()}" if g.key else "no key"
            table.add_row("gateway", f"{where}\n{key}; passes only {routes}, GET /health")
        table.add_row("argv", " \\\n  ".join(_argv_lines(spec.argv)))
        out.print(Panel(table, title=_panel_title(plan, spec), title_align="left"))
    key = plan.endpoint.api_key
    auth = f"  key {key.describe()}" if key else "  [yellow]no API key[/]"
    out.print(
        f"[bold]endpoint[/] {plan.endpoint.api_base}  model [bold]{plan.endpoint.served_model_name}[/]{auth}"
    )
    for item in plan.warnings:
        out.print(f"[yellow]security:[/] {item}")
    for item in plan.notes:
        out.print(f"note: {item}")
    for item in plan.addresses:
        out.print(f"address: {item}")
    for item in plan.unresolved:
        out.print(f"[yellow]resolved at up:[/] {item}")


def _panel_title(plan, spec) -> str:
    if spec.role == "router":
        return f"router on {spec.node} (serves the endpoint, sglang-router)"
    where = f"rank {spec.node_rank} of replica {spec.group}" if plan.replicas > 1 else f"rank {spec.rank}"
    return f"{where} on {spec.node}" + (" (serves HTTP)" if spec.node_rank == 0 else " (headless)")


def _secret_line(f: SecretFile) -> str:
    how = "bind-mounted read-only" if f.bind else "on the node's tmpfs, 0400, mounted read-only"
    what = f"{f.target} [{f.yaml_key}]" if f.yaml_key else f.target
    return f"{what} = {f.ref.describe()} ({how})"


def _argv_lines(argv: list[str]) -> list[str]:
    """One flag (with its values) per line, shell-quoted: copy-pasteable."""
    import shlex

    lines: list[str] = []
    for word in argv:
        if word.startswith("--") or not lines:
            lines.append(shlex.quote(word))
        else:
            lines[-1] += " " + shlex.quote(word)
    return lines


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
