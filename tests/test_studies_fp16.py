"""Tests for cnnlab.studies.fp16: labels per device, skipped fp16 on CPU, accuracy rows, claims, configuration,
stores keyed by the settings, the study contract.

Training is replaced by an untrained, seeded LeNet-5 (``cnnlab.train.train`` is tested in test_train). fp16 is
never timed here (it can be ~25x slower than fp32 on a CPU): cpu_fp16_batch_sizes is empty.
"""

from __future__ import annotations

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib import pyplot as plt

from cnnlab import models, studies, train
from cnnlab.claims import INCONCLUSIVE, SLIGHT
from cnnlab.studies import fp16 as pr
from margins import check

TRAINED = []  # the models the fake trainer handed out: measure must leave them fp32


def fake_train(model_name, dataset_name, *, recipe, synthetic, device, progress):
    torch.manual_seed(0)
    net = models.get(model_name).to(device)
    TRAINED.append(net)
    history = pd.DataFrame({"epoch": [1], "lr": [0.1], "train_loss": [2.3], "test_loss": [2.3],
                            "test_accuracy_pct": [10.0], "epoch_time_s": [0.1], "data_source": ["real"]})
    return net, history


def _cfg(**overrides):
    base = dict(model="lenet5", precisions=["fp32", "autocast", "fp16", "bf16"], batch_sizes=[2, 8],
                cpu_fp16_batch_sizes=[], warmup=1, repeats=2, eval_batch_size=180, device="cpu")
    return pr.configure("quick", **{**base, **overrides})


@pytest.fixture(scope="module")
def measured():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(train, "train", fake_train)
        return pr.measure(_cfg(), None, progress=False)


def test_the_module_follows_the_study_contract():
    assert studies.signature_problems(pr) == []


def test_autocast_resolves_per_device_and_fp32_is_required():
    assert _cfg(precisions=["fp32", "autocast", "fp16"]).precisions == ["fp32", "autocast-bf16", "fp16"]
    # duplicates after resolution are dropped
    assert _cfg(precisions=["fp32", "autocast", "autocast-bf16"]).precisions == ["fp32", "autocast-bf16"]
    assert _cfg(precisions="[\"fp32\", \"bf16\"]").precisions == ["fp32", "bf16"]  # papermill passes text
    with pytest.raises(ValueError, match=r"precisions='fp8' is not valid; valid: fp32, autocast"):
        _cfg(precisions=["fp32", "fp8"])
    with pytest.raises(ValueError, match=r"must include 'fp32'"):
        _cfg(precisions=["autocast"])


def test_timing_has_a_row_per_point_and_skips_fp16_on_cpu_with_a_reason(measured):
    times = studies.tables(measured)["timing"]
    assert len(times) == 8 and list(times["precision"].unique()) == ["fp32", "autocast-bf16", "fp16", "bf16"]
    ok, skipped = times[times["status"] == "ok"], times[times["status"] == "skipped"]
    assert set(ok["precision"]) == {"fp32", "autocast-bf16", "bf16"} and len(ok) == 6
    assert set(skipped["precision"]) == {"fp16"} and skipped["error"].str.contains("cpu_fp16_batch_sizes").all()
    assert skipped["latency_ms_median"].isna().all()
    for col in ("latency_ms_median", "throughput_items_per_s", "peak_mem_alloc_mib"):
        assert (ok[col] > 0).all() and np.isfinite(ok[col]).all()
    assert dict(zip(ok["precision"], ok["autocast"])) == {"fp32": "off", "autocast-bf16": "bfloat16", "bf16": "off"}
    assert dict(zip(times["precision"], times["dtype"])) == {"fp32": "float32", "autocast-bf16": "float32",
                                                             "fp16": "float16", "bf16": "bfloat16"}
    assert ok["gpu_util_pct"].isna().all() and ok["gpu_util_missing_reason"].notna().all()
    assert (ok["data_source"] == "synthetic").all() and (ok["repeats"] == 2).all()
    # every point measured a copy: the trained model stays fp32
    assert (ok["trained_model_dtype"] == "float32").all()
    assert all(p.dtype == torch.float32 for net in TRAINED for p in net.parameters())
    assert studies.check_results(measured).startswith("results checked")


