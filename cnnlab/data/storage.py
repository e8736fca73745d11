"""Where data lives, and downloads that either finish verified or leave nothing behind, one process at a time per
dataset (:func:`dataset_lock`)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import shutil
import sys
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


@contextlib.contextmanager
def dataset_lock(root: Path, dataset: str):
    """Hold ``dataset``'s lock in the data folder ``root`` inside the block: one process (or thread) downloads,
    extracts or caches a dataset while another that needs it waits, saying so on stderr with the holder's pid, and
    then finds the first one's result there. Two at once otherwise both fail (one writes the ``.part`` file the
    other is renaming, or renames its extracted folder onto the other's).

    An exclusive ``flock`` on ``root/.<dataset>.lock``, the approach of ``cnnlab.profiling.store``'s store locks:
    released when the process dies, so a killed download never leaves it held. The holder deletes the file
    before unlocking, so the data folder keeps no lock files; a waiter that then holds the deleted file locks the
    path's new file instead. Where the file cannot be made or locked (a read-only data folder, a file system
    without ``flock``) the block runs unlocked: there is nothing to write, or no way to take turns."""
    import fcntl

    path = Path(root) / f".{dataset}.lock"
    said = False
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(path, "a+")
        except OSError:
            handle = None
        if handle is None:  # a read-only data folder: nothing can be written there, so nothing to take turns on
            yield
            return
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
            except BlockingIOError:
                if not said:
                    holder = _holder(handle)
                    print(f"{dataset}: another process{f' (pid {holder})' if holder.isdigit() else ''} is "
                          f"downloading or preparing it in {path.parent}; waiting for it to finish, then using its "
                          "copy", file=sys.stderr, flush=True)
                    said = True
                fcntl.flock(handle, fcntl.LOCK_EX)
                locked = True
            except OSError:  # a file system without flock
                locked = False
            try:
                same = locked and os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same or not locked:
                try:
                    if locked:  # the pid a waiter names
                        handle.seek(0)
                        handle.truncate()
                        handle.write(str(os.getpid()))
                        handle.flush()
                    yield
                finally:
                    remove_quietly(path)  # before unlocking: a waiter then finds the file gone and makes a new one
                    if locked:
                        fcntl.flock(handle, fcntl.LOCK_UN)
                return
            fcntl.flock(handle, fcntl.LOCK_UN)  # the file was deleted while this one waited: lock the new one


def _holder(handle, tries: int = 20) -> str:
    """The pid the lock's holder wrote in it ("" where none came): it writes it just after locking, so a process
    that found the lock taken a moment earlier waits up to ``tries`` x 10 ms for it."""
    import time

    for _ in range(tries):
        handle.seek(0)
        if text := handle.read().strip():
            return text
        time.sleep(0.01)
    return ""


def download(url: str, dest: Path, md5: str, *, dataset: str, expected: str, network: bool = True) -> Path:
    """Download ``url`` to ``dest`` and verify its MD5; return ``dest``. Callers hold the dataset's
    :func:`dataset_lock`, so a second process finds the first one's verified ``dest`` and returns it.

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
    """Extract ``archive`` so that ``into/top_level`` appears whole or not at all; return that path. Callers hold the
    dataset's :func:`dataset_lock`, so a second process finds the first one's folder and returns it.

    Only what tarfile's ``filter="data"`` allows is extracted: a member with an absolute path, a path or a link
    that leads out of the folder, or a device raises :class:`DamagedFileError` naming the archive, and nothing is
    kept. Pythons before 3.11.4 have no such filter (Debian 12's 3.11.2): there :func:`_extract_checked` applies
    its rules itself."""
    target = into / top_level
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(dir=into) as tmp:
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):  # the documented test for PEP 706's filters
                try:
                    tar.extractall(tmp, filter="data")
                except tarfile.FilterError as err:
                    raise DamagedFileError(f"{archive}: {err}; nothing was extracted from it") from None
            else:
                _extract_checked(tar, Path(tmp), archive)
        os.rename(Path(tmp) / top_level, target)
    return target


def _extract_checked(tar: tarfile.TarFile, dest: Path, archive: Path) -> None:
    """Extract ``tar`` into ``dest`` by the rules of tarfile's ``filter="data"``, for Pythons that lack it.

    Each member is checked just before it is extracted, against what the members before it made there (a link,
    then a file written through it): a regular file, folder or link is extracted if its path and, for a link,
    its target stay inside ``dest`` once every link on the way is followed; an absolute path or link target, and any
    other kind of member (a device, a FIFO) are refused with :class:`DamagedFileError`. Where the filter strips a
    leading "/" and extracts the file inside, this refuses it: no dataset archive has one. Owners, modes and times
    are not applied (``set_attrs=False``): files get this process's default mode, never set-uid or executable."""
    root = os.path.realpath(dest)
    for member in tar:
        why = _unsafe(member, root)
        if why:
            raise DamagedFileError(f"{archive}: member {member.name!r} {why}; nothing was extracted from it")
        tar.extract(member, root, set_attrs=False)


def _unsafe(member: tarfile.TarInfo, root: str) -> str | None:
    """Why extracting ``member`` into the folder ``root`` (a real path) would be unsafe, or None."""
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        return "is a device or other special file"
    if os.path.isabs(member.name):
        return "has an absolute path"
    if not _inside(os.path.join(root, member.name), root):
        return "would be extracted outside the destination"
    if member.issym() or member.islnk():
        # a symbolic link's target is relative to its own folder, a hard link's to the archive's root
        base = os.path.join(root, os.path.dirname(member.name)) if member.issym() else root
        if os.path.isabs(member.linkname) or not _inside(os.path.join(base, member.linkname), root):
            return f"links to {member.linkname!r}, outside the destination"
    return None


def _inside(path: str, root: str) -> bool:
    """Whether ``path``, with every link on the way followed, is ``root`` or below it."""
    return os.path.commonpath([os.path.realpath(path), root]) == root
