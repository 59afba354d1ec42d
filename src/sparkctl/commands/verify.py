"""`sparkctl verify [MODE]`: check the served endpoint with the official OpenAI SDK."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_profile, print_json

ModeArg = Annotated[
    str | None, typer.Argument(help="Mode whose endpoint to check (default: the profile's default).")
]
UrlOpt = Annotated[str | None, typer.Option("--url", help="Endpoint (http://host:port); skips the profile.")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Served model name (with --url).")]
OnlyOpt = Annotated[
    list[str] | None, typer.Option("--only", help="Run checks whose name starts with this (repeatable).")
]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="Seconds per request.")]


@handle_errors
def verify(
    mode: ModeArg = None,
    profile: ProfileOpt = None,
    url: UrlOpt = None,
    model: ModelOpt = None,
    only: OnlyOpt = None,
    timeout: TimeoutOpt = 120.0,
    json_out: JsonOpt = False,
) -> None:
    """Check the endpoint: models, chat, streaming usage, Responses effort tiers, typed history,
    tools, json_schema, sampling, prefix-cache reporting, streamed token ids. Exit 1 on any failure."""
    from sparkctl.errors import ExitCode, UsageError
    from sparkctl.findings import Severity
    from sparkctl.lifecycle.endpoint import resolve_endpoint
    from sparkctl.verify.checks import select
    from sparkctl.verify.runner import verify as run_verify

    base, served, config_hash, _ = resolve_endpoint(lambda: load_profile(profile), mode, url, model)
    if only and not select(only):
        raise UsageError(f"no check matches {only}", fix="see docs/verify-bench.md for the check names")
    out = console()
    live = None if json_out else (lambda f: out.print(_line(f)))
    if not json_out:
        out.print(f"[bold]verify[/] {base}  model [bold]{served}[/]")
    findings = run_verify(base, served, only=only, timeout_s=timeout, on_result=live)
    failed = [f for f in findings if f.severity == Severity.ERROR]
    if json_out:
        print_json(
            {
                "url": base,
                "model": served,
                "config_hash": config_hash,
                "passed": not failed,
                "checks": [f.to_json() for f in findings],
            }
        )
    else:
        render_summary(findings)
    if failed:
        raise typer.Exit(ExitCode.CHECK_FAILED)


def _line(f) -> str:  # noqa: ANN001 - sparkctl.findings.Finding
    from rich.markup import escape

    pad = " " * max(0, 26 - len(f.check))  # padded on the raw name: escaping adds backslashes
    if f.severity.value == "ok":
        return f"  [green]pass[/] {escape(f.check)}{pad} {escape(f.message)}"
    return (
        f"  [bold red]FAIL[/] {escape(f.check)}{pad} {escape(f.message)}\n"
        f"       [yellow]usually:[/] {escape(f.fix or '')}"
    )


def render_summary(findings) -> None:  # noqa: ANN001
    failed = [f.check for f in findings if f.severity.value == "error"]
    colour = "red" if failed else "green"
    line = f"[bold {colour}]{len(findings) - len(failed)}/{len(findings)} checks passed[/]"
    if failed:
        from rich.markup import escape

        line += " (failed: " + escape(", ".join(failed)) + ")"
    console().print(line)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
