"""Tests for cnnlab.studies.batch_size: rows per grid point, units, NaN-with-reason on CPU, claims, validation."""

from __future__ import annotations

import math

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib import pyplot as plt

from cnnlab import config
from cnnlab.studies import batch_size as bs


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    store = tmp_path_factory.mktemp("bs") / "measure.csv"
    return bs.measure(["lenet5", "resnet20"], [1, 4, 16], images=16, warmup=1, min_repeats=2, store=store,
                      progress=False), store


def test_measure_has_one_ok_row_per_grid_point_with_units(measured):
    df, _ = measured
    assert len(df) == 6 and (df["status"] == "ok").all()
    assert sorted(zip(df["model"], df["batch_size"])) == [(m, b) for m in ("lenet5", "resnet20") for b in (1, 4, 16)]
    for col in ("total_time_s", "latency_ms_median", "throughput_items_per_s", "peak_mem_alloc_mib",
                "gpu_util_pct", "gflops_per_image", "params_m"):
        assert col in df.columns
    assert (df["data_source"] == "synthetic").all()
    for col in ("total_time_s", "latency_ms_median", "throughput_items_per_s", "peak_mem_alloc_mib"):
        assert (df[col] > 0).all() and np.isfinite(df[col]).all(), col


def test_total_time_covers_exactly_the_requested_images(measured):
    df, _ = measured
    assert (df["batches"] == np.ceil(16 / df["batch_size"])).all()
    assert (df["images"] == df["batches"] * df["batch_size"]).all()
    assert (df["repeats"] == np.maximum(df["batches"], 2)).all()
    # batch 1: 16 timed batches, all of them count; batch 16: only the first of two timed batches counts
    one = df[df["batch_size"] == 1].iloc[0]
    assert one["total_time_s"] * 1e3 == pytest.approx(one["latency_ms_mean"] * 16, rel=1e-6)
    sixteen = df[df["batch_size"] == 16]
    assert (sixteen["total_time_s"] * 1e3 < sixteen["latency_ms_mean"] * 2).all()


def test_gpu_utilisation_is_nan_with_a_reason_on_cpu(measured):
    df, _ = measured
    assert df["gpu_util_pct"].isna().all()
    assert df["gpu_util_missing_reason"].str.contains("CPU").all()


def test_peak_memory_grows_with_batch_and_cost_grows_with_depth(measured):
    df, _ = measured
    for _, g in df.groupby("model"):
        assert np.all(np.diff(g.sort_values("batch_size")["peak_mem_alloc_mib"]) > 0)
    cost = df.groupby("model")["gflops_per_image"].first()
    assert cost["resnet20"] > 10 * cost["lenet5"]
    # resnet20: 0.27 M parameters (He et al. 2016, Table 6)
    assert df.loc[df["model"] == "resnet20", "params_m"].iloc[0] == pytest.approx(0.27, abs=0.01)


def test_store_makes_the_sweep_resumable(measured):
    df, store = measured
    again = bs.measure(["lenet5", "resnet20"], [1, 4, 16], images=16, warmup=1, min_repeats=2, store=store,
                       progress=False)
    assert again["finished_utc"].tolist() == df["finished_utc"].tolist()  # nothing re-measured
    assert len(pd.read_csv(store)) == 6
    part = bs.measure(["resnet20", "lenet5"], [4], images=16, warmup=1, min_repeats=2, store=store, progress=False)
    assert list(zip(part["model"], part["batch_size"])) == [("resnet20", 4), ("lenet5", 4)]  # this grid, its order
    assert bs.store_path("f", "m", images=16) != bs.store_path("f", "m", images=32)
    assert bs.store_path("f", "m", images=16, device="cpu") == bs.store_path("f", "m", device="cpu", images=16)


def test_breakdown_rows_and_shares_on_cpu():
    df = bs.breakdown(["lenet5"], [1, 8], iterations=2, progress=False)
    assert len(df) == 2 * len(bs.COMPONENTS)
    assert set(df["component"]) == set(bs.COMPONENTS)
    device_parts = df[df["component"].isin(["memcpy HtoD", "memcpy DtoH", "other device work", "sync wait"])]
    assert device_parts["time_per_batch_ms"].isna().all()
    assert device_parts["time_missing_reason"].str.contains("CPU run").all()
    for _, g in df.groupby("batch_size"):
        stacked = g[g["stacked"]]
        assert stacked["share_of_wall_pct"].sum(skipna=True) == pytest.approx(100.0, abs=1e-6)
        compute = g.loc[g["component"] == "kernel / compute", "time_per_batch_ms"].iloc[0]
        assert 0 < compute <= g["wall_time_per_batch_ms"].iloc[0]


def test_roofline_places_each_model_at_its_best_batch(measured):
    df, _ = measured
    roof = bs.roofline(df, device="cpu")
    assert list(roof["model"]) == ["lenet5", "resnet20"]
    for _, r in roof.iterrows():
        g = df[df["model"] == r["model"]]
        assert r["batch_size"] == g.loc[g["throughput_items_per_s"].idxmax(), "batch_size"]
        expected = r["flops"] / (r["latency_ms_median"] / 1e3) / 1e12
        assert r["achieved_tflop_per_s"] == pytest.approx(expected)
        assert r["arithmetic_intensity_flop_per_byte"] == pytest.approx(r["flops"] / r["memory_bytes"])
    assert roof["peak_fp32_tflop_per_s"].isna().all() and roof["peaks_missing_reason"].notna().all()


