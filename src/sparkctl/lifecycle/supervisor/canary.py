"""The supervisor's generation canary: a real 1-token chat through rank 0's API every
`--canary-every` s, for what only a request sees; its first-token deadline follows the measured
time of the last ones rather than a fixed 20 s."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from collections.abc import Callable

from sparkctl.cluster_http import OPENER as _OPENER
from sparkctl.connectors.pool import NodePool
from sparkctl.errors import SparkctlError
from sparkctl.lifecycle import state
from sparkctl.lifecycle.supervisor.process import Policy
from sparkctl.planning.build import Plan
from sparkctl.secrets import resolve, resolve_known

CANARY_TIMEOUT = 20.0


def api_key(plan: Plan, pool: NodePool) -> str | None:
    """The endpoint's API key when the profile sets one (a file-held key is read on rank 0's node)."""
    ref = getattr(plan.endpoint, "api_key", None)
    if ref is None:
        return None
    if ref.file:
        with contextlib.suppress(SparkctlError):
            return resolve(ref, pool.get(plan.ranks[0].node))
    return resolve_known(ref)


def canary_deadline(ttft: list[float]) -> float:
    """The canary's first-token deadline: 10x the slowest of the last canaries, at least 5 s, at
    most CANARY_TIMEOUT (also the deadline before any was measured)."""
    return CANARY_TIMEOUT if not ttft else min(CANARY_TIMEOUT, max(5.0, 10 * max(ttft)))


class Canary:
    """The generation canary every `canary_every` s, its first-token deadline from the last ones'
    measured times; `canary_failures` in a row are the cause."""

    def __init__(self, plan: Plan, key: str | None, policy: Policy) -> None:
        self.plan, self.key, self.policy = plan, key, policy
        self.ttft: list[float] = []  # the last canaries' durations (1 token: the time to first token)
        self.live: Callable[[], bool] = lambda: True  # false: the round is stale, record nothing (Checks)
        self.reset()

    def reset(self) -> None:
        self.fails, self.next_at = 0, time.monotonic() + self.policy.canary_every

    def check(self) -> dict | None:
        if self.policy.canary_every <= 0 or time.monotonic() < self.next_at:
            return None
        t0 = time.monotonic()
        deadline = canary_deadline(self.ttft)
        why = canary(self.plan, self.key, deadline)
        if why is None:
            self.ttft = [*self.ttft[-19:], time.monotonic() - t0]
        self.next_at = time.monotonic() + self.policy.canary_every
        self.fails = self.fails + 1 if why else 0
        if why and self.live():
            state.record_event(
                self.plan.cluster, "canary_failed", count=self.fails, detail=why, deadline_s=deadline
            )
        if self.fails >= self.policy.canary_failures:
            return {"cause": f"generation canary failed {self.fails} times in a row: {why}"}
        return None


def canary(plan: Plan, key: str | None = None, timeout: float = CANARY_TIMEOUT) -> str | None:
    """One real 1-token generation through rank 0's API; None when it worked, else why not."""
    ep = plan.endpoint
    body = {"model": ep.served_model_name, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(
        f"{ep.api_base}/chat/completions", data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            data = json.loads(resp.read() or b"{}")
    except Exception as exc:  # noqa: BLE001 - any failure is a failed canary, said in the event
        return f"{type(exc).__name__}: {exc}"
    return None if data.get("choices") else f"no choices in the reply: {str(data)[:200]}"
