"""cnnlab.studies.lstm_pruning on a tiny LSTM and synthetic corpus: every table's rows, units and invariants."""

import math

import cnnlab  # noqa: F401
import pandas as pd
import pytest
import torch

from cnnlab import config, prune
from cnnlab.studies import lstm_pruning as lp

TINY = dict(vocab_size=300, seq_len=16, train_size=128, test_size=64, embed_dim=8, hidden_size=8, num_layers=2,
            epochs=1, batch_size=32, batch_sizes=[32], num_workers=[0, 99], sweep_fraction=0.5, ratios=[0.5],
            chosen_ratio=0.5, profile_iterations=1, warmup=0, repeats=2, timing_rounds=1, device="cpu")


@pytest.fixture(scope="module")
def cfg():
    return lp.validate(config.configure("quick", lp.PRESETS, **TINY))


@pytest.fixture(scope="module")
def trained(cfg):
    return lp.train_baseline(cfg)


def test_baseline_history(trained):
    _, history = trained
    assert list(history["epoch"]) == [1]
    assert (history["epoch_time_s"] > 0).all() and history["test_accuracy_pct"].between(0, 100).all()
    assert set(history["data_source"]) == {"synthetic"}


def test_profile_finds_the_lstm_operators(trained, cfg):
    table, summary = lp.profile_training(trained[0], cfg)
    assert table["is_lstm"].any(), "the LSTM's own operators appear"
    assert math.isclose(table["share_pct"].sum(), 100.0, rel_tol=1e-6)
    assert 0 < summary["lstm_share_pct"] <= 100
    assert summary["top_op"] == table["name"].iloc[0] and summary["time_kind"] == "self CPU time"


def test_loader_sweep_records_capped_workers(trained, cfg, tmp_path):
    df = lp.loader_sweep(trained[0], cfg, tmp_path / "sweep.csv")
    ok, skipped = df[df["status"] == "ok"], df[df["status"] == "skipped"]
    assert list(ok["num_workers"]) == [0] and (ok["train_epoch_s"] > 0).all() and (ok["test_epoch_s"] > 0).all()
    assert list(skipped["num_workers"]) == [99] and skipped["train_epoch_s"].isna().all()
    assert skipped["missing_reason"].str.contains("os.cpu_count").all()
    assert int(ok["train_items"].iloc[0]) == 64  # sweep_fraction 0.5 of 128


def test_sensitivity_rows_and_zero_fractions(trained, cfg, tmp_path):
    model = trained[0]
    df = lp.pruning_sensitivity(model, cfg, tmp_path / "sens.csv")
    n_targets = len(prune.targets(model))
    assert len(df) == len(cfg.methods) * len(cfg.ratios) * (n_targets + 2) + len(cfg.ratios)
    assert (df["status"] == "ok").all() and df["accuracy_pct"].between(0, 100).all()
    layer = df[df["scope"] == "layer"]
    assert (layer["zero_fraction"] - layer["ratio"]).abs().max() <= 0.5 / 2 + 1e-9  # head has 2 rows
    units = df[df["method"] == "units"]
    assert list(units["zero_fraction"]) == [0.5]
    assert model.lstm.hidden_size == cfg.hidden_size, "the scan prunes copies, not the model"


def test_final_comparison_shrinks_only_the_unit_pruned_model(trained, cfg):
    df = lp.final_comparison(trained[0], cfg).set_index("variant")
    assert list(df.index) == ["dense", "masked_rows", "masked_units", "unit_pruned"]
    assert df.loc["unit_pruned", "hidden_size"] == cfg.hidden_size - round(cfg.chosen_ratio * cfg.hidden_size)
    assert df.loc["unit_pruned", "params"] < df.loc["dense", "params"]
    assert df.loc["masked_rows", "params"] == df.loc["dense", "params"]
    assert df.loc["masked_rows", "nonzero_params"] < df.loc["dense", "nonzero_params"]
    assert df.loc["masked_units", "nonzero_params"] == df.loc["unit_pruned", "nonzero_params"]
    assert df.loc["unit_pruned", "size_mb"] < df.loc["masked_rows", "size_mb"] == df.loc["dense", "size_mb"]
    for col in ("train_epoch_s", "test_epoch_s", "latency_ms_median", "train_step_peak_mem_mib", "size_mb"):
        assert (df[col] > 0).all() and df[col].map(math.isfinite).all(), col
    assert df.loc["dense", "train_speedup"] == 1.0


