"""How long a study will take on this device, said before it starts: :func:`expect`.

A study's plan (``plan(cfg)`` in its module) lists its work as :class:`Work` items: what the work is, how many units
of it the grid implies (batches timed, training steps, launches, ...), and one unit of it as a callable. The
estimate times each distinct unit here, warm (one untimed call first, then the median of a few), and multiplies:
so it knows this device's speed and the preset's size, and nothing about the run it predicts. A unit whose cost
does not depend on the device (a fixed wait, say) is given in seconds instead of a callable.

The estimate is for a fresh run: points already stored in a sweep's store are not measured again, so a resumed run
takes less.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from cnnlab.profiling.timing import wall_time

PROBE_CALLS = 3  # timed calls of each unit (after one untimed), fewer when a unit is slow
PROBE_BUDGET_S = 1.0  # a unit whose timed call takes longer than this is not timed again


@dataclass(frozen=True)
class Work:
    """``count`` units of one kind of work in a study, called ``label`` in the breakdown. ``unit`` is one unit:
    a callable, timed here (warm), or its cost in seconds where it does not depend on the device. ``per`` divides
    the unit's time (a unit that does 8 batches at once, timed as one call, with ``per=8`` costs an eighth).
    ``warm=True`` skips the untimed first call where what the unit runs is warm already (a profiled pass of a model
    whose plain pass was probed before it)."""

    label: str
    count: float
    unit: Callable[[], Any] | float
    per: float = 1.0
    warm: bool = False  # the unit's set-up has run already (the same model, unprofiled): no untimed call first


@dataclass(frozen=True)
class Expectation:
    """What :func:`expect` returns: ``seconds`` in all, ``parts`` (label -> seconds, largest first), the time the
    probes took (``probe_s``, s) and the device."""

    seconds: float
    parts: dict[str, float] = field(default_factory=dict)
    probe_s: float = 0.0
    device: str = "cpu"
    units: list[tuple[str, float, float]] = field(default_factory=list)  # (label, count, seconds per unit) per Work

    def text(self) -> str:
        """One line: 'about 2.5 min on cpu (training 1.6 min, ...); from a 1.2 s probe of its work here'."""
        parts = ", ".join(f"{label} {duration(s)}" for label, s in list(self.parts.items())[:4] if s >= 0.5)
        return (f"about {duration(self.seconds)} on {self.device}{f' ({parts})' if parts else ''}; from a "
                f"{self.probe_s:.1f} s probe of its work here (a fresh run: stored points are not measured again)")


def duration(seconds: float) -> str:
    """'45 s', '2.5 min', '1.2 h'."""
    if not math.isfinite(seconds):
        return "unknown"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def unit_seconds(unit: Callable[[], Any], device, *, warm: bool = False) -> float:
    """Seconds of one call of ``unit`` on ``device``, warm: one untimed call (it pays what happens once per process,
    such as the profiler's start-up, which the run then does not pay again), then the median of up to
    :data:`PROBE_CALLS` timed ones (fewer once one takes over :data:`PROBE_BUDGET_S`). Units are small: one
    step, one batch, one launch. ``warm=True``: no untimed call (the unit's set-up has run already)."""
    if not warm:
        unit()
    times = []
    for _ in range(PROBE_CALLS):
        times.append(wall_time(unit, device=device).seconds)
        if times[-1] > PROBE_BUDGET_S:
            break
    return statistics.median(times)


def expect(works: Iterable[Work] | Callable[[], Iterable[Work]], *, device) -> Expectation:
    """The expected duration of ``works`` on ``device`` (or of what ``works()`` returns: a study's plan, which may
    probe as it goes, e.g. :func:`by_batch`; its time counts as probing): every distinct callable unit timed once
    here (:func:`unit_seconds`), times its count. Parts with the same label add up."""
    start = time.perf_counter()
    works = works() if callable(works) else works
    timed: dict[int, float] = {}
    parts: dict[str, float] = {}
    units = []
    for work in works:
        if callable(work.unit):
            key = id(work.unit)
            if key not in timed:
                timed[key] = unit_seconds(work.unit, device, warm=work.warm)
            seconds = timed[key]
        else:
            seconds = float(work.unit)
        parts[work.label] = parts.get(work.label, 0.0) + max(work.count, 0) * seconds / work.per
        units.append((work.label, float(work.count), seconds / work.per))
    parts = dict(sorted(parts.items(), key=lambda kv: -kv[1]))
    return Expectation(seconds=sum(parts.values()), parts=parts, probe_s=time.perf_counter() - start,
                       device=str(device), units=units)


SLOW_CALL_S = 0.2  # a probe call this slow at the smallest size: the largest is not probed, a nearer one is
NEAR = 8  # ... the largest size at most this many times the smallest


def interpolate(sizes: Iterable[float], unit_at: Callable[[float], Callable[[], Any]], device
                ) -> dict[float, float]:
    """Seconds of one call at each size (a batch size, a network's FLOPs), probing as little as possible: the
    smallest size is timed (``unit_at(size)`` gives one call there, :func:`unit_seconds`), then a second size, and
    the others lie on the line through the two (a call's time is a fixed part plus a part per item, to a first
    approximation). The second is the largest size where the first call is fast; where it is already slow (over
    :data:`SLOW_CALL_S`: a CPU), the largest size no more than :data:`NEAR` times the smallest, so that no large,
    slow call is probed, and larger sizes are extrapolated along that line (never below the smallest's time). With
    one size, or no second within reach, times are in proportion to the size."""
    sizes = sorted(set(sizes))
    if not sizes:
        return {}
    low, high = sizes[0], sizes[-1]
    first = unit_seconds(unit_at(low), device)
    if first > SLOW_CALL_S:
        near = [s for s in sizes[1:] if s <= NEAR * low]
        high = near[-1] if near else low
    if high == low:
        return {size: first * size / low for size in sizes}
    slope = max(unit_seconds(unit_at(high), device) - first, 0.0) / (high - low)
    return {size: first + slope * (size - low) for size in sizes}


def by_batch(label: str, calls: dict[int, float], unit_at: Callable[[int], Callable[[], Any]], device) -> list[Work]:
    """Work of ``calls[b]`` calls at each batch size ``b``, each call's time from :func:`interpolate`."""
    seconds = interpolate([b for b, n in calls.items() if n > 0], unit_at, device)
    return [Work(label, calls[b], t) for b, t in seconds.items()]


def forward(net, x) -> Any:
    """``net(x)`` under ``torch.inference_mode()``: one inference pass, the unit most plans time."""
    import torch

    with torch.inference_mode():
        return net(x)


def profiler_session(device) -> Callable[[], Any]:
    """A unit for the fixed cost of one profile (starting and stopping the profiler around a tiny step, and
    reading its events: :func:`cnnlab.profiling.profile_ops`) on ``device``; on a GPU without CUDA activity
    (:func:`under_profiler` says why)."""
    import torch

    from cnnlab.profiling.ops import profile_ops

    x = torch.ones(8, device=device)
    if torch.device(device).type == "cuda":
        return lambda: under_profiler(lambda: x + 1, device)
    return lambda: profile_ops(lambda: x + 1, iterations=1, device=device, warmup=0, profile_memory=True)


def under_profiler(step: Callable[[], Any], device) -> Any:
    """One call of ``step`` under the profiler with its allocator events, the events read: a unit for what profiling
    adds to a step. On a CPU as the studies profile it (:func:`cnnlab.profiling.memory_over_time`). On a GPU the
    profiler records the CPU activity only, the step synchronised: an estimate runs before the study's timings, and
    a CUDA profile may slow the launches timed after it (:mod:`cnnlab.profiling.cupti`), so CUPTI's own cost per
    kernel launch is not in the estimate."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from cnnlab.profiling.memory import memory_over_time
    from cnnlab.profiling.quiet import ONE_CYCLE, quiet_profiler
    from cnnlab.profiling.timing import synchronize

    dev = torch.device(device)
    if dev.type != "cuda":
        return memory_over_time(step, dev)
    with quiet_profiler(), profile(activities=[ProfilerActivity.CPU], profile_memory=True, **ONE_CYCLE) as prof:
        step()
        synchronize(dev)
    return len(prof.events())


__all__ = ["Expectation", "Work", "by_batch", "duration", "expect", "forward", "interpolate", "profiler_session",
           "under_profiler", "unit_seconds"]
