"""Wall time of any callable (:func:`wall_time`) and latency, throughput and peak memory of a model's forward
pass (:func:`benchmark`). Every time cnnlab reports is taken here.

Timing is done once, here, following torch.utils.benchmark: warm up first, then time every batch,
and report the median with its spread, labelled with every setting that produced it.

- GPU: CUDA events recorded around each batch on the stream, no host synchronisation inside the
  loop (a sync per batch would add host latency the paper's numbers do not contain); one
  synchronisation after the loop. Peak memory comes from the caching allocator's counters, which
  are host-side bookkeeping and do not perturb the timing, so they are read around the same loop.
  GPU utilisation comes from NVML's samples that fall wholly inside the loop, which therefore runs for at
  least a second (several NVML sample periods; see ``gpu_util.py``).
- CPU: ``time.perf_counter_ns`` around each batch. Peak memory needs the profiler's allocator
  events (see ``memory.py``), which slow the work down, so it is measured in one extra pass after
  the timed loop.
- Inputs that live on the host while the device is CUDA are copied inside the measured region,
  making the host-to-device transfer (paper 001's "memory transfer" time) part of each batch.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from cnnlab.profiling import cupti
from cnnlab.profiling import throughput as _throughput
from cnnlab.profiling import memory as _memory
from cnnlab.profiling.memory import MIB
from cnnlab import config
from cnnlab.profiling.environment import cpu_model
from cnnlab.profiling.gpu_util import UTIL_MAX_REPEATS, UTIL_MIN_RUN_TIME_S, NvmlSamples, UtilisationWindow
from cnnlab.profiling.spread import Spread

_MAX_EXTRA_WARMUP = 5


def synchronize(device: str | torch.device) -> None:
    """Wait for every kernel queued on ``device`` (a CUDA device); nothing to wait for on the CPU."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


@dataclass(frozen=True)
class WallTime:
    """What :func:`wall_time` returns: ``seconds`` the call took (s) and the call's ``result``."""

    seconds: float
    result: Any


def wall_time(fn: Callable[[], Any], *, device: str | torch.device = "cpu") -> WallTime:
    """Host wall-clock time of one call ``fn()`` on ``device``, in seconds, with its result.

    On CUDA the device is synchronised before the clock starts (work queued earlier is not counted) and
    before it stops (the call's own kernels are): the time from the call to its results being ready. Use it
    for whole phases (an epoch, an evaluation, a first call that compiles, a data-loading pass); a model's
    per-batch latency comes from :func:`benchmark`, which keeps the host out of the loop on a GPU.
    """
    dev = torch.device(device)
    synchronize(dev)
    start = time.perf_counter_ns()
    result = fn()
    synchronize(dev)
    return WallTime(seconds=(time.perf_counter_ns() - start) / 1e9, result=result)


