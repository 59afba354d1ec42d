"""The one HTTP opener for the cluster's own endpoints (engines, router, /metrics) and for the
endpoints `verify`/`bench` probe.

They sit on the cluster's network (or loopback): an HTTP(S)_PROXY from the user's environment
would only misroute them (and hand the bearer key to the proxy), so no proxy is ever used. A
redirect to another origin (scheme, host, port) is followed without the `Authorization` header:
the key goes only to the origin it was meant for.

`fetch` is the one place urllib's errors are told apart (an HTTP status, a timeout, no answer):
each client turns the `Failure` into its own one-line error with its own fix.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


class SameOriginAuthRedirect(urllib.request.HTTPRedirectHandler):
    """urllib's redirect handler copies every header (Authorization included) to the new URL."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, ANN201, PLR0913 - urllib's signature
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            for store in (new.headers, new.unredirected_hdrs):
                for name in [k for k in store if k.lower() == "authorization"]:
                    del store[name]
        return new


OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), SameOriginAuthRedirect())


@dataclass(frozen=True)
class Failure:
    """Why a request got no usable answer: an HTTP status (with the start of its body), or none."""

    code: int | None  # the HTTP status; None: no answer (refused, unreachable, timed out)
    detail: str  # the body's first 200 bytes for a status, else the reason
    timed_out: bool = False  # connected, but no reply in time


def fetch(
    req: urllib.request.Request, timeout: float, fail: Callable[[Failure], Exception], limit: int = 1 << 20
) -> tuple[bytes, str]:
    """(body, content-type) of `req` through OPENER; `fail(Failure)` raised on any failure."""
    try:
        with OPENER.open(req, timeout=timeout) as resp:
            return resp.read(limit), resp.headers.get("content-type", "")
    except urllib.error.HTTPError as exc:
        failure = Failure(exc.code, exc.read(200).decode(errors="replace"))
    except TimeoutError:
        failure = Failure(None, "timed out", timed_out=True)
    except (urllib.error.URLError, OSError) as exc:
        failure = Failure(None, str(getattr(exc, "reason", exc)) or type(exc).__name__)
    except http.client.HTTPException as exc:  # a reply that is not HTTP (BadStatusLine, IncompleteRead)
        failure = Failure(None, f"{type(exc).__name__}: {exc}".rstrip(": "))
    raise fail(failure)
