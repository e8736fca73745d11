"""Study 07: VGG-11 inference made smaller and faster: DataLoader workers, int8 quantization, compiled inference
(paper 003, Xiong & Leroux, HPML project, "VGGNet" part).

The paper trained kuangliu's VGG on CIFAR-10 on a P100, varied the DataLoader's ``num_workers``, profiled
inference, quantized the model to int8 with PyTorch's (eager-mode) quantization API (36.97 MB -> 9.30 MB,
accuracy 65.11% -> 66.11%) and traced it with TorchScript (test-set inference 2.54 s -> 1.10 s on the GPU,
"little to no change" on the CPU). Its 36.97 MB is VGG-11 with batch norm: 9,231,114 parameters x 4 bytes =
36.92 MB plus batch-norm buffers (:func:`vgg_sizes` shows the other depths do not fit), so we use ``vgg11``.

What we changed, because PyTorch did: quantization goes through torchao's PT2E flow with the x86 Inductor
quantizer (``cnnlab.quantize``; torch.ao.quantization is deprecated in torch 2.13), and TorchScript, which
torch 2.13 deprecates too, is compared with its successors ``torch.compile`` and ``torch.export``.

Functions (each returns a tidy DataFrame): :func:`vgg_sizes`, :func:`train_model`, :func:`loader_sweep`,
:func:`quantize_model` + :func:`compare_int8`, :func:`inference_profile`, :func:`compiled_inference`,
:func:`check_claims`, and ``plot_*`` for the figures.
"""

from __future__ import annotations

import copy
import math
import os
import time
import warnings
from types import SimpleNamespace

import pandas as pd
import torch
import torch.nn.functional as F

from cnnlab import config, data, models, quantize
from cnnlab.claims import Claim
from cnnlab.profiling import benchmark, profile_ops
from cnnlab.profiling.store import config_store_path
from cnnlab.studies.common import as_list, check_threads, run_sweep, set_threads
from cnnlab.train import Recipe, train

MODEL = "vgg11"
METHODS = ("eager", "torchscript_trace", "torch_compile", "torch_export")
PAPER = dict(fp32_mb=36.965367, int8_mb=9.301691, fp32_acc=65.11, int8_acc=66.11, eager_gpu_s=2.5399973579997095,
             traced_gpu_s=1.1010754359999737)
MB = 1e6  # the paper's "MB" (os.path.getsize / 1e6)

PRESETS = {
    # CPU smoke run: one epoch on the real, offline `digits` set (about 98% test accuracy), tiny loader subset,
    # one intra-op thread (CI runs two notebooks at once on two cores; more threads than free cores spin-wait).
    "quick": dict(dataset="digits", synthetic=False, epochs=1, batch_size=32, lr=0.01, schedule="cosine",
                  augment=False, num_workers=[0, 1, 2, 4, 8], pin_memory=[False, True], loader_fraction=0.1,
                  loader_batch_size=32, calibration_batches=4, latency_batch_size=32, warmup=1, repeats=5,
                  methods=list(METHODS), profile_iterations=2, top_ops=10, threads=1, device=None),
    # One Colab GPU: CIFAR-10 (the paper's data), 30 epochs.
    "standard": dict(dataset="cifar10", synthetic=False, epochs=30, batch_size=128, lr=0.05, schedule="cosine",
                     augment=True, num_workers=[0, 1, 2, 4, 8], pin_memory=[False, True], loader_fraction=0.2,
                     loader_batch_size=128, calibration_batches=32, latency_batch_size=100, warmup=3, repeats=20,
                     methods=list(METHODS), profile_iterations=5, top_ops=15, threads=None, device=None),
    # kuangliu's recipe length (200 epochs, cosine), whole loaders; test batches of 100 as in the paper's log.
    "paper": dict(dataset="cifar10", synthetic=False, epochs=200, batch_size=128, lr=0.1, schedule="cosine",
                  augment=True, num_workers=[0, 1, 2, 4, 8], pin_memory=[False, True], loader_fraction=1.0,
                  loader_batch_size=128, calibration_batches=100, latency_batch_size=100, warmup=10, repeats=50,
                  methods=list(METHODS), profile_iterations=10, top_ops=15, threads=None, device=None),
}


# ------------------------------------------------------------------------------------------------ configuration

