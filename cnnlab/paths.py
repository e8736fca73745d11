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


def figures_root() -> Path:
    """``$CNNLAB_FIGURES_DIR``, else ``figures/`` of the checkout, else ``./figures``."""
    return Path(os.environ.get("CNNLAB_FIGURES_DIR") or base() / "figures")


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
    """``$CNNLAB_DATA``, else ``data/`` of the checkout, else ``./data``."""
    return Path(os.environ.get("CNNLAB_DATA") or base() / "data")


__all__ = ["NOTEBOOK_FOLDER", "base", "checkout", "data_root", "figures_root", "notebook_folders", "reference_roots"]
