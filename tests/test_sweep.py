"""cnnlab.profiling.sweep: a grid resumed after an interrupt or a killed process measures each point once; OOM,
errors and killed points are results; bad grid values fail before any work; the store is keyed by every setting."""

from __future__ import annotations

import csv
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pandas as pd
import pytest
import torch

from cnnlab.profiling import sweep

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_sweep_interrupted_then_resumed_measures_each_point_once(tmp_path):
    store = tmp_path / "s.csv"
    grid = {"batch_size": [1, 2, 4], "width": [8, 16]}
    calls = []

    def fn(batch_size, width, stop_after=None):
        if stop_after is not None and len(calls) == stop_after:
            raise KeyboardInterrupt  # what Ctrl-C or a notebook "interrupt" does mid-sweep
        calls.append((batch_size, width))
        return {"latency_ms": batch_size * width / 10}

    with pytest.raises(KeyboardInterrupt):
        sweep(lambda **p: fn(**p, stop_after=3), grid, store, progress=False)
    assert len(_rows(store)) == 3
    df = sweep(fn, grid, store, progress=False)
    assert sorted(calls) == sorted((b, w) for b in grid["batch_size"] for w in grid["width"])
    assert len(calls) == 6 and len(df) == 6 and not df.duplicated(["batch_size", "width"]).any()
    assert (df["status"] == "ok").all()
    assert df.set_index(["batch_size", "width"]).loc[(4, 16), "latency_ms"] == pytest.approx(6.4)
    sweep(fn, grid, store, progress=False)  # a third run finds nothing to do
    assert len(calls) == 6


def test_sweep_killed_process_resumes(tmp_path):
    store = tmp_path / "killed.csv"
    log = tmp_path / "calls.log"
    script = textwrap.dedent(f'''
        import time, cnnlab
        from cnnlab.profiling import sweep
        def fn(i):
            with open({str(log)!r}, "a") as f:
                f.write(f"{{i}}\\n")
            time.sleep(0.5)
            return {{"value": i * i}}
        sweep(fn, {{"i": list(range(10))}}, {str(store)!r}, progress=False)
    ''')
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO)  # cwd on sys.path: cnnlab importable
    deadline = time.time() + 60
    while time.time() < deadline and (not store.exists() or len(_rows(store)) < 3):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = _rows(store)
    assert 3 <= len(before) < 10
    started_before = [int(v) for v in log.read_text().split()]

    resumed = []
    df = sweep(lambda i: resumed.append(i) or {"value": i * i}, {"i": list(range(10))}, store, progress=False)
    assert sorted(df["i"]) == list(range(10)) and (df["value"] == df["i"] ** 2).all()
    done_before = {int(r["i"]) for r in before}
    assert done_before.isdisjoint(resumed) and done_before | set(resumed) == set(range(10))
    # a point killed mid-measurement (started, never stored) is measured again, never lost
    assert set(started_before) - done_before <= set(resumed)


