"""Run a parameter grid, one stored row per finished point, resumable: :func:`sweep`.

Sweeps over batch size, model and precision take long and die (OOM, a closed laptop, a preempted
Colab). So every finished point is on disk at once, a restart skips what is stored, an OOM point is
a result (``status="oom"``: the configuration does not fit) rather than a crash, and bad grid
values are rejected before the first point runs. Each sweep has its own store (:mod:`cnnlab.profiling.store`,
which names the file and keeps its side files): the file is keyed by every setting that changes a measurement
(``settings``, plus the source of cnnlab's measured code and the machine measured on), so a run with other settings
or on another machine never returns another run's rows, and a run returns only its own grid's points.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import signal
import tempfile
import threading
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd
import torch

from cnnlab import config
from cnnlab.profiling.memory import free_memory
from cnnlab.profiling.progress import Progress
from cnnlab.profiling.store import Attempts, ResultStore, key_value, store_file, store_point, write_env

RESERVED = ("status", "error", "point_time_s", "finished_utc")
FAILED = ("oom", "error", "killed")
RETRIED = ("error", "killed")  # an OOM is a result (the point does not fit), not retried: FRESH=1 measures anew
KILLED_AFTER = 2  # runs that died while measuring a point before it is stored as "killed"
# Messages of allocation failures that are not torch.OutOfMemoryError (CPU allocator, cuDNN/cuBLAS).
_OOM_TEXT = ("out of memory", "can't allocate memory", "cannot allocate memory", "not enough memory",
             "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED")


def grid_points(grid: Mapping[str, Sequence] | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Points of a grid: a dict of lists (cartesian product, in order) or a list of dicts (as given)."""
    if isinstance(grid, Mapping):
        for name, values in grid.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise ValueError(f"grid[{name!r}] must be a list of values, got {values!r}")
        lists = {name: list(values) for name, values in grid.items()}
        for name, values in lists.items():
            if not values:
                raise ValueError(f"grid[{name!r}] is empty: the grid would have no points")
        return [dict(zip(lists, combo)) for combo in itertools.product(*lists.values())]
    points = list(grid)
    if not all(isinstance(p, Mapping) for p in points):
        raise ValueError("grid must be a dict of lists or a list of dicts")
    return [dict(p) for p in points]


def check_point(point: Mapping[str, Any]) -> None:
    """Built-in checks of well-known parameter names; ValueError naming the parameter and valid values.

    batch_size: int >= 1; dtype: a known dtype; autocast, memory_format, device: as
    :func:`cnnlab.profiling.benchmark` accepts them. Names of models are not checked here (profiling knows no
    models): a study's configure checks them, another caller passes ``validate=``.
    """
    for name in RESERVED:
        if name in point:
            raise ValueError(f"grid parameter {name!r} clashes with a column the sweep writes; rename it")
    if "batch_size" in point:
        config.positive_int(point["batch_size"], parameter="batch_size")
    if "dtype" in point:
        config.dtype_name(point["dtype"])
    if "autocast" in point:
        config.autocast_name(point["autocast"])
    if "memory_format" in point:
        config.memory_format_name(point["memory_format"])
    if "device" in point:
        config.resolve_device(point["device"])


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(t.lower() in str(exc).lower() for t in _OOM_TEXT)


