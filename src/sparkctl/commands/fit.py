"""`sparkctl fit [MODE]`: will the planned launch fit in GPU memory, and what fixes it if not."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sparkctl.commands import _common
from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_profile, print_json
from sparkctl.commands._findings import place_flags, render_findings

ModeArg = Annotated[
    str | None,
    typer.Argument(
        metavar="MODE",
        help="Mode to check (default: the profile's default mode); a fleet: SERVICE[:MODE].",
    ),
]
DirOpt = Annotated[
    Path | None, typer.Option(help="Model directory with config.json + *.safetensors (headers).")
]


ParserTimeoutOpt = Annotated[
    float, typer.Option(help="Seconds to wait for the engine's parser inside the image before falling back.")
]


@handle_errors
def fit_cmd(
    mode: ModeArg = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
    target_dir: DirOpt = None,
    draft_dir: DirOpt = None,
    parse_flags: Annotated[
        bool, typer.Option(help="Check the flags with the engine's parser (image, else local).")
    ] = True,
    probe: Annotated[
        bool,
        typer.Option(
            help="Probe free GPU memory (MemAvailable on unified memory) and "
            "use the image's parser on nodes that are reachable."
        ),
    ] = True,
    parser_timeout: ParserTimeoutOpt = 30.0,
    allow_missing: Annotated[
        bool, typer.Option(help="Without the model on disk, check flags and rules only instead of failing.")
    ] = False,
    min_requests: Annotated[
        int,
        typer.Option(
            min=1, help="Running requests a fix must leave room for when --max-running-requests is not set."
        ),
    ] = 4,
    headroom_gib: Annotated[
        float,
        typer.Option(min=0.0, help="A fix must still fit with this much less free GPU memory than measured."),
    ] = 1.0,
) -> None:
    """Predict the engine's memory (SGLang: weights, mamba state, KV tokens, running requests; vLLM:
    its --gpu-memory-utilization budget) and the error it would die with; check the flags with the
    engine's own parser; print flags that fit."""
    from sparkctl.engines import launch_safety
    from sparkctl.engines.support.launch_check import LaunchRequest, Margin
    from sparkctl.errors import ExitCode
    from sparkctl.findings import Severity
    from sparkctl.planning.build import build_plan

    prof = load_profile(profile, fleet=True)
    if prof.models:
        prof, plan = _fleet_service(prof, mode)
    else:
        plan = build_plan(prof, mode)
    err = console(stderr=True)
    request = LaunchRequest(
        reach=probe,
        parser_timeout=parser_timeout,
        parse_flags=parse_flags,
        target_dir=target_dir,
        draft_dir=draft_dir,
        require_models=not allow_missing,
        margin=Margin(min_requests=min_requests, headroom_mib=int(headroom_gib * 1024)),
        progress=None if json_out else (lambda msg: err.print(f"[dim]{msg}...[/]")),
        build=build_plan,  # the layouts of the same boxes when the mode does not split over them
    )
    result = launch_safety(prof.engine.kind, "fit").launch_check(plan, prof, request)
    result.findings[:] = place_flags(result.findings, _common.loaded_profile, plan.mode)
    if json_out:
        print_json(fit_json(plan, result))
    else:
        render(plan, result)
    if any(f.severity == Severity.ERROR for f in result.findings):
        raise typer.Exit(ExitCode.CHECK_FAILED)


def fit_json(plan, result) -> dict:  # Plan, LaunchCheck: `fit --json`'s object (init --from-command's too)
    return {
        "mode": plan.mode,
        "memory": result.memory.to_json() if result.memory else None,
        "findings": [f.to_json() for f in result.findings],
        "fixes": [
            {
                "flags": f.changes,
                "why": f.why,
                "tradeoff": f.tradeoff,
                "kv_tokens": f.plan.kv_tokens,
                "max_running_requests": f.plan.max_running_requests,
            }
            for f in result.memory_fixes
        ],
        "fix": result.fix,
        "layouts": [o.to_json() for o in result.layouts],
    }


def _fleet_service(prof, text: str | None):  # (Profile, Plan): the service as its own profile
    """`fit SERVICE[:MODE]` of a fleet: that service's plan in its mode (default: its default)."""
    from sparkctl.errors import UsageError
    from sparkctl.planning.fleet import service_plan
    from sparkctl.profile.fleet import service_profile

    name, _, mode = (text or "").partition(":")
    if not name:
        raise UsageError(
            "fit of a fleet checks one service: name it",
            fix=f"`sparkctl fit SERVICE` or `sparkctl fit SERVICE:MODE` (services: {', '.join(prof.models)})",
        )
    view = service_profile(prof, name)
    if mode and mode not in view.modes:
        raise UsageError(
            f"unknown mode '{mode}' of service '{name}'", fix=f"its modes: {', '.join(view.modes)}"
        )
    return view, service_plan(prof, name, mode or view.default_mode()).plan


def render(plan, result, out=None) -> None:  # Plan, LaunchCheck, Console (lazy imports)
    from rich.markup import escape
    from rich.table import Table

    out = out or console()
    m = result.memory
    if m is not None:
        t = Table(title=f"{plan.mode}: {m.heading()}", title_justify="left")
        t.add_column("per rank", style="bold")
        t.add_column("value", justify="right")
        for k, v in [*m.rows(), ("verdict", "[green]fits[/]" if m.fits else "[red]does not fit[/]")]:
            t.add_row(k, v)
        out.print(t)
        for note in m.notes:
            out.print(f"[dim]note: {escape(note)}[/]")
        out.print(f"[dim]{escape(m.terms_line())}[/]")
    render_findings(result.findings, out=out)
    if result.fix:
        flags = " ".join(
            f"--{k}" + ("" if v is True else f" {v}") for k, v in result.fix.items() if v is not None
        )
        out.print(f"[bold]proposed flags:[/] {escape(flags)}")
    for t in (f for f in result.memory_fixes if f.tradeoff):
        out.print(f"[yellow]trade-off:[/] {escape(t.flags)} ({escape(t.why)})")
    if result.layouts:
        from sparkctl.commands._layouts import render_layouts

        render_layouts(plan, result.layouts, out)


def register(app: typer.Typer) -> None:
    app.command("fit")(fit_cmd)
