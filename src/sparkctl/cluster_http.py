"""The one HTTP opener for the cluster's own endpoints (engines, router, /metrics).

They sit on the cluster's network (or loopback): an HTTP(S)_PROXY from the user's environment
would only misroute them, so no proxy is ever used.
"""

from __future__ import annotations

import urllib.request

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