def test_sweep_records_oom_and_errors_and_goes_on(tmp_path):
    store = tmp_path / "oom.csv"
    ran = []

    def fn(batch_size):
        ran.append(batch_size)
        if batch_size == 2:
            torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: a real allocation failure
        if batch_size == 4:
            raise ZeroDivisionError("boom")
        return {"latency_ms": float(batch_size), **({"extra_col": 1} if batch_size == 8 else {})}

    with pytest.warns(UserWarning, match="2 of 4 points failed") as record:
        df = sweep(fn, {"batch_size": [1, 2, 4, 8]}, store, progress=False)
    assert ran == [1, 2, 4, 8]
    status = df.set_index("batch_size")["status"].to_dict()
    assert status == {1: "ok", 2: "oom", 4: "error", 8: "ok"}
    errors = df.set_index("batch_size")["error"]
    assert "allocate" in errors[2] and "ZeroDivisionError: boom" in errors[4]
    assert math.isnan(df.set_index("batch_size").loc[2, "latency_ms"])  # missing, not 0
    assert df.set_index("batch_size").loc[8, "extra_col"] == 1  # a column that appeared late
    # the sweep's own warning: record also holds whatever else warned meanwhile (a ResourceWarning for a socket that
    # another test on this worker left to the garbage collector, seen in CI)
    summary = [str(w.message) for w in record if issubclass(w.category, UserWarning) and "points failed" in str(w.message)]
    assert len(summary) == 1 and "oom" in summary[0] and "boom" in summary[0], [str(w.message) for w in record]

    # a GPU-style OOM exception is recognised too, and retry_errors re-runs only the error point
    def fn2(batch_size):
        ran.append(("again", batch_size))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.warns(UserWarning, match="1 of 1 points failed"):
        df = sweep(fn2, {"batch_size": [1, 2, 4, 8]}, store, retry_errors=True, progress=False)
    assert ran[-1] == ("again", 4) and len(df) == 4
    assert df.set_index("batch_size").loc[4, "status"] == "oom"


@pytest.mark.parametrize("message", ["CUDNN_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate",
                                     "DefaultCPUAllocator: can't allocate memory"])
def test_allocation_failures_of_any_library_are_stored_as_oom(tmp_path, message):
    def fn(i):
        raise RuntimeError(f"cuDNN error: {message}")

    with pytest.warns(UserWarning, match="1 of 1 points failed"):
        df = sweep(fn, {"i": [0]}, tmp_path / "s.csv", progress=False)
    assert list(df["status"]) == ["oom"]


@pytest.mark.parametrize("grid, parameter, valid", [
    ({"batch_size": [8, 0]}, "batch_size", ">= 1"),
    ({"dtype": ["float32", "fp12"]}, "dtype", "float16"),
    ({"batch_size": 8}, "batch_size", "list"),
])
def test_sweep_rejects_bad_grid_values_before_any_work(tmp_path, grid, parameter, valid):
    store = tmp_path / "bad.csv"
    ran = []
    with pytest.raises(ValueError) as err:
        sweep(lambda **p: ran.append(p) or {}, grid, store, progress=False)
    assert parameter in str(err.value) and valid in str(err.value)
    assert ran == [] and not store.exists() and not (tmp_path / "bad.csv.env.json").exists()


def test_sweep_user_validate_hook_runs_first(tmp_path):
    def validate(point):
        if point["tile"] not in (8, 16):
            raise ValueError(f"tile={point['tile']} is not valid; valid: 8, 16")

    with pytest.raises(ValueError, match="tile=3"):
        sweep(lambda tile: pytest.fail("ran"), {"tile": [8, 3]}, tmp_path / "v.csv", validate=validate)


def test_sweep_store_is_keyed_by_every_setting_and_returns_only_its_grid(tmp_path):
    from cnnlab.profiling import store_file

    calls = []

    def fn(batch_size, dataset, hidden):
        calls.append((batch_size, dataset, hidden))
        return {"value": batch_size * hidden + (100 if dataset == "cifar10" else 0)}

    def run(batch_sizes, **settings):
        cfg = {"dataset": "digits", "hidden": 8, "device": "cpu", **settings}
        point = lambda batch_size: fn(batch_size, cfg["dataset"], cfg["hidden"])  # noqa: E731
        return sweep(point, {"batch_size": batch_sizes}, tmp_path / "s.csv", settings=cfg, progress=False)

    first = run([1, 2, 4])
    assert list(first["value"]) == [8, 16, 32] and len(calls) == 3
    assert first.attrs["store"].parent == tmp_path / "stores" and first.attrs["store"].name.startswith("s_")
    # another data set, model size or device: its own store, never the first run's rows
    for change in (dict(dataset="cifar10"), dict(hidden=16), dict(device="cuda")):
        calls.clear()
        other = run([1, 2], **change)
        assert len(calls) == 2 and other.attrs["store"] != first.attrs["store"], change
        assert list(other["batch_size"]) == [1, 2], change
    # the same settings, a smaller grid in another order: nothing measured, only these rows, in this order
    calls.clear()
    again = run([4, 1])
    assert calls == [] and list(again["batch_size"]) == [4, 1] and list(again["value"]) == [32, 8]
    # the key covers cnnlab's own source and every setting, in any order
    assert store_file(tmp_path / "s.csv", {"a": 1, "b": 2}) == store_file(tmp_path / "s.csv", {"b": 2, "a": 1})
    assert store_file(tmp_path / "s.csv", {"a": 1}) != store_file(tmp_path / "s.csv", {"a": 2})


