"""Explore every result table under ``figures/``: pick a study, a table, a metric, an x axis, a hue and a facet,
and put this machine beside a reference machine (``notebooks/explore.ipynb``).

Two layers, so that the first is tested without widgets:

- the pure part: :func:`find_tables` lists the tidy CSVs of every machine (this machine's
  ``figures/<NN_name>/`` and each ``figures/reference/<machine>/<NN_name>/``), :func:`load_table` reads one,
  :func:`metrics`, :func:`x_axes` and :func:`groupings` say which columns can be plotted how, :func:`first_view`
  picks a first :class:`View` (this machine beside a GPU reference where there is one, :func:`beside_default`),
  :func:`select` keeps the rows and columns a view shows, :func:`plot` draws it (one column of panels per machine,
  one row per facet value), :func:`ratios` divides the first machine's metric by the second's at the points both
  measured, :func:`render` does all of that for a view, and
  :func:`environment_summary` says what each machine is (from an ``environment.json`` beside the CSVs, else the
  sweeps' ``*.env.json`` records in ``stores/``, else the CSVs' own ``device_name`` and version columns);
- :class:`Explorer`: ipywidgets wired to :func:`render` (JupyterLab, Colab), and :func:`show`, which displays it,
  or a static figure with a message where widgets cannot be shown.

A results folder may come from anyone: every file is read through :func:`cnnlab.paths.read_result` (no link, only
a regular file, at most its kind's cap), and a file left out is named in one line on stderr (:func:`_read`).
"""

from __future__ import annotations

import functools
import html
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from cnnlab import claims as _claims
from cnnlab import paths, plotting, studies, tables
from cnnlab.profiling.store import STORE_FOLDER, STORE_NAME

THIS_MACHINE = paths.THIS_MACHINE  # (a reference folder of that name is shown as "reference/this machine")
NONE = "(none)"  # the dropdown entry for "no hue", "no facet", "no second machine"
# Columns that record how a point was run, not what it measured or where: never offered as metric, x or hue.
BOOKKEEPING = {"point_time_s", "finished_utc", "error", "note", "status"}
# The metric a table opens with, when it has one (the papers' figures plot these).
PREFERRED_METRICS = ("latency_ms_median", "throughput_items_per_s", "time_per_batch_ms", "wall_time_s",
                     "throughput_samples_per_s", "accuracy_pct", "peak_mem_alloc_mib", "speedup_vs_gemm")
MAX_GROUPS = 12  # a hue or facet with more values than this is unreadable
LOG_SPAN = 10  # a metric whose values span more than this many times opens on a log axis
# What the environment summary shows, in this order (keys of cnnlab.profiling.environment()).
ENVIRONMENT_FIELDS = ("device_name", "cpu_model", "gpu_names", "torch_version", "cuda_version", "python_version",
                      "cnnlab_version", "git_commit", "preset", "date_utc")


# ---------------------------------------------------------------------------------------------- finding tables
def find_tables(root: str | Path | None = None) -> pd.DataFrame:
    """Every result table under ``root`` (default :func:`cnnlab.paths.figures_root`): one row per CSV with
    ``machine`` (:data:`THIS_MACHINE` or a reference's name, :func:`cnnlab.paths.machine_folders`), ``study`` (the
    notebook's stem, e.g. "01_batch_size"), ``table`` (the CSV's stem) and ``path``. Sweep stores (in the ``stores/``
    subfolder, not searched) and ``claims.csv`` are left out (the stores' rows are saved again as the tables; claims
    are read by :func:`claims_side_by_side`), and so is a file that may not be read (:func:`cnnlab.paths.listable`:
    a link, not a regular file), named on stderr."""
    root = Path(root) if root is not None else paths.figures_root()
    rows = []
    for machine, base in paths.machine_folders(root).items():  # (a folder named "this machine" is not this one)
        for study_dir in paths.notebook_folders(base):
            for csv in sorted(study_dir.glob("*.csv")):
                # a store beside the tables (STORE_NAME: raw points, saved again as a table) is where cnnlab kept
                # them before the stores/ subfolder: a reference machine's folder copied then may hold some
                if csv.name != "claims.csv" and not STORE_NAME.fullmatch(csv.name) and paths.listable(csv):
                    rows.append({"machine": machine, "study": study_dir.name, "table": csv.stem, "path": csv})
    return pd.DataFrame(rows, columns=["machine", "study", "table", "path"])


def summary(index: pd.DataFrame, root: str | Path | None = None) -> str:
    """One line per machine: how many tables of how many studies it has; or what to do when there are none."""
    root = Path(root) if root is not None else paths.figures_root()
    if index.empty:
        return (f"No result tables under {root}: run `make figures` (or any study notebook) first, or point "
                "CNNLAB_FIGURES_DIR at a folder of results.")
    lines = [f"Result tables under {root}:"]
    for machine, part in index.groupby("machine", sort=False):
        lines.append(f"  {machine}: {len(part)} tables of {part['study'].nunique()} studies "
                     f"({', '.join(dict.fromkeys(part['study']))})")
    return "\n".join(lines)


def _read(folder: Path, name: str, max_bytes: int) -> bytes:
    """``folder/name``'s bytes by :func:`cnnlab.paths.read_result`; a file refused (a link, not a regular file, over
    ``max_bytes``) is named on stderr, once, and raised as the :class:`cnnlab.paths.Refused` (an OSError) it is."""
    try:
        return paths.read_result(folder, name, max_bytes)
    except paths.Refused as err:
        paths.skipped(folder / name, str(err))
        raise


def load_table(path: str | Path) -> pd.DataFrame:
    """The CSV at ``path`` (at most :data:`cnnlab.paths.TABLE_MAX_BYTES`, never through a link: :func:`_read`), read
    again only when the file changes (a notebook may be rewriting it)."""
    path = Path(path)
    return _read_csv(str(path), os.lstat(path).st_mtime_ns).copy()


