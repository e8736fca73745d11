"""Study 05 (ddp_scaling): data-parallel scaling of training over data fraction, batch size and process count.

Paper 002 (Iwano, "Comparative Analysis of Runtime and Memory Optimization with ResNet152") trains ResNet-152 on 1,
1/2 and 1/10 of CIFAR-100 with batch sizes 128-2048 on 1, 2 and 4 A100 GPUs and reports, from the PyTorch profiler,
CPU and CUDA runtime, number of calls and "maximum CPU and GPU memory transfer" (its Fig. 1-15). The grid
(data fraction x batch size per process x process count) is timed in paired rounds (:mod:`cnnlab.profiling.compare`):
a round trains every configuration once (``warmup_steps`` untimed steps, ``epochs`` timed epochs), one after another
on the same processes, in one ``torchrun`` launch with the ``rounds_per_launch`` - 1 rounds after it
(:func:`cnnlab.ddp.launch_plan`: a configuration of fewer processes runs on the first ranks while the others wait),
in grid order in even rounds and reversed in odd ones; round 0 also
profiles ``profile_steps`` steps per configuration (the profiler's totals, scaled to the epochs). Experiment "ddp"
stores one row per (round, configuration), resumable; a failed configuration's reason is recorded. Rounds are added
while a runtime claim is undecided (:func:`cnnlab.profiling.until_decided`), up to ``max_rounds`` and within
``round_budget_s``. :func:`add_scaling` adds what the paper lacks: speed-up and scaling efficiency against one
process. On CUDA, more processes than GPUs share them (Gloo, :func:`cnnlab.ddp.placement`): every row,
figure and claim comparing process counts says how they ran ("2 processes sharing 1 GPU", "2 CPU processes").

The claims judge the paper's own quantities: runtime is the measured time per epoch, round by round
(``round_times_s``), its ratios taken within rounds and judged by the sign test's interval of their median
(:class:`cnnlab.profiling.Paired`), not the profiled steps scaled. Kernel calls (the model's convolution operators)
and peak GPU memory per rank are settled by arithmetic and by design: shown, not judged. Peak CPU memory is the
paper's host-side memory only on a GPU (on a CPU it is the training tensors): judged there. The profiler's totals
(times, calls, bytes allocated) are in the table and figures (:mod:`cnnlab.plotting.ddp_scaling`).
"""

from __future__ import annotations

import itertools
import math
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from cnnlab import claims, config, data, ddp, models, studies
from cnnlab.claims import Claim, Declared, Measured, Spread, above, below, falls, joined
from cnnlab.plotting.ddp_scaling import below_noise, placements, processes
from cnnlab.plotting.ddp_scaling import figures  # noqa: F401  (the contract's figures(df))
from cnnlab.profiling import Paired, derived, store_file, until_decided, wall_time
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
    if cfg.max_rounds < cfg.min_rounds:
        raise ValueError(f"max_rounds={cfg.max_rounds} is not valid; valid: at least min_rounds={cfg.min_rounds}")


