"""Where cnnlab reads and writes: a source checkout's folders, or the current working directory when cnnlab is
installed as a package (``pip install``, Colab), so that nothing is ever written into ``site-packages``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# A notebook's results folder, as pipeline.output_dir names it ("01_batch_size").
NOTEBOOK_FOLDER = re.compile(r"[0-9][0-9]_\w+")


def checkout() -> Path | None:
    """The source checkout cnnlab is imported from (the folder holding ``pyproject.toml`` and ``notebooks/``), or
    None for an installed package."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() and (root / "notebooks").is_dir() else None


def base() -> Path:
    """The checkout, else the current working directory."""
    return checkout() or Path.cwd()


# Folders a user may name in the environment; a relative one means "from where I started the run".
FOLDER_VARIABLES = ("CNNLAB_FIGURES_DIR", "CNNLAB_DATA")


def absolute_folders(environ=os.environ) -> None:
    """Make each of :data:`FOLDER_VARIABLES` set in ``environ`` absolute, against this process's working directory.
    Called once when a run starts (``cnnlab.pipeline``), before any kernel: a kernel runs in ``notebooks/`` and
    would read ``CNNLAB_FIGURES_DIR=myfigs`` as ``notebooks/myfigs``, while the pipeline and the report look in
    ``./myfigs``."""
    for name in FOLDER_VARIABLES:
        if environ.get(name):
            environ[name] = os.path.abspath(environ[name])


def figures_root() -> Path:
    """``$CNNLAB_FIGURES_DIR``, else ``figures/`` of the checkout, else ``./figures``; absolute (a relative
    ``$CNNLAB_FIGURES_DIR`` against the working directory)."""
    return Path(os.path.abspath(os.environ.get("CNNLAB_FIGURES_DIR") or base() / "figures"))


def notebook_folders(root: str | Path) -> list[Path]:
    """The notebooks' results folders in ``root`` (``root/<NN_name>/``), by name; empty when ``root`` is missing."""
    root = Path(root)
    return sorted(p for p in root.iterdir() if p.is_dir() and NOTEBOOK_FOLDER.fullmatch(p.name)) \
        if root.is_dir() else []


def reference_roots(root: str | Path) -> list[Path]:
    """Other machines' results under a figures root: every folder ``root/reference/<machine>/``, by name, each laid
    out as ``root`` itself (``<NN_name>/`` folders)."""
    reference = Path(root) / "reference"
    return sorted(p for p in reference.iterdir() if p.is_dir()) if reference.is_dir() else []


def data_root() -> Path:
    """``$CNNLAB_DATA``, else ``data/`` of the checkout, else ``./data``; absolute, as :func:`figures_root`."""
    return Path(os.path.abspath(os.environ.get("CNNLAB_DATA") or base() / "data"))


__all__ = ["FOLDER_VARIABLES", "NOTEBOOK_FOLDER", "absolute_folders", "base", "checkout", "data_root", "figures_root",
           "notebook_folders", "reference_roots"]
