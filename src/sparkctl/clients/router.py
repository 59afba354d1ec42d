"""A small client for sglang-router's worker API (0.3.x), stdlib only so the CLI stays quick.

Verified against sglang-router 0.3.2 on loopback (tests/router): `GET /workers` lists workers with
`id`, `url`, `is_healthy` and `load`; `POST /workers {"url": U}` and `DELETE /workers/<id>` answer
202 and act in the background, so callers wait for the listing to change.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from sparkctl.cluster_http import Failure, fetch
from sparkctl.errors import SparkctlError


class RouterError(SparkctlError):
    """The router did not answer or refused a change."""


@dataclass(frozen=True)
class Worker:
    id: str
    url: str
    healthy: bool
    load: int


class RouterClient:
    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if self._api_key:
            req.add_header("Authorization", f"Bearer {self._api_key}")
        raw, _ = fetch(req, self.timeout, lambda f: self._error(method, path, f))
        return json.loads(raw) if raw else {}

    def _error(self, method: str, path: str, failure: Failure) -> RouterError:
        if failure.code is not None:
            return RouterError(
                f"router {method} {path}: HTTP {failure.code}",
                fix="check the router's log (`sparkctl logs --router`) and its API key",
            )
        return RouterError(
            f"router at {self.base_url} not reachable: {failure.detail}",
            fix="`sparkctl status` shows whether the router container runs",
        )

    def workers(self) -> list[Worker]:
        listing = self._call("GET", "/workers").get("workers", [])
        return [
            Worker(w["id"], w["url"].rstrip("/"), bool(w.get("is_healthy")), int(w.get("load") or 0))
            for w in listing
        ]

    def find(self, url: str) -> Worker | None:
        url = url.rstrip("/")
        return next((w for w in self.workers() if w.url == url), None)

    def add(self, url: str) -> None:
        self._call("POST", "/workers", {"url": url})

    def remove(self, url: str) -> bool:
        """Take a worker out of rotation; False if the router did not list it."""
        worker = self.find(url)
        if worker is None:
            return False
        self._call("DELETE", f"/workers/{worker.id}")
        return True

    def wait_for(
        self, what: str, predicate: Callable[[list[Worker]], bool], *, timeout: float, interval: float = 0.1
    ) -> list[Worker]:
        """Poll the listing until predicate holds; RouterError naming `what` at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            listing = self.workers()
            if predicate(listing):
                return listing
            if time.monotonic() >= deadline:
                seen = ", ".join(f"{w.url}({'healthy' if w.healthy else 'unhealthy'})" for w in listing)
                raise RouterError(
                    f"router: {what} not seen within {timeout:.0f}s (workers: {seen or 'none'})"
                )
            time.sleep(interval)
