"""Append-only result store (CSV or JSON Lines) that survives being killed: :class:`ResultStore`.

Each finished point is written and flushed to disk at once, so a sweep killed at any moment loses
at most the point it was measuring. Rows may have different columns (an OOM row has no latency):
a CSV is rewritten with the union header (atomically: temp file + rename) only when a row brings a
new column; otherwise the row is appended.

Damage is found, never read as data: on open every record is checked (a CSV record must parse and have
as many fields as the header, a quoted cell must be closed; a JSON line must parse and end with a line
break). Damaged records are moved, as written, to ``<store>.damaged`` beside it (with a warning naming
both files), the good ones are kept (rewritten atomically), and the damaged records' points are simply
measured again. One writer at a time: :meth:`ResultStore.lock` holds an exclusive ``flock`` on
``<store>.lock`` for a whole sweep, so two notebooks on the same sweep take turns instead of measuring
points twice or interleaving rows.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any, Iterable

import pandas as pd


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

    @contextlib.contextmanager
    def lock(self):
        """Hold this store exclusively inside the block (an ``flock`` on ``<store>.lock``; released when the
        process dies, so a killed run never leaves it locked). Waits, saying so, while another process holds it;
        the store is checked again once it is ours (the other run wrote to it)."""
        import fcntl

        with open(self.path.with_name(self.path.name + ".lock"), "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                warnings.warn(f"{self.path} is being written by another run; waiting for it to finish",
                              stacklevel=3)
                fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                self.check()
                yield self
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def check(self) -> int:
        """Move damaged records out of the store (see the module docstring); return how many were moved."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            self._header = []
            return 0
        text = self.path.read_bytes().decode("utf-8", errors="replace")
        good, bad = _split_csv(text) if self.format == "csv" else _split_jsonl(text)
        if bad:
            side = self.path.with_name(self.path.name + ".damaged")
            with open(side, "a") as f:
                f.write("".join(bad))
            self._write_atomically("".join(good))
            warnings.warn(f"{self.path}: {len(bad)} damaged record(s) (cut short, or a cell left open) moved to "
                          f"{side.name}; their points are measured again. Nothing else to do; delete "
                          f"{side.name} once you have looked at it.", stacklevel=3)
        self._header = self._read_header() if self.format == "csv" else []
        return len(bad)

    def _write_atomically(self, text: str) -> None:
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")  # one per process: never shared
        with open(tmp, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def _read_header(self) -> list[str]:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return []
        with open(self.path, newline="") as f:
            return next(csv.reader(f), [])

    def rows(self) -> list[dict[str, str]]:
        """Stored rows as dicts of canonical text (see :func:`key_value`), for matching grid points."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return []
        if self.format == "csv":
            with open(self.path, newline="") as f:
                return list(csv.DictReader(f))
        with open(self.path) as f:
            return [{k: key_value(v) for k, v in json.loads(line).items()} for line in f if line.strip()]

    def append(self, row: dict[str, Any]) -> None:
        """Write one row durably (flushed and fsynced before returning)."""
        if self.format == "jsonl":
            self._write(json.dumps(row, default=str) + "\n", mode="a")
            return
        new = [k for k in row if k not in self._header]
        if new and self._header:
            self._rewrite(self._header + new, self.rows() + [row])
            return
        if new:
            self._header = list(row)
            self._write_csv([row], header=True, mode="a")
            return
        self._write_csv([row], header=False, mode="a")

    def replace_rows(self, keep: Iterable[dict[str, Any]]) -> None:
        """Rewrite the store with only ``keep`` (used to drop failed points that are re-run)."""
        keep = list(keep)
        if self.format == "jsonl":
            self._write_atomically("".join(json.dumps(r, default=str) + "\n" for r in keep))
        else:
            self._rewrite(self._header, keep)

    def _rewrite(self, header: list[str], rows: list[dict[str, Any]]) -> None:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=header, restval="")
        writer.writeheader()
        writer.writerows({k: _cell(v) for k, v in r.items()} for r in rows)
        self._write_atomically(buffer.getvalue())
        self._header = header

    def _write_csv(self, rows, *, header: bool, mode: str) -> None:
        with open(self.path, mode, newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self._header, restval="")
            if header:
                writer.writeheader()
            writer.writerows({k: _cell(v) for k, v in r.items()} for r in rows)
            f.flush()
            os.fsync(f.fileno())

    def _write(self, text: str, *, mode: str) -> None:
        with open(self.path, mode) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def to_frame(self) -> pd.DataFrame:
        """All stored rows as a DataFrame (numbers parsed; empty cells are NaN)."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return pd.DataFrame()
        if self.format == "csv":
            return pd.read_csv(self.path)
        return pd.read_json(self.path, lines=True)


def _split_csv(text: str) -> tuple[list[str], list[str]]:
    """(good records, damaged records) of a CSV store's text, each record as written (header first in good)."""
    lines = text.splitlines(keepends=True)
    good, bad, header_fields = [], [], None
    start = 0
    while start < len(lines):
        # one record: as many physical lines as its quoted cells span
        end = start + 1
        while end <= len(lines):
            chunk = "".join(lines[start:end])
            try:
                record = next(csv.reader(io.StringIO(chunk), strict=True))
                complete = chunk.endswith("\n") and chunk.count('"') % 2 == 0
            except (csv.Error, StopIteration):
                record, complete = None, False
            if complete:
                break
            end += 1
        chunk = "".join(lines[start:min(end, len(lines))])
        if end > len(lines) or record is None:  # ran off the end: a cell left open or a torn last line
            bad.append(chunk)
            break
        if header_fields is None:
            header_fields = len(record)
            good.append(chunk)
        elif len(record) == header_fields:
            good.append(chunk)
        else:
            bad.append(chunk)
        start = end
    return good, bad


def _split_jsonl(text: str) -> tuple[list[str], list[str]]:
    """(good lines, damaged lines) of a JSON Lines store's text."""
    good, bad = [], []
    for line in text.splitlines(keepends=True):
        try:
            ok = line.endswith("\n") and isinstance(json.loads(line), dict)
        except json.JSONDecodeError:
            ok = False
        if line.strip():
            (good if ok else bad).append(line)
    return good, bad


def _cell(value: Any) -> Any:
    """CSV cell text: grid-like values in canonical form so that restarts match them."""
    if value is None or isinstance(value, (tuple, list)) or hasattr(value, "item"):
        return key_value(value)
    return value
