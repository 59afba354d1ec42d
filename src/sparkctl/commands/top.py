"""`sparkctl top [MODE] [--once] [--json] [--interval S]`: the cluster's live state in one screen."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.commands._common import (
    JsonOpt,
    ProfileOpt,
    console,
    handle_errors,
    load_profile,
    load_service,
    print_json,
)

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

    whole = load_profile(profile, fleet=True)
    if whole.models and mode is None:  # every service, one under the other
        _fleet_top(whole, once, json_out, interval)
        return
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


def _fleet_top(prof, once: bool, json_out: bool, interval: float) -> None:
    import contextlib

    from sparkctl.connectors import NodePool
    from sparkctl.planning.fleet_view import service_views
    from sparkctl.top import once as take_once
    from sparkctl.top.fleet import FleetCollector
    from sparkctl.top.snapshot import Collector

    with contextlib.ExitStack() as stack:
        views = service_views(prof)
        pools = {n: stack.enter_context(NodePool(v, once=once)) for n, v in views.items()}
        collector = FleetCollector(prof.cluster, {n: Collector(views[n], pools[n], None) for n in views})
        if once:
            snap = take_once(collector, interval)  # type: ignore[arg-type]
            _show_once(snap, json_out)
            if any(n.error for n in snap.nodes):
                from sparkctl.errors import ExitCode

                raise typer.Exit(ExitCode.CONNECT)
            return
        try:
            if json_out:
                _json_lines(collector, interval)
            else:
                _live(collector, interval)
        except KeyboardInterrupt:
            return


def _screen(snap):  # Snapshot or FleetSnapshot -> rich renderable
    from sparkctl.top.fleet import FleetSnapshot

    if isinstance(snap, FleetSnapshot):
        from sparkctl.top.fleet import fleet_screen

        return fleet_screen(snap)
    from sparkctl.top.render import screen

    return screen(snap)


def _show_once(snap, json_out: bool) -> None:  # sparkctl.top.snapshot.Snapshot
    if json_out:
        print_json(snap.to_json())
        return
    console().print(_screen(snap))


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

    out = console()
    if not out.is_terminal:  # a pipe or a log: one screen per refresh, no cursor tricks
        live(collector, interval, lambda snap: out.print(_screen(snap), "\n"))
        return
    from rich.live import Live

    with Live(console=out, auto_refresh=False, screen=False, transient=False) as view:
        live(collector, interval, lambda snap: view.update(_screen(snap), refresh=True))
