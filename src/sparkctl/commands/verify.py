"""`sparkctl verify [MODE]`: check the served endpoint with the official OpenAI SDK."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.commands._common import (
    JsonOpt,
    ProfileOpt,
    console,
    endpoint_profile,
    handle_errors,
    print_json,
)

ModeArg = Annotated[
    str | None,
    typer.Argument(metavar="MODE", help="Mode whose endpoint to check (default: the profile's default)."),
]
UrlOpt = Annotated[str | None, typer.Option("--url", help="Endpoint (http://host:port); skips the profile.")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Served model name (with --url).")]
OnlyOpt = Annotated[
    list[str] | None,
    typer.Option("--only", metavar="CHECK", help="Run checks whose name starts with this (repeatable)."),
]
FirstTokenOpt = Annotated[
    float,
    typer.Option(
        "--first-token-timeout",
        min=0.1,
        help="Seconds from a request to its first token (a non-streaming request: to its reply).",
    ),
]
StallOpt = Annotated[
    float,
    typer.Option("--stall-timeout", min=0.1, help="Seconds without any event that make a stream stalled."),
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout", min=0.1, help="Optional limit on each whole request, wall clock (default none)."
    ),
]
DeadlineOpt = Annotated[float, typer.Option("--deadline", min=0.1, help="Seconds for the whole command.")]
ApiKeyOpt = Annotated[
    str | None, typer.Option("--api-key", help="Bearer key to send (prefer --api-key-env: argv is visible).")
]
ApiKeyEnvOpt = Annotated[
    str | None, typer.Option("--api-key-env", help="Send the key held in this environment variable.")
]


@handle_errors
def verify_cmd(
    mode: ModeArg = None,
    profile: ProfileOpt = None,
    url: UrlOpt = None,
    model: ModelOpt = None,
    only: OnlyOpt = None,
    first_token_timeout: FirstTokenOpt = 180.0,
    stall_timeout: StallOpt = 60.0,
    timeout: TimeoutOpt = None,
    deadline: DeadlineOpt = 600.0,
    strict: Annotated[bool, typer.Option("--strict", help="Warnings (optional features) fail too.")] = False,
    api_key: ApiKeyOpt = None,
    api_key_env: ApiKeyEnvOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check the endpoint against the OpenAI API (fail) and the optional features sparkctl uses
    (warn). Exit 1 on any failure (and on warnings with --strict)."""
    import time

    started = time.monotonic()  # --deadline counts from here, SDK import included
    from sparkctl.clients.stream import Limits
    from sparkctl.errors import ExitCode, UsageError
    from sparkctl.lifecycle.endpoint import resolve_endpoint
    from sparkctl.verify.checks import select
    from sparkctl.verify.runner import Stopped
    from sparkctl.verify.runner import verify as run_verify

    ep = resolve_endpoint(*endpoint_profile(profile, mode, url, model), url, model, api_key, api_key_env)
    if only and not select(only):
        raise UsageError(f"no check matches {only}", fix="see docs/verify-bench.md for the check names")
    out = console()
    live = None if json_out else (lambda f: out.print(_line(f)))
    if not json_out:
        out.print(f"[bold]verify[/] {ep.url}  model [bold]{ep.model}[/]")
    try:
        findings = run_verify(
            ep.url,
            ep.model,
            only=only,
            limits=Limits(first_token_timeout, stall_timeout, timeout),
            deadline_s=deadline,
            api_key=ep.api_key,
            on_result=live,
            started=started,
        )
    except Stopped as exc:  # the finished checks are reported (table and JSON), then the error
        _report(ep, exc.findings, strict, json_out, exc)
        stop_with(exc, json_out)
    if _report(ep, findings, strict, json_out, None):
        raise typer.Exit(ExitCode.CHECK_FAILED)


def _report(ep, findings: list, strict: bool, json_out: bool, stopped) -> bool:  # Endpoint, Finding
    """Print the findings (JSON, or the summary line); True when one counts as failed."""
    from sparkctl.findings import Severity

    bad = {Severity.ERROR, Severity.WARN} if strict else {Severity.ERROR}
    failed = [f for f in findings if f.severity in bad]
    if json_out:
        doc = {
            "url": ep.url,
            "model": ep.model,
            "config_hash": ep.config_hash,
            "strict": strict,
            "passed": not failed and stopped is None,
            "counts": {s: sum(f.severity.value == s for f in findings) for s in _COUNTED},
            "checks": [f.to_json() for f in findings],
        }
        if stopped is not None:
            doc["error"] = {"code": stopped.exit_code, "message": stopped.message, "fix": stopped.fix}
        print_json(doc)
    else:
        render_summary(findings)
    return bool(failed)


def stop_with(exc, json_out: bool) -> None:  # SparkctlError
    """After the partial report: the error's own line (on stderr), then its exit code. With --json
    the error is already in the document on stdout."""
    if not json_out:
        raise exc
    from rich.markup import escape

    err = console(stderr=True)
    err.print(f"[bold red]error[/] {escape(exc.message)}")
    if exc.fix:
        err.print(f"  [yellow]fix:[/] {escape(exc.fix)}")
    raise typer.Exit(exc.exit_code)


_COUNTED = ("ok", "warn", "error")
_TAGS = {"ok": "[green]pass[/]", "warn": "[yellow]warn[/]", "error": "[bold red]FAIL[/]"}


def _line(f) -> str:  # sparkctl.findings.Finding
    from rich.markup import escape

    pad = " " * max(0, 26 - len(f.check))  # padded on the raw name: escaping adds backslashes
    line = f"  {_TAGS[f.severity.value]} {escape(f.check)}{pad} {escape(f.message)}"
    if f.severity.value != "ok":
        line += f"\n       [dim]usually:[/] {escape(f.fix or '')}"
    return line


def render_summary(findings) -> None:
    from rich.markup import escape

    by = {s: [f.check for f in findings if f.severity.value == s] for s in ("ok", "warn", "error")}
    colour = "red" if by["error"] else "yellow" if by["warn"] else "green"
    line = f"[bold {colour}]{len(by['ok'])} passed, {len(by['warn'])} warnings, {len(by['error'])} failed[/]"
    if by["error"]:
        line += " (failed: " + escape(", ".join(by["error"])) + ")"
    console().print(line)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_cmd)
