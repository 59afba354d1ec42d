"""`sparkctl bench [MODE]`: tokens/s, TTFT and prefill rate of the served endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sparkctl.commands._common import JsonOpt, ProfileOpt, console, handle_errors, load_profile, print_json
from sparkctl.commands.verify import ModeArg, ModelOpt, UrlOpt

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

    from sparkctl.benchmark.report import bench_table
    from sparkctl.benchmark.runner import run_bench
    from sparkctl.benchmark.workloads import default_suite, select
    from sparkctl.errors import UsageError

    suite = select(default_suite(max_tokens, prefix_words, concurrency), workload)
    if compare:
        if url:
            raise UsageError(
                "--compare switches modes of a profile", fix="drop --url/--model, use -p PROFILE"
            )
        _compare(profile, compare, suite, reps, budget, out, json_out)
        return
    from sparkctl.lifecycle.endpoint import resolve_endpoint

    base, served, config_hash, mode = resolve_endpoint(lambda: load_profile(profile), mode, url, model)
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
    _emit(result.to_json(), bench_table(result), out, json_out, con)


def _compare(profile, modes: tuple[str, str], suite, reps: int, budget: float, out, json_out: bool) -> None:  # noqa: ANN001
    """Run in MODE_A, switch, run in MODE_B (sparkctl.benchmark.switch), then render."""
    from sparkctl.benchmark.report import compare_table
    from sparkctl.benchmark.switch import compare_modes

    con = console(stderr=json_out)
    def on_switch(mode: str) -> None:
        con.print(f"[bold]switching to {mode}[/] (waits until ready)")

    results = compare_modes(load_profile(profile), modes, suite, reps=reps, budget_s=budget, on_switch=on_switch)
    _emit({"compare": [r.to_json() for r in results]}, compare_table(results), out, json_out, con)


def _emit(data: dict, table, out: Path | None, json_out: bool, con) -> None:  # noqa: ANN001 - rich objects
    """Save the full results (--out), then print JSON (--json) or the table."""
    import json

    if out:
        out.write_text(json.dumps(data, indent=2) + "\n")
    if json_out:
        print_json(data)
        return
    con.print(table)
    if out:
        con.print(f"saved {out}")


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
