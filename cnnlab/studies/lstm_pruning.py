"""Study 06: an LSTM sentiment classifier: where a training step spends its time, DataLoader batch size and
workers, and pruning (paper 003, Xiong & Leroux, HPML project, "LSTM" part).

The paper trained the Kaggle "IMDB with PyTorch" LSTM (34.7M parameters) on a V100, found cuDNN's LSTM kernels
at 98.6% of GPU time, timed epochs for batch sizes x ``num_workers`` (best: 0 workers, batch 128), pruned with
``torch.nn.utils.prune`` (L2-structured preferred to unstructured; accuracy "varies slightly between 0.49 and
0.52" over ratios 0.1-0.9), chose ratio 0.9 for every layer (3.5M non-zero parameters) and saw the training epoch
fall from 18.1 s to 13.6 s. Note that 0.49-0.52 is chance level for balanced binary sentiment.

We go one step further: masks keep every weight's shape, so they cannot make the model smaller or (much) faster.
:func:`cnnlab.prune.shrink_lstm` removes whole hidden units and builds a smaller LSTM; :func:`final_comparison`
times it beside the masked models.

Our choices where the paper is silent: Adam (lr in the preset) with gradient-norm clipping at 5, as the Kaggle
notebook; no fine-tuning in the sensitivity scan (accuracy right after pruning); the final models are fine-tuned
for ``finetune_epochs`` with their masks held. "All layers" pruning leaves the head alone: its rows are the output
classes, so structured pruning there deletes a class (the per-layer scan shows what that does).
"""

from __future__ import annotations

import copy
import math
import os
import time
from types import SimpleNamespace

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from cnnlab import config, data, models, prune, quantize
from cnnlab.claims import Claim
from cnnlab.profiling import benchmark, profile_ops
from cnnlab.profiling.store import config_store_path
from cnnlab.studies.common import as_list, check_threads, run_sweep, set_threads
from cnnlab.profiling.memory import cpu_peak_bytes
from cnnlab.train import evaluate

MODEL = "lstm_sentiment"
PAPER = dict(lstm_share_pct=98.60, params=34_731_777, nonzero_after=3_528_662, train_epoch_s=(18.132872709000026,
             13.63664408800014), test_s=(1.5564957660000118, 1.0925553890001538), accuracy_range=(49.0, 52.0),
             ratio=0.9, best_workers=0, best_batch=128)
LSTM_OPS = ("lstm", "rnn")  # operator / kernel names containing these are the LSTM's own work
MB = 1e6

PRESETS = {
    # CPU smoke run on the synthetic sentiment corpus (labels depend on the words; guessing gets 50%), one
    # intra-op thread (CI runs two notebooks at once on two cores; more threads than free cores spin-wait).
    "quick": dict(synthetic=True, vocab_size=2000, seq_len=64, train_size=2000, test_size=500, embed_dim=64,
                  hidden_size=64, num_layers=2, epochs=3, batch_size=64, lr=5e-3, batch_sizes=[32, 128],
                  num_workers=[0, 1, 2, 4, 8], sweep_fraction=0.5, ratios=[0.1, 0.5, 0.9],
                  methods=list(prune.METHODS), chosen_ratio=0.5, finetune_epochs=1, profile_iterations=3, warmup=1,
                  repeats=5, timing_rounds=3, threads=1, device=None),
    # One Colab GPU: real IMDB (downloaded once), a mid-sized model.
    "standard": dict(synthetic=False, vocab_size=20000, seq_len=256, train_size=None, test_size=None, embed_dim=128,
                     hidden_size=256, num_layers=2, epochs=4, batch_size=64, lr=1e-3, batch_sizes=[32, 64, 128, 256],
                     num_workers=[0, 1, 2, 4, 8], sweep_fraction=0.2, ratios=[round(0.1 * k, 1) for k in range(1, 10)],
                     methods=list(prune.METHODS), chosen_ratio=0.5, finetune_epochs=1, profile_iterations=5, warmup=3,
                     repeats=20, timing_rounds=3, threads=None, device=None),
    # The paper's scale: hidden 512, embedding 400, vocabulary 75k (34.0M parameters, the paper's had 34.7M), its
    # grids and its ratio 0.9.
    "paper": dict(synthetic=False, vocab_size=75000, seq_len=256, train_size=None, test_size=None, embed_dim=400,
                  hidden_size=512, num_layers=2, epochs=4, batch_size=128, lr=1e-3, batch_sizes=[16, 32, 64, 128, 256],
                  num_workers=[0, 1, 2, 4, 8], sweep_fraction=1.0, ratios=[round(0.1 * k, 1) for k in range(1, 10)],
                  methods=list(prune.METHODS), chosen_ratio=0.9, finetune_epochs=1, profile_iterations=5, warmup=5,
                  repeats=50, timing_rounds=5, threads=None, device=None),
}


