"""GPU utilisation sampled by NVML in a background thread while a timed region runs.

Paper 001 (Sec. III-C) reports "GPU utilisation": the share of time the GPU was busy. NVML's
``nvmlDeviceGetUtilizationRates().gpu`` is exactly the driver's definition of that: the percentage of
its last sample period (1/6 s to 1 s depending on the GPU) during which one or more kernels ran. It is
not SM occupancy; Nsight Compute's ``sm__throughput`` (see ``counters.py``) is the finer measure.

Without a GPU or NVML the result is NaN with a reason, never 0 (0 would claim an idle GPU).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass


@dataclass
class Utilisation:
    """Mean GPU utilisation in percent over ``samples`` NVML readings, or NaN with ``missing_reason``."""

    gpu_util_pct: float
    samples: int
    missing_reason: str | None


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


def _shutdown() -> None:
    """Balance an nvmlInit (NVML counts initialisations)."""
    try:
        import pynvml

        pynvml.nvmlShutdown()
    except Exception:  # already shut down or never loaded: nothing to release
        pass


class UtilisationSampler:
    """Context manager: samples NVML GPU utilisation every ``interval_s`` in a daemon thread.

    ``result`` (a :class:`Utilisation`) is set on exit. ``device_index`` None means no GPU is
    measured (CPU run): the result is NaN with the reason given in ``missing_reason``.
    """

    def __init__(self, device_index: int | None, *, interval_s: float = 0.02, missing_reason: str | None = None):
        self.device_index = device_index
        self.interval_s = interval_s
        self.result = Utilisation(math.nan, 0, missing_reason or "no GPU measured")
        self._samples: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle = None
        self._error: str | None = None

    def __enter__(self) -> "UtilisationSampler":
        if self.device_index is None:
            return self
        try:
            import pynvml
        except ImportError:
            self.result = Utilisation(math.nan, 0, "pynvml (nvidia-ml-py) is not installed")
            return self
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:  # no driver / library on this machine
            self.result = Utilisation(math.nan, 0, f"NVML unavailable: {exc}")
            return self
        try:
            self._handle = _nvml_handle(self.device_index)
            pynvml.nvmlDeviceGetUtilizationRates(self._handle)  # fails here, not in the thread, if unsupported
        except pynvml.NVMLError as exc:  # not supported (MIG), no permission, device not found
            self.result = Utilisation(math.nan, 0, f"NVML unavailable: {exc}")
            self._handle = None
            _shutdown()
            return self
        self._thread = threading.Thread(target=self._run, name="cnnlab-nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        import pynvml

        while not self._stop.is_set():
            try:
                self._samples.append(pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
            except pynvml.NVMLError as exc:
                self._error = str(exc)
                return
            self._stop.wait(self.interval_s)

    def __exit__(self, *exc_info) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        _shutdown()
        if self._samples:
            self.result = Utilisation(sum(self._samples) / len(self._samples), len(self._samples), None)
        else:
            reason = f"NVML error: {self._error}" if self._error else "timed region ended before the first NVML sample"
            self.result = Utilisation(math.nan, 0, reason)
