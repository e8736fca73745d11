"""Study 08: validation against Li et al. 2016: whole-network speed-up of six convolution strategies.

Paper 001 (Maji et al., Sec. IV-E, Fig. 7) reproduces the network-level results of Li, Yang, Feng, Chakradhar &
Zhou 2016 ("Optimizing Memory Efficiency for Deep Convolutional Neural Networks on GPUs", SC'16, arXiv
1610.03618): five CNNs (LeNet, CIFAR, AlexNet, ZFNet, VGG) under six implementations, cuDNN-MM, cuDNN-FFT,
cuDNN-FFT-T, cuda-convnet, cuDNN-Best and Opt, normalised to cuDNN-MM. It reads: no single kernel wins everywhere
(cuda-convnet tops LeNet and CIFAR, cuDNN the larger networks); cuDNN-Best narrows the gap but trails Opt; Opt is
fastest across the board, 5.6x on LeNet and roughly 2x on AlexNet, ZFNet and VGG.

cnnlab's counterparts are the strategies of ``cnnlab.kernels.strategies`` (:data:`PAPER_NAMES`): gemm, fft,
fft_tiled, direct (cnnlab's Triton kernel, timed only on a GPU), best (per-layer pick) and opt (BN folded,
channels_last, cuDNN autotuning). :func:`measure` times every (network, strategy), :func:`add_speedups`
normalises to gemm, :func:`paper_reference` holds the paper's numbers, :func:`check_claims` and
:func:`plot_speedups` (laid out like Fig. 7) compare them.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from cnnlab import models
from cnnlab.claims import Claim
from cnnlab.kernels import apply_strategy, strategies
from cnnlab.profiling import benchmark
from cnnlab import config
from cnnlab.studies.common import as_list, check_threads, free_memory, run_sweep, set_threads, store_path
from cnnlab.kernels.triton_conv import TRITON_CPU_REASON, triton_check_device, triton_untimed_reason

# The paper's network names -> registry model, build options and input shape (C, H, W). Paper 001 does not give
# the inputs; these are each network's own paper's (see the notebook for the choices).
NETWORKS = {
    "LeNet": dict(model="lenet5", options={"in_channels": 1}, input_shape=(1, 32, 32)),  # MNIST, padded to 32
    "CIFAR": dict(model="convnet_cifar", options={}, input_shape=(3, 32, 32)),
    "AlexNet": dict(model="alexnet_imagenet", options={}, input_shape=(3, 224, 224)),
    "ZFNet": dict(model="zfnet", options={}, input_shape=(3, 224, 224)),
    "VGG": dict(model="vgg16", options={}, input_shape=(3, 224, 224)),  # model and size: vgg_model, vgg_image_size
}
VGG_MODELS = ("vgg11", "vgg13", "vgg16", "vgg19")
# Paper order of Fig. 7 and the paper's name for each cnnlab strategy.
PAPER_NAMES = {"gemm": "cuDNN-MM", "fft": "cuDNN-FFT", "fft_tiled": "cuDNN-FFT-T", "direct": "cuda-convnet",
               "best": "cuDNN-Best", "opt": "Opt"}
STRATEGIES = tuple(PAPER_NAMES)
SINGLE_KERNELS = ("gemm", "fft", "fft_tiled", "direct")  # one algorithm for every layer (not best, not opt)
BASELINE = "gemm"  # cuDNN-MM: every speed-up is relative to it
OPTIONAL = ("native",)  # torch's own F.conv2d, as an extra reference bar if asked for
# Sec. IV-E, Key observation 3: "5.6x on LeNet and roughly 2x on AlexNet, ZFNet, and VGG". No number is given
# for CIFAR or for any other strategy.
PAPER_OPT_SPEEDUP = {"LeNet": (5.6, "5.6x"), "AlexNet": (2.0, "roughly 2x"), "ZFNet": (2.0, "roughly 2x"),
                     "VGG": (2.0, "roughly 2x")}
DIRECT_CPU_REASON = TRITON_CPU_REASON  # "Triton kernels are timed only on a GPU"
DIRECT_CPU_DETAIL = (f"{DIRECT_CPU_REASON}: on a CPU the direct strategy (cnnlab's Triton kernel) runs only in "
                     "Triton's interpreter (TRITON_INTERPRET=1), orders of magnitude slower than compiled code")
DATA_SOURCE = "synthetic"  # random inputs of each network's shape: time does not depend on pixel values

PRESETS = {
    # CPU smoke run: batch 2; VGG on its 32x32 CIFAR input (VGG-16's FFT strategies at 224x224 take ~30 s per pass
    # on one core); at least one timed batch after the untimed first call, more up to 0.3 s of timing (the FFT
    # strategies take 1-2.5 s per pass on AlexNet and ZFNet); best times each candidate once per layer; the
    # interpreted Triton kernel is checked on the two small networks only (VGG-16 would take ~100 s); one
    # intra-op thread.
    "quick": dict(networks=list(NETWORKS), strategies=list(STRATEGIES), batch_size=2, vgg_model="vgg16",
                  vgg_image_size=32, direct_check_networks=["LeNet", "CIFAR"], best_repeats=1, warmup=0, repeats=1,
                  min_time_s=0.3, threads=1, device=None),
    # One GPU: every network at its paper's input size.
    "standard": dict(networks=list(NETWORKS), strategies=list(STRATEGIES), batch_size=32, vgg_model="vgg16",
                     vgg_image_size=224, direct_check_networks=list(NETWORKS), best_repeats=3, warmup=3, repeats=20,
                     min_time_s=1.0, threads=None, device=None),
    "paper": dict(networks=list(NETWORKS), strategies=list(STRATEGIES), batch_size=128, vgg_model="vgg16",
                  vgg_image_size=224, direct_check_networks=list(NETWORKS), best_repeats=5, warmup=10, repeats=50,
                  min_time_s=2.0, threads=None, device=None),
}

MEASURE_COLUMNS = [
    "model", "input_shape", "batch_size", "latency_ms_median", "latency_ms_p10", "latency_ms_p90", "latency_ms_mean",
    "time_missing_reason", "throughput_items_per_s", "first_call_s", "best_choices", "rel_error_vs_native",
    "gpu_util_pct",
    "gpu_util_missing_reason", "warmup", "repeats", "cpu_threads", "device", "device_name", "data_source",
]


# ------------------------------------------------------------------------------------------------ validation

def check_networks(value, parameter: str = "networks") -> list[str]:
    """``value`` as a non-empty list of network names from :data:`NETWORKS` (the paper's spelling)."""
    names = as_list(value) if value is not None else []
    if not names:
        raise ValueError(f"{parameter} is empty; valid networks: {', '.join(NETWORKS)}")
    for name in names:
        if name not in NETWORKS:
            raise ValueError(f"{parameter}: {name!r} is not a known network; valid networks: {', '.join(NETWORKS)}")
    return list(dict.fromkeys(names))


def check_strategies(value) -> list[str]:
    """``value`` as a list of strategies (:data:`STRATEGIES`, optionally "native") that includes the gemm baseline."""
    names = as_list(value) if value is not None else []
    valid = ", ".join(STRATEGIES + OPTIONAL)
    if not names:
        raise ValueError(f"strategies is empty; valid strategies: {valid}")
    for name in names:
        if name not in STRATEGIES + OPTIONAL:
            raise ValueError(f"strategies: {name!r} is not a known strategy; valid strategies: {valid}")
    if BASELINE not in names:
        raise ValueError(f"strategies={names!r} must include {BASELINE!r} (cuDNN-MM, the baseline every speed-up "
                         f"is relative to); valid strategies: {valid}")
    order = STRATEGIES + OPTIONAL
    return sorted(dict.fromkeys(names), key=order.index)


def check_vgg_model(value) -> str:
    if value not in VGG_MODELS:
        raise ValueError(f"vgg_model={value!r} is not valid; valid: {', '.join(VGG_MODELS)}")
    return value


def validate(cfg):
    """Check (and normalise in place) a configuration built from :data:`PRESETS`; returns it.

    Raises ValueError naming the parameter and its valid values.
    """
    
    cfg.networks = check_networks(cfg.networks)
    cfg.direct_check_networks = check_networks(cfg.direct_check_networks, "direct_check_networks")
    cfg.strategies = check_strategies(cfg.strategies)
    cfg.vgg_model = check_vgg_model(cfg.vgg_model)
    for name, minimum in (("batch_size", 1), ("vgg_image_size", 32), ("best_repeats", 1), ("warmup", 0),
                          ("repeats", 1)):
        setattr(cfg, name, config.positive_int(getattr(cfg, name), parameter=name, minimum=minimum))
    value = cfg.min_time_s
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 600:
        raise ValueError(f"min_time_s={value!r} must be a number of seconds from 0 to 600")
    cfg.min_time_s = float(value)
    cfg.threads = check_threads(cfg.threads)
    cfg.device = str(config.resolve_device(cfg.device))
    return cfg


# ------------------------------------------------------------------------------------------------ networks

def network_spec(network: str, *, vgg_model: str = "vgg16", vgg_image_size: int = 224) -> dict:
    """{"model", "options", "input_shape"} of a paper network; VGG's model and input size are parameters."""
    spec = dict(NETWORKS[check_networks(network)[0]])
    if network == "VGG":
        spec.update(model=check_vgg_model(vgg_model), input_shape=(3, vgg_image_size, vgg_image_size))
    return spec


def networks_table(networks=tuple(NETWORKS), *, vgg_model: str = "vgg16", vgg_image_size: int = 224) -> pd.DataFrame:
    """One row per network: network, model (registry name), input_shape ("CxHxW"), conv_layers, params_m
    (millions), gflops_per_image (forward GFLOPs at that input; meta device, no compute)."""
    from cnnlab.profiling import cost_model

    rows = []
    for name in check_networks(list(networks)):
        spec = network_spec(name, vgg_model=vgg_model, vgg_image_size=vgg_image_size)
        with torch.device("meta"):
            net = models.get(spec["model"], **spec["options"])
        cost = cost_model(net, spec["input_shape"], batch_size=1)
        rows.append({"network": name, "model": spec["model"], "input_shape": "x".join(map(str, spec["input_shape"])),
                     "conv_layers": sum(isinstance(m, torch.nn.Conv2d) for m in net.modules()),
                     "params_m": sum(p.numel() for p in net.parameters()) / 1e6,
                     "gflops_per_image": cost["flops"] / 1e9})
    return pd.DataFrame(rows)


def relative_error(y: torch.Tensor, reference_model: torch.nn.Module, x: torch.Tensor) -> float:
    """max |y - reference_model(x)| / max |reference_model(x)|: how far a strategy's output is from the network
    computed with torch's own convolutions (``native``)."""
    with torch.inference_mode():
        ref = reference_model(x)
    return ((y.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-12)).item()


def check_direct(networks=("LeNet", "CIFAR"), *, batch_size: int = 2, vgg_model: str = "vgg16",
                 vgg_image_size: int = 224, seed: int = 0) -> pd.DataFrame:
    """The direct strategy (cnnlab's Triton kernel in every convolution) against the native network, where the
    kernel can run in this process (interpreted on a CPU: keep to the small networks; compiled on a GPU).

    One row per network: network, input_shape, device, rel_error_vs_native (max |difference| / max |native
    output|), check_s (s), check_missing_reason (None when it ran).
    """
    dev, reason = triton_check_device()
    rows = []
    for network in check_networks(list(networks)):
        spec = network_spec(network, vgg_model=vgg_model, vgg_image_size=vgg_image_size)
        row = {"network": network, "input_shape": "x".join(map(str, spec["input_shape"])), "device": dev,
               "rel_error_vs_native": math.nan, "check_s": math.nan, "check_missing_reason": reason}
        if dev is not None:
            torch.manual_seed(seed)
            net = models.get(spec["model"], **spec["options"]).eval().to(dev)
            model = apply_strategy(net, "direct").to(dev)
            x = torch.randn(batch_size, *spec["input_shape"], generator=torch.Generator().manual_seed(seed)).to(dev)
            start = time.perf_counter()
            with torch.inference_mode():
                y = model(x)
            row.update(rel_error_vs_native=relative_error(y, net, x), check_s=time.perf_counter() - start)
        rows.append(row)
    return pd.DataFrame(rows)


def output_tolerance(device) -> float:
    """Largest relative output difference from ``native`` accepted for a strategy: fp32 everywhere on a CPU; on a
    GPU cuDNN may run fp32 convolutions in TF32 (10-bit mantissa), so the native reference itself is rounder."""
    return 2e-2 if config.resolve_device(device).type == "cuda" else 1e-3


def _choices(model: torch.nn.Module) -> str:
    """The per-layer picks of strategy "best" (StrategyConv2d.last_choice), counted: "gemm x3, fft x2"."""
    picks = [m.last_choice for m in model.modules() if isinstance(m, strategies.StrategyConv2d) and m.last_choice]
    return ", ".join(f"{name} x{n}" for name, n in Counter(picks).most_common())


# ------------------------------------------------------------------------------------------------ measurements

def time_batch(model: torch.nn.Module, x: torch.Tensor, device: torch.device) -> float:
    """Wall time of one inference call in s (synchronised on a GPU): a probe that sizes the timed loop."""
    start = time.perf_counter()
    with torch.inference_mode():
        model(x)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


MAX_REPEATS = 200
MAX_EXTRA_WARMUP = 5


def measure_point(network: str, strategy: str, *, batch_size: int, vgg_model: str, vgg_image_size: int, device,
                  warmup: int, repeats: int, min_time_s: float, best_repeats: int) -> dict:
    """One (network, strategy) point; see :func:`measure` for the columns."""
    dev = config.resolve_device(device)
    spec = network_spec(network, vgg_model=vgg_model, vgg_image_size=vgg_image_size)
    torch.manual_seed(0)  # the same weights for every strategy of a network
    net = models.get(spec["model"], **spec["options"]).eval()
    options = {"repeats": best_repeats} if strategy == "best" else {}
    # Built outside inference mode: apply_strategy deep-copies, and weights copied under inference mode become
    # inference tensors, which the direct strategy's weight cache cannot read.
    model = apply_strategy(net, strategy, **options).to(dev).eval()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch_size, *spec["input_shape"], generator=gen).to(dev)  # on the device: convolutions only
    try:
        start = time.perf_counter()
        with torch.inference_mode():
            y = model(x)  # first call: best times its candidates per layer, Triton and cuDNN autotuning compile/tune
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        first_s = time.perf_counter() - start
        error = relative_error(y, net.to(dev), x)
        del y
        per_batch = first_s
        if strategy == "best" or dev.type == "cuda":  # the first call included best's selection / compilation
            per_batch = time_batch(model, x, dev)
        # Fast points get more timed batches (up to min_time_s of timing) and more untimed ones before them (a
        # freshly built network runs its first few batches slower while the allocator's heap grows: seen up to
        # 1.5x on AlexNet on a CPU); slow points (FFT on a CPU, ~1 s a batch) are warm after their first call.
        per_batch = max(per_batch, 1e-6)
        n = min(MAX_REPEATS, max(repeats, math.ceil(min_time_s / per_batch)))
        n_warmup = max(warmup, min(MAX_EXTRA_WARMUP, math.floor(min_time_s / per_batch)))
        m = benchmark(model, x, device=dev, warmup=n_warmup, repeats=n, batch_size=batch_size, measure_memory=False)
        choices = _choices(model) if strategy == "best" else None
    finally:
        del net, model, x
        free_memory()
    row = m.as_row()
    row.update(model=spec["model"], input_shape="x".join(map(str, spec["input_shape"])), time_missing_reason=None,
               first_call_s=first_s, best_choices=choices, rel_error_vs_native=error, data_source=DATA_SOURCE)
    return {k: row.get(k) for k in MEASURE_COLUMNS}


