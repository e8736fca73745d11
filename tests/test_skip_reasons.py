"""A skipped test says why: every skip in tests/ gives a reason in words, and pytest prints the reasons."""

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _reason(call: ast.Call, positional: int | None) -> ast.AST | None:
    """The reason argument of ``call``: its ``reason=`` keyword, else (where the API takes one there) the
    positional argument at index ``positional``."""
    for kw in call.keywords:
        if kw.arg in ("reason", "msg"):
            return kw.value
    if positional is not None and len(call.args) > positional:
        return call.args[positional]
    return None


def skips_without_reason(source: str, name: str = "<source>") -> list[str]:
    """``file:line: what`` for every skip in ``source`` that gives no reason, or a literal one of fewer than three
    words. A reason computed at run time (an f-string, a function's answer) is taken as given."""
    # pytest.skip(reason) and pytest.mark.skip(reason) take it first; skipif's first argument is the condition and
    # importorskip's the module name, so theirs must be the keyword.
    positional = {"pytest.skip": 0, "pytest.mark.skip": 0, "pytest.mark.skipif": None, "pytest.importorskip": None}
    tree = ast.parse(source)
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in called and _dotted(node) in ("pytest.mark.skip",
                                                                                             "pytest.mark.skipif"):
            found.append((node.lineno, f"{_dotted(node)} without a reason"))  # a bare @pytest.mark.skip
        if not isinstance(node, ast.Call) or _dotted(node.func) not in positional:
            continue
        what = _dotted(node.func)
        reason = _reason(node, positional[what])
        if reason is None:
            found.append((node.lineno, f"{what} without a reason"))
        elif isinstance(reason, ast.Constant) and len(re.findall(r"\w+", str(reason.value))) < 3:
            found.append((node.lineno, f"{what} with the reason {reason.value!r}, not a sentence"))
    return [f"{name}:{line}: {what}" for line, what in sorted(found)]


def test_every_skip_in_tests_says_why():
    found = [line for path in sorted(TESTS.rglob("*.py"))
             for line in skips_without_reason(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, "give these skips a reason that says why:\n" + "\n".join(found)


def test_the_check_finds_a_skip_without_a_reason():
    source = ('import pytest\n'
              'needs = pytest.mark.skipif(True, reason="needs a CUDA GPU")\n'
              'bare = pytest.mark.skipif(True)\n'
              'def test_a():\n    pytest.importorskip("triton")\n'
              'def test_b():\n    pytest.skip("nope")\n'
              'def test_c():\n    pytest.skip("Triton is not installed here")\n'
              '@pytest.mark.skip\ndef test_d():\n    pass\n')
    assert [line.split(": ", 1)[0] for line in skips_without_reason(source, "t.py")] == [
        "t.py:3", "t.py:5", "t.py:7", "t.py:10"], skips_without_reason(source, "t.py")


def test_make_test_lists_every_skip_with_its_reason_and_keeps_failures_in_the_summary():
    """The Makefile's test targets pass ``-r`` with s (skips and their reasons) besides f and E (failures and errors:
    ``-rs`` alone would replace pytest's default ``-rfE`` and drop them)."""
    makefile = (ROOT / "Makefile").read_text()
    report = re.search(r"^REPORT := (.*)$", makefile, re.MULTILINE)
    assert report and report[1].startswith("-r") and {"f", "E", "s"} <= set(report[1][2:]), report
    for target in ("test", "test-unit", "test-fast"):
        recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
        assert recipe, f"no {target} target"
        runs = [line for line in recipe[1].replace("\\\n", " ").splitlines() if "-m pytest" in line]
        assert runs and all("$(REPORT)" in line for line in runs), (target, runs)
