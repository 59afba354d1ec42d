"""The gateway's per-key counts (engine.api_keys): HAProxy's Prometheus exporter at
/sparkctl/gateway-metrics, which the gateway serves to the operator's key only (planning/gateway.py).
Each key has a backend of its own (`key_<name>`), so a backend's counters are that key's."""

from __future__ import annotations

import urllib.request
from dataclasses import asdict, dataclass

from sparkctl.cluster_http import Failure, fetch
from sparkctl.errors import SparkctlError

ROUTE = "/sparkctl/gateway-metrics"
PREFIX = "key_"


@dataclass(frozen=True)
class KeyCount:
    name: str
    requests: int = 0  # requests the gateway passed on with this key, or refused at its limit
    ok: int = 0  # 2xx answers
    client_errors: int = 0  # 4xx answers (a 429 at the key's limit among them)
    server_errors: int = 0  # 5xx answers
    limited: int = 0  # refused at the key's per_minute limit (429)
    bytes_out: int = 0  # answer bytes sent to this key's clients

    def to_json(self) -> dict:
        return asdict(self)


def parse_key_counts(text: str) -> list[KeyCount]:
    """Per-key counters from the exporter's text (prometheus-client's parser: imported here, off the
    CLI's start path), in the order the config names the keys."""
    from prometheus_client.parser import text_string_to_metric_families

    seen: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            proxy = s.labels.get("proxy", "")
            if not proxy.startswith(PREFIX):
                continue
            row = seen.setdefault(proxy[len(PREFIX) :], {})
            field = _field(s.name, s.labels.get("code"))
            if field is not None:
                row[field] = row.get(field, 0.0) + s.value
    return [KeyCount(name, **{k: int(v) for k, v in row.items()}) for name, row in seen.items()]


def _field(sample: str, code: str | None) -> str | None:
    if sample == "haproxy_backend_http_requests_total":
        return "requests"
    if sample == "haproxy_backend_bytes_out_total":
        return "bytes_out"
    if sample == "haproxy_backend_requests_denied_total":
        return "limited"
    if sample == "haproxy_backend_http_responses_total":
        return {"2xx": "ok", "4xx": "client_errors", "5xx": "server_errors"}.get(code or "")
    return None


def keyed_get(url: str, key: str | None, timeout: float, what: str, fix: str) -> bytes:
    """GET `url` of a gateway with the operator's key; a failure says `what` did not come, and `fix`."""
    req = urllib.request.Request(url)
    if key:
        req.add_header("Authorization", f"Bearer {key}")

    def fail(f: Failure) -> SparkctlError:
        why = f"HTTP {f.code}" if f.code is not None else f.detail
        return SparkctlError(f"{what} ({why})", fix=fix)

    return fetch(req, timeout, fail)[0]


def key_counts(base_url: str, key: str, timeout: float = 5.0) -> list[KeyCount]:
    """The gateway at `base_url` (the API's endpoint) asked with the operator's key."""
    raw = keyed_get(
        base_url.rstrip("/") + ROUTE,
        key,
        timeout,
        f"the gateway at {base_url} gave no per-key counts",
        "`sparkctl up` replaces a gateway started before engine.api_keys was set",
    )
    return parse_key_counts(raw.decode(errors="replace"))
