"""Operator and kernel breakdown of a workload with the PyTorch profiler: :func:`profile_ops`.

Gives the metrics of paper 001 (kernel execution times, host-to-device and device-to-host transfer
time, time waiting in synchronisation, its "semwait") and of paper 002 (CPU and CUDA total time,
number of calls, maximum CPU and GPU memory: the peak of live bytes and the cumulative bytes allocated) as tidy
DataFrames; ``scheduled=True`` records a fixed number of steps of a long workload. Field names follow torch 2.13's
profiler (``device_time_total``, ``self_device_memory_usage``; the ``cuda_*`` names are deprecated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from cnnlab import config
from cnnlab.profiling.memory import MIB, allocated_from_memory_events, peak_from_memory_events, raw_events
from cnnlab.profiling import cupti
from cnnlab.profiling.quiet import ONE_CYCLE, quiet_profiler
from cnnlab.profiling.traces import save_chrome_trace

# CUDA runtime calls during which the host blocks until the device catches up (paper 001's "semwait").
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")
_ITERATION = "cnnlab::iteration"
_FINAL_SYNC = "cnnlab::final_sync"
DEVICE_KINDS = ("kernel", "gpu_memcpy", "gpu_memset")
_PROFILER_STEP = "ProfilerStep#"  # torch.profiler's annotation of each scheduled step
# The profiler's own bookkeeping, recorded as host events as if it were the workload's: Kineto's requests for CUPTI
# activity buffers (the first H100 run, torch 2.11: 2.0 ms, 28% of quickstart's CPU total, 9.8% of notebook 07's).
# Left out of the operators, the CPU total and the wall time; summed apart as the summary's profiler_overhead_ms.
PROFILER_EVENTS = ("Activity Buffer Request",)


@dataclass
class OpsProfile:
    """Result of :func:`profile_ops`.

    operators: one row per CPU-side event name (aten ops, CUDA runtime calls, user annotations):
        name, kind, calls, self_cpu_time_us, cpu_time_total_us, self_device_time_us,
        device_time_total_us, self_cpu_memory_bytes, cpu_memory_bytes, self_device_memory_bytes,
        device_memory_bytes (device columns NaN on a CPU run).
    kernels: one row per device activity name (kernels, memcpy, memset): name, kind, calls,
        device_time_total_us, device_time_mean_us, device_time_min_us, device_time_max_us
        (empty on a CPU run).
    summary: totals, see :func:`profile_ops`.
    """

    operators: pd.DataFrame
    kernels: pd.DataFrame
    summary: dict[str, Any] = field(default_factory=dict)
    trace_path: str | None = None


def _kind(event) -> str:
    """What a host-side event is, read the same way on every supported torch.

    torch 2.13's ``FunctionEvent`` has ``activity_type``; torch 2.8-2.11's has not, only ``device_type`` and
    ``is_user_annotation`` (which both have), so those and the event's name decide: "memory" (allocator events),
    "user_annotation" (``record_function`` ranges), "cuda_runtime" / "cuda_driver" (CUDA API calls) or "cpu_op".
    """
    if event.name == "[memory]":
        return "memory"
    if event.is_user_annotation:
        return "user_annotation"
    if event.name.startswith("cuda"):
        return "cuda_runtime"
    if event.name.startswith("cu") and event.name[2:3].isupper():  # cuLaunchKernel, cuMemcpyHtoDAsync, ...
        return "cuda_driver"
    return "cpu_op"


def profile_ops(
    fn: Callable[[], Any],
    *,
    iterations: int = 1,
    device: str | torch.device = "cpu",
    warmup: int = 1,
    record_shapes: bool = False,
    profile_memory: bool = True,
    with_stack: bool = False,
    trace_path: str | None = None,
    scheduled: bool = False,
) -> OpsProfile:
    """Run ``fn()`` ``warmup`` times unprofiled, then ``iterations`` times under ``torch.profiler``.

    ``scheduled=True`` profiles a fixed number of steps of a long workload (e.g. training steps of an epoch) with
    ``torch.profiler.schedule(wait=0, warmup=warmup, active=iterations, repeat=1)``: the ``warmup`` steps run under
    the already started profiler, which discards them (the recorded steps do not pay its start-up), and only the
    ``iterations`` active steps are recorded (their ``ProfilerStep#<n>`` annotations, like ``cnnlab::iteration``,
    are left out of the tables). Scale the totals to a whole epoch yourself: they cover ``iterations`` steps.

    ``fn`` is one iteration of the workload (e.g. ``lambda: model(x)``), already set up on
    ``device``. Each iteration is wrapped in a ``cnnlab::iteration`` annotation; on CUDA a final
    ``torch.cuda.synchronize`` (annotated ``cnnlab::final_sync``) makes sure every kernel is recorded.

    ``summary`` (times in ms, memory in MiB): iterations, device, wall_time_ms (host time of the
    iterations, less the profiler's own events in them: profiler_overhead_ms, :data:`PROFILER_EVENTS`),
    cpu_time_total_ms (sum of self CPU time of all ops but the profiler's own: the profiler table's
    "Self CPU time total"), device_time_total_ms (sum of all device activity: "Self CUDA time total"),
    kernel_time_total_ms, kernel_launches (device kernels run), memcpy_htod_ms / _dtoh_ms / _dtod_ms
    with their counts, memset_ms, sync_wait_ms and sync_calls (host time in cudaDevice/Stream/Event
    Synchronize called by ``fn``; the harness's own final sync is reported apart as
    final_sync_wait_ms), max_cpu_mem_mib and max_device_mem_mib (peak live tensor memory allocated
    during the profiled iterations, from the allocator's events; needs ``profile_memory``; with two or more
    iterations, from the second one on: the first frees what was there before the profile, the warm-up's gradients
    say, which the CPU profiler cannot size, so its peak counted those blocks on top of their successors),
    cpu_mem_allocated_mib and device_mem_allocated_mib (cumulative: every byte allocated during the profiled
    iterations, frees not subtracted, see :func:`allocated_from_memory_events`),
    max_device_mem_allocated_mib (absolute ``torch.cuda.max_memory_allocated``), and
    ``device_missing_reason`` (None on CUDA). Device quantities on a CPU run are NaN, never 0.
    """
    dev = config.resolve_device(device)
    iterations = config.positive_int(iterations, parameter="iterations")
    warmup = config.positive_int(warmup, parameter="warmup", minimum=0)
    cuda = dev.type == "cuda"
    from torch.profiler import ProfilerActivity, profile, record_function

    for _ in range(0 if scheduled else warmup):
        fn()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    with quiet_profiler(), profile(activities=activities, record_shapes=record_shapes, profile_memory=profile_memory,
                 with_stack=with_stack, schedule=_schedule(warmup, iterations) if scheduled else None,
                 **ONE_CYCLE) as prof:
        cupti.note_profile(cuda)
        steps = warmup + iterations if scheduled else iterations
        for step in range(steps):
            with record_function(_ITERATION):
                fn()
            if cuda and step == steps - 1:  # inside the last recorded step
                with record_function(_FINAL_SYNC):
                    torch.cuda.synchronize(dev)
            if scheduled:
                if cuda and step == warmup - 1:  # the warm-up's kernels finish before the recorded steps start
                    torch.cuda.synchronize(dev)
                prof.step()
    events = list(prof.events())
    operators = _operators_table(events, cuda)
    kernels = _kernels_table(events)
    summary = _summary(events, kernels, operators, prof, dev, iterations, profile_memory)
    if trace_path is not None:
        save_chrome_trace(prof, trace_path)
    return OpsProfile(operators=operators, kernels=kernels, summary=summary,
                      trace_path=None if trace_path is None else str(trace_path))


def _schedule(warmup: int, active: int):
    from torch.profiler import schedule

    return schedule(wait=0, warmup=warmup, active=active, repeat=1)


def _from_second_iteration(raw: list) -> list:
    """The raw profiler events from the second profiled iteration's start on, where there are two or more, else all
    of them. A free inside the first iteration of a block allocated before the profile (last step's gradients, freed
    by ``zero_grad``) is not recorded on a CPU, so a peak taken over it counts that block on top of its successor; by
    the second iteration every block freed was allocated under the profiler, with its size."""
    starts = sorted(e.start_ns() for e in raw if e.name() == _ITERATION and str(e.device_type()) == "DeviceType.CPU")
    return raw if len(starts) < 2 else [e for e in raw if e.start_ns() >= starts[1]]


def _is_harness(name: str) -> bool:
    """The harness's own annotations and the profiler's own events (:data:`PROFILER_EVENTS`), not work of ``fn``."""
    return name in (_ITERATION, _FINAL_SYNC, *PROFILER_EVENTS) or name.startswith(_PROFILER_STEP)


def _is_host(event) -> bool:
    return str(event.device_type) == "DeviceType.CPU"


def _operators_table(events, cuda: bool) -> pd.DataFrame:
    rows: dict[str, dict[str, Any]] = {}
    for e in events:
        if not _is_host(e) or _is_harness(e.name) or e.name == "[memory]":
            continue
        r = rows.setdefault(e.name, {
            "name": e.name, "kind": _kind(e), "calls": 0,
            "self_cpu_time_us": 0.0, "cpu_time_total_us": 0.0,
            "self_device_time_us": 0.0, "device_time_total_us": 0.0,
            "self_cpu_memory_bytes": 0, "cpu_memory_bytes": 0,
            "self_device_memory_bytes": 0, "device_memory_bytes": 0,
        })
        r["calls"] += e.count
        r["self_cpu_time_us"] += e.self_cpu_time_total
        r["cpu_time_total_us"] += e.cpu_time_total
        r["self_device_time_us"] += e.self_device_time_total
        r["device_time_total_us"] += e.device_time_total
        r["self_cpu_memory_bytes"] += e.self_cpu_memory_usage
        r["cpu_memory_bytes"] += e.cpu_memory_usage
        r["self_device_memory_bytes"] += e.self_device_memory_usage
        r["device_memory_bytes"] += e.device_memory_usage
    table = pd.DataFrame(list(rows.values()), columns=[
        "name", "kind", "calls", "self_cpu_time_us", "cpu_time_total_us", "self_device_time_us",
        "device_time_total_us", "self_cpu_memory_bytes", "cpu_memory_bytes", "self_device_memory_bytes",
        "device_memory_bytes"])
    if not cuda:  # no device was profiled: these are unknown, not zero
        for col in ("self_device_time_us", "device_time_total_us", "self_device_memory_bytes", "device_memory_bytes"):
            table[col] = math.nan
    return table.sort_values("cpu_time_total_us", ascending=False, ignore_index=True)


def _kernels_table(events) -> pd.DataFrame:
    # gpu_user_annotation events mirror record_function ranges on the device timeline: not work, skip them
    rows = [{"name": e.name, "kind": _device_kind(e), "duration_us": e.time_range.elapsed_us()}
            for e in events if not _is_host(e) and _device_kind(e) in DEVICE_KINDS]
    columns = ["name", "kind", "calls", "device_time_total_us", "device_time_mean_us",
               "device_time_min_us", "device_time_max_us"]
    if not rows:
        return pd.DataFrame(columns=columns)
    df = pd.DataFrame(rows)
    table = (df.groupby(["name", "kind"], sort=False)["duration_us"]
             .agg(calls="count", device_time_total_us="sum", device_time_mean_us="mean",
                  device_time_min_us="min", device_time_max_us="max").reset_index())
    return table.sort_values("device_time_total_us", ascending=False, ignore_index=True)[columns]


# Kineto's names for CUDA synchronisation activities on the device timeline (recorded only when enabled).
_DEVICE_SYNC_NAMES = ("Event Sync", "Stream Sync", "Context Sync", "Stream Wait Event")


def _device_kind(event) -> str:
    """What a device-side event is, read the same way on every supported torch (see :func:`_kind`):
    "gpu_user_annotation" (the device copy of a ``record_function`` range: not work), "gpu_memcpy", "gpu_memset",
    "cuda_sync" or "kernel"."""
    if event.is_user_annotation:
        return "gpu_user_annotation"
    if event.name.startswith("Memcpy"):
        return "gpu_memcpy"
    if event.name.startswith("Memset"):
        return "gpu_memset"
    if event.name in _DEVICE_SYNC_NAMES:
        return "cuda_sync"
    return "kernel"


def _summary(events, kernels, operators, prof, dev, iterations, profile_memory) -> dict[str, Any]:
    cuda = dev.type == "cuda"
    nan = math.nan
    iter_events = [e for e in events if e.name == _ITERATION and _is_host(e)]
    final = [e for e in events if e.name == _FINAL_SYNC and _is_host(e)]
    spans = [(f.time_range.start, f.time_range.end) for f in final]

    def inside_final(e) -> bool:
        # By time alone: runtime calls made outside an aten op (torch.cuda.synchronize) keep CUPTI's thread
        # id, not the profiler's; the midpoint tolerates the small offset between the two clocks.
        mid = (e.time_range.start + e.time_range.end) / 2
        return any(s <= mid <= t for s, t in spans)

    # the iteration annotations' self time is fn's own Python overhead: part of the CPU total
    host = [e for e in events if _is_host(e) and e.name != _FINAL_SYNC and not e.name.startswith(_PROFILER_STEP)
            and e.name not in PROFILER_EVENTS and not inside_final(e)]
    iterations_at = [(e.time_range.start, e.time_range.end) for e in iter_events]
    own = sum(e.cpu_time_total for e in events if _is_host(e) and e.name in PROFILER_EVENTS and any(
        s <= e.time_range.start <= t for s, t in iterations_at)) / 1e3  # the profiler's own time inside the steps
    summary: dict[str, Any] = {
        "iterations": iterations,
        "device": str(dev),
        "wall_time_ms": max(sum(e.cpu_time_total for e in iter_events) / 1e3 - own, 0.0),
        "cpu_time_total_ms": sum(e.self_cpu_time_total for e in host) / 1e3,
        "profiler_overhead_ms": own,
    }
    if cuda:
        by_kind = kernels.groupby("kind")["device_time_total_us"].sum() if len(kernels) else pd.Series(dtype=float)
        kern = kernels[kernels["kind"] == "kernel"]
        copies = {d: kernels[kernels["name"].str.contains(f"Memcpy {d}", regex=False)] for d in ("HtoD", "DtoH", "DtoD")}
        syncs = [e for e in events if _is_host(e) and e.name in SYNC_CALLS]
        own = [e for e in syncs if not inside_final(e)]
        summary.update({
            "device_time_total_ms": float(kernels["device_time_total_us"].sum()) / 1e3,
            "kernel_time_total_ms": float(kern["device_time_total_us"].sum()) / 1e3,
            "kernel_launches": int(kern["calls"].sum()),
            "memcpy_htod_ms": float(copies["HtoD"]["device_time_total_us"].sum()) / 1e3,
            "memcpy_htod_count": int(copies["HtoD"]["calls"].sum()),
            "memcpy_dtoh_ms": float(copies["DtoH"]["device_time_total_us"].sum()) / 1e3,
            "memcpy_dtoh_count": int(copies["DtoH"]["calls"].sum()),
            "memcpy_dtod_ms": float(copies["DtoD"]["device_time_total_us"].sum()) / 1e3,
            "memcpy_dtod_count": int(copies["DtoD"]["calls"].sum()),
            "memset_ms": float(by_kind.get("gpu_memset", 0.0)) / 1e3,
            "sync_wait_ms": sum(e.cpu_time_total for e in own) / 1e3,
            "sync_calls": len(own),
            "final_sync_wait_ms": sum(e.cpu_time_total for e in syncs if inside_final(e)) / 1e3,
            "max_device_mem_allocated_mib": torch.cuda.max_memory_allocated(dev) / MIB,
            "device_missing_reason": None,
        })
    else:
        reason = "CPU run: no device activity to profile"
        summary.update({k: nan for k in (
            "device_time_total_ms", "kernel_time_total_ms", "kernel_launches", "memcpy_htod_ms", "memcpy_htod_count",
            "memcpy_dtoh_ms", "memcpy_dtoh_count", "memcpy_dtod_ms", "memcpy_dtod_count", "memset_ms",
            "sync_wait_ms", "sync_calls", "final_sync_wait_ms", "max_device_mem_allocated_mib")})
        summary["device_missing_reason"] = reason
    if profile_memory:
        raw = raw_events(prof)
        peaks, allocated = peak_from_memory_events(_from_second_iteration(raw)), allocated_from_memory_events(raw)
        summary["max_cpu_mem_mib"] = peaks["cpu_bytes"] / MIB
        summary["max_device_mem_mib"] = peaks["device_bytes"] / MIB if cuda else nan
        summary["cpu_mem_allocated_mib"] = allocated["cpu_bytes"] / MIB
        summary["device_mem_allocated_mib"] = allocated["device_bytes"] / MIB if cuda else nan
        summary["memory_missing_reason"] = None if cuda else "CPU run: no device memory"
    else:
        summary["max_cpu_mem_mib"] = nan
        summary["max_device_mem_mib"] = nan
        summary["cpu_mem_allocated_mib"] = nan
        summary["device_mem_allocated_mib"] = nan
        summary["memory_missing_reason"] = "profile_memory=False"
    return summary


# Where a profiled step's time goes (paper 001 Sec. III-A), in the order a stacked bar draws them; the last, the
# host blocked in cuda*Synchronize (in a serving step mostly the final .cpu()), overlaps the device work it waits
# for. It is not the paper's "semwait" (an OS-level semaphore wait), so it is named for what it is.
STEP_COMPONENTS = ("kernel / compute", "memcpy HtoD", "memcpy DtoH", "other device work", "CPU-side overhead",
                   "host waits for the GPU")
HOST_WAIT = STEP_COMPONENTS[-1]


def step_components(prof: OpsProfile, sync_wait_ms: float = math.nan) -> tuple[dict[str, float], float]:
    """Split the wall time of :func:`profile_ops`'s iterations into :data:`STEP_COMPONENTS`, in ms per iteration.

    Returns ``(components, wall_time_ms)``. CUDA: kernel time, the HtoD and DtoH copies, other device work (the rest
    of the device time: memsets, DtoD copies) and CPU-side overhead (wall time minus those four, the GPU idle: at
    least 0) add up to the wall time; "host waits for the GPU" (host blocked in cuda*Synchronize, which overlaps
    device work) is ``sync_wait_ms`` as given (e.g. the median of one-step profiles' ``sync_wait_ms``). CPU: only
    "kernel /
    compute" (the operators' summed self CPU time: the summary's ``cpu_time_total_ms`` also counts Python time) and
    "CPU-side overhead" (the rest of the wall time); the other components are absent."""
    s = prof.summary
    per = 1.0 / s["iterations"]
    wall = s["wall_time_ms"] * per
    if str(s["device"]).startswith("cuda"):
        kernel, htod, dtoh = s["kernel_time_total_ms"] * per, s["memcpy_htod_ms"] * per, s["memcpy_dtoh_ms"] * per
        other = max(s["device_time_total_ms"] * per - kernel - htod - dtoh, 0.0)
        return {"kernel / compute": kernel, "memcpy HtoD": htod, "memcpy DtoH": dtoh, "other device work": other,
                "CPU-side overhead": max(wall - kernel - htod - dtoh - other, 0.0), HOST_WAIT: sync_wait_ms}, wall
    compute = float(prof.operators["self_cpu_time_us"].sum()) / 1e3 * per
    return {"kernel / compute": compute, "CPU-side overhead": max(wall - compute, 0.0)}, wall


def cpu_totals(fn: Callable[[], Any], calls: int, *, device: str | torch.device) -> dict[str, Any]:
    """The profiler's CPU total ("Self CPU time total", :func:`profile_ops`'s ``cpu_time_total_ms``) of ``calls``
    warm calls of ``fn`` under ``torch.inference_mode()``, each profiled apart: ``profile_cpu_total_ms`` (ms, the
    median), ``profile_cpu_total_ms_min`` / ``_max`` (their range) and ``profile_calls``; NaN where ``calls`` is 0.
    Warm the callable first: the first calls of a built form (TorchScript, compiled code) do extra work."""
    with torch.inference_mode():
        totals = [profile_ops(fn, iterations=1, device=device, warmup=0).summary["cpu_time_total_ms"]
                  for _ in range(calls)]
    return {"profile_cpu_total_ms": float(np.median(totals)) if totals else math.nan,
            "profile_cpu_total_ms_min": min(totals, default=math.nan),
            "profile_cpu_total_ms_max": max(totals, default=math.nan), "profile_calls": len(totals)}


def top_operators(prof: OpsProfile, by: str = "self_cpu_time_us", n: int | None = None) -> pd.DataFrame:
    """``prof.operators`` by column ``by`` (a time in µs, e.g. ``self_cpu_time_us`` or ``self_device_time_us``),
    largest first, the first ``n`` (all when None), with ``share_pct``: each operator's ``by`` as % of that column's
    total over every operator (not only the first ``n``), and each ``*_us`` time also in ms (``*_ms``)."""
    ops = prof.operators.sort_values(by, ascending=False, ignore_index=True)
    top = ops if n is None else ops.head(n)
    times = [c for c in ops.columns if c.endswith("_us")]
    return top.assign(**{c.removesuffix("_us") + "_ms": top[c] / 1e3 for c in times},
                      share_pct=100.0 * top[by] / ops[by].sum())