# quick: a CPU smoke run: Gloo, 1 and 2 processes, LeNet-5 (no stem option) on the real offline digits set (its 837
# training images), batches of 32 and 128; the full set and the paper's smallest fraction, 1/10 (where it says gains are "less
# pronounced"). 5 untimed warm-up steps per configuration and round (on an H100 the first epoch took 3.4x the next two
# without them; on a CPU they cost a few ms), 1 timed epoch per configuration and round (the rounds are the
# repetition), and 3 profiled blocks in round 0 (their spread: the profiler totals'). A launch's start-up (torchrun
# and two processes importing torch: ~13 CPU-s) is far more than a round's training (~3 s), so one launch trains 8
# rounds (rounds_per_launch; a launch per round took 1.65x the time of the 8 launches of 3 epochs each before, back to
# back on one machine); round_budget_s adds rounds only where they fit: 120 s stopped at 12 rounds in a quick run of
# 04143db with "falls with process count" undecided (its epochs vary by a factor of 2 here), 180 s reaches 18.
# standard and paper: a launch per round (an epoch there takes minutes; an interruption then loses one round).
# standard: one Colab GPU: the paper's model and data, a smaller grid; 2 processes share the one GPU (Gloo).
# paper: the paper's grid (sec. 4.2.2) and model: torchvision's ResNet-152 (the ImageNet stem) on 32x32 CIFAR-100,
# which is what fits its batches of up to 2048 per 40 GB A100 (the 3x3 CIFAR stem needs 16x the activations). The
# paper gives no epoch count: one epoch per configuration and round; 10 steps of it profiled in round 0.
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
    epochs=Parameter(1, check=config.positive_int, doc="timed training epochs per configuration and round"),
    min_rounds=studies.MIN_ROUNDS,
    max_rounds=studies.MAX_ROUNDS,
    rounds_per_launch=Parameter(8, 1, check=config.positive_int,
                                doc="rounds trained one after another in one launch (its start, seconds of importing "
                                    "torch, paid once for them); 1: a launch per round, an interruption loses one"),
    round_budget_s=Parameter(180.0, 3 * 3600.0, 12 * 3600.0, type="float",
                             check=partial(config.number, low=0, high=MAX_TIMEOUT_S),
                             doc="rounds are added while a runtime claim is undecided only while the next look's "
                                 "rounds fit in this many seconds of measuring (s)"),
    profile_steps=Parameter(3, 5, 10, check=config.positive_int, doc="training steps profiled after the timed "
                            "epochs of round 0 (their totals are scaled to the epochs)"),
    profile_repeats=Parameter(3, check=config.positive_int,
                              doc="blocks of profile_steps steps: the totals are their median, their range the noise"),
    # None: four threads per process on a GPU run (data loading, the optimizer), never more than the cores present
    # (Colab's free GPU runtime has two)
    threads_per_rank=Parameter(1, None, type="int", doc="OMP threads of each process (None: min(4, cores))"),
    timeout_s=Parameter(180, 1800, 3600, type="float", check=partial(config.number, low=MIN_TIMEOUT_S,
                                                                      low_open=False, high=MAX_TIMEOUT_S),
                        doc="per configuration (s); a launch past this times its configurations is killed, the "
                            "configuration it was on recorded as failed"),
    oversubscribe=Parameter(False, check=config.boolean, doc="True: allow more processes than CPU cores (each "
                            "still measured; timings then compete)"),
    tf32=studies.TF32,
    device=Parameter("cpu", "auto", check=_device, doc="auto | cpu | cuda"),
    check=_check,
)
configure = PARAMETERS.configure


CONFIGURATION = ("data_fraction", "batch_size_per_rank", "world_size")  # a grid point; with "round", a stored row


