"""Every convolution strategy of cnnlab.kernels against torch.nn.functional.conv2d, layer by layer, plus spatial
tiling of ResNet-20 at 224x224.

    .venv/bin/python benchmarks/conv_kernels.py [--device cpu|cuda] [--nets resnet20,lenet5,...] [--rounds 3]
        [--repeats 3] [--tiles 8,16,32,64] [--dtypes float32,float16] [--batch NET=N ...] [--out results.csv]
        [--skip-layers] [--skip-spatial]

Part 1, layers. The convolution layers of ResNet-20 at 224x224 (all 3x3; the tiling study's Mini-ImageNet size,
batch 8) and of Li et al. 2016's five networks at their papers' input sizes (LeNet-5 and the CIFAR network at
32x32, AlexNet, ZFNet and VGG-16 at 224x224), shapes read from cnnlab.models by forward hooks on the meta
device. Each distinct layer shape is timed once per strategy and counted as often as the network uses it. Printed
per layer and per network as time / native time (< 1 = faster than F.conv2d). Strategies: gemm, fft, fft_tiled,
direct (the Triton kernel, at every tile size on a GPU; on the CPU it only runs interpreted and is not timed),
best (per layer the fastest of the others, chosen by strategies.choose_best) and opt (channels_last layout with
cuDNN autotuning: the layer-level part of the "opt" path; BN folding and in-place ReLU act between layers).

Part 2, tiling ResNet-20 at 224x224 (batch 2 on the CPU as the tiling study's quick preset, 8 on a GPU as the
paper; --batch resnet20=N): the untiled model against spatial stream tiling (cnnlab.kernels.spatial_tiling, the
model up to --until, by default the trunk and its global pool, in strips of every --tiles rows) and against every
Conv2d as the Triton kernel (GPU only), each timed side by side in --tiling-rounds rounds (8) and divided by the untiled
model's time of the same round (cnnlab.profiling.paired: the ratio's interval is the least and most of the rounds'
ratios); peak memory from cnnlab.profiling.benchmark after every timing (CPU: the allocator's events under the
profiler, one extra pass; GPU: torch.cuda.max_memory_allocated), in total and its activation part. The goals
(GOAL_* below) are printed met / not met / within noise.

Part 1's timings are the median over ``--rounds`` interleaved rounds (strategies alternate inside each round, so a
change of machine load hits all alike) of cnnlab.profiling.benchmark's median over ``--repeats`` calls.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without `pip install -e .`

import cnnlab  # noqa: E402,F401  (first: torchvision shim)
import pandas as pd  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from cnnlab import models  # noqa: E402
from cnnlab.kernels import spatial_tiling, strategies, triton_conv  # noqa: E402
from cnnlab.profiling import benchmark, paired, wall_time  # noqa: E402

# Input size per network (C, H, W): Li et al. 2016 run LeNet and the CIFAR net at 32x32 and AlexNet, ZFNet and
# VGG at 224x224; ResNet-20 at 224x224 is the tiling study's (IISc paper Sec. IV.D). cnnlab's VGG-16 is the CIFAR
# variant, whose convolution stack is VGG-16's: its layers at 224x224 are ImageNet VGG-16's layers.
NETS = {
    "resnet20": (3, 224, 224),
    "lenet5": (3, 32, 32),
    "convnet_cifar": (3, 32, 32),
    "alexnet_imagenet": (3, 224, 224),
    "zfnet": (3, 224, 224),
    "vgg16": (3, 224, 224),
}
# Batch sizes: the tiling study's 8 for ResNet-20; for Li et al.'s networks sizes that keep this benchmark to
# minutes on a 2-core CPU, larger on a GPU. Override with --batch NET=N.
BATCH = {
    "cpu": {"resnet20": 8, "lenet5": 64, "convnet_cifar": 64, "alexnet_imagenet": 4, "zfnet": 4, "vgg16": 1},
    "cuda": {"resnet20": 8, "lenet5": 128, "convnet_cifar": 128, "alexnet_imagenet": 128, "zfnet": 64, "vgg16": 32},
}


def conv_layers(net: str, batch: int) -> pd.DataFrame:
    """One row per distinct conv layer shape of ``net`` (count = how often the network uses it)."""
    with torch.device("meta"):
        model = models.get(net)
    rows = []

    def hook(module, args, output):
        x = args[0]
        rows.append(dict(network=net, batch=batch, c_in=x.shape[1], h=x.shape[2], w=x.shape[3],
                         c_out=module.out_channels, kernel=module.kernel_size[0], stride=module.stride[0],
                         padding=module.padding[0], bias=module.bias is not None))  # fmt: skip

    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            m.register_forward_hook(hook)
    body = getattr(model, "features", model)  # VGG's CIFAR head does not fit 224x224; only the convs matter
    with torch.no_grad():
        body(torch.empty(batch, *NETS[net], device="meta"))
    df = pd.DataFrame(rows)
    keys = [c for c in df.columns if c != "network"]
    return df.groupby(keys, sort=False).size().rename("count").reset_index().assign(network=net)


def _median_time_ms(fn, inputs, device, repeats: int) -> float:
    m = benchmark(fn, inputs, device=device, warmup=1, repeats=repeats, measure_memory=False,
                  measure_gpu_util=False)  # fmt: skip
    return m.latency_ms_median


def layer_candidates(device: torch.device, tiles: list[int]) -> dict[str, dict]:
    """Strategy label -> how to call it. On the CPU the Triton kernel is not timed (it would be interpreted)."""
    cands = {n: {"fn": strategies.CONV_FUNCTIONS[n], "options": {}} for n in ("native", "gemm", "fft", "fft_tiled")}
    if device.type == "cuda":
        for t in tiles:  # NCHW input as the others get, and NHWC (channels_last): contiguous channel loads
            cands[f"direct@{t}"] = {"fn": strategies.conv2d_direct, "options": {"tile": (t, t)}}
            cands[f"direct_nhwc@{t}"] = {"fn": strategies.conv2d_direct, "options": {"tile": (t, t)}, "nhwc": True}
    cands["best"] = {"fn": None, "options": {}}
    cands["opt"] = {"fn": None, "options": {}}
    return cands


def time_layer(row, device, dtype, tiles, rounds, repeats) -> list[dict]:
    """Times of every strategy on one layer shape, median over interleaved rounds; returns tidy rows."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(row.batch, row.c_in, row.h, row.w, generator=gen).to(device, dtype)
    w = (torch.randn(row.c_out, row.c_in, row.kernel, row.kernel, generator=gen) * 0.05).to(device, dtype)
    b = torch.randn(row.c_out, generator=gen).to(device, dtype) if row.bias else None
    s, p = row.stride, row.padding
    cands = layer_candidates(device, tiles)
    def timer(fn):  # what "best" compares its candidates by: the median of a few synchronised calls, in s
        return statistics.median(wall_time(fn, device=device).seconds for _ in range(repeats))

    best_name = strategies.choose_best(x, w, b, s, p, timer=timer)  # measured once per shape/device/dtype, cached
    x_cl, w_cl = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)

    def opt():
        previous = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True  # cuDNN autotuning, as the "opt" path enables on a GPU
        try:
            return F.conv2d(x_cl, w_cl, b, s, p)
        finally:
            torch.backends.cudnn.benchmark = previous

    packed = triton_conv.pack_weight(w)  # what TiledConv2d caches: not re-packed per call

    calls = {}
    for label, c in cands.items():
        if label == "best":
            fn = strategies.CONV_FUNCTIONS[best_name]
            calls[label] = lambda t, fn=fn: fn(t, w, b, s, p)
        elif label == "opt":
            calls[label] = lambda t: opt()
        elif label.startswith("direct"):
            xin = x_cl if c.get("nhwc") else x  # layout converted outside the timing, as for "opt"
            calls[label] = lambda t, o=c["options"], xin=xin: strategies.conv2d_direct(xin, w, b, s, p,
                                                                                        packed_weight=packed, **o)
        else:
            calls[label] = lambda t, fn=c["fn"], o=c["options"]: fn(t, w, b, s, p, **o)
    times: dict[str, list[float]] = {label: [] for label in calls}
    errors: dict[str, str] = {}
    for r in range(rounds):
        order = list(calls) if r % 2 == 0 else list(reversed(calls))
        for label in order:
            if label in errors:
                continue
            try:
                times[label].append(_median_time_ms(calls[label], (x,), device, repeats))
            except (RuntimeError, ValueError) as exc:  # e.g. out of memory for an FFT: recorded, never 0
                errors[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    native = statistics.median(times["native"])
    out = []
    for label, ts in times.items():
        ms = statistics.median(ts) if ts else float("nan")
        strategy, _, tile = label.partition("@")
        out.append(dict(row._asdict(), strategy=strategy, tile=int(tile) if tile else None,
                        dtype=str(dtype).removeprefix("torch."), device=device.type, latency_ms=ms,
                        ratio_to_native=ms / native, best_choice=best_name if label == "best" else None,
                        error=errors.get(label)))  # fmt: skip
    return out


def layer_part(args, device) -> pd.DataFrame:
    tiles = [int(t) for t in args.tiles.split(",")]
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
    if device.type == "cpu":
        print("CPU: the Triton kernel ('direct') runs only interpreted here, so it is not timed; "
              "fp16/bf16 are not timed on the CPU (no fast half-precision convolution).")  # fmt: skip
        dtypes = [torch.float32]
    rows = []
    for net in args.nets.split(","):
        batch = args.batch.get(net, BATCH[device.type][net])
        shapes = conv_layers(net, batch)
        for dtype in dtypes:
            for row in shapes.itertuples(index=False):
                timed = time_layer(row, device, dtype, tiles, args.rounds, args.repeats)
                rows += timed
                native = timed[0]["latency_ms"]
                print(f"  {net:16s} {str(dtype).removeprefix('torch.'):8s} {row.c_in:4d}x{row.h:3d}x{row.w:3d} -> "
                      f"{row.c_out:4d}  k{row.kernel} s{row.stride} p{row.padding} (x{row.count})  native "
                      f"{native:9.3f} ms  best={next(r['best_choice'] for r in timed if r['strategy'] == 'best')}",
                      flush=True)  # fmt: skip
    return pd.DataFrame(rows)


def summarise_layers(df: pd.DataFrame) -> None:
    df = df.assign(label=df.strategy + df.tile.map(lambda t: "" if pd.isna(t) else f"@{int(t)}"))
    df = df.assign(total_ms=df.latency_ms * df["count"])
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 30)
    print("\nPer layer: time / native F.conv2d (lower is faster)")
    keys = ["dtype", "network", "c_in", "h", "w", "c_out", "kernel", "stride", "padding", "count"]
    per_layer = df.set_index([*keys, "label"]).ratio_to_native.unstack("label")
    order = df.drop_duplicates(keys)[keys]  # networks and layers in the order they were timed
    per_layer = per_layer.loc[pd.MultiIndex.from_frame(order), df.label.drop_duplicates()]
    print(per_layer.round(2).to_string(sparsify=False))
    print("\nPer network (sum over its conv layers, each counted as often as used): time / native")
    totals = df.groupby(["dtype", "network", "label"], sort=False).total_ms.sum().unstack("label")
    totals = totals.loc[pd.MultiIndex.from_frame(df[["dtype", "network"]].drop_duplicates()), df.label.unique()]
    ratios = totals.div(totals["native"], axis=0)
    print(ratios.round(2).to_string())
    print("\nPer network: native conv time, ms")
    print(totals["native"].round(2).to_string())
    direct = [c for c in ratios.columns if c.startswith("direct")]
    if direct:
        best_tile = ratios[direct].min(axis=1)
        print(f"\nTriton kernel at its best tile vs cuDNN (goal <= {GOAL_TRITON_VS_CUDNN} on ResNet-20's layers):")
        for key, value in best_tile.items():
            print(f"  {key[0]:8s} {key[1]:16s} {value:.2f}x  ({ratios.loc[key, direct].idxmin()}) "
                  f"{'within' if value <= GOAL_TRITON_VS_CUDNN else 'ABOVE'} {GOAL_TRITON_VS_CUDNN}x")  # fmt: skip


