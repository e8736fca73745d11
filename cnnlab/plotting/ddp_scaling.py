"""The figures of notebook 05_ddp_scaling (study :mod:`cnnlab.studies.ddp_scaling`).

- ``05_<metric>`` for each of :data:`METRICS`: the paper's Fig. 1-15, one panel per data fraction, batch size per
  process on the x axis (log2), a line per process count named by how its processes ran ("2 processes sharing
  1 GPU"); a metric not measured on this device (CUDA time on a CPU) gets panels that say why.
- ``05_scaling``: throughput and scaling efficiency against process count, with the ideal lines, each efficiency's
  noise as an error bar and the title naming the efficiencies below their noise.

:func:`processes`, :func:`placements` and :func:`below_noise` also serve the study's claims and caveats.
"""

from __future__ import annotations

import textwrap

import pandas as pd
import seaborn as sns

from cnnlab import plotting
from cnnlab.profiling.spread import Spread

# The paper's metrics (its Fig. 1-15) as we measure them, with axis labels; the figure of each is "05_<metric>".
# The profiled totals are over all the timed epochs (the profiled steps scaled to them, see
# cnnlab.ddp.train_and_profile), per rank; epoch_time_s is measured per epoch (add_epoch_time); peaks are per rank.
METRICS = {
    "epoch_time_s": "Measured time per epoch (s), slowest process",
    "cpu_total_ms": "Profiler CPU total, all timed epochs (ms)",
    "cuda_total_ms": "Profiler CUDA total, all timed epochs (ms)",
    "conv_calls": "Convolution calls, all timed epochs (per rank)",
    "calls_total": "All operator calls, all timed epochs (per rank)",
    "max_cpu_mem_mib": "Peak CPU memory (MiB)",
    "max_gpu_mem_mib": "Peak GPU memory (MiB)",
    "cpu_mem_allocated_mib": "CPU memory allocated, all timed epochs (MiB)",
    "gpu_mem_allocated_mib": "GPU memory allocated, all timed epochs (MiB)",
}
MISSING_REASON = {"cuda_total_ms": "cuda_missing_reason", "max_gpu_mem_mib": "max_gpu_mem_missing_reason",
                  "gpu_mem_allocated_mib": "max_gpu_mem_missing_reason"}


def processes(row) -> str:
    """How a point's processes ran: its ``placement`` ("2 processes sharing 1 GPU"), else "<w> processes"."""
    label = row.get("placement")
    return label if isinstance(label, str) else f"{row['world_size']:g} processes"


def placements(df: pd.DataFrame) -> dict:
    """Process count -> how its processes ran (:func:`processes`; the first row's), in order."""
    return {w: processes(rows.iloc[0]) for w, rows in df.groupby("world_size")}


def below_noise(df: pd.DataFrame) -> list[tuple]:
    """(row, efficiency Spread, kind) of every efficiency of more than one process that says nothing about scaling:
    "once" (no interval: too few rounds, its noise unknown), "above" (above 1 beyond its noise), or "spans" (its
    interval covers no speed-up, 1 / processes, to ideal, 1)."""
    out = []
    ok = df[(df["status"] == "ok") & df["scaling_efficiency"].notna() & (df["world_size"] > 1)]
    for _, row in ok.iterrows():
        bounded = all(pd.notna(row.get(f"scaling_efficiency_{end}")) for end in ("min", "max"))
        eff = Spread.of_range(row, "scaling_efficiency") if bounded else Spread.exact(row["scaling_efficiency"])
        floor = 1 / row["world_size"]
        kind = "once" if not bounded else "above" if eff.low > 1 else \
            "spans" if eff.low <= floor and eff.high >= 1 else None
        if kind:
            out.append((row, eff, kind))
    return out


def _plot_metric(df: pd.DataFrame, metric: str):
    """The figure ``05_<metric>`` (see the module's docstring)."""
    def why(rows):  # a point that did not run says why in error
        reasons = rows[MISSING_REASON[metric]].fillna(rows["error"]).dropna() if metric in MISSING_REASON else []
        return reasons.iloc[0] if len(reasons) else "no successful point"

    ok = df[(df["status"] == "ok") & df[metric].notna()].sort_values("world_size", kind="stable")
    ok = ok.assign(processes=[processes(row) for _, row in ok.iterrows()])
    return plotting.panel_per_value(df, ok, "data_fraction", "batch_size_per_rank", metric, "processes",
                                    title=lambda f: f"data fraction {f:g}", xlabel="Batch size per process",
                                    ylabel=METRICS[metric], legend="processes", why=why, reverse=True)


