"""The studies: one module per notebook (``notebooks/NN_<name>.ipynb`` uses ``cnnlab.studies.<name>``), each
following one contract, so that every notebook reads the same way:

- ``PRESETS``: ``{"quick": {...}, "standard": {...}, "paper": {...}}``, every parameter of the study with its
  value in each preset (how big a run is: see :mod:`cnnlab.config`).
- ``configure(preset=None, **overrides) -> cfg``: the preset's parameters with the non-None ``overrides`` on
  top, validated before any work (ValueError naming the parameter and its valid values); ``cfg.preset`` and
  ``cfg.device`` (a resolved device name) are always set.
- ``measure(cfg, store_dir, progress=True) -> DataFrame``: every measurement of the study, as one tidy table
  (one row per measured point, units in column names). A study with several experiments builds it with
  :func:`combine`, which says in the ``experiment`` column which one a row belongs to (:func:`tables` splits them). Sweeps store their points under
  ``store_dir`` (None: nowhere) keyed by every setting, so an interrupted run resumes and another run never
  reads them.
- ``check_claims(df, device) -> list[Claim]``: the paper's claims judged on ``df``, each with its criterion.
- ``figures(df) -> dict[str, Figure]``: the study's figures, named as they are saved.

Notebooks call only these, :func:`check_parameters`, :func:`save`, :func:`check_results` and :mod:`cnnlab.plotting`/:mod:`cnnlab.claims`.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import math
from pathlib import Path
from types import ModuleType

import pandas as pd

CONTRACT = ("PRESETS", "configure", "measure", "check_claims", "figures")
STATUSES = ("ok", "skipped", "oom", "error", "killed")
STUDIES = ("quickstart", "batch_size", "fp16", "amp_amc", "tiling", "ddp_scaling", "lstm_pruning",
           "vgg_quantization", "validation_li2016")
# Which of the three papers (../shared/papers/README.md) each study reproduces.
PAPERS = {"001": "Towards Efficient CNN Inference: Memory Profiling and Optimization",
          "002": "Comparative Analysis of Runtime and Memory Optimization with ResNet152",
          "003": "HPML Project: VGG on CIFAR-10 and an LSTM on IMDB"}
STUDY_PAPER = {"quickstart": "001", "batch_size": "001", "fp16": "001", "amp_amc": "001", "tiling": "001",
               "ddp_scaling": "002", "lstm_pruning": "003", "vgg_quantization": "003", "validation_li2016": "001"}


def paper_of(notebook: str) -> str | None:
    """The paper (a key of :data:`PAPERS`) a notebook or its results folder reproduces: "01_batch_size" or
    "batch_size" -> "001"; None for a name that is not one of the studies."""
    return STUDY_PAPER.get(notebook.split("_", 1)[1] if notebook[:2].isdigit() and "_" in notebook else notebook)


def load(name: str) -> ModuleType:
    """The study module ``cnnlab.studies.<name>``, checked against the contract (ValueError naming what is
    missing)."""
    if name not in STUDIES:
        raise ValueError(f"study={name!r} is not known; valid studies: {', '.join(STUDIES)}")
    module = importlib.import_module(f"cnnlab.studies.{name}")
    missing = [n for n in CONTRACT if not hasattr(module, n)]
    if missing:
        raise ValueError(f"cnnlab.studies.{name} does not follow the study contract: no {', '.join(missing)}")
    return module


def check_parameters(namespace: dict, module: ModuleType) -> None:
    """Fail on a parameter papermill passed that the study does not have (``-p batchsize 4``: papermill itself
    only warns, and the run would go on with the preset). ``namespace`` is the notebook's ``globals()``: the
    cells papermill injected (they start with "# Parameters") are read from IPython's input history ``In``.
    ValueError naming the unknown names and the valid parameters; nothing to check outside papermill."""
    valid = set().union(*(set(p) for p in module.PRESETS.values())) | {"preset"}
    injected = set()
    for source in namespace.get("In") or []:
        if isinstance(source, str) and source.lstrip().startswith("# Parameters"):
            for node in ast.parse(source).body:
                if isinstance(node, ast.Assign):
                    injected |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    unknown = sorted(injected - valid)
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} passed to this notebook; valid parameters: "
                         f"{', '.join(sorted(valid))}")


def signature_problems(module: ModuleType) -> list[str]:
    """How ``module`` departs from the contract's names and signatures (empty when it follows it)."""
    problems = [f"no {n}" for n in CONTRACT if not hasattr(module, n)]
    if problems:
        return problems
    if not isinstance(module.PRESETS, dict) or set(module.PRESETS) != {"quick", "standard", "paper"}:
        problems.append("PRESETS must be a dict with the presets quick, standard, paper")
    expected = {"configure": ["preset"], "measure": ["cfg", "store_dir", "progress"],
                "check_claims": ["df", "device"], "figures": ["df"]}
    for name, params in expected.items():
        sig = inspect.signature(getattr(module, name))
        names = [p.name for p in sig.parameters.values() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        if names[: len(params)] != params:
            problems.append(f"{name}{sig}: expected parameters {params} first")
    conf = inspect.signature(module.configure).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in conf.values()):
        problems.append("configure must take the parameters as **overrides")
    return problems


