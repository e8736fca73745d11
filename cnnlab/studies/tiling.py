"""Study 04 (tiling): memory tiling of ResNet-20 at 224x224: time, GPU utilisation, average and peak memory per tile.

Paper 001 (Maji et al., Sec. III-D and IV-D, Fig. 6) runs ResNet-20 on Mini-ImageNet (3x224x224) at batch 8 with
convolution tiles of 8x8 to 64x64: time falls as tiles grow, GPU utilisation rises, average memory rises slightly.
It does not say how it tiled; cnnlab measures two tilings, each against the untiled model:

- ``triton``: every Conv2d replaced by cnnlab's Triton kernel (``cnnlab.kernels.tile_model``), one program per
  ``tile x tile`` block of output pixels (the paper's GPU tiles). On a CPU Triton only runs interpreted, so there
  the kernel is checked, never timed: its points are "skipped" with ``triton_conv.TRITON_CPU_REASON``.
- ``spatial``: the convolutional trunk runs tile by tile over the image (``cnnlab.kernels.spatial_tiling``, stream
  mode: strips of ``tile`` input rows with line buffers for the halo), so no full-size activation lives.

Experiments: "tiles" (per (method, tile)), "triton_check" (the kernel against ``F.conv2d`` on ResNet-20's layer
shapes), "logits_check" (spatially tiled logits against untiled). Input: random tensors (``data_source =
synthetic``): a dense CNN does the same work whatever the pixel values.
"""

from __future__ import annotations

import math
from contextlib import suppress
from functools import partial
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from cnnlab import claims, config, models, studies
from cnnlab.claims import Claim, Declared, Ends, Measured, Spread, below, falls, rises, within
from cnnlab.kernels import spatial_tiling, tile_model, tiled_conv2d, triton_conv
from cnnlab.plotting.tiling import PAPER_TILE_SIZES, TILED_METHODS, why_missing
from cnnlab.plotting.tiling import figures  # noqa: F401  (the contract's figures(df))
from cnnlab.profiling import benchmark, combine_rounds, derived, free_memory, memory, wall_time
from cnnlab.profiling.compare import Paired, until_decided
from cnnlab.profiling.estimate import Work, forward, profiler_session, under_profiler
from cnnlab.profiling.gpu_util import UTIL_MIN_RUN_TIME_S
from cnnlab.profiling.memory import MIB
from cnnlab.studies import Experiment, Parameter

PAPER_BATCH_SIZE = 8
PAPER_IMAGE_SIZE = 224  # Mini-ImageNet, 3x224x224 (Sec. III-B)
UNTILS = ("layer1", "layer2", "layer3", "avgpool")  # how much of the CIFAR ResNet runs spatially tiled (avgpool:
# the whole trunk and its global average pool, summed strip by strip: not even the trunk's output is stitched)
DATA_SOURCE = "synthetic"
# ResNet-20's distinct convolution shapes (C_in, C_out, stride) for the Triton check: the stem (3 input channels: a
# partly masked channel block), a stage convolution, and a stride-2 downsampling convolution.
CHECK_LAYERS = {"conv1 3->16": (3, 16, 1), "layer1 16->16": (16, 16, 1), "layer3 down 32->64 s2": (32, 64, 2)}
CHECK_BATCH = 2
# Every compared quantity carries its noise (cnnlab.claims): times in paired rounds (min_rounds to max_rounds: every
# point once a round, the order reversed every other round; cnnlab.profiling.compare); average memory over
# AVG_MEM_REPEATS profiled passes in each of the first MEMORY_ROUNDS rounds (time-weighted, so it moves with timing;
# it is not a comparison of paired times, so rounds added for the time claims do not profile it again); GPU
# utilisation over the rounds (one timed loop's NVML mean a round).
AVG_MEM_REPEATS = 3
MEMORY_ROUNDS = 3
# What the CPU does not have (issue 43, item 1): the paper's tiles are GPU shared-memory tiles, its utilisation the
# share of time the SMs are busy (Sec. III-C); here the spatial tiling's strips of rows stand in for the one, and
# NVML's "a kernel was running" for the other. Those claims are judged on a GPU only, the values shown elsewhere.
STRIPS_FOR_TILES = ("on a CPU the spatial tiling's strips of rows, kept in caches and line buffers, stand in for the "
                    "paper's GPU shared-memory tiles: what a strip's size does to the memory in use there is not "
                    "what a tile's does on a GPU")
