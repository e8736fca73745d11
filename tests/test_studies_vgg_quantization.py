"""cnnlab.studies.vgg_quantization: which VGG the paper used, the DataLoader sweep, int8 and compiled inference
tables on an untrained VGG-11 and tiny loaders (the quantization numbers themselves are tested in test_quantize),
the claims, and the stores (a run with other settings never returns another run's rows)."""

import itertools
import math

import cnnlab  # noqa: F401
import pandas as pd
import pytest
import torch

from cnnlab import models, studies
from cnnlab.studies import vgg_quantization as vq
from margins import check

TINY = dict(num_workers=[0, 1, 64], pin_memory=[False, True], loader_fraction=0.02, loader_batch_size=16,
            calibration_batches=1, latency_batch_size=8, warmup=1, repeats=2, profile_iterations=1, top_ops=5,
            methods=["torchscript_trace", "torch_export"], device="cpu")


def untrained(*args, **kwargs):
    """Stands in for cnnlab.train.train: an untrained VGG-11 and a one-epoch history (training is tested apart)."""
    torch.manual_seed(0)
    return models.get("vgg11").eval(), pd.DataFrame({"epoch": [1], "test_accuracy_pct": [10.0],
                                                     "epoch_time_s": [1.0], "data_source": ["real"]})


@pytest.fixture(scope="module")
def cfg():
    return vq.configure("quick", **TINY)


@pytest.fixture(scope="module")
def parts(cfg, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vq, "train", untrained)
        df = vq.measure(cfg, tmp_path_factory.mktemp("vgg"), progress=False)
    print(studies.check_results(df))
    return studies.tables(df)


def test_follows_the_study_contract():
    assert studies.signature_problems(vq) == []


def test_vgg11_is_the_papers_model():
    sizes = vq.vgg_sizes().set_index("model")
    assert abs(sizes.loc["vgg11", "difference_from_paper_mb"]) < 0.01  # 36.965 MB: the paper's 36.965367 MB
    assert (sizes.drop(index="vgg11")["difference_from_paper_mb"].abs() > 0.5).all()


def test_configure_adds_eager_and_names_bad_parameters(cfg):
    assert cfg.methods == ["eager", "torchscript_trace", "torch_export"] and cfg.device == "cpu"
    assert cfg.num_workers == [0, 1, 64] and cfg.pin_memory == [False, True]
    for bad, match in ((dict(dataset="mnist"), "dataset=.*valid: .*cifar10"), (dict(methods=["onnx"]), "methods"),
                       (dict(num_workers=[-1]), "num_workers"), (dict(pin_memory=["yes"]), "pin_memory"),
                       (dict(pin_memory=[]), "pin_memory"), (dict(loader_fraction=2.0), "loader_fraction"),
                       (dict(schedule="linear"), "schedule=.*valid: .*cosine"), (dict(warmup=-1), "warmup"),
                       (dict(lr=0), "lr"), (dict(device="tpu"), "device"), (dict(no_such=1), "valid parameters")):
        with pytest.raises(ValueError, match=match):
            vq.configure("quick", **{**TINY, **bad})


def test_loader_sweep(parts):
    df = parts["loader_sweep"]
    ok, skipped = df[df["status"] == "ok"], df[df["status"] == "skipped"]
    assert sorted(set(ok["num_workers"])) == [0, 1] and len(ok) == 4
    assert (ok["train_epoch_s"] > 0).all() and (ok["test_epoch_s"] > 0).all()
    assert len(skipped) == 2 and skipped["train_epoch_s"].isna().all()
    assert skipped["error"].str.contains("capped").all()
    assert not ok["pin_memory_effective"].astype(bool).any(), "nothing is pinned for a CPU run"
    assert set(df["data_source"]) == {"real"} and set(df["batch_size"]) == {16}


def test_int8_table_and_profile(parts):
    df = parts["int8"].set_index("precision")
    assert list(df.index) == ["fp32", "int8"] and set(df["device"]) == {"cpu"} and set(df["status"]) == {"ok"}
    assert df.loc["int8", "size_ratio_vs_fp32"] <= 0.30
    assert df.loc["fp32", "top1_agreement_pct"] == 100.0 and df["test_items"].eq(360).all()
    for col in ("export_size_mb", "state_dict_size_mb", "latency_ms_median", "throughput_items_per_s"):
        assert (df[col] > 0).all() and df[col].map(math.isfinite).all(), col
    assert df.loc["int8", "prepare_time_s"] > 0 and df.loc["int8", "calibration_items"] == 8
    prof = parts["inference_profile"]
    assert set(prof["precision"]) == {"fp32", "int8"} and prof.groupby("precision").size().max() <= 5
    int8_ops = set(prof.loc[prof["precision"] == "int8", "name"])
    assert any(name.startswith("onednn::q") for name in int8_ops), int8_ops
    assert prof["self_device_time_ms"].isna().all() and prof["device_missing_reason"].notna().all()


