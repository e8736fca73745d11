"""Study 00 (quickstart), the study contract's template (``cnnlab.studies``): one model's time per batch, throughput and
peak memory per batch size, and where one batch's time goes, on random input (``data_source = synthetic``: a dense CNN
does the same work whatever the pixels). Claim: paper 001's (Sec. IV-A), larger batches use the hardware better,
judged on paired rounds: the batch sizes timed in the same rounds (even rounds in grid order, odd ones reversed), the
throughput gain taken round by round, rounds added while undecided (``cnnlab.profiling.compare.until_decided``)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pandas as pd
import torch

from cnnlab import claims, config, models, studies
from cnnlab.plotting.quickstart import figures  # noqa: F401  (the contract's figures(df))
from cnnlab.studies import Experiment, Parameter
from cnnlab.profiling import (benchmark, combine_rounds, free_memory, profile_ops, throughput, trace_file,
                              trace_folder)
from cnnlab.profiling.compare import until_decided
from cnnlab.profiling.estimate import Work, by_batch, forward, profiler_session

PARAMETERS = studies.Parameters(
    model_name=Parameter("resnet20", check=config.one_model, doc="registry name of one image model"),
    batch_sizes=Parameter([1, 8, 64], [1, 8, 64, 256, 1024], [2**k for k in range(11)], check=config.batch_sizes,
                          axis=True, doc="images per batch"),
    # the claim's noise is the spread of the rounds' medians: a few batches a round, many rounds
    repeats=Parameter(1, 5, 10, check=config.positive_int, doc="timed batches per point and round"),
    warmup=Parameter(1, 2, check=partial(config.positive_int, minimum=0),
                     doc="untimed batches before the timed ones, per point and round"),
    min_rounds=studies.MIN_ROUNDS,
    max_rounds=studies.MAX_ROUNDS,
    # quick: 5.4 s of measuring in all before paired rounds (docs/findings/cpu-e651462), to stay within 1.5x of it
    round_budget_s=Parameter(10.0, 600.0, 1800.0, check=partial(config.number, low=0.0, high=7 * 86400.0),
                             doc="s the rounds may take in all: no look at more rounds past it"),
    save_traces=Parameter(False, True, check=config.boolean,  # off in quick: CI keeps no files
                          doc="write the profiled batches' Chrome trace into <figures>/traces/"),
    threads=studies.THREADS,
    tf32=studies.TF32,
    device=studies.DEVICE,
)
configure = PARAMETERS.configure
PROFILE_ITERATIONS = 2


def batch_point(round: int, batch_size: int, *, model_name: str, device: str, repeats: int,  # noqa: A002
                warmup: int) -> dict:
    """One point of experiment "batch" in one ``round`` (a store column): ``benchmark``'s row for ``model_name`` at
    ``batch_size``; round 0 also measures the peak memory (later rounds time only)."""
    dev = torch.device(device)
    net = models.get(model_name).to(dev).eval()
    x = models.example_input(net, batch_size).to(dev)
    row = benchmark(net, x, device=dev, warmup=warmup, repeats=repeats, measure_memory=round == 0).as_row()
    return {**row, "model": model_name, "data_source": "synthetic"}


def batch_rounds(cfg, store_dir: str | Path | None, **kw) -> pd.DataFrame:
    """Experiment "batch" in paired rounds, one row per batch size (``combine_rounds``: ``round_medians_ms``,
    ``rounds``, ``confidence``) with the throughput (``throughput_items_per_s``, ``_low``/``_high``) by
    ``profiling.throughput``'s one definition; ``cfg.min_rounds`` rounds, then more while the claim is undecided."""
    def run(rounds: int, level: float) -> pd.DataFrame:
        points = [dict(round=r, batch_size=b) for r in range(rounds)
                  for b in (cfg.batch_sizes if r % 2 == 0 else cfg.batch_sizes[::-1])]
        batch = combine_rounds(BATCH.run(cfg, store_dir, points=points, **kw), ["batch_size"])
        ok = batch["status"] == "ok"
        for column in throughput.COLUMNS:
            batch[column] = float("nan")
        for i in batch.index[ok]:
            batch.loc[i, list(throughput.COLUMNS)] = list(throughput.columns(batch.loc[i]).values())
        return batch.assign(confidence=level)

    def decided(batch: pd.DataFrame) -> bool:
        return claims.decided(check_claims(studies.combine(batch=batch), cfg.device))

    return until_decided(run, decided, min_rounds=cfg.min_rounds, max_rounds=cfg.max_rounds,
                         budget_s=cfg.round_budget_s)


BATCH = Experiment("batch", batch_point, axes={"batch_size": "batch_sizes"}, desc="quickstart: time per batch")


def plan(cfg) -> list[Work]:
    """What :func:`measure` does, for its estimate: per batch size ``min_rounds`` rounds of warm-up and timed batches
    (more only while the claim is undecided; on a CPU also the
    memory pass's two calls under the profiler), then the profile of the largest batch."""
    config.set_threads(cfg.threads)
    dev = torch.device(cfg.device)
    net = models.get(cfg.model_name).to(dev).eval()

    def batch(size):
        x = models.example_input(net, size).to(dev)
        return lambda: forward(net, x)

    cpu = dev.type == "cpu"
    calls = {b: cfg.min_rounds * (cfg.warmup + cfg.repeats) + (3 if cpu else 0) for b in cfg.batch_sizes}
    calls[max(cfg.batch_sizes)] += PROFILE_ITERATIONS + 1
    return [*by_batch("batches", calls, batch, dev),
            Work("profiles", 1 + (len(cfg.batch_sizes) if cpu else 0), profiler_session(dev))]


@studies.measurement(plan)
def measure(cfg, store_dir: str | Path | None, progress: bool = True) -> pd.DataFrame:
    """Experiments "batch" (a row per batch size, ``benchmark``'s columns; one that does not fit: an "oom" row) and
    "operators" (:func:`operators`), with ``cfg.threads`` intra-op CPU threads, the count in use keying the store."""
    batch = batch_rounds(cfg, store_dir, progress=progress, settings=dict(threads=config.set_threads(cfg.threads)))
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
    """Throughput at every larger batch size / at the smallest, round by round (``throughput.gain``)."""
    ok = df[(df["experiment"] == "batch") & (df["status"] == "ok")].sort_values("batch_size", kind="stable")
    if len(ok) < 2:
        return f"it needs two batch sizes measured; measured: {', '.join(map(str, ok['batch_size'].astype(int))) or 'none'}"
    if why := throughput.unpaired(ok):
        return why
    base = ok.iloc[0]
    gains = {f"batch {r['batch_size']:.0f}": throughput.gain(r, base) for _, r in ok.iloc[1:].iterrows()}
    threads = f"{ok['cpu_threads'].iloc[0]:.0f} CPU thread(s)" if "cpu_threads" in ok else ""
    ours = ", ".join(f"{k} {g.text('.3g', 'x')}" for k, g in gains.items())
    return claims.Measured(gains, claims.joined(f"over batch {base['batch_size']:.0f}: {ours}", threads))


CLAIMS = [claims.Declared("throughput at the best batch size is far above batch 1", "Sec. IV-A: \"we're better "
                          "utilizing the GPU's parallel processing capabilities\" (Fig. 1)", "images/s at a larger "
                          "batch size / at the smallest", claims.above(claims.FAR_ABOVE, unit="x"), _gains, some=True,
                          each="larger batch size", beyond=True, bound=throughput.DEFINITION + ", taken round by round")]


check_claims = claims.checker(CLAIMS)  # Paper 001, Sec. IV-A, on cnnlab.profiling.throughput's images/s
