"""The environment files agree: pyproject.toml declares ranges, requirements.lock one tested point inside them,
environment.yml the lock's direct dependencies; the lock agrees with every locked package's own requirements and
with the CUDA torch wheel's; `make setup`'s venv holds exactly the lock."""

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

import lockfile

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LOCK = lockfile.read_lock()
CUDA_TORCH_REQUIRES = Path(__file__).parent / "data" / "torch-2.13.0-linux-cuda-requires.txt"
# The lock is made for Linux x86-64 and this Python (the markers of the CUDA wheel name Linux).
LINUX = dict(default_environment(), platform_system="Linux", sys_platform="linux")


def _project_requirements() -> list[Requirement]:
    """Every requirement of pyproject.toml, extras included (an extra's ``cnnlab[...]`` reference left out)."""
    reqs = list(PROJECT["dependencies"])
    for extra in PROJECT["optional-dependencies"].values():
        reqs += extra
    return [r for r in map(Requirement, reqs) if canonicalize_name(r.name) != "cnnlab"]


def test_colab_gpu_runtime_meets_every_requirement_of_a_notebook_install():
    """Offline: Colab's GPU runtime (tests/data/colab-gpu-pip-freeze.txt, a copy of googlecolab/backend-info's of
    2026-08-19: torch 2.11.0, ipywidgets 7.7.1, ipykernel 6.17.1, torchao 0.10.0) already meets every requirement of
    cnnlab and its ``notebooks`` extra, as the notebooks' install cell reads them (cnnlab.install), so installing
    there replaces nothing. Only the ``int8`` extra asks for more (torchao's PT2E flow), and only when asked."""
    from runtime_resolve import read_freeze

    from cnnlab import install

    freeze = read_freeze()
    assert freeze["torch"].startswith("2.11.0") and freeze["ipywidgets"] == "7.7.1"
    plan = install.plan(install.requirements(("notebooks",), install.declared()), freeze.get)
    assert plan.outside == [] and plan.missing == [], (plan.outside, plan.missing)
    assert "torch" in plan.met and "ipywidgets" in plan.met and "triton" in plan.met
    int8 = install.plan(install.requirements(("int8",), install.declared()), freeze.get)
    assert [(r.name, v) for r, v in int8.outside] == [("torchao", "0.10.0")]


def _public(version: str) -> Version:
    return Version(Version(version).public)


def _unmet(requirements, env) -> list[str]:
    """Requirements (that apply in ``env``) on a locked package whose locked version does not satisfy them."""
    bad = []
    for req in requirements:
        if req.marker is not None and not req.marker.evaluate(dict(env, extra="")):
            continue
        locked = LOCK.get(canonicalize_name(req.name))
        if locked is not None and not req.specifier.contains(_public(locked), prereleases=True):
            bad.append(f"{req} (locked {locked})")
    return bad


def test_every_dependency_is_locked_inside_its_declared_range():
    reqs = _project_requirements()
    assert {canonicalize_name(r.name) for r in reqs} <= set(LOCK), "a declared dependency is missing from the lock"
    assert all(str(r.specifier).startswith(">=") for r in reqs), "the library declares ranges, never exact pins"
    assert _unmet(reqs, LINUX) == []


def test_lock_agrees_with_the_requirements_of_every_locked_package():
    """A pip check of the lock itself: each locked package's Requires-Dist is met by the lock's pins. The metadata
    is read from installed packages, so only those installed at their locked version are checked (all of them in
    `make setup`'s venv, as test_setup_venv_holds_exactly_the_lock ensures)."""
    bad, checked = [], 0
    for name, locked in LOCK.items():
        try:
            if not lockfile.same_version(metadata.version(name), locked):
                continue  # another version's metadata says nothing about the locked one
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        checked += 1
        bad += [f"{name} needs {r}" for r in _unmet([Requirement(r) for r in requires], default_environment())]
    assert checked > 0 and bad == []


def test_lock_agrees_with_the_cuda_torch_wheel():
    """torch 2.13.0's Linux (CUDA) wheel pins triton==3.7.1 (the CPU wheel pins nothing): the lock must agree, or
    `make setup TORCH=cuda` cannot resolve."""
    lines = [line for line in CUDA_TORCH_REQUIRES.read_text().splitlines() if line and not line.startswith("#")]
    requires = [Requirement(line) for line in lines]
    assert any(r.name == "triton" for r in requires)
    assert _unmet(requires, LINUX) == []
    assert LOCK["torch"] == "2.13.0", "torch is locked without a local label: the CPU and the CUDA build both meet it"


def test_environment_yml_installs_the_locks_versions():
    lines = [line.strip().lstrip("-").strip() for line in (ROOT / "environment.yml").read_text().splitlines()]
    assert "- -c requirements.lock" in (ROOT / "environment.yml").read_text(), "the rest of the lock as constraints"
    pins = {}
    for line in lines:
        m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)$", line)
        if m:
            pins[canonicalize_name(m.group(1))] = m.group(2)
    declared = {canonicalize_name(r.name) for r in _project_requirements()}
    assert set(pins) == declared, set(pins) ^ declared
    for name, version in pins.items():
        assert _public(version) == _public(LOCK[name]), (name, version, LOCK[name])
    assert "torch==2.13.0+cpu" in lines, "the conda file names the CPU build, as `make setup` does"


def test_python_requirement_is_true():
    assert PROJECT["requires-python"] == ">=3.11"  # numpy 2.4, pandas 3, scikit-learn 1.9 and triton 3.7 need 3.11
    assert sys.version_info >= (3, 11)
    assert isinstance(PROJECT["license"], str), "an SPDX string: the TOML table form is deprecated by setuptools"


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(), reason="only `make setup`'s venv is locked")
def test_setup_venv_holds_exactly_the_lock():
    assert lockfile.mismatches() == []
    assert metadata.version("torch").endswith("+cpu") or Path("/proc/driver/nvidia").exists()


def test_makefile_installs_from_the_lock_and_cpu_default_never_pulls_cuda_torch():
    """The CPU default asks for the +cpu builds (PyTorch's CPU index first); torch's versions are the lock's; every
    install goes through the lock; the index probe gives up within seconds."""
    makefile = (ROOT / "Makefile").read_text()
    assert "TORCH ?= cpu" in makefile and "TORCH_INDEX ?= https://download.pytorch.org/whl/cpu" in makefile
    assert f"TORCH_VERSION := {LOCK['torch']}" in makefile and f"TORCHVISION_VERSION := {LOCK['torchvision']}" in makefile
    assert "torch==$(TORCH_VERSION)+cpu torchvision==$(TORCHVISION_VERSION)+cpu" in makefile
    assert "timeout=5" in makefile
    assert makefile.count("-c $(LOCK)") == 2 and "LOCK := requirements.lock" in makefile
