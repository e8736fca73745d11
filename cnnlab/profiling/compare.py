"""Variants compared in paired, alternating rounds, with a confidence interval that more rounds narrow.

The rule every claim that compares variants is judged by (docs/claims.md):

- **Paired rounds.** Each round times every variant once, one right after another, the order reversed every other
  round; a variant's ratio to the baseline is taken *within* a round, so the drift of a shared machine's load between
  rounds cancels instead of widening the interval.
- **A real confidence interval.** The ratio is the median of the rounds' ratios, and its interval the sign test's
  distribution-free confidence interval of that median (``scipy.stats.quantile_test``): it assumes only that the
  rounds are independent, not any shape of the noise, and it narrows as rounds are added (a min-max range widens).
  No fixed allowance is added: both variants ran in the same process, round by round.
- **More rounds where undecided, at a known error rate.** Rounds are looked at after ``min_rounds``, then at
  1.5 times as many each look up to ``max_rounds`` (:func:`looks`). With ``K`` looks planned, each look's interval
  is at level ``1 - (1 - confidence) / K`` (Bonferroni's alpha spending: alpha split equally over the looks). The
  union bound then keeps the chance that *any* look's interval misses the true median at ``1 - confidence`` at most,
  whatever rule decides when to stop, and whatever the noise's shape; we chose it over an anytime-valid confidence
  sequence because it needs no tuning and no assumption of bounded or sub-Gaussian ratios, and over O'Brien-Fleming
  spending because the sign test's discrete levels leave little to gain from uneven spending at these round counts.
  Rounds stop as soon as the caller's ``until`` says the comparison is decided, or when the budget is spent.

:func:`compare` runs the rounds itself; a study whose grid is timed in rounds by ``cnnlab.profiling.sweep`` (a
``round`` column) reads the same intervals from its rows with :meth:`Paired.of_rounds`, and extends its rounds with
:func:`until_decided`.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import scipy.stats

from cnnlab.profiling.spread import Spread

CONFIDENCE = 0.95  # of a verdict's interval, over all the looks at its rounds
GROWTH = 1.5  # each look at the rounds comes after this many times as many rounds as the previous one
UNBOUNDED = (1e-300, 1e300)  # the interval of a quantity with too few rounds for its level: it decides nothing


def looks(min_rounds: int, max_rounds: int) -> list[int]:
    """The round counts at which rounds are looked at: ``min_rounds``, then ``GROWTH`` times as many (rounded up)
    each look, the last ``max_rounds`` (e.g. 8, 12, 18, 24 for 8-24)."""
    if not (isinstance(min_rounds, int) and isinstance(max_rounds, int)) or not 1 <= min_rounds <= max_rounds:
        raise ValueError(f"min_rounds={min_rounds!r}, max_rounds={max_rounds!r}: need integers, "
                         f"1 <= min_rounds <= max_rounds")
    out = [min_rounds]
    while out[-1] < max_rounds:
        out.append(min(max_rounds, max(out[-1] + 1, math.ceil(out[-1] * GROWTH))))
    return out


def look_confidence(n_looks: int, confidence: float = CONFIDENCE) -> float:
    """The level of each look's interval so that all ``n_looks`` together keep ``confidence`` (alpha split equally)."""
    return 1 - (1 - confidence) / max(1, int(n_looks))


def fewest_rounds(confidence: float) -> int:
    """The fewest rounds whose sign-test interval of the median at ``confidence`` is finite: the two extreme rounds
    must already leave no more than ``1 - confidence`` outside (2 / 2**n <= 1 - confidence)."""
    return math.ceil(math.log2(2 / (1 - confidence)) - 1e-12)


def median_interval(values: Sequence[float], confidence: float) -> tuple[float, float, float]:
    """(median, low, high) of ``values`` (NaN left out): the sign test's distribution-free ``confidence`` interval of
    the median, from ``scipy.stats.quantile_test``; low/high are NaN where there are too few values for that level
    (:func:`fewest_rounds`)."""
    x = np.sort(np.asarray([v for v in values if not math.isnan(v)], dtype=float))
    if not len(x):
        return math.nan, math.nan, math.nan
    low, high = _ranks(len(x), round(confidence, 12))
    return (float(np.median(x)), math.nan if low is None else float(x[low]),
            math.nan if high is None else float(x[high]))


