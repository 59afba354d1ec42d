"""The one HTTP opener for the cluster's own endpoints (engines, router, /metrics) and for the
endpoints `verify`/`bench` probe.

They sit on the cluster's network (or loopback): an HTTP(S)_PROXY from the user's environment
would only misroute them (and hand the bearer key to the proxy), so no proxy is ever used. A
redirect to another origin (scheme, host, port) is followed without the `Authorization` header:
the key goes only to the origin it was meant for.
"""

from __future__ import annotations

import urllib.parse
import urllib.request


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