def _positive_int(cfg, name: str) -> None:
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def validate(cfg: SimpleNamespace) -> SimpleNamespace:
    """Check (and normalise in place) a configuration from :data:`PRESETS`; ValueError naming the parameter."""
    
    image_sets = [n for n in data.names() if data.info(n).input_shape == (3, 32, 32)]
    if cfg.dataset not in image_sets:
        raise ValueError(f"dataset={cfg.dataset!r} is not valid; valid datasets (3x32x32): {', '.join(image_sets)}")
    if not isinstance(cfg.synthetic, bool):
        raise ValueError(f"synthetic={cfg.synthetic!r} must be True or False")
    for name in ("epochs", "batch_size", "loader_batch_size", "calibration_batches", "latency_batch_size",
                 "repeats", "profile_iterations", "top_ops"):
        _positive_int(cfg, name)
    if isinstance(cfg.warmup, bool) or not isinstance(cfg.warmup, int) or cfg.warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {cfg.warmup!r}")
    Recipe(schedule=cfg.schedule)  # raises for an unknown schedule, listing the valid ones
    if not (isinstance(cfg.lr, (int, float)) and cfg.lr > 0):
        raise ValueError(f"lr must be a positive number, got {cfg.lr!r}")
    if not (isinstance(cfg.loader_fraction, (int, float)) and 0 < cfg.loader_fraction <= 1):
        raise ValueError(f"loader_fraction must be in (0, 1], got {cfg.loader_fraction!r}")
    workers = as_list(cfg.num_workers)
    if not workers or any(isinstance(w, bool) or not isinstance(w, int) or w < 0 for w in workers):
        raise ValueError(f"num_workers must be a list of integers >= 0, got {cfg.num_workers!r}")
    cfg.num_workers = workers
    pins = as_list(cfg.pin_memory)
    if not pins or any(not isinstance(p, bool) for p in pins):
        raise ValueError(f"pin_memory must be a list of True/False, got {cfg.pin_memory!r}")
    cfg.pin_memory = pins
    methods = as_list(cfg.methods)
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(f"methods={cfg.methods!r} has unknown method(s) {unknown}; "
                         f"valid methods: {', '.join(METHODS)}")
    cfg.methods = methods if "eager" in methods else ["eager", *methods]  # eager is the baseline of the speed-ups
    cfg.threads = check_threads(cfg.threads)
    cfg.device = str(config.resolve_device(cfg.device))
    return cfg


def recipe(cfg) -> Recipe:
    return Recipe(epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr, schedule=cfg.schedule, augment=cfg.augment)


def datasets(cfg):
    """(train, test) splits of ``cfg.dataset``, without augmentation (calibration and timing use them as is)."""
    return tuple(data.load(cfg.dataset, split, synthetic=cfg.synthetic) for split in ("train", "test"))


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------------------------ measurements

def vgg_sizes() -> pd.DataFrame:
    """Parameters and fp32 ``state_dict`` size (MB = 1e6 bytes, measured with ``torch.save``) of VGG-11/13/16/19
    with batch norm and 10 classes, beside the paper's 36.97 MB: the row that matches is the model it used."""
    rows = []
    for name in ("vgg11", "vgg13", "vgg16", "vgg19"):
        net = models.get(name)
        rows.append({"model": name, "params": sum(p.numel() for p in net.parameters()),
                     "fp32_state_dict_mb": quantize.state_dict_bytes(net) / MB, "paper_fp32_mb": PAPER["fp32_mb"]})
    df = pd.DataFrame(rows)
    df["difference_from_paper_mb"] = df["fp32_state_dict_mb"] - df["paper_fp32_mb"]
    return df


def train_model(cfg, *, progress: bool = True):
    """VGG-11 trained with ``cnnlab.train`` (checkpoint-cached: a second call loads it). Returns (model, history)."""
    return train(MODEL, cfg.dataset, recipe=recipe(cfg), synthetic=cfg.synthetic, device=cfg.device, progress=progress)


