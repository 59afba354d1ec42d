"""`up`, `switch`, `down` and `status` of a fleet (docs/fleet.md): each service through the
single-model flow on its own view, then the fleet's one gateway. What they print is here too."""

from __future__ import annotations

import contextlib
from dataclasses import replace

from sparkctl.commands._common import console, print_json


def chosen_services(prof, selection: str | None, verb: str) -> dict[str, str | None]:
    """`SERVICE[:MODE][,SERVICE[:MODE]]` -> {service: mode or None (its running/default)}; no
    selection: `up` starts every service that is not on demand."""
    from sparkctl.errors import UsageError
    from sparkctl.planning.fleet import parse_selection

    if not selection:
        return {n: None for n, s in prof.models.items() if not s.on_demand}
    parse_selection(prof, selection)  # names and modes checked, with their fixes
    out: dict[str, str | None] = {}
    for item in selection.split(","):
        name, _, mode = item.strip().partition(":")
        out[name] = mode or None
    if verb == "switch" and any(m is None for m in out.values()):
        raise UsageError(
            "`sparkctl switch` of a fleet names the service and the mode",
            fix=f"`sparkctl switch {next(iter(out))} MODE` (or SERVICE:MODE)",
        )
    return out


def fleet_up(req, prof, up_one, print_up) -> None:  # UpRequest, Profile (a fleet), up.py's two
    """Each chosen service in turn (its own lock and state), under the fleet's lock, then the gateway."""
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.fleet_gateway import ensure_gateway
    from sparkctl.lifecycle.lock import ClusterLock
    from sparkctl.planning.fleet import parse_selection, plan_fleet
    from sparkctl.planning.fleet_view import fleet_lock_name, service_view

    chosen = chosen_services(prof, req.mode, req.verb)
    plan_fleet(
        prof, {**parse_selection(prof, None), **{n: m for n, m in chosen.items() if m}}
    )  # before any start
    done = []
    with ClusterLock(fleet_lock_name(prof)):
        for name, mode in chosen.items():
            view = service_view(prof, name)
            with _named(name, [n for n, _, _ in done]):
                result, sup, elapsed = up_one(replace(req, mode=mode), view, name)
            done.append((name, result, sup))
            if not req.json_out:
                print_up(result, elapsed, sup, req.verbose)
        with NodePool(prof) as pool:
            gw = ensure_gateway(prof, pool)
    if req.json_out:
        services = [{"service": n, **r.to_json(), "supervisor": s} for n, r, s in done]
        print_json({"cluster": prof.cluster, "services": services, "gateway": gw.to_json()})
        return
    console().print(f"fleet endpoint: {gw.url}/v1 ({gw.action}; model = one of {_names(gw)})", markup=False)


@contextlib.contextmanager
def _named(service: str, started: list[str]):
    """A service's failure says which service it is, and what of the fleet already runs."""
    from sparkctl.errors import SparkctlError

    try:
        yield
    except SparkctlError as exc:
        exc.message = f"service {service}: {exc.message}"
        if started:
            exc.message += (
                f" ({', '.join(started)} started and left running; `sparkctl down` stops the fleet)"
            )
        raise


def _names(gw) -> str:  # FleetGateway
    return ", ".join(r.names[0] for r in gw.spec.routes)


def fleet_down(prof, selection: str | None, dry_run: bool, json_out: bool) -> None:
    """`down SERVICE[:MODE]`: that service only; `down`: every service, then the gateway."""
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.down import down
    from sparkctl.lifecycle.fleet_gateway import remove_gateway
    from sparkctl.planning.fleet_view import service_view

    names = list(chosen_services(prof, selection, "down")) if selection else list(prof.models)
    modes = _modes(selection)
    if not selection and not dry_run:  # the on-demand loop first: else it starts what is stopped
        from sparkctl.lifecycle.supervisor import process as supervisor

        supervisor.stop(prof.cluster)
    out, removed = [], []
    for name in names:
        view = service_view(prof, name)
        with NodePool(view, once=True) as pool:
            result = down(view, pool, dry_run=dry_run, mode=modes.get(name))
        out.append({"service": name, **result.to_json()})
        removed += [(name, c) for c in result.removed]
    gateway = False
    if not selection and not dry_run:
        with NodePool(prof, once=True) as pool:
            gateway = remove_gateway(prof, pool)
    if json_out:
        print_json({"cluster": prof.cluster, "services": out, "gateway_removed": gateway, "dry_run": dry_run})
        return
    con = console()
    verb = "would remove" if dry_run else "removed"
    for name, c in removed:
        con.print(f"{name}: {verb} {c.name} on {c.node} ({c.status})", markup=False)
    if not removed:
        con.print(f"nothing running for {', '.join(names)} of fleet {prof.cluster}", markup=False)
    if gateway:
        con.print(f"removed the fleet gateway of {prof.cluster}", markup=False)


def _modes(selection: str | None) -> dict[str, str]:
    out = {}
    for item in (selection or "").split(","):
        name, _, mode = item.strip().partition(":")
        if name and mode:
            out[name] = mode
    return out


def fleet_status(prof, selection: str | None, json_out: bool, render_status) -> bool:
    """Every service's status (or the named ones), then the gateway's view. True: a node unreachable."""
    from sparkctl.lifecycle.fleet_status import fleet_status as read

    st = read(prof, list(chosen_services(prof, selection, "status")) if selection else list(prof.models))
    if json_out:
        print_json(st.to_json())
        return st.unreachable
    con = console()
    for svc in st.services:
        con.print(f"[bold]service {svc.name}[/]: {svc.state}" + (" (on demand)" if svc.on_demand else ""))
        render_status(svc.status)
    con.print(st.gateway_line(), markup=False)
    return st.unreachable


def supervise_fleet(profile_opt, prof, detach: bool, stop: bool) -> None:
    """`supervise` of a fleet: the on-demand loop (start on a request, stop when idle)."""
    from sparkctl.lifecycle.supervisor import process as supervisor

    con = console()
    if stop:
        con.print(
            supervisor.stop(prof.cluster) or f"no supervisor runs for fleet {prof.cluster}", markup=False
        )
        return
    if detach:
        from sparkctl.lifecycle.supervisor.process import Policy
        from sparkctl.profile import find_profile

        current = supervisor.running(prof.cluster)
        if not current:
            current = supervisor.spawn(find_profile(profile_opt).resolve(), prof.cluster, "", Policy(), "")
        con.print(
            f"supervising fleet {prof.cluster} in the background (pid {current.get('pid')})", markup=False
        )
        return
    import typer

    from sparkctl.lifecycle.fleet_supervise import supervise

    raise typer.Exit(supervise(prof, say=lambda line: con.print(line, markup=False)))
