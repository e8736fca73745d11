"""Study 05: data-parallel scaling of training over data fraction, batch size and process count (paper 002).

Paper 002 (Iwano, "Comparative Analysis of Runtime and Memory Optimization with ResNet152") trains
ResNet-152 on 1, 1/2 and 1/10 of CIFAR-100 with batch sizes 128-2048 on 1, 2 and 4 A100 GPUs and
reports, from the PyTorch profiler, CPU and CUDA runtime, number of calls and maximum CPU and GPU
memory (its Fig. 1-15). Here every configuration is one ``torchrun`` launch of ``cnnlab.ddp``
(:func:`run_config`), the grid goes through :func:`cnnlab.profiling.sweep` (resumable, a failed
point is recorded and the sweep goes on), and :func:`add_scaling` adds what the paper lacks:
speed-up and scaling efficiency against one process.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from cnnlab import paths
from cnnlab.ddp import ROW_FIELDS

# The launched workers import cnnlab from the checkout; for an installed cnnlab (None) they import the package and
# run in the caller's working directory, so that ./data means the same folder for them.
CHECKOUT = paths.checkout()

# The grid parameter "batch size" is the batch of each process (the paper's DataLoader batch_size in
# every process, sec. 3.2); the global batch is batch_size_per_rank x world_size.
PRESETS = {
    # CPU smoke run: Gloo, 1 and 2 processes, LeNet-5 on the real offline digits set (1437 images). Batch sizes
    # of 32 and 128 keep the profiled epochs short: the profiler's post-processing grows with the step count.
    "quick": dict(model="lenet5", dataset="digits", synthetic=False, data_fractions=[1.0, 0.5],
                  batch_sizes=[32, 128], world_sizes=[1, 2], epochs=1, device="cpu", threads_per_rank=1,
                  timeout_s=180),
    # One Colab GPU: the paper's model and data, a smaller grid; world sizes above the GPU count are skipped.
    "standard": dict(model="resnet152", dataset="cifar100", synthetic=False, data_fractions=[0.5, 0.1],
                     batch_sizes=[128, 512], world_sizes=[1, 2], epochs=1, device="auto", threads_per_rank=4,
                     timeout_s=1800),
    # The paper's grid (sec. 4.2.2). The paper does not give the epoch count; we profile one epoch.
    "paper": dict(model="resnet152", dataset="cifar100", synthetic=False, data_fractions=[1.0, 0.5, 0.1],
                  batch_sizes=[128, 512, 1024, 2048], world_sizes=[1, 2, 4], epochs=1, device="auto",
                  threads_per_rank=4, timeout_s=3600),
}
DEVICES = ("auto", "cpu", "cuda")
PARAMETERS = ("world_size", "batch_size_per_rank", "data_fraction")


def validate(cfg) -> None:
    """Raise ValueError naming the first bad parameter of a configuration from :data:`PRESETS`."""
    from cnnlab import data, models

    if cfg.model not in models.names():
        raise ValueError(f"model={cfg.model!r} is not a known model; valid: {', '.join(models.names())}")
    if cfg.dataset not in data.names():
        raise ValueError(f"dataset={cfg.dataset!r} is not a known dataset; valid: {', '.join(data.names())}")
    if cfg.device not in DEVICES:
        raise ValueError(f"device={cfg.device!r} is not valid; valid: {', '.join(DEVICES)}")
    for name, ok in (("data_fractions", lambda v: isinstance(v, (int, float)) and 0 < v <= 1),
                     ("batch_sizes", lambda v: isinstance(v, int) and v >= 1),
                     ("world_sizes", lambda v: isinstance(v, int) and v >= 1)):
        values = getattr(cfg, name)
        if not isinstance(values, (list, tuple)) or not values or not all(ok(v) for v in values):
            raise ValueError(f"{name}={values!r} must be a non-empty list of "
                             f"{'fractions in (0, 1]' if name == 'data_fractions' else 'integers >= 1'}")
    for name in ("epochs", "threads_per_rank"):
        if not isinstance(getattr(cfg, name), int) or getattr(cfg, name) < 1:
            raise ValueError(f"{name}={getattr(cfg, name)!r} must be an integer >= 1")
    if not isinstance(cfg.timeout_s, (int, float)) or cfg.timeout_s <= 0:
        raise ValueError(f"timeout_s={cfg.timeout_s!r} must be a positive number of seconds")


def resolve_device(device: str) -> str:
    """"cuda" or "cpu" for a configuration's ``device`` ("auto": CUDA when available)."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' asked for, but CUDA is not available on this machine")
    return device


