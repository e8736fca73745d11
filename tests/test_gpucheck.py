"""cnnlab.gpucheck (make gpu-check), on the CPU: folder names, the summary of hand-made results, a real run of one
study and a study killed at its limit, the unit tests' parsing, and the make target without a venv or a GPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pandas as pd
import pytest
import torch

from cnnlab import gpucheck, paths, studies

REPO = Path(__file__).resolve().parents[1]


def test_folder_name_is_the_device_name_made_folder_safe():
    assert gpucheck.folder_name("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert gpucheck.folder_name("Intel(R) Xeon(R) CPU @ 2.20GHz") == "intel-r-xeon-r-cpu-2-20ghz"
    assert gpucheck.folder_name(" / ") == "unknown-device"


def test_each_study_writes_into_its_notebooks_folder():
    for name in studies.STUDIES:
        assert (REPO / "notebooks" / f"{gpucheck.notebook_folder(name)}.ipynb").is_file(), name


def test_default_limits_cover_every_study_and_fit_the_budget():
    assert set(gpucheck.LIMITS_S) == {"tests", *studies.STUDIES}
    assert sum(gpucheck.LIMITS_S.values()) <= gpucheck.BUDGET_S - gpucheck.END_S <= 6 * 60


def test_not_measured_groups_failed_and_skipped_points_by_their_first_error_line():
    df = pd.DataFrame({"experiment": ["sensitivity"] * 4 + ["ddp", "ddp"],
                       "status": ["ok", "error", "error", "oom", "skipped", "killed"],
                       "error": [None, "RuntimeError: indices on cpu\nTraceback ...", "RuntimeError: indices on cpu",
                                 "OutOfMemoryError: CUDA out of memory", "needs 2 GPUs, 1 present", float("nan")]})
    groups = gpucheck.not_measured(df)
    assert {"experiment": "sensitivity", "status": "error", "error": "RuntimeError: indices on cpu",
            "points": 2} in groups
    assert {"experiment": "ddp", "status": "killed", "error": "no reason given", "points": 1} in groups
    assert len(groups) == 4 and gpucheck.not_measured(pd.DataFrame({"x": [1]})) == []


def _record(folder, status, seconds, claims=None, error=None, not_measured=()):
    return {"name": folder[3:], "folder": folder, "status": status, "seconds": seconds, "limit_s": 40.0,
            "claims": claims, "error": error, "not_measured": list(not_measured)}


def test_summary_of_an_ok_an_error_and_a_timeout():
    records = [
        {**_record("00_quickstart", "ok", 16.0, {"held": 1, "not": 0, "inc": 2, "n/a": 1}), "expected_s": 12.0},
        _record("06_lstm_pruning", "error", 26.0, error="measure: cnnlab/prune.py:224: RuntimeError: two devices",
                not_measured=[{"experiment": "sensitivity", "status": "error", "points": 3,
                               "error": "RuntimeError: indices should be on cpu"}]),
        _record("04_tiling", "timeout", 25.3, error="past its 25 s limit; tiles: 5/24; in cnnlab/studies/tiling.py"),
    ]
    tests = {"status": "failed", "seconds": 44.6, "limit_s": 45.0, "counts": {"passed": 157, "failed": 1},
             "failures": ["tests/test_timing.py::test_wall_time_waits_for_the_gpu: assert 0.06 > (5 * 0.22)"]}
    text = gpucheck.summary("gpu-check: H100", records, tests, 300.0, 360.0, Path("/r"))
    lines = text.splitlines()
    ok = next(line for line in lines if line.startswith("00_quickstart"))
    # status, min, the minutes the study's estimate said, limit, held, not, inc, n/a
    assert ok.split()[1:] == ["ok", "0.3", "0.2", "40", "1", "0", "2", "1"]
    error = next(line for line in lines if line.startswith("06_lstm_pruning"))
    assert error.split()[1:9] == ["error", "0.4", "-", "40", "-", "-", "-", "-"]  # no claims table: not counted
    assert error.endswith("  measure: cnnlab/prune.py:224: RuntimeError: two devices")
    assert "    not measured: 3 point(s) of sensitivity, error: RuntimeError: indices should be on cpu" in lines
    assert "timeout" in next(line for line in lines if line.startswith("04_tiling"))
    assert "157 passed, 1 failed" in next(line for line in lines if line.startswith("unit tests"))
    assert any("FAILED tests/test_timing.py::test_wall_time_waits_for_the_gpu: assert" in line for line in lines)
    assert lines[-1].startswith("total 5.0 min of the 6.0-minute budget; results in /r/")
    assert gpucheck.failed(records, tests)
    assert not gpucheck.failed(records[:1], {**tests, "status": "ok"}) and not gpucheck.failed(records[:1], None)
    points = [{"experiment": "", "status": "oom", "points": 1, "error": "OutOfMemoryError"}]
    assert gpucheck.failed([_record("00_quickstart", "ok", 1.0, {}, not_measured=points)], None)
    skipped = [{"experiment": "ddp", "status": "skipped", "points": 4, "error": "needs 2 GPUs, 1 present"}]
    assert not gpucheck.failed([_record("05_ddp_scaling", "ok", 1.0, {}, not_measured=skipped)], None)


def test_where_names_the_innermost_cnnlab_frame():
    from cnnlab import config

    with pytest.raises(ValueError) as raised:
        config.positive_int(0, parameter="repeats")
    assert gpucheck.where(raised.value).startswith("cnnlab/config.py:")
    assert gpucheck.first_line(ValueError("first\nsecond")) == "ValueError: first"


DUMP = """[quickstart] model_name='resnet20'
Timeout (0:00:06.400000)!
Thread 0x00007feb1ffff6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/venv/lib/python3.11/site-packages/tqdm/_monitor.py", line 69 in run

