"""Study 05 (ddp_scaling): data-parallel scaling of training over data fraction, batch size and process count.

Paper 002 (Iwano, "Comparative Analysis of Runtime and Memory Optimization with ResNet152") trains ResNet-152 on 1,
1/2 and 1/10 of CIFAR-100 with batch sizes 128-2048 on 1, 2 and 4 A100 GPUs and reports, from the PyTorch profiler,
CPU and CUDA runtime, number of calls and "maximum CPU and GPU memory transfer" (its Fig. 1-15). Here every grid
point is one ``torchrun`` launch (:func:`cnnlab.ddp.launch`: ``warmup_steps`` untimed steps, timed epochs, then
``profile_steps`` profiled steps whose totals are scaled to the epochs), experiment "ddp" (resumable; a failed
launch's reason is recorded), and :func:`add_scaling` adds what the paper lacks: speed-up and scaling efficiency
against one process. On CUDA, more processes than GPUs share them (Gloo, :func:`cnnlab.ddp.placement`): every row,
figure and claim comparing process counts says how they ran ("2 processes sharing 1 GPU", "2 CPU processes").

The claims judge the paper's own quantities, each with its noise: runtime is the measured time per epoch
(:func:`add_epoch_time`), not the profiled steps scaled; kernel calls are the model's convolution operators
(``conv_calls``; ``calls_total`` also counts the DataLoader's per-image transforms); memory is the peak of live
tensor bytes per rank (``max_*_mem_mib``). The profiler's totals (times, calls, bytes allocated) are in the table
and figures (:mod:`cnnlab.plotting.ddp_scaling`).
"""

from __future__ import annotations

import itertools
import math
import tempfile
from functools import partial
from pathlib import Path

import pandas as pd
import torch

from cnnlab import claims, config, data, ddp, models, studies
from cnnlab.claims import INCONCLUSIVE, Claim, Declared, Measured, Spread, above, below, falls, joined
from cnnlab.plotting.ddp_scaling import below_noise, placements, processes
from cnnlab.plotting.ddp_scaling import figures  # noqa: F401  (the contract's figures(df))
from cnnlab.profiling import derived, spread, store_file, wall_time
from cnnlab.profiling.estimate import Work, interpolate
from cnnlab.studies import Experiment, Parameter

MAX_WORLD_SIZE = 64  # processes of one standalone launch (one machine), whatever is present
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week per configuration
MIN_TIMEOUT_S = 1.0  # torchrun alone takes longer to start: less would record every launch as failed
DEVICES = ("auto", "cpu", "cuda")


def _device(value, parameter: str) -> str:
    """"cpu" or "cuda" ("auto": CUDA when available)."""
    return config.resolve_device(config.one_of(value, DEVICES, parameter=parameter), parameter=parameter).type


def _stem(value, parameter: str) -> str | None:
    """None (the model's own stem, where it has one) or one of the stems; which model takes one: :func:`_check`."""
    from cnnlab.models import resnet_imagenet

    return None if value is None else config.one_of(value, resnet_imagenet.STEMS, parameter=parameter)


def _check(cfg) -> None:
    """The stem the model has (explicit where it has one: the results say which ran); world sizes and
    threads_per_rank at most the CPU cores present unless ``oversubscribe=True`` (then at most
    :data:`MAX_WORLD_SIZE`)."""
    from cnnlab.models import resnet_imagenet

    default_stem = models.options(cfg.model).get("stem")  # None: the model has no stem option
    if default_stem is None and cfg.stem is not None:
        raise ValueError(f"stem={cfg.stem!r} is not valid for model={cfg.model!r}, which has no stem option; "
                         f"valid: None")
    if default_stem is not None:
        cfg.stem = config.one_of(cfg.stem or default_stem, resnet_imagenet.STEMS, parameter="stem")
    # Every process needs a core of its own (on CUDA too: it feeds its GPU), and each of its threads too: more would
    # measure the cores' contention, not data parallelism (and world_sizes=[1000] would start 1,000 processes).
    cores, over = config.cores(), cfg.oversubscribe
    most = MAX_WORLD_SIZE if over else cores
    present = f"the {cores} CPU cores present; oversubscribe=True allows up to {MAX_WORLD_SIZE}"
    cfg.world_sizes = config.positive_ints(cfg.world_sizes, parameter="world_sizes", maximum=most, example="[1, 2, 4]",
                                           bound="one machine's processes" if over else present)
    cfg.threads_per_rank = config.positive_int(min(4, cores) if cfg.threads_per_rank is None else cfg.threads_per_rank,
                                               parameter="threads_per_rank", maximum=most,
                                               bound="oversubscribe=True" if over else present)


