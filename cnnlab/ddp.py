"""Data-parallel training of one configuration, the script ``torchrun`` launches: ``python -m cnnlab.ddp``.

Paper 002 (Iwano, "Comparative Analysis of Runtime and Memory Optimization with ResNet152", sec. 3)
trains ResNet-152 on CIFAR-100 with DistributedDataParallel: the process group comes from the
environment (RANK, WORLD_SIZE), a DistributedSampler gives every process its own shard of the data,
SGD(lr=0.001, momentum=0.9) updates the model, and the PyTorch profiler records CPU and CUDA time,
number of calls and maximum CPU and GPU memory. This script does the same with any registry model
and dataset, on GPUs or CPUs (see :func:`placement`: NCCL where every process has a GPU of its own; Gloo where
processes share a GPU, as 2 processes on a machine with 1 GPU do, and on CPUs). After a few untimed warm-up steps it
times the training epochs unprofiled and profiles a fixed number of further steps (see :func:`train_and_profile`):

    torchrun --standalone --nproc-per-node 2 -m cnnlab.ddp --model lenet5 --dataset digits \
        --batch-size 64 --fraction 1 --epochs 1 --out runs/lenet5_b64

Every rank writes ``rank<r>.json`` (its own metrics) to ``--out``; rank 0 gathers all ranks' metrics
through the process group (so it also works when the ranks are on different machines) and writes
``row.json``: one tidy row for the configuration (see :func:`merge`). A rank that raises writes
``rank<r>.error.json`` first, so that the launcher can say why.

The launcher is here too: :func:`launch` runs one configuration through torchrun from another process (a study's
sweep), kills the whole process tree on a timeout and raises :class:`LaunchFailed` with the failure reason
(:class:`LaunchOutOfMemory`, a ``torch.OutOfMemoryError``, when a rank ran out of memory), which a sweep records.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import json
import math
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections import Counter
from functools import partial
from pathlib import Path
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

from cnnlab import config, paths
from cnnlab.profiling import profile_ops, wall_time
from cnnlab.subreaper import descendants as _descendants
from cnnlab.train import fit, train_step

# The launched workers import cnnlab from the checkout; for an installed cnnlab (None) they import the package and
# run in the caller's working directory, so that ./data means the same folder for them.
CHECKOUT = paths.checkout()

# The convolution operators counted in conv_calls: one aten::convolution per conv layer per forward
# and one aten::convolution_backward per backward (the backend ops they dispatch to are not counted
# again, so the count means the same on CPU and GPU).
CONV_OPS = ("aten::convolution", "aten::convolution_backward")
# The merged row of one configuration (see merge), in column order.
ROW_FIELDS = (
    "model", "stem", "dataset", "data_source", "backend", "device", "world_size", "nnodes", "gpus_used",
    "processes_per_gpu", "placement", "batch_size_per_rank", "global_batch_size", "data_fraction", "epochs",
    "samples_total", "steps_per_rank", "profiled_steps", "warmup_steps", "warmup_time_s", "wall_time_s",
    "throughput_samples_per_s", "cpu_total_ms", "cpu_total_ms_per_rank", "cuda_total_ms", "cuda_total_ms_per_rank",
    "cuda_missing_reason", "calls_total", "conv_calls", "kernel_launches", "max_cpu_mem_mib",
    "max_cpu_mem_mib_per_rank", "max_gpu_mem_mib", "max_gpu_mem_mib_per_rank", "max_gpu_mem_missing_reason",
    "cpu_mem_allocated_mib", "gpu_mem_allocated_mib", "max_rss_mib", "torch_threads_per_rank", "final_loss",
    "params_identical", "status", "error", "note",
    # the noise of the measurements (see train_and_profile and merge): the range of the profiled blocks' estimates,
    # and of the epochs' throughput
    "profile_repeats", *(f"{m}_{q}" for m in ("cpu_total_ms", "cuda_total_ms", "calls_total", "cpu_mem_allocated_mib",
                                              "gpu_mem_allocated_mib", "throughput_samples_per_s")
                         for q in ("min", "max")),
)
# The profiler's per-epoch totals that train_and_profile estimates once per profiled block (median, min, max).
SPREAD_METRICS = ("cpu_total_ms", "cuda_total_ms", "calls_total", "cpu_mem_allocated_mib", "gpu_mem_allocated_mib")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m cnnlab.ddp", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet152", help="cnnlab.models name (paper: resnet152)")
    p.add_argument("--stem", default=None,
                   help="the model's stem option, for models that have one (resnet152: imagenet, torchvision's and "
                        "the paper's; or cifar); default: the model's default")
    p.add_argument("--dataset", default="cifar100", help="cnnlab.data name (paper: cifar100)")
    p.add_argument("--synthetic", action="store_true", help="labelled synthetic data of the dataset's shape")
    p.add_argument("--synthetic-size", type=int, default=None, help="number of synthetic training images")
    p.add_argument("--batch-size", type=int, default=128, help="batch size PER RANK (paper's DataLoader batch)")
    p.add_argument("--fraction", type=float, default=1.0, help="fraction of the training set (paper: 1, 1/2, 1/10)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.001, help="SGD learning rate (paper sec. 4.2.1: 0.001)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (paper sec. 4.2.1: 0.9)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="auto: the GPUs when CUDA is available (one per process where there are enough, else shared "
                        "round-robin, with Gloo), else the CPU")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes per rank")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup-steps", type=int, default=5,
                   help="untimed training steps before the timed epochs (their time is kept apart: warmup_time_s)")
    p.add_argument("--pg-timeout-s", type=float, default=300.0,
                   help="a collective that waits longer than this fails instead of hanging")
    p.add_argument("--profile-steps", type=int, default=5,
                   help="training steps recorded by the profiler after the timed epochs (0: none profiled, the "
                        "profiler's metrics NaN)")
    p.add_argument("--profile-repeats", type=int, default=1,
                   help="profiled blocks of --profile-steps steps: the totals are their median, with their range")
    p.add_argument("--profile-warmup", type=int, default=1,
                   help="steps run under the profiler's schedule before the recorded ones (discarded)")
    p.add_argument("--no-profile-memory", action="store_true", help="skip the profiler's allocator events")
    p.add_argument("--tf32", action="store_true",
                   help="TF32 for fp32 CUDA matmuls and cuDNN convolutions (default: off, IEEE fp32; set explicitly)")
    p.add_argument("--save-params", action="store_true", help="each rank saves params_rank<r>.pt after training")
    p.add_argument("--fail-rank", type=int, default=None,
                   help="fault injection for tests: this rank raises after the process group has formed")
    p.add_argument("--out", required=True, help="output folder for rank<r>.json and row.json")
    p.add_argument("--plan", default=None,
                   help="a JSON file listing configurations to train one after another in this launch, each "
                        '{"out": subfolder, "fraction": f, "batch_size": b, "world_size": w, "profile": true|false} '
                        "(w at most the launch's processes: ranks 0..w-1 train it, the others wait); default: the "
                        "one configuration of --fraction and --batch-size on every process, written to --out")
    args = p.parse_args(argv)
    for name, minimum in (("batch_size", 1), ("epochs", 1), ("profile_steps", 0), ("profile_repeats", 1),
                          ("profile_warmup", 0), ("warmup_steps", 0)):
        if getattr(args, name) < minimum:
            p.error(f"--{name.replace('_', '-')} must be >= {minimum}, got {getattr(args, name)}")
    if not 0 < args.fraction <= 1:
        p.error(f"--fraction must be in (0, 1], got {args.fraction}")
    return args


class Placement(NamedTuple):
    """Where the processes of one machine run, from :func:`placement`."""

    backend: str  # "nccl" or "gloo"
    devices: tuple[str, ...]  # local rank -> "cuda:<i>" or "cpu"
    gpus_used: int  # 0 on CPUs
    processes_per_gpu: int | None  # the most processes on one GPU; None on CPUs
    label: str  # "2 processes sharing 1 GPU", "2 processes, one GPU each", "2 CPU processes"


def placement(device: str, processes: int, gpus: int) -> Placement:
    """The backend and each local rank's device for ``processes`` processes on one machine with ``gpus`` GPUs.

    On CPUs (``device="cpu"``): Gloo. On CUDA: local rank r on ``cuda:{r % gpus}`` (round-robin over the GPUs
    present); NCCL where every process has a GPU of its own, else Gloo: NCCL refuses two ranks on one device, while
    Gloo all-reduces and broadcasts CUDA tensors (torch.distributed's backend table), which is all DDP needs. So two
    processes on one GPU are measured, labelled as such, not skipped. ValueError for CUDA without a GPU."""
    if device == "cpu":
        return Placement("gloo", ("cpu",) * processes, 0, None, placement_label("cpu", processes, 0))
    if gpus < 1:
        raise ValueError(f"device={device!r} asked for, but no GPU is present")
    used = min(gpus, processes)
    per_gpu = math.ceil(processes / used)
    return Placement("nccl" if per_gpu == 1 else "gloo", tuple(f"cuda:{r % gpus}" for r in range(processes)), used,
                     per_gpu, placement_label("cuda", processes, used))


def placement_label(device: str, processes: int, gpus_used: int) -> str:
    """How ``processes`` processes ran, in words: "2 CPU processes", "1 process on 1 GPU", "2 processes, one GPU
    each", "2 processes sharing 1 GPU" (every row, figure and claim of a scaling study says which)."""
    plural = "es" if processes != 1 else ""
    if device == "cpu":
        return f"{processes} CPU process{plural}"
    if processes == 1:
        return "1 process on 1 GPU"
    if gpus_used >= processes:
        return f"{processes} processes, one GPU each"
    return f"{processes} processes sharing {gpus_used} GPU{'s' if gpus_used != 1 else ''}"


def init_process_group(device: str, timeout_s: float) -> tuple[int, int, int, torch.device, str]:
    """Join the group torchrun set up in the environment: (rank, world_size, local_rank, device, backend).

    The backend and this rank's device come from :func:`placement` with this machine's processes (LOCAL_WORLD_SIZE)
    and GPUs (every machine of a several-machine run must have as many of both, or their backends differ). Not
    ``config.resolve_device``: that would touch the current GPU (a CUDA context on GPU 0 in every rank).
    """
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            raise RuntimeError(f"environment variable {var} is not set: launch this script with torchrun "
                               f"(e.g. torchrun --standalone --nproc-per-node 2 -m cnnlab.ddp ...)")
    rank, world_size, local_rank = (int(os.environ[v]) for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise RuntimeError("--device cuda asked for, but CUDA is not available")
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    where = placement("cuda" if use_cuda else "cpu", local, torch.cuda.device_count() if use_cuda else 0)
    dev = torch.device(where.devices[local_rank])
    if use_cuda:
        torch.cuda.set_device(dev)
    # device_id binds NCCL's communicator to this rank's GPU; Gloo needs none
    dist.init_process_group(where.backend, timeout=datetime.timedelta(seconds=timeout_s),
                            device_id=dev if where.backend == "nccl" else None)
    return rank, world_size, local_rank, dev, where.backend


_LOADED: dict = {}  # (dataset, synthetic, synthetic_size) -> the training set: read once per process, not per plan item


def load_shard(args, rank: int, world_size: int, local_rank: int, pin_memory: bool, group=None):
    """(dataset fraction, its DistributedSampler, DataLoader over this rank's shard); ``group``: the process group of
    the configuration's ranks (None: all of them)."""
    from cnnlab import data

    key = (args.dataset, args.synthetic, args.synthetic_size)

    def load(download: bool):
        return data.load(args.dataset, "train", synthetic=args.synthetic, synthetic_size=args.synthetic_size,
                         download=download)

    try:  # every rank reads the files at once when they are there ...
        dataset = _LOADED[key] if key in _LOADED else load(download=False)
    except data.DatasetUnavailableError:
        dataset = None
    missing = [None] * world_size
    dist.all_gather_object(missing, dataset is None, group=group)  # every rank asks, also one that has it loaded
    if any(missing):  # ... else local rank 0 downloads first, so processes on one machine do not race
        if local_rank == 0 and dataset is None:
            dataset = load(download=True)
        dist.barrier(group=group)
        dataset = dataset if dataset is not None else load(download=False)
    _LOADED[key] = dataset
    part = data.subset(dataset, args.fraction, seed=args.seed)  # same seeded subset on every rank
    sampler = DistributedSampler(part, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = data.make_loader(part, args.batch_size, sampler=sampler, num_workers=args.num_workers,
                              pin_memory=pin_memory)
    return part, sampler, loader


def param_digest(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter's bytes, in order: equal on two ranks iff their parameters are identical."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def step_stream(loader, sampler, first_epoch: int):
    """``loader``'s batches without end, epoch after epoch from ``first_epoch`` (each epoch its own shuffle, the same
    on every rank)."""
    epoch = first_epoch
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def train_and_profile(args, rank, world_size, local_rank, dev, backend, group=None) -> tuple[dict, torch.nn.Module]:
    """Train ``args.warmup_steps`` steps, untimed; then ``args.epochs`` epochs, timed; then profile
    ``args.profile_steps`` more steps (none where it is 0: the profiler's metrics are then NaN): (this rank's
    metrics, the trained model). ``group``: the process group of the configuration's ``world_size`` ranks (None:
    every process of the launch).

    The warm-up steps take out what only a process's first steps pay (the CUDA context and cuDNN/cuBLAS set-up, DDP's
    bucket rebuild after its first step, Gloo's first connections, the allocator's first blocks): on an H100 the
    first of three timed epochs of LeNet-5 took 3.4x the next two (0.63 s vs 0.19 s), which widened every
    throughput range. They are the steps of an epoch (from the first batches of epoch 0's shuffle) and train the
    model too; their time is ``warmup_time_s`` (with their count, ``warmup_steps``), never in wall_time_s or the
    throughput.

    Paper 002 profiles its training (sec. 4.2.4). Profiling whole epochs would record millions of events per rank
    at its scale (50,000 / 128 = 391 steps of ResNet-152 per epoch), so timing and profiling are apart: the epochs
    run unprofiled (``cnnlab.train.fit``, which times each with ``cnnlab.profiling.wall_time``: wall_time_s,
    throughput), then ``profile_warmup`` + ``profile_steps`` further steps of the same data stream run under a
    profiler schedule that records the last ``profile_steps`` (``profile_ops(..., scheduled=True)``). A profiled
    step is what an epoch's step does: the next batch from the loader (with ``--num-workers 0``, its per-image
    transforms are operator calls too), its copy to the device, and ``cnnlab.train.train_step`` (forward, loss,
    backward with DDP's all-reduce, SGD step); ``fit``'s running loss and accuracy sums are not in it.

    Metrics (times in ms, wall time in s, memory in MiB): the profiler's totals that the paper reports for the
    training (cpu_total_ms, cuda_total_ms, calls_total, conv_calls, kernel_launches, and cpu_/gpu_mem_allocated_mib,
    the cumulative bytes allocated) are scaled from the profiled steps to the epochs, x steps / profile_steps:
    exact for the operators of a training step (conv_calls: every step runs the same ones), an estimate for the
    rest (once-per-epoch work such as the sampler's shuffle counts as often as the profiled steps met it; an epoch's
    last, smaller batch counts as a full one; times vary from step to step). With ``profile_repeats`` > 1 the
    profiled steps are that many blocks of ``profile_steps`` steps, each one estimate: the totals are the median
    block's (the lower middle one of an even count), with the blocks' range in ``<metric>_min`` / ``_max``. Peaks of
    live tensor memory (max_cpu_mem_mib, max_gpu_mem_mib, from the profiler's allocator events) are the largest of the
    profiled steps, not scaled; max_rss_mib is the process's peak resident set.
    final_loss is the mean training loss of the last timed epoch on this rank's shard (nats).
    """
    from cnnlab import models

    part, sampler, loader = load_shard(args, rank, world_size, local_rank, pin_memory=dev.type == "cuda",
                                       group=group)
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    options = {} if args.stem is None else {"stem": args.stem}
    model = models.get(args.model, num_classes=part.num_classes, **options).to(dev)
    ddp = DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None,
                                  process_group=group)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
    if args.fail_rank == rank:
        raise RuntimeError(f"injected failure on rank {rank} (--fail-rank {args.fail_rank})")
    if os.environ.get("CNNLAB_DDP_HANG_RANK") == str(rank):  # fault injection for tests: a rank that never returns
        time.sleep(3600)
    if os.environ.get("CNNLAB_DDP_KILL_RANK") == str(rank):  # fault injection: what the kernel's OOM killer does
        os.kill(os.getpid(), signal.SIGKILL)

    def step(batches):  # what an epoch's step does (see fit)
        inputs, labels = next(batches)
        train_step(ddp, inputs.to(dev, non_blocking=True), labels.to(dev, non_blocking=True), optimizer)

    warm = step_stream(loader, sampler, first_epoch=0)
    warmup = wall_time(lambda: [step(warm) for _ in range(args.warmup_steps)], device=dev)
    warm.close()  # its loader iterator (and any DataLoader workers) ends here, not during the timed epochs
    # The one trainer (DDP all-reduces the gradients in backward); set_epoch before every epoch gives a new shuffle
    # each epoch, the same one on every rank.
    history = fit(ddp, loader, optimizer, epochs=args.epochs, device=dev, before_epoch=sampler.set_epoch)
    batches = step_stream(loader, sampler, first_epoch=args.epochs)

    # profile_repeats blocks of profile_steps steps, one after the other: each block's totals are one estimate of the
    # epochs' totals, and their range is the noise of that estimate
    profs = [profile_ops(partial(step, batches), iterations=args.profile_steps, warmup=args.profile_warmup,
                         device=dev, profile_memory=not args.no_profile_memory, scheduled=True)
             for _ in range(args.profile_repeats if args.profile_steps else 0)]
    steps = args.epochs * len(loader)  # the sampler pads the shards: every rank takes as many steps
    scale = steps / args.profile_steps if args.profile_steps else math.nan

    def per_epochs(value, whole=False):  # a total over the profiled steps, scaled to the timed epochs
        return value if isinstance(value, float) and math.isnan(value) else (
            round(value * scale) if whole else value * scale)

    def block(prof):  # one block's estimates of the epochs' totals
        ops, s = prof.operators, prof.summary
        return {"cpu_total_ms": per_epochs(s["cpu_time_total_ms"]),
                "cuda_total_ms": per_epochs(s["device_time_total_ms"]),
                "calls_total": per_epochs(int(ops["calls"].sum()), whole=True),
                "conv_calls": per_epochs(int(ops.loc[ops["name"].isin(CONV_OPS), "calls"].sum()), whole=True),
                "kernel_launches": per_epochs(s["kernel_launches"], whole=True),
                "cpu_mem_allocated_mib": per_epochs(s["cpu_mem_allocated_mib"]),
                "gpu_mem_allocated_mib": per_epochs(s["device_mem_allocated_mib"])}

    blocks = [block(prof) for prof in profs] or [dict.fromkeys(SPREAD_METRICS + ("conv_calls", "kernel_launches"),
                                                               math.nan)]  # nothing profiled

    def median(key):  # the median block (the lower middle of an even count: a value that was measured)
        values = [b[key] for b in blocks]
        if any(isinstance(v, float) and math.isnan(v) for v in values):
            return math.nan
        return sorted(values)[(len(values) - 1) // 2]

    spread = {}
    for key in SPREAD_METRICS:
        values = [b[key] for b in blocks]
        nan = any(isinstance(v, float) and math.isnan(v) for v in values)
        spread.update({key: median(key), f"{key}_min": math.nan if nan else min(values),
                       f"{key}_max": math.nan if nan else max(values)})
    s = profs[0].summary if profs else {"device_missing_reason": "not profiled (profile_steps=0)"}
    peak = {key: max((p.summary[key] for p in profs), default=math.nan)
            for key in ("max_cpu_mem_mib", "max_device_mem_mib")}

    cuda = dev.type == "cuda"
    return {
        "rank": rank, "local_rank": local_rank, "node": int(os.environ.get("GROUP_RANK", 0)),  # torchrun's node id
        "hostname": socket.gethostname(), "pid": os.getpid(),
        "device": str(dev), "backend": backend, "data_source": part.data_source,
        "stem": args.stem if args.stem is not None else models.options(args.model).get("stem"),
        "samples": args.epochs * len(sampler), "steps": steps, "profiled_steps": args.profile_steps,
        "warmup_steps": args.warmup_steps, "warmup_time_s": warmup.seconds,
        "final_loss": float(history["train_loss"].iloc[-1]),
        "wall_time_s": float(history["epoch_time_s"].sum()),
        "epoch_times_s": [float(t) for t in history["epoch_time_s"]],
        **spread,
        "cuda_missing_reason": s["device_missing_reason"],
        "conv_calls": median("conv_calls"),
        "kernel_launches": median("kernel_launches"),
        "max_cpu_mem_mib": peak["max_cpu_mem_mib"],
        "max_gpu_mem_mib": peak["max_device_mem_mib"],
        "max_gpu_mem_missing_reason": None if cuda and profs else "CPU run: no GPU memory" if not cuda else
        "not profiled (profile_steps=0)",
        "profile_repeats": args.profile_repeats,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # Linux reports KiB
        "torch_threads": torch.get_num_threads(),
        "param_sha256": param_digest(model),
    }, model


def merge(ranks: list[dict], config: dict) -> dict:
    """One tidy row for a configuration from every rank's metrics.

    Times: wall_time_s, cpu_total_ms and cuda_total_ms are the maximum over ranks (the slowest rank
    sets the pace of synchronous data parallelism); memory: max_cpu_mem_mib / max_gpu_mem_mib (peaks) and
    cpu_mem_allocated_mib / gpu_mem_allocated_mib (cumulative) are the maximum over ranks, with the per-rank peaks
    in ``*_per_rank`` lists (rank order); calls are per rank (maximum over ranks, every rank runs the same ops).
    The noise: ``<metric>_min`` / ``_max`` for each of :data:`SPREAD_METRICS` (the range of the profiled blocks'
    estimates, the largest over ranks) and throughput_samples_per_s_min / _max (the range of the epochs' throughput,
    each epoch paced by its slowest rank; with one epoch, that epoch's).
    Profiled totals are per-epochs estimates (see :func:`train_and_profile`). throughput_samples_per_s = samples
    of all ranks / wall_time_s. batch_size_per_rank is the DataLoader batch; global_batch_size = it x world_size.
    Where the ranks ran, from their devices: gpus_used (distinct GPUs over all machines; 0 on CPUs),
    processes_per_gpu (the most ranks on one GPU; None on CPUs) and placement (:func:`placement_label`: "2 processes
    sharing 1 GPU"). warmup_steps and warmup_time_s (the slowest rank's) are the untimed steps before the epochs.
    """
    ranks = sorted(ranks, key=lambda r: r["rank"])
    world_size = len(ranks)
    gpus = Counter((r["node"], r["device"]) for r in ranks if r["device"].startswith("cuda"))
    device = ranks[0]["device"].split(":")[0]

    def worst(key):
        values = [r[key] for r in ranks]
        return math.nan if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values) else max(values)

    wall = worst("wall_time_s")
    samples = sum(r["samples"] for r in ranks)
    digests = {r["param_sha256"] for r in ranks}
    row = {
        "model": config["model"], "stem": ranks[0]["stem"], "dataset": config["dataset"],
        "data_source": ranks[0]["data_source"],
        "backend": ranks[0]["backend"], "device": device,
        "world_size": world_size, "nnodes": len({r["node"] for r in ranks}),
        "gpus_used": len(gpus), "processes_per_gpu": max(gpus.values()) if gpus else None,
        "placement": placement_label(device, world_size, len(gpus)),
        "batch_size_per_rank": config["batch_size"], "global_batch_size": config["batch_size"] * world_size,
        "data_fraction": config["fraction"], "epochs": config["epochs"],
        "samples_total": samples, "steps_per_rank": max(r["steps"] for r in ranks),
        "profiled_steps": ranks[0]["profiled_steps"],
        "warmup_steps": ranks[0]["warmup_steps"], "warmup_time_s": worst("warmup_time_s"),
        "wall_time_s": wall,
        "throughput_samples_per_s": samples / wall if wall > 0 else math.nan,
        "cpu_total_ms": worst("cpu_total_ms"),
        "cpu_total_ms_per_rank": [r["cpu_total_ms"] for r in ranks],
        "cuda_total_ms": worst("cuda_total_ms"),
        "cuda_total_ms_per_rank": [r["cuda_total_ms"] for r in ranks],
        "cuda_missing_reason": ranks[0]["cuda_missing_reason"],
        "calls_total": max(r["calls_total"] for r in ranks),
        "conv_calls": max(r["conv_calls"] for r in ranks),
        "kernel_launches": worst("kernel_launches"),
        "max_cpu_mem_mib": worst("max_cpu_mem_mib"),
        "max_cpu_mem_mib_per_rank": [r["max_cpu_mem_mib"] for r in ranks],
        "max_gpu_mem_mib": worst("max_gpu_mem_mib"),
        "max_gpu_mem_mib_per_rank": [r["max_gpu_mem_mib"] for r in ranks],
        "max_gpu_mem_missing_reason": ranks[0]["max_gpu_mem_missing_reason"],
        "cpu_mem_allocated_mib": worst("cpu_mem_allocated_mib"),
        "gpu_mem_allocated_mib": worst("gpu_mem_allocated_mib"),
        "max_rss_mib": worst("max_rss_mib"),
        "torch_threads_per_rank": ranks[0]["torch_threads"],
        "final_loss": ranks[0]["final_loss"],
        "params_identical": len(digests) == 1,
        "status": "ok", "error": None, "note": None,
        "profile_repeats": ranks[0].get("profile_repeats", 1),
    }
    for key in SPREAD_METRICS:  # the slowest (largest) rank's value lies between the ranks' largest min and max
        row[f"{key}_min"] = worst(f"{key}_min") if f"{key}_min" in ranks[0] else row[key]
        row[f"{key}_max"] = worst(f"{key}_max") if f"{key}_max" in ranks[0] else row[key]
    # each epoch's throughput, paced by its slowest rank: their range (one epoch: that epoch alone)
    epochs = [r.get("epoch_times_s") or [r["wall_time_s"]] for r in ranks]
    per_epoch = samples / len(epochs[0])
    rates = [per_epoch / max(times) for times in zip(*epochs) if max(times) > 0]
    # widened to hold the whole run's rate: it divides by the slowest rank's total, which can beat every epoch's
    # slowest-rank rate when ranks are slow in different epochs (seen once in CI: the value fell outside its range)
    rate = row["throughput_samples_per_s"]
    rates += [rate] if math.isfinite(rate) else []
    row["throughput_samples_per_s_min"] = min(rates, default=math.nan)
    row["throughput_samples_per_s_max"] = max(rates, default=math.nan)
    assert tuple(row) == ROW_FIELDS, "merge() and ROW_FIELDS disagree"
    return row


def _write_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(obj, indent=1, default=str, allow_nan=True))
    tmp.replace(path)  # readers never see a half-written file


def _die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (nothing elsewhere).

    torchrun starts each worker in its own session, so a torchrun killed outright (SIGKILL: no chance to stop its
    workers) would leave them running as orphans that load the CPU and write into the next run's folder."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)


def plan_items(args, world_size: int) -> list[dict]:
    """The configurations this launch trains, in order: ``--plan``'s, else the one of ``--fraction`` and
    ``--batch-size`` on all ``world_size`` processes (written to ``--out`` itself: ``out`` "")."""
    if args.plan is None:
        return [{"out": "", "fraction": args.fraction, "batch_size": args.batch_size, "world_size": world_size,
                 "profile": True}]
    items = json.loads(Path(args.plan).read_text())
    for item in items:
        if not 1 <= int(item["world_size"]) <= world_size:
            raise ValueError(f"plan item {item}: world_size must be 1 to the launch's {world_size} processes")
    return items


def item_groups(device: str, world_size: int, items: list[dict]) -> dict[int, tuple]:
    """{processes: (process group of ranks 0..processes-1 or None for all of them, its backend)} for every
    configuration's process count: fewer than all of them get the backend :func:`placement` gives that many
    processes on this machine (as a launch of that many would use), so that a configuration trains as it would in a
    launch of its own. Every rank creates every group, in the same order (``new_group`` is collective)."""
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    gpus = torch.cuda.device_count() if use_cuda else 0
    groups = {}
    for w in sorted({int(item["world_size"]) for item in items}):
        if w == world_size:  # all of them: the launch's own group (on several machines too)
            groups[w] = (None, dist.get_backend())
            continue
        backend = placement("cuda" if use_cuda else "cpu", w, gpus).backend
        groups[w] = (dist.new_group(list(range(w)), backend=backend), backend)
    return groups


def run_item(args, item: dict, out: Path, rank: int, local_rank: int, dev, groups: dict) -> None:
    """Train one plan item on ranks 0..w-1 (:func:`train_and_profile`; this rank's metrics in ``out``), rank 0
    writing its ``row.json`` (:func:`merge`); then free what it held, so that the next item starts as a launch of
    its own would (on a GPU: the allocator's cached blocks handed back, which another process sharing it needs)."""
    w = int(item["world_size"])
    group, backend = groups[w]
    own = argparse.Namespace(**{**vars(args), "fraction": float(item["fraction"]),
                                "batch_size": int(item["batch_size"]),
                                "profile_steps": args.profile_steps if item.get("profile", True) else 0})
    with config.tf32(args.tf32):  # explicit in every rank, never torch's defaults
        metrics, model = train_and_profile(own, rank, w, local_rank, dev, backend, group)
    _write_json(out / f"rank{rank}.json", metrics)
    if args.save_params:
        torch.save({k: v.detach().cpu() for k, v in model.named_parameters()}, out / f"params_rank{rank}.pt")
    gathered = [None] * w if rank == 0 else None
    dist.gather_object(metrics, gathered, dst=0, group=group)
    if rank == 0:
        setup = {"model": args.model, "dataset": args.dataset, "batch_size": own.batch_size,
                 "fraction": own.fraction, "epochs": args.epochs}
        _write_json(out / "row.json", merge(gathered, setup))
    metrics = model = gathered = None  # noqa: F841  (DDP's reducer freed before the next item builds its own)
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    args = parse_args(argv)
    if "TORCHELASTIC_RUN_ID" in os.environ:  # started by torchrun (not a test calling main() in its own process)
        _die_with_parent()
    out = here = Path(args.out)  # here: the folder of the configuration running now, where an error is written
    out.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "-1"))
    try:
        rank, world_size, local_rank, dev, backend = init_process_group(args.device, args.pg_timeout_s)
        items = plan_items(args, world_size)
        groups = item_groups(args.device, world_size, items)
        # the ranks a configuration leaves out wait at a CPU barrier (Gloo blocks; NCCL's would spin on its GPU)
        gate = None if backend == "gloo" else dist.new_group(backend="gloo")
        for item in items:
            here = out / item["out"]
            here.mkdir(parents=True, exist_ok=True)
            if rank < int(item["world_size"]):
                run_item(args, item, here, rank, local_rank, dev, groups)
            dist.barrier(group=gate)
    except BaseException as exc:
        oom = isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()
        _write_json(here / f"rank{rank}.error.json", {
            "rank": rank, "hostname": socket.gethostname(), "error_type": type(exc).__name__,
            "error": f"{'out of memory: ' if oom else ''}{type(exc).__name__}: {exc}", "oom": oom,
            "traceback": traceback.format_exc()})
        raise
    finally:
        # DDP's reducer (reachable from the model's gradient hooks, and from reference cycles) holds the Gloo process
        # group and its worker threads: free it now, while the interpreter is whole, not during its finalization,
        # where a still-joinable C++ thread ends the process with "terminate called without an active exception"
        # (pytorch/pytorch#190489, #179291).
        gc.collect()
        if dist.is_initialized():
            dist.destroy_process_group()
    if os.environ.get("CNNLAB_DDP_ABORT_AT_EXIT_RANK") == str(rank):
        # fault injection for tests: a rank that dies at shutdown after row.json was written (seen on a loaded
        # 2-core machine: "terminate called without an active exception", SIGABRT)
        os.abort()
    return 0


