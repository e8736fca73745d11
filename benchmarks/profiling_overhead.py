"""Overhead of cnnlab.profiling.benchmark against a bare timed loop of the same forward passes.

    .venv/bin/python benchmarks/profiling_overhead.py [--batch-size 64] [--repeats 15] [--rounds 7] [--threads N]

ResNet-20 (CIFAR, He et al. 2016) on a batch of 64 on the CPU, as issue 3 asks. Both sides run
the same model on the same tensor, interleaved round by round so that a change in machine load
hits both alike. Printed, as ratios (goal <= 1.03):

- timed loop: benchmark's ``total_time_s`` for ``repeats`` batches vs a bare ``perf_counter`` loop
  of ``repeats`` forward passes (the instrumentation inside the loop: per-batch clocks, contexts);
- whole call: wall time of ``benchmark(..., measure_memory=False)`` (warm-up, setup, statistics)
  vs a bare loop of ``warmup + repeats`` passes;
- whole call + memory pass: the same with ``measure_memory=True``, which runs one more forward pass
  under the profiler (CPU peak memory), so it costs about 1/(warmup+repeats) plus the profiler's
  overhead, by design outside the timed loop.

Each is printed as the median of per-round ratios and as the ratio of the fastest rounds (the ones
least disturbed by other processes, as ``timeit`` recommends). The goal applies to the timed loop.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without `pip install -e .`

import cnnlab  # noqa: E402,F401  (first: torchvision shim)
import torch  # noqa: E402

from cnnlab.profiling import benchmark  # noqa: E402


def resnet20() -> torch.nn.Module:
    try:
        from cnnlab import models

        return models.get("resnet20")
    except (ImportError, AttributeError, ValueError) as exc:
        print(f"cnnlab.models.get('resnet20') unavailable ({exc}); falling back to torchvision resnet18 "
              "with a 32x32 input: the overhead ratio is still meaningful, the model is not ResNet-20")
        import torchvision

        return torchvision.models.resnet18(num_classes=10)


def bare_loop(model, x, passes: int) -> float:
    """Seconds for ``passes`` forward passes, nothing else."""
    with torch.inference_mode():
        start = time.perf_counter()
        for _ in range(passes):
            model(x)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    model = resnet20().eval()
    x = torch.randn(args.batch_size, 3, 32, 32)
    bare_loop(model, x, args.warmup)  # first-call costs (oneDNN primitive creation) outside every measurement

    def timed_bench(measure_memory: bool) -> tuple[float, float]:
        start = time.perf_counter()
        m = benchmark(model, x, device="cpu", warmup=args.warmup, repeats=args.repeats, measure_memory=measure_memory)
        return time.perf_counter() - start, m.total_time_s

    samples: dict[str, list[float]] = {k: [] for k in ("loop_bare", "loop_bench", "call_bare", "call_bench", "call_mem")}
    for r in range(args.rounds):
        # alternate which side goes first so a drift in machine load does not favour one side
        order = ("bare", "bench", "mem") if r % 2 == 0 else ("mem", "bench", "bare")
        for side in order:
            if side == "bare":
                start = time.perf_counter()
                bare_loop(model, x, args.warmup)
                samples["loop_bare"].append(bare_loop(model, x, args.repeats))
                samples["call_bare"].append(time.perf_counter() - start)
            elif side == "bench":
                call, loop = timed_bench(measure_memory=False)
                samples["call_bench"].append(call)
                samples["loop_bench"].append(loop)
            else:
                samples["call_mem"].append(timed_bench(measure_memory=True)[0])

    def ratios(ours: str, bare: str) -> tuple[float, float]:
        per_round = statistics.median(o / b for o, b in zip(samples[ours], samples[bare]))
        return per_round, min(samples[ours]) / min(samples[bare])

    per_pass_ms = min(samples["loop_bare"]) / args.repeats * 1e3
    print(f"ResNet-20, batch {args.batch_size}, CPU ({torch.get_num_threads()} threads), {args.rounds} interleaved "
          f"rounds of {args.warmup} warm-up + {args.repeats} timed passes; fastest bare pass {per_pass_ms:.1f} ms")
    print("ratio = benchmark / bare loop  (median of per-round ratios | ratio of fastest rounds)")
    for label, ours, bare in (("timed loop", "loop_bench", "loop_bare"),
                              ("whole call", "call_bench", "call_bare"),
                              ("whole call + memory pass", "call_mem", "call_bare")):
        med, fastest = ratios(ours, bare)
        print(f"  {label:<25s} {med:.4f} | {fastest:.4f}")
    # The same instrumentation around a no-op "model": its cost per batch, free of the forward pass's noise.
    n = 20000
    noop = lambda t: t  # noqa: E731
    with torch.inference_mode():
        start = time.perf_counter()
        for _ in range(n):
            noop(x)
        bare_us = (time.perf_counter() - start) / n * 1e6
    bench_us = benchmark(noop, x, device="cpu", warmup=100, repeats=n, measure_memory=False).total_time_s / n * 1e6
    print(f"instrumentation per batch (no-op model, {n} calls): {bench_us - bare_us:.2f} us "
          f"= {(bench_us - bare_us) / 1e3 / per_pass_ms:.5%} of a ResNet-20 pass")
    med, fastest = ratios("loop_bench", "loop_bare")
    verdict = "within" if med <= 1.03 else "ABOVE"
    print(f"overhead ratio (timed loop, median of rounds) {med:.4f}: {verdict} the 3% goal")


if __name__ == "__main__":
    main()
