import contextlib
import os
import shutil
import sys
import time

import pytest

from cnnlab import paths, pipeline

# The notebooks are part of a checkout, not of the installed package.
from_checkout = pytest.mark.skipif(paths.checkout() is None, reason="needs the source checkout (its notebooks/ and "
                                   "Makefile): cnnlab is imported here as an installed package")


def test_output_dir_follows_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CNNLAB_FIGURES_DIR", str(tmp_path))
    out = pipeline.output_dir("00_quickstart")
    assert out == tmp_path / "00_quickstart" and out.is_dir()


@from_checkout
def test_find_notebooks_by_number_and_unknown_selector():
    everything = pipeline.find_notebooks()
    assert everything and all(nb.suffix == ".ipynb" for nb in everything)
    assert [nb.stem for nb in everything] == sorted(nb.stem for nb in everything)
    assert [nb.stem for nb in pipeline.find_notebooks("00")] == ["00_quickstart"]
    with pytest.raises(SystemExit, match="available: 00_quickstart"):
        pipeline.find_notebooks("99")


@from_checkout
def test_notebooks_are_committed_without_outputs():
    import json

    for nb in pipeline.find_notebooks():
        cells = json.loads(nb.read_text())["cells"]
        assert any("parameters" in c.get("metadata", {}).get("tags", []) for c in cells), nb.name
        for cell in cells:
            if cell["cell_type"] == "code":
                assert not cell.get("outputs") and cell.get("execution_count") is None, nb.name


def test_parse_parameters_reads_literals_and_text():
    from cnnlab.pipeline import parse_parameters

    assert parse_parameters(["repeats=3", "batch_sizes=[1, 4]", "model=resnet20", "synthetic=True"]) == {
        "repeats": 3, "batch_sizes": [1, 4], "model": "resnet20", "synthetic": True}
    with pytest.raises(SystemExit, match="is not NAME=VALUE"):
        parse_parameters(["repeats"])


def test_a_parameter_given_twice_is_refused_by_name():
    # P="repeats=3 repeats=5" used to keep 5 silently: which one was meant?
    pairs = pipeline.split_parameters("repeats=3 batch_sizes=[1, 4] repeats=5")
    with pytest.raises(SystemExit, match=r"parameter repeats is given twice \(repeats=3, then repeats=5\)"):
        pipeline.parse_parameters(pairs)
    with pytest.raises(SystemExit, match="parameter model is given twice"):  # P= and -p count as one list
        pipeline.parse_parameters(["model=resnet20", " model =vgg11"])


def test_make_figures_parameters_reach_the_notebook_and_a_misspelt_one_fails(tmp_path, monkeypatch, capsys):
    from cnnlab import pipeline

    monkeypatch.setenv("CNNLAB_FIGURES_DIR", str(tmp_path))
    monkeypatch.setattr(pipeline, "BUILD", tmp_path / "build")
    assert pipeline.main(["--notebook", "00", "-p", "batchsize=4"]) == 1
    assert "unknown parameter(s) ['batchsize']" in capsys.readouterr().err


def _one_notebook(tmp_path, monkeypatch, name: str, source: str | list[str]) -> None:
    """The pipeline's notebooks folder holding one notebook ``name`` of one code cell ``source`` (or one per source
    of a list); its outputs under ``tmp_path``."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}  # as ours
    nb.cells = [nbformat.v4.new_code_cell(text) for text in ([source] if isinstance(source, str) else source)]
    (tmp_path / "notebooks").mkdir()
    nbformat.write(nb, tmp_path / "notebooks" / name)
    monkeypatch.setattr(pipeline, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(pipeline, "BUILD", tmp_path / "build")
    monkeypatch.setenv("CNNLAB_FIGURES_DIR", str(tmp_path / "figures"))


def test_executed_notebooks_keep_their_figures_under_a_headless_backend(tmp_path, monkeypatch):
    # `make figures` runs where MPLBACKEND=Agg may be set (CI): the executed copy, which make report links, must still
    # hold the plot, and the caller's environment comes back unchanged.
    import json

    _one_notebook(tmp_path, monkeypatch, "99_plot.ipynb",
                  "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    assert pipeline.run(pipeline.find_notebooks(), "quick") == 0
    outputs = json.loads((tmp_path / "build" / "99_plot.ipynb").read_text())["cells"][0]["outputs"]
    assert any("image/png" in o.get("data", {}) for o in outputs), outputs
    import os

    assert os.environ["MPLBACKEND"] == "Agg"


REPO = paths.base()
HOSTILE = "repeats=3';touch {marker};'"


def _fake_python(tmp_path, report_rc: int = 0):
    """A stand-in for the venv's python that records its arguments and the variables make passed, and fails as
    `-m cnnlab.report` with ``report_rc``: `make figures` then runs in a second, without any notebook."""
    log = tmp_path / "calls.jsonl"
    fake = tmp_path / "python"
    fake.write_text(f"""#!{sys.executable}
