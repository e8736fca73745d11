"""Tests for cnnlab.studies.fp16: labels per device, skipped fp16 on CPU, accuracy rows, claims, configuration,
stores keyed by the settings, the study contract.

Training is replaced by an untrained, seeded LeNet-5 (``cnnlab.train.train`` is tested in test_train). fp16 is
never timed here (it can be ~25x slower than fp32 on a CPU): cpu_fp16_batch_sizes is empty. Two timing rounds, one
look (min_rounds = max_rounds = 2), unless a test asks for more.
"""

from __future__ import annotations

import re

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib import pyplot as plt

from cnnlab import claims, data, models, studies, train
from cnnlab.claims import INCONCLUSIVE, SLIGHT
from cnnlab.profiling import accuracy
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
                cpu_fp16_batch_sizes=[], warmup=1, repeats=2, eval_batch_size=180, device="cpu", min_rounds=2,
                max_rounds=2)
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
    assert (ok["data_source"] == "synthetic").all() and (ok["repeats"] == 4).all()  # 2 batches in each of 2 rounds
    assert (ok["rounds"] == 2).all() and ok["round_medians_ms"].str.count(", ").eq(1).all()
    assert (ok["confidence"] == 0.95).all()  # one look planned: its interval at the whole 95%
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
    n = data.info("digits").test_size
    assert (acc["num_examples"] == n).all() and (acc["data_source"] == "real").all()
    # each change is against the fp32 row's accuracy and loss (row 0)
    assert (acc["accuracy_change_pp"] == acc["accuracy_pct"] - acc.loc[0, "accuracy_pct"]).all()
    assert (acc["loss_change"] == acc["loss"] - acc.loc[0, "loss"]).all()
    assert ((acc["accuracy_pct"] >= 0) & (acc["accuracy_pct"] <= 100)).all()
    assert (acc["loss"] > 0).all() and (acc["eval_time_s"] > 0).all()
    assert list(acc["dtype"]) == ["float32", "float32", "float16", "bfloat16"]
    # the images only one of the two gets right: the paired difference's counts, consistent with the accuracies
    fp32 = accuracy.correct_count(acc.loc[0, "accuracy_pct"], n)
    for _, r in acc.iterrows():
        assert accuracy.correct_count(r["accuracy_pct"], n) - fp32 == r["correct_only_here"] - r["correct_only_fp32"]
    assert acc.loc[0, "correct_only_here"] == acc.loc[0, "correct_only_fp32"] == 0
    assert (acc["trained_model_dtype"] == "float32").all()
    # an untrained LeNet's logits barely differ between fp32 and 16-bit: the loss moves by little
    check("untrained LeNet-5 digits loss, 16-bit vs fp32 |change|", acc["loss_change"].abs().max(), "<", 0.05)
    assert list(studies.tables(measured)["training"]["epoch"]) == [1]


DRIFT = [1.0, 3.0, 1.5, 2.5, 1.2, 2.8, 1.1, 2.9, 1.4, 2.2, 1.3, 2.6]  # a shared machine's load, round by round


def _per_round(ms: float, jitter: float, seed: int) -> str:
    """``ms`` in each of the DRIFT rounds, times the round's load and a point's own noise of +-``jitter`` (relative,
    seeded): round_medians_ms as combine_rounds writes it."""
    noise = np.random.default_rng(seed).uniform(-jitter, jitter, len(DRIFT))
    return ", ".join(f"{ms * d * (1 + e):.6g}" for d, e in zip(DRIFT, noise))


def _frame(fp32_ms, auto_ms, fp32_mib, auto_mib, changes, *, loss=2.0, auto_loss=2.02, jitter=0.01,
           mem_spread=0.02, images=1_000_000, auto_64=4.0):
    """Timing at batch 1 and 64 in the DRIFT rounds, paired (medians ``fp32_ms`` / ``auto_ms`` at batch 1, 5 /
    ``auto_64`` ms at 64, each round also +-``jitter`` of its own), and average memory at batch 64 (``fp32_mib`` /
    ``auto_mib`` within +-``mem_spread``); accuracy on ``images`` test images, each reduced precision's ``changes``
    the images (right only here, right only in fp32); test losses ``loss`` (fp32) and ``auto_loss``."""
    lat = [fp32_ms, 5.0, auto_ms, auto_64]
    mem = pd.Series([10.0, fp32_mib, 9.0, auto_mib])
    times = pd.DataFrame({"precision": ["fp32", "fp32", "autocast-fp16", "autocast-fp16"], "batch_size": [1, 64] * 2,
                          "status": "ok", "latency_ms_median": lat, "latency_ms_p10": lat, "latency_ms_p90": lat,
                          "rounds": len(DRIFT), "round_medians_ms": [_per_round(t, jitter, i) for i, t in enumerate(lat)],
                          "confidence": 0.95, "repeats": 5, "peak_mem_alloc_mib": mem * 1.5, "avg_mem_mib": mem,
                          "avg_mem_mib_low": mem * (1 - mem_spread), "avg_mem_mib_high": mem * (1 + mem_spread),
                          "experiment": "timing"})
    acc = [{"precision": "fp32", "accuracy_pct": 90.0, "accuracy_change_pp": 0.0, "loss": loss, "loss_change": 0.0,
            "correct_only_here": 0, "correct_only_fp32": 0}]
    acc += [{"precision": p, "accuracy_pct": 90 + 100 * (here - only) / images, "loss": auto_loss,
             "correct_only_here": here, "correct_only_fp32": only} for p, (here, only) in changes.items()]
    acc = pd.DataFrame(acc).assign(status="ok", dataset="digits", data_source="real", num_examples=images,
                                   experiment="accuracy")
    return pd.concat([times, acc], ignore_index=True)


