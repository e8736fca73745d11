"""Study 03: Automatic Mixed Precision with "Automatic Memory Coalescing" (paper 001, Sec. IV-C, Fig. 5).

Paper 001 ran CIFAR ResNets at batch 1024 on a Tesla T4 in FP32 and with AMP + AMC, and saw a slight
*increase* in time per batch but a 45-50% *drop* in peak GPU memory allocated.

AMC is not a PyTorch feature, and the paper does not say what it ran. We take it to be what gives
convolutions coalesced memory access in PyTorch:

- the ``channels_last`` (NHWC) memory format: the channel dimension is innermost, so the threads of a
  convolution / implicit-GEMM kernel that work on neighbouring channels read consecutive addresses and
  the loads coalesce into few memory transactions; tensor-core convolution kernels also want NHWC (with
  NCHW, cuDNN inserts layout transposes around them);
- ``torch.backends.cudnn.benchmark = True``: cuDNN times its algorithms for each layer shape and layout
  and keeps the fastest (CUDA only: a CPU has no cuDNN, and rows record that).

Variants (:data:`VARIANTS`): ``fp32``; ``amp`` (``torch.autocast``: float16 on CUDA, bfloat16 on a CPU);
``amc`` (fp32 + AMC, to separate the two effects); ``amp+amc``; ``amp+amc+compile`` (+ ``torch.compile``).
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

import pandas as pd
import torch

from cnnlab import models
from cnnlab.claims import Claim
from cnnlab.profiling import benchmark
from cnnlab import config
from cnnlab.studies.common import (as_list, check_batch_sizes, check_models, check_threads, free_memory,
                                   run_sweep, set_threads, store_path)

VARIANTS = {
    "fp32": dict(amp=False, amc=False, compile=False),
    "amp": dict(amp=True, amc=False, compile=False),
    "amc": dict(amp=False, amc=True, compile=False),
    "amp+amc": dict(amp=True, amc=True, compile=False),
    "amp+amc+compile": dict(amp=True, amc=True, compile=True),
}
PAPER_MODELS = ["resnet20", "resnet32", "resnet44", "resnet56", "resnet110"]
PAPER_MEMORY_DROP_PCT = (45.0, 50.0)  # Sec. IV-C, T4, batch 1024
MEMORY_DROP_HELD_PCT = 40.0  # we call the claim held when every model's peak memory drops by at least this

PRESETS = {
    # CPU smoke run: two ResNets at batch 64, no torch.compile (its first call takes minutes on a CPU), one
    # intra-op thread (see batch_size.check_threads).
    "quick": dict(models=["resnet20", "resnet32"], batch_size=64, variants=["fp32", "amp", "amp+amc"],
                  warmup=2, repeats=5, threads=1, device=None),
    # One Colab GPU (a T4, like the paper's): the paper's models and batch size.
    "standard": dict(models=PAPER_MODELS, batch_size=1024, variants=["fp32", "amp", "amc", "amp+amc"],
                     warmup=5, repeats=20, threads=None, device=None),
    # The paper, plus torch.compile.
    "paper": dict(models=PAPER_MODELS, batch_size=1024,
                  variants=["fp32", "amp", "amc", "amp+amc", "amp+amc+compile"], warmup=10, repeats=50,
                  threads=None, device=None),
}
DATA_SOURCE = "synthetic"  # random CIFAR-shaped inputs: time and memory do not depend on pixel values


def check_variants(value) -> list[str]:
    """``value`` as a non-empty list of variant names that includes ``fp32`` (the baseline)."""
    names = as_list(value) if value is not None else []
    if not names:
        raise ValueError(f"variants is empty; valid variants: {', '.join(VARIANTS)}")
    for name in names:
        if name not in VARIANTS:
            raise ValueError(f"variants: {name!r} is not a known variant; valid variants: {', '.join(VARIANTS)}")
    if "fp32" not in names:
        raise ValueError(f"variants={names!r} must include 'fp32' (the baseline); "
                         f"valid variants: {', '.join(VARIANTS)}")
    return list(dict.fromkeys(names))


def validate(cfg):
    """Check (and normalise in place) a configuration built from :data:`PRESETS`; returns it.

    ValueError naming the parameter and its valid values for an unknown model, variant or device, a
    batch size that is not an integer >= 1, or bad warmup/repeats.
    """
    
    cfg.models = check_models(cfg.models)
    cfg.variants = check_variants(cfg.variants)
    sizes = check_batch_sizes(cfg.batch_size, "batch_size")
    if len(sizes) != 1:
        raise ValueError(f"batch_size={cfg.batch_size!r}: give one batch size (an integer >= 1), e.g. 1024")
    cfg.batch_size = sizes[0]
    for name, minimum in (("warmup", 0), ("repeats", 1)):
        setattr(cfg, name, config.positive_int(getattr(cfg, name), parameter=name, minimum=minimum))
    cfg.threads = check_threads(cfg.threads)
    if "amp+amc+compile" in cfg.variants and cfg.warmup < 1:
        raise ValueError("warmup=0 with variant 'amp+amc+compile': torch.compile needs warmup >= 1 so that "
                         "compilation is not timed")
    cfg.device = str(config.resolve_device(cfg.device))
    return cfg


def amp_dtype(device) -> str:
    """The autocast dtype AMP uses on ``device``: float16 on CUDA (the paper), bfloat16 on a CPU."""
    return "float16" if config.resolve_device(device).type == "cuda" else "bfloat16"


@contextlib.contextmanager
def cudnn_benchmark(enabled: bool):
    """Set ``torch.backends.cudnn.benchmark`` inside the block and restore it after."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = enabled
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


