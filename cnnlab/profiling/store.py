"""Append-only result store (CSV or JSON Lines) that survives being killed: :class:`ResultStore`.

Each finished point is written and flushed to disk at once, so a sweep killed at any moment loses
at most the point it was measuring. Rows may have different columns (an OOM row has no latency):
a CSV is rewritten with the union header (atomically: temp file + rename) only when a row brings a
new column; otherwise the row is appended.

Damage is found, never read as data, and costs only the lines it touches: on open the file is read line by
line (split on line feeds only), and a line is kept when it is valid UTF-8 without NUL bytes and (CSV) parses,
with the lines its quoted cells span, into exactly as many fields as the header, or (JSON Lines) parses as one
object ending with a line break. Anything else (a stray quote, a cell cut open, a torn last line, an invalid byte,
a block of NULs) moves only the lines it spans, as written, to ``<store>.damaged``: reading re-synchronises on the
next line, so a stray ``"`` never swallows the rows after it. A damaged header moves the whole file (its rows
cannot be read without it). The good records are kept (rewritten atomically), the damaged ones' points are
simply measured again, and a warning names both files. One writer at a time: :meth:`ResultStore.lock` holds an
exclusive ``flock`` on ``<store>.lock`` for a whole sweep, so two notebooks on the same sweep take turns instead
of measuring points twice or interleaving rows; :func:`remove_stores` (``make figures FRESH=1``) takes the same
locks. A store deleted or replaced while its writer runs is noticed at the next write or read, said, and written
whole again from the rows the writer holds.

The store also owns its name and its side files: :func:`store_file` names it after a digest of the settings it is
keyed by and of cnnlab's own source (:func:`code_digest`), in the ``stores/`` subfolder of the folder asked for, so
that a study's folder shows its results and not this housekeeping; :func:`write_env` keeps ``<store>.env.json``
(the environment and those settings); :class:`Attempts` keeps ``<store>.attempts`` (points started and not yet
stored, to recognise a point that kills its process); :func:`store_point` writes a point's rows. A write that fails
(a full disk) is raised again naming the file, the point and the free space. Every change to cnnlab starts new
stores, so old ones accumulate: :func:`remove_old_stores` (``make clean-stores``) deletes those of other code.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import glob
import hashlib
import io
import json
import math
import os
import re
import shutil
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable, Mapping

import pandas as pd

from cnnlab.profiling import progress
from cnnlab.profiling.environment import environment


def key_value(value: Any) -> str:
    """Canonical text of a grid value, identical before writing and after reading back (CSV or JSON)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (tuple, list)):
        return str([key_value(v) if not isinstance(v, (int, float, str)) else v for v in value])
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy / torch scalars
        try:
            value = value.item()
        except (TypeError, ValueError):
            pass
    return str(value)


