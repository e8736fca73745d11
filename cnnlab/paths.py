"""Where cnnlab reads and writes: a source checkout's folders, or the current working directory when cnnlab is
installed as a package (``pip install``, Colab), so that nothing is ever written into ``site-packages``; and how the
report and the explorer read a results folder (:func:`read_result`), whose files may come from anyone.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

# A notebook's results folder, as pipeline.output_dir names it ("01_batch_size").
NOTEBOOK_FOLDER = re.compile(r"[0-9][0-9]_\w+")
# The name the report and the explorer give the results of the machine they run on (figures_root's own).
THIS_MACHINE = "this machine"
# Reference folders that would read as this machine (the explorer called it "this computer" before): shown as
# "reference/<name>", a name no folder can have, so that they never take this machine's place (issue 44, item 10).
LOOKS_LOCAL = {THIS_MACHINE, "this computer"}
# The most a reader of a results folder takes from one file, by kind (issue 44, item 2: a link to /dev/zero
# exhausted memory). Each is far above what cnnlab writes (figures up to 60 KB, tables and claims up to 12 KB,
# environment records 1 KB in the committed H100 reference) and small enough to hold in memory: a figure is
# embedded in the report, base64, once per machine and notebook, so 4 MiB keeps the page an attachment; a CSV is
# parsed by pandas at a few times its size.
FIGURE_MAX_BYTES = 4 * 2**20
TABLE_MAX_BYTES = 32 * 2**20
RECORD_MAX_BYTES = 2**20


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
    """The notebooks' results folders in ``root`` (``root/<NN_name>/``), by name; empty when ``root`` is missing. A
    link is left out, with one line (:func:`_folders`)."""
    return _folders(Path(root), lambda p: NOTEBOOK_FOLDER.fullmatch(p.name))


def reference_roots(root: str | Path) -> list[Path]:
    """Other machines' results under a figures root: every folder ``root/reference/<machine>/``, by name, each laid
    out as ``root`` itself (``<NN_name>/`` folders). A link (``reference/`` itself or a machine's) is left out, with
    one line (:func:`_folders`)."""
    reference = Path(root) / "reference"
    if reference.is_symlink():
        skipped(reference, LINK)
        return []
    return _folders(reference, lambda p: True)


def _folders(root: Path, wanted) -> list[Path]:
    """The folders in ``root`` that are ``wanted``, by name: never a link to one (its files could be anywhere, and a
    results folder is read only where it lies), which is named on stderr instead."""
    found = []
    for p in sorted(root.iterdir()) if root.is_dir() else []:
        if p.is_dir() and wanted(p):
            if p.is_symlink():
                skipped(p, LINK)
            else:
                found.append(p)
    return found


def machine_folders(root: str | Path) -> dict[str, Path]:
    """Every machine's results under a figures root, by the name the report and the explorer show: this machine's
    (:data:`THIS_MACHINE`: ``root`` itself), then each of :func:`reference_roots` by its folder's name, a folder
    named like this machine (:data:`LOOKS_LOCAL`) as "reference/<name>" (never this machine's place)."""
    root = Path(root)
    found = {THIS_MACHINE: root}
    for folder in reference_roots(root):
        local = " ".join(folder.name.split()).casefold() in LOOKS_LOCAL
        found[f"reference/{folder.name}" if local else folder.name] = folder
    return found


# ------------------------------------------------------------------------------------------ reading a results folder
# A results folder is data from a stranger (a reference machine's, copied or cloned; git keeps symlinks): a file is
# read only where it lies, as a regular file, and only up to a cap (issue 44, items 1 and 2).
LINK = "is a symbolic link: a results folder is read only where it lies (a link could show any file of this computer)"
NOT_REGULAR = "is not a regular file (a folder, a device such as /dev/zero, a FIFO or a socket)"


class Refused(OSError):
    """A file of a results folder that is not read: a link, not a regular file, outside its folder, or over the cap.
    ``str()`` says why; ``path`` is the file."""

    def __init__(self, path: Path, why: str):
        super().__init__(why)
        self.path = Path(path)


def result_file(folder: str | Path, name: str, max_bytes: int | None) -> Path:
    """``folder/name`` where a reader of a results folder may read it: every part of ``name`` (``"claims.csv"``,
    ``"stores/x.env.json"``) inside ``folder`` and no link, the file a regular file of at most ``max_bytes`` bytes
    (None: any size, for a file only linked to). Raises :class:`Refused` (an OSError) saying why not, and
    FileNotFoundError where it is absent. ``folder`` itself is trusted (:func:`notebook_folders` lists no link)."""
    folder, relative = Path(folder), Path(name)
    if relative.is_absolute() or not relative.parts or ".." in relative.parts:
        raise Refused(folder / name, f"is not a name inside {folder}")
    path = folder
    for part in relative.parts:
        path = path / part
        found = os.lstat(path)
        if stat.S_ISLNK(found.st_mode):
            raise Refused(path, LINK)
    if not stat.S_ISREG(found.st_mode):
        raise Refused(path, NOT_REGULAR)
    if max_bytes is not None and found.st_size > max_bytes:
        raise Refused(path, f"is {found.st_size:,} bytes, over the {max_bytes:,} a results folder's "
                            f"{path.suffix or 'file'} may hold here (cnnlab.paths caps each kind)")
    return path


def read_result(folder: str | Path, name: str, max_bytes: int) -> bytes:
    """The bytes of ``folder/name`` (:func:`result_file`), at most ``max_bytes``: opened without following a link
    and without waiting on a FIFO, checked again once open (the file may have been swapped), and never read past the
    cap (a file that grows). Raises :class:`Refused` or FileNotFoundError as :func:`result_file`."""
    path = result_file(folder, name, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:  # ELOOP: it became a link since it was checked
        raise Refused(path, LINK) if os.path.islink(path) else err
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise Refused(path, NOT_REGULAR)
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise Refused(path, f"grew past the {max_bytes:,} bytes a results folder's {path.suffix or 'file'} may hold")
    return data


def listable(path: str | Path) -> bool:
    """Whether ``path`` in a results folder may be listed or linked (:func:`result_file` in its own folder, any size:
    the cap is checked where it is read); one that may not is named on stderr (:func:`skipped`), an absent one not."""
    path = Path(path)
    try:
        result_file(path.parent, path.name, None)
        return True
    except FileNotFoundError:
        return False
    except OSError as err:
        skipped(path, str(err))
        return False


_SKIPPED: set[tuple[str, str]] = set()


def skipped(path: str | Path, why: str) -> None:
    """One line on stderr naming a file of a results folder that is left out and why; once per file and reason
    (the explorer reads a table again on each view)."""
    if (str(path), why) not in _SKIPPED:
        _SKIPPED.add((str(path), why))
        print(f"cnnlab: {path} is skipped: it {why}", file=sys.stderr)


def data_root() -> Path:
    """``$CNNLAB_DATA``, else ``data/`` of the checkout, else ``./data``; absolute, as :func:`figures_root`."""
    return Path(os.path.abspath(os.environ.get("CNNLAB_DATA") or base() / "data"))


__all__ = ["FIGURE_MAX_BYTES", "FOLDER_VARIABLES", "LOOKS_LOCAL", "NOTEBOOK_FOLDER", "RECORD_MAX_BYTES", "Refused",
           "TABLE_MAX_BYTES", "THIS_MACHINE", "absolute_folders", "base", "checkout", "data_root", "figures_root",
           "listable", "machine_folders", "notebook_folders", "read_result", "reference_roots", "result_file",
           "skipped"]
