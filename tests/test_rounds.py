"""cnnlab.profiling.rounds: a grid timed in rounds combines into one row per point; the time is judged within
the rounds."""

from __future__ import annotations

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pandas as pd
import pytest


def test_rounds_combine_into_one_row_per_point_and_the_time_is_judged_within_them():
    from cnnlab.claims import Spread
    from cnnlab.profiling import combine_rounds, time_spread

    rows = [{"round": r, "net": "a", "status": "ok", "latency_ms_median": m, "latency_ms_p10": m - 0.1,
             "latency_ms_p90": m + 0.2, "repeats": 5, "mem": 10 + r, "mem_low": 9 + r, "mem_high": 11 + r}
            for r, m in enumerate((1.0, 1.5, 0.9))]
    rows.append({"round": 0, "net": "b", "status": "skipped", "error": "no GPU"})
    out = combine_rounds(pd.DataFrame(rows), ["net"], spreads=["mem"]).set_index("net")
    a = out.loc["a"]
    assert (a["latency_ms_median"], a["latency_ms_rounds_min"], a["latency_ms_rounds_max"]) == (1.0, 0.9, 1.5)
    assert a["latency_ms_p10"] == pytest.approx(0.8) and a["latency_ms_p90"] == pytest.approx(1.7)
    assert (a["repeats"], a["rounds"], a["round_medians_ms"]) == (15, 3, "1, 1.5, 0.9")
    assert (a["mem"], a["mem_low"], a["mem_high"]) == (11, 9, 13)
    assert out.loc["b", "rounds"] == 0 and "round" not in out
    assert time_spread(a.to_dict()) == Spread(1.0, 0.9, 1.5)  # the drift between rounds, not the batches' spread
    assert time_spread({**a.to_dict(), "rounds": 1}) == Spread.of(a.to_dict(), "latency_ms")


def test_a_metric_measured_in_no_round_is_nan_without_a_warning():
    # a GPU memory average on a CPU: pandas 2.2 (Colab's) warned "Mean of empty slice" under notebook 04's cell
    import math
    import warnings

    from cnnlab.profiling import combine_rounds

    nan = math.nan
    rows = [{"round": r, "net": "a", "status": "ok", "latency_ms_median": 1.0, "latency_ms_p10": 0.9,
             "latency_ms_p90": 1.1, "repeats": 5, "mem": nan, "mem_low": nan, "mem_high": nan} for r in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = combine_rounds(pd.DataFrame(rows), ["net"], spreads=["mem"])
    assert out[["mem", "mem_low", "mem_high"]].isna().all().all() and out["rounds"].tolist() == [2]
