"""Profiles a reader can open in other tools: profiler timelines and CUDA memory snapshots.

- :func:`save_chrome_trace`: a finished ``torch.profiler.profile`` as a Chrome trace (JSON with ``traceEvents``).
  Open it in Perfetto (https://ui.perfetto.dev, "Open trace file"), in Chrome's ``chrome://tracing``, or in
  TensorBoard's PyTorch profiler plugin (``tensorboard --logdir <folder>``: it reads files named
  ``*.pt.trace.json``, hence :func:`trace_file`'s names). ``profile_ops(..., trace_path=...)`` writes one.
- :func:`memory_snapshot`: every allocation and free of the CUDA caching allocator while a function runs, with
  the Python stack of each, as the pickle that https://pytorch.org/memory_viz draws (drag the file onto the page).
  The CPU has no such recorder: the result says so instead of writing an empty file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from cnnlab import config

TRACE_SUFFIX = ".pt.trace.json"
SNAPSHOT_SUFFIX = ".memory.pickle"
# Entries the allocator keeps (a ring buffer): enough for one training step of the studies' models (each entry is
# an allocation or free with its stack); PyTorch's default is unlimited.
MAX_ENTRIES = 200_000


def trace_folder(store_dir: str | Path | None, save: bool) -> Path | None:
    """Where a study writes its traces and snapshots: ``<store_dir>/traces`` when ``save`` (a study's
    ``save_traces`` parameter) and the study stores its results somewhere, else None (nothing written)."""
    return Path(store_dir) / "traces" if save and store_dir is not None else None


def trace_file(folder: str | Path, name: str) -> Path:
    """``<folder>/<name>.pt.trace.json``: the name TensorBoard's profiler plugin looks for."""
    return Path(folder) / f"{name}{TRACE_SUFFIX}"


def snapshot_file(folder: str | Path, name: str) -> Path:
    """``<folder>/<name>.memory.pickle``."""
    return Path(folder) / f"{name}{SNAPSHOT_SUFFIX}"


def save_chrome_trace(prof, path: str | Path) -> Path:
    """Write the finished profile ``prof`` (a ``torch.profiler.profile`` after its ``with`` block) to ``path`` as a
    Chrome trace, gzip-compressed when ``path`` ends in ``.gz`` (Perfetto opens both); returns ``path``. The
    folder is created if needed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    return path


def memory_snapshot(fn: Callable[[], Any], path: str | Path, device: str | torch.device = "auto", *,
                    max_entries: int = MAX_ENTRIES) -> dict[str, str | None]:
    """Record the CUDA caching allocator's history while ``fn()`` runs once on ``device`` and write it to ``path``
    (PyTorch's memory-visualizer pickle, see the module docstring).

    Returns ``{"memory_snapshot_path": str, "memory_snapshot_missing_reason": None}``, or on a CPU, where ``fn`` is
    not called, ``{"memory_snapshot_path": None, "memory_snapshot_missing_reason": <why>}``: columns for a study's
    row. Recording is switched off again even when ``fn`` raises (the exception propagates)."""
    dev = config.resolve_device(device)
    max_entries = config.positive_int(max_entries, parameter="max_entries")
    if dev.type != "cuda":
        return {"memory_snapshot_path": None,
                "memory_snapshot_missing_reason": f"{dev.type} run: PyTorch's memory snapshots record the CUDA "
                                                  "caching allocator only"}
    return _record_cuda(fn, Path(path), dev, max_entries)


def _record_cuda(fn, path: Path, dev: torch.device, max_entries: int) -> dict[str, str | None]:
    memory = torch.cuda.memory
    if not hasattr(memory, "_record_memory_history") or not hasattr(memory, "_dump_snapshot"):
        return {"memory_snapshot_path": None,
                "memory_snapshot_missing_reason": f"torch {torch.__version__} has no "
                                                  "torch.cuda.memory._record_memory_history/_dump_snapshot"}
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.cuda.device(dev):
        torch.cuda.synchronize(dev)
        memory._record_memory_history(max_entries=max_entries)  # private API (torch >= 2.1), default context
        try:
            fn()
            torch.cuda.synchronize(dev)  # every freed block of fn is in the history
            memory._dump_snapshot(str(path))
        finally:
            memory._record_memory_history(enabled=None)
    return {"memory_snapshot_path": str(path), "memory_snapshot_missing_reason": None}


__all__ = ["MAX_ENTRIES", "SNAPSHOT_SUFFIX", "TRACE_SUFFIX", "memory_snapshot", "save_chrome_trace", "snapshot_file",
           "trace_file"]
