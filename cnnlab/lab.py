"""`make lab`: JupyterLab on the checkout, its printed URL opening ``notebooks/00_quickstart.ipynb``.

``python -m cnnlab.lab [jupyter lab options]`` starts ``jupyter lab`` serving the checkout (``build/notebooks/``, the
executed copies, and ``figures/`` are one level above ``notebooks/``), with the file browser's housekeeping files
hidden and ``--allow-root`` where it runs as root (Docker, Colab-like containers). It passes JupyterLab's output
through and, under the URLs JupyterLab prints, one line: ``start with notebooks/00_quickstart.ipynb: <URL>``.

Why not ``--ServerApp.default_url``: JupyterLab, started as ``jupyter lab``, sets the server's ``default_url`` to its
own (``LabApp.default_url``, ``/lab``), so the URL it prints is ``/lab?token=...`` and opens the last workspace (the
Launcher at first). ``--LabApp.default_url`` is the one the printed URL and a browser it opens follow.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

START = "notebooks/00_quickstart.ipynb"  # where a newcomer starts
HIDDEN = ["__pycache__", "*.pyc", ".ipynb_checkpoints", "conftest.py", "*.lock", "*.attempts", "*.tmp"]
ROOT = Path(__file__).resolve().parents[1]
# The URLs JupyterLab prints once it serves, each on its own line ("Or copy and paste one of these URLs:").
URLS = re.compile(r"Or copy and paste one of these URLs:\n((?:[ \t]+\S+\n)+)")


def command(args: list[str], root: Path = ROOT) -> list[str]:
    """The ``jupyter lab`` command line: ``root`` served, opened at :data:`START`, then ``args`` (e.g. ``--port=8890
    --no-browser``). An option of ``args`` replaces this one's of that name (JupyterLab refuses one given twice:
    "root_dir only accepts one value")."""
    ours = [f"--ServerApp.root_dir={root}", f"--LabApp.default_url=/lab/tree/{START}",
            f"--ContentsManager.hide_globs={json.dumps(HIDDEN)}"]
    given = {a.split("=", 1)[0] for a in args}
    cmd = [sys.executable, "-m", "jupyterlab"] + [o for o in ours if o.split("=", 1)[0] not in given]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return cmd + list(args)


def start_line(output: str) -> str | None:
    """The line to print under the URLs JupyterLab printed in ``output`` (None before it printed them): where to
    start, with the URL that opens it (127.0.0.1's where there is one: it works where ``localhost`` is not set)."""
    found = URLS.search(output)
    if not found:
        return None
    urls = found[1].split()
    url = next((u for u in urls if "://127.0.0.1" in u), urls[0])
    return f"    start with {START}: {url}"


def main(argv: list[str] | None = None) -> int:
    """Run JupyterLab (:func:`command`) until it stops; its exit status."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # its Ctrl-C question ("Shut down ... (y/[n])?") shows at once
    proc = subprocess.Popen(command(sys.argv[1:] if argv is None else argv), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env)
    # Ctrl-C in the terminal reaches JupyterLab too (one process group): it asks, and a second Ctrl-C stops it. This
    # process only passes its output on, until it ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Passed on beside: JupyterLab's kernels write to the same pipe and may outlive it for a moment, so its end, not
    # the pipe's, ends this process.
    reader = threading.Thread(target=_pass_on, args=(proc.stdout.fileno(), sys.stdout.buffer), daemon=True)
    reader.start()
    status = proc.wait()
    reader.join(timeout=2)  # what it wrote last
    return status


def _pass_on(fd: int, out) -> None:
    """Copy what JupyterLab writes to ``fd`` to ``out`` as it comes, and :func:`start_line` once, under its URLs."""
    seen, told = "", False
    while chunk := os.read(fd, 65536):
        out.write(chunk)
        if not told:
            seen += chunk.decode(errors="replace")
            line = start_line(seen)
            if line:
                out.write(f"{line}\n".encode())
                told, seen = True, ""
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
