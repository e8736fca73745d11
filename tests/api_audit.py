"""Which torch, torchvision, triton and torchao names cnnlab uses, and whether this environment has them.

``python tests/api_audit.py`` prints one JSON object {name: true/false} for the running environment (plus the
versions under ``"_versions"``); ``--table A.json B.json ...`` turns several such files (one per environment) into
the Markdown table kept in docs/api-audit.md. tests/test_api_audit.py asserts that every name exists in the running
environment (the locked set in CI, the oldest in ``make test-oldest``) unless cnnlab guards it (:data:`GUARDED`).

The names come from cnnlab's own source, read with ``ast``: every dotted name on a module imported from those
packages (aliases followed: ``tl.load`` is ``triton.language.load``), and every ``from X import Y``. Attributes of
objects rather than modules (profiler events) cannot be found that way and are listed in :data:`FIELDS`.
"""

from __future__ import annotations

import ast
import importlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("torch", "torchvision", "triton", "torchao")
# Attributes cnnlab reads on objects the profiler gives (cnnlab/profiling/ops.py and memory.py), by class.
FIELDS = {
    "torch.autograd.profiler_util.FunctionEvent": (
        "name", "device_type", "is_user_annotation", "count", "time_range", "self_cpu_time_total", "cpu_time_total",
        "self_device_time_total", "device_time_total", "self_cpu_memory_usage", "cpu_memory_usage",
        "self_device_memory_usage", "device_memory_usage"),
    "torch._C._autograd._KinetoEvent": ("name", "start_ns", "duration_ns", "device_type", "nbytes", "correlation_id"),
}
# Names cnnlab uses only behind a check that they exist (with the fallback it takes without them).
GUARDED = {
    "torch.backends.cuda.matmul.fp32_precision": "config.tf32: the newer TF32 API, used where torch has it",
    "torch.backends.cudnn.conv.fp32_precision": "config.tf32: the newer TF32 API, used where torch has it",
}


def _dotted(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id] + parts[::-1]
    return None


def used_names(package: Path = ROOT / "cnnlab") -> dict[str, set[str]]:
    """{dotted name: files using it} for every name of :data:`PACKAGES` used in ``package``'s modules."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        alias: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in PACKAGES:
                        alias[(a.asname or a.name).split(".")[0] if not a.asname else a.asname] = (
                            a.name if a.asname else a.name.split(".")[0])
                        found.setdefault(a.name, set()).add(path.name)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.split(".")[0] in PACKAGES:
                    for a in node.names:
                        alias[a.asname or a.name] = f"{node.module}.{a.name}"
                        found.setdefault(f"{node.module}.{a.name}", set()).add(path.name)
        inner: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and id(node) not in inner:
                parts = _dotted(node)
                value = node.value
                while isinstance(value, ast.Attribute):
                    inner.add(id(value))
                    value = value.value
                if parts and parts[0] in alias:
                    found.setdefault(".".join([alias[parts[0]]] + parts[1:]), set()).add(path.name)
    for name in GUARDED:  # read with getattr where they exist: invisible to the scan
        found.setdefault(name, set()).add("_compat.py")
    for owner, fields in FIELDS.items():
        for f in fields:
            found.setdefault(f"{owner}.{f}", set()).add("profiling")
    return found


def _instance(owner: str):
    """An object of ``owner`` to read instance fields on (FunctionEvent sets most in __init__), else the class."""
    cls = resolve_object(owner)
    if owner.endswith("FunctionEvent"):
        return cls(id=0, name="x", thread=0, start_us=0, end_us=1)
    return cls


def resolve_object(name: str):
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def exists(name: str) -> bool:
    """Whether ``name`` resolves here (a module, or attributes on one; profiler fields on an instance)."""
    for owner in FIELDS:
        if name.startswith(owner + "."):
            try:
                return hasattr(_instance(owner), name[len(owner) + 1:])
            except (ImportError, AttributeError, TypeError):
                return False
    try:
        resolve_object(name)
        return True
    except (ImportError, AttributeError, RuntimeError):
        return False


def audit() -> dict:
    import cnnlab  # noqa: F401  (makes torchvision importable beside a CPU torch)

    result = {name: exists(name) for name in sorted(used_names())}
    versions = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = importlib.import_module(pkg).__version__
        except Exception:  # noqa: BLE001  (a package may be absent or fail to import: say so)
            versions[pkg] = None
    result["_versions"] = versions
    return result


def table(paths: list[Path]) -> str:
    """Markdown: one row per name, one column per environment (headed by its torch version)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    heads = [" / ".join(f"{k} {v}" for k, v in r["_versions"].items() if v) for r in runs]
    names = sorted({n for r in runs for n in r if n != "_versions"})
    lines = ["| name | " + " | ".join(heads) + " |", "| --- |" + " --- |" * len(runs)]
    for n in names:
        marks = ["yes" if r.get(n) else ("no" if n in r else "-") for r in runs]
        note = f" (guarded: {GUARDED[n]})" if n in GUARDED else ""
        lines.append(f"| `{n}`{note} | " + " | ".join(marks) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--table"]:
        print(table([Path(p) for p in argv[1:]]))
        return 0
    print(json.dumps(audit(), indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