def test_claims_from_constructed_tables():
    profile = {"device": "cpu", "lstm_share_pct": 90.0, "time_kind": "self CPU time", "top_op": "aten::mkldnn_rnn_layer",
               "top_op_share_pct": 80.0}
    loaders = pd.DataFrame({"status": ["ok"] * 4, "batch_size": [32, 32, 128, 128], "num_workers": [0, 1, 0, 1],
                            "train_epoch_s": [1.0, 2.0, 0.5, 0.4], "num_workers_cap": 2})
    sens = pd.DataFrame({"scope": "all_layers", "method": "ln_structured", "status": "ok", "ratio": [0.1, 0.5, 0.9],
                         "accuracy_pct": [80.0, 78.0, 50.0], "dense_accuracy_pct": 80.5})
    final = pd.DataFrame({"variant": ["dense", "masked_rows", "unit_pruned"], "train_epoch_s": [2.0, 2.2, 1.0],
                          "test_epoch_s": [1.0, 1.1, 0.5], "latency_ms_median": [10.0, 11.0, 5.0],
                          "nonzero_params": [100, 50, 50], "size_mb": [1.0, 1.0, 0.5],
                          "train_step_peak_mem_mib": [10.0, 11.0, 6.0]})
    final["train_speedup"] = 2.0 / final["train_epoch_s"]
    final["test_speedup"] = 1.0 / final["test_epoch_s"]
    held = [c.held for c in lp.check_claims(profile, loaders, sens, final, chosen_ratio=0.5)]
    # LSTM dominates; 0 workers is not fastest at batch 128; 0.5 loses 2.5 pp <= 3; masks slower/bigger; units win
    assert held == [True, False, True, False, False, True, True]


def test_validate_names_the_bad_parameter():
    for bad, match in ((dict(methods=["magnitude"]), "valid methods"), (dict(ratios=[1.5]), "amount"),
                       (dict(batch_sizes=[0]), "batch_sizes"), (dict(chosen_ratio=0.99), "hidden units"),
                       (dict(sweep_fraction=0), "sweep_fraction")):
        with pytest.raises(ValueError, match=match):
            lp.validate(config.configure("quick", lp.PRESETS, **{**TINY, **bad}))
    with pytest.raises(ValueError, match="valid parameters"):
        config.configure("quick", lp.PRESETS, hiden_size=3)


def test_training_keeps_one_adam_optimizer_across_epochs(cfg, monkeypatch):
    """train_baseline used to call fit once per epoch, and fit made a new Adam each time: its moment estimates were
    reset every epoch. One optimizer for the whole run, one history row per epoch."""
    made = []
    real_adam = torch.optim.Adam

    def counting_adam(*args, **kwargs):
        made.append(1)
        return real_adam(*args, **kwargs)

    monkeypatch.setattr(torch.optim, "Adam", counting_adam)
    three_epochs = lp.validate(config.configure("quick", lp.PRESETS, **{**TINY, "epochs": 3}))
    _, history = lp.train_baseline(three_epochs)
    assert len(made) == 1
    assert list(history["epoch"]) == [1, 2, 3] and history["test_accuracy_pct"].notna().all()


def test_a_run_with_other_settings_never_returns_stored_rows(trained, cfg, tmp_path):
    """Same store name, other data fraction or model size: measured anew, and only this run's rows come back."""
    first = lp.loader_sweep(trained[0], cfg, tmp_path / "loaders.csv")
    other_fraction = lp.validate(config.configure("quick", lp.PRESETS, **{**TINY, "sweep_fraction": 0.25}))
    second = lp.loader_sweep(trained[0], other_fraction, tmp_path / "loaders.csv")
    assert list(first.loc[first["status"] == "ok", "train_items"]) == [64]
    assert list(second.loc[second["status"] == "ok", "train_items"]) == [32]
    assert len(second) == len(first) == 2  # the grid's rows only: (32, 0) measured, (32, 99) skipped
    assert len(list(tmp_path.glob("loaders_*.csv"))) == 2  # one store per combination of settings

    wider = lp.validate(config.configure("quick", lp.PRESETS, **{**TINY, "hidden_size": 12}))
    small, big = lp.build_model(cfg), lp.build_model(wider)
    a = lp.pruning_sensitivity(small, cfg, tmp_path / "sens.csv")
    before_b = pd.Timestamp.now(tz="UTC").floor("s")
    b = lp.pruning_sensitivity(big, wider, tmp_path / "sens.csv")
    assert len(b) == len(a) and (pd.to_datetime(b["finished_utc"]) >= before_b).all(), "measured anew"
    assert len(list(tmp_path.glob("sens_*.csv"))) == 2
    again = lp.pruning_sensitivity(small, cfg, tmp_path / "sens.csv")  # same settings: resumed, not re-measured
    assert list(again["finished_utc"]) == list(a["finished_utc"])