NVML_FOR_SMS = ("NVML's utilisation, the share of time in which a kernel was running, stands in for the paper's "
                "share of time the SMs are busy (Sec. III-C): a kernel that occupies few SMs counts as fully busy")
# Paper 001 gives no numbers for Fig. 6. "Significantly" (time) we read as SIGNIFICANT_DROP from the smallest to the
# largest tile; "slight" (average memory) as the workbook's bound for "slight" (claims.SLIGHT). "Very effective at
# reducing latency" (Sec. V, said of tiling with no untiled baseline beside it) we read as the largest tile's time
# below the untiled model's by more than a "slight" change: that comparison is ours (issue 32, item 9).
SIGNIFICANT_DROP = 0.9  # time at the largest tile / at the smallest < this


def _resnet(value, parameter: str) -> str:  # the models tile_spatially splits at layer1-3 or avgpool
    return config.one_of(value, [n for n in models.names() if models.spec(n).family == "resnet_cifar"],
                         parameter=parameter)


def _tile_sizes(value, parameter: str) -> list[int]:
    """Powers of two from 4 to 128 (the Triton kernel's block shapes; the tiled trunk's total stride is 4)."""
    tiles = config.positive_ints(value, parameter=parameter, minimum=4, example="[8, 16, 32, 64]")
    for tile in tiles:
        if tile > 128 or tile & (tile - 1):
            raise ValueError(f"{parameter}: {tile} is not a valid tile size; valid: powers of two from 4 to 128, "
                             "e.g. [8, 16, 32, 64]")
    return tiles


def _check(cfg) -> None:
    """The global pool is summed strip by strip only in stream mode: refuse the one combination that cannot run."""
    if cfg.until == "avgpool" and cfg.spatial_mode != "stream":
        raise ValueError("until='avgpool' needs spatial_mode='stream' (the pool is summed strip by strip); with "
                         f"spatial_mode={cfg.spatial_mode!r} choose until from "
                         f"{', '.join(u for u in UNTILS if u != 'avgpool')}")


# quick: a CPU smoke run, batch 2 instead of 8 (a batch of 8 takes ~1.3 s per pass on one core), one intra-op thread
# (see config.threads), Triton checked on small inputs and not timed; standard and paper: one GPU, the paper's setting.
PARAMETERS = studies.Parameters(
    check=_check,
    model=Parameter("resnet20", check=_resnet, doc="a CIFAR ResNet (its trunk is tiled)"),
    image_size=Parameter(PAPER_IMAGE_SIZE, check=config.image_size, doc="input pixels a side"),
    batch_size=Parameter(2, PAPER_BATCH_SIZE, check=config.batch_size, doc="images per batch"),
    tile_sizes=Parameter(PAPER_TILE_SIZES, check=_tile_sizes, axis=True, doc="tile edges (pixels): powers of two"),
    methods=Parameter(["spatial", "triton"], axis=True,
                      check=partial(config.names_list, valid=TILED_METHODS, hint="(untiled is always measured)"),
                      doc=f"tilings from {', '.join(TILED_METHODS)} (untiled is always measured)"),
    until=Parameter("avgpool", check=partial(config.one_of, valid=UNTILS),
                    doc="how much of the model is tiled (avgpool: the trunk and its global pool)"),
    spatial_mode=Parameter("stream", check=partial(config.one_of, valid=spatial_tiling.MODES),
                           doc=" | ".join(spatial_tiling.MODES)),
    check_size=Parameter(18, 34, 66, check=partial(config.image_size, minimum=8),
                         doc="Triton check's input pixels a side"),
    warmup=Parameter(1, 5, 10, check=partial(config.positive_int, minimum=0), doc="untimed batches per point"),
    repeats=Parameter(3, 20, 50, check=config.positive_int, doc="timed batches per point and round"),
    min_rounds=studies.MIN_ROUNDS,
    max_rounds=studies.MAX_ROUNDS,
    # quick: the rounds after the first look may take this long (~6 s a round here, ~8 s under load): 100 s reaches
    # the look at 12 rounds. Its claims on a CPU: tiled against untiled is decided at 8 rounds (1.55x, 1.45-1.72x at
    # 18); the trend's 32 -> 64 step sits within a few per cent of 1, undecided at 18 rounds in every quick run, so
    # 150 s (18 rounds) bought no verdict. On a GPU a round takes well under a second.
    round_budget_s=Parameter(100, 600, 1800, check=partial(config.number, low=0, high=86400, low_open=False),
                             type="float", doc="seconds the timing rounds may take in all, more rounds added while "
                             "undecided"),
    threads=studies.THREADS,
    tf32=studies.TF32,
    device=studies.DEVICE,
)
configure = PARAMETERS.configure


