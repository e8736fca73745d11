"""Tests for cnnlab.studies.batch_size: rows per grid point, units, NaN-with-reason on CPU, stores keyed by every
setting, claims, validation, figures."""

from __future__ import annotations

import math

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib import pyplot as plt

from cnnlab import config, studies
from cnnlab.profiling import device_peaks
from cnnlab.studies import batch_size as bs


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    store = tmp_path_factory.mktemp("bs")
    cfg = bs.configure("quick", models=["lenet5", "resnet20"], batch_sizes=[1, 4, 16], images=16, warmup=1,
                       min_repeats=2, profile_iterations=1)
    return bs.measure(cfg, store, progress=False), cfg, store


def test_follows_the_study_contract(measured):
    df, _, _ = measured
    assert studies.signature_problems(bs) == []
    assert list(studies.tables(df)) == ["batch", "breakdown", "roofline"]
    assert studies.check_results(df).startswith("results checked")


def test_batch_has_one_ok_row_per_grid_point_with_units(measured):
    batch = studies.tables(measured[0])["batch"]
    assert len(batch) == 6 and (batch["status"] == "ok").all()
    assert list(zip(batch["model"], batch["batch_size"])) == [(m, b) for m in ("lenet5", "resnet20") for b in (1, 4, 16)]
    for col in ("total_time_s", "latency_ms_median", "throughput_items_per_s", "peak_mem_alloc_mib",
                "gpu_util_pct", "gflops_per_image", "params_m"):
        assert col in batch.columns
    assert (batch["data_source"] == "synthetic").all() and (batch["cpu_threads"] == 1).all()
    for col in ("total_time_s", "latency_ms_median", "throughput_items_per_s", "peak_mem_alloc_mib"):
        assert (batch[col] > 0).all() and np.isfinite(batch[col]).all(), col


def test_total_time_covers_exactly_the_requested_images(measured):
    batch = studies.tables(measured[0])["batch"]
    assert (batch["batches"] == np.ceil(16 / batch["batch_size"])).all()
    assert (batch["images"] == batch["batches"] * batch["batch_size"]).all()
    assert (batch["repeats"] == np.maximum(batch["batches"], 2)).all()
    # batch 1: 16 timed batches, all of them count; batch 16: only the first of two timed batches counts
    one = batch[batch["batch_size"] == 1].iloc[0]
    assert one["total_time_s"] * 1e3 == pytest.approx(one["latency_ms_mean"] * 16, rel=1e-6)
    sixteen = batch[batch["batch_size"] == 16]
    assert (sixteen["total_time_s"] * 1e3 < sixteen["latency_ms_mean"] * 2).all()


def test_gpu_utilisation_is_nan_with_a_reason_on_cpu(measured):
    batch = studies.tables(measured[0])["batch"]
    assert batch["gpu_util_pct"].isna().all()
    assert batch["gpu_util_missing_reason"].str.contains("CPU").all()


def test_peak_memory_grows_with_batch_and_cost_grows_with_depth(measured):
    batch = studies.tables(measured[0])["batch"]
    for _, g in batch.groupby("model"):
        assert np.all(np.diff(g.sort_values("batch_size")["peak_mem_alloc_mib"]) > 0)
    cost = batch.groupby("model")["gflops_per_image"].first()
    assert cost["resnet20"] > 10 * cost["lenet5"]
    # resnet20: 0.27 M parameters (He et al. 2016, Table 6)
    assert batch.loc[batch["model"] == "resnet20", "params_m"].iloc[0] == pytest.approx(0.27, abs=0.01)


def test_store_resumes_and_returns_only_this_grid(measured, monkeypatch):
    df, cfg, store = measured
    calls = []
    monkeypatch.setattr(bs, "batch_point", lambda *a, **k: calls.append(a) or {})
    monkeypatch.setattr(bs, "breakdown_point", lambda *a, **k: calls.append(a) or [])
    again = bs.measure(cfg, store, progress=False)
    assert calls == [] and again["finished_utc"].tolist() == df["finished_utc"].tolist()  # nothing re-measured
    params = {k: v for k, v in vars(cfg).items() if k != "preset"}
    part = bs.measure(bs.configure("quick", **{**params, "models": ["resnet20", "lenet5"], "batch_sizes": [4]}),
                      store, progress=False)
    batch = studies.tables(part)["batch"]
    assert calls == [] and list(zip(batch["model"], batch["batch_size"])) == [("resnet20", 4), ("lenet5", 4)]


