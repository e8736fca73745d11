"""cnnlab.paths: a checkout writes into its own folders; an installed cnnlab into the working directory."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_a_results_folder_is_read_only_where_it_lies_and_only_up_to_the_cap(tmp_path):
    """Issue 44, items 1 and 2: no link (not even to a file beside it), nothing but a regular file, nothing over the
    cap, nothing outside the folder; a FIFO without a writer is refused at once, not waited on."""
    from hostile import guard, link, plant

    folder, outside = tmp_path / "01_batch_size", tmp_path / "secret.txt"
    (folder / "stores").mkdir(parents=True)
    outside.write_text("secret")
    (folder / "claims.csv").write_text("claim,held\n")
    (folder / "stores" / "x.env.json").write_text("{}")
    link(folder / "out.csv", outside)
    link(folder / "beside.csv", folder / "claims.csv")
    link(folder / "environ.png", "/proc/self/environ")
    for kind in ("zero", "fifo", "folder"):
        plant(folder / f"{kind}.csv", kind)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "y.env.json").write_text("{}")
    link(folder / "linked", tmp_path / "elsewhere")

    assert paths.read_result(folder, "claims.csv", 100) == b"claim,held\n"
    assert paths.read_result(folder, "stores/x.env.json", 100) == b"{}"
    refused = {"out.csv": "symbolic link", "beside.csv": "symbolic link", "environ.png": "symbolic link",
               "zero.csv": "symbolic link", "fifo.csv": "not a regular file", "folder.csv": "not a regular file",
               "linked/y.env.json": "symbolic link", "../secret.txt": "not a name inside",
               str(outside): "not a name inside", "claims.csv": "over the 10"}
    with guard(fifos=[folder / "fifo.csv"]) as released:
        for name, why in refused.items():
            with pytest.raises(paths.Refused, match=why):
                paths.read_result(folder, name, 10 if name == "claims.csv" else 100)
    assert not released, "a FIFO was opened and waited on"
    with pytest.raises(FileNotFoundError):
        paths.read_result(folder, "missing.csv", 100)
    assert paths.result_file(folder, "claims.csv", None) == folder / "claims.csv"  # None: any size


def test_linked_results_folders_are_left_out_with_a_line(tmp_path, capsys):
    (tmp_path / "elsewhere" / "02_fp16").mkdir(parents=True)
    (tmp_path / "figures" / "reference" / "h100" / "01_batch_size").mkdir(parents=True)
    (tmp_path / "figures" / "00_quickstart").symlink_to(tmp_path / "elsewhere" / "02_fp16")
    (tmp_path / "figures" / "reference" / "a100").symlink_to(tmp_path / "elsewhere")
    assert paths.notebook_folders(tmp_path / "figures") == []
    assert [p.name for p in paths.reference_roots(tmp_path / "figures")] == ["h100"]
    err = capsys.readouterr().err
    assert f"{tmp_path / 'figures' / '00_quickstart'} is skipped: it is a symbolic link" in err
    assert f"{tmp_path / 'figures' / 'reference' / 'a100'} is skipped: it is a symbolic link" in err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "reference").symlink_to(tmp_path / "figures" / "reference")
    assert paths.reference_roots(tmp_path / "other") == []


@pytest.mark.parametrize("name", ["this machine", "this computer", "This  Machine"])
def test_no_reference_folder_takes_this_machines_name(tmp_path, name):
    """Issue 44, item 10: a folder named like this machine is shown as "reference/<name>", a name no folder has."""
    for folder in ("reference/h100", f"reference/{name}"):
        (tmp_path / folder).mkdir(parents=True)
    assert paths.machine_folders(tmp_path) == {paths.THIS_MACHINE: tmp_path, "h100": tmp_path / "reference" / "h100",
                                               f"reference/{name}": tmp_path / "reference" / name}