def test_a_store_resumed_on_another_machine_is_never_mixed_with_it(tmp_path, monkeypatch):
    """Colab with Drive: batches 1 and 8 measured on one machine, the sweep resumed on another. Nothing of the first
    machine's is returned or added to, every point is measured here, and the warning names the first machine's store
    and both machines; back on the first machine, its own store is found again."""
    import importlib
    import json
    import warnings

    machine = importlib.import_module("cnnlab.profiling.environment")  # the module (the package's name is the function)
    seen = []

    def fn(batch_size):
        seen.append(batch_size)
        return {"latency_ms": float(batch_size)}

    def run(batch_sizes, cpu):
        monkeypatch.setattr(machine, "cpu_model", lambda: cpu)
        seen.clear()
        return sweep(fn, {"batch_size": batch_sizes}, tmp_path / "s.csv", settings={"model": "m", "device": "cpu"},
                     progress=False)

    first = run([1, 8], "Intel(R) Xeon(R) CPU @ 2.20GHz")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        here = run([1, 8, 64], "AMD EPYC 7B13")
    assert seen == [1, 8, 64] and list(here["batch_size"]) == [1, 8, 64]
    assert here.attrs["store"] != first.attrs["store"] and len(first.attrs["store"].read_text().splitlines()) == 3
    said = "\n".join(str(w.message) for w in caught)
    assert first.attrs["store"].name in said and "Intel(R) Xeon(R) CPU @ 2.20GHz" in said and "AMD EPYC 7B13" in said
    record = json.loads(here.attrs["store"].with_name(here.attrs["store"].name + ".env.json").read_text())
    assert record["measured_on"] == "AMD EPYC 7B13" and "resumed_runs" not in record
    assert list(run([1, 8], "Intel(R) Xeon(R) CPU @ 2.20GHz")["batch_size"]) == [1, 8] and seen == []


def test_the_machine_of_a_store_is_that_of_the_device_measured_on(monkeypatch):
    import importlib

    from cnnlab.profiling.store import measured_on

    machine = importlib.import_module("cnnlab.profiling.environment")
    monkeypatch.setattr(machine, "cpu_model", lambda: "AMD EPYC 7B13")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: ["Tesla T4", "NVIDIA L4"][i])
    assert measured_on({"device": "cpu"}) == "AMD EPYC 7B13"  # a CPU study on a GPU machine: the CPU's store
    assert measured_on({"device": "cuda:1"}) == "NVIDIA L4"
    assert measured_on({"device": "cuda"}) == measured_on({"device": "auto"}) == measured_on({}) == "Tesla T4"


