"""The README's "What it found" and "How long a run takes" tables, drawn from two sets of results.

    python docs/findings_table.py                      # both tables, from docs/findings/ (what the README shows)
    python docs/findings_table.py --cpu build/test-figures --gpu figures/reference/nvidia-h100-80gb-hbm3

A results folder holds one folder per notebook, named as the notebook (``02_fp16``) or as its study (``fp16``;
:data:`cnnlab.studies.STUDIES` maps one to the other), each with the ``claims.csv`` and ``environment.json`` that
``cnnlab.studies.save`` writes, and the study's tables (its CSVs). The verdicts are this checkout's: each study's
``check_claims`` judges the stored tables again (``cnnlab.studies.read``) on the device claims.csv names (its GPU,
if any), so the table shows what today's declarations say of those measurements; a folder without the tables gives
claims.csv's ``held`` column. Verdicts are in the workbook's words (``cnnlab.claims.VERDICTS``): held, did not
hold, inconclusive, n/a. Claims are matched on their text; a claim only one run has gets "—" in the other's column.
A notebook the GPU run has no claims.csv for says why from ``studies.txt`` (the driver's lines of that run:
"=== study", "--- study: rc=... in N s", "[study] measured in N s"), where there is one.

Times: the CPU column is each environment.json's ``run`` record (``expected_s``, printed before the run, and
``measured_s``); the GPU column is the driver's: the whole process (imports included) and, where the study printed
it, its measurement alone. Nothing here is typed by hand: tests/test_readme.py holds the README to this output.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from cnnlab import claims, studies  # noqa: E402
from cnnlab.studies import STUDIES  # noqa: E402  (the checkout's cnnlab, not an installed one)

CPU = ROOT / "docs" / "findings" / "cpu-47358f6"
GPU = ROOT / "docs" / "findings" / "h100-16352c7"
VERDICT = {**{k: v.word for k, v in claims.STORED.items()}, "": "n/a"}  # the workbook's words
NOTEBOOKS = [f"{i:02d}_{s}" for i, s in enumerate(STUDIES)]
# The name each notebook saves its tables under (``studies.save(..., name=...)``) where it is not the study's own
# (the first GPU run, without notebooks, saved every study under its own name)
SAVED_AS = {"fp16": "precision", "lstm_pruning": "lstm", "vgg_quantization": "vgg", "validation_li2016": "li2016"}


def folder(results: Path, notebook: str) -> Path | None:
    """``results/02_fp16`` or ``results/fp16``, whichever holds a claims.csv."""
    for name in (notebook, notebook.split("_", 1)[1]):
        if (results / name / "claims.csv").exists():
            return results / name
    return None


def verdicts(results: Path, notebook: str) -> dict[str, str] | None:
    """{claim: verdict} of one notebook's results, in its claims' order: this checkout's ``check_claims`` on the
    stored tables, or claims.csv's verdicts where the tables are not there; None where there is no claims.csv."""
    where = folder(results, notebook)
    if where is None:
        return None
    df = pd.read_csv(where / "claims.csv", keep_default_na=False)  # "n/a" is a verdict, not a missing value
    study = notebook.split("_", 1)[1]
    for name in filter(None, (study, SAVED_AS.get(study))):
        try:
            tables = studies.read(where, name)
        except FileNotFoundError:
            continue
        devices = [str(d) for d in df["device"]]  # a GPU run's int8 claims are judged on its CPU: the GPU's
        device = next((d for d in devices if d.startswith("cuda")), devices[0])
        judged = studies.load(study).check_claims(tables, device)
        return {c.claim: claims.VERDICTS[c.held].word for c in judged}
    return {c: VERDICT.get(str(h).strip().lower(), str(h)) for c, h in zip(df["claim"], df["held"])}


def driver_log(results: Path) -> dict[str, dict]:
    """{study: {"limit_s", "rc", "process_s", "measured_s", "statuses"}} from results/studies.txt; a study run
    twice keeps its last run."""
    path = results / "studies.txt"
    runs: dict[str, dict] = {}
    if not path.exists():
        return runs
    study = None
    for line in path.read_text().splitlines():
        if m := re.match(r"=== (\w+) \(\w+, limit (\d+) s\)", line):
            study = m[1]
            runs[study] = {"limit_s": int(m[2])}
        elif m := re.match(r"--- (\w+): rc=(\w+) in (\d+) s", line):
            runs[m[1]].update(rc=m[2], process_s=int(m[3]))
        elif m := re.match(r"\[(\w+)\] measured in (\d+) s", line):
            runs[m[1]]["measured_s"] = int(m[2])
        elif m := re.match(r"\[(\w+)\] statuses: (\{.*\})", line):
            runs[m[1]]["statuses"] = m[2]
    return runs


