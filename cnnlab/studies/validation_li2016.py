"""Study 08: validation against Li et al. 2016: whole-network speed-up of six convolution strategies.

Paper 001 (Sec. IV-E, Fig. 7) reproduces Li, Yang, Feng, Chakradhar & Zhou 2016 (SC'16, arXiv 1610.03618): five
CNNs under cuDNN-MM, -FFT, -FFT-T, cuda-convnet, cuDNN-Best and Opt, normalised to cuDNN-MM. Ours: the strategies
of ``cnnlab.kernels.strategies`` (:data:`PAPER_NAMES`) and ``native`` (torch's own convolution). Our gemm is a
Python im2col + matmul while opt and native run the vendor's convolution: opt / gemm mixes two effects, opt /
native isolates Opt's memory optimisations; both are reported. One explicit TF32 setting for all (``tf32``): on
Ampere and newer GPUs cuDNN would otherwise run in TF32 while gemm's matmul runs in FP32. Inputs: random tensors.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import partial
from pathlib import Path

import pandas as pd
import torch

from cnnlab import claims, config, models, studies
from cnnlab.claims import Declared, Spread, above, same
from cnnlab.kernels import apply_strategy, strategies
from cnnlab.kernels.triton_conv import TRITON_CPU_REASON, triton_check_device, triton_untimed_reason
from cnnlab.plotting.validation_li2016 import PAPER_NAMES, PAPER_OPT_SPEEDUP
from cnnlab.plotting.validation_li2016 import figures  # noqa: F401  (the contract's figures(df))
from cnnlab.profiling import benchmark, combine_rounds, cost_model, derived, free_memory, wall_time
from cnnlab.profiling.compare import Paired, until_decided
from cnnlab.profiling.timing import median_seconds
from cnnlab.profiling.estimate import Work, forward, interpolate
from cnnlab.studies import Experiment, Parameter

# The paper's networks -> registry model, build options, input shape (C, H, W): each network's own paper's input
# (paper 001 gives none; see the notebook).
NETWORKS = {"LeNet": dict(model="lenet5", options={"in_channels": 1}, input_shape=(1, 32, 32)),  # MNIST, padded
            "CIFAR": dict(model="convnet_cifar", options={}, input_shape=(3, 32, 32)),
            "AlexNet": dict(model="alexnet_imagenet", options={}, input_shape=(3, 224, 224)),
            "ZFNet": dict(model="zfnet", options={}, input_shape=(3, 224, 224)),
            "VGG": dict(model="vgg16", options={}, input_shape=(3, 224, 224))}  # see vgg_model, vgg_image_size
VGG_MODELS = ("vgg11", "vgg13", "vgg16", "vgg19")
STRATEGIES = tuple(PAPER_NAMES)  # in the paper's order (Fig. 7)
SINGLE_KERNELS = ("gemm", "fft", "fft_tiled", "direct")  # one algorithm for every layer (not best, not opt)
BASELINE = "gemm"  # cuDNN-MM: every speed-up is relative to it
OPTIONAL = ("native",)  # torch's own F.conv2d (the vendor library as the framework calls it): the fair reference
# The noise rule's A/A control: gemm timed again, a strategy of its own in every round; must stay within noise of gemm.
CONTROL = "gemm_again"
DATA_SOURCE = "synthetic"
DIRECT_CHECK_BATCH = 2  # images per batch of the direct strategy's correctness check (interpreted on a CPU: slow)
MAX_REPEATS = 200  # timed batches per point at most, however fast the point
BENCH_COLUMNS = ("latency_ms_median", "latency_ms_p10", "latency_ms_p90", "latency_ms_mean", "throughput_items_per_s",
                 "first_call_ms", "gpu_util_pct", "gpu_util_missing_reason", "batch_size", "warmup", "repeats",
                 "cpu_threads", "device", "device_name")  # what a point keeps of benchmark's row (no memory)


def _strategies(value, parameter: str) -> list[str]:
    """Strategies in the paper's order, including the gemm baseline."""
    order = STRATEGIES + OPTIONAL
    names = sorted(config.names_list(value, parameter, valid=order), key=order.index)
    if BASELINE not in names:
        raise ValueError(f"{parameter}={names!r} must include {BASELINE!r} (cuDNN-MM, the baseline every speed-up is "
                         f"relative to); valid: {', '.join(order)}")
    return names


