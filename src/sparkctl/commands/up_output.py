"""What `up` (and `switch`, `upgrade`) prints: progress lines and a live table of the ranks while
it waits, the ranks' last log lines on a failure, and the closing lines (ready, rolled, already
up) with a curl line for the endpoint."""

from __future__ import annotations

from sparkctl.commands._common import console


class Reporter:
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


def print_rank_logs(exc) -> None:  # RankFailedError | ReadyTimeoutError
    from rich.markup import escape

    err = console(stderr=True)
    for log in exc.logs:
        who = "the router" if log.rank < 0 else f"rank {log.rank}"
        err.print(f"[bold]--- {who} on {log.node}: last {len(log.lines)} log line(s) ---[/]")
        for line in log.lines:
            err.print(escape(line), soft_wrap=True)
    err.print("[bold]---[/]")


def print_up(result, elapsed: float, sup: dict | None, verbose: bool = False) -> None:  # UpResult
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
