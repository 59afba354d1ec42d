"""One way to build the official OpenAI client for a served endpoint, and to describe its errors.

Shared by `verify` and `bench`. The SDK is imported here, never at CLI start-up.
"""

from __future__ import annotations

import os
from typing import Any

from sparkctl.errors import ConnectError, UsageError


def api_base(url: str) -> str:
    """`http://host:port`, `http://host:port/` or `.../v1` -> `http://host:port/v1`."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UsageError(
            f"--url must start with http:// or https://, got '{url}'", fix="e.g. --url http://10.0.0.1:8888"
        )
    return url if url.endswith("/v1") else f"{url}/v1"


def make_client(url: str, timeout_s: float = 120.0) -> Any:
    """An `openai.OpenAI` client with no retries: a retried failure would hide the first error."""
    try:
        import openai
    except ImportError as exc:
        raise UsageError(
            "the 'openai' package is not installed",
            fix="python3 -m pip install openai (or reinstall: python3 -m pip install -e .)",
        ) from exc
    # SGLang ignores the key; honour a real one if the user runs behind an auth proxy.
    key = os.environ.get("OPENAI_API_KEY") or "sparkctl"
    return openai.OpenAI(base_url=api_base(url), api_key=key, max_retries=0, timeout=timeout_s)


def describe_error(exc: BaseException) -> str:
    """The exact error, one line: HTTP status and the server's own message where there is one."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        detail: Any = body
        if isinstance(body, dict):
            detail = body.get("message") or body.get("detail") or body.get("error") or body
            if isinstance(detail, dict):
                detail = detail.get("message") or detail
        return f"HTTP {exc.status_code}: {detail if detail is not None else exc.message}"
    if isinstance(exc, openai.APITimeoutError):
        return "request timed out"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        return f"cannot connect: {cause or exc}"
    return f"{type(exc).__name__}: {exc}"


def unreachable(url: str, exc: BaseException) -> ConnectError:
    return ConnectError(
        f"no OpenAI-compatible server answers at {api_base(url)} ({describe_error(exc)})",
        fix="start it with `sparkctl up`, or pass the right --url (host:port of rank 0)",
    )
