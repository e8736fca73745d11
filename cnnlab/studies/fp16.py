"""Study 02: FP32 against reduced precision for inference: time, memory, accuracy (paper 001, Sec. IV-B).

Paper 001 ran a ResNet-110 trained in FP32 on CIFAR-10 under ``torch.cuda.amp.autocast()`` (FP16) and
reported time and memory per batch size (its Fig. 3: slightly *slower* at small batches, less memory at
large ones) and test accuracy and loss (Fig. 4: no significant change). We run the same comparison with
three ways of lowering precision:

- ``autocast``: ``torch.autocast`` (mixed precision: matmuls/convolutions in 16 bits, sensitive ops in
  FP32). It uses float16 on CUDA, as the paper did, and bfloat16 on a CPU, where PyTorch's CPU autocast
  defaults to bfloat16; rows say which (``autocast-fp16`` / ``autocast-bf16``).
- ``fp16``: the whole model and input converted with ``model.half()`` (pure FP16, no FP32 islands).
- ``bf16``: the same with bfloat16 (optional).

Functions: :func:`resolve_precisions`, :func:`timing` (Fig. 3), :func:`accuracy` (Fig. 4),
:func:`check_claims`, :func:`plot_time_memory`, :func:`plot_accuracy`.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pandas as pd
import torch

from cnnlab import data, models
from cnnlab.claims import Claim
from cnnlab.profiling import benchmark
from cnnlab import config
from cnnlab.studies.common import (as_list, check_batch_sizes, check_models, check_threads, free_memory,
                                   plain_log_ticks, run_sweep, set_threads, store_path)

# User-facing names -> what they do. "autocast" resolves per device (float16 on CUDA, bfloat16 on CPU).
PRECISIONS = {
    "fp32": dict(dtype=None, autocast=None),
    "autocast": None,  # resolved by :func:`resolve_precisions`
    "autocast-fp16": dict(dtype=None, autocast="float16"),
    "autocast-bf16": dict(dtype=None, autocast="bfloat16"),
    "fp16": dict(dtype="float16", autocast=None),
    "bf16": dict(dtype="bfloat16", autocast=None),
}
PAPER_BATCH_SIZES = [2**k for k in range(11)]

PRESETS = {
    # CPU smoke run: ResNet-20 trained on the real, offline `digits` set (recipe "quick"); fp16 (model.half())
    # is timed on a CPU only at the batch sizes in cpu_fp16_batch_sizes (it can be ~25x slower than fp32
    # on CPUs without native fp16 arithmetic). One intra-op thread: see batch_size.check_threads.
    "quick": dict(model="resnet20", dataset="digits", synthetic=False, recipe="quick",
                  precisions=["fp32", "autocast", "fp16"], batch_sizes=[8, 32, 128], cpu_fp16_batch_sizes=[8],
                  warmup=2, repeats=5, eval_batch_size=128, threads=1, device=None),
    # One Colab GPU: the paper's model, trained on CIFAR-10 with the standard (30-epoch) recipe.
    "standard": dict(model="resnet110", dataset="cifar10", synthetic=False, recipe="standard",
                     precisions=["fp32", "autocast", "fp16"], batch_sizes=[1, 4, 16, 64, 256, 1024],
                     cpu_fp16_batch_sizes=[1, 4, 16], warmup=5, repeats=20, eval_batch_size=512, threads=None,
                     device=None),
    # The paper: batch sizes 1 ... 1024, the full-length recipe.
    "paper": dict(model="resnet110", dataset="cifar10", synthetic=False, recipe="paper",
                  precisions=["fp32", "autocast", "fp16"], batch_sizes=PAPER_BATCH_SIZES,
                  cpu_fp16_batch_sizes=[1, 2, 4, 8, 16], warmup=10, repeats=50, eval_batch_size=512, threads=None,
                  device=None),
}
ACCURACY_TOLERANCE_PP = 0.5  # issue 4: "accuracy changes by at most 0.5 percentage points"
DATA_SOURCE_TIMING = "synthetic"  # random inputs of the dataset's shape: time does not depend on pixel values


# ------------------------------------------------------------------------------------------------ validation

def resolve_precisions(precisions, device) -> list[dict]:
    """The precisions to run on ``device``: one dict each with ``precision`` (the label written in every
    row: fp32, autocast-fp16, autocast-bf16, fp16, bf16), ``dtype`` and ``autocast`` (canonical dtype
    names or None), ``slow_on_cpu`` (fp16 arithmetic on a CPU). ``"autocast"`` becomes autocast-fp16 on
    CUDA and autocast-bf16 on a CPU. Duplicates after resolution are dropped. ValueError for an unknown
    name or a list without ``fp32`` (the baseline every change is measured against).
    """
    names = as_list(precisions) if precisions is not None else []
    if not names:
        raise ValueError(f"precisions is empty; valid precisions: {', '.join(PRECISIONS)}")
    dev = config.resolve_device(device)
    out, seen = [], set()
    for name in names:
        if name not in PRECISIONS:
            raise ValueError(f"precisions: {name!r} is not a known precision; "
                             f"valid precisions: {', '.join(PRECISIONS)}")
        if name == "autocast":
            name = "autocast-fp16" if dev.type == "cuda" else "autocast-bf16"
        if name in seen:
            continue
        seen.add(name)
        spec = PRECISIONS[name]
        out.append({"precision": name, **spec,
                    "slow_on_cpu": dev.type == "cpu" and "float16" in (spec["dtype"], spec["autocast"])})
    if "fp32" not in seen:
        raise ValueError(f"precisions={names!r} must include 'fp32' (the baseline); valid precisions: "
                         f"{', '.join(PRECISIONS)}")
    return out


def validate(cfg):
    """Check (and normalise in place) a configuration built from :data:`PRESETS`; returns it.

    ValueError naming the parameter and its valid values for an unknown model, dataset, recipe,
    precision or device, and for batch sizes that are not integers >= 1.
    """
    from cnnlab import train
    
    cfg.model = check_models(cfg.model, "model")
    if len(cfg.model) != 1:
        raise ValueError(f"model={cfg.model!r}: give one model name; valid models: "
                         f"{', '.join(m for m in models.names() if models.spec(m).input_kind == 'image')}")
    cfg.model = cfg.model[0]
    image_sets = [n for n in data.names() if data.info(n).input_kind == "image"]
    if cfg.dataset not in image_sets:
        raise ValueError(f"dataset={cfg.dataset!r} is not a known image dataset; "
                         f"valid datasets: {', '.join(image_sets)}")
    if not isinstance(cfg.recipe, train.Recipe) and cfg.recipe not in train.RECIPES:
        raise ValueError(f"recipe={cfg.recipe!r} is not valid; valid recipes: {', '.join(train.RECIPES)} "
                         "(or a cnnlab.train.Recipe)")
    if not isinstance(cfg.synthetic, bool):
        raise ValueError(f"synthetic={cfg.synthetic!r} must be True or False")
    cfg.device = str(config.resolve_device(cfg.device))
    resolve_precisions(cfg.precisions, cfg.device)  # raises for unknown names or a missing fp32 baseline
    cfg.batch_sizes = check_batch_sizes(cfg.batch_sizes)
    cfg.cpu_fp16_batch_sizes = check_batch_sizes(cfg.cpu_fp16_batch_sizes, "cpu_fp16_batch_sizes") \
        if cfg.cpu_fp16_batch_sizes else []
    for name, minimum in (("warmup", 0), ("repeats", 1), ("eval_batch_size", 1)):
        setattr(cfg, name, config.positive_int(getattr(cfg, name), parameter=name, minimum=minimum))
    cfg.threads = check_threads(cfg.threads)
    return cfg


# ------------------------------------------------------------------------------------------------ measurements

def _copy(model: torch.nn.Module) -> torch.nn.Module:
    """An eval-mode copy of ``model`` (measurements convert models in place; the trained one must stay FP32)."""
    return copy.deepcopy(model).eval()


def timing_point(model: torch.nn.Module, precision: str, batch_size: int, *, device, warmup: int, repeats: int) -> dict:
    """Time and peak memory of one (precision, batch size): see :func:`timing`."""
    p = PRECISIONS[precision]
    dev = config.resolve_device(device)
    net = _copy(model)
    x = models.example_input(net, batch_size)  # fp32 on the host; benchmark casts it for dtype variants
    try:
        m = benchmark(net, x, device=dev, dtype=p["dtype"], autocast=p["autocast"], warmup=warmup, repeats=repeats)
    finally:
        del net, x
        free_memory()
    row = m.as_row()
    keep = ["latency_ms_median", "latency_ms_p10", "latency_ms_p90", "latency_ms_mean", "throughput_items_per_s",
            "peak_mem_alloc_mib", "peak_mem_increment_mib", "peak_mem_reserved_mib", "peak_mem_method",
            "peak_mem_missing_reason", "gpu_util_pct", "gpu_util_missing_reason", "dtype", "autocast", "repeats",
            "warmup", "input_location", "cpu_threads", "device", "device_name"]
    out = {k: row[k] for k in keep}
    out["dtype"] = out["dtype"] or "float32"  # benchmark leaves the model's dtype (fp32) as None
    out["autocast"] = out["autocast"] or "off"
    out["data_source"] = DATA_SOURCE_TIMING
    return out


def timing(model: torch.nn.Module, precisions, batch_sizes, *, device="cpu", warmup: int = 2, repeats: int = 5,
           cpu_fp16_batch_sizes=(8,), store: str | Path | None = None, progress: bool = True) -> pd.DataFrame:
    """Inference time and peak memory per (precision, batch size) of ``model`` (paper Fig. 3).

    ``model`` stays untouched (each point converts a copy). Inputs are random tensors of the model's
    input shape (``data_source="synthetic"``). On a CPU, precisions with fp16 arithmetic are timed only at
    ``cpu_fp16_batch_sizes``; the other points are rows with ``status="skipped"`` and the reason in
    ``error``.

    Columns: precision, batch_size, status, error, point_time_s, finished_utc, latency_ms_median/p10/p90/mean
    (ms per batch), throughput_items_per_s, peak_mem_alloc_mib / peak_mem_increment_mib (MiB; see
    :func:`cnnlab.profiling.benchmark`), peak_mem_reserved_mib, gpu_util_pct (NaN on a CPU, with reason),
    dtype (of weights and inputs), autocast (autocast dtype, or "off"), settings, data_source.
    """
    variants = resolve_precisions(precisions, device)
    batch_sizes = check_batch_sizes(batch_sizes)
    slow_sizes = set(check_batch_sizes(cpu_fp16_batch_sizes, "cpu_fp16_batch_sizes")) if cpu_fp16_batch_sizes else set()
    dev = str(config.resolve_device(device))
    points, skipped = [], []
    for v in variants:
        for bs in batch_sizes:
            if v["slow_on_cpu"] and bs not in slow_sizes:
                skipped.append({"precision": v["precision"], "batch_size": bs, "status": "skipped",
                                "error": f"{v['precision']} on a CPU is timed only at cpu_fp16_batch_sizes="
                                         f"{sorted(slow_sizes)}: fp16 arithmetic can be ~25x slower than fp32 there",
                                "dtype": v["dtype"] or "float32", "autocast": v["autocast"] or "off", "device": dev})
            else:
                points.append({"precision": v["precision"], "batch_size": bs})

    def point(precision, batch_size):
        return timing_point(model, precision, batch_size, device=dev, warmup=warmup, repeats=repeats)

    measured = run_sweep(point, points, store, "precision: time and memory", progress) if points else pd.DataFrame()
    df = pd.concat([measured, pd.DataFrame(skipped)], ignore_index=True) if skipped else measured
    order = {v["precision"]: i for i, v in enumerate(variants)}
    return df.sort_values(["precision", "batch_size"], key=lambda s: s.map(order) if s.name == "precision" else s,
                          ignore_index=True)


def accuracy(model: torch.nn.Module, precisions, *, dataset: str = "digits", synthetic: bool = False, device="cpu",
             batch_size: int = 128) -> pd.DataFrame:
    """Test accuracy and loss of ``model`` in each precision on the test split of ``dataset`` (paper Fig. 4).

    One row per precision: precision, dtype, autocast (dtype or "off"), accuracy_pct (%), loss (mean
    cross-entropy, nats), num_examples, accuracy_change_pp (percentage points vs fp32), loss_change (vs fp32),
    eval_time_s (s), dataset, data_source, device. ``model`` stays untouched.
    """
    from cnnlab import train

    variants = resolve_precisions(precisions, device)
    dev = config.resolve_device(device)
    test_set = data.load(dataset, "test", synthetic=synthetic)
    loader = data.make_loader(test_set, config.positive_int(batch_size, parameter="batch_size"))
    rows = []
    for v in variants:
        net = _copy(model)
        start = time.perf_counter()
        result = train.evaluate(net, loader, device=dev, dtype=config.to_dtype(v["dtype"]),
                                autocast=config.to_dtype(v["autocast"], parameter="autocast"))
        elapsed = time.perf_counter() - start
        del net
        free_memory()
        rows.append({"precision": v["precision"], "dtype": v["dtype"] or "float32", "autocast": v["autocast"] or "off",
                     "accuracy_pct": result["accuracy_pct"], "loss": result["loss"],
                     "num_examples": result["num_examples"], "eval_time_s": elapsed, "dataset": dataset,
                     "data_source": test_set.data_source, "device": str(dev)})
    df = pd.DataFrame(rows)
    base = df.set_index("precision").loc["fp32"]
    df["accuracy_change_pp"] = df["accuracy_pct"] - base["accuracy_pct"]
    df["loss_change"] = df["loss"] - base["loss"]
    return df


# ------------------------------------------------------------------------------------------------ claims

def check_claims(times: pd.DataFrame, acc: pd.DataFrame, *, device: str) -> list[Claim]:
    """The claims of Sec. IV-B checked on :func:`timing` and :func:`accuracy` results.

    1. accuracy changes by at most 0.5 percentage points in every reduced precision (any device);
    2. peak memory at the largest batch is lower in reduced precision (GPU claim: n/a on a CPU);
    3. autocast is slightly slower than fp32 at the smallest batch (reported as measured, any device).
    """
    dev = str(device)
    on_cpu = torch.device(dev).type == "cpu"  # no availability check: results may come from another machine
    checks = []
    reduced = acc[acc["precision"] != "fp32"]
    fp32_acc = float(acc.loc[acc["precision"] == "fp32", "accuracy_pct"].iloc[0])
    checks.append(Claim(
        claim=f"test accuracy changes by at most {ACCURACY_TOLERANCE_PP} percentage points in reduced precision",
        paper="Fig. 4: no significant drop in accuracy or rise in loss",
        ours=f"fp32 {fp32_acc:.2f}%; " + ", ".join(
            f"{r.precision} {r.accuracy_change_pp:+.2f} pp (loss {r.loss_change:+.4f})" for r in reduced.itertuples()),
        held=bool((reduced["accuracy_change_pp"].abs() <= ACCURACY_TOLERANCE_PP).all()) if len(reduced) else None,
        device=dev, note=f"{acc['dataset'].iloc[0]} test set ({acc['data_source'].iloc[0]}, "
                         f"{int(acc['num_examples'].iloc[0])} images)" if len(reduced)
        else "no reduced precision evaluated"))

    ok = times[times["status"] == "ok"]
    largest = ok["batch_size"].max() if len(ok) else None
    at = ok[ok["batch_size"] == largest].set_index("precision")
    mem = at["peak_mem_alloc_mib"] if len(at) else pd.Series(dtype=float)
    lower = {p: mem[p] < mem["fp32"] for p in mem.index if p != "fp32"} if "fp32" in mem.index else {}
    ours = ", ".join(f"{p} {mem[p]:.1f} MiB" for p in mem.index) + (f" at batch {largest}" if largest else "")
    if on_cpu:
        checks.append(Claim(claim="peak memory at the largest batch is lower in reduced precision",
                            paper="Fig. 3 bottom: noticeably less memory at large batches (FP16 activations)",
                            ours=ours or "not measured", held=None, device=dev,
                            note="a GPU claim (CUDA allocator, fp16 activations); on this CPU the allocator-event "
                                 "peak is shown for reference only"))
    else:
        checks.append(Claim(claim="peak memory at the largest batch is lower in reduced precision",
                            paper="Fig. 3 bottom: noticeably less memory at large batches (FP16 activations)",
                            ours=ours or "not measured", held=all(lower.values()) if lower else None, device=dev,
                            note="" if lower else "fp32 and a reduced precision were not both measured there"))

    auto = [p for p in ok["precision"].unique() if p.startswith("autocast")]
    smallest = ok["batch_size"].min() if len(ok) else None
    small = ok[ok["batch_size"] == smallest].set_index("precision")["latency_ms_median"] if len(ok) else pd.Series()
    if auto and "fp32" in small.index and auto[0] in small.index:
        ratio = small[auto[0]] / small["fp32"]
        checks.append(Claim(claim="autocast is slightly slower than fp32 at small batches",
                            paper="Fig. 3 top: a slight increase in time at small batch sizes",
                            ours=f"{auto[0]} / fp32 time per batch at batch {smallest}: {ratio:.2f}x "
                                 f"({small[auto[0]]:.3g} vs {small['fp32']:.3g} ms)",
                            held=bool(ratio > 1), device=dev,
                            note="on a CPU autocast runs in bfloat16, not the paper's float16" if on_cpu else ""))
    else:
        checks.append(Claim(claim="autocast is slightly slower than fp32 at small batches",
                            paper="Fig. 3 top: a slight increase in time at small batch sizes", ours="not measured",
                            held=None, device=dev, note="autocast and fp32 were not both measured"))
    return checks


# ------------------------------------------------------------------------------------------------ figures

def plot_time_memory(times: pd.DataFrame):
    """Paper Fig. 3: time per batch (top) and peak memory (bottom) against batch size, one line per precision."""
    import seaborn as sns

    from cnnlab import plotting

    ok = times[times["status"] == "ok"]
    sizes = sorted(set(ok["batch_size"]))
    fig, (top, bottom) = plotting.plt.subplots(2, 1, figsize=(7, 8), sharex=True)
    for ax, col, title in ((top, "latency_ms_median", "Inference time per batch"),
                           (bottom, "peak_mem_alloc_mib", "Peak memory allocated")):
        sns.lineplot(data=ok, x="batch_size", y=col, hue="precision", style="precision", markers=True,
                     dashes=False, ax=ax, markersize=8)
        ax.set_yscale("log")
        plain_log_ticks(ax)
        plotting.log2_batch_axis(ax, values=sizes)
        ax.set_ylabel(plotting.label_for(col))
        ax.set_title(title)
    bottom.get_legend().remove()
    skipped = times[times["status"] == "skipped"]
    if len(skipped):
        text = "; ".join(f"{p}: batch {', '.join(str(b) for b in g['batch_size'])} not timed"
                         for p, g in skipped.groupby("precision"))
        fig.text(0.5, -0.01, text + " (see error column)", ha="center", fontsize=8, color="0.3")
    fig.tight_layout()
    return fig


def plot_accuracy(acc: pd.DataFrame):
    """Paper Fig. 4: test accuracy (left) and loss (right) per precision, values written on the bars."""
    import seaborn as sns

    from cnnlab import plotting

    fig, (left, right) = plotting.plt.subplots(1, 2, figsize=(9, 4))
    for ax, col, fmt in ((left, "accuracy_pct", "{:.2f}"), (right, "loss", "{:.4f}")):
        sns.barplot(data=acc, x="precision", y=col, hue="precision", ax=ax, legend=False)
        for patch, value in zip(ax.patches, acc[col]):
            ax.annotate(fmt.format(value), (patch.get_x() + patch.get_width() / 2, patch.get_height()),
                        ha="center", va="bottom", fontsize=9)
        ax.set_ylabel("Test accuracy (%)" if col == "accuracy_pct" else "Test loss (cross-entropy, nats)")
        ax.set_xlabel("Precision")
    left.set_ylim(0, 105)
    left.set_title("Test accuracy")
    right.set_title("Test loss")
    fig.suptitle(f"{acc['dataset'].iloc[0]} test set ({int(acc['num_examples'].iloc[0])} images, "
                 f"{acc['data_source'].iloc[0]})", fontsize=10)
    fig.tight_layout()
    return fig


__all__ = ["ACCURACY_TOLERANCE_PP", "PRECISIONS", "PRESETS", "accuracy", "check_claims", "plot_accuracy",
           "plot_time_memory", "resolve_precisions", "set_threads", "store_path", "timing", "validate"]