def sweep(
    fn: Callable[..., Mapping[str, Any] | Sequence[Mapping[str, Any]]],
    grid: Mapping[str, Sequence] | Sequence[Mapping[str, Any]],
    store: str | Path | None = None,
    *,
    settings: Mapping[str, Any] | SimpleNamespace | None = None,
    skip: Callable[..., str | None] | None = None,
    validate: Callable[[dict[str, Any]], None] | None = None,
    builtin_checks: bool = True,
    retry_errors: bool | None = None,
    desc: str | None = None,
    progress: bool = True,
) -> pd.DataFrame:
    """Call ``fn(**point)`` for every grid point not yet stored; return the grid's rows, in grid order.

    fn returns a dict of metrics (or a list of dicts: several rows for one point). Each row stored
    is the point's parameters, then ``status`` ("ok", "oom", "error"), ``error`` (message, failed
    points only), ``point_time_s`` (wall time of the point, s), ``finished_utc``, then the metrics.

    store: the store's folder and name (``<folder>/<name>.csv`` or ``.jsonl``); None: a temporary
    store, gone after the call. settings: every setting that is not a grid parameter and changes a
    measurement (model options, data set, device, dtype, repeats, preset...; a namespace counts by
    its attributes). The file actually used is ``<folder>/stores/<name>_<digest>.<ext>``, the digest
    taken over ``settings``, the source of cnnlab itself and the machine measured on (the device of
    ``settings["device"]``: :func:`cnnlab.profiling.store.measured_on`; :func:`store_file`), so that a
    run with other settings, other measuring code or on another machine (a store on Drive resumed on
    another GPU) starts its own store, and a warning names the other machines' stores of the sweep
    (``make clean-stores`` deletes those of older code). With ``settings=None`` the path is used as
    given (the caller vouches that it names everything, the machine included). The path is in
    ``df.attrs["store"]``; its side files lie beside it.

    skip: ``skip(**point)`` returns a reason (str) for a point not to be measured here, or None;
    a skipped point is a row with ``status="skipped"`` and the reason in ``error``, never stored.

    Before any point runs, every point is checked (:func:`check_point` unless
    ``builtin_checks=False``, then ``validate(point)``, which should raise ValueError); one bad
    value fails the whole call with a message naming the parameter. ``<store>.env.json`` records
    the environment and the settings. A point is not run again when the store has a row with the
    same parameter values; failed points stored earlier ("oom", "error", "killed") are reused with a
    warning that says so, and with ``retry_errors=True`` (default: ``$CNNLAB_RETRY=1``, which
    ``make figures RETRY=1`` sets) the "error" and "killed" ones are run again (their old rows
    removed; an "oom" point is a result: it does not fit). Before a point runs,
    an attempt is noted in ``<store>.attempts``; a point whose process died while measuring it twice
    (the kernel's out-of-memory killer, say) is stored as ``status="killed"`` instead of crashing
    every later run again. An OOM (torch.OutOfMemoryError, MemoryError or an
    allocation-failure RuntimeError) frees memory and is stored as ``status="oom"``; any other
    Exception as ``status="error"``; the sweep goes on and warns with the list of failures at the
    end. KeyboardInterrupt stops it, and so do SIGTERM and SIGHUP (:func:`stops_as_interrupts`): finished points are
    kept, so running the same call resumes, and the point being measured is no death: it is measured next time.
    """
    if store is None:
        with tempfile.TemporaryDirectory() as tmp:
            df = sweep(fn, grid, Path(tmp) / "sweep.csv", settings=None, skip=skip, validate=validate,
                       builtin_checks=builtin_checks, retry_errors=retry_errors, desc=desc, progress=progress)
            df.attrs.pop("store", None)
            return df
    points = grid_points(grid)
    for point in points:
        if builtin_checks:
            check_point(point)
        if validate is not None:
            validate(point)
    path = Path(store) if settings is None else store_file(store, settings)
    results = ResultStore(path)
    with results.lock():  # one writer per store: a second run waits, then finds the points stored
        write_env(results.path, settings)

        reasons = [skip(**p) if skip is not None else None for p in points]
        measured = [p for p, reason in zip(points, reasons) if reason is None]
        stored = results.rows()
        names_sets = {tuple(sorted(p)) for p in measured}
        wanted = {(tuple(sorted(p)), _key(p, sorted(p))) for p in measured}

        def failed_here(r, statuses=FAILED):
            return r.get("status") in statuses and any((n, _key(r, n)) in wanted for n in names_sets)

        if retry_errors is None:
            retry_errors = os.environ.get("CNNLAB_RETRY", "") not in ("", "0")
        attempts = Attempts(results.path)
        if retry_errors:
            kept = [r for r in stored if not failed_here(r, RETRIED)]
            if len(kept) != len(stored):
                results.replace_rows(kept)
                attempts.clear()
                stored = kept
        else:
            reused = [r for r in stored if failed_here(r)]
            if reused:
                warnings.warn(f"{len(reused)} point(s) stored as failed in {results.path.name} are reused, not "
                              f"measured again ({', '.join(sorted({r['status'] for r in reused}))}); RETRY=1 (make "
                              "figures) or CNNLAB_RETRY=1 measures error and killed points again, FRESH=1 all",
                              stacklevel=2)
        done = {(names, _key(r, names)) for names in names_sets for r in stored}
        todo = []
        for p in measured:  # skip stored points and repeats within the grid
            key = (tuple(sorted(p)), _key(p, sorted(p)))
            if key not in done:
                done.add(key)
                todo.append(p)
        failures: list[tuple[dict, str, str]] = []
        bar = Progress(len(measured), initial=len(measured) - len(todo), desc=desc, show=progress)
        try:
            with stops_as_interrupts():
                for point in todo:
                    bar.at(", ".join(f"{k}={v}" for k, v in point.items()))
                    died = attempts.count(point)
                    if died >= KILLED_AFTER:
                        rows, status, message = _killed_row(point, died)
                    else:
                        try:
                            attempts.note(point)  # if the process dies now, the next run knows
                            rows, status, message = _run_point(fn, point)
                        except KeyboardInterrupt:  # a stop asked for, also while the mark was written: not a death
                            if attempts.count(point) > died:
                                attempts.forget(point)
                            raise
                    if status != "ok":
                        failures.append((point, status, message))
                        free_memory()
                    store_point(results, attempts, point, rows)
                    bar.step()
        finally:
            bar.close()
        if failures:
            lines = "\n".join(f"  {status}: {p} {msg[:200]}" for p, status, msg in failures)
            warnings.warn(f"{len(failures)} of {len(todo)} points failed in {results.path}:\n{lines}", stacklevel=2)
        df = _grid_rows(results.to_frame(), results.rows(), points, reasons)
    df.attrs["store"] = results.path
    return df


