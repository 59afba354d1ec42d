"""Run workloads for a bounded number of repetitions and time; optionally across two modes.

Bounds: each request's limits (first token, stall, optional whole request: clients/stream.py),
--budget (no repetition or workload starts after it), --deadline (a hard end: requests still
running are abandoned). Whatever stops the run, the workloads that finished are kept: the error
(`BenchStopped`) carries them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkctl.benchmark.measure import BenchRequestError, Sample, stream_once
from sparkctl.benchmark.results import BenchResult, WorkloadResult
from sparkctl.benchmark.workloads import Workload, sized
from sparkctl.clients.stream import Limits
from sparkctl.errors import SparkctlError


def _batch(fns: list[Callable[[], Sample]], until: float) -> list[Sample]:
    """Run the requests of one repetition at once, in daemon threads (abandoned at `until`)."""
    boxes: list[dict] = [{} for _ in fns]

    def target(fn: Callable[[], Sample], box: dict) -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    threads = [
        threading.Thread(target=target, args=(f, b), daemon=True) for f, b in zip(fns, boxes, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, until - time.monotonic()))
        if t.is_alive():
            raise SparkctlError(
                "--deadline reached while requests were running", fix="raise --deadline or --budget"
            )
    for b in boxes:
        if "error" in b:
            raise b["error"]
    return [b["value"] for b in boxes]


class Unsupported(BenchRequestError):
    """The workload cannot run on this server (e.g. no reasoning for `thinking`)."""


class BenchStopped(SparkctlError):
    """The run stopped early; `result` holds every workload that finished before."""

    def __init__(self, cause: SparkctlError, result: BenchResult) -> None:
        super().__init__(cause.message, fix=cause.fix)
        self.exit_code = cause.exit_code
        self.result = result


_TIMEOUT_FIX = {
    "first-token": "the engine is overloaded or the prompt long: raise --first-token-timeout if it is only slow",
    "stall": "the engine stopped mid-stream: read its log (sparkctl logs); raise --stall-timeout if it only pauses",
    "request": "raise --timeout (the whole-request limit), or leave it out: by default there is none",
}


def request_error(w: Workload, exc: BaseException, limits: Limits) -> SparkctlError:
    """One line for whatever a request raised, naming the limit that fired."""
    import openai

    from sparkctl.clients.api import describe_error
    from sparkctl.clients.stream import StreamCut, TimedOut

    if isinstance(exc, SparkctlError):
        return exc
    if isinstance(exc, TimedOut):
        return SparkctlError(f"workload {w.name}: {exc}", fix=_TIMEOUT_FIX[exc.which])
    if isinstance(exc, openai.APITimeoutError):  # a non-streaming request: its reply is its first token
        return SparkctlError(f"workload {w.name}: {limits.reply_timeout()}", fix=_TIMEOUT_FIX["first-token"])
    if isinstance(exc, StreamCut):
        return SparkctlError(f"workload {w.name}: {exc}", fix=StreamCut.fix)
    if isinstance(exc, openai.OpenAIError):
        return SparkctlError(
            f"workload {w.name}: {describe_error(exc)}",
            fix="run `sparkctl verify` to see which API feature fails",
        )
    return SparkctlError(
        f"workload {w.name}: malformed reply ({type(exc).__name__}: {exc})",
        fix="the endpoint does not speak the OpenAI streaming format: run `sparkctl verify`",
    )


def run_workload(
    client: Any, model: str, w: Workload, reps: int, *, budget_until: float, until: float, limits: Limits
) -> WorkloadResult:
    result = WorkloadResult(w)

    def one(rep: int, i: int) -> Callable[[], Sample]:
        return lambda: stream_once(client, model, w, rep, i, limits)

    # The first request of a workload pays one-off costs (graph capture, cold cache): not counted.
    (warm,) = _batch([one(-1, 0)], until)
    if w.thinking and not warm.reasoning_events:
        raise Unsupported(
            f"workload {w.name}: thinking was on but the reply carries no reasoning",
            fix="start the server with a reasoning parser, or leave this workload out (-w ...)",
        )
    for rep in range(reps):
        if time.monotonic() > budget_until:
            result.truncated = f"--budget reached after {rep} of {reps} repetitions"
            break
        t0 = time.perf_counter()
        result.samples.extend(_batch([one(rep, i) for i in range(w.concurrency)], until))
        result.batch_walls.append(time.perf_counter() - t0)
    return result


def fit_prefix_words(
    client: Any, model: str, suite: list[Workload], context: int
) -> tuple[list[Workload], str | None]:
    """Cut the long prompts so prompt + max_tokens fits `context`, from one measured sample of
    this tokenizer's tokens per filler word."""
    from sparkctl.benchmark.workloads import filler

    longest = max((w for w in suite if w.prefix_words), key=lambda w: w.prefix_words, default=None)
    if longest is None:
        return suite, None
    probe_words = 200
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": filler(probe_words)}], max_tokens=1
    )
    per_word = r.usage.prompt_tokens / probe_words  # template overhead included: errs on the safe side
    fits = int((context - longest.max_tokens - 128) / per_word)
    if fits >= longest.prefix_words:
        return suite, None
    if fits < 50:
        raise SparkctlError(
            f"a {context}-token context leaves no room for the long prompts",
            fix="pass -w to skip prefill/long-prefix",
        )
    note = f"long prompts cut from {longest.prefix_words} to {fits} words to fit the {context}-token context"
    return sized(suite, fits), note