@dataclass
class Measurement:
    """One benchmarked configuration. Times in ms (per batch) or s (total), memory in MiB.

    ``latencies_ms`` holds every timed batch; the summary fields are computed from it.
    Missing quantities are NaN with a ``*_missing_reason``; they are never reported as 0.
    """

    latencies_ms: list[float]
    total_time_s: float
    peak_mem_alloc_mib: float
    peak_mem_reserved_mib: float
    peak_mem_increment_mib: float
    peak_mem_model_mib: float
    peak_mem_other_mib: float
    peak_mem_other_missing_reason: str | None
    peak_mem_method: str
    peak_mem_missing_reason: str | None
    peak_mem_reserved_missing_reason: str | None
    gpu_util_pct: float
    gpu_util_pct_p10: float
    gpu_util_pct_p90: float
    gpu_util_samples: int
    gpu_util_missing_reason: str | None
    first_call_ms: float
    device: str
    device_name: str
    dtype: str | None
    autocast: str | None
    memory_format: str | None
    after_cuda_profile: bool
    batch_size: int
    warmup: int
    repeats: int
    input_location: str
    pin_memory: bool
    timer: str
    cpu_threads: int
    labels: dict[str, Any] = field(default_factory=dict)

    # Derived from the timed batches, never stored beside them (torch.utils.benchmark's Measurement does the same):
    @property
    def latency_ms_median(self) -> float:
        return float(np.median(self.latencies_ms))

    @property
    def latency_ms_p10(self) -> float:
        return float(np.percentile(self.latencies_ms, 10))

    @property
    def latency_ms_p90(self) -> float:
        return float(np.percentile(self.latencies_ms, 90))

    @property
    def latency_ms_mean(self) -> float:
        return float(np.mean(self.latencies_ms))

    @property
    def latency_ms_std(self) -> float:
        return float(np.std(self.latencies_ms, ddof=1)) if len(self.latencies_ms) > 1 else math.nan

    @property
    def throughput_items_per_s(self) -> float:
        """Items per second: batch size / the median time per batch, the one definition
        (``cnnlab.profiling.throughput``)."""
        return _throughput.throughput(self.summary()).value

    def summary(self) -> dict[str, float]:
        """The derived time columns: latency_ms_median, _p10, _p90, _mean, _std (ms per batch) and batch_size."""
        return {"latency_ms_median": self.latency_ms_median, "latency_ms_p10": self.latency_ms_p10,
                "latency_ms_p90": self.latency_ms_p90, "latency_ms_mean": self.latency_ms_mean,
                "latency_ms_std": self.latency_ms_std, "batch_size": self.batch_size}

    def as_row(self) -> dict[str, Any]:
        """Flat dict for one DataFrame row: the derived times and throughput, then every field except the raw
        latencies, labels merged in."""
        derived = self.summary()
        del derived["batch_size"]
        row = {**derived, "throughput_items_per_s": self.throughput_items_per_s, **asdict(self)}
        del row["latencies_ms"]
        labels = row.pop("labels")
        row.update(labels)
        return row

    def __str__(self) -> str:
        mem = "n/a" if math.isnan(self.peak_mem_alloc_mib) else f"{self.peak_mem_alloc_mib:.1f} MiB"
        return (
            f"{self.device} bs={self.batch_size} {self.dtype or 'model dtype'}"
            f"{' autocast ' + self.autocast if self.autocast else ''}: "
            f"median {self.latency_ms_median:.3f} ms [p10 {self.latency_ms_p10:.3f}, p90 {self.latency_ms_p90:.3f}], "
            f"{self.throughput_items_per_s:,.0f} items/s, peak mem {mem}"
        )


def median_seconds(fn: Callable[[], Any], *, device: str | torch.device = "cpu", repeats: int = 3,
                   warmup: int = 1) -> float:
    """Median wall time (s) of ``repeats`` calls of ``fn()`` after ``warmup`` untimed ones, each timed apart with
    :func:`wall_time` (synchronised on a GPU): a quick timer for choosing between alternatives (e.g. a layer's
    algorithm), where :func:`benchmark`'s full measurement is not needed."""
    import statistics

    for _ in range(warmup):
        fn()
    return statistics.median(wall_time(fn, device=device).seconds for _ in range(repeats))


def cold_start(model: torch.nn.Module, build: Callable[[torch.nn.Module], Any], first_pass: Callable[[Any], Any],
               x: torch.Tensor, *, warmup: int, repeats: int, rounds: int = 1) -> dict[str, Any]:
    """How long a runnable form of ``model`` takes to build and to do its first work, and how fast it then is, on
    ``x``'s device, ``rounds`` times from a fresh copy of ``model`` in eval mode (``model`` itself is left as it is):

    - ``build_s``: :func:`wall_time` of ``build(copy)`` under ``torch.no_grad()`` (s, the first round), e.g. tracing
      or exporting it; ``build`` returns the runnable form (``runner``);
    - ``first_pass_s``: :func:`wall_time` of ``first_pass(runner)`` (s), its first call included, e.g. a pass over a
      test set: the median over the rounds, ``first_pass_s_min`` / ``_max`` their range, ``first_pass_rounds``;
    - ``latency_ms_median`` / ``_p10`` / ``_p90`` (ms per call on ``x``, warm), ``throughput_items_per_s``,
      ``batch_size``, ``cpu_threads``, ``device_name``: :func:`benchmark` of the last round's runner afterwards.
    Nothing here runs under the profiler (``cnnlab.profiling.ops.cpu_totals`` profiles calls, after the timings).

    Returns ``{"row": <those columns and "device">, "runner": the last round's runner, "first": the first round's
    first_pass result}``."""
    dev = x.device
    firsts = []
    for r in range(max(1, rounds)):
        net = copy.deepcopy(model).to(dev).eval()
        with torch.no_grad():
            built = wall_time(lambda: build(net), device=dev)  # noqa: B023
        first = wall_time(lambda: first_pass(built.result), device=dev)  # noqa: B023
        firsts.append(first.seconds)
        if r == 0:
            build_s, first_result = built.seconds, first.result
    runner = built.result
    m = benchmark(runner, x, device=dev, warmup=warmup, repeats=repeats, measure_memory=False)
    passes = Spread.of_samples(firsts)
    row = {"device": str(dev), "device_name": m.device_name, "build_s": build_s, "first_pass_s": passes.value,
           "first_pass_s_min": passes.low, "first_pass_s_max": passes.high, "first_pass_rounds": len(firsts),
           **{k: getattr(m, k) for k in ("latency_ms_median", "latency_ms_p10", "latency_ms_p90",
                                         "throughput_items_per_s", "batch_size", "cpu_threads")}}
    return {"row": row, "runner": runner, "first": first_result}


