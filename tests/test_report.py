"""Tests for cnnlab.report: the report page from a tree of two machines' results, the notebook-side table display,
the check of executed notebooks' outputs, and the nbval hook that applies it in `make test`."""

from __future__ import annotations

import base64
import html
import json
import math
import re
import shutil
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pandas as pd
import pytest

from cnnlab import report
from cnnlab.claims import Claim, table

REPO = Path(__file__).resolve().parents[1]
TRICKY = "<script>alert('x')</script> & a claim in HTML"


class _Page(HTMLParser):
    """Every link and image of a page, and the matrix's rows as lists of cell texts."""

    def __init__(self):
        super().__init__()
        self.hrefs, self.srcs, self.matrix, self._in_matrix, self._cell = [], [], [], False, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a":
            self.hrefs.append(attrs["href"])
        elif tag == "img":
            self.srcs.append(attrs["src"])
        elif tag == "table":
            self._in_matrix = attrs.get("class") == "matrix"
        elif tag == "tr" and self._in_matrix:
            self.matrix.append([])
        elif tag in ("td", "th") and self._in_matrix:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._in_matrix and self._cell is not None:
            self.matrix[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._in_matrix = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data + " ")


def png(label: str, width: int = 40, height: int = 30) -> bytes:
    """A real (decodable) PNG of ``width`` x ``height`` grey pixels whose bytes name ``label`` (a tEXt chunk), so
    that two figures' bytes differ and a browser shows it."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes([0x80 + (y * 4) % 100]) * width for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"tEXt", b"Title\x00" + label.encode()) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def _results(folder: Path, claims: list[Claim], env: dict, figures: list[str]) -> None:
    folder.mkdir(parents=True)
    table(claims).to_csv(folder / "claims.csv", index=False)
    (folder / "environment.json").write_text(json.dumps({**env, "figures": figures}))
    for name in figures:
        (folder / f"{name}.png").write_bytes(png(str(folder / name)))
        (folder / f"{name}.svg").write_text("<svg/>")
    pd.DataFrame({"batch_size": [1]}).to_csv(folder / "batch_size_batch.csv", index=False)


def _executed_notebook(path: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("profile()", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text="USDT:2026 x.cpp:52] profiler_start\n")]
    nb.cells = [nbformat.v4.new_markdown_cell("# 01"), cell]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


@pytest.fixture
def two_machines(tmp_path) -> Path:
    figures = tmp_path / "figures"
    claim = "throughput at the best batch size is far above batch 1"
    crit = "best / batch-1 throughput > 2"
    _results(figures / "01_batch_size",
             [Claim(claim, "Fig. 1", "3.1x on cpu", True, "cpu", criterion=crit),
              Claim(TRICKY, "Fig. 2", "missing", None, "cpu", criterion="GPU utilisation rises", note="no GPU here")],
             {"device_name": "AMD EPYC", "gpu_names": [], "cuda_version": None,
              "cuda_missing_reason": "torch.cuda.is_available() is False", "torch_version": "2.13.0+cpu",
              "date_utc": "2026-11-23T10:00:00+00:00"},
             ["01_time", "01_a_other"])  # the recorded first figure is not the first by name
    _results(figures / "02_fp16", [Claim("fp16 is faster", "Fig. 3", "0.8x", False, "cpu", criterion="ratio < 0.9")],
             {"device_name": "AMD EPYC"}, ["02_fig3"])
    _results(figures / "reference" / "h100" / "01_batch_size",
             [Claim(claim, "Fig. 1", "9.5x on cuda", False, "cuda:0", criterion=crit)],
             {"device_name": "NVIDIA H100 80GB HBM3", "gpu_names": ["NVIDIA H100 80GB HBM3"], "cuda_version": "12.8",
              "torch_version": "2.11.0"}, ["01_time"])
    _executed_notebook(tmp_path / "build" / "notebooks" / "01_batch_size.ipynb")
    return tmp_path


def test_report_page_holds_the_claims_matrix_of_both_machines(two_machines):
    page_path = report.write(two_machines / "figures", two_machines / "build" / "notebooks")
    assert page_path == two_machines / "figures" / "index.html"
    text = page_path.read_text()
    page = _Page()
    page.feed(text)
    header, *rows = page.matrix
    assert header == ["notebook", "claim", "paper reports", "this machine AMD EPYC", "h100 NVIDIA H100 80GB HBM3"]
    by_claim = {r[1].split(" criterion:")[0]: r for r in rows if len(r) == 5}
    row = by_claim["throughput at the best batch size is far above batch 1"]
    assert row[3] == "held 3.1x on cpu" and row[4] == "did not hold 9.5x on cuda"
    assert "criterion: best / batch-1 throughput > 2" in row[1] and row[2] == "Fig. 1"
    assert by_claim[TRICKY][3].startswith("n/a") and by_claim[TRICKY][4] == "claim not checked"
    assert by_claim["fp16 is faster"][3].startswith("did not hold") and by_claim["fp16 is faster"][4] == "not run"
    assert any(r[0].startswith("Paper 001") for r in rows)
    # every file link points at a file that exists, relative to the page; every image is held in the page itself
    # (a data: URI of the PNG's bytes: JupyterLab's HTML viewer does not load the page's neighbours, issue 34)
    base = page_path.parent
    files = [h for h in page.hrefs if not h.startswith("#")]
    assert all((base / link).is_file() for link in files), [x for x in files if not (base / x).is_file()]
    shown = [_png_shown(src, base) for src in page.srcs]
    assert shown == ["01_batch_size/01_time.png", "reference/h100/01_batch_size/01_time.png", "02_fp16/02_fig3.png"], \
        shown
    # (the main figure is the first the study returned: not 01_a_other, the first by name)
    assert "notebooks/01_batch_size.html" in files and "01_batch_size/batch_size_batch.csv" in files
    assert "profiler_start" in (base / "notebooks" / "01_batch_size.html").read_text()
    # escaped everywhere, environment of both machines, problems of the executed notebook listed
    assert "<script>alert" not in text and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; a claim" in text
    assert "NVIDIA H100 80GB HBM3" in text and "none (torch.cuda.is_available() is False)" in text
    assert "USDT lines" in text


def test_beside_a_gpu_reference_each_notebook_shows_its_main_metric_as_a_ratio(two_machines):
    figures = two_machines / "figures"
    model = "<i>resnet20</i>"  # a value from a results folder is text, never markup

    def sweep(latencies: dict[int, float | None]) -> pd.DataFrame:
        return pd.DataFrame({"model": model, "batch_size": list(latencies), "status": "ok",
                             "latency_ms_median": list(latencies.values())})

    sweep({1: 8.0, 2: 10.0, 4: 16.0, 8: None}).to_csv(figures / "01_batch_size" / "batch_size_batch.csv", index=False)
    sweep({1: 2.0, 2: 2.0, 8: 1.0}).to_csv(figures / "reference" / "h100" / "01_batch_size" / "batch_size_batch.csv",
                                           index=False)
    _results(figures / "reference" / "a-cpu" / "01_batch_size", [], {"device_name": "Intel Xeon", "gpu_names": []},
             [])  # first by name, but no GPU: not the one compared with
    sweep({1: 8.0, 2: 10.0}).to_csv(figures / "reference" / "a-cpu" / "01_batch_size" / "batch_size_batch.csv",
                                    index=False)
    text = report.write(figures, two_machines / "nothing").read_text()
    section = text[text.index('<section id="01_batch_size">'):text.index('<section id="02_fp16">')]
    # batch 1: 8 / 2, batch 2: 10 / 2; batch 4 was measured here only, batch 8 there only
    assert ("<b>this machine / h100</b>: batch_size_batch: latency_ms_median, this machine / h100 at the 2 points "
            "both measured: 4.00x to 5.00x (median 4.50x)") in section
    ratio_table = section[section.index('<table class="ratios">'):]
    assert "<th>latency_ms_median: this machine / h100</th>" in ratio_table
    assert "<td>&lt;i&gt;resnet20&lt;/i&gt;</td><td>1</td><td>8</td><td>2</td><td>4</td>" in ratio_table
    assert "<i>resnet20" not in text
    assert report.gpu_reference(report.find_machines(figures)).name == "h100"
    assert "02_fp16" not in section and 'class="ratio"' not in text[text.index('<section id="02_fp16">'):]


def _png_shown(src: str, base: Path) -> str:
    """Which PNG under ``base`` an image's ``src`` holds (it must be a data: URI of a file's exact bytes)."""
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix), f"an image the page does not hold: {src[:80]}"
    held = base64.b64decode(src[len(prefix):])
    return next(p.relative_to(base).as_posix() for p in sorted(base.rglob("*.png")) if p.read_bytes() == held)


def test_report_without_results_says_how_to_get_them(tmp_path):
    page = report.write(tmp_path / "figures", tmp_path / "nothing")
    assert "run <code>make figures</code>" in page.read_text()


def test_output_problems_finds_profiler_lines_and_stray_values():
    usdt = {"output_type": "stream", "name": "stderr",
            "text": "USDT:2026-11-23 21:43:45 7239:7239 SyncActivityProfilerHandler.cpp:52] profiler_start\n"}
    paths = {"output_type": "execute_result", "execution_count": 9,
             "data": {"text/plain": "(PosixPath('/w/figures/01/a.png'), PosixPath('/w/figures/01/a.svg'))"}}
    artist = {"output_type": "execute_result", "execution_count": 3,
              "data": {"text/plain": "[<matplotlib.lines.Line2D at 0x7f>]"}}
    clean = [{"output_type": "stream", "name": "stdout", "text": "results checked: 3 ok\n"},
             {"output_type": "display_data", "data": {"text/plain": "<Figure size 640x480 with 1 Axes>"}},
             {"output_type": "execute_result", "execution_count": 2,
              "data": {"text/plain": "namespace(preset='quick')"}}]
    assert report.output_problems(clean) == []
    found = report.output_problems([usdt, paths, artist] + clean)
    assert len(found) == 3 and "USDT" in found[0] and "Out[9]" in found[1] and "Out[3]" in found[2]


@pytest.mark.parametrize("line", [
    "[W1126 10:49:44.387408565 CPUAllocator.cpp:245] Memory block of unknown size was allocated before the profiling "
    "started, profiler results will not include the deallocation event",
    "ERROR:2026-11-26 10:00:00 1:1 DeviceProperties.cpp:47] gpuGetDeviceCount failed with code 35",
    "/x/tqdm/auto.py:21: TqdmWarning: IProgress not found. Please update jupyter and ipywidgets.",
    "UserWarning: Warning: Profiler clears events at the end of each cycle.Only events from the current cycle will be "
    "reported.To keep events across cycles, set acc_events=True."])
def test_output_problems_finds_each_line_cnnlab_keeps_out_of_notebooks(line):
    found = report.output_problems([{"output_type": "stream", "name": "stderr", "text": f"ok\n{line}\nok\n"}])
    assert len(found) == 1 and found[0].startswith("stderr holds "), found


def test_compact_collapses_columns_missing_on_this_device_into_one_line():
    df = pd.DataFrame({"batch_size": [1, 8], "latency_ms_median": [1.0, 2.0],
                       "gpu_util_pct": [math.nan, math.nan], "gpu_util_missing_reason": ["no GPU", "no GPU"],
                       "self_device_time_ms": [math.nan] * 2, "device_missing_reason": ["CPU run"] * 2,
                       "peak_mem_mib": [3.0, math.nan], "peak_mem_missing_reason": [None, "oom"],
                       "avg_mem_missing_reason": [None, None], "odd_ms": [None, None], "error": [None, None]})
    shown, line = report.compact(df)
    assert list(shown.columns) == ["batch_size", "latency_ms_median", "peak_mem_mib", "peak_mem_missing_reason"]
    assert line == ("Not measured on this device: gpu_util_pct (no GPU); self_device_time_ms (CPU run); "
                    "odd_ms (no reason recorded).")
    failed = report.compact(df.assign(error=[None, "RuntimeError: boom"]))[0]
    assert list(failed.columns)[-1] == "error"  # a failed point says why: kept
    full = df[["batch_size", "latency_ms_median"]]
    shown, line = report.compact(full)
    assert list(shown.columns) == list(full.columns) and line == ""


def test_compact_with_columns_says_every_point_failed_and_why_and_refuses_a_misspelt_column():
    # issue 44: a table of failed points lacks the measured columns; selecting them stopped notebook 00 (KeyError)
    failed = pd.DataFrame({"batch_size": [1, 2, 4, 8, 16], "status": ["oom", "oom", "error", "error", "killed"],
                           "error": ["OutOfMemoryError: at 1\ntraceback", "OutOfMemoryError: at 2", "RuntimeError: a",
                                     "RuntimeError: b", "the process died"]})
    shown, line = report.compact(failed, columns=["batch_size", "status", "latency_ms_median"])
    assert list(shown.columns) == ["batch_size", "status"]
    assert line == ("Every point failed (2 oom, 2 error, 1 killed), so nothing was measured. Why: OutOfMemoryError: "
                    "at 1; OutOfMemoryError: at 2; RuntimeError: a; and 2 more (each row's error).")
    skipped = report.compact(failed.assign(status="skipped", error="no GPU"))[1]
    assert skipped == "Every point was skipped (5 skipped), so nothing was measured. Why: no GPU."
    measured = failed.assign(status=["ok"] * 5, latency_ms_median=1.0, error=None)
    assert list(report.compact(measured, columns=["latency_ms_median", "status"])[0].columns) == [
        "latency_ms_median", "status"]
    with pytest.raises(KeyError, match=r"columns \['latency_ms_mediam'\] are not in this table; its columns: "):
        report.compact(measured, columns=["batch_size", "latency_ms_mediam"])  # some point measured: a misspelling


def test_show_prints_the_table_and_the_line_once(capsys):
    report.show(pd.DataFrame({"batch_size": [1], "gpu_util_pct": [math.nan], "gpu_util_missing_reason": ["no GPU"]}))
    out = capsys.readouterr().out
    assert out.count("Not measured on this device: gpu_util_pct (no GPU).") == 1 and "gpu_util_missing" not in out


@pytest.mark.slow
def test_nbval_fails_a_notebook_cell_with_profiler_lines_or_a_path_tuple(tmp_path):
    # notebooks/conftest.py, as `make test` loads it, on a small notebook: the clean cell passes, the others fail.
    import nbformat

    shutil.copy(REPO / "notebooks" / "conftest.py", tmp_path / "conftest.py")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import os, sys; from pathlib import Path; print('clean')"),
                nbformat.v4.new_code_cell("os.write(2, b'USDT:2026 x.cpp:52] profiler_start\\n'); "
                                          "print('a real warning', file=sys.stderr)"),
                nbformat.v4.new_code_cell("Path('a.png'), Path('a.svg')")]
    nbformat.write(nb, tmp_path / "check.ipynb")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--nbval-lax", "--nbval-current-env", "check.ipynb"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert "2 failed, 1 passed" in proc.stdout, proc.stdout[-3000:]
    assert "Cell 1 of check.ipynb: stderr holds the C++ profiler's USDT lines" in proc.stdout
    assert "Cell 2 of check.ipynb: a stray Out[" in proc.stdout


def test_a_cut_short_notebook_page_is_rendered_again_though_newer_than_its_notebook(two_machines):
    executed, figures = two_machines / "build" / "notebooks", two_machines / "figures"
    html_path = figures / "notebooks" / "01_batch_size.html"
    report.render_notebooks(executed, figures / "notebooks")
    whole = html_path.read_text()
    html_path.write_text(whole[: len(whole) // 3])  # what a full disk left, newer than the notebook
    report.render_notebooks(executed, figures / "notebooks")
    assert html_path.read_text() == whole


def test_damaged_inputs_are_named_with_what_to_do_and_the_page_is_still_written(two_machines, capsys):
    executed, figures = two_machines / "build" / "notebooks", two_machines / "figures"
    (executed / "02_fp16.ipynb").write_text('{"cells": [')  # cut short: nbformat's NotJSONError
    (figures / "02_fp16" / "claims.csv").write_text('claim,held\n"an open quote,yes\n')  # pandas' ParserError
    page = report.write(figures, executed)
    err = capsys.readouterr().err
    assert f"executed notebook {executed / '02_fp16.ipynb'} cannot be rendered" in err
    assert f"{figures / '02_fp16' / 'claims.csv'} cannot be read" in err and "make figures NB=02" in err
    assert "notebooks/01_batch_size.html" in page.read_text()


def test_report_on_a_full_disk_keeps_the_earlier_page_and_exits_non_zero(two_machines, monkeypatch, capsys):
    import errno

    figures, executed = two_machines / "figures", two_machines / "build" / "notebooks"
    page = report.write(figures, executed)
    before = page.read_bytes()

    def disk_full(self, text, **kwargs):
        with open(self, "w") as f:
            f.write(text[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", disk_full)
    (executed / "01_batch_size.ipynb").touch()  # newer: its page is rendered again, and fails too
    assert report.main(["--figures", str(figures), "--notebooks", str(executed)]) == 1
    assert "the report was not written" in capsys.readouterr().err
    assert page.read_bytes() == before
    assert not [p for p in figures.rglob("*.part")]


def test_an_inconclusive_verdict_is_shown_with_its_overlap_in_the_matrix(tmp_path):
    from cnnlab.claims import INCONCLUSIVE

    claims = [Claim("fp16 is faster", "Fig. 3", "0.9x", INCONCLUSIVE, "cpu", criterion="fp16 / fp32 < 0.9",
                    note="within noise: 0.9 (0.8-1) spans the threshold 0.9")]
    _results(tmp_path / "figures" / "02_fp16", claims, {"device_name": "AMD EPYC"}, ["02_time"])
    page_path = report.write(tmp_path / "figures", tmp_path / "build" / "notebooks")
    page = _Page()
    page.feed(page_path.read_text())
    cells = [c for r in page.matrix for c in r]
    assert any(c.startswith("inconclusive: within noise 0.9x within noise: 0.9 (0.8-1) spans") for c in cells), cells
    assert 'class="held-inc"' in page_path.read_text()


def test_checks_beyond_the_paper_are_labelled_listed_last_and_left_out_of_the_papers_count(tmp_path):
    ours = Claim("tiling beats untiled", "-", "0.9x", True, "cpu", criterion="< 1", beyond=True)
    papers = Claim("time falls as tiles grow", "Fig. 6", "0.5x", False, "cpu", criterion="< 0.9")
    _results(tmp_path / "figures" / "04_tiling", [ours, papers], {"device_name": "AMD EPYC"}, ["04_time"])
    machines = report.find_machines(tmp_path / "figures")
    assert report.summary(machines, ["04_tiling"]) == [
        ("this machine", "001", {"held": 0, "did not hold": 1, "inconclusive": 0, "n/a": 0})]  # the paper's only
    page = report.write(tmp_path / "figures", tmp_path / "build" / "notebooks").read_text()
    matrix = page[page.index('class="matrix"'):]
    assert matrix.index("time falls as tiles grow") < matrix.index("tiling beats untiled")
    assert "beyond the paper</div>" in matrix and "Beyond the paper: checks of ours" in page


def test_show_takes_a_pivot_with_two_level_columns_and_claims(capsys):
    from cnnlab.claims import Claim

    pivot = pd.DataFrame({"method": ["a", "a", "b"], "ratio": [0.1, 0.2, 0.1], "acc": [1.0, 2.0, 3.0]}) \
        .pivot_table(index="ratio", columns="method", values=["acc"])
    assert report.show(pivot) is None and "acc" in capsys.readouterr().out
    report.show([Claim("a claim", "paper", "ours", None, "cpu", note="no GPU")])
    assert "NOT APPLICABLE on cpu: a claim" in " ".join(capsys.readouterr().out.split())


def test_the_page_opens_with_a_summary_per_machine_and_paper_and_flags_a_failed_last_run(two_machines):
    import nbformat

    assert report.summary(report.find_machines(two_machines / "figures"), ["01_batch_size", "02_fp16"]) == [
        ("this machine", "001", {"held": 1, "did not hold": 1, "inconclusive": 0, "n/a": 1}),
        ("h100", "001", {"held": 0, "did not hold": 1, "inconclusive": 0, "n/a": 0})]
    executed = two_machines / "build" / "notebooks"
    page = report.write(two_machines / "figures", executed).read_text()
    assert "this machine</b>, paper 001:" in page and ">1 held<" in page and ">1 n/a<" in page
    assert page.index('class="summary"') < page.index("<h2>Claims</h2>")
    assert "last run of" not in page and "older run" not in page  # nothing to flag yet

    nb = nbformat.read(executed / "01_batch_size.ipynb", as_version=4)  # the next run failed in its config cell
    nb.cells[1].outputs = [nbformat.v4.new_output("error", ename="ValueError", evalue="unknown parameter(s) ['repets']",
                                                  traceback=[])]
    nbformat.write(nb, executed / "01_batch_size.ipynb")
    page = report.write(two_machines / "figures", executed).read_text()
    assert "The last run of 01_batch_size failed (In [1] stopped with ValueError: unknown parameter(s) " in page
    assert "the figures and claims below are from an earlier run" in page

    nb.cells[1].outputs = []  # a clean run, but the results were written by another (in Jupyter, say)
    nbformat.write(nb, executed / "01_batch_size.ipynb")
    env = json.loads((two_machines / "figures" / "01_batch_size" / "environment.json").read_text())
    (two_machines / "figures" / "01_batch_size" / "environment.json").write_text(json.dumps(env | {"run_id": "0a1b"}))
    page = report.write(two_machines / "figures", executed).read_text()
    assert "(it does not show their run id 0a1b)" in page and "the linked notebook is another run" in page


@pytest.mark.parametrize("where, text, wrong", [
    ("01_batch_size/environment.json", "[1, 2]", "not a JSON object (a list)"),
    ("01_batch_size/environment.json", '"T4"', "not a JSON object (a string)"),
    ("reference/h100/01_batch_size/environment.json", "[1, 2]", "not a JSON object (a list)"),
    ("reference/h100/01_batch_size/environment.json", '"T4"', "not a JSON object (a string)"),
    ("02_fp16/environment.json", '{"figures": 5}', "its figures entry is not a list of figure names: 5"),
    ("02_fp16/environment.json", '{"device_name": "cpu", "figures": [', "not JSON"),
    ("01_batch_size/claims.csv", "claim,paper,ours\na claim,Fig. 1,3x\n", "no 'held' column"),
    ("reference/h100/01_batch_size/claims.csv", "claim,ours\na claim,3x\n", "no 'held' column"),
])
def test_a_damaged_environment_or_claims_file_is_named_on_the_page_and_skipped(two_machines, capsys, where, text,
                                                                                 wrong):
    """One damaged file (issue 33, item 5) is named, on stderr and in a note at the top of the page, with what is
    wrong; the page is written with everything else (the other machine's claims, the other notebooks' figures)."""
    figures, executed = two_machines / "figures", two_machines / "build" / "notebooks"
    (figures / where).write_text(text)
    page = report.write(figures, executed).read_text()
    err = capsys.readouterr().err
    assert f"{figures / where} cannot be read" in err and wrong in err, err
    note = page[page.index('<div class="damaged">'):]
    note = note[:note.index("</div>")]
    assert f"{where}</code>" in note and html.escape(wrong) in note, note
    assert "h100: 01_time</figcaption>" in page or where.startswith("reference/h100/")
    assert "did not hold 9.5x on cuda" in " ".join(c for r in _matrix(page) for c in r) or \
        where == "reference/h100/01_batch_size/claims.csv"
    assert "this machine: 02_fig3</figcaption>" in page or where.startswith("02_fp16/")
    assert err.count(str(figures / where)) == 1, "named once, not once per use"


def _matrix(text: str) -> list[list[str]]:
    page = _Page()
    page.feed(text)
    return page.matrix


def _save_run(folder: Path, capsys) -> tuple[str, str]:
    """A study's results saved into ``folder`` as a notebook saves them; (the line save printed, its run id)."""
    from cnnlab import studies

    studies.save(pd.DataFrame({"batch_size": [1, 2], "latency_ms": [1.0, 2.0]}), {},
                 [Claim("a claim", "Fig. 1", "2x", True, "cpu", criterion="ratio > 1")], folder, name="batch_size",
                 env={"device_name": "cpu", "date_utc": "2026-11-23T10:00:00+00:00"})
    line = capsys.readouterr().out
    return line, json.loads((folder / "environment.json").read_text())["run_id"]