def test_autocast_memory_is_measured_in_its_own_pass(measured):
    times = studies.tables(measured)["timing"]
    ok = times[times["status"] == "ok"].set_index(["precision", "batch_size"])
    # Which way bf16 autocast moves a CNN's CPU peak depends on the CPU: LeNet-5's batch-8 growth measured 0.53 ->
    # 0.31 MiB with native bf16 convolutions (AVX512-BF16), 0.33 -> 1.02 MiB on AVX2, where oneDNN converts to fp32
    # in extra buffers (and at batch 2 it grew on both). What holds everywhere: the memory pass ran under autocast,
    # so the peaks differ. The direction for a matmul, which does not depend on the CPU, is tested in test_timing.py.
    for batch in (2, 8):
        peaks = ok.loc[[("fp32", batch), ("autocast-bf16", batch)], "peak_mem_increment_mib"]
        assert peaks.iloc[0] != peaks.iloc[1], peaks


def test_accuracy_per_precision_on_the_digits_test_set(measured):
    acc = studies.tables(measured)["accuracy"]
    assert list(acc["precision"]) == ["fp32", "autocast-bf16", "fp16", "bf16"] and (acc["status"] == "ok").all()
    assert (acc["num_examples"] == 360).all() and (acc["data_source"] == "real").all()
    # each change is against the fp32 row's accuracy and loss (row 0)
    assert (acc["accuracy_change_pp"] == acc["accuracy_pct"] - acc.loc[0, "accuracy_pct"]).all()
    assert (acc["loss_change"] == acc["loss"] - acc.loc[0, "loss"]).all()
    assert ((acc["accuracy_pct"] >= 0) & (acc["accuracy_pct"] <= 100)).all()
    assert (acc["loss"] > 0).all() and (acc["eval_time_s"] > 0).all()
    assert list(acc["dtype"]) == ["float32", "float32", "float16", "bfloat16"]
    assert (acc["trained_model_dtype"] == "float32").all()
    # an untrained LeNet's logits barely differ between fp32 and 16-bit: the loss moves by little
    check("untrained LeNet-5 digits loss, 16-bit vs fp32 |change|", acc["loss_change"].abs().max(), "<", 0.05)
    assert list(studies.tables(measured)["training"]["epoch"]) == [1]


def _frame(fp32_ms, auto_ms, fp32_mib, auto_mib, changes, *, loss=2.0, auto_loss=2.02, time_spread=0.02,
           mem_spread=0.02, images=1_000_000):
    """Timing at batch 1 and 64 (medians ``fp32_ms`` / ``auto_ms`` at batch 1 within +-``time_spread``) and average
    memory at batch 64 (``fp32_mib`` / ``auto_mib`` within +-``mem_spread``); accuracy changes ``changes`` (pp) and
    test losses ``loss`` (fp32) and ``auto_loss`` (every reduced precision), on ``images`` test images (a million by
    default: accuracy intervals of about +-0.1 pp, so that changes of a few tenths are decided)."""
    lat = pd.Series([fp32_ms, 5.0, auto_ms, 4.0])
    mem = pd.Series([10.0, fp32_mib, 9.0, auto_mib])
    times = pd.DataFrame({"precision": ["fp32", "fp32", "autocast-fp16", "autocast-fp16"], "batch_size": [1, 64] * 2,
                          "status": "ok", "latency_ms_median": lat, "latency_ms_p10": lat * (1 - time_spread),
                          "latency_ms_p90": lat * (1 + time_spread), "repeats": 5,
                          "peak_mem_alloc_mib": mem * 1.5, "avg_mem_mib": mem,
                          "avg_mem_mib_low": mem * (1 - mem_spread), "avg_mem_mib_high": mem * (1 + mem_spread),
                          "experiment": "timing"})
    acc = [{"precision": "fp32", "accuracy_pct": 90.0, "accuracy_change_pp": 0.0, "loss": loss, "loss_change": 0.0}]
    acc += [{"precision": p, "accuracy_pct": 90 + c, "accuracy_change_pp": c, "loss": auto_loss,
             "loss_change": auto_loss - loss} for p, c in changes.items()]
    acc = pd.DataFrame(acc).assign(status="ok", dataset="digits", data_source="real", num_examples=images,
                                   experiment="accuracy")
    return pd.concat([times, acc], ignore_index=True)


ACC, LOSS, MEM, SLOW, GROWS, SHRINKS = range(6)