# ----------------------------------------------------------------------------------------------------------------
# The launcher: one configuration = one torchrun launch, from another process.

class LaunchFailed(RuntimeError):
    """A launch that did not finish (a rank raised or was killed, the process group did not form, a timeout): the
    message is the reason; ``run_dir`` holds the ranks' files and ``torchrun.log``."""

    def __init__(self, reason: str, run_dir: Path | None = None):
        super().__init__(reason)
        self.run_dir = run_dir


class LaunchOutOfMemory(LaunchFailed, torch.OutOfMemoryError):
    """A launch whose first failing rank ran out of memory: a result (the configuration does not fit), which
    :func:`cnnlab.profiling.sweep` records as status "oom"."""


def launch(*, world_size: int, batch_size_per_rank: int, data_fraction: float, model: str, dataset: str, out_dir,
           epochs: int = 1, synthetic: bool = False, synthetic_size: int | None = None, device: str = "cpu",
           timeout_s: float = 600.0, threads_per_rank: int = 1, num_workers: int = 0, seed: int = 0,
           stem: str | None = None, warmup_steps: int = 5, profile_steps: int = 5, profile_warmup: int = 1,
           profile_repeats: int = 1, tf32: bool = False, save_params: bool = False,
           fail_rank: int | None = None) -> dict:
    """Train one configuration with ``torchrun --standalone --nproc-per-node world_size -m cnnlab.ddp``.

    Returns the tidy row of :func:`merge` (all :data:`ROW_FIELDS`, ``status="ok"``) plus ``launch_time_s`` (s,
    the whole launch with process start-up) and ``run_dir`` (the ranks' files and ``torchrun.log``). On CUDA with
    more processes than GPUs the processes share them (:func:`placement`: Gloo; the row's ``placement`` says so).
    ``warmup_steps`` untimed steps run before the timed epochs (see :func:`train_and_profile`).
    A launch that fails (a rank raises, the process group cannot form) or does not finish within ``timeout_s``
    seconds (then torchrun and every worker are killed) raises :class:`LaunchFailed` with the reason
    (:class:`LaunchOutOfMemory` where the first failing rank ran out of memory); it never hangs. A launch that fails
    after rank 0 wrote ``row.json`` (every rank's metrics merged: a rank that then dies at shutdown) keeps that row,
    ``status="ok"``, with what happened in ``note`` (None otherwise). On any exit of this function (a timeout,
    Ctrl-C, an exception) torchrun and its workers are killed and waited for; if the calling process is killed
    outright, torchrun gets SIGTERM and its workers stop with it; if torchrun is killed outright, its workers are
    killed before this function returns or raises (Linux: see :mod:`cnnlab.subreaper`).
    ``--standalone`` picks a free port, so launches can run side by side.
    """
    # inf would reach Popen.wait as an OverflowError naming nothing; 0 would kill every launch at once
    timeout_s = config.number(timeout_s, parameter="timeout_s", low=0, high=7 * 24 * 3600.0)
    device = config.resolve_device(device).type
    run_dir = _fresh(Path(out_dir) / (f"{model}{'_' + stem if stem else ''}_{dataset}_w{world_size}"
                                      f"_b{batch_size_per_rank}_f{data_fraction:g}_e{epochs}_{device}"))
    args = _worker_args(model=model, dataset=dataset, epochs=epochs, device=device, num_workers=num_workers,
                        seed=seed, out=run_dir, timeout_s=timeout_s, warmup_steps=warmup_steps,
                        profile_steps=profile_steps, profile_warmup=profile_warmup, profile_repeats=profile_repeats,
                        stem=stem, synthetic=synthetic, synthetic_size=synthetic_size, save_params=save_params,
                        tf32=tf32, fail_rank=fail_rank)
    args += ["--batch-size", str(batch_size_per_rank), "--fraction", repr(float(data_fraction))]
    launched = wall_time(lambda: _torchrun(world_size, args, run_dir, threads_per_rank, timeout_s))
    reason, oom = launched.result or ("torchrun exited with code 0 but rank 0 wrote no row.json", False)
    row = _read_row(run_dir / "row.json")
    if row is None:
        raise (LaunchOutOfMemory if oom else LaunchFailed)(reason, run_dir)
    # Rank 0 writes row.json only after every rank's metrics reached it: a rank that died after that (at shutdown,
    # say) took nothing from the result, so it is kept, and says what happened.
    if launched.result is not None:
        row["note"] = f"kept: row.json was complete when the launch then failed at shutdown: {reason}"
    row.update(launch_time_s=launched.seconds, run_dir=str(run_dir))
    return row


