"""The `sparkctl` command line: parse, call the core, render.

Each command lives in `sparkctl.commands.<name>` and exposes `register(app)`. Command modules
import only typer/rich at module level; the core (pydantic, paramiko, docker...) is imported
inside the command body so `sparkctl --help` stays fast.
"""

from __future__ import annotations

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

# A command whose module has another name; every other command lives in the module of its name.
MODULE_OF_COMMAND: dict[str, str] = {"fabric-test": "fabric"}

app: typer.Typer  # the whole CLI, every command: built at first use (`__getattr__` below)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sparkctl {__version__}")
        raise typer.Exit()


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


def new_app(modules: tuple[str, ...] = COMMAND_MODULES) -> typer.Typer:
    """The CLI with the commands of `modules` (the root's options, each command's help text)."""
    one = typer.Typer(
        name="sparkctl",
        help="Serve LLMs with SGLang (DFlash) or vLLM on one to four GPU boxes: preflight, ship, up, down.",
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # plain help: wraps by word at any width, never cuts a flag name
    )
    one.callback()(_root)
    for name in modules:
        importlib.import_module(f"sparkctl.commands.{name}").register(one)
    help_text.apply(one)
    return one


def whole_app() -> typer.Typer:
    """`app`, built once."""
    global app
    if "app" not in globals():
        app = new_app()
    return app


def __getattr__(name: str) -> typer.Typer:  # `from sparkctl.cli import app`
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return whole_app()


def parser_for(argv: list[str]) -> typer.Typer:
    """The app to parse `argv` with. `sparkctl [-p X] COMMAND ...`: an app of COMMAND's module
    alone (same root options and callback, same command): typer builds a click command, with an
    adapter per option, for every command the app holds on each run (~18 ms for all of them), and
    importing every command module took ~5 ms more, which a re-ship of nothing new paid in full.
    Anything else (no or an unknown command first, root --help or --version, shell completion):
    the whole app, so its help and suggestions are as ever."""
    name = _command_name(argv) or ""
    module = MODULE_OF_COMMAND.get(name, name)
    if module in COMMAND_MODULES and not any(k.endswith("_COMPLETE") for k in os.environ):
        one = new_app((module,))
        held = [c.name for c in one.registered_commands] + [g.name for g in one.registered_groups]
        if name in held:
            return one
    return whole_app()


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