def measure_point(model: str, variant: str, *, batch_size: int, device, warmup: int, repeats: int) -> dict:
    """Time and peak memory of one (model, variant): see :func:`measure`."""
    v = VARIANTS[variant]
    dev = config.resolve_device(device)
    cuda = dev.type == "cuda"
    autocast = amp_dtype(dev) if v["amp"] else None
    fmt = "channels_last" if v["amc"] else "contiguous_format"
    torch.manual_seed(0)
    net = models.get(model).eval().to(dev)
    net = net.to(memory_format=torch.channels_last) if v["amc"] else net
    x = models.example_input(net, batch_size)
    compile_s, target = math.nan, net
    try:
        # cudnn.benchmark is part of AMC on CUDA, explicitly off otherwise so that fp32 and amp are not tuned
        with cudnn_benchmark(bool(v["amc"] and cuda)):
            if v["compile"]:
                target = torch.compile(net)
                first = x.to(dev).contiguous(memory_format=torch.channels_last)
                start = time.perf_counter()
                with torch.inference_mode(), torch.autocast(dev.type, dtype=config.to_dtype(autocast),
                                                            enabled=autocast is not None):
                    target(first)
                if cuda:
                    torch.cuda.synchronize(dev)
                compile_s = time.perf_counter() - start  # first call: tracing + code generation + one batch
                del first
            m = benchmark(target, x, device=dev, autocast=autocast, memory_format=fmt, warmup=warmup,
                          repeats=repeats, batch_size=batch_size)
    finally:
        del net, target, x
        if v["compile"]:
            torch.compiler.reset()  # drop compiled graphs (and their memory) before the next point
        free_memory()
    row = m.as_row()
    keep = ["latency_ms_median", "latency_ms_p10", "latency_ms_p90", "latency_ms_mean", "throughput_items_per_s",
            "peak_mem_alloc_mib", "peak_mem_increment_mib", "peak_mem_reserved_mib", "peak_mem_method",
            "peak_mem_missing_reason", "gpu_util_pct", "gpu_util_missing_reason", "batch_size", "repeats", "warmup",
            "input_location", "cpu_threads", "device", "device_name"]
    out = {k: row[k] for k in keep}
    out.update(amp=bool(v["amp"]), autocast=autocast or "off", memory_format=fmt,
               cudnn_benchmark=bool(v["amc"]) if cuda else math.nan,
               cudnn_benchmark_missing_reason=None if cuda else "CPU run: cuDNN is CUDA-only",
               compiled=bool(v["compile"]), compile_time_s=compile_s, data_source=DATA_SOURCE)
    return out


