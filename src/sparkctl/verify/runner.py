"""Run the checks against one endpoint and turn each outcome into a `Finding`."""

from __future__ import annotations

import time
from collections.abc import Callable

from sparkctl.findings import Finding, Severity
from sparkctl.verify.checks import Check, CheckFailed, Context, select
from sparkctl.verify.client import describe_error, make_client, unreachable


def run_check(check: Check, ctx: Context) -> Finding:
    import openai

    start = time.monotonic()
    try:
        passed = check.run(ctx)
    except CheckFailed as exc:
        return _failed(check, str(exc), start, exc.data)
    except openai.OpenAIError as exc:  # APIConnectionError included
        return _failed(check, describe_error(exc), start, {})
    except (ValueError, TypeError, AttributeError, LookupError) as exc:
        # The SDK could not make sense of the reply (e.g. a malformed stream event).
        return _failed(check, f"malformed reply: {type(exc).__name__}: {exc}", start, {})
    data = {"proves": check.proves, "seconds": round(time.monotonic() - start, 3), **passed.data}
    return Finding(check=check.name, severity=Severity.OK, message=passed.summary, data=data)


def _failed(check: Check, message: str, start: float, data: dict) -> Finding:
    data = {"proves": check.proves, "seconds": round(time.monotonic() - start, 3), **data}
    return Finding(
        check=check.name, severity=Severity.ERROR, message=message, fix=check.usual_cause, data=data
    )


def verify(
    url: str,
    model: str,
    *,
    only: list[str] | None = None,
    timeout_s: float = 120.0,
    on_result: Callable[[Finding], None] | None = None,
) -> list[Finding]:
    """Run the selected checks in order. Raises ConnectError if nothing answers at `url`."""
    import openai

    client = make_client(url, timeout_s)
    try:
        client.models.list()
    except openai.APIConnectionError as exc:
        raise unreachable(url, exc) from None
    except openai.OpenAIError:
        pass  # the server is there; the ModelsList check reports what is wrong
    ctx = Context(client=client, model=model)
    findings = []
    for check in select(only):
        finding = run_check(check, ctx)
        findings.append(finding)
        if on_result:
            on_result(finding)
    return findings
