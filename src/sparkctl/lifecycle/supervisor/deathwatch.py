"""Rank death as it happens: one thread per node follows Docker's event stream (the SDK's
`events()` over the node's verified connection) for this cluster's containers and wakes the
supervisor on any `die` (any exit code, 0 included: the real engine's rank 0 exits 0 when its worker
dies). The supervisor's inspect of every rank then runs at once instead of at its next poll, and
the restart's event says how long after the exit it was decided (`since_exit_s`, Docker's own
time of the exit on the node).
"""

from __future__ import annotations

import contextlib
import threading
import time

from sparkctl.connectors.pool import NodePool
from sparkctl.lifecycle import state
from sparkctl.planning.model import LABEL_PREFIX

RETRY_S = 1.0  # a broken stream (node lost, Docker restarted) is followed again after this


class DeathWatch:
    """`wake` is set on every `die` of the cluster's containers on any node; `exits` keeps the
    last exit per container name: (Docker's time of it, exit code)."""

    def __init__(self, pool: NodePool, cluster: str, nodes: list[str], wake: threading.Event) -> None:
        self.pool, self.cluster, self.wake = pool, cluster, wake
        self.exits: dict[str, tuple[float, int | None]] = {}
        self.stopped = threading.Event()
        self.streams: dict[str, object] = {}
        self.errors: dict[str, str] = {}
        self.threads = [
            threading.Thread(target=self._follow, args=(n,), name=f"deathwatch-{n}", daemon=True)
            for n in dict.fromkeys(nodes)
        ]

    def start(self) -> DeathWatch:
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        for stream in list(self.streams.values()):
            with contextlib.suppress(Exception):
                stream.close()  # type: ignore[attr-defined]

    def seen(self, event: dict) -> None:
        """One decoded Docker event."""
        if event.get("Type") != "container" or event.get("Action") != "die":
            return
        attrs = (event.get("Actor") or {}).get("Attributes") or {}
        if attrs.get(f"{LABEL_PREFIX}cluster") != self.cluster:
            return
        at = event.get("timeNano")
        when = at / 1e9 if isinstance(at, int) else float(event.get("time") or time.time())
        code = attrs.get("exitCode")
        self.exits[attrs.get("name", "?")] = (when, int(code) if str(code).isdigit() else None)
        self.wake.set()

    def since_exit(self, container: str) -> float | None:
        got = self.exits.get(container)
        return None if got is None else round(max(0.0, time.time() - got[0]), 3)

    def _follow(self, node: str) -> None:
        since = int(time.time())
        filters = {"type": "container", "event": "die", "label": f"{LABEL_PREFIX}cluster={self.cluster}"}
        while not self.stopped.is_set():
            try:
                stream = self.pool.get(node).docker().api.events(since=since, decode=True, filters=filters)
                self.streams[node] = stream
                for event in stream:
                    since = int(event.get("time") or since)
                    self.seen(event)
            except Exception as exc:  # noqa: BLE001 - a lost node, Docker restarted: follow again
                why = f"{type(exc).__name__}: {exc}"
                if self.errors.get(node) != why and not self.stopped.is_set():
                    self.errors[node] = why  # the polls still see deaths, later: say so once
                    state.record_event(self.cluster, "deathwatch_failed", node=node, detail=why[:300])
            self.stopped.wait(RETRY_S)