# quick: a CPU smoke run: Gloo, 1 and 2 processes, LeNet-5 (no stem option) on the real offline digits set (1437
# images), batches of 32 and 128; the full set and the paper's smallest fraction, 1/10 (where it says gains are "less
# pronounced"). 5 untimed warm-up steps (on an H100 the first epoch took 3.4x the next two without them; on a CPU they
# cost a few ms), 3 timed epochs (their spread: the noise of the time per epoch and the throughput) and 3 profiled
# blocks (their spread: the profiler totals'): a few seconds more per launch, whose start-up dominates.
# standard: one Colab GPU: the paper's model and data, a smaller grid; 2 processes share the one GPU (Gloo).
# paper: the paper's grid (sec. 4.2.2) and model: torchvision's ResNet-152 (the ImageNet stem) on 32x32 CIFAR-100,
# which is what fits its batches of up to 2048 per 40 GB A100 (the 3x3 CIFAR stem needs 16x the activations). The
# paper gives no epoch count: one epoch, timed whole (no range: its runtime claims are inconclusive, "measured once";
# epochs=2 or more gives them one); 10 steps of it profiled.
PARAMETERS = studies.Parameters(
    model=Parameter("lenet5", "resnet152", check=partial(config.one_of, valid=models.names()), doc="registry name"),
    stem=Parameter(None, "imagenet", check=_stem, type="str",
                   doc='resnet152: "imagenet" (torchvision\'s, the paper\'s) or "cifar"; None for models without one'),
    dataset=Parameter("digits", "cifar100", check=partial(config.one_of, valid=data.names()), doc="cnnlab.data name"),
    synthetic=Parameter(False, check=config.boolean, doc="True: labelled synthetic data of the dataset's shape"),
    data_fractions=Parameter([1.0, 0.1], [0.5, 0.1], [1.0, 0.5, 0.1], axis=True,
                             check=partial(config.number_list, low=0, high=1,
                                           valid="a non-empty list of fractions in (0, 1], e.g. [1.0, 0.5]"),
                             doc="fractions of the training set, in (0, 1]"),
    # the batch of each process (the paper's DataLoader batch_size in every process, sec. 3.2); the global batch is
    # batch_size_per_rank x world_size
    batch_sizes=Parameter([32, 128], [128, 512], [128, 512, 1024, 2048], check=config.batch_sizes, axis=True,
                          doc="images per batch per process"),
    world_sizes=Parameter([1, 2], [1, 2], [1, 2, 4], axis=True,
                          doc="processes (on CUDA one GPU each where there are enough, else sharing them)"),
    warmup_steps=Parameter(5, check=partial(config.positive_int, minimum=0),
                           doc="untimed training steps before the timed epochs (their time: warmup_time_s)"),
    epochs=Parameter(3, 1, check=config.positive_int, doc="timed training epochs"),
    profile_steps=Parameter(3, 5, 10, check=config.positive_int, doc="training steps profiled after the timed "
                            "epochs (their totals are scaled to the epochs)"),
    profile_repeats=Parameter(3, check=config.positive_int,
                              doc="blocks of profile_steps steps: the totals are their median, their range the noise"),
    # None: four threads per process on a GPU run (data loading, the optimizer), never more than the cores present
    # (Colab's free GPU runtime has two)
    threads_per_rank=Parameter(1, None, type="int", doc="OMP threads of each process (None: min(4, cores))"),
    timeout_s=Parameter(180, 1800, 3600, type="float", check=partial(config.number, low=MIN_TIMEOUT_S,
                                                                      low_open=False, high=MAX_TIMEOUT_S),
                        doc="per configuration (s); a launch past it is killed and recorded as failed"),
    oversubscribe=Parameter(False, check=config.boolean, doc="True: allow more processes than CPU cores (each "
                            "still measured; timings then compete)"),
    tf32=studies.TF32,
    device=Parameter("cpu", "auto", check=_device, doc="auto | cpu | cuda"),
    check=_check,
)
configure = PARAMETERS.configure


