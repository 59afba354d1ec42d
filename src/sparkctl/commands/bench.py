"""`sparkctl bench [MODE]`: tokens/s, TTFT and prefill rate of the served endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, print_json
from sparkctl.commands.verify import ModeArg, ModelOpt, UrlOpt, resolve_endpoint

RepsOpt = Annotated[int, typer.Option("--reps", min=1, max=50, help="Repetitions per workload.")]
WorkloadOpt = Annotated[
    list[str] | None, typer.Option("--workload", "-w", help="Only these workloads (repeatable).")
]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Save the full results (every sample) as JSON.")]
CompareOpt = Annotated[
    tuple[str, str] | None, typer.Option("--compare", help="Run in MODE_A, switch, run in MODE_B.")
]


@handle_errors
def bench(
    mode: ModeArg = None,
    profile: ProfileOpt = None,
    url: UrlOpt = None,
    model: ModelOpt = None,
    reps: RepsOpt = 3,
    workload: WorkloadOpt = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="Output tokens per request.")] = 256,
    prefix_words: Annotated[
        int, typer.Option("--prefix-words", min=1, help="Length of the long prompts.")
    ] = 8000,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, max=64, help="Streams in the concurrent workload.")
    ] = 4,
    budget: Annotated[
        float, typer.Option("--budget", help="Stop starting requests after this many seconds.")
    ] = 600.0,
    out: OutOpt = None,
    compare: CompareOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Single-stream and concurrent workloads (code, prose, thinking, cold prefill, repeated long
    prefix). Token counts come from the server's usage, never from counting stream chunks."""
    import json

    from sparkctl.benchmark.report import bench_table
    from sparkctl.benchmark.runner import run_bench
    from sparkctl.benchmark.workloads import default_suite, select
    from sparkctl.errors import UsageError

    if compare:
        # Switching modes is the lifecycle's job (stop one, start the other, wait for ready).
        raise UsageError(
            "--compare needs the mode lifecycle (`sparkctl up` / switch), which this build lacks",
            fix="run `sparkctl bench MODE_A --out a.json`, switch modes, then `sparkctl bench MODE_B`",
        )
    suite = select(default_suite(max_tokens, prefix_words, concurrency), workload)
    base, served, config_hash = resolve_endpoint(profile, mode, url, model)
    con = console(stderr=json_out)
    con.print(f"[bold]bench[/] {base}  model [bold]{served}[/]  {reps} reps x {len(suite)} workloads")
    result = run_bench(
        base,
        served,
        suite,
        reps=reps,
        budget_s=budget,
        mode=mode,
        config_hash=config_hash,
        on_workload=lambda w: con.print(f"  done {w.workload.name}"),
    )
    data = result.to_json()
    if out:
        out.write_text(json.dumps(data, indent=2) + "\n")
    if json_out:
        print_json(data)
    else:
        con.print(bench_table(result))
        if out:
            con.print(f"saved {out}")


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
