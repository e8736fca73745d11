"""Peak memory of a region of code, measured (never estimated).

GPU: the CUDA caching allocator keeps exact counters (``torch.cuda.max_memory_allocated`` after
``reset_peak_memory_stats``), the quantity paper 001 calls "Peak GPU Memory Allocated".

CPU: torch keeps no such counter, so we replay the allocator's own event stream: with
``profile_memory=True`` the PyTorch profiler records one ``[memory]`` event per allocation and free
of tensor storage (c10's CPU allocator, which every CPU tensor, including oneDNN outputs, goes
through), with its signed size. The running sum of those sizes is the live tensor memory allocated
inside the region; its maximum is the peak. It counts tensor storage only: not Python objects, not
the interpreter, not allocator caches or memory of libraries that bypass c10 (e.g. numpy), and not
tensors that already existed before the region (those are added separately by the caller).
Because the profiler slows the region down, it runs in its own pass, never inside a timing loop.

Memory over time (:func:`memory_over_time`: peak and time-weighted average of one step) replays the same
events with their timestamps. This is the only module that reads the profiler's raw event list
(:func:`raw_events`, private to torch: ``prof.profiler.kineto_results``).
"""

from __future__ import annotations

import bisect
import itertools
import math
from typing import Callable, Iterable

import torch

from cnnlab.profiling import cupti
from cnnlab.profiling.quiet import ONE_CYCLE, UNKNOWN_FREE, quiet_profiler
from cnnlab.profiling.spread import Spread

MIB = 1024**2

CPU_METHOD = "torch.profiler allocator events: peak live CPU tensor bytes allocated in one pass"
CUDA_METHOD = "torch.cuda.max_memory_allocated/max_memory_reserved after reset_peak_memory_stats"

_CPU_TYPES = {"DeviceType.CPU", "DeviceType.MKLDNN", "DeviceType.IDEEP"}
_GPU_TYPES = {"DeviceType.CUDA", "DeviceType.HIP"}


def raw_events(prof) -> list:
    """The raw kineto events of a finished ``torch.profiler.profile`` (each with ``name()``, ``start_ns()``,
    ``duration_ns()``, ``device_type()`` and, for ``[memory]`` events, ``nbytes()``).

    Private API: ``prof.profiler.kineto_results.events()``. The public ``prof.events()`` (FunctionEvents) drops
    the signed sizes and timestamps of allocator events that peak and average memory need; the memory
    snapshot API (``torch.cuda.memory._record_memory_history``) is CUDA-only. If torch changes this, the
    error says what broke, and ``tests/test_memory.py`` fails first.
    """
    try:
        events = prof.profiler.kineto_results.events()
    except AttributeError as exc:
        raise RuntimeError(f"torch {torch.__version__} changed the profiler's raw event API "
                           f"(prof.profiler.kineto_results.events(): {exc}); cnnlab.profiling.memory needs it for "
                           "allocator events") from exc
    missing = [m for m in ("name", "start_ns", "duration_ns", "device_type", "nbytes")
               if events and not hasattr(events[0], m)]
    if missing:
        raise RuntimeError(f"torch {torch.__version__} changed the profiler's raw events: no {missing}")
    return list(events)


def peak_from_memory_events(events: Iterable) -> dict[str, int]:
    """Peak of the running sum of allocation sizes, per side, from kineto ``[memory]`` events.

    ``events`` are the profiler's raw kineto events (``prof.profiler.kineto_results.events()``).
    Returns ``{"cpu_bytes": int, "device_bytes": int}``: the largest amount of memory allocated
    and still live at any moment, relative to the start of profiling (>= 0).
    """
    mem = sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns())
    peaks = {"cpu_bytes": 0, "device_bytes": 0}
    live = {"cpu_bytes": 0, "device_bytes": 0}
    for event in mem:
        side = _side(event)
        if side is None:
            continue
        live[side] += event.nbytes()
        peaks[side] = max(peaks[side], live[side])
    return peaks


