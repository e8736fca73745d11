"""Files a results folder may hold that no reader of it may follow or read (issue 44, items 1 and 2), and a guard
that turns reading one by mistake into a failed test, not a hung test run or a machine out of memory."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import resource
import stat
import threading
from pathlib import Path

KINDS = ("zero", "fifo", "folder")  # what :func:`plant` makes besides links


def plant(path: Path, kind: str) -> None:
    """Put at ``path`` (replacing a file there) a link to /dev/zero ("zero"), a FIFO with no writer ("fifo") or a
    folder ("folder")."""
    if path.is_file() or path.is_symlink():
        path.unlink()
    if kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        raise ValueError(f"kind={kind!r}; valid: {', '.join(KINDS)}")


def link(path: Path, target: str | Path) -> None:
    """Replace ``path`` with a symbolic link to ``target``."""
    if path.is_file() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)


def environ_marker() -> bytes:
    """The longest entry of this process's /proc/self/environ (what a link to it would show), b"" where none."""
    try:
        entries = Path("/proc/self/environ").read_bytes().split(b"\0")
    except OSError:
        return b""
    return max(entries, key=len, default=b"")


def held(page: str) -> bytes:
    """Everything a page holds: its text and the decoded bytes of each ``data:`` URI in it."""
    blobs = [base64.b64decode(b) for b in re.findall(r"data:[\w/+.-]+;base64,([A-Za-z0-9+/=]*)", page)]
    return page.encode() + b"\n".join(blobs)


@contextlib.contextmanager
def guard(fifos=(), after_s: float = 5.0, headroom: int = 2 << 30):
    """Within it: at most ``headroom`` more bytes of address space (reading /dev/zero ends in MemoryError, not in
    swap), and each of ``fifos`` that a reader still waits on after ``after_s`` seconds is released (opened for
    writing and closed: the reader sees its end). Yields the list of FIFOs that had to be released."""
    released: list[Path] = []
    stop = threading.Event()

    def release():
        wait = after_s
        while not stop.wait(wait):
            wait = 0.2
            for fifo in fifos:
                try:
                    if not stat.S_ISFIFO(os.lstat(fifo).st_mode):  # (a link to /dev/zero opens for writing)
                        continue
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # succeeds only while a reader waits
                    released.append(Path(fifo))
                except OSError:
                    pass

    size = int(re.search(r"VmSize:\s+(\d+) kB", Path("/proc/self/status").read_text())[1]) * 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = size + headroom if hard == resource.RLIM_INFINITY else min(size + headroom, hard)
    watcher = threading.Thread(target=release, daemon=True)
    watcher.start()
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield released
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        stop.set()
        watcher.join()