class ResultStore:
    """Rows of one sweep in ``path`` (``.csv``, or ``.jsonl``/``.json`` for JSON Lines)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix not in (".csv", ".jsonl", ".json"):
            raise ValueError(f"store={str(path)!r}: the extension must be one of .csv, .jsonl, .json")
        self.format = "csv" if suffix == ".csv" else "jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Read only: the store is checked (and repaired) under the lock, never while another run may be writing.
        self._header: list[str] = self._read_header() if self.format == "csv" else []
        self._known: list[dict[str, str]] = []  # every row as written, from check() on: to rewrite a deleted store
        self._identity: tuple[int, int] | None = None  # (device, inode) of the file last written or checked

    @contextlib.contextmanager
    def lock(self):
        """Hold this store exclusively inside the block (an ``flock`` on ``<store>.lock``; released when the
        process dies, so a killed run never leaves it locked). Waits while another process holds it, saying so with
        that process's pid (also on ``make figures``' progress line); the store is checked again once it is ours (the
        other run wrote to it), and the part files of killed rewrites (``<store>.<pid>.tmp``) are removed."""
        with _flock(self.path.with_name(self.path.name + ".lock"), f"{self.path} is being written by another run"):
            self._remove_stray_parts()
            self.check()
            yield self

    def _remove_stray_parts(self) -> None:
        """Delete ``<store>.<pid>.tmp`` files: only the lock holder writes them, so any found now were left by a
        rewrite that was killed before its rename."""
        pattern = re.compile(re.escape(self.path.name) + r"\.\d+\.tmp")
        for part in self.path.parent.glob(self.path.name + ".*.tmp"):
            if pattern.fullmatch(part.name):
                part.unlink(missing_ok=True)

    def check(self) -> int:
        """Move damaged lines out of the store (see the module docstring); return how many were moved."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            self._header = []
            self._known = []
            self._identity = self._stat()
            return 0
        data = self.path.read_bytes()
        good, bad, header_lost = _split_csv(data) if self.format == "csv" else _split_jsonl(data)
        if bad:
            side = self.path.with_name(self.path.name + ".damaged")
            _add_damaged(side, bad)  # before the store is rewritten: a kill in between loses nothing
            self._write_atomically(b"".join(good))
            what = ("its header line is damaged, so none of its rows can be read: the whole file was moved"
                    if header_lost else f"{len(bad)} damaged line(s) (a stray byte, a cell cut open, a torn line, "
                    "invalid UTF-8 or NULs) moved")
            warnings.warn(f"{self.path}: {what} to {side.name}; their points are measured again. Nothing else to "
                          f"do; delete {side.name} once you have looked at it.", stacklevel=3)
        self._header = self._read_header() if self.format == "csv" else []
        self._known = self._read_rows()
        self._identity = self._stat()
        return len(bad)

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_dev, st.st_ino

    def _restore_if_vanished(self) -> None:
        """Write the store whole again (header and every row this writer knows) if it was deleted or replaced
        since this writer last wrote or checked it (a user deleting it, a clean-up ignoring the lock)."""
        identity = getattr(self, "_identity", None)
        if identity is None or self._stat() == identity:
            return
        gone = "deleted" if self._stat() is None else "replaced by another file"
        warnings.warn(f"{self.path} was {gone} while this run was writing it; written whole again with the "
                      f"{len(self._known)} row(s) this run holds", stacklevel=4)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.format == "jsonl":
            self._write_atomically("".join(json.dumps(r, default=str) + "\n" for r in self._known).encode())
        else:
            self._rewrite(self._header, self._known)

    def _write_atomically(self, data: bytes) -> None:
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")  # one per process: never shared
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # the store itself is untouched
            raise
        self._identity = self._stat()

    def _read_header(self) -> list[str]:
        """The header's cells (leniently decoded: a damaged store is checked, and named, under the lock)."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return []
        with open(self.path, encoding="utf-8", errors="replace", newline="") as f:
            return next(csv.reader(f), [])

    @contextlib.contextmanager
    def _open_text(self):
        """The store as UTF-8 text; an invalid byte is named with what to do (the writer's lock checks first)."""
        try:
            with open(self.path, encoding="utf-8", newline="" if self.format == "csv" else None) as f:
                yield f
        except UnicodeDecodeError as err:
            raise ValueError(f"{self.path} has an invalid byte at position {err.start}: it was damaged. Run the "
                             "sweep again (or ResultStore(path).lock()), which moves the damaged lines aside") from err

    def rows(self) -> list[dict[str, str]]:
        """Stored rows as dicts of canonical text (see :func:`key_value`), for matching grid points."""
        self._restore_if_vanished()
        return self._read_rows()

    def _read_rows(self) -> list[dict[str, str]]:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return []
        with self._open_text() as f:
            if self.format == "csv":
                return list(csv.DictReader(f))
            return [{k: key_value(v) for k, v in json.loads(line).items()} for line in f if line.strip()]

    def append(self, row: dict[str, Any]) -> None:
        """Write one row durably (flushed and fsynced before returning)."""
        self._restore_if_vanished()
        if self.format == "jsonl":
            self._write(json.dumps(row, default=str) + "\n", mode="a")
        else:
            new = [k for k in row if k not in self._header]
            if new and self._header:
                self._rewrite(self._header + new, self._read_rows() + [row])
            elif new:
                self._header = list(row)
                self._write_csv([row], header=True, mode="a")
            else:
                self._write_csv([row], header=False, mode="a")
        self._known.append({k: key_value(v) for k, v in row.items()})

    def replace_rows(self, keep: Iterable[dict[str, Any]]) -> None:
        """Rewrite the store with only ``keep`` (used to drop failed points that are re-run)."""
        keep = list(keep)
        if self.format == "jsonl":
            self._write_atomically("".join(json.dumps(r, default=str) + "\n" for r in keep).encode())
        else:
            self._rewrite(self._header, keep)
        self._known = [{k: key_value(v) for k, v in r.items()} for r in keep]

    def _rewrite(self, header: list[str], rows: list[dict[str, Any]]) -> None:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=header, restval="")
        writer.writeheader()
        writer.writerows({k: _cell(v) for k, v in r.items()} for r in rows)
        self._write_atomically(buffer.getvalue().encode())
        self._header = header

    def _write_csv(self, rows, *, header: bool, mode: str) -> None:
        with open(self.path, mode, newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=self._header, restval="")
            if header:
                writer.writeheader()
            writer.writerows({k: _cell(v) for k, v in r.items()} for r in rows)
            f.flush()
            os.fsync(f.fileno())
        self._identity = self._stat()

    def _write(self, text: str, *, mode: str) -> None:
        with open(self.path, mode, encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        self._identity = self._stat()

    def to_frame(self) -> pd.DataFrame:
        """All stored rows as a DataFrame (numbers parsed; empty cells are NaN)."""
        self._restore_if_vanished()
        if not self.path.exists() or self.path.stat().st_size == 0:
            return pd.DataFrame()
        with self._open_text() as f:
            return pd.read_csv(f) if self.format == "csv" else pd.read_json(f, lines=True)


def _lines(data: bytes) -> list[bytes]:
    """``data`` cut after each line feed (only there: a stray form feed or carriage return splits nothing)."""
    parts = data.split(b"\n")
    return [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _text(line: bytes) -> str | None:
    """A line as text, or None where it cannot be a record: invalid UTF-8, or a NUL (a zeroed block)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\0" in text else text


MAX_RECORD_LINES = 200  # the most lines one CSV record may span (a multi-line error message, quoted)


def _csv_record(lines: list[bytes], start: int, fields: int | None) -> tuple[int, list[str]] | None:
    """(end, cells) of the record that starts at ``lines[start]``, or None where none does: it must span whole
    lines, end with a line break, close its quotes and (after the header) have exactly ``fields`` cells."""
    chunk = ""
    for end in range(start + 1, min(len(lines), start + MAX_RECORD_LINES) + 1):
        text = _text(lines[end - 1])
        if text is None or not text.endswith("\n"):
            return None
        chunk += text
        if chunk.count('"') % 2:  # a quoted cell is still open: it may go on on the next line
            continue
        try:
            cells = next(csv.reader(io.StringIO(chunk), strict=True), [])
        except csv.Error:
            return None
        return (end, cells) if fields is None or len(cells) == fields else None
    return None


def _split_csv(data: bytes) -> tuple[list[bytes], list[bytes], bool]:
    """(good records, damaged lines, header lost) of a CSV store's bytes, each as written (header first in good).

    A line that starts no valid record is damaged alone and reading goes on at the next line, so damage costs
    only the lines it touches. A damaged header loses every line (nothing can be read without it)."""
    lines = _lines(data)
    good: list[bytes] = []
    bad: list[bytes] = []
    header = _csv_record(lines, 0, None) if lines else None
    if header is None or not header[1] or len(set(header[1])) != len(header[1]) or not all(header[1]):
        return [], [line for line in lines if line.strip()], True
    good.append(b"".join(lines[:header[0]]))
    start = header[0]
    while start < len(lines):
        if not lines[start].strip():  # an empty line holds nothing
            start += 1
            continue
        record = _csv_record(lines, start, len(header[1]))
        if record is None:
            bad.append(lines[start])
            start += 1
        else:
            good.append(b"".join(lines[start:record[0]]))
            start = record[0]
    return good, bad, False


def _split_jsonl(data: bytes) -> tuple[list[bytes], list[bytes], bool]:
    """(good lines, damaged lines, False) of a JSON Lines store's bytes."""
    good, bad = [], []
    for line in _lines(data):
        text = _text(line)
        try:
            ok = text is not None and text.endswith("\n") and isinstance(json.loads(text), dict)
        except json.JSONDecodeError:
            ok = False
        if line.strip():
            (good if ok else bad).append(line)
    return good, bad, False


def _add_damaged(side: Path, lines: list[bytes]) -> None:
    """Append the damaged ``lines`` to ``side`` (written whole through a part file), leaving out lines it already
    holds: a run killed after this write and before the store's rewrite finds the same lines again."""
    before = side.read_bytes() if side.exists() else b""
    held = set(_lines(before))
    new = [line if line.endswith(b"\n") else line + b"\n" for line in lines]
    new = [line for line in new if line not in held]
    if not new:
        return
    part = side.with_name(f"{side.name}.{os.getpid()}.tmp")
    try:
        with open(part, "wb") as f:
            f.write(before + (b"" if not before or before.endswith(b"\n") else b"\n") + b"".join(new))
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, side)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _flock(lock_path: Path, busy: str):
    """An exclusive ``flock`` on ``lock_path`` inside the block, waiting while another process holds it: a warning
    (in the notebook) and the progress line (:func:`cnnlab.profiling.progress.waiting`, which ``make figures``
    prints) say ``busy`` with the holder's pid, which each holder writes into the lock file. A lock file deleted and
    made again while this process waited (a clean-up) is locked again under its new inode, so two processes never
    each hold a different file of the same name."""
    import fcntl

    def take() -> bool:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    warned = False
    while True:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock_path, "a+")
        try:
            if not take():
                # polled, not blocked on: the line follows the holder when a third run takes its turn first
                with progress.waiting(_held_by(busy, lock_path)) as wait:
                    if not warned:
                        warnings.warn(f"{wait.what}; waiting for it to finish", stacklevel=4)
                        warned = True
                    while not take():
                        time.sleep(LOCK_POLL_S)
                        wait.say(_held_by(busy, lock_path))
            try:
                same = os.fstat(handle.fileno()).st_ino == os.stat(lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                with contextlib.suppress(OSError):  # the holder's pid is a courtesy to those who wait
                    handle.seek(0)
                    handle.truncate()
                    handle.write(f"{os.getpid()}\n")
                    handle.flush()
                try:
                    yield
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)
                return
            fcntl.flock(handle, fcntl.LOCK_UN)
        finally:
            handle.close()