import json, os, sys
keys = ("CNNLAB_PARAMS", "CNNLAB_MAKE_PRESET", "CNNLAB_MAKE_NOTEBOOK", "CNNLAB_CELL_TIMEOUT")
with open({str(log)!r}, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "env": {{k: os.environ.get(k) for k in keys}}}}) + "\\n")
sys.exit({report_rc} if sys.argv[1:3] == ["-m", "cnnlab.report"] else 0)
""")
    fake.chmod(0o755)
    return fake, log


def _make_figures(fake, *args, env=None, target="figures"):
    import subprocess

    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO), target, f"PY={fake}", "STAMP=", *args],
                          capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=60)


@from_checkout
@pytest.mark.skipif(shutil.which("make") is None, reason="needs the make program, which is not on PATH here")
def test_make_figures_passes_parameters_without_a_shell_parsing_them(tmp_path):
    import json

    marker = tmp_path / "injected"
    fake, log = _fake_python(tmp_path)
    value = HOSTILE.format(marker=marker) + " models=['resnet20'] batch_sizes=[1, 4]"
    done = _make_figures(fake, f"P={value}", "NB=00;touch " + str(marker), "PRESET=paper;touch " + str(marker),
                         env={"CNNLAB_PRESET": "standard"})
    assert done.returncode == 0, done.stderr
    assert not marker.exists()  # no shell ran the text after the quote
    pipeline_call = json.loads(log.read_text().splitlines()[0])
    assert pipeline_call["argv"] == ["-m", "cnnlab.pipeline", "--report"]
    assert pipeline_call["env"] == {"CNNLAB_PARAMS": value, "CNNLAB_MAKE_PRESET": "paper;touch " + str(marker),
                                    "CNNLAB_MAKE_NOTEBOOK": "00;touch " + str(marker), "CNNLAB_CELL_TIMEOUT": None}
    assert pipeline.parse_parameters(pipeline.split_parameters(value)) == {
        "repeats": "3';touch " + str(marker) + ";'", "models": ["resnet20"], "batch_sizes": [1, 4]}
    assert "status=$?" not in done.stdout and "cnnlab.pipeline" not in done.stdout  # make does not echo its recipe
    log.unlink()
    assert _make_figures(fake).returncode == 0  # no PRESET given: the pipeline falls back to $CNNLAB_PRESET
    assert json.loads(log.read_text().splitlines()[0])["env"]["CNNLAB_MAKE_PRESET"] is None


@from_checkout
@pytest.mark.skipif(shutil.which("make") is None, reason="needs the make program, which is not on PATH here")
def test_make_never_expands_p_nb_preset_or_timeout(tmp_path):
    """GNU make exports a variable set on its command line to every recipe, and expands it on the way: P='$(shell
    touch X)' ran the command under any target, `make report` included (issue 44, item 3). The text arrives as typed."""
    import json

    marker = tmp_path / "expanded"
    hostile = f"$(shell touch {marker})"
    values = {"P": f"repeats=3 models={hostile} note=$$HOME", "NB": hostile, "PRESET": hostile, "TIMEOUT": hostile}
    fake, log = _fake_python(tmp_path)
    for target in ("report", "figures"):
        done = _make_figures(fake, *(f"{name}={value}" for name, value in values.items()), target=target)
        assert done.returncode == 0, done.stderr
    assert not marker.exists()
    report_call, pipeline_call = (json.loads(line) for line in log.read_text().splitlines()[:2])
    assert report_call["argv"] == ["-m", "cnnlab.report"] and pipeline_call["argv"] == ["-m", "cnnlab.pipeline", "--report"]
    assert pipeline_call["env"] == {"CNNLAB_PARAMS": values["P"], "CNNLAB_MAKE_PRESET": hostile,
                                    "CNNLAB_MAKE_NOTEBOOK": hostile, "CNNLAB_CELL_TIMEOUT": hostile}