def test_claims_follow_the_numbers():
    c = pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, {"autocast-fp16": -0.3}), "cuda")
    # a 10% rise is inside the "slight" band, but a time is known only within TIME_NOISE: never decidable held
    # the saving: 0.9x at batch 1, 0.6x at 64; the slowdown 1.1x at batch 1, 0.8x at 64: apart by less than the noise
    assert [x.held for x in c] == [True, True, True, INCONCLUSIVE, True, INCONCLUSIVE]
    assert "cannot be decided at this noise" in c[SLOW].note
    assert all(x.criterion for x in c) and not any("criterion" in x.note for x in c)
    c = pr.check_claims(_frame(1.0, 0.5, 100.0, 120.0, {"autocast-fp16": -0.8}, auto_loss=2.5), "cuda")  # 2x faster
    assert [x.held for x in c][:5] == [False, False, False, False, False]  # 0.9x at batch 1, 1.2x at 64: no growth
    # "slightly" slower has an upper bound: 2x slower is not slight (its whole interval beyond the bound); equal time
    # is no increase, but within noise of one, never "held"
    assert pr.check_claims(_frame(1.0, 2.0, 100.0, 60.0, {"autocast-fp16": 0.0}), "cuda")[SLOW].held is False
    assert pr.check_claims(_frame(1.0, 1.0, 100.0, 60.0, {"autocast-fp16": 0.0}), "cuda")[SLOW].held == INCONCLUSIVE
    assert f"< {1 + SLIGHT:.2f}" in c[SLOW].criterion and "0.5 pp" in c[ACC].criterion
    # "noticeable": 5% less average memory is a reduction, but not a noticeable one; a lower loss is no increase
    assert pr.check_claims(_frame(1.0, 1.1, 100.0, 95.0, {"autocast-fp16": 0.0}), "cuda")[MEM].held is False
    assert pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, {"autocast-fp16": 0.0}, auto_loss=1.5), "cuda")[LOSS].held
    cpu = pr.check_claims(_frame(1.0, 1.2, 100.0, 60.0, {"autocast-fp16": 0.0}), "cpu")
    assert cpu[MEM].held is None and "GPU claim" in cpu[MEM].note and "at batch 64 0.60x" in cpu[MEM].ours
    assert cpu[GROWS].held is None and "GPU claim" in cpu[GROWS].note and "at batch 64 0.6" in cpu[GROWS].ours
    assert "1.20x" in cpu[SLOW].ours and "p10-p90" in cpu[SLOW].criterion
    # batch sizes read as floats from the combined frame (gaps from other experiments) print as integers
    assert "at batch 64" in cpu[MEM].ours and "at batch 1 1.20x" in cpu[SLOW].ours and "64.0" not in cpu[MEM].ours


def test_the_slowdown_is_judged_to_shrink_with_batch_size_beyond_the_times_noise():
    shrinks = pr.check_claims(_frame(1.0, 3.0, 100.0, 60.0, {"autocast-fp16": 0.0}), "cpu")[SHRINKS]
    assert shrinks.held is True and "at batch 64 0.80x (0.51-1.25x)" in shrinks.ours  # 3x slower at batch 1, 0.8x at 64
    df = _frame(1.0, 0.3, 100.0, 60.0, {"autocast-fp16": 0.0})
    at_64 = (df["precision"] == "autocast-fp16") & (df["batch_size"] == 64)
    df.loc[at_64, ["latency_ms_median", "latency_ms_p10", "latency_ms_p90"]] = 15.0  # 0.3x at batch 1, 3x at 64
    assert pr.check_claims(df, "cpu")[SHRINKS].held is False
    assert "falls at every step" in shrinks.criterion and "smallest batch -> largest" in shrinks.criterion


def test_every_claim_names_its_noise_rule_and_quotes_the_paper():
    for device in ("cuda", "cpu"):
        for c in pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, {"autocast-fp16": -0.3}), device):
            assert "noise" in c.criterion, c
            assert '"' in c.paper and "Sec. IV-B" in c.paper, c  # the paper's words beside the criterion
    memory = pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, {"autocast-fp16": 0.0}), "cuda")[MEM]
    assert "average memory" in memory.paper and "average memory" in memory.criterion  # not the peak
    loss = pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, {"autocast-fp16": 0.0}), "cuda")[LOSS]
    assert "increase in test loss" in loss.paper