@functools.lru_cache(maxsize=128)
def _read_csv(path: str, mtime_ns: int) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(_read(Path(path).parent, Path(path).name, paths.TABLE_MAX_BYTES)))


def study_paper(study: str) -> str:
    """"01_batch_size" -> "paper 001: <title>", or "" for a folder that is not one of cnnlab's studies."""
    paper = studies.paper_of(study)
    return f"paper {paper}: {studies.PAPERS[paper]}" if paper else ""


# ------------------------------------------------------------------------------------------------ column roles
def _is_note(column: str) -> bool:
    return column in BOOKKEEPING or column.endswith("_missing_reason")


def _is_number(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


@functools.lru_cache(maxsize=1)
def settings() -> frozenset[str]:
    """Names of columns that say how a point was run, not what it measured: every study's declared parameters that
    are not grid axes (``warmup``, ``repeats``, ``images``...; :mod:`cnnlab.studies`), and the thread count a row
    records (``cpu_threads``)."""
    from cnnlab import studies

    names = {"cpu_threads", "threads"}
    for name in studies.STUDIES:
        names |= {n for n, p in studies.load(name).PARAMETERS.declared.items() if not p.axis}
    return frozenset(names)


def metrics(df: pd.DataFrame) -> list[str]:
    """Measured numeric columns with at least one value: never a column that says where or how a row was measured
    (the grid point, :func:`parameters`, e.g. ``batch_size`` in a batch-size sweep; a setting, :func:`settings`, e.g.
    ``warmup``, even where two runs differ in it: such columns are x axes, hues or facets, not results); the
    paper's usual metrics first, then those whose name carries a unit (``latency_ms_p90``), then the rest, each
    group in the table's order."""
    how = set(parameters(df)) | settings()
    found = [c for c in df.columns if not _is_note(c) and _is_number(df[c]) and df[c].notna().any() and c not in how]
    with_unit = [c for c in found if plotting.label_for(c).endswith(")")]
    first = [c for c in PREFERRED_METRICS if c in found]
    return list(dict.fromkeys(first + with_unit + found))


def x_axes(df: pd.DataFrame) -> list[str]:
    """Columns with at least two different values (anything a metric can be plotted against), batch sizes
    first, then the table's order."""
    varying = [c for c in df.columns if not _is_note(c) and df[c].nunique(dropna=True) >= 2]
    return sorted(varying, key=lambda c: "batch_size" not in c)


def groupings(df: pd.DataFrame, max_values: int = MAX_GROUPS) -> list[str]:
    """Columns that can split a plot into hues or facets: every categorical column (text, true/false) with at most
    ``max_values`` different values, and settings (:func:`parameters`) or integers (``num_workers``) with 2 to
    ``max_values``; never measured values of a float column (a latency with few rows is not a category)."""
    grid = set(parameters(df))
    return [c for c in df.columns if not _is_note(c) and 1 <= df[c].nunique(dropna=True) <= max_values
            and (not _is_number(df[c]) or ((c in grid or pd.api.types.is_integer_dtype(df[c]))
                                           and df[c].nunique(dropna=True) >= 2))]


def parameters(df: pd.DataFrame) -> list[str]:
    """The columns that say where a row was measured: a sweep's settings stand before its ``status`` column;
    a table without one has its text columns as parameters."""
    if "status" in df.columns:
        return list(df.columns[: list(df.columns).index("status")])
    return [c for c in df.columns if not _is_note(c) and not _is_number(df[c])]


# -------------------------------------------------------------------------------------------------------- views
@dataclass(frozen=True)
class View:
    """What to show: a table of a study, a metric against an x axis, split by hue and facet (None: not split),
    for one or two machines side by side, with the metric on a log axis or not."""
    study: str
    table: str
    metric: str | None
    x: str | None
    hue: str | None = None
    facet: str | None = None
    machines: tuple[str, ...] = (THIS_MACHINE,)
    log: bool = False


def defaults(df: pd.DataFrame) -> dict:
    """A first choice of metric, x, hue and facet for ``df`` (None where there is nothing to choose): a preferred
    metric that is not a setting; among the rows that have it, the batch size (else the first numeric setting,
    else the first setting) that varies as x, and the next settings or names that vary as hue and facet (a facet
    of at most 4 panels); ``log``: the metric on a log axis where its values span decades (:func:`wide`)."""
    found = metrics(df)
    params = parameters(df)
    metric = next((c for c in found if c not in params), found[0] if found else None)
    measured = df[df[metric].notna()] if metric else df
    xs = [c for c in x_axes(measured) if c != metric]
    varying = [c for c in params if c in xs]
    x = next((c for c in varying if "batch_size" in c), None) or \
        next((c for c in varying if _is_number(df[c])), None) or \
        (varying[0] if varying else next((c for c in xs if c not in found), xs[0] if xs else None))
    split = [c for c in groupings(measured) if measured[c].nunique(dropna=True) >= 2]  # a split that splits
    others = [c for c in dict.fromkeys(params + split) if c in split and c not in (x, metric)
              and (c in params or not _is_number(df[c]))]  # a count such as `batches` is no first choice
    hue = others[0] if others else None
    facet = next((c for c in others[1:] if measured[c].nunique() <= 4), None)
    return {"metric": metric, "x": x, "hue": hue, "facet": facet, "log": wide(df, metric)}


def wide(df: pd.DataFrame, metric: str | None) -> bool:
    """Whether ``metric``'s positive values in ``df`` span more than :data:`LOG_SPAN` times (1.7 ms beside 86 ms):
    then it opens on a log axis, where a linear one would leave the small values on the floor."""
    if not metric or metric not in df or not _is_number(df[metric]):
        return False
    positive = df[metric][df[metric] > 0]
    return bool(len(positive) and positive.max() > LOG_SPAN * positive.min())


def frames(index: pd.DataFrame, study: str, table: str, machines) -> dict[str, pd.DataFrame]:
    """``{machine: table}`` for each of ``machines`` that has ``study``'s ``table`` and can read it (others are
    left out: a table a running notebook is writing right now may be empty or cut short)."""
    out = {}
    for machine in machines:
        rows = index[(index["machine"] == machine) & (index["study"] == study) & (index["table"] == table)]
        try:
            if len(rows):
                out[machine] = load_table(rows["path"].iloc[0])
        except (OSError, ValueError):  # pandas' EmptyDataError and ParserError are ValueErrors
            continue
    return out


def first_view(index: pd.DataFrame) -> View:
    """The view a new explorer opens with: this machine (else the first reference) beside :func:`beside_default`
    (if any), the first table that both have (else the first of the first machine) whose :func:`defaults` find a
    metric and an x axis, with those defaults (a log axis where the metric spans decades on the machines shown)."""
    if index.empty:
        raise ValueError("no result tables to show")
    names = list(dict.fromkeys(index["machine"]))
    first = THIS_MACHINE if THIS_MACHINE in names else names[0]
    second = beside_default(index, first)
    machines = (first,) + ((second,) if second else ())
    rows = index[index["machine"] == first]
    last = index[index["machine"] == machines[-1]]
    everywhere = pd.Series(list(zip(rows["study"], rows["table"])), index=rows.index).isin(
        set(zip(last["study"], last["table"])))
    for _, row in pd.concat([rows[everywhere], rows[~everywhere]]).iterrows():
        try:
            df = load_table(row["path"])
        except (OSError, ValueError):  # a table being written by a running notebook, or damaged: the next one
            continue
        choice = defaults(df)
        if choice["metric"] is not None and choice["x"] is not None:
            shown = frames(index, row["study"], row["table"], machines)  # (the panels share their y scale)
            choice["log"] = wide(pd.concat(shown.values(), ignore_index=True) if shown else df, choice["metric"])
            return View(row["study"], row["table"], machines=machines, **choice)
    raise ValueError("no result table has a numeric metric that varies along some column")


def machine_environment(index: pd.DataFrame, machine: str) -> dict[str, str]:
    """What ``machine`` measured on (:func:`environment_summary`), from the first of its studies that records a
    device; ``{}`` when none does."""
    for study in dict.fromkeys(index.loc[index["machine"] == machine, "study"]):
        found = environment_summary(_machine_dir(index, machine, study))
        if found.get("device_name"):
            return found
    return {}


def is_gpu(environment: dict) -> bool:
    """Whether an :func:`environment_summary` is a GPU's: it names the GPUs the run saw (``gpu_names``)."""
    return bool(environment.get("gpu_names"))


def beside_default(index: pd.DataFrame, first: str = THIS_MACHINE) -> str | None:
    """The machine a new view puts beside ``first``: the first other machine (by name) measured on a GPU whose device
    is not ``first``'s own (a GPU beside this machine is what the papers were measured on), else the first other
    machine; None when there is no other."""
    others = [m for m in dict.fromkeys(index["machine"]) if m != first]
    own = machine_environment(index, first).get("device_name")
    gpus = [m for m in others if is_gpu(env := machine_environment(index, m)) and env.get("device_name") != own]
    return (gpus or others or [None])[0]


# Columns that say which machine measured a row, not where: never a key for putting two machines' points together.
MACHINE_COLUMNS = {"device", "device_name", "machine"}


def ratio_keys(this: pd.DataFrame, other: pd.DataFrame, metric: str, also=()) -> list[str]:
    """The columns that say which point a row of ``this`` and of ``other`` is, in both tables: their
    :func:`parameters` (a sweep's grid, before ``status``; in a table without one, its text columns less the
    settings, :func:`settings`, which may differ between machines) and the columns of ``also`` (a view's x, hue and
    facet), never ``metric`` or a column naming the machine (:data:`MACHINE_COLUMNS`)."""
    grid = parameters(this) if "status" in this.columns else [c for c in parameters(this) if c not in settings()]
    shared = [c for c in dict.fromkeys([*grid, *(c for c in also if c)]) if c in other.columns and c in this.columns]
    return [c for c in shared if c != metric and c not in MACHINE_COLUMNS and not _is_note(c)]


def ratio_label(metric: str, this: str, other: str) -> str:
    """The name of a ratio column: "latency_ms_median: this machine / NVIDIA H100 80GB HBM3"."""
    return f"{metric}: {this} / {other}"


def ratios(this: pd.DataFrame, other: pd.DataFrame, metric: str, names: tuple[str, str], also=()) -> pd.DataFrame:
    """``metric`` at each point both tables measured it (joined on :func:`ratio_keys`; a point measured several
    times counts as its median): the keys, ``"<metric> (<machine>)"`` for each of ``names`` (this, other), and
    their ratio, this / other, under :func:`ratio_label`. Empty where no point matches (no key column in common,
    or no point measured on both)."""
    label = ratio_label(metric, *names)
    columns = [f"{metric} ({names[0]})", f"{metric} ({names[1]})", label]
    keys = ratio_keys(this, other, metric, also)
    if not keys or metric not in this.columns or metric not in other.columns or \
            not (_is_number(this[metric]) and _is_number(other[metric])):
        return pd.DataFrame(columns=keys + columns)
    sides = []
    for df, column in zip((this, other), columns):
        measured = df[df[metric].notna()]
        sides.append(measured.groupby(keys, dropna=False, sort=True)[metric].median().rename(column).reset_index())
    try:
        both = sides[0].merge(sides[1], on=keys, how="inner")
    except (ValueError, TypeError):  # a key that is text on one machine and numbers on the other: nothing matches
        return pd.DataFrame(columns=keys + columns)
    both[label] = both[columns[0]] / both[columns[1]].where(both[columns[1]] != 0)
    return both.sort_values(keys, kind="stable").reset_index(drop=True)


def ratio_summary(table: pd.DataFrame, metric: str, names: tuple[str, str]) -> str:
    """One line for a :func:`ratios` table: "latency_ms_median, this machine / NVIDIA H100 80GB HBM3 at the 5
    points both measured: 2.46x to 11.5x (median 5.07x)", or why there is no ratio."""
    label = ratio_label(metric, *names)
    values = table[label].dropna() if label in table else pd.Series(dtype=float)
    if values.empty:
        return f"{metric}: no point measured on both {names[0]} and {names[1]}, so no ratio"
    low, mid, high = (tables.significant(v, 3) for v in (values.min(), values.median(), values.max()))
    spread = f"{low}x" if len(values) == 1 else f"{low}x to {high}x (median {mid}x)"
    return (f"{metric}, {names[0]} / {names[1]} at the {len(values)} point{'s' if len(values) > 1 else ''} both "
            f"measured: {spread}")


def select(df: pd.DataFrame, view: View) -> pd.DataFrame:
    """The rows of ``df`` that have ``view.metric``, with only the columns the view uses (facet, hue, x, metric,
    the metric's spread where the table holds one, :func:`cnnlab.plotting.spread_columns`, and ``status``), sorted
    by them: the table shown under the plot."""
    _check_plottable(view)
    cols = list(dict.fromkeys(c for c in (view.facet, view.hue, view.x, view.metric) if c))
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"table {view.table} has no column {', '.join(missing)}; its columns: {', '.join(df.columns)}")
    spread = [c for c in plotting.spread_columns(df, view.metric) or () if c not in cols]
    keep = cols + spread + (["status"] if "status" in df.columns and "status" not in cols else [])
    out = df.loc[df[view.metric].notna(), keep]
    return out.sort_values(cols[:-1] or cols, kind="stable").reset_index(drop=True)