@functools.lru_cache(maxsize=4096)
def _ranks(n: int, confidence: float) -> tuple[int | None, int | None]:
    """The order statistics (0-based ranks) that bound the sign test's interval of the median of ``n`` values: they
    depend on ``n`` and the level alone, so ``quantile_test`` is asked once, on the ranks themselves."""
    ci = scipy.stats.quantile_test(np.arange(n, dtype=float), q=(n - 1) / 2, p=0.5).confidence_interval(confidence)
    return (None if math.isnan(ci.low) else int(ci.low)), (None if math.isnan(ci.high) else int(ci.high))


class NoRounds(ValueError):
    """A row without the per-round times a paired comparison needs (a table stored before paired rounds)."""


@dataclass(frozen=True)
class Paired(Spread):
    """A quantity measured once per round (``samples``), its median within the sign-test ``confidence`` interval of
    the median. Dividing one by another of the same rounds gives their paired ratio, round by round; :meth:`at`
    re-judges it at another level (a claim of several parts spends its alpha over them)."""

    samples: tuple = ()
    confidence: float = CONFIDENCE

    @classmethod
    def of(cls, samples: Sequence[float], confidence: float = CONFIDENCE) -> "Paired":
        """``samples`` (one per round; NaN for a round not measured) within their median's ``confidence`` interval.
        Where the rounds are too few for that level, the interval is unbounded in effect (0 to a huge number) and the
        quantity decides nothing."""
        samples = tuple(float(s) for s in samples)
        median, low, high = median_interval(samples, confidence)
        if math.isnan(median):
            raise ValueError("Paired.of: no measured round")
        if math.isnan(low) or math.isnan(high):
            low, high = min(UNBOUNDED[0], median), max(UNBOUNDED[1], median)
        return cls(median, low, high, samples, confidence)

    @classmethod
    def of_rounds(cls, row: Mapping, confidence: float | None = None, column: str = "round_medians_ms") -> "Paired":
        """A point's time per round from ``row[column]`` ("1.2, 1.3, nan", round by round:
        ``cnnlab.profiling.combine_rounds``), at ``confidence`` (default: the row's own ``confidence`` column, the
        level its rounds were taken at, else :data:`CONFIDENCE`)."""
        text = row.get(column)
        if not isinstance(text, str) or not text.strip():
            raise NoRounds(f"no per-round times ({column}) to pair: a table stored before paired rounds, or a point "
                           f"not measured; measure it again to judge")
        level = confidence if confidence is not None else _row_confidence(row)
        return cls.of([float(t) for t in text.split(",")], level)

    def at(self, confidence: float) -> "Paired":
        """The same rounds at another ``confidence``."""
        return Paired.of(self.samples, confidence)

    @property
    def rounds(self) -> int:
        """Rounds measured (NaN left out)."""
        return sum(not math.isnan(s) for s in self.samples)

    def text(self, fmt: str = ".3g", unit: str = "") -> str:
        """E.g. "1.21x (1.15-1.30x, 12 rounds)"; an interval that decides nothing shows as "undecidable"."""
        value = f"{self.value:{fmt}}{unit}"
        if self.low <= UNBOUNDED[0] or self.high >= UNBOUNDED[1]:
            return f"{value} ({self.rounds} rounds: too few for an interval at {self.confidence:.4g})"
        return f"{value} ({self.low:{fmt}}-{self.high:{fmt}}{unit}, {self.rounds} rounds)"

    def __truediv__(self, other):
        """Round by round, the ratio of two quantities of the same rounds (a round missing in either is left out), at
        the lower of their levels; by another quantity, as :class:`Spread` divides."""
        if isinstance(other, Paired) and len(other.samples) == len(self.samples):
            ratios = [a / b if b > 0 else math.nan for a, b in zip(self.samples, other.samples)]
            return Paired.of(ratios, min(self.confidence, other.confidence))
        if isinstance(other, (int, float)) and not isinstance(other, bool) and other > 0:
            return Paired.of([s / other for s in self.samples], self.confidence)
        return Spread.__truediv__(Spread(self.value, self.low, self.high), other)