def test_a_keyed_store_and_its_side_files_are_in_stores_and_an_unkeyed_one_where_it_is_named(tmp_path):
    """The folder a study names shows its results only: a store keyed by settings is in its ``stores/`` subfolder
    with every side file (lock, attempts, environment record); with ``settings=None`` the path given is the store."""
    store = sweep(lambda x: {"y": x}, {"x": [1, 2]}, tmp_path / "sweep_a.csv", settings={"k": 1},
                  progress=False).attrs["store"]
    assert store.parent == tmp_path / "stores" and re.fullmatch(r"sweep_a_[0-9a-f]{8}\.csv", store.name)
    files = {p.name for p in store.parent.iterdir()}
    assert files >= {store.name + side for side in ("", ".lock", ".env.json")}, files
    assert all(f.startswith(store.name) for f in files), files
    assert [p.name for p in tmp_path.iterdir()] == ["stores"]
    plain = sweep(lambda x: {"y": x}, {"x": [1]}, tmp_path / "plain.csv", progress=False).attrs["store"]
    assert plain == tmp_path / "plain.csv" and (tmp_path / "plain.csv.env.json").is_file()


def test_sweep_skips_points_with_a_reason_and_keeps_grid_order(tmp_path):
    seen = []

    def fn(method, tile):
        seen.append((method, tile))
        return {"t": tile}

    skip = lambda method, tile: "not on this device" if method == "triton" else None  # noqa: E731
    grid = [{"method": "untiled", "tile": 0}] + [{"method": m, "tile": t} for m in ("spatial", "triton")
                                                 for t in (8, 16)]
    df = sweep(fn, grid, tmp_path / "s.csv", settings={}, skip=skip, progress=False)
    assert list(zip(df["method"], df["tile"])) == [(p["method"], p["tile"]) for p in grid]
    assert list(df["status"]) == ["ok", "ok", "ok", "skipped", "skipped"]
    assert (df.loc[df["status"] == "skipped", "error"] == "not on this device").all()
    assert ("triton", 8) not in seen
    # skipped points are never stored: the store holds only what was measured
    assert len(pd.read_csv(df.attrs["store"])) == 3


def test_sweep_without_store_uses_a_temporary_one(tmp_path):
    df = sweep(lambda x: {"y": x * 2}, {"x": [3, 1]}, None, progress=False)
    assert list(df["y"]) == [6, 2] and "store" not in df.attrs


def test_a_point_that_kills_its_process_twice_is_stored_as_killed_and_retry_measures_failed_points(tmp_path):
    store = tmp_path / "k.csv"
    script = textwrap.dedent(f"""
        import os, signal, sys
        import cnnlab
        from cnnlab.profiling import sweep
        def fn(i):
            if i == 1 and os.environ.get("DIE") == "1":
                os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer does
            if i == 2:
                raise ValueError("a Python error")
            return {{"value": i}}
        df = sweep(fn, {{"i": [0, 1, 2]}}, {str(store)!r}, progress=False)
        print("STATUS", list(df["status"]))
    """)

    def run(**env):
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                              env={**os.environ, **env})

    first, second = run(DIE="1"), run(DIE="1")
    assert first.returncode == second.returncode == -signal.SIGKILL  # each run dies on point 1
    third = run(DIE="1")
    assert third.returncode == 0 and "STATUS ['ok', 'killed', 'error']" in third.stdout, third.stderr
    assert "died 2 times" in pd.read_csv(store).set_index("i").loc[1, "error"]
    fourth = run(DIE="0")  # failed points are reused, and the notebook is told so
    assert "STATUS ['ok', 'killed', 'error']" in fourth.stdout and "reused, not measured again" in fourth.stderr
    fifth = run(DIE="0", CNNLAB_RETRY="1")  # RETRY=1: measured again (point 2 fails again, as it should)
    assert "STATUS ['ok', 'ok', 'error']" in fifth.stdout, fifth.stderr
    assert sorted(pd.read_csv(store)["i"]) == [0, 1, 2]


def test_model_names_are_checked_by_the_caller_through_validate(tmp_path):
    """profiling knows no models: check_point passes any model name, and a caller's ``validate=`` (here the check a
    study's configure uses) rejects an unknown one before any work."""
    from cnnlab import config
    from cnnlab.profiling import check_point

    check_point({"model": "resnet999", "model_name": "resnet999"})  # not the sweep's to judge
    ran = []

    def validate(point):
        config.models_list([point["model"]], parameter="model")

    store = tmp_path / "bad.csv"
    with pytest.raises(ValueError, match=r"model: 'resnet999' is not a known model here; valid models: .*resnet20"):
        sweep(lambda **p: ran.append(p) or {}, {"model": ["resnet20", "resnet999"]}, store, validate=validate,
              progress=False)
    assert ran == [] and not store.exists()