# ----------------------------------------------------------------------------------------------------------------
# One configuration: one torchrun launch.

def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL torchrun and its workers. torchrun starts each worker in its own session, so killing
    torchrun's process group alone would leave the workers running: kill every descendant's group."""
    own = os.getpgrp()
    for pid in [proc.pid] + _descendants(proc.pid):
        try:
            group = os.getpgid(pid)
            if group != own:
                os.killpg(group, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


def _failure_reason(run_dir: Path, log: Path, returncode: int) -> str:
    """Why a launch failed: the first rank's error (the root cause; later ones are its echoes), else the log."""
    errors = []
    for path in run_dir.glob("rank*.error.json"):
        try:
            errors.append((path.stat().st_mtime, json.loads(path.read_text())))
        except (OSError, json.JSONDecodeError):
            continue
    if errors:
        _, first = min(errors, key=lambda e: (e[0], e[1].get("rank", 0)))
        others = sorted(e["rank"] for _, e in errors if e is not first)
        also = f" (ranks {others} failed after it)" if others else ""
        return f"rank {first.get('rank')}: {first.get('error')}{also}"
    tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else []
    lines = [line for line in tail if "Error" in line or "error" in line] or tail[-3:]
    return f"torchrun exited with code {returncode}: " + " | ".join(line.strip() for line in lines[-3:])


def run_config(*, world_size: int, batch_size_per_rank: int, data_fraction: float, model: str, dataset: str,
               out_dir, epochs: int = 1, synthetic: bool = False, synthetic_size: int | None = None,
               device: str = "cpu", timeout_s: float = 600.0, threads_per_rank: int = 1, num_workers: int = 0,
               seed: int = 0, save_params: bool = False, fail_rank: int | None = None) -> dict:
    """Train one configuration with ``torchrun --standalone --nproc-per-node world_size -m cnnlab.ddp``.

    Returns the tidy row of :func:`cnnlab.ddp.merge` (all :data:`cnnlab.ddp.ROW_FIELDS`) plus
    ``launch_time_s`` (s, the whole launch with process start-up) and ``run_dir``. A launch that
    fails (a rank raises, runs out of memory, the process group cannot form) or does not finish
    within ``timeout_s`` seconds (then torchrun and every worker are killed) returns the same
    fields with NaN metrics, ``status="failed"`` and the reason in ``error``; it never raises for
    a failed run and never hangs. ``--standalone`` picks a free port, so launches can run side by side.
    """
    device = resolve_device(device)
    run_dir = Path(out_dir) / (f"{model}_{dataset}_w{world_size}_b{batch_size_per_rank}_f{data_fraction:g}"
                               f"_e{epochs}_{device}")
    shutil.rmtree(run_dir, ignore_errors=True)  # no stale rank files from an earlier launch
    run_dir.mkdir(parents=True)
    args = ["--model", model, "--dataset", dataset, "--batch-size", str(batch_size_per_rank),
            "--fraction", repr(float(data_fraction)), "--epochs", str(epochs), "--device", device,
            "--num-workers", str(num_workers), "--seed", str(seed), "--out", str(run_dir),
            "--pg-timeout-s", str(max(30.0, float(timeout_s)))]
    args += ["--synthetic"] if synthetic else []
    args += ["--synthetic-size", str(synthetic_size)] if synthetic_size else []
    args += ["--save-params"] if save_params else []
    args += ["--fail-rank", str(fail_rank)] if fail_rank is not None else []
    # python -m torch.distributed.run is the torchrun command, without relying on PATH.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
           f"--nproc-per-node={world_size}", "--max-restarts=0", "-m", "cnnlab.ddp", *args]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads_per_rank),  # no oversubscription of the cores
               PYTHONPATH=os.pathsep.join(filter(None, [CHECKOUT and str(CHECKOUT),
                                                         os.environ.get("PYTHONPATH")])))
    log = run_dir / "torchrun.log"
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=CHECKOUT, env=env,
                                start_new_session=True)
        try:
            returncode = proc.wait(timeout=timeout_s)
            reason = None if returncode == 0 else _failure_reason(run_dir, log, returncode)
        except subprocess.TimeoutExpired:
            _kill_tree(proc)
            returncode = None
            reason = f"timeout: no result after {timeout_s:g} s; torchrun and its workers were killed"
            partial = _failure_reason(run_dir, log, -9)
            if partial.startswith("rank"):
                reason += f" (earlier: {partial})"
    launch_time_s = time.perf_counter() - start
    row_path = run_dir / "row.json"
    if reason is None and row_path.exists():
        row = json.loads(row_path.read_text())
    else:
        row = failed_row(reason or "torchrun exited with code 0 but rank 0 wrote no row.json",
                         world_size=world_size, batch_size_per_rank=batch_size_per_rank,
                         data_fraction=data_fraction, model=model, dataset=dataset, epochs=epochs, device=device,
                         synthetic=synthetic)
    row.update(launch_time_s=launch_time_s, run_dir=str(run_dir))
    return row