# quick: a CPU smoke run, batch 2, VGG at 32x32 (its FFT at 224x224: ~30 s a pass on one core), Triton checked on
# the two small networks. standard: one GPU, the paper's input sizes. A round times each strategy of a network once,
# for at least min_time_s and `repeats` batches (its median: one preempted batch does not make a round's time): on
# quick's CPU one batch of the large networks (a pass of fft takes 1.5-3.6 s) and ~100 of LeNet's. A shared CPU's
# load drifts between rounds (best that picked gemm on every layer timed 0.47-2.1x gemm a round each), which pairing
# the strategies within each round cancels.
PARAMETERS = studies.Parameters(
    networks=Parameter(list(NETWORKS), check=partial(config.names_list, valid=NETWORKS), axis=True,
                       doc=f"from {', '.join(NETWORKS)}"),
    strategies=Parameter(list(STRATEGIES + OPTIONAL), check=_strategies, axis=True,
                         doc=f"from {', '.join(STRATEGIES + OPTIONAL)} (gemm, the baseline, is required)"),
    direct_check_networks=Parameter(["LeNet", "CIFAR"], list(NETWORKS),
                                    check=partial(config.names_list, valid=NETWORKS),
                                    axis=True, doc="networks the direct strategy is checked on against native"),
    vgg_model=Parameter("vgg16", check=partial(config.one_of, valid=VGG_MODELS), doc="the network VGG stands for"),
    vgg_image_size=Parameter(32, 224, check=config.image_size, doc="VGG's input pixels a side"),
    # False: every strategy in full FP32, as gemm's matmul (no effect on a CPU; recorded in every row)
    tf32=studies.TF32,
    batch_size=Parameter(2, 32, 128, check=config.batch_size, doc="images per batch"),
    best_repeats=Parameter(1, 3, 5, check=config.positive_int,
                           doc="timed calls per candidate when best picks a layer's algorithm"),
    warmup=Parameter(0, 3, 10, check=partial(config.positive_int, minimum=0), doc="untimed batches per point"),
    repeats=Parameter(1, 20, 50, check=config.positive_int, doc="timed batches per point and round, at least"),
    min_time_s=Parameter(0.1, 1.0, 2.0, check=partial(config.number, low=0, high=600, low_open=False),
                         doc=f"seconds of timed batches per point and round, at least (up to {MAX_REPEATS} batches)"),
    min_rounds=studies.MIN_ROUNDS,
    max_rounds=studies.MAX_ROUNDS,
    # quick: ~18 s a round of every network here, ~30 s to build and first call them at each look: 150 s is the first
    # look (8 rounds) alone. The CPU judges one claim here, "opt fastest on every network", and VGG's native / opt
    # (1.05x) stayed undecided at 12 rounds in every quick run: the look at 12 cost ~100 s and decided nothing (the
    # standard preset's 48 rounds can); the control needs no more rounds to be inconclusive
    round_budget_s=Parameter(150, 900, 1800, check=partial(config.number, low=0, high=86400, low_open=False),
                             type="float", doc="seconds the timing rounds may take in all, more rounds added while "
                             "undecided"),
    threads=studies.THREADS,
    device=studies.DEVICE,
)
configure = PARAMETERS.configure


def network_spec(network: str, *, vgg_model: str = "vgg16", vgg_image_size: int = 224) -> dict:
    """{"model", "options", "input_shape", "shape" ("CxHxW")} of a paper network (VGG's model and size as given)."""
    spec = dict(NETWORKS[network])
    if network == "VGG":
        spec.update(model=vgg_model, input_shape=(3, vgg_image_size, vgg_image_size))
    return {**spec, "shape": "x".join(map(str, spec["input_shape"]))}


def networks_table(networks=tuple(NETWORKS), *, vgg_model: str = "vgg16", vgg_image_size: int = 224) -> pd.DataFrame:
    """One row per network: network, model (registry name), input_shape ("CxHxW"), conv_layers, params_m
    (millions), gflops_per_image (forward GFLOPs at that input; meta device, no compute)."""
    rows = []
    for name in networks:
        spec = network_spec(name, vgg_model=vgg_model, vgg_image_size=vgg_image_size)
        with torch.device("meta"):
            net = models.get(spec["model"], **spec["options"])
        rows.append({"network": name, "model": spec["model"], "input_shape": spec["shape"],
                     "conv_layers": sum(isinstance(m, torch.nn.Conv2d) for m in net.modules()),
                     "params_m": sum(p.numel() for p in net.parameters()) / 1e6,
                     "gflops_per_image": cost_model(net, spec["input_shape"], batch_size=1)["flops"] / 1e9})
    return pd.DataFrame(rows)