def _check_plottable(view: View) -> None:
    if not view.metric or not view.x:
        raise ValueError(f"nothing to plot in {view.table}: no {'metric' if not view.metric else 'column'} "
                         "varies in it (a single row, or all alike)")


def _labels(series: pd.Series) -> pd.Series:
    """Values as category labels: 4.0 -> "4", NaN -> "n/a" (a hue or facet is a set of names, not a scale)."""
    def one(v):
        if v is None or (isinstance(v, float) and np.isnan(v)):
            return "n/a"
        return f"{v:g}" if isinstance(v, (float, np.floating)) else str(v)
    return series.map(one)


def _order(series: pd.Series) -> list[str]:
    """Labels of ``series`` in the order of its values (numbers numerically, text alphabetically)."""
    values = series.dropna().unique()
    try:
        values = sorted(values)
    except TypeError:
        values = sorted(values, key=str)
    return list(dict.fromkeys(_labels(pd.Series(values, dtype=object)))) + (["n/a"] if series.isna().any() else [])


def plot(table: pd.DataFrame, view: View) -> Figure:
    """``table`` (rows of :func:`select` with a ``machine`` column) drawn as ``view`` says: one column of panels
    per machine in ``view.machines`` and one row per facet value; the median of the rows at each x, with whiskers
    from the least to the most of the metric's spread where the table holds one (p10-p90, low-high:
    :func:`cnnlab.plotting.spread_columns`), else the rows' range as a band or error bar where several meet; a line
    over a numeric x, bars over a categorical one; batch sizes on a base-2 axis, as the papers double them; the
    metric on a log axis when ``view.log`` (in each row with a positive value), labelled at 1-2-5
    (:func:`cnnlab.plotting.plain_log_ticks`). Each row of panels shares its y axis, so that machines compare at
    a glance. Returns a Figure not registered with pyplot (nothing is shown twice)."""
    data = table.copy()
    numeric_x = _is_number(data[view.x]) if len(data) else False
    hue_order = _order(data[view.hue]) if view.hue else None
    facet_values = _order(data[view.facet]) if view.facet else [None]
    x_order = None if numeric_x else _order(data[view.x])
    # Hue and facet as labels in columns of their own (one may be the x axis or the metric itself).
    hue = "_hue" if view.hue else None
    if view.hue:
        data[hue] = _labels(data[view.hue])
    if view.facet:
        data["_facet"] = _labels(data[view.facet])
    x = "_x" if not numeric_x else view.x
    if not numeric_x:
        data[x] = _labels(data[view.x])
    palette = dict(zip(hue_order, sns.color_palette(plotting.PALETTE, len(hue_order)))) if hue_order else None
    spread = plotting.spread_columns(data, view.metric)

    legend, log_rows = None, []
    nrows, ncols = len(facet_values), len(view.machines)
    fig = Figure(figsize=(min(6.4 * ncols, 14), min(3.6 * nrows + 0.6, 24)), layout="constrained")
    axes = np.atleast_2d(fig.subplots(nrows, ncols, sharey="row", squeeze=False))
    for r, facet_value in enumerate(facet_values):
        in_row = data[data["_facet"] == facet_value] if view.facet else data
        log = view.log and bool((in_row[view.metric] > 0).any())  # (a log axis needs a positive value)
        if log:
            log_rows.append(axes[r, 0])
        for c, machine in enumerate(view.machines):
            ax = axes[r, c]
            rows = data[data["machine"] == machine] if "machine" in data else data
            if view.facet:
                rows = rows[rows["_facet"] == facet_value]
            title = machine + (f" · {plotting.label_for(view.facet)} = {facet_value}" if view.facet else "")
            ax.set_title(title, fontsize=10)
            if rows.empty:
                plotting.missing_panel(ax, f"no {view.metric} in {view.table} on {machine}")
                ax.set_xticks([])
                continue
            common = dict(data=rows, x=x, y=view.metric, hue=hue, hue_order=hue_order, palette=palette,
                          estimator="median", errorbar=None if spread else ("pi", 100), ax=ax)
            if numeric_x:
                sns.lineplot(marker="o", **common)
                if "batch_size" in view.x and (rows[view.x] > 0).all():
                    plotting.log2_batch_axis(ax, "x", values=sorted(data[view.x].dropna().unique()))
            else:
                sns.barplot(order=x_order, **common)
                if max(map(len, x_order)) > 8:
                    ax.tick_params(axis="x", labelrotation=30)
            if spread:
                _spread_whiskers(ax, rows, x, view.metric, spread, hue, palette, None if numeric_x else x_order)
            if log:
                ax.set_yscale("log")
            ax.set_xlabel(plotting.label_for(view.x))
            ax.set_ylabel(plotting.label_for(view.metric))
            if ax.get_legend() is not None:
                legend = legend or ax.get_legend_handles_labels()
                ax.get_legend().remove()  # one legend for the figure: the colours mean the same in every panel
    if legend:
        fig.legend(*legend, title=plotting.label_for(view.hue), loc="outside right upper", fontsize=9)
    for ax in log_rows:  # (the panels of a row share their y axis and its ticks)
        plotting.plain_log_ticks(ax)
    fig.suptitle(f"{view.study} · {view.table}: {plotting.label_for(view.metric)} by {plotting.label_for(view.x)}",
                 fontsize=11, x=0.01, ha="left")  # (left: clear of the legend on the right)
    return fig


