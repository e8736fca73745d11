"""Study 04: memory tiling of ResNet-20 at 224x224: time, GPU utilisation, average and peak memory per tile size.

Paper 001 (Maji et al., "Towards Efficient CNN Inference: Memory Profiling and Optimization", Sec. III-D and
IV-D, Fig. 6) runs ResNet-20 on Mini-ImageNet (3x224x224) at batch 8 with convolution tiles of 8x8, 16x16, 32x32
and 64x64 and reports that inference time falls as tiles grow (red line), GPU utilisation rises (blue dashed) and
average memory rises slightly (green dash-dot). It does not say how it tiled; cnnlab measures two tilings
(``cnnlab.kernels``), each against the untiled model:

- ``triton``: every Conv2d replaced by cnnlab's Triton kernel, in which one program computes a ``tile x tile``
  block of output pixels (the paper's GPU tiles: the tile's input window is what the kernel keeps close). On a
  CPU Triton runs only in its interpreter, so there the kernel is checked for correctness
  (:func:`check_triton`) and never timed: its rows are missing with :data:`TRITON_CPU_REASON`.
- ``spatial``: the convolutional trunk runs tile by tile over the image (``tile_spatially``, stream mode:
  strips of ``tile`` input rows with line buffers for the halo), so no full-size activation is ever live.

- :func:`measure`: one row per (method, tile): time per batch, GPU utilisation, average and peak memory.
- :func:`check_triton`: the Triton kernel against ``F.conv2d`` on ResNet-20's layer shapes, per tile size.
- :func:`check_claims`, :func:`plot_tiling` (laid out like Fig. 6).
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from cnnlab import models
from cnnlab.claims import Claim
from cnnlab.kernels import spatial, tile_model, tile_spatially, tiled_conv2d
from cnnlab.kernels import triton_conv
from cnnlab.profiling import benchmark
from cnnlab.profiling import memory as _memory
from cnnlab import config
from cnnlab.kernels.triton_conv import (TRITON_CPU_DETAIL, TRITON_CPU_REASON, TRITON_INTERPRETED_REASON,
                                       triton_check_device, triton_untimed_reason)
from cnnlab.studies.common import as_list, check_threads, free_memory, run_sweep, set_threads, store_path

METHODS = ("untiled", "spatial", "triton")  # untiled is the baseline every tiling is compared with
TILED_METHODS = METHODS[1:]
PAPER_TILE_SIZES = [8, 16, 32, 64]  # Sec. IV-D
PAPER_BATCH_SIZE = 8
PAPER_IMAGE_SIZE = 224  # Mini-ImageNet, 3x224x224 (Sec. III-B)
UNTILS = ("layer1", "layer2", "layer3")  # how much of the CIFAR ResNet runs spatially tiled
DATA_SOURCE = "synthetic"  # random 224x224 images: a dense CNN's time and memory do not depend on pixel values
MIB = 1024**2
# ResNet-20's distinct convolution shapes (C_in, C_out, stride) that the Triton check covers: the stem (3 input
# channels: a partly masked channel block), a stage convolution, and a stride-2 downsampling convolution.
CHECK_LAYERS = {"conv1 3->16": (3, 16, 1), "layer1 16->16": (16, 16, 1), "layer3 down 32->64 s2": (32, 64, 2)}

PRESETS = {
    # CPU smoke run: batch 2 instead of 8 (a batch of 8 takes ~1.3 s per pass on one core), one intra-op thread
    # (see batch_size.check_threads), Triton checked on small inputs and not timed.
    "quick": dict(model="resnet20", image_size=PAPER_IMAGE_SIZE, batch_size=2, tile_sizes=PAPER_TILE_SIZES,
                  methods=["spatial", "triton"], until="layer3", spatial_mode="stream", check_size=18, warmup=1,
                  repeats=3, threads=1, device=None),
    # One GPU: the paper's setting.
    "standard": dict(model="resnet20", image_size=PAPER_IMAGE_SIZE, batch_size=PAPER_BATCH_SIZE,
                     tile_sizes=PAPER_TILE_SIZES, methods=["spatial", "triton"], until="layer3",
                     spatial_mode="stream", check_size=34, warmup=5, repeats=20, threads=None, device=None),
    "paper": dict(model="resnet20", image_size=PAPER_IMAGE_SIZE, batch_size=PAPER_BATCH_SIZE,
                  tile_sizes=PAPER_TILE_SIZES, methods=["spatial", "triton"], until="layer3",
                  spatial_mode="stream", check_size=66, warmup=10, repeats=50, threads=None, device=None),
}

MEASURE_COLUMNS = [
    "tile_px", "latency_ms_median", "latency_ms_p10", "latency_ms_p90", "latency_ms_mean", "time_missing_reason",
    "throughput_items_per_s", "avg_mem_mib", "avg_mem_increment_mib", "avg_mem_missing_reason", "peak_mem_alloc_mib",
    "peak_mem_increment_mib", "peak_mem_method", "peak_mem_missing_reason", "gpu_util_pct", "gpu_util_samples",
    "gpu_util_missing_reason", "batch_size", "image_size", "until", "spatial_mode", "warmup", "repeats",
    "first_call_s", "cpu_threads", "device", "device_name", "model", "data_source",
]


# ------------------------------------------------------------------------------------------------ validation

def tile_label(tile: int | None) -> str:
    """The tile as the sweep and the tables name it: ``"8x8"``, or ``"untiled"`` for None."""
    return "untiled" if tile is None else f"{int(tile)}x{int(tile)}"


def check_model(value) -> str:
    """``value`` as the name of a CIFAR ResNet (the models whose trunk ``tile_spatially`` splits at layer1-3)."""
    valid = [n for n in models.names() if models.spec(n).family == "resnet_cifar"]
    if value not in valid:
        raise ValueError(f"model={value!r} is not valid; valid models (CIFAR ResNets): {', '.join(valid)}")
    return value


def check_tile_sizes(value, parameter: str = "tile_sizes") -> list[int]:
    """``value`` as a sorted, duplicate-free list of tile edges in pixels: powers of two from 4 to 128.

    Powers of two: the Triton kernel's block shapes must be; >= 4: the spatially tiled trunk of a CIFAR ResNet
    has a total stride of 4 and a tile must be a multiple of it (and a Triton tile must cover >= 16 pixels).
    """
    sizes = as_list(value)
    valid = "powers of two from 4 to 128, e.g. [8, 16, 32, 64]"
    if not sizes:
        raise ValueError(f"{parameter} is empty; valid: {valid}")
    for v in sizes:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 4 <= v <= 128 or v & (v - 1):
            raise ValueError(f"{parameter}: {v!r} is not a valid tile size; valid: {valid}")
    return sorted({int(v) for v in sizes})


def check_methods(value) -> list[str]:
    """``value`` as a non-empty list of tiling methods from :data:`TILED_METHODS` (untiled is always measured)."""
    names = as_list(value) if value is not None else []
    if not names:
        raise ValueError(f"methods is empty; valid methods: {', '.join(TILED_METHODS)}")
    for name in names:
        if name not in TILED_METHODS:
            raise ValueError(f"methods: {name!r} is not a tiling method; valid methods: {', '.join(TILED_METHODS)} "
                             "(the untiled model is always measured as the baseline)")
    return list(dict.fromkeys(names))


def validate(cfg):
    """Check (and normalise in place) a configuration built from :data:`PRESETS`; returns it.

    Raises ValueError naming the parameter and its valid values.
    """
    
    cfg.model = check_model(cfg.model)
    cfg.tile_sizes = check_tile_sizes(cfg.tile_sizes)
    cfg.methods = check_methods(cfg.methods)
    if cfg.until not in UNTILS:
        raise ValueError(f"until={cfg.until!r} is not valid; valid: {', '.join(UNTILS)}")
    if cfg.spatial_mode not in spatial.MODES:
        raise ValueError(f"spatial_mode={cfg.spatial_mode!r} is not valid; valid: {', '.join(spatial.MODES)}")
    for name, minimum in (("image_size", 32), ("batch_size", 1), ("check_size", 8), ("warmup", 0), ("repeats", 1)):
        setattr(cfg, name, config.positive_int(getattr(cfg, name), parameter=name, minimum=minimum))
    cfg.threads = check_threads(cfg.threads)
    cfg.device = str(config.resolve_device(cfg.device))
    return cfg


# ------------------------------------------------------------------------------------------------ memory

_STEP_MARK = "cnnlab.tiling.step"


def memory_over_time(step, device) -> dict:
    """Time-weighted average and peak of the tensor memory allocated while ``step()`` runs once.

    Replays the allocator events the PyTorch profiler records (``profile_memory=True``: one event per allocation
    and free, with its signed size), as ``cnnlab.profiling.memory`` does for the peak, and integrates the live
    bytes over the step's wall time: average = sum(live bytes x time they stayed live) / step time. On a GPU
    the events are the caching allocator's (host-side timestamps; the step synchronises before it ends, so its
    span covers the device work). Counts tensors allocated inside the step only (add what was resident before).

    Returns {"avg_bytes": float, "peak_bytes": int, "events": int, "step_s": float}.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    dev = config.resolve_device(device)
    cuda = dev.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, profile_memory=True, record_shapes=False) as prof:
        with record_function(_STEP_MARK):
            out = step()
            if cuda:
                torch.cuda.synchronize(dev)
            del out
    events = prof.profiler.kineto_results.events()
    mark = next(e for e in events if e.name() == _STEP_MARK)
    start, end = mark.start_ns(), mark.start_ns() + max(mark.duration_ns(), 1)
    side = ("CUDA", "HIP") if cuda else ("CPU", "MKLDNN", "IDEEP")
    mem = sorted((e for e in events if e.name() == "[memory]" and str(e.device_type()).split(".")[-1] in side
                  and start <= e.start_ns() <= end), key=lambda e: e.start_ns())
    live = peak = 0
    area = 0.0
    last = start
    for e in mem:
        area += live * (e.start_ns() - last)
        live += e.nbytes()
        peak = max(peak, live)
        last = e.start_ns()
    area += live * (end - last)
    return {"avg_bytes": area / (end - start), "peak_bytes": peak, "events": len(mem), "step_s": (end - start) / 1e9}


