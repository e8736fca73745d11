"""Helpers every study shares: parameter checks that name the bad parameter, CPU thread control, a sweep
that returns only the current grid's rows, store names keyed by settings, and two figure touches."""

from __future__ import annotations

import ast
import gc
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from cnnlab import models
from cnnlab.profiling import grid_points, sweep
from cnnlab import config
from cnnlab.profiling.store import key_value, store_path  # noqa: F401  (re-exported: the studies import it here)


def as_list(value) -> list:
    """A parameter as a list: a lone value (``models="resnet20"``) becomes a one-element list, and a string
    that spells a list (``papermill -p batch_sizes "[1, 4]"`` passes text) is read as that list."""
    if isinstance(value, str) and value.strip().startswith(("[", "(")):
        try:
            value = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            pass  # not a list after all: reported as a bad value by the caller
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def image_models() -> list[str]:
    """Registry models that take images (the study feeds image-shaped batches)."""
    return [n for n in models.names() if models.spec(n).input_kind == "image"]


def check_models(value, parameter: str = "models") -> list[str]:
    """``value`` as a non-empty list of image model names; ValueError naming ``parameter`` otherwise."""
    names = as_list(value)
    valid = image_models()
    if not names:
        raise ValueError(f"{parameter} is empty; valid models: {', '.join(valid)}")
    for name in names:
        if name not in valid:
            raise ValueError(f"{parameter}: {name!r} is not a known image model; valid models: {', '.join(valid)}")
    return names


def check_batch_sizes(value, parameter: str = "batch_sizes") -> list[int]:
    """``value`` as a non-empty, sorted, duplicate-free list of ints >= 1; ValueError otherwise."""
    sizes = as_list(value)
    if not sizes:
        raise ValueError(f"{parameter} is empty; valid: a list of integers >= 1, e.g. [1, 2, 4, 8]")
    for v in sizes:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{parameter}: {v!r} is not a valid batch size; valid: integers >= 1, e.g. [1, 2, 4, 8]")
    return sorted({int(v) for v in sizes})


def check_threads(value, parameter: str = "threads") -> int | None:
    """``value`` as a number of intra-op CPU threads (int >= 1), or None for torch's default.

    Why a parameter: on a shared or small CPU, more OpenMP threads than free cores spin-wait on each other
    and inflate small-batch times by 10-100x (seen on a loaded 2-core machine: LeNet-5 at batch 1 took
    50 ms instead of 0.2 ms), so the quick preset, run two notebooks at a time in CI, uses one thread.
    Every row records the thread count it ran with (``cpu_threads``).
    """
    if value is None:
        return None
    return config.positive_int(value, parameter=parameter)


def set_threads(threads: int | None) -> int:
    """Apply :func:`check_threads`'s value with ``torch.set_num_threads`` (None: leave it); return the count."""
    threads = check_threads(threads)
    if threads is not None:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def free_memory() -> None:
    """Free the previous point's tensors, so that a GPU's peak-memory counters see only the current one."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_sweep(fn, grid, store, desc: str, progress: bool) -> pd.DataFrame:
    """Deprecated shim: :func:`cnnlab.profiling.sweep` now returns only the grid's rows, in grid order."""
    return sweep(fn, grid, store, desc=desc, progress=progress)


# ------------------------------------------------------------------------------------------------ figures

def missing_panel(ax, text: str) -> None:
    """Say in the panel why it is empty (the x axis stays: it may be shared with a panel above)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes, fontsize=9, color="0.3")
    ax.set_yticks([])


def plain_log_ticks(ax, axis: str = "y") -> None:
    """Tick labels of a log axis as plain numbers (0.5, 2, 40) instead of powers of ten (4 x 10^1)."""
    import matplotlib.ticker as mticker

    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else ""))
