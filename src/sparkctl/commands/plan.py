"""`sparkctl plan [MODE]`: print exactly what `up` would run on every rank."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_profile, print_json

if TYPE_CHECKING:
    from sparkctl.secrets import SecretFile

ModeArg = Annotated[
    str | None, typer.Argument(metavar="MODE", help="Mode to plan (default: the profile's default mode).")
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
    """Show the plan: per rank the node, container, image, argv, env (secrets masked), mounts."""
    from sparkctl.planning.build import build_plan

    prof = load_profile(profile)
    result = build_plan(prof, mode)
    checked = launch_check(prof, result, parser_timeout, quiet=json_out) if check else None
    findings = checked.findings if checked else []
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
        if spec.front is not None:
            f = spec.front
            where = f"{f.listen}:{f.port} -> 127.0.0.1:{f.upstream}, refuses {', '.join(f.routes)}"
            table.add_row("front", where)
        table.add_row("argv", " \\\n  ".join(_argv_lines(spec.argv)))
        out.print(Panel(table, title=_panel_title(plan, spec), title_align="left"))
    key = plan.endpoint.api_key
    auth = f"  key {key.describe()}" if key else "  [yellow]no API key[/]"
    out.print(
        f"[bold]endpoint[/] {plan.endpoint.api_base}  model [bold]{plan.endpoint.served_model_name}[/]{auth}"
    )
    for item in plan.warnings:
        out.print(f"[yellow]security:[/] {item}")
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