def _spread_whiskers(ax, rows: pd.DataFrame, x: str, metric: str, spread: tuple[str, str], hue: str | None,
                     palette: dict | None, x_order: list[str] | None) -> None:
    """Whiskers on the lines (``x_order`` None) or bars ``ax`` shows: at each hue and x, from the least of the
    ``spread`` low column to the most of its high one, around the median of ``metric``."""
    low, high = spread
    keys = [c for c in (hue, x) if c]
    points = (rows.groupby(keys, dropna=False, sort=False)
              .agg(m=(metric, "median"), lo=(low, "min"), hi=(high, "max")).reset_index())
    if x_order is None:
        for value, part in points.groupby(hue, sort=False) if hue else [(None, points)]:
            plotting.whiskers(ax, part[x], part["m"], part["lo"], part["hi"], capsize=3, lw=1,
                              ecolor=palette[value] if hue else "0.25")
        return
    for container, value in zip(ax.containers, list(palette) if hue else [None]):  # a container per hue value
        part = (points[points[hue] == value] if hue else points).set_index(x)
        centres = [bar.get_x() + bar.get_width() / 2 for bar in container]
        at = [x_order[int(round(c))] for c in centres]  # (a hue's bars sit within 0.4 of their category)
        plotting.whiskers(ax, centres, part["m"].reindex(at), part["lo"].reindex(at), part["hi"].reindex(at),
                          ecolor="0.2", capsize=3, lw=1)


