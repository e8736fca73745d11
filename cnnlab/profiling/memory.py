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
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch

MIB = 1024**2

CPU_METHOD = "torch.profiler allocator events: peak live CPU tensor bytes allocated in one pass"
CUDA_METHOD = "torch.cuda.max_memory_allocated/max_memory_reserved after reset_peak_memory_stats"

_CPU_TYPES = {"DeviceType.CPU", "DeviceType.MKLDNN", "DeviceType.IDEEP"}
_GPU_TYPES = {"DeviceType.CUDA", "DeviceType.HIP"}


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
    return peak_from_memory_events(prof.profiler.kineto_results.events())["cpu_bytes"]


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
