"""Study 00 (quickstart): one model, measured properly: time per batch, throughput and peak memory per batch
size, and where the time of one batch goes. The template of the study contract (see ``cnnlab.studies``).

Input: random tensors of the model's input shape (``data_source = synthetic``): a dense CNN does the same work
whatever the pixel values. The claim checked is paper 001's (Sec. IV-A): larger batches use the hardware better.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pandas as pd
import torch

from cnnlab import claims, config, models, plotting, studies
from cnnlab.claims import FAR_ABOVE, Claim
from cnnlab.studies import Experiment, Parameter
from cnnlab.profiling import benchmark, free_memory, profile_ops, throughput, trace_file, trace_folder
from cnnlab.profiling.estimate import Work, by_batch, forward, profiler_session


PARAMETERS = studies.Parameters(
    model_name=Parameter("resnet20", check=config.one_model, doc="registry name of one image model"),
    batch_sizes=Parameter([1, 8, 64], [1, 8, 64, 256, 1024], [2**k for k in range(11)], check=config.batch_sizes,
                          axis=True, doc="images per batch"),
    # 20 timed batches in quick, so that p10-p90 (the claim's noise) is not just the slowest and fastest of a few
    repeats=Parameter(20, 30, 50, check=config.positive_int, doc="timed batches per point"),
    warmup=Parameter(2, check=partial(config.positive_int, minimum=0), doc="untimed batches before the timed ones"),
    # off in quick: CI keeps no files
    save_traces=Parameter(False, True, check=config.boolean,
                          doc="write the profiled batches' Chrome trace into <figures>/traces/"),
    # quick uses one, as every quick preset: CI runs two notebooks at once on two cores, and spin-waiting threads
    # inflated batch 1's time ~140x (cnnlab.config.threads)
    threads=studies.THREADS,
    tf32=studies.TF32,
    device=studies.DEVICE,
)
configure = PARAMETERS.configure
PROFILE_ITERATIONS = 2


def batch_point(batch_size: int, *, model_name: str, device: str, repeats: int, warmup: int) -> dict:
    """One point of experiment "batch": ``cnnlab.profiling.benchmark``'s row for ``model_name`` at ``batch_size``,
    its throughput (``throughput_items_per_s`` and ``_low``/``_high``) by ``cnnlab.profiling.throughput``'s one
    definition (the median rate: table, figure and claim)."""
    dev = torch.device(device)
    net = models.get(model_name).to(dev).eval()
    x = models.example_input(net, batch_size).to(dev)
    m = benchmark(net, x, device=dev, warmup=warmup, repeats=repeats)
    row = m.as_row()
    return {**row, **throughput.columns(row), "model": model_name, "data_source": "synthetic"}


BATCH = Experiment("batch", batch_point, axes={"batch_size": "batch_sizes"}, desc="quickstart: time per batch")


def plan(cfg) -> list[Work]:
    """What :func:`measure` does, for its estimate: per batch size the warm-up and timed batches (and on a CPU the
    memory pass's two calls under the profiler), then the profile of the largest batch."""
    config.set_threads(cfg.threads)
    dev = torch.device(cfg.device)
    net = models.get(cfg.model_name).to(dev).eval()

    def batch(size):
        x = models.example_input(net, size).to(dev)
        return lambda: forward(net, x)

    cpu = dev.type == "cpu"
    calls = {b: cfg.warmup + cfg.repeats + (3 if cpu else 0) for b in cfg.batch_sizes}
    calls[max(cfg.batch_sizes)] += PROFILE_ITERATIONS + 1
    return [*by_batch("batches", calls, batch, dev),
            Work("profiles", 1 + (len(cfg.batch_sizes) if cpu else 0), profiler_session(dev))]


@studies.measurement(plan)
def measure(cfg, store_dir: str | Path | None, progress: bool = True) -> pd.DataFrame:
    """Experiment "batch": one row per batch size (``cnnlab.profiling.benchmark``'s columns: latency_ms_*,
    throughput_items_per_s, peak_mem_alloc_mib, gpu_util_pct...; a batch that does not fit is an "oom" row).
    Experiment "operators": :func:`operators` of the largest batch that fit. Runs with ``cfg.threads`` intra-op CPU
    threads (None: torch's default), the count in use being part of the store's key."""
    threads = config.set_threads(cfg.threads)
    batch = BATCH.run(cfg, store_dir, progress=progress, settings=dict(threads=threads))
    return studies.combine(batch=batch, operators=operators(cfg, batch, store_dir))


def operators(cfg, batch: pd.DataFrame, store_dir: str | Path | None) -> pd.DataFrame:
    """The operator table of ``PROFILE_ITERATIONS`` batches of the largest size in ``batch`` that fit (status ok;
    ``cnnlab.profiling.profile_ops``), with model, batch_size and iterations; with ``cfg.save_traces`` their
    Chrome trace is written to ``<store_dir>/traces/`` (column ``trace_file``). Where no batch size fit, or the
    profile itself runs out of memory, one row with status "skipped" and the reason in ``error`` instead."""
    fit = batch.loc[batch["status"] == "ok", "batch_size"]
    size = int(fit.max()) if len(fit) else None
    if size is None:
        tried = ", ".join(f"{int(b)} {s}" for b, s in zip(batch["batch_size"], batch["status"]))
        return _no_operators(cfg, None, f"no batch size fit in memory, so none was profiled (batch sizes: {tried})")
    dev = torch.device(cfg.device)
    net = models.get(cfg.model_name).to(dev).eval()
    x = models.example_input(net, size).to(dev)
    folder = trace_folder(store_dir, cfg.save_traces)
    trace = None if folder is None else trace_file(folder, f"quickstart_{cfg.model_name}_b{size}")
    try:
        with torch.inference_mode():
            ops = profile_ops(lambda: net(x), iterations=PROFILE_ITERATIONS, device=dev, trace_path=trace)
    except torch.OutOfMemoryError as err:  # the profiler's own memory on top of a batch that just fit
        return _no_operators(cfg, size, f"batch {size} fit when timed but ran out of memory under the profiler: "
                                        f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}")
    finally:
        del net, x
        free_memory()
    return ops.operators.assign(model=cfg.model_name, batch_size=size, iterations=ops.summary["iterations"],
                                trace_file=None if trace is None else str(trace))


def _no_operators(cfg, size: int | None, reason: str) -> pd.DataFrame:
    return pd.DataFrame([{"model": cfg.model_name, "batch_size": size, "status": "skipped", "error": reason}])


def _gains(df: pd.DataFrame):
    ok = df[(df["experiment"] == "batch") & (df["status"] == "ok")]
    gains, ours, note = throughput.gains_over_smallest(ok, FAR_ABOVE) if len(ok) > 1 else ({}, "", "")
    threads = f"; {ok['cpu_threads'].iloc[0]:.0f} CPU thread(s)" if "cpu_threads" in ok and gains else ""
    return claims.Measured({f"batch {b}": g for b, g in gains.items()}, ours + threads, note) if gains else \
        f"it needs two batch sizes measured; measured: {', '.join(map(str, ok['batch_size'].astype(int))) or 'none'}"


CLAIMS = [claims.Declared("throughput at the best batch size is far above batch 1", "Sec. IV-A: \"we're better "
                          "utilizing the GPU's parallel processing capabilities\" (Fig. 1)", "images/s at a larger "
                          "batch size / at the smallest", claims.above(FAR_ABOVE, unit="x"), _gains, some=True,
                          each="larger batch size", beyond=True, bound=throughput.DEFINITION)]


def check_claims(df: pd.DataFrame, device) -> list[Claim]:
    """Paper 001, Sec. IV-A (:data:`CLAIMS`) by the noise rule, on ``cnnlab.profiling.throughput``'s images/s."""
    return claims.check(CLAIMS, df, device)


def figures(df: pd.DataFrame) -> dict:
    """``quickstart_latency_throughput``: time per batch (median, p10-p90) and throughput (the claim's: batch size /
    that time, so the same interval) against batch size; where no
    batch size was measured (none fit in memory), both panels say so, with each batch size's status."""
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
