"""Is the endpoint serving? `/v1/models` (HTTP server up, served name) then `/health`.

`/v1/models` is static metadata: it answers before warm-up ends. `/health` is the engine's own
check (a real 1-token generation, or only that the API server reaches its engine core: each
engine's `Readiness` says how long to wait), so only both together mean "ready". The paths come from the engine (Endpoint.readiness).
Ranks >= 1 run a dummy health server that always says 200, so they are never probed over HTTP;
their liveness comes from their containers (watch.py).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from sparkctl.cluster_http import Failure, fetch
from sparkctl.engines.base import Readiness
from sparkctl.planning.build import Endpoint
from sparkctl.secrets import resolve_known

MODELS_TIMEOUT = 2.0
BODY_LIMIT = 4 << 20  # /v1/models of a fleet, /health: small; bounded all the same


@dataclass(frozen=True)
class EndpointHealth:
    models_ok: bool = False
    served: list[str] = field(default_factory=list)
    health_ok: bool = False
    detail: str = "not probed yet"

    @property
    def ready(self) -> bool:
        return self.models_ok and self.health_ok

    def to_json(self) -> dict:
        return {
            "ready": self.ready,
            "models": self.models_ok,
            "health": self.health_ok,
            "served": self.served,
            "detail": self.detail,
        }


class _Status(Exception):  # noqa: N818 - an answer, not an error: a non-2xx status
    def __init__(self, code: int, body: bytes) -> None:
        super().__init__(code)
        self.code, self.body = code, body


def _failed(f: Failure) -> Exception:
    if f.code is not None:
        return _Status(f.code, f.detail.encode())
    return OSError(f.detail)  # no answer: the probe's detail says why


def _get(url: str, timeout: float, api_key: str | None = None) -> tuple[int, bytes]:
    """(status, body) through the cluster's one opener and mapper (cluster_http.fetch); no answer
    at all raises OSError with the reason."""
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url, headers=headers)
    try:
        body, _ = fetch(req, timeout, _failed, limit=BODY_LIMIT)
    except _Status as answer:
        return answer.code, answer.body
    return 200, body


def served_models(body: bytes) -> list[str]:
    try:
        data = json.loads(body)
    except ValueError:
        return []
    items = data.get("data") if isinstance(data, dict) else None
    return [str(m.get("id")) for m in items or [] if isinstance(m, dict) and m.get("id")]


def probe(endpoint: Endpoint, health: bool = True, readiness: Readiness | None = None) -> EndpointHealth:
    """One probe of rank 0's API; never raises (errors become `detail`). The paths are the
    engine's (the plan put them on the endpoint). Sends the profile's API key (a file-held key must
    have been read this run, as `up` does when it starts the ranks)."""
    paths = readiness or endpoint.readiness
    models, check = paths.models_path, paths.health_path
    key = resolve_known(endpoint.api_key)
    try:
        code, body = _get(f"{endpoint.url}{models}", MODELS_TIMEOUT, key)
    except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError
        reason = getattr(exc, "reason", exc)
        return EndpointHealth(detail=f"{models}: {reason or type(exc).__name__}")
    if code == 401 and not key:
        return EndpointHealth(detail=f"{models}: HTTP 401 (the API wants a key: set engine.api_key)")
    if code != 200:
        return EndpointHealth(detail=f"{models}: HTTP {code}")
    served = served_models(body)
    if paths.names_served and endpoint.served_model_name not in served:
        return EndpointHealth(
            True, served, False, f"{models} lists {served}, not {endpoint.served_model_name}"
        )
    if not health:
        return EndpointHealth(True, served, False, f"{check} not probed")
    try:
        code, body = _get(f"{endpoint.url}{check}", paths.health_timeout, key)
    except (OSError, http.client.HTTPException) as exc:
        return EndpointHealth(
            True, served, False, f"{check}: {getattr(exc, 'reason', exc) or type(exc).__name__}"
        )
    if code != 200:
        return EndpointHealth(True, served, False, f"{check}: HTTP {code} (warming up)")
    return EndpointHealth(True, served, True, "ready")


class Prober:
    """Probes the endpoint in the background, so a slow `/health` never delays watching the ranks."""

    # Once the API answers, 0.5 s between probes keeps the engine's access log quiet; before it
    # answers a probe is a refused connect that costs the engine nothing, so it is repeated every
    # 0.1 s: the port opening is seen within 0.1 s, not 0.5 (issue 46: a start no slower than by hand).
    def __init__(
        self,
        endpoint: Endpoint,
        interval: float = 0.5,
        closed_interval: float = 0.1,
        on_ready: threading.Event | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.interval = interval
        self.closed_interval = closed_interval
        self.state = EndpointHealth()
        self.ready_at: float | None = None  # time.monotonic() of the first ready probe
        self.on_ready = on_ready  # set when ready: a waiter wakes at once, not at its next poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sparkctl-readiness", daemon=True)

    def start(self) -> Prober:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                state = probe(self.endpoint)
            except Exception as exc:  # noqa: BLE001 - a dead prober would make `up` wait for the deadline
                state = EndpointHealth(detail=f"probe failed: {type(exc).__name__}: {exc}")
            self.state = state
            if state.ready:
                self.ready_at = time.monotonic()
                if self.on_ready is not None:
                    self.on_ready.set()
                return
            self._stop.wait(self.pause(state))

    def pause(self, state: EndpointHealth) -> float:
        """Seconds before the next probe: short while the API does not answer at all."""
        return self.interval if state.models_ok or "HTTP" in state.detail else self.closed_interval

    def stop(self) -> None:
        self._stop.set()
