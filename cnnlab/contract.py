"""The study contract: what every study module in :mod:`cnnlab.studies` declares, and how its measurement runs,
so that every notebook reads the same way (what its results go through afterwards is :mod:`cnnlab.results`):


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
  :func:`cnnlab.results.combine` puts the experiments into one frame (:func:`cnnlab.results.tables`
  splits them). It is decorated with
  :func:`measurement` (``@studies.measurement(plan)``): ``plan(cfg)`` lists the study's work, so that ``measure``
  says how long it expects to take before it starts, and it measures under the study's ``tf32`` setting.
- ``check_claims(df, device) -> list[Claim]``: the paper's claims judged on ``df``, each with its criterion.
- ``figures(df) -> dict[str, Figure]``: the study's figures, named as they are saved (drawn by
  ``cnnlab.plotting.<name>``).

Notebooks reach these through :mod:`cnnlab.studies`, which re-exports them with :mod:`cnnlab.results`.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import inspect
import math
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Mapping

import pandas as pd

CONTRACT = ("PARAMETERS", "configure", "measure", "check_claims", "figures")


# ------------------------------------------------------------------------------------------------ declarations

_SAME = object()  # a preset value not given: the one of the preset before it


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One parameter of a study, declared once: its value in each preset (``standard`` and ``paper`` default to the
    preset before them), its ``check`` (``check(value, parameter=name)`` returns the value to use or raises
    ValueError naming the parameter and its valid values), what it is (``doc``, with its unit), and whether it is a
    grid ``axis`` (its values are the points of a sweep; every other parameter is a setting that keys the stores).
    ``type`` is the type hint in the notebook's parameters cell (default: from the preset values). ``empty`` says what
    an empty list means where one is valid (then ``[]`` is taken as it is, not checked); "": the check refuses it."""

    quick: Any
    standard: Any = _SAME
    paper: Any = _SAME
    check: Callable[..., Any] | None = None
    doc: str = ""
    axis: bool = False
    type: str = ""
    empty: str = ""

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


def _positive(value, parameter: str):
    from cnnlab import config

    return config.positive_int(value, parameter=parameter)


def _boolean(value, parameter: str):
    from cnnlab import config

    return config.boolean(value, parameter=parameter)


def _device(value, parameter: str):
    from cnnlab import config

    if value is None:  # (None is "auto" to resolve_device: a preset spells it out)
        raise ValueError(f"{parameter}=None is not valid; valid: auto, cpu, cuda, cuda:N")
    return config.device_name(value, parameter)


# Parameters most studies have, declared once: the CPU threads a run measures with (quick pins one: CI runs two
# notebooks at once on two cores, and spin-waiting threads inflated small batches' times ~140x; cnnlab.config.threads),
# and the device.
THREADS = Parameter(1, None, check=_threads, type="int",
                    doc="intra-op CPU threads while measuring (None: torch's default)")
DEVICE = Parameter("auto", check=_device, doc="auto | cpu | cuda | cuda:N")
# The rounds of a comparison (cnnlab.profiling.compare), one name in every study: at least MIN_ROUNDS (8, 10 in paper:
# the fewest whose sign-test interval is finite at each look's level), more where a claim is undecided, up to MAX_ROUNDS. Every
# planned look spends alpha (compare.look_confidence): quick looks at 8, 12 and 18 rounds, each at 98.3% (the sign test's
# interval at 8 and 12 rounds takes the same order statistics as at 97.5%, so the third look costs the first two
# nothing). A fourth look at 27 rounds decided identical work in 2 of 20 A/A trials in a CI run and 2 of 60 here
# (tests/power.py; 0 of 60 up to 18): within the 5% the rule promises, but not the test's 1 of 20. Standard looks at
# 8, 12, 18, 27, 41, 48 (each at 99.2%), paper at 10 to 96 (99.4%). Each study states its own time budget for the
# added rounds (round_budget_s).
MIN_ROUNDS = Parameter(8, 8, 10, check=_positive, type="int",
                       doc="timing rounds before the first look at the verdicts (paired, alternating)")
MAX_ROUNDS = Parameter(18, 48, 96, check=_positive, type="int",
                       doc="timing rounds at most, added while a claim is undecided")
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
            if parameter.empty and config.as_list(getattr(cfg, name)) == []:
                setattr(cfg, name, [])  # a valid empty list, its meaning declared
            elif parameter.check is not None:
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
    estimate, and records both, with the preset and the settings, in ``df.attrs["run"]``
    (:func:`cnnlab.results.save` writes it into environment.json): ``expected_s``, ``expected_parts`` (s per kind
    of work), ``measured_s`` (s), ``preset``, ``settings``."""

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


__all__ = ["CONTRACT", "DEVICE", "TF32", "THREADS", "Config", "Experiment", "Parameter", "Parameters",
           "configure", "measurement", "signature_problems"]
