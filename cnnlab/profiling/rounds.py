"""A grid timed in rounds, and the time each point is judged on: :func:`combine_rounds`, :func:`time_spread`.

One point's own batches (their p10-p90) do not show the load of a shared machine drifting between points, which is
what moves one point against another. So studies that compare points time the whole grid ``rounds`` times over (a
``round`` grid parameter of :func:`cnnlab.profiling.sweep`), and a point's time is the median of its rounds'
medians within their least and most, widened to the noise floor of every time (``cnnlab.profiling.Spread.timed``):
the interval the claims judge.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import pandas as pd

from cnnlab.profiling.spread import Spread


def combine_rounds(timed: pd.DataFrame, keys: Sequence[str], spreads: Sequence[str] = ()) -> pd.DataFrame:
    """One row per point (``keys``) of the per-round rows of ``timed`` (a ``round`` column), in first-seen order.

    Each is the first measured round's row with: latency_ms_median the median of the rounds' medians;
    latency_ms_p10 / _p90 the lowest p10 and highest p90 (the figure's whiskers: the batches' spread and the drift
    between rounds); latency_ms_rounds_min / _max the least and most of the rounds' medians (the interval the
    claims judge, :func:`time_spread`); latency_ms_mean the rounds' mean (where measured); repeats the timed batches
    of all rounds; rounds (how many were measured); round_medians_ms ("1.2, 1.3, nan, 1.1": every round's median in
    round order, nan where that round was not measured, so that two points pair round by round:
    ``cnnlab.profiling.compare.Paired.of_rounds``). For each metric in
    ``spreads`` (with ``<metric>_low`` / ``_high`` per round, e.g. avg_mem_mib): the median over the rounds within
    the least low and the most high. A point with no measured round keeps its first row (its status and error),
    with rounds 0. Without a ``round`` column: ``timed`` with rounds 1 (0 where not measured)."""
    if "round" not in timed:
        return timed.assign(rounds=(timed["status"] == "ok").astype(int), round_medians_ms=None)
    rows = []
    for _, group in timed.groupby(list(keys), sort=False):
        ok = group[group["status"] == "ok"]
        row = (ok if len(ok) else group).iloc[0].to_dict()
        row.pop("round")
        if len(ok):
            medians = ok["latency_ms_median"].astype(float)
            row.update(latency_ms_median=float(medians.median()), latency_ms_p10=float(ok["latency_ms_p10"].min()),
                       latency_ms_p90=float(ok["latency_ms_p90"].max()), latency_ms_rounds_min=float(medians.min()),
                       latency_ms_rounds_max=float(medians.max()), repeats=int(ok["repeats"].sum()),
                       round_medians_ms=_by_round(group))
            if "latency_ms_mean" in ok:
                row["latency_ms_mean"] = float(ok["latency_ms_mean"].astype(float).mean())
            for metric in spreads:
                if metric in ok:
                    row.update({metric: _median(ok[metric]),
                                f"{metric}_low": float(ok[f"{metric}_low"].astype(float).min()),
                                f"{metric}_high": float(ok[f"{metric}_high"].astype(float).max())})
        row["rounds"] = len(ok)
        rows.append(row)
    return pd.DataFrame(rows)


def _by_round(group: pd.DataFrame) -> str:
    """Each round's median time per batch, in round order ("1.234, nan, 1.3"; 6 significant digits: a paired ratio
    is taken from them), nan where the round was not measured."""
    rounds = group.sort_values("round", kind="stable")
    return ", ".join(f"{float(m):.6g}" if s == "ok" else "nan"
                     for m, s in zip(rounds["latency_ms_median"], rounds["status"]))


def _median(values: pd.Series) -> float:
    """The median of ``values``' measured (not NaN) entries; NaN where none is (a memory average on a CPU), without
    the "Mean of empty slice" RuntimeWarning pandas 2.2 (Colab's) prints for an all-NaN median."""
    measured = values.astype(float).dropna()
    return float(measured.median()) if len(measured) else math.nan


def time_spread(row: Mapping) -> Spread:
    """A point's time per batch with its noise: with two or more rounds the median of the rounds' medians within
    their least and most (:func:`combine_rounds`); with one round its median within its p10-p90; either widened to
    at least the median / ``TIME_NOISE`` - the median x ``TIME_NOISE`` (:meth:`Spread.timed`: what another
    process's time of the same work can be)."""
    rounds = pd.to_numeric(row.get("rounds"), errors="coerce")
    low, high = row.get("latency_ms_rounds_min"), row.get("latency_ms_rounds_max")
    if rounds is not None and math.isfinite(rounds) and rounds >= 2 and all(
            v is not None and math.isfinite(float(v)) for v in (low, high)):
        return Spread.timed(float(row["latency_ms_median"]), float(low), float(high))
    return Spread.of(row, "latency_ms")
