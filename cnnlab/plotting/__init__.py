"""One look for every cnnlab figure: seaborn theme, unit-bearing labels, log2 batch axes, PNG + SVG.

Notebooks call :func:`set_theme` once, label axes from tidy column names with :func:`label_for`
(``latency_ms_median`` -> "Latency median (ms)"), put batch size on a base-2 log axis with
:func:`log2_batch_axis` (the papers double the batch size from 1 to 1024), label every other log axis at
1-2-5 with plain numbers (:func:`log_axes`, which :func:`keep` and :func:`save_figure` apply), and save with
:func:`save_figure`, which writes the same figure as PNG (for the notebook and README) and SVG
(for papers and zooming).
"""

from __future__ import annotations

import errno
import math
import os
import re
import secrets
from pathlib import Path
from typing import Callable, Iterable

import matplotlib.pyplot as plt
import matplotlib.ticker as mticker
import seaborn as sns

# Unit suffixes used in cnnlab column names -> how they read in a label.
UNITS: dict[str, str] = {
    "ms": "ms", "us": "µs", "ns": "ns", "s": "s",
    "mib": "MiB", "gib": "GiB", "bytes": "bytes", "mb": "MB", "gb": "GB",
    "pct": "%", "items_per_s": "items/s", "tflop_per_s": "TFLOP/s", "gflop_per_s": "GFLOP/s",
    "gb_per_s": "GB/s", "flop_per_byte": "FLOP/byte", "hz": "Hz",
}
# Longest suffix first so "items_per_s" wins over "s".
_UNIT_RE = re.compile(r"_(" + "|".join(sorted(map(re.escape, UNITS), key=len, reverse=True)) + r")(?=_|$)")
_WORDS = {"gpu": "GPU", "cpu": "CPU", "mem": "memory", "alloc": "allocated", "dram": "DRAM", "l2": "L2",
          "l1tex": "L1/TEX", "sm": "SM", "flops": "FLOPs", "htod": "HtoD", "dtoh": "DtoH", "util": "utilisation"}
_NAMES = {"batch_size": "Batch size", "num_gpus": "GPUs", "model": "Model", "dtype": "Precision"}

PALETTE = "colorblind"


def set_theme(context: str = "notebook") -> None:
    """Apply cnnlab's seaborn theme (white grid, colour-blind-safe palette, readable sizes). Idempotent."""
    sns.set_theme(context=context, style="whitegrid", palette=PALETTE,
                  rc={"figure.dpi": 100, "savefig.dpi": 150, "savefig.bbox": "tight",
                      "axes.titleweight": "bold", "svg.fonttype": "none"})


def keep(figs: dict) -> dict:
    """``figs`` (a study's figures), closed in pyplot so that Jupyter does not draw them all under the cell that
    made them: each is shown where the notebook names it (``figs["01_roofline"]`` as a cell's last line)."""
    for fig in figs.values():
        log_axes(fig)
        plt.close(fig)
    return figs


def label_for(column: str, unit: str | None = None) -> str:
    """Axis label from a tidy column name: ``"latency_ms_median"`` -> ``"Latency median (ms)"``.

    ``unit`` overrides the unit parsed from the name. Names without a unit are title-cased only.
    """
    if column in _NAMES and unit is None:
        return _NAMES[column]
    match = _UNIT_RE.search(column)
    found = UNITS[match.group(1)] if match else None
    words = (column[: match.start()] + column[match.end():]) if match else column
    text = " ".join(_WORDS.get(w, w) for w in words.split("_") if w)
    text = text[:1].upper() + text[1:]
    unit = unit or found
    return f"{text} ({unit})" if unit else text


def legend_below(fig, axes, y: float, ncol: int | None = None, **style):
    """One legend for the figure, centred under its panels at ``y`` (figure fraction, below 0 is under the
    axes): each label once, the first handle found in ``axes``, in their order; ``ncol`` columns (default: up
    to 6). ``style`` goes to ``fig.legend`` (``fontsize``). Returns the legend."""
    entries = {}
    for ax in axes:
        entries.update({lab: h for h, lab in zip(*ax.get_legend_handles_labels()) if lab not in entries})
    return fig.legend(list(entries.values()), list(entries), loc="lower center",
                      ncol=ncol or min(len(entries), 6) or 1, bbox_to_anchor=(0.5, y), **style)