# ------------------------------------------------------------------------------------------------ models

def build(method: str, tile: int | None, *, model: str = "resnet20", until: str = "layer3",
          spatial_mode: str = "stream") -> torch.nn.Module:
    """ResNet ``model`` (seeded random weights, eval mode) untiled, spatially tiled, or with Triton convolutions.

    Built outside inference mode on purpose: the tiling helpers deep-copy the model, and a copy made under
    ``torch.inference_mode`` holds inference tensors, whose missing version counter TiledConv2d's weight cache
    reads.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not valid; valid methods: {', '.join(METHODS)}")
    torch.manual_seed(0)
    net = models.get(model).eval()
    if method == "untiled":
        return net
    if tile is None:
        raise ValueError(f"method {method!r} needs a tile size")
    if method == "spatial":
        return tile_spatially(net, tile, until=until, mode=spatial_mode)
    return tile_model(net, tile).eval()


def example_batch(batch_size: int, image_size: int, device) -> torch.Tensor:
    """A seeded random batch of shape (batch_size, 3, image_size, image_size) on ``device`` (Mini-ImageNet's
    shape at 224: labelled synthetic, since time and memory of a dense CNN do not depend on pixel values)."""
    gen = torch.Generator().manual_seed(0)
    return torch.randn(batch_size, 3, image_size, image_size, generator=gen).to(config.resolve_device(device))


# ------------------------------------------------------------------------------------------------ measurements

def measure_point(method: str, tile: str, *, model: str, image_size: int, batch_size: int, until: str,
                  spatial_mode: str, device, warmup: int, repeats: int) -> dict:
    """One (method, tile) point; see :func:`measure` for the columns."""
    dev = config.resolve_device(device)
    tile_px = None if tile == "untiled" else int(tile.split("x")[0])
    net = build(method, tile_px, model=model, until=until, spatial_mode=spatial_mode).to(dev)
    x = example_batch(batch_size, image_size, dev)  # on the device: the study times the convolutions, not copies

    def step():
        with torch.inference_mode():
            return net(x)

    try:
        start = time.perf_counter()
        step()  # first call: Triton compiles its kernels here on a GPU; timed apart, never in the statistics
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        first_s = time.perf_counter() - start
        m = benchmark(net, x, device=dev, warmup=warmup, repeats=repeats, batch_size=batch_size)
        resident = torch.cuda.memory_allocated(dev) if dev.type == "cuda" else _memory.resident_bytes(net, [x])
        timeline = memory_over_time(step, dev)
    finally:
        del net, x
        free_memory()
    row = m.as_row()
    if timeline["events"]:
        avg_increment, avg_reason = timeline["avg_bytes"] / MIB, None
    else:
        avg_increment, avg_reason = math.nan, "the profiler recorded no allocator events for this device"
    row.update(tile_px=tile_px if tile_px is not None else math.nan, time_missing_reason=None,
               avg_mem_increment_mib=avg_increment, avg_mem_mib=resident / MIB + avg_increment,
               avg_mem_missing_reason=avg_reason, image_size=image_size, until=until if method == "spatial" else None,
               spatial_mode=spatial_mode if method == "spatial" else None, first_call_s=first_s, model=model,
               data_source=DATA_SOURCE)
    return {k: row.get(k) for k in MEASURE_COLUMNS}


def skipped_row(method: str, tile: int, *, reason: str, detail: str, **settings) -> dict:
    """A row for a point that is not measured on this device: status "skipped", every metric NaN with ``reason``."""
    row = {"method": method, "tile": tile_label(tile), "status": "skipped", "error": detail}
    row.update({k: math.nan for k in MEASURE_COLUMNS})
    row.update(tile_px=tile, time_missing_reason=reason, avg_mem_missing_reason=reason,
               peak_mem_missing_reason=reason, gpu_util_missing_reason=reason, gpu_util_samples=0,
               data_source=DATA_SOURCE, **settings)
    return row


def measure(tile_sizes=PAPER_TILE_SIZES, methods=TILED_METHODS, *, model: str = "resnet20",
            image_size: int = PAPER_IMAGE_SIZE, batch_size: int = PAPER_BATCH_SIZE, until: str = "layer3",
            spatial_mode: str = "stream", device="cpu", warmup: int = 1, repeats: int = 3,
            store: str | Path | None = None, progress: bool = True) -> pd.DataFrame:
    """Time, GPU utilisation, average and peak memory of ``model`` untiled and per (method, tile size).

    One row for the untiled model, then one per (method, tile) in the order given. Input: a random batch of
    ``batch_size`` images of 3 x ``image_size`` x ``image_size`` already on ``device``. Columns: method,
    tile ("untiled", "8x8", ...), status ("ok", "skipped", "oom", "error"), error, point_time_s, finished_utc,
    tile_px (tile edge in pixels; NaN untiled), latency_ms_median/p10/p90/mean (ms per batch: Fig. 6's inference
    time) with time_missing_reason, throughput_items_per_s, avg_mem_mib (MiB, resident tensors plus the
    time-weighted average of the tensor memory allocated during one pass, :func:`memory_over_time`; Fig. 6's
    average memory) and avg_mem_increment_mib, peak_mem_alloc_mib / peak_mem_increment_mib (MiB, see
    ``cnnlab.profiling.benchmark``), gpu_util_pct (%, NaN on a CPU with gpu_util_missing_reason), settings,
    first_call_s (s, the untimed first call; includes Triton's compilation on a GPU), data_source, and
    :func:`add_ratios`' columns. On a CPU the Triton rows are "skipped" with :data:`TRITON_CPU_REASON`.
    """
    tile_sizes = check_tile_sizes(tile_sizes)
    methods = check_methods(methods)
    model = check_model(model)
    dev = str(config.resolve_device(device))
    settings = dict(batch_size=batch_size, image_size=image_size, device=dev, warmup=warmup, repeats=repeats,
                    model=model)
    points, skipped = [{"method": "untiled", "tile": "untiled"}], []
    untimed = triton_untimed_reason(dev)
    for method in methods:
        for tile in tile_sizes:
            if method == "triton" and untimed is not None:
                skipped.append(skipped_row(method, tile, reason=untimed[0], detail=untimed[1], **settings))
            else:
                points.append({"method": method, "tile": tile_label(tile)})

    def point(method, tile):
        return measure_point(method, tile, model=model, image_size=image_size, batch_size=batch_size, until=until,
                             spatial_mode=spatial_mode, device=dev, warmup=warmup, repeats=repeats)

    df = run_sweep(point, points, store, "tiling: time and memory", progress)
    if skipped:
        df = pd.concat([df, pd.DataFrame(skipped)], ignore_index=True)
    order = {(p["method"], p["tile"]): i for i, p in enumerate(
        [{"method": "untiled", "tile": "untiled"}] + [{"method": m, "tile": tile_label(t)} for m in methods
                                                     for t in tile_sizes])}
    df = df.assign(_rank=[order[(m, t)] for m, t in zip(df["method"], df["tile"])]).sort_values("_rank")
    return add_ratios(df.drop(columns="_rank").reset_index(drop=True))


def add_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with time_vs_untiled, avg_mem_vs_untiled and peak_mem_vs_untiled: each row's median time per batch,
    average and peak memory divided by the untiled row's (1.0 for the untiled row; NaN where either is missing)."""
    out = df.copy()
    base = out[(out["method"] == "untiled") & (out["status"] == "ok")]
    for col, metric in (("time_vs_untiled", "latency_ms_median"), ("avg_mem_vs_untiled", "avg_mem_mib"),
                        ("peak_mem_vs_untiled", "peak_mem_alloc_mib")):
        ref = float(base[metric].iloc[0]) if len(base) else math.nan
        out[col] = pd.to_numeric(out[metric], errors="coerce") / ref
    return out


# ------------------------------------------------------------------------------------------------ Triton check

def check_triton(tile_sizes=PAPER_TILE_SIZES, *, size: int = 18, batch_size: int = 2, layers=None,
                 seed: int = 0) -> pd.DataFrame:
    """The Triton kernel against ``F.conv2d`` (fp32) on ResNet-20's convolution shapes, at every tile size.

    For each tile and each layer of ``layers`` (default :data:`CHECK_LAYERS`: name -> (C_in, C_out, stride);
    3x3 kernels, padding 1) a random ``batch_size`` x C_in x ``size`` x ``size`` input and random weights and
    bias are convolved into an output pre-filled with NaN (an element the kernel fails to write stays NaN and
    fails the check). One row per (tile, layer): tile, tile_px, layer, input_shape, device, max_abs_error,
    rel_error (max |error| / max |reference|), tolerance, dot_precision ("ieee" or "tf32"), passed (bool),
    check_s (s), check_missing_reason (when the kernel cannot run here; then passed is None). Runs where
    :func:`triton_check_device` says: interpreted on a CPU (slow: keep ``size`` small), compiled on a GPU.
    """
    tile_sizes = check_tile_sizes(tile_sizes)
    layers = dict(CHECK_LAYERS if layers is None else layers)
    dev, reason = triton_check_device()
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for tile in tile_sizes:
        for name, (c_in, c_out, stride) in layers.items():
            shape = (batch_size, c_in, size, size)
            row = {"tile": tile_label(tile), "tile_px": tile, "layer": name, "input_shape": "x".join(map(str, shape)),
                   "device": dev, "check_missing_reason": reason}
            if dev is None:
                rows.append({**row, "max_abs_error": math.nan, "rel_error": math.nan, "tolerance": math.nan,
                             "dot_precision": None, "passed": None, "check_s": math.nan})
                continue
            x = torch.randn(shape, generator=gen).to(dev)
            w = (torch.randn(c_out, c_in, 3, 3, generator=gen) / math.sqrt(9 * c_in)).to(dev)
            b = torch.randn(c_out, generator=gen).to(dev)
            ref = F.conv2d(x, w, b, stride, 1)
            out = torch.full_like(ref, math.nan)
            start = time.perf_counter()
            tiled_conv2d(x, w, b, stride, 1, tile, out=out)
            if dev == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            # On a GPU fp32 products may use TF32 tensor cores (exactly when cuDNN is allowed to): 10-bit mantissa.
            tf32 = dev == "cuda" and torch.backends.cudnn.allow_tf32
            tolerance = 1e-2 if tf32 else 2e-5
            err = (out - ref).abs().max().item()  # NaN if any element was not written
            rel = err / max(ref.abs().max().item(), 1e-6)
            rows.append({**row, "max_abs_error": err, "rel_error": rel, "tolerance": tolerance,
                         "dot_precision": "tf32" if tf32 else "ieee", "passed": bool(rel <= tolerance),
                         "check_s": seconds})
    return pd.DataFrame(rows)


@contextlib.contextmanager
def exact_fp32():
    """Inside the block, fp32 convolutions and matmuls on a GPU use full fp32, not TF32 (restored after): a
    comparison of two ways to compute a network then measures the method, not TF32's 10-bit rounding."""
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


def check_tiled_logits(tile_sizes=PAPER_TILE_SIZES, *, model: str = "resnet20", image_size: int = PAPER_IMAGE_SIZE,
                       until: str = "layer3", spatial_mode: str = "stream", device="cpu") -> pd.DataFrame:
    """Spatially tiled ``model`` against the untiled one on one random image: one row per tile with tile,
    tile_px, rel_error (max |logit difference| / max |logit|) and shape_ok (same output shape). Computed in full
    fp32 on a GPU too (:func:`exact_fp32`)."""
    dev = config.resolve_device(device)
    x = example_batch(1, image_size, dev)
    ref_net = build("untiled", None, model=model).to(dev)
    with torch.inference_mode(), exact_fp32():
        ref = ref_net(x)
    rows = []
    for tile in check_tile_sizes(tile_sizes):
        net = build("spatial", tile, model=model, until=until, spatial_mode=spatial_mode).to(dev)
        with torch.inference_mode(), exact_fp32():
            y = net(x)
        rows.append({"tile": tile_label(tile), "tile_px": tile, "shape_ok": tuple(y.shape) == tuple(ref.shape),
                     "rel_error": ((y - ref).abs().max() / ref.abs().max()).item()})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------ claims

def _series(df: pd.DataFrame, method: str, metric: str) -> pd.Series:
    ok = df[(df["method"] == method) & (df["status"] == "ok")].dropna(subset=[metric])
    return ok.set_index("tile_px")[metric].sort_index()


def _falls(values: pd.Series, tolerance: float) -> bool:
    """Lower at the largest tile than at the smallest, and no step up by more than ``tolerance`` (relative)."""
    v = values.to_numpy(dtype=float)
    return bool(v[-1] < v[0] and np.all(v[1:] <= v[:-1] * (1 + tolerance)))


def _rises(values: pd.Series, tolerance: float) -> bool:
    v = values.to_numpy(dtype=float)
    return bool(v[-1] > v[0] and np.all(v[1:] >= v[:-1] * (1 - tolerance)))


def _trend(values: pd.Series, unit: str, fmt: str = ".3g") -> str:
    return " -> ".join(f"{int(t)}: {v:{fmt}}" for t, v in values.items()) + f" {unit}"


_REASON = {"latency_ms_median": "time_missing_reason", "gpu_util_pct": "gpu_util_missing_reason",
           "avg_mem_mib": "avg_mem_missing_reason"}
TIME_TOLERANCE = 0.05  # a step from one tile to the next may rise this much (timing noise) and still "fall"
MEMORY_TOLERANCE = 0.01


def check_claims(df: pd.DataFrame, *, device: str) -> list[Claim]:
    """The claims of Sec. IV-D checked per tiling method on :func:`measure`'s result.

    1. inference time falls as tiles grow (lower at the largest tile than at the smallest, no step up by more
       than :data:`TIME_TOLERANCE`); 2. GPU utilisation rises with tile size (GPU only: n/a on a CPU);
    3. average memory rises (slightly) with tile size (higher at the largest tile, no step down by more than
       :data:`MEMORY_TOLERANCE`; how much it rises is reported, since "slightly" has no threshold).
    A method whose points were not measured here gives held=None with the recorded reason.
    """
    dev = str(device)
    methods = [m for m in TILED_METHODS if m in set(df["method"])]
    checks = []
    specs = [("latency_ms_median", "inference time falls as tiles grow", "Fig. 6 red line: time drops "
              "significantly with larger tiles", "ms/batch", _falls, TIME_TOLERANCE),
             ("gpu_util_pct", "GPU utilisation rises with tile size", "Fig. 6 blue dashed line: utilisation "
              "increases with larger tiles", "%", _rises, 0.0),
             ("avg_mem_mib", "average memory rises (paper: slightly) with tile size", "Fig. 6 green dash-dot "
              "line: a slight increase with larger tiles", "MiB", _rises, MEMORY_TOLERANCE)]
    for metric, claim, paper, unit, test, tol in specs:
        for method in methods:
            values = _series(df, method, metric)
            rows = df[df["method"] == method]
            label = f"{claim} ({method})"
            if len(values) < 2:
                reasons = set(rows[_REASON[metric]].dropna().astype(str)) if _REASON[metric] in rows else set()
                if "error" in rows:
                    reasons |= {str(e).split(":")[0] for e in rows.loc[rows["status"] != "ok", "error"].dropna()}
                note = "; ".join(sorted(reasons)) or "fewer than two tile sizes measured"
                checks.append(Claim(claim=label, paper=paper, ours="not measured", held=None, device=dev, note=note))
                continue
            held = test(values, tol)
            note = ""
            if metric == "avg_mem_mib":
                rise = 100 * (values.iloc[-1] / values.iloc[0] - 1)
                note = (f"change from tile {int(values.index[0])} to {int(values.index[-1])}: {rise:+.0f}% (the paper "
                        "gives no number for 'slightly')")
            checks.append(Claim(claim=label, paper=paper, ours=_trend(values, unit), held=held, device=dev,
                                note=note))
    return checks


# ------------------------------------------------------------------------------------------------ figures

PANELS = [("latency_ms_median", "Inference time per batch (ms)", "Inference time (lower is better)"),
          ("gpu_util_pct", "GPU utilisation (%)", "GPU utilisation (higher is better)"),
          ("avg_mem_mib", "Average memory (MiB)", "Average memory"),
          ("peak_mem_alloc_mib", "Peak memory allocated (MiB)", "Peak memory")]
_STYLE = {"spatial": dict(marker="o", linestyle="-"), "triton": dict(marker="s", linestyle="--")}
_NAMES = {"spatial": "spatial tiling (strips of tile rows)", "triton": "Triton kernel (tile x tile output pixels)"}


def plot_tiling(df: pd.DataFrame):
    """Paper Fig. 6 as four panels against tile size: time per batch (with p10-p90 bars), GPU utilisation,
    average memory and peak memory; one line per tiling method, the untiled model as a dashed grey line. A panel
    or method this device cannot measure says why instead of showing zeros."""
    from cnnlab import plotting
    from cnnlab.studies.common import missing_panel

    ok = df[df["status"] == "ok"]
    tiles = sorted(int(t) for t in df["tile_px"].dropna().unique())
    base = ok[ok["method"] == "untiled"]
    colors = dict(zip(TILED_METHODS, plotting.plt.get_cmap("tab10").colors[:: 3]))
    fig, axes = plotting.plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    batch = int(df["batch_size"].dropna().iloc[0]) if df["batch_size"].notna().any() else None
    size = int(df["image_size"].dropna().iloc[0]) if df["image_size"].notna().any() else None
    for ax, (metric, ylabel, title) in zip(axes.flat, PANELS):
        ax.set_title(title)
        drawn = False
        for method in TILED_METHODS:
            d = ok[ok["method"] == method].dropna(subset=[metric]).sort_values("tile_px")
            if d.empty:
                continue
            y = d[metric].to_numpy(dtype=float)
            ax.plot(d["tile_px"], y, color=colors[method], label=_NAMES[method], **_STYLE[method])
            if metric == "latency_ms_median":
                ax.errorbar(d["tile_px"], y, yerr=[y - d["latency_ms_p10"], d["latency_ms_p90"] - y], fmt="none",
                            ecolor=colors[method], capsize=3, lw=1)
            drawn = True
        if len(base) and not np.isnan(float(base[metric].iloc[0])):
            ax.axhline(float(base[metric].iloc[0]), color="0.4", linestyle=":", lw=1.5, label="untiled")
            drawn = True
        if not drawn:
            reason_col = "gpu_util_missing_reason" if metric == "gpu_util_pct" else "time_missing_reason"
            reasons = "; ".join(df[reason_col].dropna().astype(str).unique()) or "not measured"
            missing_panel(ax, f"not measured on this device:\n{reasons}")
        else:
            ax.set_ylabel(ylabel)
            if metric == "gpu_util_pct":
                ax.set_ylim(0, 100)
            elif metric != "latency_ms_median":
                ax.set_ylim(bottom=0)
        plotting.log2_batch_axis(ax, values=tiles or [8, 16, 32, 64], label="Tile edge (pixels)")
    for ax in axes[0]:
        ax.set_xlabel("")  # shared with the panel below, which carries the label and the ticks
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=3, bbox_to_anchor=(0.5, -0.01), fontsize=9)
    untimed = df[df["status"] == "skipped"]
    if len(untimed):
        missing = "; ".join(f"{_NAMES.get(m, m)}: {r}" for m, r in
                            untimed.groupby("method", sort=False)["time_missing_reason"].first().items())
        fig.text(0.5, -0.045, f"Not measured on this device: {missing}", ha="center", fontsize=9, color="0.3")
    name = str(df["model"].dropna().iloc[0]) if df["model"].notna().any() else "model"
    what = f"{name}, batch {batch}, {size}x{size} input" if batch and size else name
    fig.suptitle(f"Tile size vs time, utilisation and memory ({what})", fontweight="bold")
    fig.tight_layout()
    return fig


__all__ = ["CHECK_LAYERS", "METHODS", "PAPER_BATCH_SIZE", "PAPER_IMAGE_SIZE", "PAPER_TILE_SIZES", "PRESETS",
           "TILED_METHODS", "TRITON_CPU_REASON", "TRITON_INTERPRETED_REASON", "add_ratios", "build", "check_claims",
           "check_methods", "check_model", "check_tile_sizes", "check_tiled_logits", "check_triton", "example_batch",
           "exact_fp32", "measure", "memory_over_time", "plot_tiling", "set_threads", "store_path", "tile_label",
           "triton_check_device", "triton_untimed_reason", "validate"]