# Signals that ask a process to stop (a scheduler, `timeout`, a closed terminal), besides Ctrl-C's SIGINT.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Stop(KeyboardInterrupt):
    """A stop signal (:data:`STOP_SIGNALS`) that came while a sweep measured: raised as Ctrl-C raises
    KeyboardInterrupt, so that the point's attempt mark is taken back."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stops_as_interrupts():
    """Inside the block, SIGTERM and SIGHUP raise :class:`Stop`, as Ctrl-C raises KeyboardInterrupt: left to their
    default, they ended the process in the middle of a point, whose attempt mark then counted a stop that was asked
    for as a death (two, and the point was stored as killed). On the way out the previous handlers are back, and a
    stop that came is delivered to them again: by default the process then ends by that signal, as it was asked to,
    with its finished points stored and no mark left. A signal that is ignored (nohup) stays ignored; off the main
    thread (where no handler can be set) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}

    def stop(signum, frame):
        raise Stop(signum)

    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) not in (signal.SIG_IGN, None):  # (None: set outside Python, cannot be restored)
            previous[signum] = signal.signal(signum, stop)
    try:
        yield
    except Stop as stopped:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.kill(os.getpid(), stopped.signum)  # a Python handler before ours runs next; by default the process ends
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _grid_rows(stored: pd.DataFrame, text: list[dict[str, str]], points: list[dict],
               reasons: list[str | None]) -> pd.DataFrame:
    """The rows of ``points`` (stored ones, and one "skipped" row per skipped point), in grid order.

    Stored rows are matched on their text as written (``text``, row for row the same as ``stored``), not on
    pandas' parsed values, which turn an int column with a gap into floats ("8" read back as 8.0)."""
    parts = []
    for point, reason in zip(points, reasons):
        if reason is not None:
            parts.append(pd.DataFrame([{**point, "status": "skipped", "error": reason}]))
            continue
        key = _key(point, point)
        rows = [i for i, row in enumerate(text) if _key(row, point) == key]
        if rows:
            parts.append(stored.iloc[rows])
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=list(points[0]) + ["status", "error"] if points else [])
    df = pd.concat(parts, ignore_index=True)
    for column in df.columns[df.dtypes == object]:  # text because of a row of another grid (say, a damaged cell)
        try:
            df[column] = pd.to_numeric(df[column])
        except (ValueError, TypeError):
            pass
    return df


def _killed_row(point: dict[str, Any], died: int) -> tuple[list[dict[str, Any]], str, str]:
    message = (f"the process died {died} times while measuring this point (no Python error: killed, e.g. by the "
               "kernel's out-of-memory killer); not tried again: retry with RETRY=1 / CNNLAB_RETRY=1")
    stamp = pd.Timestamp.now(tz="UTC").isoformat(timespec="seconds")
    return [{**point, "status": "killed", "error": message, "point_time_s": math.nan, "finished_utc": stamp}], \
        "killed", message


def _key(row: Mapping[str, Any], names: Iterable[str]) -> tuple[str, ...]:
    return tuple(key_value(row.get(n)) for n in names)


def _run_point(fn, point: dict[str, Any]) -> tuple[list[dict[str, Any]], str, str]:
    start = time.perf_counter()
    status, message, metrics = "ok", "", []
    try:
        out = fn(**point)
        metrics = [dict(out)] if isinstance(out, Mapping) else [dict(m) for m in (out or [])]
        for m in metrics:
            clash = [k for k in m if k in point and key_value(m[k]) != key_value(point[k])] + \
                    [k for k in m if k in RESERVED]
            if clash:
                raise ValueError(f"fn returned metrics named like parameters or sweep columns: {clash}")
    except Exception as exc:  # recorded, not raised: one bad point must not lose the sweep
        status = "oom" if _is_oom(exc) else "error"
        message = f"{type(exc).__name__}: {exc}"
        metrics = []
    elapsed = time.perf_counter() - start
    stamp = pd.Timestamp.now(tz="UTC").isoformat(timespec="seconds")
    base = {**point, "status": status}
    if status != "ok":
        base["error"] = message
    base.update(point_time_s=elapsed, finished_utc=stamp)
    rows = [{**base, **{k: v for k, v in m.items() if k not in point}} for m in metrics] or [base]
    return rows, status, message
