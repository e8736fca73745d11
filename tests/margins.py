"""Value thresholds whose measured side depends on the CPU's kernel path (AMX, AVX-512, AVX2), on timing or on
training go through :func:`check`, so that an audit can read how close each one came on each path.

``check(name, value, op, limit)`` asserts ``value <op> limit``. When ``$CNNLAB_MARGINS`` names a file it also
appends one JSON line: the threshold's name, the value, the limit, the margin (how far the value is on the
passing side, in the value's units; negative when it failed) and the CPU capability and oneDNN ISA cap in force.
``make margins`` collects them on the default and the AVX2 path; ``python tests/margins.py FILE...`` prints the
smallest margin of each threshold on each path.
"""

from __future__ import annotations

import json
import math
import operator
import os

OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def check(name: str, value, op: str, limit: float, detail="") -> None:
    """Assert ``value <op> limit`` and record the margin when ``$CNNLAB_MARGINS`` is set.

    ``name`` identifies the threshold (the same for every call of one check); ``detail`` (a seed, a shape) goes
    into the failure message only.
    """
    if op not in OPS:
        raise ValueError(f"unknown comparison {op!r}; valid: {', '.join(OPS)}")
    value = float(value)
    margin = (limit - value) if op in ("<", "<=") else (value - limit)
    path = os.environ.get("CNNLAB_MARGINS")
    if path:
        import torch

        record = {"name": name, "value": value, "op": op, "limit": limit, "margin": margin,
                  "relative_margin": margin / abs(limit) if limit else math.inf,
                  "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                  "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "default")}
        with open(path, "a") as f:  # one short line per write: safe to append from several xdist workers
            f.write(json.dumps(record) + "\n")
    assert OPS[op](value, limit), f"{name}: {value!r} is not {op} {limit!r} (margin {margin:+.3g}) {detail}"


def summary(paths) -> str:
    """A table: per threshold and CPU path, how many checks ran, the worst value and its margin."""
    import pandas as pd

    rows = [json.loads(line) for path in paths for line in open(path) if line.strip()]
    if not rows:
        return "no margins recorded"
    df = pd.DataFrame(rows)
    df["path"] = df["cpu_capability"] + "/" + df["onednn_max_cpu_isa"]
    worst = df.loc[df.groupby(["name", "path"])["relative_margin"].idxmin()]
    worst = worst.assign(checks=df.groupby(["name", "path"]).size().reindex(
        pd.MultiIndex.from_frame(worst[["name", "path"]])).to_numpy())
    cols = ["name", "path", "checks", "value", "op", "limit", "margin", "relative_margin"]
    with pd.option_context("display.max_colwidth", 90, "display.width", 250):
        return worst[cols].sort_values(["relative_margin"]).to_string(index=False, float_format="{:.4g}".format)


if __name__ == "__main__":
    import sys

    print(summary(sys.argv[1:]))
