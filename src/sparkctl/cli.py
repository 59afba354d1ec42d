"""The `sparkctl` command line: parse, call the core, render.

Each command lives in `sparkctl.commands.<name>` and exposes `register(app)`. Command modules
import only typer/rich at module level; the core (pydantic, paramiko, docker...) is imported
inside the command body so `sparkctl --help` stays fast.
"""

from __future__ import annotations

import copy
import importlib
import os
import sys

import typer

from sparkctl import __version__
from sparkctl.commands import _common, help_text
from sparkctl.commands._common import ProfileOpt

# Order is the order in `--help`.
COMMAND_MODULES: tuple[str, ...] = (
    "init",
    "profile",
    "plan",
    "fit",
    "preflight",
    "ship",
    "up",
    "down",
    "switch",
    "upgrade",
    "status",
    "logs",
    "supervise",
    "persist",
    "diagnose",
    "top",
    "verify",
    "bench",
    "fabric",
    "image",
    "export",
)

app = typer.Typer(
    name="sparkctl",
    help="Serve LLMs with SGLang (DFlash) or vLLM on one to four GPU boxes: preflight, ship, up, down.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: wraps by word at any width, never cuts a flag name
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sparkctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    profile: ProfileOpt = None,
) -> None:
    """sparkctl reads a YAML cluster profile (-p, $SPARKCTL_PROFILE or ./sparkctl.yaml).

    `-p` works before or after the subcommand; the subcommand's own `-p` wins.
    """
    _common.root_profile = profile
    _common.loaded_profile = None


for _name in COMMAND_MODULES:
    importlib.import_module(f"sparkctl.commands.{_name}").register(app)
help_text.apply(app)


def parser_for(argv: list[str]) -> typer.Typer:
    """The app to parse `argv` with. `sparkctl [-p X] COMMAND ...`: a copy of the app that holds
    COMMAND alone (same root options and callback, same command): typer builds a click command, with
    an adapter per option, for every command the app holds on each run: ~20 ms for all of them,
    which a re-ship of nothing new paid in full. Anything else (no or an unknown command first, root
    --help or --version, shell completion): the whole app, so its help and suggestions are as ever."""
    name = _command_name(argv)
    commands = [c for c in app.registered_commands if c.name == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not (commands or groups) or any(k.endswith("_COMPLETE") for k in os.environ):
        return app
    one = copy.copy(app)
    one.registered_commands, one.registered_groups = commands, groups
    return one


def _command_name(argv: list[str]) -> str | None:
    """COMMAND of `[-p X | --profile X | --profile=X | -pX]... COMMAND ...`; None when any other
    token comes before it (an option of the root's own, such as --help or --version)."""
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in ("-p", "--profile"):
            i += 2
        elif token.startswith(("--profile=", "-p")) and token != "-p":
            i += 1
        else:
            return None if token.startswith("-") else token
    return None


def main() -> None:
    """Run the CLI, then leave without the interpreter's teardown.

    Clearing every module and collecting what the run created (paramiko, pydantic, rich) took
    ~45 ms after the command had finished, a tenth of a re-ship. What Python's exit guarantees still
    happens: non-daemon threads are waited for, exit hooks run, the standard streams are flushed.
    """
    # pydantic looks for plugins (entry points) by reading every installed package's metadata before
    # the first model is built: ~3 ms for 160 packages, for none found. A value the user set is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        parser_for(sys.argv[1:])()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if sys.gettrace() or sys.getprofile() or "coverage" in sys.modules:
        raise SystemExit(code)  # a profiler, debugger or coverage writes its results at exit
    _fast_exit(code)


def _fast_exit(code: object) -> None:
    import atexit
    import contextlib
    import os
    import threading

    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed, status 1, as Python does
        print(code, file=sys.stderr)
        code = 1
    for thread in threading.enumerate():  # as Python's own exit does: non-daemon threads finish
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # logging.shutdown and anything else registered
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: click already exited 1
            stream.flush()
    os._exit(code)