def test_an_accuracy_change_is_judged_on_the_test_sets_interval():
    # one image of 360 (-0.28 pp) is within a bound of 0.5 pp by its value, but the interval of a difference on 360
    # images is several pp wide: inconclusive, never "held"
    small = pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, {"autocast-fp16": -100 / 360}, images=360), "cpu")[ACC]
    assert small.held == INCONCLUSIVE and "autocast-fp16: within noise" in small.note
    assert "95%" in small.ours and "Wilson" in small.criterion and "noise" in small.criterion
    # the same change on a million images is decided both ways
    assert pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, {"autocast-fp16": -0.3}), "cpu")[ACC].held is True
    assert pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, {"autocast-fp16": 0.8}), "cpu")[ACC].held is False
    # a change whose interval straddles the bound: inconclusive (0.45 pp on 100,000 images: about +-0.26 pp)
    edge = pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, {"autocast-fp16": -0.45}, images=100_000), "cpu")[ACC]
    assert edge.held == INCONCLUSIVE and "spans the threshold -0.5" in edge.note


def test_differences_within_noise_are_inconclusive_and_clear_ones_decided():
    # autocast 1.1x fp32's median time, but each time +-20%: the ratio spans 0.73-1.65x, across 1 and 1.2
    noisy = pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, {"autocast-fp16": 0.0}, time_spread=0.2), "cuda")
    assert noisy[SLOW].held == INCONCLUSIVE and "within noise" in noisy[SLOW].note
    # the same spread on a clear 3x slowdown: decided (not slight)
    clear = pr.check_claims(_frame(1.0, 3.0, 100.0, 60.0, {"autocast-fp16": 0.0}, time_spread=0.2), "cuda")
    assert clear[SLOW].held is False
    # average memory 0.85x fp32's with each +-10%: 0.70-1.04x straddles 0.9; at 0.5x it clears it
    mem = pr.check_claims(_frame(1.0, 1.1, 100.0, 85.0, {"autocast-fp16": 0.0}, mem_spread=0.1), "cuda")[MEM]
    assert mem.held == INCONCLUSIVE and "spans the threshold 0.90x" in mem.note
    assert pr.check_claims(_frame(1.0, 1.1, 100.0, 50.0, {"autocast-fp16": 0.0}, mem_spread=0.1),
                           "cuda")[MEM].held is True


def test_timing_rows_carry_average_memory_with_its_range(measured):
    ok = studies.tables(measured)["timing"].query("status == 'ok'")
    assert (ok["avg_mem_mib_low"] <= ok["avg_mem_mib"]).all() and (ok["avg_mem_mib"] <= ok["avg_mem_mib_high"]).all()
    assert (ok["avg_mem_mib_low"] > 0).all() and ok["avg_mem_missing_reason"].isna().all()
    assert (ok["avg_mem_weighting"] == "host wall time").all()
    # the average of one pass is below its peak (the peak counts the same resident memory plus the top of the pass)
    assert (ok["avg_mem_mib"] <= ok["peak_mem_alloc_mib"] * 1.01).all()


@pytest.mark.gpu
def test_configure_names_the_bad_parameter_and_valid_values():
    with pytest.raises(ValueError, match=r"model: 'resnet99'.*valid models"):
        _cfg(model="resnet99")
    with pytest.raises(ValueError, match=r"give one model"):
        _cfg(model=["resnet20", "resnet32"])
    with pytest.raises(ValueError, match=r"precisions='int8' is not valid; valid"):
        _cfg(precisions=["fp32", "int8"])
    with pytest.raises(ValueError, match=r"dataset='imdb' is not valid; valid: .*digits"):
        _cfg(dataset="imdb")
    with pytest.raises(ValueError, match=r"recipe='long' is not valid; valid: quick"):
        _cfg(recipe="long")
    with pytest.raises(ValueError, match=r"synthetic=1 is not valid; valid: True, False"):
        _cfg(synthetic=1)
    with pytest.raises(ValueError, match=r"batch_sizes: -4"):
        _cfg(batch_sizes=[-4])
    with pytest.raises(ValueError, match=r"cpu_fp16_batch_sizes: 0"):
        _cfg(cpu_fp16_batch_sizes=[0])
    with pytest.raises(ValueError, match=r"unknown parameter.*valid parameters"):
        _cfg(batch_size=4)
    cfg = _cfg(model="resnet20", batch_sizes=[64, 4], device=None, recipe=train.Recipe(epochs=1))
    assert cfg.batch_sizes == [4, 64] and cfg.cpu_fp16_batch_sizes == [] and cfg.model == "resnet20"
    assert cfg.device == ("cuda:0" if torch.cuda.is_available() else "cpu") and cfg.preset == "quick"


