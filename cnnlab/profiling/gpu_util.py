"""GPU utilisation over a timed region, from NVML's own time-stamped samples.

Paper 001 (Sec. III-C) reports "GPU utilisation": the share of time the GPU was busy. NVML's utilisation is
exactly the driver's definition of that: every sample period (1/6 s to 1 s depending on the GPU) the driver
records the percentage of the period during which one or more kernels ran. It is not SM occupancy; Nsight
Compute's ``sm__throughput`` (see ``counters.py``) is the finer measure.

A sample averages over its whole period, so a reading taken during a short loop also covers the warm-up before
it or the idle time after it (a large batch's timed loop can last 0.1 s). Hence, in :class:`UtilisationWindow`:

- the samples are read after the region from the driver's buffer (``nvmlDeviceGetSamples``), each with its
  timestamp, and only those whose whole period (from the previous sample to its own timestamp) lies inside the
  region are kept (:func:`utilisation_in_window`);
- the region must last long enough to hold several periods: the timed loop runs at least
  :attr:`UtilisationWindow.min_run_time_s` (``UTIL_MIN_RUN_TIME_S`` and ``MIN_SAMPLES + 1`` sample periods);
- with fewer than ``MIN_SAMPLES`` samples inside, the result is NaN with the reason.

Without a GPU or NVML the result is NaN with a reason, never 0 (0 would claim an idle GPU).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Protocol, Sequence

MIN_SAMPLES = 3  # fewer samples inside the region than this: utilisation missing (one sample is one period)
UTIL_MIN_RUN_TIME_S = 1.0  # a timed region whose utilisation is measured lasts at least this long
UTIL_MAX_REPEATS = 100_000  # ... but never more calls than this (LeNet at batch 1 takes ~0.1 ms a call)
_LOOKBACK_S = 2.0  # samples are read from this long before the region: the first inside needs its predecessor


@dataclass
class Utilisation:
    """Mean GPU utilisation in percent over ``samples`` NVML samples inside the region, or NaN with
    ``missing_reason``; ``p10``/``p90``: the samples' 10th and 90th percentiles, widened to include the mean (the
    spread a claim compares it with; NaN where the mean is)."""

    gpu_util_pct: float
    samples: int
    missing_reason: str | None
    p10: float = math.nan
    p90: float = math.nan


@dataclass(frozen=True)
class Sample:
    """One utilisation sample: the end of its period (host clock, ``time.time()`` seconds) and its value (%)."""

    timestamp_s: float
    util_pct: float


class SampleSource(Protocol):
    """Where utilisation samples come from: :class:`NvmlSamples`, or a fake one in tests."""

    def open(self) -> str | None: ...  # None when ready, else why the samples cannot be read

    def read(self, since_s: float) -> list[Sample]: ...  # samples with a timestamp after since_s

    def close(self) -> None: ...


def sampling_period_s(samples: Sequence[Sample]) -> float | None:
    """The source's sample period in seconds (median spacing of ``samples``); None with fewer than two."""
    stamps = sorted(s.timestamp_s for s in samples)
    gaps = [b - a for a, b in zip(stamps, stamps[1:]) if b > a]
    return statistics.median(gaps) if gaps else None


def _percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile with linear interpolation between the closest ranks (numpy's default)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def utilisation_in_window(samples: Sequence[Sample], start_s: float, end_s: float, *,
                          min_samples: int = MIN_SAMPLES) -> Utilisation:
    """Mean utilisation (%) of the samples whose whole period lies in ``[start_s, end_s]`` (host clock, s).

    A sample's period runs from the previous sample's timestamp to its own, so the earliest sample given is only
    the start of the next one's period. Fewer than ``min_samples`` inside: NaN with the reason (how many fell
    inside, how long the region lasted, the sample period).
    """
    ordered = sorted(samples, key=lambda s: s.timestamp_s)
    inside = [s for prev, s in zip(ordered, ordered[1:]) if prev.timestamp_s >= start_s and s.timestamp_s <= end_s]
    if len(inside) >= min_samples:
        values = [float(s.util_pct) for s in inside]
        mean = sum(values) / len(values)
        return Utilisation(mean, len(values), None, min(_percentile(values, 10), mean),
                           max(_percentile(values, 90), mean))
    if ordered and (ordered[-1].timestamp_s < start_s - 60 or ordered[0].timestamp_s > end_s + 60):
        return Utilisation(math.nan, 0, "NVML sample timestamps are more than a minute away from the timed region "
                                        "(the driver's clock does not match time.time())")
    period = sampling_period_s(ordered)
    every = f"the driver samples every {period:.3g} s" if period else "fewer than two samples to tell the period"
    return Utilisation(math.nan, len(inside), f"{len(inside)} NVML sample(s) fell wholly inside the "
                       f"{end_s - start_s:.3g} s timed region, {min_samples} needed ({every})")