def measure(models_, variants, *, batch_size: int = 64, device="cpu", warmup: int = 2, repeats: int = 5,
            store: str | Path | None = None, progress: bool = True) -> pd.DataFrame:
    """Time per batch and peak memory of each model in each variant at one batch size (paper Fig. 5).

    One row per (model, variant): model, variant, status, error, point_time_s, finished_utc,
    latency_ms_median/p10/p90/mean (ms per batch), throughput_items_per_s, peak_mem_alloc_mib (MiB; see
    :func:`cnnlab.profiling.benchmark`), peak_mem_increment_mib, peak_mem_reserved_mib, gpu_util_pct (NaN
    on a CPU with reason), batch_size, amp (bool), autocast (dtype or "off"), memory_format,
    cudnn_benchmark (bool; NaN on a CPU with ``cudnn_benchmark_missing_reason``), compiled,
    compile_time_s (s, first call of a compiled model; NaN otherwise), settings, data_source, and
    :func:`add_changes`'s columns: mem_change_pct_vs_fp32 and time_change_pct_vs_fp32 (%, negative = less).
    """
    models_ = check_models(models_)
    variants = check_variants(variants)
    batch_size = config.positive_int(batch_size, parameter="batch_size")
    dev = str(config.resolve_device(device))

    def point(model, variant):
        return measure_point(model, variant, batch_size=batch_size, device=dev, warmup=warmup, repeats=repeats)

    df = run_sweep(point, {"model": models_, "variant": variants}, store, "AMP + AMC", progress)
    return add_changes(df)