ACC, LOSS, MEM, SLOW, GROWS, SHRINKS = range(6)
SAME = {"autocast-fp16": (0, 0)}  # no image changes
DROP = {"autocast-fp16": (0, 3000)}  # 3,000 of a million images lost: -0.3 pp


def test_claims_follow_the_numbers():
    c = pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, DROP), "cuda")
    # paired rounds: the load drifts 3x between rounds, but every round's ratio is 1.1x +-2%: inside the "slight"
    # band, decided; the saving 0.9x at batch 1, 0.6x at 64; the slowdown 1.1x at batch 1, 0.8x at 64: both clear
    assert [x.held for x in c] == [True, True, True, True, True, True]
    assert all(x.criterion for x in c) and not any("criterion" in x.note for x in c)
    c = pr.check_claims(_frame(1.0, 0.5, 100.0, 120.0, {"autocast-fp16": (0, 8000)}, auto_loss=2.5), "cuda")
    assert [x.held for x in c][:5] == [False, False, False, False, False]  # 0.9x at batch 1, 1.2x at 64: no growth
    # "slightly" slower has an upper bound: 2x slower is not slight
    assert pr.check_claims(_frame(1.0, 2.0, 100.0, 60.0, SAME), "cuda")[SLOW].held is False
    assert f"< {1 + SLIGHT:.2f}" in c[SLOW].criterion and "0.5 pp" in c[ACC].criterion
    assert "paired rounds" in c[SLOW].criterion and "sign test" in c[SHRINKS].criterion
    # "noticeable": 5% less average memory is a reduction, but not a noticeable one; a lower loss is no increase
    assert pr.check_claims(_frame(1.0, 1.1, 100.0, 95.0, SAME), "cuda")[MEM].held is False
    assert pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, SAME, auto_loss=1.5), "cuda")[LOSS].held
    cpu = pr.check_claims(_frame(1.0, 1.2, 100.0, 60.0, SAME), "cpu")
    assert cpu[MEM].held is None and "GPU claim" in cpu[MEM].note and "at batch 64 0.60x" in cpu[MEM].ours
    assert cpu[GROWS].held is None and "GPU claim" in cpu[GROWS].note and "at batch 64 0.6" in cpu[GROWS].ours
    assert re.search(r"at batch 1 1\.(19|20|21)x", cpu[SLOW].ours) and "12 paired rounds" in cpu[SLOW].ours
    # batch sizes read as floats from the combined frame (gaps from other experiments) print as integers
    assert "at batch 64" in cpu[MEM].ours and "64.0" not in cpu[MEM].ours


def test_the_slight_slowdown_is_a_gpu_claim_bf16_on_a_cpu_stands_in_for_fp16():
    """Issue 43, item 1: a CPU's bf16 autocast (36x fp32's time in the quick run) is not the paper's fp16 on a T4:
    shown, not judged, off a GPU, with the reason naming the substitution; still judged on a GPU."""
    df = _frame(1.0, 1.1, 100.0, 60.0, SAME)
    cpu, gpu = pr.check_claims(df, "cpu")[SLOW], pr.check_claims(df, "cuda:0")[SLOW]
    assert cpu.held is None and "bfloat16" in cpu.note and "float16 autocast on a T4" in cpu.note
    assert gpu.held is True and "1.10x" in gpu.ours