def _executed_run(path: Path, printed: str, error: str | None = None, when: float | None = None) -> None:
    """An executed notebook whose save cell printed ``printed`` (and then stopped with ``error``), dated ``when``."""
    import os

    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("report.show(studies.save(df, figs, checks, out, name='batch_size'))",
                                     execution_count=7)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)] + \
        ([nbformat.v4.new_output("error", ename="AssertionError", evalue=error, traceback=[])] if error else [])
    nb.cells = [cell]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    if when is not None:
        os.utime(path, (when, when))


def test_the_stale_flag_compares_run_ids_not_file_dates(tmp_path, capsys):
    """Whether the linked executed notebook wrote the results shown (issue 33, item 13) is read from the run id
    studies.save writes into environment.json and prints in the notebook, never from file dates: a notebook dated in
    the future does not hide results written by another run; results copied (newer file dates) after the run that
    wrote them are not flagged; a run that failed after its save is said to have written them."""
    import time

    figures, executed = tmp_path / "figures", tmp_path / "build" / "notebooks"
    folder, nb = figures / "01_batch_size", executed / "01_batch_size.ipynb"
    printed, first = _save_run(folder, capsys)
    assert f"(run id {first})" in printed and str(folder) in printed
    year = 365 * 24 * 3600
    _executed_run(nb, printed, when=time.time() + year)  # its clock was a year ahead
    assert "older run" not in report.write(figures, executed).read_text()

    _, second = _save_run(folder, capsys)  # run again elsewhere (in Jupyter, say): the linked notebook is not it
    page = report.write(figures, executed).read_text()
    assert f"were not written by the executed notebook linked here (it does not show their run id {second})" in page

    _executed_run(nb, f"[cnnlab] results saved in {folder} (run id {second})\n", when=time.time() - year)
    page = report.write(figures, executed).read_text()  # the run that wrote them, dated a year before them
    assert "were not written by" not in page and "last run" not in page
    assert f"(run id {second})" in (figures / "notebooks" / "01_batch_size.html").read_text(), \
        "the rendered page follows the notebook's content, not its date"

    _executed_run(nb, f"[cnnlab] results saved in {folder} (run id {second})\n", error="claims did not hold")
    page = report.write(figures, executed).read_text()
    assert "The last run of 01_batch_size failed (In [7] stopped with AssertionError: claims did not hold) after it" \
           " saved the figures and claims below" in page
    _executed_run(nb, "", error="out of memory")
    page = report.write(figures, executed).read_text()
    assert "The last run of 01_batch_size failed (In [7] stopped with AssertionError: out of memory): the figures " \
           "and claims below are from an earlier run, written 2026-11-23 10:00 UTC." in page