def allocated_from_memory_events(events: Iterable) -> dict[str, int]:
    """Cumulative bytes allocated, per side, from the profiler's raw ``[memory]`` events (:func:`raw_events`): the
    sum of every allocation's size, frees not subtracted. ``{"cpu_bytes": int, "device_bytes": int}``.

    Paper 002's "maximum memory transfer" (its Fig. 10-15) is read as this: memory the allocator handed out while
    training, which grows with the work done, where the peak of live bytes (:func:`peak_from_memory_events`) only
    grows with the batch. The profiler's own "CPU Mem"/"CUDA Mem" columns attribute the same events to operators,
    but net each operator's frees against its allocations."""
    totals = {"cpu_bytes": 0, "device_bytes": 0}
    for event in events:
        side = _side(event) if event.name() == "[memory]" and event.nbytes() > 0 else None
        if side is not None:
            totals[side] += event.nbytes()
    return totals


def _side(event) -> str | None:
    """Which total a ``[memory]`` event counts towards: "cpu_bytes", "device_bytes", or None (another device)."""
    kind = str(event.device_type())
    return "cpu_bytes" if kind in _CPU_TYPES else "device_bytes" if kind in _GPU_TYPES else None


def cpu_peak_bytes(step: Callable[[], object]) -> int:
    """Peak live CPU tensor bytes allocated while ``step()`` runs once (see module docstring).

    The output of ``step`` is released before returning, but it counts towards the peak because it
    was live at the end of the step. One more ``step()`` runs first, inside the profiler and not counted
    (:func:`memory_over_time`'s ``before``): a block the measured call frees that an earlier call left (a pruned
    weight that every forward computes again, last step's gradients) is then seen freed, with its size.
    """
    return memory_over_time(step, "cpu", before=step)["peak_bytes"]


def free_memory() -> None:
    """Free what the previous measurement left (Python garbage, the CUDA caching allocator's unused blocks), so
    that the next point's peak-memory counters see only its own tensors."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def resident_bytes(model, inputs: Iterable[torch.Tensor], device="cpu") -> int:
    """Bytes of the model's parameters and buffers plus the input tensors (storage already allocated) that are on
    ``device``'s type (default the CPU)."""
    kind = torch.device(device).type
    seen: set[int] = set()
    total = 0
    tensors = list(inputs)
    if isinstance(model, torch.nn.Module):
        tensors += list(model.parameters()) + list(model.buffers())
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device.type != kind:
            continue
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in seen or key == 0:  # tied weights and views share one storage
            continue
        seen.add(key)
        total += storage.nbytes()
    return total


def resident_now(device, model=None, inputs: Iterable[torch.Tensor] = ()) -> int:
    """Bytes resident before a step, in bytes: on CUDA every tensor the caching allocator holds
    (``torch.cuda.memory_allocated``); on a CPU, which keeps no such count, :func:`resident_bytes` of ``model`` and
    ``inputs`` (list everything the step keeps alive: inputs, gradients, optimizer state)."""
    dev = torch.device(device)
    return torch.cuda.memory_allocated(dev) if dev.type == "cuda" else resident_bytes(model, inputs)


# Why "other resident" memory is not separated on a CPU: the CPU method adds the allocator events of the measured
# pass to the model's and inputs' bytes, so it never counts a library's buffers in the first place.
CPU_OTHER_REASON = "CPU run: the method counts only the model's, the inputs' and the pass's own tensors"