ASSUMED_CONTEXT = 8192


@dataclass
class Run:
    """One bench run in progress: where, how, and the callbacks that report as it goes."""

    client: Any
    model: str
    result: BenchResult
    named: frozenset[str]  # workloads asked for by name: failing to run them is an error
    budget_until: float
    until: float
    started: float
    on_workload: Callable[[WorkloadResult], None] | None = None
    on_note: Callable[[str], None] | None = None
    on_warning: Callable[[str], None] | None = None

    def note(self, text: str) -> None:
        self.result.notes.append(text)
        if self.on_note:
            self.on_note(text)

    def warn(self, text: str) -> None:
        self.result.warnings.append(text)
        if self.on_warning:
            self.on_warning(text)


def _run_suite(run: Run, workloads: list[Workload], reps: int) -> None:
    result = run.result
    for i, w in enumerate(workloads):
        if time.monotonic() > run.budget_until:
            reason = "--budget reached before it started"
            result.skipped += [{"name": x.name, "reason": reason} for x in workloads[i:]]
            run.note(f"not run ({reason}): {', '.join(x.name for x in workloads[i:])}")
            break
        try:
            res = run_workload(
                run.client,
                run.model,
                w,
                reps,
                budget_until=run.budget_until,
                until=run.until,
                limits=result.limits,
            )
        except Unsupported as exc:
            if w.name in run.named:
                raise
            result.skipped.append({"name": w.name, "reason": exc.message})
            run.warn(f"{w.name} skipped: {exc.message.removeprefix(f'workload {w.name}: ')} ({exc.fix})")
            continue
        except Exception as exc:
            raise request_error(w, exc, result.limits) from None
        if not res.samples:  # the warm-up ran, no repetition did
            result.skipped.append({"name": w.name, "reason": res.truncated or "no repetition ran"})
            continue
        result.workloads.append(res)
        if run.on_workload:
            run.on_workload(res)
    if not result.workloads and any(s["reason"].startswith("--budget") for s in result.skipped):
        took = time.monotonic() - run.started
        raise SparkctlError(
            f"--budget {run.budget_until - run.started:g}s ended before any repetition ran "
            f"(probe, prompt sizing and warm-up took {took:.1f}s)",
            fix="raise --budget: the start-up and one warm-up request per workload come first",
        )


def run_bench(
    url: str,
    model: str,
    workloads: list[Workload],
    *,
    reps: int = 3,
    budget_s: float = 600.0,
    limits: Limits | None = None,
    deadline_s: float | None = None,
    context: int | None = None,
    named: list[str] | None = None,
    api_key: str | None = None,
    mode: str | None = None,
    config_hash: str | None = None,
    on_workload: Callable[[WorkloadResult], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    started: float | None = None,
) -> BenchResult:
    """Every workload gets `reps` repetitions unless the run passes `budget_s`; nothing runs past
    `deadline_s`. The prompts fit the server's context (max_model_len when reported, else `context`,
    else an assumed 8192). A workload in `named` that cannot run on this server is an error; one of
    the default suite is skipped with a warning. Raises BenchStopped (with the finished workloads)
    when anything else stops the run."""
    import datetime

    from sparkctl.clients.api import make_client, probe, probe_deadline
    from sparkctl.clients.deadline import TimeUp, bounded
    from sparkctl.clients.stream import PROBE_S

    limits = limits or Limits()
    start = started or time.monotonic()  # `started`: when the command began
    until = start + (deadline_s if deadline_s is not None else default_deadline(budget_s, limits))
    try:
        info = bounded(lambda: probe(url, model, api_key, max(0.1, min(PROBE_S, until - start))), until)
    except TimeUp:
        raise probe_deadline(url) from None
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    result = BenchResult(url, model, mode, config_hash, reps, when, [], limits=limits)
    result.context, result.context_source = (
        (info.max_model_len, "server")
        if info.max_model_len
        else (context, "given")
        if context
        else (ASSUMED_CONTEXT, "assumed")
    )
    run = Run(
        make_client(url, limits.reply_s, api_key),
        model,
        result,
        frozenset(named or ()),
        start + budget_s,
        until,
        start,
        on_workload,
        on_note,
        on_warning,
    )
    if result.context_source == "assumed":
        run.note(f"context {result.context} tokens (assumed: the server does not report it; --context N)")
    try:
        try:
            workloads, cut = bounded(
                lambda: fit_prefix_words(run.client, model, workloads, result.context), until
            )
        except TimeUp:
            raise SparkctlError(
                "--deadline reached while sizing the prompts", fix="raise --deadline"
            ) from None
        except Exception as exc:
            raise request_error(workloads[0], exc, limits) from None
        if cut:
            run.note(cut)
        _run_suite(run, workloads, reps)
    except SparkctlError as exc:
        raise BenchStopped(exc, result) from None
    return result


def default_deadline(budget_s: float, limits: Limits) -> float:
    """The budget, then room for the repetition running at its end to finish."""
    return budget_s + limits.first_token_s + 600.0


def compare(
    modes: tuple[str, str], switch: Callable[[str], None], run: Callable[[str], BenchResult]
) -> list[BenchResult]:
    """Switch to each mode in turn and run the same bench there (`switch` is the lifecycle's)."""
    out = []
    for mode in modes:
        switch(mode)
        out.append(run(mode))
    return out
