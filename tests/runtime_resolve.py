"""Would installing cnnlab replace anything in a runtime users already have (Colab's GPU runtime)?

``python tests/runtime_resolve.py`` (``make runtime-check``) builds a venv with that runtime's Python (3.13 for
Colab) whose installed metadata stands in for exactly the runtime's packages (one ``.dist-info`` with name and
version per line of its ``pip freeze``; no files), then asks pip's real resolver, on PyPI only and as a dry run,
to install ``.[notebooks]`` there. It prints what pip would add and what it would replace, and exits 1 if it would
replace anything. It needs the registry and downloads only the small wheels pip needs to read requirements.

The stand-ins carry no requirements of their own, so this checks cnnlab's own ranges (and those of the packages it
pulls in) against the runtime's versions; tests/test_environment.py checks the same ranges offline.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLAB_FREEZE = ROOT / "tests" / "data" / "colab-gpu-pip-freeze.txt"
_OWN = {"pip", "setuptools", "wheel"}  # the venv's own tools: pip manages them


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_freeze(path: Path = COLAB_FREEZE) -> dict[str, str]:
    """{canonical name: version} of every ``name==version`` line (``name @ url`` lines carry no version: skipped)."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if m:
            pins[canonical(m.group(1))] = m.group(2)
    return pins


def stand_in(site_packages: Path, pins: dict[str, str]) -> None:
    """Write one metadata-only ``.dist-info`` per pinned package, so pip sees it as installed at that version."""
    for name, version in pins.items():
        if name in _OWN:
            continue
        info = site_packages / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "INSTALLER").write_text("cnnlab-runtime-stand-in\n")
        (info / "RECORD").write_text("")


def find_python(version: str) -> str | None:
    """A Python of that version that runs (a pyenv shim may exist without the version being selected), or None."""
    candidates = [shutil.which(f"python{version}")] + sorted(
        glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}*/bin/python{version}")))
    for cand in filter(None, candidates):
        if subprocess.run([cand, "-c", "pass"], capture_output=True).returncode == 0:
            return cand
    return None


def plan(report: dict, pins: dict[str, str]) -> tuple[list[str], list[str]]:
    """(added, replaced) from pip's ``--report``: 'name version' and 'name old -> new' lines."""
    added, replaced = [], []
    for item in report.get("install", []):
        name, version = canonical(item["metadata"]["name"]), item["metadata"]["version"]
        if name in pins:
            replaced.append(f"{name} {pins[name]} -> {version}")
        else:
            added.append(f"{name} {version}")
    return sorted(added), sorted(replaced)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--freeze", type=Path, default=COLAB_FREEZE, help="the runtime's pip freeze")
    parser.add_argument("--python", default=None,
                        help="the runtime's Python (default: a working python3.13, as on Colab, else this one)")
    parser.add_argument("--spec", default=".[notebooks]", help="what to install (default: .[notebooks])")
    parser.add_argument("--venv", type=Path, default=ROOT / "build" / "runtime-resolve")
    args = parser.parse_args(argv)

    pins = read_freeze(args.freeze)
    python = args.python or find_python("3.13")
    if python is None:
        python = sys.executable
        print(f"no working python3.13 found: resolving for this Python ({sys.version.split()[0]}) instead")
    shutil.rmtree(args.venv, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(args.venv)], check=True)
    py = args.venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    stand_in(site, pins)
    version = subprocess.run([str(py), "--version"], capture_output=True, text=True).stdout.strip()
    print(f"{len(pins)} packages of {args.freeze.name} stand in a {version} venv; pip resolves {args.spec} on PyPI")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # only the registry answers, as on the user's machine
    report_path = args.venv / "report.json"
    run = subprocess.run([str(py), "-m", "pip", "install", "--dry-run", "--quiet", "--disable-pip-version-check",
                          "--index-url", "https://pypi.org/simple", "--report", str(report_path), args.spec],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stdout + run.stderr)
        print(f"pip could not resolve {args.spec} beside {args.freeze.name} (exit {run.returncode})")
        return 1
    added, replaced = plan(json.loads(report_path.read_text()), pins)
    print(f"would add {len(added)}: " + (", ".join(added) or "nothing"))
    print(f"would replace {len(replaced)}: " + (", ".join(replaced) or "nothing"))
    return 1 if replaced else 0


if __name__ == "__main__":
    sys.exit(main())
