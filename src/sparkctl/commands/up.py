"""`sparkctl up`: run the plan's containers (preflight, ship on offer, roll or restart, wait ready);
the run that `switch` and `upgrade` share (run_up)."""

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


class _Reporter:
    """Progress lines, plus a live table (elapsed, each rank's state and last log line) on a terminal."""

    def __init__(self, stderr: bool) -> None:
        import time

        self.out = console(stderr=stderr)
        self.t0 = time.monotonic()
        self.live = None
        self.states: dict[int, str] = {}

    def elapsed(self) -> float:
        import time

        return time.monotonic() - self.t0

    def _stamp(self) -> str:
        return f"[dim]{self.elapsed():6.1f}s[/]"

    def phase(self, text: str) -> None:
        from rich.markup import escape

        self.out.print(f"{self._stamp()} {escape(text)}")

    def update(self, snap) -> None:  # sparkctl.lifecycle.watch.WaitProgress
        if not self.out.is_terminal:
            for view in snap.ranks:  # plain output: only state changes
                if self.states.get(view.rank) != view.status:
                    self.states[view.rank] = view.status
                    self.phase(f"rank {view.rank} on {view.node}: {view.status}")
            return
        from rich.live import Live

        if self.live is None:
            self.live = Live(console=self.out, transient=True, refresh_per_second=8)
            self.live.start()
        self.live.update(_live_table(snap))

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def _live_table(snap):  # rich renderable from a WaitProgress
    from rich.table import Table

    table = Table(
        title=f"waiting {snap.elapsed:.0f}s (deadline in {snap.remaining:.0f}s) - endpoint: {snap.endpoint.detail}",
        title_justify="left",
        expand=True,
    )
    table.add_column("rank", no_wrap=True)
    table.add_column("node", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("last log line", overflow="ellipsis", no_wrap=True, ratio=1)
    for v in snap.ranks:
        color = "green" if v.status == "running" else "red"
        table.add_row(str(v.rank), v.node, f"[{color}]{v.status}[/]", v.last_line)
    return table


def _print_rank_logs(exc) -> None:  # RankFailedError | ReadyTimeoutError
    from rich.markup import escape

    err = console(stderr=True)
    for log in exc.logs:
        who = "the router" if log.rank < 0 else f"rank {log.rank}"
        err.print(f"[bold]--- {who} on {log.node}: last {len(log.lines)} log line(s) ---[/]")
        for line in log.lines:
            err.print(escape(line), soft_wrap=True)
    err.print("[bold]---[/]")


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
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.guard import with_guard
    from sparkctl.lifecycle.router import RouterFailedError
    from sparkctl.lifecycle.up import PreflightFailedError
    from sparkctl.lifecycle.upship import up_or_ship
    from sparkctl.lifecycle.watch import RankFailedError, ReadyTimeoutError

    mode, profile, json_out, guard = req.mode, req.profile, req.json_out, req.guard
    prof = with_guard(load_profile(profile), guard)
    _interrupt_on_sigterm()
    reporter = _Reporter(stderr=json_out)
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
        _print_rank_logs(exc)
        raise
    finally:
        reporter.close()
    sup = None
    if req.supervise:
        from sparkctl.commands.supervise import start_detached
        from sparkctl.lifecycle.supervisor.process import Policy

        sup = start_detached(profile, prof, result.plan.mode, Policy(guard=guard))
    if json_out:
        print_json({**result.to_json(), "supervisor": sup})
        return
    _print_up(result, reporter.elapsed(), sup, req.verbose)


def _print_up(result, elapsed: float, sup: dict | None, verbose: bool = False) -> None:  # UpResult
    from sparkctl.lifecycle.timeline import timeline_lines

    out = console()
    plan = result.plan
    if verbose and result.timeline:
        out.print("timeline (seconds after `up` began, + how long the step took):")
        for line in timeline_lines(result.timeline):
            out.print(line, markup=False)
    ranks = ", ".join(f"rank {s.rank}@{s.node}" for s in plan.ranks)
    if result.action == "rolled":
        print_rolled(out, result, elapsed)
    elif result.action == "noop":
        out.print(
            f"[green]already up[/]: mode {plan.mode} (config {plan.config_hash}) is running and healthy; "
            "nothing changed"
        )
    elif result.action == "gateway":
        out.print(
            f"[green]already up[/]: mode {plan.mode} (config {plan.config_hash}); only its gateway changed "
            f"and was replaced in {elapsed:.1f}s (the engine kept running)"
        )
    else:  # from the command's start, as the timeline shows (shipping included)
        shape = f"tp={plan.tp} ({ranks})" if plan.replicas <= 1 else plan.shape
        out.print(f"[green]ready[/] in {elapsed:.1f}s: mode {plan.mode}, {shape}")
    out.print(f"endpoint [bold]{plan.endpoint.api_base}[/]  model [bold]{plan.endpoint.served_model_name}[/]")
    if sup:
        out.print(
            f"supervised: a background supervisor (pid {sup.get('pid')}) restarts the whole group if a "
            "rank exits; `sparkctl status` shows restarts, `sparkctl down` stops it"
        )
    out.print("try:")
    out.print(curl_example(plan), markup=False, soft_wrap=True)


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
    from sparkctl.commands.plan import render_plan
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.preview import preview

    prof = load_profile(profile)
    with NodePool(prof) as pool:
        pre = preview(prof, pool, mode=mode, tp=tp, rolling=rolling)
    if json_out:
        print_json(pre.to_json())
        return
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


def print_rolled(out, result, elapsed: float) -> None:  # RolledUp
    plan = result.plan
    done = [r for r in result.replicas if r.action == "rolled"]
    out.print(
        f"[green]rolled[/] {len(done)} of {len(result.replicas)} replica(s) onto mode {plan.mode} "
        f"(config {plan.config_hash}) in {elapsed:.1f}s, one at a time behind the router"
    )
    for r in result.replicas:
        was = f"{r.old['mode']} {r.old['config_hash']}" if r.old["config_hash"] else "nothing"
        if r.action == "skipped":
            out.print(f"  replica {r.index} ({'+'.join(r.nodes)}): already on {plan.config_hash}")
            continue
        out.print(
            f"  replica {r.index} ({'+'.join(r.nodes)}): {was} -> {r.new['mode']} {r.new['config_hash']}: "
            f"drained {r.in_flight} request(s) in {r.drain_s:.1f}s, stopped in {r.stop_s:.1f}s, "
            f"ready in {r.start_s:.1f}s"
        )


def register(app: typer.Typer) -> None:
    app.command("up")(up_cmd)


def curl_example(plan) -> str:  # sparkctl.planning.build.Plan
    """A curl line for the endpoint; the key by its variable or file, never its value."""
    import json
    import shlex

    ep = plan.endpoint
    body = {
        "model": ep.served_model_name,
        "messages": [{"role": "user", "content": "Hello!"}],
        "max_tokens": 64,
    }
    url = f"{ep.api_base}/chat/completions"
    cmd = shlex.join(["curl", "-s", url, "-H", "Content-Type: application/json", "-d", json.dumps(body)])
    key = ep.api_key
    if key is not None:  # the variable's name or the file's path, never the value
        value = f"${key.env}" if key.env else f"$(cat {shlex.quote(key.file or '')})"
        cmd += f' -H "Authorization: Bearer {value}"'
    return cmd
