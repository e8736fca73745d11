"""Metrics derived from measured ones, in one place: ratios, speed-ups, changes in percent, time per item and
scaling efficiency (throughput has its own module, ``throughput.py``). Each returns NaN (never 0 or inf) where its
inputs do not define it (a missing value, a zero or negative denominator), so a missing measurement stays missing.
The names of the columns they fill carry their unit: ``_x`` for a ratio, ``_pct`` for a percentage, ``_ms`` /
``_items_per_s`` for times and rates.

:func:`against` sets every row beside its baseline row (fp32, one process, the untiled run...) in a table.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pandas as pd


def _number(x) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return math.nan
    return x if math.isfinite(x) else math.nan


def ratio(numerator, denominator) -> float:
    """``numerator / denominator`` (x); NaN when either is missing or the denominator is not positive."""
    n, d = _number(numerator), _number(denominator)
    return n / d if d > 0 and not math.isnan(n) else math.nan


def speedup(baseline_time, time) -> float:
    """How many times faster than the baseline (x): ``baseline_time / time``."""
    return ratio(baseline_time, time)


def change_pct(value, baseline) -> float:
    """The change of ``value`` against ``baseline`` in percent: ``100 * (value - baseline) / baseline``."""
    r = ratio(value, baseline)
    return 100.0 * (r - 1.0) if not math.isnan(r) else math.nan


def per_item(total, items) -> float:
    """``total`` (a time, a size) per item: ``total / items``, in ``total``'s unit."""
    return ratio(total, items)


def efficiency(speedup_x, workers) -> float:
    """Scaling efficiency (1 = ideal): a speed-up over ``workers`` processes or GPUs divided by their number."""
    return ratio(speedup_x, workers)


HOW = {"ratio": ratio, "speedup": speedup, "change_pct": change_pct}


def against(df: pd.DataFrame, column: str, baseline: Mapping[str, Any], *, by: Sequence[str] = (),
            how: str = "ratio") -> pd.Series:
    """Each row's ``column`` set beside the baseline row of its group (the rows with the same ``by`` values):
    the row whose columns equal ``baseline`` (``{"precision": "fp32"}``). ``how``: "ratio" (row / baseline, x),
    "speedup" (baseline / row, x) or "change_pct" (row against baseline, %). NaN for a group without exactly one
    baseline row with a value (the baseline failed: nothing to compare with)."""
    if how not in HOW:
        raise ValueError(f"how={how!r} is not valid; valid: {', '.join(HOW)}")
    fn, by = HOW[how], list(by)
    is_base = pd.Series(True, index=df.index)
    for name, value in baseline.items():
        is_base &= df[name] == value
    out = pd.Series(math.nan, index=df.index, dtype=float)
    positions = df.groupby(by, sort=False, dropna=False).indices.values() if by else [range(len(df))]
    for rows in positions:
        index = df.index[rows]
        base = df.loc[index][is_base.loc[index]][column].dropna()
        if len(base) != 1:
            continue
        b = base.iloc[0]
        out.loc[index] = [fn(b, v) if how == "speedup" else fn(v, b) for v in df.loc[index, column]]
    return out
