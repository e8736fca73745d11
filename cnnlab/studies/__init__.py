"""The studies: one module per notebook (``notebooks/NN_<name>.ipynb`` uses ``cnnlab.studies.<name>``), each
following one contract, so that every notebook reads the same way:

- ``PARAMETERS``: every parameter of the study, declared once (:class:`Parameters` of :class:`Parameter`: its value
  in each preset, its check, its unit, whether it is a grid axis). From it come ``configure``, the store settings
  (every declared parameter that is not a grid axis), the notebook's parameters cell (:meth:`Parameters.cell`,
  with type hints for ``papermill --help-notebook``) and the check of papermill's names (:func:`configure`).
- ``configure(preset=None, **overrides) -> cfg`` (``PARAMETERS.configure``): the preset's parameters with the
  non-None ``overrides`` on top, each checked before any work (ValueError naming the parameter and its valid
  values); ``cfg.preset`` is the resolved preset.
- ``measure(cfg, store_dir, progress=True) -> DataFrame``: every measurement of the study, as one tidy table
  (one row per measured point, units in column names). Its sweeps are :class:`Experiment` declarations (name,
  point function, the axes it sweeps; the settings it depends on are its point function's keyword-only
  parameters), run with :meth:`Experiment.run` into stores under ``store_dir`` (None: nowhere) named after the
  experiment and keyed by every setting, so an interrupted run resumes and another run never reads them;
  :func:`combine` puts the experiments into one frame (:func:`tables` splits them). It is decorated with
  :func:`measurement` (``@studies.measurement(plan)``): ``plan(cfg)`` lists the study's work, so that ``measure``
  says how long it expects to take before it starts, and it measures under the study's ``tf32`` setting.
- ``check_claims(df, device) -> list[Claim]``: the paper's claims judged on ``df``, each with its criterion.
- ``figures(df) -> dict[str, Figure]``: the study's figures, named as they are saved.

Notebooks call only these, :func:`configure`, :func:`save`, :func:`check_results`, :func:`cnnlab.report.show`
and :mod:`cnnlab.plotting`.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import importlib
import inspect
import math
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Mapping

import pandas as pd

CONTRACT = ("PARAMETERS", "configure", "measure", "check_claims", "figures")
STATUSES = ("ok", "skipped", "oom", "error", "killed")
STUDIES = ("quickstart", "batch_size", "fp16", "amp_amc", "tiling", "ddp_scaling", "lstm_pruning",
           "vgg_quantization", "validation_li2016")
# Which of the three papers (../shared/papers/README.md) each study reproduces.
PAPERS = {"001": "Towards Efficient CNN Inference: Memory Profiling and Optimization",
          "002": "Comparative Analysis of Runtime and Memory Optimization with ResNet152",
          "003": "HPML Project: VGG on CIFAR-10 and an LSTM on IMDB"}
STUDY_PAPER = {"quickstart": "001", "batch_size": "001", "fp16": "001", "amp_amc": "001", "tiling": "001",
               "ddp_scaling": "002", "lstm_pruning": "003", "vgg_quantization": "003", "validation_li2016": "001"}


# ------------------------------------------------------------------------------------------------ declarations

_SAME = object()  # a preset value not given: the one of the preset before it


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One parameter of a study, declared once: its value in each preset (``standard`` and ``paper`` default to the
    preset before them), its ``check`` (``check(value, parameter=name)`` returns the value to use or raises
    ValueError naming the parameter and its valid values), what it is (``doc``, with its unit), and whether it is a
    grid ``axis`` (its values are the points of a sweep; every other parameter is a setting that keys the stores).
    ``type`` is the type hint in the notebook's parameters cell (default: from the preset values)."""

    quick: Any
    standard: Any = _SAME
    paper: Any = _SAME
    check: Callable[..., Any] | None = None
    doc: str = ""
    axis: bool = False
    type: str = ""

    def values(self) -> dict[str, Any]:
        standard = self.quick if self.standard is _SAME else self.standard
        return {"quick": self.quick, "standard": standard,
                "paper": standard if self.paper is _SAME else self.paper}

    def hint(self) -> str:
        if self.type:
            return self.type
        for value in self.values().values():
            if isinstance(value, (list, tuple)) and value:
                return f"list[{type(value[0]).__name__}]"
            if value is not None:
                return type(value).__name__
        return "str"


