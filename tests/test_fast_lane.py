"""make test-fast: tests/slow.txt's tests are marked slow (tests/conftest.py) and left out; a stale name fails."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tests_conftest():
    """tests/conftest.py as a module of its own: a plain ``import conftest`` gets notebooks/conftest.py where
    ``make test`` collected the notebooks first in this worker (both register as ``conftest``)."""
    spec = importlib.util.spec_from_file_location("cnnlab_tests_conftest", ROOT / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conftest = _tests_conftest()


class _Item:
    def __init__(self, nodeid):
        self.nodeid, self.marks = nodeid, []

    def add_marker(self, mark):
        self.marks.append(mark.name)


class _Config:
    def __init__(self, *args):
        self.args = list(args)


def _mark(monkeypatch, tmp_path, listed: str, nodeids, args=("tests",)):
    path = tmp_path / "slow.txt"
    path.write_text(listed)
    monkeypatch.setattr(conftest, "SLOW_LIST", path)
    items = [_Item(n) for n in nodeids]
    conftest.pytest_collection_modifyitems(_Config(*args), items)
    return {i.nodeid: "slow" in i.marks for i in items}


def test_a_listed_module_or_test_is_marked_slow_with_every_parametrization(monkeypatch, tmp_path):
    listed = "# a comment\ntests/test_a.py\ntests/test_b.py::test_heavy  # trains\n"
    got = _mark(monkeypatch, tmp_path, listed, ["tests/test_a.py::test_x", "tests/test_b.py::test_heavy[1]",
                                                "tests/test_b.py::test_heavy[2]", "tests/test_b.py::test_heavy_not",
                                                "tests/test_c.py::test_y"])
    assert got == {"tests/test_a.py::test_x": True, "tests/test_b.py::test_heavy[1]": True,
                   "tests/test_b.py::test_heavy[2]": True, "tests/test_b.py::test_heavy_not": False,
                   "tests/test_c.py::test_y": False}


def test_a_listed_test_that_no_longer_exists_fails_the_run(monkeypatch, tmp_path):
    listed = "tests/test_b.py::test_renamed\ntests/test_gone.py\n"
    with pytest.raises(pytest.UsageError, match="tests/test_b.py::test_renamed"):
        _mark(monkeypatch, tmp_path, listed, ["tests/test_b.py::test_new"])
    # not where only single tests were asked for (the rest of their module was not collected), nor for a module
    # that was not collected at all
    _mark(monkeypatch, tmp_path, listed, ["tests/test_b.py::test_new"], args=("tests/test_b.py::test_new",))
    _mark(monkeypatch, tmp_path, listed, ["tests/test_c.py::test_y"])
    worker = _Config("tests")
    worker.workerinput = {}
    items = [_Item("tests/test_b.py::test_new")]
    conftest.pytest_collection_modifyitems(worker, items)  # an xdist worker: tests/test_fast_lane.py's check instead


def test_every_name_in_slow_txt_is_a_test_file_or_a_test_in_one():
    """Checked here from the files' text too, so that the fast lane (which never collects a whole slow module) sees a
    stale entry."""
    for entry in conftest.slow_entries(conftest.SLOW_LIST.read_text()):
        module, _, name = entry.partition("::")
        path = ROOT / module
        assert path.is_file(), f"tests/slow.txt names {entry}: no such file"
        found = not name or re.search(rf"^(async )?def {re.escape(name)}\(", path.read_text(), re.MULTILINE)
        assert found, f"tests/slow.txt names {entry}: no such test in {module} (renamed? rename it there too)"


def test_test_fast_leaves_out_slow_and_gpu_and_the_notebooks():
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^test-fast:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe, "no test-fast target"
    run = recipe[1].replace("\\\n", " ")
    assert '-m "not slow and not gpu"' in run and "notebooks" not in run and "--nbval" not in run, run
