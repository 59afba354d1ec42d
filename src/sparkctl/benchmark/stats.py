"""Distribution of a measurement over requests: percentiles, mean and spread."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass


def percentile(sorted_vals: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    if len(sorted_vals) == 1:
        return sorted_vals[0]
    pos = (len(sorted_vals) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


@dataclass(frozen=True)
class Spread:
    mean: float
    stdev: float  # sample stdev; 0.0 for a single value
    min: float
    max: float
    n: int
    p50: float
    p90: float
    p99: float  # with fewer than 100 values this interpolates towards the max: read it with n

    @property
    def median(self) -> float:
        return self.p50

    def to_json(self) -> dict:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(self).items()}

    def contains(self, value: float, k: float = 1.0) -> bool:
        """`value` lies within [min, max] widened by k stdevs."""
        return self.min - k * self.stdev <= value <= self.max + k * self.stdev


def spread(values: list[float | None]) -> Spread | None:
    vals = sorted(float(v) for v in values if v is not None)
    if not vals:
        return None
    return Spread(
        mean=statistics.fmean(vals),
        stdev=statistics.stdev(vals) if len(vals) > 1 else 0.0,
        min=vals[0],
        max=vals[-1],
        n=len(vals),
        p50=percentile(vals, 50),
        p90=percentile(vals, 90),
        p99=percentile(vals, 99),
    )
