"""Install what cnnlab needs beside a runtime's own packages (Colab's), replacing none of them.

Every notebook starts with the same cell (:data:`CELL`; tests/test_install.py keeps the notebooks in step). Where
cnnlab is not importable it installs cnnlab alone (``--no-deps``), then :func:`dependencies` installs only the
requirements the runtime lacks, with every installed package pinned at its version, so pip cannot replace
anything; a requirement the runtime has at a version outside cnnlab's range is kept and reported. torch is never
installed or replaced: it is the runtime's (Colab's CUDA build) or yours (https://pytorch.org/get-started/locally/).

Standard library only (plus the ``packaging`` that pip carries): it runs before cnnlab's requirements exist.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import metadata

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # a runtime without packaging still has pip's copy
    from pip._vendor.packaging.markers import default_environment
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

# Where the project is published: the one place that names it. No public address is confirmed yet: when one is,
# change REPOSITORY_URL and run `python -m cnnlab.install --write-notebooks`, which writes it into every notebook's
# install cell and Colab badge (tests/test_install.py fails while a notebook or the README names another address).
# A reader sets CNNLAB_REPO to a fork, a wheel or a local path instead.
REPOSITORY_URL = "https://github.com/cnnlab/cnnlab"
REPOSITORY = f"git+{REPOSITORY_URL}"  # what pip installs
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
NEVER_INSTALLED = ("torch",)  # the runtime's own build: a wrong one costs gigabytes and breaks its CUDA stack
# What each extra is for, said when it cannot be used as installed.
EXTRA_USE = {"int8": "notebook 07's int8 quantization (torchao's PT2E flow, torchao.quantization.pt2e)"}

# pip runs as a program, not as %pip: %pip says "you may need to restart the kernel" whatever it did, before
# dependencies() says whether a restart is needed, and a failed %pip does not stop the cell (the next line then
# failed with ModuleNotFoundError, and nothing named CNNLAB_REPO).
CELL = '''# Colab, or a Jupyter without cnnlab: install cnnlab and only what this runtime lacks; nothing installed is replaced.
import importlib.util, os, subprocess, sys
if importlib.util.find_spec("cnnlab") is None:
    repo = os.environ.get("CNNLAB_REPO", "{repository}")  # see cnnlab/install.py
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--root-user-action=ignore",
                          repo], capture_output=True, text=True)
    if pip.returncode:
        print(pip.stdout + pip.stderr, file=sys.stderr)
        raise RuntimeError(f"pip could not install cnnlab from {{repo}} (its output is above). Set CNNLAB_REPO to "
                           "where cnnlab is (a git URL, a wheel or a local path), e.g. os.environ['CNNLAB_REPO'] = "
                           "'git+https://github.com/<you>/cnnlab', then run this cell again")
    import cnnlab.install; cnnlab.install.dependencies()'''.format(repository=REPOSITORY)


# Notebooks whose first cell also says whether an optional part can run here.
CELL_CHECKS = {"07_vgg_quantization": "int8"}


def colab_url(notebook: str) -> str:
    """Where Colab opens notebook ``notebook`` (its stem) from :data:`REPOSITORY_URL` (a GitHub address)."""
    return f"https://colab.research.google.com/github/{REPOSITORY_URL.split('github.com/', 1)[1]}/blob/main/" \
        f"notebooks/{notebook}.ipynb"


def badge(notebook: str) -> str:
    """The "Open in Colab" badge, as Markdown, that the first cell of notebook ``notebook`` (its stem) carries."""
    return f"[![Open in Colab]({COLAB_BADGE})]({colab_url(notebook)})"


def cell_for(notebook: str) -> str:
    """The first code cell of notebook ``notebook`` (its stem): :data:`CELL`, plus a check of its optional part."""
    extra = CELL_CHECKS.get(notebook)
    if extra is None:
        return CELL
    return CELL + f'\nimport cnnlab.install; cnnlab.install.check("{extra}")  # {EXTRA_USE[extra]}: runs here?'


BADGE = re.compile(r"\[!\[Open in Colab\]\([^)]*\)\]\([^)]*\)")


def notebook_text(text: str, notebook: str) -> str:
    """The notebook JSON ``text`` of notebook ``notebook`` (its stem) with its first code cell :func:`cell_for` and
    its Colab badge :func:`badge` (both from :data:`REPOSITORY_URL`); everything else as it was."""
    nb = json.loads(text)
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["source"] = cell_for(notebook).splitlines(keepends=True)
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = BADGE.sub(lambda _: badge(notebook), "".join(cell["source"])).splitlines(keepends=True)
            break
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"  # nbformat's own layout


def write_notebooks(folder: str | None = None) -> list[str]:
    """Write :data:`REPOSITORY_URL` into every notebook of ``folder`` (default: the checkout's ``notebooks/``): its
    install cell and its Colab badge (:func:`notebook_text`). Returns the notebooks it changed."""
    folder = folder or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks")
    changed = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".ipynb"):
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            new = notebook_text(text, name[:-len(".ipynb")])
            if new != text:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
                changed.append(path)
    return changed


@dataclass
class Plan:
    """cnnlab's requirements against what is installed: ``missing`` (not installed), ``outside`` (installed at a
    version outside cnnlab's range: ``(requirement, installed version)``), ``met`` (names)."""

    missing: list[Requirement] = field(default_factory=list)
    outside: list[tuple[Requirement, str]] = field(default_factory=list)
    met: list[str] = field(default_factory=list)


def declared() -> list[str]:
    """cnnlab's requirements as a wheel's metadata lists them (an extra's with ``extra == "<name>"``): from the
    checkout's pyproject.toml when cnnlab runs from one (its metadata may be older, or absent), else installed."""
    pyproject = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml")
    if not os.path.exists(pyproject):
        return metadata.requires("cnnlab") or []
    import tomllib

    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    lines = list(project["dependencies"])
    for extra, reqs in project.get("optional-dependencies", {}).items():
        for text in reqs:
            req = Requirement(text)
            marker = f"({req.marker}) and " if req.marker else ""
            req.marker = None
            lines.append(f'{req}; {marker}extra == "{extra}"')
    return lines


def requirements(extras: tuple[str, ...] = ("notebooks",), requires: list[str] | None = None) -> list[Requirement]:
    """cnnlab's requirements for this Python and platform, with those of ``extras`` (self-references expanded);
    ``requires`` defaults to :func:`declared`."""
    if requires is None:
        requires = declared()
    chosen, seen, todo = [], set(), [""] + list(extras)
    while todo:
        extra = todo.pop(0)
        if extra in seen:
            continue
        seen.add(extra)
        for text in requires:
            req = Requirement(text)
            in_extra = req.marker is not None and "extra" in str(req.marker)
            if in_extra != bool(extra):
                continue  # the base set is read with extra "", each extra's own lines with its name
            if req.marker is not None and not req.marker.evaluate({**default_environment(), "extra": extra}):
                continue
            req.marker = None  # decided here; pip must not read "extra" again (it would be "")
            if canonicalize_name(req.name) == "cnnlab":
                todo.extend(req.extras)
            else:
                chosen.append(req)
    return chosen


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def plan(reqs: list[Requirement], version_of=None) -> Plan:
    """Sort ``reqs`` by what is installed (``version_of(name)`` gives a version or None; default: this Python's)."""
    version_of = version_of or installed_version
    result = Plan()
    for req in reqs:
        version = version_of(req.name)
        if version is None:
            result.missing.append(req)
        elif req.specifier.contains(version, prereleases=True):
            result.met.append(req.name)
        else:
            result.outside.append((req, version))
    return result


def pins(skip: tuple[str, ...] = ()) -> list[str]:
    """``name==version`` for every installed distribution but ``skip``: pip may add packages, not replace these."""
    skip_names = {canonicalize_name(s) for s in skip}
    lines = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and canonicalize_name(name) not in skip_names and canonicalize_name(name) != "cnnlab":
            lines.add(f"{canonicalize_name(name)}=={dist.version}")
    return sorted(lines)


def imported(names: list[str], modules=None) -> list[str]:
    """Which of the distributions ``names`` have a module already imported in this process (they need a restart
    to take effect)."""
    modules = sys.modules if modules is None else modules
    owners = metadata.packages_distributions()  # {top-level module: [distribution names]}
    changed = {canonicalize_name(n) for n in names}
    hit = {canonicalize_name(d) for top, dists in owners.items() if top in modules for d in dists}
    return sorted(changed & hit)


def dependencies(extras: tuple[str, ...] = ("notebooks",), upgrade: tuple[str, ...] = (), *,
                 dry_run: bool = False, requires: list[str] | None = None, run=subprocess.run) -> list[str]:
    """Install cnnlab's missing requirements (with ``extras``); keep every installed package as it is, except the
    ones named in ``upgrade`` (asked for knowingly: e.g. ``upgrade=("torchao",)`` for notebook 07's int8).

    Prints what it installs or would install and whether the runtime must restart (a package it changed was
    already imported). Returns the ``name==version`` lines pip installed (or would, with ``dry_run``).
    """
    bad = [u for u in upgrade if canonicalize_name(u) in NEVER_INSTALLED]
    if bad:
        raise ValueError(f"upgrade={bad}: cnnlab never installs or replaces torch; install the build for your "
                         "machine from https://pytorch.org/get-started/locally/")
    todo = plan(requirements(extras, requires))
    wanted = [r for r in todo.missing if canonicalize_name(r.name) not in NEVER_INSTALLED]
    for req in todo.missing:
        if canonicalize_name(req.name) in NEVER_INSTALLED:
            print(f"{req.name} is not installed, and cnnlab does not install it: install the build for your machine "
                  f"({req}) from https://pytorch.org/get-started/locally/, then run this cell again")
    upgrading = {canonicalize_name(u) for u in upgrade}
    for req, version in todo.outside:
        if canonicalize_name(req.name) in upgrading:
            wanted.append(req)
        else:
            print(f"kept {req.name} {version}: cnnlab asks for {req}; what needs it may be skipped (see the notebook)")
    if not wanted:
        print("nothing to install: this runtime has every package cnnlab needs" + (" (but see above)" if todo.outside
                                                                                    else ""))
        return []
    with tempfile.TemporaryDirectory() as tmp:
        constraints = os.path.join(tmp, "installed.txt")
        with open(constraints, "w") as f:
            f.write("\n".join(pins(skip=tuple(upgrade))) + "\n")
        report = os.path.join(tmp, "report.json")
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--progress-bar", "off", "-c", constraints,
               "--report", report] + (["--dry-run"] if dry_run else []) + [str(r) for r in wanted]
        print(("would install" if dry_run else "installing") + ": " + ", ".join(str(r) for r in wanted), flush=True)
        proc = run(cmd)
        if proc.returncode != 0:
            raise RuntimeError(f"pip could not install {', '.join(str(r) for r in wanted)} without replacing an "
                               f"installed package (exit {proc.returncode}; its message is above)")
        with open(report) as f:
            got = [(i["metadata"]["name"], i["metadata"]["version"]) for i in json.load(f).get("install", [])]
    lines = [f"{name}=={version}" for name, version in got]
    print(("would install " if dry_run else "installed ") + (", ".join(lines) or "nothing"))
    restart = imported([name for name, _ in got])
    print(f"restart the runtime (Runtime > Restart session), then run again: {restart} were already imported"
          if restart else "no restart needed: nothing already imported changed")
    return lines


def check(extra: str) -> bool:
    """Say whether ``extra``'s requirements are installed in range (True) or what to run to get them (False)."""
    base = {str(r) for r in requirements(())}
    todo = plan([r for r in requirements((extra,)) if str(r) not in base])
    use = EXTRA_USE.get(extra, f"cnnlab[{extra}]")
    if not todo.missing and not todo.outside:
        print(f"{use}: ready ({', '.join(todo.met)})")
        return True
    problems = [f"{r.name} not installed (needs {r})" for r in todo.missing]
    problems += [f"{r.name} {v} installed (needs {r})" for r, v in todo.outside]
    names = tuple(r.name for r, _ in todo.outside)
    print(f"{use}: skipped here, {'; '.join(problems)}. To run it, upgrade knowingly with "
          f"cnnlab.install.dependencies(extras=('{extra}',), upgrade={names!r}) and restart the runtime")
    return False


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-notebooks"]:
        sys.exit("usage: python -m cnnlab.install --write-notebooks  (writes REPOSITORY_URL into every notebook's "
                 "install cell and Colab badge)")
    for path in write_notebooks():
        print(f"wrote {path}")
