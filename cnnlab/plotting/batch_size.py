"""Figures of notebook 01_batch_size (paper 001, Sec. IV-A): ``01_fig1_time_memory`` (Fig. 1: total time for the
images and peak memory against batch size), ``01_fig2_latency_utilisation`` (Fig. 2: time per batch and GPU
utilisation), ``01_time_breakdown`` (each batch's time by component, one panel per model) and ``01_roofline``
(achieved GFLOP/s against arithmetic intensity under the device's roofs)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cnnlab import plotting
from cnnlab.profiling.ops import HOST_WAIT, STEP_COMPONENTS

# Components of experiment "breakdown". The stacked ones partition the time of a batch; the host's wait for the
# GPU overlaps device work (the host waits while kernels run), so it is shown beside the stack, not in it.
STACKED = list(STEP_COMPONENTS)[:5]


def _ok(df: pd.DataFrame, experiment: str) -> pd.DataFrame:
    return df[(df["experiment"] == experiment) & (df["status"] == "ok")].sort_values("batch_size", kind="stable")


def _breakdown(ok: pd.DataFrame):
    names = list(dict.fromkeys(ok["model"]))
    fig, axes = plotting.plt.subplots(1, len(names), figsize=(4.2 * len(names), 4.5), squeeze=False, sharey=True)
    colors = dict(zip(STACKED, plotting.plt.get_cmap("tab10").colors))
    for ax, name in zip(axes[0], names):
        d = ok[ok["model"] == name]
        sizes = sorted(set(d["batch_size"]))
        pos, bottom = np.arange(len(sizes)), np.zeros(len(sizes))
        share = d.pivot_table(index="batch_size", columns="component", values="share_of_latency_pct", dropna=False)
        for comp in (c for c in STACKED if c in share and share[c].notna().any()):  # none on a CPU: no legend
            height = share[comp].reindex(sizes).fillna(0).to_numpy()
            ax.bar(pos, height, bottom=bottom, color=colors[comp], label=comp, width=0.7)
            bottom += height
        if HOST_WAIT in share and share[HOST_WAIT].notna().any():
            ax.plot(pos, share[HOST_WAIT].reindex(sizes).to_numpy(dtype=float), "kD", label=f"{HOST_WAIT} (overlaps)")
        first = d.groupby("batch_size")[["unprofiled_latency_ms", "profile_stretch"]].first().reindex(sizes)
        for p, (ms, stretch), b in zip(pos, first.itertuples(index=False), bottom):
            ax.text(p, b + 1, f"{ms:.3g} ms\nx{stretch:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(pos, [str(s) for s in sizes])
        ax.set(xlabel="Batch size", title=name, ylim=(0, 125))
    axes[0][0].set_ylabel("Share of the unprofiled time per batch (%)")
    fig.text(0.5, -0.02, "above each bar: the unprofiled time per batch, and how much profiling stretched it "
             "(profiled / unprofiled)", ha="center", fontsize=8)
    plotting.legend_below(fig, [axes[0][0]], -0.06)
    fig.tight_layout()
    return fig


def _roofline(roof: pd.DataFrame):
    """Each model at its best batch under the device's FP32 roof (and TF32's, where cuDNN uses it for fp32)."""
    first = roof.iloc[0] if len(roof) else pd.Series(dtype=object)
    bw = first.get("peak_bandwidth_gb_per_s", math.nan)
    roofs = {"FP32": first.get("peak_fp32_tflop_per_s", math.nan)}
    if first.get("cudnn_allow_tf32") == True:  # noqa: E712 (None on a CPU)
        roofs["TF32 (cuDNN default for fp32 convs)"] = first["peak_tf32_tflop_per_s"]
    roofs = {k: v * 1e3 for k, v in roofs.items() if not (math.isnan(v) or math.isnan(bw))}  # GFLOP/s
    if roofs:
        title = f"Roofline: {first['device_name']}"
    else:
        reason = next(iter(roof["peaks_missing_reason"].dropna()), "device peaks unknown") if len(roof) else "no data"
        title = f"Achieved FLOP/s vs arithmetic intensity\n(no roof lines: {reason.split(';')[0]})"
    return plotting.roofline(roof["arithmetic_intensity_flop_per_byte"], roof["achieved_tflop_per_s"] * 1e3,
                             [f"{m} (batch {int(b)})" for m, b in zip(roof["model"], roof["batch_size"])], roofs, bw,
                             title)



def figures(df: pd.DataFrame) -> dict:
    """Paper Fig. 1 (total time for the images, peak memory: ``01_fig1_time_memory``) and Fig. 2 (time per
    batch, GPU utilisation: ``01_fig2_latency_utilisation``; no utilisation panel where it was not measured, as on
    a CPU: the line under the figure says so) against batch size, times with their p10-p90; each batch's wall time by
    component, one panel per model (``01_time_breakdown``); achieved GFLOP/s against arithmetic intensity
    under the device's roofs where known (``01_roofline``)."""
    batch, roof = _ok(df, "batch"), df[df["experiment"] == "roofline"]  # roofline: models in grid order
    images = int(batch["images"].min()) if len(batch) else 0
    linear = {"gpu_util_pct": (0, 100)}
    return {"01_fig1_time_memory": plotting.batch_panels(batch, [
                ("total_time_s", f"Total time for {images:,} images (s)", "Total inference time"),
                ("peak_mem_alloc_mib", plotting.label_for("peak_mem_alloc_mib"), "Peak memory allocated")],
                linear=linear),
            "01_fig2_latency_utilisation": plotting.batch_panels(batch, [
                ("latency_ms_mean", "Average time per batch (ms)", "Average inference time per batch"),
                ("gpu_util_pct", plotting.label_for("gpu_util_pct"), "GPU utilisation")], linear=linear),
            "01_time_breakdown": _breakdown(_ok(df, "breakdown")), "01_roofline": _roofline(roof)}
