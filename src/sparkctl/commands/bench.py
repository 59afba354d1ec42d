"""`sparkctl bench [MODE]`: TTFT, inter-token latency, tokens/s and throughput of the served
endpoint, as percentiles; a concurrency sweep with a chart."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sparkctl.commands._common import (
    JsonOpt,
    ProfileOpt,
    console,
    endpoint_profile,
    handle_errors,
    load_profile,
    print_json,
)
from sparkctl.commands.verify import (
    ApiKeyEnvOpt,
    ApiKeyOpt,
    FirstTokenOpt,
    ModeArg,
    ModelOpt,
    StallOpt,
    TimeoutOpt,
    UrlOpt,
    stop_with,
)

RepsOpt = Annotated[int, typer.Option("--reps", min=1, max=50, help="Repetitions per workload.")]
WorkloadOpt = Annotated[
    list[str] | None,
    typer.Option("--workload", "-w", metavar="WORKLOAD", help="Only these workloads (repeatable)."),
]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Save the full results (every request) as JSON.")]
ChartOpt = Annotated[
    Path | None,
    typer.Option(
        "--chart",
        help="PNG chart of throughput and latency (default bench.png for a sweep or --compare without --json).",
    ),
]
CompareOpt = Annotated[
    tuple[str, str] | None, typer.Option("--compare", help="Run in MODE_A, switch, run in MODE_B.")
]
ConcurrencyOpt = Annotated[
    str, typer.Option("--concurrency", help="Concurrent streams for `code xN`; a list sweeps: 1,2,4,8,16.")
]
ContextOpt = Annotated[
    int | None,
    typer.Option(
        "--context",
        min=256,
        help="Context length (tokens) when the server does not report one (else 8192, assumed).",
    ),
]


@handle_errors
def bench_cmd(
    mode: ModeArg = None,
    profile: ProfileOpt = None,
    url: UrlOpt = None,
    model: ModelOpt = None,
    reps: RepsOpt = 3,
    workload: WorkloadOpt = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="Output tokens per request.")] = 256,
    prefix_words: Annotated[
        int,
        typer.Option("--prefix-words", min=1, help="Length of the long prompts (cut to fit the context)."),
    ] = 8000,
    concurrency: ConcurrencyOpt = "4",
    budget: Annotated[
        float,
        typer.Option("--budget", min=0.0, help="Start no repetition or workload after this many seconds."),
    ] = 600.0,
    first_token_timeout: FirstTokenOpt = 180.0,
    stall_timeout: StallOpt = 60.0,
    timeout: TimeoutOpt = None,
    deadline: Annotated[
        float | None,
        typer.Option(
            "--deadline", min=0.1, help="Hard end in seconds (default: budget + first-token timeout + 600)."
        ),
    ] = None,
    context: ContextOpt = None,
    chart: ChartOpt = None,
    out: OutOpt = None,
    compare: CompareOpt = None,
    api_key: ApiKeyOpt = None,
    api_key_env: ApiKeyEnvOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Single-stream workloads (code, prose, thinking, cold prefill, repeated long prefix) and
    concurrent `code xN`. Token counts come from the server's usage, never from stream chunks."""
    import time

    started = time.monotonic()  # --deadline counts from here, SDK import included
    from sparkctl.benchmark.runner import BenchStopped, run_bench
    from sparkctl.benchmark.workloads import default_suite, parse_levels, select
    from sparkctl.clients.stream import Limits
    from sparkctl.errors import UsageError

    levels = parse_levels(concurrency)
    full = default_suite(max_tokens, prefix_words, levels)
    suite = select(full, workload)
    if workload and len(levels) > 1:  # a sweep asked for runs whatever -w picked
        suite += [w for w in full if w.kind == "code" and w.concurrency > 1 and w not in suite]
    limits = Limits(first_token_timeout, stall_timeout, timeout)
    bounds = dict(
        reps=reps, budget_s=budget, limits=limits, deadline_s=deadline, context=context, named=workload
    )
    if compare:
        if url:
            raise UsageError(
                "--compare switches modes of a profile", fix="drop --url/--model, use -p PROFILE"
            )
        _compare(profile, compare, suite, bounds, (api_key, api_key_env), out, chart, json_out)
        return
    from sparkctl.lifecycle.endpoint import resolve_endpoint

    ep = resolve_endpoint(*endpoint_profile(profile, mode, url, model), url, model, api_key, api_key_env)
    con = console(stderr=json_out)
    con.print(f"[bold]bench[/] {ep.url}  model [bold]{ep.model}[/]  {reps} reps x {len(suite)} workloads")
    try:
        result = run_bench(
            ep.url,
            ep.model,
            suite,
            api_key=ep.api_key,
            mode=ep.mode,
            config_hash=ep.config_hash,
            on_workload=lambda w: con.print(f"  done {w.workload.name}"),
            on_note=lambda note: con.print(f"  [yellow]note:[/] {note}"),
            on_warning=lambda text: con.print(f"  [bold yellow]warning:[/] {text}"),
            started=started,
            **bounds,
        )
    except BenchStopped as exc:  # every finished workload is reported (table and JSON), then the error
        doc = {
            **exc.result.to_json(),
            "error": {"code": exc.exit_code, "message": exc.message, "fix": exc.fix},
        }
        _emit(doc, _tables(exc.result), out, json_out, con)
        stop_with(exc, json_out)
    _emit(result.to_json(), _tables(result), out, json_out, con)
    _chart([result], chart, len(levels) > 1 and not json_out, con)


def _tables(result) -> list:  # BenchResult
    from sparkctl.benchmark.report import bench_table, spread_table, sweep_rows, sweep_table, table_notes

    if not result.workloads:
        return []
    notes = [f"  [yellow]note:[/] {n}" for n in table_notes(result)]
    return [bench_table(result), spread_table(result), *notes] + (
        [sweep_table(result)] if sweep_rows(result) else []
    )


def _chart(results: list, path: Path | None, default_on: bool, con) -> None:
    if path is None and not default_on:
        return
    from sparkctl.benchmark.chart import write_chart

    con.print(
        f"chart {write_chart(results, path or Path('bench.png'))}", soft_wrap=True
    )  # a path stays one line


def _compare(
    profile, modes: tuple[str, str], suite, bounds: dict, keys: tuple, out, chart, json_out: bool
) -> None:
    """Run in MODE_A, switch, run in MODE_B (sparkctl.benchmark.switch), then render."""
    from sparkctl.benchmark.report import compare_table
    from sparkctl.benchmark.switch import compare_modes
    from sparkctl.clients.api import resolve_api_key
    from sparkctl.secrets import local_ref, resolve_known

    prof = load_profile(profile)
    key = resolve_api_key(*keys, resolve_known(local_ref("api-key", prof.engine.api_key)))
    con = console(stderr=json_out)

    def on_switch(mode: str) -> None:
        con.print(f"[bold]switching to {mode}[/] (waits until ready)")

    results = compare_modes(prof, modes, suite, api_key=key, on_switch=on_switch, **bounds)
    _emit({"compare": [r.to_json() for r in results]}, [compare_table(results)], out, json_out, con)
    _chart(results, chart, not json_out, con)


def _emit(data: dict, tables: list, out: Path | None, json_out: bool, con) -> None:  # rich objects
    """Save the full results (--out), then print JSON (--json) or the tables."""
    import json

    if out:
        out.write_text(json.dumps(data, indent=2) + "\n")
    if json_out:
        print_json(data)
        return
    for table in tables:
        con.print(table)
    if out:
        con.print(f"saved {out}")


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_cmd)
