"""How far a long loop has got, for a reader who cannot see the notebook: :class:`Progress`.

In Jupyter a sweep or a training loop shows a tqdm bar in its cell. Run headless (``make figures``: papermill
executes the notebook in a kernel whose output nobody sees until it ends), the same loop also writes its state to
the file named by ``$CNNLAB_PROGRESS_FILE`` (JSON: what runs, done, total, elapsed seconds, the current point),
written whole on every step; ``cnnlab.pipeline`` reads it every few seconds and prints one line. Without the
variable nothing is written. A run that waits (for another run's store: :func:`waiting`) writes what it waits for,
so that the line says so instead of nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path

from tqdm import std

VARIABLE = "CNNLAB_PROGRESS_FILE"


class Progress:
    """A tqdm bar (``disable=not show``) over ``total`` steps, ``initial`` of them already done, that also writes its
    state for :func:`read`. Use as a context manager; :meth:`step` after each step, :meth:`at` names the current
    point."""

    def __init__(self, total: int, *, desc: str | None = None, initial: int = 0, show: bool = True):
        self.desc, self.total, self.initial, self.done, self.point = desc or "", total, initial, initial, ""
        self.started = time.monotonic()
        self.bar = bar_class()(total=total, initial=initial, desc=desc, disable=not show)
        self._write()

    def at(self, point: str) -> None:
        self.point = point
        self.bar.set_postfix_str(point, refresh=False)
        self._write()

    def step(self, n: int = 1) -> None:
        self.done += n
        self.bar.update(n)
        self._write()

    def close(self) -> None:
        self.bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _write(self) -> None:
        _put({"desc": self.desc, "done": self.done, "initial": self.initial, "total": self.total, "point": self.point,
              "elapsed_s": round(time.monotonic() - self.started, 1), "written": time.time()})


def _put(state: dict | str | None) -> None:
    """Write ``state`` (a dict, or the text of one as read) whole to the progress file; None removes it. Nothing
    without ``$CNNLAB_PROGRESS_FILE``."""
    path = os.environ.get(VARIABLE)
    if not path:
        return
    tmp = Path(f"{path}.{os.getpid()}.tmp")
    try:
        if state is None:
            Path(path).unlink(missing_ok=True)
            return
        tmp.write_text(state if isinstance(state, str) else json.dumps(state))
        os.replace(tmp, path)
    except OSError:  # progress is a courtesy: never the reason a measurement fails
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def waiting(what: str):
    """Inside the block the progress line says ``what`` (e.g. "sweep.csv is being written by another run (pid 4242)")
    and how long this run has waited; :meth:`Waiting.say` changes the text. The state written before (an outer
    loop's) is put back after."""
    path = os.environ.get(VARIABLE)
    try:
        before = Path(path).read_text() if path else None
    except OSError:
        before = None
    wait = Waiting(what)
    try:
        yield wait
    finally:
        _put(before)


class Waiting:
    """The state of a run that waits (see :func:`waiting`)."""

    def __init__(self, what: str):
        self.started = time.monotonic()
        self.what = ""
        self.say(what)

    def say(self, what: str) -> None:
        if what != self.what:
            self.what = what
            _put({"waiting": what, "elapsed_s": round(time.monotonic() - self.started, 1), "written": time.time()})


def bar_class() -> type:
    """tqdm.auto's choice, without its warning: the notebook widget bar in a Jupyter kernel where ipywidgets is
    installed, else the text bar. (``tqdm.auto`` in a kernel without ipywidgets, the lent GPU machine's Python for
    one, warns ``TqdmWarning: IProgress not found. Please update jupyter and ipywidgets`` on every bar, then falls
    back to the same text bar.)"""
    ipython = sys.modules.get("IPython")
    try:
        in_kernel = ipython is not None and "IPKernelApp" in ipython.get_ipython().config
    except AttributeError:  # get_ipython() is None: plain Python that imported IPython
        in_kernel = False
    if in_kernel:
        from tqdm import notebook

        if notebook.IProgress is not None:
            return notebook.tqdm
    return std.tqdm


def read(path: str | os.PathLike) -> dict | None:
    """The state the running loop last wrote to ``path`` (None when there is none, or it cannot be read)."""
    try:
        state = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


def describe(state: dict, now: float | None = None) -> str:
    """One line for ``state`` (:func:`read`): "ddp configurations: 2/4 (resnet20, batch 32), 1:10 elapsed, about
    1:10 left"; the estimate assumes the steps left take as long as those done here (none before the first). A
    waiting run's state (:func:`waiting`): "waiting: <what it waits for>, 0:40 waited"."""
    now = time.time() if now is None else now
    elapsed = float(state.get("elapsed_s", 0)) + max(0.0, now - float(state.get("written", now)))
    if state.get("waiting"):
        return f"waiting: {state['waiting']}, {_clock(elapsed)} waited"
    done, total = int(state.get("done", 0)), int(state.get("total", 0))
    line = f"{state.get('desc') or 'running'}: {done}/{total}"
    if state.get("point"):
        line += f" ({state['point']})"
    line += f", {_clock(elapsed)} elapsed"
    started_at = int(state.get("initial", 0))
    if 0 < done - started_at and done < total:
        line += f", about {_clock(elapsed / (done - started_at) * (total - done))} left"
    return line
