"""Where data lives, and downloads that either finish verified or leave nothing behind."""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import warnings
from pathlib import Path

CONNECT_TIMEOUT_S = 5.0  # an offline machine must fail fast, not hang


class DatasetUnavailableError(RuntimeError):
    """A real dataset is neither on disk nor downloadable. The message says where to put the files."""


class DamagedFileError(RuntimeError):
    """A file cnnlab wrote or extracted earlier cannot be read. The message names it and says what to do."""


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


def verify_md5(path: Path, md5: str | None, *, remedy: str) -> None:
    """Return None if ``path``'s MD5 is ``md5``; else raise :class:`DamagedFileError` naming the file, both
    checksums and ``remedy``. A file with no published checksum (``md5`` None) is refused too: this is the check
    that runs before a file is unpickled, and an unknown file is exactly what must not be unpickled."""
    got = read_or_explain(path, md5sum, remedy=remedy)
    if md5 is None:
        raise DamagedFileError(f"{path} has no published md5 to check it against, so cnnlab does not unpickle it: "
                               f"{remedy}")
    if got != md5:
        raise DamagedFileError(f"{path} has md5 {got}, not the published {md5}: it is damaged or was replaced, so "
                               f"cnnlab does not unpickle it: {remedy}")


def free_space(path: Path) -> str:
    """The free space on the file system that holds ``path`` (or its nearest existing parent), as text such as
    "12.5 MiB free on /data" (KiB below 1 MiB); "free space unknown" where it cannot be read."""
    folder = Path(path).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return "free space unknown"
    amount = f"{free / 2**20:.1f} MiB" if free >= 2**20 else f"{free / 2**10:.0f} KiB"
    return f"{amount} free on {folder}"


def save_or_warn(obj, path: Path, *, failure: str, consequence: str) -> bool:
    """``torch.save(obj, path)`` through ``path.part`` and a rename; return True if saved.

    Where it cannot be written (a full disk, a read-only folder) warn "``failure`` ``path`` (the error, the free
    space): ``consequence``", leave no ``.part`` file, and return False: the caller still has ``obj``, which for a
    trained model is hours of work. torch raises RuntimeError there, not OSError ("unexpected pos", "open file
    failed"), so both are caught.
    """
    import torch

    part = path.with_name(path.name + ".part")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(obj, part)
        part.rename(path)
        return True
    except (OSError, RuntimeError) as err:
        remove_quietly(part)
        error = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"
    # measured here, not inside except: there the traceback keeps torch's writer, and so the deleted part file's
    # space, alive, and a full disk would read 0 free even after the clean-up
    warnings.warn(f"{failure} {path} ({error}; {free_space(path)}): {consequence}. "
                  "Free some space or set CNNLAB_DATA to a writable folder with room.", stacklevel=3)
    return False


def remove_quietly(path: Path) -> None:
    """Delete ``path`` if it exists and can be deleted: clean-up must never hide the error that called for it
    (on a read-only data folder even deleting a file that is not there fails)."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def download(url: str, dest: Path, md5: str, *, dataset: str, expected: str, network: bool = True) -> Path:
    """Download ``url`` to ``dest`` and verify its MD5; return ``dest``.

    The file is written to ``dest.part`` and renamed only once verified, so an interrupted or failed
    download never leaves a file that looks complete. On a network error raises
    :class:`DatasetUnavailableError` naming the URL, the expected files and where to put them; a ``dest``
    already there with another MD5 (a truncated or damaged copy) is named as such. ``network=False``: never
    download, only verify what is there.
    """
    damaged = ""
    if dest.exists():
        got = md5sum(dest)
        if got == md5:
            return dest
        damaged = (f"  {dest} is there but its md5 is {got}, not {md5}: it is truncated or damaged; delete it "
                   f"(cnnlab downloads it again) or replace it with a good copy.\n")
    if not network:
        raise DatasetUnavailableError(f"{dataset}: download=False and no verified {dest.name} in {dest.parent}/.\n"
                                      + (damaged or f"  get it from {url} (md5 {md5}).\n"))
    part = dest.with_name(dest.name + ".part")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=CONNECT_TIMEOUT_S) as response, open(part, "wb") as out:
            shutil.copyfileobj(response, out, length=1 << 20)
    except (urllib.error.URLError, OSError, TimeoutError) as err:
        remove_quietly(part)
        raise DatasetUnavailableError(
            f"cannot download {dataset}: {err}.\n"
            f"  URL: {url}\n"
            f"  expected: {expected}\n" + damaged +
            f"  put {dest.name} (md5 {md5}) in {dest.parent}/ (or set CNNLAB_DATA to a folder holding it),\n"
            f"  or pass synthetic=True to use labelled synthetic data of the same shape."
        ) from None
    got = md5sum(part)
    if got != md5:
        remove_quietly(part)
        raise DatasetUnavailableError(f"{dataset}: {url} gave md5 {got}, expected {md5}; nothing was kept")
    part.rename(dest)
    return dest


def read_or_explain(path: Path, read, *, remedy: str):
    """``read(path)``, or, when the file is truncated or damaged (unpickling, a torch archive that does not open,
    a short read), a :class:`DamagedFileError` naming ``path`` and ``remedy`` (what to do about it)."""
    try:
        return read(path)
    except (pickle.UnpicklingError, EOFError, RuntimeError, ValueError, KeyError, OSError) as err:
        first = (str(err).splitlines() or [""])[0][:160]  # torch's own advice (weights_only=False) is not ours
        raise DamagedFileError(f"{path} cannot be read ({type(err).__name__}: {first}); it is truncated or "
                               f"damaged: {remedy}") from err


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