def _as_tuple(inputs) -> tuple:
    if isinstance(inputs, torch.Tensor):
        return (inputs,)
    if isinstance(inputs, (tuple, list)) and inputs and all(isinstance(t, torch.Tensor) for t in inputs):
        return tuple(inputs)
    raise ValueError(f"inputs must be a tensor or a non-empty tuple/list of tensors, got {type(inputs).__name__}")


def _prepare_inputs(inputs: tuple, device, dtype, memory_format, pin_memory) -> tuple[tuple, str]:
    """Cast inputs (floating ones only: token ids stay integers) and place them. Returns (inputs, location).

    On a CUDA device, host inputs stay on the host ("host": copied inside the timed region);
    inputs already on the GPU are used in place ("device").
    """
    out = []
    location = "device"
    for t in inputs:
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
        if memory_format is not None and t.dim() == 4:
            t = t.contiguous(memory_format=memory_format)
        if device.type == "cuda" and t.device.type == "cpu":
            location = "host"
            if pin_memory:
                t = t.pin_memory()
        elif t.device != device:
            t = t.to(device)
        out.append(t)
    if device.type == "cpu":
        location = "device"
    return tuple(out), location


def benchmark(
    model: torch.nn.Module | Callable[..., Any],
    inputs: torch.Tensor | Sequence[torch.Tensor],
    *,
    device: str | torch.device,
    dtype: str | torch.dtype | None = None,
    autocast: str | torch.dtype | bool | None = None,
    memory_format: str | torch.memory_format | None = None,
    warmup: int = 10,
    repeats: int = 50,
    batch_size: int | None = None,
    pin_memory: bool = False,
    measure_memory: bool = True,
    measure_gpu_util: bool = False,
    inference_mode: bool = True,
    first_call: bool = False,
    min_run_time_s: float | None = None,
    max_repeats: int = 200,
    util_min_run_time_s: float = UTIL_MIN_RUN_TIME_S,
    gpu_util_source=None,
    labels: dict[str, Any] | None = None,
) -> Measurement:
    """Time ``model(*inputs)`` ``repeats`` times after ``warmup`` untimed calls; return a :class:`Measurement`.

    model: an ``nn.Module`` (moved/converted *in place*, like ``Module.to``, and put in eval mode)
        or any callable (called as is; only the inputs are converted).
    inputs: a tensor or tuple of tensors, passed positionally. On ``device="cuda"`` a host tensor is
        copied to the GPU inside every timed batch (``pin_memory=True`` pins it first and copies
        asynchronously); a GPU tensor is used in place.
    device: "cpu", "cuda" or "cuda:N". dtype: cast model and floating inputs ("float32", "float16",
        "bfloat16"; None keeps them). autocast: None/False, True (=float16), "float16", "bfloat16".
    memory_format: None, "contiguous_format" or "channels_last" (model and 4-D inputs).
    batch_size: items per call, for throughput; default: first input's dim 0.

    Returned units: ``latency_ms_*`` per batch in ms; ``total_time_s`` for the ``repeats`` timed
    batches; ``throughput_items_per_s = batch_size * repeats / total_time_s``;
    ``peak_mem_alloc_mib`` = memory already resident that the method can see plus the peak growth
    ``peak_mem_increment_mib`` inside one batch (GPU: all CUDA tensors of the process, from the
    allocator's counters over the timed loop; CPU: the model's parameters and buffers plus the
    inputs, plus the allocator-event peak of one extra pass, see ``memory.py``);
    ``peak_mem_reserved_mib`` = the CUDA caching allocator's reserved peak (NaN on CPU: no pool);
    ``peak_mem_model_mib`` = the model's own bytes at the peak: its weights and buffers, the inputs and the batch's
    increment (on a CPU the same as ``peak_mem_alloc_mib``), and ``peak_mem_other_mib`` what else was resident on
    the GPU (the cuBLAS and cuDNN workspaces, earlier tensors: :func:`cnnlab.profiling.memory.other_resident`; NaN
    with ``peak_mem_other_missing_reason`` on a CPU, or for a callable that is not an ``nn.Module``): a memory claim
    judges the model's own bytes;
    ``gpu_util_pct`` = mean NVML utilisation over the timed loop, from the ``gpu_util_samples`` samples whose
    whole period fell inside it (NaN with ``gpu_util_missing_reason`` on CPU, or when too few fell inside), and
    ``gpu_util_pct_p10``/``_p90`` the samples' spread (widened to include the mean) that claims compare it with;
    only with ``measure_gpu_util=True`` (it makes the loop last at least ``util_min_run_time_s``: ask for it where a
    claim or a figure uses it, and nowhere else).
    On CPU, ``measure_memory`` costs two extra calls of the model after the timed loop (one uncounted, see
    :func:`cnnlab.profiling.memory.cpu_peak_bytes`).

    util_min_run_time_s: where utilisation is measured, the timed loop goes on past ``repeats`` calls until it
        has lasted this long and ``gpu_util.MIN_SAMPLES + 1`` NVML sample periods (at most
        ``gpu_util.UTIL_MAX_REPEATS`` calls); ``repeats`` in the result is the number of calls timed.
    gpu_util_source: where utilisation samples come from (``gpu_util.SampleSource``): default NVML's for a CUDA
        device, none on a CPU; tests pass a fake one.

    first_call: time the very first call on its own (:func:`wall_time`, ``first_call_ms``): where
        compilation, autotuning or a per-layer algorithm choice happens; never part of the statistics.
        Otherwise ``first_call_ms`` is NaN.
    min_run_time_s: size the loops by the time of one call (the first call's, or, after a first call that
        does extra work, one more probe call's): at least ``repeats`` timed calls and as many as fill
        ``min_run_time_s`` seconds (at most ``max_repeats``), after at least ``warmup`` untimed ones and as
        many as fit in ``min_run_time_s`` (at most 5 more: a freshly built model runs its first calls slower
        while the allocator's heap grows). ``torch.utils.benchmark``'s ``adaptive_autorange`` sizes blocks
        of calls by their spread; here every call is timed alone (p10/p90 per batch), so only its idea, a
        minimum run time, is taken.

    ``after_cuda_profile``: whether a CUDA profile ran in this process before this timing (one may leave CUPTI
    attached, which slows kernel launches: :mod:`cnnlab.profiling.cupti`); the studies time before they profile.
    """
    after_profile = cupti.cuda_profiles() > 0
    dev = config.resolve_device(device)
    dtype_name = config.dtype_name(dtype)
    autocast_dtype = config.autocast_name(autocast)
    fmt_name = config.memory_format_name(memory_format)
    warmup = config.positive_int(warmup, parameter="warmup", minimum=0)
    repeats = config.positive_int(repeats, parameter="repeats", minimum=1)
    torch_dtype = config.to_dtype(dtype_name)
    torch_fmt = None if fmt_name is None else config.MEMORY_FORMATS[fmt_name]

    inputs_t = _as_tuple(inputs)
    if batch_size is None:
        batch_size = int(inputs_t[0].shape[0]) if inputs_t[0].dim() > 0 else 1
    batch_size = config.positive_int(batch_size, parameter="batch_size")
    if isinstance(model, torch.nn.Module):
        model.to(device=dev, dtype=torch_dtype) if torch_dtype is not None else model.to(dev)
        if torch_fmt is not None:
            model.to(memory_format=torch_fmt)
        model.eval()
    elif not callable(model):
        raise ValueError(f"model must be an nn.Module or a callable, got {type(model).__name__}")
    dev_inputs, location = _prepare_inputs(inputs_t, dev, torch_dtype, torch_fmt, pin_memory)
    non_blocking = bool(pin_memory)

    def call():
        args = dev_inputs
        if location == "host":  # pageable memory makes this copy block the host: that cost is real
            args = tuple(t.to(dev, non_blocking=non_blocking) for t in dev_inputs)
        return model(*args)

    amp = (torch.autocast(dev.type, dtype=config.DTYPES[autocast_dtype]) if autocast_dtype
           else contextlib.nullcontext())
    grad = torch.inference_mode() if inference_mode else contextlib.nullcontext()

    def step():
        with grad, amp:
            return call()

    first_ms = math.nan
    if first_call or min_run_time_s is not None:
        probe = wall_time(step, device=dev).seconds
        first_ms = probe * 1e3 if first_call else math.nan
        if min_run_time_s is not None:
            if first_call:  # the first call did extra work: size the loops by an ordinary one
                probe = wall_time(step, device=dev).seconds
            probe = max(probe, 1e-6)
            max_repeats = config.positive_int(max_repeats, parameter="max_repeats")
            repeats = max(repeats, min(max_repeats, math.ceil(min_run_time_s / probe)))
            warmup = max(warmup, min(_MAX_EXTRA_WARMUP, math.floor(min_run_time_s / probe)))

    window = _utilisation_window(dev, measure_gpu_util, gpu_util_source, util_min_run_time_s)
    if dev.type == "cuda":
        timed = _time_cuda(step, dev, warmup, repeats, window)
    else:
        timed = _time_cpu(step, warmup, repeats, window)
        if measure_memory:
            increment = _memory.cpu_peak_bytes(step)
            resident = _memory.resident_bytes(model, dev_inputs)
            timed.update(
                peak_mem_increment_mib=increment / MIB,
                peak_mem_alloc_mib=(resident + increment) / MIB,
                peak_mem_method=_memory.CPU_METHOD,
                peak_mem_missing_reason=None,
            )
    if dev.type == "cuda" and isinstance(model, torch.nn.Module):  # the model's own bytes, and the rest beside them
        own = _memory.resident_bytes(model, dev_inputs, dev) / MIB
        timed.update(peak_mem_model_mib=own + timed["peak_mem_increment_mib"],
                     peak_mem_other_mib=timed.pop("resident_mib") - own, peak_mem_other_missing_reason=None)
    else:
        timed.pop("resident_mib", None)
        timed.update(peak_mem_model_mib=timed["peak_mem_alloc_mib"], peak_mem_other_mib=math.nan,
                     peak_mem_other_missing_reason=_memory.other_resident(dev, model, ())[1] if dev.type == "cuda"
                     else _memory.CPU_OTHER_REASON)
    if not measure_memory:
        timed.update(peak_mem_alloc_mib=math.nan, peak_mem_increment_mib=math.nan,
                     peak_mem_reserved_mib=math.nan, peak_mem_method="", peak_mem_model_mib=math.nan,
                     peak_mem_other_mib=math.nan, peak_mem_missing_reason="measure_memory=False",
                     peak_mem_reserved_missing_reason="measure_memory=False",
                     peak_mem_other_missing_reason="measure_memory=False")

    lat = np.asarray(timed.pop("latencies_ms"), dtype=float)
    total_s = timed.pop("total_time_s")
    repeats = int(lat.size)  # more than asked for where the utilisation window needed a longer loop
    util = window.result
    timed.update(gpu_util_pct=util.gpu_util_pct, gpu_util_pct_p10=util.p10, gpu_util_pct_p90=util.p90,
                 gpu_util_samples=util.samples, gpu_util_missing_reason=util.missing_reason)
    return Measurement(
        latencies_ms=lat.tolist(),
        total_time_s=total_s,
        device=str(dev),
        device_name=torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_model(),
        dtype=dtype_name,
        autocast=autocast_dtype,
        memory_format=fmt_name,
        batch_size=batch_size,
        warmup=warmup,
        repeats=repeats,
        input_location=location,
        pin_memory=bool(pin_memory and location == "host"),
        first_call_ms=first_ms,
        cpu_threads=torch.get_num_threads(),
        after_cuda_profile=after_profile,
        labels=dict(labels or {}),
        **timed,
    )


