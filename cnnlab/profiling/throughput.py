"""Throughput of a benchmarked point, one definition for its table, its figure and its claim.

``throughput_items_per_s`` = batch size / the median time per batch, within batch size / p90 and batch size / p10
of the timed batches (``_low`` and ``_high``); the time for ``n`` items is ``n`` / that rate, with the same interval.

Why the median and not :func:`cnnlab.profiling.benchmark`'s batch x repeats / total time (the mean rate): on a
shared machine one pre-empted batch stretches the total and drags the mean rate of a whole point down (a batch-1
point of 20 batches whose p90 is 10x its median loses half its mean rate), while the median is the time of a typical
batch; and the timed batches that give the median also give its interval, where one total has none. A claim judges
this value with this interval, and the table and the figure show the same, so they cannot disagree.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from cnnlab.profiling.spread import Spread

DEFINITION = "images/s = batch size / median time per batch, within batch size / its p90 and / its p10"
COLUMNS = ("throughput_items_per_s", "throughput_items_per_s_low", "throughput_items_per_s_high")


def throughput(row: Mapping) -> Spread:
    """Items per second of one benchmark row (``batch_size``, ``latency_ms_median``/``_p10``/``_p90``): batch size /
    median time per batch, within batch size / p90 and batch size / p10."""
    return Spread.of(row, "latency_ms").inverse() * (1e3 * float(row["batch_size"]))


def columns(row: Mapping) -> dict:
    """:data:`COLUMNS` of ``row``: its :func:`throughput` and interval, to put in place of benchmark's mean rate."""
    rate = throughput(row)
    return dict(zip(COLUMNS, (rate.value, rate.low, rate.high)))


def time_for(row: Mapping, items: float) -> Spread:
    """Seconds for ``items`` items at ``row``'s :func:`throughput` (its interval: at the rate's two ends)."""
    return Spread.exact(float(items)) / throughput(row)


def gains(rows: pd.DataFrame, base) -> dict:
    """{index: throughput of that row / throughput of row ``base``} for every row of ``rows`` but ``base`` itself
    (a point is never compared with itself), each ratio's interval from the extremes of the two rates."""
    rates = {i: throughput(r) for i, r in rows.iterrows()}
    return {i: rates[i] / rates[base] for i in rates if i != base}


def gains_over_smallest(rows: pd.DataFrame, threshold: float) -> tuple[dict, str, str]:
    """({batch size: :func:`gains` of that row over the smallest batch's}, the values in words, a note) for benchmark
    ``rows`` of one model, one per batch size. The words give the best gain (by median) with both rates and the
    batches whose whole interval clears ``threshold``; the note says when the best is picked within noise (its
    rate's interval overlaps the runner-up's), so that a reader sees the verdict does not hang on which is best."""
    first = rows["batch_size"].idxmin()
    ratio = gains(rows, first)
    if not ratio:
        return {}, "", ""
    size = {i: int(rows.loc[i, "batch_size"]) for i in rows.index}
    best, *rest = sorted(ratio, key=lambda i: -ratio[i].value)
    rates = {i: throughput(rows.loc[i]) for i in (first, best, *rest[:1])}
    clear = [str(size[i]) for i in ratio if ratio[i].low > threshold]
    ours = (f"{ratio[best].text('.3g', 'x')}: {rates[first].text('.0f')} images/s at batch {size[first]}, "
            f"{rates[best].text('.0f')} at batch {size[best]} (best by median)"
            + (f", clear of the threshold at batch {', '.join(clear)}" if clear else ""))
    note = (f"the best batch is picked within noise: batch {size[best]} {rates[best].text('.0f')} and batch "
            f"{size[rest[0]]} {rates[rest[0]].text('.0f')} images/s overlap (the verdict does not depend on which)"
            if rest and rates[rest[0]].high >= rates[best].low else "")
    return {size[i]: g for i, g in ratio.items()}, ours, note