def test_make_figures_writes_the_report_after_a_failed_notebook_not_after_a_stop_and_fails_when_it_failed(monkeypatch):
    """make figures' --report: the report follows the notebooks, also a failed one; the status fails when either
    failed; a stop (Ctrl-C, SIGTERM, SIGHUP) ends the run without it."""
    import signal

    from cnnlab import report

    written = []
    for code, report_rc, status in ((0, 0, 0), (0, 1, 1), (1, 0, 1), (1, 1, 1)):
        monkeypatch.setattr(report, "main", lambda argv, rc=report_rc: written.append(argv) or rc)
        assert pipeline._then_report(code) == status
    assert len(written) == 4
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        assert pipeline._then_report(128 + signum) == 128 + signum
    assert len(written) == 4


def test_the_documented_parameter_examples_parse():
    # the Makefile's and README's example, as make hands it over: the quotes arrive and are kept
    assert pipeline.parse_parameters(pipeline.split_parameters("repeats=3 models=['resnet20']")) == {
        "repeats": 3, "models": ["resnet20"]}
    assert pipeline.split_parameters("  ") == []
    assert pipeline.split_parameters("batch_sizes=[1, 4]  model=resnet20") == ["batch_sizes=[1, 4]", "model=resnet20"]


def test_preset_order_and_bad_values(monkeypatch):
    choose = pipeline.choose_preset
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert choose(None, {}) == "quick" and choose("auto", {}) == "quick"  # auto: quick on a CPU
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert choose(None, {}) == "standard" and choose(None, {"CNNLAB_PRESET": "quick"}) == "quick"  # on a GPU
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert choose(None, {"CNNLAB_PRESET": "standard"}) == "standard"
    assert choose(None, {"CNNLAB_PRESET": "standard", "CNNLAB_MAKE_PRESET": "Paper"}) == "paper"
    assert choose("quick", {"CNNLAB_PRESET": "standard", "CNNLAB_MAKE_PRESET": "paper"}) == "quick"
    with pytest.raises(SystemExit, match=r"\$CNNLAB_PRESET 'papr' is not a preset; valid: auto, quick"):
        choose(None, {"CNNLAB_PRESET": "papr", "CNNLAB_MAKE_PRESET": "paper"})
    with pytest.raises(SystemExit, match="make's PRESET= 'huge' is not a preset"):
        choose(None, {"CNNLAB_MAKE_PRESET": "huge"})
    monkeypatch.setenv("CNNLAB_PRESET", "papr")
    with pytest.raises(SystemExit, match="CNNLAB_PRESET 'papr'"):
        pipeline.main(["--notebook", "00"])


@from_checkout
def test_make_nb_reaches_the_notebook_choice(monkeypatch):
    monkeypatch.setenv("CNNLAB_MAKE_NOTEBOOK", "99")  # make's NB=
    with pytest.raises(SystemExit, match="no notebook matches NB='99'"):
        pipeline.main([])


def test_a_dead_kernel_is_named_with_what_to_do(tmp_path, monkeypatch, capsys):
    _one_notebook(tmp_path, monkeypatch, "98_dies.ipynb", "import os\nos._exit(9)")  # dies, as an OOM kill does
    assert pipeline.run(pipeline.find_notebooks(), "quick") == 1
    err = capsys.readouterr().err
    assert "98_dies.ipynb: its kernel died" in err and "make figures NB=98" in err