def test_another_setting_never_reads_the_stored_rows(tmp_path, monkeypatch):
    calls = {"batch": 0, "breakdown": 0}
    real_batch, real_breakdown = bs.batch_point, bs.breakdown_point

    def counted(kind, fn):
        def wrapper(*args, **kwargs):
            calls[kind] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(bs, "batch_point", counted("batch", real_batch))
    monkeypatch.setattr(bs, "breakdown_point", counted("breakdown", real_breakdown))
    small = dict(models=["lenet5"], batch_sizes=[1, 2], warmup=0, min_repeats=1, profile_iterations=1)
    cfg_a, cfg_b = bs.configure("quick", images=2, **small), bs.configure("quick", images=4, **small)
    a = bs.measure(cfg_a, tmp_path, progress=False)
    assert calls == {"batch": 2, "breakdown": 2}
    b = bs.measure(cfg_b, tmp_path, progress=False)  # same grid, other image count: measured again
    assert calls["batch"] == 4
    assert (studies.tables(b)["batch"]["images"] == 4).all() and (studies.tables(a)["batch"]["images"] == 2).all()
    c = bs.measure(bs.configure("quick", **{**small, "profile_iterations": 2}, images=2), tmp_path, progress=False)
    assert calls["breakdown"] == 6 and (studies.tables(c)["breakdown"]["iterations"] == 2).all()
    again = bs.measure(cfg_a, tmp_path, progress=False)  # cfg_a's store: resumed, nothing measured
    assert calls == {"batch": 6, "breakdown": 6}
    pd.testing.assert_frame_equal(again, a)


def test_breakdown_rows_and_shares_on_cpu(measured):
    parts = studies.tables(measured[0])["breakdown"]
    assert len(parts) == 6 * len(bs.COMPONENTS) and set(parts["component"]) == set(bs.COMPONENTS)
    device_parts = parts[parts["component"].isin(["memcpy HtoD", "memcpy DtoH", "other device work", "sync wait"])]
    assert device_parts["time_per_batch_ms"].isna().all()
    assert device_parts["time_missing_reason"].str.contains("CPU run").all()
    for _, g in parts.groupby(["model", "batch_size"]):
        stacked = g[g["stacked"].astype(bool)]
        assert stacked["share_of_wall_pct"].sum(skipna=True) == pytest.approx(100.0, abs=1e-6)
        compute = g.loc[g["component"] == "kernel / compute", "time_per_batch_ms"].iloc[0]
        assert 0 < compute <= g["wall_time_per_batch_ms"].iloc[0]


def test_roofline_places_each_model_at_its_best_batch(measured):
    parts = studies.tables(measured[0])
    batch, roof = parts["batch"], parts["roofline"]
    assert list(roof["model"]) == ["lenet5", "resnet20"]
    for _, r in roof.iterrows():
        g = batch[batch["model"] == r["model"]]
        assert r["batch_size"] == g.loc[g["throughput_items_per_s"].idxmax(), "batch_size"]
        expected = r["flops"] / (r["latency_ms_median"] / 1e3) / 1e12
        assert r["achieved_tflop_per_s"] == pytest.approx(expected)
        assert r["arithmetic_intensity_flop_per_byte"] == pytest.approx(r["flops"] / r["memory_bytes"])
    assert roof["peak_fp32_tflop_per_s"].isna().all() and roof["peaks_missing_reason"].notna().all()
    assert bs.roofline(batch.assign(status="error")).empty  # nothing measured: no best batch


def _frame(mem, util=None, model="resnet20"):
    n = len(mem)
    sizes = [2**k for k in range(n)]
    return pd.DataFrame({"experiment": "batch", "model": model, "batch_size": sizes, "status": "ok",
                         "peak_mem_alloc_mib": mem, "total_time_s": [10.0 / (k + 1) for k in range(n)],
                         "throughput_items_per_s": [100.0 * (k + 1) for k in range(n)],
                         "gpu_util_pct": util if util is not None else [math.nan] * n,
                         "gpu_util_missing_reason": None if util is not None else "CPU run: no GPU to sample",
                         "gflops_per_image": 0.04})


def test_claims_follow_the_numbers():
    held = {c.claim: c.held for c in bs.check_claims(_frame([1.0, 2.0, 3.0]), "cpu")}
    assert held["peak memory grows monotonically with batch size"] is True
    assert held["total inference time drops from batch 1 to batch 4"] is True
    assert held["throughput at the best batch is far (>= 2x) above batch 1"] is True
    assert held["GPU utilisation rises with batch size and model depth"] is None
    falls = {c.claim: c.held for c in bs.check_claims(_frame([1.0, 3.0, 2.0]), "cpu")}
    assert falls["peak memory grows monotonically with batch size"] is False
    slow = _frame([1.0, 2.0, 3.0]).assign(total_time_s=[1.0, 2.0, 3.0], throughput_items_per_s=[100.0, 150, 190])
    held = {c.claim: c.held for c in bs.check_claims(slow, "cpu")}
    assert held["total inference time drops from batch 1 to batch 4"] is False
    assert held["throughput at the best batch is far (>= 2x) above batch 1"] is False
    gpu = pd.concat([_frame([1, 2, 3], util=[20.0, 40.0, 60.0]),
                     _frame([1, 2, 3], util=[30.0, 50.0, 70.0], model="resnet56").assign(gflops_per_image=0.12)])
    assert bs.check_claims(gpu, "cuda")[-1].held is True
    shallow_busier = gpu.assign(gflops_per_image=np.where(gpu["model"] == "resnet56", 0.01, 0.12))
    assert bs.check_claims(shallow_busier, "cuda")[-1].held is False
    for c in bs.check_claims(gpu, "cuda"):  # every claim states its criterion
        assert ">=" in c.claim or c.note.startswith("criterion"), c


