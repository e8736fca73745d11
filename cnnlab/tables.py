"""Result tables as a reader sees them: numbers rounded by their unit, the reason beside the status.

The CSVs keep full precision; only what is shown is rounded (:func:`readable`, called by
:func:`cnnlab.report.show` in every notebook and by the explorer's tables). The rule is read from the unit
suffix of a tidy column name (:data:`cnnlab.plotting.UNITS`, anywhere in the name: ``latency_ms_p10``,
``avg_mem_mib_low``):

- times (``_ms``, ``_us``, ``_ns``, ``_s``), rates (``_per_s``) and unitless ratios: 3 significant digits
  (23.190336 -> 23.2, 0.0012345 -> 0.00123), never fewer than the whole number (1234.5 -> 1235);
- memory and sizes (``_mib``, ``_gib``, ``_mb``, ``_gb``): 4 significant digits (23.19, 1234);
- percentages and percentage points (``_pct``, ``_pp``): one decimal (97.3);
- counts (an integer column, or a float column whose values are all whole, as a count with a missing value is):
  whole numbers (1,024 -> 1024, never 1024.0); ``_bytes`` too;
- a missing value: empty.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from cnnlab.plotting import UNITS

PERCENT = {"pct", "pp"}
MEMORY = {"mib", "gib", "mb", "gb", "kib", "kb"}
WHOLE = {"bytes"}
# Longest suffix first ("items_per_s" before "s"); any "<what>_per_s" rate reads as a rate.
_UNIT_RE = re.compile(r"_(" + "|".join(sorted(map(re.escape, set(UNITS) | PERCENT | MEMORY), key=len, reverse=True))
                      + r")(?=_|$)")
# Columns that say why a row has no values: shown right after ``status``.
REASONS = ("error", "note", "skip_reason", "reason")


def significant(value: float, digits: int) -> str:
    """``value`` with ``digits`` significant digits, but every digit of its whole part (1234.5 -> "1235" for 3),
    no exponent between 1e-4 and 1e15; "" for NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    value = float(value)
    if value == 0 or math.isinf(value):
        return f"{value:g}"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude < -4 or magnitude >= 15:
        return f"{value:.{digits}g}"
    decimals = max(digits - 1 - magnitude, 0)
    return f"{value:.{decimals}f}"


def rule(column: str) -> tuple[str, int]:
    """How ``column``'s numbers are shown: ("sig", n) for n significant digits, ("fixed", n) for n decimals, or
    ("whole", 0), from the unit in its name (module docstring)."""
    match = _UNIT_RE.search(column)
    unit = match.group(1) if match else None
    if re.search(r"_per_s(?=_|$)", column):
        return "sig", 3
    if unit in PERCENT:
        return "fixed", 1
    if unit in MEMORY:
        return "sig", 4
    if unit in WHOLE:
        return "whole", 0
    return "sig", 3


def format_column(series: pd.Series) -> pd.Series:
    """``series`` (a numeric column) as text by :func:`rule`; other columns as they are, missing values empty."""
    if pd.api.types.is_bool_dtype(series) or not pd.api.types.is_numeric_dtype(series):
        return series.astype(object).where(series.notna(), "")
    values = series.astype(float)
    kind, digits = rule(str(series.name))
    present = values.dropna()
    whole = pd.api.types.is_integer_dtype(series) or (len(present) and (present == present.round()).all()
                                                       and kind != "fixed" and present.abs().max() < 1e15)
    if kind == "whole" or whole:
        return values.map(lambda v: "" if math.isnan(v) else f"{v:.0f}").astype(object)
    if kind == "fixed":  # (round(-0.03, 1) is -0.0, which is false: shown as 0.0)
        return values.map(lambda v: "" if math.isnan(v) else f"{round(v, digits) or 0.0:.{digits}f}").astype(object)
    return values.map(lambda v: significant(v, digits)).astype(object)


def reasons_after_status(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its reason columns (:data:`REASONS`, a row's ``error``) moved right after ``status``, where a
    skipped or failed row says why beside the word (they used to sit last, off-screen); ``df`` as it is without a
    ``status`` column."""
    cols = list(df.columns)
    if "status" not in cols:
        return df
    why = [c for c in REASONS if c in cols]
    rest = [c for c in cols if c not in why]
    at = rest.index("status") + 1
    return df[rest[:at] + why + rest[at:]]


def readable(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` for reading, not for computing: columns empty in every row left out, reasons beside ``status``
    (:func:`reasons_after_status`), every number as text rounded by its unit (:func:`format_column`), missing
    values empty. A table whose column labels are not all names (a pivot's two levels) keeps its columns."""
    if not all(isinstance(c, str) for c in df.columns):
        return df
    shown = reasons_after_status(df.loc[:, [c for c in df.columns if df[c].notna().any()] if len(df) else df.columns])
    out = shown.astype(object)
    for i in range(shown.shape[1]):  # (by position: a table may repeat a column name)
        out.iloc[:, i] = format_column(shown.iloc[:, i]).to_numpy()
    return out


def to_html(df: pd.DataFrame, max_rows: int | None = None) -> str:
    """``df`` as :func:`readable` shows it, as an HTML table: numbers right-aligned, text (a name, a reason) left
    with its heading, a reason at least 18 em wide (a squeezed table wrapped it a word a line), every value and
    label escaped, each text in full (pandas' own HTML cut it at 50 characters), at most
    ``max_rows`` rows (default: pandas' ``display.max_rows``)."""
    shown = readable(df)
    max_rows = max_rows or pd.get_option("display.max_rows")
    if shown is df:  # (a pivot's two-level columns: as pandas shows them)
        with pd.option_context("display.max_colwidth", None):
            return df._repr_html_()
    text = [c for c in shown.columns if pd.api.types.is_bool_dtype(df[c]) or not pd.api.types.is_numeric_dtype(df[c])]
    try:
        styler = (shown.style.format(escape="html").format_index(escape="html", axis=0)
                  .format_index(escape="html", axis=1).set_properties(subset=text, **{"text-align": "left"})
                  .set_properties(subset=[c for c in REASONS if c in shown], **{"min-width": "18em"})
                  .set_table_styles({c: [{"selector": "th", "props": "text-align: left"}] for c in text},
                                    overwrite=False))
        return styler.to_html(max_rows=max_rows)
    except ImportError:  # no jinja2 (a bare install): pandas' own table, all right-aligned
        with pd.option_context("display.max_colwidth", None):
            return shown.to_html(max_rows=max_rows, notebook=True)


__all__ = ["format_column", "readable", "reasons_after_status", "rule", "significant", "to_html"]