def test_a_figure_on_the_page_fits_a_screen():
    # 01's main figure (7 x 8 in) was stretched to the page's width: 1.3 screens tall
    rule = re.search(r"figure img \{([^}]*)\}", report.STYLE).group(1)
    props = dict(p.split(":", 1) for p in (" ".join(rule.split())).split(";") if ":" in p)
    props = {k.strip(): v.strip() for k, v in props.items()}
    assert props.get("max-width") == "100%" and props.get("width", "auto") == "auto"
    height = re.fullmatch(r"(\d+)vh", props.get("max-height", ""))
    assert height and int(height.group(1)) <= 90


def test_no_file_reaches_the_page_through_a_link(two_machines, capsys):
    """Issue 44, item 1: a figure linked to /proc/self/environ or to a file outside (the recorded figure, and the
    first PNG by name that the fallback takes), an environment.json, a claims.csv, an SVG and a table linked out:
    none is read into the page or linked from it, each is named on stderr, and the rest of the page is written."""
    from hostile import environ_marker, held, link

    figures, outside = two_machines / "figures", two_machines / "outside"
    outside.mkdir()
    (outside / "secret.png").write_bytes(png("OUTSIDE-FIGURE"))
    (outside / "environment.json").write_text(json.dumps({"device_name": "OUTSIDE-DEVICE", "figures": ["x"]}))
    table([Claim("OUTSIDE-CLAIM", "Fig. 9", "1x", True, "cpu")]).to_csv(outside / "claims.csv", index=False)
    here, fp16 = figures / "01_batch_size", figures / "02_fp16"
    h100 = figures / "reference" / "h100" / "01_batch_size"
    planted = {h100 / "01_time.png": "/proc/self/environ", h100 / "00_first.png": outside / "secret.png",
               here / "01_time.svg": outside / "secret.png", fp16 / "environment.json": outside / "environment.json",
               fp16 / "claims.csv": outside / "claims.csv", fp16 / "linked.csv": outside / "claims.csv"}
    for path, target in planted.items():
        link(path, target)
    text = report.write(figures, two_machines / "nothing").read_text()
    page = held(text)
    marker = environ_marker()
    assert marker and marker not in page, "the process's environment is in the page"
    for secret in (b"OUTSIDE-FIGURE", b"OUTSIDE-DEVICE", b"OUTSIDE-CLAIM"):
        assert secret not in page, secret
    links = _Page()
    links.feed(text)
    assert not {"01_batch_size/01_time.svg", "02_fp16/linked.csv"} & set(links.hrefs), links.hrefs
    assert "01_batch_size/01_time.png" in links.hrefs  # (the figure links its PNG instead)
    err = capsys.readouterr().err
    for path in planted:
        assert f"{path}" in err and "symbolic link" in err.split(f"{path}")[1].splitlines()[0], (path, err)
    assert "h100: 01_time</figcaption>" not in text and "this machine: 01_time</figcaption>" in text