def _plot_scaling(df: pd.DataFrame):
    """Throughput (samples/s) and scaling efficiency against process count (each tick says how its processes
    ran: "2 processes sharing 1 GPU"), one line per batch size per process and data fraction, with the ideal line
    (throughput x processes; efficiency 1); each efficiency with its noise (add_scaling) as an error
    bar, and the title saying which efficiencies are below their noise (:func:`below_noise`)."""
    ok = df[df["status"] == "ok"].copy()
    ok["configuration"] = [f"b{b:g}, f{f:g}" for b, f in zip(ok["batch_size_per_rank"], ok["data_fraction"])]
    fig, (left, right) = plotting.plt.subplots(1, 2, figsize=(10, 3.8))
    worlds = sorted(ok["world_size"].unique()) if len(ok) else [1]
    top, eff = 1.2, ok[ok["scaling_efficiency"].notna()]
    if len(ok):
        sns.lineplot(data=ok, x="world_size", y="throughput_samples_per_s", hue="configuration", marker="o",
                     palette=plotting.PALETTE, ax=left)
        for _, base in ok[ok["world_size"] == 1].iterrows():
            left.plot(worlds, [base.throughput_samples_per_s * w for w in worlds], color="grey", lw=0.8, ls=":")
        sns.lineplot(data=eff, x="world_size", y="scaling_efficiency", hue="configuration", marker="o",
                     palette=plotting.PALETTE, ax=right, legend=False)
        if "scaling_efficiency_min" in eff:
            low = (eff["scaling_efficiency"] - eff["scaling_efficiency_min"].fillna(eff["scaling_efficiency"]))
            high = (eff["scaling_efficiency_max"].fillna(eff["scaling_efficiency"]) - eff["scaling_efficiency"])
            right.errorbar(eff["world_size"], eff["scaling_efficiency"], yerr=[low.clip(lower=0), high.clip(lower=0)],
                           fmt="none", ecolor="grey", capsize=3, lw=0.8)
            top = max(top, float(eff["scaling_efficiency_max"].fillna(eff["scaling_efficiency"]).max()) + 0.1)
        elif len(eff):
            top = max(top, float(eff["scaling_efficiency"].max()) + 0.1)
    right.axhline(1.0, color="grey", ls=":", lw=1, label="ideal")
    left.plot([], [], color="grey", ls=":", lw=0.8, label="ideal (linear)")
    left.legend(fontsize="small")
    ran = placements(ok)
    for ax in (left, right):
        ax.set_xticks(worlds, [textwrap.fill(ran.get(w, f"{w:g}"), 16) for w in worlds], fontsize="small")
        ax.set_xlabel("Processes")
    left.set_ylabel("Throughput (samples/s)")
    right.set_ylabel("Scaling efficiency (speed-up / processes)")
    right.set_ylim(0, top)
    right.legend(loc="lower left")
    below = below_noise(df)
    short = {"once": "too few rounds", "above": "above 1 beyond its noise", "spans": "range spans no speed-up to 1"}
    names = "; ".join(f"b{r['batch_size_per_rank']:g}, f{r['data_fraction']:g}, {processes(r)}: {short[kind]}"
                      for r, _, kind in below)
    right.set_title("bars: the sign test's interval over the paired rounds" if not below else textwrap.fill(
        f"{len(below)} of {int((eff['world_size'] > 1).sum())} below their noise (say nothing about scaling): "
        f"{names}", 70), fontsize="small", color="black" if not below else "#9a6700")
    fig.tight_layout()
    return fig


def figures(df: pd.DataFrame) -> dict:
    """``05_<metric>`` for each of :data:`METRICS`, then ``05_scaling`` (the module's docstring says what each
    shows)."""
    figs = {f"05_{metric}": _plot_metric(df, metric) for metric in METRICS}
    figs["05_scaling"] = _plot_scaling(df)
    return figs