def why_none(run: dict | None) -> str:
    if run is None:
        return "not run"
    if run.get("rc") == "TIMEOUT":
        return f"not run (stopped at its {run['limit_s']} s limit)"
    if run.get("rc") not in (None, "0"):
        return "not run (crashed)"
    return "not run"


def findings(cpu: Path = CPU, gpu: Path = GPU) -> str:
    """Markdown: one row per claim, the notebook named on its first row (and why the GPU run has none)."""
    log = driver_log(gpu)
    lines = ["| notebook | claim | this CPU | H100 (first run) |", "| --- | --- | --- | --- |"]
    for nb in NOTEBOOKS:
        here, there = verdicts(cpu, nb), verdicts(gpu, nb)
        claims = list(here or {}) + [c for c in (there or {}) if c not in (here or {})]
        for i, claim in enumerate(claims):
            a = "—" if here is None or claim not in here else here[claim]
            b = ((why_none(log.get(nb.split("_", 1)[1])) if i == 0 else "not run") if there is None
                 else "—" if claim not in there else there[claim])
            lines.append(f"| {nb if i == 0 else ''} | {claim.replace('|', '/')} | {a} | {b} |")
    return "\n".join(lines)


def _s(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def times(cpu: Path = CPU, gpu: Path = GPU) -> str:
    """Markdown: per notebook, the CPU run's estimate and measurement, and the GPU run's process and measure times."""
    log = driver_log(gpu)
    lines = ["| notebook | CPU: estimate | CPU: measured | H100 (first run): process / measurement |",
             "| --- | --- | --- | --- |"]
    for nb in NOTEBOOKS:
        where = folder(cpu, nb)
        run = json.loads((where / "environment.json").read_text()).get("run", {}) if where else {}
        est, got = run.get("expected_s"), run.get("measured_s")
        a = _s(est) if est else "—"
        b = f"{_s(got)} ({got / est:.2f}x)" if est and got else "—"
        g = log.get(nb.split("_", 1)[1])
        if g is None:
            c = "not run"
        elif g.get("rc") == "TIMEOUT":
            c = f"over {g['process_s']} s (stopped at its limit)"
        else:
            c = f"{g['process_s']} s" + (f" / {g['measured_s']} s" if "measured_s" in g else "")
            c += "" if g.get("rc") == "0" else " (crashed)"
            points = ast.literal_eval(g.get("statuses", "{}"))
            c += f"; {points['skipped']} of {sum(points.values())} points skipped" if "skipped" in points else ""
        lines.append(f"| {nb} | {a} | {b} | {c} |")
    return "\n".join(lines)


def source(results: Path) -> str:
    """One line: the machine, commit, preset and dates the environment.json files of a results folder record."""
    envs = [json.loads((f / "environment.json").read_text())
            for f in filter(None, (folder(results, nb) for nb in NOTEBOOKS)) if (f / "environment.json").exists()]
    if not envs:
        return "no environment.json"
    e = envs[0]
    machine = e.get("gpu_names") and e["gpu_names"][0] or f"{e.get('cpu_model')}, {e.get('cpu_cores_logical')} cores"
    commits = sorted({(x.get("git_commit") or "?")[:7] for x in envs})
    dates = sorted(x.get("date_utc", "")[:16].replace("T", " ") for x in envs)
    return (f"{machine}; torch {e.get('torch_version')}; environment.json's git_commit {', '.join(commits)}; "
            f"results written {dates[0]} to {dates[-1]} UTC")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", type=Path, default=CPU, help="the CPU run's results folder (default: %(default)s)")
    p.add_argument("--gpu", type=Path, default=GPU, help="the GPU run's results folder (default: %(default)s)")
    p.add_argument("--table", choices=("findings", "times", "sources"), action="append",
                   help="print only this table (repeatable; default: all three)")
    a = p.parse_args(argv)
    parts = {"findings": lambda: findings(a.cpu, a.gpu), "times": lambda: times(a.cpu, a.gpu),
             "sources": lambda: f"- CPU: {source(a.cpu)}\n- GPU: {source(a.gpu)}"}
    print("\n\n".join(parts[t]() for t in (a.table or ["findings", "times", "sources"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
