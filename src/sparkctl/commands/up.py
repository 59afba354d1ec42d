"""`sparkctl up`: run the plan's containers (preflight, ship on offer, roll or restart, wait ready);
the run that `switch` and `upgrade` share (run_up). What it prints is up_output.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from sparkctl.commands._common import (
    GuardOpt,
    JsonOpt,
    ProfileOpt,
    console,
    handle_errors,
    load_profile,
    print_json,
)
from sparkctl.commands.up_output import Reporter, print_rank_logs, print_up

ModeArg = Annotated[
    str | None, typer.Argument(metavar="MODE", help="Mode to run (default: the profile's default mode).")
]
TpOpt = Annotated[int | None, typer.Option("--tp", help="Pick the mode with this tensor-parallel size.")]
SkipPreflightOpt = Annotated[
    bool, typer.Option("--skip-preflight", help="Do not run the fast preflight checks first.")
]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Show what would be done; change nothing.")]
ShipOpt = Annotated[
    bool | None,
    typer.Option(
        "--ship/--no-ship",
        help="When preflight finds the image or weights missing on a node: ship them "
        "and go on (--ship), or stop (--no-ship). Default: ask on a terminal, else stop.",
    ),
]
SuperviseOpt = Annotated[
    bool,
    typer.Option(
        "--supervise",
        help="After ready, keep a background supervisor that restarts the whole group when a rank "
        "exits or generation keeps failing (`sparkctl supervise --help`; `down` stops it).",
    ),
]
RollingOpt = Annotated[
    bool,
    typer.Option(
        "--rolling/--no-rolling",
        help="With 2+ replicas behind the router: replace them one at a time, so clients see no "
        "failed request (default when possible); --no-rolling stops all, then starts all.",
    ),
]
VerboseOpt = Annotated[
    bool, typer.Option("-v", "--verbose", help="After ready, print where the seconds went (each step).")
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        help="One deadline in seconds for the whole command: preflight, starting, and "
        "waiting for the endpoint (default: engine.ready_timeout).",
    ),
]


def _interrupt_on_sigterm() -> None:
    """`kill` (SIGTERM) of a running `up` rolls back like Ctrl-C instead of leaving ranks behind."""
    import signal

    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, raise_interrupt)


def _offer_ship(exc, ship_opt: bool | None, json_out: bool) -> set[str]:  # PreflightFailedError
    """What to ship before retrying `up`: --ship says yes, --no-ship no, else ask on a terminal."""
    import sys

    what = exc.shippable
    if not what or ship_opt is False:
        return set()
    if ship_opt is None:
        if json_out or not sys.stdin.isatty():
            return set()
        err = console(stderr=True)
        err.print(f"[yellow]preflight:[/] {exc.message}")
        if not typer.confirm(
            f"ship the {' and '.join(sorted(what))} to the nodes that lack them now?", default=True
        ):
            return set()
    return what


@dataclass(frozen=True)
class UpRequest:
    """What `up`, `switch` and `upgrade` ask of `run_up` (their flags)."""

    mode: str | None
    profile: Path | None
    tp: int | None = None
    skip_preflight: bool = False
    timeout: float | None = None
    json_out: bool = False
    verb: str = "up"  # up, switch or upgrade: named in the first phase line
    ship: bool | None = None  # --ship / --no-ship; None: ask when preflight finds it shippable
    supervise: bool = False
    rolling: bool = True
    guard: bool | None = None  # --guard / --no-guard; None: the profile's
    verbose: bool = False  # -v: the timeline after ready


def run_up(req: UpRequest) -> None:
    prof = load_profile(req.profile, fleet=True)
    if prof.models:
        from sparkctl.commands.fleet import fleet_up

        fleet_up(req, prof, up_one, print_up)
        return
    result, sup, elapsed = up_one(req, prof)
    if req.json_out:
        print_json({**result.to_json(), "supervisor": sup})
        return
    print_up(result, elapsed, sup, req.verbose)


def up_one(req: UpRequest, prof, service: str | None = None):  # -> (UpResult, supervisor dict | None, s)
    """`up` of one model (a single-model profile, or a fleet's `service` as its view)."""
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.guard import with_guard
    from sparkctl.lifecycle.router import RouterFailedError
    from sparkctl.lifecycle.up import PreflightFailedError
    from sparkctl.lifecycle.upship import up_or_ship
    from sparkctl.lifecycle.watch import RankFailedError, ReadyTimeoutError

    mode, profile, json_out, guard = req.mode, req.profile, req.json_out, req.guard
    prof = with_guard(prof, guard)
    _interrupt_on_sigterm()
    reporter = Reporter(stderr=json_out)
    if req.verb in ("switch", "upgrade"):
        reporter.phase(f"{req.verb}: cluster {prof.cluster}, mode {mode}")

    def offer(exc: PreflightFailedError) -> set[str]:
        reporter.close()  # the live display stops before a question
        return _offer_ship(exc, req.ship, json_out)

    def progress():  # a context manager giving ship's Progress
        from sparkctl.ship.progress import make_progress

        return make_progress(console(stderr=True))

    try:
        with NodePool(prof) as pool:
            result = up_or_ship(
                prof,
                pool,
                offer=offer,
                progress=progress,
                mode=mode,
                tp=req.tp,
                skip_preflight=req.skip_preflight,
                timeout=req.timeout,
                reporter=reporter,
                rolling=req.rolling,
            )
    except (RankFailedError, ReadyTimeoutError, RouterFailedError) as exc:
        reporter.close()
        print_rank_logs(exc)
        raise
    finally:
        reporter.close()
    sup = None
    if req.supervise:
        from sparkctl.commands.supervise import start_detached
        from sparkctl.lifecycle.supervisor.process import Policy

        sup = start_detached(profile, prof, result.plan.mode, Policy(guard=guard), service)
    return result, sup, reporter.elapsed()


@handle_errors
def up_cmd(
    mode: ModeArg = None,
    tp: TpOpt = None,
    skip_preflight: SkipPreflightOpt = False,
    timeout: TimeoutOpt = None,
    ship: ShipOpt = None,
    dry_run: DryRunOpt = False,
    supervise: SuperviseOpt = False,
    rolling: RollingOpt = True,
    guard: GuardOpt = None,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Start MODE exactly as `sparkctl plan MODE` shows: stop other modes, start ranks >= 1 then
    rank 0, wait for /v1/models and /health while watching every rank; roll back on failure.
    The running MODE with a changed config and 2+ replicas is replaced replica by replica."""
    if dry_run:
        print_preview(profile, mode, tp, json_out, rolling)
        return
    run_up(
        UpRequest(
            mode,
            profile,
            tp=tp,
            skip_preflight=skip_preflight,
            timeout=timeout,
            json_out=json_out,
            ship=ship,
            supervise=supervise,
            rolling=rolling,
            guard=guard,
            verbose=verbose,
        )
    )


def print_preview(profile, mode: str | None, tp: int | None, json_out: bool, rolling: bool = True) -> None:
    """`up/switch --dry-run`: the plan, and what up would stop and start (read-only)."""
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.preview import preview

    prof = load_profile(profile, fleet=True)
    if prof.models:  # each chosen service's preview (the gateway is never replaced by a switch)
        from sparkctl.commands.fleet import chosen_services
        from sparkctl.planning.fleet_view import service_view

        chosen = chosen_services(prof, mode, "up")
        pres = []
        for name, svc_mode in chosen.items():
            view = service_view(prof, name)
            with NodePool(view) as pool:
                pres.append((name, preview(view, pool, mode=svc_mode, tp=tp, rolling=rolling)))
        if json_out:
            print_json(
                {"cluster": prof.cluster, "services": [{"service": n, **p.to_json()} for n, p in pres]}
            )
            return
        for name, pre in pres:
            console().print(f"[bold]service {name}[/]")
            _render_preview(pre)
        return
    with NodePool(prof) as pool:
        pre = preview(prof, pool, mode=mode, tp=tp, rolling=rolling)
    if json_out:
        print_json(pre.to_json())
        return
    _render_preview(pre)


def _render_preview(pre) -> None:  # sparkctl.lifecycle.preview.Preview
    from sparkctl.commands.plan import render_plan

    render_plan(pre.plan)
    out = console()
    if pre.noop:
        out.print(
            f"[green]dry run:[/] mode {pre.plan.mode} already runs config {pre.plan.config_hash} and is "
            "healthy; `up` would change nothing"
        )
        return
    if pre.rolling is not None:
        out.print(f"[yellow]dry run:[/] rolling: {pre.rolling}")
    for c in pre.stop:
        out.print(f"[yellow]dry run:[/] would stop {c.name} on {c.node} ({c.status})")
    for spec in pre.start:
        what = "the router" if spec.role == "router" else f"rank {spec.rank}"
        out.print(f"[yellow]dry run:[/] would start {what} on {spec.node} ({spec.container_name})")


def register(app: typer.Typer) -> None:
    app.command("up")(up_cmd)
