"""`make test` runs every notebook through nbval (``--nbval-lax``: cells must run, outputs are not compared). This
hook also fails a cell whose output a reader should not see: the C++ profiler's ``USDT ... profiler_start`` lines,
or a stray ``Out[...]`` of paths or matplotlib artists (:func:`cnnlab.report.output_problems`). It reads the
outputs nbval has already collected (``item.test_outputs``), so it costs no second run of the notebooks.

What C++ code writes to file descriptor 2 reaches a notebook's outputs only through ipykernel's fd capture, which
ipykernel switches off when it finds PYTEST_CURRENT_TEST in its environment (and nbval sends the kernel's own stderr
to /dev/null): the kernels nbval starts here get pytest's environment without that one variable, so that they
show such lines as Jupyter and papermill do.
"""

import os

import pytest


def pytest_configure(config):
    try:
        import nbval.kernel
    except ImportError:
        return
    start = nbval.kernel.start_new_kernel  # nbval 0.11: RunningKernel() calls this module-level function

    def start_new_kernel(*args, **kwargs):
        kwargs.setdefault("env", {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"})
        return start(*args, **kwargs)

    nbval.kernel.start_new_kernel = start_new_kernel


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    outputs = getattr(item, "test_outputs", None)  # only nbval's cells (IPyNbCell) have these
    if outputs:
        from cnnlab.report import output_problems

        problems = output_problems(outputs)
        if problems:
            pytest.fail(f"{item.name} of {item.path.name}: " + "; ".join(problems), pytrace=False)
    return result
