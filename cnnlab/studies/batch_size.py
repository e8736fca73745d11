"""Study 01: how batch size changes inference time, throughput, peak memory and GPU utilisation (paper 001).

Paper 001 (Maji et al., "Towards Efficient CNN Inference: Memory Profiling and Optimization", Sec. IV-A,
Fig. 1-2) runs LeNet-5, AlexNet and CIFAR ResNet-20/32/44/56 on CIFAR-10 at batch sizes 1, 2, 4, ... 1024
and reports total inference time, average time per batch, peak GPU memory allocated and GPU utilisation,
plus (Sec. III-A) kernel time, host<->device transfer time and time waiting on synchronisation ("semwait").

- :func:`measure`: one row per (model, batch size): the time to infer a fixed number of images, time per
  batch, throughput, peak memory, GPU utilisation (``cnnlab.profiling.benchmark``).
- :func:`breakdown`: where the time of one batch goes (``cnnlab.profiling.profile_ops``), tidy, one row per
  (model, batch size, component).
- :func:`roofline`: each model at its best batch against the device's roofline (``cost_model``).
- :func:`check_claims`, and ``plot_*`` functions laid out like the paper's figures.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from cnnlab import models
from cnnlab.claims import Claim
from cnnlab.profiling import achieved, benchmark, cost_model, device_peaks, profile_ops
from cnnlab import config
from cnnlab.studies.common import (as_list, check_batch_sizes, check_models, check_threads, free_memory,  # noqa: F401
                                   image_models, missing_panel, plain_log_ticks, run_sweep, set_threads,
                                   store_path)

PAPER_MODELS = ["lenet5", "alexnet", "resnet20", "resnet32", "resnet44", "resnet56"]
PAPER_BATCH_SIZES = [2**k for k in range(11)]  # 1, 2, 4, ... 1024 (Sec. III-B)

PRESETS = {
    # CPU smoke run of the whole code path: two models, four batch sizes, 128 images per point. One intra-op
    # thread (see check_threads): CI runs two notebooks at once on two cores.
    "quick": dict(models=["lenet5", "resnet20"], batch_sizes=[1, 4, 16, 64], images=128, warmup=2,
                  min_repeats=3, profile_iterations=2, threads=1, device=None),
    # One Colab GPU: the paper's models and batch sizes, 2048 images per point.
    "standard": dict(models=PAPER_MODELS, batch_sizes=PAPER_BATCH_SIZES, images=2048, warmup=5,
                     min_repeats=10, profile_iterations=5, threads=None, device=None),
    # The paper: the whole CIFAR-10 test set (10,000 images) per point.
    "paper": dict(models=PAPER_MODELS, batch_sizes=PAPER_BATCH_SIZES, images=10000, warmup=10,
                  min_repeats=20, profile_iterations=10, threads=None, device=None),
}

# Columns of :func:`measure`, in order (the sweep adds status, error, point_time_s, finished_utc).
MEASURE_COLUMNS = [
    "images", "batches", "total_time_s", "latency_ms_median", "latency_ms_p10", "latency_ms_p90",
    "latency_ms_mean", "throughput_items_per_s", "peak_mem_alloc_mib", "peak_mem_increment_mib",
    "peak_mem_reserved_mib", "peak_mem_method", "peak_mem_missing_reason", "peak_mem_reserved_missing_reason",
    "gpu_util_pct", "gpu_util_samples", "gpu_util_missing_reason", "repeats", "warmup", "input_location",
    "timer", "cpu_threads", "device", "device_name", "params_m", "gflops_per_image", "data_source",
]
# Components of :func:`breakdown`. The "stacked" ones partition the wall time of a batch; sync wait
# overlaps device work (the host waits while kernels run), so it is shown beside the stack, not in it.
COMPONENTS = ["kernel / compute", "memcpy HtoD", "memcpy DtoH", "other device work", "CPU-side overhead",
              "sync wait"]
STACKED = COMPONENTS[:5]
DATA_SOURCE = "synthetic"  # random CIFAR-shaped tensors: a dense CNN's time does not depend on pixel values


# ------------------------------------------------------------------------------------------------ validation

def validate(cfg):
    """Check (and normalise in place) a configuration built from :data:`PRESETS`; returns it.

    Raises ValueError naming the parameter and its valid values: unknown model, batch size < 1,
    non-integer counts, unknown or unavailable device.
    """
    
    cfg.models = check_models(cfg.models)
    cfg.batch_sizes = check_batch_sizes(cfg.batch_sizes)
    for name, minimum in (("images", 1), ("warmup", 0), ("min_repeats", 1), ("profile_iterations", 1)):
        setattr(cfg, name, config.positive_int(getattr(cfg, name), parameter=name, minimum=minimum))
    cfg.threads = check_threads(cfg.threads)
    cfg.device = str(config.resolve_device(cfg.device))
    return cfg


# ------------------------------------------------------------------------------------------------ helpers

def _build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)  # same weights at every point (time does not depend on them, but reproducible)
    return models.get(name).eval()


def model_cost(name: str) -> dict:
    """Parameters (millions) and forward GFLOPs per image of registry model ``name`` (meta device: no compute)."""
    with torch.device("meta"):
        net = models.get(name)
    cost = cost_model(net, models.spec(name).input_shape, batch_size=1)
    return {"params_m": cost["param_bytes"] / 4 / 1e6, "gflops_per_image": cost["flops"] / 1e9}


# ------------------------------------------------------------------------------------------------ measurements

def measure_point(model: str, batch_size: int, *, device, images: int, warmup: int, min_repeats: int) -> dict:
    """One (model, batch size) point: see :func:`measure` for the columns."""
    dev = config.resolve_device(device)
    net = _build(model)
    x = models.example_input(net, batch_size)  # on the host: on a GPU each batch's copy is timed, as in a loader
    batches = math.ceil(images / batch_size)
    try:
        m = benchmark(net, x, device=dev, warmup=warmup, repeats=max(batches, min_repeats))
        row = m.as_row()
        # The first `batches` timed batches are exactly the inference of `images` images (rounded up).
        row.update(images=batches * batch_size, batches=batches,
                   total_time_s=float(np.sum(m.latencies_ms[:batches])) / 1e3)
    finally:
        del net, x
        free_memory()
    row.update(model_cost(model), data_source=DATA_SOURCE)
    return {k: row[k] for k in MEASURE_COLUMNS}


def measure(models_: list[str], batch_sizes: list[int], *, device="cpu", images: int = 256, warmup: int = 2,
            min_repeats: int = 3, store: str | Path | None = None, progress: bool = True) -> pd.DataFrame:
    """Inference time and memory of every model at every batch size: one row per (model, batch size).

    Each point infers ``images`` images (rounded up to whole batches) of random CIFAR-shaped input held on
    the host (on a GPU the host-to-device copy of each batch is part of its time, as when a DataLoader
    feeds the model), after ``warmup`` untimed batches; at least ``min_repeats`` batches are timed for the
    per-batch statistics.

    Columns: model, batch_size, status ("ok"/"oom"/"error"), error, point_time_s, finished_utc, then
    ``images`` (images inferred), ``batches``, ``total_time_s`` (s, time to infer those images: paper Fig. 1
    top), ``latency_ms_median/p10/p90/mean`` (ms per batch: Fig. 2 top), ``throughput_items_per_s``
    (images/s), ``peak_mem_alloc_mib`` (MiB: Fig. 1 bottom; see :func:`cnnlab.profiling.benchmark` for what
    it counts on CPU and GPU), ``gpu_util_pct`` (%: Fig. 2 bottom, NaN on a CPU with
    ``gpu_util_missing_reason``), settings, ``params_m`` (millions), ``gflops_per_image`` (forward GFLOPs),
    ``data_source``. ``store`` (a .csv path) makes the sweep resumable; a failed point is a row with its error.
    """
    models_ = check_models(models_)
    batch_sizes = check_batch_sizes(batch_sizes)
    dev = str(config.resolve_device(device))

    def point(model, batch_size):
        return measure_point(model, batch_size, device=dev, images=images, warmup=warmup, min_repeats=min_repeats)

    grid = {"model": models_, "batch_size": batch_sizes}
    return run_sweep(point, grid, store, "batch size: time and memory", progress)


def breakdown_point(model: str, batch_size: int, *, device, iterations: int = 2, warmup: int = 1) -> list[dict]:
    """Where the time of one inference step goes; one row per component (see :func:`breakdown`)."""
    dev = config.resolve_device(device)
    net = _build(model).to(dev)
    x = models.example_input(net, batch_size)

    def step():  # a serving step: batch in from the host, forward, predicted classes back to the host
        with torch.inference_mode():
            return net(x.to(dev)).argmax(1).cpu()

    try:
        prof = profile_ops(step, iterations=iterations, device=dev, warmup=warmup, profile_memory=False)
        s = prof.summary
    finally:
        del net, x
        free_memory()
    per = 1.0 / iterations
    wall = s["wall_time_ms"] * per
    nan = math.nan
    if dev.type == "cuda":
        kernel, htod, dtoh = s["kernel_time_total_ms"] * per, s["memcpy_htod_ms"] * per, s["memcpy_dtoh_ms"] * per
        other = max(s["device_time_total_ms"] * per - kernel - htod - dtoh, 0.0)  # memset, DtoD copies
        busy = kernel + htod + dtoh + other
        times = {"kernel / compute": kernel, "memcpy HtoD": htod, "memcpy DtoH": dtoh, "other device work": other,
                 # the GPU is idle while the host prepares and launches work
                 "CPU-side overhead": max(wall - busy, 0.0), "sync wait": s["sync_wait_ms"] * per}
        reasons = {}
    else:
        # On a CPU the operators *are* the compute: time inside aten operators (self time, summed) versus
        # time outside them (Python, module calls, the profiler's own per-op cost).
        # (summary's cpu_time_total_ms also counts the iteration's own Python time, so sum the operators).
        compute = float(prof.operators["self_cpu_time_us"].sum()) / 1e3 * per
        times = {"kernel / compute": compute, "memcpy HtoD": nan, "memcpy DtoH": nan, "other device work": nan,
                 "CPU-side overhead": max(wall - compute, 0.0), "sync wait": nan}
        no_device = "CPU run: no host-device transfers, device work or device synchronisation"
        reasons = {c: no_device for c in ("memcpy HtoD", "memcpy DtoH", "other device work", "sync wait")}
    rows = []
    for component in COMPONENTS:
        t = times[component]
        rows.append({"component": component, "time_per_batch_ms": t, "stacked": component in STACKED,
                     "share_of_wall_pct": 100.0 * t / wall if wall > 0 and not math.isnan(t) else nan,
                     "wall_time_per_batch_ms": wall, "iterations": iterations,
                     "time_missing_reason": reasons.get(component), "device": str(dev),
                     "data_source": DATA_SOURCE})
    return rows


def breakdown(models_: list[str], batch_sizes: list[int], *, device="cpu", iterations: int = 2, warmup: int = 1,
              store: str | Path | None = None, progress: bool = True) -> pd.DataFrame:
    """Time of one inference step split by where it goes, from the PyTorch profiler.

    One row per (model, batch size, component), times in ms per batch (mean over ``iterations``):

    - GPU: ``kernel / compute`` (device kernels), ``memcpy HtoD`` / ``memcpy DtoH`` (the batch in, the
      predictions out), ``other device work`` (memsets, device-to-device copies), ``CPU-side overhead``
      (wall time with the GPU idle: Python, dispatch, kernel launches), which together make the wall time
      (``stacked`` True); ``sync wait`` (host blocked in cuda*Synchronize, paper 001's "semwait") overlaps
      device work and is not stacked.
    - CPU: ``kernel / compute`` is the time inside aten operators and ``CPU-side overhead`` the rest of the
      wall time; the device components are NaN with ``time_missing_reason``.

    ``share_of_wall_pct`` is the component's share of ``wall_time_per_batch_ms``. Profiling adds a few
    microseconds per operator, which inflates the overhead of small batches.
    """
    models_ = check_models(models_)
    batch_sizes = check_batch_sizes(batch_sizes)
    iterations = config.positive_int(iterations, parameter="iterations")
    dev = str(config.resolve_device(device))

    def point(model, batch_size):
        return breakdown_point(model, batch_size, device=dev, iterations=iterations, warmup=warmup)

    grid = {"model": models_, "batch_size": batch_sizes}
    return run_sweep(point, grid, store, "batch size: time breakdown", progress)


def best_batches(measured: pd.DataFrame) -> pd.DataFrame:
    """The row of each model at the batch size with the highest throughput (status ok only)."""
    ok = measured[measured["status"] == "ok"]
    if ok.empty:
        raise ValueError("no point was measured with status ok: nothing to choose a best batch from")
    return ok.loc[ok.groupby("model", sort=False)["throughput_items_per_s"].idxmax()].reset_index(drop=True)


def roofline(measured: pd.DataFrame, *, device="cpu") -> pd.DataFrame:
    """Each model at its best batch (highest throughput) on the roofline (Williams et al., CACM 2009).

    One row per model: model, batch_size, flops (forward, whole batch), memory_bytes (minimum traffic, see
    ``cost_model``), arithmetic_intensity_flop_per_byte, latency_ms_median, achieved_tflop_per_s,
    achieved_gb_per_s, throughput_items_per_s, and the device's datasheet peaks (peak_fp32_tflop_per_s,
    peak_tf32_tflop_per_s, peak_bandwidth_gb_per_s; NaN on a CPU with ``peaks_missing_reason``).
    """
    dev = config.resolve_device(device)
    peaks = device_peaks(dev)
    rows = []
    for _, best in best_batches(measured).iterrows():
        name, bs = best["model"], int(best["batch_size"])
        with torch.device("meta"):
            net = models.get(name)
        cost = cost_model(net, models.spec(name).input_shape, batch_size=bs)
        rates = achieved(cost, best["latency_ms_median"] / 1e3)
        rows.append({"model": name, "batch_size": bs, "flops": cost["flops"], "memory_bytes": cost["memory_bytes"],
                     "arithmetic_intensity_flop_per_byte": cost["arithmetic_intensity_flop_per_byte"],
                     "latency_ms_median": best["latency_ms_median"],
                     "throughput_items_per_s": best["throughput_items_per_s"], **rates, **peaks,
                     # PyTorch runs fp32 convolutions on tensor cores in TF32 when cuDNN allows it (default)
                     "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32) if dev.type == "cuda" else None})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------ claims

def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"].sort_values(["model", "batch_size"])


def check_claims(measured: pd.DataFrame, *, device: str) -> list[Claim]:
    """The claims of Sec. IV-A checked on ``measured`` (from :func:`measure`), as :class:`cnnlab.claims.Claim`.

    1. peak memory grows monotonically with batch size (every model; non-decreasing);
    2. total time for the fixed image count falls from batch 1 to batch 64 (the paper's "initial drop");
    3. throughput at the best batch is far above batch 1 (we take "far" as at least 2x, every model);
    4. GPU utilisation rises with batch size and with depth (GPU only).
    """
    ok = _ok(measured)
    dev = str(device)
    checks = []

    grows = {m: bool(np.all(np.diff(g["peak_mem_alloc_mib"].to_numpy()) >= 0)) for m, g in ok.groupby("model")}
    spans = ", ".join(f"{m} {g['peak_mem_alloc_mib'].iloc[0]:.1f}->{g['peak_mem_alloc_mib'].iloc[-1]:.1f} MiB"
                      for m, g in ok.groupby("model"))
    checks.append(Claim(claim="peak memory grows monotonically with batch size",
                        paper="Fig. 1 bottom: increases monotonically and significantly", ours=spans,
                        held=all(grows.values()) if grows else None, device=dev,
                        note="" if grows else "no point measured"))

    first, upto = (min(ok["batch_size"]) if len(ok) else None), [b for b in sorted(set(ok["batch_size"])) if b <= 64]
    if first == 1 and len(upto) > 1:
        to = upto[-1]
        t = ok.pivot_table(index="model", columns="batch_size", values="total_time_s")
        ratio = t[1] / t[to]
        checks.append(Claim(claim=f"total inference time drops from batch 1 to batch {to}",
                            paper="Fig. 1 top: time drops as batch size grows up to about 64",
                            ours=", ".join(f"{m} {t.loc[m, 1]:.3g}->{t.loc[m, to]:.3g} s" for m in t.index),
                            held=bool((ratio > 1).all()), device=dev))
    else:
        checks.append(Claim(claim="total inference time drops from batch 1 to batch 64",
                            paper="Fig. 1 top: time drops as batch size grows up to about 64", ours="not measured",
                            held=None, device=dev, note="the grid needs batch size 1 and a larger one <= 64"))

    if first == 1:
        best = ok.groupby("model")["throughput_items_per_s"].max()
        one = ok[ok["batch_size"] == 1].set_index("model")["throughput_items_per_s"]
        gain = (best / one).dropna()
        checks.append(Claim(claim="throughput at the best batch is far (>= 2x) above batch 1",
                            paper="Sec. IV-A: larger batches make better use of the GPU's parallelism",
                            ours=", ".join(f"{m} {g:.1f}x" for m, g in gain.items()),
                            held=bool((gain >= 2).all()) if len(gain) else None, device=dev,
                            note="" if len(gain) else "no model measured at batch 1"))
    else:
        checks.append(Claim(claim="throughput at the best batch is far (>= 2x) above batch 1",
                            paper="Sec. IV-A", ours="not measured", held=None, device=dev,
                            note="batch size 1 is not in the grid"))

    util = ok.dropna(subset=["gpu_util_pct"])
    if util.empty:
        reasons = ok["gpu_util_missing_reason"].dropna().unique()
        checks.append(Claim(claim="GPU utilisation rises with batch size and model depth",
                            paper="Fig. 2 bottom: rises, plateaus at large batches", ours="not measured",
                            held=None, device=dev,
                            note="; ".join(reasons) if len(reasons) else "no GPU utilisation measured"))
    else:
        by_batch = {m: g.sort_values("batch_size")["gpu_util_pct"] for m, g in util.groupby("model")}
        rises_batch = all(s.iloc[-1] > s.iloc[0] for s in by_batch.values() if len(s) > 1)
        # depth order of the ResNets = order of their work per image (20 < 32 < 44 < 56 layers)
        work = ok.groupby("model")["gflops_per_image"].first()
        resnets = sorted((m for m in work.index if models.spec(m).family == "resnet_cifar"), key=work.get)
        mean_util = util.groupby("model")["gpu_util_pct"].mean()
        depth = [mean_util[m] for m in resnets if m in mean_util]
        rises_depth = all(b >= a for a, b in zip(depth, depth[1:]))
        checks.append(Claim(claim="GPU utilisation rises with batch size and model depth",
                            paper="Fig. 2 bottom: rises, plateaus at large batches",
                            ours=", ".join(f"{m} {s.iloc[0]:.0f}->{s.iloc[-1]:.0f}%" for m, s in by_batch.items())
                            + (f"; mean over batches by depth: {', '.join(f'{u:.0f}%' for u in depth)}"
                               if depth else ""),
                            held=rises_batch and rises_depth, device=dev))
    return checks


# ------------------------------------------------------------------------------------------------ figures

def _lines(ax, df, y, batch_sizes, ylabel, log=True):
    import seaborn as sns

    from cnnlab import plotting

    sns.lineplot(data=df, x="batch_size", y=y, hue="model", style="model", markers=True, dashes=False, ax=ax)
    if log:
        ax.set_yscale("log")
        plain_log_ticks(ax)
    plotting.log2_batch_axis(ax, values=batch_sizes)
    ax.set_ylabel(ylabel)


def plot_time_memory(measured: pd.DataFrame):
    """Paper Fig. 1: total inference time (top) and peak memory allocated (bottom) against batch size."""
    from cnnlab import plotting

    ok = _ok(measured)
    sizes = sorted(set(ok["batch_size"]))
    images = int(ok["images"].min()) if len(ok) else 0
    fig, (top, bottom) = plotting.plt.subplots(2, 1, figsize=(7, 8), sharex=True)
    _lines(top, ok, "total_time_s", sizes, f"Total time for {images:,} images (s)")
    top.set_title("Total inference time")
    _lines(bottom, ok, "peak_mem_alloc_mib", sizes, plotting.label_for("peak_mem_alloc_mib"))
    bottom.set_title("Peak memory allocated")
    bottom.get_legend().remove()
    fig.tight_layout()
    return fig


def plot_latency_utilisation(measured: pd.DataFrame):
    """Paper Fig. 2: average time per batch (top) and GPU utilisation (bottom) against batch size."""
    from cnnlab import plotting

    ok = _ok(measured)
    sizes = sorted(set(ok["batch_size"]))
    fig, (top, bottom) = plotting.plt.subplots(2, 1, figsize=(7, 8), sharex=True)
    _lines(top, ok, "latency_ms_mean", sizes, "Average time per batch (ms)")
    top.set_title("Average inference time per batch")
    util = ok.dropna(subset=["gpu_util_pct"])
    bottom.set_title("GPU utilisation")
    if util.empty:
        reasons = "; ".join(ok["gpu_util_missing_reason"].dropna().unique()) or "not measured"
        missing_panel(bottom, f"GPU utilisation not measured on this device:\n{reasons}")
        plotting.log2_batch_axis(bottom, values=sizes)
    else:
        _lines(bottom, util, "gpu_util_pct", sizes, plotting.label_for("gpu_util_pct"), log=False)
        bottom.set_ylim(0, 100)
        bottom.get_legend().remove()
    fig.tight_layout()
    return fig


def plot_breakdown(parts: pd.DataFrame):
    """Stacked share of each batch's wall time per component, one panel per model; sync wait as markers.

    Bars are normalised to 100% so that batch sizes whose times differ by decades stay readable; the wall
    time per batch (ms) is written above each bar.
    """
    from cnnlab import plotting

    ok = parts[parts["status"] == "ok"]
    names = list(dict.fromkeys(ok["model"]))
    fig, axes = plotting.plt.subplots(1, len(names), figsize=(4.2 * len(names), 4.5), squeeze=False, sharey=True)
    colors = dict(zip(STACKED, plotting.plt.get_cmap("tab10").colors))
    for ax, name in zip(axes[0], names):
        d = ok[ok["model"] == name]
        sizes = sorted(set(d["batch_size"]))
        pos = np.arange(len(sizes))
        bottom = np.zeros(len(sizes))
        for comp in STACKED:
            share = (d[d["component"] == comp].set_index("batch_size")["share_of_wall_pct"]
                     .reindex(sizes).to_numpy(dtype=float))
            if np.all(np.isnan(share)):
                continue  # not measurable on this device (e.g. memcpy on a CPU): no empty legend entry
            share = np.nan_to_num(share)
            ax.bar(pos, share, bottom=bottom, color=colors[comp], label=comp, width=0.7)
            bottom += share
        sync = d[d["component"] == "sync wait"].set_index("batch_size")["share_of_wall_pct"].reindex(sizes)
        if sync.notna().any():
            ax.plot(pos, sync.to_numpy(dtype=float), "kD", label="sync wait (overlaps)")
        wall = d.drop_duplicates("batch_size").set_index("batch_size")["wall_time_per_batch_ms"].reindex(sizes)
        for p, w, b in zip(pos, wall, bottom):
            ax.text(p, b + 1, f"{w:.3g} ms", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(pos, [str(s) for s in sizes])
        ax.set_xlabel("Batch size")
        ax.set_title(name)
        ax.set_ylim(0, 112)
    axes[0][0].set_ylabel("Share of wall time per batch (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), bbox_to_anchor=(0.5, -0.06))
    fig.tight_layout()
    return fig


def plot_roofline(roof: pd.DataFrame):
    """Achieved GFLOP/s against arithmetic intensity, each model at its best batch; roof lines where the
    device's peaks are known (a CPU has none: the plot then says so and shows the points only)."""
    from cnnlab import plotting

    fig, ax = plotting.plt.subplots(figsize=(7, 5))
    gflops = roof["achieved_tflop_per_s"] * 1e3
    colors = plotting.plt.get_cmap("tab10")
    for i, (r, y) in enumerate(zip(roof.itertuples(), gflops)):
        ax.scatter(r.arithmetic_intensity_flop_per_byte, y, s=60, zorder=3, color=colors(i % 10),
                   label=f"{r.model} (batch {int(r.batch_size)})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    bw = roof["peak_bandwidth_gb_per_s"].iloc[0] if len(roof) else math.nan
    roofs = [("FP32", "peak_fp32_tflop_per_s")]
    if len(roof) and bool(roof["cudnn_allow_tf32"].iloc[0]):
        roofs.append(("TF32 (cuDNN default for fp32 convs)", "peak_tf32_tflop_per_s"))
    drawn = False
    if len(roof) and not math.isnan(bw):
        x = roof["arithmetic_intensity_flop_per_byte"]
        ai = np.logspace(np.log10(min(x.min() / 4, 0.5)), np.log10(max(x.max() * 4, 1e3)), 200)
        for label, col in roofs:
            peak = roof[col].iloc[0] * 1e3  # GFLOP/s
            if math.isnan(peak):
                continue
            # below the ridge point a kernel is bound by bandwidth: GB/s x FLOP/byte = GFLOP/s
            ax.plot(ai, np.minimum(peak, ai * bw), "--", label=f"roof {label}: {peak / 1e3:g} TFLOP/s, {bw:g} GB/s")
            drawn = True
    else:
        ax.margins(x=0.4, y=0.4)
    if drawn:
        ax.set_title(f"Roofline: {roof['device_name'].iloc[0]}")
    else:
        reason = next(iter(roof["peaks_missing_reason"].dropna()), "device peaks unknown") if len(roof) else "no data"
        ax.set_title("Achieved FLOP/s vs arithmetic intensity\n(no roof lines: " + reason.split(";")[0] + ")",
                     fontsize=11)
    plain_log_ticks(ax, "x")
    plain_log_ticks(ax, "y")
    ax.legend(fontsize=8, loc="best")
    ax.set_xlabel(plotting.label_for("arithmetic_intensity_flop_per_byte"))
    ax.set_ylabel(plotting.label_for("achieved_gflop_per_s"))
    fig.tight_layout()
    return fig


__all__ = ["COMPONENTS", "MEASURE_COLUMNS", "PAPER_BATCH_SIZES", "PAPER_MODELS", "PRESETS", "as_list",
           "best_batches", "breakdown", "check_batch_sizes", "check_claims", "check_models", "check_threads",
           "free_memory", "image_models", "measure", "model_cost", "plain_log_ticks", "plot_breakdown",
           "plot_latency_utilisation", "plot_roofline", "plot_time_memory", "roofline", "run_sweep", "set_threads",
           "store_path", "validate"]