def failed_row(reason: str, *, world_size, batch_size_per_rank, data_fraction, model, dataset, epochs, device,
               synthetic=False, status: str = "failed") -> dict:
    """A row with every field of :data:`cnnlab.ddp.ROW_FIELDS`: the configuration, NaN metrics, the reason."""
    row = {name: math.nan for name in ROW_FIELDS}
    row.update(model=model, dataset=dataset, data_source="synthetic" if synthetic else "real",
               backend="nccl" if device == "cuda" else "gloo", device=device, world_size=world_size,
               batch_size_per_rank=batch_size_per_rank, global_batch_size=batch_size_per_rank * world_size,
               data_fraction=data_fraction, epochs=epochs, status=status, error=reason,
               cuda_missing_reason=reason, max_gpu_mem_missing_reason=reason)
    return row


# ----------------------------------------------------------------------------------------------------------------
# The grid.

def plan(cfg) -> tuple[list[dict], pd.DataFrame]:
    """(points to run, rows of the points this machine cannot run, with the reason).

    On GPUs a point needs one GPU per process; on the CPU every process count runs (Gloo), but more
    processes than cores only share them.
    """
    device = resolve_device(cfg.device)
    gpus = torch.cuda.device_count() if device == "cuda" else None
    points, skipped = [], []
    for fraction in cfg.data_fractions:
        for batch in cfg.batch_sizes:
            for world in cfg.world_sizes:
                point = dict(model=cfg.model, dataset=cfg.dataset, epochs=cfg.epochs, device=device,
                             world_size=world, batch_size_per_rank=batch, data_fraction=float(fraction))
                if gpus is not None and world > gpus:
                    skipped.append(failed_row(f"needs {world} GPUs, {gpus} present", status="skipped",
                                              synthetic=cfg.synthetic, **point))
                else:
                    points.append(point)
    return points, pd.DataFrame(skipped, columns=list(ROW_FIELDS))


class RunFailed(RuntimeError):
    """A configuration that did not finish; the sweep records its message (an OOM one as status "oom")."""


