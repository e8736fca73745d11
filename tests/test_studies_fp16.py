"""Tests for cnnlab.studies.fp16: labels per device, skipped fp16 on CPU, accuracy rows, claims, validation.

fp16 is never timed here (it can be ~25x slower than fp32 on a CPU): cpu_fp16_batch_sizes is empty.
"""

from __future__ import annotations

import math

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib import pyplot as plt

from cnnlab import config, models
from cnnlab.studies import fp16 as pr
from margins import check


@pytest.fixture(scope="module")
def lenet():
    torch.manual_seed(0)
    return models.get("lenet5").eval()


@pytest.fixture(scope="module")
def times(lenet):
    return pr.timing(lenet, ["fp32", "autocast", "fp16"], [2, 8], device="cpu", warmup=1, repeats=2,
                     cpu_fp16_batch_sizes=[], progress=False)


def test_autocast_resolves_per_device_and_fp32_is_required():
    labels = [p["precision"] for p in pr.resolve_precisions(["fp32", "autocast", "fp16"], "cpu")]
    assert labels == ["fp32", "autocast-bf16", "fp16"]
    fp16 = pr.resolve_precisions(["fp32", "fp16", "autocast-fp16", "bf16"], "cpu")
    assert [p["slow_on_cpu"] for p in fp16] == [False, True, True, False]
    assert [p["precision"] for p in pr.resolve_precisions(["fp32", "autocast", "autocast-bf16"], "cpu")] == \
        ["fp32", "autocast-bf16"]  # duplicates after resolution are dropped
    with pytest.raises(ValueError, match=r"precisions: 'fp8'.*valid precisions: fp32, autocast"):
        pr.resolve_precisions(["fp32", "fp8"], "cpu")
    with pytest.raises(ValueError, match=r"must include 'fp32'"):
        pr.resolve_precisions(["autocast"], "cpu")


def test_timing_has_a_row_per_point_and_skips_fp16_on_cpu_with_a_reason(times, lenet):
    assert len(times) == 6
    assert list(times["precision"].unique()) == ["fp32", "autocast-bf16", "fp16"]
    ok, skipped = times[times["status"] == "ok"], times[times["status"] == "skipped"]
    assert set(ok["precision"]) == {"fp32", "autocast-bf16"} and len(ok) == 4
    assert set(skipped["precision"]) == {"fp16"} and skipped["error"].str.contains("cpu_fp16_batch_sizes").all()
    assert skipped["latency_ms_median"].isna().all()
    for col in ("latency_ms_median", "throughput_items_per_s", "peak_mem_alloc_mib"):
        assert (ok[col] > 0).all() and np.isfinite(ok[col]).all()
    assert dict(zip(ok["precision"], ok["autocast"])) == {"fp32": "off", "autocast-bf16": "bfloat16"}
    assert (ok["dtype"] == "float32").all() and (skipped["dtype"] == "float16").all()
    assert ok["gpu_util_pct"].isna().all() and ok["gpu_util_missing_reason"].notna().all()
    # the measured model is a copy: the caller's model stays fp32 on the CPU
    assert all(p.dtype == torch.float32 for p in lenet.parameters())


def test_autocast_memory_is_measured_in_its_own_pass(times):
    ok = times[times["status"] == "ok"].set_index(["precision", "batch_size"])
    # Which way bf16 autocast moves a CNN's CPU peak depends on the CPU: LeNet-5's batch-8 growth measured 0.53 ->
    # 0.31 MiB with native bf16 convolutions (AVX512-BF16), 0.33 -> 1.02 MiB on AVX2, where oneDNN converts to fp32
    # in extra buffers (and at batch 2 it grew on both). What holds everywhere: the memory pass ran under autocast,
    # so the peaks differ. The direction for a matmul, which does not depend on the CPU, is tested in test_profiling.
    for batch in (2, 8):
        peaks = ok.loc[[("fp32", batch), ("autocast-bf16", batch)], "peak_mem_increment_mib"]
        assert peaks.iloc[0] != peaks.iloc[1], peaks


