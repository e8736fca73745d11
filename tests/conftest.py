from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """One intra-op thread per test process: `make test` runs two processes on two cores, and OpenMP threads
    beyond the free cores spin-wait on each other, inflating every timing 10x or more."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def ran_interpreted_in_subprocess(request) -> bool:
    """True if this test needed Triton's interpreter, lacked it, and was therefore run (and passed) in a subprocess
    with TRITON_INTERPRET=1; False if the interpreter is on here and the test should just go on.

    cnnlab runs CPU tensors in Triton's interpreter only when TRITON_INTERPRET=1 is set (now, or when triton was
    imported); rather than set it in this process, where it would change how every later test's Triton code runs,
    a test that needs it runs itself once more in a subprocess that has it.
    """
    import os
    import subprocess
    import sys
    from pathlib import Path

    from cnnlab.kernels import triton_conv  # imported here, not at the top: it imports triton

    if triton_conv.interpreter_enabled():
        return False
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                           request.node.nodeid], cwd=Path(__file__).resolve().parents[1], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return True


class CallOrder(list):
    """The labels of the calls :meth:`wrap` watches, in the order they happened."""

    def __init__(self, monkeypatch):
        super().__init__()
        self._monkeypatch = monkeypatch

    def wrap(self, owner, name: str, label: str) -> None:
        """Replace ``owner.name`` by a wrapper that appends ``label`` here, then calls the original."""
        real = getattr(owner, name)

        def wrapped(*args, **kwargs):
            self.append(label)
            return real(*args, **kwargs)

        self._monkeypatch.setattr(owner, name, wrapped)


@pytest.fixture
def call_order(monkeypatch) -> CallOrder:
    """Which of the watched functions ran in which order (``call_order.wrap(module, "benchmark", "time")``)."""
    return CallOrder(monkeypatch)


SLOW_LIST = Path(__file__).with_name("slow.txt")


def slow_entries(text: str) -> list[str]:
    """The entries of tests/slow.txt: one a line, ``tests/test_x.py`` (every test of the module) or
    ``tests/test_x.py::test_y`` (that test, every parametrization of it); ``#`` starts a comment."""
    return [line for line in (raw.split("#", 1)[0].strip() for raw in text.splitlines()) if line]


@pytest.hookimpl(tryfirst=True)  # before -m's deselection, which must see these marks
def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` the tests tests/slow.txt names (`make test-fast` leaves them out). An entry that names a test no
    longer there fails the run where its whole module was collected, so that the list cannot quietly go stale."""
    entries = set(slow_entries(SLOW_LIST.read_text())) if SLOW_LIST.is_file() else set()
    used, files = set(), set()
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        files.add(module)
        for name in (module, item.nodeid.split("[", 1)[0], item.nodeid):
            if name in entries:
                item.add_marker(pytest.mark.slow)
                used.add(name)
    if any("::" in arg for arg in config.args) or hasattr(config, "workerinput"):
        # single tests were asked for (the rest of their modules was not collected); or this is an xdist worker,
        # where raising reads as an internal error: tests/test_fast_lane.py checks the names there
        return
    stale = sorted(e for e in entries - used if e.split("::", 1)[0] in files)
    if stale:
        raise pytest.UsageError(f"{SLOW_LIST.name} names tests that no longer exist: {', '.join(stale)}")
