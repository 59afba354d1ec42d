"""How many requests a replica is serving, read from the replica itself (the rolling switch's drain).

The signal is the engine's in-flight gauges (`Engine.metrics.in_flight`) on the replica head's
`/metrics`, summed; each engine says which gauges and from when to when they count a request
(its `METRICS` in engines/<kind>/__init__.py, docs/engines.md). The router cannot tell: sglang-router 0.3.2's
`load` counts in-flight requests only under some policies (0 under round_robin, measured), and a
removed worker leaves its `GET /workers` listing at once, while its requests still run. Scrapes and health probes
are not requests to wait for, so their endpoints are left out of the count.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING

from sparkctl.cluster_http import Failure, fetch
from sparkctl.errors import SparkctlError

if TYPE_CHECKING:
    from sparkctl.engines.capabilities import MetricNames

# Endpoints that are not work to drain: the scrape itself, health checks, metadata lookups.
PROBES = frozenset(
    {
        "/metrics",
        "/health",
        "/health_generate",
        "/ready",
        "/ping",
        "/v1/models",
        "/model_info",
        "/get_model_info",
        "/server_info",
        "/get_server_info",
    }
)
SCRAPE_TIMEOUT = 5.0
METRICS_LIMIT = 64 << 20  # an exposition is read whole (a few hundred KiB with histograms)


class NoInFlightSignal(SparkctlError):
    """The replica does not say how many requests it is serving."""


def _names(names: MetricNames | None) -> MetricNames:
    if names is not None:
        return names
    from sparkctl.engines import get_engine
    from sparkctl.engines.capabilities import MetricNames

    return get_engine().metrics or MetricNames()  # the default engine's


def count_in_flight(text: str, names: MetricNames | None = None) -> int | None:
    """Requests in flight per the exposition text; None when the gauges are absent."""
    from prometheus_client.parser import text_string_to_metric_families

    gauges = set(_names(names).in_flight)

    total, seen = 0.0, False
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError:
        return None
    for family in families:
        for s in family.samples:
            if s.name in gauges:
                seen = True
                if s.labels.get("endpoint") not in PROBES:
                    total += s.value
    return round(total) if seen else None


def in_flight(url: str, api_key: str | None = None, names: MetricNames | None = None) -> int:
    """Requests the replica at `url` is serving now; NoInFlightSignal when it cannot tell."""
    names = _names(names)
    req = urllib.request.Request(url.rstrip("/") + "/metrics")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    fix = "serve /metrics (check the engine's flags), `sparkctl up` it once"
    if names.enable_flag:
        fix = f"set engine.args {names.enable_flag}: true (the engine then serves /metrics), `sparkctl up` it once"

    def fail(f: Failure) -> NoInFlightSignal:
        return NoInFlightSignal(
            f"{url}/metrics: " + (f"HTTP {f.code}" if f.code is not None else f.detail), fix=fix
        )

    body, _ = fetch(req, SCRAPE_TIMEOUT, fail, limit=METRICS_LIMIT)
    text = body.decode("utf-8", errors="replace")
    count = count_in_flight(text, names)
    if count is None:
        raise NoInFlightSignal(f"{url}/metrics has no {' / '.join(names.in_flight)}", fix=fix)
    return count


def wait_drained(
    read: Callable[[], int],
    timeout: float,
    *,
    interval: float = 0.2,
    quiet_reads: int = 2,
    failed_reads: int = 5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[bool, int]:
    """Poll `read()` until it says 0 `quiet_reads` times in a row (a request the router had already
    sent may reach the replica just after its removal) or `timeout` passes. Returns (drained,
    last count); the count is -1 when the replica stopped answering (`failed_reads` reads in a
    row failed: it died, so there is nothing left to wait for)."""
    deadline = clock() + timeout
    zeros = fails = 0
    last = -1
    while True:
        try:
            last, fails = read(), 0
        except NoInFlightSignal:
            last, fails = -1, fails + 1
        zeros = zeros + 1 if last == 0 else 0
        if zeros >= quiet_reads:
            return True, 0
        if fails >= failed_reads or clock() >= deadline:
            return False, last
        sleep(interval)