def measure(networks=tuple(NETWORKS), strategies_=STRATEGIES, *, batch_size: int = 2, vgg_model: str = "vgg16",
            vgg_image_size: int = 224, device="cpu", warmup: int = 0, repeats: int = 1, min_time_s: float = 0.3,
            best_repeats: int = 1, store: str | Path | None = None, progress: bool = True) -> pd.DataFrame:
    """Time per batch of every network under every strategy, with speed-ups over gemm (paper Fig. 7).

    One row per (network, strategy), networks in the order given, strategies in the paper's order. Each point
    builds the network with the same seeded weights, applies the strategy (``cnnlab.kernels.apply_strategy``),
    makes one untimed first call (``first_call_s``: where "best" times its candidates per layer, and where Triton
    compiles on a GPU), then times batches of random input already on ``device``: at least ``repeats``, and as
    many as fill ``min_time_s`` seconds (up to :data:`MAX_REPEATS`), after at least ``warmup`` untimed ones and as
    many as fit in ``min_time_s`` (up to :data:`MAX_EXTRA_WARMUP`). The time per batch that sizes both loops is
    the first call's (one more probe call's for "best" and on a GPU, whose first calls do extra work).

    Columns: network, strategy, status ("ok", "skipped", "oom", "error"), error, point_time_s, finished_utc,
    model, input_shape ("CxHxW"), batch_size, latency_ms_median/p10/p90/mean (ms per batch) with
    time_missing_reason, throughput_items_per_s, first_call_s (s), best_choices (the per-layer picks of "best",
    e.g. "gemm x3, fft x2"), rel_error_vs_native (max |output - native output| / max |native output| on the
    first call's batch: every strategy must compute the same network), gpu_util_pct (NaN on a CPU, with
    reason), settings, data_source, then :func:`add_speedups`' columns. On a CPU the "direct" rows are
    "skipped" with :data:`DIRECT_CPU_REASON`.
    """
    networks = check_networks(list(networks))
    strategies_ = check_strategies(list(strategies_))
    dev = str(config.resolve_device(device))
    untimed = triton_untimed_reason(dev)
    if untimed is not None and untimed[0] == DIRECT_CPU_REASON:
        untimed = (DIRECT_CPU_REASON, DIRECT_CPU_DETAIL)
    points, skipped = [], []
    for network in networks:
        for strategy in strategies_:
            if strategy == "direct" and untimed is not None:
                spec = network_spec(network, vgg_model=vgg_model, vgg_image_size=vgg_image_size)
                skipped.append({"network": network, "strategy": strategy, "status": "skipped",
                                "error": untimed[1], "model": spec["model"],
                                "input_shape": "x".join(map(str, spec["input_shape"])), "batch_size": batch_size,
                                "latency_ms_median": math.nan, "latency_ms_p10": math.nan,
                                "latency_ms_p90": math.nan, "latency_ms_mean": math.nan,
                                "time_missing_reason": untimed[0], "throughput_items_per_s": math.nan,
                                "gpu_util_pct": math.nan, "gpu_util_missing_reason": untimed[0],
                                "device": dev, "data_source": DATA_SOURCE})
            else:
                points.append({"network": network, "strategy": strategy})

    def point(network, strategy):
        return measure_point(network, strategy, batch_size=batch_size, vgg_model=vgg_model,
                             vgg_image_size=vgg_image_size, device=dev, warmup=warmup, repeats=repeats,
                             min_time_s=min_time_s, best_repeats=best_repeats)

    df = run_sweep(point, points, store, "Li et al. strategies", progress) if points else pd.DataFrame()
    if skipped:
        df = pd.concat([df, pd.DataFrame(skipped)], ignore_index=True)
    rank = {(n, s): i for i, (n, s) in enumerate((n, s) for n in networks for s in strategies_)}
    df = df.assign(_rank=[rank[(n, s)] for n, s in zip(df["network"], df["strategy"])]).sort_values("_rank")
    return add_speedups(df.drop(columns="_rank").reset_index(drop=True))


