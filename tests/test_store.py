"""The result store under damage and faults (cnnlab.profiling.store and the sweep's use of it): a stray byte costs
only the lines it touches, invalid bytes are moved aside instead of crashing every later run, a store deleted under
a running sweep is written whole again, two runs on one store take turns, FRESH waits for a running sweep, and no
point is stored as ``killed`` that did not kill its process. The store's side files: ``<store>.env.json`` records
the environment (a resumed run in another one is added, not lost) and ``<store>.attempts`` the points started.
Stores of older cnnlab code are deleted with all their side files (``make clean-stores``), under their locks."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pandas as pd
import pytest
import torch

from cnnlab.profiling import sweep
from cnnlab.profiling.store import Attempts, ResultStore, remove_stores

REPO = Path(__file__).resolve().parents[1]


def _store(path: Path, n: int) -> None:
    """A finished sweep of ``n`` points ``i`` in ``path`` (no damage)."""
    sweep(lambda i: {"value": i * 0.5}, {"i": list(range(n))}, path, progress=False)


def _measured_again(path: Path, n: int) -> tuple[list[int], pd.DataFrame, list[str]]:
    seen = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = sweep(lambda i: seen.append(i) or {"value": i * 0.5}, {"i": list(range(n))}, path, progress=False)
    return seen, df, [str(w.message) for w in caught]


def test_one_stray_quote_costs_only_its_line(tmp_path):
    path = tmp_path / "s.csv"
    _store(path, 1000)
    data = bytearray(path.read_bytes())
    at = data.index(b"\n10,ok,") + 1
    data[at + 1] = ord('"')  # one flipped byte in row 10: '10,ok' -> '1",ok'
    path.write_bytes(bytes(data))

    seen, df, messages = _measured_again(path, 1000)
    assert seen == [10]  # the 989 rows after it are kept, not measured again
    assert any("1 damaged line(s)" in m for m in messages), messages
    assert list(df["i"]) == list(range(1000)) and (df["status"] == "ok").all()
    assert (tmp_path / "s.csv.damaged").read_bytes().count(b"\n") == 1


def test_a_multi_line_cell_cut_open_costs_only_its_lines(tmp_path):
    path = tmp_path / "s.csv"
    rows = "".join(f"{i},ok,{i},\r\n" for i in range(3, 40))
    path.write_text('i,status,value,error\r\n0,ok,0,\r\n1,error,,"Traceback:\n  line 1\n  line 2"\r\n'
                    '2,error,,"Traceback:\n  line 1\n' + rows)  # 2's closing quote was cut away
    store = ResultStore(path)
    with pytest.warns(UserWarning, match=r"2 damaged line\(s\)"):
        with store.lock():
            kept = [r["i"] for r in store.rows()]
    assert kept == ["0", "1"] + [str(i) for i in range(3, 40)]  # 1's complete multi-line cell is kept too
    assert store.rows()[1]["error"] == "Traceback:\n  line 1\n  line 2"


def test_an_invalid_utf8_byte_moves_its_line_aside_instead_of_crashing(tmp_path):
    path = tmp_path / "s.csv"
    _store(path, 50)
    data = path.read_bytes().replace(b"\n20,ok,", b"\n20,o\xff,")
    path.write_bytes(data)
    with pytest.raises(ValueError, match=r"s\.csv has an invalid byte"):  # read outside a sweep: named
        ResultStore(path).rows()

    seen, df, messages = _measured_again(path, 50)
    assert seen == [20] and list(df["i"]) == list(range(50))
    assert any("s.csv: 1 damaged line(s)" in m for m in messages), messages


def test_an_invalid_byte_in_the_environment_record_is_moved_aside(tmp_path):
    path = tmp_path / "s.csv"
    _store(path, 5)
    env = tmp_path / "s.csv.env.json"
    env.write_bytes(env.read_bytes().replace(b'"torch_version"', b'"torch\xff_version"'))

    seen, df, messages = _measured_again(path, 5)
    assert seen == [] and len(df) == 5
    assert any("s.csv.env.json was damaged" in m and "s.csv.env.json.damaged" in m for m in messages), messages
    assert isinstance(json.loads(env.read_text()), dict)
    assert b"\xff" in (tmp_path / "s.csv.env.json.damaged").read_bytes()


def test_a_nul_block_across_a_line_break_is_damage_and_numbers_stay_numbers(tmp_path):
    path = tmp_path / "s.csv"
    _store(path, 10)
    data = path.read_bytes()
    start = data.index(b"\n4,ok,") + 1
    end = data.index(b"\n5,ok,") + len(b"\n5")  # NULs from row 4's start to row 5's "i": one line of 5 cells
    path.write_bytes(data[:start] + b"\0" * (end - start) + data[end:])
    as_read = ResultStore(path).to_frame()["i"]  # read as it is: "i" (batch_size, say) is text (pandas 3) or NaN (2.2)
    assert not pd.api.types.is_numeric_dtype(as_read) or as_read.isna().any()

    seen, df, _ = _measured_again(path, 10)
    assert sorted(seen) == [4, 5]
    assert pd.api.types.is_integer_dtype(df["i"]) and pd.api.types.is_float_dtype(df["value"])
    assert list(df["i"]) == list(range(10))


def test_a_damaged_header_never_turns_a_row_into_the_header(tmp_path):
    path = tmp_path / "s.csv"
    _store(path, 5)
    path.write_bytes(b'i,st"atus' + path.read_bytes()[len(b"i,status"):])
    seen, df, messages = _measured_again(path, 5)
    assert sorted(seen) == list(range(5))  # nothing can be read without the header: all measured again
    assert any("header line is damaged" in m for m in messages), messages
    assert list(pd.read_csv(path).columns[:2]) == ["i", "status"]


def test_a_store_deleted_under_a_running_sweep_is_said_and_written_whole_again(tmp_path):
    path = tmp_path / "s.csv"
    _store(path, 3)  # rows from an earlier run

    def fn(i):
        if i == 5:
            for f in tmp_path.glob("s.csv"):
                f.unlink()  # a user (or a clean-up) deletes the store mid-sweep
        return {"value": i * 0.5}

    with pytest.warns(UserWarning, match=r"s\.csv was deleted while this run was writing it; written whole again "
                                         r"with the 5 row\(s\)"):
        df = sweep(fn, {"i": list(range(8))}, path, progress=False)
    assert list(df["i"]) == list(range(8)) and (df["status"] == "ok").all()
    stored = pd.read_csv(path)
    assert list(stored.columns[:2]) == ["i", "status"] and sorted(stored["i"]) == list(range(8))


def test_fresh_waits_for_a_running_sweep_and_a_waiting_sweep_locks_the_new_file(tmp_path):
    folder = tmp_path / "01_study"
    store = folder / "s.csv"
    script = textwrap.dedent(f"""
        import time, cnnlab
        from cnnlab.profiling import sweep
        def fn(i):
            time.sleep(0.3)
            if i == 7:  # the last point's work is done (its row is written after, still under the lock)
                print("END", time.time(), flush=True)
            return {{"value": i}}
        print("START", flush=True)
        sweep(fn, {{"i": list(range(8))}}, {str(store)!r}, progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (store.exists() and store.read_text().count("\n") >= 2):
        time.sleep(0.05)
    assert store.exists(), "the sweep did not start"
    with pytest.warns(UserWarning, match=r"s\.csv is being written by a running sweep"):
        remove_stores(folder)
    removed_at = time.time()
    out, _ = proc.communicate(timeout=60)
    ended_at = float(out.split("END")[1])
    # deleted only after the sweep's last point (the sweep still held the lock then): it never wrote into a
    # deleted store. (Timed inside the last point: the end of the whole process could come after the deletion.)
    assert ended_at <= removed_at
    assert not folder.exists()


def test_fresh_in_the_pipeline_goes_through_the_store_locks(monkeypatch, tmp_path):
    from cnnlab import pipeline

    removed = []
    monkeypatch.setattr(pipeline, "remove_stores", lambda folder: removed.append(Path(folder).name))
    monkeypatch.setattr(pipeline, "output_dir", lambda name: tmp_path / name)

    class Stop(Exception):
        pass

    import papermill

    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: (_ for _ in ()).throw(Stop()))
    with pytest.raises(Stop):
        pipeline.run([Path("00_quickstart.ipynb")], "quick", fresh=True)
    assert removed == ["00_quickstart"]


