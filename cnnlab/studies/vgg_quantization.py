"""Study 07 (paper 003, Xiong & Leroux, HPML project, "VGGNet" part): VGG-11 inference made smaller and faster.

The paper trained kuangliu's VGG on CIFAR-10 on a P100, varied the DataLoader's ``num_workers``, profiled inference,
quantized the model to int8 with PyTorch's eager-mode API (36.97 MB -> 9.30 MB, "slightly greater accuracy": it prints
no int8 accuracy, only the unquantized model's 65.11%) and traced it with TorchScript (a pass over the test set 2.54 s
-> 1.10 s on the GPU, both at 66.11% accuracy: a DataParallel model, eager and traced; "little to no change in CPU
inference time": its profiler's CPU total of one inference call of the GPU run, 1.922 s eager -> 1.955 s traced, not a
run on a CPU device). Those profiles spent 1.918 s (eager) and 1.951 s (traced) in ``aten::_convolution`` over 8 calls,
and its log profiled the eager call before the eager pass, the traced one after the traced pass: a cost of the profiled
call that both forms paid, so they do not show that the eager pass carried a first-call (cuDNN) cost the traced pass did
not; the slides leave the 2.54 -> 1.10 s gap unexplained. Experiment "compiled_inference" therefore times each method
alike: its first pass over the test set from a fresh copy (each form pays its own first-call costs), ``timing_rounds``
times for eager and TorchScript (the range the claims are judged by), the warm time per batch and, on a GPU, the
profiler's CPU total of one warm call (the paper's "CPU inference time"). Its 36.97 MB is VGG-11 with batch norm
(experiment "sizes": the other depths do not fit). PyTorch moved on: quantization goes through torchao's PT2E flow with
the x86 Inductor quantizer (``cnnlab.quantize``), and TorchScript, deprecated in torch 2.13 like torch.ao.quantization,
is timed beside ``torch.compile`` and ``torch.export``.
"""

from __future__ import annotations

import copy
import math
import warnings
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import torch
import torch.nn.functional as F

from cnnlab import claims, config, data, models, quantize, studies
from cnnlab.claims import ONE_ROUND, SLIGHT, Claim, Declared, Spread, above, joined, within
from cnnlab.config import output_tolerance, relative_error  # one rule for "the same network's output"
from cnnlab.plotting.vgg_quantization import figures  # noqa: F401  (the contract's figures(df))
from cnnlab.plotting.vgg_quantization import ok
from cnnlab.profiling import accuracy, benchmark, derived, loader_sweep, loaders, profile_ops, wall_time
from cnnlab.profiling.compare import CONFIDENCE, Paired, compare, until_decided
from cnnlab.profiling.estimate import Work, forward, unit_seconds
from cnnlab.profiling.ops import cpu_totals, top_operators
from cnnlab.profiling.timing import cold_start, synchronize
from cnnlab.studies import Experiment, Parameter
from cnnlab.train import SCHEDULES, Recipe, evaluate, fit, train, train_step
from cnnlab.train import plan as train_plan

MODEL = "vgg11"
METHODS = ("eager", "torchscript_trace", "torch_compile", "torch_export")
PRECISIONS = ("fp32", "int8")
# The paper's numbers as its logs print them. fp32_acc: "Evaluating trained model (not quantized)"; the int8 model's
# accuracy is not printed. gpu_parallel_acc: the DataParallel model on the GPU, eager and traced alike, beside
# eager_gpu_s / traced_gpu_s ("test batch inference time": one pass over the 10,000 test images in batches of 100).
# gpu_speedup_bound: the paper's words ">2x speed up in GPU time" (TorchScript, P100), the TorchScript claim's bound.
PAPER = dict(fp32_mb=36.965367, int8_mb=9.301691, fp32_acc=65.11, gpu_parallel_acc=66.11, gpu_speedup_bound=2.0,
             eager_gpu_s=2.5399973579997095, traced_gpu_s=1.1010754359999737, eager_first_conv_s=1.918,
             traced_first_conv_s=1.951, eager_profile_cpu_s=1.922, traced_profile_cpu_s=1.955)
TRACE_PAIR = ("eager", "torchscript_trace")  # the methods the TorchScript claims compare: timed in rounds
MB = 1e6  # the paper's "MB" (os.path.getsize / 1e6)
SIZE_RATIO = (3.5, 4.5)  # "about 4x smaller": int8 weights take one byte instead of four
ACCURACY_PP = 1.0  # "keeps accuracy" / "slightly" (greater): at most 1 percentage point, our bound
TRACE_PP = 0.1  # "both at 66.11%": traced and eager accuracies less than this many points apart
MAX_LR = 1.0  # SGD's learning rate: kuangliu's recipe starts at 0.1; inf or 1e9 would train to chance accuracy


def _pins(value, parameter: str) -> list[bool]:
    """True/False only (1 == True would pass a plain membership test); an empty list fails as a missing value."""
    return [config.boolean(p, parameter=parameter) for p in config.as_list(value) or [None]]


def _methods(value, parameter: str) -> list[str]:
    """``methods`` always starts with ``eager``, the baseline of the speed-ups (added where not given; an empty list
    is refused: it asks for nothing)."""
    methods = config.names_list(value, parameter, valid=METHODS)
    return ["eager", *(m for m in methods if m != "eager")]


