import pytest

from cnnlab import paths, pipeline

# The notebooks are part of a checkout, not of the installed package.
from_checkout = pytest.mark.skipif(paths.checkout() is None, reason="cnnlab is imported as an installed package")


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


def test_make_figures_parameters_reach_the_notebook_and_a_misspelt_one_fails(tmp_path, monkeypatch, capsys):
    from cnnlab import pipeline

    monkeypatch.setenv("CNNLAB_FIGURES_DIR", str(tmp_path))
    monkeypatch.setattr(pipeline, "BUILD", tmp_path / "build")
    assert pipeline.main(["--notebook", "00", "-p", "batchsize=4"]) == 1
    assert "unknown parameter(s) ['batchsize']" in capsys.readouterr().err


def test_executed_notebooks_keep_their_figures_under_a_headless_backend(tmp_path, monkeypatch):
    # `make figures` runs where MPLBACKEND=Agg may be set (CI): the executed copy, which make report links, must still
    # hold the plot, and the caller's environment comes back unchanged.
    import json

    import nbformat

    from cnnlab import pipeline

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")]
    (tmp_path / "notebooks").mkdir()
    nbformat.write(nb, tmp_path / "notebooks" / "99_plot.ipynb")
    monkeypatch.setattr(pipeline, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(pipeline, "BUILD", tmp_path / "build")
    monkeypatch.setenv("CNNLAB_FIGURES_DIR", str(tmp_path / "figures"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    assert pipeline.run(pipeline.find_notebooks(), "quick") == 0
    outputs = json.loads((tmp_path / "build" / "99_plot.ipynb").read_text())["cells"][0]["outputs"]
    assert any("image/png" in o.get("data", {}) for o in outputs), outputs
    import os

    assert os.environ["MPLBACKEND"] == "Agg"
