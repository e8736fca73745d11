"""Study 00 (quickstart): one model, measured properly: time per batch, throughput and peak memory per batch
size, and where the time of one batch goes. The template of the study contract (see ``cnnlab.studies``).

Input: random tensors of the model's input shape (``data_source = synthetic``): a dense CNN does the same work
whatever the pixel values. The claim checked is paper 001's (Sec. IV-A): larger batches use the hardware better.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from cnnlab import config, models, plotting, studies
from cnnlab.claims import Claim
from cnnlab.profiling import benchmark, profile_ops, sweep, trace_file, trace_folder

PRESETS = {
    # save_traces: write the profiled batches' Chrome trace into <figures>/traces/ (off in quick: CI keeps no files)
    "quick": dict(model_name="resnet20", batch_sizes=[1, 8, 64], repeats=5, save_traces=False, device="auto"),
    "standard": dict(model_name="resnet20", batch_sizes=[1, 8, 64, 256, 1024], repeats=30, save_traces=True,
                     device="auto"),
    "paper": dict(model_name="resnet20", batch_sizes=[2**k for k in range(11)], repeats=50, save_traces=True,
                  device="auto"),
}
WARMUP = 2
PROFILE_ITERATIONS = 2
THROUGHPUT_GAIN = 2.0  # the claim holds when the best batch gives more than this many times batch 1's images/s


def configure(preset: str | None = None, **overrides):
    """The preset's parameters with ``overrides`` on top, validated (see ``cnnlab.studies``)."""
    cfg = config.configure(preset, PRESETS, **overrides)
    cfg.model_name = config.models_list(cfg.model_name, "model_name")
    if len(cfg.model_name) != 1:
        raise ValueError(f"model_name={cfg.model_name!r}: give one model; valid: {', '.join(config.image_models())}")
    cfg.model_name = cfg.model_name[0]
    cfg.batch_sizes = config.batch_sizes(cfg.batch_sizes)
    cfg.repeats = config.positive_int(cfg.repeats, parameter="repeats")
    cfg.save_traces = config.boolean(cfg.save_traces, parameter="save_traces")
    cfg.device = str(config.resolve_device(cfg.device))
    return cfg


def measure(cfg, store_dir: str | Path | None, progress: bool = True) -> pd.DataFrame:
    """Experiment "batch": one row per batch size (``cnnlab.profiling.benchmark``'s columns: latency_ms_*,
    throughput_items_per_s, peak_mem_alloc_mib, gpu_util_pct...). Experiment "operators": the operator table
    of ``PROFILE_ITERATIONS`` batches of the largest size (``cnnlab.profiling.profile_ops``); with
    ``cfg.save_traces`` their Chrome trace is written to ``<store_dir>/traces/`` (column ``trace_file``)."""
    dev = torch.device(cfg.device)
    net = models.get(cfg.model_name).to(dev).eval()

    def point(batch_size):
        x = models.example_input(net, batch_size).to(dev)
        m = benchmark(net, x, device=dev, warmup=WARMUP, repeats=cfg.repeats)
        return {**m.as_row(), "model": cfg.model_name, "data_source": "synthetic"}

    store = None if store_dir is None else Path(store_dir) / "quickstart.csv"
    settings = {**vars(cfg), "warmup": WARMUP, "threads": torch.get_num_threads()}
    settings.pop("batch_sizes")
    settings.pop("save_traces")  # the batch sweep is not profiled
    batch = sweep(point, {"batch_size": cfg.batch_sizes}, store, settings=settings,
                  desc=f"{cfg.model_name} on {dev.type}", progress=progress)
    x = models.example_input(net, max(cfg.batch_sizes)).to(dev)
    folder = trace_folder(store_dir, cfg.save_traces)
    trace = None if folder is None else trace_file(folder, f"quickstart_{cfg.model_name}_b{max(cfg.batch_sizes)}")
    with torch.inference_mode():
        ops = profile_ops(lambda: net(x), iterations=PROFILE_ITERATIONS, device=dev, trace_path=trace)
    operators = ops.operators.assign(model=cfg.model_name, batch_size=max(cfg.batch_sizes),
                                     iterations=ops.summary["iterations"], trace_file=None if trace is None else
                                     str(trace))
    return studies.combine(batch=batch, operators=operators)


def check_claims(df: pd.DataFrame, device) -> list[Claim]:
    """Paper 001, Sec. IV-A: throughput at the best batch size is more than ``THROUGHPUT_GAIN`` x batch 1's."""
    ok = df[(df["experiment"] == "batch") & (df["status"] == "ok")]
    claim, paper = ("throughput at the best batch size is far above batch 1",
                    "total time falls as batch size grows to about 64 (Sec. IV-A, Fig. 1)")
    criterion = f"throughput_items_per_s at the best batch size / at the smallest > {THROUGHPUT_GAIN:g}"
    if ok.empty:
        return [Claim(claim, paper, "not measured", None, str(device), criterion=criterion,
                      note="no batch size was measured")]
    best = ok.loc[ok["throughput_items_per_s"].idxmax()]
    first = ok.loc[ok["batch_size"].idxmin()]
    gain = best["throughput_items_per_s"] / first["throughput_items_per_s"]
    return [Claim(claim, paper,
                  ours=f"{gain:.1f}x: {first['throughput_items_per_s']:.0f} images/s at batch "
                       f"{int(first['batch_size'])}, {best['throughput_items_per_s']:.0f} at batch "
                       f"{int(best['batch_size'])}",
                  held=gain > THROUGHPUT_GAIN, device=str(device), criterion=criterion)]


def figures(df: pd.DataFrame) -> dict:
    """``quickstart_latency_throughput``: time per batch (median, p10-p90) and throughput against batch size."""
    ok = df[(df["experiment"] == "batch") & (df["status"] == "ok")]
    fig, axes = plotting.plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    axes[0].errorbar(ok["batch_size"], ok["latency_ms_median"],
                     yerr=[ok["latency_ms_median"] - ok["latency_ms_p10"],
                           ok["latency_ms_p90"] - ok["latency_ms_median"]], marker="o", capsize=3)
    axes[0].set_ylabel(plotting.label_for("latency_ms_median"))
    axes[0].set_title("Time per batch (median, p10-p90)")
    axes[1].plot(ok["batch_size"], ok["throughput_items_per_s"], marker="o")
    axes[1].set_ylabel("Throughput (images/s)")
    axes[1].set_title("Throughput")
    for ax in axes:
        ax.set_yscale("log")
        plotting.log2_batch_axis(ax, values=sorted(ok["batch_size"].astype(int)))
    if len(ok):
        fig.suptitle(f"{ok['model'].iloc[0]} inference on {ok['device_name'].iloc[0]}")
    return {"quickstart_latency_throughput": fig}
