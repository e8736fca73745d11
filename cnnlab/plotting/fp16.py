"""Figures of notebook 02_fp16 (paper 001, Sec. IV-B): ``02_fig3_time_memory`` (paper Fig. 3), time per batch and
average memory against batch size, one line per precision; ``02_fig4_accuracy_loss`` (Fig. 4), test accuracy and
loss per precision."""

from __future__ import annotations

import pandas as pd

from cnnlab import plotting


def figures(df: pd.DataFrame) -> dict:
    """``02_fig3_time_memory`` (paper Fig. 3): time per batch and average memory against batch size, one line per
    precision, skipped points named below. ``02_fig4_accuracy_loss`` (Fig. 4): test accuracy and loss per
    precision, values written on the bars."""
    times = df[df["experiment"] == "timing"]
    ok = times[times["status"] == "ok"]
    skipped = times[times["status"] == "skipped"]
    text = "; ".join(f"{p}: batch {', '.join(str(int(b)) for b in g['batch_size'])} not timed"
                     for p, g in skipped.groupby("precision", sort=False))
    fig3 = plotting.batch_panels(ok, [
        ("latency_ms_median", plotting.label_for("latency_ms_median"), "Inference time per batch"),
        ("avg_mem_mib", "Average memory (MiB)", "Average memory (the claim's quantity)")], hue="precision",
        note=text + " (see error column)" if len(skipped) else "", markersize=8)

    acc = df[(df["experiment"] == "accuracy") & (df["status"] == "ok")]
    fig4, (left, right) = plotting.plt.subplots(1, 2, figsize=(9, 4))
    for ax, col, fmt, title, unit in ((left, "accuracy_pct", "%.2f", "Test accuracy", "%"),
                                      (right, "loss", "%.4f", "Test loss", "cross-entropy, nats")):
        plotting.bars(ax, acc, "precision", col, f"{title} ({unit})", values=fmt, fontsize=9)
        ax.set(xlabel="Precision", title=title)
    left.set_ylim(0, 105)
    if len(acc):
        fig4.suptitle(f"{acc['dataset'].iloc[0]} test set ({int(acc['num_examples'].iloc[0])} images, "
                      f"{acc['data_source'].iloc[0]})", fontsize=10)
    fig4.tight_layout()
    return {"02_fig3_time_memory": fig3, "02_fig4_accuracy_loss": fig4}
