"""cnnlab.profiling.progress: the bar class (no tqdm warning where ipywidgets is missing); a run that waits for
another's store says so on the pipeline's console, with the other run's pid."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import types
import warnings
from pathlib import Path

import pytest
from tqdm import notebook, std

from cnnlab.profiling import progress


def _kernel(monkeypatch, config: dict) -> None:
    """Pretend this process is an IPython of ``config`` (a Jupyter kernel's names IPKernelApp)."""
    shell = types.SimpleNamespace(config=config)
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))


def test_a_kernel_without_ipywidgets_gets_the_text_bar_and_no_warning(monkeypatch):
    _kernel(monkeypatch, {"IPKernelApp": {}})
    monkeypatch.setattr(notebook, "IProgress", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # tqdm.auto would warn "IProgress not found" here
        assert progress.bar_class() is std.tqdm
        with progress.Progress(3, desc="points", show=False) as bar:
            bar.step()


def test_a_kernel_with_ipywidgets_gets_the_widget_bar(monkeypatch):
    pytest.importorskip("ipywidgets", reason="ipywidgets is not installed: the widget bar needs it")
    _kernel(monkeypatch, {"IPKernelApp": {}})
    assert progress.bar_class() is notebook.tqdm


@pytest.mark.parametrize("ipython", [None, types.SimpleNamespace(get_ipython=lambda: None)],
                         ids=["no IPython", "IPython imported, no shell"])
def test_outside_a_kernel_the_text_bar(monkeypatch, ipython):
    if ipython is None:
        monkeypatch.delitem(sys.modules, "IPython", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "IPython", ipython)
    assert progress.bar_class() is std.tqdm


def test_a_terminal_ipython_gets_the_text_bar(monkeypatch):
    _kernel(monkeypatch, {"TerminalInteractiveShell": {}})
    assert progress.bar_class() is std.tqdm


@pytest.mark.filterwarnings("ignore:.*is being written by another run")  # the waiting this test provokes
def test_a_run_waiting_for_another_runs_store_says_so_on_the_console_with_its_pid(tmp_path, monkeypatch):
    from cnnlab import pipeline
    from cnnlab.profiling import sweep

    store, release = tmp_path / "s.csv", tmp_path / "release"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from cnnlab.profiling.store import ResultStore
        with ResultStore(sys.argv[1]).lock():
            print("held", flush=True)
            for _ in range(600):
                if Path(sys.argv[2]).exists():
                    break
                time.sleep(0.1)
        """), str(store), str(release)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        file = tmp_path / "progress.json"
        monkeypatch.setenv(progress.VARIABLE, str(file))
        watch = pipeline.Watch("01_study", 9, file, every=10)
        done = []
        waiter = threading.Thread(target=lambda: done.append(sweep(lambda i: {"v": i}, {"i": [1, 2]}, store,
                                                                   desc="points", progress=False)))
        waiter.start()
        deadline, line = time.monotonic() + 30, watch.line()
        while f"pid {holder.pid}" not in line and time.monotonic() < deadline:
            time.sleep(0.2)
            line = watch.line()
        assert f"pid {holder.pid}" in line and "waiting" in line and str(store) in line, line
    finally:
        release.touch()
        holder.wait(30)
    waiter.join(30)
    assert done and list(done[0]["v"]) == [1, 2]
    assert "waiting" not in watch.line()  # the sweep's own line once the store is its own
