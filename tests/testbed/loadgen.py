"""A steady client load through an endpoint (the router's): N threads sending chat requests back
to back from the controller, counting answers and failures (HTTP error, connection error,
timeout) with their reasons. Used by the rolling-switch tests and bench/rolling.py.

    with LoadGen(url, model="tiny-test", threads=4) as load:
        load.wait_for(20)            # requests flowing
        ...                          # the switch under test
    print(load.stats.line())         # "1234 ok, 0 failed"
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field

from sparkctl.cluster_http import OPENER


@dataclass
class LoadStats:
    ok: int = 0
    failed: int = 0
    reasons: Counter = field(default_factory=Counter)  # failure reason -> count
    replicas: Counter = field(default_factory=Counter)  # which replica answered (the stand-in says)
    failed_at: list[float] = field(default_factory=list)  # time.monotonic() each failure ended
    slowest_failure: float = 0.0  # seconds the longest failed request took

    @property
    def total(self) -> int:
        return self.ok + self.failed

    def line(self) -> str:
        text = f"{self.ok} ok, {self.failed} failed"
        return text + (f" ({dict(self.reasons.most_common(5))})" if self.failed else "")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, TimeoutError) or "timed out" in str(exc):
        return "timeout"
    reason = getattr(exc, "reason", exc)
    return f"{type(reason).__name__}: {reason}"[:120]


class LoadGen:
    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        threads: int = 4,
        timeout: float = 60.0,
        api_key: str | None = None,
        stream: bool = False,
        max_tokens: int | None = None,
        pause: float = 0.0,
    ) -> None:
        self.url = base_url.rstrip("/") + "/v1/chat/completions"
        self.model, self.threads, self.timeout = model, threads, timeout
        self.api_key, self.stream, self.max_tokens = api_key, stream, max_tokens
        self.pause = pause  # seconds each thread waits between requests (a steady, not a flooding, client)
        self.stats = LoadStats()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []

    def _one(self) -> str:
        body = {"model": self.model, "messages": [{"role": "user", "content": "hi"}], "stream": self.stream}
        if self.max_tokens:  # a real engine generates until EOS or its context: keep requests short
            body["max_tokens"] = self.max_tokens
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        with OPENER.open(req, timeout=self.timeout) as resp:
            raw = resp.read().decode()
        if self.stream:
            if "[DONE]" not in raw:  # a stream cut short is a failed request, not an answer
                raise ConnectionError("stream ended before [DONE]")
            return raw
        return json.loads(raw)["choices"][0]["message"]["content"]

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                text = self._one()
            except Exception as exc:  # noqa: BLE001 - every failure is counted with its reason
                now = time.monotonic()
                with self._lock:
                    self.stats.failed += 1
                    self.stats.reasons[_reason(exc)] += 1
                    self.stats.failed_at.append(now)
                    self.stats.slowest_failure = max(self.stats.slowest_failure, now - t0)
                continue
            replica = text.split("replica=", 1)[1].split(")", 1)[0] if "replica=" in text else "?"
            with self._lock:
                self.stats.ok += 1
                self.stats.replicas[replica] += 1
            self._stop.wait(self.pause)

    def start(self) -> LoadGen:
        for i in range(self.threads):
            t = threading.Thread(target=self._loop, name=f"loadgen-{i}", daemon=True)
            t.start()
            self._workers.append(t)
        return self

    def wait_for(self, answers: int, timeout: float = 60.0) -> None:
        """Until `answers` more requests succeeded (a readiness wait, not a performance limit)."""
        target = self.stats.ok + answers
        deadline = time.monotonic() + timeout
        while self.stats.ok < target:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"load: {self.stats.line()}, not {answers} more answers in {timeout:.0f}s"
                )
            time.sleep(0.05)

    def stop(self) -> LoadStats:
        """Stop sending; requests under way finish (and are counted)."""
        self._stop.set()
        for t in self._workers:
            t.join(self.timeout + 5)
        return self.stats

    def __enter__(self) -> LoadGen:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
