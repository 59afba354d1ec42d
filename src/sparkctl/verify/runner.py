"""Run the checks against one endpoint, each request under its time limits (clients/stream.py) and
all by --deadline, and turn each outcome into a `Finding`: ok, warn (optional feature missing) or
error (API contract). A stop (a timed-out request, --deadline) raises `Stopped`, which carries the
findings of the checks that finished."""

from __future__ import annotations

import time
from collections.abc import Callable

from sparkctl.clients.api import describe_error, make_client, probe, probe_deadline
from sparkctl.clients.deadline import TimeUp, bounded
from sparkctl.clients.stream import PROBE_S, Limits, Stalled, StreamCut
from sparkctl.errors import SparkctlError
from sparkctl.findings import Finding, Severity
from sparkctl.verify.base import SDK_DEFAULT_FIX, Check, CheckFailed, Context
from sparkctl.verify.checks import select


class Stopped(SparkctlError):
    """The run stopped early; `findings` holds every check that finished before."""

    def __init__(self, cause: SparkctlError, findings: list[Finding]) -> None:
        super().__init__(cause.message, fix=cause.fix)
        self.exit_code = cause.exit_code
        self.findings = findings


def _stalled(check: Check, detail: str) -> SparkctlError:
    """One stalled request means every later one would stall too: stop with one line."""
    return SparkctlError(
        f"check {check.name}: {detail}; the server lists its models but does not finish generating",
        fix="the engine is stalled or overloaded: read its log (sparkctl logs); raise that limit if it is only slow",
    )


def run_check(check: Check, ctx: Context, until: float) -> Finding:
    import openai

    start = time.monotonic()
    ctx.default_broken = None
    try:
        passed = bounded(lambda: check.run(ctx), until)
    except CheckFailed as exc:
        if ctx.default_broken:  # the default call failed first: say so, then what stream=False showed
            return _failed(check, f"{ctx.default_broken}; with stream=False: {exc}", start, exc.data)
        return _failed(check, str(exc), start, exc.data, exc.fix)
    except (TimeUp, Stalled, openai.APITimeoutError) as exc:
        if time.monotonic() >= until:
            raise SparkctlError(
                f"--deadline reached during check {check.name}",
                fix="raise --deadline, or run fewer checks with --only",
            ) from None
        detail = ctx.limits.reply_timeout() if isinstance(exc, openai.APITimeoutError) else str(exc)
        raise _stalled(check, detail) from None
    except StreamCut as exc:
        return _failed(check, str(exc), start, {}, exc.fix)
    except openai.OpenAIError as exc:  # HTTP status errors, connection resets
        return _failed(check, describe_error(exc), start, {})
    except (ValueError, TypeError, AttributeError, LookupError) as exc:
        # The SDK could not make sense of the reply (e.g. a malformed stream event).
        return _failed(check, f"malformed reply: {type(exc).__name__}: {exc}", start, {})
    if ctx.default_broken:
        msg = f"{ctx.default_broken}; with stream=False it passes: {passed.summary}"
        return _failed(check, msg, start, passed.data, SDK_DEFAULT_FIX)
    data = {"proves": check.proves, "level": check.level, "seconds": round(time.monotonic() - start, 3)}
    return Finding(
        check=check.name, severity=Severity.OK, message=passed.summary, data={**data, **passed.data}
    )


def _failed(check: Check, message: str, start: float, data: dict, fix: str | None = None) -> Finding:
    severity = Severity.ERROR if check.level == "contract" else Severity.WARN
    meta = {"proves": check.proves, "level": check.level, "seconds": round(time.monotonic() - start, 3)}
    return Finding(
        check=check.name,
        severity=severity,
        message=message,
        fix=fix or check.usual_cause,
        data={**meta, **data},
    )


def verify(
    url: str,
    model: str,
    *,
    only: list[str] | None = None,
    limits: Limits | None = None,
    deadline_s: float = 600.0,
    api_key: str | None = None,
    on_result: Callable[[Finding], None] | None = None,
    started: float | None = None,
) -> list[Finding]:
    """Run the selected checks in order. Raises ConnectError/UsageError (one line) when the endpoint
    is not an OpenAI server serving `model`; Stopped (with the finished findings) when a request
    times out or --deadline is reached."""
    limits = limits or Limits()
    until = (started or time.monotonic()) + deadline_s  # `started`: when the command began
    probe_s = max(0.1, min(PROBE_S, until - time.monotonic()))
    try:
        bounded(lambda: probe(url, model, api_key, probe_s), until)
    except TimeUp:
        raise probe_deadline(url) from None
    ctx = Context(client=make_client(url, limits.reply_s, api_key), model=model, limits=limits)
    findings: list[Finding] = []
    for check in select(only):
        try:
            finding = run_check(check, ctx, until)
        except SparkctlError as exc:
            raise Stopped(exc, findings) from None
        findings.append(finding)
        if on_result:
            on_result(finding)
    return findings
