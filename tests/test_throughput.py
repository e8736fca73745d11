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


def test_gains_over_the_smallest_batch_never_compare_it_with_itself_and_say_when_the_best_is_a_tie():
    gains, ours, note = throughput.gains_over_smallest(_rows([1.0, 2.0, 4.0]), 2.0)  # 4x at batch 8 and 16
    assert list(gains) == [8, 16] and gains[8].value == pytest.approx(4.0)
    assert "clear of the threshold at batch 8, 16" in ours and "picked within noise" in note
    gains, ours, note = throughput.gains_over_smallest(_rows([1.0, 8.0, 1.0]), 2.0)  # 1x, 16x: batch 16 clear
    assert gains[16].low > 2.0 and "at batch 16 (best by median)" in ours and note == ""
    assert "clear of the threshold at batch 16" in ours and "batch 8" not in ours.split("clear")[1]
    assert throughput.gains_over_smallest(_rows([1.0], sizes=(4,)), 2.0) == ({}, "", "")
