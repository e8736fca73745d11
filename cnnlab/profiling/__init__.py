"""cnnlab.profiling: every measurement the studies report, done once and correctly.

- :func:`benchmark` -> :class:`Measurement`: latency (median, p10, p90), throughput, peak memory, GPU
  utilisation (``timing.py``, ``memory.py``, ``gpu_util.py``)
- :func:`profile_ops` -> :class:`OpsProfile`: per-operator and per-kernel tables from torch.profiler
  with transfer and synchronisation totals (``ops.py``)
- :func:`hardware_counters`: Nsight Compute throughput counters per kernel (``counters.py``)
- :func:`cost_model`, :func:`achieved`, :func:`device_peaks`: FLOPs, bytes, roofline (``cost.py``)
- :func:`sweep`: resumable parameter grids with OOM handling (``sweep.py``, ``store.py``), into stores
  keyed by every setting that changes the measurement (:func:`store_path`, :func:`config_store_path`)
- :func:`environment`: what the numbers were measured on (``environment.py``)
"""

from cnnlab.profiling.cost import achieved, cost_model, device_peaks
from cnnlab.profiling.counters import PAPER_METRICS, hardware_counters
from cnnlab.profiling.environment import environment
from cnnlab.profiling.ops import OpsProfile, profile_ops
from cnnlab.profiling.store import config_store_path, store_path
from cnnlab.profiling.sweep import check_point, grid_points, sweep
from cnnlab.profiling.timing import Measurement, benchmark

__all__ = [
    "Measurement", "OpsProfile", "PAPER_METRICS", "achieved", "benchmark", "check_point", "config_store_path",
    "cost_model", "device_peaks", "environment", "grid_points", "hardware_counters", "profile_ops", "store_path",
    "sweep",
]
