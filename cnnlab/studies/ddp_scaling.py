"""Study 05 (ddp_scaling): data-parallel scaling of training over data fraction, batch size and process count.

Paper 002 (Iwano, "Comparative Analysis of Runtime and Memory Optimization with ResNet152") trains
ResNet-152 on 1, 1/2 and 1/10 of CIFAR-100 with batch sizes 128-2048 on 1, 2 and 4 A100 GPUs and
reports, from the PyTorch profiler, CPU and CUDA runtime, number of calls and "maximum CPU and GPU
memory transfer" (its Fig. 1-15). Here every grid point is one ``torchrun`` launch of ``cnnlab.ddp``
(:func:`cnnlab.ddp.launch`: timed epochs, then ``profile_steps`` profiled steps whose totals are scaled to the
epochs) through :func:`cnnlab.profiling.sweep` (resumable; a failed point is recorded and the sweep goes on), and
:func:`add_scaling` adds what the paper lacks: speed-up and scaling efficiency against one process.

Memory is reported two ways: the peak of live tensor bytes (``max_*_mem_mib``) and the cumulative bytes allocated
per epoch (``*_mem_allocated_mib``). The paper's Fig. 10-15 show memory that falls with more GPUs at a fixed
per-GPU batch, which a peak cannot do (every GPU holds the same model and batch); bytes allocated per epoch can
(each GPU takes fewer steps), so the paper's memory claims are judged on those.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pandas as pd
import seaborn as sns
import torch

from cnnlab import config, ddp, plotting
from cnnlab.claims import Claim
from cnnlab.profiling import store_file, sweep

# Four threads per process on a GPU run (data loading, the optimizer), never more than the cores present (Colab's
# free GPU runtime has two).
_THREADS = min(4, config.cores())
MAX_WORLD_SIZE = 64  # processes of one standalone launch (one machine), whatever is present
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week per configuration

# The grid parameter "batch size" is the batch of each process (the paper's DataLoader batch_size in
# every process, sec. 3.2); the global batch is batch_size_per_rank x world_size.
PRESETS = {
    # CPU smoke run: Gloo, 1 and 2 processes, LeNet-5 (no stem option: stem=None) on the real offline digits set
    # (1437 images), batch sizes of 32 and 128.
    "quick": dict(model="lenet5", stem=None, dataset="digits", synthetic=False, data_fractions=[1.0, 0.5],
                  batch_sizes=[32, 128], world_sizes=[1, 2], epochs=1, profile_steps=3, device="cpu",
                  threads_per_rank=1, timeout_s=180, oversubscribe=False),
    # One Colab GPU: the paper's model and data, a smaller grid; world sizes above the GPU count are skipped.
    "standard": dict(model="resnet152", stem="imagenet", dataset="cifar100", synthetic=False,
                     data_fractions=[0.5, 0.1], batch_sizes=[128, 512], world_sizes=[1, 2], epochs=1, profile_steps=5,
                     device="auto", threads_per_rank=_THREADS, timeout_s=1800, oversubscribe=False),
    # The paper's grid (sec. 4.2.2) and model: torchvision's ResNet-152 (the ImageNet stem) on 32x32 CIFAR-100, which
    # is what fits its batches of up to 2048 per 40 GB A100 (the 3x3 CIFAR stem needs 16x the activations). The
    # paper does not give the epoch count: one epoch, timed whole; 10 steps of it profiled.
    "paper": dict(model="resnet152", stem="imagenet", dataset="cifar100", synthetic=False,
                  data_fractions=[1.0, 0.5, 0.1], batch_sizes=[128, 512, 1024, 2048], world_sizes=[1, 2, 4],
                  epochs=1, profile_steps=10, device="auto", threads_per_rank=_THREADS, timeout_s=3600,
                  oversubscribe=False),
}
DEVICES = ("auto", "cpu", "cuda")
GRID = {"data_fraction": "data_fractions", "batch_size_per_rank": "batch_sizes", "world_size": "world_sizes"}
# The paper's five profiler metrics (its Fig. 1-15), with axis labels; the figure of each is "05_<metric>".
# Profiled totals are per rank and per epoch (see cnnlab.ddp.train_and_profile); peaks are per rank.
METRICS = {
    "cpu_total_ms": "CPU total time per epoch (ms)",
    "cuda_total_ms": "CUDA total time per epoch (ms)",
    "calls_total": "Number of calls per epoch (per rank)",
    "max_cpu_mem_mib": "Peak CPU memory (MiB)",
    "max_gpu_mem_mib": "Peak GPU memory (MiB)",
    "cpu_mem_allocated_mib": "CPU memory allocated per epoch (MiB)",
    "gpu_mem_allocated_mib": "GPU memory allocated per epoch (MiB)",
}
MISSING_REASON = {"cuda_total_ms": "cuda_missing_reason", "max_gpu_mem_mib": "max_gpu_mem_missing_reason",
                  "gpu_mem_allocated_mib": "max_gpu_mem_missing_reason"}
# Sec. 4.5's "relatively unaffected" read as: every point within +-25% of one value (largest/smallest <= 1.67).
CPU_MEMORY_SPREAD = 1.25 / 0.75


def configure(preset: str | None = None, **overrides):
    """The preset's parameters with ``overrides`` on top, validated (see ``cnnlab.studies``); ``cfg.device`` is
    "cpu" or "cuda" (``device="auto"``: CUDA when available). On a CPU, world sizes and threads_per_rank are at most
    the cores present unless ``oversubscribe=True`` (then at most :data:`MAX_WORLD_SIZE`)."""
    from cnnlab import data, models
    from cnnlab.models import resnet_imagenet

    cfg = config.configure(preset, PRESETS, **overrides)
    config.one_of(cfg.model, models.names(), parameter="model")
    default_stem = models.options(cfg.model).get("stem")  # None: the model has no stem option
    if default_stem is None and cfg.stem is not None:
        raise ValueError(f"stem={cfg.stem!r} is not valid for model={cfg.model!r}, which has no stem option; "
                         f"valid: None")
    if default_stem is not None:  # always explicit where there is one: the results say which stem ran
        cfg.stem = config.one_of(cfg.stem or default_stem, resnet_imagenet.STEMS, parameter="stem")
    config.one_of(cfg.dataset, data.names(), parameter="dataset")
    cfg.synthetic = config.boolean(cfg.synthetic, parameter="synthetic")
    fractions = config.as_list(cfg.data_fractions)
    if not fractions:
        raise ValueError("data_fractions is empty; valid: a non-empty list of fractions in (0, 1], e.g. [1.0, 0.5]")
    cfg.data_fractions = list(dict.fromkeys(config.number(f, parameter="data_fractions", low=0, high=1)
                                            for f in fractions))
    cfg.batch_sizes = config.batch_sizes(cfg.batch_sizes)
    cfg.epochs = config.positive_int(cfg.epochs, parameter="epochs")
    cfg.profile_steps = config.positive_int(cfg.profile_steps, parameter="profile_steps")
    cfg.timeout_s = config.number(cfg.timeout_s, parameter="timeout_s", low=0, high=MAX_TIMEOUT_S)
    cfg.oversubscribe = config.boolean(cfg.oversubscribe, parameter="oversubscribe")
    config.one_of(cfg.device, DEVICES, parameter="device")
    cfg.device = config.resolve_device(cfg.device).type
    # Every process of a CPU run needs a core of its own, and each of its threads too: more would measure the
    # cores' contention, not data parallelism (and world_sizes=[1000] would start 1,000 processes). On CUDA a
    # world size above the GPUs present is a skipped point (see measure): no process starts.
    cores, over = config.cores(), cfg.oversubscribe
    on_cpu = cfg.device == "cpu" and not over
    cfg.world_sizes = config.positive_ints(
        cfg.world_sizes, parameter="world_sizes", maximum=cores if on_cpu else MAX_WORLD_SIZE, example="[1, 2, 4]",
        bound=f"the {cores} CPU cores present; oversubscribe=True allows up to {MAX_WORLD_SIZE}" if on_cpu else
        "one machine's processes")
    cfg.threads_per_rank = config.positive_int(
        cfg.threads_per_rank, parameter="threads_per_rank", maximum=MAX_WORLD_SIZE if over else cores,
        bound="oversubscribe=True" if over else f"the {cores} CPU cores present; oversubscribe=True allows up to "
                                                f"{MAX_WORLD_SIZE}")
    return cfg


class LaunchFailed(RuntimeError):
    """A configuration that did not finish; the sweep records its message (an OOM one as status "oom")."""


def measure(cfg, store_dir: str | Path | None, progress: bool = True) -> pd.DataFrame:
    """One row per grid point (data fraction x batch size per process x process count), in grid order.

    A point is one launch of :func:`cnnlab.ddp.launch`; its row has :data:`cnnlab.ddp.ROW_FIELDS` (times in ms,
    wall time and launch_time_s in s, memory in MiB, throughput in samples/s; the profiler's totals are per rank,
    scaled from ``profile_steps`` steps to the epochs, see :func:`cnnlab.ddp.train_and_profile`), run_dir (the
    launch's logs and rank files, under ``store_dir/runs/<store name>``), point_time_s, and :func:`add_scaling`'s
    columns.
    Status "error" (a crash, a timeout: the reason in ``error``; run again by the next call), "oom", or
    "skipped" (a process needs its own GPU: more processes than GPUs present). Configuration columns are
    filled in on every row.
    """
    gpus = torch.cuda.device_count() if cfg.device == "cuda" else None

    def skip(world_size, **_):
        return f"needs {world_size} GPUs, {gpus} present" if gpus is not None and world_size > gpus else None

    # oversubscribe only permits a grid, it changes no measurement: not in the store's key
    settings = {k: v for k, v in vars(cfg).items() if k not in (*GRID.values(), "oversubscribe")}
    store = None if store_dir is None else Path(store_dir) / "ddp_runs.csv"
    with tempfile.TemporaryDirectory() as tmp:  # the launches' folders: one per store (per settings)
        runs = Path(tmp) if store is None else Path(store_dir) / "runs" / store_file(store, settings).stem

        def point(data_fraction, batch_size_per_rank, world_size):
            row = ddp.launch(world_size=world_size, batch_size_per_rank=batch_size_per_rank,
                             data_fraction=data_fraction, model=cfg.model, dataset=cfg.dataset, epochs=cfg.epochs,
                             synthetic=cfg.synthetic, device=cfg.device, out_dir=runs, timeout_s=cfg.timeout_s,
                             threads_per_rank=cfg.threads_per_rank, stem=cfg.stem, profile_steps=cfg.profile_steps)
            if row["status"] != "ok":
                raise LaunchFailed(row["error"])
            return {k: v for k, v in row.items() if k not in (*GRID, "status", "error")}

        df = sweep(point, {name: getattr(cfg, values) for name, values in GRID.items()}, store, settings=settings,
                   skip=skip, retry_errors=True, desc="ddp configurations", progress=progress)
    df = df.reindex(columns=list(dict.fromkeys([*ddp.ROW_FIELDS, *df.columns])))
    text = ("data_source", "error", "note", "cuda_missing_reason", "max_gpu_mem_missing_reason")
    df = df.astype({c: object for c in text})  # all-NaN (float) columns when no point ran
    # A point that did not run is stored as its parameters + error: fill in what the configuration says.
    df["error"] = df["error"].map(lambda e: e.removeprefix("LaunchFailed: ") if isinstance(e, str) else None)
    df = df.assign(model=cfg.model, stem=cfg.stem, dataset=cfg.dataset, device=cfg.device, epochs=cfg.epochs,
                   profiled_steps=cfg.profile_steps,
                   backend="nccl" if cfg.device == "cuda" else "gloo",
                   global_batch_size=df["batch_size_per_rank"] * df["world_size"],
                   data_source=df["data_source"].fillna("synthetic" if cfg.synthetic else "real"))
    missed = df["status"] != "ok"
    for col in MISSING_REASON.values():
        df.loc[missed, col] = df.loc[missed, "error"]
    return add_scaling(df)


def add_scaling(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with speedup_vs_1 (throughput / throughput with 1 process), scaling_efficiency (speed-up /
    processes, 1 = ideal) and scaling_missing_reason, comparing points with the same model, dataset, device,
    epochs, data fraction and batch size per rank (so each process keeps its batch: the paper's setting)."""
    df = df.assign(speedup_vs_1=math.nan, scaling_efficiency=math.nan, scaling_missing_reason=None)
    keys = ["model", "dataset", "device", "epochs", "data_fraction", "batch_size_per_rank"]
    for _, group in df.groupby(keys, dropna=False):
        base = group[(group["world_size"] == 1) & (group["status"] == "ok")]
        for idx in group.index:
            if df.at[idx, "status"] != "ok":
                df.at[idx, "scaling_missing_reason"] = f"point {df.at[idx, 'status']}"
            elif base.empty:
                df.at[idx, "scaling_missing_reason"] = "no successful 1-process point to compare with"
            else:
                speedup = df.at[idx, "throughput_samples_per_s"] / base["throughput_samples_per_s"].iloc[0]
                df.at[idx, "speedup_vs_1"] = speedup
                df.at[idx, "scaling_efficiency"] = speedup / df.at[idx, "world_size"]
    return df


def _falls(df: pd.DataFrame, metric: str, along: str, within: list[str]) -> list[tuple[str, bool]]:
    """For every group of ``within``: (what was compared, does ``metric`` fall from the smallest to the
    largest ``along``?)."""
    results = []
    for key, group in df.groupby(within):
        group = group.dropna(subset=[metric]).sort_values(along)
        if group[along].nunique() < 2:
            continue
        first, last = group.iloc[0], group.iloc[-1]
        label = ", ".join(f"{k}={v:g}" for k, v in zip(within, key if isinstance(key, tuple) else (key,)))
        results.append((f"{label}: {first[metric]:.4g} -> {last[metric]:.4g} "
                        f"({along} {first[along]:g} -> {last[along]:g})", last[metric] < first[metric]))
    return results


def _falls_claim(claim: str, paper: str, tests: list, device: str, reason: str, criterion: str,
                 note: str = "") -> Claim:
    """Held when every comparison of ``tests`` fell (note: ``note``, then the ones that did not); not measured
    (with ``reason``) without comparisons."""
    if not tests:
        return Claim(claim, paper, "not measured", None, device, criterion=criterion, note=reason)
    held = sum(h for _, h in tests)
    failed = "; ".join(t for t, h in tests if not h)
    return Claim(claim, paper, f"fell in {held} of {len(tests)} comparisons", held == len(tests), device,
                 criterion=criterion, note="; ".join(filter(None, [note, failed]))[:400])


def _peaks_fell(ok: pd.DataFrame, peak: str) -> str:
    """How often the peak of live memory fell from 1 process to the most (for the memory claims' notes)."""
    tests = _falls(ok, peak, "world_size", ["data_fraction", "batch_size_per_rank"])
    return f"the peak ({peak}) fell in {sum(h for _, h in tests)} of {len(tests)}" if tests else ""


def check_claims(df: pd.DataFrame, device) -> list[Claim]:
    """The paper's claims (sec. 4.3-4.5) judged on the ``ok`` rows, each with its criterion. Every quantity is per
    rank (the slowest or largest rank) and per epoch, at a fixed batch size per process (the paper's setting).

    Runtime (CPU total; CUDA total where measured) falls from the smallest to the largest batch size for every
    process count, and from 1 process to the most for every batch size, on the larger data fractions (>= 1/2);
    the number of calls falls with batch size at every fraction and process count. Memory "transfer" is judged on
    the bytes allocated per epoch (cumulative): CPU within ``CPU_MEMORY_SPREAD`` (largest / smallest per data
    fraction), GPU falling from 1 process to the most. A claim holds when every comparison does ("<": a tie is a
    comparison that did not fall). Grid points that did not run (an error, a timeout, skipped) are named in every
    claim's ``ours``.
    """
    ok, device = df[df["status"] == "ok"], str(device)
    large = ok[ok["data_fraction"] >= 0.5]

    def reason(col, default):
        return ok[col].dropna().iloc[0] if ok[col].notna().any() else default

    checks = []
    for metric, name in (("cpu_total_ms", "CPU"), ("cuda_total_ms", "CUDA")):
        for along, within, what, rule in (
                ("batch_size_per_rank", ["data_fraction", "world_size"], "batch size",
                 "at the largest batch size per process < at the smallest, for every process count"),
                ("world_size", ["data_fraction", "batch_size_per_rank"], "process count",
                 "at the most processes < at 1 process, for every batch size per process")):
            tests = _falls(large, metric, along, within)
            fewer = f"fewer than two {what}s measured"
            checks.append(_falls_claim(
                f"{name} runtime falls with {what} on the larger data fractions (1, 1/2)",
                "Fig. 3-6: runtime decreases with batch size and GPU count", tests, device,
                reason("cuda_missing_reason", fewer) if metric == "cuda_total_ms" else fewer,
                criterion=f"{metric} (profiler self time per epoch, slowest rank) {rule}, at data fractions 1 and "
                          f"1/2; held when every comparison falls"))
    tests = _falls(ok, "calls_total", "batch_size_per_rank", ["data_fraction", "world_size"])
    checks.append(_falls_claim(
        "number of calls falls with batch size", "Fig. 7-9: fewer calls", tests, device,
        "fewer than two batch sizes measured",
        criterion="calls_total (operator calls per epoch per rank) at the largest batch size per process < at the "
                  "smallest, for every data fraction and process count; held when every comparison falls"))
    spreads = [(f, g["cpu_mem_allocated_mib"].max() / g["cpu_mem_allocated_mib"].min())
               for f, g in ok.dropna(subset=["cpu_mem_allocated_mib"]).groupby("data_fraction") if len(g) > 1]
    cpu_note = ("on a CPU run the training tensors themselves are CPU memory; in the paper's GPU runs CPU memory "
                "is the host side" if device == "cpu" else "")
    checks.append(Claim(
        claim="CPU memory transfer is about the same for every batch size and process count",
        paper="Fig. 10, 12, 14: relatively unaffected",
        ours=("CPU memory allocated per epoch, largest/smallest per data fraction: "
              + ", ".join(f"{r:.2f}x (f={f:g})" for f, r in spreads)) if spreads else "not measured",
        held=all(r <= CPU_MEMORY_SPREAD for _, r in spreads) if spreads else None, device=device,
        criterion=f"cpu_mem_allocated_mib (cumulative bytes allocated per epoch, largest rank): largest / smallest "
                  f"over batch sizes and process counts <= {CPU_MEMORY_SPREAD:.2f} at every data fraction (every "
                  f"point within +-25% of one value)",
        note=cpu_note if spreads else "fewer than two points per data fraction"))
    tests = _falls(ok, "gpu_mem_allocated_mib", "world_size", ["data_fraction", "batch_size_per_rank"])
    peaks = _peaks_fell(ok, "max_gpu_mem_mib")
    checks.append(_falls_claim(
        "GPU memory transfer falls with more GPUs", "Fig. 11, 13, 15: decreases", tests, device,
        reason("max_gpu_mem_missing_reason", "fewer than two process counts measured"),
        criterion="gpu_mem_allocated_mib (cumulative bytes allocated per epoch, largest rank) at the most GPUs < at "
                  "1 GPU, for every data fraction and batch size per GPU; held when every comparison falls",
        note=f"{peaks} (a peak cannot fall at a fixed batch per GPU)" if peaks else ""))
    return _say_what_is_missing(checks, df)


def _point(row) -> str:
    return f"f={row['data_fraction']:g} b={row['batch_size_per_rank']:g} w={row['world_size']:g}"


def _say_what_is_missing(checks: list[Claim], df: pd.DataFrame) -> list[Claim]:
    """``checks`` with every grid point that is not ``ok`` named in ``ours`` (a claim judged on fewer points than the
    grid must say so: "fell in 3 of 3 comparisons" reads as complete), and every ok point kept with a note (a rank
    that died at shutdown after its row was complete) named in ``note``."""
    missing = df[df["status"] != "ok"]
    if len(missing):
        points = ", ".join(f"{_point(r)} ({r['status']})" for _, r in missing.iterrows())
        gap = f"{len(missing)} of {len(df)} grid points missing, not judged: {points}"
        for check in checks:
            check.ours = f"{check.ours}; {gap}"
    noted = df[(df["status"] == "ok") & df["note"].notna()] if "note" in df else df.iloc[:0]
    if len(noted):
        kept = "; ".join(f"{_point(r)}: {r['note']}" for _, r in noted.iterrows())
        for check in checks:
            check.note = "; ".join(filter(None, [check.note, kept]))
    return checks


def _plot_metric(df: pd.DataFrame, metric: str):
    """One panel per data fraction: ``metric`` against batch size per rank (log2), one line per process count;
    a metric not measured on this device (e.g. CUDA time on a CPU) gets panels that say why."""
    ok = df[(df["status"] == "ok") & df[metric].notna()]
    fractions = sorted(df["data_fraction"].unique(), reverse=True)
    # one y scale for all panels, unless a panel says why it is empty (it has no y ticks)
    fig, axes = plotting.plt.subplots(1, len(fractions), figsize=(4.2 * len(fractions), 3.4), squeeze=False,
                                      sharey=set(fractions) <= set(ok["data_fraction"]))
    for ax, fraction in zip(axes[0], fractions):
        part = ok[ok["data_fraction"] == fraction]
        ax.set_title(f"data fraction {fraction:g}")
        ax.set_xlabel("Batch size per process")
        if part.empty:
            reasons = df.loc[df["data_fraction"] == fraction, MISSING_REASON[metric]].dropna() \
                if metric in MISSING_REASON else []
            plotting.missing_panel(ax, f"not measured:\n{reasons.iloc[0] if len(reasons) else 'no successful point'}")
            ax.set_xticks([])
            ax.grid(False)
        else:
            sns.lineplot(data=part, x="batch_size_per_rank", y=metric, hue="world_size", style="world_size",
                         markers=True, dashes=False, palette=plotting.PALETTE, ax=ax)
            plotting.log2_batch_axis(ax, values=sorted(part["batch_size_per_rank"].unique()),
                                     label="Batch size per process")
            ax.legend(title="processes")
        ax.set_ylabel(METRICS[metric])
    fig.tight_layout()
    return fig


def _plot_scaling(df: pd.DataFrame):
    """Throughput (samples/s) and scaling efficiency against process count, one line per batch size per
    process and data fraction, with the ideal line (throughput x processes; efficiency 1)."""
    ok = df[df["status"] == "ok"].copy()
    ok["configuration"] = [f"b{b:g}, f{f:g}" for b, f in zip(ok["batch_size_per_rank"], ok["data_fraction"])]
    fig, (left, right) = plotting.plt.subplots(1, 2, figsize=(10, 3.8))
    worlds = sorted(ok["world_size"].unique()) if len(ok) else [1]
    if len(ok):
        sns.lineplot(data=ok, x="world_size", y="throughput_samples_per_s", hue="configuration", marker="o",
                     palette=plotting.PALETTE, ax=left)
        for _, base in ok[ok["world_size"] == 1].iterrows():
            left.plot(worlds, [base.throughput_samples_per_s * w for w in worlds], color="grey", lw=0.8, ls=":")
        sns.lineplot(data=ok[ok["scaling_efficiency"].notna()], x="world_size", y="scaling_efficiency",
                     hue="configuration", marker="o", palette=plotting.PALETTE, ax=right, legend=False)
    right.axhline(1.0, color="grey", ls=":", lw=1, label="ideal")
    left.plot([], [], color="grey", ls=":", lw=0.8, label="ideal (linear)")
    left.legend(fontsize="small")
    for ax in (left, right):
        ax.set_xticks(worlds)
        ax.set_xlabel("Processes (GPUs, or CPU processes with Gloo)")
    left.set_ylabel("Throughput (samples/s)")
    right.set_ylabel("Scaling efficiency (speed-up / processes)")
    right.set_ylim(0, max(1.2, float(ok["scaling_efficiency"].max()) + 0.1 if len(ok) else 1.2))
    right.legend(loc="lower left")
    fig.tight_layout()
    return fig


def figures(df: pd.DataFrame) -> dict:
    """``05_<metric>`` for each of :data:`METRICS` (the paper's Fig. 1-15: panels per data fraction, batch size
    per process on the x axis, a line per process count) and ``05_scaling`` (throughput and scaling efficiency
    against process count)."""
    figs = {f"05_{metric}": _plot_metric(df, metric) for metric in METRICS}
    figs["05_scaling"] = _plot_scaling(df)
    return figs
