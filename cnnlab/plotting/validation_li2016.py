"""Figures of notebook 08_validation_li2016 (``cnnlab.studies.validation_li2016``).

``08_fig7_speedups``: paper 001's Fig. 7, the whole-network speed-up of each convolution strategy over gemm
(cuDNN-MM) per network, with the paper's Opt values beside the opt bars.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cnnlab import plotting

# Paper order of Fig. 7 and the paper's name for each cnnlab strategy.
PAPER_NAMES = {"gemm": "cuDNN-MM", "fft": "cuDNN-FFT", "fft_tiled": "cuDNN-FFT-T", "direct": "cuda-convnet",
               "best": "cuDNN-Best", "opt": "Opt"}
# Sec. IV-E, Key observation 3 ("5.6x on LeNet and roughly 2x on AlexNet, ZFNet, and VGG"); none for CIFAR.
PAPER_OPT_SPEEDUP = {"LeNet": (5.6, "5.6x"), "AlexNet": (2.0, "roughly 2x"), "ZFNet": (2.0, "roughly 2x"),
                     "VGG": (2.0, "roughly 2x")}
_ORDER = (*PAPER_NAMES, "native")  # native: torch's own convolution, the reference (grey)


def figures(df: pd.DataFrame) -> dict:
    """``08_fig7_speedups`` (paper Fig. 7): speed-up over gemm (cuDNN-MM) per network, one bar per strategy
    (p10-p90 whiskers), on a log axis; the paper's Opt values as black stars beside the opt bars ("roughly"
    values hollow); strategies not measured on this device marked "n/a" in their slot."""
    runs = df[df["experiment"] == "strategies"]
    networks = list(dict.fromkeys(runs["network"]))
    order = [s for s in _ORDER if s in set(runs["strategy"])]
    colors = {**dict(zip(PAPER_NAMES, plotting.plt.get_cmap("tab10").colors)), "native": "0.6"}
    width = 0.8 / max(len(order), 1)
    fig, ax = plotting.plt.subplots(figsize=(max(8, 1.7 * len(networks) + 3), 6))
    values = runs["speedup_vs_gemm"].to_numpy(dtype=float)
    finite = values[np.isfinite(values) & (values > 0)]
    lo = min(0.5, finite.min() / 1.5) if len(finite) else 0.5
    hi = max(8.0, finite.max() * 1.6 if len(finite) else 0, max(v for v, _ in PAPER_OPT_SPEEDUP.values()) * 1.6)
    for i, strategy in enumerate(order):
        rows = runs[runs["strategy"] == strategy].set_index("network").reindex(networks)
        x = np.arange(len(networks)) - 0.4 + width * (i + 0.5)
        y, p10, p90 = (rows[c].to_numpy(dtype=float) for c in ("speedup_vs_gemm", "speedup_p10", "speedup_p90"))
        label = f"{strategy} ({PAPER_NAMES[strategy]})" if strategy in PAPER_NAMES else f"{strategy} (reference)"
        ax.bar(x, np.nan_to_num(y, nan=0.0), width=width * 0.95, color=colors[strategy], label=label)
        plotting.whiskers(ax, x, y, p10, p90, ecolor="0.2", capsize=2, lw=0.8)
        for xi, yi, ti in zip(x, y, np.fmax(y, p90)):  # the value above the whisker, or "n/a" at the bottom
            na = bool(np.isnan(yi))
            ax.text(xi, (lo if na else ti) * 1.08, "n/a" if na else f"{yi:.2g}", rotation=90, ha="center",
                    va="bottom", fontsize=8 if na else 7, color="0.3" if na else "black")
        for network, (paper, text) in PAPER_OPT_SPEEDUP.items() if strategy == "opt" else ():
            if network in networks:  # beside the opt bar, clear of its value label
                xs = x[networks.index(network)] + width * 0.75
                ax.plot(xs, paper, marker="*", markersize=13, color="black", linestyle="none",
                        markerfacecolor="white" if text.startswith("roughly") else "black", zorder=5,
                        label="paper's Opt (hollow: 'roughly')")
                ax.annotate(text.replace("roughly ", "~"), (xs, paper), xytext=(7, 0),
                            textcoords="offset points", va="center", fontsize=8)
    ax.axhline(1.0, color="0.3", lw=1, linestyle="--")
    ax.set(yscale="log", ylim=(lo, hi), xlabel="Network (input C x H x W)", ylabel="Speed-up over gemm = cuDNN-MM (x)")
    ticks = [v for v in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50) if lo <= v <= hi]
    ax.set_yticks(ticks, [f"{v:g}x" for v in ticks])
    ax.minorticks_off()
    shapes = runs.dropna(subset=["input_shape"]).drop_duplicates("network").set_index("network")["input_shape"]
    ax.set_xticks(np.arange(len(networks)), [f"{n}\n{shapes.get(n, '?')}" for n in networks])
    batch, device = runs["batch_size"].dropna(), runs["device"].dropna()
    ax.set_title(f"Whole-network speed-up per strategy (batch {int(batch.iloc[0]) if len(batch) else '?'}, "
                 f"{device.iloc[0] if len(device) else '?'})")
    unique = dict(zip(*reversed(ax.get_legend_handles_labels())))  # label -> handle: the paper's star once
    ax.legend(unique.values(), unique.keys(), fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    missing = runs[runs["status"] == "skipped"].groupby("strategy")["error"].first()
    if len(missing):  # the reason's first clause ("Triton kernels are timed only on a GPU")
        ax.text(0.5, -0.38, "n/a: " + "; ".join(f"{s}: {str(r).split(': ')[0]}" for s, r in missing.items()),
                ha="center", fontsize=9, color="0.3", transform=ax.transAxes, va="top")
    fig.tight_layout()
    return {"08_fig7_speedups": fig}