class Rounds:
    """The launches of a sweep's rounds: the first (round, configuration) asked for launches it and every one after
    it in the sweep's order up to the end of its block of ``per_launch`` rounds (rounds 0..per_launch-1, then the
    next ``per_launch``, ...), together (:func:`cnnlab.ddp.launch_plan`); the others are then read from that launch.
    ``points`` are the sweep's points, in order. A configuration that ran out of memory is not launched again in a
    later round (it does not fit: the same reason is raised)."""

    def __init__(self, points: list[dict], per_launch: int = 1):
        self.order = [(p["round"], tuple(p[k] for k in CONFIGURATION)) for p in points]
        self.per_launch = per_launch
        self.rows: dict[tuple, object] = {}
        self.oom: dict[tuple, BaseException] = {}

    def row(self, r: int, configuration: tuple, launch) -> dict:
        """The row of ``configuration`` in round ``r``; ``launch(configs, name=...)`` launches several (the keyword
        arguments of :func:`cnnlab.ddp.launch_plan` but the shared settings); raises its failure."""
        if configuration in self.oom:
            raise self.oom[configuration]
        if (r, configuration) not in self.rows:
            start = self.order.index((r, configuration))
            block = r // self.per_launch
            todo = [(q, c) for q, c in self.order[start:] if q // self.per_launch == block and c not in self.oom]
            at = [c for q, c in self.order if q == r].index(configuration)  # where in its round the launch starts
            plan = [{**dict(zip(CONFIGURATION, c)), "profile": q == 0, "name": f"r{q}_w{c[2]}_b{c[1]}_f{c[0]:g}"}
                    for q, c in todo]
            results = launch(plan, name=f"round{r}" + (f"_from{at}" if at else ""))
            self.rows.update({key: got for key, got in zip(todo, results) if got is not None})
        got = self.rows.pop((r, configuration))  # asked again (a retry): launched again
        if isinstance(got, ddp.LaunchOutOfMemory):
            self.oom[configuration] = got
        if isinstance(got, BaseException):
            raise got
        return got


def ddp_point(round: int, data_fraction: float, batch_size_per_rank: int, world_size: int, *, model: str,
              stem: str | None, dataset: str, synthetic: bool, warmup_steps: int, epochs: int, profile_steps: int,
              profile_repeats: int, tf32: bool, device: str, threads_per_rank: int, timeout_s: float,
              out_dir: Path, rounds: Rounds) -> dict:
    """One point of experiment "ddp", a configuration in a round: its row from the round's launch
    (:class:`Rounds`, :func:`cnnlab.ddp.launch_plan`; its folder under ``out_dir``) without the status it leaves to
    the sweep; a configuration that failed raises its reason (:class:`cnnlab.ddp.LaunchFailed`;
    :class:`cnnlab.ddp.LaunchOutOfMemory` is recorded as "oom")."""
    launch = partial(ddp.launch_plan, model=model, dataset=dataset, epochs=epochs, synthetic=synthetic,
                     device=device, out_dir=out_dir, timeout_s=timeout_s, threads_per_rank=threads_per_rank,
                     stem=stem, warmup_steps=warmup_steps, profile_steps=profile_steps,
                     profile_repeats=profile_repeats, tf32=tf32)
    row = rounds.row(round, (data_fraction, batch_size_per_rank, world_size), launch)
    return {k: v for k, v in row.items() if k not in ("status", "error")}


DDP = Experiment("ddp", ddp_point, desc="ddp rounds")


def round_points(cfg, rounds: range) -> list[dict]:
    """The sweep's points: every configuration once per round, in grid order in even rounds and reversed in odd
    ones (neither end of the grid always runs first after a change of load)."""
    grid = list(itertools.product(cfg.data_fractions, cfg.batch_sizes, cfg.world_sizes))
    return [dict(round=r, **dict(zip(CONFIGURATION, c))) for r in rounds for c in (grid if r % 2 == 0 else grid[::-1])]


def plan(cfg) -> list[Work]:
    """What :func:`measure` does, for its estimate, at its first look (``min_rounds`` rounds): a launch per
    ``rounds_per_launch`` rounds, whose fixed cost (torchrun, the ranks' start, the process group, a profile) is
    probed by one real launch of the most processes on two batches of synthetic data, plus every configuration's
    training steps (warm-up and the timed epochs' steps per rank; round 0 also the profiled blocks), each as long as
    one step at its batch size here (the ranks share the data out, in parallel)."""
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
    n = cfg.min_rounds
    return [Work("launches", -(-n // cfg.rounds_per_launch), launch)] + [
        Work("training steps", n * (cfg.warmup_steps + cfg.epochs * -(-round(f * size) // (w * b))) + fixed, step[b])
        for f, b, w in itertools.product(cfg.data_fractions, cfg.batch_sizes, cfg.world_sizes)]


@studies.measurement(plan)
def measure(cfg, store_dir: str | Path | None, progress: bool = True) -> pd.DataFrame:
    """One row per grid point (data fraction x batch size per process x process count), in grid order, from the
    rounds of experiment "ddp" (one stored row per round and configuration: :func:`round_points`, a launch per
    ``rounds_per_launch`` rounds), combined by :func:`combine`: :data:`cnnlab.ddp.ROW_FIELDS` (times in ms, wall
    time, warmup_time_s and launch_time_s in s, memory in MiB, throughput in samples/s; the profiler's totals per
    rank from round 0, scaled from ``profile_steps`` steps to the epochs), run_dir (the launch's folder, in the
    store's side folder ``<store>.runs/``), round_times_s (the time per epoch in each round), rounds, confidence,
    and :func:`add_epoch_time`'s and :func:`add_scaling`'s columns. Rounds: ``min_rounds``, then more while a
    runtime claim is undecided (:func:`cnnlab.profiling.until_decided`), up to ``max_rounds`` and
    ``round_budget_s``. Processes beyond the GPUs present share them (``placement`` says so); the stores are keyed
    by the GPUs present, so another machine's rows are never read as this one's. Status "error" (the reason in
    ``error``; a point whose rounds all failed; run again by the next call) or "oom". The configuration columns
    (model, backend, placement, gpus_used, global_batch_size, ...) are on every row, failed ones too (from ``cfg``
    and the grid point)."""
    gpus = torch.cuda.device_count() if cfg.device == "cuda" else 0
    where = {w: ddp.placement(cfg.device, w, gpus) for w in cfg.world_sizes}  # before any launch
    settings = dict(gpus_present=gpus if cfg.device == "cuda" else None)  # the placements depend on it
    looks = []
    with tempfile.TemporaryDirectory() as tmp:  # the launches' folders: one per store (per settings)
        runs = Path(tmp) if store_dir is None else \
            store_file(DDP.store(store_dir), cfg.settings(**settings)).with_suffix(".csv.runs")  # the store's side

        def run(n: int, level: float) -> pd.DataFrame:
            points = round_points(cfg, range(n))
            timed = DDP.run(cfg, store_dir, progress=progress, settings=settings, points=points,
                            bind=dict(out_dir=runs, rounds=Rounds(points, cfg.rounds_per_launch)),
                            retry_errors=not looks)
            looks.append(n)  # failed points are launched again once per call of measure, not at every look
            return _columns(combine(timed, n), cfg, where).assign(confidence=level)

        df = until_decided(run, lambda d: claims.decided(check_claims(d, cfg.device)), min_rounds=cfg.min_rounds,
                           max_rounds=cfg.max_rounds, budget_s=cfg.round_budget_s)
    return df.assign(looks=len(looks))


def _columns(df: pd.DataFrame, cfg, where: dict) -> pd.DataFrame:
    """``df`` (one row per point) with :data:`cnnlab.ddp.ROW_FIELDS` first and the configuration on every row."""
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


def combine(timed: pd.DataFrame, rounds: int) -> pd.DataFrame:
    """One row per configuration (grid order: round 0's) of the per-round rows ``timed``: its first measured round
    that was profiled (else its first measured round), with round_times_s ("0.31, 0.29, nan, ...": the time per
    epoch, wall_time_s / epochs, of every round 0..``rounds``-1 in order, nan where it failed), rounds (how many
    measured), warmup_time_s the rounds' median; a configuration no round of which was measured keeps its first
    failed row; one that failed in some rounds says so in ``note``."""
    out = []
    for _, group in timed[timed["round"] < rounds].groupby(list(CONFIGURATION), sort=False):
        ok = group[group["status"] == "ok"].sort_values("round")
        profiled = ok[ok["conv_calls"].notna()] if "conv_calls" in ok else ok
        row = (profiled if len(profiled) else ok if len(ok) else group).iloc[0].to_dict()
        row.pop("round")
        per_epoch = dict(zip(ok["round"], ok["wall_time_s"] / ok["epochs"])) if len(ok) else {}
        row["round_times_s"] = ", ".join(f"{per_epoch[r]:.6g}" if r in per_epoch else "nan" for r in range(rounds))
        row["rounds"] = len(ok)
        if len(ok):
            row["warmup_time_s"] = float(ok["warmup_time_s"].median())
        failed = group[group["status"] != "ok"]
        if len(ok) and len(failed):
            row["note"] = joined(row.get("note") if isinstance(row.get("note"), str) else "",
                                 f"{len(failed)} of {len(group)} rounds failed: {failed['error'].iloc[0]}")
        out.append(row)
    return pd.DataFrame(out)


def add_epoch_time(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with epoch_time_s: the median over the rounds of the measured time of one timed epoch (s) of the
    slowest process (``round_times_s``), epoch_time_s_min / _max: the rounds' least and most (the figures' bars; the
    claims judge ratios within rounds), and throughput_samples_per_s (_min, _max): an epoch's samples over them. NaN
    where the point has no measured round."""
    times = [_round_times(r) for _, r in df.iterrows()]
    stat = [(float(np.median(t)), min(t), max(t)) if t else (math.nan,) * 3 for t in times]
    median, low, high = (pd.Series([x[i] for x in stat], index=df.index) for i in range(3))
    per_epoch = df["samples_total"] / df["epochs"]
    return df.assign(epoch_time_s=median, epoch_time_s_min=low, epoch_time_s_max=high,
                     throughput_samples_per_s=per_epoch / median, throughput_samples_per_s_min=per_epoch / high,
                     throughput_samples_per_s_max=per_epoch / low)


def _round_times(row) -> list[float]:
    """A point's measured times per epoch, one per measured round (s)."""
    text = row.get("round_times_s")
    return [t for t in (float(x) for x in text.split(",")) if not math.isnan(t)] if isinstance(text, str) else []


def paired_time(row) -> Paired:
    """A point's time per epoch round by round (``round_times_s``), at the row's ``confidence``."""
    return Paired.of_rounds(row, column="round_times_s")


def add_scaling(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with speedup_vs_1 (x: throughput / the 1-process point's: the median over the rounds of the 1-process
    time per epoch / this point's, the same round, x samples per epoch here / there, which differ by the sampler's
    padding at most) and scaling_efficiency (speed-up / processes: 1 = ideal) with scaling_efficiency_min / _max,
    the sign test's interval of that median at the row's confidence (:class:`cnnlab.profiling.Paired`; unbounded
    where too few rounds), and scaling_missing_reason, comparing points with the same model, dataset, device, epochs,
    data fraction and batch size per rank (so each process keeps its batch: the paper's setting)."""
    columns = ["speedup_vs_1", "scaling_efficiency", "scaling_efficiency_min", "scaling_efficiency_max"]
    df = df.assign(**dict.fromkeys(columns, math.nan), scaling_missing_reason=None)
    keys = ["model", "dataset", "device", "epochs", "data_fraction", "batch_size_per_rank"]
    for _, group in df.groupby(keys, dropna=False):
        base = group[(group["world_size"] == 1) & (group["status"] == "ok") & (group["rounds"] > 0)]
        for idx, status in group["status"].items():
            if status != "ok" or base.empty or not df.at[idx, "rounds"]:
                df.at[idx, "scaling_missing_reason"] = "no successful 1-process point to compare with" \
                    if status == "ok" and base.empty else "no measured round" if status == "ok" else f"point {status}"
                continue
            b, row = base.iloc[0], df.loc[idx]
            if idx == base.index[0]:  # a point against itself: exactly 1
                df.loc[idx, columns] = [1.0, 1.0, 1.0, 1.0]
                continue
            speedup = paired_time(b) / paired_time(row)
            work = row["samples_total"] / b["samples_total"]  # the same data, shared out (padding aside)
            bounded = speedup.high < 1e300
            df.loc[idx, columns] = [speedup.value * work, *(derived.efficiency(v * work, row["world_size"]) for v in (
                speedup.value, speedup.low if bounded else math.nan, speedup.high if bounded else math.nan))]
    return df


def scaling_caveats(df: pd.DataFrame) -> list[str]:
    """In words, each scaling efficiency of more than one process that says nothing about scaling
    (:func:`cnnlab.plotting.ddp_scaling.below_noise`; :data:`WHY` says why); empty when every one is resolved."""
    return [f"{_point(row)} ({processes(row)}): efficiency {eff.text('.2f')} "
            f"{WHY[kind].format(floor=1 / row['world_size'])}" for row, eff, kind in below_noise(df)]


WHY = {"once": "has too few rounds for an interval: its noise is unknown",
       "above": "is above ideal (1) beyond its noise: the 1-process point was slowed (other work, a warm-up), not a "
                "gain of data parallelism",
       "spans": "spans no speed-up ({floor:.2f}) to ideal (1): below its noise"}


# Sec. 4.5's "relatively unaffected", read as: every point within +-25% of one value (largest / smallest below this).
CPU_MEMORY_SPREAD = 1.25 / 0.75
TIME = "epoch_time_s"  # the runtime claims' quantity: measured per round (round_times_s), not the profiled steps scaled
AXES = {"batch_size_per_rank": "batch size", "world_size": "process count"}  # along which a claim judges a fall
OTHER = {"batch_size_per_rank": "world_size", "world_size": "batch_size_per_rank"}  # the axis a trend holds fixed
MEMORY = ('sec. 4.5, Fig. 10-15: "the CPU memory transfer remains relatively unaffected by batch size and GPU count, '
          'the GPU memory transfer shows a substantial decrease with increased parallelism and larger batch sizes"')
TIME_NOISE = ("noise: paired rounds: a round trains every configuration once, back to back in one launch, the order "
              "reversed every other round; a ratio of times is taken within each round and judged by the sign test's "
              "confidence interval of its median over the rounds (cnnlab.profiling.compare; alpha split over the "
              "looks at the rounds and over the parts); decided only where the interval clears the bound")
COUNT_NOISE = "noise: operator counts and peaks of live tensor bytes are exact for the batches profiled"
CALLS_ARITHMETIC = ("settled by arithmetic, not judged: convolution calls per epoch per rank = calls per step (a "
                    "forward and a backward call per convolution layer, the same at every batch size and process "
                    "count) x steps per epoch per rank (ceil(fraction x images / (processes x batch size))), so they "
                    "fall exactly as the steps do, by construction; the values below show it")
PEAK_DESIGN = ("settled by design, not judged (on a GPU too): every rank holds the whole model, its gradients and "
               "optimizer state and one batch's activations, so a rank's peak at a fixed batch per rank "
               "cannot fall with more processes, and at a larger batch per rank it cannot fall either (more "
               "activations); the paper's falling \"memory transfer\" reads as the bytes allocated over an epoch "
               "(gpu_mem_allocated_mib: per step x steps, fewer steps), shown in the note")
HOST_MEMORY = ("the paper's \"CPU memory\" is the host side of GPU training (data loading, the transfers); in a CPU "
               "run the CPU memory is the training tensors themselves (model, batch, activations), which grow with the "
               "batch: another quantity, not judged off a GPU")


def _ran(ok: pd.DataFrame) -> str:
    """"; processes: w=1: 1 process on 1 GPU, w=2: ..." for a claim comparing process counts, '' if not recorded."""
    placed = "placement" in ok and ok["placement"].notna().any()
    return "; processes: " + ", ".join(f"w={w:g}: {p}" for w, p in placements(ok).items()) if placed else ""


def _groups(ok: pd.DataFrame, metric: str, along: str, least=0.0) -> dict:
    """{(data fraction >= ``least``, value of the other axis): its rows along ``along``, two or more measured}."""
    rows = ok[ok["data_fraction"] >= least].dropna(subset=[metric]).groupby(["data_fraction", OTHER[along]])
    return {k: g.sort_values(along) for k, g in rows if g[along].nunique() > 1}


def _value(row, metric: str, per_epoch: bool):
    """A point's ``metric``: its paired time per epoch (:func:`paired_time`), or an exact count or peak (per epoch
    where ``per_epoch``)."""
    if metric == TIME:
        return paired_time(row)
    return Spread.exact(row[metric] / (row["epochs"] if per_epoch else 1))


def _falls(claim: str, paper: str, quantity: str, metric: str, along: str, unit: str, note="", least=0.0,
           per_epoch=False, also="", **settled) -> Declared:
    """The claim that ``metric`` (per epoch where ``per_epoch``) falls along ``along`` in every :func:`_groups`;
    ``settled``: ``not_judged`` or ``gpu_only`` (:class:`cnnlab.claims.Declared`)."""
    def measure(ok: pd.DataFrame):
        gs = {f"f={f:g} {OTHER[along][0]}={v:g}": g for (f, v), g in _groups(ok, metric, along, least).items()}
        xs = {k: [_value(r, metric, per_epoch) for _, r in g.iterrows()] for k, g in gs.items()}
        steps = {k: g["steps_per_rank"] / g["epochs"] for k, g in gs.items() if "steps_per_rank" in g}
        fell = sum(g[also].iloc[-1] < g[also].iloc[0] for g in gs.values()) if also else 0
        ours = "; ".join(f"{k}: " + " -> ".join(x.text(".4g", unit) for x in v) for k, v in xs.items())
        return Measured(xs, ours + (_ran(ok) if along == "world_size" else ""), joined(
            note(ok) if callable(note) else note, also and f"{also} (per step x steps, not a peak) fell in {fell} of "
            f"{len(gs)}", *(f"{k}: steps per epoch per rank " + " -> ".join(f"{x:g}" for x in s)
                            for k, s in steps.items() if s.notna().all())),
            {k: [f"{along.split('_')[0]}={x:g}" for x in g[along]] for k, g in gs.items()}) \
            if gs else joined(claims.missing(ok, metric.removesuffix("_mib"), f"fewer than two {AXES[along]}s "
                                             "measured"), settled.get("not_judged"))
    return Declared(claim, paper, f"{quantity} along {AXES[along]}", falls(".4g", unit), measure,
                    noise=TIME_NOISE if metric == TIME else COUNT_NOISE,
                    each=f"{AXES[OTHER[along]]} and data fraction{f' >= {least:g}' if least else ''}", **settled)


def _calls_per_step(ok: pd.DataFrame) -> str:
    """The arithmetic's one measured factor: convolution calls per step at every point (the same, or not)."""
    per = (ok["conv_calls"] / ok["steps_per_rank"]).dropna()
    return "" if per.empty else f"convolution calls per step here: {', '.join(f'{x:g}' for x in sorted(set(per)))}" \
        + (" at every point" if per.nunique() == 1 else " (not one number: the arithmetic does not apply)")


def _tenth(ok: pd.DataFrame):
    """Each runtime gain (first / last time of a :func:`_groups` group, within each round) at the smallest fraction
    / at the largest, within each round."""
    fr = sorted(ok["data_fraction"].unique())
    if not fr or fr[0] > 0.1 + 1e-9 or fr[-1] < 0.5:
        return "needs the data fractions 1/10 and one >= 1/2 in the grid"
    gain = {(a, f, v): paired_time(g.iloc[0]) / paired_time(g.iloc[-1])
            for a in OTHER for (f, v), g in _groups(ok, TIME, a).items()}
    ends = {f"{a.split('_')[0]} gain at {OTHER[a].split('_')[0]}={v:g}": (x, gain[a, fr[-1], v])
            for (a, f, v), x in gain.items() if f == fr[0] and (a, fr[-1], v) in gain}
    return Measured({k: s / b for k, (s, b) in ends.items()}, "; ".join(
        f"{k}: {s.text('.3g', 'x')} at f={fr[0]:g} / {b.text('.3g', 'x')} at f={fr[-1]:g} = {(s / b).text('.3f')}"
        for k, (s, b) in ends.items()) + _ran(ok)) if ends else "fewer than two batch sizes or process counts measured"


def _crossover(ok: pd.DataFrame):
    """At each data fraction >= 1/2, within each round: batch gain / process gain at the smallest batch, the
    reverse at the largest."""
    parts, rows = {}, ok[ok["data_fraction"] >= 0.5].dropna(subset=[TIME])
    for f, part in (fp for fp in rows.groupby("data_fraction") if min(fp[1][c].nunique() for c in OTHER) > 1):
        t = {(r["batch_size_per_rank"], r["world_size"]): paired_time(r) for _, r in part.iterrows()}
        bs, ws = (sorted(part[c].unique()) for c in OTHER)
        (b0, b1), (bp, bl), w1, wn = bs[:2], bs[-2:], ws[0], ws[-1]
        if {(b0, w1), (b1, w1), (b0, wn), (bl, w1), (bl, wn), (bp, w1)} <= set(t):
            parts[f"f={f:g} b={b0:g}: batch gain / process gain"] = t[b0, wn] / t[b1, w1]
            parts[f"f={f:g} b={bl:g}: process gain / batch gain"] = (t[bl, w1] / t[bl, wn]) / (t[bp, w1] / t[bl, w1])
    return Measured(parts, "; ".join(f"{k} {v.text('.3f')}" for k, v in parts.items()) + _ran(ok)) \
        if parts else "needs two batch sizes and two process counts at a data fraction >= 1/2"


def _cpu_memory(ok: pd.DataFrame):
    """Per data fraction, the largest / smallest peak CPU memory per rank over batch sizes and process counts."""
    m = ok.groupby("data_fraction")["max_cpu_mem_mib"].agg(["min", "max", "count"]).query("count > 1")
    return Measured({f"f={f:g}": Spread.exact(r["max"] / r["min"]) for f, r in m.iterrows()}, "; ".join(
        f"f={f:g}: {r['min']:.4g} to {r['max']:.4g} MiB ({r['max'] / r['min']:.3f}x)" for f, r in m.iterrows())
        + _ran(ok)) if len(m) else "fewer than two points per data fraction"


CLAIMS = [
    *(_falls(f"runtime per epoch falls with {AXES[a]} on the larger data fractions (1, 1/2)", 'sec. 4.3.2, Fig. 1-6: '
             '"for the half and full datasets, a more substantial decrease in runtime was observed with increasing '
             'batch sizes and GPU counts"', f"{TIME} (wall_time_s / epochs: an epoch of the slowest process, per "
             "round; a step: its ratio within each round)", TIME, a, " s", least=0.5) for a in AXES),
    Declared("runtime gains from batch size and process count are less pronounced on 1/10 of the data", 'sec. 4.3.1: '
             '"For the one-tenth dataset size, [...] the reduction in runtime with increased batch sizes and GPU '
             'counts was less pronounced"', f"{TIME}: a gain (first / last time along an axis) at 1/10 of the data "
             "/ the same at >= 1/2, within each round", below(1, ".3f"), _tenth, each="gain", noise=TIME_NOISE),
    Declared("batch size cuts runtime more at small batches, process count more at large batches (the crossover)",
             'sec. 4.3.2: "in smaller batch sizes, an increase in batch size had a more significant impact on reducing '
             'runtime. However, in larger batch sizes, the increase in GPU count became more influential"', f"{TIME} "
             "T(b, w), within each round: T(b0, most) / T(b1, 1) at the smallest batch b0, (T(bL, 1) / T(bL, most)) "
             "/ (T(bL-1, 1) / T(bL, 1)) at the largest bL", above(1, ".3f"), _crossover,
             each="ratio at data fractions >= 1/2", noise=TIME_NOISE),
    *(_falls(f"the model's kernel calls (convolution operators) per epoch fall with {AXES[a]}", 'sec. 4.4, Fig. 7-9: '
             '"an increase in batch size and the number of GPUs used generally led to a decrease in the total number '
             'of kernel calls"; sec. 4.2.3: "kernel calls, such as for convolution operations"', "conv_calls / epochs "
             "(convolution calls, forward and backward, per epoch per rank)", "conv_calls", a, "", per_epoch=True,
             note=_calls_per_step, not_judged=CALLS_ARITHMETIC) for a in AXES),
    Declared("peak CPU memory is relatively unaffected by batch size and process count", MEMORY, "max_cpu_mem_mib "
             "(peak of live CPU tensor memory in a profiled step, the largest process): largest / smallest",
             below(CPU_MEMORY_SPREAD, ".3g", "x"), _cpu_memory, each="data fraction", noise=COUNT_NOISE,
             bound="\"relatively unaffected\": our bound, the paper gives none", gpu_only=HOST_MEMORY),
    *(_falls(f"peak GPU memory falls with {what}", MEMORY, "max_gpu_mem_mib (peak of live GPU tensor memory "
             "in a profiled step, the largest process)", "max_gpu_mem_mib", a, " MiB", also="gpu_mem_allocated_mib",
             not_judged=PEAK_DESIGN)
      for a, what in (("world_size", "more GPUs"), ("batch_size_per_rank", "batch size"))),
]


def check_claims(df: pd.DataFrame, device) -> list[Claim]:
    """:data:`CLAIMS` on the ``ok`` rows (:func:`measure`'s, one per point with its ``round_times_s``); ``ours``
    names the points not run."""
    # a table stored before paired rounds lacks their columns: its claims then say so (not measured), none fails
    df = df.assign(**{c: None for c in (TIME, "round_times_s") if c not in df})
    rounds = df["rounds"] if "rounds" in df else (df["status"] == "ok").astype(int)
    ok, lost = df[(df["status"] == "ok") & (rounds > 0)], df[(df["status"] != "ok") | (rounds == 0)]
    gap = f"; {len(lost)} of {len(df)} grid points missing, not judged: " + ", ".join(
        f"{_point(r)} ({r['status']})" for _, r in lost.iterrows()) if len(lost) else ""
    kept = "; ".join(f"{_point(r)}: {r['note']}" for _, r in ok.iterrows() if "note" in ok and pd.notna(r["note"]))
    checks = claims.check(CLAIMS, ok, device)
    for c in checks:
        c.ours, c.note = c.ours + gap, joined(c.note, kept)
    return checks


def _point(row) -> str:
    return f"f={row['data_fraction']:g} b={row['batch_size_per_rank']:g} w={row['world_size']:g}"
