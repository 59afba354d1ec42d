"""`sparkctl status | logs | supervise`: what runs where, the ranks' logs, group restarts."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_profile, print_json


def _fmt_uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return (
        f"{s // 86400}d{s % 86400 // 3600}h"
        if s >= 86400
        else f"{s // 3600}h{s % 3600 // 60:02d}m"
        if s >= 3600
        else f"{s // 60}m{s % 60:02d}s"
    )


@handle_errors
def status_cmd(profile: ProfileOpt = None, json_out: JsonOpt = False) -> None:
    """Per node and rank: container state, uptime, image, mode, config hash; endpoint health and model."""
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.status import status

    prof = load_profile(profile)
    with NodePool(prof) as pool:
        st = status(prof, pool)
    if json_out:
        print_json(st.to_json())
    else:
        _render_status(st)
    if st.unreachable:
        from sparkctl.errors import ExitCode

        raise typer.Exit(ExitCode.CONNECT)


def _render_status(st) -> None:  # sparkctl.lifecycle.status.ClusterStatus
    from rich.markup import escape
    from rich.table import Table

    out = console()
    for line in st.settled:
        out.print(f"[yellow]cleanup:[/] {escape(line)}")
    unknown = ", ".join(f"{n} ({st.unknown_why.get(n, 'unreachable')})" for n in st.unreachable)
    if not st.containers:
        if not st.unreachable:
            out.print(f"cluster {st.cluster}: nothing running")
        else:  # never "nothing running" when a node could not be asked
            reached = [n for n in st.nodes if n not in st.unreachable]
            where = f"nothing running on {', '.join(reached)}; " if reached else ""
            out.print(f"cluster {st.cluster}: {where}[red]unknown on {unknown}[/]")
    else:
        from rich import box

        table = Table(
            title=f"cluster {st.cluster}", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
        )
        for col in ("rank", "node", "mode", "state", "uptime", "config", "image"):
            table.add_column(col, no_wrap=col != "image", overflow="fold")
        for c in st.containers:
            state = c.status if c.running else f"{c.status} ({c.describe_exit()})"
            color = "green" if c.running else "red"
            table.add_row(
                "router" if c.role == "router" else str(c.rank),
                c.node,
                c.mode or ("-" if c.role == "router" else "?"),
                f"[{color}]{state}[/]",
                _fmt_uptime(c.uptime_s()),
                c.config_hash or "?",
                c.image,
            )
        out.print(table)
        if st.unreachable:
            out.print(f"[red]unknown on {unknown}[/]")
    for m in st.modes:
        health = "[green]ready[/]" if m.health.ready else f"[red]not ready[/] ({m.health.detail})"
        serving = [r for r in m.replicas if r.state == "ready"]
        if m.health.ready and len(serving) < len(m.replicas):
            health = f"[yellow]degraded[/] ({len(serving)} of {len(m.replicas)} replicas serving)"
        dead = m.dead_rank()
        if dead:
            health = f"[red]broken[/] ({escape(dead)}; `sparkctl logs --rank` shows why, `sparkctl up {m.mode}` restarts the group)"
        url = m.plan.endpoint.api_base if m.plan else "?"
        served = ", ".join(m.health.served) or "-"
        out.print(f"mode [bold]{m.mode}[/]: {health}  endpoint {url}  serving {served}")
        if m.drift:
            out.print(
                f"  [yellow]the profile now gives config {m.profile_hash} (running {m.running_hash}): "
                "`sparkctl up` would restart the ranks[/]"
            )
        _render_replicas(m)
    for p in st.pending:
        out.print(
            f"[yellow]{p.node} may still run {escape(p.describe())}[/]: removed when {p.node} answers "
            "again (`sparkctl down`, `up` or `status`)"
        )
    for node, why in st.unreachable.items():
        out.print(f"[red]node {node}[/]: {escape(why)}")
    _render_supervision(st)


def _render_replicas(m) -> None:  # sparkctl.lifecycle.status.ModeStatus
    """A mode with replicas: the router (its container and worker list), then each replica."""
    from rich.markup import escape

    out = console()
    r = m.router
    if r is not None:
        state = r.container.status if r.container else "missing"
        color = "green" if r.container and r.container.running and not r.error else "red"
        listed = ", ".join(
            f"{w.url} {'healthy' if w.healthy else '[red]unhealthy[/]'} (load {w.load})" for w in r.workers
        )
        seen = f"[red]{escape(r.error)}[/]" if r.error else listed or "no workers"
        out.print(f"  router on {r.node} [{color}]{state}[/] at {r.url}: {seen}")
    for rep in m.replicas:
        color = {"ready": "green", "unhealthy": "yellow"}.get(rep.state, "red")
        ranks = ", ".join(str(n) for n in rep.ranks)
        routed = f", router: {rep.routed}" if rep.routed else ""
        out.print(
            f"  replica {rep.index} on {rep.node} {rep.url} (ranks {ranks}): [{color}]{rep.state}[/]{routed}"
        )
        problem = rep.problem()
        if problem:
            out.print(f"    {escape(problem[0])}; fix: {escape(problem[1])}")


def _render_supervision(st) -> None:  # sparkctl.lifecycle.status.ClusterStatus
    from rich.markup import escape

    from sparkctl.lifecycle.state import describe_event

    out = console()
    sup = st.supervisor
    if sup:
        out.print(
            f"supervisor: [green]running[/] (pid {sup.get('pid')}, mode {sup.get('mode')}), "
            f"{len([e for e in st.restarts if e['event'] == 'restarted'])} group restart(s)"
        )
    elif st.restarts:
        out.print("supervisor: [yellow]not running[/]")
    for event in st.restarts:
        out.print(f"  {escape(describe_event(event))}")


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
    Exit 3 when no rank has a log file yet."""
    from rich.markup import escape

    from sparkctl.connectors import NodePool
    from sparkctl.errors import UsageError
    from sparkctl.lifecycle.logs import event_lines, follow_all, merge, parse_since, read_all, source_label
    from sparkctl.lifecycle.state import events, last_attempt
    from sparkctl.lifecycle.status import running_mode
    from sparkctl.planning.build import build_plan

    mode = mode_arg or mode
    prof = load_profile(profile)
    since_at = parse_since(since) if since else None
    out = console()
    with NodePool(prof) as pool:
        if mode is None:
            mode = running_mode(prof, pool) or last_attempt(prof.cluster).get("mode") or prof.default_mode()
            if mode not in prof.modes:
                mode = prof.default_mode()
        plan = build_plan(prof, mode)
        specs = plan.ranks if rank is None else [s for s in plan.ranks if s.rank == rank]
        if router:
            specs = _router_spec(prof, plan)
        if not specs:
            raise UsageError(f"mode {mode} has no rank {rank}", fix=f"ranks: 0..{len(plan.ranks) - 1}")
        width = max(len(source_label(s)) for s in specs)
        if not follow:
            lines, missing = read_all(prof, pool, specs, tail, since_at)
            if rank is None and not router:  # the supervisor's events (restarts, causes) in the same timeline
                stamps = [x.ts for x in lines if x.ts is not None]
                lines = merge(
                    lines + event_lines(events(prof.cluster), since_at or min(stamps, default=None))
                )
                width = max(width, len("supervisor")) if any(x.label for x in lines) else width
            _print_logs(lines, missing, width, timestamps, json_out, mode, len(specs))
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
    lines: list, missing: dict, width: int, timestamps: bool, json_out: bool, mode: str, n_ranks: int
) -> None:
    """Lines (or JSON), then one line per rank without a log; no log at all is an error (exit 3)."""
    from rich.markup import escape

    from sparkctl.errors import SparkctlError

    if json_out:
        print_json(
            {
                "mode": mode,
                "lines": [_log_json(x) for x in lines],
                "missing": {str(r): why for r, why in missing.items()},
            }
        )
    else:
        out = console()
        for line in lines:
            out.print(escape(line.render(width, timestamps)), soft_wrap=True)
        for r, why in missing.items():
            who = "the router" if r < 0 else f"rank {r}"
            console(stderr=True).print(f"[yellow]no log for {who}[/]: {escape(why)}")
    if len(missing) == n_ranks:
        raise SparkctlError(
            f"no log files for mode {mode}: it has not been started on these nodes",
            fix=f"start it with `sparkctl up {mode}`, or name another mode: `sparkctl logs MODE`",
        )