def test_a_waiting_run_locks_the_lock_file_made_again_after_a_clean_up(tmp_path):
    from cnnlab.profiling.store import _flock

    lock = tmp_path / "s.csv.lock"
    order = []
    with _flock(lock, "busy"):
        def waiter():
            with _flock(lock, "busy"):
                order.append(("waiter", lock.stat().st_ino))

        thread = threading.Thread(target=waiter)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            thread.start()
            time.sleep(0.3)
            lock.unlink()  # a clean-up deletes the lock file while the waiter waits on it
            lock.touch()
            order.append(("new file", lock.stat().st_ino))
            with _flock(lock, "busy"):  # another process takes the new file at once
                time.sleep(0.3)
                order.append(("third", lock.stat().st_ino))
    thread.join(10)
    # the waiter did not run on the deleted file while the third held the new one: it came after, on the new file
    assert [o[0] for o in order] == ["new file", "third", "waiter"]
    assert order[-1][1] == order[0][1]


def test_a_point_damaged_twice_is_measured_again_not_stored_as_killed(tmp_path):
    path = tmp_path / "s.csv"
    for _ in range(3):  # measured, damaged, measured again, damaged again, measured again
        seen, df, _ = _measured_again(path, 4)
        assert (df["status"] == "ok").all(), df
        path.write_bytes(path.read_bytes().replace(b"\n2,ok,", b"\n2,o\xff,"))
    assert not (tmp_path / "s.csv.attempts").exists() or (tmp_path / "s.csv.attempts").read_text() == ""