def _threads(value, parameter: str):
    from cnnlab import config

    return config.threads(value, parameter)


def _boolean(value, parameter: str):
    from cnnlab import config

    return config.boolean(value, parameter=parameter)


def _device(value, parameter: str):
    from cnnlab import config

    return config.device_name(value, parameter)


# Parameters most studies have, declared once: the CPU threads a run measures with (quick pins one: CI runs two
# notebooks at once on two cores, and spin-waiting threads inflated small batches' times ~140x; cnnlab.config.threads),
# and the device.
THREADS = Parameter(1, None, check=_threads, type="int",
                    doc="intra-op CPU threads while measuring (None: torch's default)")
DEVICE = Parameter("auto", check=_device, doc="auto | cpu | cuda | cuda:N")
# TF32 (Ampere and newer GPUs: fp32 operands of matmuls and convolutions rounded to a 10-bit mantissa on tensor
# cores) set explicitly for the whole measurement, never left to torch's defaults (cuDNN on, cuBLAS off): fp32 then
# means IEEE fp32 everywhere. Recorded with the settings (stores, environment.json); no effect on a CPU.
TF32 = Parameter(False, check=_boolean, type="bool",
                 doc="TF32 for fp32 CUDA matmuls and cuDNN convolutions (Ampere and newer GPUs); False: IEEE fp32")


class Config(SimpleNamespace):
    """A study's configuration (``PARAMETERS.configure``): one attribute per declared parameter plus ``preset``."""

    _parameters: "Parameters"

    def settings(self, **extra) -> dict[str, Any]:
        """Every declared parameter that is not a grid axis, with its value here, plus ``extra`` (constants of the
        measurement, the thread count in use): what a store is keyed by."""
        declared = type(self)._parameters.declared
        return {**{n: getattr(self, n) for n, p in declared.items() if not p.axis}, **extra}


