"""environment.yml and pyproject.toml must describe the same environment."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pins(lines):
    pins = {}
    for line in lines:
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def test_environment_yml_pins_agree_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        deps += extra
    py_pins = _pins(deps)
    yml_lines = [l.strip().lstrip("-").strip() for l in (ROOT / "environment.yml").read_text().splitlines()]
    yml_pins = _pins(yml_lines)
    assert set(py_pins) == set(yml_pins), set(py_pins) ^ set(yml_pins)
    for name, version in py_pins.items():
        # environment.yml names the CPU build of torch (local label +cpu); the public version must agree.
        assert yml_pins[name].split("+")[0] == version, (name, yml_pins[name], version)


def test_makefile_cpu_default_never_pulls_cuda_torch():
    makefile = (ROOT / "Makefile").read_text()
    assert "TORCH ?= cpu" in makefile and "torch==2.13.0+cpu" in makefile
