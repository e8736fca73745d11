"""Study 02: FP32 against reduced precision for inference: time, memory, accuracy (paper 001, Sec. IV-B).

Paper 001 ran a ResNet-110 trained in FP32 on CIFAR-10 under ``torch.cuda.amp.autocast()`` (FP16): time and memory
per batch size (Fig. 3: slightly *slower* at small batches, less memory at large ones), test accuracy and loss (Fig.
4: no significant change). Precisions here: ``autocast`` (``torch.autocast``: float16 on CUDA, as the paper;
bfloat16 on a CPU, PyTorch's CPU default; rows say which: ``autocast-fp16`` / ``autocast-bf16``), ``fp16``
(``model.half()``: pure FP16, no FP32 islands) and ``bf16`` (the same with bfloat16). Timing inputs are random tensors
of the data set's shape (``data_source = synthetic``: a dense CNN does the same work whatever the pixel values),
in paired rounds (every point once per round, the order reversed every other round; more rounds while a time claim
is undecided: ``cnnlab.profiling.compare``); accuracy and loss come from the test split, and the images only one
precision gets right are counted, so that an accuracy difference is paired on the same images."""

from __future__ import annotations

import copy
import math
from functools import partial
from pathlib import Path

import pandas as pd
import torch

from cnnlab import claims, config, data, models, studies, train
from cnnlab.claims import Declared, Spread, below, falls, within
from cnnlab.profiling import accuracy, benchmark, combine_rounds, free_memory, memory, wall_time
from cnnlab.profiling.compare import Paired, looks, until_decided
from cnnlab.profiling.estimate import Work, interpolate, profiler_session
from cnnlab.plotting.fp16 import figures  # noqa: F401  (the contract's figures(df))
from cnnlab.studies import Experiment, Parameter

# User-facing names -> (dtype of model and inputs, autocast dtype). "autocast" resolves per device (configure):
# autocast-fp16 on CUDA, autocast-bf16 on a CPU.
PRECISIONS = {"fp32": (None, None), "autocast": None, "autocast-fp16": (None, "float16"),
              "autocast-bf16": (None, "bfloat16"), "fp16": ("float16", None), "bf16": ("bfloat16", None)}


def _recipe(value, parameter: str):
    named = isinstance(value, str) and value in train.RECIPES  # (text only: a list cannot be looked up in a dict)
    if not (named or isinstance(value, train.Recipe)):
        raise ValueError(f"{parameter}={value!r} is not valid; valid: {', '.join(train.RECIPES)} "
                         "(or a cnnlab.train.Recipe)")
    return value


def _resolve(cfg) -> None:
    """``precisions`` becomes the labels run on ``cfg.device``, duplicates dropped: ``"autocast"`` is autocast-fp16
    on CUDA and autocast-bf16 on a CPU; ``fp32`` (the baseline every change is measured against) is required."""
    names = cfg.precisions
    cfg.precisions = list(dict.fromkeys(("autocast-fp16" if cfg.device.startswith("cuda") else "autocast-bf16")
                                        if n == "autocast" else n for n in names))
    if "fp32" not in cfg.precisions:
        raise ValueError(f"precisions={names!r} must include 'fp32' (the baseline); valid: {', '.join(PRECISIONS)}")
    looks(cfg.min_rounds, cfg.max_rounds)  # ValueError naming both where min_rounds > max_rounds