def _label(tile: int) -> str:
    return f"{tile}x{tile}"


def _px(label: str) -> int | None:  # a tile label's edge in pixels ("8x8" -> 8; "untiled" -> None)
    return None if label == "untiled" else int(label.split("x")[0])


def build(model: str, method: str, tile: int | None, *, until: str, spatial_mode: str) -> torch.nn.Module:
    """``model`` (seeded weights, eval mode) on the CPU: "untiled", "spatial" (``tile_spatially`` up to ``until`` in
    ``spatial_mode``) or "triton" (every Conv2d a Triton ``TiledConv2d``). Built outside inference mode: the tiling
    helpers deep-copy, and a copy under it holds inference tensors, which TiledConv2d's weight cache cannot read."""
    torch.manual_seed(0)
    net = models.get(model).eval()
    if method == "spatial":
        return spatial_tiling.tile_spatially(net, tile, until=until, mode=spatial_mode)
    return tile_model(net, tile).eval() if method == "triton" else net


def example_batch(batch_size: int, image_size: int, device) -> torch.Tensor:
    """A seeded random batch of shape (batch_size, 3, image_size, image_size) on ``device``."""
    gen = torch.Generator().manual_seed(0)
    return torch.randn(batch_size, 3, image_size, image_size, generator=gen).to(device)


def tile_point(round, method, tile, *, model, image_size, batch_size, until, spatial_mode, warmup, repeats,  # noqa
               device) -> dict:
    """One point of experiment "tiles" in one round (a pass over the grid, a column of the store): ``benchmark``'s
    columns for a batch on the device (latency_ms_* per batch; first_call_ms, where Triton compiles on a GPU;
    peak_mem_alloc_mib; gpu_util_pct, NVML in the timed loop, NaN on a CPU), gpu_util_pct_low/_high (this round's
    one mean: :func:`combine_rounds` spreads it over the rounds, never one loop's samples), gpu_util_rounds (1, 0
    where not measured: :func:`measure` sums them), tile_px (NaN untiled)."""
    free_memory()
    dev, spatial = torch.device(device), method == "spatial"
    net = build(model, method, _px(tile), until=until, spatial_mode=spatial_mode).to(dev)
    x = example_batch(batch_size, image_size, dev)  # on the device: the convolutions, not copies
    # peak memory is the same work's in every round: measured in the first (on a CPU it costs two more passes)
    m = benchmark(net, x, device=dev, warmup=warmup, repeats=repeats, first_call=True, measure_gpu_util=True,
                  measure_memory=round == 0)
    util = m.gpu_util_pct
    return {**m.as_row(), "gpu_util_pct_low": util, "gpu_util_pct_high": util,
            "gpu_util_rounds": 0 if math.isnan(util) else 1, "tile_px": _px(tile), "image_size": image_size,
            "until": until if spatial else None, "spatial_mode": spatial_mode if spatial else None, "model": model,
            "data_source": DATA_SOURCE}