def combine(**experiments: pd.DataFrame) -> pd.DataFrame:
    """One tidy frame from a study's experiments (``combine(timing=t, accuracy=a)``): their rows one after the
    other with an ``experiment`` column, and each experiment's own columns and dtypes recorded in ``df.attrs``,
    so that :func:`tables` gives every part back with exactly its columns (even those empty on this device) and
    its integer columns as integers (in the combined frame, the gaps other experiments leave make them floats)."""
    parts = [part.assign(experiment=name) for name, part in experiments.items() if len(part)]
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["experiment"])
    df.attrs["columns"] = {name: list(part.columns) for name, part in experiments.items()}
    df.attrs["dtypes"] = {name: {c: str(t) for c, t in part.dtypes.items()} for name, part in experiments.items()}
    return df


def tables(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``df`` split by its ``experiment`` column (``{"results": df}`` without one), each part without the
    ``experiment`` column and with its own columns only: those :func:`combine` recorded, else those not empty
    in it (and those empty everywhere, such as GPU utilisation on a CPU: their missing values are a result)."""
    if "experiment" not in df.columns:
        return {"results": df.reset_index(drop=True)}
    owned = df.attrs.get("columns", {})
    out = {}
    for name in dict.fromkeys(df["experiment"]):
        rows = df["experiment"] == name
        part = df[rows].drop(columns="experiment")
        if name in owned:
            part = part[[c for c in owned[name] if c in part.columns]].reset_index(drop=True)
            dtypes = df.attrs.get("dtypes", {}).get(name, {})
            ints = {c: t for c, t in dtypes.items() if c in part and (t.startswith(("int", "uint")) or t == "bool")}
            out[name] = part.astype(ints) if not part[list(ints)].isna().any().any() else part
            continue
        foreign = [c for c in part.columns if part[c].isna().all() and df.loc[~rows, c].notna().any()]
        out[name] = part.drop(columns=foreign).reset_index(drop=True)
    return out


def save(df: pd.DataFrame, figs: dict, checks: list, out: Path, *, name: str, env: dict | None = None) -> pd.DataFrame:
    """Write a study's results into ``out``: ``<name>_<experiment>.csv`` per experiment (``<name>.csv`` for a
    single one), each figure as PNG and SVG, ``claims.csv``, and ``environment.json``: ``env`` (default
    :func:`cnnlab.profiling.environment`) plus ``figures``, the figure names in ``figs``' order (the first is the
    notebook's main figure in ``make report``). Returns the claims table.

    Each file is written whole or not at all (:func:`cnnlab.plotting.write_atomic`): on a full disk the earlier
    results stay and an OSError names the file and the free space."""
    import json

    from cnnlab import claims, plotting
    from cnnlab.profiling import environment

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    parts = tables(df)
    for experiment, part in parts.items():
        stem = name if len(parts) == 1 and experiment == "results" else f"{name}_{experiment}"
        plotting.write_atomic(out / f"{stem}.csv", lambda tmp, part=part: part.to_csv(tmp, index=False))
    for fig_name, fig in figs.items():
        plotting.save_figure(fig, fig_name, out)
    table = claims.table(checks)
    plotting.write_atomic(out / "claims.csv", lambda tmp: table.to_csv(tmp, index=False))
    record = {**(environment() if env is None else env), "figures": list(figs)}
    text = json.dumps(record, indent=1, default=str) + "\n"
    plotting.write_atomic(out / "environment.json", lambda tmp: tmp.write_text(text))
    return table


def check_results(df: pd.DataFrame) -> str:
    """Checks every study's results must pass on any hardware; AssertionError saying which failed.

    Status values are known ones; every point that was not measured says why (``error``); a point's
    latency percentiles are ordered (p10 <= median <= p90); no measured time, throughput or memory is
    negative. Returns a one-line summary (rows per status).
    """
    if "status" in df.columns:
        unknown = set(df["status"].dropna()) - set(STATUSES)
        assert not unknown, f"unknown status values {sorted(unknown)}; valid: {', '.join(STATUSES)}"
        not_ok = df[df["status"].notna() & (df["status"] != "ok")]
        silent = not_ok[~not_ok["error"].map(lambda e: isinstance(e, str) and bool(e.strip()))] \
            if "error" in df.columns else not_ok
        assert silent.empty, f"{len(silent)} points not measured without a reason:\n{silent.head()}"
    cols = {"latency_ms_p10", "latency_ms_median", "latency_ms_p90"}
    if cols <= set(df.columns):
        ok = df[df[list(cols)].notna().all(axis=1)]
        bad = ok[(ok["latency_ms_p10"] > ok["latency_ms_median"]) | (ok["latency_ms_median"] > ok["latency_ms_p90"])]
        assert bad.empty, f"latency percentiles out of order in {len(bad)} rows:\n{bad.head()}"
    for col in df.columns:  # (a profiler's "self" memory is allocations minus frees: it may be negative)
        if col.endswith(("_ms", "_s", "_mib", "_items_per_s", "_ms_median", "_ms_mean")) and \
                not col.startswith("self_") and pd.api.types.is_numeric_dtype(df[col]):
            values = df[col].dropna()
            assert not (values < 0).any(), f"{col} has negative values"
            assert not values.map(lambda v: math.isinf(v)).any(), f"{col} has infinite values"
    counts = df["status"].value_counts().to_dict() if "status" in df.columns else {"rows": len(df)}
    return "results checked: " + ", ".join(f"{n} {k}" for k, n in counts.items())


__all__ = ["CONTRACT", "PAPERS", "STATUSES", "STUDIES", "STUDY_PAPER", "check_parameters", "check_results", "combine", "load", "paper_of", "save", "signature_problems",
           "tables"]
