"""cnnlab.install: the notebooks' one install cell, installing only what a runtime lacks and replacing nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cnnlab import install

ROOT = Path(__file__).resolve().parents[1]
REQUIRES = [  # as a wheel's metadata lists them
    "numpy>=1.26",
    "torch>=2.8",
    "ipywidgets>=7.7; extra == \"notebooks\"",
    "triton>=3.4; platform_system == \"Linux\" and extra == \"notebooks\"",
    "torchao>=0.13; extra == \"int8\"",
    "jupyterlab>=4.2; extra == \"lab\"",
    "cnnlab[notebooks]; extra == \"lab\"",
]


def test_every_notebook_starts_with_the_shared_install_cell():
    """One install cell for all notebooks (07 also says whether its int8 part can run): a copy that drifts fails."""
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        first = next(c for c in nb["cells"] if c["cell_type"] == "code")
        assert "".join(first["source"]) == install.cell_for(path.stem), (
            f"{path.name}: its first code cell is not cnnlab.install.cell_for({path.stem!r}); paste that text")
    assert install.REPOSITORY in install.CELL and "--no-deps" in install.CELL


def test_the_repository_address_is_named_in_one_place():
    """cnnlab.install.REPOSITORY_URL is the one place: every notebook's badge and install cell, and every GitHub or
    Colab address in the README, are that one (python -m cnnlab.install --write-notebooks writes the notebooks)."""
    import re

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        text = path.read_text()
        assert install.notebook_text(text, path.stem) == text, (
            f"{path.name}: its badge or install cell names another address than cnnlab.install.REPOSITORY_URL; "
            "run python -m cnnlab.install --write-notebooks")
        assert install.badge(path.stem) in text
    readme = (ROOT / "README.md").read_text()
    name = install.REPOSITORY_URL.rsplit("/", 1)[1]  # this project's addresses: <owner>/cnnlab or <owner>/<its name>
    repos = set(re.findall(rf"https?://github\.com/[\w.-]+/(?:cnnlab|{re.escape(name)})(?![\w.-])", readme))
    assert repos <= {install.REPOSITORY_URL}, f"README names {repos}, cnnlab.install.REPOSITORY_URL is elsewhere"
    owner_name = install.REPOSITORY_URL.split("github.com/")[1]
    assert all(m.startswith(owner_name + "/") for m in re.findall(r"colab\.research\.google\.com/github/(\S+)", readme))
    assert install.colab_url("00_quickstart") == \
        f"https://colab.research.google.com/github/{owner_name}/blob/main/notebooks/00_quickstart.ipynb"


def test_the_install_cell_stops_with_what_to_set_when_the_repository_cannot_be_installed(tmp_path):
    """The first cell run where cnnlab is not importable and its repository cannot be installed (issue 34: Colab
    showed a git error, then ModuleNotFoundError, nothing about CNNLAB_REPO): one error naming CNNLAB_REPO and how to
    set it, after pip's own output; no ModuleNotFoundError, and nothing said about restarting. Run by IPython, as
    Jupyter and Colab run it, in a Python that does not see this checkout's editable install (no site: IPython is
    put on the path by hand)."""
    import sysconfig

    missing = tmp_path / "no-such-checkout"
    script = (f"import sys; sys.path.append({sysconfig.get_paths()['purelib']!r})\n"
              "from IPython.core.interactiveshell import InteractiveShell\n"
              "import importlib.util; assert importlib.util.find_spec('cnnlab') is None\n"
              f"result = InteractiveShell.instance().run_cell({install.cell_for('00_quickstart')!r})\n"
              "print('cell ended with', repr(result.error_in_exec))\n")
    run = subprocess.run([sys.executable, "-S", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "CNNLAB_REPO": str(missing), "PYTHONPATH": ""}, timeout=120)
    out = run.stdout + run.stderr
    assert "cell ended with RuntimeError(\"pip could not install cnnlab from " + str(missing) in out, out
    assert "Set CNNLAB_REPO to where cnnlab is" in out and "os.environ['CNNLAB_REPO'] = " in out
    assert "ERROR" in run.stderr and str(missing) in run.stderr, "pip's own output is shown (on stderr)"
    assert "ModuleNotFoundError" not in out and "restart" not in out, out


def test_requirements_take_the_base_set_and_the_asked_extras_with_their_self_references():
    names = lambda extras: sorted(r.name for r in install.requirements(extras, REQUIRES))  # noqa: E731
    assert names(()) == ["numpy", "torch"]
    linux = sys.platform.startswith("linux")
    assert names(("notebooks",)) == sorted(["numpy", "torch", "ipywidgets"] + (["triton"] if linux else []))
    assert "ipywidgets" in names(("lab",)) and "jupyterlab" in names(("lab",))  # cnnlab[notebooks] expanded
    assert "torchao" not in names(("notebooks",))


def test_plan_sorts_requirements_by_what_is_installed():
    installed = {"numpy": "2.1.3", "torch": "2.11.0+cu128", "torchao": "0.10.0"}
    plan = install.plan(install.requirements(("notebooks", "int8"), REQUIRES), installed.get)
    assert plan.met == ["numpy", "torch"]  # a local version label meets >=2.8
    assert [str(r) for r, v in plan.outside] == ["torchao>=0.13"]
    assert "ipywidgets" in [r.name for r in plan.missing]


def _fake_pip(report_rows, calls):
    def run(cmd):
        calls.append(cmd)
        report = cmd[cmd.index("--report") + 1]
        Path(report).write_text(json.dumps({"install": [{"metadata": {"name": n, "version": v}}
                                                        for n, v in report_rows]}))
        return SimpleNamespace(returncode=0)
    return run


def test_dependencies_install_only_the_missing_and_pin_every_installed_package(capsys, monkeypatch):
    """A runtime with an old torchao and no ipywidgets: ipywidgets is installed, torchao kept and said so, and pip
    gets every installed distribution as a constraint (it may add, never replace)."""
    versions = {"numpy": "2.1.3", "torch": "2.11.0", "torchao": "0.10.0", "triton": "3.6.0"}
    monkeypatch.setattr(install, "installed_version", versions.get)
    calls = []
    # what pip reports installing is made up: packages no test process has imported, so no restart is needed
    got = install.dependencies(("notebooks", "int8"), requires=REQUIRES,
                               run=_fake_pip([("cnnlab-never-imported", "1.0")], calls))
    out = capsys.readouterr().out
    assert got == ["cnnlab-never-imported==1.0"]
    cmd = calls[0]
    assert cmd[-1:] == ["ipywidgets>=7.7"] and "torchao>=0.13" not in cmd
    assert "kept torchao 0.10.0" in out and "no restart needed" in out
    constraints = cmd[cmd.index("-c") + 1]
    assert constraints.endswith("installed.txt")  # written from pins(): every distribution of this venv


def test_pins_hold_every_installed_distribution_but_the_ones_upgraded():
    lines = install.pins()
    assert any(line.startswith("numpy==") for line in lines) and any(line.startswith("torch==") for line in lines)
    assert not any(line.startswith("torchao==") for line in install.pins(skip=("torchao",)))
    assert not any(line.startswith("cnnlab==") for line in lines)


def test_an_asked_upgrade_is_installed_and_a_changed_imported_package_needs_a_restart(capsys, monkeypatch):
    monkeypatch.setattr(install, "installed_version", {"numpy": "2.1.3", "torch": "2.11.0", "torchao": "0.10.0"}.get)
    calls = []
    install.dependencies(("int8",), upgrade=("torchao",), requires=REQUIRES,
                         run=_fake_pip([("torchao", "0.18.0"), ("numpy", "2.4.6")], calls))
    assert "torchao>=0.13" in calls[0]
    assert "restart the runtime" in capsys.readouterr().out  # numpy is imported in this process


def test_torch_is_never_installed_or_upgraded(capsys, monkeypatch):
    monkeypatch.setattr(install, "installed_version", {"numpy": "2.1.3"}.get)
    calls = []
    install.dependencies((), requires=REQUIRES, run=_fake_pip([], calls))
    assert calls == [] and "cnnlab does not install it" in capsys.readouterr().out
    with pytest.raises(ValueError, match="never installs or replaces torch"):
        install.dependencies((), upgrade=("torch",), requires=REQUIRES, run=_fake_pip([], calls))


def test_check_says_how_to_get_an_optional_part(capsys, monkeypatch):
    real = install.requirements
    monkeypatch.setattr(install, "requirements", lambda extras, requires=None: real(extras, REQUIRES))
    monkeypatch.setattr(install, "installed_version", {"numpy": "2.1.3", "torch": "2.11", "torchao": "0.10.0"}.get)
    assert install.check("int8") is False
    out = capsys.readouterr().out
    assert "torchao 0.10.0 installed (needs torchao>=0.13)" in out and "upgrade=('torchao',)" in out
    monkeypatch.setattr(install, "installed_version", {"numpy": "2.1.3", "torch": "2.11", "torchao": "0.18.0"}.get)
    assert install.check("int8") is True


def test_declared_reads_the_checkouts_pyproject_with_each_extra_marked():
    """From a checkout the requirements come from pyproject.toml (installed metadata may be older or absent, as when
    cnnlab runs from a source tree on PYTHONPATH), in the form a wheel's metadata has."""
    import tomllib

    lines = install.declared()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert lines[:len(project["dependencies"])] == project["dependencies"]
    assert 'torchao>=0.13; extra == "int8"' in lines
    assert 'triton>=3.4; (platform_system == "Linux") and extra == "notebooks"' in lines
    assert [r.name for r in install.requirements(("int8",)) if r.name == "torchao"] == ["torchao"]
