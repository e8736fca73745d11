"""The A/A test's child process (tests/test_rounds.py): times the same work, a 256x256 matmul on one thread, as two
configurations "A" and "B" in ``rounds`` interleaved rounds (A, B, A, B, as a study's grid is timed), ``trials``
times over, with ``cnnlab.profiling.benchmark``; prints the rows (trial, round, config and benchmark's latency
columns) as JSON on stdout.

    python tests/same_work.py TRIALS ROUNDS [REPEATS]   (timed batches per round, at least; default 20)
"""

import json
import sys

import torch

from cnnlab.profiling import benchmark

COLUMNS = ("latency_ms_median", "latency_ms_p10", "latency_ms_p90", "repeats")
ROUND_S = 0.012  # seconds of timed batches a round, at least (20 batches of 0.6 ms on the 2-core AMD EPYC)


def main(trials: int, rounds: int, repeats: int = 20) -> list[dict]:
    torch.set_num_threads(1)
    a, b = torch.randn(256, 256, generator=torch.Generator().manual_seed(0)), torch.randn(256, 256)
    rows = []
    for trial in range(trials):
        for r in range(rounds):
            for config in "AB":
                # at least ROUND_S of batches on any CPU: a round much shorter than a scheduler's time slice would
                # make one preemption its median
                m = benchmark(torch.mm, (a, b), device="cpu", warmup=1, repeats=repeats, min_run_time_s=ROUND_S,
                              measure_memory=False).as_row()
                rows.append({"trial": trial, "round": r, "config": config, "status": "ok",
                             **{k: m[k] for k in COLUMNS}})
    return rows


if __name__ == "__main__":
    print(json.dumps(main(*(int(a) for a in sys.argv[1:4]))))