@pytest.mark.parametrize("kind", ["zero", "fifo", "folder", "oversized"])
def test_a_device_a_fifo_a_folder_or_an_oversized_figure_is_named_and_left_out(two_machines, capsys, monkeypatch,
                                                                             kind):
    """Issue 44, item 2: the main figure a link to /dev/zero, a FIFO, a folder, or over the cap: the page is written
    at once without it (no MemoryError, no wait on the FIFO, no figure of megabytes in the page) and the file is
    named with why."""
    from hostile import guard, plant

    figures = two_machines / "figures"
    fig = figures / "02_fp16" / "02_fig3.png"
    monkeypatch.setattr(report.paths, "FIGURE_MAX_BYTES", 5000, raising=False)
    if kind == "oversized":
        fig.write_bytes(png("x" * 10_000))  # a real PNG, twice the cap
    else:
        plant(fig, kind)
    with guard(fifos=[fig]) as released:
        text = report.write(figures, two_machines / "nothing").read_text()
    assert not released, "the report waited on a FIFO"
    assert "this machine: 02_fig3</figcaption>" not in text and "this machine: 01_time</figcaption>" in text
    why = {"zero": "symbolic link", "fifo": "not a regular file", "folder": "not a regular file",
           "oversized": "over the 5,000"}[kind]
    line = next(line for line in capsys.readouterr().err.splitlines() if str(fig) in line)
    assert why in line, line


