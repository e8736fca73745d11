"""requirements.lock, read and compared with what is installed.

``python tests/lockfile.py`` (run by ``make setup``) prints the key versions and exits 1, naming each difference,
unless every locked package is installed at its locked version. tests/test_environment.py uses the same functions.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
KEY_PACKAGES = ("torch", "torchvision", "torchao", "triton", "numpy", "pandas", "matplotlib", "seaborn")


def read_lock(path: Path = LOCK) -> dict[str, str]:
    """{canonical name: version} for every ``name==version`` line of the lock."""
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if m:
            pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def same_version(installed: str, locked: str) -> bool:
    """Equal public versions; the lock's ``2.13.0`` is met by ``2.13.0+cpu`` (a local label), as pip's ``==`` is."""
    return Version(installed).public == Version(locked).public if "+" not in locked else installed == locked


def mismatches(pins: dict[str, str] | None = None) -> list[str]:
    """One line per locked package that is missing or installed at another version."""
    pins = read_lock() if pins is None else pins
    problems = []
    for name, locked in sorted(pins.items()):
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name}: locked {locked}, not installed")
            continue
        if not same_version(installed, locked):
            problems.append(f"{name}: locked {locked}, installed {installed}")
    return problems


def main() -> int:
    pins = read_lock()
    versions = ", ".join(f"{name} {metadata.version(name)}" for name in KEY_PACKAGES if name in pins)
    problems = mismatches(pins)
    if problems:
        print(f"requirements.lock: {len(problems)} of {len(pins)} packages differ:\n  " + "\n  ".join(problems))
        return 1
    print(f"requirements.lock: all {len(pins)} locked packages installed at their locked versions ({versions})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
