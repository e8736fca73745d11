"""Figures of notebook 00_quickstart: ``quickstart_latency_throughput``, time per batch (median, p10-p90) and
throughput (the claim's: batch size / that time, so the same interval) against batch size."""

from __future__ import annotations

import pandas as pd

from cnnlab import plotting


def figures(df: pd.DataFrame) -> dict:
    """``quickstart_latency_throughput``; where no batch size was measured (none fit in memory), both panels say so,
    with each batch size's status."""
    batch = df[df["experiment"] == "batch"]
    ok = batch[batch["status"] == "ok"]
    fig, axes = plotting.plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    axes[0].set_title("Time per batch (median, p10-p90)")
    axes[1].set_title("Throughput (batch size / time per batch)")
    if ok.empty:
        statuses = ", ".join(f"{int(b)} {s}" for b, s in zip(batch["batch_size"], batch["status"]))
        for ax in axes:
            plotting.missing_panel(ax, f"no batch size measured\n(batch sizes: {statuses or 'none'})")
        return {"quickstart_latency_throughput": fig}
    axes[0].errorbar(ok["batch_size"], ok["latency_ms_median"],
                     yerr=[ok["latency_ms_median"] - ok["latency_ms_p10"],
                           ok["latency_ms_p90"] - ok["latency_ms_median"]], marker="o", capsize=3)
    axes[0].set_ylabel(plotting.label_for("latency_ms_median"))
    axes[1].errorbar(ok["batch_size"], ok["throughput_items_per_s"],
                     yerr=[ok["throughput_items_per_s"] - ok["throughput_items_per_s_low"],
                           ok["throughput_items_per_s_high"] - ok["throughput_items_per_s"]], marker="o", capsize=3)
    axes[1].set_ylabel("Throughput (images/s)")
    for ax in axes:
        ax.set_yscale("log")
        plotting.log2_batch_axis(ax, values=sorted(ok["batch_size"].astype(int)))
    fig.suptitle(f"{ok['model'].iloc[0]} inference on {ok['device_name'].iloc[0]}")
    return {"quickstart_latency_throughput": fig}