# ------------------------------------------------------------------------------------------------ configuration

def _int_at_least(value, name: str, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def validate(cfg: SimpleNamespace) -> SimpleNamespace:
    """Check (and normalise in place) a configuration from :data:`PRESETS`; ValueError naming the parameter."""
    
    if not isinstance(cfg.synthetic, bool):
        raise ValueError(f"synthetic={cfg.synthetic!r} must be True or False")
    for name in ("vocab_size", "seq_len", "embed_dim", "hidden_size", "num_layers", "epochs", "batch_size",
                 "finetune_epochs", "profile_iterations", "repeats", "timing_rounds"):
        _int_at_least(getattr(cfg, name), name)
    _int_at_least(cfg.warmup, "warmup", 0)
    for name in ("train_size", "test_size"):
        if getattr(cfg, name) is not None:
            _int_at_least(getattr(cfg, name), name)
    if not (isinstance(cfg.lr, (int, float)) and cfg.lr > 0):
        raise ValueError(f"lr must be a positive number, got {cfg.lr!r}")
    if not (isinstance(cfg.sweep_fraction, (int, float)) and 0 < cfg.sweep_fraction <= 1):
        raise ValueError(f"sweep_fraction must be in (0, 1], got {cfg.sweep_fraction!r}")
    cfg.batch_sizes = as_list(cfg.batch_sizes)
    for b in cfg.batch_sizes:
        _int_at_least(b, "batch_sizes (each)")
    cfg.num_workers = as_list(cfg.num_workers)
    for w in cfg.num_workers:
        _int_at_least(w, "num_workers (each)", 0)
    cfg.ratios = sorted(prune.check_amount(r) for r in as_list(cfg.ratios))
    if not cfg.ratios or cfg.ratios[0] <= 0:
        raise ValueError(f"ratios must be pruning ratios in (0, 1), got {cfg.ratios!r}")
    cfg.methods = [prune.check_method(m) for m in as_list(cfg.methods)]
    cfg.chosen_ratio = prune.check_amount(cfg.chosen_ratio)
    if round(cfg.chosen_ratio * cfg.hidden_size) >= cfg.hidden_size:
        raise ValueError(f"chosen_ratio={cfg.chosen_ratio} would remove all {cfg.hidden_size} hidden units")
    cfg.threads = check_threads(cfg.threads)
    cfg.device = str(config.resolve_device(cfg.device))
    return cfg


def datasets(cfg):
    """(train, test) token datasets: the synthetic corpus (``cfg.train_size``/``test_size`` reviews) or IMDB."""
    options = dict(vocab_size=cfg.vocab_size, seq_len=cfg.seq_len)
    if cfg.synthetic:
        return tuple(data.load("imdb", split, synthetic=True, synthetic_size=size, **options)
                     for split, size in (("train", cfg.train_size), ("test", cfg.test_size)))
    train_set, test_set = (data.load("imdb", split, **options) for split in ("train", "test"))
    return (data.subset(train_set, min(1.0, cfg.train_size / len(train_set))) if cfg.train_size else train_set,
            data.subset(test_set, min(1.0, cfg.test_size / len(test_set))) if cfg.test_size else test_set)


def build_model(cfg, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return models.get(MODEL, vocab_size=cfg.vocab_size, seq_len=cfg.seq_len, embed_dim=cfg.embed_dim,
                      hidden_size=cfg.hidden_size, num_layers=cfg.num_layers)


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------------------------ training

def train_step(model: nn.Module, optimizer, tokens, labels) -> torch.Tensor:
    """One Adam step with gradient-norm clipping at 5 (the Kaggle notebook's ``clip=5``); returns the loss."""
    loss = F.cross_entropy(model(tokens), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    return loss


def fit(model: nn.Module, loader, *, epochs: int, lr: float, device, on_epoch=None) -> pd.DataFrame:
    """Train ``model`` in place with one Adam optimizer for all ``epochs`` (its moment estimates carry over from
    epoch to epoch); one row per epoch: epoch, train_loss, epoch_time_s (data loading included), plus whatever
    ``on_epoch(model)`` returns (a dict), called after each epoch outside the timed part."""
    device = torch.device(device)
    model.to(device)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    rows = []
    for epoch in range(epochs):
        model.train()
        start, loss_sum, count = time.perf_counter(), 0.0, 0
        for tokens, labels in loader:
            tokens, labels = tokens.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            loss = train_step(model, optimizer, tokens, labels)
            loss_sum += loss.item() * len(labels)
            count += len(labels)
        _sync(device)
        row = {"epoch": epoch + 1, "train_loss": loss_sum / count, "epoch_time_s": time.perf_counter() - start}
        rows.append({**row, **(on_epoch(model) if on_epoch is not None else {})})
    return pd.DataFrame(rows)


def train_baseline(cfg) -> tuple[nn.Module, pd.DataFrame]:
    """The dense model trained for ``cfg.epochs``; history rows add test accuracy (%) and loss per epoch."""
    train_set, test_set = datasets(cfg)
    model = build_model(cfg)
    train_loader = data.make_loader(train_set, cfg.batch_size, shuffle=True, seed=0)
    test_loader = data.make_loader(test_set, 256)

    def test(net):
        result = evaluate(net, test_loader, device=cfg.device)
        return {"test_accuracy_pct": result["accuracy_pct"], "test_loss": result["loss"],
                "data_source": train_set.data_source}

    return model, fit(model, train_loader, epochs=cfg.epochs, lr=cfg.lr, device=cfg.device, on_epoch=test)


# ------------------------------------------------------------------------------------------------ measurements

def profile_training(model, cfg) -> tuple[pd.DataFrame, dict]:
    """Operators of ``cfg.profile_iterations`` training steps (batch ``cfg.batch_size``) of a copy of ``model``,
    by where the time goes: self CPU time on a CPU, self CUDA time (the time of the kernels each operator
    launched) on a GPU, as the paper's profiler table.

    Returns (table, summary). Table rows: name, calls, time_ms, share_pct (of the total), time_kind, is_lstm (the
    name contains "lstm" or "rnn": ``aten::_cudnn_rnn``, oneDNN's ``aten::mkldnn_rnn_layer``, their backward).
    Summary: lstm_share_pct, top_op, top_op_share_pct, total_ms, iterations, max_cpu_mem_mib, device.
    """
    train_set, _ = datasets(cfg)
    device = torch.device(cfg.device)
    net = copy.deepcopy(model).to(device).train()
    optimizer = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    tokens, labels = (t.to(device) for t in next(iter(data.make_loader(train_set, cfg.batch_size, shuffle=True))))
    prof = profile_ops(lambda: train_step(net, optimizer, tokens, labels), iterations=cfg.profile_iterations,
                       device=device, warmup=1)
    if device.type == "cuda":  # the paper's table: operators by self CUDA time (their kernels' time)
        table = prof.operators.rename(columns={"self_device_time_us": "time_us"})[["name", "calls", "time_us"]]
        kind = "self CUDA time"
    else:
        table = prof.operators.rename(columns={"self_cpu_time_us": "time_us"})[["name", "calls", "time_us"]]
        kind = "self CPU time"
    table = table.sort_values("time_us", ascending=False, ignore_index=True)
    total = table["time_us"].sum()
    table = table.assign(time_ms=table["time_us"] / 1e3, share_pct=100.0 * table["time_us"] / total, time_kind=kind,
                         is_lstm=table["name"].str.lower().str.contains("|".join(LSTM_OPS)), device=str(device))
    table = table.drop(columns="time_us")
    summary = {"device": str(device), "time_kind": kind, "iterations": cfg.profile_iterations,
               "total_ms": float(total) / 1e3,
               "lstm_share_pct": float(table.loc[table["is_lstm"], "share_pct"].sum()),
               "top_op": table["name"].iloc[0], "top_op_share_pct": float(table["share_pct"].iloc[0]),
               "max_cpu_mem_mib": prof.summary["max_cpu_mem_mib"], "data_source": train_set.data_source}
    return table, summary


def loader_sweep(model, cfg, store) -> pd.DataFrame:
    """Train-epoch and test-epoch time (s) for every batch size x ``num_workers`` on ``cfg.sweep_fraction`` of
    the data, each from a fresh copy of ``model`` (paper: "Vary Dataloaders' num_workers and batch_size").
    ``num_workers`` above ``os.cpu_count()`` is recorded as skipped with the reason (the cap)."""
    train_set, test_set = datasets(cfg)
    cap = os.cpu_count() or 1
    device = torch.device(cfg.device)

    def point(batch_size: int, num_workers: int):
        loaders = [data.make_loader(split, batch_size, num_workers=num_workers, fraction=cfg.sweep_fraction,
                                    shuffle=split is train_set, pin_memory=device.type == "cuda")
                   for split in (train_set, test_set)]
        net = copy.deepcopy(model)
        train_s = fit(net, loaders[0], epochs=1, lr=cfg.lr, device=device)["epoch_time_s"].iloc[0]
        start = time.perf_counter()
        evaluate(net, loaders[1], device=device)
        _sync(device)
        return {"train_epoch_s": float(train_s), "test_epoch_s": time.perf_counter() - start,
                "train_items": len(loaders[0].dataset), "test_items": len(loaders[1].dataset), "device": str(device),
                "cpu_threads": torch.get_num_threads(), "data_source": train_set.data_source}

    grid = [{"batch_size": b, "num_workers": w} for b in cfg.batch_sizes for w in cfg.num_workers if w <= cap]
    store = config_store_path(store, cfg, grid=("batch_sizes", "num_workers"), model=model)
    df = run_sweep(point, grid, store, "batch size x workers", True) if grid else pd.DataFrame()
    skipped = [{"batch_size": b, "num_workers": w, "status": "skipped", "train_epoch_s": math.nan,
                "test_epoch_s": math.nan, "device": str(device), "data_source": train_set.data_source,
                "missing_reason": f"num_workers {w} > os.cpu_count() = {cap}: capped"}
               for b in cfg.batch_sizes for w in cfg.num_workers if w > cap]
    df = pd.concat([df, pd.DataFrame(skipped)], ignore_index=True)
    df["num_workers_cap"] = cap
    return df


def _scans(model, cfg) -> list[dict]:
    lstm_and_embedding = [name for name in prune.targets(model) if not name.startswith("head.")]
    points = []
    for method in cfg.methods:
        for ratio in cfg.ratios:
            for name in prune.targets(model):
                points.append({"scope": "layer", "tensor": name, "method": method, "ratio": ratio})
            points.append({"scope": "all_layers", "tensor": "all but head", "method": method, "ratio": ratio})
            points.append({"scope": "global", "tensor": "all but head", "method": method, "ratio": ratio})
    for ratio in cfg.ratios:
        if round(ratio * cfg.hidden_size) < cfg.hidden_size:
            points.append({"scope": "all_layers", "tensor": "lstm units", "method": "units", "ratio": ratio})
    return [dict(p, _tensors=lstm_and_embedding) for p in points]


def pruning_sensitivity(model, cfg, store) -> pd.DataFrame:
    """Test accuracy (%) and loss right after pruning a copy of ``model``, no fine-tuning (paper: sensitivity).

    One row per (scope, tensor, method, ratio): scope "layer" prunes one tensor at ``ratio``; "all_layers"
    prunes every tensor but the head at ``ratio`` each (the paper's final choice); "global" ranks their weights
    (or rows) together; method "units" (beyond the paper) removes ``ratio`` of each LSTM layer's hidden units
    (:func:`cnnlab.prune.shrink_lstm`). ``zero_fraction`` is the share of zeros in the pruned tensors together;
    ``dense_accuracy_pct`` the unpruned model's accuracy.
    """
    _, test_set = datasets(cfg)
    loader = data.make_loader(test_set, 256)
    dense = evaluate(model, loader, device=cfg.device)
    points = _scans(model, cfg)
    tensors_of = {(p["scope"], p["tensor"], p["method"], p["ratio"]): p.pop("_tensors") for p in points}

    def point(scope, tensor, method, ratio):
        chosen = tensors_of[(scope, tensor, method, ratio)]
        if method == "units":
            net = prune.shrink_lstm(model, prune.select_units(model.lstm, ratio))
            zero_fraction = 1 - net.lstm.hidden_size / model.lstm.hidden_size
        else:
            names = [tensor] if scope == "layer" else chosen
            net = prune.prune_model(copy.deepcopy(model), method, ratio, tensors=names,
                                    scope="global" if scope == "global" else "layer")
            table = prune.sparsity(net).set_index("tensor").loc[names]
            zero_fraction = table["zeros"].sum() / table["numel"].sum()
        result = evaluate(net, loader, device=cfg.device)
        return {"accuracy_pct": result["accuracy_pct"], "loss": result["loss"], "zero_fraction": float(zero_fraction),
                "dense_accuracy_pct": dense["accuracy_pct"], "test_items": result["num_examples"],
                "data_source": test_set.data_source}

    store = config_store_path(store, cfg, grid=("methods", "ratios"), model=model)
    return run_sweep(point, points, store, "pruning sensitivity", True)


def _variants(model, cfg) -> dict[str, nn.Module]:
    keep = prune.select_units(model.lstm, cfg.chosen_ratio)
    rows_masked = prune.prune_model(copy.deepcopy(model), "ln_structured", cfg.chosen_ratio,
                                    tensors=[n for n in prune.targets(model) if not n.startswith("head.")])
    return {"dense": copy.deepcopy(model), "masked_rows": rows_masked, "masked_units": prune.mask_units(model, keep),
            "unit_pruned": prune.shrink_lstm(model, keep)}


def final_comparison(model, cfg) -> pd.DataFrame:
    """The dense model beside three prunings at ``cfg.chosen_ratio``, each fine-tuned ``cfg.finetune_epochs``:

    - ``masked_rows``: the paper's final model, Ln-structured (L2) masks over the rows of every tensor but the head;
    - ``masked_units``: masks over whole hidden units (:func:`cnnlab.prune.mask_units`), full size;
    - ``unit_pruned``: the same units physically removed (:func:`cnnlab.prune.shrink_lstm`);
    and ``dense`` trained for the same extra epochs (fine-tuning uses a fifth of the training learning rate, so
    that it adjusts the kept weights rather than retraining).

    Times are medians over ``cfg.timing_rounds`` rounds that take the variants in turn (so a burst of load
    on a shared machine hits one round of every variant, not all rounds of one); each round trains a copy
    for one epoch and runs the test set once. Columns: params, nonzero_params, hidden_size,
    accuracy_pruned_pct (before fine-tuning), accuracy_pct and loss (after), train_epoch_s and test_epoch_s
    (median, with _min and _max), inference latency per batch of ``cfg.batch_size`` (ms), peak memory of a
    training step and of inference (MiB; CPU: allocator events, see cnnlab.profiling.memory), size_mb
    (``torch.save`` of the state dict with masks folded in), and speed-ups against dense.
    """
    train_set, test_set = datasets(cfg)
    device = torch.device(cfg.device)
    train_loader = data.make_loader(train_set, cfg.batch_size, shuffle=True, seed=1)
    test_loader = data.make_loader(test_set, cfg.batch_size)
    tokens, labels = next(iter(test_loader))
    variants = _variants(model, cfg)
    rows = {}
    for variant, net in variants.items():
        before = evaluate(net, test_loader, device=device)
        fit(net, train_loader, epochs=cfg.finetune_epochs, lr=cfg.lr / 5, device=device)
        after = evaluate(net, test_loader, device=device)
        timing = benchmark(net, tokens, device=device, warmup=cfg.warmup, repeats=cfg.repeats)
        frozen = prune.make_permanent(copy.deepcopy(net).cpu())
        rows[variant] = {"variant": variant, "ratio": 0.0 if variant == "dense" else cfg.chosen_ratio,
                         "hidden_size": net.lstm.hidden_size, **prune.count_parameters(net),
                         "accuracy_pruned_pct": before["accuracy_pct"], "accuracy_pct": after["accuracy_pct"],
                         "loss": after["loss"], "latency_ms_median": timing.latency_ms_median,
                         "latency_ms_p10": timing.latency_ms_p10, "latency_ms_p90": timing.latency_ms_p90,
                         "inference_peak_mem_mib": timing.peak_mem_alloc_mib,
                         "train_step_peak_mem_mib": _train_step_peak_mib(net, tokens, labels, device, cfg.lr),
                         "size_mb": quantize.state_dict_bytes(frozen) / MB}
    times = {variant: {"train_epoch_s": [], "test_epoch_s": []} for variant in variants}
    for _ in range(cfg.timing_rounds):
        for variant, net in variants.items():
            work = copy.deepcopy(net)
            times[variant]["train_epoch_s"].append(
                float(fit(work, train_loader, epochs=1, lr=cfg.lr / 5, device=device)["epoch_time_s"].iloc[0]))
            start = time.perf_counter()
            evaluate(work, test_loader, device=device)
            _sync(device)
            times[variant]["test_epoch_s"].append(time.perf_counter() - start)
    for variant, measured in times.items():
        for col, values in measured.items():
            series = pd.Series(values)
            rows[variant].update({col: float(series.median()), f"{col}_min": float(series.min()),
                                  f"{col}_max": float(series.max())})
        rows[variant].update(timing_rounds=cfg.timing_rounds, batch_size=cfg.batch_size, device=str(device),
                             cpu_threads=torch.get_num_threads(), data_source=train_set.data_source)
    df = pd.DataFrame(list(rows.values()))
    base = df.set_index("variant").loc["dense"]
    for col, name in (("train_epoch_s", "train_speedup"), ("test_epoch_s", "test_speedup"),
                      ("latency_ms_median", "inference_speedup")):
        df[name] = base[col] / df[col]
    return df


def _train_step_peak_mib(net, tokens, labels, device, lr) -> float:
    """Peak memory (MiB) of one training step: CUDA allocator peak, or on a CPU the peak of live tensor bytes
    from the profiler's allocator events plus the parameters and inputs already resident."""
    from cnnlab.profiling.memory import resident_bytes

    work = copy.deepcopy(net).to(device).train()
    optimizer = torch.optim.Adam(work.parameters(), lr=lr)
    tokens, labels = tokens.to(device), labels.to(device)
    train_step(work, optimizer, tokens, labels)  # Adam's state exists from here on, as in a real epoch
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        train_step(work, optimizer, tokens, labels)
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) / 2**20
    increment = cpu_peak_bytes(lambda: train_step(work, optimizer, tokens, labels))
    state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    return (increment + resident_bytes(work, [tokens, labels, *state])) / 2**20


# ------------------------------------------------------------------------------------------------ claims

def check_claims(profile: dict, loaders: pd.DataFrame, sensitivity: pd.DataFrame, final: pd.DataFrame,
                 chosen_ratio: float) -> list[Claim]:
    """The paper's LSTM claims beside ours."""
    device = profile["device"]
    checks = [Claim("the LSTM layers are the bottleneck of a training step",
                    f"cuDNN LSTM kernels: {PAPER['lstm_share_pct']:.1f}% of GPU time (V100)",
                    f"LSTM operators: {profile['lstm_share_pct']:.1f}% of {profile['time_kind']}; top: "
                    f"{profile['top_op']} ({profile['top_op_share_pct']:.1f}%)",
                    profile["lstm_share_pct"] > 50.0, device, "held if the LSTM's operators take over half the time")]
    ok = loaders[loaders["status"] == "ok"]
    if len(ok):
        best = ok.loc[ok["train_epoch_s"].idxmin()]
        fastest_workers = ok.loc[ok.groupby("batch_size")["train_epoch_s"].idxmin(), ["batch_size", "num_workers"]]
        checks.append(Claim("0 DataLoader workers give the fastest training epoch",
                            f"best: num_workers={PAPER['best_workers']}, batch_size={PAPER['best_batch']}",
                            f"best: num_workers={int(best['num_workers'])}, batch_size={int(best['batch_size'])} "
                            f"({best['train_epoch_s']:.2f} s); fastest workers per batch size: "
                            + ", ".join(f"{int(b)}: {int(w)}" for b, w in fastest_workers.itertuples(index=False)),
                            bool((fastest_workers["num_workers"] == 0).all()), device,
                            f"held if 0 workers is fastest at every batch size; workers capped at "
                            f"{int(loaders['num_workers_cap'].iloc[0])}"))
    rows = sensitivity[(sensitivity["scope"] == "all_layers") & (sensitivity["method"] == "ln_structured")
                       & (sensitivity["status"] == "ok")]
    upto = rows[rows["ratio"] <= chosen_ratio + 1e-9].sort_values("ratio")
    if len(upto):
        dense_acc = float(upto["dense_accuracy_pct"].iloc[0])
        drop = dense_acc - upto["accuracy_pct"].min()
        checks.append(Claim(f"accuracy is insensitive to the structured pruning ratio up to {chosen_ratio:g}",
                            f"accuracy 0.49-0.52 over ratios 0.1-0.9 (chance level for balanced classes); chose "
                            f"{PAPER['ratio']}",
                            f"dense {dense_acc:.1f}%; " + ", ".join(f"{r:g}: {a:.1f}%" for r, a in
                                                                    zip(upto["ratio"], upto["accuracy_pct"]))
                            + " (L2-structured, all layers but the head, no fine-tuning)", drop <= 3.0, device,
                            "held if no ratio up to the chosen one loses more than 3 pp (the paper's own spread)"))
    fin = final.set_index("variant")
    dense = fin.loc["dense"]
    for variant, words in (("masked_rows", "structured masks (the paper's final model)"),
                           ("unit_pruned", "removing hidden units (beyond the paper)")):
        if variant not in fin.index:
            continue
        row = fin.loc[variant]
        checks.append(Claim(f"pruning by {words} cuts training and test time",
                            f"train epoch {PAPER['train_epoch_s'][0]:.1f} -> {PAPER['train_epoch_s'][1]:.1f} s, "
                            f"test {PAPER['test_s'][0]:.2f} -> {PAPER['test_s'][1]:.2f} s",
                            f"train epoch {dense['train_epoch_s']:.2f} -> {row['train_epoch_s']:.2f} s "
                            f"({row['train_speedup']:.2f}x), test {dense['test_epoch_s']:.2f} -> "
                            f"{row['test_epoch_s']:.2f} s ({row['test_speedup']:.2f}x), inference batch "
                            f"{dense['latency_ms_median']:.1f} -> {row['latency_ms_median']:.1f} ms",
                            bool(row["train_epoch_s"] < dense["train_epoch_s"]
                                 and row["test_epoch_s"] < dense["test_epoch_s"]),
                            device, f"ratio {chosen_ratio:g}"))
        checks.append(Claim(f"pruning by {words} cuts memory",
                            f"{PAPER['params']:,} -> {PAPER['nonzero_after']:,} non-zero parameters",
                            f"non-zero parameters {int(dense['nonzero_params']):,} -> {int(row['nonzero_params']):,}; "
                            f"saved size {dense['size_mb']:.2f} -> {row['size_mb']:.2f} MB; training-step peak "
                            f"{dense['train_step_peak_mem_mib']:.1f} -> {row['train_step_peak_mem_mib']:.1f} MiB",
                            bool(row["train_step_peak_mem_mib"] < dense["train_step_peak_mem_mib"]), device,
                            "held if the training step's peak memory falls (fewer non-zeros alone save none)"))
    return checks


# ------------------------------------------------------------------------------------------------ figures

def plot_profile(table: pd.DataFrame, top: int = 12):
    """The ``top`` operators (or kernels) of a training step by time, the LSTM's own highlighted."""
    from cnnlab import plotting

    part = table.head(top).assign(part=lambda d: d["is_lstm"].map({True: "LSTM", False: "other"}))
    fig, ax = plotting.plt.subplots(figsize=(7, 0.35 * len(part) + 1.2))
    plotting.sns.barplot(data=part, y="name", x="share_pct", hue="part", dodge=False, ax=ax)
    ax.set_xlabel(f"Share of {part['time_kind'].iloc[0]} (%)")
    ax.set_ylabel("")
    ax.set_title(f"LSTM training step on {part['device'].iloc[0]}")
    fig.tight_layout()
    return fig


def plot_loader_sweep(df: pd.DataFrame):
    """Train and test epoch time (s) against batch size (log2 axis), one line per num_workers."""
    from cnnlab import plotting

    ok = df[df["status"] == "ok"].melt(id_vars=["batch_size", "num_workers"], var_name="phase",
                                       value_vars=["train_epoch_s", "test_epoch_s"], value_name="epoch_time_s")
    ok["phase"] = ok["phase"].str.removesuffix("_epoch_s")
    grid = plotting.sns.relplot(data=ok, x="batch_size", y="epoch_time_s", hue="num_workers", col="phase", kind="line",
                                marker="o", palette="colorblind", height=3.2, aspect=1.2, facet_kws={"sharey": False})
    for ax in grid.axes.flat:
        plotting.log2_batch_axis(ax, values=sorted(ok["batch_size"].unique()))
        ax.set_ylabel(plotting.label_for("epoch_time_s"))
    grid.figure.suptitle(f"LSTM epoch time (workers capped at {int(df['num_workers_cap'].iloc[0])})", y=1.03)
    return grid.figure


def plot_sensitivity(df: pd.DataFrame):
    """Test accuracy (%) against pruning ratio, one panel per method, one line per pruned tensor or scope."""
    from cnnlab import plotting

    ok = df[df["status"] == "ok"].copy()
    ok["pruned"] = ok.apply(lambda r: r["tensor"] if r["scope"] == "layer" else f"{r['scope']} ({r['tensor']})", axis=1)
    grid = plotting.sns.relplot(data=ok, x="ratio", y="accuracy_pct", hue="pruned", col="method", kind="line",
                                marker="o", height=3.2, aspect=1.0)
    for ax in grid.axes.flat:
        ax.axhline(ok["dense_accuracy_pct"].iloc[0], color="black", linestyle="--", linewidth=1, label="dense")
        ax.axhline(50.0, color="grey", linestyle=":", linewidth=1)
    grid.set_axis_labels("Pruning ratio", plotting.label_for("accuracy_pct"))
    grid.figure.suptitle("Accuracy right after pruning (dashed: dense, dotted: chance)", y=1.03)
    return grid.figure


def plot_final(df: pd.DataFrame):
    """Dense vs pruned variants: train epoch (s), inference latency (ms), training-step peak memory (MiB),
    saved size (MB), test accuracy (%)."""
    from cnnlab import plotting

    cols = ["train_epoch_s", "latency_ms_median", "train_step_peak_mem_mib", "size_mb", "accuracy_pct"]
    fig, axes = plotting.plt.subplots(1, len(cols), figsize=(3.4 * len(cols), 3.8))
    for ax, col in zip(axes, cols):
        plotting.sns.barplot(data=df, x="variant", y=col, hue="variant", ax=ax, legend=False)
        ax.set_ylabel(plotting.label_for(col))
        ax.set_xlabel("")
        ax.tick_params(axis="x", rotation=35)
    fig.tight_layout()
    fig.suptitle(f"Final models at ratio {df['ratio'].max():g} on {df['device'].iloc[0]}", y=1.04)
    return fig


__all__ = ["LSTM_OPS", "MODEL", "PAPER", "PRESETS", "build_model", "check_claims", "datasets", "final_comparison",
           "fit", "loader_sweep", "plot_final", "plot_loader_sweep", "plot_profile", "plot_sensitivity",
           "profile_training", "pruning_sensitivity", "set_threads", "train_baseline", "train_step", "validate"]