def _utilisation_window(dev: torch.device, measure: bool, source, min_run_time_s: float) -> UtilisationWindow:
    """The window that samples utilisation over the timed loop: NVML's samples on a CUDA device, ``source``
    where given, none on a CPU (NaN with the reason)."""
    if source is None and dev.type != "cuda":
        return UtilisationWindow(None, missing_reason="CPU run: no GPU to sample")
    if not measure:
        return UtilisationWindow(None, missing_reason="not measured: no claim or figure of this study uses it "
                                                       "(measure_gpu_util=False)")
    if source is None:
        source = NvmlSamples(dev.index if dev.index is not None else torch.cuda.current_device())
    return UtilisationWindow(source, min_run_time_s=min_run_time_s)


def _more(calls: int, repeats: int, elapsed_s: float, window: UtilisationWindow) -> bool:
    """Time another call: fewer than ``repeats`` so far, or the utilisation window needs a longer loop."""
    return calls < repeats or (elapsed_s < window.min_run_time_s and calls < UTIL_MAX_REPEATS)


def _time_cpu(step, warmup: int, repeats: int, window: UtilisationWindow) -> dict[str, Any]:
    for _ in range(warmup):
        step()
    clock = time.perf_counter_ns
    ns = []  # appending happens between the timed calls, outside each one's clock readings
    with window:
        start = clock()
        while _more(len(ns), repeats, (clock() - start) / 1e9, window):
            t0 = clock()
            step()
            ns.append(clock() - t0)
        total_ns = clock() - start
    return {
        "latencies_ms": [v / 1e6 for v in ns],
        "total_time_s": total_ns / 1e9,
        "timer": "perf_counter_ns",
        "peak_mem_alloc_mib": math.nan,
        "peak_mem_increment_mib": math.nan,
        "peak_mem_reserved_mib": math.nan,
        "peak_mem_method": "",
        "peak_mem_missing_reason": "not measured",
        "peak_mem_reserved_missing_reason": "CPU tensors have no caching allocator pool to reserve from",
    }


