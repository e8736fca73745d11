"""Where data lives, and downloads that either finish verified or leave nothing behind."""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

CONNECT_TIMEOUT_S = 5.0  # an offline machine must fail fast, not hang


class DatasetUnavailableError(RuntimeError):
    """A real dataset is neither on disk nor downloadable. The message says where to put the files."""


def data_root(root: str | os.PathLike | None = None) -> Path:
    """Directory holding datasets and checkpoints.

    Order: the ``root`` argument, ``$CNNLAB_DATA``, the ``data/`` folder of the source checkout cnnlab is
    imported from, else ``./data`` (a pip-installed cnnlab, e.g. on Colab: never inside site-packages).
    """
    from cnnlab import paths

    return Path(root) if root is not None else paths.data_root()


def md5sum(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, dest: Path, md5: str, *, dataset: str, expected: str) -> Path:
    """Download ``url`` to ``dest`` and verify its MD5; return ``dest``.

    The file is written to ``dest.part`` and renamed only once verified, so an interrupted or failed
    download never leaves a file that looks complete. On a network error raises
    :class:`DatasetUnavailableError` naming the URL, the expected files and where to put them.
    """
    if dest.exists() and md5sum(dest) == md5:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=CONNECT_TIMEOUT_S) as response, open(part, "wb") as out:
            shutil.copyfileobj(response, out, length=1 << 20)
    except (urllib.error.URLError, OSError, TimeoutError) as err:
        part.unlink(missing_ok=True)
        raise DatasetUnavailableError(
            f"cannot download {dataset}: {err}.\n"
            f"  URL: {url}\n"
            f"  expected: {expected}\n"
            f"  put {dest.name} (md5 {md5}) in {dest.parent}/ (or set CNNLAB_DATA to a folder holding it),\n"
            f"  or pass synthetic=True to use labelled synthetic data of the same shape."
        ) from None
    got = md5sum(part)
    if got != md5:
        part.unlink(missing_ok=True)
        raise DatasetUnavailableError(f"{dataset}: {url} gave md5 {got}, expected {md5}; nothing was kept")
    part.rename(dest)
    return dest


def extract(archive: Path, into: Path, top_level: str) -> Path:
    """Extract ``archive`` so that ``into/top_level`` appears whole or not at all; return that path."""
    target = into / top_level
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(dir=into) as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        os.rename(Path(tmp) / top_level, target)
    return target