def test_a_store_write_that_fails_is_named_and_is_not_a_death(tmp_path, monkeypatch):
    path = tmp_path / "s.csv"
    _store(path, 2)
    real = ResultStore.append

    def full_disk(self, row):
        if row["i"] == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, row)

    monkeypatch.setattr(ResultStore, "append", full_disk)
    for _ in range(3):  # three runs on a full disk: never counted as deaths
        with pytest.raises(OSError, match=r"s\.csv: could not be written for point \{'i': 3\} .*free"):
            sweep(lambda i: {"value": i * 0.5}, {"i": list(range(5))}, path, progress=False)
    monkeypatch.setattr(ResultStore, "append", real)
    seen, df, _ = _measured_again(path, 5)
    assert seen == [3, 4] and (df["status"] == "ok").all()  # measured, never "killed"
    assert len(pd.read_csv(path)) == 5  # every row stored before the failures is kept


def test_part_files_of_killed_rewrites_are_removed_under_the_lock(tmp_path):
    path = tmp_path / "s.csv"
    _store(path, 3)
    stray = [tmp_path / "s.csv.12345.tmp", tmp_path / "s.csv.9.tmp"]
    other = tmp_path / "s.csv.notes.tmp"  # not a part file of this store: left alone
    for f in stray + [other]:
        f.write_text("half a rewrite")
    _measured_again(path, 3)
    assert not any(f.exists() for f in stray) and other.exists()


def test_damaged_lines_are_set_aside_once_even_after_a_kill_between_the_two_writes(tmp_path, monkeypatch):
    path = tmp_path / "s.csv"
    _store(path, 5)
    path.write_bytes(path.read_bytes().replace(b"\n2,ok,", b"\n2,o\0,"))
    real = ResultStore._write_atomically
    monkeypatch.setattr(ResultStore, "_write_atomically",
                        lambda self, data: (_ for _ in ()).throw(KeyboardInterrupt()))  # killed there
    with pytest.raises(KeyboardInterrupt), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ResultStore(path).check()
    monkeypatch.setattr(ResultStore, "_write_atomically", real)
    seen, df, _ = _measured_again(path, 5)
    assert seen == [2] and len(df) == 5
    side = (tmp_path / "s.csv.damaged").read_bytes()
    assert side.count(b"2,o\0,") == 1
    assert not list(tmp_path.glob("*.tmp"))