PARAMETERS = studies.Parameters(
    # quick: a CPU smoke run, two epochs on the real, offline `digits` set's 837 training images (one epoch left
    # VGG-11 at 84% and 3 of 960 test images changed by int8; about 98% after the second); standard: one
    # Colab GPU, CIFAR-10 (the paper's data), 30 epochs; paper: kuangliu's recipe length (200 epochs, cosine)
    dataset=Parameter("digits", "cifar10", check=partial(config.one_of, valid=[
        n for n in data.names() if data.info(n).input_shape == (3, 32, 32)]), doc="digits (quick) | cifar10 (paper)"),
    synthetic=Parameter(False, check=config.boolean, doc="True: labelled synthetic images of the dataset's shape"),
    epochs=Parameter(2, 30, 200, check=config.positive_int, doc="training epochs"),
    batch_size=Parameter(32, 128, check=config.batch_size, doc="training batch (images)"),
    lr=Parameter(0.01, 0.05, 0.1, check=partial(config.number, low=0, high=MAX_LR), doc="SGD learning rate"),
    schedule=Parameter("cosine", check=partial(config.one_of, valid=SCHEDULES), doc="learning-rate schedule"),
    augment=Parameter(False, True, check=config.boolean, doc="random crops and flips while training"),
    num_workers=Parameter([0, 1, 2, 4, 8], check=config.num_workers, axis=True,
                          doc="DataLoader workers (paper: [0, 1, 2, 4, 8]); above os.cpu_count(): recorded as skipped"),
    # quick times pageable memory only (pinning only changes copies to a GPU; the claims use pageable rows)
    pin_memory=Parameter([False], [False, True], check=_pins, axis=True, doc="DataLoader pin_memory values"),
    # quick: 71 training and 72 test images per epoch (of digits' 837 and 960) in batches of 16 (five batches each: the timed epoch starts
    # from the first one, loaders.TIMED), each round of the grid about 5 s on one thread
    loader_fraction=Parameter(0.085, 0.2, 1.0, check=partial(config.number, low=0, high=1),
                              doc="share of the training data each DataLoader-sweep epoch reads"),
    loader_test_fraction=Parameter(0.075, 0.2, 1.0, check=partial(config.number, low=0, high=1),
                                   doc="share of the test data each DataLoader-sweep test epoch reads"),
    loader_batch_size=Parameter(16, 128, check=config.batch_size, axis=True, doc="DataLoader-sweep batch (images)"),
    calibration_batches=Parameter(4, 32, 100, check=config.positive_int,
                                  doc="training batches that set the int8 activation ranges"),
    # 40 divides the 960 digits test images as the paper's 100 divides CIFAR-10's 10,000: no partial last batch in a
    # pass over the test set (torch.compile would compile it again)
    latency_batch_size=Parameter(40, 100, check=config.batch_size,
                                 doc="images per test batch: timed batches and passes (paper: 100)"),
    warmup=Parameter(1, 3, 10, check=partial(config.positive_int, minimum=0), doc="untimed batches before timing"),
    repeats=Parameter(5, 20, 50, check=config.positive_int, doc="timed batches per latency"),
    # three rounds in every preset but paper's five: the GPU claim's range of first passes
    timing_rounds=Parameter(3, 3, 5, check=config.positive_int,
                            doc="rounds of eager's and TorchScript's first passes (each from a fresh copy)"),
    # paired rounds of the comparisons (cnnlab.profiling.compare): the DataLoader sweep's grid, int8 vs fp32 and
    # TorchScript vs eager per batch; rounds added while a claim is undecided, within round_budget_s
    min_rounds=studies.MIN_ROUNDS,
    max_rounds=studies.MAX_ROUNDS,
    # quick: 130 s reaches 18 rounds of the sweep; 90 s stopped at 12 in a quick run of 4253331, where 1 worker's train
    # epoch over 0 workers' (1.16x, 0.98-1.25x) was not decided
    round_budget_s=Parameter(130.0, 600.0, 1800.0, check=partial(config.number, low=0, high=86400),
                             doc="seconds the DataLoader sweep's rounds may take (s; each latency comparison: a "
                                 "quarter of it)"),
    methods=Parameter(list(METHODS), check=_methods, axis=True, doc=", ".join(METHODS)),
    profile_iterations=Parameter(2, 5, 10, check=config.positive_int, doc="profiled batches per precision"),
    top_ops=Parameter(10, 15, check=config.positive_int, doc="operators kept per profile"),
    # quick: one intra-op thread (CI runs two notebooks at once on two cores; more threads than free cores spin-wait)
    threads=studies.THREADS,
    tf32=studies.TF32,
    device=Parameter(None, check=config.device_name, type="str", doc="auto | cpu | cuda (int8 always runs on the CPU)"),
)
configure = PARAMETERS.configure
# First-call costs that cannot be probed short of doing them, as they were on this project's 2-core CPU (a GPU takes
# less): torch.compile's first call (tracing, Inductor's code generation; its cache makes a second one short),
# torch.export, and int8 quantization (PT2E export, calibration, lowering)
COMPILE_S, EXPORT_S, QUANTIZE_S = 45.0, 5.0, 20.0


def vgg_sizes() -> pd.DataFrame:
    """Parameters and fp32 ``state_dict`` size (MB = 1e6 bytes, measured with ``torch.save``) of VGG-11/13/16/19
    with batch norm and 10 classes, beside the paper's 36.97 MB: the row that matches is the model it used."""
    nets = {name: models.get(name) for name in ("vgg11", "vgg13", "vgg16", "vgg19")}
    df = pd.DataFrame({"model": list(nets), "params": [sum(p.numel() for p in n.parameters()) for n in nets.values()],
                       "fp32_state_dict_mb": [quantize.state_dict_bytes(n) / MB for n in nets.values()],
                       "paper_fp32_mb": PAPER["fp32_mb"]})
    return df.assign(difference_from_paper_mb=df["fp32_state_dict_mb"] - df["paper_fp32_mb"])


