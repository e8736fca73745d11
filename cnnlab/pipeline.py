"""Run the notebooks headless: ``python -m cnnlab.pipeline [--notebook 01] [--preset quick]``.

Each notebook is executed by papermill into ``build/notebooks/`` with ``CNNLAB_PRESET`` set; it writes its
figures (PNG and SVG) and tidy CSVs into ``figures/<notebook-name>/`` through :func:`output_dir`. The executed
copies keep their figures (Jupyter's inline backend): ``make report`` links them as the notebooks a reader opens.
A failing notebook stops the run with its name and the failing cell; what the notebooks before it wrote stays.
``make figures`` passes its NB=, PRESET= and P= in the environment (``CNNLAB_MAKE_NOTEBOOK``, ``CNNLAB_MAKE_PRESET``,
``CNNLAB_PARAMS``), so that no shell parses them; the preset is ``--preset``, else make's PRESET=, else a
``preset=`` in P=, else ``$CNNLAB_PRESET``, else auto (quick on a CPU, standard on a GPU), and the kernels, the
environment records and the console all get that one (:func:`choose_preset`). While a notebook runs, a line says
every ``$CNNLAB_PROGRESS_EVERY`` seconds (10) which cell runs and how far its sweep or training has got
(:class:`Watch`, :mod:`cnnlab.profiling.progress`): plain lines, readable in a CI log. Ctrl-C, SIGTERM (a scheduler,
``timeout``, make passing its own on) and SIGHUP stop a run the same way: the cell is interrupted, the points finished
are kept, one line says where it stopped (:class:`Stop`).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import logging
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from cnnlab import paths
from cnnlab.profiling import progress
from cnnlab.profiling.store import remove_stores

NOTEBOOKS = paths.base() / "notebooks"
BUILD = paths.base() / "build" / "notebooks"
# ipykernel's own default, stated because MPLBACKEND=Agg (CI, a headless shell) would reach the kernel and leave
# every figure out of the executed notebook ("<Figure size 640x480 with 1 Axes>" instead of the plot).
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def output_dir(notebook_name: str) -> Path:
    """Folder for a notebook's figures and CSVs: ``$CNNLAB_FIGURES_DIR/<name>``, else ``figures/<name>`` of the
    checkout, else ``./figures/<name>`` (an installed cnnlab writes under the working directory)."""
    out = paths.figures_root() / notebook_name
    out.mkdir(parents=True, exist_ok=True)
    return out


def find_notebooks(selector: str | None = None) -> list[Path]:
    """Notebooks in ``notebooks/`` in order; ``selector`` ("01" or a name) picks the matching ones."""
    found = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if not found:
        raise SystemExit(f"no notebooks in {NOTEBOOKS}: run `python -m cnnlab.pipeline` from a cnnlab checkout "
                         "(the notebooks are not part of the installed package)")
    if selector:
        chosen = [nb for nb in found if nb.stem == selector or nb.stem.startswith(f"{selector}_")
                  or nb.name == selector]
        if not chosen:
            names = ", ".join(nb.stem for nb in found)
            raise SystemExit(f"no notebook matches NB={selector!r}; available: {names}")
        return chosen
    return found


def parse_parameters(pairs: list[str]) -> dict:
    """``["batch_sizes=[1, 4]", "repeats=3", "model=resnet20"]`` -> papermill parameters: a value that reads as a
    Python literal is that literal, anything else the text. The notebook checks the names and the values. A name
    given twice is refused (SystemExit naming it): the last value winning silently hides which one was meant."""
    params, texts = {}, {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name, text = name.strip(), text.strip()
        if not sep or not name.isidentifier():
            raise SystemExit(f"parameter {pair!r} is not NAME=VALUE (e.g. repeats=3 or batch_sizes=[1,4])")
        if name in texts:
            raise SystemExit(f"parameter {name} is given twice ({name}={texts[name]}, then {name}={text}); "
                             "give each parameter once")
        texts[name] = text
        try:
            params[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            params[name] = text
    return params


# make figures hands P=, NB= and PRESET= to this module in the environment (exported make variables), never on a shell
# command line: a value is then never parsed by a shell, so no quote in it can end a string and run a command.
PARAMS_VARIABLE = "CNNLAB_PARAMS"
MAKE_PRESET_VARIABLE = "CNNLAB_MAKE_PRESET"
MAKE_NOTEBOOK_VARIABLE = "CNNLAB_MAKE_NOTEBOOK"
PRESETS = ("auto", "quick", "standard", "paper")
# Where a NAME=VALUE pair starts: whitespace before NAME=, so a value may hold spaces ("batch_sizes=[1, 4]").
_PAIR_START = re.compile(r"\s+(?=[A-Za-z_]\w*=)")


def split_parameters(text: str) -> list[str]:
    """``make figures P=...`` text -> NAME=VALUE pairs: ``"repeats=3 models=['resnet20'] batch_sizes=[1, 4]"`` ->
    ``["repeats=3", "models=['resnet20']", "batch_sizes=[1, 4]"]``. Quotes are kept for :func:`parse_parameters`
    (no shell rule removes them); a new pair starts only where whitespace is followed by ``NAME=``."""
    text = text.strip()
    return _PAIR_START.split(text) if text else []


def choose_preset(flag: str | None, environ=os.environ, parameter=None) -> str:
    """The preset of the run: ``--preset``, else make's ``PRESET=`` (``$CNNLAB_MAKE_PRESET``), else a ``preset``
    notebook parameter (``P="preset=standard"``: ``parameter``), else ``$CNNLAB_PRESET``, else auto; auto is
    resolved (:func:`cnnlab.config.resolve`: quick on a CPU, standard where CUDA is available). Every value given is
    checked, also one a higher source overrides (SystemExit naming it and the valid presets), so that a misspelt
    CNNLAB_PRESET is not silently ignored; a ``preset`` parameter that disagrees with ``--preset`` or ``PRESET=`` is
    refused (which one was meant?).

    This one choice is the run's preset everywhere: :func:`run` sets ``$CNNLAB_PRESET`` to it, where every
    notebook's configuration (its ``preset`` parameter left None), :func:`cnnlab.profiling.environment` (hence
    environment.json and each store's env record) and the console read it; the ``preset`` parameter itself is not
    passed on (:func:`main` takes it out of the parameters)."""
    if parameter is not None and not isinstance(parameter, str):
        raise SystemExit(f"parameter preset={parameter!r} is not a preset; valid: {', '.join(PRESETS)}")
    sources = [("--preset", flag), ("make's PRESET=", environ.get(MAKE_PRESET_VARIABLE)),
               ("parameter preset=", parameter), ("$CNNLAB_PRESET", environ.get("CNNLAB_PRESET"))]
    given = [(where, value.strip()) for where, value in sources if value is not None and value.strip()]
    for where, value in given:
        if value.lower() not in PRESETS:
            raise SystemExit(f"{where} {value!r} is not a preset; valid: {', '.join(PRESETS)} (order: --preset, then "
                             "make's PRESET=, then a preset= parameter (P=), then $CNNLAB_PRESET, then auto)")
    from cnnlab import config

    chosen = {where: config.resolve(value.lower()) for where, value in given}
    named = [where for where in ("--preset", "make's PRESET=") if where in chosen]
    if "parameter preset=" in chosen and named and chosen[named[0]] != chosen["parameter preset="]:
        raise SystemExit(f"parameter preset={parameter!r} and {named[0]} {dict(given)[named[0]]!r} disagree: give the "
                         "preset once (PRESET= or P=\"preset=...\")")
    return chosen[given[0][0]] if given else config.resolve("auto")


# How long one cell may run, by preset: at the quick preset each cell takes minutes on a 2-core CPU (make test gives
# each 15), at standard and paper a sweep measures for hours on a GPU. A cell past it is interrupted and the run
# stops, naming the notebook, the cell and the point its sweep was at. --timeout, make's TIMEOUT= or
# $CNNLAB_CELL_TIMEOUT sets another: seconds, or 45m, 2h; 0 or none for no limit.
CELL_LIMITS_S = {"quick": 30 * 60, "standard": 4 * 3600, "paper": 12 * 3600}
TIMEOUT_VARIABLE = "CNNLAB_CELL_TIMEOUT"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smh]?)")
# How long a timed-out cell is given to end once interrupted (a CPU convolution at a large batch returns to Python
# within seconds) before its kernel is killed.
SETTLE_S = 30


def cell_limit(preset: str, flag: str | None = None, environ=os.environ) -> tuple[int | None, str]:
    """Seconds one cell may run (None: no limit) and where that came from: ``--timeout``, else
    ``$CNNLAB_CELL_TIMEOUT`` (make figures TIMEOUT=), else :data:`CELL_LIMITS_S` of ``preset``. A value is seconds
    (``90``) or a number with s, m or h (``45m``, ``1.5h``); ``0`` or ``none`` is no limit; anything else is a
    SystemExit naming it."""
    for where, text in (("--timeout", flag), (f"${TIMEOUT_VARIABLE} (make's TIMEOUT=)", environ.get(TIMEOUT_VARIABLE))):
        if text is None or not text.strip():
            continue
        text = text.strip().lower()
        if text in ("0", "none", "off"):
            return None, f"{where} {text}"
        found = _DURATION.fullmatch(text)
        if not found or float(found[1]) <= 0:
            raise SystemExit(f"{where} {text!r} is not a time limit for one cell; give seconds (5400) or a number with "
                             "s, m or h (90m, 1.5h), or 0 for none")
        return math.ceil(float(found[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[found[2]]), f"{where} {text}"
    return CELL_LIMITS_S.get(preset, max(CELL_LIMITS_S.values())), f"the {preset} preset's"


@contextlib.contextmanager
def _environment(**values: str):
    """Environment variables set inside the block and restored after."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _kernel_manager(folder: Path):
    """The notebook's kernel, reached over local IPC sockets in ``folder`` instead of TCP on localhost: no port is
    opened, and ipykernel has no "running over TCP without encryption" warning to print (POSIX; TCP elsewhere).
    Its connection file is in ``folder`` too, which the run removes, not in Jupyter's runtime folder, where a stopped
    run left it. Shut down on exit (nbclient leaves a kernel it did not start running)."""
    from jupyter_client.manager import AsyncKernelManager  # nbclient's own kind: it notices a kernel that died
    from jupyter_core.utils import run_sync

    ipc = os.name == "posix"
    km = AsyncKernelManager(kernel_name="python3", transport="ipc" if ipc else "tcp",
                            connection_file=str(folder / "kernel.json"),  # (it holds the kernel's key)
                            **({"ip": str(folder / "kernel")} if ipc else {}))
    try:
        yield km
    finally:
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)