# quick: a CPU smoke run, ResNet-20 trained on the real, offline `digits` set (its whole test split, 960 images:
# accuracy_resolution says what that can decide); fp16 (model.half()) is timed on a CPU only at cpu_fp16_batch_sizes
# (it can be ~25x slower than fp32 on CPUs without native fp16 arithmetic), batch sizes up to 32 and one batch per
# point and round (a CPU's bf16 autocast took 7.9 s a batch at 128: rounds of it would not fit the budget); one
# intra-op thread (see cnnlab.config.threads). standard: one Colab GPU, the paper's model trained on CIFAR-10 with the
# standard (30-epoch) recipe. paper: batch sizes 1 ... 1024, the full-length recipe.
PARAMETERS = studies.Parameters(
    model=Parameter("resnet20", "resnet110", check=config.one_model, doc="registry name of one image model"),
    dataset=Parameter("digits", "cifar10", doc="image data set to train and evaluate on", check=partial(config.one_of,
                      valid=[n for n in data.names() if data.info(n).input_kind == "image"])),
    synthetic=Parameter(False, check=config.boolean, doc="True: labelled synthetic data of the dataset's shape"),
    recipe=Parameter("quick", "standard", "paper", check=_recipe, doc="training recipe: quick | standard | paper"),
    precisions=Parameter(["fp32", "autocast", "fp16"], axis=True,
                         doc=f"from {', '.join(PRECISIONS)} (fp32 is required)",
                         check=lambda value, parameter: [config.one_of(n, PRECISIONS, parameter=parameter)
                                                         for n in config.as_list(value)]),
    batch_sizes=Parameter([8, 32], [1, 4, 16, 64, 256, 1024], [2**k for k in range(11)], axis=True,
                          check=config.batch_sizes, doc="images per timed batch"),
    cpu_fp16_batch_sizes=Parameter([8], [1, 4, 16], [1, 2, 4, 8, 16], axis=True, check=config.batch_sizes,
                                   empty="fp16 arithmetic is never timed on a CPU",
                                   doc="on a CPU, fp16 arithmetic is timed only at these batch sizes"),
    warmup=Parameter(1, 3, 5, check=partial(config.positive_int, minimum=0),
                     doc="untimed batches before each point's timed ones, in every round"),
    repeats=Parameter(1, 5, 10, check=config.positive_int,
                      doc="timed batches per point and round (the round's time: their median)"),
    min_rounds=studies.MIN_ROUNDS, max_rounds=studies.MAX_ROUNDS,
    round_budget_s=Parameter(150.0, 1200.0, 3600.0, check=partial(config.number, low=0.0, high=7 * 86400.0),
                             doc="seconds the timing rounds may take: no round is added past it"),
    eval_batch_size=Parameter(128, 512, check=config.batch_size, doc="batch size of the accuracy evaluation"),
    threads=studies.THREADS, tf32=studies.TF32, device=studies.DEVICE, check=_resolve,
)
configure = PARAMETERS.configure

ACCURACY_TOLERANCE_PP = 0.5  # issue 4: "accuracy changes by at most 0.5 percentage points"
# "A slight increase in the inference time at smaller batch sizes" (Sec. IV-B) has no number: a rise (autocast slower
# than fp32; "we didn't see faster inference times", Sec. V) of at most claims.SLIGHT (our bound), judged as a band on
# the ratio of paired rounds (its interval narrows as rounds are added). A GPU claim: a CPU's bf16 autocast is another
# mechanism (36x fp32's time at batch 8 in the quick run of e651462, not "slight" for any reason the paper gives).
# "No significant ... increase in test loss" (Sec. IV-B) has no number either; we read it as at most 5% above fp32's
# loss (the accuracy bound's counterpart: a relative change, as the loss's scale depends on the data set).
LOSS_INCREASE_MAX = 0.05
# "A noticeable reduction in the average memory used" (Sec. IV-B): we read "noticeable" as at least 10% less than
# fp32's at the largest batch (reduced / fp32 < 0.9); FP16 activations alone would halve them.
NOTICEABLE_MEM_RATIO = 0.9
AVG_MEM_REPEATS = 3  # one-pass time-weighted averages per point: their range is the noise of avg_mem_mib


def _converted(net: torch.nn.Module, precision: str, dev: torch.device) -> torch.nn.Module:
    """A copy of ``net`` on ``dev`` in ``precision``'s dtype (fp32 where it has none), as ``benchmark`` converts it."""
    return copy.deepcopy(net).to(dev, dtype=config.to_dtype(PRECISIONS[precision][0]) or torch.float32).eval()


