"""cnnlab.profiling.progress: the bar class (no tqdm warning where ipywidgets is missing)."""

from __future__ import annotations

import sys
import types
import warnings

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
    pytest.importorskip("ipywidgets")
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