output_tolerance = config.output_tolerance  # the rule for "the same network's output", under its name for the tests


def layer_timer(device, repeats: int):
    """Strategy "best"'s layer timer: ``timer(fn)`` = median wall time (s) of ``repeats`` calls after an untimed one."""
    return partial(median_seconds, device=device, repeats=repeats)


def _choices(model: torch.nn.Module) -> str:
    """The per-layer picks of strategy "best" (StrategyConv2d.last_choice), counted: "gemm x3, fft x2"."""
    picks = [m.last_choice for m in model.modules() if isinstance(m, strategies.StrategyConv2d) and m.last_choice]
    return ", ".join(f"{name} x{n}" for name, n in Counter(picks).most_common())


def _network(network: str, vgg_model: str, vgg_image_size: int):
    """(the network in eval mode with seeded weights, the same for every strategy; its :func:`network_spec`)."""
    spec = network_spec(network, vgg_model=vgg_model, vgg_image_size=vgg_image_size)
    torch.manual_seed(0)
    return models.get(spec["model"], **spec["options"]).eval(), spec


def _build(network: str, strategy: str, device, batch_size: int, vgg_model: str, vgg_image_size: int, *,
           built=None, **options):
    """(the network, seeded, its copy under ``strategy`` on ``device``, a seeded batch, its :func:`network_spec`);
    ``built``: the network and spec of :func:`_network` already built (not built again)."""
    net, spec = built or _network(network, vgg_model, vgg_image_size)
    # outside inference mode: apply_strategy deep-copies, and inference tensors break direct's weight cache
    model = apply_strategy(net, strategy, **options).to(device).eval()
    x = torch.randn(batch_size, *spec["input_shape"], generator=torch.Generator().manual_seed(0)).to(device)
    return net.to(device), model, x, spec


def check_point(network, *, vgg_model, vgg_image_size, tf32) -> dict:
    """Experiment "direct_check"'s point: the direct strategy (Triton) against native on :data:`DIRECT_CHECK_BATCH`
    images, where ``triton_check_device`` says: input_shape, device, rel_error_vs_native, check_s (s), tf32."""
    dev = triton_check_device()[0]
    net, model, x, spec = _build(network, "direct", dev, DIRECT_CHECK_BATCH, vgg_model, vgg_image_size)
    with torch.inference_mode(), config.tf32(tf32):
        run = wall_time(lambda: model(x), device=dev)
        error = config.relative_error(run.result, net(x))
    return {"input_shape": spec["shape"], "device": dev, "rel_error_vs_native": error, "check_s": run.seconds,
            "tf32": tf32}


# One network's strategies, built and called once, then timed in every round of that network (the grid runs a
# network's rounds one after another): rebuilding AlexNet or ZFNet and calling it first in every round would cost
# more than the rounds. Holds one network at a time (AlexNet: ~250 MB a copy, eight copies).
_PREPARED: dict = {}