def test_an_attempt_marker_that_cannot_be_written_names_its_file(tmp_path, monkeypatch):
    def full_disk(self, point):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Attempts, "_add", full_disk)
    with pytest.raises(OSError, match=r"s\.csv\.attempts: could not be written for point \{'i': 0\} .*free on"):
        sweep(lambda i: {"value": i}, {"i": [0, 1]}, tmp_path / "s.csv", progress=False)


@pytest.mark.parametrize("text, kept, damaged, lines", [
    ("i,status,value\n0,ok,0\n1,ok,1\n2,o", ["0", "1"], "2,o", 1),  # killed while writing row 2
    # cut just after a line break inside a quoted multi-line error cell: the record is left open
    ('i,status,value,error\n0,ok,0,\n1,error,,"Traceback:\n  line 1\n', ["0"], '1,error,,"Traceback:', 2),
    ("i,status,value\n0,ok,0\n1,ok\n2,ok,2\n", ["0", "2"], "1,ok\n", 1),  # a row cut mid-file
])
def test_store_moves_damaged_records_aside_and_sweep_measures_them_again(tmp_path, text, kept, damaged, lines):
    path = tmp_path / "s.csv"
    path.write_text(text)
    store = ResultStore(path)
    with pytest.warns(UserWarning, match=rf"s\.csv: {lines} damaged line\(s\).*moved to s\.csv\.damaged"):
        with store.lock():
            assert [r["i"] for r in store.rows()] == kept
    assert damaged in (tmp_path / "s.csv.damaged").read_text()
    seen = []
    df = sweep(lambda i: seen.append(i) or {"value": i}, {"i": [0, 1, 2]}, path, progress=False)
    assert sorted(seen) == sorted({0, 1, 2} - {int(k) for k in kept})  # only the damaged points again
    assert list(df["i"]) == [0, 1, 2] and list(df["status"]) == ["ok", "ok", "ok"]
    assert len(pd.read_csv(path)) == 3  # later rows are not swallowed by an open quote