def test_a_running_notebook_says_which_cell_runs_and_how_far_its_sweep_is(tmp_path, monkeypatch, capfd):
    """Headless, the sweep inside a notebook is reported by the pipeline while it runs (plain lines, no carriage
    returns), and the kernel is reached over IPC: no "running over TCP without encryption" warning, no socket file
    left in the notebooks' folder."""
    _one_notebook(tmp_path, monkeypatch, "97_slow.ipynb",
                  "import time\nfrom cnnlab.profiling import sweep\n"
                  "df = sweep(lambda i: (time.sleep(0.4), {'x': i})[1], {'i': list(range(6))}, desc='six slow points')")
    monkeypatch.setenv("CNNLAB_PROGRESS_EVERY", "0.3")
    assert pipeline.run(pipeline.find_notebooks(), "quick") == 0
    out, err = capfd.readouterr()
    lines = [line for line in out.splitlines() if line.startswith("[cnnlab] 97_slow, cell 1 of 1")]
    assert any("six slow points: " in line and "/6 (i=" in line and "elapsed" in line for line in lines), out
    assert any("left" in line for line in lines), out  # an estimate once a point is done
    assert "\r" not in out
    assert "without encryption" not in out + err
    assert sorted(p.name for p in (tmp_path / "notebooks").iterdir()) == ["97_slow.ipynb"]


def test_progress_lines_estimate_from_the_points_done_in_this_run():
    from cnnlab.profiling import progress

    state = {"desc": "sweep", "done": 6, "initial": 4, "total": 10, "point": "b=8", "elapsed_s": 20, "written": 100.0}
    assert progress.describe(state, now=100.0) == "sweep: 6/10 (b=8), 0:20 elapsed, about 0:40 left"
    assert progress.describe({**state, "done": 4}, now=105.0) == "sweep: 4/10 (b=8), 0:25 elapsed"  # none done yet
    assert progress.read("/nonexistent/progress.json") is None


