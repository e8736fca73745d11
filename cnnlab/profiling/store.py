"""Append-only result store (CSV or JSON Lines) that survives being killed: :class:`ResultStore`.

Each finished point is written and flushed to disk at once, so a sweep killed at any moment loses
at most the point it was measuring. Rows may have different columns (an OOM row has no latency):
a CSV is rewritten with the union header (atomically: temp file + rename) only when a row brings a
new column; otherwise the row is appended. A torn last line (killed mid-write) is dropped on open.
"""

from __future__ import annotations

import csv
import json
import math
import os
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
        self._drop_torn_tail()
        self._header: list[str] = self._read_header() if self.format == "csv" else []

    def _drop_torn_tail(self) -> None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):
            self.path.write_bytes(data[: data.rfind(b"\n") + 1])

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
            tmp = self.path.with_suffix(self.path.suffix + ".tmp")
            tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in keep))
            os.replace(tmp, self.path)
        else:
            self._rewrite(self._header, keep)

    def _rewrite(self, header: list[str], rows: list[dict[str, Any]]) -> None:
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=header, restval="")
            writer.writeheader()
            writer.writerows({k: _cell(v) for k, v in r.items()} for r in rows)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
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


def _cell(value: Any) -> Any:
    """CSV cell text: grid-like values in canonical form so that restarts match them."""
    if value is None or isinstance(value, (tuple, list)) or hasattr(value, "item"):
        return key_value(value)
    return value