def launch_plan(configs: list[dict], *, name: str, model: str, dataset: str, out_dir, epochs: int = 1,
                synthetic: bool = False, synthetic_size: int | None = None, device: str = "cpu",
                timeout_s: float = 600.0, threads_per_rank: int = 1, num_workers: int = 0, seed: int = 0,
                stem: str | None = None, warmup_steps: int = 5, profile_steps: int = 5, profile_warmup: int = 1,
                profile_repeats: int = 1, tf32: bool = False) -> list:
    """Train several configurations one after another in ONE torchrun launch, of as many processes as the largest
    needs: ``configs`` are dicts {data_fraction, batch_size_per_rank, world_size, profile (bool: profile its steps,
    else its profiler metrics are NaN), name (optional: its folder, default ``w..._b..._f...``; a configuration
    trained twice, in two rounds, needs two)}; a configuration of w processes trains on ranks 0..w-1 (a process group of
    their own, with the backend a launch of w would use: :func:`item_groups`) while the others wait, each with its own
    model, optimizer and warm-up steps, the data set read once per process. A study that times configurations in
    rounds (``cnnlab.studies.ddp_scaling``) pays the start of torchrun and its processes (seconds: importing torch)
    once per round instead of once per configuration, and its configurations run back to back on the same processes.

    Returns one entry per configuration, in order: its row as :func:`launch` returns it (``launch_time_s``: the whole
    launch's; ``run_dir``: its own folder, ``<out_dir>/<name>/<its name>``), or, where the launch failed, the
    :class:`LaunchFailed` (or :class:`LaunchOutOfMemory`) of the configuration it failed on, and None for those after
    it (not run: launch them again). ``timeout_s`` is per configuration (the launch gets that times their number; the
    waiting ranks' process group times out after it). Processes end as :func:`launch` ends them."""
    timeout_s = config.number(timeout_s, parameter="timeout_s", low=0, high=7 * 24 * 3600.0)
    device = config.resolve_device(device).type
    if not configs:
        raise ValueError("configs=[]: give at least one configuration to launch")
    items = [{"out": c.get("name") or f"w{c['world_size']}_b{c['batch_size_per_rank']}_f{c['data_fraction']:g}",
              "fraction": float(c["data_fraction"]), "batch_size": int(c["batch_size_per_rank"]),
              "world_size": int(c["world_size"]), "profile": bool(c.get("profile", True))} for c in configs]
    if len({i["out"] for i in items}) < len(items):
        raise ValueError(f"configs: two configurations have one folder (name them): {[i['out'] for i in items]}")
    run_dir = _fresh(Path(out_dir) / name)
    (run_dir / "plan.json").write_text(json.dumps(items, indent=1))
    args = _worker_args(model=model, dataset=dataset, epochs=epochs, device=device, num_workers=num_workers,
                        seed=seed, out=run_dir, timeout_s=timeout_s, warmup_steps=warmup_steps,
                        profile_steps=profile_steps, profile_warmup=profile_warmup, profile_repeats=profile_repeats,
                        stem=stem, synthetic=synthetic, synthetic_size=synthetic_size, tf32=tf32)
    args += ["--plan", str(run_dir / "plan.json")]
    world_size = max(i["world_size"] for i in items)

    def unfinished() -> Path:  # the first configuration without a row: the one its ranks' error files explain
        return next((run_dir / i["out"] for i in items if not (run_dir / i["out"] / "row.json").exists()), run_dir)
    launched = wall_time(lambda: _torchrun(world_size, args, run_dir, threads_per_rank, timeout_s * len(items),
                                           unfinished))
    out, failed = [], None
    for item in items:
        row = None if failed else _read_row(run_dir / item["out"] / "row.json")
        if row is not None:
            out.append({**row, "launch_time_s": launched.seconds, "run_dir": str(run_dir / item["out"])})
        elif failed is None:  # the configuration the launch failed on
            reason, oom = launched.result or ("torchrun exited with code 0 but rank 0 wrote no row.json", False)
            failed = (LaunchOutOfMemory if oom else LaunchFailed)(reason, run_dir / item["out"])
            out.append(failed)
        else:
            out.append(None)
    if failed is None and launched.result is not None:  # every row written, then a rank died at shutdown
        for row in out:
            row["note"] = f"kept: row.json was complete when the launch then failed at shutdown: {launched.result[0]}"
    return out


