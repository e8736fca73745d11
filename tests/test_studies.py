"""Tests for cnnlab.studies and the contract (cnnlab.contract) it re-exports: every notebook has a study module of
its name that follows the contract, every notebook uses only the contract, and the measurement wrapper does what it
says. The results' helpers (tables, save, check_results) are tested in test_results.py."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pandas as pd
import pytest

from cnnlab import studies

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
STUDY_DIR = Path(studies.__file__).parent


def _module_name(notebook: Path) -> str:
    return notebook.stem.split("_", 1)[1]


def _code(notebook: Path) -> str:
    cells = json.loads(notebook.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def test_every_notebook_has_a_study_module_of_its_name():
    assert NOTEBOOKS, "no notebooks found"
    assert [_module_name(nb) for nb in NOTEBOOKS] == list(studies.STUDIES)
    modules = sorted(p.stem for p in STUDY_DIR.glob("*.py") if p.stem != "__init__")
    assert modules == sorted(studies.STUDIES), "a study module without a notebook, or a helper module in studies/"


@pytest.mark.parametrize("name", studies.STUDIES)
def test_study_follows_the_contract(name):
    module = studies.load(name)
    assert studies.signature_problems(module) == []
    cfg = module.configure("quick")
    assert cfg.preset == "quick" and isinstance(cfg.device, str)
    with pytest.raises(ValueError, match="valid parameters"):
        module.configure("quick", no_such_parameter=1)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_uses_the_contract(notebook):
    code = _code(notebook)
    name = _module_name(notebook)
    assert f"from cnnlab.studies import {name} as study" in code
    for call in ("cfg = studies.configure(study, globals())", "study.measure(cfg, out", "study.figures(",
                 "study.check_claims(", "studies.save(", "studies.check_results("):
        assert call in code, f"{notebook.name} does not call {call}"
    # one show for results and claims, the claims once, from what studies.save wrote; one figure style
    assert "claims.show(" not in code and "claims.report(" not in code, notebook.name
    assert code.count("report.show(studies.save(") == 1, notebook.name
    assert "plt.show(" not in code and "plt.close(" not in code and "figs = plotting.keep(study.figures(df))" in code
    assert " as registry" not in code and " as datasets" not in code, f"{notebook.name}: one name per module"
    assert f'pipeline.output_dir("{notebook.stem}")' in code


def _parameters_cell(notebook: Path) -> str:
    cells = json.loads(notebook.read_text())["cells"]
    return next("".join(c["source"]) for c in cells if "parameters" in c["metadata"].get("tags", []))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_parameters_cell_is_the_studys_declaration(notebook):
    """The notebook's parameters cell is what the study declares (PARAMETERS.cell()): its names, type hints
    (papermill --help-notebook lists them) and help; a parameter added to one and not the other fails here."""
    module = studies.load(_module_name(notebook))
    assert _parameters_cell(notebook).strip() == module.PARAMETERS.cell(), \
        f"{notebook.name}: set its parameters cell to\n{module.PARAMETERS.cell()}"


@pytest.mark.parametrize("name", studies.STUDIES)
def test_every_parameter_a_study_reads_is_declared_and_none_is_excluded_by_hand(name):
    """Every ``cfg.<name>`` a study module reads is declared in its PARAMETERS (or is ``preset``); no module keeps a
    hand-written tuple of names left out of the store settings (``vars(cfg)`` filtered): the store key is every
    declared parameter that is not a grid axis (``cfg.settings()``)."""
    module = studies.load(name)
    text = (STUDY_DIR / f"{name}.py").read_text()
    read = {node.attr for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "cfg"}
    undeclared = read - set(module.PARAMETERS.declared) - {"preset", "settings"}
    assert not undeclared, f"{name} reads cfg.{sorted(undeclared)} without declaring them"
    assert "vars(cfg)" not in text, f"{name} builds settings from vars(cfg): use cfg.settings()"
    assert "PRESETS = " not in text and "def configure(" not in text, f"{name}: derive them from PARAMETERS"


@pytest.mark.parametrize("name", studies.STUDIES)
def test_changing_any_declared_setting_changes_the_store(name, tmp_path):
    """Each declared parameter that is not a grid axis keys the stores: changing its value (to another preset's,
    where one differs) gives another store file; changing a grid axis does not."""
    from cnnlab.profiling import store_file

    module = studies.load(name)
    base = module.configure("quick")
    checked = 0
    for pname, parameter in module.PARAMETERS.declared.items():
        others = [v for v in parameter.values().values() if v != parameter.quick]
        if not others:
            continue
        try:
            other = module.configure("quick", **{pname: others[0]})
        except ValueError:  # e.g. a GPU-only value, or more processes than cores: not settable here
            continue
        if getattr(other, pname) == getattr(base, pname):
            continue
        same = store_file(tmp_path / "s.csv", base.settings()) == store_file(tmp_path / "s.csv", other.settings())
        assert same == parameter.axis, f"{name}.{pname}: axis={parameter.axis} but the store key " \
                                       f"{'did not change' if same else 'changed'}"
        checked += 1
    assert checked, f"{name}: no parameter could be changed"


def test_configure_takes_the_notebooks_parameters_and_rejects_unknown_injected_names():
    from cnnlab.studies import quickstart

    cfg = studies.configure(quickstart, {"preset": "quick", "repeats": 3, "threads": None, "other": 1})
    assert cfg.repeats == 3 and cfg.threads == 1 and cfg.preset == "quick"  # None: the preset's value
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['repeatz'\].*valid parameters: .*repeats"):
        studies.configure(quickstart, {"In": ["# Parameters\nrepeatz = 3\n"], "repeatz": 3})
    with pytest.raises(ValueError, match="repeats=0 must be an integer >= 1"):
        studies.configure(quickstart, {"preset": "quick", "repeats": 0})


def test_a_parameter_must_be_declared_as_one():
    with pytest.raises(TypeError, match="parameter 'x' must be declared as a Parameter"):
        studies.Parameters(x=3)
    p = studies.Parameters(a=studies.Parameter(1, 2), b=studies.Parameter([1], axis=True))
    assert p.presets == {"quick": {"a": 1, "b": [1]}, "standard": {"a": 2, "b": [1]}, "paper": {"a": 2, "b": [1]}}
    assert p.configure("paper").settings(extra=1) == {"a": 2, "extra": 1}


@pytest.mark.parametrize("path", sorted(STUDY_DIR.glob("*.py")), ids=lambda p: p.stem)
def test_no_study_imports_another_or_measures_by_hand(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert not node.module.startswith("cnnlab.studies."), f"{path.name} imports {node.module}"
            if node.module == "cnnlab.studies":
                assert path.stem == "__init__" or not {a.name for a in node.names} & set(studies.STUDIES)
    text = path.read_text()
    for forbidden in ("perf_counter", "cuda.synchronize", "kineto_results"):
        assert forbidden not in text, f"{path.name} uses {forbidden}: measure through cnnlab.profiling"


def test_load_rejects_unknown_studies():
    with pytest.raises(ValueError, match="valid studies: quickstart"):
        studies.load("precision")


def test_configure_rejects_names_papermill_injected_that_the_study_lacks():
    module = studies.load("quickstart")
    history = ["import cnnlab", "preset = None\nrepeats = None", "# Parameters\nrepeats = 3\nbatchsize = 4\n"]
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['batchsize'\].*valid parameters: batch_sizes"):
        studies.configure(module, {"In": history})
    studies.configure(module, {"In": history[:2] + ["# Parameters\nrepeats = 3\n"]})  # known: fine
    studies.configure(module, {})  # outside IPython: nothing to check


@pytest.mark.parametrize("notebook", ["00_quickstart", "05_ddp_scaling"])
def test_misspelt_papermill_parameter_fails_in_the_config_cell(notebook, tmp_path):
    import subprocess
    import sys

    nb = Path(__file__).resolve().parents[1] / "notebooks" / f"{notebook}.ipynb"
    proc = subprocess.run([sys.executable, "-m", "papermill", str(nb), str(tmp_path / "out.ipynb"), "-p", "batchsize",
                           "4", "--cwd", str(tmp_path), "-k", "python3"],
                          capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "CNNLAB_FIGURES_DIR": str(tmp_path / "figures")})
    assert proc.returncode != 0
    assert "unknown parameter(s) ['batchsize']" in proc.stdout + proc.stderr
    assert not (tmp_path / "figures" / notebook).exists() or not any((tmp_path / "figures" / notebook).iterdir())


def test_notebook_05_takes_the_readme_list_syntax_and_lone_values_through_papermill(tmp_path):
    import os
    import subprocess
    import sys

    nb = Path(__file__).resolve().parents[1] / "notebooks" / "05_ddp_scaling.ipynb"
    # papermill passes "[1, 2]" as text and 0.5 as a number; both are accepted, so configuration stops only at the
    # deliberately bad timeout_s (checked after them), before any run is launched
    proc = subprocess.run([sys.executable, "-m", "papermill", str(nb), str(tmp_path / "out.ipynb"), "-p", "world_sizes",
                           "[1, 2]", "-p", "data_fractions", "0.5", "-p", "timeout_s", "-1", "--cwd", str(tmp_path),
                           "-k", "python3"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CNNLAB_FIGURES_DIR": str(tmp_path / "figures")})
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "timeout_s=-1 is not valid" in output, output[-2000:]


def test_every_study_names_its_paper():
    assert set(studies.STUDY_PAPER) == set(studies.STUDIES)
    assert set(studies.STUDY_PAPER.values()) <= set(studies.PAPERS)


def test_paper_of_a_notebook_or_study_name():
    assert studies.paper_of("05_ddp_scaling") == studies.paper_of("ddp_scaling") == "002"
    assert studies.paper_of("01_batch_size") == "001" and studies.paper_of("99_unknown") is None


@pytest.mark.parametrize("name", studies.STUDIES)
def test_every_study_measures_through_the_shared_wrapper_with_a_plan_and_a_tf32_setting(name):
    module = studies.load(name)
    assert callable(getattr(module.measure, "plan", None)), f"{name}.measure is not decorated with studies.measurement"
    assert module.measure.plan is getattr(module, "plan", None), f"{name}: its plan is the module's plan()"
    assert module.PARAMETERS.declared.get("tf32") is studies.TF32 or name == "ddp_scaling" and \
        "tf32" in module.PARAMETERS.declared, f"{name} does not declare tf32 = studies.TF32"


def test_the_measurement_wrapper_estimates_sets_tf32_and_records_the_run(tmp_path, capsys, monkeypatch):
    import matplotlib
    import torch

    matplotlib.use("Agg")
    from cnnlab import config
    from cnnlab.profiling.estimate import Work

    seen = {}
    toy = studies.Parameters(n=studies.Parameter(3), tf32=studies.TF32, device=studies.DEVICE)

    def plan(cfg):
        return [Work("points", cfg.n, 0.01)]

    @studies.measurement(plan)
    def measure(cfg, store_dir, progress=True):
        seen["tf32"] = (config.tf32_enabled("matmul"), config.tf32_enabled("conv"))
        seen["progress"] = progress
        return pd.DataFrame({"x": range(cfg.n)})

    before = (config.tf32_enabled("matmul"), config.tf32_enabled("conv"))
    for wanted in (True, False):
        cfg = toy.configure("quick", tf32=wanted, device="cpu")
        df = measure(cfg, None, progress=False)
        assert seen == {"tf32": (wanted, wanted), "progress": False}
        assert (config.tf32_enabled("matmul"), config.tf32_enabled("conv")) == before  # restored after it
    out = capsys.readouterr().out
    assert "test_studies, quick preset: expected about 0 s on cpu" in out and "measured in 0 s" in out
    run = df.attrs["run"]
    assert run["expected_s"] == pytest.approx(0.03) and run["measured_s"] >= 0 and run["preset"] == "quick"
    assert run["settings"] == {"n": 3, "tf32": False, "device": "cpu"}
    monkeypatch.setenv("CNNLAB_PRESET", "standard")  # what environment() reads: not the preset this run used
    studies.save(df, {}, [], tmp_path, name="toy")
    env = json.loads((tmp_path / "environment.json").read_text())
    assert env["run"]["expected_parts"] == {"points": 0.03} and env["preset"] == "quick"



def test_a_plan_whose_probe_fails_does_not_stop_the_measurement(capsys):
    from cnnlab.profiling.estimate import Work

    def plan(cfg):
        raise RuntimeError("no GPU to probe\nsecond line")

    @studies.measurement(plan)
    def measure(cfg, store_dir, progress=True):
        return pd.DataFrame({"x": [1]})

    cfg = studies.Parameters(device=studies.DEVICE).configure("quick", device="cpu")
    df = measure(cfg, None)
    assert df["x"].tolist() == [1] and math.isnan(df.attrs["run"]["expected_s"])
    out = capsys.readouterr().out
    assert "no estimate (its probe failed: RuntimeError: no GPU to probe)" in out and "second line" not in out
    measure.plan = lambda cfg: [Work("points", 2, 0.5)]  # looked up at each call (tests replace real probes)
    assert measure(cfg, None).attrs["run"]["expected_s"] == 1.0