def prepared(network: str, strategy: str, *, vgg_model, vgg_image_size, tf32, batch_size, warmup, repeats,
             min_time_s, best_repeats, device) -> dict:
    """``strategy`` on ``network`` ready to time: {"model", "x", "first_call_ms" (its first call: best's per-layer
    choice, Triton's compile), "warmup", "repeats" (per round: at least ``repeats`` batches and ``min_time_s`` seconds,
    at most :data:`MAX_REPEATS`, sized by one call after the first), "rel_error_vs_native" (first call's output
    against the network's own), "best_choices", "spec"}; built once per network and settings (see ``_PREPARED``),
    under ``tf32``."""
    settings = (network, vgg_model, vgg_image_size, tf32, batch_size, warmup, repeats, min_time_s, best_repeats,
                str(device))
    if _PREPARED.get("settings") != settings:  # another network: let the last one's models go first
        _PREPARED.clear()
        free_memory()
        _PREPARED["settings"] = settings
    if strategy not in _PREPARED:
        dev = torch.device(device)
        options = {"timer": layer_timer(dev, best_repeats)} if strategy == "best" else {}
        if "network" not in _PREPARED:  # built once: AlexNet's and ZFNet's 61M weights take seconds to initialise
            _PREPARED["network"] = _network(network, vgg_model, vgg_image_size)
        with config.tf32(tf32):  # the control runs gemm's code as its own copy
            net, model, x, spec = _build(network, BASELINE if strategy == CONTROL else strategy, dev, batch_size,
                                         vgg_model, vgg_image_size, built=_PREPARED["network"], **options)
        with config.tf32(tf32), torch.inference_mode():
            first = wall_time(lambda: model(x), device=dev)
            error = config.relative_error(first.result, net(x))
            one = first.seconds if first.seconds >= min_time_s else wall_time(lambda: model(x), device=dev).seconds
        one = max(one, 1e-6)
        _PREPARED[strategy] = {
            "model": model, "x": x, "first_call_ms": first.seconds * 1e3, "rel_error_vs_native": error, "spec": spec,
            "repeats": max(repeats, min(MAX_REPEATS, math.ceil(min_time_s / one))),
            "warmup": max(warmup, min(5, math.floor(min_time_s / one))),  # benchmark's own rule for min_run_time_s
            "best_choices": _choices(model) if strategy == "best" else None}
    return _PREPARED[strategy]


def strategy_point(round, network, strategy, *, vgg_model, vgg_image_size, tf32, batch_size, warmup,  # noqa: A002
                   repeats, min_time_s, best_repeats, device) -> dict:
    """Experiment "strategies"' point in one round, all under ``tf32``: :data:`BENCH_COLUMNS` of ``strategy``'s
    :func:`prepared` model timed for its ``warmup`` and ``repeats`` batches (first_call_ms: its one first call, the
    same in every round), model, input_shape, rel_error_vs_native (first call), best_choices, data_source, tf32."""
    dev = torch.device(device)
    p = prepared(network, strategy, vgg_model=vgg_model, vgg_image_size=vgg_image_size, tf32=tf32,
                 batch_size=batch_size, warmup=warmup, repeats=repeats, min_time_s=min_time_s,
                 best_repeats=best_repeats, device=device)
    with config.tf32(tf32):
        m = benchmark(p["model"], p["x"], device=dev, warmup=p["warmup"], repeats=p["repeats"], measure_memory=False)
    row = {**m.as_row(), "first_call_ms": p["first_call_ms"]}
    return {**{k: row[k] for k in BENCH_COLUMNS}, "model": p["spec"]["model"], "input_shape": p["spec"]["shape"],
            "rel_error_vs_native": p["rel_error_vs_native"], "best_choices": p["best_choices"],
            "data_source": DATA_SOURCE, "tf32": tf32}


DIRECT_CHECK = Experiment("li2016_direct_check", check_point, axes={"network": "direct_check_networks"},
                          desc="direct strategy vs native")
TIMED = Experiment("li2016", strategy_point, desc="Li et al. strategies")


def plan(cfg) -> list[Work]:
    """What :func:`measure` does, for its estimate: per round, network and strategy its calls (best's first times every
    candidate per layer) and the direct check. Each strategy is probed on the networks with the fewest and the most
    FLOPs, the others interpolated by their FLOPs (``networks_table``: no compute)."""
    config.set_threads(cfg.threads)
    dev = torch.device(cfg.device)
    vgg = dict(vgg_model=cfg.vgg_model, vgg_image_size=cfg.vgg_image_size)
    flops = dict(zip(cfg.networks, networks_table(cfg.networks, **vgg)["gflops_per_image"]))
    kernels = [s for s in cfg.strategies if s != "best" and not (s == "direct" and triton_untimed_reason(cfg.device))]
    candidates = [s for s in strategies.candidates_for(dev) if s in SINGLE_KERNELS]
    by_flops = {f: n for n, f in flops.items()}

    def unit(strategy, f):  # one pass of the network with f FLOPs under strategy
        _, model, x, _ = _build(by_flops[f], strategy, dev, cfg.batch_size, **vgg)
        return partial(forward, model, x)

    seconds = {s: interpolate(flops.values(), partial(unit, s), dev) for s in dict.fromkeys(kernels + candidates)}
    # once per network (prepared): the first call, the sizing call, native's reference; then per round its warm-up
    # and at least one timed call, to the first look (more rounds where undecided)
    per_point = 3 + cfg.min_rounds * (cfg.warmup + 1)
    works = []
    for f in flops.values():  # gemm twice: the second is CONTROL
        works += [Work("strategies", per_point, seconds[s][f]) for s in [*kernels, BASELINE]]
        if "best" in cfg.strategies:  # its first call times every candidate; then the fastest (here: any)
            works += [Work("strategies", cfg.best_repeats + 1 + per_point / len(candidates), seconds[c][f])
                      for c in candidates]
    # at least min_time_s of timed calls per point and round (one call's time decides how many)
    works.append(Work("strategies", cfg.min_rounds * len(cfg.networks) * (len(cfg.strategies) + 1), cfg.min_time_s))
    if (check_device := triton_check_device()[0]) is not None:
        for network in cfg.direct_check_networks:
            _, model, x, _ = _build(network, "direct", check_device, DIRECT_CHECK_BATCH, **vgg)
            works.append(Work("direct check", 1, partial(forward, model, x)))
    return works