def _inference(model: torch.nn.Module, batch_size: int, precision: str, dev: torch.device):
    """An example batch for ``model`` in ``precision``'s dtype, and one inference pass over it (under its autocast)."""
    dtype, amp = (config.to_dtype(name) for name in PRECISIONS[precision])
    x = models.example_input(model, batch_size).to(dev, dtype=dtype or torch.float32)

    def step():
        with torch.inference_mode(), torch.autocast(dev.type, dtype=amp, enabled=amp is not None):
            return model(x)
    return x, step


def time_point(round: int, precision: str, batch_size: int, *, net: torch.nn.Module, device: str,  # noqa: A002
               warmup: int, repeats: int) -> dict:
    """One point of experiment "timing" in one ``round`` (a store column: :func:`timing_points`): ``benchmark``'s
    row for a copy of ``net`` in ``precision`` at ``batch_size`` (latency_ms_* per batch in ms,
    throughput_items_per_s, peak_mem_alloc_mib in MiB, the last NaN after round 0 on a CPU...)."""
    dtype, autocast = PRECISIONS[precision]
    dev = torch.device(device)
    model = copy.deepcopy(net)  # benchmark converts the model in place
    # a CPU's peak costs two more passes and is the same bytes in every round: counted in the first only
    m = benchmark(model, models.example_input(model, batch_size), device=dev, dtype=dtype, autocast=autocast,
                  warmup=warmup, repeats=repeats, measure_memory=round == 0 or dev.type != "cpu")
    row = {k: v for k, v in m.as_row().items() if k not in ("first_call_ms", "memory_format")}  # not used here
    del model
    free_memory()
    return {**row, "trained_model_dtype": config.dtype_name(next(net.parameters()).dtype), "data_source": "synthetic"}


def memory_point(precision: str, batch_size: int, *, net: torch.nn.Module, device: str) -> dict:
    """One point of experiment "average_memory" (its own sweep, after every timing: it runs under the profiler, and
    no point is timed after a CUDA profile, ``cnnlab.profiling.cupti``): paper Fig. 3's "average memory used" of one
    forward pass of a copy of ``net`` in ``precision`` at ``batch_size``. ``avg_mem_mib`` (MiB): the model's own
    resident bytes (parameters, buffers, input) + the time-weighted average tensor memory of the pass
    (``profiling.memory_over_time``; by device time on a GPU, ``avg_mem_weighting``), the median of
    ``AVG_MEM_REPEATS`` passes, their least and most in ``avg_mem_mib_low`` / ``_high``; NaN with
    ``avg_mem_missing_reason`` where the profiler saw no allocator event. ``avg_mem_other_mib``: what else was
    resident on the GPU, left out (cuBLAS/cuDNN workspaces: 66 MiB on an H100 when training ran in the same process,
    the same in every precision; NaN on a CPU, ``avg_mem_other_missing_reason``)."""
    dev = torch.device(device)
    model = _converted(net, precision, dev)
    try:
        x, step = _inference(model, batch_size, precision, dev)
        other, why = memory.other_resident(dev, model, [x])
        return {**memory.average_memory(step, dev, resident=memory.resident_bytes(model, [x], dev),
                                        repeats=AVG_MEM_REPEATS),
                "avg_mem_other_mib": other, "avg_mem_other_missing_reason": why}
    finally:
        model = x = step = None  # the copy and its batch dropped before the memory is freed
        free_memory()


def _scored(net: torch.nn.Module, precision: str, loader, dev: torch.device) -> dict:
    """``train.evaluate`` of a copy of ``net`` in ``precision`` over ``loader``, with each image's ``right``."""
    dtype, autocast = PRECISIONS[precision]
    model = copy.deepcopy(net)  # evaluate converts the model in place
    try:
        return train.evaluate(model, loader, device=dev, dtype=config.to_dtype(dtype),
                              autocast=config.to_dtype(autocast), per_item=True)
    finally:
        model = None
        free_memory()