def _row_confidence(row: Mapping) -> float:
    level = pd.to_numeric(row.get("confidence"), errors="coerce")
    return float(level) if level is not None and math.isfinite(level) and 0 < level < 1 else CONFIDENCE


def at(x, confidence: float):
    """``x`` re-judged at ``confidence`` where it is a :class:`Paired` quantity, else ``x`` as it is (an exact count,
    or a time with its fixed allowance); sequences and mappings of them element by element."""
    if isinstance(x, Paired):
        return x.at(confidence)
    if isinstance(x, Mapping):
        return {k: at(v, confidence) for k, v in x.items()}
    if isinstance(x, (list, tuple)) and not isinstance(x, Spread):
        return type(x)(at(v, confidence) for v in x)
    return x


def spent(x, parts: int):
    """``x`` (a :class:`Paired`, or what :func:`at` takes) with its alpha split over ``parts`` (Bonferroni, which for
    "at least one of them" is also Holm's first step: Holm rejects some null exactly when the smallest p-value is below
    alpha / parts)."""
    if parts <= 1:
        return x
    level = _level(x)
    return x if level is None else at(x, 1 - (1 - level) / parts)


def _level(x) -> float | None:
    if isinstance(x, Paired):
        return x.confidence
    if isinstance(x, Mapping):
        x = list(x.values())
    if isinstance(x, (list, tuple)) and not isinstance(x, Spread):
        levels = [lv for lv in (_level(v) for v in x) if lv is not None]
        return min(levels) if levels else None
    return None


def time_rounds(calls: Mapping[str, Callable[[], object]], rounds: Sequence[int], *, calls_per_round: int = 1,
                clock: Callable[[], float] = time.perf_counter,
                synchronize: Callable[[], None] | None = None) -> dict[str, list[float]]:
    """Time each of ``calls`` ``calls_per_round`` times in each round of ``rounds`` (round numbers), one variant right
    after another, the order reversed at every pass (A B, B A, A B, ...: neither always runs first after a change of
    load), in seconds by ``clock`` (``synchronize()`` before and after each call, e.g. CUDA's). A variant's time in a
    round is the median of its calls in that round (one preemption does not make a round's time). Returns label ->
    its times, one per round."""
    labels = list(calls)
    out: dict[str, list[float]] = {label: [] for label in labels}
    for r in rounds:
        got: dict[str, list[float]] = {label: [] for label in labels}
        for k in range(calls_per_round):
            for label in (labels if (r * calls_per_round + k) % 2 == 0 else labels[::-1]):
                if synchronize:
                    synchronize()
                start = clock()
                calls[label]()
                if synchronize:
                    synchronize()
                got[label].append(clock() - start)
        for label in labels:
            out[label].append(float(np.median(got[label])))
    return out


def ratios_frame(times: Mapping[str, Sequence[float]], base: str, confidence: float) -> pd.DataFrame:
    """One row per label: ``ratio`` (the median of its rounds' time over ``base``'s of the same round), ``ratio_low``,
    ``ratio_high`` (the sign test's ``confidence`` interval of that median), ``rounds``, ``confidence``, ``seconds``
    (the label's median time per call, s) and ``round_times_s`` (its times, round by round, "0.0071, 0.0069, ...")."""
    if base not in times:
        raise ValueError(f"base={base!r} is not one of the timed labels: {', '.join(times)}")
    rows = {}
    for label, ts in times.items():
        if label == base:
            r = Paired(1.0, 1.0, 1.0, tuple(1.0 for _ in ts), confidence)
        else:
            r = Paired.of(ts, confidence) / Paired.of(times[base], confidence)
        finite = r.high < UNBOUNDED[1]
        rows[label] = {"ratio": r.value, "ratio_low": r.low if finite else math.nan,
                       "ratio_high": r.high if finite else math.nan, "rounds": r.rounds, "confidence": confidence,
                       "seconds": float(np.nanmedian(ts)), "round_times_s": ", ".join(f"{t:.6g}" for t in ts)}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("label")


