"""cnnlab.profiling.rounds: a grid timed in rounds combines into one row per point; the time is judged within
the rounds."""

from __future__ import annotations

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pandas as pd
import pytest


def test_rounds_combine_into_one_row_per_point_and_the_time_is_judged_within_them():
    from cnnlab.profiling import Spread, combine_rounds, time_spread
    from cnnlab.profiling.spread import TIME_NOISE

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
    # the drift between rounds (up to 1.5), not the batches' spread, and never closer than the noise floor (down to
    # 1 / TIME_NOISE, where the rounds reach only 0.9)
    assert time_spread(a.to_dict()) == Spread(1.0, 1 / TIME_NOISE, 1.5)
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


@pytest.mark.alone  # two processes side by side: beside another pytest worker on 2 cores, 18 of 20
def test_the_same_work_timed_twice_is_inconclusive_in_19_of_20_trials():
    """The A/A test of the noise rule: the same work (tests/same_work.py, a matmul, 20 batches of 0.6 ms a round)
    timed in two rounds, as two configurations of one process (separate rounds) and in two processes run side by
    side (separate processes), 20 trials; each pair compared by the claims' own rules, the ratio against 1 (judge)
    and a trend over the two, must be "inconclusive" in at least 19 of 20 trials each way. The range of the rounds
    alone (the rule before the noise floor) passed 7-14 of 20 between processes and 10-18 of 20 between rounds
    here, the floor 20 of 20 (seven runs): this can fail. A round is at least 12 ms of batches on any CPU, less than
    any study times a point, but not 3 ms (5 batches), about one scheduler time slice: one preemption was then a
    round's median."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from cnnlab.claims import INCONCLUSIVE, judge, trend
    from cnnlab.profiling import combine_rounds, time_spread

    trials, root = 20, Path(__file__).parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(root), os.environ.get("PYTHONPATH")))),
           "OMP_NUM_THREADS": "1"}
    children = [subprocess.Popen([sys.executable, str(Path(__file__).with_name("same_work.py")), str(trials), "2"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                for _ in range(2)]
    runs = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        runs.append(pd.DataFrame(json.loads(out)))

    def time(run, trial, config):
        rows = run[(run["trial"] == trial) & (run["config"] == config)]
        return time_spread(combine_rounds(rows, ["config"]).iloc[0].to_dict())

    pairs = {"separate rounds": [(time(runs[0], t, "A"), time(runs[0], t, "B")) for t in range(trials)],
             "separate processes": [(time(runs[0], t, "A"), time(runs[1], t, "A")) for t in range(trials)]}
    counts = {(how, rule): sum(verdict(a, b)[0] == INCONCLUSIVE for a, b in pairs[how])
              for how in pairs for rule, verdict in (("judge", lambda a, b: judge(a / b, ">", 1.0)),
                                                     ("trend", lambda a, b: trend([a, b], "up")))}
    ratios = {how: [round(a.value / b.value, 3) for a, b in p] for how, p in pairs.items()}
    assert all(n >= 19 for n in counts.values()), (counts, ratios)
