"""The fleet gateway's own view (planning/fleet_gateway.py): GET /sparkctl/fleet-state, which it
answers to the services' operator keys only. What `status` shows per service and what the
on-demand supervisor polls: loaded (its server passes /health), requests waiting for a start,
seconds since its last request."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sparkctl.clients.gateway import keyed_get
from sparkctl.errors import SparkctlError

ROUTE = "/sparkctl/fleet-state"


@dataclass(frozen=True)
class ServiceView:
    name: str
    loaded: bool
    waiting: int = 0
    requests: int = 0
    last_request_age_s: float | None = None  # None: no request since the gateway started
    on_demand: bool = False


def parse_state(doc: dict) -> dict[str, ServiceView]:
    out = {}
    for name, s in (doc.get("services") or {}).items():
        age = s.get("last_request_age_s")
        out[name] = ServiceView(
            name,
            bool(s.get("loaded")),
            int(s.get("waiting") or 0),
            int(s.get("requests") or 0),
            None if age is None else float(age),
            bool(s.get("on_demand")),
        )
    return out


def fleet_state(base_url: str, key: str | None, timeout: float = 5.0) -> dict[str, ServiceView]:
    """The gateway at `base_url` asked with an operator's key."""
    what = f"the fleet gateway at {base_url} gave no state"
    fix = "`sparkctl up` starts it (any service of the fleet); `sparkctl status` shows it"
    raw = keyed_get(base_url.rstrip("/") + ROUTE, key, timeout, what, fix)
    try:
        return parse_state(json.loads(raw))
    except (ValueError, AttributeError, TypeError) as exc:
        raise SparkctlError(f"{what} (not its JSON: {exc})", fix=fix) from None
