"""Throughput of a benchmarked point, one definition for its table, its figure and its claim.

``throughput_items_per_s`` = batch size / the median time per batch, within batch size / p90 and batch size / p10
of the timed batches (``_low`` and ``_high``); the time for ``n`` items is ``n`` / that rate, with the same interval.

Why the median and not :func:`cnnlab.profiling.benchmark`'s batch x repeats / total time (the mean rate): on a
shared machine one pre-empted batch stretches the total and drags the mean rate of a whole point down (a batch-1
point of 20 batches whose p90 is 10x its median loses half its mean rate), while the median is the time of a typical
batch; and the timed batches that give the median also give its interval, where one total has none. A claim judges
this value with this interval, and the table and the figure show the same, so they cannot disagree.

A claim that compares batch sizes of one model judges them on the rounds they were timed in together
(:func:`per_round`, :func:`gain`, :func:`time_ratio`: paired, ``cnnlab.profiling.compare.Paired``), the same rate
taken round by round: each round's ratio of batch size / time per batch, and the sign test's interval of their median.
"""

from __future__ import annotations

from typing import Mapping

from cnnlab.profiling.compare import Paired
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


def per_round(row: Mapping) -> Paired:
    """``row``'s median time per batch in each of its rounds (ms; ``round_medians_ms``, written by
    ``cnnlab.profiling.combine_rounds``), within the sign test's interval of their median at the row's ``confidence``."""
    return Paired.of_rounds(row)


def unpaired(rows) -> str:
    """Why ``rows`` (a frame of points) cannot be compared round by round ("" when every row has its per-round times):
    a table measured before paired rounds, or read back without them."""
    have = rows["round_medians_ms"].map(lambda t: isinstance(t, str) and bool(t.strip())) \
        if "round_medians_ms" in rows else [False]
    return "" if all(have) else ("no per-round times (round_medians_ms) to pair: a table measured before paired rounds; "
                                 "measure it again")


def gain(row: Mapping, base: Mapping) -> Paired:
    """Throughput of ``row`` / throughput of ``base``, round by round (two points of the same rounds):
    (batch size / time per batch) over the base's, i.e. base time / row time x row batch / base batch."""
    return per_round(base) / per_round(row) / (float(base["batch_size"]) / float(row["batch_size"]))


def time_ratio(row: Mapping, base: Mapping) -> Paired:
    """Time for the same images at ``row``'s batch size / at ``base``'s, round by round: the inverse of :func:`gain`
    (time per image = time per batch / batch size)."""
    return per_round(row) / per_round(base) / (float(row["batch_size"]) / float(base["batch_size"]))