def png(fig: Figure, dpi: int = 90) -> bytes:
    """``fig`` as PNG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


@dataclass
class Rendered:
    """A view drawn: the figure, the table it plots (one row per point, a ``machine`` column), a caption saying
    what is shown and what is not (machines without the table, rows without the metric), and with two machines
    the metric's ratio, the first machine's / the second's, at the points both measured, and its one line."""
    figure: Figure
    table: pd.DataFrame
    caption: str
    ratios: pd.DataFrame | None = None  # with two machines: :func:`ratios` of the first to the second
    ratio_line: str = ""  # :func:`ratio_summary` of it


def render(view: View, index: pd.DataFrame) -> Rendered:
    """Draw ``view`` from the tables in ``index`` (:func:`find_tables`); ValueError where it cannot be drawn (no
    metric or x axis, a column the table does not have)."""
    _check_plottable(view)
    found = frames(index, view.study, view.table, view.machines)
    parts, notes = [], []
    for machine in view.machines:
        if machine not in found:
            notes.append(f"{machine} has no readable table {view.table} of {view.study}")
            continue
        df = found[machine]
        if view.metric not in df.columns:
            notes.append(f"{machine}'s {view.table} has no column {view.metric}")
            continue
        part = select(df, view)
        without = len(df) - len(part)
        if without:
            reasons = df.loc[df[view.metric].isna(), "status"].value_counts().to_dict() if "status" in df else {}
            why = f" (status: {', '.join(f'{k} {n}' for k, n in reasons.items())})" if reasons else ""
            notes.append(f"{machine}: {without} of {len(df)} rows have no {view.metric}{why}")
        measured = df[df[view.metric].notna()]
        shown = list(dict.fromkeys(c for c in (view.x, view.hue, view.facet) if c))
        mixed = [c for c in groupings(measured) if c not in shown and c != view.metric and
                 measured.groupby(shown, dropna=False)[c].nunique().max() > 1] if len(measured) else []
        if mixed:
            notes.append(f"{machine}: {', '.join(mixed)} also vary at each point (median and range shown): "
                         "choose one as hue or facet")
        parts.append(part.assign(machine=machine))
    columns = list(dict.fromkeys(c for c in (view.facet, view.hue, view.x, view.metric, "machine") if c))
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
    if view.log and len(table):
        not_positive = int((table[view.metric] <= 0).sum())
        if not_positive == len(table):
            notes.append(f"no {view.metric} is above 0: drawn on a linear scale")
        elif not_positive:
            notes.append(f"{not_positive} rows with {view.metric} <= 0 are not on the log scale")
    figure = plot(table, view)
    caption = f"{plotting.label_for(view.metric)} against {plotting.label_for(view.x)}: {len(table)} rows"
    spread = plotting.spread_columns(table, view.metric)
    if spread:
        caption += f" (whiskers: {spread[0]} to {spread[1]})"
    compared, line = None, ""
    if len(view.machines) == 2 and all(m in found and view.metric in found[m] for m in view.machines):
        names = tuple(view.machines)
        compared = ratios(found[names[0]], found[names[1]], view.metric, names, (view.x, view.hue, view.facet))
        line = ratio_summary(compared, view.metric, names)
        notes.append(line)
    return Rendered(figure, table, "; ".join([caption, *notes]), compared, line)


