"""`sparkctl fit [MODE]`: will the planned launch fit in GPU memory, and what fixes it if not."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_profile, print_json
from sparkctl.commands._findings import render_findings

ModeArg = Annotated[str | None, typer.Argument(help="Mode to check (default: the profile's default mode).")]
DirOpt = Annotated[
    Path | None, typer.Option(help="Model directory with config.json + *.safetensors (headers).")
]


@handle_errors
def fit(
    mode: ModeArg = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
    target_dir: DirOpt = None,
    draft_dir: DirOpt = None,
    parse_flags: Annotated[bool, typer.Option(help="Also check the flags with SGLang's parser.")] = False,
) -> None:
    """Predict SGLang's memory pools (weights, mamba state, KV tokens, running requests) and the
    error it would die with; print flags that fit."""
    from sparkctl.errors import ExitCode
    from sparkctl.findings import Severity
    from sparkctl.launch.check import check_plan
    from sparkctl.plan import build_plan

    prof = load_profile(profile)
    plan = build_plan(prof, mode)
    result = check_plan(plan, prof, target_dir=target_dir, draft_dir=draft_dir, parse_flags=parse_flags)
    if json_out:
        print_json({
            "mode": plan.mode,
            "memory": result.memory.to_json() if result.memory else None,
            "findings": [f.to_json() for f in result.findings],
            "fixes": [{"flags": f.changes, "why": f.why, "kv_tokens": f.plan.kv_tokens,
                       "max_running_requests": f.plan.max_running_requests} for f in result.memory_fixes],
            "fix": result.fix,
        })  # fmt: skip
    else:
        render(plan, result)
    if any(f.severity == Severity.ERROR for f in result.findings):
        raise typer.Exit(ExitCode.CHECK_FAILED)


def render(plan, result) -> None:  # noqa: ANN001 - Plan, LaunchCheck (lazy imports)
    from rich.markup import escape
    from rich.table import Table

    out = console()
    m = result.memory
    if m is not None:
        gib = 1 << 30
        t = Table(title=f"{plan.mode}: {m.gpu}, tp={m.tp}, SGLang {m.ruleset} rules", title_justify="left")
        t.add_column("per rank", style="bold")
        t.add_column("value", justify="right")
        rows = [
            ("mem fraction static", f"{m.mem_fraction_static:.3f} ({m.mem_fraction_source})"),
            ("free before load", f"{m.free_before_load / gib:.2f} GiB"),
            ("target weights", f"{m.target_weights_per_rank / gib:.2f} GiB"),
            ("draft weights", f"{m.draft_weights_per_rank / gib:.2f} GiB"),
            ("free after load", f"{m.free_after_load / gib:.2f} GiB"),
            ("reserved (1 - fraction)", f"{m.static_slack / gib:.2f} GiB"),
            ("left after load", f"{m.rest_after_load / gib:.2f} GiB"),
        ]
        if m.mamba is not None:
            rows += [
                (
                    "mamba state / request",
                    f"{m.mamba.per_req_bytes / (1 << 20):.1f} MiB ({m.mamba.strategy})",
                ),
                ("mamba slots", f"{m.mamba.slots} ({m.mamba.ratio} per request)"),
                ("spec mamba scratch", f"{m.mamba.intermediate_bytes / gib:.2f} GiB"),
            ]
        rows += [
            ("KV budget", f"{m.kv_budget / gib:.2f} GiB"),
            ("KV bytes / token", f"{m.kv_cell_bytes} (draft {m.kv_cell_draft_bytes})"),
            ("KV tokens", f"{m.kv_tokens:,}"),
            ("max running requests", str(m.max_running_requests)),
            ("verdict", "[green]fits[/]" if m.fits else "[red]does not fit[/]"),
        ]
        for k, v in rows:
            t.add_row(k, v)
        out.print(t)
        for note in m.notes:
            out.print(f"[dim]note: {escape(note)}[/]")
    render_findings(result.findings)
    if result.fix:
        flags = " ".join(
            f"--{k}" + ("" if v is True else f" {v}") for k, v in result.fix.items() if v is not None
        )
        out.print(f"[bold]proposed flags:[/] {escape(flags)}")


def register(app: typer.Typer) -> None:
    app.command("fit")(fit)