def ddp_point(data_fraction: float, batch_size_per_rank: int, world_size: int, *, model: str, stem: str | None,
              dataset: str, synthetic: bool, warmup_steps: int, epochs: int, profile_steps: int,
              profile_repeats: int, tf32: bool, device: str, threads_per_rank: int, timeout_s: float,
              out_dir: Path) -> dict:
    """One point of experiment "ddp": :func:`cnnlab.ddp.launch`'s row (its run folder under ``out_dir``) without
    the status it leaves to the sweep; a launch that fails raises its reason (:class:`cnnlab.ddp.LaunchFailed`;
    :class:`cnnlab.ddp.LaunchOutOfMemory` is recorded as "oom")."""
    row = ddp.launch(world_size=world_size, batch_size_per_rank=batch_size_per_rank, data_fraction=data_fraction,
                     model=model, dataset=dataset, epochs=epochs, synthetic=synthetic, device=device,
                     out_dir=out_dir, timeout_s=timeout_s, threads_per_rank=threads_per_rank, stem=stem,
                     warmup_steps=warmup_steps, profile_steps=profile_steps, profile_repeats=profile_repeats,
                     tf32=tf32)
    return {k: v for k, v in row.items() if k not in ("status", "error")}


DDP = Experiment("ddp", ddp_point, desc="ddp configurations",
                 axes={"data_fraction": "data_fractions", "batch_size_per_rank": "batch_sizes",
                       "world_size": "world_sizes"})