# --------------------------------------------------------------------------------------------------- environment
def _machine_dir(index: pd.DataFrame, machine: str, study: str) -> Path | None:
    rows = index[(index["machine"] == machine) & (index["study"] == study)]
    return Path(rows["path"].iloc[0]).parent if len(rows) else None


def _mtime(path: Path) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:  # removed since it was listed
        return 0.0


def _read_json(folder: Path, name: str) -> dict | None:
    """``folder/name`` as a JSON object (at most :data:`cnnlab.paths.RECORD_MAX_BYTES`: :func:`_read`), None where it
    is absent, refused, damaged or not an object."""
    try:
        data = json.loads(_read(folder, name, paths.RECORD_MAX_BYTES))
    except (OSError, ValueError):
        return None  # absent, half-written or damaged: the next source is used
    return data if isinstance(data, dict) else None


def environment_summary(study_dir: str | Path | None) -> dict[str, str]:
    """What a machine's results in ``study_dir`` were measured on: the :data:`ENVIRONMENT_FIELDS` that are
    recorded, as text, plus ``source`` (where they were read). Sources, first found wins: ``environment.json``
    in ``study_dir``, then in its machine's folder; the newest sweep record ``*.env.json`` in ``study_dir/stores/``
    (or in ``study_dir``, where older cnnlab kept them); the tables' own columns (``device_name``, else ``device``;
    ``torch_version``...). ``{"source": "nothing recorded"}`` when there is none."""
    if study_dir is None or not Path(study_dir).is_dir():
        return {"source": "no results"}
    study_dir = Path(study_dir)
    records = sorted([*(study_dir / STORE_FOLDER).glob("*.env.json"), *study_dir.glob("*.env.json")], key=_mtime,
                     reverse=True)
    sources = [(study_dir, "environment.json"), (study_dir.parent, "environment.json"),
               *((study_dir, p.relative_to(study_dir).as_posix()) for p in records)]  # (stores/ must be no link)
    for folder, name in sources:
        path = folder / name
        data = _read_json(folder, name)
        if data:
            out = {f: _text(data[f]) for f in ENVIRONMENT_FIELDS if data.get(f) not in (None, "", [])}
            return {**out, "source": path.name}
    out = {}
    for csv in sorted(study_dir.glob("*.csv")):
        try:
            df = load_table(csv)
        except (OSError, ValueError):
            continue
        for field in ENVIRONMENT_FIELDS:
            column = "device" if field == "device_name" and "device_name" not in df and "device" in df else field
            if field not in out and column in df and df[column].notna().any():
                out[field] = _text(df[column].dropna().iloc[0])
    return {**out, "source": "table columns" if out else "nothing recorded"}


def _text(value) -> str:
    """A recorded value as text: a list joined, a git commit shortened to 12 characters (as ``git log``)."""
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)[:12] if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{40}", value) else str(value)


def environment_table(index: pd.DataFrame, view: View) -> pd.DataFrame:
    """The environment of each machine in ``view`` side by side: one row per field, one column per machine."""
    summaries = {m: environment_summary(_machine_dir(index, m, view.study)) for m in view.machines}
    fields = [f for f in (*ENVIRONMENT_FIELDS, "source") if any(f in s for s in summaries.values())]
    return pd.DataFrame({m: [s.get(f, "") for f in fields] for m, s in summaries.items()}, index=fields)


def claims_side_by_side(index: pd.DataFrame, view: View) -> pd.DataFrame:
    """The study's claims (``claims.csv``) with each machine's ``ours`` and ``held`` beside the paper's (an
    inconclusive verdict with the overlap that made it so)."""
    merged = None
    for machine in view.machines:
        folder = _machine_dir(index, machine, view.study)
        if folder is None:
            continue
        try:  # as text: "n/a" stays "n/a"
            df = pd.read_csv(io.BytesIO(_read(folder, "claims.csv", paths.TABLE_MAX_BYTES)), dtype=str,
                             keep_default_na=False)
        except (OSError, ValueError, UnicodeDecodeError):  # absent, refused (named by _read) or damaged
            continue
        if not {"claim", "ours", "held"} <= set(df.columns):
            continue
        part = df[[c for c in ("claim", "source", "paper", "ours", "held") if c in df]].copy()  # source: whose claim
        notes = df["note"] if "note" in df else pd.Series([""] * len(df), index=df.index)
        part["held"] = [_claims.verdict_words(h, n) for h, n in zip(part["held"], notes)]  # the report's words
        part = part.rename(columns={"ours": f"ours ({machine})", "held": f"held ({machine})"})
        merged = part if merged is None else merged.merge(part.drop(columns=["paper", "source"], errors="ignore"),
                                                          on="claim", how="outer")
    if merged is not None and "source" in merged:  # the paper's claims first, then ours beyond them
        merged = merged.sort_values("source", key=lambda s: s == _claims.SOURCES[True], kind="stable")
        merged = merged.reset_index(drop=True)
    return merged if merged is not None else pd.DataFrame(columns=["claim"])


# ------------------------------------------------------------------------------------------------------ widgets
def widgets_available() -> tuple[bool, str]:
    """(True, "") where ipywidgets can be shown (ipywidgets installed, running in a Jupyter kernel); else False
    and why."""
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError as exc:
        return False, f"ipywidgets is not installed ({exc.name})"
    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return False, "not running in a Jupyter kernel"
    return True, ""


def old_widgets_note() -> str:
    """Outside Colab, a line for a reader with ipywidgets 7 (Colab's; it renders in Colab and the classic Notebook),
    whose widgets JupyterLab 4 and Notebook 7 cannot show (they show ipywidgets 8's only); "" with ipywidgets 8."""
    import ipywidgets

    if int(ipywidgets.__version__.split(".")[0]) >= 8:
        return ""
    return (f"ipywidgets {ipywidgets.__version__}: JupyterLab 4 and Notebook 7 show widgets from ipywidgets 8 only. "
            "If no dropdowns appear below, pip install 'ipywidgets>=8.1' (cnnlab[lab] has it) and restart the kernel.")


