"""Run the checks against one endpoint, each bounded by --timeout and all by --deadline, and turn
each outcome into a `Finding`: ok, warn (optional feature missing) or error (API contract)."""

from __future__ import annotations

import time
from collections.abc import Callable

from sparkctl.errors import SparkctlError
from sparkctl.findings import Finding, Severity
from sparkctl.verify.base import SDK_DEFAULT_FIX, Check, CheckFailed, Context, Stalled
from sparkctl.verify.checks import select
from sparkctl.verify.client import describe_error, make_client, probe, probe_deadline
from sparkctl.verify.deadline import TimeUp, bounded


def _stalled(check: Check, detail: str) -> SparkctlError:
    """One stalled request means every later one would stall too: stop with one line."""
    return SparkctlError(
        f"check {check.name}: {detail}; the server lists its models but does not finish generating",
        fix="the engine is stalled or overloaded: read its log (sparkctl logs); raise --timeout if it is only slow",
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
        raise _stalled(check, str(exc) or f"no reply within --timeout {ctx.timeout_s:g}s") from None
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
    timeout_s: float = 60.0,
    deadline_s: float = 600.0,
    api_key: str | None = None,
    on_result: Callable[[Finding], None] | None = None,
    started: float | None = None,
) -> list[Finding]:
    """Run the selected checks in order. Raises ConnectError/UsageError (one line) when the endpoint
    is not an OpenAI server serving `model`, SparkctlError when generation stalls or time is up."""
    until = (started or time.monotonic()) + deadline_s  # `started`: when the command began
    probe_s = max(0.1, min(timeout_s, until - time.monotonic()))
    try:
        bounded(lambda: probe(url, model, api_key, probe_s), until)
    except TimeUp:
        raise probe_deadline(url) from None
    ctx = Context(client=make_client(url, timeout_s, api_key), model=model, timeout_s=timeout_s)
    findings = []
    for check in select(only):
        finding = run_check(check, ctx, until)
        findings.append(finding)
        if on_result:
            on_result(finding)
    return findings