def run_sweep(cfg, out_dir, *, progress: bool = True) -> pd.DataFrame:
    """Run every point of :func:`plan` through :func:`cnnlab.profiling.sweep` (store ``out_dir/ddp_runs.csv``).

    Returns one tidy row per grid point: the points run (status "ok", or "failed" with ``error``) and
    the points skipped on this machine (status "skipped"), with :func:`add_scaling` columns.
    A stored point is not run again; a failed one is retried on the next call.
    """
    from cnnlab.profiling import sweep

    out_dir = Path(out_dir)
    points, skipped = plan(cfg)

    def one(*, model, dataset, epochs, device, world_size, batch_size_per_rank, data_fraction):
        row = run_config(world_size=world_size, batch_size_per_rank=batch_size_per_rank,
                         data_fraction=data_fraction, model=model, dataset=dataset, epochs=epochs,
                         synthetic=cfg.synthetic, device=device, out_dir=out_dir / "runs",
                         timeout_s=cfg.timeout_s, threads_per_rank=cfg.threads_per_rank)
        if row["status"] != "ok":
            raise RunFailed(row["error"])
        return {k: v for k, v in row.items() if k not in ("status", "error")}

    df = sweep(one, points, store=out_dir / "ddp_runs.csv", builtin_checks=True, retry_errors=True,
               desc="ddp configurations", progress=progress) if points else pd.DataFrame()
    if len(df):
        df = df[df.apply(lambda r: any(_same(r, p) for p in points), axis=1)].copy()  # this grid's points only
        df = df.reindex(columns=list(dict.fromkeys([*ROW_FIELDS, *df.columns])))
        failed = df["status"] != "ok"
        text = ("backend", "data_source", "error", "cuda_missing_reason", "max_gpu_mem_missing_reason")
        df = df.astype({c: object for c in text})  # all-NaN (float) columns when every point failed
        # The sweep stores a failed point as its parameters + error: fill in what the configuration says.
        df["status"] = df["status"].replace({"error": "failed", "oom": "failed"})
        df["error"] = df["error"].map(lambda e: e.removeprefix("RunFailed: ") if isinstance(e, str) else None)
        df["global_batch_size"] = df["batch_size_per_rank"] * df["world_size"]
        df.loc[failed, "backend"] = df.loc[failed, "device"].map({"cuda": "nccl", "cpu": "gloo"})
        df.loc[failed, "data_source"] = "synthetic" if cfg.synthetic else "real"
        for col in ("cuda_missing_reason", "max_gpu_mem_missing_reason"):
            df.loc[failed, col] = df.loc[failed, "error"]
    parts = [d for d in (df, skipped) if len(d)]
    df = pd.concat(parts, ignore_index=True) if parts else skipped
    return add_scaling(df)


def _same(row, point) -> bool:
    return all(str(row[k]) == str(v) if not isinstance(v, float) else math.isclose(float(row[k]), v)
               for k, v in point.items())


def add_scaling(df: pd.DataFrame) -> pd.DataFrame:
    """Add speedup_vs_1 (throughput / throughput with 1 process), scaling_efficiency (speed-up / processes,
    1 = ideal) and scaling_missing_reason, comparing points with the same model, dataset, device, epochs,
    data fraction and batch size per rank (so each process keeps its batch: the paper's setting)."""
    df = df.copy()
    df["speedup_vs_1"] = math.nan
    df["scaling_efficiency"] = math.nan
    df["scaling_missing_reason"] = None
    if df.empty:
        return df
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


# ----------------------------------------------------------------------------------------------------------------
# Figures and claims.

# The paper's five profiler metrics (its Fig. 1-15), with axis labels.
METRICS = {
    "cpu_total_ms": "CPU total time (ms)",
    "cuda_total_ms": "CUDA total time (ms)",
    "calls_total": "Number of calls (per rank)",
    "max_cpu_mem_mib": "Max CPU memory (MiB)",
    "max_gpu_mem_mib": "Max GPU memory (MiB)",
}