def test_compiled_inference_matches_eager(parts):
    df = parts["compiled_inference"].set_index("method")
    assert list(df.index) == ["eager", "torchscript_trace", "torch_export"]
    # fp32 everywhere, other kernels and fusion order (Inductor, TorchScript's fuser): last-bit differences only
    check("VGG-11 compiled forms vs eager, max |logit diff|", df["max_abs_diff_vs_eager"].max(), "<", 1e-4)
    assert df.loc["eager", "speedup_vs_eager"] == 1.0 and (df["first_call_s"] > 0).all()
    assert "deprecated" in df.loc["torchscript_trace", "note"]


def test_figures(parts):
    df = studies.combine(**parts)
    figs = vq.figures(df)
    assert list(figs) == ["07_loader_sweep", "07_int8", "07_inference_profile", "07_compiled_inference"]
    vq.plotting.plt.close("all")


def test_claims_from_constructed_tables():
    loaders = pd.DataFrame({"experiment": "loader_sweep", "status": "ok", "num_workers": [0, 1, 2], "pin_memory": False,
                            "train_epoch_s": [2.0, 1.0, 1.5], "test_epoch_s": [1.0, 1.2, 1.4], "num_workers_cap": 2})
    int8 = pd.DataFrame({"experiment": "int8", "status": "ok", "precision": ["fp32", "int8"],
                         "export_size_mb": [37.4, 9.8], "state_dict_size_mb": [37.0, 9.3], "accuracy_pct": [97.8, 97.5],
                         "test_items": 360, "data_source": "real", "batch_size": 32,
                         "latency_ms_median": [100.0, 40.0], "speedup_vs_fp32": [1.0, 2.5]})
    compiled = pd.DataFrame({"experiment": "compiled_inference", "status": "ok", "method": ["eager", "torchscript_trace"],
                             "latency_ms_median": [10.0, 9.5], "speedup_vs_eager": [1.0, 10 / 9.5], "batch_size": 32})
    df = pd.concat([loaders, int8, compiled], ignore_index=True)
    held = [c.held for c in vq.check_claims(df, "cpu")]
    # 3.8x smaller, -0.3 pp, faster; GPU claim n/a on a CPU; trace within 20%; workers help (train) / never (test)
    assert held == [True, True, True, None, True, True, False]
    on_gpu = [c.held for c in vq.check_claims(df.assign(device="cuda:0"), "cuda:0")]
    assert on_gpu[3:5] == [False, None]  # 1.05x is not more than 2x; the CPU claim does not apply
    failed = df[df["experiment"] != "int8"]
    first = vq.check_claims(failed, "cpu")[0]
    assert first.held is None and first.ours == "not measured" and "int8" in first.claim


def test_other_settings_never_return_stored_rows_and_a_rerun_resumes(tmp_path, monkeypatch):
    """Stores keyed by the settings: another setting (repeats) measures every sweep again and returns only its own
    rows; the first configuration again measures nothing and returns its stored rows."""
    counter, calls = itertools.count(), []

    def fake(kind):
        def point(*args, **kwargs):
            calls.append(kind)
            return {"export_size_mb": 1.0, "latency_ms_median": float(next(counter)), "name": "op"}
        return point

    real_fit = vq.fit
    monkeypatch.setattr(vq, "train", untrained)
    monkeypatch.setattr(vq, "fit", lambda *a, **k: (calls.append("loader"), real_fit(*a, **k)))
    for name in ("_int8_row", "_profile_rows", "_compiled_row"):
        monkeypatch.setattr(vq, name, fake(name))
    small = dict(TINY, num_workers=[0], pin_memory=[False], methods=["eager"])
    runs = []
    for repeats in (2, 3, 2):
        calls.clear()
        df = vq.measure(vq.configure("quick", **{**small, "repeats": repeats}), tmp_path, progress=False)
        runs.append((sorted(calls), studies.tables(df)))
    assert runs[0][0] == runs[1][0] == ["_compiled_row", "_int8_row", "_int8_row", "_profile_rows", "_profile_rows",
                                        "loader"]
    assert runs[2][0] == [], "the first configuration's points are stored: nothing to measure again"
    for name, col in (("int8", "latency_ms_median"), ("inference_profile", "latency_ms_median"),
                      ("compiled_inference", "latency_ms_median"), ("loader_sweep", "train_epoch_s")):
        first, other, again = (parts[name] for _, parts in runs)
        assert len(first) == len(other) == len(again), name
        assert set(first[col]).isdisjoint(other[col]), f"{name}: the second configuration got the first one's rows"
        pd.testing.assert_frame_equal(first, again, obj=name)
    assert len(list(tmp_path.glob("int8_*.csv"))) == len(list(tmp_path.glob("loader_sweep_*.csv"))) == 2