def log2_batch_axis(ax, axis: str = "x", values: Iterable[int] | None = None, label: str = "Batch size"):
    """Put ``axis`` of ``ax`` on a base-2 log scale with integer ticks (1, 2, 4, ...); returns ``ax``.

    ``values`` sets the ticks (default: powers of two inside the current limits).
    """
    if axis not in ("x", "y"):
        raise ValueError(f"axis={axis!r} is not valid; valid: x, y")
    scale = ax.set_xscale if axis == "x" else ax.set_yscale
    scale("log", base=2)
    target = ax.xaxis if axis == "x" else ax.yaxis
    if values is None:
        lo, hi = (ax.get_xlim() if axis == "x" else ax.get_ylim())
        lo, hi = max(lo, 1e-9), max(hi, 1e-9)
        values = [2**k for k in range(math.floor(math.log2(lo)), math.floor(math.log2(hi)) + 1) if lo <= 2**k <= hi]
    target.set_major_locator(mticker.FixedLocator(list(values)))
    target.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_locator(mticker.NullLocator())
    (ax.set_xlabel if axis == "x" else ax.set_ylabel)(label)
    return ax


def missing_panel(ax, text: str) -> None:
    """Say in the panel why it is empty (the x axis stays: it may be shared with a panel above)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes, fontsize=9, color="0.3")
    ax.set_yticks([])


class LogTicks(mticker.LogLocator):
    """Major ticks of a base-10 log axis at 1, 2 and 5 of each decade (0.5, 1, 2, 5, 10, 20...); where the axis
    spans a decade or less, at 1, 2, 3 and 5, and within 0.7 decades at every whole multiple (600, 700, 800, 900,
    1000), as 1-2-5 would leave one label or none (matplotlib's own locator labelled only 6x10^2 and 10^3 there);
    over more than 4 decades, at the decades alone (1-2-5 would crowd them). Chosen at draw time, so a limit set
    later (a shared axis) gets its own."""

    def __init__(self):
        super().__init__(base=10.0, subs=(1.0, 2.0, 5.0))

    def tick_values(self, vmin, vmax):
        if vmin > 0 and vmax > 0 and math.isfinite(vmin) and math.isfinite(vmax):
            decades = abs(math.log10(vmax / vmin))
            self._set_subs((1.0,) if decades > 4 else (1.0, 2.0, 5.0) if decades > 1 else
                           (1.0, 2.0, 3.0, 5.0) if decades > 0.7 else tuple(float(k) for k in range(1, 10)))
        return super().tick_values(vmin, vmax)


def _plain(value, _pos=None) -> str:
    return f"{value:g}"


def plain_log_ticks(ax, axis: str = "y") -> None:
    """Label ``axis`` ("x" or "y") of ``ax``, a base-10 log axis, at 1-2-5 steps (:class:`LogTicks`) with plain
    numbers (0.5, 2, 40, not 4 x 10^1); minor ticks stay unlabelled. :func:`log_axes` applies it to every such axis
    of a figure."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(LogTicks())
    target.set_major_formatter(mticker.FuncFormatter(_plain))
    target.set_minor_formatter(mticker.NullFormatter())


def log_axes(fig):
    """:func:`plain_log_ticks` on every base-10 log axis of ``fig`` that still has matplotlib's own locator (an axis
    with ticks of its own, :func:`log2_batch_axis`'s or fixed ones, is left as it is). :func:`keep` and
    :func:`save_figure` call it, so every cnnlab figure's log axes read the same. Returns ``fig``."""
    for ax in fig.axes:
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            locator = axis.get_major_locator()
            if (axis.get_scale() == "log" and type(locator) is mticker.LogLocator
                    and getattr(locator, "_base", 10.0) == 10.0):
                plain_log_ticks(ax, name)
    return fig


def whiskers(ax, x, median, low, high, **style):
    """Whiskers from ``low`` to ``high`` around ``median`` at ``x`` (cnnlab's p10-p90 of a timing), no marker;
    ``style`` goes to ``ax.errorbar`` (``ecolor``, ``capsize``, ``lw``). Returns the ErrorbarContainer.

    Plain float arrays go to matplotlib: given one-point pandas Series or a list of arrays, matplotlib 3.10 calls
    float() on a Series (pandas 2.2's FutureWarning under a notebook's figure) or an array (numpy's
    DeprecationWarning)."""
    import numpy as np

    x, median, low, high = (np.atleast_1d(np.asarray(v, dtype=float)) for v in (x, median, low, high))
    # (clipped at 0: a mean, drawn with its p10-p90, may lie outside them, and matplotlib refuses a negative length)
    yerr = np.clip(np.vstack([median - low, high - median]), 0, None)
    return ax.errorbar(x, median, yerr=yerr, fmt="none", **style)


def bar_whiskers(ax, df, x: str, order, hue: str, hue_order, y: str, low: str, high: str, **style) -> None:
    """:func:`whiskers` on the bars ``sns.barplot(data=df, x=x, order=order, hue=hue, hue_order=hue_order)`` drew
    on ``ax``: for each bar, ``df``'s ``low``-``high`` columns around its ``y`` (one row per ``x`` and ``hue``)."""
    for container, value in zip(ax.containers, hue_order):  # one bar container per hue value, in hue_order
        rows = df[df[hue] == value].set_index(x).reindex(order)
        centres = [bar.get_x() + bar.get_width() / 2 for bar in container]
        whiskers(ax, centres, rows[y].to_numpy(dtype=float), rows[low].to_numpy(dtype=float),
                 rows[high].to_numpy(dtype=float), **style)


def bars(ax, df, x: str, y: str, ylabel: str, errors: bool = False, values: bool | str = False,
         fontsize: float | None = None) -> None:
    """Bars of ``y`` per ``x`` (one colour each, no legend), with their ``values`` written on them (``True``: "%.3g",
    or a format such as "%.2f", in ``fontsize``) and, with ``errors``, p10-p90 :func:`whiskers` from the columns
    named like ``y`` with ``_p10``/``_p90`` for ``_median`` (``latency_ms_median`` -> ``latency_ms_p10``)."""
    sns.barplot(data=df, x=x, y=y, hue=x, ax=ax, legend=False)
    for container in ax.containers if values else ():
        ax.bar_label(container, fmt="%.3g" if values is True else values,
                     **({} if fontsize is None else {"fontsize": fontsize}))
    if errors:
        stem = y.removesuffix("_median")
        whiskers(ax, range(len(df)), df[y], df[f"{stem}_p10"], df[f"{stem}_p90"], ecolor="black", capsize=3)
    ax.set(xlabel="", ylabel=ylabel)


def spread_columns(df, column: str) -> tuple[str, str] | None:
    """The two columns of ``df`` that hold ``column``'s spread, where it has one with a value: its p10 and p90
    (``latency_ms_median`` or ``latency_ms_mean`` -> ``latency_ms_p10``, ``latency_ms_p90``), else its
    ``_low``/``_high`` (``gpu_util_pct_low``), ``_p10``/``_p90`` or ``_min``/``_max``; None where it has none."""
    stem = column.removesuffix("_median").removesuffix("_mean")
    for low, high in ((f"{stem}_p10", f"{stem}_p90"), (f"{column}_low", f"{column}_high"),
                      (f"{column}_p10", f"{column}_p90"), (f"{column}_min", f"{column}_max")):
        if low in df and high in df and (df[low].notna() & df[high].notna()).any():
            return low, high
    return None


def batch_panels(df, panels: list[tuple[str, str, str]], hue: str = "model", linear: dict | None = None,
                 note: str = "", **line):
    """A figure of panels stacked against batch size (shared base-2 log x axis), one per ``(column, y label,
    title)`` of ``panels``: a line per ``hue`` value (legend in the top panel only) with the column's spread as
    whiskers where ``df`` holds one (:func:`spread_columns`: p10-p90, low-high), log y axes except the columns in
    ``linear`` (column -> y limits, e.g. utilisation 0-100%). A column with no values gets no panel (half a figure
    of empty axes said less than a line does): the line under the panels names it, with the reasons in ``df``'s
    ``<column less its unit>_missing_reason`` (``gpu_util_pct`` -> ``gpu_util_missing_reason``); where no column has
    a value, each panel says so. ``note`` is written under the panels too (e.g. which points were not timed);
    ``line`` goes to ``sns.lineplot`` (``markersize``). Returns the figure."""
    import pandas as pd

    linear = linear or {}
    sizes = sorted(set(df["batch_size"]))
    def reasons(col: str) -> str:
        return "; ".join(df.get(f"{col.rsplit('_', 1)[0]}_missing_reason", pd.Series()).dropna().unique())

    measured = [p for p in panels if p[0] in df and df[p[0]].notna().any()]
    notes = [f"{title}: not measured on this device ({reasons(col) or 'no values'})"
             for col, _, title in panels if measured and (col, _, title) not in measured]
    note = "\n".join(notes + ([note] if note else []))
    shown = measured or panels
    fig, axes = plt.subplots(len(shown), 1, figsize=(7, 4 * len(shown)), sharex=True, squeeze=False)
    axes = list(axes[:, 0])
    hues = list(dict.fromkeys(df[hue].dropna())) if hue in df else []
    palette = dict(zip(hues, sns.color_palette(PALETTE, len(hues)))) if hues else None
    for ax, (col, ylabel, title) in zip(axes, shown):
        ax.set_title(title)
        d = df.dropna(subset=[col]) if col in df else df.iloc[:0]
        if d.empty:
            missing_panel(ax, f"{title} not measured on this device:\n{reasons(col) or 'not measured'}")
        else:
            sns.lineplot(data=d, x="batch_size", y=col, hue=hue, style=hue, markers=True, dashes=False, ax=ax,
                         hue_order=hues, palette=palette, **line)
            spread = spread_columns(d, col)
            for value, part in d.groupby(hue, sort=False) if spread else ():
                whiskers(ax, part["batch_size"], part[col], part[spread[0]], part[spread[1]],
                         ecolor=palette[value], capsize=3, lw=1)
            if col in linear:
                ax.set_ylim(*linear[col])
            else:
                ax.set_yscale("log")
                plain_log_ticks(ax)
            ax.set_ylabel(ylabel)
            if ax is not axes[0]:
                ax.get_legend().remove()
        log2_batch_axis(ax, values=sizes)
    if note:
        fig.text(0.5, -0.01, note, ha="center", va="top", fontsize=8, color="0.3")
    fig.tight_layout()
    return fig


def epoch_times(loaders, x: str, hue: str, **style):
    """Train and test epoch time (s) of a DataLoader sweep (``loader_sweep``'s ``train_epoch_s``/``test_epoch_s``)
    against ``x``, one panel per phase (column ``phase``: train, test; own y scales), a line per ``hue`` value:
    the median and range (whiskers) of the rounds, the quantities the loader claims judge; ``style`` goes to
    ``sns.relplot`` (``palette``). Returns the seaborn FacetGrid (its ``data`` is the long table drawn)."""
    long = loaders[[x, hue, "train_epoch_s", "test_epoch_s"]].melt(id_vars=[x, hue], var_name="phase",
                                                                   value_name="epoch_time_s")
    long["phase"] = long["phase"].str.removesuffix("_epoch_s")
    return sns.relplot(data=long, x=x, y="epoch_time_s", hue=hue, col="phase", kind="line", marker="o", height=3.2,
                       aspect=1.2, facet_kws={"sharey": False}, estimator="median", errorbar=("pi", 100), **style)


def panel_per_value(df, ok, by: str, x: str, y: str, hue: str, *, title: Callable, xlabel: str, ylabel: str,
                    legend: str, why: Callable, reverse: bool = False):
    """A row of panels, one per value of ``df[by]`` (sorted, descending with ``reverse``; ``title(value)`` on
    each): ``y`` against ``x`` on a base-2 log axis labelled ``xlabel``, a line per ``hue`` value (legend titled
    ``legend``), drawn from ``ok`` (``df``'s measured rows). A value with no rows in ``ok`` gets a panel that says
    why, ``why(df's rows at that value)``; the panels share one y scale unless one of them is empty. Returns the
    figure."""
    values = sorted(df[by].unique(), reverse=reverse)
    # one y scale for all panels, unless a panel says why it is empty (it has no y ticks)
    fig, axes = plt.subplots(1, len(values), figsize=(4.2 * len(values), 3.4), squeeze=False,
                             sharey=set(values) <= set(ok[by]))
    for ax, value in zip(axes[0], values):
        part = ok[ok[by] == value]
        ax.set_title(title(value))
        ax.set_xlabel(xlabel)
        if part.empty:
            missing_panel(ax, f"not measured:\n{why(df[df[by] == value])}")
            ax.set_xticks([])
            ax.grid(False)
        else:
            sns.lineplot(data=part, x=x, y=y, hue=hue, style=hue, markers=True, dashes=False, palette=PALETTE, ax=ax)
            log2_batch_axis(ax, values=sorted(part[x].unique()), label=xlabel)
            ax.legend(title=legend)
        ax.set_ylabel(ylabel)
    fig.tight_layout()
    return fig


def roofline(intensity, gflop_per_s, labels, roofs: dict[str, float], bandwidth_gb_per_s: float, title: str):
    """Roofline figure: achieved GFLOP/s against arithmetic intensity (FLOP/byte), both log, one dot per point
    (``labels`` in the legend), under one dashed roof per ``roofs`` entry (name -> peak GFLOP/s):
    min(peak, intensity x ``bandwidth_gb_per_s``), as below the ridge point a kernel is bound by bandwidth. With no
    roofs (peaks unknown) the dots get room around them and the title says why (``title``). Returns the figure."""
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 5))
    for i, (x, y, label) in enumerate(zip(intensity, gflop_per_s, labels)):
        ax.scatter(x, y, s=60, zorder=3, color=plt.get_cmap("tab10")(i % 10), label=label)
    ax.set(xscale="log", yscale="log")
    bw = bandwidth_gb_per_s
    if roofs:
        x = np.asarray(intensity, dtype=float)
        ai = np.logspace(np.log10(min(np.nanmin(x) / 4, 0.5)), np.log10(max(np.nanmax(x) * 4, 1e3)), 200)
        for label, peak in roofs.items():
            ax.plot(ai, np.minimum(peak, ai * bw), "--", label=f"roof {label}: {peak / 1e3:g} TFLOP/s, {bw:g} GB/s")
        ax.set_title(title)
    else:
        ax.margins(x=0.4, y=0.4)
        ax.set_title(title, fontsize=11)
    for axis in "xy":
        plain_log_ticks(ax, axis)
    ax.legend(fontsize=8, loc="best")
    ax.set(xlabel=label_for("arithmetic_intensity_flop_per_byte"), ylabel=label_for("achieved_gflop_per_s"))
    fig.tight_layout()
    return fig


