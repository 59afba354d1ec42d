"""Options and error handling shared by every command module (light imports only)."""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

ProfileOpt = Annotated[
    Path | None,
    typer.Option(
        "--profile",
        "-p",
        help="Cluster profile YAML (default: $SPARKCTL_PROFILE, else ./sparkctl.yaml).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
GuardOpt = Annotated[
    bool | None,
    typer.Option(
        "--guard/--no-guard",
        help="The node-side memory guard (docs/memory.md): on (--guard) or off on every node of the "
        "mode. Default: memory.guard.enabled (auto: the unified-memory nodes).",
    ),
]

F = TypeVar("F", bound=Callable[..., Any])

# Import name -> pip name, where they differ.
PIP_NAMES = {"yaml": "pyyaml", "docker": "docker", "openai": "openai"}


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def error_json(exc: BaseException, code: int) -> dict[str, Any]:
    """The one `--json` failure object: {"ok": false, "error": {code, message, fix, node, rank}}
    (+ what the error adds in `json_extra`, e.g. a failed rank's log tail)."""
    error = {
        "code": code,
        "message": getattr(exc, "message", None) or str(exc) or type(exc).__name__,
        "fix": getattr(exc, "fix", None),
        "node": getattr(exc, "node", None),
        "rank": getattr(exc, "rank", None),
    }
    out: dict[str, Any] = {"ok": False, "error": {**error, **(getattr(exc, "json_extra", None) or {})}}
    also = getattr(exc, "also", None)
    if also:
        out["also"] = [error_json(e, getattr(e, "exit_code", code))["error"] for e in also]
    return out


# Lines are wrapped by word to the console width, with a hanging indent: a `command` in backticks
# is never split (one that does not fit starts its own line), so a fix stays copyable at 80
# columns and when piped.
_TOKEN = re.compile(r"`[^`]*`\S*|\S+")


def wrap_words(text: str, width: int, indent: int = 0, first: int | None = None) -> list[str]:
    """Greedy word wrap; backticked spans are one token. `first`: room on the first line (else width).
    Continuation lines are returned without their indent (the caller adds it)."""
    lines: list[str] = []
    line, room = "", (width if first is None else first)
    for tok in _TOKEN.findall(text):
        if line and len(line) + 1 + len(tok) > room:
            lines.append(line)
            line, room = tok, width - indent
        else:
            line = f"{line} {tok}" if line else tok
    lines.append(line)
    return lines


def print_wrapped(
    out, prefix_markup: str, prefix_len: int, text: str, indent: int, style: str = ""
) -> None:  # rich Console
    """`prefix` then `text` wrapped to the console, continuation lines indented by `indent`."""
    from rich.markup import escape

    width = max(out.width, 40)
    parts = wrap_words(text, width, indent, first=width - prefix_len)
    for i, part in enumerate(parts):
        body = f"[{style}]{escape(part)}[/]" if style else escape(part)
        out.print((prefix_markup if i == 0 else " " * indent) + body, soft_wrap=True)


def progress_line(text: str) -> None:
    """A dim line on stderr while a command waits (stdout keeps its output, or its JSON, alone)."""
    from rich.markup import escape

    console(stderr=True).print(f"[dim]{escape(text)}...[/]", soft_wrap=True)


def handle_errors(fn: F) -> F:
    """Expected errors print one red line (+ fix) and exit with their code; bugs raise.
    With `--json`, a failure also prints `error_json` on stdout (and nothing else there)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from sparkctl import fanout
        from sparkctl.errors import ExitCode, SparkctlError

        before, fanout.notice = fanout.notice, progress_line  # a wait over 2 s says what it waits for
        global running_command
        group, name = fn.__module__.rpartition(".")[2], fn.__name__.removesuffix("_cmd").replace("_", "-")
        running_command = name if name.split("-")[0] == group else f"{group} {name}"
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise  # the command chose its exit (and printed its own output)
        except SparkctlError as exc:
            if loaded_profile is not None:  # a refusal of the plan names the key's file:line
                from sparkctl.profile.load import place_in_profile

                place_in_profile(exc, loaded_profile)
            if kwargs.get("json_out"):
                print_json(error_json(exc, exc.exit_code))
            if os.environ.get("SPARKCTL_DEBUG"):
                raise
            from rich.markup import escape

            err = console(stderr=True)
            for one in [exc, *exc.also]:
                where = f"[{one.where()}] " if one.where() else ""
                # Wrapped by word with a hanging indent; a `command` is never split across lines.
                print_wrapped(err, f"[bold red]error[/] {escape(where)}", 6 + len(where), one.message, 6)
                if one.fix:
                    print_wrapped(err, "  [yellow]fix:[/] ", 7, with_profile(one.fix), 7)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            if kwargs.get("json_out"):
                print_json(error_json(SparkctlError("interrupted"), ExitCode.INTERRUPTED))
            console(stderr=True).print("[yellow]interrupted[/]")
            raise typer.Exit(ExitCode.INTERRUPTED) from None
        except ModuleNotFoundError as exc:  # a broken install: say which package, not a traceback
            if os.environ.get("SPARKCTL_DEBUG") or not exc.name:
                raise
            pkg = PIP_NAMES.get(exc.name.split(".")[0], exc.name.split(".")[0])
            err = console(stderr=True)
            err.print(
                f"[bold red]error[/] the Python package '{pkg}' is not installed (this command needs it)"
            )
            err.print(
                f"  [yellow]fix:[/] python3 -m pip install '{pkg}' (or reinstall: python3 -m pip install -e .)"
            )
            raise typer.Exit(ExitCode.USAGE) from None
        except Exception as exc:
            if kwargs.get("json_out"):  # a bug: still one object on stdout; the traceback follows
                print_json(error_json(SparkctlError(f"internal error: {type(exc).__name__}: {exc}"), 1))
            raise
        finally:
            fanout.notice = before

    return wrapper  # type: ignore[return-value]


running_command = "this command"  # `handle_errors` records the command it runs: "up", "persist install"

# `sparkctl -p X CMD`: the root callback records X here (None when not given) for every run.
root_profile: Path | None = None


def group_profile(profile: ProfileOpt = None) -> None:
    """The callback of a command group (`profile`, `image`): `sparkctl profile -p X check` too."""
    global root_profile
    if profile is not None:
        root_profile = profile


def add_group(app: typer.Typer, name: str, help: str, commands: dict[str, Callable[..., Any]]) -> None:
    """`sparkctl NAME COMMAND`: a command group with its own --help, `-p` before COMMAND too."""
    group = typer.Typer(help=help, no_args_is_help=True, callback=group_profile)
    for command, fn in commands.items():
        group.command(command)(fn)
    app.add_typer(group, name=name)


# The -p the user gave this run (None: $SPARKCTL_PROFILE or ./sparkctl.yaml, found again anyway).
given_profile: Path | None = None
# The profile file this run loaded (the root callback clears it): errors are placed in it.
loaded_profile: Path | None = None


def load_profile(path: Path | None, fleet: bool = False):
    """Find and validate the profile (whole file, before any connection). A fleet (`models:`) is
    refused unless the command plans fleets (`fleet`): `up` and the rest run one model today."""
    from sparkctl.profile import find_profile, load_profile_file

    global given_profile, loaded_profile
    given_profile = path or root_profile
    found = find_profile(given_profile)
    prof = load_profile_file(found)
    loaded_profile = found
    if prof.models and not fleet:
        raise fleet_not_yet(prof)
    return prof


def load_service(path: Path | None, selection: str | None, judge: bool = False):
    """(profile, MODE) for a command that runs one model: a single-model profile and MODE as
    given; in a fleet, `SERVICE[:MODE]` -> that service's view (its own cluster, containers and
    state: planning/fleet_view.py) and MODE (None: what runs, else its default). `judge`: a fleet
    whose budgets do not fit its nodes is refused first (with the fix), as `plan` refuses it."""
    prof = load_profile(path, fleet=True)
    if not prof.models:
        return prof, selection
    if judge:
        from sparkctl.planning.fleet import plan_fleet

        plan_fleet(prof)
    from sparkctl.errors import UsageError
    from sparkctl.planning.fleet_view import service_view

    name, sep, mode = (selection or "").partition(":")
    if name not in prof.models:
        given = f"'{name}' is not one of its services" if name else "no service named"
        raise UsageError(
            f"`sparkctl {running_command}` runs one service of this fleet, and {given} "
            f"({', '.join(prof.models)})",
            fix=f"name it: `sparkctl {running_command} {next(iter(prof.models))}` (SERVICE[:MODE])",
        )
    if sep and mode not in prof.models[name].modes:
        raise UsageError(
            f"unknown mode '{mode}' of service '{name}'",
            fix=f"its modes: {', '.join(prof.models[name].modes)}",
        )
    return service_view(prof, name), (mode or None)


def endpoint_profile(path: Path | None, mode: str | None, url: str | None, model: str | None):
    """(a loader, MODE) for verify and bench: nothing loaded for --url; a fleet with --model: the
    fleet (its one endpoint); a fleet's SERVICE[:MODE]: that service's view."""
    if url:
        return (lambda: load_profile(path)), mode
    prof = load_profile(path, fleet=True)
    if not prof.models or model:
        return (lambda: prof), mode
    view, mode = load_service(path, mode)
    return (lambda: view), mode


def fleet_not_yet(prof):  # -> UsageError
    """The one "not yet" of a command that runs one model, given a fleet (docs/fleet.md)."""
    from sparkctl.errors import UsageError

    return UsageError(
        f"not yet: `sparkctl {running_command}` runs one model per profile, and this profile is a fleet of "
        f"{len(prof.models)} service(s) ({', '.join(prof.models)}); this command does not take a fleet yet",
        fix="up, switch, down, status, logs, top, preflight, ship, verify, bench, supervise, "
        "diagnose and export k8s take a fleet (SERVICE[:MODE]); for this one, give the service a "
        "profile of its own with its image, model, engine and modes at the top level (docs/fleet.md)",
    )


def with_profile(text: str) -> str:
    """A next step (`sparkctl up tp2`) as the user must type it: with the -p they gave."""
    if given_profile is None:
        return text
    import re
    import shlex

    return re.sub(r"`sparkctl (?!-p )(?=[a-z])", f"`sparkctl -p {shlex.quote(str(given_profile))} ", text)


def print_json(data: Any) -> None:
    import json

    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
