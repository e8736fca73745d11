"""Hardware throughput counters per kernel from NVIDIA Nsight Compute: :func:`hardware_counters`.

Paper 001 (Sec. III-A) profiled with Nsight Compute (``ncu``) and reports DRAM frequency and
throughput, L1/TEX and L2 throughput, SM (compute) throughput, SM active cycles and kernel times.
``ncu`` replays every kernel several times to collect counters, so it must launch the workload
itself, in a new process: the workload is therefore named, not passed as a live object:

- ``"package.module:function"``: an importable function, run as
  ``python -c "import package.module as m; m.function(**kwargs)"`` (``kwargs``: JSON-serialisable);
- an importable module-level function object (its ``__module__``/``__qualname__`` are used);
- a command list, e.g. ``["python", "bench.py", "--batch-size", "64"]``, run as is.

Where ``ncu`` is not on the PATH (or the process cannot use the GPU counters) it says so with a
warning and returns None (or raises :class:`CountersMissing`): the numbers are missing, not zero.
:func:`counters_missing_reason` says beforehand why they would be; :func:`summarise_counters` turns the
per-kernel table into one row per workload.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from typing import Callable, Sequence

import pandas as pd

# The paper's metrics (Nsight Compute metric names, "Speed of Light" section) -> our column names.
PAPER_METRICS: dict[str, str] = {
    "gpu__time_duration.sum": "kernel_time_ns",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "dram__cycles_elapsed.avg.per_second": "dram_frequency_hz",
    "l1tex__throughput.avg.pct_of_peak_sustained_active": "l1tex_throughput_pct",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "l2_throughput_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "sm__cycles_active.avg": "sm_cycles_active",
}


class CountersMissing(RuntimeError):
    """Nsight Compute collected no counters; the message says why."""


def counters_missing_reason(device: str = "cuda", ncu: str = "ncu") -> str | None:
    """Why Nsight Compute counters cannot be collected for ``device`` here (None: they can be tried)."""
    import torch

    if torch.device(device).type != "cuda":
        return f"not a CUDA device ({device}): Nsight Compute reads the counters of NVIDIA GPUs only"
    if shutil.which(ncu) is None:
        return (f"Nsight Compute ('{ncu}') is not on the PATH (install the CUDA toolkit's nsight-compute on a machine "
                "with an NVIDIA GPU)")
    return None


def _target_command(target: str | Callable | Sequence[str], python: str, kwargs: dict | None = None) -> list[str]:
    if isinstance(target, (list, tuple)):
        if not target or not all(isinstance(a, str) for a in target):
            raise ValueError("target as a command must be a non-empty list of strings")
        if kwargs:
            raise ValueError("kwargs go to a 'module:function' target; put a command's arguments in the list")
        return list(target)
    if callable(target):
        module, name = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
        if not module or module == "__main__" or "<" in name:
            raise ValueError(
                "target callable must be a module-level function importable in a new process "
                f"(got {module}:{name}); define it in a module or pass 'module:function' or a command list"
            )
        target = f"{module}:{name}"
    if isinstance(target, str) and target.count(":") == 1 and all(target.split(":")):
        module, name = target.split(":")
        code = (f"import importlib, json; getattr(importlib.import_module({module!r}), {name!r})"
                f"(**json.loads({json.dumps(kwargs or {})!r}))")
        return [python, "-c", code]
    raise ValueError(f"target={target!r}: expected 'module:function', an importable function, or a command list")


def hardware_counters(
    target: str | Callable[[], object] | Sequence[str],
    *,
    metrics: Sequence[str] | None = None,
    kernel_regex: str | None = None,
    launch_skip: int = 0,
    launch_count: int | None = 50,
    kwargs: dict | None = None,
    profile_from_start: bool = True,
    missing: str = "warn",
    ncu: str = "ncu",
    python: str = sys.executable,
    timeout_s: float = 1800,
    clock_control: str = "base",
    cache_control: str = "all",
) -> pd.DataFrame | None:
    """Run ``target`` under Nsight Compute and return one row per profiled kernel launch.

    metrics: Nsight Compute metric names (default: the paper's, ``PAPER_METRICS``).
    kernel_regex / launch_skip / launch_count: which launches to profile (``ncu -k regex:...``,
    ``--launch-skip``, ``--launch-count``); profiling every launch of a long run takes very long.
    kwargs: keyword arguments of a ``"module:function"`` target.
    profile_from_start: False profiles only between the target's ``torch.cuda.profiler.start()`` and
        ``stop()`` (``ncu --profile-from-start off``): the warm-up before them is left out.
    missing: "warn" (a warning and None where nothing was collected) or "raise" (:class:`CountersMissing`).
    clock_control / cache_control: Nsight Compute's ``--clock-control`` ("base": clocks locked to base, its
        default; "none": as the GPU runs them) and ``--cache-control`` ("all": caches flushed before every replay,
        its default; "none"), set explicitly and recorded in every row (``ncu_clock_control``,
        ``ncu_cache_control``): with base clocks and cold caches a kernel takes longer than in a run (0.173 ms
        against the profiler's 0.122 ms on an H100), so ncu's kernel times are compared only with each other.

    Returns a DataFrame with launch_id, kernel_name, block_size, grid_size and one column per
    metric, named as in ``PAPER_METRICS`` (e.g. ``dram_throughput_pct``, ``kernel_time_ns``, in
    base units via ``--print-units base``); unknown metrics keep their ncu name plus ``_<unit>``.
    Returns None, with a warning saying why, where ``ncu`` is not available or collects nothing.
    """
    if missing not in ("warn", "raise"):
        raise ValueError(f"missing={missing!r} is not valid; valid: warn, raise")
    if clock_control not in ("base", "none") or cache_control not in ("all", "none"):
        raise ValueError(f"clock_control={clock_control!r} / cache_control={cache_control!r} are not valid; valid: "
                         "clock_control base | none, cache_control all | none")

    def none(reason: str) -> None:
        if missing == "raise":
            raise CountersMissing(reason)
        warnings.warn(reason, stacklevel=3)

    exe = shutil.which(ncu)
    if exe is None:
        return none(f"Nsight Compute ('{ncu}') is not on the PATH: hardware counters not collected "
                    "(install the CUDA toolkit's nsight-compute on a machine with an NVIDIA GPU)")
    metrics = list(metrics or PAPER_METRICS)
    command = _target_command(target, python, kwargs)
    with tempfile.TemporaryDirectory(prefix="cnnlab-ncu-") as tmp:
        report = os.path.join(tmp, "report")
        cmd = [exe, "--metrics", ",".join(metrics), "--target-processes", "all", "-f", "-o", report,
               "--launch-skip", str(int(launch_skip)), "--clock-control", clock_control,
               "--cache-control", cache_control]
        if launch_count is not None:
            cmd += ["--launch-count", str(int(launch_count))]
        if kernel_regex:
            cmd += ["--kernel-name", f"regex:{kernel_regex}"]
        if not profile_from_start:
            cmd += ["--profile-from-start", "off"]
        run = subprocess.run(cmd + command, capture_output=True, text=True, timeout=timeout_s)
        if run.returncode != 0 or not os.path.exists(report + ".ncu-rep"):
            return none(f"ncu failed (exit {run.returncode}): {(run.stderr or run.stdout)[-2000:]}")
        export = subprocess.run([exe, "--import", report + ".ncu-rep", "--csv", "--page", "details",
                                 "--print-units", "base"], capture_output=True, text=True, timeout=timeout_s)
    if export.returncode != 0:
        return none(f"ncu --import failed: {export.stderr[-2000:]}")
    table = parse_ncu_csv(export.stdout)
    if table.empty:
        return none("ncu profiled no kernel (check kernel_regex / launch_skip, or ERR_NVGPUCTRPERM: "
                    "counters need admin rights on some drivers)")
    return table.assign(ncu_clock_control=clock_control, ncu_cache_control=cache_control)


def profiled_region(step: Callable[[], object], device, warmup: int = 3) -> None:
    """The body of a workload that :func:`hardware_counters` runs with ``profile_from_start=False``: ``warmup`` calls
    of ``step()`` (left out of the counters), then one between ``torch.cuda.profiler.start()`` and ``stop()``, the
    only one Nsight Compute profiles; ``device`` is synchronised before and after it. Returns None (ncu reads the
    counters)."""
    import torch

    from cnnlab.profiling.timing import synchronize

    for _ in range(warmup):
        step()
    synchronize(device)
    torch.cuda.profiler.start()
    step()
    synchronize(device)
    torch.cuda.profiler.stop()


def summarise_counters(table: pd.DataFrame) -> dict:
    """One workload's counters from :func:`hardware_counters`' per-kernel table: ``kernels`` (launches
    profiled), ``kernel_time_ms`` (their summed time), ``sm_cycles_active`` (summed), and every other metric of
    ``PAPER_METRICS`` (throughput percentages, DRAM frequency) as its mean over the kernels weighted by each
    kernel's time, so that a long convolution counts more than a short ReLU (a plain mean where kernel times
    are missing). A metric the table lacks is NaN."""
    time_ns = pd.to_numeric(table.get("kernel_time_ns", pd.Series(dtype=float)), errors="coerce")
    weights = time_ns if len(time_ns) == len(table) and time_ns.notna().all() and time_ns.sum() > 0 \
        else pd.Series(1.0, index=table.index)
    out = {"kernels": len(table), "kernel_time_ms": float(time_ns.sum()) / 1e6 if time_ns.notna().any()
           else float("nan"),
           **{c: table[c].iloc[0] for c in ("ncu_clock_control", "ncu_cache_control") if c in table and len(table)}}
    for column in PAPER_METRICS.values():
        if column == "kernel_time_ns":
            continue
        values = pd.to_numeric(table[column], errors="coerce") if column in table else None
        if values is None or values.isna().all():
            out[column] = float("nan")
        elif column == "sm_cycles_active":
            out[column] = float(values.sum())
        else:
            known = values.notna()
            out[column] = float((values[known] * weights[known]).sum() / weights[known].sum())
    return out


# Scale to the base unit our column names promise, in case ncu auto-scaled a value anyway.
_TO_NS = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}
_TO_HZ = {"cycle/second": 1.0, "cycle/usecond": 1e6, "cycle/nsecond": 1e9, "hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}


def _to_base(column: str, value: float, unit: str) -> float:
    u = unit.lower()
    if column.endswith("_ns") and u in _TO_NS:
        return value * _TO_NS[u]
    if column.endswith("_hz") and u in _TO_HZ:
        return value * _TO_HZ[u]
    return value


def _number(text: str) -> float:
    text = text.strip().replace(",", "")  # ncu prints thousands separators
    try:
        return float(text)
    except ValueError:
        return float("nan")


def parse_ncu_csv(text: str) -> pd.DataFrame:
    """Parse ``ncu --csv --page details`` output (one row per launch x metric) into one row per launch.

    Lines before the CSV header (``==PROF==`` messages, program output) are skipped.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if '"Kernel Name"' in line and '"Metric Name"' in line), None)
    if start is None:
        return pd.DataFrame(columns=["launch_id", "kernel_name", "block_size", "grid_size"])
    rows: dict[str, dict] = {}
    order: list[str] = []
    for rec in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if not rec.get("Metric Name"):
            continue
        launch = rec.get("ID", "")
        if launch not in rows:
            order.append(launch)
            rows[launch] = {"launch_id": int(launch) if launch.isdigit() else launch,
                            "kernel_name": rec.get("Kernel Name", ""),
                            "block_size": rec.get("Block Size", ""), "grid_size": rec.get("Grid Size", "")}
        metric = rec["Metric Name"]
        unit = (rec.get("Metric Unit") or "").strip()
        column = PAPER_METRICS.get(metric) or (metric.replace(".", "_") + (f"_{unit}" if unit else ""))
        rows[launch][column] = _to_base(column, _number(rec.get("Metric Value", "")), unit)
    return pd.DataFrame([rows[k] for k in order])
