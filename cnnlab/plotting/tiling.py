"""Figures of notebook 04_tiling (``cnnlab.studies.tiling``).

``04_fig6_tiling``: paper 001's Fig. 6 as four panels against tile size (time per batch with p10-p90 bars, GPU
utilisation, average memory, peak memory), one line per tiling method, the untiled model as a dotted grey line.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cnnlab import plotting

TILED_METHODS = ("spatial", "triton")  # the untiled model is always measured, as the baseline
PAPER_TILE_SIZES = [8, 16, 32, 64]  # Sec. IV-D
PANELS = [("latency_ms_median", "Inference time per batch (ms)", "Inference time (lower is better)"),
          ("gpu_util_pct", "GPU utilisation (%)", "GPU utilisation (higher is better)"),
          ("avg_mem_mib", "Average memory (MiB)", "Average memory"),
          ("peak_mem_alloc_mib", "Peak memory allocated (MiB)", "Peak memory")]
_STYLE = {"spatial": dict(marker="o", linestyle="-"), "triton": dict(marker="s", linestyle="--")}
_NAMES = {"spatial": "spatial tiling (strips of tile rows)", "triton": "Triton kernel (tile x tile output pixels)"}


def why_missing(rows: pd.DataFrame, metric: str | None = None) -> str:
    """Why ``rows`` have no ``metric``: their missing-reason column's values and the first clause of the errors of
    the rows not measured (the figure's and the claims' notes)."""
    col = {"gpu_util_pct": "gpu_util_missing_reason", "avg_mem_mib": "avg_mem_missing_reason"}.get(metric)
    reasons = set(rows[col].dropna().astype(str)) if col in rows else set()
    if "error" in rows:
        reasons |= {str(e).split(":")[0] for e in rows.loc[rows["status"] != "ok", "error"].dropna()}
    return "; ".join(sorted(reasons))


def figures(df: pd.DataFrame) -> dict:
    """``04_fig6_tiling``: paper Fig. 6 as four panels against tile size: time per batch (with p10-p90 bars), GPU
    utilisation, average memory and peak memory; one line per tiling method, the untiled model as a dotted grey
    line. A panel or method this device cannot measure says why instead of showing zeros."""
    tiles = df[df["experiment"] == "tiles"]
    ok = tiles[tiles["status"] == "ok"]
    base = ok[ok["method"] == "untiled"]
    colors = dict(zip(TILED_METHODS, plotting.plt.get_cmap("tab10").colors[::3]))
    fig, axes = plotting.plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    for ax, (metric, ylabel, title) in zip(axes.flat, PANELS):
        ax.set_title(title)
        drawn = False
        for method in TILED_METHODS:
            d = ok[ok["method"] == method].dropna(subset=[metric]).sort_values("tile_px") if metric in ok else ok[:0]
            if len(d):
                y = d[metric].to_numpy(dtype=float)
                ax.plot(d["tile_px"], y, color=colors[method], label=_NAMES[method], **_STYLE[method])
                if metric == "latency_ms_median":
                    plotting.whiskers(ax, d["tile_px"], y, d["latency_ms_p10"], d["latency_ms_p90"],
                                      ecolor=colors[method], capsize=3, lw=1)
                drawn = True
        if len(base) and not np.isnan(float(base[metric].iloc[0])):
            ax.axhline(float(base[metric].iloc[0]), color="0.4", linestyle=":", lw=1.5, label="untiled")
            drawn = True
        if not drawn:
            plotting.missing_panel(ax, f"not measured on this device:\n{why_missing(tiles, metric) or 'no data'}")
        else:
            ax.set_ylabel(ylabel)
            if metric == "gpu_util_pct":
                ax.set_ylim(0, 100)
            elif metric != "latency_ms_median":
                ax.set_ylim(bottom=0)
        tiles_px = sorted({int(t.split("x")[0]) for t in tiles["tile"] if t != "untiled"})  # "8x8" -> 8
        plotting.log2_batch_axis(ax, values=tiles_px or PAPER_TILE_SIZES, label="Tile edge (pixels)")
    for ax in axes[0]:
        ax.set_xlabel("")  # shared with the panel below, which carries the label and the ticks
    plotting.legend_below(fig, axes.flat, -0.01, ncol=3, fontsize=9)
    untimed = tiles[tiles["status"] == "skipped"]
    if len(untimed):
        missing = "; ".join(f"{_NAMES.get(m, m)}: {why_missing(rows)}"
                            for m, rows in untimed.groupby("method", sort=False))
        fig.text(0.5, -0.045, f"Not measured on this device: {missing}", ha="center", fontsize=9, color="0.3")
    if len(ok):
        first = ok.iloc[0]
        size = int(first["image_size"])
        fig.suptitle(f"Tile size vs time, utilisation and memory ({first['model']}, batch "
                     f"{int(first['batch_size'])}, {size}x{size} input)", fontweight="bold")
    fig.tight_layout()
    return {"04_fig6_tiling": fig}