def plot_metric(df: pd.DataFrame, metric: str):
    """One panel per data fraction: ``metric`` against batch size per rank (log2), one line per process count.

    A metric not measured on this device (e.g. CUDA time on a CPU) gets panels that say why.
    """
    import seaborn as sns

    from cnnlab import plotting

    if metric not in METRICS:
        raise ValueError(f"metric={metric!r} is not valid; valid: {', '.join(METRICS)}")
    ok = df[df["status"] == "ok"]
    fractions = sorted(df["data_fraction"].unique(), reverse=True)
    fig, axes = plotting.plt.subplots(1, len(fractions), figsize=(4.2 * len(fractions), 3.4), squeeze=False,
                                      sharey=True)
    for ax, fraction in zip(axes[0], fractions):
        part = ok[(ok["data_fraction"] == fraction) & ok[metric].notna()]
        ax.set_title(f"data fraction {fraction:g}")
        if part.empty:
            reason_col = {"cuda_total_ms": "cuda_missing_reason",
                          "max_gpu_mem_mib": "max_gpu_mem_missing_reason"}.get(metric)
            reasons = df.loc[df["data_fraction"] == fraction, reason_col].dropna() if reason_col else []
            text = reasons.iloc[0] if len(reasons) else "no successful point"
            ax.text(0.5, 0.5, f"not measured:\n{text}", ha="center", va="center", transform=ax.transAxes,
                    wrap=True)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
            ax.set_xlabel("Batch size per process")
        else:
            sns.lineplot(data=part, x="batch_size_per_rank", y=metric, hue="world_size", style="world_size",
                         markers=True, dashes=False, palette=plotting.PALETTE, ax=ax)
            plotting.log2_batch_axis(ax, values=sorted(part["batch_size_per_rank"].unique()),
                                     label="Batch size per process")
            ax.legend(title="processes")
        ax.set_ylabel(METRICS[metric])
    fig.tight_layout()
    return fig


def plot_scaling(df: pd.DataFrame):
    """Throughput (samples/s) and scaling efficiency against process count, one line per batch size per
    process and data fraction, with the ideal line (throughput x processes; efficiency 1)."""
    import seaborn as sns

    from cnnlab import plotting

    ok = df[df["status"] == "ok"].copy()
    ok["configuration"] = [f"b{b:g}, f{f:g}" for b, f in zip(ok["batch_size_per_rank"], ok["data_fraction"])]
    fig, (left, right) = plotting.plt.subplots(1, 2, figsize=(10, 3.8))
    worlds = sorted(ok["world_size"].unique()) if len(ok) else [1]
    if len(ok):
        sns.lineplot(data=ok, x="world_size", y="throughput_samples_per_s", hue="configuration", marker="o",
                     palette=plotting.PALETTE, ax=left)
        for _, base in ok[ok["world_size"] == 1].iterrows():
            left.plot(worlds, [base.throughput_samples_per_s * w for w in worlds], color="grey", lw=0.8, ls=":")
        eff = ok[ok["scaling_efficiency"].notna()]
        sns.lineplot(data=eff, x="world_size", y="scaling_efficiency", hue="configuration", marker="o",
                     palette=plotting.PALETTE, ax=right, legend=False)
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


def _falls(df: pd.DataFrame, metric: str, along: str, within: list[str]) -> list[tuple[str, bool]]:
    """For every group of ``within``: does ``metric`` fall from the smallest to the largest ``along``?"""
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