MaxRestartsOpt = Annotated[
    int, typer.Option("--max-restarts", min=0, help="Group restarts allowed within an hour; then give up.")
]
CanaryEveryOpt = Annotated[
    float, typer.Option("--canary-every", min=0, help="Seconds between generation canaries (0: none).")
]
CanaryFailuresOpt = Annotated[
    int, typer.Option("--canary-failures", min=1, help="Failed canaries in a row that restart the group.")
]
BackoffOpt = Annotated[
    float, typer.Option("--backoff", min=0, help="Seconds before the 2nd restart, doubling after (max 60).")
]


@handle_errors
def supervise_cmd(
    mode: Annotated[str | None, typer.Argument(help="Mode to supervise (default: the running one).")] = None,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Run in the background, detached.")] = False,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the running supervisor.")] = False,
    max_restarts: MaxRestartsOpt = 5,
    canary_every: CanaryEveryOpt = 10.0,
    canary_failures: CanaryFailuresOpt = 3,
    backoff: BackoffOpt = 2.0,
    profile: ProfileOpt = None,
) -> None:
    """Watch the running group; when a rank exits or the generation canary keeps failing, restart
    every rank together (backoff, restart limit). `status` and `logs` show each restart and why."""
    from sparkctl.lifecycle.supervisor import process as supervisor
    from sparkctl.lifecycle.supervisor.process import Policy

    prof = load_profile(profile)
    if stop:
        console().print(supervisor.stop(prof.cluster) or f"no supervisor runs for cluster {prof.cluster}")
        return
    mode = mode or _running_mode(prof)
    policy = Policy(
        max_restarts=max_restarts, backoff=backoff, canary_every=canary_every, canary_failures=canary_failures
    )
    if detach:
        info = start_detached(profile, prof, mode, policy)
        console().print(f"supervising mode {mode} in the background (pid {info.get('pid')})")
        return
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.supervisor.process import StopFlag
    from sparkctl.lifecycle.supervisor.supervise import run

    flag = StopFlag().install()
    with NodePool(prof) as pool:
        code = run(prof, pool, mode, policy, flag)
    raise typer.Exit(code)


def _running_mode(prof) -> str:  # Profile
    from sparkctl.connectors import NodePool
    from sparkctl.errors import UsageError
    from sparkctl.lifecycle.status import running_mode

    with NodePool(prof) as pool:
        mode = running_mode(prof, pool)
    if mode is None:
        raise UsageError("no mode is running to supervise", fix="name the MODE, or `sparkctl up --supervise`")
    return mode


def start_detached(profile_opt, prof, mode: str, policy) -> dict:  # Path|None, Profile, Policy
    """Spawn the background supervisor for `mode` (an already running one for it is kept)."""
    from sparkctl.lifecycle.supervisor import process as supervisor
    from sparkctl.profile import find_profile

    current = supervisor.running(prof.cluster)
    if current and current.get("mode") == mode:
        return current
    supervisor.stop(prof.cluster)
    return supervisor.spawn(find_profile(profile_opt).resolve(), prof.cluster, mode, policy)
