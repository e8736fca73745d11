import pandas as pd
import pytest

from cnnlab.profiling import throughput


def _rows(medians, sizes=(1, 8, 16), spread=0.0):
    lat = pd.Series(medians, dtype=float).to_numpy()
    return pd.DataFrame({"batch_size": list(sizes), "latency_ms_median": lat, "latency_ms_p10": lat * (1 - spread),
                         "latency_ms_p90": lat * (1 + spread)}, index=[10, 11, 12][:len(sizes)])


def test_a_rate_is_batch_size_over_the_median_time_within_its_floored_interval():
    rate = throughput.throughput({"batch_size": 8, "latency_ms_median": 4.0, "latency_ms_p10": 3.0,
                                  "latency_ms_p90": 10.0})
    assert rate.value == pytest.approx(2000) and rate.low == pytest.approx(800) and rate.high > rate.value


def test_gains_and_time_ratios_are_taken_round_by_round():
    # batch 1 at 1 ms and batch 8 at 2 ms a batch, each round's load moving both alike: 4x the images/s every round
    one = {"batch_size": 1, "round_medians_ms": "1, 2, 1.5, 1, 3, 1, 1.2, 1, 2, 1", "confidence": 0.95}
    eight = {"batch_size": 8, "round_medians_ms": "2, 4, 3, 2, 6, 2, 2.4, 2, 4, 2", "confidence": 0.95}
    gain = throughput.gain(eight, one)
    assert (gain.value, gain.low, gain.high, gain.rounds) == pytest.approx((4.0, 4.0, 4.0, 10))
    ratio = throughput.time_ratio(eight, one)  # the time for the same images: a quarter
    assert (ratio.value, ratio.low, ratio.high) == pytest.approx((0.25, 0.25, 0.25))
    # the same times unpaired span 1-3 ms at batch 1: the pairing is what narrows the ratio
    assert throughput.per_round(one).high > 1.5 * throughput.per_round(one).low
