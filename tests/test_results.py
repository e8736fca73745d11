"""Tests for cnnlab.results: a study's experiments combined and split again, a second pass put beside the first,
the checks every study's results must pass, and the files saved and read back."""

from __future__ import annotations

import math

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pandas as pd
import pytest

from cnnlab import results
from cnnlab.claims import Claim


def test_tables_split_experiments_and_keep_columns_missing_everywhere():
    df = pd.DataFrame([{"experiment": "batch", "batch_size": 1, "latency_ms_median": 2.0, "gpu_util_pct": math.nan},
                       {"experiment": "operators", "name": "aten::conv2d", "calls": 3, "gpu_util_pct": math.nan}])
    parts = results.tables(df)
    assert list(parts) == ["batch", "operators"]
    assert list(parts["batch"].columns) == ["batch_size", "latency_ms_median", "gpu_util_pct"]
    assert list(parts["operators"].columns) == ["gpu_util_pct", "name", "calls"]  # missing everywhere: kept
    assert list(results.tables(df.drop(columns="experiment"))) == ["results"]
    # combine records each experiment's own columns: an empty column stays only where it belongs
    both = results.combine(batch=pd.DataFrame({"batch_size": [1], "gpu_util_pct": [math.nan]}),
                           operators=pd.DataFrame({"name": ["aten::conv2d"], "calls": [3]}))
    parts = results.tables(both)
    assert list(parts["batch"].columns) == ["batch_size", "gpu_util_pct"]
    assert list(parts["operators"].columns) == ["name", "calls"]
    assert list(both["experiment"]) == ["batch", "operators"]


def test_save_writes_one_csv_per_experiment_figures_and_claims(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from cnnlab import plotting

    fig, _ = plotting.plt.subplots()
    df = pd.DataFrame([{"experiment": "timing", "x": 1}, {"experiment": "accuracy", "y": 2}])
    checks = [Claim("c", "p", "o", True, "cpu", note="criterion")]
    table = results.save(df, {"fig_a": fig}, checks, tmp_path, name="prec")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["claims.csv", "environment.json", "fig_a.png", "fig_a.svg",
                                                          "prec_accuracy.csv", "prec_timing.csv"]
    assert list(table["held"]) == ["yes"]
    single = tmp_path / "single"
    results.save(pd.DataFrame({"x": [1]}), {}, checks, single, name="quickstart")
    assert (single / "quickstart.csv").exists()


def test_read_gives_back_what_save_wrote(tmp_path):
    df = results.combine(timing=pd.DataFrame({"x": [1, 2]}), accuracy=pd.DataFrame({"y": [0.5], "ok": [True]}))
    results.save(df, {}, [], tmp_path, name="prec")
    (tmp_path / "precision_other.csv").write_text("z\n1\n")  # another study's name that starts alike: not read
    back = results.tables(results.read(tmp_path, "prec"))
    assert sorted(back) == ["accuracy", "timing"]
    pd.testing.assert_frame_equal(back["timing"], pd.DataFrame({"x": [1, 2]}))
    assert back["accuracy"]["ok"].tolist() == [True]
    results.save(pd.DataFrame({"x": [3]}), {}, [], tmp_path / "one", name="quickstart")
    assert results.read(tmp_path / "one", "quickstart")["x"].tolist() == [3]
    with pytest.raises(FileNotFoundError, match="'vgg'"):
        results.read(tmp_path, "vgg")


@pytest.mark.parametrize("bad, message", [
    (dict(status="done"), "unknown status"),
    (dict(status="skipped", error=""), "without a reason"),
    (dict(latency_ms_p10=3.0), "out of order"),
    (dict(peak_mem_alloc_mib=-1.0), "negative"),
])
def test_check_results_fails_on_each_broken_rule(bad, message):
    good = {"status": "ok", "error": None, "latency_ms_p10": 1.0, "latency_ms_median": 2.0, "latency_ms_p90": 2.5,
            "peak_mem_alloc_mib": 5.0}
    assert results.check_results(pd.DataFrame([good])).startswith("results checked: ")
    with pytest.raises(AssertionError, match=message):
        results.check_results(pd.DataFrame([good, {**good, **bad}]))


def test_combine_gives_integer_columns_back_as_integers():
    both = results.combine(a=pd.DataFrame({"batch_size": [1, 8], "ok": [True, False]}),
                           b=pd.DataFrame({"tile_px": [math.nan, 8.0]}))
    assert both["batch_size"].dtype == float  # gaps from experiment b: plain floats with NaN, no pd.NA
    parts = results.tables(both)
    assert parts["a"]["batch_size"].dtype == "int64" and parts["a"]["ok"].dtype == bool
    assert math.isnan(parts["b"]["tile_px"].iloc[0])


def test_beside_puts_the_profiled_pass_next_to_the_timing_and_says_why_one_is_missing():
    times = pd.DataFrame({"precision": ["fp32", "fp32"], "batch_size": [2, 8], "status": ["ok", "ok"],
                          "latency_ms_median": [1.0, 2.0], "avg_mem_mib": [9.0, 9.0]})  # an older row's column
    averages = pd.DataFrame({"precision": ["fp32", "fp32"], "batch_size": [8, 2], "status": ["oom", "ok"],
                             "error": ["CUDA out of memory", None], "avg_mem_mib": [math.nan, 3.0]})
    out = results.beside(times, averages, ["precision", "batch_size"], "avg_mem_", "average-memory pass")
    assert list(out["latency_ms_median"]) == [1.0, 2.0] and list(out.columns).count("avg_mem_mib") == 1
    assert out.loc[0, "avg_mem_mib"] == 3.0 and math.isnan(out.loc[1, "avg_mem_mib"])
    assert out.loc[1, "avg_mem_missing_reason"] == "average-memory pass oom: CUDA out of memory"
    assert pd.isna(out.loc[0, "avg_mem_missing_reason"]) and "status" in out and out["status"].eq("ok").all()
    # a row that was itself skipped says why in its own error, not again as the pass's reason
    skipped = results.beside(times.assign(status="skipped"), averages.assign(status="skipped"),
                             ["precision", "batch_size"], "avg_mem_", "average-memory pass")
    assert skipped["avg_mem_missing_reason"].isna().all()
