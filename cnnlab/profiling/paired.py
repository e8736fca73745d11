"""Times of several variants taken side by side in rounds, and each one's ratio to a baseline round by round.

On a shared machine the load drifts while a benchmark runs, and a single variant's spread (its batches' p10-p90, or
the range of its rounds) is often wider than the difference between two variants. Timing every variant once per
round, one right after another (the order alternating between rounds), and dividing each variant's time by the
baseline's *of the same round* cancels what drifted between rounds: the ratio's interval (:func:`paired_ratios`,
the least and most of the rounds' ratios) is then that of the comparison itself. Identical work gives rounds'
ratios on both sides of 1, so its interval holds 1 unless every round came out one way: for ``n`` rounds of two
identical variants, chance 2 / 2**n (under 1% from 8 rounds on).
"""

from __future__ import annotations

import math
import statistics
from typing import Callable, Mapping, Sequence


def time_in_rounds(calls: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """``rounds`` passes over ``calls`` (label -> a function that times its variant once and returns the time): in
    each pass every variant once, in the labels' order on even passes and reversed on odd ones (neither is always
    first after a change of load). Returns label -> its times, one per pass."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds!r} must be at least 1")
    times: dict[str, list[float]] = {label: [] for label in calls}
    for r in range(rounds):
        for label in (list(calls) if r % 2 == 0 else list(reversed(calls))):
            times[label].append(float(calls[label]()))
    return times


def paired_ratios(times: Mapping[str, Sequence[float]], base: str) -> dict[str, dict[str, float]]:
    """For each label of ``times`` (label -> one time per round, as :func:`time_in_rounds` returns): its time over
    ``base``'s, round by round, as ``{"ratio": median of the rounds' ratios, "ratio_low": least, "ratio_high":
    most, "rounds": how many}``; a round where either time is missing (NaN) is left out (NaN ratios if none
    remains). The baseline's own entry is exactly 1."""
    if base not in times:
        raise ValueError(f"base={base!r} is not one of the timed labels: {', '.join(times)}")
    out = {}
    for label, ts in times.items():
        if len(ts) != len(times[base]):
            raise ValueError(f"{label!r} has {len(ts)} rounds, {base!r} {len(times[base])}: pair rounds one to one")
        ratios = [t / b for t, b in zip(ts, times[base]) if not (math.isnan(t) or math.isnan(b)) and b > 0]
        if label == base:
            ratios = [1.0] * len(ratios)
        out[label] = ({"ratio": statistics.median(ratios), "ratio_low": min(ratios), "ratio_high": max(ratios),
                       "rounds": len(ratios)} if ratios else
                      {"ratio": math.nan, "ratio_low": math.nan, "ratio_high": math.nan, "rounds": 0})
    return out
