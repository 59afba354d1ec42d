"""`sparkctl status`: what runs where (modes, ranks, replicas, the router, the supervisor)."""

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
def status_cmd(
    mode: Annotated[
        str | None,
        typer.Argument(metavar="MODE", help="Only this mode's nodes and containers (default: all)."),
    ] = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Per node and rank: container state, uptime, image, mode, config hash; endpoint health and model."""
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.status import status

    prof = load_profile(profile, fleet=True)
    if prof.models:
        from sparkctl.commands.fleet import fleet_status

        if fleet_status(prof, mode, json_out, render_status):
            from sparkctl.errors import ExitCode

            raise typer.Exit(ExitCode.CONNECT)
        return
    with NodePool(prof, once=True) as pool:  # a failed node is not asked twice
        st = status(prof, pool, mode)
    if json_out:
        print_json(st.to_json())
    else:
        render_status(st)
    if st.unreachable:
        from sparkctl.errors import ExitCode

        raise typer.Exit(ExitCode.CONNECT)


def render_status(st) -> None:  # sparkctl.lifecycle.status.ClusterStatus
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
                c.role if c.role != "engine" else str(c.rank),
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
        names = m.health.served
        if m.replicas and m.plan and not m.plan.endpoint.readiness.names_served:  # a router's "unknown"
            names = sorted({n for r in m.replicas if r.health.ready for n in r.health.served})
        served = ", ".join(names) or "-"
        out.print(f"mode [bold]{m.mode}[/]: {health}  endpoint {url}  serving {served}")
        if m.drift:
            out.print(
                f"  [yellow]the profile now gives config {m.profile_hash} (running {m.running_hash}): "
                "`sparkctl up` would restart the ranks[/]"
            )
        _render_replicas(m)
        _render_keys(m)
    for p in st.pending:
        out.print(
            f"[yellow]{p.node} may still run {escape(p.describe())}[/]: removed when {p.node} answers "
            "again (`sparkctl down`, `up` or `status`)"
        )
    for node, why in st.unreachable.items():
        out.print(f"[red]node {node}[/]: {escape(why)}")
    _render_supervision(st)


def _render_keys(m) -> None:  # sparkctl.lifecycle.status.ModeStatus
    """engine.api_keys: each key's requests at the gateway."""
    from rich.markup import escape

    out = console()
    if m.keys_error:
        out.print(f"  [yellow]keys: {escape(m.keys_error)}[/]")
    for k in m.keys or []:
        limited = f", {k.limited} over its limit" if k.limited else ""
        failed = k.client_errors + k.server_errors
        out.print(f"  key {k.name}: {k.requests} requests ({k.ok} ok, {failed} refused or failed{limited})")


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
    from sparkctl.lifecycle.guard import describe, describe_trip

    for node, doc in st.guards.items():
        out.print(escape(describe(node, doc)))
        for trip in doc.get("trips", [])[-3:]:
            out.print(f"  [red]{escape(describe_trip(node, trip))}[/]")


def register(app: typer.Typer) -> None:
    app.command("status")(status_cmd)
