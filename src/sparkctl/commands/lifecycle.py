"""`sparkctl up | down | switch | status | logs`: run the plan's containers and look after them."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_profile, print_json

ModeArg = Annotated[str | None, typer.Argument(help="Mode to run (default: the profile's default mode).")]
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

    def update(self, snap) -> None:  # noqa: ANN001 - sparkctl.lifecycle.watch.Snapshot
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


def _live_table(snap):  # noqa: ANN001, ANN202 - rich renderable from a Snapshot
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


def _print_rank_logs(exc) -> None:  # noqa: ANN001 - RankFailedError | ReadyTimeoutError
    from rich.markup import escape

    err = console(stderr=True)
    for log in exc.logs:
        err.print(f"[bold]--- rank {log.rank} on {log.node}: last {len(log.lines)} log line(s) ---[/]")
        for line in log.lines:
            err.print(escape(line), soft_wrap=True)
    err.print("[bold]---[/]")


def _interrupt_on_sigterm() -> None:
    """`kill` (SIGTERM) of a running `up` rolls back like Ctrl-C instead of leaving ranks behind."""
    import signal

    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, raise_interrupt)


def _offer_ship(exc, ship_opt: bool | None, json_out: bool) -> set[str]:  # noqa: ANN001 - PreflightFailedError
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


def _time_left(reporter: _Reporter, timeout: float | None, prof) -> float:  # noqa: ANN001 - Profile
    """`up --ship`: one deadline from the command's start; shipping spends it, the retry gets the rest."""
    from sparkctl.errors import SparkctlError

    left = (timeout if timeout is not None else prof.engine.ready_timeout) - reporter.elapsed()
    if left <= 0:
        raise SparkctlError(f"the deadline passed while shipping ({reporter.elapsed():.0f}s)",
                            fix="rerun `sparkctl up` (shipped files stay), or raise --timeout")
    return left


def _run_up(mode: str | None, tp: int | None, skip_preflight: bool, timeout: float | None,
            profile, json_out: bool, verb: str = "up", ship_opt: bool | None = None) -> None:  # fmt: skip  # noqa: ANN001
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.up import PreflightFailedError, choose_mode, curl_example, up
    from sparkctl.lifecycle.watch import RankFailedError, ReadyTimeoutError

    prof = load_profile(profile)
    _interrupt_on_sigterm()
    reporter = _Reporter(stderr=json_out)
    if verb == "switch":
        reporter.phase(f"switching cluster {prof.cluster} to mode {mode}")
    try:
        with NodePool(prof) as pool:
            try:
                result = up(prof, pool, mode=mode, tp=tp, skip_preflight=skip_preflight, timeout=timeout,
                            reporter=reporter)  # fmt: skip
            except PreflightFailedError as exc:
                reporter.close()
                what = _offer_ship(exc, ship_opt, json_out)
                if not what:
                    raise
                from sparkctl.plan import build_plan
                from sparkctl.ship import ship
                from sparkctl.ship.progress import make_progress

                plan = build_plan(prof, choose_mode(prof, mode, tp))
                reporter.phase(
                    f"shipping {' and '.join(sorted(what))} to the nodes of {plan.mode} that lack them"
                )
                with make_progress(console(stderr=True)) as progress:
                    ship(
                        prof, plan, pool, image="image" in what, weights="weights" in what, progress=progress
                    )
                result = up(prof, pool, mode=mode, tp=tp, skip_preflight=skip_preflight,
                            timeout=_time_left(reporter, timeout, prof), reporter=reporter)
    except (RankFailedError, ReadyTimeoutError) as exc:
        reporter.close()
        _print_rank_logs(exc)
        raise
    finally:
        reporter.close()
    if json_out:
        print_json(result.to_json())
        return
    out = console()
    plan = result.plan
    ranks = ", ".join(f"rank {s.rank}@{s.node}" for s in plan.ranks)
    if result.action == "noop":
        out.print(f"[green]already up[/]: mode {plan.mode} (config {plan.config_hash}) is running and healthy; "
                  "nothing changed")  # fmt: skip
    else:  # from the command's start, as the timeline shows (shipping included)
        out.print(f"[green]ready[/] in {reporter.elapsed():.1f}s: mode {plan.mode}, tp={plan.tp} ({ranks})")
    out.print(f"endpoint [bold]{plan.endpoint.api_base}[/]  model [bold]{plan.endpoint.served_model_name}[/]")
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
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Start MODE exactly as `sparkctl plan MODE` shows: stop other modes, start ranks >= 1 then
    rank 0, wait for /v1/models and /health while watching every rank; roll back on failure."""
    if dry_run:
        _print_preview(profile, mode, tp, json_out)
        return
    _run_up(mode, tp, skip_preflight, timeout, profile, json_out, ship_opt=ship)


@handle_errors
def switch_cmd(
    mode: Annotated[str, typer.Argument(help="Mode to switch to.")],
    skip_preflight: SkipPreflightOpt = False,
    timeout: TimeoutOpt = None,
    ship: ShipOpt = None,
    dry_run: DryRunOpt = False,
    profile: ProfileOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Switch to MODE: `up MODE`, which stops the running mode's containers first."""
    if dry_run:
        _print_preview(profile, mode, None, json_out)
        return
    _run_up(mode, None, skip_preflight, timeout, profile, json_out, verb="switch", ship_opt=ship)