def in_rounds(networks, strategies, rounds) -> list[dict]:
    """The points of experiment "strategies": per network, its ``rounds`` (round numbers) one after another, each
    timing every strategy once, in the order given in even rounds and reversed in odd ones (neither of two strategies
    always runs first after a change of load: ``cnnlab.profiling.compare``)."""
    return [dict(round=r, network=n, strategy=s) for n in networks for r in rounds
            for s in (strategies if r % 2 == 0 else strategies[::-1])]


@studies.measurement(plan)
def measure(cfg, store_dir: str | Path | None, progress: bool = True) -> pd.DataFrame:
    """Four experiments, with ``cfg.threads`` intra-op threads (the count in use is part of the stores' key):
    "networks" (:func:`networks_table`), "direct_check" (:func:`check_point`, "skipped" with the reason where it
    cannot run), "strategies" (per network, the strategies in paper order and :data:`CONTROL`, timed in paired rounds
    (:func:`in_rounds`): ``cfg.min_rounds`` of them, more up to ``cfg.max_rounds`` while a claim is undecided and
    ``cfg.round_budget_s`` allows (``cnnlab.profiling.compare.until_decided``; the control, undecided by design, does
    not ask for more), combined by :func:`combine_rounds` (round_medians_ms: each round's median, the times the claims
    pair; confidence: the level of each look's intervals): :func:`strategy_point`'s and :func:`add_speedups`'
    columns; direct "skipped" where Triton is not timed), "speedups" (speedup_vs_gemm per strategy, opt_vs_native,
    paper_opt)."""
    threads = config.set_threads(cfg.threads)
    (check_device, check_reason), untimed = triton_check_device(), triton_untimed_reason(cfg.device)
    checked = DIRECT_CHECK.run(cfg, store_dir, progress=progress, skip=lambda network: check_reason, settings=dict(
        check_device=check_device, check_batch=DIRECT_CHECK_BATCH, threads=threads))

    def timed_rounds(n: int, level: float) -> pd.DataFrame:  # rounds 0..n-1 (the stored ones read back)
        try:
            timed = TIMED.run(cfg, store_dir, progress=progress,
                              points=in_rounds(cfg.networks, [*cfg.strategies, CONTROL], range(n)),
                              settings=dict(threads=threads, data_source=DATA_SOURCE, max_repeats=MAX_REPEATS),
                              skip=lambda round, network, strategy: untimed[1] if strategy == "direct" and untimed
                              else None)
        finally:
            _PREPARED.clear()  # the last network's models
        return add_speedups(combine_rounds(timed, ["network", "strategy"])).assign(confidence=level)

    judged = [d for d in CLAIMS if d.test.kind != "same"]  # the A/A control stays undecided: it asks for no rounds
    runs = until_decided(timed_rounds, lambda r: claims.decided(claims.check(judged, r, cfg.device)),
                         min_rounds=cfg.min_rounds, max_rounds=cfg.max_rounds, budget_s=cfg.round_budget_s)
    speedups = runs.pivot_table(index="network", columns="strategy", values="speedup_vs_gemm", sort=False)
    speedups = speedups.reindex(columns=[s for s in cfg.strategies if s in speedups.columns]).round(2)
    opt = runs[runs["strategy"] == "opt"].set_index("network")["speedup_vs_native"]
    speedups["opt_vs_native"] = speedups.index.map(opt).astype(float).round(2)
    speedups["paper_opt"] = speedups.index.map({n: text for n, (_, text) in PAPER_OPT_SPEEDUP.items()})
    return studies.combine(networks=networks_table(cfg.networks, vgg_model=cfg.vgg_model,
                                                   vgg_image_size=cfg.vgg_image_size),
                           direct_check=checked, strategies=runs, speedups=speedups.reset_index())