class Parameters:
    """The declared parameters of a study (``Parameters(models=Parameter(...), ...)``), and ``check(cfg)`` for what
    involves several of them (raise ValueError naming them; may set derived values)."""

    def __init__(self, check: Callable[[Config], None] | None = None, **declared: Parameter):
        for name, parameter in declared.items():
            if not isinstance(parameter, Parameter):
                raise TypeError(f"parameter {name!r} must be declared as a Parameter, got {parameter!r}")
        self.declared = declared
        self._check = check
        self._config = type("Config", (Config,), {"_parameters": self})

    @property
    def presets(self) -> dict[str, dict[str, Any]]:
        """``{"quick": {...}, "standard": {...}, "paper": {...}}``: every parameter's value in each preset."""
        values = {name: p.values() for name, p in self.declared.items()}
        return {preset: {name: v[preset] for name, v in values.items()} for preset in ("quick", "standard", "paper")}

    @property
    def axes(self) -> list[str]:
        return [name for name, p in self.declared.items() if p.axis]

    def configure(self, preset: str | None = None, **overrides) -> Config:
        """The preset's values with every non-None ``overrides`` value on top, each checked by its declaration
        (ValueError naming an unknown parameter and the valid ones, or a bad value and the valid values)."""
        from cnnlab import config

        values = config.configure(preset, self.presets, **overrides)
        cfg = self._config(**vars(values))
        for name, parameter in self.declared.items():
            if parameter.check is not None:
                setattr(cfg, name, parameter.check(getattr(cfg, name), parameter=name))
        if self._check is not None:
            self._check(cfg)
        return cfg

    def cell(self) -> str:
        """The notebook's parameters cell: ``name: type = None  # doc; quick: ...; paper: ...`` per parameter (None
        takes the preset's value), read by papermill (``papermill --help-notebook`` lists the types and the help)."""
        lines = ["preset: str = None  # quick | standard | paper | auto (None: $CNNLAB_PRESET, else auto)"]
        for name, p in self.declared.items():
            v = p.values()
            presets = "; ".join(f"{k}: {x!r}" for k, x in v.items()
                                if k == "quick" or x != (v["quick"] if k == "standard" else v["standard"]))
            lines.append(f"{name}: {p.hint()} = None  # {p.doc + '; ' if p.doc else ''}{presets}")
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One sweep of a study: ``point(**grid point, **settings)`` for every point of the grid spanned by ``axes``
    (point argument -> the parameter whose values it takes: ``{"batch_size": "batch_sizes"}``). The settings a point
    depends on are ``point``'s keyword-only parameters, taken from the configuration by name; ``desc`` labels the
    progress bar. Stored as ``<store_dir>/stores/sweep_<name>_<digest>.csv``."""

    name: str
    point: Callable[..., Any]
    axes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    desc: str = ""

    def bound(self, cfg: Config) -> dict[str, Any]:
        """The point function's settings, taken from ``cfg`` (its keyword-only parameters that ``cfg`` has)."""
        params = inspect.signature(self.point).parameters.values()
        return {p.name: getattr(cfg, p.name) for p in params if p.kind == p.KEYWORD_ONLY and hasattr(cfg, p.name)}

    def store(self, store_dir: str | Path | None) -> Path | None:
        return None if store_dir is None else Path(store_dir) / f"sweep_{self.name}.csv"

    def run(self, cfg: Config, store_dir: str | Path | None, *, progress: bool = True, points=None,
            settings: Mapping[str, Any] | None = None, bind: Mapping[str, Any] | None = None,
            **sweep_options) -> pd.DataFrame:
        """The experiment's rows (:func:`cnnlab.profiling.sweep`): over ``points`` (a list of dicts) when given,
        else the grid of ``axes``; keyed by ``cfg.settings(**settings)``; ``sweep_options`` go to the sweep
        (``skip``, ``retry_errors``, ...). ``bind``: more keywords for the point function that do not change what it
        measures (a folder for its files), so they do not key the store."""
        from functools import partial

        from cnnlab.profiling import sweep

        grid = points if points is not None else {arg: getattr(cfg, name) for arg, name in self.axes.items()}
        fn = partial(self.point, **self.bound(cfg), **(bind or {}))
        return sweep(fn, grid, self.store(store_dir), settings=cfg.settings(**(settings or {})),
                     desc=self.desc or self.name, progress=progress, **sweep_options)


# Inductor's warning when fp32 matmuls compile with TF32 off on a GPU that has it: the setting is the study's
# explicit, recorded choice (TF32), so the warning says nothing a reader needs
_TF32_OFF_WARNING = "TensorFloat32 tensor cores for float32 matrix multiplication available but not enabled"


def measurement(plan: Callable[[Config], list]):
    """Decorate a study's ``measure``: the contract's part that every study shares.

    Before the first measurement it prints how long the study expects to take on ``cfg.device`` with this preset
    (:func:`cnnlab.profiling.estimate.expect` of ``plan(cfg)``, the study's work as
    :class:`cnnlab.profiling.estimate.Work` items); it measures under the study's TF32 setting (``cfg.tf32``, where
    declared: set for the whole measurement, restored after); afterwards it prints how long it took against the
    estimate, and records both, with the preset and the settings, in ``df.attrs["run"]`` (:func:`save` writes it
    into environment.json): ``expected_s``, ``expected_parts`` (s per kind of work), ``measured_s`` (s), ``preset``,
    ``settings``."""

    def decorate(measure):
        @functools.wraps(measure)
        def run(cfg, store_dir: str | Path | None, progress: bool = True) -> pd.DataFrame:
            return _measured(measure, run.plan, cfg, store_dir, progress)

        run.plan = plan  # looked up at each call: a test replaces it where a probe would be real work
        return run

    return decorate