def test_make_lab_starts_as_any_user_prints_its_url_and_hides_housekeeping_files():
    """`make lab` (as root too: --allow-root is passed there) prints its URL with the token, which opens
    notebooks/00_quickstart.ipynb, and a line saying to start there beside it (issue 34: it printed /lab?token=...,
    the Launcher, since JupyterLab's own default URL overrode --ServerApp.default_url); it serves the checkout with
    build/ reachable, and keeps conftest.py and stores' lock files out of the file browser."""
    import json
    import os
    import queue
    import re
    import signal
    import subprocess
    import threading
    import urllib.error
    import urllib.request

    proc = subprocess.Popen(["make", "--no-print-directory", "-C", str(REPO), "lab", "STAMP=",
                             "LAB_ARGS=--no-browser --port=8961 --ServerApp.port_retries=40"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        lines = queue.Queue()  # read beside: a line that never comes must not block the test past its deadline
        threading.Thread(target=lambda: [*map(lines.put, proc.stdout), lines.put("")], daemon=True).start()
        start, seen = None, []
        deadline = time.monotonic() + 90
        while start is None and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if not line:
                break
            seen.append(line)
            start = re.search(r"^ +start with notebooks/00_quickstart\.ipynb: (http://127\.0\.0\.1:\d+)"
                              r"/lab/tree/notebooks/00_quickstart\.ipynb\?token=(\w+)$", line)
        printed = "".join(seen)
        assert start, printed
        assert f"{start[1]}/lab/tree/notebooks/00_quickstart.ipynb?token={start[2]}\n{line}" in printed, (
            "the start line is not right under the URLs JupyterLab printed:\n" + printed)
        assert "Running as root is not recommended" not in printed
        base, token = start.groups()

        def listing(folder):
            for _ in range(60):  # (the server prints its URL a moment before it accepts connections)
                try:
                    with urllib.request.urlopen(f"{base}/api/contents/{folder}?token={token}", timeout=30) as page:
                        return [c["name"] for c in json.load(page)["content"]]
                except urllib.error.URLError as err:
                    if not isinstance(err.reason, ConnectionRefusedError):
                        raise
                    time.sleep(0.5)
            raise AssertionError(f"{base} refused connections for 30 s")

        names = listing("notebooks")
        assert "explore.ipynb" in names and "00_quickstart.ipynb" in names and "conftest.py" not in names
        assert "notebooks" in listing("") and "README.md" in listing("")  # the checkout's root: build/ is reachable
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@from_checkout
def test_estimate_says_how_long_each_notebook_expects_to_take_without_measuring(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CNNLAB_FIGURES_DIR", str(tmp_path))
    from cnnlab.studies import quickstart

    assert pipeline.main(["--estimate", "--notebook", "00", "--preset", "quick", "-p", "repeats=3",
                          "-p", "batch_sizes=[1, 2]", "-p", "not_a_quickstart_parameter=1"]) == 0
    out = capsys.readouterr().out
    assert "[cnnlab] 00_quickstart (quick): about " in out and "probe of its work here" in out
    assert "[cnnlab] all 1 notebook(s), quick preset: about " in out
    assert not any(tmp_path.iterdir())  # nothing measured, nothing stored
    monkeypatch.setattr(quickstart.measure, "plan", lambda cfg: 1 / 0)
    assert pipeline.main(["--estimate", "--notebook", "00", "--preset", "quick"]) == 0
    assert "00_quickstart: no estimate (its probe failed: ZeroDivisionError" in capsys.readouterr().out


def test_a_relative_figures_dir_is_where_the_run_was_started_for_the_kernel_fresh_and_the_console(tmp_path, monkeypatch,
                                                                                                   capsys):
    """CNNLAB_FIGURES_DIR=myfigs, started in tmp_path: the notebook (whose kernel runs in notebooks/) writes into
    tmp_path/myfigs, FRESH removes that folder's old results first, and the console names it."""
    _one_notebook(tmp_path, monkeypatch, "96_relative.ipynb",
                  "from cnnlab import pipeline\nout = pipeline.output_dir('96_relative')\n"
                  "assert not (out / 'old.txt').exists(), 'FRESH kept the old results'\n"
                  "(out / 'new.txt').write_text('ok')")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CNNLAB_FIGURES_DIR", "myfigs")
    (tmp_path / "myfigs" / "96_relative").mkdir(parents=True)
    (tmp_path / "myfigs" / "96_relative" / "old.txt").write_text("an earlier run's")
    assert pipeline.main(["--notebook", "96", "--fresh"]) == 0, capsys.readouterr().err
    results = tmp_path / "myfigs" / "96_relative"
    assert sorted(p.name for p in results.iterdir()) == ["new.txt"]
    assert not (tmp_path / "notebooks" / "myfigs").exists()
    assert f"outputs in {results}" in capsys.readouterr().out


def test_a_preset_parameter_is_the_runs_one_preset_for_the_console_the_kernel_and_the_environment(tmp_path, monkeypatch,
                                                                                                 capsys):
    """make figures P="preset=standard": the console, $CNNLAB_PRESET in the kernel, profiling.environment() (which
    environment.json and the stores' env records hold) and the study's cfg.preset (environment.json's run record) all
    say standard (the console and the records used to say quick while the notebook ran standard)."""
    import json

    record = tmp_path / "seen.json"
    _one_notebook(tmp_path, monkeypatch, "94_preset.ipynb",
                  "import json, os\nfrom cnnlab import profiling, studies\nfrom cnnlab.studies import quickstart\n"
                  "cfg = studies.configure(quickstart, globals())\n"
                  f"open({str(record)!r}, 'w').write(json.dumps({{'variable': os.environ['CNNLAB_PRESET'], "
                  "'environment': profiling.environment()['preset'], 'cfg': cfg.preset}))")
    monkeypatch.setenv("CNNLAB_PRESET", "quick")  # a lower source: the parameter wins over it
    monkeypatch.delenv("CNNLAB_MAKE_PRESET", raising=False)
    monkeypatch.setenv("CNNLAB_PARAMS", "preset=standard")
    assert pipeline.main(["--notebook", "94"]) == 0, capsys.readouterr().err
    assert "running 94_preset.ipynb (preset standard)" in capsys.readouterr().out
    assert json.loads(record.read_text()) == {"variable": "standard", "environment": "standard", "cfg": "standard"}
    # the same preset twice is one choice; two different ones, or a value that is not a preset, are refused
    assert pipeline.choose_preset(None, {"CNNLAB_MAKE_PRESET": "standard"}, parameter="Standard") == "standard"
    with pytest.raises(SystemExit, match="parameter preset='paper' and make's PRESET= 'quick' disagree"):
        pipeline.choose_preset(None, {"CNNLAB_MAKE_PRESET": "quick"}, parameter="paper")
    with pytest.raises(SystemExit, match="parameter preset= 'huge' is not a preset"):
        pipeline.choose_preset(None, {}, parameter="huge")


# A pipeline run in its own process (as `make figures` starts it), on the notebooks of ``root/notebooks``.
_PIPELINE = """
import sys
from pathlib import Path
from cnnlab import pipeline
root = Path(sys.argv[1])
pipeline.NOTEBOOKS, pipeline.BUILD = root / "notebooks", root / "build"
pipeline.cli(sys.argv[2:])
"""


def _pipeline_process(tmp_path, monkeypatch, name: str, source: str, *args, env=None):
    """`python -m cnnlab.pipeline` on one notebook of one cell, in a session of its own (its process group stands in
    for the terminal's foreground group, which Ctrl-C signals as a whole)."""
    import subprocess

    import signal

    def terminal_defaults():  # as a terminal's foreground job: no signal ignored, even where the tests run as a
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # background job (SIGINT ignored) or under nohup
            signal.signal(signum, signal.SIG_DFL)

    _one_notebook(tmp_path, monkeypatch, name, source)
    return subprocess.Popen([sys.executable, "-c", _PIPELINE, str(tmp_path), *args], cwd=REPO,
                            env={**os.environ, "CNNLAB_PROGRESS_EVERY": "600", **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=terminal_defaults)


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {seconds} s")
        time.sleep(0.1)


def test_ctrl_c_stops_a_sweep_in_one_line_and_is_not_counted_as_a_death(tmp_path, monkeypatch):
    """Ctrl-C (SIGINT to the foreground process group) while a notebook's sweep measures a point: the point's attempt
    mark is gone (a user's stop is not a death: two of them used to store the point as 'killed'), the finished point
    is kept, and the terminal gets one line naming the notebook, the cell and the point, no traceback."""
    import signal

    from cnnlab.profiling.store import Attempts

    store = tmp_path / "figures" / "points.csv"
    proc = _pipeline_process(tmp_path, monkeypatch, "95_stop.ipynb",
                             "import time\nfrom cnnlab.profiling import sweep\n"
                             "df = sweep(lambda i: (time.sleep(120 if i == 1 else 0), {'x': i})[1], {'i': [0, 1, 2]}, "
                             f"{str(store)!r}, desc='three points')")
    attempts = Attempts(store)
    try:
        _wait_for(lambda: attempts.count({"i": 1}) == 1, 60, "attempt mark of point i=1")
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert attempts.count({"i": 1}) == 0, attempts.path.read_text()
    assert [r["i"] for r in __import__("csv").DictReader(store.open())] == ["0"]
    assert "Traceback" not in out + err, out + err
    stops = [line for line in (out + err).splitlines() if "Ctrl-C" in line]
    assert len(stops) == 1 and "95_stop" in stops[0] and "cell 1" in stops[0] and "i=1" in stops[0], out + err
    assert proc.returncode == -signal.SIGINT  # as Python itself ends on Ctrl-C: make and the shell stop too


def test_a_cell_past_its_time_limit_stops_the_run_naming_the_notebook_the_cell_and_the_point(tmp_path, monkeypatch):
    """A point that hangs (make figures used to wait for ever): the cell is stopped at its limit ($CNNLAB_CELL_TIMEOUT,
    which make's TIMEOUT= sets), the run fails with one line naming the notebook, the cell, the point and the limit, the
    finished point is kept and the hung one is not counted as a death (it was interrupted, not killed)."""
    import signal

    from cnnlab.profiling.store import Attempts

    store = tmp_path / "figures" / "points.csv"
    proc = _pipeline_process(tmp_path, monkeypatch, "93_hangs.ipynb",
                             ["import time\nfrom cnnlab.profiling import sweep",  # (seconds on a busy 2-core CPU)
                              "df = sweep(lambda i: (time.sleep(3600 if i == 1 else 0), {'x': i})[1], "
                              f"{{'i': [0, 1, 2]}}, {str(store)!r}, desc='three points')"],
                             env={"CNNLAB_CELL_TIMEOUT": "12s"})
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, out + err
    lines = [line for line in err.splitlines() if "TIMED OUT" in line]
    assert len(lines) == 1 and "Traceback" not in out + err and "Timeout waiting" not in err, out + err
    assert "93_hangs, cell 2 of 2" in lines[0] and "(i=1)" in lines[0] and "limit of 0:12" in lines[0], lines[0]
    assert "$CNNLAB_CELL_TIMEOUT (make's TIMEOUT=) 12s" in lines[0] and "It was interrupted" in lines[0], lines[0]
    assert [r["i"] for r in __import__("csv").DictReader(store.open())] == ["0"]
    assert Attempts(store).count({"i": 1}) == 0


def test_cell_limits_by_preset_and_overridden(monkeypatch):
    limit = pipeline.cell_limit
    assert limit("quick", environ={}) == (30 * 60, "the quick preset's")
    assert limit("standard", environ={})[0] >= 3600 and limit("paper", environ={})[0] >= limit("standard", environ={})[0]
    assert limit("quick", environ={"CNNLAB_CELL_TIMEOUT": "45m"})[0] == 2700
    assert limit("quick", "1.5h", environ={"CNNLAB_CELL_TIMEOUT": "45m"})[0] == 5400  # --timeout first
    assert limit("paper", environ={"CNNLAB_CELL_TIMEOUT": "0"})[0] is None
    assert limit("quick", "90", environ={})[0] == 90 and limit("quick", "none", environ={})[0] is None
    for bad in ("soon", "-5", "5d", "0.0"):
        with pytest.raises(SystemExit, match="is not a time limit for one cell"):
            limit("quick", bad, environ={})


@from_checkout
@pytest.mark.skipif(shutil.which("make") is None, reason="needs the make program, which is not on PATH here")
def test_make_figures_timeout_reaches_the_pipeline(tmp_path):
    import json

    fake, log = _fake_python(tmp_path)
    assert _make_figures(fake, "TIMEOUT=45m").returncode == 0
    assert json.loads(log.read_text().splitlines()[0])["env"]["CNNLAB_CELL_TIMEOUT"] == "45m"


def _pipeline_python(tmp_path):
    """A stand-in for the venv's python for `make figures`: `-m cnnlab.pipeline ...` runs this checkout's pipeline on
    the notebooks of ``tmp_path/notebooks`` (:func:`_one_notebook`); anything else runs as python would."""
    fake = tmp_path / "python"
    fake.write_text(f"""#!{sys.executable}
import os, sys
if sys.argv[1:3] != ["-m", "cnnlab.pipeline"]:
    os.execv({sys.executable!r}, [{sys.executable!r}, *sys.argv[1:]])
sys.path.insert(0, {str(REPO)!r})
from pathlib import Path
from cnnlab import pipeline
pipeline.NOTEBOOKS, pipeline.BUILD = Path({str(tmp_path / "notebooks")!r}), Path({str(tmp_path / "build")!r})
pipeline.cli(sys.argv[3:])
""")
    fake.chmod(0o755)
    return fake


_HANGS_AT_POINT_1 = ("import time\nfrom cnnlab.profiling import sweep\n"
                     "df = sweep(lambda i: (time.sleep(600 if i == 1 else 0), {{'x': i}})[1], {{'i': [0, 1, 2]}}, "
                     "{store!r}, desc='three points')")


def _running(processes) -> list:
    """Those of ``processes`` (psutil) still running: a zombie has ended (a container's PID 1 may never reap it)."""
    import psutil

    def running(proc):
        with contextlib.suppress(psutil.Error):
            return proc.status() != psutil.STATUS_ZOMBIE
        return False

    return [proc for proc in processes if running(proc)]


@from_checkout
@pytest.mark.skipif(shutil.which("make") is None, reason="needs the make program, which is not on PATH here")
def test_sigterm_to_make_ends_the_whole_run_in_one_line_as_ctrl_c_does(tmp_path, monkeypatch):
    """`kill -TERM <make>` (a scheduler, `timeout`) while a notebook's sweep measures: make used to exit at once while
    the pipeline, re-parented to PID 1, went on with its kernel. Now every process make started has ended within
    seconds, the terminal got one line naming the notebook, the cell and the point, the finished point is kept and the
    stopped one is not counted as a death."""
    import signal
    import subprocess

    import psutil

    from cnnlab.profiling.store import Attempts

    store = tmp_path / "figures" / "points.csv"
    _one_notebook(tmp_path, monkeypatch, "92_term.ipynb", _HANGS_AT_POINT_1.format(store=str(store)))
    log = tmp_path / "make.log"  # (a file, not a pipe: a process left running would hold a pipe open)
    with log.open("w") as out:
        make = subprocess.Popen(["make", "--no-print-directory", "-C", str(REPO), "figures", "NB=92", "STAMP=",
                                 f"PY={_pipeline_python(tmp_path)}"], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "CNNLAB_PROGRESS_EVERY": "600"}, start_new_session=True)
    attempts = Attempts(store)
    started = []
    try:
        _wait_for(lambda: attempts.count({"i": 1}) == 1, 90, "attempt mark of point i=1")
        started = psutil.Process(make.pid).children(recursive=True)  # the pipeline and its kernel (own session)
        assert len(started) >= 2, started
        make.send_signal(signal.SIGTERM)
        make.wait(timeout=60)
        _wait_for(lambda: not _running(started), 10, "end of every process make started")
    finally:
        for proc in [*started, make]:
            with contextlib.suppress(psutil.Error, OSError):
                proc.kill()
    assert make.returncode != 0
    printed = log.read_text()
    stops = [line for line in printed.splitlines() if line.startswith("[cnnlab] stopped")]
    assert len(stops) == 1 and "SIGTERM" in stops[0] and "92_term" in stops[0] and "i=1" in stops[0], printed
    assert "Traceback" not in printed, printed
    assert attempts.count({"i": 1}) == 0, attempts.path.read_text()
    assert [r["i"] for r in __import__("csv").DictReader(store.open())] == ["0"]


def test_a_stopped_run_leaves_nothing_in_tmpdir_even_with_home_unwritable(tmp_path, monkeypatch):
    """SIGTERM to a run's process group while its kernel measures, with HOME unwritable: nothing is left in $TMPDIR
    (the kernel's connection file, which holds its key, and its IPC socket folder used to stay, and so did IPython's
    profile_default and a matplotlib-* folder, the fallbacks of an unwritable HOME), and the kernel has ended."""
    import signal

    import psutil

    from cnnlab.profiling.store import Attempts

    tmpdir, home = tmp_path / "tmp", tmp_path / "home"
    tmpdir.mkdir()
    home.write_text("a file: no folder can be made in it, not even by root")
    store = tmp_path / "figures" / "points.csv"
    source = "import matplotlib.pyplot, IPython\n" + _HANGS_AT_POINT_1.format(store=str(store))
    proc = _pipeline_process(tmp_path, monkeypatch, "91_tmp.ipynb", source,
                             env={"TMPDIR": str(tmpdir), "HOME": str(home), "XDG_CONFIG_HOME": "", "XDG_CACHE_HOME": "",
                                  "IPYTHONDIR": "", "MPLCONFIGDIR": "", "JUPYTER_RUNTIME_DIR": str(tmpdir),
                                  "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})  # (as make sets it)
    started = []
    try:
        _wait_for(lambda: Attempts(store).count({"i": 1}) == 1, 90, "attempt mark of point i=1")
        started = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        _wait_for(lambda: not _running(started), 10, "end of the kernel")
    finally:
        for child in [*started, psutil.Process(proc.pid)] if proc.poll() is None else started:
            with contextlib.suppress(psutil.Error):
                child.kill()
    assert sorted(p.name for p in tmpdir.iterdir()) == [], err
    assert "SIGTERM" in err, out + err