def excludes_one(frame: pd.DataFrame) -> bool:
    """The default ``until`` of :func:`compare`: every label's interval is clear of 1 (its ratio decided either way)."""
    return bool(((frame["ratio_low"] > 1) | (frame["ratio_high"] < 1)).all())


def compare(calls: Mapping[str, Callable[[], object]], base: str, *, min_rounds: int = 8, max_rounds: int = 24,
            calls_per_round: int = 3, budget_s: float | None = None, confidence: float = CONFIDENCE,
            until: Callable[[pd.DataFrame], bool] | None = None, clock: Callable[[], float] = time.perf_counter,
            synchronize: Callable[[], None] | None = None) -> pd.DataFrame:
    """Variants timed in paired, alternating rounds until decided: ``calls`` maps a label to a zero-argument function
    that runs that variant's work once; ``base`` is the label the others are divided by. A round times each variant
    ``calls_per_round`` times, interleaved with the others (:func:`time_rounds`: the round's time is their median).

    Rounds are looked at after ``min_rounds`` and then at :func:`looks`' counts up to ``max_rounds``; the run stops at
    the first look where ``until(frame)`` is true (default :func:`excludes_one`: every ratio's interval is clear of
    1), or where ``budget_s`` seconds have been spent, or at ``max_rounds``. Each look's interval is at
    :func:`look_confidence` (``confidence`` over all the looks planned). Returns :func:`ratios_frame`'s frame, indexed
    by label (the base's row: ratio exactly 1), with ``looks`` (how many were taken) and ``decided`` (``until`` at the
    last look)."""
    if base not in calls:
        raise ValueError(f"base={base!r} is not one of the labels: {', '.join(calls) or '(none)'}")
    if len(calls) < 2:
        raise ValueError(f"calls={list(calls)}: give the baseline and at least one variant to compare with it")
    plan = looks(min_rounds, max_rounds)
    level = look_confidence(len(plan), confidence)
    if min_rounds < fewest_rounds(level):
        raise ValueError(f"min_rounds={min_rounds}: an interval at {level:.4f} (confidence {confidence} over "
                         f"{len(plan)} looks) needs at least {fewest_rounds(level)} rounds")
    until = until or (lambda f: excludes_one(f.drop(index=base)))
    times: dict[str, list[float]] = {label: [] for label in calls}
    start, done = time.perf_counter(), 0
    for i, n in enumerate(plan, 1):
        for label, ts in time_rounds(calls, range(done, n), calls_per_round=calls_per_round, clock=clock,
                                        synchronize=synchronize).items():
            times[label] += ts
        done = n
        frame = ratios_frame(times, base, level)
        decided = bool(until(frame))
        over = budget_s is not None and (time.perf_counter() - start) * plan[min(i, len(plan) - 1)] / n > budget_s
        if decided or over or n == plan[-1]:
            return frame.assign(looks=i, decided=decided)
    raise AssertionError("unreachable: the last look returns")


def until_decided(run: Callable[[int, float], object], decided: Callable[[object], bool], *, min_rounds: int,
                  max_rounds: int, budget_s: float | None = None, confidence: float = CONFIDENCE):
    """A grid timed in rounds (by ``cnnlab.profiling.sweep``, which resumes from its store) extended until decided:
    ``run(n, level)`` measures rounds 0..n-1 (the ones already stored are read back) and returns its result, whose
    intervals are to be taken at ``level`` (:func:`look_confidence` over :func:`looks`' planned looks); after each
    look, ``decided(result)`` says whether every comparison is decided. Stops there, at ``max_rounds``, or when the
    next look would pass ``budget_s`` (s, estimated from the time per round so far). Returns the last result."""
    plan = looks(min_rounds, max_rounds)
    level = look_confidence(len(plan), confidence)
    start = time.perf_counter()  # too few rounds for the level decide nothing (Paired.text says so), no error
    for i, n in enumerate(plan):
        result = run(n, level)
        if i == len(plan) - 1 or decided(result):
            return result
        per_round = (time.perf_counter() - start) / n
        if budget_s is not None and per_round * plan[i + 1] > budget_s:
            return result
    raise AssertionError("unreachable: the last look returns")