def test_identical_work_in_paired_rounds_is_inconclusive_and_a_clear_effect_decided():
    # autocast's time is fp32's, each round with its own +-1% of noise: the ratio spans 1 (no rise, no fall)
    same = pr.check_claims(_frame(1.0, 1.0, 100.0, 60.0, SAME, auto_64=5.0), "cuda")
    assert same[SLOW].held == INCONCLUSIVE and "spans the threshold 1.00x" in same[SLOW].note
    assert same[SHRINKS].held == INCONCLUSIVE and "within noise at 1 -> 64" in same[SHRINKS].note
    # a real 20% slowdown at batch 1 against none at 64, under the same drift and noise: decided both ways
    assert pr.check_claims(_frame(1.0, 1.2, 100.0, 60.0, SAME, auto_64=5.0), "cuda")[SHRINKS].held is True
    assert pr.check_claims(_frame(1.0, 1.0, 100.0, 60.0, SAME, auto_64=6.0), "cuda")[SHRINKS].held is False
    # the same medians, taken unpaired, could not be told apart: the drift spreads each time 3x
    t = _frame(1.0, 1.2, 100.0, 60.0, SAME).query("experiment == 'timing'")
    fp32, auto = (sorted(float(v) for v in t.loc[i, "round_medians_ms"].split(",")) for i in (0, 2))
    assert auto[0] < fp32[-1]  # their ranges overlap
    # noisier rounds (+-20% each): a 10% rise is no longer decided, a 3x one still is
    noisy = pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, SAME, jitter=0.2), "cuda")[SLOW]
    assert noisy.held == INCONCLUSIVE and "within noise" in noisy.note
    assert pr.check_claims(_frame(1.0, 3.0, 100.0, 60.0, SAME, jitter=0.2), "cuda")[SLOW].held is False


def test_the_slowdown_is_judged_to_shrink_with_batch_size_on_its_paired_ratio():
    shrinks = pr.check_claims(_frame(1.0, 3.0, 100.0, 60.0, SAME), "cuda")[SHRINKS]
    assert shrinks.held is True and "at batch 64 0.80x" in shrinks.ours  # 3x slower at batch 1, 0.8x at 64
    assert pr.check_claims(_frame(1.0, 0.3, 100.0, 60.0, SAME, auto_64=15.0), "cuda")[SHRINKS].held is False
    assert "falls at every step" in shrinks.criterion and "smallest batch -> largest" in shrinks.criterion
    # the same slowdown as "slightly slower": off a GPU, bf16 autocast stands in for the paper's fp16, shown only
    cpu = pr.check_claims(_frame(1.0, 3.0, 100.0, 60.0, SAME), "cpu")[SHRINKS]
    assert cpu.held is None and "bfloat16" in cpu.note and "at batch 64 0.80x" in cpu.ours


def test_every_claim_names_its_noise_rule_and_quotes_the_paper():
    for device in ("cuda", "cpu"):
        for c in pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, DROP), device):
            assert "noise" in c.criterion, c
            assert '"' in c.paper and "Sec. IV-B" in c.paper, c  # the paper's words beside the criterion
    memory = pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, SAME), "cuda")[MEM]
    assert "average memory" in memory.paper and "average memory" in memory.criterion  # not the peak
    loss = pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, SAME), "cuda")[LOSS]
    assert "increase in test loss" in loss.paper


def test_an_accuracy_change_is_paired_on_the_same_images():
    """Issue 43, item 5: the same images were scored twice, so the difference is judged on the images only one
    precision gets right (exact McNemar-type interval), not on two independent binomial intervals."""
    # 360 images, none changes: no difference seen, but a discordance rate up to 1.2% is not ruled out on 360 images,
    # so the 0.5 pp band cannot be shown (the notebook says it needs 875 images); on 5,000 it holds
    same = pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, SAME, images=360), "cpu")[ACC]
    assert same.held == INCONCLUSIVE and "paired_exact" in same.criterion and "0 images right only here" in same.ours
    assert "cannot hold on 360 images" in same.note and "875 or more" in same.note
    assert pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, SAME, images=5000), "cpu")[ACC].held is True
    # one each way of 5,000: inside the band; 8 images lost one way of 360 decide it did not hold
    assert pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, {"autocast-fp16": (1, 1)}, images=5000), "cpu")[ACC].held
    assert pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, {"autocast-fp16": (0, 12)}, images=360), "cpu")[ACC].held \
        is False
    assert pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, DROP), "cpu")[ACC].held is True
    assert pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, {"autocast-fp16": (8000, 0)}), "cpu")[ACC].held is False
    # counts not recorded: not judged, and said
    df = _frame(1.0, 1.1, 100.0, 60.0, SAME).drop(columns=["correct_only_here", "correct_only_fp32"])
    missing = pr.check_claims(df, "cpu")[ACC]
    assert missing.held is None and "not counted" in missing.note