def test_claims_without_batch_one_are_not_applicable():
    df = _frame([1.0, 2.0, 3.0]).assign(batch_size=[2, 4, 8])
    checks = {c.claim.split(" from")[0]: c for c in bs.check_claims(df, "cpu")}
    for claim in ("throughput at the best batch is far (>= 2x) above batch 1", "total inference time drops"):
        assert checks[claim].held is None and checks[claim].note


def test_configure_names_the_bad_parameter_and_valid_values():
    with pytest.raises(ValueError, match=r"models: 'resnet21'.*valid models: .*resnet20"):
        bs.configure("quick", models=["resnet21"])
    with pytest.raises(ValueError, match=r"batch_sizes: 0 .*integers >= 1"):
        bs.configure("quick", batch_sizes=[1, 0])
    with pytest.raises(ValueError, match=r"batch_sizes: 'big'"):
        bs.configure("quick", batch_sizes=["big"])
    with pytest.raises(ValueError, match=r"images"):
        bs.configure("quick", images=0)
    with pytest.raises(ValueError, match=r"threads=0 must be an integer >= 1"):
        bs.configure("quick", threads=0)
    with pytest.raises(ValueError, match=r"valid here"):
        bs.configure("quick", device="tpu")
    with pytest.raises(ValueError, match=r"lstm_sentiment.*valid models"):
        bs.configure("quick", models="lstm_sentiment")  # token model: not an image model
    with pytest.raises(ValueError, match=r"valid parameters: .*batch_sizes"):
        bs.configure("quick", batch_size=[1])


def test_configure_normalises_papermill_values():
    cfg = bs.configure("quick", models="resnet32", batch_sizes=[8, 2, 8])
    assert cfg.models == ["resnet32"] and cfg.batch_sizes == [2, 8] and cfg.device == "cpu" and cfg.threads == 1
    assert config.set_threads(None) == torch.get_num_threads()  # None leaves torch's setting alone
    # `papermill -p` passes text: a string that spells a list is read as one
    cfg = bs.configure("quick", models='["lenet5", "alexnet"]', batch_sizes="[4, 1]")
    assert cfg.models == ["lenet5", "alexnet"] and cfg.batch_sizes == [1, 4]
    with pytest.raises(ValueError, match=r"batch_sizes: '\[1, 4'"):
        bs.configure("quick", batch_sizes="[1, 4")


def test_figures_have_the_papers_panels(measured):
    df = measured[0]
    figs = bs.figures(df)
    assert list(figs) == ["01_fig1_time_memory", "01_fig2_latency_utilisation", "01_time_breakdown", "01_roofline"]
    fig1, fig2, fig3, fig4 = figs.values()
    assert len(fig1.axes) == 2 and fig1.axes[0].get_yscale() == "log" and fig1.axes[0].get_xscale() == "log"
    assert "not measured" in " ".join(t.get_text() for t in fig2.axes[1].texts)
    assert [t.get_text() for t in fig2.axes[1].get_xticklabels()] == ["1", "4", "16"]  # batch axis kept
    assert len(fig3.axes) == 2 and len(fig3.axes[0].patches) == 6  # 3 batch sizes x 2 CPU components
    assert "no roof lines" in fig4.axes[0].get_title() and not fig4.axes[0].get_lines()
    for fig in figs.values():
        plt.close(fig)


def test_figures_draw_what_a_gpu_measures(measured):
    df = measured[0]
    roof, batch = df["experiment"] == "roofline", df["experiment"] == "batch"
    gpu = df.copy()
    for col, value in device_peaks(device_name="NVIDIA H100 80GB HBM3").items():
        gpu.loc[roof, col] = value
    gpu.loc[roof, "cudnn_allow_tf32"] = True
    gpu.loc[batch, "gpu_util_pct"] = np.linspace(10, 90, batch.sum())
    figs = bs.figures(gpu)
    util = figs["01_fig2_latency_utilisation"].axes[1]
    assert not util.texts and len(util.get_lines()) >= 2 and util.get_ylim() == (0, 100)
    roofline = figs["01_roofline"].axes[0]
    assert "H100" in roofline.get_title() and len(roofline.get_lines()) == 2  # FP32 and TF32 roofs
    for fig in figs.values():
        plt.close(fig)
