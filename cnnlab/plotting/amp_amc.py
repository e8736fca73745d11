"""Figure of notebook 03_amp_amc (paper 001, Sec. IV-C): ``03_fig5_time_memory`` (paper Fig. 5), time per batch and
the model's own peak memory per model, one bar per variant."""

from __future__ import annotations

import math

import pandas as pd
import seaborn as sns

from cnnlab import plotting

# The study's variants in the order they are drawn; a variant's name lists its settings (cnnlab.studies.amp_amc)
VARIANTS = ("fp32", "amp", "amc", "amp+amc", "amp+amc+compile")


def figures(df: pd.DataFrame) -> dict:
    """``03_fig5_time_memory`` (paper Fig. 5): time per batch (top, p10-p90 bars) and peak memory allocated to the
    model's own tensors (bottom, each variant's % change against fp32 on its bar; the libraries' workspaces are left
    out) per model, one bar per variant."""
    ok = df[df["status"] == "ok"]
    order = [v for v in VARIANTS if v in set(ok["variant"])]
    names = list(dict.fromkeys(ok["model"]))
    fig, (top, bottom) = plotting.plt.subplots(2, 1, figsize=(max(7, 1.6 * len(names) + 3), 8), sharex=True)
    for ax, col, title in ((top, "latency_ms_median", "Time per batch (median, bars: p10-p90)"),
                           (bottom, "peak_mem_model_mib", "Peak memory of the model's own tensors (no workspaces)")):
        sns.barplot(data=ok, x="model", y=col, order=names, hue="variant", hue_order=order, ax=ax, errorbar=None)
        ax.set_ylabel(plotting.label_for(col) if col != "peak_mem_model_mib" else "Model's own peak memory (MiB)")
        ax.set_title(f"{title}, batch {int(ok['batch_size'].iloc[0])}" if len(ok) else title)
    plotting.bar_whiskers(top, ok, "model", names, "variant", order, "latency_ms_median", "latency_ms_p10",
                          "latency_ms_p90", ecolor="0.2", capsize=3, lw=1)  # the spread of the timed batches
    for container, variant in zip(bottom.containers, order):
        if variant != "fp32":
            rows = ok[ok["variant"] == variant].set_index("model")["mem_change_pct_vs_fp32"]
            bottom.bar_label(container, labels=[f"{rows.get(name, math.nan):+.0f}%" for name in names], fontsize=8)
    bottom.get_legend().remove()
    top.legend(title="variant", fontsize=8)
    bottom.set_xlabel("Model")
    fig.tight_layout()
    return {"03_fig5_time_memory": fig}