class UtilisationWindow:
    """Context manager around a timed region: ``result`` (a :class:`Utilisation`) is set on exit.

    ``source`` None means no GPU is measured (a CPU run): NaN with ``missing_reason``. Otherwise, on entry, the
    source is opened and ``min_run_time_s`` set: how long the caller's region must last (at least
    ``min_run_time_s`` given, and ``MIN_SAMPLES + 1`` sample periods where the period is known; 0 when nothing
    is measured). The region's clock starts at the end of ``__enter__`` and stops at the start of ``__exit__``:
    synchronise the device inside the ``with`` block.
    """

    def __init__(self, source: SampleSource | None, *, min_run_time_s: float = UTIL_MIN_RUN_TIME_S,
                 min_samples: int = MIN_SAMPLES, missing_reason: str | None = None):
        self.source = source
        self.min_samples = min_samples
        self.min_run_time_s = 0.0
        self._wanted_s = min_run_time_s
        self.result = Utilisation(math.nan, 0, missing_reason or "no GPU measured")
        self.start_s = self.end_s = math.nan

    def __enter__(self) -> "UtilisationWindow":
        if self.source is not None:
            reason = self.source.open()
            if reason:
                self.result = Utilisation(math.nan, 0, reason)
                self.source = None
            else:
                period = sampling_period_s(self.source.read(time.time() - _LOOKBACK_S))
                self.min_run_time_s = max(self._wanted_s, (self.min_samples + 1) * period if period else 0.0)
        self.start_s = time.time()
        return self

    def __exit__(self, *exc_info) -> None:
        self.end_s = time.time()
        if self.source is None:
            return
        try:
            if exc_info[0] is None:
                samples = self.source.read(self.start_s - _LOOKBACK_S)
                self.result = utilisation_in_window(samples, self.start_s, self.end_s, min_samples=self.min_samples)
        finally:
            self.source.close()


# ------------------------------------------------------------------------------------------------ NVML

def _nvml_handle(device_index: int):
    """NVML handle for torch's CUDA device ``device_index`` (matched by UUID: CUDA_VISIBLE_DEVICES reorders).

    NVML must already be initialised.
    """
    import pynvml
    import torch

    uuid = getattr(torch.cuda.get_device_properties(device_index), "uuid", None)
    if uuid is not None:
        try:
            return pynvml.nvmlDeviceGetHandleByUUID("GPU-" + str(uuid))
        except pynvml.NVMLError:
            pass  # MIG instances carry a MIG- UUID; fall back to the index
    return pynvml.nvmlDeviceGetHandleByIndex(device_index)


# nvmlValueType_t -> the field of nvmlValue_t that holds the sample
_VALUE_FIELDS = {"DOUBLE": "dVal", "UNSIGNED_INT": "uiVal", "UNSIGNED_LONG": "ulVal",
                 "UNSIGNED_LONG_LONG": "ullVal", "SIGNED_LONG_LONG": "sllVal", "SIGNED_INT": "siVal",
                 "UNSIGNED_SHORT": "usVal"}


class NvmlSamples:
    """The GPU utilisation samples NVML keeps for CUDA device ``device_index`` (``nvmlDeviceGetSamples`` with
    ``NVML_GPU_UTILIZATION_SAMPLES``; timestamps are host microseconds since the epoch)."""

    def __init__(self, device_index: int):
        self.device_index = device_index
        self._handle = None

    def open(self) -> str | None:
        try:
            import pynvml
        except ImportError:
            return "pynvml (nvidia-ml-py) is not installed"
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:  # no driver / library on this machine
            return f"NVML unavailable: {exc}"
        try:
            self._handle = _nvml_handle(self.device_index)
            self.read(time.time() - _LOOKBACK_S)  # fails here, not after the loop, where samples are unsupported
        except pynvml.NVMLError as exc:  # not supported (MIG, some vGPUs), no permission, device not found
            self.close()
            return f"NVML utilisation samples unavailable: {exc}"
        return None

    def read(self, since_s: float) -> list[Sample]:
        import pynvml

        try:
            kind, raw = pynvml.nvmlDeviceGetSamples(self._handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES,
                                                    max(int(since_s * 1e6), 0))
        except pynvml.NVMLError_NotFound:  # no sample newer than since_s
            return []
        field = next((f for name, f in _VALUE_FIELDS.items() if getattr(pynvml, f"NVML_VALUE_TYPE_{name}", None)
                      == kind), "uiVal")
        return [Sample(s.timeStamp / 1e6, float(getattr(s.sampleValue, field))) for s in raw]

    def close(self) -> None:
        """Balance the nvmlInit (NVML counts initialisations)."""
        self._handle = None
        try:
            import pynvml

            pynvml.nvmlShutdown()
        except Exception:  # already shut down or never loaded: nothing to release
            pass
