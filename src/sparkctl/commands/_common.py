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
        help="Cluster profile YAML (default: $SPARKCTL_PROFILE, else ./sparkctl.yaml).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]

F = TypeVar("F", bound=Callable[..., Any])

# Import name -> pip name, where they differ.
PIP_NAMES = {"yaml": "pyyaml", "docker": "docker", "openai": "openai"}


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def handle_errors(fn: F) -> F:
    """Expected errors print one red line (+ fix) and exit with their code; bugs raise."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from sparkctl.errors import ExitCode, SparkctlError

        try:
            return fn(*args, **kwargs)
        except SparkctlError as exc:
            if os.environ.get("SPARKCTL_DEBUG"):
                raise
            from rich.markup import escape

            from sparkctl.commands._findings import print_wrapped

            err = console(stderr=True)
            where = f"[{exc.where()}] " if exc.where() else ""
            # Wrapped by word with a hanging indent; a `command` is never split across lines.
            print_wrapped(err, f"[bold red]error[/] {escape(where)}", 6 + len(where), exc.message, 6)
            if exc.fix:
                print_wrapped(err, "  [yellow]fix:[/] ", 7, exc.fix, 7)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            console(stderr=True).print("[yellow]interrupted[/]")
            raise typer.Exit(ExitCode.INTERRUPTED) from None
        except ModuleNotFoundError as exc:  # a broken install: say which package, not a traceback
            if os.environ.get("SPARKCTL_DEBUG") or not exc.name:
                raise
            pkg = PIP_NAMES.get(exc.name.split(".")[0], exc.name.split(".")[0])
            err = console(stderr=True)
            err.print(f"[bold red]error[/] the Python package '{pkg}' is not installed (this command needs it)")
            err.print(f"  [yellow]fix:[/] python3 -m pip install '{pkg}' (or reinstall: python3 -m pip install -e .)")
            raise typer.Exit(ExitCode.USAGE) from None

    return wrapper  # type: ignore[return-value]


# `sparkctl -p X CMD`: the root callback records X here (None when not given) for every run.
root_profile: Path | None = None


def load_profile(path: Path | None):
    """Find and validate the profile (whole file, before any connection)."""
    from sparkctl.profile import find_profile, load_profile_file

    return load_profile_file(find_profile(path or root_profile))


def print_json(data: Any) -> None:
    import json

    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
