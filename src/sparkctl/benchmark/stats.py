"""Spread of a measurement over repetitions."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Spread:
    mean: float
    stdev: float  # sample stdev; 0.0 for a single value
    min: float
    max: float
    n: int
    median: float  # robust to the odd outlier (a stalled or bursty stream)

    def to_json(self) -> dict:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(self).items()}

    def contains(self, value: float, k: float = 1.0) -> bool:
        """`value` lies within [min, max] widened by k stdevs."""
        return self.min - k * self.stdev <= value <= self.max + k * self.stdev


def spread(values: list[float | None]) -> Spread | None:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return Spread(
        mean=statistics.fmean(vals),
        stdev=sd,
        min=min(vals),
        max=max(vals),
        n=len(vals),
        median=statistics.median(vals),
    )
