"""cnnlab.profiling: every measurement the studies report, done once and correctly.

- :func:`wall_time` -> :class:`WallTime`: wall time of one call on a device, synchronised on CUDA
  (``timing.py``): epochs, evaluations, first calls, data loading
- :func:`benchmark` -> :class:`Measurement`: the timed batches, from which per-batch latency (median, p10, p90) and
  throughput derive, peak memory,
  GPU utilisation, optionally a timed first call and a minimum run time (``timing.py``, ``memory.py``,
  ``gpu_util.py``)
- :func:`memory_over_time`: peak and time-weighted average memory of one step (``memory.py``)
- :func:`profile_ops` -> :class:`OpsProfile`: per-operator and per-kernel tables from torch.profiler
  with transfer and synchronisation totals (``ops.py``)
- :func:`hardware_counters`: Nsight Compute throughput counters per kernel (``counters.py``)
- :func:`cost_model`, :func:`achieved`, :func:`device_peaks`, :func:`roofline_point`: FLOPs, bytes, roofline
  (``cost.py``)
- :func:`sweep`: resumable parameter grids with OOM handling and skipped points (``sweep.py``), into stores
  keyed by every setting that changes the measurement: :func:`store_file` names a store after its settings and
  :func:`code_digest`; the store keeps its environment record and attempts beside it (``store.py``)
- :class:`Spread`: a measured value within the interval its noise allows, what every claim judges (``spread.py``)
- :func:`compare`: variants timed in paired, alternating rounds, each one's ratio to a baseline within the sign
  test's confidence interval of the median, rounds added until decided (``compare.py``: :class:`Paired`,
  :func:`until_decided`, the rule every claim that compares variants is judged by)
- :func:`combine_rounds`, :func:`time_spread`: a grid timed in rounds, one row per point, and the time a claim
  judges: the median of the rounds within their least and most (``rounds.py``)
- :mod:`paired <cnnlab.profiling.paired>`: variants timed side by side in rounds and each one's ratio to a baseline
  round by round, so a drift of the machine's load cancels (``paired.py``)
- :mod:`throughput <cnnlab.profiling.throughput>`: images per second of a benchmark row, within its interval: the one
  definition tables, figures and claims use (``throughput.py``)
- :mod:`accuracy <cnnlab.profiling.accuracy>`: an accuracy within the test set's binomial interval, and the
  difference of two on the same test set (``accuracy.py``)
- :func:`loader_sweep`: epoch times per DataLoader batch size x workers x pinning (``loaders.py``)
- :mod:`derived <cnnlab.profiling.derived>`: metrics derived from measured ones (ratios, speed-ups, changes in
  percent, time per item, scaling efficiency; :func:`derived.against` sets rows beside a baseline)
- :func:`environment`: what the numbers were measured on (``environment.py``)
- :mod:`cupti <cnnlab.profiling.cupti>`: whether this process ran a CUDA profile before a timing (every
  :func:`benchmark` row says so, ``after_cuda_profile``; the studies time before they profile)
- :func:`quiet_profiler`: the C++ profiler's start/stop banners kept out of notebooks, real errors kept (``quiet.py``)
- :func:`save_chrome_trace`, :func:`memory_snapshot`: files to open elsewhere: a profile as Chrome trace JSON
  (Perfetto, TensorBoard), CUDA allocator history for pytorch.org/memory_viz (``traces.py``)
"""

from cnnlab.profiling import cupti, derived, paired
from cnnlab.profiling.compare import Paired, compare, until_decided
from cnnlab.profiling.cost import achieved, cost_model, device_peaks, roofline_point
from cnnlab.profiling.counters import PAPER_METRICS, hardware_counters
from cnnlab.profiling.environment import environment
from cnnlab.profiling.loaders import loader_sweep
from cnnlab.profiling.memory import free_memory, memory_over_time, resident_bytes
from cnnlab.profiling.ops import OpsProfile, profile_ops
from cnnlab.profiling.quiet import quiet_profiler
from cnnlab.profiling.rounds import combine_rounds, time_spread
from cnnlab.profiling.spread import Spread
from cnnlab.profiling.store import code_digest, store_file
from cnnlab.profiling.sweep import check_point, grid_points, sweep
from cnnlab.profiling.timing import Measurement, WallTime, benchmark, synchronize, wall_time
from cnnlab.profiling.traces import memory_snapshot, save_chrome_trace, snapshot_file, trace_file, trace_folder

__all__ = [
    "Measurement", "OpsProfile", "PAPER_METRICS", "Paired", "Spread", "WallTime", "achieved", "benchmark", "check_point",
    "code_digest", "combine_rounds", "compare", "cost_model", "cupti", "derived", "device_peaks", "environment", "free_memory",
    "grid_points", "hardware_counters", "loader_sweep", "memory_over_time", "memory_snapshot", "profile_ops",
    "quiet_profiler", "resident_bytes", "roofline_point", "save_chrome_trace", "snapshot_file", "store_file",
    "sweep", "synchronize", "time_spread", "trace_file", "trace_folder", "until_decided", "wall_time",
]
