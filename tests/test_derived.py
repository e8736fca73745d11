"""cnnlab.profiling.derived: each metric by hand on known numbers, NaN (never 0 or inf) where its inputs do not
define it, and against() beside each group's own baseline, NaN for a group whose baseline failed."""

from __future__ import annotations

import math

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import numpy as np
import pandas as pd
import pytest

from cnnlab.profiling import derived


def test_metrics_on_known_numbers():
    assert derived.ratio(3.0, 2.0) == 1.5
    assert derived.speedup(10.0, 4.0) == 2.5  # baseline 10 ms, now 4 ms: 2.5x faster
    assert derived.speedup(4.0, 10.0) == 0.4  # slower: below 1, not negative
    assert derived.change_pct(110.0, 100.0) == pytest.approx(10.0)
    assert derived.change_pct(75.0, 100.0) == pytest.approx(-25.0)
    assert derived.change_pct(100.0, 100.0) == 0.0
    assert derived.per_item(0.5, 100) == 0.005  # 500 ms for 100 images: 5 ms each, in the total's unit
    assert derived.efficiency(3.0, 4) == 0.75  # 3x on 4 GPUs
    # numbers of any kind that float() takes: numpy scalars, ints, numeric text read from a store
    assert derived.ratio(np.float32(1.0), np.int64(4)) == 0.25 and derived.ratio("3", "1.5") == 2.0


UNDEFINED = [(1.0, 0.0), (1.0, -2.0), (1.0, None), (None, 2.0), (1.0, math.nan), (math.nan, 2.0), (1.0, math.inf),
             (math.inf, 2.0), ("oom", 2.0), (1.0, ""), (0.0, 0.0)]


@pytest.mark.parametrize("fn", [derived.ratio, derived.speedup, derived.change_pct, derived.per_item,
                                derived.efficiency], ids=lambda fn: fn.__name__)
def test_an_undefined_metric_is_nan_never_zero_or_inf(fn):
    """A zero or negative denominator, or a missing value on either side (None, NaN, inf, text such as a failed
    point's status) gives NaN for every metric: a missing measurement stays missing. (Argument order: each
    function's own; for speedup the second is the new time, for change_pct the baseline.)"""
    defined = [(a, b, fn(a, b)) for a, b in UNDEFINED if not math.isnan(fn(a, b))]
    assert defined == []


def test_a_zero_numerator_is_a_number():
    assert derived.ratio(0.0, 2.0) == 0.0 and derived.change_pct(0.0, 5.0) == -100.0
    assert math.isnan(derived.speedup(5.0, 0.0))  # a time of 0: no speed-up to state, not inf


def _runs() -> pd.DataFrame:
    """Latencies of two models at three precisions; resnet56's fp32 baseline ran out of memory (NaN)."""
    return pd.DataFrame({
        "model": ["resnet20"] * 3 + ["resnet56"] * 3,
        "precision": ["fp32", "fp16", "bf16"] * 2,
        "latency_ms": [10.0, 4.0, 5.0, math.nan, 8.0, 9.0],
    })


def test_against_sets_each_row_beside_its_groups_baseline():
    df = _runs()
    kw = dict(baseline={"precision": "fp32"}, by=["model"])
    ratio = derived.against(df, "latency_ms", how="ratio", **kw)
    assert list(ratio[:3]) == [1.0, 0.4, 0.5]
    speedup = derived.against(df, "latency_ms", how="speedup", **kw)
    assert list(speedup[:3]) == [1.0, 2.5, 2.0]
    change = derived.against(df, "latency_ms", how="change_pct", **kw)
    assert list(change[:3]) == pytest.approx([0.0, -60.0, -50.0])
    assert ratio.index.equals(df.index) and ratio.dtype == float  # aligned with the table, ready as a column


def test_against_a_group_whose_baseline_failed_is_nan_not_another_groups_baseline():
    df = _runs()
    for how in ("ratio", "speedup", "change_pct"):
        out = derived.against(df, "latency_ms", baseline={"precision": "fp32"}, by=["model"], how=how)
        assert out[3:].isna().all(), how  # resnet56's fp32 failed: nothing to compare its rows with
        assert out[:3].notna().all(), how
    no_base = df[df["precision"] != "fp32"]  # the baseline row missing altogether
    assert derived.against(no_base, "latency_ms", baseline={"precision": "fp32"}, by=["model"]).isna().all()
    # without by=, the whole table is one group: two fp32 rows are no single baseline, so nothing is compared
    two = df.assign(latency_ms=df["latency_ms"].fillna(20.0))
    assert derived.against(two, "latency_ms", baseline={"precision": "fp32"}).isna().all()
    assert list(derived.against(two, "latency_ms", baseline={"precision": "fp32", "model": "resnet20"}))[:3] == \
        [1.0, 0.4, 0.5]


def test_against_names_a_bad_how():
    with pytest.raises(ValueError, match="how='slowdown' is not valid; valid: ratio, speedup, change_pct"):
        derived.against(_runs(), "latency_ms", baseline={"precision": "fp32"}, how="slowdown")