def test_accuracy_per_precision_on_the_digits_test_set(lenet):
    acc = pr.accuracy(lenet, ["fp32", "autocast", "bf16"], dataset="digits", device="cpu", batch_size=180)
    assert list(acc["precision"]) == ["fp32", "autocast-bf16", "bf16"]
    assert (acc["num_examples"] == 360).all() and (acc["data_source"] == "real").all()
    assert acc.loc[0, "accuracy_change_pp"] == 0 and acc.loc[0, "loss_change"] == 0
    assert ((acc["accuracy_pct"] >= 0) & (acc["accuracy_pct"] <= 100)).all()
    assert (acc["loss"] > 0).all()
    # an untrained LeNet's logits barely differ between fp32 and bf16: the loss moves by little
    check("untrained LeNet-5 digits loss, bf16 / autocast vs fp32 |change|", acc["loss_change"].abs().max(), "<", 0.05)
    assert all(p.dtype == torch.float32 for p in lenet.parameters())


def _acc(changes):
    rows = [{"precision": "fp32", "accuracy_pct": 90.0, "accuracy_change_pp": 0.0, "loss_change": 0.0}]
    rows += [{"precision": p, "accuracy_pct": 90 + c, "accuracy_change_pp": c, "loss_change": 0.01}
             for p, c in changes.items()]
    return pd.DataFrame(rows).assign(dataset="digits", data_source="real", num_examples=360)


def _times(fp32_ms, auto_ms, fp32_mib, auto_mib):
    return pd.DataFrame({"precision": ["fp32", "fp32", "autocast-fp16", "autocast-fp16"], "batch_size": [1, 64] * 2,
                         "status": "ok", "latency_ms_median": [fp32_ms, 5.0, auto_ms, 4.0],
                         "peak_mem_alloc_mib": [10.0, fp32_mib, 9.0, auto_mib]})


def test_claims_follow_the_numbers():
    c = pr.check_claims(_times(1.0, 1.2, 100.0, 60.0), _acc({"autocast-fp16": -0.3}), device="cuda")
    assert [x.held for x in c] == [True, True, True]
    c = pr.check_claims(_times(1.0, 0.8, 100.0, 120.0), _acc({"autocast-fp16": -0.8}), device="cuda")
    assert [x.held for x in c] == [False, False, False]
    cpu = pr.check_claims(_times(1.0, 1.2, 100.0, 60.0), _acc({"autocast-fp16": 0.0}), device="cpu")
    assert cpu[1].held is None and "GPU claim" in cpu[1].note and "60.0 MiB" in cpu[1].ours


def _cfg(**overrides):
    return config.configure("quick", pr.PRESETS, **overrides)


def test_validate_names_the_bad_parameter_and_valid_values():
    with pytest.raises(ValueError, match=r"model: 'resnet99'.*valid models"):
        pr.validate(_cfg(model="resnet99"))
    with pytest.raises(ValueError, match=r"give one model"):
        pr.validate(_cfg(model=["resnet20", "resnet32"]))
    with pytest.raises(ValueError, match=r"precisions: 'int8'.*valid precisions"):
        pr.validate(_cfg(precisions=["fp32", "int8"]))
    with pytest.raises(ValueError, match=r"dataset='imdb'.*valid datasets: .*digits"):
        pr.validate(_cfg(dataset="imdb"))
    with pytest.raises(ValueError, match=r"recipe='long'.*valid recipes"):
        pr.validate(_cfg(recipe="long"))
    with pytest.raises(ValueError, match=r"batch_sizes: -4"):
        pr.validate(_cfg(batch_sizes=[-4]))
    with pytest.raises(ValueError, match=r"cpu_fp16_batch_sizes: 0"):
        pr.validate(_cfg(cpu_fp16_batch_sizes=[0]))
    cfg = pr.validate(_cfg(batch_sizes=[64, 4], cpu_fp16_batch_sizes=[]))
    assert cfg.batch_sizes == [4, 64] and cfg.cpu_fp16_batch_sizes == [] and cfg.model == "resnet20"


def test_figures(times, lenet):
    fig3 = pr.plot_time_memory(times)
    assert len(fig3.axes) == 2 and fig3.axes[0].get_xscale() == "log"
    assert any("not timed" in t.get_text() for t in fig3.texts)  # skipped fp16 points are said, not hidden
    acc = pd.DataFrame({"precision": ["fp32", "autocast-bf16"], "accuracy_pct": [99.4, 99.2], "loss": [0.03, 0.031],
                        "dataset": "digits", "num_examples": 360, "data_source": "real"})
    fig4 = pr.plot_accuracy(acc)
    assert len(fig4.axes) == 2 and len(fig4.axes[0].patches) == 2
    for fig in (fig3, fig4):
        plt.close(fig)
    assert math.isclose(acc["accuracy_pct"].iloc[0], 99.4)