def add_speedups(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with speedup_vs_gemm = (gemm's median time) / (this strategy's median time) for the same network
    (exactly 1.0 for gemm), speedup_p10/speedup_p90 (from the strategy's p90 and p10 times: the spread of the
    timed batches) and speedup_missing_reason where either time is missing."""
    out = df.copy()
    ok = out[out["status"] == "ok"]
    base = ok[ok["strategy"] == BASELINE].set_index("network")["latency_ms_median"]
    ref = out["network"].map(base).astype(float)
    t = pd.to_numeric(out["latency_ms_median"], errors="coerce")
    out["speedup_vs_gemm"] = ref / t
    out.loc[out["strategy"] == BASELINE, "speedup_vs_gemm"] = np.where(t[out["strategy"] == BASELINE] > 0, 1.0,
                                                                       math.nan)
    out["speedup_p10"] = ref / pd.to_numeric(out["latency_ms_p90"], errors="coerce")
    out["speedup_p90"] = ref / pd.to_numeric(out["latency_ms_p10"], errors="coerce")
    reasons = []
    for r, s in zip(out.itertuples(), out["speedup_vs_gemm"]):
        if not np.isnan(s):
            reasons.append(None)
        elif isinstance(getattr(r, "time_missing_reason", None), str):
            reasons.append(r.time_missing_reason)
        elif np.isnan(base.get(r.network, math.nan)):
            reasons.append(f"the {BASELINE} baseline of {r.network} was not measured")
        else:
            reasons.append(f"not measured (status {r.status})")
    out["speedup_missing_reason"] = reasons
    return out


def paper_reference() -> pd.DataFrame:
    """The speed-ups paper 001 reports for Opt (Sec. IV-E): network, strategy ("opt"), paper_strategy ("Opt"),
    paper_speedup (x over cuDNN-MM), paper_text (as the paper words it), approximate (True for "roughly")."""
    return pd.DataFrame([{"network": n, "strategy": "opt", "paper_strategy": PAPER_NAMES["opt"], "paper_speedup": v,
                          "paper_text": text, "approximate": text.startswith("roughly")}
                         for n, (v, text) in PAPER_OPT_SPEEDUP.items()])


# ------------------------------------------------------------------------------------------------ claims

def _speedups(df: pd.DataFrame) -> pd.DataFrame:
    ok = df[(df["status"] == "ok")].dropna(subset=["speedup_vs_gemm"])
    return ok.pivot_table(index="network", columns="strategy", values="speedup_vs_gemm", sort=False)


BEST_TOLERANCE = 0.10  # best may be this much slower than the fastest single kernel and still "narrow the gap"


def check_claims(df: pd.DataFrame, *, device: str) -> list[Claim]:
    """The observations of Sec. IV-E checked on :func:`measure`'s result.

    1. no single kernel wins everywhere: the fastest of the single-algorithm strategies (gemm, fft, fft_tiled,
       direct) is not the same on every network;
    2. best narrows the gap: on every network best is at least (1 - :data:`BEST_TOLERANCE`) x as fast as the
       fastest single kernel;
    3. best still trails opt on every network;
    4. opt is the fastest strategy on every network (ours beside the paper's 5.6x / roughly 2x).
    Strategies not measured here (direct on a CPU) are left out of each comparison and named in the note.
    """
    dev = str(device)
    sp = _speedups(df)
    missing = sorted(set(df.loc[df["status"] != "ok", "strategy"]))
    left_out = f"not measured here: {', '.join(missing)}" if missing else ""
    singles = [s for s in SINGLE_KERNELS if s in sp.columns]
    checks = []

    if len(sp) >= 2 and len(singles) >= 2:
        winners = sp[singles].idxmax(axis=1)
        checks.append(Claim(claim="no single kernel wins everywhere",
                            paper="cuda-convnet tops LeNet and CIFAR, cuDNN variants win on AlexNet, ZFNet, VGG",
                            ours=", ".join(f"{n}: {w}" for n, w in winners.items()),
                            held=winners.nunique() > 1, device=dev,
                            note=f"fastest of {', '.join(singles)}" + (f"; {left_out}" if left_out else "")))
    else:
        checks.append(Claim(claim="no single kernel wins everywhere", paper="Fig. 7", ours="not measured", held=None,
                            device=dev, note="needs two networks and two single-kernel strategies measured"))

    if "best" in sp.columns and singles:
        top_single = sp[singles].max(axis=1)
        ratio = sp["best"] / top_single
        checks.append(Claim(claim="best (per-layer pick) narrows the gap to the fastest kernel",
                            paper="cuDNN-Best, which cherry-picks the fastest kernel per layer, narrows the gap",
                            ours=", ".join(f"{n}: best {b:.2f}x vs top kernel {t:.2f}x" for n, b, t in
                                           zip(sp.index, sp["best"], top_single)),
                            held=bool((ratio >= 1 - BEST_TOLERANCE).all()), device=dev,
                            note=f"held = best within {BEST_TOLERANCE:.0%} of the fastest single kernel on every "
                                 "network" + (f"; {left_out}" if left_out else "")))
    else:
        checks.append(Claim(claim="best (per-layer pick) narrows the gap to the fastest kernel", paper="Fig. 7",
                            ours="not measured", held=None, device=dev, note="best or the single kernels not measured"))

    if {"best", "opt"} <= set(sp.columns):
        checks.append(Claim(claim="best still trails opt", paper="cuDNN-Best still trails Opt",
                            ours=", ".join(f"{n}: best {b:.2f}x, opt {o:.2f}x" for n, b, o in
                                           zip(sp.index, sp["best"], sp["opt"])),
                            held=bool((sp["best"] < sp["opt"]).all()), device=dev))
    else:
        checks.append(Claim(claim="best still trails opt", paper="Fig. 7", ours="not measured", held=None, device=dev,
                            note="best or opt not measured"))

    if "opt" in sp.columns:
        others = [s for s in sp.columns if s not in ("opt", "native")]
        fastest = (sp["opt"] >= sp[others].max(axis=1)) if others else pd.Series(True, index=sp.index)
        paper = ", ".join(f"{n} {text}" for n, (_, text) in PAPER_OPT_SPEEDUP.items())
        checks.append(Claim(claim="opt is the fastest strategy on every network", paper=f"Opt: {paper} over cuDNN-MM",
                            ours=", ".join(f"{n} {v:.2f}x" for n, v in sp["opt"].items()),
                            held=bool(fastest.all()), device=dev,
                            note=f"compared with {', '.join(others)}" + (f"; {left_out}" if left_out else "")))
    else:
        checks.append(Claim(claim="opt is the fastest strategy on every network", paper="Fig. 7", ours="not measured",
                            held=None, device=dev, note="opt not measured"))
    return checks


# ------------------------------------------------------------------------------------------------ figures

def plot_speedups(df: pd.DataFrame, reference: pd.DataFrame | None = None):
    """Paper Fig. 7: speed-up over gemm (cuDNN-MM) per network, one bar per strategy (p10-p90 whiskers), on a log
    axis; the paper's Opt values as black stars over the opt bars ("roughly" values hollow); strategies not
    measured on this device marked "n/a" in their slot."""
    import matplotlib.ticker as mticker

    from cnnlab import plotting

    reference = paper_reference() if reference is None else reference
    networks = list(dict.fromkeys(df["network"]))
    order = [s for s in STRATEGIES + OPTIONAL if s in set(df["strategy"])]
    colors = dict(zip(STRATEGIES, plotting.plt.get_cmap("tab10").colors))
    colors["native"] = "0.6"
    width = 0.8 / len(order)
    fig, ax = plotting.plt.subplots(figsize=(max(8, 1.7 * len(networks) + 3), 6))
    values = df["speedup_vs_gemm"].to_numpy(dtype=float)
    finite = values[np.isfinite(values) & (values > 0)]
    lo = min(0.5, finite.min() / 1.5) if len(finite) else 0.5
    hi = max(8.0, finite.max() * 1.6, reference["paper_speedup"].max() * 1.6 if len(reference) else 0)
    for i, strategy in enumerate(order):
        rows = df[df["strategy"] == strategy].set_index("network").reindex(networks)
        x = np.arange(len(networks)) - 0.4 + width * (i + 0.5)
        y = rows["speedup_vs_gemm"].to_numpy(dtype=float)
        label = f"{strategy} ({PAPER_NAMES[strategy]})" if strategy in PAPER_NAMES else f"{strategy} (reference)"
        ax.bar(x, np.nan_to_num(y, nan=0.0), width=width * 0.95, bottom=0, color=colors[strategy], label=label)
        low = y - rows["speedup_p10"].to_numpy(dtype=float)
        high = rows["speedup_p90"].to_numpy(dtype=float) - y
        ax.errorbar(x, y, yerr=[low, high], fmt="none", ecolor="0.2", capsize=2, lw=0.8)
        top = np.fmax(y, rows["speedup_p90"].to_numpy(dtype=float))
        for xi, yi, ti in zip(x, y, top):
            if np.isnan(yi):
                ax.text(xi, lo * 1.08, "n/a", rotation=90, ha="center", va="bottom", fontsize=8, color="0.3")
            else:  # the value, above the whisker
                ax.text(xi, ti * 1.08, f"{yi:.2g}", rotation=90, ha="center", va="bottom", fontsize=7)
        if strategy == "opt" and len(reference):
            for xi, network in zip(x, networks):
                ref = reference[reference["network"] == network]
                if len(ref):
                    approx = bool(ref["approximate"].iloc[0])
                    value = float(ref["paper_speedup"].iloc[0])
                    xs = xi + width * 0.75  # beside the bar, clear of its value label
                    ax.plot(xs, value, marker="*", markersize=13, color="black",
                            markerfacecolor="white" if approx else "black", linestyle="none", zorder=5,
                            label="paper's Opt (hollow: 'roughly')")
                    ax.annotate(str(ref["paper_text"].iloc[0]).replace("roughly ", "~"), (xs, value),
                                xytext=(7, 0), textcoords="offset points", va="center", fontsize=8)
    ax.axhline(1.0, color="0.3", lw=1, linestyle="--")
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ticks = [v for v in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50) if lo <= v <= hi]
    ax.yaxis.set_major_locator(mticker.FixedLocator(ticks))
    ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.yaxis.set_minor_locator(mticker.NullLocator())
    shapes = df.drop_duplicates("network").set_index("network")["input_shape"].reindex(networks)
    ax.set_xticks(np.arange(len(networks)), [f"{n}\n{s}" for n, s in zip(networks, shapes)])
    ax.set_xlabel("Network (input C x H x W)")
    ax.set_ylabel("Speed-up over gemm = cuDNN-MM (x)")
    batch = df["batch_size"].dropna()
    device = df["device"].dropna()
    ax.set_title(f"Whole-network speed-up per strategy (batch {int(batch.iloc[0]) if len(batch) else '?'}, "
                 f"{device.iloc[0] if len(device) else '?'})")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    missing = df[df["status"] == "skipped"].groupby("strategy")["time_missing_reason"].first()
    if len(missing):
        ax.text(0.5, -0.38, "n/a: " + "; ".join(f"{s}: {r}" for s, r in missing.items()), ha="center", fontsize=9,
                color="0.3", transform=ax.transAxes, va="top")
    fig.tight_layout()
    return fig


__all__ = ["BASELINE", "NETWORKS", "PAPER_NAMES", "PAPER_OPT_SPEEDUP", "PRESETS", "SINGLE_KERNELS", "STRATEGIES",
           "add_speedups", "check_claims", "check_direct", "check_networks", "check_strategies", "check_vgg_model",
           "measure", "network_spec", "networks_table", "output_tolerance", "paper_reference", "plot_speedups",
           "relative_error", "set_threads", "store_path", "validate"]