def save_figure(fig, name: str, outdir: str | Path = "figures") -> tuple[Path, Path]:
    """Save ``fig`` as ``<outdir>/<name>.png`` and ``<outdir>/<name>.svg``; return both paths.

    ``name`` is a bare file stem (letters, digits, ``-``, ``_``, ``.``), e.g. "001_batch_latency".
    """
    if not name or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name) or name.endswith((".png", ".svg")):
        raise ValueError(f"name={name!r} must be a bare file stem of letters, digits, '-', '_', '.' "
                         "(no directory, no extension)")
    log_axes(fig)
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    png, svg = out / f"{name}.png", out / f"{name}.svg"
    write_atomic(png, lambda tmp: fig.savefig(tmp, format="png"))
    write_atomic(svg, lambda tmp: fig.savefig(tmp, format="svg"))
    return png, svg


# A full disk or a full quota: the only failures that freeing space (or another folder with room) cures.
_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}  # (no EDQUOT on Windows)
_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS}


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` into a hidden part file of this writer's own beside ``path``, then rename it onto ``path``;
    returns ``path``.

    A rename within one folder is atomic, so a reader sees the earlier file or the whole new one, never half of
    one (a full disk used to leave a truncated PNG in place of a good one). The part file's name is unique to
    this call (``.<name>.<pid>-<random>.part``): two runs saving the same figure at once each rename a whole file
    of their own, and the last rename wins (one shared name used to interleave their bytes, then fail the second
    rename). Where the write fails with an OSError the part file is removed, the earlier ``path`` stays as it was,
    and an OSError names ``path`` and the cause; the free space, and the advice to free some, only when the disk
    or the quota is full. Used for every figure, table and page cnnlab writes.
    """
    from cnnlab.data.storage import free_space, remove_quietly

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # hidden, no *.png/*.csv glob of the report matches it, and ".part" keeps pandas from inferring a compression;
    # the writer creates it, so it gets the umask's mode (mkstemp's 0600 would make every figure private)
    part = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.part")
    try:
        write(part)
        os.replace(part, path)
        return path
    except OSError as err:
        remove_quietly(part)
        code, cause = err.errno, f"{type(err).__name__}: {err.strerror or err}"
    except BaseException:
        remove_quietly(part)
        raise
    kept = f"the earlier {path.name}, if any, is kept"
    if code in _DISK_FULL:  # measured after the except block, once the writer's file (held by the traceback) is freed
        raise OSError(code, f"could not write {path} ({cause}; {free_space(path.parent)}); {kept}. Free some space "
                             "(or point CNNLAB_FIGURES_DIR at a folder with room) and run again")
    if code in _NOT_WRITABLE:
        raise OSError(code, f"could not write {path} ({cause}): its folder is not writable here; {kept}. Point "
                            "CNNLAB_FIGURES_DIR at a folder you can write to")
    raise OSError(code, f"could not write {path} ({cause}); {kept}")


__all__ = ["PALETTE", "UNITS", "LogTicks", "bar_whiskers", "bars", "batch_panels", "epoch_times", "label_for",
           "legend_below", "log2_batch_axis", "log_axes", "missing_panel", "panel_per_value", "plain_log_ticks", "plt",
           "roofline", "save_figure", "set_theme", "spread_columns", "whiskers", "write_atomic"]
