"""`sparkctl top`: the live state of a running cluster in one screen (engine metrics, GPUs, memory,
fabric, warnings), read from the engine's /metrics and one batched SSH exec per node; no agent."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkctl.top.snapshot import Collector, Snapshot

MIN_INTERVAL = 0.5


def once(collector: Collector, interval: float, sleep: Callable[[float], object] = time.sleep) -> Snapshot:
    """Two refreshes `interval` apart: the second one has rates (tokens/s, fabric bytes/s)."""
    collector.sample()
    sleep(max(interval, MIN_INTERVAL))
    return collector.sample()


def live(
    collector: Collector,
    interval: float,
    show: Callable[[Snapshot], object],
    sleep: Callable[[float], object] = time.sleep,
) -> None:
    """Refresh forever (Ctrl-C ends it); each refresh starts `interval` after the previous one started."""
    interval = max(interval, MIN_INTERVAL)
    while True:
        t0 = time.monotonic()
        show(collector.sample())
        sleep(max(0.0, interval - (time.monotonic() - t0)))