# The goals of the tiling work (issue 35), each a ratio against the untiled model measured side by side in one run.
GOAL_GPU_SPATIAL = dict(time_at_most=1.5, memory_cut_at_least=1.5)  # spatial tiling on a GPU
GOAL_GPU_TRITON_ACTIVATIONS = 2.0  # peak activation memory of the Triton path at least this much below untiled
GOAL_CPU_SPATIAL = dict(time_at_most=1.0, memory_cut_at_least=6.0)  # spatial tiling on the CPU
GOAL_TRITON_VS_CUDNN = 1.1  # the Triton kernel's time over cuDNN's, per ResNet-20 layer
# Paired rounds: the ratio of two identical variants lands on the same side of 1 in every round with chance 2 / 2**n,
# so from 6 rounds on (3%) an interval that excludes 1 is rarely noise (the A/A rule of cnnlab.claims: <= 1 in 20).
MIN_PAIRED_ROUNDS = 6


def spatial_variants(model: nn.Module, device: torch.device, tiles: list[int], until: str, batched_until: str,
                     image_size: int) -> dict[str, object]:
    """Label -> the model to time, or the reason it is not timed here: untiled; spatial stream tiling at every tile
    (the model up to and including ``until``); batched spatial tiling (square tiles stacked along the batch
    dimension, one call per layer for each row of tiles, up to ``batched_until``: its halo is recomputed, so it
    pays only on a shallow prefix); every Conv2d a Triton TiledConv2d at every tile; and spatial stream tiling
    whose strips' convolutions are the Triton kernel. ``_folded``: every eval BatchNorm folded into the convolution
    before it (spatial_tiling.fold_batchnorm), untiled and tiled, so that the fold's own gain is seen apart."""
    variants: dict[str, object] = {"untiled": model, "untiled_folded": spatial_tiling.fold_batchnorm(model)}
    for t in tiles:
        variants[f"spatial@{t}"] = spatial_tiling.tile_spatially(model, t, until=until, mode="stream")
    for t in tiles:  # BatchNorm folded into the convolutions: a call fewer per strip (untiled_folded: the same fold)
        variants[f"spatial_folded@{t}"] = spatial_tiling.tile_spatially(model, t, until=until, mode="stream",
                                                                        fold_bn=True)
    for t in tiles if batched_until else ():
        prefix, _ = spatial_tiling.split_model(model, batched_until)
        per_row = -(-spatial_tiling.output_size(prefix, (image_size, image_size))[1] // (
            t // spatial_tiling.receptive_field(prefix)[1].stride))  # tiles across the image
        variants[f"batched@{t}"] = spatial_tiling.tile_spatially(model, t, until=batched_until, mode="batched",
                                                                 tiles_per_launch=per_row)
    untimed = triton_conv.triton_untimed_reason(device.type)
    for t in tiles:
        variants[f"triton@{t}"] = untimed[1] if untimed else triton_conv.tile_model(model, t).eval()
    for t in tiles:  # the Triton kernel computing spatial tiling's strips: no full-size activation on this path
        variants[f"spatial_triton@{t}"] = untimed[1] if untimed else spatial_tiling.tile_spatially(
            model, t, until=until, mode="stream", conv2d=triton_conv.conv2d_function(t))
    return variants


def spatial_part(args, device) -> pd.DataFrame:
    """ResNet-20 at 224x224: the untiled model, spatial (stream) tiling and the Triton kernel at every tile, timed
    side by side in ``args.tiling_rounds`` rounds (cnnlab.profiling.paired: each variant's time over the untiled model's
    of the same round, so a drift of the machine's load cancels), then peak memory once per variant."""
    torch.manual_seed(0)
    batch = args.batch.get("resnet20", 2 if device.type == "cpu" else 8)  # the tiling study's quick / paper batch
    model = models.get("resnet20").eval().to(device)
    x = torch.randn(batch, 3, args.image_size, args.image_size, device=device)
    tiles = [int(t) for t in args.tiles.split(",")]
    variants = spatial_variants(model, device, tiles, args.until, args.batched_until, args.image_size)
    timed = {k: v for k, v in variants.items() if not isinstance(v, str)}
    with torch.inference_mode():
        ref = model(x)
        for name, m in timed.items():  # correctness first: every tiled path gives the untiled logits
            err = ((m(x) - ref).abs().max() / ref.abs().max()).item()
            if not err < 1e-3:
                raise AssertionError(f"{name} differs from the untiled model: relative error {err:.2e}")

    def once(m):
        return lambda: benchmark(m, x, device=device, warmup=1, repeats=args.repeats, measure_memory=False,
                                 measure_gpu_util=False).latency_ms_median  # fmt: skip

    if args.tiling_rounds < MIN_PAIRED_ROUNDS:
        print(f"note: {args.tiling_rounds} rounds: two identical variants come out all one way in 2/2**"
              f"{args.tiling_rounds} of runs; with fewer than {MIN_PAIRED_ROUNDS} a 'met' or 'not met' may be noise")
    times = paired.time_in_rounds({k: once(m) for k, m in timed.items()}, args.tiling_rounds)
    ratios = paired.paired_ratios(times, "untiled")
    rows = []
    for name, v in variants.items():
        method, _, tile = name.partition("@")
        until = {"spatial": args.until, "spatial_folded": args.until, "spatial_triton": args.until,
                 "batched": args.batched_until}.get(method)
        row = dict(network="resnet20", batch=batch, image=args.image_size, until=until,
                   method=method, tile=int(tile) if tile else None, device=device.type, rounds=args.tiling_rounds,
                   skipped=v if isinstance(v, str) else None)  # fmt: skip
        if not isinstance(v, str):  # after every timing: memory is deterministic, one pass each
            mem = benchmark(v, x, device=device, warmup=1, repeats=1, measure_memory=True, measure_gpu_util=False)
            ts = times[name]
            row.update(latency_ms=statistics.median(ts), latency_ms_min=min(ts), latency_ms_max=max(ts),
                       time_ratio=ratios[name]["ratio"], time_ratio_low=ratios[name]["ratio_low"],
                       time_ratio_high=ratios[name]["ratio_high"], peak_mib=mem.peak_mem_alloc_mib,
                       peak_activation_mib=mem.peak_mem_increment_mib)  # fmt: skip
        rows.append(row)
    df = pd.DataFrame(rows)
    base = df[df["method"] == "untiled"].iloc[0]
    df["memory_cut"] = base.peak_mib / df["peak_mib"]
    df["activation_cut"] = base.peak_activation_mib / df["peak_activation_mib"]
    print(f"\nResNet-20 at {args.image_size}x{args.image_size}, batch {batch}, {device.type}: time per batch (median of {args.tiling_rounds} rounds, "
          "each the median of its timed calls) and its ratio to the untiled model's in the same round (median, least "
          "and most of the rounds); peak memory (parameters, input and the pass's live tensors) and its activation "
          "part (the pass's growth)")  # fmt: skip
    columns = ["method", "tile", "latency_ms", "time_ratio", "time_ratio_low", "time_ratio_high", "peak_mib",
               "memory_cut", "peak_activation_mib", "activation_cut"]
    measured = df[df["skipped"].isna()]
    print(measured[[c for c in columns if c in df]].round(3).to_string(index=False))
    for reason, group in df[df["skipped"].notna()].groupby("skipped", sort=False):
        print(f"not timed: {', '.join(group['method'] + '@' + group['tile'].astype(int).astype(str))}: {reason}")
    report_goals(df, device)
    return df


def _verdict(low: float, high: float, bound: float) -> str:
    """"met" when the whole interval is at most ``bound``, "not met" when all of it is above, else "within noise"."""
    return "met" if high <= bound else "not met" if low > bound else "within noise"


def report_goals(df: pd.DataFrame, device: torch.device) -> None:
    """Prints, per tile, whether each goal of the tiling work is met on this device, by the time ratio's interval."""
    spatial = df[df["method"].isin(["spatial", "spatial_folded", "batched"])]
    goal = GOAL_GPU_SPATIAL if device.type == "cuda" else GOAL_CPU_SPATIAL
    print(f"\nGoal, spatial tiling on {device.type}: at most {goal['time_at_most']}x the untiled time (the ratio's "
          f"whole interval) with at least {goal['memory_cut_at_least']}x less peak memory")  # fmt: skip
    for r in spatial.itertuples():
        time = _verdict(r.time_ratio_low, r.time_ratio_high, goal["time_at_most"])
        mem = "met" if r.memory_cut >= goal["memory_cut_at_least"] else "not met"
        print(f"  {r.method} tile {int(r.tile):3d}: time {r.time_ratio:.2f}x ({r.time_ratio_low:.2f}-{r.time_ratio_high:.2f}) {time}; "
              f"memory {r.memory_cut:.2f}x less {mem}")  # fmt: skip
    triton = df[df["method"].isin(["triton", "spatial_triton"]) & df["skipped"].isna()]
    if len(triton):
        print(f"Goal, Triton path: peak activation memory at least {GOAL_GPU_TRITON_ACTIVATIONS}x below untiled")
        for r in triton.itertuples():
            ok = "met" if r.activation_cut >= GOAL_GPU_TRITON_ACTIVATIONS else "not met"
            print(f"  {r.method} tile {int(r.tile):3d}: {r.activation_cut:.2f}x {ok}; time {r.time_ratio:.2f}x "
                  f"({r.time_ratio_low:.2f}-{r.time_ratio_high:.2f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--nets", default=",".join(NETS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiles", default=",".join(str(t) for t in triton_conv.TILE_SIZES))
    parser.add_argument("--dtypes", default="float32,float16", help="GPU only; the CPU times float32")
    parser.add_argument("--batch", nargs="*", default=[], help="per-network batch sizes, e.g. vgg16=2")
    parser.add_argument("--out", default=None, help="CSV path prefix: writes <out>_layers.csv, <out>_spatial.csv")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads (default: torch's choice); 1 gives steadier ratios on a shared machine")
    parser.add_argument("--until", default="avgpool", choices=["layer1", "layer2", "layer3", "avgpool"],
                        help="how much of ResNet-20 spatial tiling covers (avgpool: the trunk and its global pool)")
    parser.add_argument("--tiling-rounds", type=int, default=8,
                        help=f"part 2's rounds (each variant once per round; at least {MIN_PAIRED_ROUNDS} to trust a "
                             "'met' or 'not met')")
    parser.add_argument("--batched-until", default="layer1", choices=["layer1", "layer2", "layer3", ""],
                        help="how much of ResNet-20 batched tiling covers (its halo is recomputed: 7 pixels a side "
                             "up to layer1, 40 up to layer3); '' leaves batched tiling out")
    parser.add_argument("--image-size", type=int, default=224, help="part 2's input pixels a side (the paper's 224)")
    parser.add_argument("--skip-layers", action="store_true")
    parser.add_argument("--skip-spatial", action="store_true")
    args = parser.parse_args()
    unknown = sorted(set(args.nets.split(",")) - set(NETS))
    if unknown:
        parser.error(f"unknown --nets {unknown}; valid: {', '.join(NETS)}")
    args.batch = {k: int(v) for k, v in (item.split("=") for item in args.batch)}
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but torch.cuda.is_available() is False")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device {name}, torch {torch.__version__}, threads {torch.get_num_threads()}, rounds {args.rounds} (layers), "
          f"{args.tiling_rounds} (tiling) x repeats {args.repeats}; fp32 convs on GPU use TF32 iff torch.backends.cudnn.allow_tf32 "
          f"({torch.backends.cudnn.allow_tf32}), for cuDNN and Triton alike")  # fmt: skip
    if not args.skip_layers:
        layers = layer_part(args, device)
        summarise_layers(layers)
        if args.out:
            layers.to_csv(f"{args.out}_layers.csv", index=False)
    if not args.skip_spatial:
        df = spatial_part(args, device)
        if args.out:
            df.to_csv(f"{args.out}_spatial.csv", index=False)


if __name__ == "__main__":
    main()
