"""Options and error handling shared by every command module (light imports only)."""

from __future__ import annotations

import functools
import os
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
        envvar="SPARKCTL_PROFILE",
        show_envvar=True,
        help="Cluster profile YAML (default: ./sparkctl.yaml).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]

F = TypeVar("F", bound=Callable[..., Any])


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
    return {"ok": False, "error": {**error, **(getattr(exc, "json_extra", None) or {})}}


def handle_errors(fn: F) -> F:
    """Expected errors print one red line (+ fix) and exit with their code; bugs raise.
    With `--json`, a failure also prints `error_json` on stdout (and nothing else there)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from sparkctl.errors import ExitCode, SparkctlError

        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise  # the command chose its exit (and printed its own output)
        except SparkctlError as exc:
            if kwargs.get("json_out"):
                print_json(error_json(exc, exc.exit_code))
            if os.environ.get("SPARKCTL_DEBUG"):
                raise
            from rich.markup import escape

            err = console(stderr=True)
            where = exc.where()
            prefix = f"[bold red]error[/] {escape('[' + where + ']')} " if where else "[bold red]error[/] "
            err.print(prefix + escape(exc.message))
            if exc.fix:
                err.print(f"  [yellow]fix:[/] {escape(exc.fix)}")
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            if kwargs.get("json_out"):
                print_json(error_json(SparkctlError("interrupted"), ExitCode.INTERRUPTED))
            console(stderr=True).print("[yellow]interrupted[/]")
            raise typer.Exit(ExitCode.INTERRUPTED) from None
        except Exception as exc:
            if kwargs.get("json_out"):  # a bug: still one object on stdout; the traceback follows
                print_json(error_json(SparkctlError(f"internal error: {type(exc).__name__}: {exc}"), 1))
            raise

    return wrapper  # type: ignore[return-value]


def load_profile(path: Path | None):
    """Find and validate the profile (whole file, before any connection)."""
    from sparkctl.profile import find_profile, load_profile_file

    return load_profile_file(find_profile(path))


def print_json(data: Any) -> None:
    import json

    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