def add_changes(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with mem_change_pct_vs_fp32 and time_change_pct_vs_fp32: 100 * (variant - fp32) / fp32 for
    peak_mem_alloc_mib and latency_ms_median, per model (NaN where the model's fp32 point failed)."""
    out = df.copy()
    ok = out[out["status"] == "ok"]
    base = ok[ok["variant"] == "fp32"].set_index("model")
    for col, metric in (("mem_change_pct_vs_fp32", "peak_mem_alloc_mib"),
                        ("time_change_pct_vs_fp32", "latency_ms_median")):
        ref = out["model"].map(base[metric]) if metric in base else math.nan
        out[col] = 100.0 * (out[metric] - ref) / ref if metric in out else math.nan
    return out


def check_claims(df: pd.DataFrame, *, device: str) -> list[Claim]:
    """The claims of Sec. IV-C checked on :func:`measure`'s result.

    1. AMP + AMC cuts peak memory by 45-50% (a T4 GPU claim: n/a on a CPU; held on a GPU when every
       model drops by at least :data:`MEMORY_DROP_HELD_PCT` %);
    2. AMP + AMC is slightly slower per batch than fp32 (reported as measured, any device).
    """
    dev = str(device)
    on_cpu = torch.device(dev).type == "cpu"  # no availability check: results may come from another machine
    ok = df[(df["status"] == "ok") & (df["variant"] == "amp+amc")].dropna(subset=["mem_change_pct_vs_fp32"])
    amp_name = "autocast bfloat16" if on_cpu else "autocast float16"
    drops = ", ".join(f"{r.model} {r.mem_change_pct_vs_fp32:+.0f}%" for r in ok.itertuples())
    paper_mem = f"-{PAPER_MEMORY_DROP_PCT[0]:.0f} to -{PAPER_MEMORY_DROP_PCT[1]:.0f}% on a Tesla T4 (Fig. 5 bottom)"
    checks = []
    if on_cpu:
        checks.append(Claim(claim="AMP + AMC cuts peak memory allocated by 45-50%", paper=paper_mem,
                            ours=(drops + f" ({amp_name}, channels_last)") if drops else "not measured", held=None,
                            device=dev, note="a GPU claim (CUDA allocator, fp16 on a T4); this CPU's numbers are "
                                             "shown for reference"))
    else:
        checks.append(Claim(claim="AMP + AMC cuts peak memory allocated by 45-50%", paper=paper_mem,
                            ours=drops or "not measured",
                            held=bool((ok["mem_change_pct_vs_fp32"] <= -MEMORY_DROP_HELD_PCT).all())
                            if len(ok) else None,
                            device=dev, note=f"held = every model drops by at least {MEMORY_DROP_HELD_PCT:.0f}%"
                            if len(ok) else "no amp+amc point measured"))
    slower = ", ".join(f"{r.model} {r.time_change_pct_vs_fp32:+.0f}%" for r in ok.itertuples())
    checks.append(Claim(claim="AMP + AMC is slightly slower per batch than fp32",
                        paper="Fig. 5 top: a slight increase in average time per batch", ours=slower or "not measured",
                        held=bool((ok["time_change_pct_vs_fp32"] > 0).all()) if len(ok) else None, device=dev,
                        note=(f"AMP is {amp_name} here" if len(ok) else "no amp+amc point measured")))
    return checks


def plot_variants(df: pd.DataFrame):
    """Paper Fig. 5: time per batch (top) and peak memory allocated (bottom) per model, one bar per variant;
    the bottom panel writes each variant's % change against fp32 on its bar."""
    import seaborn as sns

    from cnnlab import plotting

    ok = df[df["status"] == "ok"]
    order = [v for v in VARIANTS if v in set(ok["variant"])]
    names = list(dict.fromkeys(ok["model"]))
    fig, (top, bottom) = plotting.plt.subplots(2, 1, figsize=(max(7, 1.6 * ok["model"].nunique() + 3), 8),
                                               sharex=True)
    for ax, col, title in ((top, "latency_ms_median", "Time per batch (median, bars: p10-p90)"),
                           (bottom, "peak_mem_alloc_mib", "Peak memory allocated")):
        sns.barplot(data=ok, x="model", y=col, order=names, hue="variant", hue_order=order, ax=ax, errorbar=None)
        ax.set_ylabel(plotting.label_for(col))
        ax.set_title(f"{title}, batch {int(ok['batch_size'].iloc[0])}" if len(ok) else title)
    for container, variant in zip(top.containers, order):  # the spread of the timed batches
        rows = ok[ok["variant"] == variant].set_index("model").reindex(names)
        x = [bar.get_x() + bar.get_width() / 2 for bar in container]
        low = (rows["latency_ms_median"] - rows["latency_ms_p10"]).to_numpy(dtype=float)
        high = (rows["latency_ms_p90"] - rows["latency_ms_median"]).to_numpy(dtype=float)
        top.errorbar(x, rows["latency_ms_median"].to_numpy(dtype=float), yerr=[low, high], fmt="none",
                     ecolor="0.2", capsize=3, lw=1)
    for container, variant in zip(bottom.containers, order):
        rows = ok[ok["variant"] == variant].set_index("model")["mem_change_pct_vs_fp32"]
        labels = [] if variant == "fp32" else [f"{rows.get(name, math.nan):+.0f}%" for name in names]
        if labels:
            bottom.bar_label(container, labels=labels, fontsize=8)
    bottom.get_legend().remove()
    top.legend(title="variant", fontsize=8)
    bottom.set_xlabel("Model")
    fig.tight_layout()
    return fig


__all__ = ["MEMORY_DROP_HELD_PCT", "PAPER_MEMORY_DROP_PCT", "PRESETS", "VARIANTS", "add_changes", "amp_dtype",
           "check_claims", "check_variants", "cudnn_benchmark", "measure", "plot_variants", "set_threads", "store_path",
           "validate"]