class Explorer:
    """The explorer's widgets (``.widget``, a VBox) wired to :func:`render`. Its dropdowns are attributes
    (``study``, ``table``, ``metric``, ``x``, ``hue``, ``facet``, ``machine``, ``beside``; ``log`` a checkbox):
    set one's ``.value`` and ``.view``, ``.rendered`` (figure, table, caption) and the shown image and HTML
    follow. ``.error`` holds the last view that could not be drawn (it is also shown in the caption)."""

    def __init__(self, root: str | Path | None = None):
        import ipywidgets as w

        self.root = Path(root) if root is not None else paths.figures_root()
        self.index = find_tables(self.root)
        self.rendered: Rendered | None = None
        self.error: str | None = None
        self._holding = False
        self._table = pd.DataFrame()  # the shown table, all machines' rows
        plotting.set_theme()
        view = first_view(self.index)
        machines = list(dict.fromkeys(self.index["machine"]))
        wide = {"layout": w.Layout(width="290px"), "style": {"description_width": "60px"}}
        self.machine = w.Dropdown(description="machine", options=machines, value=view.machines[0], **wide)
        self.beside = w.Dropdown(description="beside", options=[NONE] + machines,
                                 value=view.machines[1] if len(view.machines) > 1 else NONE, **wide)
        self.study = w.Dropdown(description="study", **wide)
        self.table = w.Dropdown(description="table", **wide)
        self.metric = w.Dropdown(description="metric", **wide)
        self.x = w.Dropdown(description="x axis", **wide)
        self.hue = w.Dropdown(description="hue", **wide)
        self.facet = w.Dropdown(description="facet", **wide)
        self.log = w.Checkbox(description="log scale (metric)", value=view.log, indent=False)
        self.header = w.HTML()
        self.image = w.Image(format="png", layout=w.Layout(max_width="100%"))
        self.caption = w.HTML()
        self.table_html = w.HTML()
        self.environment_html = w.HTML()
        self.widget = w.VBox([
            self.header,
            w.HBox([w.VBox([self.machine, self.beside, self.study]), w.VBox([self.table, self.metric, self.x]),
                    w.VBox([self.hue, self.facet, self.log])]),
            self.image, self.caption, self.table_html, self.environment_html,
        ])
        self._choose(study=view.study, table=view.table)
        for control in (self.machine, self.beside):
            control.observe(self._on_machines, names="value")
        self.study.observe(self._on_study, names="value")
        self.table.observe(self._on_table, names="value")
        self.metric.observe(self._on_metric, names="value")
        for control in (self.x, self.hue, self.facet, self.log):
            control.observe(lambda change: self.refresh(), names="value")

    # -- what a change of each dropdown does (nothing while the dropdowns are being filled)
    def _on_machines(self, change) -> None:
        if not self._holding:
            self._choose(keep_columns=True)

    def _on_study(self, change) -> None:
        if not self._holding:
            self._choose(study=change["new"])

    def _on_table(self, change) -> None:
        if not self._holding:
            self._choose(study=self.study.value, table=change["new"])

    def _on_metric(self, change) -> None:  # a metric opens on a log axis where its values span decades
        if not self._holding:
            self._holding = True
            try:
                self.log.value = wide(self._table, change["new"])
            finally:
                self._holding = False
            self.refresh()

    # -- state
    @property
    def machines(self) -> tuple[str, ...]:
        return (self.machine.value,) + ((self.beside.value,) if self.beside.value not in (NONE, self.machine.value)
                                        else ())

    @property
    def view(self) -> View:
        """The view the widgets show now."""
        def chosen(control):
            return None if control.value == NONE else control.value
        return View(self.study.value, self.table.value, chosen(self.metric), chosen(self.x), chosen(self.hue),
                    chosen(self.facet), self.machines, bool(self.log.value))

    @property
    def figure(self) -> Figure | None:
        return self.rendered.figure if self.rendered else None

    def _choose(self, study=None, table=None, keep_columns: bool = False) -> None:
        """Fill the dropdowns that depend on the machines, study and table (``study``, ``table``: the new choice;
        else the current one if the machines have it, else the first), then the column dropdowns with the table's
        :func:`defaults` (with ``keep_columns``, the current columns where the table has them); then draw once."""
        self._holding = True
        try:
            rows = self.index[self.index["machine"].isin(self.machines)]
            study_names = list(dict.fromkeys(rows["study"]))
            study = study if study in study_names else (self.study.value if self.study.value in study_names
                                                        else study_names[0])
            _set(self.study, study_names, study)
            table_names = list(dict.fromkeys(rows.loc[rows["study"] == study, "table"]))
            table = table if table in table_names else (self.table.value if self.table.value in table_names
                                                        else table_names[0])
            _set(self.table, table_names, table)
            found = frames(self.index, study, table, self.machines)
            df = pd.concat(found.values(), ignore_index=True) if found else pd.DataFrame()
            picked = defaults(next(iter(found.values()))) if found else defaults(df)  # (not split by machine)
            split = [NONE] + groupings(df)
            for control, options, default in ((self.metric, metrics(df), picked["metric"]),
                                              (self.x, x_axes(df), picked["x"]),
                                              (self.hue, split, picked["hue"] or NONE),
                                              (self.facet, split, picked["facet"] or NONE)):
                _set(control, options, control.value if keep_columns else None, default)
            self._table = df
            if not keep_columns:
                self.log.value = wide(df, self.metric.value)
            paper = study_paper(study)
            self.header.value = (f"<b>{_html(study)}</b>" + (f" reproduces {_html(paper)}" if paper else "") +
                                 f" &nbsp;·&nbsp; results under <code>{_html(self.root)}</code>")
        finally:
            self._holding = False
        self.refresh()

    def refresh(self) -> None:
        """Draw the current view into the image, caption, table and environment widgets."""
        if self._holding:
            return
        view = self.view
        try:
            rendered = render(view, self.index)
            image = png(rendered.figure)
        except Exception as exc:  # a view that cannot be drawn must not break the explorer: say why instead
            self.error = f"{type(exc).__name__}: {exc}"
            self.rendered = None
            self.image.value = b""  # (no plot of the view before left standing under this one's name)
            self.table_html.value = self.environment_html.value = ""
            self.caption.value = f"<span style='color:#b00'>cannot draw this view: {_html(self.error)}</span>"
            return
        self.error = None
        self.rendered = rendered
        self.image.value = image
        self.caption.value = f"<i>{_html(rendered.caption)}</i>"
        self.table_html.value = _frame_html(rendered.table, "Points plotted") + _ratio_html(rendered)
        self.environment_html.value = (_frame_html(environment_table(self.index, view), "Environment", index=True)
                                       + _frame_html(claims_side_by_side(self.index, view), "Claims"))

    # -- display
    def _repr_mimebundle_(self, **kwargs):
        """The widget where a frontend can show it; elsewhere (a notebook run by papermill or nbval, a static
        render) a PNG of the current view and a line saying widgets were not shown."""
        bundle = {"application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0,
                                                                "model_id": self.widget.model_id},
                  "text/plain": "cnnlab explorer (widgets not shown here: open the notebook in JupyterLab or "
                                f"Colab to use it); the current view: {self.rendered.caption if self.rendered else ''}"}
        if self.rendered is not None:
            bundle["image/png"] = bytes(self.image.value)
        return bundle


