"""cnnlab.paths: a checkout writes into its own folders; an installed cnnlab into the working directory."""

import shutil
import subprocess
import sys
from pathlib import Path

from cnnlab import paths

ROOT = Path(__file__).resolve().parents[1]


def test_checkout_folders(monkeypatch):
    monkeypatch.delenv("CNNLAB_FIGURES_DIR", raising=False)
    monkeypatch.delenv("CNNLAB_DATA", raising=False)
    # These tests may run against an installed cnnlab (the lower-bound check does): then there is no checkout.
    from_checkout = Path(paths.__file__).resolve().is_relative_to(ROOT)
    base = ROOT if from_checkout else Path.cwd()
    assert paths.checkout() == (ROOT if from_checkout else None)
    assert paths.figures_root() == base / "figures" and paths.data_root() == base / "data"
    monkeypatch.setenv("CNNLAB_FIGURES_DIR", "/x/figs")
    monkeypatch.setenv("CNNLAB_DATA", "/x/data")
    assert paths.figures_root() == Path("/x/figs") and paths.data_root() == Path("/x/data")


def test_an_installed_cnnlab_writes_under_the_working_directory(tmp_path):
    """A copy of the package outside any checkout (as in site-packages) puts figures and data under the cwd."""
    site, work = tmp_path / "site-packages", tmp_path / "work"
    shutil.copytree(ROOT / "cnnlab", site / "cnnlab", ignore=shutil.ignore_patterns("__pycache__"))
    work.mkdir()
    code = ("import cnnlab, cnnlab.pipeline as p, cnnlab.paths as q, cnnlab.data as d;"
            "print(q.checkout(), p.output_dir('00_quickstart'), d.data_root(), sep='|')")
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    checkout, figures, data = out.stdout.strip().splitlines()[-1].split("|")
    assert checkout == "None"
    assert Path(figures) == work / "figures" / "00_quickstart" and Path(figures).is_dir()
    assert Path(data) == work / "data"
    assert not (site / "figures").exists() and not (site / "data").exists()


def test_notebook_folders_and_reference_roots(tmp_path):
    for folder in ("01_batch_size", "00_quickstart", "notebooks", "reference/h100/01_batch_size", "reference/a100"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "02_fp16.csv").write_text("")  # a file, not a folder
    assert [p.name for p in paths.notebook_folders(tmp_path)] == ["00_quickstart", "01_batch_size"]
    assert [p.name for p in paths.reference_roots(tmp_path)] == ["a100", "h100"]
    assert paths.notebook_folders(tmp_path / "missing") == [] and paths.reference_roots(tmp_path / "missing") == []


def test_a_relative_folder_is_made_absolute_against_where_the_run_started(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CNNLAB_FIGURES_DIR", "myfigs")
    monkeypatch.setenv("CNNLAB_DATA", "../shared/data")
    assert paths.figures_root() == tmp_path / "myfigs" and paths.figures_root().is_absolute()
    environ = {"CNNLAB_FIGURES_DIR": "myfigs", "CNNLAB_DATA": "../shared/data", "OTHER": "x"}
    paths.absolute_folders(environ)
    assert environ == {"CNNLAB_FIGURES_DIR": str(tmp_path / "myfigs"),
                       "CNNLAB_DATA": str(tmp_path.parent / "shared" / "data"), "OTHER": "x"}
    monkeypatch.chdir(tmp_path.parent)  # a kernel starts elsewhere (notebooks/): the absolute path still holds
    assert Path(environ["CNNLAB_FIGURES_DIR"]) == tmp_path / "myfigs"
