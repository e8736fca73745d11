"""The figures of notebook 06_lstm_pruning (cnnlab.studies.lstm_pruning): ``06_training_profile`` (a training step's
12 slowest operators, the LSTM's highlighted), ``06_loader_sweep`` (train and test epoch time in s against batch
size, per ``num_workers``: median and range of the rounds), ``06_sensitivity`` (accuracy in % right after pruning
against the ratio, per method) and ``06_final_models`` (train epoch s, latency ms, MiB, MB, accuracy % per variant)."""

from __future__ import annotations

import pandas as pd

from cnnlab import plotting
from cnnlab.plotting import plt, sns


def figures(df: pd.DataFrame) -> dict:
    """The four figures, named as they are saved, from :func:`cnnlab.studies.lstm_pruning.measure`'s frame."""
    parts = {name: part for name, part in df.groupby("experiment", sort=False)}
    prof = parts["training_profile"].head(12)
    prof = prof.assign(part=prof["is_lstm"].astype(bool).map({True: "LSTM", False: "other"}))
    profile, ax = plt.subplots(figsize=(7, 0.35 * len(prof) + 1.2))
    sns.barplot(data=prof, y="name", x="share_pct", hue="part", dodge=False, ax=ax)
    ax.set(xlabel=f"Share of {prof['time_kind'].iloc[0]} (%)", ylabel="",
           title=f"LSTM training step on {prof['device'].iloc[0]}")
    profile.tight_layout()
    loaders = parts["loader_sweep"]
    ok = loaders[loaders["status"] == "ok"].astype({"batch_size": int, "num_workers": int})
    by_workers = plotting.epoch_times(ok, "batch_size", "num_workers", palette="colorblind")
    for ax in by_workers.axes.flat:
        plotting.log2_batch_axis(ax, values=sorted(by_workers.data["batch_size"].unique()))
        ax.set_ylabel(plotting.label_for("epoch_time_s"))
    by_workers.figure.suptitle(f"LSTM epoch time, median and range of {loaders['round'].nunique()} rounds (workers "
                               f"capped at {int(loaders['num_workers_cap'].iloc[0])})", y=1.03)
    sens = parts["sensitivity"]
    sens = sens[sens["status"] == "ok"].assign(pruned=lambda d: [
        t if s == "layer" else f"{s} ({t})" for s, t in zip(d["scope"], d["tensor"])])
    by_ratio = sns.relplot(data=sens, x="ratio", y="accuracy_pct", hue="pruned", col="method", kind="line",
                           marker="o", height=3.2, aspect=1.0)
    for ax in by_ratio.axes.flat:
        ax.axhline(sens["dense_accuracy_pct"].iloc[0], color="black", linestyle="--", linewidth=1, label="dense")
        ax.axhline(50.0, color="grey", linestyle=":", linewidth=1)
    by_ratio.set_axis_labels("Pruning ratio", plotting.label_for("accuracy_pct"))
    by_ratio.figure.suptitle("Accuracy right after pruning (dashed: dense, dotted: chance)", y=1.03)
    final = parts["final_models"]
    cols = ["train_epoch_s", "latency_ms_median", "train_step_peak_mem_mib", "size_mb", "accuracy_pct"]
    final_fig, axes = plt.subplots(1, len(cols), figsize=(3.4 * len(cols), 3.8))
    for ax, col in zip(axes, cols):
        plotting.bars(ax, final, "variant", col, plotting.label_for(col))
        ax.tick_params(axis="x", rotation=35)
    final_fig.tight_layout()
    final_fig.suptitle(f"Final models at ratio {final['ratio'].max():g} on {final['device'].iloc[0]}", y=1.04)
    return {"06_training_profile": profile, "06_loader_sweep": by_workers.figure, "06_sensitivity": by_ratio.figure,
            "06_final_models": final_fig}
