"""The oldest supported set: every lower bound of pyproject.toml, pinned.

``python tests/oldest.py`` (``--requirements``: the requirements themselves) prints a pip constraints file with ``name==<lower bound>`` for every requirement of
cnnlab and of the extras it is tested with (``make test-oldest`` installs it into ``build/venv-oldest`` and runs
the unit tests and notebook 04 there). Declared once: the bounds come from pyproject.toml itself, so raising a
bound raises what is tested. Where two extras bound one package differently the higher bound wins (pip must meet both).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("notebooks", "int8", "lab", "test")
# Colab's ipywidgets: the explorer's tests run again with it after the oldest set's (JupyterLab needs 8).
COLAB_IPYWIDGETS = "7.7.1"


def requirements(extras: tuple[str, ...] = EXTRAS, path: Path = ROOT / "pyproject.toml") -> list[Requirement]:
    """cnnlab's requirements and those of ``extras`` (self-references such as ``cnnlab[notebooks]`` expanded)."""
    project = tomllib.loads(path.read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        for r in project["optional-dependencies"][extra]:
            req = Requirement(r)
            if canonicalize_name(req.name) != "cnnlab":
                reqs.append(req)
    return reqs


def lower_bounds(reqs: list[Requirement]) -> dict[str, str]:
    """{canonical name: the highest ``>=`` bound among its requirements}; a requirement without one is an error."""
    bounds: dict[str, Version] = {}
    for req in reqs:
        mins = [Version(s.version) for s in req.specifier if s.operator == ">="]
        if not mins:
            raise ValueError(f"pyproject.toml: {req} has no lower bound (>=): the oldest set cannot pin it")
        name = canonicalize_name(req.name)
        bounds[name] = max([bounds[name], *mins]) if name in bounds else max(mins)
    return {name: str(v) for name, v in sorted(bounds.items())}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--requirements"]:  # every declared requirement, as given (for a resolver run)
        print("\n".join(str(r) for r in requirements()))
        return 0
    print("# The oldest supported set, from pyproject.toml's lower bounds (tests/oldest.py).")
    for name, version in lower_bounds(requirements()).items():
        print(f"{name}=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
