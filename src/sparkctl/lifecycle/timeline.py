"""Where an `up`'s seconds go: each step as measured around the real call (checks, admission,
secrets, each rank's container create+start, each rank's load to ready, readiness), for `up -v`
and `up --json` (issue 46: nothing told the user where the seconds over a start by hand went)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Step:
    name: str
    start: float  # seconds after the timeline's origin
    seconds: float
    node: str | None = None
    rank: int | None = None

    def to_json(self) -> dict:
        return {
            "step": self.name,
            "start_s": round(self.start, 3),
            "seconds": round(self.seconds, 3),
            "node": self.node,
            "rank": self.rank,
        }


@dataclass
class Timeline:
    origin: float = field(default_factory=time.monotonic)
    steps: list[Step] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(
        self, name: str, start: float, end: float, node: str | None = None, rank: int | None = None
    ) -> None:
        """A step that ran from `start` to `end` (time.monotonic()); safe from fan-out threads."""
        with self._lock:
            self.steps.append(Step(name, start - self.origin, max(0.0, end - start), node, rank))

    @contextmanager
    def step(self, name: str, node: str | None = None, rank: int | None = None) -> Iterator[None]:
        """Time the block as a step (recorded whether it returns or raises)."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.add(name, start, time.monotonic(), node, rank)

    def ended(self, name: str, rank: int | None = None) -> float | None:
        """time.monotonic() at which the last step of that name (and rank) ended."""
        found = [s for s in self.steps if s.name == name and (rank is None or s.rank == rank)]
        return self.origin + found[-1].start + found[-1].seconds if found else None

    def to_json(self) -> list[dict]:
        return [s.to_json() for s in sorted(self.steps, key=lambda s: s.start)]

    def lines(self) -> list[str]:
        return timeline_lines(self.to_json())


def timeline_lines(steps: list[dict]) -> list[str]:
    """One line a step of `Timeline.to_json()`: `  12.30s +  4.50s  create+start rank 1@spark2`."""
    out = []
    for s in steps:
        node, rank = s.get("node"), s.get("rank")
        where = f" rank {rank}@{node}" if rank is not None else f" {node}" if node else ""
        out.append(f"{s['start_s']:7.2f}s +{s['seconds']:6.2f}s  {s['step']}{where}")
    return out