@pytest.mark.parametrize("name", ["this machine", "this computer"])
def test_a_reference_folder_named_like_this_machine_never_takes_its_place(two_machines, name):
    """Issue 44, item 10: a reference folder "this machine" (or "this computer") is another column,
    "reference/<name>"; this machine keeps its verdicts, figures, flags and ratio."""
    figures = two_machines / "figures"
    claim, crit = "throughput at the best batch size is far above batch 1", "best / batch-1 throughput > 2"
    for nb, text in (("01_batch_size", claim), ("02_fp16", "fp16 is faster")):
        _results(figures / "reference" / name / nb, [Claim(text, "Fig. 1", "forged", True, "cuda:0", criterion=crit)],
                 {"device_name": "FORGED GPU", "gpu_names": ["FORGED GPU"]}, ["01_time" if nb < "02" else "02_fig3"])
    page = report.write(figures, two_machines / "build" / "notebooks").read_text()
    header, *rows = _matrix(page)
    assert header[3:] == ["this machine AMD EPYC", "h100 NVIDIA H100 80GB HBM3", f"reference/{name} FORGED GPU"]
    by_claim = {r[1].split(" criterion:")[0]: r for r in rows if len(r) == 6}
    assert by_claim[claim][3:] == ["held 3.1x on cpu", "did not hold 9.5x on cuda", "held forged"]
    assert by_claim["fp16 is faster"][3].startswith("did not hold") and by_claim["fp16 is faster"][5] == "held forged"
    machines = report.find_machines(figures)
    assert [(m.name, m.root) for m in machines if m.name == report.THIS_MACHINE] == [(report.THIS_MACHINE, figures)]
    assert "this machine: 02_fig3</figcaption>" in page and f"reference/{name}: 02_fig3</figcaption>" in page
    assert "USDT lines" in page  # this machine's executed notebook's problems, still under this machine