def test_jsonl_store_moves_a_damaged_line_aside(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"i": 0, "status": "ok"}\n{"i": 1, "sta\n{"i": 2, "status": "ok"}\n')
    with pytest.warns(UserWarning, match=r"s\.jsonl: 1 damaged line"):
        df = sweep(lambda i: {"value": i}, {"i": [0, 1, 2]}, path, progress=False)
    assert list(df["i"]) == [0, 1, 2] and (df["status"] == "ok").all()


def test_two_runs_on_one_store_take_turns(tmp_path):
    """Two processes sweep the same store at once (two notebooks on one sweep): every point is measured once,
    no row is lost or doubled, and a column added midway does not break the other writer."""
    script = textwrap.dedent(f"""
        import sys, time
        import cnnlab
        from cnnlab.profiling import sweep
        def fn(i):
            time.sleep(0.01)
            return {{"value": i, "who": sys.argv[1], **({{"c7": 1}} if i == 30 else {{}})}}
        sweep(fn, {{"i": list(range(60))}}, {str(tmp_path / "shared.csv")!r}, progress=False)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, name], stderr=subprocess.PIPE, text=True)
             for name in ("a", "b")]
    errors = [p.communicate(timeout=240)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    df = pd.read_csv(tmp_path / "shared.csv")
    assert sorted(df["i"]) == list(range(60))  # each point once: none lost, none measured twice
    assert set(df.columns) >= {"i", "status", "value", "who", "c7"} and df["c7"].notna().sum() == 1
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.gpu
def test_sweep_writes_environment_beside_store_and_supports_jsonl(tmp_path):
    store = tmp_path / "r.jsonl"
    df = sweep(lambda n, shape: [{"part": 0, "v": n}, {"part": 1, "v": -n}],
               [{"n": 1, "shape": (3, 32, 32)}, {"n": 2, "shape": (3, 32, 32)}], store, progress=False)
    assert len(df) == 4 and sorted(df["v"]) == [-2, -1, 1, 2]
    again = sweep(lambda **p: pytest.fail("re-ran a stored point"),
                  [{"n": 1, "shape": (3, 32, 32)}, {"n": 2, "shape": (3, 32, 32)}], store, progress=False)
    assert len(again) == 4
    env = json.loads((tmp_path / "r.jsonl.env.json").read_text())
    for key in ("device_name", "driver_version", "cuda_version", "cudnn_version", "torch_version",
                "cnnlab_version", "cpu_model", "cpu_cores_logical", "git_commit", "preset", "date_utc"):
        assert key in env, key
    assert env["torch_version"] == torch.__version__ and env["cnnlab_version"] == cnnlab.__version__
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO)
    from cnnlab import paths

    if paths.checkout() is None:  # an installed cnnlab: there is no checkout to name
        assert env["git_commit"] is None
    elif head.returncode == 0:
        assert env["git_commit"] == head.stdout.strip()
    if not torch.cuda.is_available():
        assert env["driver_version"] is None and env["driver_missing_reason"]


def test_a_store_resumed_in_another_environment_keeps_both_records(tmp_path, monkeypatch):
    from cnnlab.profiling import store

    path = tmp_path / "s_0a1b2c3d.csv"
    store.write_env(path, {"batch_size": 8})
    first = json.loads((tmp_path / "s_0a1b2c3d.csv.env.json").read_text())
    assert first["store_settings"] == {"batch_size": 8} and first["cnnlab_code"] == store.code_digest()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store.write_env(path, {"batch_size": 8})  # the same environment: nothing to say, nothing added
    real = store.environment
    monkeypatch.setattr(store, "environment", lambda: {**real(), "torch_version": "0.0.1"})
    with pytest.warns(UserWarning, match=r"resuming .*s_0a1b2c3d\.csv in a different environment \(torch_version"):
        store.write_env(path, {"batch_size": 8})
    record = json.loads((tmp_path / "s_0a1b2c3d.csv.env.json").read_text())
    assert record["torch_version"] == first["torch_version"]  # the first run's record is kept
    assert [r["torch_version"] for r in record["resumed_runs"]] == ["0.0.1"]


# ---------------------------------------------------------------- stores of older code (make clean-stores)
def _keyed_store(folder: Path, name: str, code: str | None = None) -> Path:
    """A finished keyed sweep ``<folder>/stores/<name>_<digest>.csv``; with ``code``, recorded as measured by that
    cnnlab code instead of this one."""
    store = sweep(lambda i: {"value": i}, {"i": [0, 1]}, folder / f"{name}.csv", settings={"name": name},
                  progress=False).attrs["store"]
    if code is not None:
        env = store.with_name(store.name + ".env.json")
        env.write_text(json.dumps({**json.loads(env.read_text()), "cnnlab_code": code}))
    return store


def test_remove_old_stores_deletes_stores_of_other_code_with_their_side_files_and_keeps_the_rest(tmp_path):
    from cnnlab.profiling.store import remove_old_stores

    folder = tmp_path / "01_study"
    old = _keyed_store(folder, "sweep_old", code="0123456789ab")
    for side in (".damaged", ".env.json.damaged", ".4242.tmp"):
        old.with_name(old.name + side).write_text("x")
    (old.with_name(old.name + ".runs") / "p1" / "rank0").mkdir(parents=True)  # a DDP sweep's launch folders
    (old.with_name(old.name + ".runs") / "p1" / "rank0" / "log.txt").write_text("x")
    current = _keyed_store(folder, "sweep_new")
    unknown = folder / "stores" / "sweep_lost_0a1b2c3d.csv"  # no environment record: its code is unknown
    unknown.write_text("i,status\n0,ok\n")
    (folder / "table.csv").write_text("i\n0\n")  # a result table: never a store
    with pytest.warns(UserWarning, match=r"kept 1 store\(s\) of unknown cnnlab code .*sweep_lost_0a1b2c3d\.csv"):
        removed = remove_old_stores(tmp_path)
    assert removed == [old]
    assert not [p.name for p in old.parent.iterdir() if p.name.startswith(old.name)]
    assert current.is_file() and current.with_name(current.name + ".env.json").is_file()
    assert unknown.is_file() and (folder / "table.csv").is_file()


def test_remove_old_stores_waits_for_a_sweep_writing_the_store(tmp_path):
    from cnnlab.profiling.store import remove_old_stores

    old = _keyed_store(tmp_path, "sweep_old", code="0123456789ab")
    held, released = threading.Event(), []

    def writer():
        with ResultStore(old).lock():
            held.set()
            time.sleep(0.5)
            released.append(time.time())

    thread = threading.Thread(target=writer)
    thread.start()
    held.wait(10)
    with pytest.warns(UserWarning, match=r"sweep_old_[0-9a-f]{8}\.csv is being written by a running sweep"):
        removed = remove_old_stores(tmp_path)
    assert released, "removed before the writer let go of its store"
    thread.join()
    assert removed == [old] and not old.exists()


def test_make_clean_stores_says_what_it_removed_and_leaves_the_references_alone(tmp_path):
    figures = tmp_path / "figures"
    old = _keyed_store(figures / "01_study", "sweep_old", code="0123456789ab")
    current = _keyed_store(figures / "01_study", "sweep_new")
    reference = _keyed_store(figures / "reference" / "h100" / "01_study", "sweep_old", code="0123456789ab")
    done = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "clean-stores", "STAMP="],
                          env={**os.environ, "CNNLAB_FIGURES_DIR": str(figures)}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-2].startswith(f"removed {old} (") and lines[-2].endswith(" MiB, with its side files)"), lines
    assert re.fullmatch(r"removed 1 stores of older cnnlab code \(\d+\.\d MiB\); kept 1", lines[-1]), lines
    assert not old.exists() and current.is_file() and reference.is_file()


def test_clean_stores_unlinks_a_runs_folder_that_is_a_link_and_never_follows_it(tmp_path):
    from cnnlab.profiling.store import remove_old_stores

    old = _keyed_store(tmp_path / "01_study", "sweep_old", code="0123456789ab")
    elsewhere = tmp_path / "elsewhere"  # the link's target: someone's folder, never deleted through the link
    (elsewhere / "p1").mkdir(parents=True)
    (elsewhere / "p1" / "log.txt").write_text("x")
    old.with_name(old.name + ".runs").symlink_to(elsewhere, target_is_directory=True)
    assert remove_old_stores(tmp_path / "01_study") == [old]
    assert not [p.name for p in old.parent.iterdir() if p.name.startswith(old.name)]
    assert (elsewhere / "p1" / "log.txt").read_text() == "x"


def test_clean_stores_that_fails_midway_leaves_the_store_and_its_record_as_they_were(tmp_path, monkeypatch):
    import shutil

    from cnnlab.profiling import store as store_module

    old = _keyed_store(tmp_path / "01_study", "sweep_old", code="0123456789ab")
    (old.with_name(old.name + ".runs") / "p1").mkdir(parents=True)
    record = old.with_name(old.name + ".env.json")
    rows, env = old.read_text(), record.read_text()

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(shutil, "rmtree", refuse)
    with pytest.warns(UserWarning, match=r"could not remove .*sweep_old_[0-9a-f]{8}\.csv.*Permission denied"):
        removed = store_module.remove_old_stores(tmp_path / "01_study")
    assert removed == []
    assert old.read_text() == rows and record.read_text() == env  # still a store of known (older) code
    monkeypatch.undo()
    assert store_module.remove_old_stores(tmp_path / "01_study") == [old] and not record.exists()
