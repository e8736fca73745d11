"""Study 00 (quickstart), the study contract's template (``cnnlab.studies``): one model's time per batch, throughput and
peak memory per batch size, and where one batch's time goes, on random input (``data_source = synthetic``: a dense CNN
does the same work whatever the pixels). Claim: paper 001's (Sec. IV-A), larger batches use the hardware better."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pandas as pd
import torch

from cnnlab import claims, config, models, studies
from cnnlab.plotting.quickstart import figures  # noqa: F401  (the contract's figures(df))
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
    save_traces=Parameter(False, True, check=config.boolean,  # off in quick: CI keeps no files
                          doc="write the profiled batches' Chrome trace into <figures>/traces/"),
    threads=studies.THREADS,
    tf32=studies.TF32,
    device=studies.DEVICE,
)
configure = PARAMETERS.configure
PROFILE_ITERATIONS = 2


def batch_point(batch_size: int, *, model_name: str, device: str, repeats: int, warmup: int) -> dict:
    """One point of experiment "batch": ``benchmark``'s row for ``model_name`` at ``batch_size``, with the throughput
    (``throughput_items_per_s``, ``_low``/``_high``) by ``profiling.throughput``'s one definition (the median rate)."""
    dev = torch.device(device)
    net = models.get(model_name).to(dev).eval()
    x = models.example_input(net, batch_size).to(dev)
    row = benchmark(net, x, device=dev, warmup=warmup, repeats=repeats).as_row()
    return {**row, **throughput.columns(row), "model": model_name, "data_source": "synthetic"}


BATCH = Experiment("batch", batch_point, axes={"batch_size": "batch_sizes"}, desc="quickstart: time per batch")


def plan(cfg) -> list[Work]:
    """What :func:`measure` does, for its estimate: per batch size the warm-up and timed batches (on a CPU also the
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
    """Experiments "batch" (a row per batch size, ``benchmark``'s columns; one that does not fit: an "oom" row) and
    "operators" (:func:`operators`), with ``cfg.threads`` intra-op CPU threads, the count in use keying the store."""
    batch = BATCH.run(cfg, store_dir, progress=progress, settings=dict(threads=config.set_threads(cfg.threads)))
    return studies.combine(batch=batch, operators=operators(cfg, batch, store_dir))


def operators(cfg, batch: pd.DataFrame, store_dir: str | Path | None) -> pd.DataFrame:
    """Operators (``profile_ops``) of ``PROFILE_ITERATIONS`` batches of the largest size that fit, with model,
    batch_size, iterations and trace_file (``cfg.save_traces``: a Chrome trace in ``<store_dir>/traces/``); none fit, or
    out of memory under the profiler: one "skipped" row, the reason in ``error``."""
    fit = batch.loc[batch["status"] == "ok", "batch_size"]
    size = int(fit.max()) if len(fit) else None
    tried = ", ".join(f"{int(b)} {s}" for b, s in zip(batch["batch_size"], batch["status"]))
    reason = f"no batch size fit in memory, so none was profiled (batch sizes: {tried})"
    if size is not None:
        dev = torch.device(cfg.device)
        net = models.get(cfg.model_name).to(dev).eval()
        x = models.example_input(net, size).to(dev)
        folder = trace_folder(store_dir, cfg.save_traces)
        trace = None if folder is None else trace_file(folder, f"quickstart_{cfg.model_name}_b{size}")
        try:
            with torch.inference_mode():
                ops = profile_ops(lambda: net(x), iterations=PROFILE_ITERATIONS, device=dev, trace_path=trace)
            return ops.operators.assign(model=cfg.model_name, batch_size=size, iterations=ops.summary["iterations"],
                                        trace_file=None if trace is None else str(trace))
        except torch.OutOfMemoryError as err:  # the profiler's own memory on top of a batch that just fit
            reason = (f"batch {size} fit when timed but ran out of memory under the profiler: "
                      f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}")
        finally:
            del net, x
            free_memory()
    return pd.DataFrame([{"model": cfg.model_name, "batch_size": size, "status": "skipped", "error": reason}])


def _gains(df: pd.DataFrame):
    ok = df[(df["experiment"] == "batch") & (df["status"] == "ok")]
    gains, ours, note = throughput.gains_over_smallest(ok, claims.FAR_ABOVE) if len(ok) > 1 else ({}, "", "")
    threads = f"; {ok['cpu_threads'].iloc[0]:.0f} CPU thread(s)" if "cpu_threads" in ok and gains else ""
    return claims.Measured({f"batch {b}": g for b, g in gains.items()}, ours + threads, note) if gains else \
        f"it needs two batch sizes measured; measured: {', '.join(map(str, ok['batch_size'].astype(int))) or 'none'}"


CLAIMS = [claims.Declared("throughput at the best batch size is far above batch 1", "Sec. IV-A: \"we're better "
                          "utilizing the GPU's parallel processing capabilities\" (Fig. 1)", "images/s at a larger "
                          "batch size / at the smallest", claims.above(claims.FAR_ABOVE, unit="x"), _gains, some=True,
                          each="larger batch size", beyond=True, bound=throughput.DEFINITION)]


check_claims = claims.checker(CLAIMS)  # Paper 001, Sec. IV-A, on cnnlab.profiling.throughput's images/s