class Watch:
    """Prints, every ``every`` seconds while a notebook runs, which cell runs and what the sweep or training in it
    last wrote to the progress file (:mod:`cnnlab.profiling.progress`): "[cnnlab] 05_ddp_scaling, cell 9 of 24
    (1:40 in): ddp configurations: 2/4 (...), 1:10 elapsed, about 1:10 left". ``on_cell_start`` is nbclient's hook."""

    def __init__(self, notebook: str, cells: int | str, progress_file: Path, every: float):
        self.notebook, self.cells, self.file, self.every = notebook, cells, progress_file, every
        self.cell, self.started = 0, time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def on_cell_start(self, cell, cell_index, **_):
        self.cell = cell_index + 1
        self.file.unlink(missing_ok=True)  # a finished sweep's line is not this cell's

    def where(self) -> str:
        """"05_ddp_scaling, cell 9 of 24 (1:40 in): ddp configurations: 2/4 (...), ...": the cell and the point."""
        elapsed = progress._clock(time.monotonic() - self.started)
        state = progress.read(self.file)
        what = progress.describe(state) if state else "running"
        return f"{self.notebook}, cell {self.cell} of {self.cells} ({elapsed} in): {what}"

    def line(self) -> str:
        return f"[cnnlab] {self.where()}"

    def _loop(self):
        while not self._stop.wait(self.every):
            print(self.line(), flush=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


STOPPED = 130  # the status a shell gives a command ended by Ctrl-C (128 + SIGINT)
# What stops a run: Ctrl-C (SIGINT), and, the same way, SIGTERM (a scheduler, `timeout`, make passing on its own) and
# SIGHUP (a closed terminal). A run stopped by one returns 128 + its number and ends by it (:func:`cli`).
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
# A second SIGTERM or SIGHUP this soon after the first is the same stop: `timeout` signals make and its whole process
# group, and make passes its SIGTERM on, so this process gets two at once. (A second Ctrl-C always counts.)
SAME_STOP_S = 2.0


class _Stopped(Exception):
    """Raised before the next cell after a stop that came while no cell was running."""


class Stop:
    """A stop (:data:`STOP_SIGNALS`) while a notebook runs is passed on as Jupyter's stop button passes it: SIGINT to
    the kernel's process group. The kernel leads a session of its own (jupyter_client starts it so), so the
    terminal's Ctrl-C, or make's SIGTERM, reaches only this process; left to Python, Ctrl-C raised KeyboardInterrupt
    here and the kernel was killed (SIGKILL) in the middle of its point, whose attempt mark then counted a user's stop
    as a death (cnnlab.profiling.sweep), and SIGTERM ended this process at once, leaving the kernel to finish its
    notebook. Interrupted instead, the cell ends with KeyboardInterrupt in the kernel, where the sweep forgets the
    attempt, and papermill returns as after any failed cell. ``where`` says what ran when the first stop came (None:
    none came), ``signum`` which signal it was; a second one, for a cell that does not stop, raises KeyboardInterrupt
    here: the kernel is killed."""

    def __init__(self, km, watch: Watch):
        self.km, self.watch, self.where, self.signum = km, watch, None, None
        self._previous, self._when = {}, 0.0

    @property
    def said(self) -> str:
        """How the stop is named in its line: "Ctrl-C", "SIGTERM" or "SIGHUP"."""
        signum = self.signum or signal.SIGINT
        return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name

    def _handle(self, signum, frame):
        if self.where is not None:
            if signum == signal.SIGINT or time.monotonic() - self._when > SAME_STOP_S:
                raise KeyboardInterrupt
            return
        self.where, self.signum, self._when = self.watch.where(), signum, time.monotonic()
        if not _interrupt(self.km):  # no kernel yet (or no more): nothing to stop but this process
            raise KeyboardInterrupt

    def on_cell_start(self, **_):
        if self.where is not None:  # it came between cells: no further cell starts
            raise _Stopped

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():  # (signal handlers belong to the main thread)
            for signum in STOP_SIGNALS:
                if signal.getsignal(signum) not in (signal.SIG_IGN, None):  # (nohup: a closed terminal is no stop)
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def _interrupt(km) -> bool:
    """SIGINT to the kernel's process group (its subprocesses too: DataLoader workers, DDP ranks), as
    ``km.interrupt_kernel()`` sends it, without an event loop (this runs in a signal handler). False when there is no
    running kernel to send it to."""
    provisioner = getattr(km, "provisioner", None)
    process = getattr(provisioner, "process", None)
    if process is None or process.poll() is not None:
        return False
    try:
        if hasattr(os, "killpg"):
            os.killpg(getattr(provisioner, "pgid", None) or process.pid, signal.SIGINT)
        else:
            process.send_signal(signal.SIGINT)
    except (OSError, ValueError):
        return False
    return True


def _end_cell(km, seconds: float) -> bool:
    """Interrupt the cell the kernel runs and wait, at most ``seconds``, until it has ended (a sweep forgets the
    attempt of the point it was measuring, so stopping it is no death): a kernel_info request is answered only after
    the cell before it. A client of its own (its own session and socket identity), as nbclient's has stopped
    listening. True when the cell ended."""
    import queue

    from jupyter_client.blocking import BlockingKernelClient

    if not _interrupt(km):
        return False
    kc = BlockingKernelClient()
    kc.load_connection_info(km.get_connection_info())
    kc.start_channels(iopub=False, stdin=False, hb=False, control=False)
    try:
        asked, deadline = kc.kernel_info(), time.monotonic() + seconds
        while time.monotonic() < deadline:
            if kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))["parent_header"].get("msg_id") == asked:
                return True
    except queue.Empty:
        pass
    finally:
        kc.stop_channels()
    return False