def _measured(measure, plan, cfg, store_dir, progress: bool) -> pd.DataFrame:
    import warnings

    from cnnlab import config
    from cnnlab.profiling import estimate, wall_time

    name = measure.__module__.rsplit(".", 1)[-1]
    device = getattr(cfg, "device", "cpu")
    precision = config.tf32(cfg.tf32) if hasattr(cfg, "tf32") else contextlib.nullcontext()
    with precision, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_TF32_OFF_WARNING)
        try:
            expected = estimate.expect(lambda: plan(cfg), device=device)
            print(f"{name}, {cfg.preset} preset: expected {expected.text()}", flush=True)
        except Exception as err:  # an estimate that cannot be made does not stop the measurement
            expected = estimate.Expectation(seconds=math.nan, device=str(device))
            print(f"{name}, {cfg.preset} preset: no estimate (its probe failed: {type(err).__name__}: "
                  f"{str(err).strip().splitlines()[0] if str(err).strip() else ''})", flush=True)
        # the host's wall clock of the whole study (every measurement in it synchronises its own device)
        timed = wall_time(lambda: measure(cfg, store_dir, progress=progress))
    df = timed.result
    ratio = timed.seconds / expected.seconds if expected.seconds > 0 else math.nan
    print(f"{name}: measured in {estimate.duration(timed.seconds)} ({ratio:.2f}x the estimate of "
          f"{estimate.duration(expected.seconds)})" if math.isfinite(ratio) else
          f"{name}: measured in {estimate.duration(timed.seconds)}", flush=True)
    df.attrs["run"] = {"study": name, "preset": cfg.preset, "settings": cfg.settings(),
                       "expected_s": expected.seconds, "expected_parts": expected.parts,
                       "probe_s": expected.probe_s, "measured_s": timed.seconds}
    return df


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


def configure(module: ModuleType, namespace: dict):
    """A notebook's configuration: ``module.configure`` with the preset and every declared parameter the notebook
    defines (its parameters cell: None takes the preset's value). ``namespace`` is the notebook's ``globals()``.
    Fails first on a name papermill injected that the study does not declare (``-p batchsize 4``: papermill itself
    only warns, and the run would go on with the preset): the injected cells (they start with "# Parameters") are
    read from IPython's input history ``In``; ValueError naming the unknown names and the valid parameters."""
    valid = set(module.PARAMETERS.declared) | {"preset"}
    injected = set()
    for source in namespace.get("In") or []:
        if isinstance(source, str) and source.lstrip().startswith("# Parameters"):
            for node in ast.parse(source).body:
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    injected |= {t.id for t in targets if isinstance(t, ast.Name)}
    unknown = sorted(injected - valid)
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} passed to this notebook; valid parameters: "
                         f"{', '.join(sorted(valid))}")
    return module.configure(namespace.get("preset"),
                            **{name: namespace[name] for name in module.PARAMETERS.declared if name in namespace})


def signature_problems(module: ModuleType) -> list[str]:
    """How ``module`` departs from the contract's names and signatures (empty when it follows it)."""
    problems = [f"no {n}" for n in CONTRACT if not hasattr(module, n)]
    if problems:
        return problems
    if not isinstance(module.PARAMETERS, Parameters):
        problems.append("PARAMETERS must be a cnnlab.studies.Parameters declaration")
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
    if "run" in df.attrs:  # the preset, settings and times of the measurement (:func:`measurement`)
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


__all__ = ["CONTRACT", "DEVICE", "PAPERS", "STATUSES", "STUDIES", "STUDY_PAPER", "TF32", "THREADS", "Config",
           "Experiment", "Parameter", "Parameters", "beside", "check_results", "combine", "configure", "load",
           "measurement", "paper_of", "read", "save", "signature_problems", "tables"]
