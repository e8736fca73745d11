"""The rule's power on this machine: how often :func:`cnnlab.profiling.compare` decides identical work (A/A, it should
almost never) and 1.1x, 1.2x, 1.5x the work (A/B, it should, the right way), ``trials`` times each; work is a
256x256 matmul on one thread, repeated (10 of them against 11, 12, 15: about 6 ms a call on a 2-core AMD EPYC).

    python tests/power.py [TRIALS] [FACTOR ...]    (default: 20 trials of 1.0 1.1 1.2 1.5)

prints one line per factor: decided the right way, decided the wrong way, undecided, and the rounds taken.
"""

from __future__ import annotations

import sys

import torch

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
from cnnlab.profiling.compare import compare

BASE_MATMULS = 10
QUICK = dict(min_rounds=8, max_rounds=18)  # the quick preset's rounds (cnnlab.contract.MIN_ROUNDS, MAX_ROUNDS)


def work(matmuls: int, a: torch.Tensor, b: torch.Tensor):
    def call():
        for _ in range(matmuls):
            torch.mm(a, b)
    return call


def trial(factor: float, **rounds) -> tuple[str, int]:
    """One comparison of ``factor`` times the work against the base: ("right", "wrong" or "undecided", rounds). Both
    variants multiply the same two matrices, so that the A/A trial times the very same work twice."""
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    frame = compare({"A": work(BASE_MATMULS, a, b), "B": work(round(BASE_MATMULS * factor), a, b)}, "A",
                    **(rounds or QUICK))
    b = frame.loc["B"]
    truth = 1 if factor > 1 else (-1 if factor < 1 else 0)
    said = 1 if b["ratio_low"] > 1 else (-1 if b["ratio_high"] < 1 else 0)
    if said == 0:
        return "undecided", int(b["rounds"])
    return ("right" if said == truth else "wrong"), int(b["rounds"])


def counts(factor: float, trials: int = 20, **rounds) -> dict:
    """{"right": n, "wrong": n, "undecided": n, "rounds": [...]} over ``trials`` comparisons (identical work: every
    decision is "wrong")."""
    torch.set_num_threads(1)
    out = {"right": 0, "wrong": 0, "undecided": 0, "rounds": []}
    for _ in range(trials):
        verdict, n = trial(factor, **rounds)
        out[verdict] += 1
        out["rounds"].append(n)
    return out


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    for f in [float(a) for a in sys.argv[2:]] or [1.0, 1.1, 1.2, 1.5]:
        c = counts(f, n)
        print(f"{f:g}x: right {c['right']}, wrong {c['wrong']}, undecided {c['undecided']} of {n}; "
              f"rounds {min(c['rounds'])}-{max(c['rounds'])}, median {sorted(c['rounds'])[n // 2]}", flush=True)
