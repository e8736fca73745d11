"""The Makefile's recipes in a checkout whose path holds a space (issue 44, item 11: an unquoted $(CURDIR) split
`make test`, `make margins` and `make gpu-check` into a command named after the path's second half, exit 127)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from cnnlab import paths

REPO = paths.checkout()

pytestmark = [
    pytest.mark.skipif(REPO is None, reason="needs the source checkout's Makefile: cnnlab is installed as a package"),
    pytest.mark.skipif(shutil.which("make") is None, reason="needs the make program, which is not on PATH here"),
]

# the variables through which the recipes hand a path inside the checkout to the Python they run
PATH_VARIABLES = ("PYTHONPATH", "CNNLAB_FIGURES_DIR", "CNNLAB_MARGINS", "TORCHINDUCTOR_CACHE_DIR")


def _checkout_with_a_space(tmp_path):
    """A folder "my checkout" holding the Makefile and, as the venv's python, a stand-in that records its arguments
    and the path variables it was given (one JSON line a call), so that each recipe runs for real in a second."""
    checkout = tmp_path / "my checkout"
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / "Makefile").symlink_to(REPO / "Makefile")
    log = tmp_path / "calls.jsonl"
    fake = checkout / ".venv" / "bin" / "python"
    fake.write_text(f"""#!{sys.executable}
import json, os, sys
with open({str(log)!r}, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "env": {{k: os.environ.get(k) for k in {PATH_VARIABLES!r}}}}}) + "\\n")
""")
    fake.chmod(0o755)
    return checkout, log


def _make(checkout, target):
    # STAMP= : the venv counts as set up (setup itself is not what is tested here)
    env = {k: v for k, v in os.environ.items() if k not in PATH_VARIABLES}
    return subprocess.run(["make", "--no-print-directory", "-C", str(checkout), target, "STAMP="], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("target, first_call, variable, path", [
    ("test", ["-m", "pytest"], "CNNLAB_FIGURES_DIR", "build/test-figures"),
    ("margins", ["-c"], "CNNLAB_MARGINS", "build/margins-default.jsonl"),
    ("gpu-check", ["-m", "cnnlab.gpucheck"], "PYTHONPATH", ""),
])
def test_make_targets_run_in_a_checkout_whose_path_holds_a_space(tmp_path, target, first_call, variable, path):
    checkout, log = _checkout_with_a_space(tmp_path)
    done = _make(checkout, target)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[0]["argv"][:len(first_call)] == first_call
    assert calls[0]["env"][variable] == str(checkout / path)
    assert calls[0]["env"]["TORCHINDUCTOR_CACHE_DIR"].startswith(str(checkout / "build" / "inductor-cache") + "/")
    if target == "margins":  # the second pass, on AVX2, and the table over both
        assert [c["env"]["CNNLAB_MARGINS"] for c in calls if c["argv"][:2] == ["-m", "pytest"]] == [
            str(checkout / "build" / f"margins-{path}.jsonl") for path in ("default", "avx2") for _ in "12"]  # each
        # path's two passes: the tests marked alone, then the rest
        assert calls[-1]["argv"][0] == "tests/margins.py"