def other_resident(device, model, inputs: Iterable[torch.Tensor]) -> tuple[float, str | None]:
    """(MiB, None) held on a CUDA ``device`` besides ``model``'s weights and buffers and ``inputs``: the cuBLAS
    and cuDNN workspaces the first calls allocated (about 33 MiB for LeNet-5 on an H100, 66 MiB with two handles),
    and any tensor left by earlier work; (NaN, why) on a CPU (:data:`CPU_OTHER_REASON`) or for a callable that is not
    an ``nn.Module`` (its weights cannot be counted). Memory claims judge the model's own bytes, with this beside
    them."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return math.nan, CPU_OTHER_REASON
    if not isinstance(model, torch.nn.Module):
        return math.nan, "the timed callable is not an nn.Module: its weights cannot be told from other memory"
    return (torch.cuda.memory_allocated(dev) - resident_bytes(model, inputs, dev)) / MIB, None


def average_memory(step: Callable[[], object], device, *, resident: int = 0, repeats: int = 3) -> dict:
    """Average memory of one ``step()``, in MiB: ``resident`` bytes (what is held before it, e.g.
    :func:`resident_now`) plus the time-weighted average of the tensor memory allocated during it
    (:func:`memory_over_time`), over ``repeats`` one-step runs. The weighting is by time, so it varies: returns
    ``{"avg_mem_mib": median, "avg_mem_mib_low": smallest, "avg_mem_mib_high": largest, "avg_mem_weighting":
    "device time" | "host wall time", "avg_mem_missing_reason": None}``, the three numbers NaN with the reason when
    the profiler recorded no allocator event in some run."""
    runs = [memory_over_time(step, device) for _ in range(repeats)]
    if not all(r["events"] for r in runs):
        return {"avg_mem_mib": math.nan, "avg_mem_mib_low": math.nan, "avg_mem_mib_high": math.nan,
                "avg_mem_weighting": runs[0]["weighting"],
                "avg_mem_missing_reason": "the profiler recorded no allocator events"}
    spread = Spread.of_samples((resident + r["avg_bytes"]) / MIB for r in runs)
    return {"avg_mem_mib": spread.value, "avg_mem_mib_low": spread.low, "avg_mem_mib_high": spread.high,
            "avg_mem_weighting": runs[0]["weighting"], "avg_mem_missing_reason": None}


def peak_memory_mib(step: Callable[[], object], device, *, resident: int = 0,
                    before: Callable[[], object] | None = None) -> float:
    """Peak memory of one ``step()``, in MiB: ``resident`` bytes (what is held before it, e.g. :func:`resident_now`)
    plus the peak of the tensor memory allocated during it (:func:`memory_over_time`, ``before`` passed on)."""
    return (resident + memory_over_time(step, device, before=before)["peak_bytes"]) / MIB


def train_step_peak_mib(step: Callable[[], object], model, optimizer, inputs: Iterable[torch.Tensor], device) -> float:
    """Peak memory of a training ``step()`` of ``model`` after a first one (so ``optimizer``'s state exists), in MiB:
    what is resident (CUDA: the allocator's count; CPU: ``model``'s weights and gradients, ``inputs`` and the
    optimizer's state tensors) plus the step's own peak (:func:`peak_memory_mib`). Runs ``step`` three times: the
    second one inside the profiler, so that the measured step's freeing of its gradients (``zero_grad``) is seen
    with its size (the CPU profiler knows the size only of blocks allocated while it runs: without it, the peak
    counted the old gradients and the new ones, and C++ printed "Memory block of unknown size was allocated before
    the profiling started")."""
    step()
    held = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return peak_memory_mib(step, device, resident=resident_now(device, model, [*inputs, *held, *grads]), before=step)


_STEP_MARK = "cnnlab::memory_over_time"


def memory_over_time(step: Callable[[], object], device, *, before: Callable[[], object] | None = None
                     ) -> dict[str, float]:
    """Time-weighted average and peak of the tensor memory allocated while ``step()`` runs once.

    Replays the allocator events the profiler records (one per allocation and free, with its signed size)
    and integrates the live bytes over time: average = sum(live bytes x time they stayed live) / step time.
    CPU: over the step's wall time (:func:`host_weighted_average`). GPU: the caching allocator's events carry
    host timestamps, and the host runs ahead of the GPU (the step's final synchronise would then hold the span
    with little memory live), so the live bytes are weighted by device time instead
    (:func:`device_weighted_average`): each kernel, copy or memset sees what was allocated when it was
    launched. Counts tensors allocated inside the step only (add what was resident before, e.g.
    :func:`resident_bytes`).

    ``before()``, if given, runs inside the profiler just ahead of the step and is not counted: a block it allocates
    and the step frees (last step's gradients, say) is then seen freed, with its size. The CPU profiler records the
    free of a block allocated before it started without a size, that is not at all (C++ prints "Memory block of
    unknown size was allocated before the profiling started"), so such a free would be missing from the curve.

    Returns {"avg_bytes": float, "peak_bytes": int, "events": int, "step_s": float, "weighting": str}:
    ``step_s`` is the span averaged over (s: the device's, from its first activity's start to its last one's
    end, on a GPU); ``weighting`` is "device time" or "host wall time" (on a GPU too when no device activity
    could be matched to its launch); ``events`` is 0 when the profiler recorded no allocator event for the
    device (then the averages mean nothing: say so).
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    dev = torch.device(device)
    cuda = dev.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with quiet_profiler(), profile(activities=activities, profile_memory=True, record_shapes=False,
                                   **ONE_CYCLE) as prof:
        cupti.note_profile(cuda)
        if before is not None:
            with quiet_profiler(also=(UNKNOWN_FREE,)):  # a free of a block from before the profile: not counted
                before_out = before()
                if cuda:
                    torch.cuda.synchronize(dev)
                del before_out
        with record_function(_STEP_MARK):
            out = step()
            if cuda:
                torch.cuda.synchronize(dev)
            del out
    events = raw_events(prof)
    mark = next(e for e in events if e.name() == _STEP_MARK)
    start, end = mark.start_ns(), mark.start_ns() + max(mark.duration_ns(), 1)
    side = _GPU_TYPES if cuda else _CPU_TYPES
    mem = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"
                 and str(e.device_type()) in side and start <= e.start_ns() <= end)
    peak = max(itertools.accumulate(size for _, size in mem), default=0)
    device = device_activities(events, start, end) if cuda else []
    if device:
        avg, span = device_weighted_average(mem, device)
        weighting = "device time"
    else:
        avg, span = host_weighted_average(mem, start, end), end - start
        weighting = "host wall time"
    return {"avg_bytes": avg, "peak_bytes": max(peak, 0), "events": len(mem), "step_s": span / 1e9,
            "weighting": weighting}


def host_weighted_average(mem: list[tuple[int, int]], start_ns: int, end_ns: int) -> float:
    """Average live bytes over ``[start_ns, end_ns]`` of allocator events ``(host ns, signed bytes)`` sorted by
    time: each size counts from its event to the end."""
    live, area, last = 0, 0.0, start_ns
    for t, size in mem:
        area += live * (t - last)
        live += size
        last = t
    area += live * (end_ns - last)
    return area / max(end_ns - start_ns, 1)


def device_weighted_average(mem: list[tuple[int, int]], activities: list[tuple[int, int, int]]) -> tuple[float, int]:
    """Average live bytes over the device's timeline, and that timeline's span in ns.

    ``mem``: allocator events ``(host ns, signed bytes)``; ``activities``: ``(launch host ns, device start ns,
    device end ns)`` of each kernel, copy or memset. The caching allocator's bookkeeping is host-side and
    stream-ordered, so an activity uses what had been allocated (and not freed) when the host launched it; that
    amount counts from the activity's device start until the next activity starts (the last: until the device's
    last end). Device idle gaps between activities count at the amount of the activity before them.
    """
    acts = sorted(activities, key=lambda a: a[1])
    stamps = [t for t, _ in sorted(mem)]
    running = list(itertools.accumulate(size for _, size in sorted(mem)))
    bounds = [a[1] for a in acts[1:]] + [max(a[2] for a in acts)]
    area = 0.0
    for (launch, begin, _), until in zip(acts, bounds):
        seen = bisect.bisect_right(stamps, launch)  # allocator events up to the launch
        area += (running[seen - 1] if seen else 0) * (until - begin)
    span = bounds[-1] - acts[0][1]
    return area / max(span, 1), span


# Host-side CUDA/HIP runtime and driver calls that launch device work (cudaLaunchKernel, cuLaunchKernelEx,
# cudaMemcpyAsync, hipLaunchKernel...): the profiler gives each the correlation id of the work it launched.
_LAUNCH_PREFIXES = ("cu", "hip")


def device_activities(events, start_ns: int, end_ns: int) -> list[tuple[int, int, int]]:
    """``(launch host ns, device start ns, device end ns)`` of each kernel, copy and memset in raw profiler
    ``events`` whose launch fell in ``[start_ns, end_ns]``: device events matched by correlation id to the
    runtime call that launched them (unmatched ones are left out)."""
    launches = {e.correlation_id(): e.start_ns() for e in events
                if str(e.device_type()) in _CPU_TYPES and e.name().startswith(_LAUNCH_PREFIXES)
                and e.correlation_id() and start_ns <= e.start_ns() <= end_ns}
    return [(launches[e.correlation_id()], e.start_ns(), e.start_ns() + e.duration_ns()) for e in events
            if str(e.device_type()) in _GPU_TYPES and e.name() != "[memory]" and e.correlation_id() in launches]