def memory_point(round, method, tile, *, model, image_size, batch_size, until, spatial_mode,  # noqa: A002
                 device) -> dict:
    """One point of experiment "tile_memory" in one round, swept after every timing (none is timed after a CUDA
    profile: ``cnnlab.profiling.cupti``): avg_mem_mib (MiB, Fig. 6's average memory: resident tensors plus the
    time-weighted average of those allocated in a pass, ``memory.average_memory``, by device time on a GPU; median
    of :data:`AVG_MEM_REPEATS` passes, least and most in _low/_high), avg_mem_increment_mib (less the resident)."""
    free_memory()
    dev = torch.device(device)
    net = build(model, method, _px(tile), until=until, spatial_mode=spatial_mode).to(dev)
    x = example_batch(batch_size, image_size, dev)
    step = partial(forward, net, x)  # one pass under inference mode
    step()  # the first call compiles (Triton) or picks algorithms: not the pass measured
    resident = memory.resident_now(dev, net, [x])
    mem = memory.average_memory(step, dev, resident=resident, repeats=AVG_MEM_REPEATS)  # NaN if a pass saw no event
    return {**mem, "avg_mem_repeats": AVG_MEM_REPEATS, "avg_mem_increment_mib": mem["avg_mem_mib"] - resident / MIB}


def triton_point(tile, layer, *, check_size) -> dict:
    """Experiment "triton_check"'s point: the Triton kernel against ``F.conv2d`` (fp32, 3x3, padding 1) on
    :data:`CHECK_LAYERS`' ``layer``, a seeded :data:`CHECK_BATCH` x C_in x ``check_size``^2 input, the output first
    NaN (an unwritten element fails), where ``triton_check_device`` says: tile_px, input_shape, device, max_abs_error,
    rel_error (max |error| / max |reference|), tolerance, dot_precision ("ieee"/"tf32"), passed, check_s (s)."""
    dev = triton_conv.triton_check_device()[0]
    c_in, c_out, stride = CHECK_LAYERS[layer]
    gen = torch.Generator().manual_seed(0)
    shape = (CHECK_BATCH, c_in, check_size, check_size)
    x = torch.randn(shape, generator=gen).to(dev)
    w = (torch.randn(c_out, c_in, 3, 3, generator=gen) / math.sqrt(9 * c_in)).to(dev)
    b = torch.randn(c_out, generator=gen).to(dev)
    ref = F.conv2d(x, w, b, stride, 1)
    out = torch.full_like(ref, math.nan)
    seconds = wall_time(lambda: tiled_conv2d(x, w, b, stride, 1, _px(tile), out=out), device=dev).seconds
    # On a GPU fp32 products may use TF32 tensor cores (exactly when cuDNN is allowed to): 10-bit mantissa.
    tf32 = dev == "cuda" and config.tf32_enabled("conv")
    tolerance = 1e-2 if tf32 else 2e-5
    err = (out - ref).abs().max().item()  # NaN if any element was not written
    rel = err / max(ref.abs().max().item(), 1e-6)
    return {"tile_px": _px(tile), "input_shape": "x".join(map(str, shape)), "device": dev, "max_abs_error": err,
            "rel_error": rel, "tolerance": tolerance, "dot_precision": "tf32" if tf32 else "ieee",
            "passed": bool(rel <= tolerance), "check_s": seconds}


def logits_point(tile, *, model, image_size, until, spatial_mode, device) -> dict:
    """One point of experiment "logits_check": the spatially tiled ``model`` against the untiled one on one random
    image: tile_px, shape_ok (same output shape), rel_error (max |logit difference| / max |logit|). In full fp32 on
    a GPU too (TF32 off), so the comparison measures the tiling, not TF32's rounding."""
    x = example_batch(1, image_size, device)
    nets = [build(model, method, _px(tile), until=until, spatial_mode=spatial_mode).to(device)
            for method in ("untiled", "spatial")]
    with torch.inference_mode(), config.tf32(False):
        ref, y = (net(x) for net in nets)
    return {"tile_px": _px(tile), "shape_ok": tuple(y.shape) == tuple(ref.shape),
            "rel_error": ((y - ref).abs().max() / ref.abs().max()).item()}


TILES = Experiment("tiles", tile_point, desc="tiling: time")
TILE_MEMORY = Experiment("tile_memory", memory_point, desc="tiling: average memory")
TRITON_CHECK = Experiment("triton_check", triton_point, desc="tiling: Triton check")
LOGITS_CHECK = Experiment("logits_check", logits_point, desc="tiling: spatial logits")