def test_profiling_imports_nothing_from_models_or_studies():
    """The layering: profiling sits below models and studies. No module of cnnlab/profiling imports either (lazy
    imports inside functions included), and a sweep over model names, run in a fresh process, loads neither."""
    import ast
    from pathlib import Path

    higher = ("cnnlab.models", "cnnlab.studies")
    found = []
    for path in sorted((Path(REPO) / "cnnlab" / "profiling").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            found += [f"{path.name}:{node.lineno} {n}" for n in names if n.startswith(higher)]
    assert found == []
    script = textwrap.dedent("""
        import sys
        from cnnlab.profiling import sweep
        df = sweep(lambda model, batch_size: {"v": batch_size}, {"model": ["resnet20", "any"], "batch_size": [1]},
                   None, settings=None, progress=False)
        assert list(df["status"]) == ["ok", "ok"], df
        print(sorted(m for m in sys.modules if m.startswith(("cnnlab.models", "cnnlab.studies"))))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr[-2000:]


def test_ctrl_c_while_the_attempt_is_noted_is_not_counted_as_a_death(tmp_path, monkeypatch):
    """A Ctrl-C that lands while the attempt mark is being written (after the line, in its fsync) leaves no mark:
    a user's stop is not a death, wherever it lands (two such marks store the point as 'killed')."""
    from cnnlab.profiling.store import Attempts

    real = Attempts._add

    def noted_then_interrupted(self, point):
        real(self, point)
        raise KeyboardInterrupt

    monkeypatch.setattr(Attempts, "_add", noted_then_interrupted)
    store = tmp_path / "s.csv"
    with pytest.raises(KeyboardInterrupt):
        sweep(lambda i: {"x": i}, {"i": [1]}, store, progress=False)
    assert Attempts(store).count({"i": 1}) == 0


def test_a_stop_by_sigterm_or_sighup_is_not_counted_as_a_death(tmp_path):
    """`timeout -s TERM`, a scheduler or a closed terminal stops a sweep while it measures a point: the stop was asked
    for, so the point's attempt mark is taken back (two such stops used to store it as 'killed ... the process died 2
    times', never measured again without RETRY=1), the finished point is kept, and the process still ends by the
    signal it was sent."""
    from cnnlab.profiling.store import Attempts

    store = tmp_path / "s.csv"
    script = textwrap.dedent(f"""
        import os, signal, time
        # the process a scheduler or a terminal stops: both signals at their defaults, also where this test itself
        # runs under nohup (which leaves SIGHUP ignored in every child)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        from cnnlab.profiling import sweep
        df = sweep(lambda i: (time.sleep(120 if i == 1 and os.environ.get("HANG") else 0), {{"x": i}})[1],
                   {{"i": [0, 1]}}, {str(store)!r}, progress=False)
        print("STATUS", list(df["status"]))
    """)

    def run(hang):
        return subprocess.Popen([sys.executable, "-c", script], cwd=REPO, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env={**os.environ, "HANG": "1" if hang else ""})

    attempts = Attempts(store)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        proc = run(hang=True)
        try:
            deadline = time.monotonic() + 60
            while attempts.count({"i": 1}) == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            proc.send_signal(signum)
            out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
        assert proc.returncode == -signum, err
        assert attempts.count({"i": 1}) == 0, attempts.path.read_text()
    assert list(pd.read_csv(store)["i"]) == [0]
    out, err = run(hang=False).communicate(timeout=120)
    assert "STATUS ['ok', 'ok']" in out, err
