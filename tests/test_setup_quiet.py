"""make setup: setuptools' "Editable installation" warning is dropped from the install, other warnings are not."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAKEFILE = os.path.join(REPO, "Makefile")
# setuptools' editable build, as pip runs it, in a process of its own; then one warning of another kind
BUILD = textwrap.dedent("""
    import sys, tempfile, warnings
    from setuptools import build_meta
    with tempfile.TemporaryDirectory() as out:
        build_meta.build_editable(out)
    warnings.warn("another warning of the build")
""")


def _setuptools_too_old() -> str | None:
    """Why this environment's setuptools cannot build cnnlab in-process, or None: pip builds it in an isolated
    environment with the setuptools of pyproject.toml's ``build-system.requires``, which an older one (a venv's
    bundled setuptools, as in ``make test-oldest``) cannot stand in for (it rejects ``license = "MIT"``)."""
    import setuptools
    import tomllib

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        requires = tomllib.load(f)["build-system"]["requires"]
    oldest = next(int(m.group(1)) for r in requires if (m := re.fullmatch(r"setuptools>=(\d+)", r.replace(" ", ""))))
    have = setuptools.__version__
    if int(have.split(".")[0]) < oldest:
        return f"this environment's setuptools {have} is older than the setuptools>={oldest} pip builds cnnlab with"
    return None


def _quiet_env() -> dict[str, str]:
    """The variables the Makefile sets for its editable installs (``EDITABLE_QUIET``), as make expands them."""
    value = subprocess.run(["make", "-s", "-f", MAKEFILE, "--eval", "print-quiet: ; @echo '$(EDITABLE_QUIET)'",
                            "print-quiet"], capture_output=True, text=True, check=True, cwd=REPO).stdout.strip()
    pairs = [word.split("=", 1) for word in shlex.split(value)]
    assert pairs and all(len(p) == 2 for p in pairs), f"EDITABLE_QUIET is not NAME=VALUE words: {value!r}"
    return dict(pairs)


def test_every_editable_install_in_the_makefile_runs_with_the_filter():
    lines = [line for line in open(MAKEFILE).read().splitlines() if re.search(r"pip install\b.*\s-e\s", line)]
    assert len(lines) >= 2, "expected the setup and test-oldest editable installs"
    assert all(line.strip().startswith("$(EDITABLE_QUIET) ") for line in lines), lines


def test_the_editable_build_warns_without_the_filter_and_not_with_it():
    def build(env: dict[str, str]) -> str:
        proc = subprocess.run([sys.executable, "-c", BUILD], capture_output=True, text=True, timeout=300, cwd=REPO,
                              env={**os.environ, **env})
        assert proc.returncode == 0, proc.stderr
        return proc.stderr

    too_old = _setuptools_too_old()
    if too_old:
        pytest.skip(too_old)
    plain = build({"PYTHONWARNINGS": ""})
    if "Editable installation" not in plain:
        pytest.skip("this setuptools does not print the 'Editable installation' warning: nothing to drop")
    quiet = build(_quiet_env())
    assert "Editable installation" not in quiet and "Please be careful with folders" not in quiet, quiet
    assert "another warning of the build" in quiet, "the filter must drop only the editable-install warning"
