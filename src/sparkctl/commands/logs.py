"""`sparkctl logs`: the ranks' (and the router's) logs, merged, followed, filtered."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_service, print_json


@handle_errors
def logs_cmd(
    mode_arg: Annotated[
        str | None,
        typer.Argument(metavar="MODE", help="Mode whose logs to show (default: the running one)."),
    ] = None,
    rank: Annotated[
        int | None, typer.Option("--rank", "-r", help="Only this rank (default: all ranks).")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines (Ctrl-C stops).")
    ] = False,
    since: Annotated[
        str | None, typer.Option("--since", help="Only lines newer than 10m, 2h, or a date/time.")
    ] = None,
    tail: Annotated[int, typer.Option("--tail", "-n", help="Lines per rank to start with.")] = 100,
    router: Annotated[
        bool, typer.Option("--router", help="The router's log instead (a mode with replicas).")
    ] = False,
    mode: Annotated[str | None, typer.Option("--mode", help="Same as MODE.")] = None,
    timestamps: Annotated[
        bool, typer.Option("--timestamps", "-t", help="Show Docker's timestamp per line.")
    ] = False,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Rank logs from the files kept on the nodes (they outlive the containers), merged in time order.
    Exit 3 when no rank has a log file yet, 5 when a node cannot be reached."""
    from rich.markup import escape

    from sparkctl.connectors import NodePool
    from sparkctl.errors import UsageError
    from sparkctl.lifecycle.logs import (
        event_lines,
        follow_all,
        guard_lines,
        merge,
        parse_since,
        read_all,
        source_label,
    )
    from sparkctl.lifecycle.modes import resolve_mode
    from sparkctl.lifecycle.state import events
    from sparkctl.planning.build import build_plan

    prof, mode = load_service(profile, mode_arg or mode)
    since_at = parse_since(since) if since else None
    out = console()
    with NodePool(prof, once=not follow) as pool:  # following retries a failed node
        if mode is None:
            mode = resolve_mode(prof, pool=pool, fallback=("running", "last", "default"))
        plan = build_plan(prof, mode)
        specs = plan.ranks if rank is None else [s for s in plan.ranks if s.rank == rank]
        if router:
            specs = _router_spec(prof, plan)
        if not specs:
            raise UsageError(f"mode {mode} has no rank {rank}", fix=f"ranks: 0..{len(plan.ranks) - 1}")
        width = max(len(source_label(s)) for s in specs)
        if not follow:
            lines, missing, lost = read_all(prof, pool, specs, tail, since_at)
            if rank is None and not router:  # the supervisor's events (restarts, causes) in the same timeline
                stamps = [x.ts for x in lines if x.ts is not None]
                lines = merge(
                    lines
                    + event_lines(events(prof.cluster), since_at or min(stamps, default=None))
                    + guard_lines(prof, pool, since_at or min(stamps, default=None))
                )
                width = max([width] + [len(x.label) for x in lines if x.label])
            _print_logs(lines, missing, lost, width, timestamps, json_out, mode, len(specs))
            return
        try:
            for line in follow_all(prof, pool, specs, tail, since_at):
                if json_out:  # one JSON object per line while following
                    import json

                    print(json.dumps(_log_json(line)), flush=True)
                    continue
                out.print(escape(line.render(width, timestamps)), soft_wrap=True)
        except KeyboardInterrupt:  # the normal way to stop following
            return


def _router_spec(prof, plan) -> list:  # Profile, Plan -> [RankSpec]
    from sparkctl.errors import UsageError

    if plan.router is None:
        with_router = [n for n, m in prof.modes.items() if m.replicas > 1]
        raise UsageError(
            f"mode {plan.mode} has one replica and no router",
            fix="name a mode with replicas: " + (", ".join(with_router) or "none in this profile"),
        )
    return [plan.router]


def _log_json(line) -> dict:  # sparkctl.lifecycle.logs.LogLine
    return {
        "rank": line.rank if line.rank >= 0 else None,
        "source": line.prefix,
        "node": line.node,
        "time": line.ts.isoformat() if line.ts else None,
        "text": line.text,
    }


def _print_logs(
    lines: list,
    missing: dict,
    lost: dict,
    width: int,
    timestamps: bool,
    json_out: bool,
    mode: str,
    n_ranks: int,
) -> None:
    """Lines (or one JSON document), then one line per rank without a log; an unreachable node is
    an error per node (exit 5), no log at all is an error (exit 3)."""
    from rich.markup import escape

    from sparkctl.errors import ConnectError, SparkctlError, several

    failure: SparkctlError | None = None
    if lost:
        failure = several(
            [
                ConnectError(f"could not read the logs there: {e.message}", node=n, fix=e.fix)
                for n, e in lost.items()
            ]
        )
    elif len(missing) == n_ranks:
        failure = SparkctlError(
            f"no log files for mode {mode}: it has not been started on these nodes",
            fix=f"start it with `sparkctl up {mode}`, or name another mode: `sparkctl logs MODE`",
        )
    doc = {
        "mode": mode,
        "lines": [_log_json(x) for x in lines],
        "missing": {str(r): w for r, w in missing.items()},
    }
    if json_out:
        if failure is None:
            print_json(doc)
            return
        failure.json_extra = doc  # handle_errors prints the one document, with the lines read
        raise failure
    out = console()
    for line in lines:
        out.print(escape(line.render(width, timestamps)), soft_wrap=True)
    for r, why in missing.items():
        if lost and any(why.startswith(f"{n}:") for n in lost):
            continue  # said once per node by the error below
        who = "the router" if r < 0 else f"rank {r}"
        console(stderr=True).print(f"[yellow]no log for {who}[/]: {escape(why)}")
    if failure is not None:
        raise failure


def register(app: typer.Typer) -> None:
    app.command("logs")(logs_cmd)
