"""A measured quantity with the interval its noise allows: :class:`Spread`, the value every claim judges.

It is a measurement, not a judgement: ``cnnlab.profiling`` builds it (a time within its rounds, a memory average
within its runs, an exact count) and ``cnnlab.claims`` compares it with a threshold or with another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

import pandas as pd

# A time is known only within a factor TIME_NOISE of its median, or within its measured interval where that is wider
# (Spread.timed). Why: the same work timed in another process, or in another round, lands further from this time than
# its own batches and rounds show (memory placement, the core it runs on, a shared machine's other jobs), and a claim
# must not call identical work different (the A/A test in tests/test_rounds.py). Measured on this project's 2-core
# shared AMD EPYC, 2026-11-27, a 256x256 matmul (0.6 ms) timed in 2 rounds of 5 batches, 20 trials a process: one
# process's time over another's was 0.77-1.30x with the machine otherwise idle (four processes) and 0.68-1.42x beside
# a running notebook, between two rounds of one process 0.85-1.22x, while one time's own rounds were often a few
# percent apart. So the range of the rounds alone called the same work different in 10-19 of 20 trials between
# processes (idle; 10-12 of 20 under load) and 4-6 of 20 between rounds. The factor a trial needed to overlap was
# above 1.20 in one of 220 trials (under load); 1.25 passed 19 or 20 of 20 each time: two times floored at x/1.25
# overlap unless they are more than 1.56x apart. With 20 batches a round (12 ms, still less than a study's point),
# as the A/A test times, one process over another was 0.81-1.26x and 1.25 passed 20 of 20 in seven runs.
# Re-measured 2026-12-07 with the current method (benchmarks/time_noise.py: two processes side by side, each a point's
# time as the median of 8 rounds' medians, 20 trials, the machine under other jobs' load): one process over the other
# 0.80-1.16, a factor of 1.26 for all 20 to overlap. Since then this allowance is for an absolute time alone (01's
# 15 ms bound): times that a claim compares are paired rounds in one process (cnnlab.profiling.compare), which need
# none.
TIME_NOISE = 1.25


@dataclass(frozen=True)
class Spread:
    """A measured quantity: ``value`` (the median, say) and the interval ``low``-``high`` its noise allows."""

    value: float
    low: float
    high: float

    def __post_init__(self):
        values = (self.value, self.low, self.high)
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            raise ValueError(f"Spread{values}: value, low and high must be finite numbers")
        if not self.low <= self.value <= self.high:
            raise ValueError(f"Spread{values}: needs low <= value <= high")

    @classmethod
    def exact(cls, value: float) -> "Spread":
        """A quantity without noise (bytes the allocator handed out, a count of calls)."""
        value = float(value)
        return cls(value, value, value)

    @classmethod
    def timed(cls, value: float, low: float, high: float) -> "Spread":
        """A time (``value``, e.g. a median, within its measured ``low``-``high``) with the noise floor every time
        carries: the interval widened to at least ``value`` / :data:`TIME_NOISE` - ``value`` * :data:`TIME_NOISE`
        (a time measured in one process is not known closer than that, see :data:`TIME_NOISE`)."""
        value = float(value)
        return cls(value, min(float(low), value / TIME_NOISE), max(float(high), value * TIME_NOISE))

    @classmethod
    def of(cls, row: Mapping, metric: str) -> "Spread":
        """``row``'s timed ``<metric>_median`` within ``<metric>_p10``-``<metric>_p90`` (the columns of
        ``cnnlab.profiling.benchmark``: ``latency_ms``), widened to the noise floor of a time (:meth:`timed`)."""
        return cls.timed(*(float(row[f"{metric}_{q}"]) for q in ("median", "p10", "p90")))

    @classmethod
    def of_samples(cls, values: Iterable[float]) -> "Spread":
        """The median of repeated measurements within their smallest and largest."""
        values = sorted(float(v) for v in values)
        if not values:
            raise ValueError("Spread.of_samples: no values")
        return cls(float(pd.Series(values).median()), values[0], values[-1])

    @classmethod
    def of_range(cls, row: Mapping, metric: str, ends: tuple[str, str] = ("min", "max"), *,
                 required: bool = False) -> "Spread":
        """``row``'s ``<metric>`` within ``<metric>_<ends[0]>``-``<metric>_<ends[1]>`` (the range of repeated
        measurements: ``("min", "max")`` or ``("low", "high")``), widened to hold the value. An end that is NaN, or
        missing unless ``required``, gives the value alone; a missing end with ``required`` raises KeyError and a
        missing or NaN value ValueError."""
        value = float(row[metric])
        ends = [float(row[f"{metric}_{e}"] if required else row.get(f"{metric}_{e}", value)) for e in ends]
        low, high = (value if math.isnan(v) else v for v in ends)
        return cls(value, min(low, value), max(high, value))

    @classmethod
    def timed_range(cls, row: Mapping, metric: str, ends: tuple[str, str] = ("min", "max")) -> "Spread":
        """A time from repeated measurements (:meth:`of_range`: ``row``'s ``<metric>`` within its ends) with the noise
        floor of a time (:meth:`timed`): another process's time of the same work lands further off than its repeats
        show. Also for a rate computed from a time (the floor is symmetric: x1.25 either way)."""
        x = cls.of_range(row, metric, ends)
        return cls.timed(x.value, x.low, x.high)

    @classmethod
    def timed_samples(cls, values: Iterable[float]) -> "Spread":
        """Repeated times (:meth:`of_samples`: their median within the least and most) with the floor of a time."""
        x = cls.of_samples(values)
        return cls.timed(x.value, x.low, x.high)

    def __truediv__(self, other: "Spread | float") -> "Spread":
        """The ratio's interval: the extremes of one over the extremes of the other (positive quantities)."""
        other = other if isinstance(other, Spread) else Spread.exact(other)
        if min(self.low, other.low) <= 0:
            raise ValueError(f"{self} / {other}: a ratio of spreads needs positive quantities")
        return Spread(self.value / other.value, self.low / other.high, self.high / other.low)

    def __mul__(self, k: "Spread | float") -> "Spread":
        """The quantity scaled by a positive number, or the product of two positive quantities (its interval: the
        product of the lows to the product of the highs)."""
        if isinstance(k, Spread):
            if min(self.low, k.low) <= 0:
                raise ValueError(f"{self} * {k}: a product of spreads needs positive quantities")
            return Spread(self.value * k.value, self.low * k.low, self.high * k.high)
        if k <= 0:
            raise ValueError(f"{self} * {k}: scale by a positive number")
        return Spread(self.value * k, self.low * k, self.high * k)

    __rmul__ = __mul__

    def inverse(self) -> "Spread":
        """1 / the quantity (time per batch -> batches per second)."""
        return Spread.exact(1.0) / self

    def text(self, fmt: str = ".3g", unit: str = "") -> str:
        """E.g. "1.9x (1.7-2.3x)"; an exact quantity shows its value alone."""
        value = f"{self.value:{fmt}}{unit}"
        return value if self.low == self.high else f"{value} ({self.low:{fmt}}-{self.high:{fmt}}{unit})"