def accuracy_point(precision: str, *, net: torch.nn.Module, test_set, dataset: str, eval_batch_size: int,
                   device: str) -> dict:
    """One point of experiment "accuracy": a copy of ``net`` in ``precision`` evaluated on ``test_set`` in batches of
    ``eval_batch_size``: accuracy_pct (%), loss (mean cross-entropy, nats), num_examples, eval_time_s (s, this
    precision's pass), and the discordant images of a paired difference against fp32 (scored again beside it, on the
    same images): correct_only_here (right here, wrong in fp32) and correct_only_fp32 (the reverse; both 0 for fp32
    itself)."""
    dev, loader = torch.device(device), data.make_loader(test_set, eval_batch_size)
    run = wall_time(lambda: _scored(net, precision, loader, dev), device=dev)
    right = run.result.pop("right")
    base = right if precision == "fp32" else _scored(net, "fp32", loader, dev)["right"]
    return {**run.result, "eval_time_s": run.seconds, "correct_only_here": int((right & ~base).sum()),
            "correct_only_fp32": int((base & ~right).sum()),
            "trained_model_dtype": config.dtype_name(next(net.parameters()).dtype), "dataset": dataset,
            "data_source": test_set.data_source, "device": device}


GRID = {"precision": "precisions", "batch_size": "batch_sizes"}
TIMING = Experiment("timing", time_point, axes=GRID, desc="precision: time and memory")
AVERAGE_MEMORY = Experiment("average_memory", memory_point, axes=GRID, desc="precision: average memory")
ACCURACY = Experiment("accuracy", accuracy_point, axes={"precision": "precisions"}, desc="precision: accuracy")


def _not_timed(cfg, precision: str, batch_size: int, round: int = 0) -> str | None:  # noqa: A002
    """Why a point is not timed (fp16 arithmetic on a CPU outside ``cpu_fp16_batch_sizes``), or None."""
    cpu = torch.device(cfg.device).type == "cpu"
    if cpu and "float16" in PRECISIONS[precision] and batch_size not in cfg.cpu_fp16_batch_sizes:
        return (f"{precision} on a CPU is timed only at cpu_fp16_batch_sizes={cfg.cpu_fp16_batch_sizes}: "
                "fp16 arithmetic can be ~25x slower than fp32 there")
    return None


def timing_points(cfg, rounds: range) -> list[dict]:
    """The timing grid once per round of ``rounds``, the batch size outermost (each batch's precisions timed one
    right after another, as they are paired): in grid order in even rounds and reversed in odd ones, so that no
    precision is always timed first after a change of load."""
    grid = [dict(precision=p, batch_size=b) for b in cfg.batch_sizes for p in cfg.precisions]
    return [dict(round=r, **point) for r in rounds for point in (grid if r % 2 == 0 else grid[::-1])]


def _timed_in_rounds(cfg, store_dir, net: torch.nn.Module, common: dict) -> pd.DataFrame:
    """Experiment "timing" in paired rounds (:func:`timing_points`), a row per point (:func:`combine_rounds`: every
    round's median in round_medians_ms, ``confidence`` the level its intervals are taken at): ``cfg.min_rounds``,
    then more at ``compare.looks``' counts while a time claim is undecided, up to ``cfg.max_rounds`` and within
    ``cfg.round_budget_s`` (:func:`cnnlab.profiling.compare.until_decided`). Only new rounds are measured at a look."""
    rows: list[pd.DataFrame] = []

    def run(n: int, level: float) -> pd.DataFrame:
        done = int(rows[-1]["round"].max()) + 1 if rows else 0
        rows.append(TIMING.run(cfg, store_dir, **common, points=timing_points(cfg, range(done, n)),
                               bind=dict(net=net), skip=partial(_not_timed, cfg)))
        return combine_rounds(pd.concat(rows, ignore_index=True), ["precision", "batch_size"]).assign(
            confidence=level)

    def decided(times: pd.DataFrame) -> bool:  # the time claims: nothing else changes with more rounds
        return claims.decided(check_claims(studies.combine(timing=times), cfg.device))
    return until_decided(run, decided, min_rounds=cfg.min_rounds, max_rounds=cfg.max_rounds,
                         budget_s=cfg.round_budget_s)


