"""Figures of notebook 07_vgg_quantization (``cnnlab.studies.vgg_quantization``), drawn from its measured frame:

- ``07_loader_sweep``: epoch time (s) per DataLoader ``num_workers``, train and test, a line per pin_memory: median
  and range of the rounds;
- ``07_int8``: fp32 vs int8 on the CPU: serialized size (MB), test accuracy (%), latency per batch (ms);
- ``07_inference_profile``: self CPU time (ms) of the top operators per precision;
- ``07_compiled_inference``: per method, warm latency per batch (ms) and the first pass over the test set (s).
"""

from __future__ import annotations

import pandas as pd

from cnnlab import plotting


def ok(df: pd.DataFrame, experiment: str) -> pd.DataFrame:
    """The rows of ``experiment`` whose status is "ok" (the study's claims read them too)."""
    return df[(df["experiment"] == experiment) & (df["status"] == "ok")]


def figures(df: pd.DataFrame) -> dict:
    """The four figures above, by the name they are saved under."""
    loaders = ok(df, "loader_sweep")
    pinned = "pinned" if str(loaders["device"].iloc[0]).startswith("cuda") else "pinned (no effect without a GPU)"
    grid = plotting.epoch_times(loaders.assign(pin_memory=loaders["pin_memory"].astype(bool).map(
        {True: pinned, False: "pageable"})), "num_workers", "pin_memory")
    grid.set_axis_labels("DataLoader num_workers", plotting.label_for("epoch_time_s"))
    for ax in grid.axes.flat:
        ax.set_xticks(sorted(grid.data["num_workers"].unique()))
    grid.figure.suptitle(f"DataLoader workers, median and range of {loaders['round'].nunique()} rounds (cap: "
                         f"{int(loaders['num_workers_cap'].iloc[0])} cores)", y=1.03)

    int8 = ok(df, "int8")
    fig_int8, axes = plotting.plt.subplots(1, 3, figsize=(10, 3.2), layout="constrained")
    for ax, col, label in zip(axes, ("export_size_mb", "accuracy_pct", "latency_ms_median"),
                              ("Serialized size (MB)", "Test accuracy (%)", "CPU latency per batch (ms)")):
        plotting.bars(ax, int8, "precision", col, label, errors=col == "latency_ms_median", values=True)
    fig_int8.suptitle("VGG-11 fp32 vs PT2E int8 (CPU)")

    ops = ok(df, "inference_profile")
    precisions = list(dict.fromkeys(ops["precision"]))
    fig_ops, axes = plotting.plt.subplots(1, len(precisions), squeeze=False, layout="constrained", figsize=(
        6 * len(precisions), 0.35 * ops.groupby("precision").size().max() + 1.2))
    for ax, precision in zip(axes[0], precisions):
        part = ops[ops["precision"] == precision]
        plotting.sns.barplot(data=part, y="name", x="self_cpu_time_ms", ax=ax, color=plotting.sns.color_palette()[0])
        ax.set(xlabel=plotting.label_for("self_cpu_time_ms"), ylabel="",
               title=f"{precision} on {part['device'].iloc[0]}, {int(part['iterations'].iloc[0])} batches")

    compiled = ok(df, "compiled_inference")
    fig_compiled, axes = plotting.plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
    plotting.bars(axes[0], compiled, "method", "latency_ms_median", "Latency per batch (ms)", errors=True)
    axes[0].set_title(f"Warm: batches of {int(compiled['batch_size'].iloc[0])} after the first pass", fontsize=10)
    plotting.bars(axes[1], compiled, "method", "first_pass_s", "First pass (s)", values=True)
    axes[1].set_title(f"First pass over the {int(compiled['first_pass_items'].iloc[0])} test images, first call "
                      "included", fontsize=10)
    axes[1].set_yscale("log")
    plotting.plain_log_ticks(axes[1])
    plotting.plt.setp([ax.get_xticklabels() for ax in axes], rotation=20)
    fig_compiled.suptitle(f"VGG-11 inference on {compiled['device'].iloc[0]}: " + ", ".join(compiled["method"]))
    return {"07_loader_sweep": grid.figure, "07_int8": fig_int8, "07_inference_profile": fig_ops,
            "07_compiled_inference": fig_compiled}