def check_triton(cfg, store_dir: str | Path | None = None, progress: bool = False) -> pd.DataFrame:
    """Experiment "triton_check" (:func:`triton_point`) at every tile and layer of :data:`CHECK_LAYERS`: rows tile,
    layer, then the point's columns; "skipped" with the reason where the kernel cannot run."""
    dev, reason = triton_conv.triton_check_device()
    points = [dict(tile=_label(t), layer=layer) for t in cfg.tile_sizes for layer in CHECK_LAYERS]
    return TRITON_CHECK.run(cfg, store_dir, progress=progress, points=points, skip=lambda tile, layer: reason,
                            settings=dict(check_device=dev, check_layers=CHECK_LAYERS, check_batch=CHECK_BATCH,
                                          tf32=config.tf32_enabled("conv")))


def plan(cfg) -> list[Work]:
    """What :func:`measure` does, for its estimate: per round and timed point its first call, warm-up, timed
    batches and profiled passes (average memory; on a CPU the memory pass), on a GPU the utilisation window; the
    Triton check's points (one probed) and the logits check's two passes per tile."""
    config.set_threads(cfg.threads)
    dev = torch.device(cfg.device)
    x = example_batch(cfg.batch_size, cfg.image_size, dev)
    untimed = triton_conv.triton_untimed_reason(cfg.device)
    points = [("untiled", None)] + [(m, t) for m in cfg.methods for t in cfg.tile_sizes
                                    if not (m == "triton" and untimed)]
    works = []
    profiler_session(dev)()  # the profiler's start-up, once per process, paid here: not in a probe's time
    for method, tile in points:
        net = build(cfg.model, method, tile, until=cfg.until, spatial_mode=cfg.spatial_mode).to(dev)
        step = partial(forward, net, x)
        # profiled passes (8x a plain one for small tiles) timed warm: the average memory's in MEMORY_ROUNDS rounds,
        # on a CPU benchmark's memory pass (two more) in the first; rounds to the first look (more where undecided)
        profiled = MEMORY_ROUNDS * AVG_MEM_REPEATS + (2 if dev.type == "cpu" else 0)
        works += [Work("tiles", cfg.min_rounds * (1 + cfg.warmup + cfg.repeats) + MEMORY_ROUNDS, step),
                  Work("tiles", profiled, lambda step=step: under_profiler(step, dev), warm=True)]
    if dev.type == "cuda":
        works.append(Work("utilisation windows", cfg.min_rounds * len(points), UTIL_MIN_RUN_TIME_S))
    if triton_conv.triton_check_device()[0] is not None:
        layer, tile = list(CHECK_LAYERS)[1], _label(cfg.tile_sizes[len(cfg.tile_sizes) // 2])
        works.append(Work("Triton check", len(cfg.tile_sizes) * len(CHECK_LAYERS),
                          lambda: triton_point(tile, layer, check_size=cfg.check_size)))
    one = example_batch(1, cfg.image_size, dev)
    for method in ("untiled", "spatial"):
        net = build(cfg.model, method, cfg.tile_sizes[0], until=cfg.until, spatial_mode=cfg.spatial_mode).to(dev)
        works.append(Work("logits check", len(cfg.tile_sizes), partial(forward, net, one)))
    return works


def alternating(points: list[dict], rounds) -> list[dict]:
    """``points`` once in each of ``rounds`` (round numbers), round outermost: even rounds in the order given, odd
    ones reversed, so that no point always runs first after a change of load (``cnnlab.profiling.compare``)."""
    return [dict(round=r, **p) for r in rounds for p in (points if r % 2 == 0 else points[::-1])]


@studies.measurement(plan)
def measure(cfg, store_dir: str | Path | None, progress: bool = True) -> pd.DataFrame:
    """Three experiments, with ``cfg.threads`` intra-op threads (None: torch's default; the count in use is part of
    the stores' key). "tiles": the untiled row, then one per (method, tile), timed in paired rounds (every point once
    a round, :func:`alternating`), ``cfg.min_rounds`` of them and more up to ``cfg.max_rounds`` while a claim is
    undecided and ``cfg.round_budget_s`` allows (``cnnlab.profiling.compare.until_decided``), combined by
    :func:`combine_rounds` (round_medians_ms: every round's median, the times the claims pair; confidence: the level
    of each look's intervals): the columns of :func:`tile_point` and of :func:`memory_point` (in the first
    :data:`MEMORY_ROUNDS` rounds, after every timing), and time_vs_untiled, avg_mem_vs_untiled, peak_mem_vs_untiled
    (each / the untiled row's); Triton "skipped" where ``triton_untimed_reason`` says, the reason in ``error``."""
    threads = config.set_threads(cfg.threads)
    untimed = triton_conv.triton_untimed_reason(cfg.device)
    points = [dict(method="untiled", tile="untiled")] + [dict(method=m, tile=_label(t)) for m in cfg.methods
                                                          for t in cfg.tile_sizes]
    grid = dict(settings=dict(threads=threads, data_source=DATA_SOURCE),
                skip=lambda round, method, tile: untimed[1] if method == "triton" and untimed else None)

    def timed_rounds(n: int, level: float) -> pd.DataFrame:  # rounds 0..n-1 (the stored ones read back)
        timed = TILES.run(cfg, store_dir, progress=progress, points=alternating(points, range(n)), **grid)
        return timed.assign(confidence=level)

    def decided(timed: pd.DataFrame) -> bool:
        return claims.decided(check_claims(_tiles(timed).assign(experiment="tiles"), cfg.device))

    timed = until_decided(timed_rounds, decided, min_rounds=cfg.min_rounds, max_rounds=cfg.max_rounds,
                          budget_s=cfg.round_budget_s)
    rounds = range(min(MEMORY_ROUNDS, int(timed["round"].max()) + 1))  # of those timed: merged onto their rows
    averages = TILE_MEMORY.run(cfg, store_dir, progress=progress, points=alternating(points, rounds),
                               **grid)  # profiled: so after every timing
    timed = studies.beside(timed, averages, ["round", "method", "tile"], "avg_mem_", "average-memory pass")
    logits = LOGITS_CHECK.run(cfg, store_dir, progress=progress, points=[dict(tile=_label(t)) for t in cfg.tile_sizes],
                              settings=dict(threads=threads))
    return studies.combine(tiles=_tiles(timed), triton_check=check_triton(cfg, store_dir, progress),
                           logits_check=logits)


def _tiles(timed: pd.DataFrame) -> pd.DataFrame:
    """The "tiles" rows of the per-round rows ``timed``: one per point (:func:`combine_rounds`, in grid order), with
    gpu_util_rounds and the ratios to the untiled row."""
    tiles = combine_rounds(timed, ["method", "tile"], ["avg_mem_mib", "gpu_util_pct"])
    if "gpu_util_pct" in timed:  # the timed loops (one a round) whose utilisation the interval spans
        counts = timed.groupby(["method", "tile"], sort=False)["gpu_util_pct"].count()
        tiles["gpu_util_rounds"] = [int(counts.get((m, t), 0)) for m, t in zip(tiles["method"], tiles["tile"])]
    for col, metric in (("time_vs_untiled", "latency_ms_median"), ("avg_mem_vs_untiled", "avg_mem_mib"),
                        ("peak_mem_vs_untiled", "peak_mem_alloc_mib")):
        tiles[col] = derived.against(tiles, metric, {"method": "untiled"}) if metric in tiles else math.nan
    return tiles


# ------------------------------------------------------------------------------------------------ claims

def _spread(row, m: str) -> Spread | None:
    """``row``'s metric ``m`` with its noise, or None: a time per batch round by round (:class:`Paired`, so that two
    points' times pair within each round), else within its _low-_high."""
    with suppress(KeyError, TypeError, ValueError):  # missing, or NaN (which Spread refuses): None
        return Paired.of_rounds(row) if m == "latency_ms" else Spread.of_range(row, m, ("low", "high"), required=True)


def _measured(metric: str, method: str, df: pd.DataFrame):
    """``method``'s ``metric`` tile by tile ("untiled": its largest tile's time / the untiled model's), or why not."""
    rows, unit = df[df["method"] == method], {"gpu_util_pct": "%", "avg_mem_mib": " MiB"}.get(metric, " ms")
    at = {int(r["tile_px"]): x for _, r in rows[rows["status"] == "ok"].sort_values("tile_px").iterrows()
          if (x := _spread(r, "latency_ms" if metric == "untiled" else metric)) is not None}
    if len(at) < 2:
        return why_missing(rows, metric) or "fewer than two tile sizes measured with their spread"
    (tile, last), base = list(at.items())[-1], df[(df["method"] == "untiled") & (df["status"] == "ok")]
    if metric != "untiled":
        ends = "" if metric == "gpu_util_pct" else f"; largest / smallest tile {(last / at[min(at)]).text('.2f', 'x')}"
        ends += _rounds_said(last)
        return Measured({method: list(at.values())}, " -> ".join(f"{t}: {x.text('.3g', unit)}" for t, x in at.items())
                        + ends, labels={method: list(at)})
    if not len(base) or (untiled := _spread(base.iloc[0], "latency_ms")) is None:
        return "the untiled model was not measured"
    return Measured({method: last / untiled}, f"tile {tile}: {last.text('.3g', unit)} vs untiled "
                    f"{untiled.text('.3g', unit)}: {(last / untiled).text('.2f', 'x')} the untiled time"
                    + _rounds_said(last))


def _rounds_said(x) -> str:
    """"; 12 paired rounds at 98.75%" for a time of paired rounds (the level of each interval shown), else ""."""
    return f"; {x.rounds} paired rounds at {x.confidence:.2%}" if isinstance(x, Paired) else ""


_ends = partial(Ends, ends="largest / smallest tile", at="tile")  # a trend with its ends' ratio, both needed


CLAIMS = {method: [  # Sec. IV-D (Fig. 6) and Sec. V's "very effective at reducing latency", on each tiling
    Declared(f"inference time falls as tiles grow ({method})", '"The time taken for inference dropped significantly as '
             'we increased the tile size" (Sec. IV-D, Fig. 6 red line)', "time per batch, tile to tile,",
             _ends(below(SIGNIFICANT_DROP, ".2f", "x"), falls(unit=" ms")), partial(_measured, "latency_ms", method),
             bound='"significantly": ours (the paper gives none); each step and the ends by the ratio of the two '
             "tiles' times within each round"),
    Declared(f"GPU utilisation rises with tile size ({method})", '"As the inference time dropped, the GPU utilization '
             'increased with larger tile sizes" (Sec. IV-D, Fig. 6 blue dashed line)', "GPU utilisation (one timed "
             "loop's NVML mean a round), tile to tile,", rises(unit="%"), partial(_measured, "gpu_util_pct", method),
             gpu_only=NVML_FOR_SMS),
    Declared(f"average memory rises slightly with tile size ({method})", '"We observed a slight increase in the '
             'average memory usage with larger tile sizes" (Sec. IV-D, Fig. 6 green dash-dot line)', f"average memory "
             f"({AVG_MEM_REPEATS} profiled passes a round), tile to tile,", _ends(within(1.0, 1 + claims.SLIGHT, ".2f",
             "x")), partial(_measured, "avg_mem_mib", method), bound="an increase, and \"slight\": the workbook's "
             "bound for 'slight' (the paper gives none)", gpu_only=STRIPS_FOR_TILES),
    Declared(f"tiling cuts latency against the untiled model ({method})", '"This proved very effective at reducing '
             'latency" (Sec. V, on memory tiling)', "time per batch at the largest tile / the untiled model's",
             below(1 - claims.SLIGHT, ".2f", "x"), partial(_measured, "untiled", method), bound="\"very effective\": a "
             "cut beyond a 'slight' change (the paper gives none); the ratio of the two times within each round",
             beyond=True)] for method in TILED_METHODS}


def check_claims(df: pd.DataFrame, device) -> list[Claim]:
    """:data:`CLAIMS` of each tiling method measured, claim by claim, on the "tiles" rows."""
    tiles = df[df["experiment"] == "tiles"]
    return claims.check(sum(zip(*(CLAIMS[m] for m in TILED_METHODS if m in set(tiles["method"]))), ()), tiles, device)