def _set(dropdown, options: list, wanted, fallback=None) -> None:
    """Give ``dropdown`` these options and the value ``wanted``, else ``fallback``, else the first option."""
    options = list(options) or [NONE]
    dropdown.options = options
    dropdown.value = wanted if wanted in options else fallback if fallback in options else options[0]


def _html(text) -> str:
    """``text`` (anything, as ``str``) escaped for HTML: every widget's HTML is written with innerHTML, and a results
    folder (a reference machine's, shared between users) may hold any text (issue 33, item 1)."""
    return html.escape(str(text), quote=True)


def _frame_html(df: pd.DataFrame, title: str, index: bool = False, max_rows: int = 60) -> str:
    """``df`` as an HTML table (at most ``max_rows`` rows) under ``title``, every value and label escaped (pandas'
    Styler escapes nothing unless told to)."""
    if df.empty:
        return ""
    first = df.head(max_rows)
    text = [c for c in first.columns if not _is_number(first[c])]
    shown = first.astype(object)
    for i, c in enumerate(shown.columns):
        if c in text:  # as text: the Styler escapes strings only (a list, say, is escaped as what it shows)
            shown.iloc[:, i] = [v if v is None or v is pd.NA or v != v else str(v) for v in first.iloc[:, i]]
        else:  # rounded by its unit (cnnlab.tables), as in the notebooks
            shown.iloc[:, i] = tables.format_column(first.iloc[:, i]).to_numpy()
    styler = (shown.style.format(na_rep="", escape="html").format_index(escape="html", axis=0)
              .format_index(escape="html", axis=1).set_properties(subset=text, **{"text-align": "left"}))
    table = (styler if index else styler.hide(axis="index")).to_html()  # text left-aligned, numbers right
    # (jp-RenderedHTMLCommon: JupyterLab's own table style; elsewhere an unknown class changes nothing)
    return (f"<details open><summary><b>{_html(title)}</b> ({len(df)} rows)</summary>"
            f"<div class='jp-RenderedHTMLCommon'>{table}</div></details>")


def _ratio_html(rendered: Rendered) -> str:
    """The ratio of the two machines shown (:func:`ratios`) as a table under its label, or its one line where no
    point matches; "" with one machine."""
    if rendered.ratios is None:
        return ""
    if rendered.ratios.empty:
        return f"<p><i>{_html(rendered.ratio_line)}</i></p>"
    return _frame_html(rendered.ratios, rendered.ratios.columns[-1]) + f"<p><i>{_html(rendered.ratio_line)}</i></p>"


def static_view(root: str | Path | None = None) -> Rendered:
    """The explorer's first view drawn without widgets."""
    index = find_tables(root)
    return render(first_view(index), index)


def show(root: str | Path | None = None) -> Explorer | None:
    """Display the explorer over the results under ``root`` (default :func:`cnnlab.paths.figures_root`) and
    return it. Without results, print what to do and return None; where widgets cannot be shown (no ipywidgets,
    no Jupyter kernel), print why and display a static figure of the first view and its table (returns None)."""
    from IPython.display import display

    index = find_tables(root)
    print(summary(index, root))
    if index.empty:
        return None
    available, reason = widgets_available()
    try:
        if not available:
            rendered = static_view(root)
        else:
            try:  # Colab shows ipywidgets 8 only through its custom widget manager
                from google.colab import output

                output.enable_custom_widget_manager()
            except ImportError:
                note = old_widgets_note()
                if note:
                    print(note)
            explorer = Explorer(root)
    except ValueError as exc:  # tables, but none to plot yet (a notebook is still writing them, say)
        print(f"Nothing to plot yet: {exc}.")
        return None
    if not available:
        print(f"Widgets are not available ({reason}): a static figure of the first view instead. "
              f"{rendered.caption}")
        display(rendered.figure)
        display(rendered.table)
        return None
    display(explorer)
    return explorer


__all__ = ["ENVIRONMENT_FIELDS", "Explorer", "MACHINE_COLUMNS", "NONE", "Rendered", "THIS_MACHINE", "View",
           "beside_default", "claims_side_by_side", "defaults", "environment_summary", "environment_table",
           "find_tables", "first_view", "frames", "groupings", "is_gpu", "load_table", "machine_environment",
           "metrics", "old_widgets_note", "parameters", "plot", "png", "ratio_keys", "ratio_label", "ratio_summary",
           "ratios", "render", "select", "show", "static_view", "study_paper", "summary", "widgets_available",
           "x_axes"]