def add_speedups(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with speedup_vs_gemm = gemm's median time / this strategy's on the network (1.0 for gemm),
    speedup_p10/_p90 (from its p90 and p10 times), speedup_missing_reason where NaN, and speedup_vs_native (native's
    median time / this one's, NaN where native was not measured), by :func:`cnnlab.profiling.derived.against`."""
    out = runs.copy()
    for col, base in (("speedup_vs_native", "native"), ("speedup_vs_gemm", BASELINE)):
        out[col] = derived.against(out, "latency_ms_median", {"strategy": base}, by=["network"], how="speedup")
    ref = out["speedup_vs_gemm"] * out["latency_ms_median"].astype(float)  # gemm's median time on the network
    out["speedup_p10"] = [derived.speedup(r, t) for r, t in zip(ref, out["latency_ms_p90"])]
    out["speedup_p90"] = [derived.speedup(r, t) for r, t in zip(ref, out["latency_ms_p10"])]
    out["speedup_missing_reason"] = [None if not math.isnan(r.speedup_vs_gemm) else f"the {BASELINE} baseline of "
                                     f"{r.network} was not measured" if r.status == "ok" else getattr(r, "error", None)
                                     or f"not measured (status {r.status})" for r in out.itertuples()]
    return out


def identical_kernels(df: pd.DataFrame) -> pd.DataFrame:
    """The noise rule's controls, points that ran the same kernels (per network :data:`CONTROL` against gemm, and best
    where it picked one kernel for every layer): network, strategy, kernel, ratio (time / the kernel's, the median
    of the rounds' ratios), low, high (its interval: the sign test's, at the rows' confidence), rounds, within_noise
    (inconclusive against 1, as it must be; False: the rule failed)."""
    runs = df[df["experiment"] == "strategies"] if "experiment" in df else df
    times, rows = _grid(runs)[0], []
    best = runs[(runs["strategy"] == "best") & (runs["status"] == "ok")]
    choices = zip(best["network"], best.get("best_choices", [None] * len(best)))  # "gemm x3, fft x2"
    picks = {n: {part.rsplit(" x", 1)[0] for part in c.split(", ")} for n, c in choices if isinstance(c, str)}
    picked = {n: p.pop() for n, p in picks.items() if len(p) == 1}
    for network, by in times.items():
        for strategy, kernel in ((CONTROL, BASELINE), ("best", picked.get(network))):
            if strategy in by and kernel in by:
                ratio = by[strategy] / by[kernel]
                rows.append({"network": network, "strategy": strategy, "kernel": kernel, "ratio": ratio.value,
                             "low": ratio.low, "high": ratio.high, "rounds": getattr(ratio, "rounds", None),
                             "within_noise": claims.judge(ratio, ">", 1.0)[0] == claims.INCONCLUSIVE})
    return pd.DataFrame(rows, columns=["network", "strategy", "kernel", "ratio", "low", "high", "rounds",
                                       "within_noise"])


def paper_reference() -> pd.DataFrame:
    """The speed-ups paper 001 reports for Opt (Sec. IV-E): network, strategy ("opt"), paper_strategy ("Opt"),
    paper_speedup (x over cuDNN-MM), paper_text (as the paper words it), approximate (True for "roughly")."""
    return pd.DataFrame([{"network": n, "strategy": "opt", "paper_strategy": PAPER_NAMES["opt"], "paper_speedup": v,
                          "paper_text": text, "approximate": text.startswith("roughly")}
                         for n, (v, text) in PAPER_OPT_SPEEDUP.items()])


def _grid(runs: pd.DataFrame):
    """(network -> strategy -> its time per batch round by round (:class:`Paired`: two strategies of a network pair
    within each round), networks with gemm timed, strategies timed on all, a note)."""
    times: dict[str, dict[str, Spread]] = {}
    ok = runs[runs["status"] == "ok"]
    for row in ok.dropna(subset=[c for c in ("latency_ms_median", "round_medians_ms") if c in ok]).to_dict("records"):
        times.setdefault(row["network"], {})[row["strategy"]] = Paired.of_rounds(row)
    networks = [n for n in dict.fromkeys(runs["network"]) if n in times and BASELINE in times[n]]
    measured = set.intersection(*(set(times[n]) for n in networks)) if networks else set()
    missing = sorted(set(runs.loc[runs["status"] != "ok", "strategy"]))
    return times, networks, measured, f"not measured here: {', '.join(missing)}" if missing else ""


def _fastest(times: dict, network: str, among) -> str:  # by median, to name it; the verdicts compare intervals
    return min(among, key=lambda s: times[network][s].value)


_FASTER = above(1.0, ".2f", "x")  # a time / another's > 1: the other is faster


def _winner(runs: pd.DataFrame):
    times, networks, measured, left_out = _grid(runs)
    if len(networks) < 2 or len(singles := [s for s in SINGLE_KERNELS if s in measured]) < 2:
        return "needs two networks and two single-kernel strategies measured"
    return claims.Measured({k: {f"{n} {k} / {j}": times[n][k] / times[n][j] for n in networks for j in singles
                                if j != k} for k in singles}, ", ".join(
        f"{n}: {_fastest(times, n, singles)}" for n in networks) + " (fastest single kernel by median)", left_out)


# The pattern: direct (cnnlab's Triton direct convolution) stands for cuda-convnet, which tops LeNet and CIFAR; gemm /
# fft / fft_tiled for cuDNN's MM / FFT / FFT-T modes, which win on the other networks.
def _pattern(runs: pd.DataFrame):  # gemm, a cuDNN mode, is timed wherever a network is
    times, networks, measured, left_out = _grid(runs)
    cudnn = [s for s in ("gemm", "fft", "fft_tiled") if s in measured]  # the paper's loser's time / its winner's:
    r = {f"{n} {a} / {b}": times[n][a] / times[n][b] for n in networks if "direct" in measured for top in [
         _fastest(times, n, cudnn)] for a, b in [(top, "direct") if n in ("LeNet", "CIFAR") else ("direct", top)]}
    return claims.Measured(r) if r else "direct (cuda-convnet), to set against cuDNN's modes, not measured" + (
        f": {TRITON_CPU_REASON}" if "direct" in left_out else "")


def _narrows(runs: pd.DataFrame):  # gemm, a single kernel, is timed wherever a network is
    times, networks, measured, left_out = _grid(runs)
    r = {f"{n} best vs {top}": times[n][top] / times[n]["best"] for n in networks for top in [
        _fastest(times, n, [s for s in SINGLE_KERNELS if s in measured])]} if "best" in measured else {}
    one = ", ".join(sorted(set(identical_kernels(runs).query("strategy == 'best'")["network"])))
    why = one and f"best picked one kernel for every layer on {one}: it ran that kernel, so no narrowing can show there"
    return claims.Measured(r, note=claims.joined(left_out, why)) if r else "best not measured"


def _versus(a: str, b: str, runs: pd.DataFrame):
    times, networks, measured, left_out = _grid(runs)
    r = {f"{n} {a} / {b}": times[n][a] / times[n][b] for n in networks} if {a, b} <= measured else {}
    return claims.Measured(r, note=claims.joined(left_out, _rounds_said(r.values()))) if r else \
        f"{a} or {b} not measured"


def _rounds_said(ratios) -> str:
    """"paired rounds: 12 at 98.75% each" (the rounds of ``ratios``, :class:`Paired`, and each interval's level)."""
    paired = [x for x in ratios if isinstance(x, Paired)]
    if not paired:
        return ""
    fewest, most = min(x.rounds for x in paired), max(x.rounds for x in paired)
    return f"paired rounds: {fewest if fewest == most else f'{fewest}-{most}'} at " \
           f"{min(x.confidence for x in paired):.2%} each"


def _magnitude(runs: pd.DataFrame):
    times, networks, measured, _ = _grid(runs)
    on = [n for n in PAPER_OPT_SPEEDUP if n in networks] if "opt" in measured else []
    x = {n: {s: times[n][s] / times[n]["opt"] for s in (BASELINE, "native") if s in measured} for n in on}
    return claims.Measured({"shown": {n: by[BASELINE] for n, by in x.items()}}, ", ".join(f"{n} " + ", ".join(
        f"opt / {s} {r.text('.2f', 'x')}" for s, r in by.items()) + f" (paper {PAPER_OPT_SPEEDUP[n][1]})"
        for n, by in x.items())) if on else "opt not measured on LeNet, AlexNet, ZFNet or VGG"


# What the CPU does not have (issue 43, item 1): the paper's claims about kernels are about cuDNN's modes and
# cuda-convnet on a GPU. cnnlab's gemm, fft and fft_tiled stand in for cuDNN's MM, FFT and FFT-T as the same
# algorithms on the same GPU, and its Triton direct kernel for cuda-convnet; on a CPU they run as CPU code.
STAND_INS = ("cnnlab's gemm (im2col + matmul), fft and fft_tiled (torch.fft) stand in for cuDNN's MM, FFT and FFT-T "
             "modes, and its Triton direct kernel for cuda-convnet: on a GPU the same algorithms on the same kind of "
             "chip; on a CPU they run as CPU code (a BLAS matmul, a CPU FFT) and direct is not timed, so which of them "
             "wins here says nothing of cuDNN's strategies")
# "Best narrows the gap", settled by design: best times every candidate kernel on each layer and runs the fastest.
BEST_BY_DESIGN = ("not judged: settled by design: best times each candidate kernel on each layer once and runs the "
                  "fastest, so where it picked one kernel for every layer it runs exactly that kernel (the ratio is 1 "
                  "by construction: identical work, as in the control), and elsewhere each of its layers is the "
                  "fastest by that one timing; the values are shown")

CLAIMS = [  # Sec. IV-E, "Key Observations"
    Declared("no single kernel wins everywhere", '"No single kernel wins everywhere." (Sec. IV-E)', "a single kernel's "
             "time per batch / another's on one network", above(1.0, ".2f", "x", once=True), _winner, each="single "
             "kernel measured", bound="did not hold when one is clearly faster than every other on every network",
             gpu_only=STAND_INS),
    Declared("cuda-convnet (direct) tops LeNet and CIFAR, cuDNN's modes win on AlexNet, ZFNet and VGG", '"cuda-convnet '
             'tops the tiny LeNet and CIFAR models, whereas cuDNN variants gain the edge once the networks scale up" '
             "(Sec. IV-E)", "the paper's loser's time / its winner's, direct against the fastest of gemm, fft, "
             "fft_tiled (cuDNN's MM, FFT, FFT-T)", _FASTER, _pattern, each="network of these measured",
             gpu_only=STAND_INS),
    Declared("best (per-layer pick) narrows the gap to the fastest kernel", '"cuDNN-Best-which cherry-picks the '
             'fastest kernel per layer-narrows the gap" (Sec. IV-E)', "the fastest single kernel's time / best's",
             _FASTER, _narrows, each="network", not_judged=BEST_BY_DESIGN),
    Declared("best still trails opt", '"but still trails Opt." (Sec. IV-E)', "best's time / opt's", _FASTER,
             partial(_versus, "best", "opt"), not_judged="not judged: best picks among cnnlab's PyTorch-level "
             "kernels, opt runs the vendor's convolution; opt against native, like for like, is judged"),
    Declared("opt is the fastest strategy on every network", '"Opt delivers the highest throughput across the board" '
             "(Sec. IV-E)", "native's time / opt's", _FASTER, partial(_versus, "native", "opt"), each="network",
             bound="the like-for-like comparison, the vendor's convolution with Opt's memory measures (channels_last, "
             "BatchNorm folded, autotuning) and without"),
    Declared("opt's speed-up over gemm has the paper's magnitude", '"5.6x on LeNet and roughly 2x on AlexNet, ZFNet, '
             'and VGG" (Sec. IV-E)', "opt / gemm and opt / native beside the paper's Opt / cuDNN-MM", _FASTER,
             _magnitude, not_judged="not judged: the paper's baseline, cuDNN-MM, is a cuDNN mode PyTorch cannot "
             "select, and neither native nor gemm (a PyTorch-level GEMM) is it"),
    Declared("control (beyond the paper): gemm timed again, the same work, is within noise of gemm", "none: a control "
             "of the noise rule, not a claim of the paper", f"{CONTROL} / {BASELINE} time", same(1.0, ".2f", "x"),
             partial(_versus, CONTROL, BASELINE), each="network", bound="decided, the noise rule failed its control",
             beyond=True)]


check_claims = claims.checker(CLAIMS, rows=lambda df: df[df["experiment"] == "strategies"])  # Sec. IV-E
