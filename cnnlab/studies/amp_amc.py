"""Study 03: Automatic Mixed Precision with "Automatic Memory Coalescing" (paper 001, Sec. IV-C, Fig. 5).

Paper 001 ran CIFAR ResNets at batch 1024 on a Tesla T4 in FP32 and with AMP + AMC, and saw a slight *increase* in
time per batch but a 45-50% *drop* in peak GPU memory allocated. AMC is not a PyTorch feature, and the paper does
not say what it ran; we take it to be what gives convolutions coalesced memory access (why: notebook 03): the
``channels_last`` (NHWC) memory format, and ``torch.backends.cudnn.benchmark = True`` (CUDA only: rows record that
a CPU has no cuDNN). Variants (:data:`VARIANTS`): ``fp32``; ``amp`` (``torch.autocast``: float16 on CUDA, bfloat16
on a CPU); ``amc`` (fp32 + AMC, to separate the two effects); ``amp+amc``; ``amp+amc+compile`` (+ torch.compile).
Random weights and CIFAR-shaped random inputs (``data_source = synthetic``): time and memory do not depend on them.
Timed in paired rounds (every point once a round, the order reversed every other round), more rounds while the time
claim is undecided (``cnnlab.profiling.compare``)."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import pandas as pd
import torch

from cnnlab import claims, config, models, studies
from cnnlab.claims import Spread
from cnnlab.profiling import benchmark, combine_rounds, derived, free_memory
from cnnlab.profiling.compare import Paired, looks, until_decided
from cnnlab.profiling.estimate import Work, profiler_session
from cnnlab.plotting import amp_amc as plots
from cnnlab.plotting.amp_amc import figures  # noqa: F401  (the contract's figures(df))
from cnnlab.studies import Experiment, Parameter

# each variant's settings, as its name lists them (the names and their order: the figure's, plots.VARIANTS)
VARIANTS = {name: dict(amp="amp" in name, amc="amc" in name, compile="compile" in name) for name in plots.VARIANTS}
PAPER_MODELS = ["resnet20", "resnet32", "resnet44", "resnet56", "resnet110"]
PAPER_MEMORY_DROP_PCT = (45.0, 50.0)  # Sec. IV-C, T4, batch 1024: "around 45-50%" ("as much as 50%", Sec. V)
PAPER_BATCH_SIZE = 1024  # Sec. IV-C: "We ran this on several ResNet variants using a batch size of 1024"
# "around": the paper's band widened by this many percentage points on either side (our reading, the paper gives no
# tolerance); the drop is judged on this band, AMC_BAND
AROUND_PP = 5.0
AMC_BAND = (PAPER_MEMORY_DROP_PCT[0] - AROUND_PP, PAPER_MEMORY_DROP_PCT[1] + AROUND_PP)
# "A slight increase" in time per batch (Sec. IV-C) has no number: a rise (amp+amc slower than fp32; "we didn't see
# faster inference times", Sec. V) of at most claims.SLIGHT (our bound), judged as a band on the ratio of paired
# rounds (its interval narrows as rounds are added). A GPU claim: a CPU's bf16 autocast is another mechanism (7.6x
# fp32's time for ResNet-20 in the quick run of e651462).


def _one_batch_size(value, parameter: str) -> int:
    sizes = config.batch_sizes(value, parameter)
    if len(sizes) != 1:
        raise ValueError(f"{parameter}={value!r}: give one batch size (an integer >= 1), e.g. 1024")
    return sizes[0]


def _rounds(cfg) -> None:
    looks(cfg.min_rounds, cfg.max_rounds)  # ValueError naming both where min_rounds > max_rounds


# quick: a CPU smoke run, two ResNets at batch 64, one batch per point and round (a CPU's bf16 autocast took 3.9-6.8
# s a batch here), no torch.compile (its first call takes minutes on a CPU), one intra-op thread (see
# cnnlab.config.threads); standard: one Colab GPU (a T4, like the paper's), the paper's models and batch size; paper:
# the paper, plus torch.compile (compiled again in every round: Inductor's cache makes the later ones shorter).
PARAMETERS = studies.Parameters(
    models=Parameter(["resnet20", "resnet32"], PAPER_MODELS, check=config.models_list, axis=True,
                     doc="registry names of image models"),
    batch_size=Parameter(64, 1024, check=_one_batch_size, doc="images per batch"),
    variants=Parameter(["fp32", "amp", "amp+amc"], ["fp32", "amp", "amc", "amp+amc"], list(VARIANTS),
                       check=partial(config.names_list, valid=VARIANTS, required="fp32"), axis=True,
                       doc=f"from {', '.join(VARIANTS)} (fp32 is required)"),
    warmup=Parameter(1, 5, 10, check=partial(config.positive_int, minimum=0),
                     doc="untimed batches per point and round (the autotuner's; torch.compile's first call is timed "
                         "apart)"),
    repeats=Parameter(1, 5, 10, check=config.positive_int,
                      doc="timed batches per point and round (the round's time: their median)"),
    min_rounds=studies.MIN_ROUNDS, max_rounds=studies.MAX_ROUNDS,
    round_budget_s=Parameter(300.0, 1200.0, 3600.0, check=partial(config.number, low=0.0, high=7 * 86400.0),
                             doc="seconds the timing rounds may take: no round is added past it"),
    threads=studies.THREADS, tf32=studies.TF32, device=studies.DEVICE, check=_rounds,
)
configure = PARAMETERS.configure
# torch.compile's first call (tracing, code generation) cannot be probed short of compiling: a minute is what it
# took ResNets here (2-core CPU; Inductor's cache makes a second compile much shorter)
COMPILE_S = 60.0


def amp_dtype(device) -> str:
    """The autocast dtype AMP uses on ``device``: float16 on CUDA (the paper), bfloat16 on a CPU."""
    return "float16" if torch.device(str(device)).type == "cuda" else "bfloat16"


def amc_point(round, model, variant, *, batch_size, warmup, repeats, device) -> dict:  # noqa: A002
    """One point of experiment "amp_amc" (``round``: the pass over the grid, a store column): ``benchmark``'s row of
    ``model`` in ``variant`` at ``batch_size`` (latency_ms_* per batch in ms, throughput_items_per_s,
    peak_mem_alloc_mib in MiB, gpu_util_pct...) and the variant's settings: autocast (dtype or "off"), memory_format,
    cudnn_benchmark (bool; NaN on a CPU, why in cudnn_benchmark_missing_reason), compiled, compile_time_s (s, a
    compiled model's first call: tracing, code generation and one batch; NaN otherwise)."""
    v, dev = VARIANTS[variant], torch.device(device)
    cuda = dev.type == "cuda"
    autocast = amp_dtype(dev) if v["amp"] else None
    fmt = "channels_last" if v["amc"] else "contiguous_format"
    # allocator bytes are the same in every round, and a CPU's cost two more passes: counted in the first round there
    memory = round == 0 or not dev.type == "cpu"
    torch.manual_seed(0)
    net = models.get(model).eval()
    try:
        # cudnn.benchmark is part of AMC on CUDA, explicitly off otherwise so that fp32 and amp are not tuned
        with config.cudnn_benchmark(v["amc"] and cuda):
            m = benchmark(torch.compile(net) if v["compile"] else net, models.example_input(net, batch_size),
                          device=dev, autocast=autocast, memory_format=fmt, warmup=warmup, repeats=repeats,
                          first_call=v["compile"], measure_memory=memory)
    finally:
        del net
        if v["compile"]:
            torch.compiler.reset()  # drop compiled graphs (and their memory) before the next point
        free_memory()
    # weights stay fp32 (no dtype column); only a compiled model's first call is timed apart (compile_time_s)
    row = {key: x for key, x in m.as_row().items() if key not in ("dtype", "first_call_ms")}
    return {**row, "autocast": autocast or "off", "amp": v["amp"], "cudnn_benchmark": v["amc"] if cuda else math.nan,
            "cudnn_benchmark_missing_reason": None if cuda else "CPU run: cuDNN is CUDA-only",
            "compiled": v["compile"], "compile_time_s": m.first_call_ms / 1e3, "data_source": "synthetic"}


AMP_AMC = Experiment("amp_amc", amc_point, desc="AMP + AMC")


def plan(cfg) -> list[Work]:
    """:func:`measure`'s work, for its estimate: per round (``min_rounds``: more only while the time claim is undecided,
    within ``round_budget_s``), model and variant the warm-up and timed batches (on a CPU, in the first round, also the
    memory pass, two calls under the profiler), each variant probed apart; torch.compile's first call at
    :data:`COMPILE_S`."""
    config.set_threads(cfg.threads)
    dev = torch.device(cfg.device)
    works = []
    for model in cfg.models:
        for variant in cfg.variants:
            v = VARIANTS[variant]
            fmt = torch.channels_last if v["amc"] else torch.contiguous_format
            net = models.get(model).eval().to(dev).to(memory_format=fmt)
            x = models.example_input(net, cfg.batch_size).to(dev).contiguous(memory_format=fmt)
            amp = config.to_dtype(amp_dtype(dev)) if v["amp"] else None

            def call(net=net, x=x, amp=amp):
                with torch.inference_mode(), torch.autocast(dev.type, dtype=amp or torch.float16,
                                                            enabled=amp is not None):
                    return net(x)
            works.append(Work("timed batches", cfg.min_rounds * (cfg.warmup + cfg.repeats) + 4 * (dev.type == "cpu"),
                              call))
            if v["compile"]:
                works.append(Work("torch.compile", cfg.min_rounds, COMPILE_S))
    if dev.type == "cpu":
        works.append(Work("timed batches", len(cfg.models) * len(cfg.variants), profiler_session(dev)))
    return works


def timing_points(cfg, rounds: range) -> list[dict]:
    """The grid once per round of ``rounds``, the model outermost (a model's variants timed one right after another,
    as they are paired): in grid order in even rounds and reversed in odd ones, so that no variant is always timed
    first after a change of load."""
    grid = [dict(model=m, variant=v) for m in cfg.models for v in cfg.variants]
    return [dict(round=r, **point) for r in rounds for point in (grid if r % 2 == 0 else grid[::-1])]


def _timed_in_rounds(cfg, store_dir, progress: bool) -> pd.DataFrame:
    """Experiment "amp_amc" in paired rounds (:func:`timing_points`), a row per point (:func:`combine_rounds`):
    ``cfg.min_rounds``, then more at ``compare.looks``' counts while the time claim is undecided, up to
    ``cfg.max_rounds`` and within ``cfg.round_budget_s`` (:func:`cnnlab.profiling.compare.until_decided`). Only new
    rounds are measured at a look."""
    threads = config.set_threads(cfg.threads)
    rows: list[pd.DataFrame] = []

    def run(n: int, level: float) -> pd.DataFrame:
        done = int(rows[-1]["round"].max()) + 1 if rows else 0
        rows.append(AMP_AMC.run(cfg, store_dir, progress=progress, points=timing_points(cfg, range(done, n)),
                                settings=dict(cpu_threads=threads)))
        return _changes(combine_rounds(pd.concat(rows, ignore_index=True), ["model", "variant"])).assign(
            confidence=level)

    def decided(df: pd.DataFrame) -> bool:  # the memory claim is exact bytes: only the time claim needs rounds
        return claims.decided(check_claims(df, cfg.device))
    return until_decided(run, decided, min_rounds=cfg.min_rounds, max_rounds=cfg.max_rounds,
                         budget_s=cfg.round_budget_s)


@studies.measurement(plan)
def measure(cfg, store_dir: str | Path | None, progress: bool = True) -> pd.DataFrame:
    """Time per batch and peak memory of each model in each variant at ``cfg.batch_size`` (paper Fig. 5), in paired
    rounds (:func:`_timed_in_rounds`): a row per (model, variant) with :func:`amc_point`'s columns over the rounds
    (:func:`cnnlab.profiling.combine_rounds`: round_medians_ms every round's median, rounds, confidence the level its
    intervals are taken at), and the change against the model's fp32 row, mem_change_pct_vs_fp32 and
    time_change_pct_vs_fp32 (100 * (variant - fp32) / fp32 of peak_mem_model_mib, the model's own bytes without the
    libraries' workspaces in peak_mem_other_mib, and of latency_ms_median; negative = less)."""
    return _timed_in_rounds(cfg, store_dir, progress)


def _changes(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with mem_change_pct_vs_fp32 and time_change_pct_vs_fp32 against each model's fp32 row."""
    # memory: the model's own bytes (weights, input, the batch's peak), not the cuBLAS/cuDNN workspaces resident beside
    # them either way (34 MiB on an H100: with them, a 57% cut of the batch's memory read as 24%)
    for col, metric in (("mem_change_pct_vs_fp32", "peak_mem_model_mib"),
                        ("time_change_pct_vs_fp32", "latency_ms_median")):
        df[col] = derived.against(df, metric, {"variant": "fp32"}, by=["model"], how="change_pct") \
            if metric in df else math.nan
    return df


def _amp_amc(df: pd.DataFrame, memory: bool):
    """Each model's amp+amc / fp32: peak memory of its own tensors (exact allocator bytes), or time per batch, the
    two timed in the same rounds and divided round by round (:class:`Paired`)."""
    ok = df[df["status"] == "ok"].set_index("model")
    ok = ok[memory | ok.get("round_medians_ms", pd.Series(index=ok.index, dtype=object)).map(
        lambda t: isinstance(t, str) and bool(t.strip()))]
    amc, fp32 = ok[ok["variant"] == "amp+amc"].dropna(subset=["mem_change_pct_vs_fp32"]), ok[ok["variant"] == "fp32"]
    parts = {m: Spread.exact(1 + r.mem_change_pct_vs_fp32 / 100) if memory else
             Paired.of_rounds(r) / Paired.of_rounds(fp32.loc[m]) for m, r in amc.iterrows() if memory or m in fp32.index}
    sizes = sorted({int(b) for b in df["batch_size"].dropna()}) if "batch_size" in df else []
    note = (f"AMP is autocast {next(iter(amc.get('autocast', [])), '?')} here; judged at batch "
            f"{', '.join(map(str, sizes)) or 'not recorded'} (the paper's {PAPER_BATCH_SIZE})"
            + ("" if sizes == [PAPER_BATCH_SIZE] else ": another point than the paper's, and the effect depends on it"))
    other = amc.get("peak_mem_other_mib", pd.Series(dtype=float)).dropna()
    ours = ", ".join(f"{m} {r.mem_change_pct_vs_fp32:+.1f}%" for m, r in amc.iterrows()) + (
        f"; {other.min():.1f}-{other.max():.1f} MiB of library workspaces beside them, left out" if len(other) else "")
    if not memory:  # each ratio with the paired rounds it came from
        ours = ", ".join(f"{m} {x.text('.3f', 'x')} ({x.rounds} paired rounds)" for m, x in parts.items())
    return claims.Measured(parts, ours, note) if parts else "no amp+amc point measured beside fp32"


CLAIMS = [
    claims.Declared(
        "AMP + AMC cuts peak memory allocated by around {:.0f}-{:.0f}%".format(*PAPER_MEMORY_DROP_PCT),
        '"a drastic reduction - around 45-50% - in the peak amount of GPU memory allocated" (Sec. IV-C, Fig. 5 bottom, '
        'T4, batch 1024)', "amp+amc / fp32 peak memory of the model's own tensors (not the libraries' workspaces)",
        claims.within(1 - AMC_BAND[1] / 100, 1 - AMC_BAND[0] / 100, ".2f", "x"), partial(_amp_amc, memory=True),
        each="model", noise="noise: none, allocator bytes are exact", gpu_only="CUDA allocator, fp16 on a T4",
        bound=f"a {AMC_BAND[0]:.0f}-{AMC_BAND[1]:.0f}% drop: \"around\" as +-{AROUND_PP:g} pp, our bound"),
    claims.Declared("AMP + AMC is slightly slower per batch than fp32", '"a slight increase in the average time taken '
                    'per batch compared to the FP32 baseline" (Sec. IV-C, Fig. 5 top)', "amp+amc / fp32 median time "
                    "per batch", claims.within(1.0, 1 + claims.SLIGHT, ".3f", "x"), partial(_amp_amc, memory=False),
                    each="model", bound=f"an increase, and \"slight\": +{claims.SLIGHT:.0%} at most, our bound",
                    gpu_only="the paper's float16 autocast on a T4; a CPU's AMP runs bfloat16 "
                    "instead, through other kernels, and has no cuDNN autotuner for AMC: a stand-in, not the paper's "
                    "mechanism"),
]


check_claims = claims.checker(CLAIMS)  # Sec. IV-C
