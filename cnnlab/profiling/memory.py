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

from typing import Callable, Iterable

import torch

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
    error says what broke, and ``tests/test_profiling.py`` fails first.
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
        kind = str(event.device_type())
        side = "cpu_bytes" if kind in _CPU_TYPES else "device_bytes" if kind in _GPU_TYPES else None
        if side is None:
            continue
        live[side] += event.nbytes()
        peaks[side] = max(peaks[side], live[side])
    return peaks


def cpu_peak_bytes(step: Callable[[], object]) -> int:
    """Peak live CPU tensor bytes allocated while ``step()`` runs once (see module docstring).

    The output of ``step`` is released before returning, but it counts towards the peak because it
    was live at the end of the step.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False) as prof:
        out = step()
        del out
    return peak_from_memory_events(raw_events(prof))["cpu_bytes"]


def free_memory() -> None:
    """Free what the previous measurement left (Python garbage, the CUDA caching allocator's unused blocks), so
    that the next point's peak-memory counters see only its own tensors."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def resident_bytes(model, inputs: Iterable[torch.Tensor]) -> int:
    """Bytes of the model's parameters and buffers plus the input tensors (storage already allocated)."""
    seen: set[int] = set()
    total = 0
    tensors = list(inputs)
    if isinstance(model, torch.nn.Module):
        tensors += list(model.parameters()) + list(model.buffers())
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
            continue
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in seen or key == 0:  # tied weights and views share one storage
            continue
        seen.add(key)
        total += storage.nbytes()
    return total


_STEP_MARK = "cnnlab::memory_over_time"


def memory_over_time(step: Callable[[], object], device) -> dict[str, float]:
    """Time-weighted average and peak of the tensor memory allocated while ``step()`` runs once.

    Replays the allocator events the profiler records (one per allocation and free, with its signed size)
    and integrates the live bytes over the step's wall time: average = sum(live bytes x time they stayed
    live) / step time. On a GPU the events are the caching allocator's (host-side timestamps; the step is
    synchronised before it ends, so its span covers the device work). Counts tensors allocated inside the
    step only (add what was resident before, e.g. :func:`resident_bytes`).

    Returns {"avg_bytes": float, "peak_bytes": int, "events": int, "step_s": float}; ``events`` is 0 when the
    profiler recorded no allocator event for the device (then the averages mean nothing: say so).
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    dev = torch.device(device)
    cuda = dev.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, profile_memory=True, record_shapes=False) as prof:
        with record_function(_STEP_MARK):
            out = step()
            if cuda:
                torch.cuda.synchronize(dev)
            del out
    events = raw_events(prof)
    mark = next(e for e in events if e.name() == _STEP_MARK)
    start, end = mark.start_ns(), mark.start_ns() + max(mark.duration_ns(), 1)
    side = _GPU_TYPES if cuda else _CPU_TYPES
    mem = sorted((e for e in events if e.name() == "[memory]" and str(e.device_type()) in side
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