def test_stores_are_keyed_by_the_settings_and_resume(tmp_path, monkeypatch):
    calls = {"benchmark": 0, "evaluate": 0}

    def counting(name, fn):
        def wrapped(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(train, "train", fake_train)
    monkeypatch.setattr(pr, "benchmark", counting("benchmark", pr.benchmark))
    monkeypatch.setattr(train, "evaluate", counting("evaluate", train.evaluate))
    small = dict(precisions=["fp32", "autocast"], batch_sizes=[2])
    a = pr.measure(_cfg(**small), tmp_path, progress=False)
    assert calls == {"benchmark": 2, "evaluate": 2}
    # more timed batches: timing is measured again and never returns the first run's rows (every setting keys
    # every store: accuracy, which does not depend on it, is evaluated again too; over-inclusive is safe)
    b = pr.measure(_cfg(**small, repeats=3), tmp_path, progress=False)
    assert calls == {"benchmark": 4, "evaluate": 4}
    assert (studies.tables(b)["timing"]["repeats"] == 3).all() and (studies.tables(a)["timing"]["repeats"] == 2).all()
    # another evaluation batch size: accuracy is evaluated again (and timing, keyed by it too)
    c = pr.measure(_cfg(**small, eval_batch_size=100), tmp_path, progress=False)
    assert calls == {"benchmark": 6, "evaluate": 6}
    assert (c["finished_utc"] != a["finished_utc"]).all()  # none of the first run's rows
    # the first settings again: nothing new is measured and the same rows come back
    again = pr.measure(_cfg(**small), tmp_path, progress=False)
    assert calls == {"benchmark": 6, "evaluate": 6}
    cols = ["experiment", "precision", "batch_size", "status", "latency_ms_median", "accuracy_pct", "loss"]
    pd.testing.assert_frame_equal(again[cols], a[cols])


def test_figures(measured):
    figs = pr.figures(measured)
    assert list(figs) == ["02_fig3_time_memory", "02_fig4_accuracy_loss"]
    fig3, fig4 = figs.values()
    assert len(fig3.axes) == 2 and fig3.axes[0].get_xscale() == "log"
    assert any("fp16: batch 2, 8 not timed" in t.get_text() for t in fig3.texts)  # skipped points are said
    assert len(fig4.axes) == 2 and len(fig4.axes[0].patches) == 4
    fp32_acc = studies.tables(measured)["accuracy"].loc[0, "accuracy_pct"]
    assert fig4.axes[0].texts[0].get_text() == f"{fp32_acc:.2f}"  # values written on the bars
    for fig in figs.values():
        plt.close(fig)


@pytest.mark.parametrize("bad, match", [
    (dict(eval_batch_size=10**6), r"eval_batch_size=1000000 must be an integer >= 1 and <= 65536"),
    (dict(batch_sizes=[True]), "batch_sizes: True is not valid"),
    (dict(repeats=float("inf")), "repeats=inf must be an integer"),
    (dict(synthetic=0), "synthetic=0 is not valid; valid: True, False"),
    (dict(threads=10**4), r"threads=10000 must be an integer >= 1 and <= \d+ \(the CPU cores present\)"),
])
def test_configure_rejects_bools_non_finite_and_out_of_range_values_naming_the_parameter(bad, match):
    with pytest.raises(ValueError, match=match):
        pr.configure("quick", **bad)


def test_every_point_is_timed_before_the_first_profile(monkeypatch, call_order):
    """The average-memory passes run under the profiler, which on a GPU may leave CUPTI attached and slow later
    launches (cnnlab.profiling.cupti): every point's timing comes before the first of them, not interleaved."""
    monkeypatch.setattr(train, "train", fake_train)
    call_order.wrap(pr, "benchmark", "time")
    call_order.wrap(pr.memory, "average_memory", "profile")
    df = pr.measure(_cfg(precisions=["fp32", "autocast"], batch_sizes=[2, 8]), None, progress=False)
    assert call_order == ["time"] * 4 + ["profile"] * 4
    ok = studies.tables(df)["timing"].query("status == 'ok'")
    assert len(ok) == 4 and ok["avg_mem_mib"].notna().all() and not ok["after_cuda_profile"].any()