Thread 0x00007feb5e642b80 (most recent call first):
  File "/venv/lib/python3.11/site-packages/torch/nn/modules/conv.py", line 560 in _conv_forward
  File "/repo/cnnlab/models/resnet_cifar.py", line 56 in forward
  File "/repo/cnnlab/profiling/timing.py", line 340 in benchmark
  File "/repo/cnnlab/studies/quickstart.py", line 47 in batch_point
  File "/repo/cnnlab/profiling/sweep.py", line 192 in sweep
  File "/repo/cnnlab/gpucheck.py", line 140 in run_child
  File "/repo/cnnlab/gpucheck.py", line 462 in <module>
  File "<frozen runpy>", line 88 in _run_code
"""


def test_a_faulthandler_dump_says_where_the_study_was():
    where = "cnnlab/studies/quickstart.py:47 batch_point > cnnlab/models/resnet_cifar.py:56 forward"
    assert gpucheck.faulthandler_frame(DUMP) == where
    assert gpucheck.faulthandler_frame("no dump here\n") == ""


def test_limits_are_checked_naming_the_valid_names():
    assert gpucheck._pairs("tests=10, tiling=90", "--limits") == {"tests": 10.0, "tiling": 90.0}
    with pytest.raises(SystemExit, match="NAME one of tests, quickstart"):
        gpucheck._pairs("tilling=90", "--limits")
    with pytest.raises(SystemExit, match="not a number"):
        gpucheck._pairs("tiling=long", "--limits")


# ------------------------------------------------------------------------------------------- the unit tests' part

def _fake_checkout(tmp_path: Path, tests: str) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_fake.py").write_text(tests)
    (tmp_path / "tests" / "test_other.py").write_text("def test_not_marked():\n    assert False\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: fake\n")
    return tmp_path


def test_unit_tests_are_counted_and_failures_named_with_their_first_line(tmp_path, monkeypatch):
    root = _fake_checkout(tmp_path, "import pytest\n\n@pytest.mark.gpu\ndef test_passes():\n    pass\n\n"
                                    "@pytest.mark.gpu\ndef test_fails():\n    assert 1 == 2, 'one is not two'\n\n"
                                    "@pytest.mark.gpu\n@pytest.mark.skip(reason='no GPU')\n"
                                    "def test_skipped():\n    pass\n\n"
                                    "def test_unmarked_fails():\n    assert False\n")
    monkeypatch.setattr(paths, "base", lambda: root)
    (tmp_path / "logs").mkdir()
    got = gpucheck.run_tests(sys.executable, dict(os.environ), 120, 1, tmp_path / "logs", tmp_path)
    assert got["files"] == ["tests/test_fake.py"]  # the files that mark a test gpu
    assert got["status"] == "failed" and got["counts"] == {"passed": 1, "failed": 1, "skipped": 1}
    assert got["failures"] == ["tests/test_fake.py::test_fails: AssertionError: one is not two"]
    assert "test_fails" in (tmp_path / "logs" / "unit-tests.log").read_text()


def test_unit_tests_past_their_limit_are_stopped(tmp_path, monkeypatch):
    root = _fake_checkout(tmp_path, "import time, pytest\n\n@pytest.mark.gpu\ndef test_hangs():\n    time.sleep(120)\n")
    monkeypatch.setattr(paths, "base", lambda: root)
    (tmp_path / "logs").mkdir()
    got = gpucheck.run_tests(sys.executable, dict(os.environ), 4, 1, tmp_path / "logs", tmp_path)
    assert got["status"] == "timeout" and got["error"].startswith("past its 4 s limit") and got["seconds"] < 60


def test_the_repository_marks_its_cuda_tests():
    marked = {p.name for p in (REPO / "tests").glob("test_*.py") if gpucheck.MARKED.search(p.read_text())}
    assert {"test_kernels.py", "test_timing.py", "test_memory.py", "test_ops.py"} <= marked
    assert "test_gpucheck.py" not in marked  # its fake test files mark tests inside strings


# ------------------------------------------------------------------------------------------- real runs, on the CPU

@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """quickstart in full, then fp16 killed 8 s after it started (its process started while quickstart ran; the
    faulthandler dump at 6.4 s has time to be written on a loaded machine, where 3 s left it none)."""
    out, stores = tmp_path_factory.mktemp("gpu-check"), tmp_path_factory.mktemp("stores")
    cmd = [sys.executable, "-m", "cnnlab.gpucheck", "--device", "cpu", "--studies", "quickstart,fp16", "--skip-tests",
           "--out", str(out), "--stores", str(stores), "--limits", "quickstart=600,fp16=8", "--prewarm",
           "--budget", "1200"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    return proc, out, stores, json.loads((out / "gpu-check.json").read_text())


@pytest.mark.slow
def test_a_study_runs_as_its_notebook_and_writes_what_the_report_reads(cpu_run):
    proc, out, stores, result = cpu_run
    assert proc.returncode == 1, proc.stderr[-3000:]  # fp16 timed out
    quickstart = result["studies"][0]
    assert quickstart["status"] == "ok" and quickstart["check_results"] == "results checked: 3 ok", quickstart
    assert quickstart["expected_s"] > 0  # what its measure estimated before measuring
    claims = pd.read_csv(out / "00_quickstart" / "claims.csv", keep_default_na=False)
    assert len(claims) == 1 and sum(quickstart["claims"].values()) == 1
    assert quickstart["claims"][gpucheck.VERDICTS[claims["held"][0]]] == 1
    env = json.loads((out / "00_quickstart" / "environment.json").read_text())
    assert env["preset"] == "quick" and env["figures"] == ["quickstart_latency_throughput"]
    assert (out / "00_quickstart" / "quickstart_batch.csv").is_file()
    assert list((stores / "00_quickstart" / "stores").glob("sweep_batch_*.csv"))  # the stores stay out of the results
    assert not (out / "00_quickstart" / "stores").exists()
    text = (out / "gpu-check.txt").read_text()
    assert text.split("\n")[0] in proc.stdout and "00_quickstart         ok" in text
    assert "[quickstart] ok in" in (out / "logs" / "00_quickstart.log").read_text()
    from cnnlab import explore, report

    figures = out.parent / f"{out.name}-figures"
    (figures / "reference").mkdir(parents=True)
    # a copy, not a link: a results folder is read only where it lies (links are skipped, issue 44 item 1)
    shutil.copytree(out, figures / "reference" / "amd-test")
    assert [m.name for m in report.find_machines(figures)] == ["amd-test"]
    assert set(explore.find_tables(figures)["study"]) == {"00_quickstart"}


@pytest.mark.slow
def test_a_study_past_its_limit_is_killed_and_said_where_it_was(cpu_run):
    proc, out, _, result = cpu_run
    fp16 = result["studies"][1]
    assert fp16["status"] == "timeout" and fp16["limit_s"] == 8.0 and fp16["seconds"] < 25, fp16
    assert fp16["error"].startswith("past its 8 s limit") and "; in cnnlab/" in fp16["error"], fp16
    assert "Timeout (" in (out / "logs" / "02_fp16.log").read_text()
    assert not (out / "02_fp16" / "claims.csv").exists()
    line = next(line for line in (out / "gpu-check.txt").read_text().splitlines() if line.startswith("02_fp16"))
    assert " timeout " in line and "past its 8 s limit" in line
    alive = [p for p in Path("/proc").glob("[0-9]*/cmdline") if str(out).encode() in _read(p)]
    assert alive == []  # the study's process and anything it started are gone


def test_a_study_the_budget_has_no_time_left_for_is_skipped_not_started(tmp_path):
    cmd = [sys.executable, "-m", "cnnlab.gpucheck", "--device", "cpu", "--studies", "quickstart", "--skip-tests",
           "--out", str(tmp_path / "out"), "--stores", str(tmp_path / "stores"), "--budget", "1"]
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "MPLBACKEND": "Agg"}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    study = json.loads((tmp_path / "out" / "gpu-check.json").read_text())["studies"][0]
    assert study["status"] == "skipped" and study["error"] == "the budget was spent"
    assert not (tmp_path / "out" / "00_quickstart").exists() and not (tmp_path / "stores" / "00_quickstart").exists()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


# ------------------------------------------------------------------------------------------- the make target

@pytest.mark.skipif(shutil.which("make") is None, reason="needs the make program, which is not on PATH here")
def test_make_target_needs_no_venv_and_never_runs_setup():
    dry = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "-n", "gpu-check", "VENV=/nowhere",
                          "GPU_CHECK_ARGS=--studies fp16"], capture_output=True, text=True, check=True).stdout
    assert f'PYTHONPATH="{REPO}' in dry and "MPLBACKEND=Agg" in dry
    assert "python3 -m cnnlab.gpucheck --studies fp16" in dry and "pip" not in dry and "venv" not in dry


@pytest.mark.skipif(shutil.which("make") is None, reason="needs the make program, which is not on PATH here")
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_make_target_refuses_cleanly_without_cuda(tmp_path):
    # python3 on the PATH is this Python (the framework image's role), and there is no .venv
    (tmp_path / "python3").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (tmp_path / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "gpu-check", "VENV=/nowhere",
                           f"GPU_CHECK_ARGS=--out {tmp_path / 'out'}"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0 and "gpu-check: no CUDA GPU here" in proc.stderr, proc.stderr
    assert "--device cpu" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing measured, nothing written
