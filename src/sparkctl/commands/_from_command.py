"""`sparkctl init --from-command`: the profile a launch line becomes, written or printed (YAML, or
with --json one object), then `fit` on it (docs/init.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from sparkctl.commands._common import console, print_json


def gpu_spec(text: str) -> tuple[dict, None]:
    from sparkctl.errors import UsageError

    parts = [p.strip() for p in text.split(",")]
    try:
        if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] != "unified"):
            raise ValueError
        spec = {"name": parts[0], "memory_gib": float(parts[1]), "compute_capability": parts[2]}
    except ValueError:
        raise UsageError(
            f"--gpu {text!r}: not NAME,GIB,CC[,unified]", fix="e.g. --gpu 'NVIDIA GeForce RTX 3090,24,8.6'"
        ) from None
    return spec | ({"unified_memory": True} if len(parts) == 4 else {}), None


def local_gpu() -> tuple[dict | None, int | None]:
    """This machine's GPUs (nvidia-smi through the local connector), as init's discovery reads them."""
    from sparkctl.connectors.local import LocalConnector
    from sparkctl.errors import SparkctlError
    from sparkctl.facts.gpu import gpus_probe, meminfo_probe

    conn = LocalConnector("local")
    try:
        report = gpus_probe().run(conn)
    except (
        SparkctlError,
        ValueError,
    ):  # a failing or unreadable nvidia-smi: no GPU facts, as init's discovery
        return None, None
    if report is None or not report.gpus or not report.gpus[0].compute_cap:
        return None, None
    g = report.gpus[0]
    mib = g.memory_total_mib or 0
    if report.unified_memory:
        try:
            mib = meminfo_probe().run(conn).get("MemTotal", 0) / 1024
        except SparkctlError:
            mib = 0
    spec = {"name": g.name, "memory_gib": round(mib / 1024, 1), "compute_capability": g.compute_cap}
    spec |= {"unified_memory": True} if report.unified_memory else {}
    return (spec if mib > 0 else None), len(report.gpus)


def write_and_fit(
    req, output: Path | None, force: bool, probe: bool, json_out: bool
) -> None:  # FromCommandRequest
    """Write the profile (stdout, or -o without overwriting), name what was not taken, then `fit`
    it where every node is known, else the next steps. With `json_out` stdout holds one object
    only: {ok, mode, profile (the YAML), written, notes, placeholders, fit (fit --json's), next}."""
    from rich.markup import escape

    from sparkctl.commands._findings import render_findings
    from sparkctl.discover.from_command import from_command
    from sparkctl.errors import ExitCode, UsageError
    from sparkctl.findings import Severity

    result = from_command(req)
    err = console(stderr=True)
    if output is None:
        if not json_out:
            typer.echo(result.text, nl=False)
    elif output.exists() and not force and output.read_text() != result.text:
        raise UsageError(
            f"{output} exists; not overwritten", fix="rerun with --force to overwrite, or -o OTHER.yaml"
        )
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(result.text)
        if not json_out:
            err.print(f"[green]wrote {escape(str(output))}[/] (mode {escape(result.mode)})")
    if not json_out:
        render_findings(result.findings, out=err)
    where = f" -p {output}" if output else " -p FILE"
    failed = any(f.severity == Severity.ERROR for f in result.findings)
    fit = None
    if not result.unknown_nodes:
        fit = _fit(result, probe and not result.placeholders, None if json_out else err)
        failed = failed or any(f["severity"] == Severity.ERROR.value for f in fit["findings"])
    steps = (
        [f"sparkctl profile check{where}", f"sparkctl fit{where} {result.mode}"]
        if result.placeholders
        else []
    )
    if json_out:
        print_json(
            {
                "ok": not failed,
                "mode": result.mode,
                "profile": result.text,
                "written": str(output) if output else None,
                "notes": [f.to_json() for f in result.findings],
                "placeholders": result.placeholders,
                "fit": fit,
                "next": steps,
            }
        )
    elif result.placeholders:
        err.print("[bold]next:[/] check or fill in " + escape(", ".join(result.placeholders)))
        err.print(escape("then: " + " && ".join(steps)))
    if failed:
        raise typer.Exit(ExitCode.CHECK_FAILED)


def _fit(result, probe: bool, err) -> dict:  # FromCommand, Console | None (JSON: silent)
    """`fit` on the profile: rendered on `err`, and fit --json's object (an engine without launch
    checks: none, the profile stands as written)."""
    from sparkctl.commands.fit import fit_json, render
    from sparkctl.engines import get_engine
    from sparkctl.engines.support.launch_check import LaunchRequest
    from sparkctl.planning.build import build_plan

    launch = get_engine(result.profile.engine.kind).launch
    if launch is None:
        return {"mode": result.mode, "findings": [], "checked": False}
    plan = build_plan(result.profile, result.mode)
    request = LaunchRequest(
        reach=probe,
        require_models=False,
        progress=None if err is None else (lambda msg: err.print(f"[dim]{msg}...[/]")),
        build=build_plan,
    )
    if err is not None:
        err.print(f"[bold]fit {result.mode}:[/]")
    check = launch.launch_check(plan, result.profile, request)
    if err is not None:
        render(plan, check, err)
    return fit_json(plan, check)
