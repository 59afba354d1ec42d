"""One way to reach a served endpoint for `verify` and `bench`: the API key, the first probe of
`/v1/models` (one line with cause and fix for every way it can go wrong), and the SDK client.

The SDK is imported here, never at CLI start-up.
"""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import dataclass
from typing import Any

from sparkctl.cluster_http import Failure, fetch
from sparkctl.errors import ConnectError, UsageError

DEFAULT_KEY = "sparkctl-no-key"  # the SDK insists on a key; this one carries no secret


def api_base(url: str) -> str:
    """`http://host:port`, `http://host:port/` or `.../v1` -> `http://host:port/v1`."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UsageError(
            f"--url must start with http:// or https://, got '{url}'", fix="e.g. --url http://10.0.0.1:8888"
        )
    return url if url.endswith("/v1") else f"{url}/v1"


def resolve_api_key(api_key: str | None, api_key_env: str | None, profile_key: str | None) -> str | None:
    """--api-key, else --api-key-env NAME, else the profile's key; never OPENAI_API_KEY implicitly:
    an ambient key would go as a bearer token to whatever endpoint is being tested."""
    if api_key:
        return api_key
    if api_key_env:
        value = os.environ.get(api_key_env)
        if not value:
            raise UsageError(
                f"--api-key-env {api_key_env}: that variable is not set", fix=f"export {api_key_env}"
            )
        return value
    return profile_key


@dataclass(frozen=True)
class ServerInfo:
    models: list[str]
    max_model_len: int | None  # the engines report it in /v1/models; None when not reported


METADATA_TIMEOUT_S = 5.0  # /v1/models is static metadata: a live server answers at once


def probe(url: str, model: str, api_key: str | None, timeout_s: float) -> ServerInfo:
    """GET /v1/models once: the endpoint is an OpenAI-compatible server and it serves `model`.
    Waits at most METADATA_TIMEOUT_S, whatever the (generation) timeout: "nothing answers" fast."""
    timeout_s = min(timeout_s, METADATA_TIMEOUT_S)
    target = f"{api_base(url)}/models"
    req = urllib.request.Request(target, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    # no proxy; the key never follows a redirect away
    body, ctype = fetch(req, timeout_s, lambda f: _probe_error(target, timeout_s, f))
    try:
        data = json.loads(body)
        entries = data["data"]
        models = [m["id"] for m in entries]
    except (ValueError, KeyError, TypeError):
        raise ConnectError(
            f"GET {target}: HTTP 200 but not an OpenAI model list ({ctype or 'no content-type'}: "
            f"{body[:60].decode(errors='replace')!r})",
            fix="--url points at something that is not an OpenAI-compatible server",
        ) from None
    if model not in models:
        raise UsageError(
            f"model '{model}' is not served at {api_base(url)}; it serves: {', '.join(models) or 'nothing'}",
            fix=f"pass --model {models[0]}" if models else "wait until the server has loaded its model",
        )
    lens = [m.get("max_model_len") for m in entries if m["id"] == model]
    return ServerInfo(models, lens[0] if lens and isinstance(lens[0], int) else None)


def probe_deadline(url: str) -> ConnectError:
    return ConnectError(
        f"GET {api_base(url)}/models: no reply before --deadline",
        fix="check what listens there and that it is not hung; raise --deadline if it is only slow",
    )


def _probe_error(target: str, timeout_s: float, failure: Failure) -> ConnectError:
    if failure.timed_out:
        return ConnectError(
            f"GET {target}: no reply within {timeout_s:g}s (the port accepts connections but nothing answers)",
            fix="check what listens there and that it is not hung (model-list requests get a few seconds)",
        )
    if failure.code is None:
        return ConnectError(
            f"GET {target}: cannot connect ({failure.detail})",
            fix="start the server (`sparkctl up`), or pass the right --url (host:port of rank 0)",
        )
    detail = " ".join(failure.detail.split())[:120]
    if failure.code in (401, 403):
        fix = "the server wants an API key: pass --api-key-env NAME (or the profile's engine.api_key)"
    elif failure.code == 404:
        fix = "--url is not an OpenAI-compatible endpoint: give http://host:port (with or without /v1)"
    else:
        fix = "the server is failing: read its log (sparkctl logs)"
    return ConnectError(f"GET {target}: HTTP {failure.code} ({detail or 'empty body'})", fix=fix)


def make_client(url: str, timeout_s: float = 180.0, api_key: str | None = None) -> Any:
    """An `openai.OpenAI` client with no retries (a retried failure would hide the first error).
    `timeout_s` bounds connecting and every read: the limit of a non-streaming request (its reply
    comes when it is done). Streams pass their own, longer, socket timeout and are watched by
    sparkctl.clients.stream."""
    try:
        import openai
    except ImportError as exc:
        raise UsageError(
            "the 'openai' package is not installed",
            fix="python3 -m pip install openai (or reinstall: python3 -m pip install -e .)",
        ) from exc
    return openai.OpenAI(
        base_url=api_base(url),
        api_key=api_key or DEFAULT_KEY,
        max_retries=0,
        timeout=openai.Timeout(timeout_s),
        # No HTTP(S)_PROXY from the environment: the key goes to the endpoint, never a proxy (as
        # the probe, cluster_http.py); httpx drops Authorization on a redirect to another origin.
        http_client=openai.DefaultHttpxClient(trust_env=False, timeout=openai.Timeout(timeout_s)),
    )


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
        return f"cannot connect: {exc.__cause__ or exc}"
    return f"{type(exc).__name__}: {exc}"