def loader_sweep(model, cfg, store) -> pd.DataFrame:
    """Train-epoch and eval-epoch time (s) for every ``num_workers`` x ``pin_memory`` on ``cfg.loader_fraction`` of
    the data (paper: "Data Loader optimizations - varying number of workers").

    Each point trains a copy of ``model`` for one epoch (SGD, lr 1e-3: only the time matters) and evaluates it
    for one; worker start-up is inside the epoch, as it is for a non-persistent DataLoader. ``num_workers`` above
    ``os.cpu_count()`` is not run (a row with status "skipped" and the reason): more worker processes than cores
    only compete with the training process for them. ``pin_memory`` only changes host-to-GPU copies; on a CPU
    run it does nothing (``pin_memory_effective`` False, with a note).
    """
    train_set, test_set = datasets(cfg)
    cap = os.cpu_count() or 1
    device = torch.device(cfg.device)

    def point(num_workers: int, pin_memory: bool):
        with warnings.catch_warnings():  # CPU-only torch warns that there is nothing to pin to
            warnings.filterwarnings("ignore", message=".*pin_memory.*")
            loaders = [data.make_loader(split, cfg.loader_batch_size, num_workers=num_workers, pin_memory=pin_memory,
                                        fraction=cfg.loader_fraction, shuffle=split is train_set, seed=0)
                       for split in (train_set, test_set)]
            net = copy.deepcopy(model).to(device).train()
            optimizer = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
            times = []
            start = time.perf_counter()
            for inputs, labels in loaders[0]:
                inputs, labels = inputs.to(device, non_blocking=pin_memory), labels.to(device, non_blocking=pin_memory)
                loss = F.cross_entropy(net(inputs), labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            _sync(device)
            times.append(time.perf_counter() - start)
            net.eval()
            start = time.perf_counter()
            with torch.inference_mode():
                for inputs, _ in loaders[1]:
                    net(inputs.to(device, non_blocking=pin_memory))
            _sync(device)
            times.append(time.perf_counter() - start)
        effective = pin_memory and device.type == "cuda"
        return {"train_epoch_s": times[0], "eval_epoch_s": times[1], "train_items": len(loaders[0].dataset),
                "eval_items": len(loaders[1].dataset), "pin_memory_effective": effective,
                "pin_memory_note": "" if effective or not pin_memory else "no GPU: pinned memory is never copied from",
                "device": str(device), "cpu_threads": torch.get_num_threads(), "data_source": train_set.data_source}

    grid = [{"num_workers": w, "pin_memory": p} for w in cfg.num_workers if w <= cap for p in cfg.pin_memory]
    store = config_store_path(store, cfg, grid=("num_workers", "pin_memory"), model=model)
    df = run_sweep(point, grid, store, "DataLoader sweep", True) if grid else pd.DataFrame()
    skipped = [{"num_workers": w, "pin_memory": p, "status": "skipped", "train_epoch_s": math.nan,
                "eval_epoch_s": math.nan, "device": str(device), "data_source": train_set.data_source,
                "missing_reason": f"num_workers {w} > os.cpu_count() = {cap}: capped"}
               for w in cfg.num_workers if w > cap for p in cfg.pin_memory]
    df = pd.concat([df, pd.DataFrame(skipped)], ignore_index=True)
    df["num_workers_cap"] = cap
    return df


def quantize_model(model, cfg) -> SimpleNamespace:
    """int8 PT2E static quantization of ``model`` (on a CPU copy), calibrated on ``cfg.calibration_batches``
    training batches of ``cfg.latency_batch_size`` images, and its oneDNN-lowered form for CPU inference.

    Returns a namespace: ``quantized`` (q/dq graph with int8 weights: the artifact whose size we measure),
    ``lowered`` (what runs), ``fp32`` (the CPU float copy), ``example`` (inputs tuple), ``quantize_s``,
    ``lower_s`` (seconds), ``calibration_items``.
    """
    train_set, _ = datasets(cfg)
    fp32 = copy.deepcopy(model).cpu().eval()
    calibration = data.make_loader(train_set, cfg.latency_batch_size, shuffle=True, seed=1)
    example = (next(iter(calibration))[0],)
    start = time.perf_counter()
    quantized = quantize.quantize_int8(fp32, calibration, example, max_batches=cfg.calibration_batches)
    quantize_s = time.perf_counter() - start
    start = time.perf_counter()
    lowered = quantize.lower_for_cpu(quantized, example)
    lower_s = time.perf_counter() - start
    items = min(cfg.calibration_batches * cfg.latency_batch_size, len(train_set))
    return SimpleNamespace(quantized=quantized, lowered=lowered, fp32=fp32, example=example, quantize_s=quantize_s,
                           lower_s=lower_s, calibration_items=items)


def _predictions(net, loader) -> tuple[torch.Tensor, torch.Tensor]:
    logits, labels = [], []
    with torch.inference_mode():
        for inputs, target in loader:
            logits.append(net(inputs).float())
            labels.append(target)
    return torch.cat(logits), torch.cat(labels)


def compare_int8(q: SimpleNamespace, cfg) -> pd.DataFrame:
    """fp32 against int8, both on the CPU: one row per precision with serialized size (MB = 1e6 bytes; the
    ``torch.export.save`` archive of the program, graph + weights, and the ``torch.save`` state dict), test
    accuracy (%) and mean cross-entropy loss, top-1 agreement with fp32 (%), CPU latency per batch of
    ``cfg.latency_batch_size`` (ms, median/p10/p90), throughput and peak memory, and the preparation time (s).
    """
    train_set, test_set = datasets(cfg)
    loader = data.make_loader(test_set, cfg.latency_batch_size)
    batch = next(iter(loader))[0]
    runners = {"fp32": q.fp32, "int8": quantize.GraphRunner(q.lowered, "int8 oneDNN")}
    artifacts = {"fp32": q.fp32, "int8": q.quantized}
    reference, labels = _predictions(q.fp32, loader)
    rows = []
    for precision, runner in runners.items():
        logits, _ = _predictions(runner, loader)
        timing = benchmark(runner, batch, device="cpu", warmup=cfg.warmup, repeats=cfg.repeats)
        rows.append({
            "precision": precision, "device": "cpu",
            "runtime": "eager PyTorch (oneDNN fp32)" if precision == "fp32"
            else "PT2E int8 graph, oneDNN int8 kernels (Inductor freezing passes)",
            "export_size_mb": quantize.export_bytes(artifacts[precision], q.example) / MB,
            "state_dict_size_mb": quantize.state_dict_bytes(artifacts[precision]) / MB,
            "accuracy_pct": 100.0 * (logits.argmax(1) == labels).float().mean().item(),
            "loss": F.cross_entropy(logits, labels).item(),
            "top1_agreement_pct": 100.0 * (logits.argmax(1) == reference.argmax(1)).float().mean().item(),
            "test_items": len(labels), "latency_ms_median": timing.latency_ms_median,
            "latency_ms_p10": timing.latency_ms_p10, "latency_ms_p90": timing.latency_ms_p90,
            "throughput_items_per_s": timing.throughput_items_per_s, "peak_mem_alloc_mib": timing.peak_mem_alloc_mib,
            "batch_size": cfg.latency_batch_size, "cpu_threads": timing.cpu_threads,
            "prepare_time_s": 0.0 if precision == "fp32" else q.quantize_s + q.lower_s,
            "calibration_items": 0 if precision == "fp32" else q.calibration_items,
            "data_source": test_set.data_source,
        })
    df = pd.DataFrame(rows)
    base = df.set_index("precision").loc["fp32"]
    df["size_ratio_vs_fp32"] = df["export_size_mb"] / base["export_size_mb"]
    df["speedup_vs_fp32"] = base["latency_ms_median"] / df["latency_ms_median"]
    return df


def inference_profile(model, q: SimpleNamespace, cfg) -> pd.DataFrame:
    """The ``cfg.top_ops`` operators of highest self CPU time in inference on one test batch, fp32 (on
    ``cfg.device``) and int8 (CPU), as the paper's profiler tables: calls, self and total CPU time (ms), CPU
    memory allocated (MiB, self and with children), device time (ms; NaN on a CPU), share of self CPU time (%)."""
    _, test_set = datasets(cfg)
    batch = next(iter(data.make_loader(test_set, cfg.latency_batch_size)))[0]
    device = torch.device(cfg.device)
    fp32 = copy.deepcopy(model).to(device).eval()
    x = batch.to(device)
    frames = []
    cpu = torch.device("cpu")
    for precision, fn, dev in (("fp32", lambda: fp32(x), device), ("int8", lambda: q.lowered(batch), cpu)):
        def step(fn=fn):
            with torch.inference_mode():
                return fn()
        prof = profile_ops(step, iterations=cfg.profile_iterations, device=dev, warmup=1)
        ops = prof.operators.sort_values("self_cpu_time_us", ascending=False)
        total = ops["self_cpu_time_us"].sum()
        top = ops.head(cfg.top_ops)
        frames.append(pd.DataFrame({
            "precision": precision, "device": str(dev), "name": top["name"], "calls": top["calls"],
            "self_cpu_time_ms": top["self_cpu_time_us"] / 1e3, "cpu_time_total_ms": top["cpu_time_total_us"] / 1e3,
            "self_cpu_share_pct": 100.0 * top["self_cpu_time_us"] / total,
            "self_cpu_memory_mib": top["self_cpu_memory_bytes"] / 2**20,
            "cpu_memory_mib": top["cpu_memory_bytes"] / 2**20,
            "self_device_time_ms": top["self_device_time_us"] / 1e3,
            "device_time_total_ms": top["device_time_total_us"] / 1e3,
            "iterations": cfg.profile_iterations, "batch_size": len(batch),
            "max_cpu_mem_mib": prof.summary["max_cpu_mem_mib"],
            "device_missing_reason": prof.summary["device_missing_reason"]}))
    return pd.concat(frames, ignore_index=True)


def _build(method: str, net, x):
    """The runnable form of ``net`` for ``method`` (and a note): nothing to build for eager."""
    if method == "eager":
        return net, ""
    if method == "torchscript_trace":
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*torch.jit.*")
            traced = torch.jit.trace(net, x)
        return traced, ("torch.jit.trace (the paper's method) is deprecated in torch 2.13; "
                        "its DeprecationWarning is silenced")
    if method == "torch_compile":
        return torch.compile(net), "torch.compile, Inductor backend, default mode; first call compiles"
    exported = torch.export.export(net, (x,))
    return (quantize.GraphRunner(exported.module(), "torch.export"),
            "torch.export program run eagerly (ATen graph, no fusion)")


def compiled_inference(model, cfg) -> pd.DataFrame:
    """Eager vs TorchScript trace vs ``torch.compile`` vs ``torch.export`` on ``cfg.device``: one row per method
    with ``first_call_s`` (building the runnable form plus its first call: tracing, compiling, exporting),
    latency per batch of ``cfg.latency_batch_size`` (ms, median/p10/p90, after warm-up), speed-up over eager,
    and the largest absolute logit difference from eager."""
    _, test_set = datasets(cfg)
    device = torch.device(cfg.device)
    net = copy.deepcopy(model).to(device).eval()
    x = next(iter(data.make_loader(test_set, cfg.latency_batch_size)))[0].to(device)
    with torch.inference_mode():
        reference = net(x)
    rows = []
    for method in cfg.methods:
        _sync(device)
        start = time.perf_counter()
        with torch.no_grad():
            runner, note = _build(method, net, x)
        with torch.inference_mode():  # the grad mode benchmark() runs in, so torch.compile compiles once
            out = runner(x)
        _sync(device)
        first_call_s = time.perf_counter() - start
        timing = benchmark(runner, x, device=device, warmup=cfg.warmup, repeats=cfg.repeats, measure_memory=False)
        rows.append({"method": method, "device": str(device), "device_name": timing.device_name,
                     "first_call_s": first_call_s, "latency_ms_median": timing.latency_ms_median,
                     "latency_ms_p10": timing.latency_ms_p10, "latency_ms_p90": timing.latency_ms_p90,
                     "throughput_items_per_s": timing.throughput_items_per_s, "batch_size": len(x),
                     "max_abs_diff_vs_eager": (out.float() - reference.float()).abs().max().item(), "note": note,
                     "cpu_threads": timing.cpu_threads, "data_source": test_set.data_source})
    df = pd.DataFrame(rows)
    df["speedup_vs_eager"] = df.loc[df["method"] == "eager", "latency_ms_median"].iloc[0] / df["latency_ms_median"]
    return df


# ------------------------------------------------------------------------------------------------ claims

def check_claims(loaders: pd.DataFrame, int8: pd.DataFrame, compiled: pd.DataFrame) -> list[Claim]:
    """The paper's VGG claims beside ours (see the notebook for the wording of each)."""
    fp32, q8 = int8.set_index("precision").loc["fp32"], int8.set_index("precision").loc["int8"]
    ratio = fp32["export_size_mb"] / q8["export_size_mb"]
    acc_change = q8["accuracy_pct"] - fp32["accuracy_pct"]
    paper_ratio = PAPER["fp32_mb"] / PAPER["int8_mb"]
    checks = [
        Claim("int8 quantization shrinks the model about 4x",
              f"{PAPER['fp32_mb']:.2f} MB -> {PAPER['int8_mb']:.2f} MB ({paper_ratio:.2f}x)",
              f"{fp32['export_size_mb']:.2f} MB -> {q8['export_size_mb']:.2f} MB ({ratio:.2f}x, torch.export.save "
              f"archives; state dicts {fp32['state_dict_size_mb']:.2f} -> {q8['state_dict_size_mb']:.2f} MB)",
              3.5 <= ratio <= 4.5, "cpu", "held if the fp32/int8 size ratio is within 3.5-4.5"),
        Claim("int8 accuracy stays within 1 percentage point of fp32",
              f"{PAPER['fp32_acc']:.2f}% -> {PAPER['int8_acc']:.2f}% ({PAPER['int8_acc'] - PAPER['fp32_acc']:+.2f} pp)",
              f"{fp32['accuracy_pct']:.2f}% -> {q8['accuracy_pct']:.2f}% ({acc_change:+.2f} pp) on "
              f"{int(fp32['test_items'])} {fp32['data_source']} test images", abs(acc_change) <= 1.0, "cpu"),
        Claim("quantization speeds inference up (the paper's conclusion; it timed no int8 model)",
              "no int8 latency reported",
              f"CPU batch of {int(fp32['batch_size'])}: {fp32['latency_ms_median']:.1f} ms fp32 -> "
              f"{q8['latency_ms_median']:.1f} ms int8 ({q8['speedup_vs_fp32']:.2f}x)",
              q8["speedup_vs_fp32"] > 1.0, "cpu", "quantized models run on the CPU only"),
    ]
    by_method = compiled.set_index("method")
    traced = by_method.loc["torchscript_trace"] if "torchscript_trace" in by_method.index else None
    device = compiled["device"].iloc[0]
    on_gpu = device.startswith("cuda")
    paper_gpu = PAPER["eager_gpu_s"] / PAPER["traced_gpu_s"]
    ours = "not run" if traced is None else (
        f"{traced['speedup_vs_eager']:.2f}x ({by_method.loc['eager', 'latency_ms_median']:.2f} -> "
        f"{traced['latency_ms_median']:.2f} ms per batch of {int(traced['batch_size'])} on {device})")
    checks.append(Claim("TorchScript tracing speeds GPU inference up more than 2x",
                        f"{PAPER['eager_gpu_s']:.2f} s -> {PAPER['traced_gpu_s']:.2f} s on a P100 ({paper_gpu:.2f}x)",
                        ours, (traced["speedup_vs_eager"] > 2.0) if on_gpu and traced is not None else None, device,
                        "" if on_gpu and traced is not None else "a GPU claim; this run has no GPU (or no trace)"))
    checks.append(Claim("TorchScript tracing changes CPU inference time little",
                        "\"little to no change in CPU inference time\" (no number)", ours,
                        (abs(traced["speedup_vs_eager"] - 1.0) <= 0.2) if not on_gpu and traced is not None else None,
                        device, "held if within 20% of eager" if not on_gpu and traced is not None
                        else "a CPU claim; this run timed the GPU (or no trace)"))
    ok = loaders[loaders["status"] == "ok"]
    for phase in ("train", "eval"):
        col = f"{phase}_epoch_s"
        by_workers = ok[~ok["pin_memory"].astype(bool)].groupby("num_workers")[col].mean().sort_index()
        if len(by_workers) < 2:
            continue
        helps = by_workers.iloc[1:].min() < by_workers.iloc[0]
        not_always = (by_workers.diff().dropna() > 0).any()
        best = int(by_workers.idxmin())
        checks.append(Claim(f"more DataLoader workers can cut {phase} epoch time, but not always",
                            "\"the number of workers can help decreasing time but not always\"",
                            ", ".join(f"{w} workers {t:.2f} s" for w, t in by_workers.items()) + f" (best: {best})",
                            bool(helps and not_always), device,
                            f"workers capped at os.cpu_count() = {int(loaders['num_workers_cap'].iloc[0])}"))
    return checks


# ------------------------------------------------------------------------------------------------ figures

def _spread(df: pd.DataFrame) -> list:
    """p10-p90 error bars around the median latency."""
    return [df["latency_ms_median"] - df["latency_ms_p10"], df["latency_ms_p90"] - df["latency_ms_median"]]


def plot_loader_sweep(df: pd.DataFrame):
    """Epoch time (s) against num_workers, train and eval panels, one line per pin_memory setting."""
    from cnnlab import plotting

    ok = df[df["status"] == "ok"].melt(id_vars=["num_workers", "pin_memory"], var_name="phase",
                                       value_vars=["train_epoch_s", "eval_epoch_s"], value_name="epoch_time_s")
    ok["phase"] = ok["phase"].str.removesuffix("_epoch_s")
    pinned = "pinned" if df["device"].iloc[0].startswith("cuda") else "pinned (no effect without a GPU)"
    ok["pin_memory"] = ok["pin_memory"].astype(bool).map({True: pinned, False: "pageable"})
    grid = plotting.sns.relplot(data=ok, x="num_workers", y="epoch_time_s", hue="pin_memory", col="phase", kind="line",
                                marker="o", height=3.2, aspect=1.2, facet_kws={"sharey": False})
    grid.set_axis_labels("DataLoader num_workers", plotting.label_for("epoch_time_s"))
    for ax in grid.axes.flat:
        ax.set_xticks(sorted(ok["num_workers"].unique()))
    grid.figure.suptitle(f"DataLoader workers (cap: {int(df['num_workers_cap'].iloc[0])} cores)", y=1.03)
    return grid.figure


def plot_int8(df: pd.DataFrame):
    """fp32 vs int8: serialized size (MB), test accuracy (%), CPU latency per batch (ms)."""
    from cnnlab import plotting

    fig, axes = plotting.plt.subplots(1, 3, figsize=(10, 3.2))
    for ax, col, label in zip(axes, ("export_size_mb", "accuracy_pct", "latency_ms_median"),
                              ("Serialized size (MB)", "Test accuracy (%)", "CPU latency per batch (ms)")):
        plotting.sns.barplot(data=df, x="precision", y=col, hue="precision", ax=ax, legend=False)
        ax.set_ylabel(label)
        ax.set_xlabel("")
        for container in ax.containers:
            ax.bar_label(container, fmt="%.3g")
    axes[2].errorbar(range(len(df)), df["latency_ms_median"],
                     yerr=_spread(df),
                     fmt="none", ecolor="black", capsize=3)
    fig.suptitle("VGG-11 fp32 vs PT2E int8 (CPU)")
    fig.tight_layout()
    return fig


def plot_compiled(df: pd.DataFrame):
    """Latency per batch (ms, p10-p90 bars) and first-call time (s, log scale) per method."""
    from cnnlab import plotting

    fig, axes = plotting.plt.subplots(1, 2, figsize=(10, 3.4))
    plotting.sns.barplot(data=df, x="method", y="latency_ms_median", hue="method", ax=axes[0], legend=False)
    axes[0].errorbar(range(len(df)), df["latency_ms_median"],
                     yerr=_spread(df),
                     fmt="none", ecolor="black", capsize=3)
    axes[0].set_ylabel(f"Latency per batch of {int(df['batch_size'].iloc[0])} (ms)")
    plotting.sns.barplot(data=df, x="method", y="first_call_s", hue="method", ax=axes[1], legend=False)
    axes[1].set_yscale("log")
    axes[1].set_ylabel(plotting.label_for("first_call_s"))
    for ax in axes:
        ax.set_xlabel("")
        ax.tick_params(axis="x", rotation=20)
    fig.suptitle(f"VGG-11 inference on {df['device'].iloc[0]}: eager, TorchScript, torch.compile, torch.export")
    fig.tight_layout()
    return fig


def plot_profile(df: pd.DataFrame):
    """Self CPU time (ms) of the top operators, one panel per precision."""
    from cnnlab import plotting

    precisions = list(dict.fromkeys(df["precision"]))
    height = 0.35 * df.groupby("precision").size().max() + 1.2
    fig, axes = plotting.plt.subplots(1, len(precisions), figsize=(6 * len(precisions), height))
    for ax, precision in zip(axes if len(precisions) > 1 else [axes], precisions):
        part = df[df["precision"] == precision]
        plotting.sns.barplot(data=part, y="name", x="self_cpu_time_ms", ax=ax, color=plotting.sns.color_palette()[0])
        ax.set_xlabel(plotting.label_for("self_cpu_time_ms"))
        ax.set_ylabel("")
        ax.set_title(f"{precision} on {part['device'].iloc[0]}, {int(part['iterations'].iloc[0])} batches")
    fig.tight_layout()
    return fig


__all__ = ["METHODS", "MODEL", "PAPER", "PRESETS", "check_claims", "compare_int8", "compiled_inference", "datasets",
           "inference_profile", "loader_sweep", "plot_compiled", "plot_int8", "plot_loader_sweep", "plot_profile",
           "quantize_model", "recipe", "set_threads", "train_model", "validate", "vgg_sizes"]
