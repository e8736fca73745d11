"""Tests for cnnlab.profiling.paired: variants timed side by side in rounds, ratios to a baseline per round."""

import math
import random

import pytest

from cnnlab.profiling.paired import paired_ratios, time_in_rounds


def test_rounds_alternate_the_order_and_time_every_variant_once_per_round():
    seen = []
    calls = {k: (lambda k=k: seen.append(k) or len(seen)) for k in ("a", "b", "c")}
    times = time_in_rounds(calls, 3)
    assert seen == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert times == {"a": [1.0, 6.0, 7.0], "b": [2.0, 5.0, 8.0], "c": [3.0, 4.0, 9.0]}
    with pytest.raises(ValueError, match="rounds=0"):
        time_in_rounds(calls, 0)


def test_a_drift_shared_by_both_variants_cancels_in_the_paired_ratio():
    drift = [1.0, 3.0, 1.5, 2.5, 1.2, 2.0]  # the machine's load, round by round: 3x apart
    times = {"untiled": [10 * d for d in drift], "tiled": [8 * d for d in drift]}
    r = paired_ratios(times, "untiled")
    assert r["tiled"]["ratio"] == pytest.approx(0.8) and r["tiled"]["ratio_high"] == pytest.approx(0.8)
    assert r["untiled"] == {"ratio": 1.0, "ratio_low": 1.0, "ratio_high": 1.0, "rounds": 6}
    # unpaired, the two ranges (8-24 and 10-30) overlap: the drift hides a 20% difference
    assert max(times["tiled"]) > min(times["untiled"])


def test_identical_variants_keep_1_inside_the_interval():
    rng = random.Random(0)
    held = 0
    for _ in range(200):
        times = {"a": [rng.lognormvariate(0, 0.1) for _ in range(10)], "b": [rng.lognormvariate(0, 0.1) for _ in range(10)]}
        r = paired_ratios(times, "a")["b"]
        held += r["ratio_low"] <= 1 <= r["ratio_high"]
    assert held >= 198  # 2 / 2**10 of the trials may miss 1


def test_missing_rounds_are_left_out_and_mismatched_rounds_refused():
    r = paired_ratios({"a": [1.0, math.nan, 2.0], "b": [2.0, 1.0, math.nan]}, "a")
    assert r["b"]["rounds"] == 1 and r["b"]["ratio"] == 2.0
    assert math.isnan(paired_ratios({"a": [math.nan], "b": [1.0]}, "a")["b"]["ratio"])
    with pytest.raises(ValueError, match="pair rounds one to one"):
        paired_ratios({"a": [1.0, 2.0], "b": [1.0]}, "a")
    with pytest.raises(ValueError, match="base='c'"):
        paired_ratios({"a": [1.0]}, "c")
