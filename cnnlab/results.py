"""What a study's results go through once measured (:mod:`cnnlab.contract`): its experiments combined into one
tidy frame and split again (:func:`combine`, :func:`tables`), a second pass's columns put beside the first's
(:func:`beside`), the checks every study's results must pass (:func:`check_results`), and the files a notebook
saves and reads back (:func:`save`, :func:`read`)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

STATUSES = ("ok", "skipped", "oom", "error", "killed")


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


def beside(rows: pd.DataFrame, other: pd.DataFrame, keys: list[str], prefix: str, what: str) -> pd.DataFrame:
    """``rows`` with ``other``'s columns named ``prefix*`` of the same point (equal ``keys``) beside them, for a
    point measured in two passes: its timing, then what runs under the profiler, in a sweep of its own after every
    timing (a CUDA profile may slow the launches timed after it: ``cnnlab.profiling.cupti``). Where ``other``'s
    point failed or was skipped, its columns are NaN and ``<prefix>missing_reason`` says "<what> <status>: <error>"
    (on a row that was measured: where the row itself failed or was skipped, its own status and error say why)."""
    other = other.copy()
    reason = f"{prefix}missing_reason"
    other[reason] = pd.Series(other[reason] if reason in other else None, index=other.index, dtype=object)
    if "status" in other:
        bad = other["status"] != "ok"
        error = other["error"].astype(str).str[:200] if "error" in other else ""
        other.loc[bad, reason] = (f"{what} " + other["status"].astype(str) + ": " + error)[bad]
    columns = [c for c in other.columns if c.startswith(prefix)]
    out = rows.drop(columns=[c for c in columns if c in rows]).merge(other[keys + columns], on=keys, how="left")
    if "status" in out:
        out.loc[out["status"] != "ok", reason] = None
    return out


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
    notebook's main figure in ``make report``), and ``run_id``, new at each save and printed, so that ``make report``
    tells the executed notebook that wrote these results from another run by content, not by file dates. Returns the
    claims table.

    Each file is written whole or not at all (:func:`cnnlab.plotting.write_atomic`): on a full disk the earlier
    results stay and an OSError names the file and the free space."""
    import json
    import uuid

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
    record = {**(environment() if env is None else env), "figures": list(figs), "run_id": uuid.uuid4().hex[:16]}
    if "run" in df.attrs:  # the preset, settings and times of the measurement (:func:`cnnlab.contract.measurement`)
        record["run"] = df.attrs["run"]
        if record["run"].get("preset"):  # the preset it measured with, however it was chosen (a notebook's cell)
            record["preset"] = record["run"]["preset"]
            record.pop("preset_missing_reason", None)
    text = json.dumps(record, indent=1, default=str) + "\n"
    plotting.write_atomic(out / "environment.json", lambda tmp: tmp.write_text(text))
    print(f"[cnnlab] results saved in {out} (run id {record['run_id']})", flush=True)
    return table


def read(out: Path, name: str) -> pd.DataFrame:
    """The frame :func:`save` wrote into ``out`` under ``name``, back from its CSVs (``<name>_<experiment>.csv``, or
    ``<name>.csv`` for one part), for judging a finished run again: ``study.check_claims(read(out, name), device)``.
    Experiments come back in the order of their names. FileNotFoundError naming ``out`` and ``name`` if none is
    there."""
    parts = {("results" if f.stem == name else f.stem[len(name) + 1:]): pd.read_csv(f)
             for f in sorted(Path(out).glob(f"{name}*.csv")) if f.stem == name or f.stem.startswith(name + "_")}
    if not parts:
        raise FileNotFoundError(f"no results named {name!r} in {out} (studies.save writes <name>_<experiment>.csv)")
    return parts["results"] if list(parts) == ["results"] else combine(**parts)


def check_results(df: pd.DataFrame, cfg=None) -> str:
    """Checks every study's results must pass on any hardware (a notebook's last cell); AssertionError saying which
    failed.

    Status values are known ones; every point that was not measured says why (``error``); a point's
    latency percentiles are ordered (p10 <= median <= p90); no measured time, throughput or memory is
    negative or infinite; a GPU's utilisation is never invented where the study ran on a CPU (``cfg.device``) and
    a utilisation that is missing says why (``gpu_util_missing_reason``). Returns a one-line summary (rows per
    status).
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
    for name, part in tables(df).items() if "gpu_util_pct" in df.columns else ():
        util = [c for c in part.columns if c.startswith("gpu_util_pct")]
        if cfg is not None and not str(cfg.device).startswith("cuda"):
            assert part[util].isna().all().all(), f"{name}: GPU utilisation recorded for a run on a CPU"
        if util and "gpu_util_missing_reason" in part.columns:
            rows = part[part["gpu_util_pct"].isna() & (part["status"] == "ok" if "status" in part.columns else True)]
            assert rows["gpu_util_missing_reason"].notna().all(), f"{name}: a missing GPU utilisation must say why"
    counts = df["status"].value_counts().to_dict() if "status" in df.columns else {"rows": len(df)}
    return "results checked: " + ", ".join(f"{n} {k}" for k, n in counts.items())


__all__ = ["STATUSES", "beside", "check_results", "combine", "read", "save", "tables"]
