"""cnnlab.studies.vgg_quantization: which VGG the paper used, the DataLoader sweep, int8 and compiled inference
tables on an untrained VGG-11 and tiny loaders (the quantization numbers themselves are tested in test_quantize)."""

import math

import cnnlab  # noqa: F401
import pandas as pd
import pytest
import torch

from cnnlab import config, models
from cnnlab.studies import vgg_quantization as vq
from margins import check

TINY = dict(num_workers=[0, 1, 64], pin_memory=[False, True], loader_fraction=0.02, loader_batch_size=16,
            calibration_batches=1, latency_batch_size=8, warmup=1, repeats=2, profile_iterations=1, top_ops=5,
            methods=["torchscript_trace", "torch_export"], device="cpu")


@pytest.fixture(scope="module")
def cfg():
    return vq.validate(config.configure("quick", vq.PRESETS, **TINY))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return models.get("vgg11").eval()


def test_vgg11_is_the_papers_model():
    sizes = vq.vgg_sizes().set_index("model")
    assert abs(sizes.loc["vgg11", "difference_from_paper_mb"]) < 0.01  # 36.965 MB: the paper's 36.965367 MB
    assert (sizes.drop(index="vgg11")["difference_from_paper_mb"].abs() > 0.5).all()


def test_validate_adds_eager_and_names_bad_parameters(cfg):
    assert cfg.methods[0] == "eager"
    for bad, match in ((dict(dataset="mnist"), "valid datasets"), (dict(methods=["onnx"]), "valid methods"),
                       (dict(num_workers=[-1]), "num_workers"), (dict(pin_memory=["yes"]), "pin_memory"),
                       (dict(loader_fraction=2.0), "loader_fraction"), (dict(schedule="linear"), "valid schedules")):
        with pytest.raises(ValueError, match=match):
            vq.validate(config.configure("quick", vq.PRESETS, **{**TINY, **bad}))


def test_loader_sweep(model, cfg, tmp_path):
    df = vq.loader_sweep(model, cfg, tmp_path / "loaders.csv")
    ok, skipped = df[df["status"] == "ok"], df[df["status"] == "skipped"]
    assert sorted(set(ok["num_workers"])) == [0, 1] and len(ok) == 4
    assert (ok["train_epoch_s"] > 0).all() and (ok["eval_epoch_s"] > 0).all()
    assert len(skipped) == 2 and skipped["train_epoch_s"].isna().all()
    assert skipped["missing_reason"].str.contains("capped").all()
    assert not ok["pin_memory_effective"].astype(bool).any(), "nothing is pinned for a CPU run"
    assert set(df["data_source"]) == {"real"}


def test_int8_table_and_profile(model, cfg):
    q = vq.quantize_model(model, cfg)
    df = vq.compare_int8(q, cfg).set_index("precision")
    assert list(df.index) == ["fp32", "int8"] and set(df["device"]) == {"cpu"}
    assert df.loc["int8", "size_ratio_vs_fp32"] <= 0.30
    assert df.loc["fp32", "top1_agreement_pct"] == 100.0 and df["test_items"].eq(360).all()
    for col in ("export_size_mb", "state_dict_size_mb", "latency_ms_median", "throughput_items_per_s"):
        assert (df[col] > 0).all() and df[col].map(math.isfinite).all(), col
    prof = vq.inference_profile(model, q, cfg)
    assert set(prof["precision"]) == {"fp32", "int8"}
    int8_ops = set(prof.loc[prof["precision"] == "int8", "name"])
    assert any(name.startswith("onednn::q") for name in int8_ops), int8_ops
    assert prof["self_device_time_ms"].isna().all() and prof["device_missing_reason"].notna().all()


def test_compiled_inference_matches_eager(model, cfg):
    df = vq.compiled_inference(model, cfg).set_index("method")
    assert list(df.index) == ["eager", "torchscript_trace", "torch_export"]
    # fp32 everywhere, other kernels and fusion order (Inductor, TorchScript's fuser): last-bit differences only
    check("VGG-11 compiled forms vs eager, max |logit diff|", df["max_abs_diff_vs_eager"].max(), "<", 1e-4)
    assert df.loc["eager", "speedup_vs_eager"] == 1.0 and (df["first_call_s"] > 0).all()
    assert "deprecated" in df.loc["torchscript_trace", "note"]


def test_claims_from_constructed_tables():
    loaders = pd.DataFrame({"status": "ok", "num_workers": [0, 1, 2], "pin_memory": False,
                            "train_epoch_s": [2.0, 1.0, 1.5], "eval_epoch_s": [1.0, 1.2, 1.4], "num_workers_cap": 2})
    int8 = pd.DataFrame({"precision": ["fp32", "int8"], "export_size_mb": [37.4, 9.8], "state_dict_size_mb": [37.0, 9.3],
                         "accuracy_pct": [97.8, 97.5], "test_items": 360, "data_source": "real", "batch_size": 32,
                         "latency_ms_median": [100.0, 40.0], "speedup_vs_fp32": [1.0, 2.5]})
    compiled = pd.DataFrame({"method": ["eager", "torchscript_trace"], "device": "cpu", "latency_ms_median": [10.0, 9.5],
                             "speedup_vs_eager": [1.0, 10 / 9.5], "batch_size": 32})
    held = [c.held for c in vq.check_claims(loaders, int8, compiled)]
    # 3.8x smaller, -0.3 pp, faster; GPU claim n/a on a CPU; trace within 20%; workers help (train) / never (eval)
    assert held == [True, True, True, None, True, True, False]


def test_loader_sweep_with_other_settings_never_returns_stored_rows(model, cfg, tmp_path):
    first = vq.loader_sweep(model, cfg, tmp_path / "loaders.csv")
    more_data = vq.validate(config.configure("quick", vq.PRESETS, **{**TINY, "loader_fraction": 0.04}))
    second = vq.loader_sweep(model, more_data, tmp_path / "loaders.csv")
    items = [set(df.loc[df["status"] == "ok", "train_items"]) for df in (first, second)]
    assert len(items[0]) == len(items[1]) == 1 and items[0] != items[1], items
    assert len(first) == len(second) == 6  # the grid's rows only
    assert len(list(tmp_path.glob("loaders_*.csv"))) == 2
