"""Study 06: an LSTM sentiment classifier: where a training step spends its time, DataLoader batch size and
workers, and pruning (paper 003, Xiong & Leroux, HPML project, "LSTM" part).

The paper profiled the Kaggle "IMDB with PyTorch" LSTM (34.7M parameters) on a V100 (cuDNN's LSTM kernels: 98.6%
of GPU time), timed epochs per batch size x ``num_workers`` (best: 0 workers, batch 128), pruned with
``torch.nn.utils.prune`` and, over ratios 0.1-0.9, saw a quantity "vary slightly between 0.49 and 0.52" (unnamed, its
figure lost: as accuracy, chance level for balanced sentiment). At ratio 0.9 (3.5M non-zero parameters) its overall
time falls 2.04x, but train epoch + test pass, like for like, 1.34x (:data:`PAPER`): the rest of the overall time is
neither training, validation nor testing (the slides do not say what), so the claims judge the 1.34x, the part we
run. Masks keep every weight's shape, so beyond the paper :func:`cnnlab.prune.shrink_lstm` removes whole hidden
units; :func:`final_comparison` times it beside the masks.

The DataLoader sweep's comparisons (workers, batch sizes) are timed in paired, alternating rounds over the whole
grid (``min_rounds``, more while a claim is undecided, up to ``max_rounds`` within ``round_budget_s``:
:func:`cnnlab.profiling.compare.until_decided`) and judged on the sign test's interval of the median per-round ratio.
The final models are timed the same way, in paired rounds of the four variants (more while their claims are
undecided, within ``final_budget_s``). The profile is repeated ``timing_rounds`` times and judged on the range of its
rounds; with one round there is no range, and that claim says so instead of deciding. Accuracies before and after
pruning are scored on the same test items and compared item by item (:func:`cnnlab.profiling.accuracy.paired_exact`).

Where the paper is silent: Adam, gradients clipped at norm 5 (as the Kaggle notebook); no fine-tuning in the scan;
final models fine-tuned with masks held; "all layers" leaves the head (its rows are the classes) alone.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch
from torch import nn

from cnnlab import claims, config, data, models, prune, quantize, studies
from cnnlab.claims import ONE_ROUND, Claim, Declared, Measured, Spread, above, below, joined
from cnnlab.plotting.lstm_pruning import figures  # noqa: F401  (the contract's figures(df))
from cnnlab.profiling import accuracy, benchmark, derived, loader_sweep, loaders, memory, profile_ops, wall_time
from cnnlab.profiling.accuracy import correct_count, difference
from cnnlab.profiling.compare import CONFIDENCE, Paired, until_decided
from cnnlab.profiling.estimate import Work, forward, profiler_session, unit_seconds
from cnnlab.profiling.ops import top_operators
from cnnlab.studies import Experiment, Parameter, tables
from cnnlab.train import evaluate, fit, train_step

MODEL = "lstm_sentiment"
LSTM_OPS = ("lstm", "rnn")  # operator / kernel names containing these are the LSTM's own work
CLIP = 5.0  # gradient-norm clipping, the Kaggle notebook's clip=5
# The paper's numbers (slides "Experimental Evaluation", LSTM 1-3): seconds as its logs print them, before -> after
# pruning at 0.9. "overall" is its whole run; train, validation and test are one epoch each and add up to less.
PAPER = dict(overall_s=(49.64097316499999, 24.326757582999562), train_epoch_s=(18.132872709000026, 13.63664408800014),
             validation_s=(1.9233222459999998, 1.869992953000292), test_s=(1.5564957660000118, 1.0925553890001538),
             nonzero_params=(34_731_777, 3_528_662), lstm_gpu_share_pct=98.60, best_batch_size=128,
             sensitivity=(0.49, 0.52), chosen_ratio=0.9, kernel_pct=83.21)  # Kernel: its "Execution Summary"
# A share the paper reports (98.60%, 83.21%) holds here when ours is above it less this many points (our bound: the
# slides give none, and another device, library or model size moves a share by a few points).
SHARE_TOLERANCE_PP = 10.0
MOST_PCT = 50.0  # "take up most of the time" (the paper's words for the LSTM): more than half of the step
SENSITIVITY_PP = 3.0  # the paper's spread 0.49-0.52, read as accuracy: 3 percentage points
MAX_LR = 1.0  # Adam's learning rate: the recipes use 1e-3 to 5e-3; above 1 it only diverges (to chance accuracy)


def _size(value, parameter: str) -> int | None:
    """None (the whole split) or a positive int."""
    return None if value is None else config.positive_int(value, parameter=parameter)


def _methods(value, parameter: str) -> list[str]:
    methods = config.as_list(value)
    if not methods:  # nothing to prune: the study would train, measure nothing it claims about, then fail
        raise ValueError(f"methods is empty; valid: a list of {', '.join(prune.METHODS)}")
    return list(dict.fromkeys(prune.check_method(m) for m in methods))


def _check(cfg) -> None:
    if round(cfg.chosen_ratio * cfg.hidden_size) >= cfg.hidden_size:
        raise ValueError(f"chosen_ratio={cfg.chosen_ratio} would remove all {cfg.hidden_size} hidden units")


count, fraction = config.positive_int, functools.partial(config.number, low=0, high=1)
# quick: a CPU smoke run on the synthetic sentiment corpus (labels depend on the words; guessing gets 50%), paired
# rounds of the DataLoader sweep, three rounds of the profile and the final models (the noise rule needs a range).
# standard: one Colab GPU, real IMDB (downloaded once), a mid-sized model. paper: the paper's scale (34.0M parameters,
# the paper's had 34.7M), grids and ratio 0.9.
PARAMETERS = studies.Parameters(
    synthetic=Parameter(True, False, check=config.boolean,
                        doc="True: the synthetic sentiment corpus (quick); False: IMDB (downloaded once)"),
    vocab_size=Parameter(2000, 20000, 75000, check=count, doc="tokens in the vocabulary"),
    seq_len=Parameter(64, 256, check=count, doc="tokens per review"),
    train_size=Parameter(2000, None, check=_size, type="int", doc="training reviews (None: the whole split)"),
    test_size=Parameter(500, None, check=_size, type="int", doc="test reviews (None: the whole split)"),
    embed_dim=Parameter(64, 128, 400, check=count, doc="embedding width"),
    hidden_size=Parameter(64, 256, 512, check=count, doc="LSTM hidden units per layer"),
    num_layers=Parameter(2, check=count, doc="LSTM layers"),
    epochs=Parameter(3, 4, check=count, doc="training epochs of the dense model"),
    batch_size=Parameter(64, 64, 128, check=config.batch_size, doc="training batch (reviews)"),
    lr=Parameter(5e-3, 1e-3, check=functools.partial(config.number, low=0, high=MAX_LR), doc="Adam learning rate"),
    batch_sizes=Parameter([32, 128], [32, 64, 128, 256], [16, 32, 64, 128, 256], check=config.batch_sizes, axis=True,
                          doc="DataLoader-sweep batch sizes (paper: several, best 128)"),
    num_workers=Parameter([0, 1, 2, 4, 8], check=config.num_workers, axis=True,
                          doc="paper: [0, 1, 2, 4, 8]; values above os.cpu_count() are recorded as skipped"),
    # quick reads 20% of the data per round (400 training reviews, 100 test ones: 4-13 batches an epoch). At 10%
    # (2-7 batches) batch 32 / batch 128 came out 0.89x (0.70-1.01x) after 18 rounds in a quick run of 4253331, its
    # rounds' ratios 0.65-1.24: an epoch of 0.14 s is a few scheduler slices. The grid's rounds are mostly the
    # workers' start-up, which a longer epoch does not add to
    sweep_fraction=Parameter(0.2, 0.2, 1.0, check=fraction, doc="share of the data each DataLoader-sweep epoch reads"),
    ratios=Parameter([0.1, 0.5, 0.9], [round(0.1 * k, 1) for k in range(1, 10)], axis=True,
                     check=functools.partial(config.number_list, low=0, high=1, high_open=True, sort=True,
                                             valid="pruning ratios in (0, 1), e.g. [0.1, 0.5, 0.9]"),
                     doc="pruning ratios of the sensitivity scan (paper: 0.1 ... 0.9)"),
    methods=Parameter(list(prune.METHODS), check=_methods, axis=True, doc=", ".join(prune.METHODS)),
    chosen_ratio=Parameter(0.5, 0.5, 0.9, check=functools.partial(fraction, low_open=False, high_open=True),
                           doc="the final models' ratio (paper: 0.9)"),
    finetune_epochs=Parameter(1, check=count, doc="fine-tuning epochs of the final models"),
    profile_iterations=Parameter(3, 5, check=count, doc="profiled training steps"),
    warmup=Parameter(1, 3, 5, check=functools.partial(count, minimum=0), doc="untimed batches before timing"),
    repeats=Parameter(5, 20, 50, check=count, doc="timed batches per latency"),
    timing_rounds=Parameter(3, 3, 5, check=count, doc="rounds of the profile (their range)"),
    # paired rounds (cnnlab.profiling.compare) of the DataLoader sweep's grid and of the final models: rounds added
    # while a claim of theirs is undecided, within round_budget_s and final_budget_s
    min_rounds=studies.MIN_ROUNDS,
    max_rounds=studies.MAX_ROUNDS,
    round_budget_s=Parameter(110.0, 600.0, 1800.0, check=functools.partial(config.number, low=0, high=86400),
                             doc="seconds the DataLoader sweep's rounds may take (s)"),
    # quick: a round of the four final models is about 4 s here (2 cores), so 45 s allows the first look (8 rounds)
    # and, where the speed-up is still undecided, the second (12)
    final_budget_s=Parameter(45.0, 300.0, 900.0, check=functools.partial(config.number, low=0, high=86400),
                             doc="seconds the final models' paired rounds may take (s)"),
    # quick: one intra-op thread (CI runs two notebooks at once on two cores; more threads than free cores spin-wait)
    threads=studies.THREADS,
    tf32=studies.TF32,
    device=Parameter(None, check=config.device_name, type="str", doc="auto | cpu | cuda"),
    check=_check,
)
configure = PARAMETERS.configure


def datasets(cfg):
    """(train, test) token datasets: the synthetic corpus (``cfg.train_size``/``test_size`` reviews) or IMDB."""
    sizes = {"train": cfg.train_size, "test": cfg.test_size}
    sets = {split: data.load("imdb", split, synthetic=cfg.synthetic, synthetic_size=size, vocab_size=cfg.vocab_size,
                             seq_len=cfg.seq_len) for split, size in sizes.items()}
    return tuple(part if cfg.synthetic or not sizes[split] else data.subset(part, min(1.0, sizes[split] / len(part)))
                 for split, part in sets.items())


def _train(net, loader, lr, device, epochs: int = 1, **options) -> pd.DataFrame:
    """``epochs`` epochs of ``net`` with a fresh Adam (cnnlab.train.fit's per-epoch rows, epoch_time_s in s)."""
    return fit(net, loader, torch.optim.Adam(net.parameters(), lr=lr), epochs=epochs, device=device,
               clip_grad_norm=CLIP, **options)


def train_baseline(cfg, train_set, test_set, progress: bool = False) -> tuple[nn.Module, pd.DataFrame]:
    """The dense model (seed 0) trained ``cfg.epochs`` with ONE Adam for all epochs (its moments carry over); history:
    cnnlab.train.fit's rows (epoch_time_s in s...) plus test_accuracy_pct (%), test_loss (nats), data_source."""
    torch.manual_seed(0)
    model = models.get(MODEL, vocab_size=cfg.vocab_size, seq_len=cfg.seq_len, embed_dim=cfg.embed_dim,
                       hidden_size=cfg.hidden_size, num_layers=cfg.num_layers)
    test_loader = data.make_loader(test_set, 256)

    def test(net, epoch):
        result = evaluate(net, test_loader, device=cfg.device)
        return {"test_accuracy_pct": result["accuracy_pct"], "test_loss": result["loss"],
                "data_source": train_set.data_source}

    loader = data.make_loader(train_set, cfg.batch_size, shuffle=True, seed=0)
    return model, _train(model, loader, cfg.lr, cfg.device, cfg.epochs, on_epoch=test, progress=progress,
                         desc="train the LSTM")


def plan(cfg) -> list[Work]:
    """What :func:`measure` does, for its estimate, in steps or batches of the dense model on random tokens (the pruned
    variants are as large, or smaller): its epochs (a test pass after each), the DataLoader sweep
    (:func:`cnnlab.profiling.loaders.plan`), the profiled steps of every round, the sensitivity scan (a test pass per
    point), the final models (a test pass before and after fine-tuning, the fine-tuning epochs, timed batches, three
    steps for the memory peak; then per paired round (``min_rounds``) a training epoch and a test pass of each
    variant)."""
    config.set_threads(cfg.threads)
    dev = torch.device(cfg.device)
    (train_set, train_size), (test_set, test_size) = (
        data.stand_in("imdb", split, synthetic=cfg.synthetic, vocab_size=cfg.vocab_size, seq_len=cfg.seq_len)
        for split in ("train", "test"))
    train_size, test_size = cfg.train_size or train_size, cfg.test_size or test_size
    net = models.get(MODEL, vocab_size=cfg.vocab_size, seq_len=cfg.seq_len, embed_dim=cfg.embed_dim,
                     hidden_size=cfg.hidden_size, num_layers=cfg.num_layers).to(dev)
    optimizer = torch.optim.Adam(net.parameters(), lr=cfg.lr)

    def unit(b, train: bool):  # a training step or an inference batch of b random reviews
        x, y = torch.randint(cfg.vocab_size, (b, cfg.seq_len), device=dev), torch.randint(2, (b,), device=dev)
        if train:
            return lambda: (net.train(), train_step(net, x, y, optimizer, clip_grad_norm=CLIP))
        return lambda: (net.eval(), forward(net, x))

    step_at, infer_at = functools.partial(unit, train=True), functools.partial(unit, train=False)
    step, test_batch = unit_seconds(step_at(cfg.batch_size), dev), unit_seconds(infer_at(256), dev)
    steps, passes = -(-train_size // cfg.batch_size), -(-test_size // 256)  # an epoch; a test pass (batches of 256)
    scan = len(cfg.methods) * len(cfg.ratios) * (len(prune.targets(net)) + 2) + len(cfg.ratios)
    variants = 4  # dense, masked rows, masked units, unit-pruned
    return [Work("training", cfg.epochs * steps, step), Work("training", cfg.epochs * passes, test_batch),
            *loaders.plan(step_at, infer_at, train_set, test_set, batch_sizes=cfg.batch_sizes,
                          num_workers=cfg.num_workers, pin_memory=[dev.type == "cuda"], fraction=cfg.sweep_fraction,
                          rounds=cfg.min_rounds, device=dev, sizes=(train_size, test_size)),
            Work("profiles", cfg.timing_rounds * (cfg.profile_iterations + 1), step),
            Work("profiles", cfg.timing_rounds, profiler_session(dev)), Work("sensitivity", scan * passes, test_batch),
            Work("final models", variants * (cfg.finetune_epochs + cfg.min_rounds) * steps + variants * 3, step),
            Work("final models", variants * (2 + cfg.min_rounds) * passes, test_batch),
            Work("final models", variants * (cfg.warmup + cfg.repeats + 3),
                 unit_seconds(infer_at(cfg.batch_size), dev))]


@studies.measurement(plan)
def measure(cfg, store_dir: str | Path | None, progress: bool = True) -> pd.DataFrame:
    """Train the dense model, then measure on it. ``experiment``: "training" (:func:`train_baseline`),
    "training_profile" and "profile_rounds" (:func:`profile_rounds`), "loader_sweep" (train and test epoch time in s
    per ``round`` x batch size x ``num_workers``, a fresh Adam per point, each from its first batch in hand
    (``loaders.TIMED``): ``cfg.min_rounds`` paired rounds over the whole grid, more while a sweep claim is undecided,
    within ``cfg.round_budget_s``: ``cnnlab.profiling.compare.until_decided``), "sensitivity" (:data:`SENSITIVITY`),
    "final_models" (:func:`final_comparison`). The sweeps' stores (``store_dir/stores/sweep_<experiment>_<digest>.csv``)
    are keyed by ``cfg.settings()``, the threads in use (and the round)."""
    extra = dict(cpu_threads=config.set_threads(cfg.threads))
    train_set, test_set = datasets(cfg)
    model, history = train_baseline(cfg, train_set, test_set, progress=progress)

    def sweep_rounds(n: int, level: float) -> pd.DataFrame:  # rounds 0..n-1 of the grid (stored ones read back)
        return loader_sweep(
            model, lambda net, loader: _train(net, loader, cfg.lr, cfg.device),
            lambda net, loader: evaluate(net, loader, device=cfg.device), train_set, test_set,
            batch_sizes=cfg.batch_sizes, num_workers=cfg.num_workers,
            pin_memory=[torch.device(cfg.device).type == "cuda"], fraction=cfg.sweep_fraction, device=cfg.device,
            store=store_dir and Path(store_dir) / "sweep_loader_sweep.csv", settings=cfg.settings(**extra),
            progress=progress, rounds=n).assign(confidence=level)

    loaders = until_decided(sweep_rounds, lambda d: claims.decided(claims.check(
        SWEEP_CLAIMS, {"loader_sweep": d}, cfg.device)), min_rounds=cfg.min_rounds, max_rounds=cfg.max_rounds,
        budget_s=cfg.round_budget_s)
    sensitivity = pruning_sensitivity(model, cfg, test_set, store_dir, extra, progress)
    final = final_comparison(model, cfg, train_set, test_set)
    # the profiles last: a CUDA profile may slow the launches timed after it (cnnlab.profiling.cupti)
    profile, rounds = profile_rounds(model, cfg, train_set)
    return studies.combine(training=history, training_profile=profile, profile_rounds=rounds, loader_sweep=loaders,
                           sensitivity=sensitivity, final_models=final)


def profile_rounds(model, cfg, train_set) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``cfg.profile_iterations`` training steps profiled ``cfg.timing_rounds`` times (a fresh copy, Adam and batch
    each round). Returns the first round's operators by self CPU time (CPU) or self CUDA time (GPU, the paper's
    table), largest first: name, calls, time_ms, share_pct (of the total), time_kind, is_lstm (``aten::_cudnn_rnn``,
    oneDNN's ``aten::mkldnn_rnn_layer``, their backward...), device, iterations, data_source; and one row per round:
    round, lstm_share_pct (the LSTM operators' share of the time_kind, %), time_kind, wall_time_ms (host time of the
    profiled steps), kernel_time_total_ms and kernel_share_pct (GPU kernel time / wall time, %: the paper's
    "Execution Summary" Kernel row; NaN on a CPU, which runs no kernels), device, iterations, data_source."""
    device = torch.device(cfg.device)
    column, kind = ("self_device_time_us", "self CUDA time") if device.type == "cuda" else \
        ("self_cpu_time_us", "self CPU time")
    tables, rows = [], []
    for r in range(cfg.timing_rounds):
        net = copy.deepcopy(model).to(device).train()
        optimizer = torch.optim.Adam(net.parameters(), lr=cfg.lr)
        tokens, labels = (t.to(device) for t in next(iter(data.make_loader(train_set, cfg.batch_size, shuffle=True))))
        # profile_memory=False: this table reads times only (memory comes from memory.train_step_peak_mib, which sees
        # the warm-up step's gradients freed; here their free would be unrecorded, and C++ would say so on stderr)
        prof = profile_ops(lambda: train_step(net, tokens, labels, optimizer, clip_grad_norm=CLIP),  # noqa: B023
                           iterations=cfg.profile_iterations, device=device, warmup=1, profile_memory=False)
        top = top_operators(prof, by=column)
        table = top[["name", "calls"]].assign(
            time_ms=top[column.removesuffix("_us") + "_ms"], share_pct=top["share_pct"], time_kind=kind,
            is_lstm=top["name"].str.lower().str.contains("|".join(LSTM_OPS)), device=str(device),
            iterations=cfg.profile_iterations, data_source=train_set.data_source)
        wall, kernel = (float(prof.summary.get(k, float("nan"))) for k in ("wall_time_ms", "kernel_time_total_ms"))
        tables.append(table)
        rows.append({"round": r, "lstm_share_pct": float(table.loc[table["is_lstm"], "share_pct"].sum()),
                     "time_kind": kind, "wall_time_ms": wall, "kernel_time_total_ms": kernel,
                     "kernel_share_pct": 100.0 * kernel / wall if wall > 0 else float("nan"), "device": str(device),
                     "iterations": cfg.profile_iterations, "data_source": train_set.data_source})
    return tables[0], pd.DataFrame(rows)


def _all_but_head(model) -> list[str]:
    return [name for name in prune.targets(model) if not name.startswith("head.")]


def sensitivity_point(scope: str, tensor: str, method: str, ratio: float, *, model, loader, dense: dict,
                      device: str) -> dict:
    """One point of :data:`SENSITIVITY`: test accuracy (%) and loss right after pruning a copy of ``model`` (no
    fine-tuning; the paper's sensitivity) by ``method`` at ``ratio``: scope "layer" prunes ``tensor``; "all_layers"
    every tensor but the head, each at ``ratio`` (the paper's final choice); "global" ranks their weights (or rows)
    together; method "units" (beyond the paper) removes ``ratio`` of each LSTM layer's hidden units.
    ``zero_fraction``: zeros in the pruned tensors; ``dense_accuracy_pct``: the unpruned model's (``dense``, with its
    per-item ``right``); ``correct_only_dense`` and ``correct_only_pruned``: the test items only the dense or only the
    pruned model gets right (the discordant counts of a paired interval, ``accuracy.paired_exact``)."""
    if method == "units":
        net = prune.shrink_lstm(model, prune.select_units(model.lstm, ratio))
        zero_fraction = 1 - net.lstm.hidden_size / model.lstm.hidden_size
    else:
        names = [tensor] if scope == "layer" else _all_but_head(model)
        net = prune.prune_model(copy.deepcopy(model), method, ratio, tensors=names,
                                scope="global" if scope == "global" else "layer")
        table = prune.sparsity(net).set_index("tensor").loc[names]
        zero_fraction = table["zeros"].sum() / table["numel"].sum()
    result = evaluate(net, loader, device=device, per_item=True)
    right, base = result["right"], dense["right"]
    return {"accuracy_pct": result["accuracy_pct"], "loss": result["loss"], "zero_fraction": float(zero_fraction),
            "dense_accuracy_pct": dense["accuracy_pct"], "test_items": result["num_examples"],
            "correct_only_dense": int((base & ~right).sum()), "correct_only_pruned": int((right & ~base).sum()),
            "data_source": loader.dataset.data_source}


SENSITIVITY = Experiment("sensitivity", sensitivity_point, desc="pruning sensitivity")


def pruning_sensitivity(model, cfg, test_set, store_dir, settings: dict, progress: bool = True) -> pd.DataFrame:
    """:data:`SENSITIVITY` on ``model``, one row per (scope, tensor, method, ratio): every tensor alone, all but the
    head and their global ranking, per method and ratio, and "units" per ratio (skipped where no hidden unit would be
    left); stored under ``store_dir`` keyed by ``cfg.settings(**settings)``."""
    loader = data.make_loader(test_set, 256)
    scopes = [*(("layer", name) for name in prune.targets(model)), ("all_layers", "all but head"),
              ("global", "all but head")]
    grid = [{"scope": scope, "tensor": tensor, "method": method, "ratio": ratio}
            for method in cfg.methods for ratio in cfg.ratios for scope, tensor in scopes]
    grid += [{"scope": "all_layers", "tensor": "lstm units", "method": "units", "ratio": r} for r in cfg.ratios]
    dense = evaluate(model, loader, device=cfg.device, per_item=True)
    return SENSITIVITY.run(cfg, store_dir, progress=progress, settings=settings, points=grid, bind=dict(
        model=model, loader=loader, dense=dense), skip=lambda scope, tensor, method, ratio: None if method != "units"
        or round(ratio * cfg.hidden_size) < cfg.hidden_size else f"ratio {ratio:g} would remove all {cfg.hidden_size} "
        "hidden units")


def final_comparison(model, cfg, train_set, test_set) -> pd.DataFrame:
    """The dense model beside three prunings at ``cfg.chosen_ratio``, all fine-tuned ``cfg.finetune_epochs`` at a
    fifth of the learning rate (adjusting the kept weights): ``masked_rows`` (the paper's: L2-structured masks over
    the rows of every tensor but the head), ``masked_units`` (masks over whole hidden units), ``unit_pruned`` (those
    units removed). Epoch times (s): train_epoch_s, test_epoch_s and overall_s (the two together, the part of the
    paper's "overall time" we run), each a fresh copy's, in paired rounds taking the variants in turn, the order
    reversed every other round (a burst of load hits one round of each): ``cfg.min_rounds``, more while a claim of
    :data:`FINAL_CLAIMS` is undecided, up to ``cfg.max_rounds`` within ``cfg.final_budget_s``
    (``cnnlab.profiling.compare.until_decided``); medians with _min, _max and the times round by round (round_*). Also
    params, nonzero_params, hidden_size, accuracy_pct before (accuracy_pruned_pct) and after fine-tuning, latency_ms_*
    per batch (benchmark), inference_peak_mem_mib, train_step_peak_mem_mib (memory.train_step_peak_mib: a step after a
    first one, so that Adam's state exists), size_mb (state dict with masks folded in, MB = 1e6 bytes), speed-ups
    against dense."""
    device = torch.device(cfg.device)
    train_loader = data.make_loader(train_set, cfg.batch_size, shuffle=True, seed=1)
    test_loader = data.make_loader(test_set, cfg.batch_size)
    tokens, labels = next(iter(test_loader))
    keep = prune.select_units(model.lstm, cfg.chosen_ratio)
    variants = {"dense": copy.deepcopy(model), "masked_rows": prune.prune_model(
        copy.deepcopy(model), "ln_structured", cfg.chosen_ratio, tensors=_all_but_head(model)),
        "masked_units": prune.mask_units(model, keep), "unit_pruned": prune.shrink_lstm(model, keep)}
    rows = []
    for variant, net in variants.items():
        before = evaluate(net, test_loader, device=device)
        _train(net, train_loader, cfg.lr / 5, device, epochs=cfg.finetune_epochs)
        after = evaluate(net, test_loader, device=device)
        timing = benchmark(net, tokens, device=device, warmup=cfg.warmup, repeats=cfg.repeats)
        work, x, y = copy.deepcopy(net).to(device).train(), tokens.to(device), labels.to(device)
        adam = torch.optim.Adam(work.parameters(), lr=cfg.lr)
        peak = memory.train_step_peak_mib(lambda: train_step(work, x, y, adam, clip_grad_norm=CLIP),  # noqa: B023
                                          work, adam, [x, y], device)
        rows.append({"variant": variant, "ratio": 0.0 if variant == "dense" else cfg.chosen_ratio,
                     "hidden_size": net.lstm.hidden_size, **prune.count_parameters(net),
                     "accuracy_pruned_pct": before["accuracy_pct"], "accuracy_pct": after["accuracy_pct"],
                     "loss": after["loss"], **{f"latency_ms_{q}": getattr(timing, f"latency_ms_{q}")
                                               for q in ("median", "p10", "p90")},
                     "inference_peak_mem_mib": timing.peak_mem_alloc_mib, "train_step_peak_mem_mib": peak,
                     "size_mb": quantize.state_dict_bytes(prune.make_permanent(copy.deepcopy(net).cpu())) / 1e6})
    rounds: list[dict] = []

    def run(n: int, level: float) -> pd.DataFrame:  # rounds 0..n-1 of every variant (those already timed kept)
        for r in range(len(rounds) // len(variants), n):
            for variant in (list(variants) if r % 2 == 0 else list(variants)[::-1]):
                work = copy.deepcopy(variants[variant])
                train_s = _train(work, train_loader, cfg.lr / 5, device)["epoch_time_s"].iloc[0]
                test_pass = functools.partial(evaluate, work, test_loader, device=device)
                test_s = wall_time(test_pass, device=device).seconds
                rounds.append({"round": r, "variant": variant, "train_epoch_s": train_s, "test_epoch_s": test_s,
                               "overall_s": train_s + test_s})
        return _final_table(rows, pd.DataFrame(rounds), level).assign(
            batch_size=cfg.batch_size, device=str(device), cpu_threads=torch.get_num_threads(),
            data_source=train_set.data_source)

    def decided(df: pd.DataFrame) -> bool:
        return claims.decided(claims.check(FINAL_CLAIMS, {"final_models": df.set_index("variant"),
                                                          "chosen": cfg.chosen_ratio}, device))

    return until_decided(run, decided, min_rounds=cfg.min_rounds, max_rounds=cfg.max_rounds,
                         budget_s=cfg.final_budget_s)


def _final_table(rows: list[dict], rounds: pd.DataFrame, level: float) -> pd.DataFrame:
    """:func:`final_comparison`'s table: ``rows`` (one per variant) with each time's median over ``rounds`` (one row per
    round and variant), its _min and _max, its times round by round (``round_<time>``, "0.94, 0.97, ...": the
    paired ratios' source, :meth:`Paired.of_rounds`), ``rounds``, ``confidence`` (``level``) and the speed-ups
    against dense."""
    order = rounds.sort_values("round", kind="stable")
    times = order.groupby("variant", sort=False)[list(_TIMES)].agg(["median", "min", "max"])
    times.columns = [col if stat == "median" else f"{col}_{stat}" for col, stat in times.columns]
    for col in _TIMES:
        times[f"round_{col}"] = order.groupby("variant", sort=False)[col].agg(
            lambda ts: ", ".join(f"{t:.6g}" for t in ts))
    df = pd.DataFrame(rows).merge(times, left_on="variant", right_index=True).assign(
        rounds=int(rounds["round"].nunique()), confidence=level)
    for col, name in (("train_epoch_s", "train"), ("test_epoch_s", "test"), ("overall_s", "overall"),
                      ("latency_ms_median", "inference")):
        df[f"{name}_speedup"] = derived.against(df, col, {"variant": "dense"}, how="speedup")
    return df


def _change(pair) -> str:
    """The paper's before -> after seconds with its speed-up, e.g. "18.13 -> 13.64 s (1.33x)"."""
    return f"{pair[0]:.2f} -> {pair[1]:.2f} s ({pair[0] / pair[1]:.2f}x)"


PAPER_TRAIN_TEST = tuple(map(sum, zip(PAPER["train_epoch_s"], PAPER["test_s"])))  # 19.69 -> 14.73 s: what we run
PAPER_SPEEDUP = PAPER_TRAIN_TEST[0] / PAPER_TRAIN_TEST[1]  # 1.34x
PAPER_TIMED = tuple(map(sum, zip(PAPER["train_epoch_s"], PAPER["validation_s"], PAPER["test_s"])))  # 21.61 -> 16.60 s
# The paper's final model is pruned by masks. Whether masks save time or memory is settled by the implementation,
# not by a measurement, so those claims are shown and not judged; removing the units could come out otherwise.
PAPER_MASKS = ('"PyTorch pruning API -> test l2-structured and unstructured", "Chose a 0.9 pruning ratio for every '
               'layer", "Gain in time and memory" (slides "Implementation Details", "LSTM -> 3"); ')
MASKS_BY_DESIGN = ("settled by design, not judged: torch.nn.utils.prune keeps each tensor's full-size weight_orig and "
                   "a mask, and computes the dense masked weight before every forward (prune.remove leaves dense "
                   "zeros; no kernel here skips zeros): neither time nor memory can fall; removing hidden units can")
_OVERALL = "the paper's overall time is not judged: {} -> {} s of it are neither training, validation nor test".format(
    *(f"{a - b:.2f}" for a, b in zip(PAPER["overall_s"], PAPER_TIMED)))
_TIMES = {"overall_s": "train epoch + test pass", "train_epoch_s": "train epoch", "test_epoch_s": "test pass"}
_SENSITIVE = ("\"Varies slightly between {} and {} -> not sensitive\" over ratios 0.1-0.9 (slides \"LSTM -> 3\"; "
              .format(*PAPER["sensitivity"]))
_ACCURACY = dict(bound="the paper's spread {}-{}, read as accuracy".format(*PAPER["sensitivity"]),
                 noise=accuracy.PAIRED_RULE)
# Removing hidden units shrinks every tensor of the LSTM: a smaller peak is the construction, not a finding
UNITS_BY_DESIGN = ("settled by construction, not judged: removing a share r of the h hidden units of each layer leaves "
                   "h' = (1 - r) h, and each layer's 4h x (inputs + h) weights become 4h' x (inputs + h'), with their "
                   "gradients, Adam's two moments and the step's activations; nothing is added, so a training step's "
                   "peak can only fall (the measured peak is shown)")
_SHARE = f"less {SHARE_TOLERANCE_PP:g} points, our bound; the range over the profiles"

# --- The claims, declared (CLAIMS) and judged by cnnlab.claims.check on measure's tables (``t``), to which
# check_claims adds "chosen" (the final models' ratio) and final_models indexed by variant. ---


def _share(t, column: str):
    """The LSTM's (or the GPU kernels') share of the profiled steps' time, over the profiles."""
    p = t["profile_rounds"]
    if p[column].isna().any():
        return "a GPU profile's: a CPU runs no kernels (the LSTM's share of CPU time is the claim above)"
    return Measured({f"over {len(p)} profiles of {int(p['iterations'].iloc[0])} steps:": Spread.of_samples(p[column])}
                    ) if len(p) > 1 else ONE_ROUND


def _sweep(t, workers: bool):
    """Training-epoch time over the DataLoader sweep's paired rounds: at w > 0 workers / at 0, every batch size; or at
    batch b / at 128, both at 0 workers (the paper's optimum pairs 0 workers with 128)."""
    lo, top = t["loader_sweep"], PAPER["best_batch_size"]
    ok = lo[lo["status"] == "ok"]
    if not {"round", "train_epoch_s"} <= set(ok):
        return "no training-epoch time per round in the DataLoader sweep"
    by = ok.pivot_table(index="round", columns=["batch_size", "num_workers"], values="train_epoch_s", aggfunc="median")
    level = float(ok["confidence"].iloc[0]) if "confidence" in ok else CONFIDENCE
    times = {(int(b), int(w)): by[b, w].tolist() for b, w in by.columns}
    keys = [(b, w) for b, w in times if w and (b, 0) in times] if workers else \
        [(b, 0) for b, w in times if not w and b != top and (top, 0) in times]
    sizes = sorted({b for b, _ in times})
    note = joined("" if workers or len(sizes) < 2 or max(sizes) != top else f"{top} is the largest batch size "
                  "measured: a larger one might be faster", len(lo) and f"workers capped at os.cpu_count() = "
                  f"{int(lo['num_workers_cap'].iloc[0])}", len(ok) and f"timed: {loaders.TIMED}" + (
                      f"; epochs of {int(ok['train_items'].iloc[0])} training reviews" if "train_items" in ok else ""))
    if not keys:
        return joined(f"{'num_workers=0' if workers else f'batch size {top} at 0 workers'} and another were not both "
                      "measured", note)
    if len(by) < 2:
        return joined(ONE_ROUND, note)
    t = {k: Paired.of(v, level) for k, v in times.items()}
    base = (lambda b, w: (b, 0)) if workers else (lambda b, w: (top, 0))
    parts = {f"batch {b}, {w} workers" if workers else f"batch {b}": t[b, w] / t[base(b, w)] for b, w in keys}
    return Measured(parts, ", ".join(f"{k}: {x.text('.2f', 'x')}" for k, x in parts.items()) +
                    f" ({len(by)} paired rounds, the grid's order reversed every other round)", note)


def decidable(n: int) -> str:
    """The smallest accuracy drop ``n`` test items can decide (paired, every changed item one way)."""
    return (f"{n} test items decide a drop of {accuracy.smallest_decidable_pp(n):.2f} pp at the least (every changed "
            f"item one way; the bound is {SENSITIVITY_PP:g} pp)")


def smallest_effects(df: pd.DataFrame) -> str:
    """The notebook's sentence on what the sensitivity scan's test set can decide (:func:`decidable`)."""
    s = tables(df).get("sensitivity", pd.DataFrame())
    s = s[s["status"] == "ok"] if len(s) else s
    return decidable(int(s["test_items"].iloc[0])) if len(s) else "no sensitivity point measured"


def _drop(row, n: int):
    """Dense - pruned accuracy (pp) on the same ``n`` items: paired where the discordant items were counted."""
    if pd.notna(row.get("correct_only_dense", float("nan"))):
        return accuracy.paired_exact(int(row["correct_only_dense"]), int(row["correct_only_pruned"]), n)
    return difference(correct_count(float(row["dense_accuracy_pct"]), n), correct_count(row["accuracy_pct"], n), n)


def _sensitivity(t, scope: str = "all_layers"):
    """Dense accuracy - accuracy right after L2-structured pruning of ``scope`` but the head, at every ratio up to the
    paper's chosen 0.9 (its words: over 0.1-0.9, "not sensitive"), paired on the same test items."""
    s, upto = t["sensitivity"], PAPER["chosen_ratio"]
    rows = s[(s["status"] == "ok") & (s["method"] == "ln_structured") & (s["ratio"] <= upto + 1e-9) & (
        s["scope"] == scope) & ~s["tensor"].astype(str).str.startswith("head.")].sort_values("ratio", kind="stable")
    if rows.empty:
        return f"no L2-structured {scope} point up to {upto:g} measured"
    n, dense = int(rows["test_items"].iloc[0]), float(rows["dense_accuracy_pct"].iloc[0])
    drop = {f"ratio {r.ratio:g}" if scope == "all_layers" else f"{r.tensor} at {r.ratio:g}": _drop(r, n)
            for _, r in rows.iterrows()}
    top = float(rows["ratio"].max())
    return Measured(drop, f"dense {dense:.1f}% on {n} test items, drop " + ", ".join(
        f"{k}: {accuracy.text(d)}" for k, d in drop.items()), joined(
        "" if top >= upto - 1e-9 else f"ratios measured up to {top:g} only, not the paper's {upto:g}",
        decidable(n), "the head is left out (its rows are the classes); if the paper's quantity is accuracy, {}-{} is "
        "chance level for balanced sentiment".format(*PAPER["sensitivity"])))


def _preference(t, device) -> Claim:
    acc = ", ".join(f"{x.method}: {x.accuracy_pct:.1f}%" for x in t["sensitivity"].itertuples() if x.status == "ok"
                    and x.scope == "all_layers" and x.method != "units" and abs(x.ratio - t["chosen"]) < 1e-9)
    return Claim("structured pruning is preferred to unstructured", "\"Compared structured vs unstructured -> "
                 "preferred structured\" (no number or reason given)", "accuracy right after pruning all layers but "
                 f"the head at {t['chosen']:g}: {acc or 'not measured'}", None, str(device), "none: any rule would be "
                 "ours (noise: not applicable)", "not checkable: the slides give no ground (accuracy, time, memory?)")


def _final(t, variant: str, cols=(), note: str = ""):
    """Dense / ``variant``'s times ``cols`` over the rounds (floored as times), else its / dense step peak (exact)."""
    fin, chosen, mib, paper = t["final_models"], t["chosen"], "train_step_peak_mem_mib", PAPER["chosen_ratio"]
    d, v = fin.loc["dense"], fin.loc[variant]
    note = joined(f"ratio {chosen:g}" + ("" if chosen == paper else f" (the paper's {paper})"), note)
    if not cols:
        return Measured({"peak": Spread.exact(v[mib] / d[mib])}, f"training-step peak {d[mib]:.1f} -> {v[mib]:.1f} "
                        f"MiB ({v[mib] - d[mib]:+.1f}), non-zero parameters {d['nonzero_params']:,} -> "
                        f"{v['nonzero_params']:,}", note)
    if f"round_{cols[0]}" in fin:  # paired rounds: dense's time / the variant's, round by round
        if fin["rounds"].iloc[0] < 2:
            return joined(ONE_ROUND, note)
        x = {_TIMES[c]: Paired.of_rounds(d, column=f"round_{c}") / Paired.of_rounds(v, column=f"round_{c}")
             for c in cols}
        how = f" ({int(fin['rounds'].iloc[0])} paired rounds, the variants' order reversed every other round)"
    else:  # a table stored before paired rounds: its rounds' range, floored as times
        if fin.get("timing_rounds", pd.Series([1])).iloc[0] < 2:
            return joined(ONE_ROUND, note)
        x = {_TIMES[c]: Spread.timed_range(d, c) / Spread.timed_range(v, c) for c in cols}
        how = " (unpaired: a table stored before paired rounds)"
    return Measured(x, ", ".join(f"{_TIMES[c]} {d[c]:.2f} -> {v[c]:.2f} s ({x[_TIMES[c]].text('.2f', 'x')})"
                                 for c in cols) + how, note)


SWEEP_CLAIMS = [  # judged on the DataLoader sweep alone (its rounds are added until these are decided)
    Declared("0 DataLoader workers give the fastest training epoch", "\"Optimal parameters are num_workers=0, "
             "batch_size=128\"", "training-epoch time at w workers / at 0 workers, paired round by round", above(1.0),
             lambda t: _sweep(t, workers=True), "w > 0 at each batch size measured"),
    Declared(f"batch size {PAPER['best_batch_size']} gives the fastest training epoch", "\"Optimal parameters are "
             "num_workers=0, batch_size=128. Due to a memory overhead?\"", "training-epoch time at batch b / at batch "
             f"{PAPER['best_batch_size']}, both at 0 workers (the paper's optimum), paired round by round", above(1.0),
             lambda t: _sweep(t, workers=False), "other batch size b measured")]
# The final models' claims, judged on final_comparison's table (its rounds are added until these are decided)
FINAL_CLAIMS = [d for variant, words, quoted, shown in (
    ("masked_rows", "structured masks (the paper's final model)", PAPER_MASKS, "settled by design, as above"),
    ("unit_pruned", "removing hidden units (beyond the paper)", "", "")) for d in (
    Declared(f"pruning by {words} speeds a training epoch plus a test pass up as much as the paper's",
             f"{quoted}train + test {_change(PAPER_TRAIN_TEST)}, like for like; with validation "
             f"{_change(PAPER_TIMED)}; its \"Overall Time\" {_change(PAPER['overall_s'])}",
             "dense / pruned (train epoch + test pass) time", above(PAPER_SPEEDUP, ".2f", "x"),
             functools.partial(_final, variant=variant, cols=["overall_s"], note=_OVERALL), beyond=not quoted,
             bound="the paper's {:.2f} / {:.2f} s".format(*PAPER_TRAIN_TEST), not_judged=shown and MASKS_BY_DESIGN),
    Declared(f"pruning by {words} cuts training and test time", f"{quoted}train epoch "
             f"{_change(PAPER['train_epoch_s'])}, test {_change(PAPER['test_s'])}", "dense / pruned time",
             above(1.0, ".2f", "x"), functools.partial(_final, variant=variant, cols=list(_TIMES)[1:]),
             "timed part (train epoch, test pass)", beyond=not quoted, not_judged=shown),
    Declared(f"pruning by {words} cuts memory", (quoted or "\"Gain in time and memory\": ") +
             "{:,} -> {:,} non-zero parameters".format(*PAPER["nonzero_params"]), "pruned / dense peak memory of a "
             "training step", below(1.0, ".2f", "x"), functools.partial(_final, variant=variant), beyond=not quoted,
             noise="noise: none, the bytes of the tensors held and allocated are exact",
             not_judged=shown or UNITS_BY_DESIGN))]
CLAIMS = [  # "{chosen}": the final models' ratio, filled in by check_claims
    Declared("the LSTM layers are the bottleneck of a training step", "\"the computations of the model are expensive "
             "in memory which is the main bottleneck but also take up most of the time\" (slides \"LSTM -> 1\"): "
             f"aten::cudnn_rnn {PAPER['lstm_gpu_share_pct']:.2f}% of self CUDA time (V100)", "the LSTM "
             "operators' share of a profiled step's self CPU time (GPU: self CUDA time)",
             above(MOST_PCT, unit="%"), lambda t: _share(t, "lstm_share_pct"),
             bound=f"the paper's words \"most of the time\": more than {MOST_PCT:g}%; its "
                   f"{PAPER['lstm_gpu_share_pct']:.2f}% is one V100's cuDNN kernel share, not a bound"),
    Declared("GPU kernels take most of a training step (the paper's execution summary)", f"Kernel "
             f"{PAPER['kernel_pct']:.2f}%, CPU Exec 14.48%, Memcpy 0.58%, DataLoader 0% of the average step",
             "GPU kernel time / wall time of the profiled steps",
             above(PAPER["kernel_pct"] - SHARE_TOLERANCE_PP, unit="%"), lambda t: _share(t, "kernel_share_pct"),
             gpu_only="kernel time", bound=f"the paper's Kernel {PAPER['kernel_pct']:.2f}% {_SHARE}"),
    *SWEEP_CLAIMS,
    Declared(f"accuracy is insensitive to the structured pruning ratio up to {PAPER['chosen_ratio']:g}", _SENSITIVE +
             "the slides do not name the quantity); chose 0.9", "dense accuracy - accuracy with all layers but the "
             "head pruned, on the same test items", below(SENSITIVITY_PP, unit=" pp"), _sensitivity,
             f"ratio up to the paper's {PAPER['chosen_ratio']:g}", **_ACCURACY),
    Declared(f"no layer alone is sensitive to the structured pruning ratio up to {PAPER['chosen_ratio']:g}", _SENSITIVE
             + "\"Tested layers' sensitivity to pruning ratio\"; its figure is lost)", "dense accuracy - accuracy with "
             "one layer pruned, on the same test items", below(SENSITIVITY_PP, unit=" pp"),
             lambda t: _sensitivity(t, "layer"), f"layer but the head at every ratio up to the paper's "
             f"{PAPER['chosen_ratio']:g}", **_ACCURACY),
    _preference,
    *FINAL_CLAIMS,
]


def check_claims(df: pd.DataFrame, device) -> list[Claim]:
    """Paper 003's LSTM claims (:data:`CLAIMS`) judged on :func:`measure`'s tables by ``cnnlab.claims``."""
    t = tables(df)
    t["chosen"], t["final_models"] = float(t["final_models"]["ratio"].max()), t["final_models"].set_index("variant")
    return [replace(c, claim=c.claim.format(chosen=t["chosen"])) for c in claims.check(CLAIMS, t, device)]