def _time_cuda(step, dev: torch.device, warmup: int, repeats: int, window: UtilisationWindow) -> dict[str, Any]:
    with torch.cuda.device(dev):
        for _ in range(warmup):
            step()
        torch.cuda.synchronize(dev)
        base = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        starts, ends = [], []
        first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with window:  # opens after the warm-up's synchronise: no sample that overlaps the warm-up is kept
            first.record()
            # The host clock decides when the loop has lasted long enough: the host runs ahead of the GPU by at
            # most its launch queue, so the GPU's part of the loop lasts at least as long.
            clock_start = time.perf_counter()
            while _more(len(starts), repeats, time.perf_counter() - clock_start, window):
                starts.append(torch.cuda.Event(enable_timing=True))
                ends.append(torch.cuda.Event(enable_timing=True))
                starts[-1].record()
                step()
                ends[-1].record()
            last.record()
            last.synchronize()  # the only host wait: after the whole loop
        peak = torch.cuda.max_memory_allocated(dev)
        reserved = torch.cuda.max_memory_reserved(dev)
    return {
        "latencies_ms": [s.elapsed_time(e) for s, e in zip(starts, ends)],
        "total_time_s": first.elapsed_time(last) / 1e3,
        "timer": "cuda_events",
        "peak_mem_alloc_mib": peak / MIB,
        "peak_mem_increment_mib": max(peak - base, 0) / MIB,
        "resident_mib": base / MIB,  # before the loop: the model, its inputs, library workspaces, earlier tensors
        "peak_mem_reserved_mib": reserved / MIB,
        "peak_mem_method": _memory.CUDA_METHOD,
        "peak_mem_missing_reason": None,
        "peak_mem_reserved_missing_reason": None,
    }

