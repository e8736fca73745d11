"""Tests for cnnlab.studies.tiling: rows per grid point, Triton missing-with-reason on a CPU, memory over time,
the Triton check, claims, figure, validation.

The Triton check runs the kernel in Triton's interpreter: TRITON_INTERPRET=1 must be set before triton is first
imported (cnnlab.profiling imports it), hence the first lines; if another test module imported triton earlier in
this process without it, that test re-runs itself in a fresh subprocess with the variable set.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton (see module docstring)

import math  # noqa: E402

import cnnlab  # noqa: E402,F401  (first: registers torchvision's schemas)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib import pyplot as plt  # noqa: E402

from cnnlab import config  # noqa: E402
from cnnlab.kernels import triton_conv  # noqa: E402
from cnnlab.studies import tiling  # noqa: E402
from margins import check as check_margin  # noqa: E402



@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    # 96x96 instead of 224x224 and batch 1: the same code path in a fraction of a second per point.
    store = tmp_path_factory.mktemp("tiling") / "tiling.csv"
    df = tiling.measure([8, 16, 32], ["spatial", "triton"], image_size=96, batch_size=1, device="cpu", warmup=0,
                        repeats=2, store=store, progress=False)
    return df, store


def test_one_row_untiled_then_one_per_method_and_tile(measured):
    df, _ = measured
    assert list(zip(df["method"], df["tile"])) == [("untiled", "untiled")] + [
        (m, f"{t}x{t}") for m in ("spatial", "triton") for t in (8, 16, 32)]
    assert math.isnan(df["tile_px"].iloc[0]) and list(df["tile_px"].iloc[1:4]) == [8, 16, 32]
    assert (df["data_source"] == "synthetic").all() and (df["model"] == "resnet20").all()
    assert (df["image_size"] == 96).all() and (df["batch_size"] == 1).all()


def test_triton_rows_are_missing_with_the_reason_on_cpu(measured):
    df, _ = measured
    tri = df[df["method"] == "triton"]
    assert (tri["status"] == "skipped").all()
    assert (tri["time_missing_reason"] == "Triton kernels are timed only on a GPU").all()
    for col in ("latency_ms_median", "avg_mem_mib", "peak_mem_alloc_mib", "gpu_util_pct", "time_vs_untiled"):
        assert tri[col].isna().all(), col
    assert tri["error"].str.contains("interpreter").all()


def test_measured_rows_are_finite_and_consistent(measured):
    df, _ = measured
    ok = df[df["status"] == "ok"]
    assert list(ok["method"]) == ["untiled", "spatial", "spatial", "spatial"]
    for col in ("latency_ms_median", "throughput_items_per_s", "avg_mem_mib", "peak_mem_alloc_mib", "first_call_s"):
        assert (ok[col] > 0).all() and np.isfinite(ok[col]).all(), col
    assert (ok["avg_mem_mib"] <= ok["peak_mem_alloc_mib"] * 1.01).all()
    assert (ok["latency_ms_p10"] <= ok["latency_ms_median"]).all()
    assert ok["gpu_util_pct"].isna().all() and ok["gpu_util_missing_reason"].notna().all()
    assert ok["time_missing_reason"].isna().all()


def test_spatial_tiling_cuts_memory_and_ratios_are_relative_to_untiled(measured):
    df, _ = measured
    ok = df[df["status"] == "ok"].set_index("tile")
    assert ok.loc["untiled", "time_vs_untiled"] == 1.0 and ok.loc["untiled", "peak_mem_vs_untiled"] == 1.0
    assert ok.loc["8x8", "peak_mem_vs_untiled"] == pytest.approx(
        ok.loc["8x8", "peak_mem_alloc_mib"] / ok.loc["untiled", "peak_mem_alloc_mib"])
    # allocator events are deterministic: strips of 8 rows keep less live than strips of 32, and both less than
    # the whole image
    peaks = ok.loc[["8x8", "16x16", "32x32"], "peak_mem_increment_mib"].to_numpy()
    assert peaks[0] < peaks[1] < peaks[2] < ok.loc["untiled", "peak_mem_increment_mib"]


def test_the_store_resumes_without_measuring_again(measured):
    df, store = measured
    again = tiling.measure([8, 16, 32], ["spatial", "triton"], image_size=96, batch_size=1, device="cpu", warmup=0,
                           repeats=2, store=store, progress=False)
    ok = df["status"] == "ok"
    # a point measured again would have another wall time (float, to the nanosecond)
    assert again.loc[ok, "point_time_s"].tolist() == df.loc[ok, "point_time_s"].tolist()


def test_memory_over_time_of_a_known_allocation_pattern():
    mib = 1024**2

    def step():
        a = torch.empty(mib // 4)  # 1 MiB
        b = torch.empty(2 * mib // 4)  # 2 MiB: 3 MiB live
        del a
        c = torch.empty(mib // 4)  # 3 MiB live again
        del b, c
        return torch.empty(0)

    stats = tiling.memory_over_time(step, "cpu")
    assert stats["peak_bytes"] == 3 * mib
    assert 0 < stats["avg_bytes"] < 3 * mib and stats["events"] >= 6 and stats["step_s"] > 0


def test_check_triton_runs_the_kernel_and_compares_with_conv2d(ran_interpreted_in_subprocess):
    if ran_interpreted_in_subprocess:
        return
    assert tiling.triton_check_device() == ("cpu", None)
    layers = {"stem": (3, 16, 1), "down": (16, 32, 2)}
    check = tiling.check_triton([8, 16], size=10, batch_size=1, layers=layers)
    assert list(zip(check["tile"], check["layer"])) == [(t, name) for t in ("8x8", "16x16") for name in layers]
    assert check["passed"].all()
    check_margin("tiling.check_triton: worst relative error", check["rel_error"].max(), "<", 2e-5)
    assert (check["dot_precision"] == "ieee").all() and check["check_missing_reason"].isna().all()
    assert list(check["input_shape"]) == ["1x3x10x10", "1x16x10x10"] * 2


def test_check_triton_says_why_when_the_kernel_cannot_run(monkeypatch):
    monkeypatch.setattr(triton_conv, "interpreter_enabled", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    check = tiling.check_triton([8], size=10, layers={"stem": (3, 16, 1)})
    assert check["passed"].isna().all() and check["rel_error"].isna().all()
    assert check["check_missing_reason"].str.contains("TRITON_INTERPRET=1").all()


def test_check_tiled_logits_matches_the_untiled_model():
    logits = tiling.check_tiled_logits([8, 32], image_size=48)
    assert logits["shape_ok"].all() and list(logits["tile_px"]) == [8, 32]
    check_margin("tiling.check_tiled_logits: worst relative error", logits["rel_error"].max(), "<", 1e-5)


def _frame(times, mems, util=None):
    rows = [{"method": "untiled", "tile": "untiled", "tile_px": math.nan, "status": "ok", "latency_ms_median": 10.0,
             "avg_mem_mib": 50.0, "gpu_util_pct": math.nan, "gpu_util_missing_reason": "CPU run: no GPU to sample",
             "time_missing_reason": None, "avg_mem_missing_reason": None}]
    for i, tile in enumerate((8, 16, 32, 64)):
        rows.append({"method": "spatial", "tile": f"{tile}x{tile}", "tile_px": tile, "status": "ok",
                     "latency_ms_median": times[i], "avg_mem_mib": mems[i],
                     "gpu_util_pct": math.nan if util is None else util[i],
                     "gpu_util_missing_reason": "CPU run: no GPU to sample" if util is None else None,
                     "time_missing_reason": None, "avg_mem_missing_reason": None})
    return pd.DataFrame(rows)


def test_claims_follow_the_numbers():
    held = {c.claim: c.held for c in tiling.check_claims(_frame([12, 11, 10.2, 10.4], [5, 6, 7, 9]), device="cpu")}
    assert held["inference time falls as tiles grow (spatial)"] is True  # 10.2 -> 10.4 is within the 5% noise
    assert held["average memory rises (paper: slightly) with tile size (spatial)"] is True
    assert held["GPU utilisation rises with tile size (spatial)"] is None  # a CPU: not measured
    rising = {c.claim: c.held for c in tiling.check_claims(_frame([10, 11, 12, 13], [9, 7, 6, 5]), device="cpu")}
    assert rising["inference time falls as tiles grow (spatial)"] is False
    assert rising["average memory rises (paper: slightly) with tile size (spatial)"] is False
    bumpy = {c.claim: c.held for c in tiling.check_claims(_frame([12, 14, 10, 9], [5, 6, 7, 9]), device="cpu")}
    assert bumpy["inference time falls as tiles grow (spatial)"] is False  # a 17% step up is not noise
    gpu = {c.claim: c.held for c in tiling.check_claims(_frame([12, 11, 10, 9], [5, 6, 7, 9], util=[40, 50, 60, 70]),
                                                        device="cuda")}
    assert gpu["GPU utilisation rises with tile size (spatial)"] is True


def test_claims_name_the_reason_for_triton_on_cpu(measured):
    df, _ = measured
    checks = [c for c in tiling.check_claims(df, device="cpu") if "(triton)" in c.claim]
    assert len(checks) == 3 and all(c.held is None for c in checks)
    assert all("Triton kernels are timed only on a GPU" in c.note for c in checks)


def test_figure_has_four_labelled_panels(measured):
    df, _ = measured
    fig = tiling.plot_tiling(df)
    axes = fig.axes
    assert len(axes) == 4
    assert "(ms)" in axes[0].get_ylabel() and "(MiB)" in axes[2].get_ylabel() and "(MiB)" in axes[3].get_ylabel()
    assert axes[2].get_xlabel() == "Tile edge (pixels)"
    assert [t.get_text() for t in axes[3].get_xticklabels()] == ["8", "16", "32"]
    assert any("not measured" in t.get_text() for t in axes[1].texts)  # GPU utilisation on a CPU
    assert any("Triton kernels are timed only on a GPU" in t.get_text() for t in fig.texts)
    plt.close(fig)


@pytest.mark.parametrize("name,value,needle", [
    ("tile_sizes", [8, 12], "tile_sizes: 12 is not a valid tile size; valid: powers of two"),
    ("tile_sizes", [256], "tile_sizes"),
    ("methods", ["spatial", "winograd"], "valid methods: spatial, triton"),
    ("methods", [], "methods is empty"),
    ("model", "vgg11", "valid models (CIFAR ResNets): resnet20"),
    ("until", "layer4", "until='layer4' is not valid; valid: layer1, layer2, layer3"),
    ("spatial_mode", "squares", "spatial_mode='squares' is not valid; valid: stream, recompute"),
    ("batch_size", 0, "batch_size=0"),
    ("image_size", 16, "image_size=16"),
    ("device", "tpu", "device"),
])
def test_validation_names_the_parameter(name, value, needle):
    cfg = config.configure("quick", tiling.PRESETS, **{name: value})
    with pytest.raises(ValueError) as err:
        tiling.validate(cfg)
    assert needle in str(err.value)


def test_presets_follow_the_paper_where_it_speaks():
    for name in ("standard", "paper"):
        p = tiling.PRESETS[name]
        assert p["batch_size"] == 8 and p["image_size"] == 224 and p["tile_sizes"] == [8, 16, 32, 64]
    quick = tiling.validate(config.configure("quick", tiling.PRESETS))
    assert quick.threads == 1 and quick.tile_sizes == [8, 16, 32, 64] and quick.device == "cpu"


def test_exact_fp32_turns_tf32_off_and_restores_it():
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    with pytest.raises(RuntimeError):
        with tiling.exact_fp32():
            assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
            raise RuntimeError("boom")
    assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == before


def test_triton_is_never_timed_on_a_cpu():
    reason, detail = tiling.triton_untimed_reason("cpu")
    assert reason == tiling.TRITON_CPU_REASON and "interpreter" in detail
