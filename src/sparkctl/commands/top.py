"""`sparkctl top [MODE] [--once] [--json] [--interval S]`: the cluster's live state in one screen."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_service, print_json

ModeArg = Annotated[
    str | None,
    typer.Argument(
        metavar="MODE", help="Mode to watch (default: the one running, else the profile's default)."
    ),
]
OnceOpt = Annotated[
    bool, typer.Option("--once", help="One snapshot (two reads one interval apart), then exit.")
]
IntervalOpt = Annotated[float, typer.Option("--interval", "-i", help="Seconds between refreshes (>= 0.5).")]


def register(app: typer.Typer) -> None:
    app.command("top")(top_cmd)


@handle_errors
def top_cmd(
    mode: ModeArg = None,
    once: OnceOpt = False,
    json_out: JsonOpt = False,
    interval: IntervalOpt = 2.0,
    profile: ProfileOpt = None,
) -> None:
    """Live engine metrics (queue, tokens/s, KV cache, draft acceptance, TTFT/ITL), GPUs, memory and
    fabric per rank, with warnings. --json: one object (--once) or one line per refresh. Exit 5 with
    --once when a node could not be reached."""
    from sparkctl.connectors import NodePool
    from sparkctl.top import once as take_once
    from sparkctl.top.snapshot import Collector

    prof, mode = load_service(profile, mode)
    if mode is not None:
        from sparkctl.planning.build import build_plan

        build_plan(prof, mode)  # an unknown mode is a usage error now, not a degraded screen
    with NodePool(prof, once=once) as pool:  # --once: a failed node is not asked twice
        collector = Collector(prof, pool, mode)
        if once:
            snap = take_once(collector, interval)
            _show_once(snap, json_out)
            if any(n.error for n in snap.nodes):
                from sparkctl.errors import ExitCode

                raise typer.Exit(ExitCode.CONNECT)
            return
        from sparkctl import fanout

        fanout.notice = None  # the live screen (or each line) says what every node answered
        try:
            if json_out:  # JSON Lines: one object per refresh, for dashboards
                _json_lines(collector, interval)
            else:
                _live(collector, interval)
        except KeyboardInterrupt:
            return  # Ctrl-C is how a live `top` ends: exit 0


def _show_once(snap, json_out: bool) -> None:  # sparkctl.top.snapshot.Snapshot
    if json_out:
        print_json(snap.to_json())
        return
    from sparkctl.top.render import screen

    console().print(screen(snap))


def _json_lines(collector, interval: float) -> None:  # sparkctl.top.snapshot.Collector
    import json
    import sys

    from sparkctl.top import live

    def emit(snap) -> None:
        sys.stdout.write(json.dumps(snap.to_json(), default=str) + "\n")
        sys.stdout.flush()

    live(collector, interval, emit)


def _live(collector, interval: float) -> None:  # sparkctl.top.snapshot.Collector
    from sparkctl.top import live
    from sparkctl.top.render import screen

    out = console()
    if not out.is_terminal:  # a pipe or a log: one screen per refresh, no cursor tricks
        live(collector, interval, lambda snap: out.print(screen(snap), "\n"))
        return
    from rich.live import Live

    with Live(console=out, auto_refresh=False, screen=False, transient=False) as view:
        live(collector, interval, lambda snap: view.update(screen(snap), refresh=True))