@handle_errors
def down_cmd(profile: ProfileOpt = None, dry_run: DryRunOpt = False, json_out: JsonOpt = False) -> None:
    """Stop and remove every container of this cluster on every node (nothing running is fine)."""
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.down import down

    prof = load_profile(profile)
    with NodePool(prof) as pool:
        result = down(prof, pool, dry_run=dry_run)
    if json_out:
        print_json({**result.to_json(), "dry_run": dry_run})
        return
    out = console()
    if not result.removed:
        out.print(f"nothing running for cluster {prof.cluster}")
    verb = "would remove" if dry_run else "removed"
    for c in result.removed:
        out.print(f"{verb} {c.name} on {c.node} ({c.status})")


def _print_preview(profile, mode: str | None, tp: int | None, json_out: bool) -> None:  # noqa: ANN001
    """`up/switch --dry-run`: the plan, and what up would stop and start (read-only)."""
    from sparkctl.commands.plan import render_plan
    from sparkctl.connectors import NodePool
    from sparkctl.lifecycle.up import preview

    prof = load_profile(profile)
    with NodePool(prof) as pool:
        pre = preview(prof, pool, mode=mode, tp=tp)
    if json_out:
        print_json(pre.to_json())
        return
    render_plan(pre.plan)
    out = console()
    if pre.noop:
        out.print(f"[green]dry run:[/] mode {pre.plan.mode} already runs config {pre.plan.config_hash} and is "
                  "healthy; `up` would change nothing")  # fmt: skip
        return
    for c in pre.stop:
        out.print(f"[yellow]dry run:[/] would stop {c.name} on {c.node} ({c.status})")
    for spec in pre.start:
        out.print(f"[yellow]dry run:[/] would start rank {spec.rank} on {spec.node} ({spec.container_name})")


def _fmt_uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 86400}d{s % 86400 // 3600}h" if s >= 86400 else f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 \
        else f"{s // 60}m{s % 60:02d}s"  # fmt: skip


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


def _render_status(st) -> None:  # noqa: ANN001 - sparkctl.lifecycle.status.ClusterStatus
    from rich.markup import escape
    from rich.table import Table

    out = console()
    if not st.containers:
        asked = " on the nodes that answered" if st.unreachable else ""
        out.print(f"cluster {st.cluster}: nothing running{asked}")
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
            table.add_row(str(c.rank), c.node, c.mode or "?", f"[{color}]{state}[/]",
                          _fmt_uptime(c.uptime_s()), c.config_hash or "?", c.image)  # fmt: skip
        out.print(table)
    for m in st.modes:
        health = "[green]ready[/]" if m.health.ready else f"[red]not ready[/] ({m.health.detail})"
        url = m.plan.endpoint.api_base if m.plan else "?"
        served = ", ".join(m.health.served) or "-"
        out.print(f"mode [bold]{m.mode}[/]: {health}  endpoint {url}  serving {served}")
        if m.drift:
            out.print(f"  [yellow]the profile now gives config {m.profile_hash} (running {m.running_hash}): "
                      "`sparkctl up` would restart the ranks[/]")  # fmt: skip
    for node, why in st.unreachable.items():
        out.print(f"[red]node {node}[/]: {escape(why)}")


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
    from sparkctl.lifecycle.logs import follow_all, parse_since, read_all
    from sparkctl.lifecycle.status import running_mode
    from sparkctl.lifecycle.up import last_attempt
    from sparkctl.plan import build_plan

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
        if not specs:
            raise UsageError(f"mode {mode} has no rank {rank}", fix=f"ranks: 0..{len(plan.ranks) - 1}")
        width = max(len(f"rank{s.rank}@{s.node}") for s in specs)
        if not follow:
            lines, missing = read_all(prof, pool, specs, tail, since_at)
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


def _log_json(line) -> dict:  # noqa: ANN001 - sparkctl.lifecycle.logs.LogLine
    return {"rank": line.rank, "node": line.node, "time": line.ts.isoformat() if line.ts else None,
            "text": line.text}


def _print_logs(lines: list, missing: dict, width: int, timestamps: bool, json_out: bool, mode: str,
                n_ranks: int) -> None:
    """Lines (or JSON), then one line per rank without a log; no log at all is an error (exit 3)."""
    from rich.markup import escape

    from sparkctl.errors import SparkctlError

    if json_out:
        print_json({"mode": mode, "lines": [_log_json(x) for x in lines],
                    "missing": {str(r): why for r, why in missing.items()}})
    else:
        out = console()
        for line in lines:
            out.print(escape(line.render(width, timestamps)), soft_wrap=True)
        for r, why in missing.items():
            console(stderr=True).print(f"[yellow]no log for rank {r}[/]: {escape(why)}")
    if len(missing) == n_ranks:
        raise SparkctlError(
            f"no log files for mode {mode}: it has not been started on these nodes",
            fix=f"start it with `sparkctl up {mode}`, or name another mode: `sparkctl logs MODE`",
        )


def register(app: typer.Typer) -> None:
    app.command("up")(up_cmd)
    app.command("down")(down_cmd)
    app.command("switch")(switch_cmd)
    app.command("status")(status_cmd)
    app.command("logs")(logs_cmd)