class _TimeoutSaidOnce(logging.Filter):
    """nbclient logs "Timeout waiting for execute reply (12s)." through papermill's logger (printed by logging's last
    resort) before it raises; :func:`run` says it in its own line, with the cell and the point."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout waiting for execute reply")


def _private_folders(tmp: Path) -> dict[str, str]:
    """``IPYTHONDIR`` and ``MPLCONFIGDIR`` for the kernel, in ``tmp`` (which the run removes), where the folder IPython
    or matplotlib would use cannot be written (HOME read-only, say) and the variable is not set: each then falls back
    to a temporary folder of its own, which a kernel that is shut down (killed, no exit handlers run) or stopped left
    in $TMPDIR (IPython's profile_default, a matplotlib-* folder). Their own defaults (IPython ~/.ipython; matplotlib
    its config and cache folders) and their own test: a folder that can be made and written in."""
    home = Path.home()
    if sys.platform.startswith(("linux", "freebsd")):
        matplotlib = [Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "matplotlib",
                      Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache") / "matplotlib"]
    else:
        matplotlib = [home / ".matplotlib"]
    usual = {"IPYTHONDIR": [home / ".ipython"], "MPLCONFIGDIR": matplotlib}
    return {name: str(tmp / name.lower()) for name, folders in usual.items()
            if not os.environ.get(name) and not all(map(_writable, folders))}


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return folder.is_dir() and os.access(folder, os.W_OK)


def _on_cell_start(*hooks):
    def start(**kwargs):
        for hook in hooks:
            hook(**kwargs)
    return start


def run(notebooks: list[Path], preset: str, *, fresh: bool = False, parameters: dict | None = None,
        timeout: str | None = None) -> int:
    """Execute ``notebooks`` in order with ``preset``; 0 when all ran, else 1 after the first that failed or timed
    out (:func:`cell_limit`: ``timeout`` is --timeout's text), 128 + the signal's number after a stop
    (:data:`STOPPED` after a Ctrl-C; :class:`Stop`)."""
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    paths.absolute_folders()  # (main did it already; here for a caller of run itself) before any kernel starts
    limit, limit_source = cell_limit(preset, timeout)
    papermill_log = logging.getLogger("papermill")
    if not any(isinstance(f, _TimeoutSaidOnce) for f in papermill_log.filters):
        papermill_log.addFilter(_TimeoutSaidOnce())
    BUILD.mkdir(parents=True, exist_ok=True)
    os.environ["CNNLAB_PRESET"] = preset
    for nb in notebooks:
        if fresh:
            remove_stores(output_dir(nb.stem))  # stored points would be reused; a running sweep is waited for
        start = time.perf_counter()
        print(f"[cnnlab] running {nb.name} (preset {preset}) ...", flush=True)
        every = float(os.environ.get("CNNLAB_PROGRESS_EVERY", "10"))
        try:
            cells = len(json.loads(nb.read_text()).get("cells", [])) + bool(parameters)  # papermill adds one
        except (OSError, ValueError):  # papermill says what is wrong with it
            cells = "?"
        with tempfile.TemporaryDirectory(prefix="cnnlab-") as tmp, \
                Watch(nb.stem, cells, Path(tmp) / "progress.json", every) as watch, \
                _kernel_manager(Path(tmp)) as km, Stop(km, watch) as stop, \
                _environment(MPLBACKEND=INLINE_BACKEND, **{progress.VARIABLE: str(watch.file)},
                             **_private_folders(Path(tmp))):
            try:  # the kernel inherits this process's environment
                papermill.execute_notebook(str(nb), str(BUILD / nb.name), cwd=str(NOTEBOOKS), kernel_name="python3",
                                           parameters=parameters or {}, progress_bar=False, log_output=False,
                                           on_cell_start=_on_cell_start(watch.on_cell_start, stop.on_cell_start),
                                           km=km, execution_timeout=limit)
            except CellTimeoutError:  # nbclient stopped waiting; the cell still runs in the kernel
                where = watch.where()
                ended = _end_cell(km, SETTLE_S)
                print(f"[cnnlab] TIMED OUT: {where}: the cell ran past its limit of {progress._clock(limit)} "
                      f"({limit_source}; make figures TIMEOUT=... sets another, 0 none). "
                      + ("It was interrupted" if ended else f"It did not end within {SETTLE_S} s of an interrupt: its "
                         "kernel was killed, so a point it was measuring counts as one attempt")
                      + f"; the points finished are kept. Executed copy: {BUILD / nb.name}",
                      file=sys.stderr, flush=True)
                return 1
            except KeyboardInterrupt:  # a second stop, or one before the kernel ran: the kernel is killed
                print(f"[cnnlab] stopped at once ({stop.said}): {stop.where or watch.where()}; its kernel was killed, "
                      "so a point it was measuring counts as one attempt (two, and it is stored as killed: RETRY=1 "
                      "measures it again)", file=sys.stderr, flush=True)
                return 128 + (stop.signum or signal.SIGINT)
            except (PapermillExecutionError, _Stopped) as err:
                if stop.where is not None:
                    print(f"[cnnlab] stopped ({stop.said}): {stop.where}; the points finished are kept, and the same "
                          "command resumes from them", file=sys.stderr, flush=True)
                    return 128 + stop.signum
                print(f"[cnnlab] FAILED: {nb.name}, cell {err.exec_count}: {err.ename}: {err.evalue}\n"
                      f"  executed copy with the traceback: {BUILD / nb.name}", file=sys.stderr)
                return 1
            except DeadKernelError as err:  # the kernel process died: no Python traceback exists to show
                print(f"[cnnlab] FAILED: {nb.name}: its kernel died ({(str(err).splitlines() or [''])[0][:160]}), "
                      "most often killed for memory or a crash in native code. The cells that ran are in "
                      f"{BUILD / nb.name}; run it alone with a smaller preset (make figures NB={nb.stem[:2]} "
                      "PRESET=quick), and look at `dmesg` for an out-of-memory kill", file=sys.stderr)
                return 1
            if stop.where is not None:  # it came during the last cell, which ended all the same
                print(f"[cnnlab] stopped ({stop.said}) after {nb.name}: {stop.where}", file=sys.stderr, flush=True)
                return 128 + stop.signum
        print(f"[cnnlab] {nb.name} done in {time.perf_counter() - start:.0f} s; "
              f"outputs in {output_dir(nb.stem)}", flush=True)
    return 0


def estimate(notebooks: list[Path], preset: str, *, parameters: dict | None = None) -> int:
    """How long each notebook's study expects to take here with ``preset`` (its plan and probes, as the notebook
    prints before measuring: :func:`cnnlab.contract.measurement`), one line each, then the total; nothing is
    measured or stored. A parameter a study does not declare is left out for it."""
    from cnnlab import studies
    from cnnlab.profiling import estimate as estimates

    total = 0.0
    for nb in notebooks:
        module = studies.load(nb.stem.split("_", 1)[1])
        declared = {k: v for k, v in (parameters or {}).items() if k in module.PARAMETERS.declared}
        cfg = module.configure(preset, **declared)
        try:
            expected = estimates.expect(lambda: module.measure.plan(cfg), device=cfg.device)  # noqa: B023
        except Exception as err:  # one study whose probe fails does not hide the others'
            print(f"[cnnlab] {nb.stem}: no estimate (its probe failed: {type(err).__name__}: {err})", flush=True)
            continue
        total += expected.seconds
        print(f"[cnnlab] {nb.stem} ({preset}): {expected.text()}", flush=True)
    print(f"[cnnlab] all {len(notebooks)} notebook(s), {preset} preset: about {estimates.duration(total)} here",
          flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", "-n", default=os.environ.get(MAKE_NOTEBOOK_VARIABLE) or None,
                        help="run only this notebook (e.g. 01 or 01_batch_size; default: make's NB=)")
    parser.add_argument("--preset", help=f"one of {', '.join(PRESETS)} (default: make's PRESET=, else "
                                          "$CNNLAB_PRESET, else auto: quick on a CPU, standard on a GPU)")
    parser.add_argument("--fresh", action="store_true",
                        help="delete each notebook's stored results first instead of resuming from them")
    parser.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE",
                        help="a notebook parameter (repeatable), e.g. -p repeats=3 -p 'batch_sizes=[1, 4]'; "
                             f"${PARAMS_VARIABLE} may hold more, space-separated (make figures P=...)")
    parser.add_argument("--timeout", metavar="LIMIT",
                        help=f"how long one cell may run: seconds, or 45m, 2h; 0 for none (default: "
                             f"${TIMEOUT_VARIABLE}, which make's TIMEOUT= sets, else by preset: "
                             + ", ".join(f"{k} {progress._clock(v)}" for k, v in CELL_LIMITS_S.items()) + ")")
    parser.add_argument("--estimate", action="store_true",
                        help="only say how long each notebook expects to take here (short probes; nothing measured)")
    parser.add_argument("--report", action="store_true",
                        help="then write the report (make report), also after a failed notebook, not after a stop; "
                             "the status fails when either failed (make figures)")
    args = parser.parse_args(argv)
    # A relative CNNLAB_FIGURES_DIR (or CNNLAB_DATA) means from here, where make or this command was started; the
    # kernels run in notebooks/, so they are handed the absolute path, as are FRESH's removal and the console.
    paths.absolute_folders()
    parameters = parse_parameters(split_parameters(os.environ.get(PARAMS_VARIABLE, "")) + args.param)
    preset = choose_preset(args.preset, parameter=parameters.pop("preset", None))  # one preset, not two
    notebooks = find_notebooks(args.notebook)
    try:
        if args.estimate:
            return estimate(notebooks, preset, parameters=parameters)
        code = run(notebooks, preset, fresh=args.fresh, parameters=parameters, timeout=args.timeout)
        return _then_report(code) if args.report else code
    except KeyboardInterrupt:  # outside a notebook (FRESH waiting for a store, an estimate's probe): one line
        print("[cnnlab] stopped (Ctrl-C)", file=sys.stderr, flush=True)
        return STOPPED


def _then_report(code: int) -> int:
    """``--report`` (make figures): the report is written after the notebooks, also after a failed one (what ran is
    shown), but not after a stop; the run's status ``code``, or 1 when only the report failed. In this process, so
    that make's child is the pipeline itself (the Makefile execs it): make passes its SIGTERM on to its child only,
    and a shell between them died of it and left the run going."""
    if code - 128 in STOP_SIGNALS:
        return code
    from cnnlab import report

    report_failed = report.main([]) != 0
    return code or int(report_failed)


def cli(argv=None) -> None:
    """``python -m cnnlab.pipeline``: :func:`main`; after a stop it ends as Python itself ends on a signal, killed by
    the one it got (SIGINT for Ctrl-C), so that a shell or make running it stops too."""
    code = main(argv)
    if code - 128 in STOP_SIGNALS and os.name == "posix":
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(code - 128, signal.SIG_DFL)
        os.kill(os.getpid(), code - 128)
    sys.exit(code)


if __name__ == "__main__":
    cli()