def _fresh(run_dir: Path) -> Path:
    """``run_dir``, emptied: no stale rank files from an earlier launch."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    return run_dir


def _worker_args(*, model, dataset, epochs, device, num_workers, seed, out, timeout_s, warmup_steps, profile_steps,
                 profile_warmup, profile_repeats, stem, synthetic, synthetic_size, tf32, save_params=False,
                 fail_rank=None) -> list[str]:
    """The command line of ``python -m cnnlab.ddp`` for what every configuration of a launch shares."""
    args = ["--model", model, "--dataset", dataset, "--epochs", str(epochs), "--device", device,
            "--num-workers", str(num_workers), "--seed", str(seed), "--out", str(out),
            "--pg-timeout-s", str(max(30.0, float(timeout_s))), "--warmup-steps", str(warmup_steps),
            "--profile-steps", str(profile_steps),
            "--profile-warmup", str(profile_warmup), "--profile-repeats", str(profile_repeats)]
    args += ["--stem", stem] if stem is not None else []
    args += ["--synthetic"] if synthetic else []
    args += ["--synthetic-size", str(synthetic_size)] if synthetic_size else []
    args += ["--save-params"] if save_params else []
    args += ["--tf32"] if tf32 else []
    args += ["--fail-rank", str(fail_rank)] if fail_rank is not None else []
    return args


def _torchrun(world_size: int, args: list[str], run_dir: Path, threads_per_rank: int, timeout_s: float,
              failed_in=None) -> tuple[str, bool] | None:
    """Run ``torchrun ... -m cnnlab.ddp *args`` with ``world_size`` processes, its log in ``run_dir/torchrun.log``:
    None when it exited 0, else (why it failed, whether out of memory: :func:`_failure_reason`, from the ranks' error
    files in ``failed_in()``, default ``run_dir``). No torchrun or worker outlives it."""
    failed_in = failed_in or (lambda: run_dir)
    # python -m torch.distributed.run is the torchrun command, without relying on PATH.
    # Below cnnlab.subreaper, which outlives torchrun: whatever torchrun leaves running (its workers, when it is killed
    # outright) is killed and reaped there before the launch ends.
    cmd = [sys.executable, "-m", "cnnlab.subreaper", str(os.getpid()),
           sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
           f"--nproc-per-node={world_size}", "--max-restarts=0", "-m", "cnnlab.ddp", *args]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads_per_rank),  # no oversubscription of the cores
               PYTHONPATH=os.pathsep.join(filter(None, [CHECKOUT and str(CHECKOUT), os.environ.get("PYTHONPATH")])))
    log = run_dir / "torchrun.log"
    with open(log, "w") as out:
        # Its own session: a Ctrl-C in the caller's terminal does not reach it, so that the finally below
        # decides; and SIGTERM when the caller dies outright (papermill killed: no finally runs), on which
        # torchrun stops its workers (see cnnlab.subreaper).
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=CHECKOUT, env=env,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
            return None if code == 0 else _failure_reason(failed_in(), log, code)
        except subprocess.TimeoutExpired:
            pass
        finally:  # any exit (a timeout, KeyboardInterrupt, an exception): no torchrun or worker outlives it
            _kill_tree(proc)
    # only a timeout gets here
    reason = f"timeout: no result after {timeout_s:g} s; torchrun and its workers were killed"
    partial, _ = _failure_reason(failed_in(), log, -9)
    return reason + (f" (earlier: {partial})" if partial.startswith("rank") else ""), False


def _read_row(path: Path) -> dict | None:
    """The merged row rank 0 wrote (all of :data:`ROW_FIELDS`, status ok), or None if there is none."""
    try:
        row = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(row, dict) or row.get("status") != "ok" or not set(ROW_FIELDS) - {"note"} <= set(row):
        return None
    row.setdefault("note", None)
    return row


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (not gone, not a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _kill_tree(proc: subprocess.Popen, wait_s: float = 30.0) -> None:
    """SIGKILL torchrun and its workers and wait until they are gone. torchrun starts each worker in its own
    session, so killing torchrun's process group alone would leave the workers running: kill every descendant's
    group. A no-op for a torchrun that exited by itself (its workers have exited before it)."""
    if proc.poll() is not None:
        return
    own = os.getpgrp()
    pids = [proc.pid] + _descendants(proc.pid)
    for pid in pids:
        try:
            group = os.getpgid(pid)
            if group != own:
                os.killpg(group, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()
    # the workers are not our children (init reaps them): wait until none runs, so a next launch starts on idle
    # cores and nothing writes into this run's folder any more
    deadline = time.monotonic() + wait_s
    while any(_alive(pid) for pid in pids[1:]) and time.monotonic() < deadline:
        time.sleep(0.05)


def _failure_reason(run_dir: Path, log: Path, returncode: int) -> tuple[str, bool]:
    """Why a launch failed, and whether the first failing rank ran out of memory (its error file says so). A rank
    killed by a signal writes no error file and the others then fail echoing it, so torchrun's "Root Cause" block is
    read first: a negative exit code there is the signal (SIGKILL: often the kernel's out-of-memory killer, which
    no rank saw: not counted as out of memory). Else the first rank's error file (later ones are its echoes), else
    the log."""
    tail = log.read_text(errors="replace").splitlines()[-80:] if log.exists() else []
    root = next((i for i, line in enumerate(tail) if line.startswith("Root Cause")), None)
    if root is not None:
        block = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in tail[root + 1:root + 9])}
        # "-9 (pid: 123)"; torch 2.13 adds the signal's name there, torch 2.8 only on the traceback line
        killed = re.match(r"-(\d+)\b", block.get("exitcode", ""))
        if killed:
            try:
                name = signal.Signals(int(killed.group(1))).name
            except ValueError:
                name = f"signal {killed.group(1)}"
            why = ": often the kernel's out-of-memory killer" if name == "SIGKILL" else ""
            rank = block.get("rank", "?").split()[0]
            return f"rank {rank} was killed by {name} (exitcode -{killed.group(1)}){why}", False
    errors = []
    for path in run_dir.glob("rank*.error.json"):
        try:
            errors.append((path.stat().st_mtime, json.loads(path.read_text())))
        except (OSError, json.JSONDecodeError):
            continue
    if errors:
        _, first = min(errors, key=lambda e: (e[0], e[1].get("rank", 0)))
        others = sorted(e["rank"] for _, e in errors if e is not first)
        also = f" (ranks {others} failed after it)" if others else ""
        return f"rank {first.get('rank')}: {first.get('error')}{also}", bool(first.get("oom"))
    lines = [line for line in tail if "Error" in line or "error" in line] or tail[-3:]
    return f"torchrun exited with code {returncode}: " + " | ".join(line.strip() for line in lines[-3:]), False

if __name__ == "__main__":
    code = main()
    if "TORCHELASTIC_RUN_ID" in os.environ:
        # Every file is written and the process group destroyed: leave without running C++ static destructors,
        # the usual site of "terminate called without an active exception" (a library's std::thread still
        # joinable at exit), which on a loaded 2-core machine turned finished ranks into SIGABRTs.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
