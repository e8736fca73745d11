"""Run the notebooks headless: ``python -m cnnlab.pipeline [--notebook 01] [--preset quick]``.

Each notebook is executed by papermill into ``build/notebooks/`` with ``CNNLAB_PRESET`` set; it writes its
figures (PNG and SVG) and tidy CSVs into ``figures/<notebook-name>/`` through :func:`output_dir`. The executed
copies keep their figures (Jupyter's inline backend): ``make report`` links them as the notebooks a reader opens.
A failing notebook stops the run with its name and the failing cell; what the notebooks before it wrote stays.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import shutil
import sys
import time
from pathlib import Path

from cnnlab import paths

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
    Python literal is that literal, anything else the text. The notebook checks the names and the values."""
    params = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip().isidentifier():
            raise SystemExit(f"parameter {pair!r} is not NAME=VALUE (e.g. repeats=3 or batch_sizes=[1,4])")
        try:
            params[name.strip()] = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            params[name.strip()] = text.strip()
    return params


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


def run(notebooks: list[Path], preset: str, *, fresh: bool = False, parameters: dict | None = None) -> int:
    import papermill
    from papermill.exceptions import PapermillExecutionError

    BUILD.mkdir(parents=True, exist_ok=True)
    os.environ["CNNLAB_PRESET"] = preset
    for nb in notebooks:
        if fresh:
            shutil.rmtree(output_dir(nb.stem))  # stored sweep points would otherwise be reused
        start = time.perf_counter()
        print(f"[cnnlab] running {nb.name} (preset {preset}) ...", flush=True)
        try:
            with _environment(MPLBACKEND=INLINE_BACKEND):  # the kernel inherits this process's environment
                papermill.execute_notebook(str(nb), str(BUILD / nb.name), cwd=str(NOTEBOOKS), kernel_name="python3",
                                           parameters=parameters or {}, progress_bar=False, log_output=False)
        except PapermillExecutionError as err:
            print(f"[cnnlab] FAILED: {nb.name}, cell {err.exec_count}: {err.ename}: {err.evalue}\n"
                  f"  executed copy with the traceback: {BUILD / nb.name}", file=sys.stderr)
            return 1
        print(f"[cnnlab] {nb.name} done in {time.perf_counter() - start:.0f} s; "
              f"outputs in {output_dir(nb.stem)}", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", "-n", help="run only this notebook (e.g. 01 or 01_batch_size)")
    parser.add_argument("--preset", default=os.environ.get("CNNLAB_PRESET", "quick"),
                        choices=["auto", "quick", "standard", "paper"])
    parser.add_argument("--fresh", action="store_true",
                        help="delete each notebook's stored results first instead of resuming from them")
    parser.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE",
                        help="a notebook parameter (repeatable), e.g. -p repeats=3 -p 'batch_sizes=[1, 4]'")
    args = parser.parse_args(argv)
    return run(find_notebooks(args.notebook), args.preset, fresh=args.fresh, parameters=parse_parameters(args.param))


if __name__ == "__main__":
    sys.exit(main())