@pytest.mark.parametrize("images", [360, 1000, 10_000])
def test_the_accuracy_resolution_says_what_the_claim_can_decide(images):
    """accuracy_resolution's counts are the claim's own: ``most`` changed images (split evenly) still hold, one more
    does not; ``fail`` lost images decide it did not hold, one fewer does not."""
    text = pr.accuracy_resolution(images)
    assert f"{accuracy.smallest_decidable_pp(images):.2f} pp" in text and f"on {images} images" in text

    def held(here, only):
        return pr.check_claims(_frame(1.0, 1.1, 100.0, 60.0, {"autocast-fp16": (here, only)}, images=images),
                               "cpu")[ACC].held
    fail = int(text.split("fails only where ")[1].split(" or more")[0])
    assert held(0, fail) is False and held(0, fail - 1) is not False
    if "cannot hold" in text:  # too few images: even none changed leaves the band (the text says how many it needs)
        assert held(0, 0) is not True
        needs = int(text.split("it needs ")[1].split(" or more")[0])
        assert pr.outside_at(needs - 1) and not pr.outside_at(needs)
        return
    most = int(text.split("at most ")[1].split(" image")[0])
    assert held(most // 2, most - most // 2) is True and held((most + 1) // 2, most + 1 - (most + 1) // 2) is not True


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
    assert calls == {"benchmark": 4, "evaluate": 3}  # 2 points x 2 rounds; autocast's images paired with fp32's
    # more timed batches: timing is measured again and never returns the first run's rows (every setting keys
    # every store: accuracy, which does not depend on it, is evaluated again too; over-inclusive is safe)
    b = pr.measure(_cfg(**small, repeats=3), tmp_path, progress=False)
    assert calls == {"benchmark": 8, "evaluate": 6}
    assert (studies.tables(b)["timing"]["repeats"] == 6).all() and (studies.tables(a)["timing"]["repeats"] == 4).all()
    # another evaluation batch size: accuracy is evaluated again (and timing, keyed by it too)
    c = pr.measure(_cfg(**small, eval_batch_size=100), tmp_path, progress=False)
    assert calls == {"benchmark": 12, "evaluate": 9}
    assert (c["finished_utc"] != a["finished_utc"]).all()  # none of the first run's rows
    # the first settings again: nothing new is measured and the same rows come back
    again = pr.measure(_cfg(**small), tmp_path, progress=False)
    assert calls == {"benchmark": 12, "evaluate": 9}
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
    assert call_order == ["time"] * 8 + ["profile"] * 4  # 4 points in each of 2 rounds
    ok = studies.tables(df)["timing"].query("status == 'ok'")
    assert len(ok) == 4 and ok["avg_mem_mib"].notna().all() and not ok["after_cuda_profile"].any()


def test_rounds_alternate_their_order_and_each_batch_sizes_precisions_are_timed_together():
    cfg = _cfg(precisions=["fp32", "autocast"], batch_sizes=[2, 8])
    points = pr.timing_points(cfg, range(2))
    first = [(p["precision"], p["batch_size"]) for p in points if p["round"] == 0]
    second = [(p["precision"], p["batch_size"]) for p in points if p["round"] == 1]
    assert first == [("fp32", 2), ("autocast-bf16", 2), ("fp32", 8), ("autocast-bf16", 8)] and second == first[::-1]


def test_rounds_are_added_while_a_time_claim_is_undecided_and_only_new_ones_measured(monkeypatch):
    """Looks at 2 and 3 rounds: an undecided time claim takes the third round, measuring that round alone (3 rounds
    of benchmarks, not 2 + 3); a decided one stops at 2."""
    calls = []
    benchmark = pr.benchmark
    monkeypatch.setattr(train, "train", fake_train)
    monkeypatch.setattr(pr, "benchmark", lambda *a, **k: calls.append(k) or benchmark(*a, **k))
    undecided = claims.Claim("x", "p", "o", INCONCLUSIVE, "cpu", note="within noise")
    monkeypatch.setattr(pr, "check_claims", lambda df, device: [undecided])
    cfg = _cfg(precisions=["fp32", "autocast"], batch_sizes=[2], min_rounds=2, max_rounds=3)
    times = studies.tables(pr.measure(cfg, None, progress=False))["timing"]
    assert len(calls) == 2 * 3 and (times["rounds"] == 3).all() and times["round_medians_ms"].str.count(",").eq(2).all()
    # a CPU's peak memory is counted in the first round only (the same bytes, two more passes each)
    assert [k["measure_memory"] for k in calls] == [True, True, False, False, False, False]
    assert times["peak_mem_alloc_mib"].notna().all()
    # two looks planned: each interval at 1 - 0.05 / 2
    assert times["confidence"].tolist() == pytest.approx([0.975, 0.975])
    calls.clear()
    monkeypatch.setattr(pr, "check_claims", lambda df, device: [])
    pr.measure(cfg, None, progress=False)
    assert len(calls) == 2 * 2


def test_min_rounds_above_max_rounds_is_refused_naming_both():
    with pytest.raises(ValueError, match=r"min_rounds=9, max_rounds=8"):
        _cfg(min_rounds=9, max_rounds=8)
    with pytest.raises(ValueError, match=r"round_budget_s=-1 is not valid"):
        _cfg(round_budget_s=-1)