def plan(cfg) -> list[Work]:
    """:func:`measure`'s work, for its estimate: the training (none where cached), per precision the timed batches of
    ``min_rounds`` rounds (more are added only while a time claim is undecided, within ``round_budget_s``) and the
    profiled passes at each batch size (on a CPU also the memory pass), and two passes over the test set for each
    reduced precision (its own, and fp32's to pair the images with), each precision probed apart (fp16 can be 25x
    slower than fp32 on a CPU)."""
    config.set_threads(cfg.threads)
    dev = torch.device(cfg.device)
    cpu, meta = dev.type == "cpu", data.info(cfg.dataset)
    works = train.plan(cfg.model, cfg.dataset, recipe=cfg.recipe, synthetic=cfg.synthetic, device=dev)
    net = models.get(cfg.model, num_classes=meta.num_classes)
    test_size = meta.test_size // 10 if cfg.synthetic else meta.test_size
    eval_batch = min(cfg.eval_batch_size, test_size)
    batches, per_eval_batch = -(-test_size // eval_batch), {}
    for precision in cfg.precisions:
        model = _converted(net, precision, dev)
        sizes = [b for b in cfg.batch_sizes if not _not_timed(cfg, precision, b)]
        seconds = interpolate([*sizes, eval_batch], lambda b: _inference(model, b, precision, dev)[1], dev)
        works += [Work("timed batches", cfg.min_rounds * (cfg.warmup + cfg.repeats) + AVG_MEM_REPEATS + 3 * cpu,
                       seconds[b]) for b in sizes]
        works.append(Work("accuracy", batches, seconds[eval_batch]))
        works.append(Work("profiles", len(sizes) * (AVG_MEM_REPEATS + cpu), profiler_session(dev)))
        per_eval_batch[precision] = seconds[eval_batch]
    # each reduced precision's images are paired with fp32's, scored again beside it
    works.append(Work("accuracy", batches * (len(cfg.precisions) - 1), per_eval_batch["fp32"]))
    return works


@studies.measurement(plan)
def measure(cfg, store_dir: str | Path | None, progress: bool = True) -> pd.DataFrame:
    """Train (or load the cached checkpoint of) ``cfg.model`` in FP32, then infer it in each precision.

    Experiments: "training" (``cnnlab.train.train``'s history, a row per epoch); "timing" (Fig. 3, a row per
    precision and batch size: :func:`time_point` in paired rounds, combined (:func:`_timed_in_rounds`: latency_ms_*
    over the rounds, round_medians_ms every round's median, rounds, confidence), with :func:`memory_point`'s avg_mem_*
    beside; on a CPU, fp16 outside ``cpu_fp16_batch_sizes`` is a "skipped" row, why in ``error``); "accuracy" (Fig. 4,
    a row per precision: :func:`accuracy_point`, with accuracy_change_pp, percentage points, and loss_change against
    fp32). Every measured
    row has dtype, autocast and trained_model_dtype (the trained model's after the point: each point converts a copy,
    the trained model stays fp32); stores are keyed by every setting and the thread count in use.
    """
    common = dict(progress=progress, settings=dict(threads=config.set_threads(cfg.threads)))
    net, history = train.train(cfg.model, cfg.dataset, recipe=cfg.recipe, synthetic=cfg.synthetic,
                               device=torch.device(cfg.device), progress=progress)
    net = net.cpu()  # each point measures a copy on the device: the device's memory counters see only that copy
    # the trained model and test set are bound, not keys: the settings that make them (model, dataset, ...) are
    times = _timed_in_rounds(cfg, store_dir, net, common)
    # under the profiler, so after every timing: the timing row of each point gets its columns
    averages = AVERAGE_MEMORY.run(cfg, store_dir, **common, bind=dict(net=net), skip=partial(_not_timed, cfg))
    times = studies.beside(times, averages, ["precision", "batch_size"], "avg_mem_", "average-memory pass")
    test_set = data.load(cfg.dataset, "test", synthetic=cfg.synthetic)
    acc = ACCURACY.run(cfg, store_dir, **common, bind=dict(net=net, test_set=test_set))
    fp32 = acc[acc["status"] == "ok"].set_index("precision")
    for col, change in (("accuracy_pct", "accuracy_change_pp"), ("loss", "loss_change")):
        acc[change] = acc[col] - fp32[col].get("fp32", math.nan) if col in acc else math.nan
    for part in (times, acc):
        part["dtype"] = part["precision"].map(lambda p: PRECISIONS[p][0] or "float32")  # of weights and inputs
        part["autocast"] = part["precision"].map(lambda p: PRECISIONS[p][1] or "off")
    return studies.combine(training=history, timing=times, accuracy=acc)


def test_images(cfg) -> int:
    """The images of ``cfg.dataset``'s test split that the accuracy is measured on (a tenth where synthetic)."""
    size = data.info(cfg.dataset).test_size
    return size // 10 if cfg.synthetic else size


def _first(holds, n: int) -> int | None:
    """The least k in 1..n for which ``holds(k)`` (False below it, True from it on), by bisection; None if none."""
    if n < 1 or not holds(n):
        return None
    low, high = 0, n  # holds(high); not holds(low) (k = 0 is not asked)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if holds(mid) else (mid, high)
    return high


def accuracy_resolution(total: int) -> str:
    """What a paired accuracy difference on ``total`` test images can decide, in words: the smallest difference told
    from 0 (:func:`cnnlab.profiling.accuracy.smallest_decidable_pp`), the most images that may change for the claim's
    +-``ACCURACY_TOLERANCE_PP`` band to hold (split as evenly as they can be), and the fewest that must change one way
    for it to fail (both found by bisection: a wider split, or more images one way, only moves the interval out)."""
    n, tol = int(total), ACCURACY_TOLERANCE_PP

    def outside(m: int) -> bool:  # m changed images, split as evenly as they can be: the interval leaves the band
        x = accuracy.paired_exact(m // 2, m - m // 2, n)
        return not (-tol < x.low and x.high < tol)
    beyond = _first(outside, n)
    most = n if beyond is None else beyond - 1
    fail = _first(lambda k: accuracy.paired_exact(k, 0, n).low >= tol, n)
    smallest = accuracy.smallest_decidable_pp(n)
    # even with no image changed the interval is +- the discordance rate's upper end: too few images cannot hold
    holds = (f"the +-{tol:g} pp bound holds only where at most {most} image{'s' * (most != 1)} "
             f"change{'s' * (most == 1)} either way" if not outside(0) else
             f"the +-{tol:g} pp bound cannot hold on {n} images (with none changed the interval is "
             f"+-{accuracy.paired_exact(0, 0, n).high:.2f} pp; it needs {_first(lambda k: not outside_at(k), 10**6)} "
             f"or more)")
    return (f"on {n} images a paired difference is told from 0 only from {smallest:.2f} pp "
            f"({round(smallest * n / 100)} images, all one way); {holds}, and fails only where "
            + (f"{fail} or more ({100 * fail / n:.2f} pp) change one way" if fail else "no number of images can"))


def outside_at(total: int) -> bool:
    """Whether two precisions that agree on all of ``total`` images still leave the +-ACCURACY_TOLERANCE_PP band."""
    return accuracy.paired_exact(0, 0, total).high >= ACCURACY_TOLERANCE_PP


def _evaluated(df: pd.DataFrame, loss: bool):
    """Each reduced precision's test loss / fp32's (exact), or its accuracy - fp32's (pp), paired on the same images:
    the exact interval of the images only one of the two gets right (:func:`accuracy.paired_exact`)."""
    acc = df[(df["experiment"] == "accuracy") & (df["status"] == "ok")].set_index("precision")
    if "fp32" not in acc.index or len(acc) < 2:
        return "fp32 and a reduced precision were not both evaluated"
    b, n = acc.loc["fp32"], int(acc.loc["fp32", "num_examples"])
    where = f"{b['dataset']} test set ({b['data_source']}, {n} images)"
    others = acc.drop("fp32")
    if loss:
        parts = {p: Spread.exact(r["loss"] / b["loss"]) for p, r in others.iterrows()}
        return claims.Measured(parts, f"fp32 {b['loss']:.4f} nats; " + ", ".join(
            f"{p} {x.text('.4f', 'x')}" for p, x in parts.items()), where)
    counts = others.reindex(columns=["correct_only_here", "correct_only_fp32"])
    if counts.isna().any(axis=None):
        return "the images only one precision gets right were not counted: no paired difference to judge"
    parts = {p: accuracy.paired_exact(r["correct_only_here"], r["correct_only_fp32"], n) for p, r in counts.iterrows()}
    fp32 = accuracy.accuracy(accuracy.correct_count(float(b["accuracy_pct"]), n), n)
    ours = f"fp32 {accuracy.text(fp32, '%', False)}; " + ", ".join(
        f"{p} {accuracy.text(x)} ({counts.loc[p, 'correct_only_here']:.0f} images right only here, "
        f"{counts.loc[p, 'correct_only_fp32']:.0f} only in fp32)" for p, x in parts.items())
    return claims.Measured(parts, ours, f"{where}: {accuracy_resolution(n)}")


def _avg_mem(row) -> Spread | None:
    """``avg_mem_mib`` of a timing row within its repeated passes' range; None where it was not measured."""
    cols = ("avg_mem_mib", "avg_mem_mib_low", "avg_mem_mib_high")
    return Spread(*(float(row[c]) for c in cols)) if all(c in row and pd.notna(row[c]) for c in cols) else None


def _per_round(row) -> Paired | None:
    """A timing row's time per batch, round by round (:meth:`Paired.of_rounds`, at the row's ``confidence``); None
    where it has no per-round times."""
    text = row.get("round_medians_ms")
    return Paired.of_rounds(row) if isinstance(text, str) and text.strip() else None


def _vs_fp32(df: pd.DataFrame, value, ends: tuple, autocast: bool = False):
    """Each reduced precision's (``autocast``: autocast's) ``value(row)`` / fp32's at the sorted sizes' ``ends``: two
    :class:`Paired` times give their ratio round by round."""
    ok = df[(df["experiment"] == "timing") & (df["status"] == "ok")]
    at = [sizes[i] for i in ends] if len(sizes := sorted({int(b) for b in ok["batch_size"]})) >= len(ends) else []
    got = [{p: v for p, r in ok[ok["batch_size"] == b].set_index("precision").iterrows() if (v := value(r)) is not None}
           for b in at]
    ratios = {p: [g[p] / g["fp32"] for g in got] for p in (got[0] if got else {}) if p != "fp32" and all(
        p in g and "fp32" in g for g in got) and p.startswith("autocast" if autocast else "")}
    ours = "; ".join(f"{p} / fp32 " + ", ".join(f"at batch {b} {x.text('.2f', 'x')}" for b, x in zip(at, r))
                     for p, r in ratios.items())
    rounds = {x.rounds for r in ratios.values() for x in r if isinstance(x, Paired)}
    ours += f" ({', '.join(map(str, sorted(rounds)))} paired rounds)" if rounds else ""
    bf16 = "autocast-bf16 is bfloat16, not the paper's float16" if "autocast-bf16" in ratios else ""
    return claims.Measured({p: r if len(at) > 1 else r[0] for p, r in ratios.items()}, ours, bf16,
                           {p: at for p in ratios}) if ratios else "fp32 and a reduced precision not both timed there"


_PAPER_ACC = "Sec. IV-B: \"we didn't find any significant drop in test accuracy or increase in test loss\" (Fig. 4)"
_PAPER_TIME = "Sec. IV-B: \"a slight *increase* in the inference time at smaller batch sizes\" (Fig. 3 top)"
_PAPER_MEM = "Sec. IV-B: \"a noticeable reduction in the average memory used, especially at larger batch sizes\""
_AVG = f"average: model and input bytes + a pass's time-weighted tensor memory; range of {AVG_MEM_REPEATS} passes"
_slowdown = partial(_vs_fp32, value=_per_round, autocast=True)
ACCURACY_RULE = ("noise: the test set is a sample of images; both precisions score the same images, so the difference "
                 "is paired: the exact 95% interval from the images only one of them gets right (McNemar-type, "
                 "Clopper-Pearson: cnnlab.profiling.accuracy.paired_exact; where none changes, +- the discordance "
                 "rate's "
                 "upper end); decided "
                 "only when the whole interval is inside the band or beyond it, else inconclusive")
_BF16 = ("the paper's float16 autocast on a T4; a CPU's autocast runs bfloat16 instead, through other kernels: a "
         "stand-in, not the paper's mechanism")


CLAIMS = [
    Declared(f"test accuracy changes by less than {ACCURACY_TOLERANCE_PP} percentage points in reduced precision",
             _PAPER_ACC, "accuracy - fp32 accuracy", within(-ACCURACY_TOLERANCE_PP, ACCURACY_TOLERANCE_PP, unit=" pp"),
             partial(_evaluated, loss=False), each="reduced precision", bound="our bound, the paper gives none",
             noise=ACCURACY_RULE),
    Declared(f"test loss rises by less than {LOSS_INCREASE_MAX:.0%} in reduced precision", _PAPER_ACC,
             "test loss / fp32's", below(1 + LOSS_INCREASE_MAX, ".3g", "x"), partial(_evaluated, loss=True),
             each="reduced precision", bound="our bound; a fall passes",
             noise="noise: none, the same weights on the same test set give the same loss"),
    Declared("average memory at the largest batch is noticeably lower in reduced precision", _PAPER_MEM,
             "average memory / fp32's at the largest batch", below(NOTICEABLE_MEM_RATIO, ".2f", "x"),
             partial(_vs_fp32, value=_avg_mem, ends=(-1,)), each="reduced precision",
             bound=f"\"noticeable\": our bound; {_AVG}", gpu_only="CUDA allocator, fp16 activations"),
    Declared("autocast is slightly slower than fp32 at small batches", _PAPER_TIME, "autocast / fp32 time per batch, "
             "smallest batch", within(1.0, 1 + claims.SLIGHT, ".2f", "x"), partial(_slowdown, ends=(0,)),
             each="autocast precision", bound="a rise, and \"slight\": our bound", gpu_only=_BF16),
    Declared("the reduced precisions' memory saving grows with batch size", _PAPER_MEM, "average memory / fp32's, "
             "smallest batch -> largest", falls(".2f", "x"), partial(_vs_fp32, value=_avg_mem, ends=(0, -1)),
             each="reduced precision", bound=_AVG, gpu_only="CUDA allocator, fp16 activations"),
    Declared("autocast's slowdown is confined to small batches: its time ratio to fp32 falls with batch size",
             _PAPER_TIME, "autocast / fp32 time per batch, smallest batch -> largest", falls(".2f", "x"),
             partial(_slowdown, ends=(0, -1)), each="autocast precision",
             bound="\"at smaller batch sizes\": the increase shrinks as the batch grows, our reading; each step "
                   "judged by the ratio of its two ratios, round by round", gpu_only=_BF16),  # the same slowdown
]


check_claims = claims.checker(CLAIMS)  # Sec. IV-B
