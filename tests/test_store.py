"""The result store under damage and faults (cnnlab.profiling.store and the sweep's use of it): a stray byte costs
only the lines it touches, invalid bytes are moved aside instead of crashing every later run, a store deleted under
a running sweep is written whole again, FRESH waits for a running sweep, and no point is stored as ``killed`` that
did not kill its process."""

from __future__ import annotations

import errno
import json
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
            return {{"value": i}}
        print("START", flush=True)
        sweep(fn, {{"i": list(range(8))}}, {str(store)!r}, progress=False)
        print("END", time.time(), flush=True)
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
    assert ended_at <= removed_at  # deleted only after the sweep ended: it never wrote into a deleted store
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