def _predictions(net, loader, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(float32 logits on the CPU, labels) of ``net`` over ``loader``, each batch to ``device`` and its logits back
    inside the loop, as the paper's test loop (kuangliu's ``test()``, ``.item()`` after every batch) does."""
    with torch.inference_mode():
        pairs = [(net(inputs.to(device)).float().cpu(), labels) for inputs, labels in loader]
    return torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])


class Trained:
    """What the inference experiments share: ``fp32`` (a CPU copy), ``net`` (a copy on ``device``), ``test_loader``
    (batches of ``latency_batch_size``), its first batch ``x_cpu`` / ``x`` (on ``device``), eager's logits on it
    (``reference``); :meth:`int8` quantizes ``fp32`` once, when an int8 point is first measured."""

    def __init__(self, model, train_set, test_set, *, latency_batch_size: int, device: str):
        self.train_set, self.test_loader = train_set, data.make_loader(test_set, latency_batch_size)
        self.fp32, self.net = copy.deepcopy(model).cpu().eval(), copy.deepcopy(model).to(device).eval()
        self.x_cpu = next(iter(self.test_loader))[0]
        self.x = self.x_cpu.to(device)
        self.reference = forward(self.net, self.x)
        self._int8 = None
        self.eager_right = None  # eager's per-image correctness in its first pass, once its point ran in this process

    def int8(self, calibration_batches: int, latency_batch_size: int) -> SimpleNamespace:
        """int8 PT2E static quantization of ``fp32`` (CPU) calibrated on ``calibration_batches`` training batches:
        ``quantized`` (q/dq graph, int8 weights: the artifact whose size we measure), ``lowered`` (its oneDNN form:
        what runs), ``prepare_s`` (quantize + lower, s), ``calibration_items``."""
        if self._int8 is None:
            loader = data.make_loader(self.train_set, latency_batch_size, shuffle=True, seed=1)
            example = (next(iter(loader))[0],)
            q = wall_time(lambda: quantize.quantize_int8(self.fp32, loader, example, max_batches=calibration_batches))
            lowered = wall_time(lambda: quantize.lower_for_cpu(q.result, example))
            self._int8 = SimpleNamespace(quantized=q.result, lowered=lowered.result,
                                         prepare_s=q.seconds + lowered.seconds, calibration_items=min(
                                             calibration_batches * latency_batch_size, len(self.train_set)))
        return self._int8


def int8_point(precision: str, *, trained: Trained, calibration_batches: int, latency_batch_size: int, warmup: int,
               repeats: int) -> dict:
    """One precision on the CPU (int8: :meth:`Trained.int8`): serialized size (MB), test accuracy (%), mean
    cross-entropy loss, top-1 agreement with fp32 (%), latency per batch (ms), throughput (images/s), peak memory (MiB),
    preparation time (s); ``correct`` test images and the discordant counts of a paired accuracy interval,
    ``correct_only_here`` (right here, wrong in fp32) and ``correct_only_fp32`` (the reverse)."""
    fp32, batch = trained.fp32, trained.x_cpu
    q = trained.int8(calibration_batches, latency_batch_size) if precision == "int8" else None
    runner, artifact = (quantize.GraphRunner(q.lowered, "int8 oneDNN"), q.quantized) if q else (fp32, fp32)
    logits, labels = _predictions(runner, trained.test_loader)
    reference = _predictions(fp32, trained.test_loader)[0] if q else logits
    m = benchmark(runner, batch, device="cpu", warmup=warmup, repeats=repeats)
    right, base = logits.argmax(1) == labels, reference.argmax(1) == labels  # per image, here and in fp32
    return {"device": "cpu", "runtime": "PT2E int8 graph, oneDNN int8 kernels (Inductor freezing passes)" if q
            else "eager PyTorch (oneDNN fp32)", "export_size_mb": quantize.export_bytes(artifact, (batch,)) / MB,
            "state_dict_size_mb": quantize.state_dict_bytes(artifact) / MB,
            "accuracy_pct": 100.0 * right.float().mean().item(), "correct": int(right.sum()),
            "correct_only_here": int((right & ~base).sum()), "correct_only_fp32": int((base & ~right).sum()),
            "loss": F.cross_entropy(logits, labels).item(), "test_items": len(labels),
            "top1_agreement_pct": 100.0 * (logits.argmax(1) == reference.argmax(1)).float().mean().item(),
            **{k: getattr(m, k) for k in ("latency_ms_median", "latency_ms_p10", "latency_ms_p90",
                                          "throughput_items_per_s", "peak_mem_alloc_mib", "batch_size", "cpu_threads")},
            "prepare_time_s": q.prepare_s if q else 0.0, "calibration_items": q.calibration_items if q else 0}


def profile_point(precision: str, *, trained: Trained, calibration_batches: int, latency_batch_size: int,
                  profile_iterations: int, top_ops: int) -> list[dict]:
    """The ``top_ops`` operators of highest self CPU time in ``profile_iterations`` calls of one precision (fp32 on
    the configured device, int8 on the CPU): self and total CPU and device time (ms), share of self CPU time (%), CPU
    memory (bytes allocated minus freed: may be < 0)."""
    net, x = ((trained.int8(calibration_batches, latency_batch_size).lowered, trained.x_cpu) if precision == "int8"
              else (trained.net, trained.x))
    prof = profile_ops(lambda: forward(net, x), iterations=profile_iterations, device=x.device, warmup=1)
    top = top_operators(prof, by="self_cpu_time_us", n=top_ops)
    return top[["name", "calls", "self_cpu_memory_bytes", "cpu_memory_bytes", "self_cpu_time_ms", "cpu_time_total_ms",
                "self_device_time_ms", "device_time_total_ms"]].assign(
        device=str(x.device), self_cpu_share_pct=top["share_pct"], iterations=profile_iterations,
        batch_size=latency_batch_size,
        **{k: prof.summary[k] for k in ("max_cpu_mem_mib", "device_missing_reason")}).to_dict("records")


NOTES = {"eager": "", "torchscript_trace": "torch.jit.trace (the paper's method) is deprecated in torch 2.13; its "
                                           "DeprecationWarning is silenced",
         "torch_compile": "torch.compile, Inductor backend, default mode; first call compiles",
         "torch_export": "torch.export program run eagerly (ATen graph, no fusion)"}


def _build(method: str, net, x):
    """The runnable form of ``net`` for ``method`` (nothing to build for eager; :data:`NOTES` says what it is)."""
    if method == "eager":
        return net
    if method == "torchscript_trace":
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*torch.jit.*")
            return torch.jit.trace(net, x)
    if method == "torch_compile":
        return torch.compile(net)
    return quantize.GraphRunner(torch.export.export(net, (x,)).module(), "torch.export")


def time_inference(method: str, model: torch.nn.Module, loader, x: torch.Tensor, reference: torch.Tensor, *,
                   warmup: int, repeats: int, rounds: int = 1, eager_right: torch.Tensor | None = None,
                   keep: dict | None = None) -> dict:
    """One method on ``x``'s device, ``rounds`` times from a fresh copy of ``model`` not called yet (each round built
    and passed anew: ``profiling.timing.cold_start``; ``model`` is left as it is):

    - ``build_s``: tracing or exporting (s, first round; torch.compile only wraps, and compiles in its first call);
    - ``first_pass_s``: the first pass over ``loader``, first call included (s; the paper's "test batch inference
      time"): median of the rounds, ``_min``/``_max`` their range, ``first_pass_rounds``; ``first_pass_batches``,
      ``first_pass_items``, ``accuracy_pct`` (%) of the first round;
    - ``latency_ms_*``: time per batch of ``x`` after the last pass (ms, warm: ``benchmark``), throughput, batch size;
    - ``rel_error_vs_eager`` of its logits on ``x`` against eager's ``reference``, and the ``output_tolerance``;
    - ``correct`` images and, against ``eager_right`` (eager's per-image correctness), ``correct_only_here`` /
      ``correct_only_eager``, a paired accuracy interval's counts (else NaN and ``discordant_missing_reason``).
      ``keep``, where given, receives this pass's ``right`` per image.
    """
    dev = x.device
    got = cold_start(model, lambda net: _build(method, net, x), lambda runner: _predictions(runner, loader, dev), x,
                     warmup=warmup, repeats=repeats, rounds=rounds)
    logits, labels = got["first"]
    error = relative_error(forward(got["runner"], x), reference)  # the pass's grad mode: torch.compile won't recompile
    right = logits.argmax(1) == labels
    if keep is not None:
        keep["right"] = right
    paired = eager_right is not None and eager_right.shape == right.shape
    return {**got["row"], "first_pass_batches": len(loader), "first_pass_items": len(labels),
            "accuracy_pct": 100.0 * right.float().mean().item(), "correct": int(right.sum()),
            "correct_only_here": int((right & ~eager_right).sum()) if paired else math.nan,
            "correct_only_eager": int((eager_right & ~right).sum()) if paired else math.nan,
            "discordant_missing_reason": None if paired else "eager's per-image predictions were not at hand (its "
                                                             "point was read from the store, or this is eager)",
            "rel_error_vs_eager": error, "output_tolerance": output_tolerance(dev), "note": NOTES[method]}


def compiled_point(method: str, *, trained: Trained, warmup: int, repeats: int, timing_rounds: int) -> dict:
    """:func:`time_inference` of one method on ``trained.net``: eager and TorchScript (:data:`TRACE_PAIR`) in
    ``timing_rounds`` rounds from fresh copies; eager's per-image correctness is kept on ``trained`` so that the
    methods after it count the images only one of the two gets right (a paired accuracy interval)."""
    keep = {}
    row = time_inference(method, trained.net, trained.test_loader, trained.x, trained.reference, warmup=warmup,
                         repeats=repeats, rounds=timing_rounds if method in TRACE_PAIR else 1, keep=keep,
                         eager_right=None if method == "eager" else trained.eager_right)
    if method == "eager":
        trained.eager_right = keep["right"]
    return row


def compiled_profile_point(method: str, *, trained: Trained, warmup: int, timing_rounds: int) -> dict:
    """After every timing of :data:`COMPILED`: the profiler's CPU total of ``timing_rounds`` warm calls of the built
    form on ``trained.x`` (``profiling.ops.cpu_totals``: ``profile_cpu_total_ms``, ``_min``, ``_max``,
    ``profile_calls``), the paper's "CPU inference time" of its GPU run. Eager and TorchScript on a GPU only, else
    NaN and 0 calls."""
    x = trained.x
    calls = timing_rounds if x.device.type == "cuda" and method in TRACE_PAIR else 0
    if not calls:
        return cpu_totals(lambda: None, 0, device=x.device)
    with torch.no_grad():
        runner = _build(method, copy.deepcopy(trained.net), x)  # trained.net is on x's device, in eval mode
    for _ in range(max(warmup, 2)):  # TorchScript's profiling executor optimises after its first calls
        forward(runner, x)
    return cpu_totals(lambda: runner(x), calls, device=x.device)


LATENCY_PAIRS = {"int8": ("fp32", "int8"), "torchscript_trace": ("eager", "torchscript_trace")}  # (base, other)


def latency_point(pair: str, *, trained: Trained, calibration_batches: int, latency_batch_size: int, min_rounds: int,
                  max_rounds: int, round_budget_s: float) -> list[dict]:
    """One pair of :data:`LATENCY_PAIRS` timed on a warm batch of ``trained.x`` in paired, alternating rounds
    (``cnnlab.profiling.compare``): "int8" fp32 against the int8 graph on the CPU, "torchscript_trace" eager against
    the traced form on the configured device. One row per form (``label``): ``ratio`` (its time per batch / the
    base's, the median of the rounds' ratios) within ``ratio_low`` - ``ratio_high``, ``round_times_s`` (s per batch,
    round by round: the claims pair them again), ``rounds``, ``confidence`` (each look's level), ``looks``,
    ``decided``. Rounds stop once the ratio's interval clears 1, at ``max_rounds``, or at a quarter of
    ``round_budget_s``."""
    if pair == "int8":
        x, runners = trained.x_cpu, {"fp32": trained.fp32, "int8": quantize.GraphRunner(
            trained.int8(calibration_batches, latency_batch_size).lowered, "int8 oneDNN")}
    else:
        x = trained.x
        with torch.no_grad():
            runners = {"eager": trained.net, pair: _build(pair, copy.deepcopy(trained.net), x)}
    for runner in runners.values():  # first calls out of the rounds (TorchScript's executor optimises after two)
        for _ in range(2):
            forward(runner, x)
    calls = {label: partial(forward, runner, x) for label, runner in runners.items()}
    frame = compare(calls, LATENCY_PAIRS[pair][0], min_rounds=min_rounds, max_rounds=max_rounds,
                            calls_per_round=1, budget_s=round_budget_s / 4,
                            synchronize=partial(synchronize, x.device))
    return frame.reset_index().assign(device=str(x.device), batch_size=len(x)).to_dict("records")


INT8 = Experiment("int8", int8_point)
LATENCY = Experiment("latency_rounds", latency_point, desc="latency: paired rounds")
PROFILE = Experiment("inference_profile", profile_point)
COMPILED = Experiment("compiled_inference", compiled_point, axes={"method": "methods"})
COMPILED_PROFILE = Experiment("compiled_profile", compiled_profile_point, axes={"method": "methods"},
                              desc="compiled_inference: profiles")


def _train_epoch(net, loader, device) -> None:
    """One epoch of SGD, lr 1e-3, momentum 0.9 (the DataLoader sweep's training epoch: only its time matters)."""
    fit(net, loader, torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9), epochs=1, device=device)


def plan(cfg) -> list[Work]:
    """What :func:`measure` does, for its estimate: training (none where cached), the DataLoader sweep's first
    ``min_rounds`` (:func:`cnnlab.profiling.loaders.plan`), int8 against fp32 (test passes, timed batches,
    :data:`QUANTIZE_S`, the paired rounds' first look), TorchScript's paired rounds against eager, the
    profiles, and per method its test passes (eager and TorchScript ``timing_rounds`` times), timed batches and
    first-call costs (:data:`COMPILE_S`, :data:`EXPORT_S`)."""
    config.set_threads(cfg.threads)
    dev = torch.device(cfg.device)
    recipe = Recipe(epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr, schedule=cfg.schedule, augment=cfg.augment)
    works = train_plan(MODEL, cfg.dataset, recipe=recipe, synthetic=cfg.synthetic, device=dev)
    meta = data.info(cfg.dataset)
    net = models.get(MODEL, num_classes=meta.num_classes).to(dev)
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-9)

    def step_at(b):
        x, y = torch.randn(b, *meta.input_shape, device=dev), torch.randint(meta.num_classes, (b,), device=dev)
        return lambda: (net.train(), train_step(net, x, y, optimizer))

    def infer_at(b, device=dev):
        x = torch.randn(b, *meta.input_shape, device=device)
        model = net if device == dev else copy.deepcopy(net).to(device)
        return lambda: (model.eval(), forward(model, x))

    (train_set, train_size), (test_set, test_size) = (data.stand_in(cfg.dataset, split, synthetic=cfg.synthetic)
                                                      for split in ("train", "test"))
    works += loaders.plan(step_at, infer_at, train_set, test_set, batch_sizes=[cfg.loader_batch_size],
                          num_workers=cfg.num_workers, pin_memory=cfg.pin_memory, fraction=cfg.loader_fraction,
                          test_fraction=cfg.loader_test_fraction, rounds=cfg.min_rounds, device=dev,
                          sizes=(train_size, test_size))
    passes = -(-test_size // cfg.latency_batch_size)  # batches in a pass over the test set
    cpu_batch = unit_seconds(infer_at(cfg.latency_batch_size, torch.device("cpu")), "cpu")
    batch = unit_seconds(infer_at(cfg.latency_batch_size), dev)
    if quantize.int8_unavailable() is None:  # fp32: a pass and timed batches; int8 (about as fast): two passes more
        works += [Work("int8", 4 * passes + 2 * (cfg.warmup + cfg.repeats + 3), cpu_batch), Work("int8", 1, QUANTIZE_S),
                  Work("latency rounds", 2 * (cfg.min_rounds + 2), cpu_batch)]  # fp32 and int8 (faster): a bound
    if "torchscript_trace" in cfg.methods:
        works.append(Work("latency rounds", 2 * (cfg.min_rounds + 2), batch))
    works.append(Work("profiles", 2 * (cfg.profile_iterations + 1), cpu_batch))
    for method in cfg.methods:
        rounds = cfg.timing_rounds if method in TRACE_PAIR else 1
        works.append(Work("compiled inference", rounds * passes + cfg.warmup + cfg.repeats + 1, batch))
        works += [Work("compiled inference", 1, COMPILE_S)] if method == "torch_compile" else \
            [Work("compiled inference", 1, EXPORT_S)] if method == "torch_export" else []
    return works


@studies.measurement(plan)
def measure(cfg, store_dir: str | Path | None, progress: bool = True) -> pd.DataFrame:
    """Every measurement, by ``experiment``: "sizes" (:func:`vgg_sizes`), "training" (``cnnlab.train.train``'s
    history, checkpoint-cached), "loader_sweep" (one train and one test epoch, s, per ``round`` x ``num_workers`` x
    ``pin_memory``, each from its first batch in hand: ``loaders.TIMED``; ``cfg.min_rounds`` paired rounds over the
    whole grid, more while a workers claim is undecided, within ``cfg.round_budget_s``:
    ``cnnlab.profiling.compare.until_decided``) and, on the trained model (:class:`Trained`), :data:`INT8` (with
    ``size_ratio_vs_fp32``, ``speedup_vs_fp32``), :data:`LATENCY` (warm batches in paired rounds: fp32 vs int8,
    eager vs TorchScript), :data:`PROFILE` and :data:`COMPILED` (with
    ``first_pass_speedup_vs_eager`` and the warm ``speedup_vs_eager``), stored under ``store_dir`` keyed by
    ``cfg.settings()`` and the threads in use. Every pass comes after the model has run in this process (training,
    the other experiments): process-wide first-use costs (CUDA context, cuDNN's, oneDNN's kernel set-up) are in no
    method's pass, and each method's own first-call costs are in its."""
    extra = dict(cpu_threads=config.set_threads(cfg.threads))
    recipe = Recipe(epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr, schedule=cfg.schedule, augment=cfg.augment)
    model, history = train(MODEL, cfg.dataset, recipe=recipe, synthetic=cfg.synthetic, device=cfg.device,
                           progress=progress)
    train_set, test_set = (data.load(cfg.dataset, split, synthetic=cfg.synthetic) for split in ("train", "test"))

    def sweep_rounds(n: int, level: float) -> pd.DataFrame:  # rounds 0..n-1 of the grid (stored ones read back)
        return loader_sweep(model, partial(_train_epoch, device=cfg.device),
                            lambda net, loader: evaluate(net, loader, device=cfg.device), train_set, test_set,
                            batch_sizes=[cfg.loader_batch_size], num_workers=cfg.num_workers,
                            pin_memory=cfg.pin_memory, fraction=cfg.loader_fraction,
                            test_fraction=cfg.loader_test_fraction, device=cfg.device, settings=cfg.settings(**extra),
                            progress=progress, store=store_dir and Path(store_dir) / "sweep_loader_sweep.csv",
                            rounds=n).assign(confidence=level)

    loaders = until_decided(sweep_rounds, lambda d: claims.decided(claims.check(
        WORKER_CLAIMS, d.assign(experiment="loader_sweep"), cfg.device)), min_rounds=cfg.min_rounds,
        max_rounds=cfg.max_rounds, budget_s=cfg.round_budget_s)
    trained = Trained(model, train_set, test_set, latency_batch_size=cfg.latency_batch_size, device=cfg.device)
    int8_reason = quantize.int8_unavailable()  # e.g. Colab's torchao 0.10: the int8 rows say why they are missing

    def run(experiment, **options):  # the experiment on the trained model, stored under store_dir
        rows = experiment.run(cfg, store_dir, progress=progress, settings=extra, bind=dict(trained=trained), **options)
        return rows.assign(data_source=train_set.data_source)

    precisions = dict(points=[{"precision": p} for p in PRECISIONS],
                      skip=lambda precision: int8_reason if precision == "int8" else None)
    # every timing before the first profile: a CUDA profile may slow the launches timed after it
    # (cnnlab.profiling.cupti); the profiled CPU totals of the compiled forms are their own sweep, put beside
    int8, compiled = run(INT8, **precisions), run(COMPILED)
    latency = run(LATENCY, points=[{"pair": p} for p in LATENCY_PAIRS if p == "int8" or p in cfg.methods],
                  skip=lambda pair: int8_reason if pair == "int8" else None)
    ops, profiles = run(PROFILE, **precisions), run(COMPILED_PROFILE)
    compiled = studies.beside(compiled, profiles, ["method"], "profile_", "profile pass")
    fp32, eager = {"precision": "fp32"}, {"method": "eager"}
    int8["size_ratio_vs_fp32"] = derived.against(int8, "export_size_mb", fp32)
    int8["speedup_vs_fp32"] = derived.against(int8, "latency_ms_median", fp32, how="speedup")
    compiled["first_pass_speedup_vs_eager"] = derived.against(compiled, "first_pass_s", eager, how="speedup")
    compiled["speedup_vs_eager"] = derived.against(compiled, "latency_ms_median", eager, how="speedup")
    return studies.combine(sizes=vgg_sizes(), training=history, loader_sweep=loaders, int8=int8,
                           latency_rounds=latency, inference_profile=ops, compiled_inference=compiled)


ACCURACY_RULE = accuracy.PAIRED_RULE  # shared with 06 (cnnlab.studies.lstm_pruning)
SIZE_ARITHMETIC = ("settled by arithmetic, not judged: int8 stores a weight in 1 byte, fp32 in 4, so the weights "
                   "shrink 4x by construction (the graph, the per-channel scales and the folded batch norm move the "
                   "file's ratio a little); the measured ratio is shown")


def decidable(n: int) -> str:
    """The smallest accuracy difference ``n`` test images can decide (paired, every disagreement one way), beside
    the standard preset's test set's."""
    standard = data.info(PARAMETERS.declared["dataset"].values()["standard"])
    return (f"{n} test images decide a difference of {accuracy.smallest_decidable_pp(n):.2f} pp at the least (every "
            f"disagreement one way); the standard preset's {standard.test_size:,} {standard.name} test images: "
            f"{accuracy.smallest_decidable_pp(standard.test_size):.2f} pp")


def smallest_effects(df: pd.DataFrame) -> str:
    """The notebook's sentence on what its test set can decide: :func:`decidable` of the int8 rows' test images."""
    rows = ok(df, "int8")
    return decidable(int(rows["test_items"].iloc[0])) if len(rows) else "no int8 row: no accuracy compared"


def _pair(df, col: str, pair=PRECISIONS, unit="", spread=Spread.timed_range, *, items="", rounds="", more="",
          same_function=False):
    """Ok rows ``pair`` on ``col``: first / second ``spread``, or given ``items`` second - first accuracy (pp), paired
    (:func:`cnnlab.profiling.accuracy.paired_exact`) where the second row counts the images only one gets right.
    ``same_function``: the two compute the same function (tracing records eager's operations), so where no image's
    prediction differs the difference is exactly 0 (judged exactly, not as a sample of a population)."""
    by = ok(df, "int8").set_index("precision") if "fp32" in pair else ok(df, "compiled_inference").set_index("method")
    if not set(pair) <= set(by.index):
        return f"no ok {' or '.join(pair)} row: see its table's errors"
    a, b = (by.loc[p].dropna() for p in pair)  # a NaN cell reads as absent: get() gives its default
    if rounds and (k := min(int(r.get(rounds, 1)) for r in (a, b))) < 2:
        return ONE_ROUND if k else "not profiled (GPU only)"
    if items:
        n, (p, q) = int(b[items]), (b.get(f"correct_only_{c}") for c in ("here", a.name))
        x = accuracy.difference(*(accuracy.correct_count(r[col], n) for r in (b, a)), n) if p is None else \
            Spread.exact(0.0) if same_function and p == q == 0 else accuracy.paired_exact(int(p), int(q), n)
        how = "unpaired: the disagreements were not counted" if p is None else \
            f"paired: {p:.0f} right only in {b.name}, {q:.0f} only in {a.name}"
        return claims.Measured({"difference": x}, f"{a.name} {a[col]:.2f}% -> {b.name} {b[col]:.2f}% on {n} images "
                               f"({accuracy.text(x)}; {how})", decidable(n))
    x, y = spread(a, col), spread(b, col)
    return claims.Measured({"ratio": x / y}, f"{a.name} {x.text(unit=unit)} / {b.name} {y.text(unit=unit)} = "
                           f"{(x / y).text('.2f', 'x')}" + more.format(a, b))


def _latency(df: pd.DataFrame, pair: str):
    """The base's / the other form's time per batch of :data:`LATENCY_PAIRS` ``pair``, paired round by round."""
    rows = ok(df, "latency_rounds")
    if not {"pair", "label"} <= set(rows):
        return "no latency_rounds table (one stored before paired rounds): measure it again to judge"
    rows = rows[rows["pair"] == pair].set_index("label")
    base, other = LATENCY_PAIRS[pair]
    if not {base, other} <= set(rows.index):
        return f"no paired rounds of {base} and {other}: see the latency_rounds table's errors"
    x, y = (Paired.of_rounds(rows.loc[k], column="round_times_s") for k in (base, other))
    r = x / y
    return claims.Measured({"ratio": r}, f"{base} {1e3 * x.value:.1f} ms / {other} {1e3 * y.value:.1f} ms per batch "
                           f"of {int(rows['batch_size'].iloc[0])} on {rows['device'].iloc[0]} = {r.text('.2f', 'x')}, "
                           f"{r.rounds} paired rounds")


def _workers(df: pd.DataFrame, col: str):
    """Pageable rows' epoch time ``col``, paired round by round: 0 workers' / each other count's (judged); each count's
    against the next fewer (shown: :data:`WORKERS_AGAINST_NONE`)."""
    sweep = ok(df, "loader_sweep")
    if not {"round", "num_workers", "pin_memory", col} <= set(sweep):
        return f"no {col} per round and worker count in the DataLoader sweep"
    pageable = sweep[~sweep["pin_memory"].astype(bool)]
    by_round = pageable.pivot_table(index="round", columns="num_workers", values=col, aggfunc="median")
    w = [int(k) for k in by_round.columns]
    if w[:1] != [0] or len(w) < 2:
        return "the sweep needs 0 workers and another count"
    if len(by_round) < 2:
        return ONE_ROUND
    level = float(pageable["confidence"].iloc[0]) if "confidence" in pageable else CONFIDENCE
    t = {k: Paired.of(by_round[k].tolist(), level) for k in w}
    first = pageable.iloc[0]
    steps = ", ".join(f"{b} / {a} workers {(t[b] / t[a]).text('.2f', 'x')}" for a, b in zip(w[1:], w[2:]))
    return claims.Measured({f"0 / {b} workers": t[0] / t[b] for b in w[1:]},
                           ", ".join(f"{k} workers {t[k].text('.3f', ' s')}" for k in w) +
                           f" ({len(by_round)} paired rounds, the grid's order reversed every other round)",
                           joined(steps and f"shown, not judged: {steps}", WORKERS_AGAINST_NONE,
                                  f"timed: {loaders.TIMED}; epochs of {int(first['train_items'])} training and "
                                  f"{int(first['test_items'])} test images; workers capped at os.cpu_count() = "
                                  f"{int(sweep['num_workers_cap'].iloc[0])}"))


# "can help decreasing time": some count of worker processes beats loading in the training process (0 workers, the
# DataLoader's default). A step between two counts that both lose to 0 workers (1 -> 2 here, often equal within a
# few per cent) is no help a user could take, so it is shown beside the verdict and not judged.
WORKERS_AGAINST_NONE = ("judged against 0 workers (the default): a step between two worker counts that both lose to "
                        "0 workers helps no one, and is shown, not judged")


INT8_CLAIMS = [  # judged on the CPU, where quantized models run
    Declared("int8 quantization shrinks the model about 4x", "\"Quantization float-32 to int-8, smaller model size\": "
             f"{PAPER['fp32_mb']:.2f} MB -> {PAPER['int8_mb']:.2f} MB", "fp32 / int8 torch.export.save size",
             within(*SIZE_RATIO, ".2f", "x"), partial(_pair, col="export_size_mb", unit=" MB", spread=Spread.of_range),
             bound="\"about\": our band", noise="noise: none, bytes are exact", not_judged=SIZE_ARITHMETIC),
    Declared(f"int8 accuracy stays within {ACCURACY_PP:g} percentage point of fp32", f"\"slightly greater accuracy\", "
             f"no int8 number (unquantized: {PAPER['fp32_acc']:.2f}%; its {PAPER['gpu_parallel_acc']:.2f}% is the GPU "
             "DataParallel model)", "int8 - fp32 accuracy", within(-ACCURACY_PP, ACCURACY_PP, ".2f", " pp"),
             partial(_pair, col="accuracy_pct", items="test_items"), bound="our bound", noise=ACCURACY_RULE),
    Declared("int8 accuracy is slightly greater than fp32's", "\"slightly greater accuracy\", no int8 number (unquantized: "
             f"{PAPER['fp32_acc']:.2f}%)", "int8 - fp32 accuracy", above(0.0, ".2f", " pp"),
             partial(_pair, col="accuracy_pct", items="test_items"), bound="the paper's direction; it gives no number "
             f"for \"slightly\", so no cap is judged here (the claim above bounds the change at {ACCURACY_PP:g} pp)",
             noise=ACCURACY_RULE),
    Declared("quantization speeds inference up (the paper's conclusion; it timed no int8 model)", "\"Quantization and "
             "pruning [...] can help [...] speed-up the process\"", "fp32 / int8 CPU time per warm batch",
             above(1.0, ".2f", "x"), partial(_latency, pair="int8"))]
WORKER_CLAIMS = [
    Declared(f"more DataLoader workers can cut {phase} epoch time, but not always", "\"The number of workers can help "
             "decreasing time but not always\"", f"{phase} epoch time with 0 workers / with w workers, paired round by "
             "round", above(1, ".2f", "x"), partial(_workers, col=col), "w > 0 measured", some=True,
             bound="\"can help\": against loading in the training process, 0 workers")
    for phase, col in (("train", "train_epoch_s"), ("eval", "test_epoch_s"))]
CLAIMS = INT8_CLAIMS + [
    Declared(f"TorchScript tracing speeds GPU inference up more than {PAPER['gpu_speedup_bound']:g}x", "\">2x speed "
             f"up in GPU time\": {PAPER['eager_gpu_s']:.2f} -> {PAPER['traced_gpu_s']:.2f} s a test pass (P100); its "
             f"profiles: {PAPER['eager_first_conv_s']:.3f} s eager, {PAPER['traced_first_conv_s']:.3f} s (traced) in "
             "convolutions, a cost both forms paid", "eager / traced first pass (fresh copies)", above(
                 PAPER["gpu_speedup_bound"], ".2f", "x"), partial(_pair, col="first_pass_s", pair=TRACE_PAIR, unit=" s",
             rounds="first_pass_rounds", more="; warm {1[speedup_vs_eager]:.2f}x"), gpu_only="the paper's GPU time"),
    Declared("TorchScript tracing changes CPU inference time little", "\"Little to no change in CPU inference time\": "
             f"in its GPU run, {PAPER['eager_profile_cpu_s']:.3f} s eager -> {PAPER['traced_profile_cpu_s']:.3f} s",
             "traced / eager profiler CPU total of a call", within(1 - SLIGHT, 1 + SLIGHT, ".2f", "x"),
             partial(_pair, col="profile_cpu_total_ms", pair=TRACE_PAIR[::-1], unit=" ms", rounds="profile_calls"),
             bound="\"little\": ours, two-sided", gpu_only="a GPU run's host time"),
    Declared("TorchScript tracing leaves test accuracy unchanged", f"{PAPER['gpu_parallel_acc']:.2f}% eager and traced "
             "(GPU, DataParallel)", "traced - eager first-pass accuracy", within(-TRACE_PP, TRACE_PP, ".2f", " pp"),
             partial(_pair, col="accuracy_pct", pair=TRACE_PAIR, items="first_pass_items", same_function=True),
             bound="our bound for \"both at 66.11%\"", noise=ACCURACY_RULE + "; where the traced model predicts every "
             "image as eager does, exactly 0: it runs eager's recorded operations, the same function"),
    *WORKER_CLAIMS]


def check_claims(df: pd.DataFrame, device) -> list[Claim]:
    """:data:`CLAIMS` judged by ``cnnlab.claims``, the int8 ones on the CPU (where quantized models run)."""
    return claims.check(INT8_CLAIMS, df, "cpu") + claims.check(CLAIMS[len(INT8_CLAIMS):], df, device)