def check_claims(df: pd.DataFrame) -> list:
    """The paper's claims (sec. 4.3-4.5) checked on the ``ok`` rows: a list of :class:`cnnlab.claims.Claim`.

    Runtime (CPU total; CUDA total where measured) falls from the smallest to the largest batch size
    for every process count, and from 1 process to the most for every batch size, on the larger data
    fractions (>= 1/2); the number of calls falls with batch size at every fraction and process count;
    max CPU memory stays within +-25% across a data fraction's points; max GPU memory falls with more GPUs.
    """
    from cnnlab.claims import Claim

    ok = df[df["status"] == "ok"]
    device = ", ".join(sorted(ok["device"].unique())) if len(ok) else "none"
    large = ok[ok["data_fraction"] >= 0.5]
    checks = []
    for metric, name in (("cpu_total_ms", "CPU"), ("cuda_total_ms", "CUDA")):
        for along, within, what in (("batch_size_per_rank", ["data_fraction", "world_size"], "batch size"),
                                    ("world_size", ["data_fraction", "batch_size_per_rank"], "process count")):
            tests = _falls(large, metric, along, within)
            claim = f"{name} runtime falls with {what} on the larger data fractions (1, 1/2)"
            if not tests:
                reason = (ok["cuda_missing_reason"].dropna().iloc[0] if metric == "cuda_total_ms"
                          and ok["cuda_missing_reason"].notna().any() else f"fewer than two {what}s measured")
                checks.append(Claim(claim=claim, paper="Fig. 3-6: runtime decreases", ours="not measured",
                                    held=None, device=device, note=reason))
                continue
            held = sum(h for _, h in tests)
            checks.append(Claim(claim=claim, paper="Fig. 3-6: runtime decreases with batch size and GPU count",
                                ours=f"fell in {held} of {len(tests)} comparisons",
                                held=held == len(tests), device=device,
                                note="; ".join(t for t, h in tests if not h)[:300]))
    tests = _falls(ok, "calls_total", "batch_size_per_rank", ["data_fraction", "world_size"])
    held = sum(h for _, h in tests)
    checks.append(Claim(claim="number of calls falls with batch size", paper="Fig. 7-9: fewer calls",
                        ours=f"fell in {held} of {len(tests)} comparisons" if tests else "not measured",
                        held=(held == len(tests)) if tests else None, device=device,
                        note="" if tests else "fewer than two batch sizes measured"))
    # Sec. 4.5: CPU memory "relatively unaffected" by batch size and GPU count (we read: within +-25% of the
    # panel's median); GPU memory falls with more GPUs (checked from 1 process to the most).
    spreads = [(f, g["max_cpu_mem_mib"].max() / g["max_cpu_mem_mib"].min())
               for f, g in ok.dropna(subset=["max_cpu_mem_mib"]).groupby("data_fraction") if len(g) > 1]
    checks.append(Claim(
        claim="max CPU memory is about the same for every batch size and process count",
        paper="Fig. 10, 12, 14: relatively unaffected",
        ours=("largest/smallest per data fraction: " + ", ".join(f"{r:.2f}x (f={f:g})" for f, r in spreads))
        if spreads else "not measured",
        held=all(r <= 1.25 / 0.75 for _, r in spreads) if spreads else None, device=device,
        note=("tolerance: largest/smallest <= 1.67, i.e. every point within +-25% of one value" if spreads
              else "fewer than two points per data fraction")))
    tests = _falls(ok, "max_gpu_mem_mib", "world_size", ["data_fraction", "batch_size_per_rank"])
    held = sum(h for _, h in tests)
    reason = (ok["max_gpu_mem_missing_reason"].dropna().iloc[0] if ok["max_gpu_mem_missing_reason"].notna().any()
              else "fewer than two process counts measured")
    checks.append(Claim(claim="max GPU memory falls with more GPUs", paper="Fig. 11, 13, 15: decreases",
                        ours=f"fell in {held} of {len(tests)} comparisons" if tests else "not measured",
                        held=(held == len(tests)) if tests else None, device=device,
                        note="per-process memory at a fixed per-process batch" if tests else reason))
    return checks


__all__ = ["METRICS", "PRESETS", "RunFailed", "add_scaling", "check_claims", "failed_row", "plan", "plot_metric",
           "plot_scaling", "resolve_device", "run_config", "run_sweep", "validate"]
