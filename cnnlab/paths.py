"""Where cnnlab reads and writes: a source checkout's folders, or the current working directory when cnnlab is
installed as a package (``pip install``, Colab), so that nothing is ever written into ``site-packages``.
"""

from __future__ import annotations

import os
from pathlib import Path


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


def data_root() -> Path:
    """``$CNNLAB_DATA``, else ``data/`` of the checkout, else ``./data``."""
    return Path(os.environ.get("CNNLAB_DATA") or base() / "data")


__all__ = ["base", "checkout", "data_root", "figures_root"]