LOCK_POLL_S = 0.1  # how often a run waiting for a lock tries it again (s)


def _held_by(busy: str, lock_path: Path) -> str:
    """``busy`` with the pid of the lock's holder, as it wrote it into ``lock_path``."""
    try:
        pid = lock_path.read_text().strip()
    except OSError:
        pid = ""
    return f"{busy} (pid {pid})" if pid.isdigit() else f"{busy} (pid not known yet)"


def remove_stores(folder: str | os.PathLike) -> None:
    """Delete ``folder`` and everything in it (``make figures FRESH=1``), each store under its lock: a sweep
    writing one of them is waited for (with a warning naming it), never deleted under."""
    folder = Path(folder)
    if not folder.exists():
        return
    with contextlib.ExitStack() as held:
        for lock in sorted(folder.rglob("*.lock")):
            store = lock.with_name(lock.name[:-len(".lock")])
            held.enter_context(_flock(lock, f"{store} is being written by a running sweep (a notebook?)"))
        shutil.rmtree(folder)


def _cell(value: Any) -> Any:
    """CSV cell text: grid-like values in canonical form so that restarts match them."""
    if value is None or isinstance(value, (tuple, list)) or hasattr(value, "item"):
        return key_value(value)
    return value


# ---------------------------------------------------------------- the store's name and side files


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """Digest of cnnlab's own source (every ``.py`` file of the package): a store measured by other code is
    another store. Over-inclusive on purpose: a change anywhere in cnnlab starts new stores."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha1()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _settings_dict(settings: Mapping[str, Any] | SimpleNamespace) -> dict[str, Any]:
    return dict(vars(settings)) if isinstance(settings, SimpleNamespace) else dict(settings)


STORE_FOLDER = "stores"  # the subfolder of a study's folder that holds its stores and their side files


def measured_on(settings: Mapping[str, Any] | SimpleNamespace | None = None) -> str:
    """The machine a sweep with ``settings`` measures on, by name: that of its ``device`` setting ("cuda:1": that GPU's
    name, "NVIDIA L4"; "cpu": the CPU model, whatever GPUs are beside it); without one, or "auto", the device "auto"
    picks (the current GPU, else the CPU). Part of a store's key (:func:`store_file`): a sweep resumed on another
    machine (a Colab session on another GPU, with its stores on Drive) starts its own store."""
    import torch

    from cnnlab.profiling.environment import cpu_model  # looked up at each call: a test stands in another machine

    device = _settings_dict(settings).get("device") if settings is not None else None
    text = "auto" if device is None or not str(device).strip() else str(device).strip()
    try:
        dev = torch.device(text) if text != "auto" else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    except (RuntimeError, TypeError):
        return text  # not a torch device: its name is all there is to tell it by
    if dev.type == "cpu":
        return cpu_model()
    if dev.type != "cuda":
        return str(dev)
    if not torch.cuda.is_available():
        return f"{dev} (CUDA is not available)"
    index = torch.cuda.current_device() if dev.index is None else dev.index
    return torch.cuda.get_device_name(index) if index < torch.cuda.device_count() else f"{dev} (no such GPU)"


def store_file(store: str | os.PathLike, settings: Mapping[str, Any] | SimpleNamespace) -> Path:
    """``<folder>/stores/<name>_<digest>.<ext>`` for ``store`` = ``<folder>/<name>.<ext>``: the digest covers every
    setting in ``settings``, :func:`code_digest` and the machine measured on (:func:`measured_on`), so each
    combination has its own file and a machine never adds its rows to another's. The stores and their side files go
    in a subfolder (:data:`STORE_FOLDER`), out of the way of the results a user browses in ``<folder>``."""
    path = Path(store)
    suffix = path.suffix or ".csv"
    key = {**_settings_dict(settings), "cnnlab_code": code_digest(), "measured_on": measured_on(settings)}
    digest = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return path.parent / STORE_FOLDER / f"{path.stem}_{digest}{suffix}"


@contextlib.contextmanager
def _naming_the_file(path: Path, point: dict[str, Any] | None):
    """An OSError inside the block (a full disk, a read-only folder) raised again naming ``path``, the point and
    the free space: the rows stored before are kept, and the point is measured on the next run."""
    try:
        yield
    except OSError as err:
        from cnnlab.data.storage import free_space  # lazy: cnnlab.data imports the profiling package

        what = "could not be written" + (f" for point {point}" if point is not None else "")
        raise OSError(err.errno, f"{path}: {what} ({err}; {free_space(path.parent)}). Every row stored before is "
                                 "kept; free some space and run again: what is missing is measured then") from err


def write_env(store_path: Path, settings: Mapping[str, Any] | SimpleNamespace | None = None) -> None:
    """Write ``<store>.env.json`` (environment, the machine measured on, and the settings the store is keyed by with
    :func:`code_digest`); on resume keep the first run's record and add this one if it differs. A damaged record is
    moved aside to ``<store>.env.json.damaged`` and written again. A new keyed store whose sweep has stores measured
    on other machines beside it says so in a warning naming them and both machines: their rows are not used here."""
    path = store_path.with_name(store_path.name + ".env.json")
    with _naming_the_file(path, None):
        env = environment()
        env["measured_on"] = measured_on(settings)
        if settings is not None:
            env["store_settings"] = _settings_dict(settings)
            env["cnnlab_code"] = code_digest()
        if path.exists():
            try:
                first = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:  # JSONDecodeError, UnicodeDecodeError: damaged
                first = None
            if not isinstance(first, dict):
                side = path.with_name(path.name + ".damaged")
                os.replace(path, side)
                warnings.warn(f"{path} was damaged (not a JSON object of UTF-8 text): moved to {side.name} and "
                              "written again for this run; the rows in the store are not affected", stacklevel=3)
            else:
                fields = ("device_name", "measured_on", "torch_version", "cuda_version", "driver_version",
                          "git_commit", "preset")
                changed = [f for f in fields if first.get(f) != env.get(f)]
                if changed:
                    # only a store named by its caller (settings=None) can be resumed on another machine: a keyed
                    # store's name holds the machine
                    mixed = (f"; its rows are now of two machines ({first.get('measured_on')}, then "
                             f"{env['measured_on']}): name a store per machine, or pass settings= to have it keyed"
                             if "measured_on" in changed and first.get("measured_on") else "")
                    warnings.warn(f"resuming {store_path} in a different environment ({', '.join(changed)} changed); "
                                  f"both are recorded in {path.name}{mixed}", stacklevel=3)
                    first.setdefault("resumed_runs", []).append(env)
                    path.write_text(json.dumps(first, indent=2, default=str))
                return
        if settings is not None:
            _say_other_machines(store_path, env)
        path.write_text(json.dumps(env, indent=2, default=str))


def _say_other_machines(store_path: Path, env: dict[str, Any]) -> None:
    """Warn, for a new store, of the stores beside it of the same sweep (name, settings, cnnlab code) measured on
    another machine: their rows are left where they are and every point is measured on this one."""
    name = re.fullmatch(r"(.+)_[0-9a-f]{8}(\.\w+)", store_path.name)
    if name is None:
        return
    same = json.loads(json.dumps(env["store_settings"], default=str))  # as a record holds them
    others = []
    for record in sorted(store_path.parent.glob(f"{glob.escape(name[1])}_*{name[2]}.env.json")):
        other = record.with_name(record.name[:-len(".env.json")])
        if other == store_path or not re.fullmatch(re.escape(name[1]) + r"_[0-9a-f]{8}" + re.escape(name[2]),
                                                   other.name):
            continue
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("cnnlab_code") == env["cnnlab_code"] and \
                data.get("store_settings") == same and data.get("measured_on") not in (None, env["measured_on"]):
            others.append(f"{other.name} (measured on {data['measured_on']})")
    if others:
        warnings.warn(f"this run measures on {env['measured_on']}, so {store_path.name} is a new store: the same "
                      f"sweep's store(s) of another machine are not used here, never mixed with this one's rows: "
                      f"{'; '.join(others)}. Every point is measured on {env['measured_on']}; each machine keeps its "
                      "own store", stacklevel=4)


class Attempts:
    """``<store>.attempts``: one JSON line per point started, so that a point whose process keeps dying (and so
    never stores a row) is recognised. Only the points not stored are ever looked up."""

    def __init__(self, store: Path):
        self.path = store.with_name(store.name + ".attempts")

    def _keys(self) -> list[str]:
        if not self.path.exists():
            return []
        return [line.strip() for line in self.path.read_text(errors="replace").splitlines() if line.strip()]

    @staticmethod
    def _text(point: Mapping[str, Any]) -> str:
        return json.dumps({k: key_value(v) for k, v in sorted(point.items())})

    def count(self, point: Mapping[str, Any]) -> int:
        """How many times ``point`` was started and did not end (its process died)."""
        return self._keys().count(self._text(point))

    def note(self, point: Mapping[str, Any]) -> None:
        """Note that ``point`` starts now (durably: if the process dies next, the next run knows); a marker that
        cannot be written is an OSError naming this file, the point and the free space."""
        with _naming_the_file(self.path, dict(point)):
            self._add(point)

    def _add(self, point: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)  # the folder may have been deleted under the sweep
        with open(self.path, "a") as f:
            f.write(self._text(point) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def forget(self, point: Mapping[str, Any], *, every: bool = False) -> None:
        """Remove the last attempt of ``point`` (it was stopped by the user: not a death), or ``every`` one (it was
        stored: it ended). Written in place: a full disk can still shrink a file, and a lost marker only means a
        point is tried once more."""
        keys = self._keys()
        text = self._text(point)
        if text in keys:
            if every:
                kept = [k for k in keys if k != text]
            else:
                kept = keys[::-1]
                kept.remove(text)
                kept.reverse()
            try:
                self.path.write_text("".join(k + "\n" for k in kept))
            except OSError:
                pass

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


def store_point(results: ResultStore, attempts: Attempts, point: dict[str, Any], rows: list[dict]) -> None:
    """Store a point's rows, then forget its attempt (it ended: it did not kill the process). A store that cannot
    be written is no death either: the attempt is forgotten and the error names the store and the free space."""
    try:
        with _naming_the_file(results.path, point):
            for row in rows:
                results.append(row)
    finally:  # stored, or a write error: neither is the death of the process
        attempts.forget(point, every=True)


# ---------------------------------------------------------------- stores of older code (make clean-stores)


STORE_NAME = re.compile(r".+_[0-9a-f]{8}\.(csv|jsonl|json)")  # a store as store_file names it


def remove_old_stores(folder: str | os.PathLike) -> list[Path]:
    """Delete, under ``folder`` (all its subfolders), every store whose ``<store>.env.json`` names another
    ``cnnlab_code`` than :func:`code_digest`, with all its side files, each store under its lock (a sweep writing it
    is waited for); return the stores removed. Such a store is never read again: any change to cnnlab starts new
    stores. A store without a readable record (its code unknown) is kept and named in a warning."""
    return list(_remove_old_stores([Path(folder)])[0])


def clean_old_stores() -> None:
    """``make clean-stores``: :func:`remove_old_stores` on this computer's notebook folders (``figures/<NN_name>/``
    of :func:`cnnlab.paths.figures_root`; the committed ``figures/reference/`` is left alone), printing one line per
    store removed and a summary; warnings (a store waited for, stores of unknown code) are printed as one line each."""
    from cnnlab import paths

    with warnings.catch_warnings():  # restores showwarning on the way out
        warnings.showwarning = lambda message, *_: print(f"warning: {message}", file=sys.stderr, flush=True)
        removed, kept = _remove_old_stores(paths.notebook_folders(paths.figures_root()))
    for store, size in removed.items():
        print(f"removed {store} ({_mib(size)}, with its side files)")
    print(f"removed {len(removed)} stores of older cnnlab code ({_mib(sum(removed.values()))}); kept {len(kept)}")


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def _remove_old_stores(folders: Iterable[Path]) -> tuple[dict[Path, int], list[Path]]:
    """(bytes freed per store removed, stores kept) of :func:`remove_old_stores` on each of ``folders``."""
    removed: dict[Path, int] = {}
    kept: list[Path] = []
    unknown: list[Path] = []
    for store in (store for folder in folders for store in _stores_under(folder)):
        code = _recorded_code(store)
        if code is not None and code != code_digest():
            try:
                removed[store] = _remove_store(store)
            except OSError as err:  # the store and its record are removed last: they are as they were
                warnings.warn(f"could not remove {store} ({err}); it is kept, with its record, for the next "
                              "make clean-stores", stacklevel=3)
                kept.append(store)
        else:
            kept.append(store)
            if code is None:
                unknown.append(store)
    if unknown:
        warnings.warn(f"kept {len(unknown)} store(s) of unknown cnnlab code (no readable cnnlab_code in their "
                      f"<store>.env.json): {', '.join(map(str, unknown))}; delete them by hand if not needed",
                      stacklevel=3)
    return removed, kept


def _stores_under(folder: Path) -> list[Path]:
    """Every store under ``folder``: the files named as :func:`store_file` names them, and the stores of the
    environment records found (a sweep whose points were all skipped leaves a record and no store)."""
    named = {p for p in folder.rglob("*") if STORE_NAME.fullmatch(p.name) and p.is_file()}
    recorded = {p.with_name(p.name[:-len(".env.json")]) for p in folder.rglob("*.env.json")}
    return sorted(named | recorded)


def _recorded_code(store: Path) -> str | None:
    """The ``cnnlab_code`` recorded in ``<store>.env.json``; None where none can be read (no record, a damaged one,
    a store keyed by no settings)."""
    try:
        record = json.loads(store.with_name(store.name + ".env.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # ValueError: JSONDecodeError, UnicodeDecodeError
        return None
    code = record.get("cnnlab_code") if isinstance(record, dict) else None
    return code if isinstance(code, str) else None


def _remove_store(store: Path) -> int:
    """Delete ``store`` and its side files and folders (``<store>.*``: lock, attempts, records, damaged lines, part
    files; a DDP sweep's ``<store>.runs/`` logs) under its lock, waiting for a sweep that writes it; return the bytes
    freed. A symbolic link is unlinked, never followed (what it points to is someone else's). The side folders and
    files go first, then the store, its environment record last: an error (raised) leaves a store that the next
    clean-up still knows to be of older code, never one of "unknown code"."""
    record = store.with_name(store.name + ".env.json")
    with _flock(store.with_name(store.name + ".lock"), f"{store} is being written by a running sweep (a notebook?)"):
        found = [p for p in store.parent.iterdir() if p.name.startswith(store.name + ".") and p != record]
        folders = [p for p in found if p.is_dir() and not p.is_symlink()]
        freed = 0
        for p in folders + [p for p in found if p not in folders] + [store, record]:
            with contextlib.suppress(FileNotFoundError):  # deleted by hand meanwhile
                size = _bytes(p)
                if p in folders:
                    shutil.rmtree(p)  # unlinks the links inside, never follows them
                else:
                    p.unlink()
                freed += size
    return freed


def _bytes(path: Path) -> int:
    """Bytes in ``path``: a file's size, or the sizes of the files in a folder; a link counts as itself."""
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size
    return sum((Path(root) / name).lstat().st_size for root, _, names in os.walk(path) for name in names)