def _frame(mem, util=None, model="resnet20"):
    n = len(mem)
    sizes = [2**k for k in range(n)]
    return pd.DataFrame({"model": model, "batch_size": sizes, "status": "ok", "peak_mem_alloc_mib": mem,
                         "total_time_s": [10.0 / (k + 1) for k in range(n)],
                         "throughput_items_per_s": [100.0 * (k + 1) for k in range(n)],
                         "gpu_util_pct": util if util is not None else [math.nan] * n,
                         "gpu_util_missing_reason": None if util is not None else "CPU run: no GPU to sample",
                         "gflops_per_image": 0.04})


def test_claims_follow_the_numbers():
    held = {c.claim: c.held for c in bs.check_claims(_frame([1.0, 2.0, 3.0]), device="cpu")}
    assert held["peak memory grows monotonically with batch size"] is True
    assert held["throughput at the best batch is far (>= 2x) above batch 1"] is True
    assert held["GPU utilisation rises with batch size and model depth"] is None
    falls = {c.claim: c.held for c in bs.check_claims(_frame([1.0, 3.0, 2.0]), device="cpu")}
    assert falls["peak memory grows monotonically with batch size"] is False
    gpu = pd.concat([_frame([1, 2, 3], util=[20.0, 40.0, 60.0]),
                     _frame([1, 2, 3], util=[30.0, 50.0, 70.0], model="resnet56").assign(gflops_per_image=0.12)])
    assert bs.check_claims(gpu, device="cuda")[-1].held is True
    shallow_busier = gpu.assign(gflops_per_image=np.where(gpu["model"] == "resnet56", 0.01, 0.12))
    assert bs.check_claims(shallow_busier, device="cuda")[-1].held is False


def test_claims_without_batch_one_are_not_applicable():
    df = _frame([1.0, 2.0, 3.0]).assign(batch_size=[2, 4, 8])
    checks = {c.claim.split(" from")[0]: c for c in bs.check_claims(df, device="cpu")}
    assert checks["throughput at the best batch is far (>= 2x) above batch 1"].held is None
    assert checks["throughput at the best batch is far (>= 2x) above batch 1"].note


def _cfg(**overrides):
    return config.configure("quick", bs.PRESETS, **overrides)


def test_validate_names_the_bad_parameter_and_valid_values():
    with pytest.raises(ValueError, match=r"models: 'resnet21'.*valid models: .*resnet20"):
        bs.validate(_cfg(models=["resnet21"]))
    with pytest.raises(ValueError, match=r"batch_sizes: 0 .*integers >= 1"):
        bs.validate(_cfg(batch_sizes=[1, 0]))
    with pytest.raises(ValueError, match=r"batch_sizes: 'big'"):
        bs.validate(_cfg(batch_sizes=["big"]))
    with pytest.raises(ValueError, match=r"images"):
        bs.validate(_cfg(images=0))
    with pytest.raises(ValueError, match=r"threads=0 must be an integer >= 1"):
        bs.validate(_cfg(threads=0))
    with pytest.raises(ValueError, match=r"valid here"):
        bs.validate(_cfg(device="tpu"))
    with pytest.raises(ValueError, match=r"lstm_sentiment.*valid models"):
        bs.validate(_cfg(models="lstm_sentiment"))  # token model: not an image model


def test_validate_normalises_papermill_values():
    cfg = bs.validate(_cfg(models="resnet32", batch_sizes=[8, 2, 8]))
    assert cfg.models == ["resnet32"] and cfg.batch_sizes == [2, 8] and cfg.device == "cpu" and cfg.threads == 1
    assert bs.set_threads(None) == torch.get_num_threads()  # None leaves torch's setting alone
    # `papermill -p` passes text: a string that spells a list is read as one
    cfg = bs.validate(_cfg(models='["lenet5", "alexnet"]', batch_sizes="[4, 1]"))
    assert cfg.models == ["lenet5", "alexnet"] and cfg.batch_sizes == [1, 4]
    with pytest.raises(ValueError, match=r"batch_sizes: '\[1, 4'"):
        bs.validate(_cfg(batch_sizes="[1, 4"))


def test_figures_have_the_papers_panels(measured):
    df, _ = measured
    fig1 = bs.plot_time_memory(df)
    assert len(fig1.axes) == 2 and fig1.axes[0].get_yscale() == "log" and fig1.axes[0].get_xscale() == "log"
    fig2 = bs.plot_latency_utilisation(df)
    assert "not measured" in " ".join(t.get_text() for t in fig2.axes[1].texts)
    assert [t.get_text() for t in fig2.axes[1].get_xticklabels()] == ["1", "4", "16"]  # batch axis kept
    fig3 = bs.plot_breakdown(bs.breakdown(["lenet5"], [1, 4], iterations=1, progress=False))
    assert len(fig3.axes) == 1 and len(fig3.axes[0].patches) == 4  # 2 batch sizes x 2 CPU components
    fig4 = bs.plot_roofline(bs.roofline(df, device="cpu"))
    assert "no roof lines" in fig4.axes[0].get_title() and not fig4.axes[0].get_lines()
    for fig in (fig1, fig2, fig3, fig4):
        plt.close(fig)
