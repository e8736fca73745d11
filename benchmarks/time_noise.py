"""How far one process's time of some work lands from another process's time of the same work: the between-process
allowance an absolute time carries (``cnnlab.profiling.spread.TIME_NOISE``), measured with the method the studies
time with.

    .venv/bin/python benchmarks/time_noise.py [--trials 20] [--rounds 8]

Two processes run tests/same_work.py side by side (a 256x256 matmul on one thread, at least 12 ms of batches a round,
``cnnlab.profiling.benchmark``'s median per round), each ``--rounds`` rounds per trial; a process's time is the
median of its rounds' medians, as ``combine_rounds`` gives a point. Printed: the range of process 1's time over
process 2's over the trials, and the factor an allowance needs for every trial to overlap; and, as a reference, the
same ratio between two configurations of one process (what paired rounds compare, with no allowance).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def main(trials: int, rounds: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    child = [sys.executable, str(ROOT / "tests" / "same_work.py"), str(trials), str(rounds)]
    procs = [subprocess.Popen(child, stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    runs = [pd.DataFrame(json.loads(p.communicate()[0])) for p in procs]

    def time(run, trial, config):
        return run[(run.trial == trial) & (run.config == config)]["latency_ms_median"].median()
    between = np.array([time(runs[0], t, "A") / time(runs[1], t, "A") for t in range(trials)])
    within = np.array([time(runs[0], t, "A") / time(runs[0], t, "B") for t in range(trials)])
    return {"between": (between.min(), between.max(), max(between.max(), 1 / between.min())),
            "within": (within.min(), within.max(), max(within.max(), 1 / within.min()))}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    out = main(args.trials, args.rounds)
    for name, (low, high, factor) in out.items():
        print(f"{name} processes: {low:.3f}-{high:.3f} over {args.trials} trials; factor for all to overlap "
              f"{factor:.3f}" if name == "between" else
              f"within one process (A vs B): {low:.3f}-{high:.3f}; factor {factor:.3f}")