def plan(cfg) -> list[Work]:
    """What :func:`measure` does, for its estimate: per grid point one launch, whose fixed cost (torchrun, the ranks'
    start, the process group, the first profile) is probed by one real launch of the most processes on two batches
    of synthetic data, plus the point's training steps (warm-up, the timed epochs' steps per rank, the profiled
    blocks), each as long as one step at its batch size here (the ranks share the data out, in parallel)."""
    from cnnlab import train

    meta = data.info(cfg.dataset)
    size = meta.train_size // 10 if cfg.synthetic else meta.train_size
    dev = torch.device("cuda" if cfg.device == "cuda" else "cpu")
    with tempfile.TemporaryDirectory() as tmp:  # synthetic data of the set's shape: a probe downloads nothing
        launch = wall_time(lambda: ddp.launch(
            world_size=max(cfg.world_sizes), batch_size_per_rank=max(cfg.batch_sizes), data_fraction=1.0,
            model=cfg.model, stem=cfg.stem, dataset=cfg.dataset, synthetic=True,
            synthetic_size=2 * max(cfg.batch_sizes), epochs=1, device=cfg.device, out_dir=tmp, timeout_s=cfg.timeout_s,
            threads_per_rank=cfg.threads_per_rank, warmup_steps=0, profile_steps=1, profile_repeats=1,
            tf32=cfg.tf32)).seconds
    config.set_threads(cfg.threads_per_rank)
    options = {} if cfg.stem is None else {"stem": cfg.stem}
    net = models.get(cfg.model, num_classes=meta.num_classes, **options).to(dev).train()
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-9)

    def step_at(b):
        x, y = torch.randn(b, *meta.input_shape, device=dev), torch.randint(meta.num_classes, (b,), device=dev)
        return lambda: train.train_step(net, x, y, optimizer)

    step, fixed = interpolate(cfg.batch_sizes, step_at, dev), cfg.profile_repeats * (1 + cfg.profile_steps)
    return [work for f, b, w in itertools.product(cfg.data_fractions, cfg.batch_sizes, cfg.world_sizes) for work in (
        Work("launches", 1, launch),
        Work("training steps", cfg.warmup_steps + cfg.epochs * -(-round(f * size) // (w * b)) + fixed, step[b]))]


@studies.measurement(plan)
def measure(cfg, store_dir: str | Path | None, progress: bool = True) -> pd.DataFrame:
    """One row per grid point (data fraction x batch size per process x process count), in grid order: one launch of
    :func:`cnnlab.ddp.launch`, its :data:`cnnlab.ddp.ROW_FIELDS` (times in ms, wall time, warmup_time_s and
    launch_time_s in s, memory in MiB, throughput in samples/s; the profiler's totals per rank, scaled from
    ``profile_steps`` steps to the epochs), run_dir (the launch's logs, in the store's side folder ``<store>.runs/``),
    point_time_s, and :func:`add_epoch_time`'s and :func:`add_scaling`'s columns. Processes beyond the GPUs present
    share them (``placement`` says so); the stores are keyed by the GPUs present, so another machine's rows are never
    read as this one's. Status "error" (the launch's reason in ``error``; run again by the next call) or "oom". The
    configuration columns (model, backend, placement, gpus_used, global_batch_size, ...) are on every row, failed
    ones too (from ``cfg`` and the grid point)."""
    gpus = torch.cuda.device_count() if cfg.device == "cuda" else 0
    where = {w: ddp.placement(cfg.device, w, gpus) for w in cfg.world_sizes}  # before any launch
    settings = dict(gpus_present=gpus if cfg.device == "cuda" else None)  # the placements depend on it
    with tempfile.TemporaryDirectory() as tmp:  # the launches' folders: one per store (per settings)
        runs = Path(tmp) if store_dir is None else \
            store_file(DDP.store(store_dir), cfg.settings(**settings)).with_suffix(".csv.runs")  # the store's side
        df = DDP.run(cfg, store_dir, progress=progress, settings=settings, bind=dict(out_dir=runs), retry_errors=True)
    df = df.reindex(columns=list(dict.fromkeys([*ddp.ROW_FIELDS, *df.columns])))
    text = ("data_source", "error", "note", "cuda_missing_reason", "max_gpu_mem_missing_reason", "placement")
    df = df.astype({c: object for c in text})  # all-NaN (float) columns when no point ran

    def planned(column, field):  # a launch's own record, else (a failed point) what it was to run
        return df[column].where(df[column].notna(), df["world_size"].map(lambda w: getattr(where[w], field)))

    df = df.assign(model=cfg.model, stem=cfg.stem, dataset=cfg.dataset, device=cfg.device, tf32=cfg.tf32,
                   epochs=cfg.epochs, warmup_steps=cfg.warmup_steps, profiled_steps=cfg.profile_steps,
                   profile_repeats=cfg.profile_repeats, backend=planned("backend", "backend"),
                   gpus_used=planned("gpus_used", "gpus_used"), placement=planned("placement", "label"),
                   processes_per_gpu=pd.to_numeric(planned("processes_per_gpu", "processes_per_gpu")),  # NaN: CPU
                   global_batch_size=df["batch_size_per_rank"] * df["world_size"],
                   data_source=df["data_source"].fillna("synthetic" if cfg.synthetic else "real"))
    return add_scaling(add_epoch_time(df))


def add_epoch_time(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with epoch_time_s: the measured time of one timed epoch (s) of the slowest process, wall_time_s /
    epochs, and epoch_time_s_min / _max: the range of the epochs' times (an epoch's samples / its throughput, each
    epoch paced by its slowest process: ``throughput_samples_per_s_max`` / ``_min``), widened to hold the mean. NaN
    where the point has no wall time (a failed launch)."""
    mean, per_epoch = df["wall_time_s"] / df["epochs"], df["samples_total"] / df["epochs"]
    rate = {end: df.get(f"throughput_samples_per_s_{end}", df["throughput_samples_per_s"]) for end in ("max", "min")}
    return df.assign(epoch_time_s=mean,
                     epoch_time_s_min=pd.concat([(per_epoch / rate["max"]).fillna(mean), mean], axis=1).min(axis=1),
                     epoch_time_s_max=pd.concat([(per_epoch / rate["min"]).fillna(mean), mean], axis=1).max(axis=1))


def add_scaling(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with speedup_vs_1 (x: throughput / throughput with 1 process), scaling_efficiency (speed-up / processes,
    1 = ideal) and its noise, scaling_efficiency_min / _max (from each point's range of epoch throughputs, never
    narrower than the noise floor of a time: :meth:`Spread.timed_range`), and scaling_missing_reason, comparing
    points with the same model, dataset, device, epochs, data fraction and batch size per rank (so each process
    keeps its batch: the paper's setting)."""
    columns = ["speedup_vs_1", "scaling_efficiency", "scaling_efficiency_min", "scaling_efficiency_max"]
    df = df.assign(**dict.fromkeys(columns, math.nan), scaling_missing_reason=None)
    keys = ["model", "dataset", "device", "epochs", "data_fraction", "batch_size_per_rank"]
    for _, group in df.groupby(keys, dropna=False):
        base = group[(group["world_size"] == 1) & (group["status"] == "ok")]
        for idx, status in group["status"].items():
            if status != "ok" or base.empty:
                df.at[idx, "scaling_missing_reason"] = "no successful 1-process point to compare with" \
                    if status == "ok" else f"point {status}"
                continue
            b, t = (Spread.timed_range(row, "throughput_samples_per_s") for row in (base.iloc[0], df.loc[idx]))
            # speed-up, and its lowest and highest within both intervals; a point against itself: exactly 1
            x = (1.0, 1.0, 1.0) if idx == base.index[0] else \
                (derived.ratio(t.value, b.value), derived.ratio(t.low, b.high), derived.ratio(t.high, b.low))
            df.loc[idx, columns] = [x[0], *(derived.efficiency(v, df.at[idx, "world_size"]) for v in x)]
    return df


def scaling_caveats(df: pd.DataFrame) -> list[str]:
    """In words, each scaling efficiency of more than one process that says nothing about scaling
    (:func:`cnnlab.plotting.ddp_scaling.below_noise`; :data:`WHY` says why); empty when every one is resolved."""
    return [f"{_point(row)} ({processes(row)}): efficiency {eff.text('.2f')} "
            f"{WHY[kind].format(floor=1 / row['world_size'])}" for row, eff, kind in below_noise(df)]


WHY = {"once": "measured once (one epoch): its noise is unknown",
       "above": "is above ideal (1) beyond its noise: the 1-process point was slowed (other work, a warm-up), not a "
                "gain of data parallelism",
       "spans": "spans no speed-up ({floor:.2f}) to ideal (1): below its noise"}


# Sec. 4.5's "relatively unaffected", read as: every point within +-25% of one value (largest / smallest below this).
CPU_MEMORY_SPREAD = 1.25 / 0.75
TIME = "epoch_time_s"  # the runtime claims' quantity (add_epoch_time): measured, not the profiled steps scaled
AXES = {"batch_size_per_rank": "batch size", "world_size": "process count"}  # along which a claim judges a fall
OTHER = {"batch_size_per_rank": "world_size", "world_size": "batch_size_per_rank"}  # the axis a trend holds fixed
ONCE = "measured once per point (epochs=1): the noise of a time per epoch is unknown, so it decides nothing"
MEMORY = ('sec. 4.5, Fig. 10-15: "the CPU memory transfer remains relatively unaffected by batch size and GPU count, '
          'the GPU memory transfer shows a substantial decrease with increased parallelism and larger batch sizes"')
TIME_NOISE = (f"noise: a time per epoch is the epochs' mean within their range, at least /{spread.TIME_NOISE:g} to "
              f"x{spread.TIME_NOISE:g} (a ratio: between the extremes); decided only where intervals do not overlap")
COUNT_NOISE = "noise: operator counts and peaks of live tensor bytes are exact for the batches profiled"


def _ran(ok: pd.DataFrame) -> str:
    """"; processes: w=1: 1 process on 1 GPU, w=2: ..." for a claim comparing process counts, '' if not recorded."""
    placed = "placement" in ok and ok["placement"].notna().any()
    return "; processes: " + ", ".join(f"w={w:g}: {p}" for w, p in placements(ok).items()) if placed else ""


def _groups(ok: pd.DataFrame, metric: str, along: str, least=0.0) -> dict:
    """{(data fraction >= ``least``, value of the other axis): its rows along ``along``, two or more measured}."""
    rows = ok[ok["data_fraction"] >= least].dropna(subset=[metric]).groupby(["data_fraction", OTHER[along]])
    return {k: g.sort_values(along) for k, g in rows if g[along].nunique() > 1}


def _falls(claim: str, paper: str, quantity: str, metric: str, along: str, unit: str, note="", least=0.0,
           per_epoch=False, also="") -> Declared:
    """The claim that ``metric`` (per epoch where ``per_epoch``) falls along ``along`` in every :func:`_groups`."""
    def measure(ok: pd.DataFrame):
        gs = {f"f={f:g} {OTHER[along][0]}={v:g}": g for (f, v), g in _groups(ok, metric, along, least).items()}
        of = Spread.timed_range if metric == TIME else Spread.of_range
        xs = {k: [of(r, metric) * (1 / r.epochs if per_epoch else 1) for _, r in g.iterrows()] for k, g in gs.items()}
        steps = {k: g["steps_per_rank"] / g["epochs"] for k, g in gs.items() if "steps_per_rank" in g}
        fell = sum(g[also].iloc[-1] < g[also].iloc[0] for g in gs.values()) if also else 0
        ours = "; ".join(f"{k}: " + " -> ".join(x.text(".4g", unit) for x in v) for k, v in xs.items())
        return Measured(xs, ours + (_ran(ok) if along == "world_size" else ""), joined(
            note, also and f"{also} (per step x steps, not a peak) fell in {fell} of {len(gs)}", *(
                f"{k}: steps per epoch per rank " + " -> ".join(f"{x:g}" for x in s) for k, s in steps.items()
                if s.notna().all())), {k: [f"{along.split('_')[0]}={x:g}" for x in g[along]] for k, g in gs.items()}) \
            if gs else claims.missing(ok, metric.removesuffix("_mib"), f"fewer than two {AXES[along]}s measured")
    return Declared(claim, paper, f"{quantity} along {AXES[along]}", falls(".4g", unit), measure,
                    noise=TIME_NOISE if metric == TIME else COUNT_NOISE,
                    each=f"{AXES[OTHER[along]]} and data fraction{f' >= {least:g}' if least else ''}")


def _tenth(ok: pd.DataFrame):
    """Each runtime gain (first / last time of a :func:`_groups` group) at the smallest fraction / at the largest."""
    fr = sorted(ok["data_fraction"].unique())
    if not fr or fr[0] > 0.1 + 1e-9 or fr[-1] < 0.5:
        return "needs the data fractions 1/10 and one >= 1/2 in the grid"
    gain = {(a, f, v): Spread.timed_range(g.iloc[0], TIME) / Spread.timed_range(g.iloc[-1], TIME)
            for a in OTHER for (f, v), g in _groups(ok, TIME, a).items()}
    ends = {f"{a.split('_')[0]} gain at {OTHER[a].split('_')[0]}={v:g}": (x, gain[a, fr[-1], v])
            for (a, f, v), x in gain.items() if f == fr[0] and (a, fr[-1], v) in gain}
    return Measured({k: s / b for k, (s, b) in ends.items()}, "; ".join(
        f"{k}: {s.text('.3g', 'x')} at f={fr[0]:g} / {b.text('.3g', 'x')} at f={fr[-1]:g} = {(s / b).text('.3f')}"
        for k, (s, b) in ends.items()) + _ran(ok)) if ends else "fewer than two batch sizes or process counts measured"


def _crossover(ok: pd.DataFrame):
    """At each data fraction >= 1/2: batch gain / process gain at the smallest batch, the reverse at the largest."""
    parts, rows = {}, ok[ok["data_fraction"] >= 0.5].dropna(subset=[TIME])
    for f, part in (fp for fp in rows.groupby("data_fraction") if min(fp[1][c].nunique() for c in OTHER) > 1):
        t = {(r["batch_size_per_rank"], r["world_size"]): Spread.timed_range(r, TIME) for _, r in part.iterrows()}
        bs, ws = (sorted(part[c].unique()) for c in OTHER)
        (b0, b1), (bp, bl), w1, wn = bs[:2], bs[-2:], ws[0], ws[-1]
        if {(b0, w1), (b1, w1), (b0, wn), (bl, w1), (bl, wn), (bp, w1)} <= set(t):
            parts[f"f={f:g} b={b0:g}: batch gain / process gain"] = t[b0, wn] / t[b1, w1]
            parts[f"f={f:g} b={bl:g}: process gain / batch gain"] = t[bl, w1] * t[bl, w1] / (t[bl, wn] * t[bp, w1])
    return Measured(parts, "; ".join(f"{k} {v.text('.3f')}" for k, v in parts.items()) + _ran(ok)) \
        if parts else "needs two batch sizes and two process counts at a data fraction >= 1/2"


def _cpu_memory(ok: pd.DataFrame):
    """Per data fraction, the largest / smallest peak CPU memory per rank over batch sizes and process counts."""
    m = ok.groupby("data_fraction")["max_cpu_mem_mib"].agg(["min", "max", "count"]).query("count > 1")
    return Measured({f"f={f:g}": Spread.exact(r["max"] / r["min"]) for f, r in m.iterrows()}, "; ".join(
        f"f={f:g}: {r['min']:.4g} to {r['max']:.4g} MiB ({r['max'] / r['min']:.3f}x)" for f, r in m.iterrows())
        + _ran(ok), "on a CPU run the training tensors (model, batch, activations) are CPU memory" if "device" in ok
        and ok["device"].eq("cpu").any() else "") if len(m) else "fewer than two points per data fraction"


CLAIMS = [
    *(_falls(f"runtime per epoch falls with {AXES[a]} on the larger data fractions (1, 1/2)", 'sec. 4.3.2, Fig. 1-6: '
             '"for the half and full datasets, a more substantial decrease in runtime was observed with increasing '
             'batch sizes and GPU counts"', f"{TIME} (wall_time_s / epochs: an epoch of the slowest process)", TIME, a,
             " s", least=0.5) for a in AXES),
    Declared("runtime gains from batch size and process count are less pronounced on 1/10 of the data", 'sec. 4.3.1: '
             '"For the one-tenth dataset size, [...] the reduction in runtime with increased batch sizes and GPU '
             'counts was less pronounced"', f"{TIME}: a gain (first / last time along an axis) at 1/10 of the data "
             "/ the same at >= 1/2", below(1, ".3f"), _tenth, each="gain", noise=TIME_NOISE),
    Declared("batch size cuts runtime more at small batches, process count more at large batches (the crossover)",
             'sec. 4.3.2: "in smaller batch sizes, an increase in batch size had a more significant impact on reducing '
             'runtime. However, in larger batch sizes, the increase in GPU count became more influential"', f"{TIME} "
             "T(b, w): T(b0, most) / T(b1, 1) at the smallest batch b0, T(bL, 1)^2 / (T(bL, most) x T(bL-1, 1)) at "
             "the largest bL", above(1, ".3f"), _crossover, each="ratio at data fractions >= 1/2", noise=TIME_NOISE),
    *(_falls(f"the model's kernel calls (convolution operators) per epoch fall with {AXES[a]}", 'sec. 4.4, Fig. 7-9: '
             '"an increase in batch size and the number of GPUs used generally led to a decrease in the total number '
             'of kernel calls"; sec. 4.2.3: "kernel calls, such as for convolution operations"', "conv_calls / epochs "
             "(convolution calls, forward and backward, per epoch per rank)", "conv_calls", a, "", per_epoch=True,
             note="arithmetic: calls per epoch = calls per step x steps per epoch per rank") for a in AXES),
    Declared("peak CPU memory is relatively unaffected by batch size and process count", MEMORY, "max_cpu_mem_mib "
             "(peak of live CPU tensor memory in a profiled step, the largest process): largest / smallest",
             below(CPU_MEMORY_SPREAD, ".3g", "x"), _cpu_memory, each="data fraction", noise=COUNT_NOISE,
             bound="\"relatively unaffected\": our bound, the paper gives none"),
    *(_falls(f"peak GPU memory falls with {what}", MEMORY, "max_gpu_mem_mib (peak of live GPU tensor memory "
             "in a profiled step, the largest process)", "max_gpu_mem_mib", a, " MiB", also="gpu_mem_allocated_mib")
      for a, what in (("world_size", "more GPUs"), ("batch_size_per_rank", "batch size"))),
]


def check_claims(df: pd.DataFrame, device) -> list[Claim]:
    """:data:`CLAIMS` on the ``ok`` rows (a time measured once decides nothing); ``ours`` names the points not run."""
    ok, lost = add_epoch_time(df[df["status"] == "ok"]), df[df["status"] != "ok"]
    gap = f"; {len(lost)} of {len(df)} grid points missing, not judged: " + ", ".join(
        f"{_point(r)} ({r['status']})" for _, r in lost.iterrows()) if len(lost) else ""
    kept = "; ".join(f"{_point(r)}: {r['note']}" for _, r in ok.iterrows() if "note" in ok and pd.notna(r["note"]))
    for d, c in zip(CLAIMS, checks := claims.check(CLAIMS, ok, device)):  # times measured once: their noise unknown
        timed = c.held is not None and d.noise == TIME_NOISE and (ok["epochs"].fillna(1) < 2).any()
        c.held, c.ours, c.note = INCONCLUSIVE if timed else c.held, c.ours + gap, joined(timed and ONCE, c.note, kept)
    return checks


def _point(row) -> str:
    return f"f={row['data_fraction']:g} b={row['batch_size_per_rank']:g} w={row['world_size']:g}"
