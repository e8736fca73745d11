"""Tests for cnnlab.explore: tables found on every machine, column roles, the rows and the figure a view shows,
each machine's environment, and the widgets driven without a browser (set a value, check the figure's data and
the table change). tests/test_browser.py drives the same explorer in JupyterLab in a real browser."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from cnnlab import explore, paths, pipeline  # noqa: E402
from cnnlab.explore import NONE, THIS_MACHINE, View  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "explore.ipynb"
BATCH_SIZES = [1, 2, 4, 8]
SCALE = {"resnet20": 1.0, "resnet56": 3.0}  # resnet56 is 3x slower than resnet20 at every batch size


def latency(model: str, batch_size: int, speedup: float = 1.0) -> float:
    """The latency (ms) the tree below records for a point."""
    return SCALE[model] * (1 + batch_size) / speedup


def write_figures_tree(root: Path) -> Path:
    """A small results folder laid out as the notebooks write it: this machine's 01_batch_size (resnet20 and
    resnet56 at batch sizes 1 to 8, resnet56's batch 8 out of memory; a sweep store with its ``.env.json`` in
    ``stores/``; ``claims.csv``) and 03_amp_amc (model x variant, bars), and a reference machine "h100" with
    01_batch_size (ten times faster; a store beside the tables, where cnnlab kept them before ``stores/``), an
    ``environment.json`` in its folder and its own ``claims.csv``. Returns ``root``."""

    def batch_table(speedup: float, device_name: str) -> pd.DataFrame:
        rows = [{"model": m, "batch_size": bs, "status": "ok", "point_time_s": 0.5,
                 "latency_ms_median": latency(m, bs, speedup),
                 "throughput_items_per_s": 1000 * bs / latency(m, bs, speedup),
                 "peak_mem_alloc_mib": 10.0 * SCALE[m] * bs, "device_name": device_name, "error": None}
                for m in SCALE for bs in BATCH_SIZES]
        rows[-1].update(status="oom", latency_ms_median=None, throughput_items_per_s=None, peak_mem_alloc_mib=None,
                        error="CUDA out of memory")
        return pd.DataFrame(rows)

    def claims(held: str) -> pd.DataFrame:
        return pd.DataFrame([{"claim": "throughput rises with batch size", "paper": "Fig. 1", "ours": "x4",
                              "held": held, "device": "cpu", "criterion": "best / batch-1 throughput > 2",
                              "note": ""}])

    here = root / "01_batch_size"
    here.mkdir(parents=True)
    batch_table(1.0, "AMD EPYC 9B14").to_csv(here / "batch_size_batch.csv", index=False)
    (here / "stores").mkdir()
    batch_table(1.0, "AMD EPYC 9B14").to_csv(here / "stores" / "sweep_batch_0a1b2c3d.csv", index=False)  # a store
    (here / "stores" / "sweep_batch_0a1b2c3d.csv.env.json").write_text(json.dumps(
        {"device_name": "AMD EPYC 9B14", "cpu_model": "AMD EPYC 9B14", "torch_version": "2.13.0+cpu",
         "cuda_version": None, "python_version": "3.11.7"}))
    claims("yes").to_csv(here / "claims.csv", index=False)
    (root / "03_amp_amc").mkdir()
    pd.DataFrame([{"model": m, "variant": v, "status": "ok", "latency_ms_median": base * f, "device_name": "AMD EPYC"}
                  for m, base in (("resnet20", 10.0), ("resnet32", 16.0))
                  for v, f in (("fp32", 1.0), ("amp", 0.8), ("amp+amc", 0.6))]
                 ).to_csv(root / "03_amp_amc" / "amp_amc.csv", index=False)
    ref = root / "reference" / "h100"
    (ref / "01_batch_size").mkdir(parents=True)
    batch_table(10.0, "NVIDIA H100 80GB HBM3").to_csv(ref / "01_batch_size" / "batch_size_batch.csv", index=False)
    batch_table(10.0, "NVIDIA H100 80GB HBM3").to_csv(ref / "01_batch_size" / "sweep_batch_9f8e7d6c.csv", index=False)
    claims("no").to_csv(ref / "01_batch_size" / "claims.csv", index=False)
    (ref / "environment.json").write_text(json.dumps(
        {"device_name": "NVIDIA H100 80GB HBM3", "cpu_model": "Intel Xeon Platinum 8480+",
         "gpu_names": ["NVIDIA H100 80GB HBM3"], "torch_version": "2.11.0+cu128", "cuda_version": "12.8"}))
    return root


@pytest.fixture
def tree(tmp_path) -> Path:
    return write_figures_tree(tmp_path / "figures")


@pytest.fixture
def index(tree) -> pd.DataFrame:
    return explore.find_tables(tree)


def drawn_lines(ax) -> list[tuple[list, list]]:
    """(x, y) of each data line seaborn drew on ``ax`` (its legend's handles are empty lines: left out)."""
    return [(list(line.get_xdata()), list(line.get_ydata())) for line in ax.lines if len(line.get_xdata())]


def bar_heights(ax) -> list[list[float]]:
    """The bar heights of each hue level on ``ax``."""
    return [[bar.get_height() for bar in container] for container in ax.containers]


BATCH_VIEW = View("01_batch_size", "batch_size_batch", "latency_ms_median", "batch_size", hue="model")


# ------------------------------------------------------------------------------------------------ the pure part
def test_find_tables_lists_every_machine_and_leaves_out_stores_and_claims(tree, index):
    assert set(map(tuple, index[["machine", "study", "table"]].values)) == {
        (THIS_MACHINE, "01_batch_size", "batch_size_batch"), (THIS_MACHINE, "03_amp_amc", "amp_amc"),
        ("h100", "01_batch_size", "batch_size_batch")}
    assert "2 tables of 2 studies" in explore.summary(index, tree) and "h100: 1 tables" in explore.summary(index, tree)


def test_an_empty_or_missing_folder_has_no_tables_and_says_what_to_do(tmp_path):
    for root in (tmp_path, tmp_path / "absent"):
        index = explore.find_tables(root)
        assert index.empty and list(index.columns) == ["machine", "study", "table", "path"]
        assert "No result tables under" in explore.summary(index, root) and "make figures" in explore.summary(index)
    with pytest.raises(ValueError, match="no result tables"):
        explore.first_view(explore.find_tables(tmp_path))


def test_figures_root_follows_the_environment(tree, monkeypatch):
    monkeypatch.setenv("CNNLAB_FIGURES_DIR", str(tree))
    assert paths.figures_root() == tree and len(explore.find_tables()) == 3


def test_column_roles_of_a_sweep_table(index):
    df = explore.load_table(index["path"].iloc[0])
    metrics = explore.metrics(df)
    assert metrics[:2] == ["latency_ms_median", "throughput_items_per_s"] and "peak_mem_alloc_mib" in metrics
    assert "point_time_s" not in metrics and "batch_size" not in metrics  # bookkeeping out; the grid is not measured
    assert "batch_size" in explore.x_axes(df)  # it is what a metric is plotted against
    assert explore.x_axes(df)[0] == "batch_size"
    assert explore.parameters(df) == ["model", "batch_size"]
    groups = explore.groupings(df)
    assert "model" in groups and "batch_size" in groups and "status" not in groups
    assert "latency_ms_median" not in groups, "a measured value is not a category, even with few rows"
    assert explore.defaults(df) == {"metric": "latency_ms_median", "x": "batch_size", "hue": "model", "facet": None,
                                    "log": False}  # (2 to 15 ms: under ten times)


def test_select_keeps_the_rows_with_the_metric_and_the_columns_of_the_view(index):
    df = explore.load_table(index["path"].iloc[0])
    table = explore.select(df, BATCH_VIEW)
    assert list(table.columns) == ["model", "batch_size", "latency_ms_median", "status"]
    assert len(table) == 7 and (table["status"] == "ok").all()  # resnet56's batch 8 ran out of memory
    assert table["latency_ms_median"].tolist() == [latency(m, bs) for m in SCALE for bs in BATCH_SIZES][:7]
    with pytest.raises(ValueError, match="no column no_such_column"):
        explore.select(df, View("01_batch_size", "batch_size_batch", "no_such_column", "batch_size"))


def test_figure_draws_one_line_per_hue_with_the_tables_values(index):
    rendered = explore.render(BATCH_VIEW, index)
    (ax,) = rendered.figure.axes
    assert drawn_lines(ax) == [(BATCH_SIZES, [latency("resnet20", bs) for bs in BATCH_SIZES]),
                               (BATCH_SIZES[:3], [latency("resnet56", bs) for bs in BATCH_SIZES[:3]])]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"  # batch sizes on a base-2 axis, as the papers
    assert ax.get_xlabel() == "Batch size" and ax.get_ylabel() == "Latency median (ms)"
    assert "1 of 8 rows have no latency_ms_median (status: oom 1)" in rendered.caption
    assert [t.get_text() for t in rendered.figure.legends[0].get_texts()] == list(SCALE)


def test_no_hue_over_several_rows_draws_their_median_and_says_what_varies(index):
    rendered = explore.render(View("01_batch_size", "batch_size_batch", "peak_mem_alloc_mib", "batch_size"), index)
    ((xs, ys),) = drawn_lines(rendered.figure.axes[0])
    medians = [np.median([10.0 * k * bs for k in SCALE.values()]) for bs in BATCH_SIZES[:3]] + [10.0 * 8]
    assert xs == BATCH_SIZES and ys == pytest.approx(medians)
    assert "model also vary at each point" in rendered.caption


def test_log_scale_and_facets(index):
    view = View("01_batch_size", "batch_size_batch", "latency_ms_median", "batch_size", facet="model", log=True)
    figure = explore.render(view, index).figure
    assert [ax.get_title() for ax in figure.axes] == [f"{THIS_MACHINE} · Model = {m}" for m in SCALE]
    assert all(ax.get_yscale() == "log" for ax in figure.axes)
    assert [len(drawn_lines(ax)[0][0]) for ax in figure.axes] == [4, 3]


def test_a_log_scale_needs_a_positive_value(tree):
    pd.DataFrame({"tile": [1, 2, 4], "status": "ok", "rel_error": [0.0, 0.0, 0.0]}).to_csv(
        tree / "03_amp_amc" / "exact.csv", index=False)
    rendered = explore.render(View("03_amp_amc", "exact", "rel_error", "tile", log=True), explore.find_tables(tree))
    assert rendered.figure.axes[0].get_yscale() == "linear"
    assert "no rel_error is above 0: drawn on a linear scale" in rendered.caption
    with pytest.raises(ValueError, match="nothing to plot in exact: no column varies"):
        explore.render(View("03_amp_amc", "exact", "rel_error", None), explore.find_tables(tree))


def test_two_machines_side_by_side_share_the_y_axis(index):
    view = View("01_batch_size", "batch_size_batch", "latency_ms_median", "batch_size", hue="model",
                machines=(THIS_MACHINE, "h100"))
    rendered = explore.render(view, index)
    here, h100 = rendered.figure.axes
    assert [here.get_title(), h100.get_title()] == [THIS_MACHINE, "h100"]
    assert drawn_lines(h100)[0][1] == pytest.approx([latency("resnet20", bs, 10.0) for bs in BATCH_SIZES])
    assert here.get_ylim() == h100.get_ylim(), "machines compare on one scale"
    assert rendered.table.groupby("machine").size().to_dict() == {THIS_MACHINE: 7, "h100": 7}


def test_a_machine_without_the_table_gets_an_empty_panel_that_says_so(index):
    view = View("03_amp_amc", "amp_amc", "latency_ms_median", "model", hue="variant", machines=(THIS_MACHINE, "h100"))
    rendered = explore.render(view, index)
    assert "h100 has no readable table amp_amc of 03_amp_amc" in rendered.caption
    empty = rendered.figure.axes[1]
    assert not empty.containers and "no latency_ms_median" in empty.texts[0].get_text()


def test_categorical_x_draws_bars_in_order(index):
    view = View("03_amp_amc", "amp_amc", "latency_ms_median", "model", hue="variant")
    ax = explore.render(view, index).figure.axes[0]
    assert bar_heights(ax) == [pytest.approx([10.0 * f, 16.0 * f]) for f in (0.8, 0.6, 1.0)]  # amp, amp+amc, fp32
    assert [t.get_text() for t in ax.get_xticklabels()] == ["resnet20", "resnet32"]


def spread_tree(root: Path) -> Path:
    """One study whose latencies span fifty times (1.7 ms beside 86 ms, as lenet5 beside alexnet) with their
    p10-p90, as a line over batch size and as bars over a model."""
    (root / "01_batch_size").mkdir(parents=True)
    pd.DataFrame({"model": ["lenet5"] * 3 + ["alexnet"] * 3, "batch_size": [1, 4, 16] * 2, "status": "ok",
                  "latency_ms_median": [1.7, 2.0, 5.0, 20.0, 40.0, 86.0],
                  "latency_ms_p10": [1.5, 1.9, 4.5, 18.0, 37.0, 80.0],
                  "latency_ms_p90": [2.2, 2.4, 6.0, 23.0, 45.0, 95.0]}
                 ).to_csv(root / "01_batch_size" / "batch_size_batch.csv", index=False)
    return root


def whisker_spans(ax) -> list[tuple[float, float]]:
    """(low, high) of every whisker drawn on ``ax`` (its errorbar containers' vertical segments), sorted."""
    return sorted((float(seg[0, 1]), float(seg[1, 1])) for c in ax.containers
                  if isinstance(c, matplotlib.container.ErrorbarContainer) for seg in c.lines[2][0].get_segments())


def test_a_metric_that_spans_decades_opens_on_a_log_axis_with_labelled_ticks_and_p10_p90_whiskers(tmp_path):
    index = explore.find_tables(spread_tree(tmp_path / "figures"))
    view = explore.first_view(index)
    assert (view.metric, view.x, view.hue, view.log) == ("latency_ms_median", "batch_size", "model", True)
    rendered = explore.render(view, index)
    ax = rendered.figure.axes[0]
    assert ax.get_yscale() == "log" and "whiskers: latency_ms_p10 to latency_ms_p90" in rendered.caption
    assert {"latency_ms_p10", "latency_ms_p90"} <= set(rendered.table.columns)
    assert whisker_spans(ax) == [(1.5, 2.2), (1.9, 2.4), (4.5, 6.0), (18.0, 23.0), (37.0, 45.0), (80.0, 95.0)]
    rendered.figure.canvas.draw()
    lo, hi = ax.get_ylim()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text() and lo <= t.get_position()[1] <= hi]
    assert labels == ["2", "5", "10", "20", "50", "100"], labels  # 1-2-5, plain numbers, the small values labelled too
    assert not explore.wide(pd.DataFrame({"t_ms": [2.0, 15.0]}), "t_ms")  # under ten times: linear
    ex = explore.Explorer(tmp_path / "figures")  # the widgets open on the same view, its box ticked
    assert ex.log.value and ex.figure.axes[0].get_yscale() == "log" and whisker_spans(ex.figure.axes[0])
    ex.x.value = "model"  # bars over the model, batch sizes pooled: from the least p10 to the most p90 of each
    assert ex.figure.axes[0].get_yscale() == "log" and whisker_spans(ex.figure.axes[0]) == [(1.5, 6.0), (18.0, 95.0)]


def test_bars_get_their_p10_p90_whiskers(tmp_path):
    index = explore.find_tables(spread_tree(tmp_path / "figures"))
    view = View("01_batch_size", "batch_size_batch", "latency_ms_median", "model", hue="batch_size")
    ax = explore.render(view, index).figure.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["alexnet", "lenet5"]
    assert whisker_spans(ax) == [(1.5, 2.2), (1.9, 2.4), (4.5, 6.0), (18.0, 23.0), (37.0, 45.0), (80.0, 95.0)]
    bars = [b for c in ax.containers if isinstance(c, matplotlib.container.BarContainer) for b in c]
    tops = sorted(round(b.get_height(), 6) for b in bars)
    assert tops == [1.7, 2.0, 5.0, 20.0, 40.0, 86.0]


def test_the_points_table_rounds_numbers_by_their_unit():
    page = explore._frame_html(pd.DataFrame({"batch_size": [1, 2], "latency_ms_median": [23.190336, 0.5123456],
                                             "gpu_util_pct": [41.27, 7.0]}), "Points plotted")
    assert ">23.2<" in page and ">0.512<" in page and ">41.3<" in page and ">7.0<" in page and "23.19" not in page


def test_first_view_puts_this_computer_beside_the_reference_on_a_table_both_have(index):
    view = explore.first_view(index)
    assert view.machines == (THIS_MACHINE, "h100")
    assert (view.study, view.table) == ("01_batch_size", "batch_size_batch")
    assert (view.metric, view.x, view.hue) == ("latency_ms_median", "batch_size", "model")


def test_a_gpu_reference_is_beside_this_computer_by_default_with_the_ratio_at_the_points_both_measured(tree):
    cpu = tree / "reference" / "a-cpu-box" / "01_batch_size"  # first by name, but measured on a CPU
    cpu.mkdir(parents=True)
    pd.read_csv(tree / "01_batch_size" / "batch_size_batch.csv").to_csv(cpu / "batch_size_batch.csv", index=False)
    (cpu / "environment.json").write_text(json.dumps({"device_name": "Intel Xeon", "gpu_names": [], "gpu_count": 0}))
    h100 = tree / "reference" / "h100" / "01_batch_size" / "batch_size_batch.csv"
    ref = pd.read_csv(h100)
    ref = ref[~((ref["model"] == "resnet20") & (ref["batch_size"] == 1))]  # measured here only: no ratio there
    ref.loc[(ref["model"] == "resnet56") & (ref["batch_size"] == 2), "latency_ms_median"] /= 2  # 20x there
    ref.to_csv(h100, index=False)
    index = explore.find_tables(tree)
    view = explore.first_view(index)
    assert view.machines == (THIS_MACHINE, "h100") and view.hue == "model"
    assert explore.beside_default(index) == "h100"
    rendered = explore.render(view, index)
    label = "latency_ms_median: this machine / h100"
    got = {(m, bs): r for m, bs, r in rendered.ratios[["model", "batch_size", label]].itertuples(index=False)}
    # resnet20 at 2, 4, 8 and resnet56 at 1, 2, 4 (its 8 ran out of memory on both): ten times, twenty at one
    assert got == pytest.approx({("resnet20", 2): 10.0, ("resnet20", 4): 10.0, ("resnet20", 8): 10.0,
                                 ("resnet56", 1): 10.0, ("resnet56", 2): 20.0, ("resnet56", 4): 10.0})
    assert rendered.ratios[f"latency_ms_median ({THIS_MACHINE})"].tolist() == pytest.approx(
        [latency(m, bs) for m, bs in got])
    line = "latency_ms_median, this machine / h100 at the 6 points both measured: 10.0x to 20.0x (median 10.0x)"
    assert rendered.ratio_line == line and line in rendered.caption
    ex = explore.Explorer(tree)
    assert ex.beside.value == "h100" and ex.machines == (THIS_MACHINE, "h100")
    assert f"<b>{label}</b> (6 rows)" in ex.table_html.value and line in ex.table_html.value
    ex.beside.value = "a-cpu-box"  # the same table on another CPU: ratio 1 at every point both measured
    assert ex.rendered.ratios["latency_ms_median: this machine / a-cpu-box"].tolist() == pytest.approx([1.0] * 7)
    ex.beside.value = NONE
    assert ex.rendered.ratios is None and "this machine /" not in ex.table_html.value


def test_where_no_point_matches_one_line_says_so_instead_of_an_empty_table(tree):
    h100 = tree / "reference" / "h100" / "01_batch_size" / "batch_size_batch.csv"
    pd.read_csv(h100).assign(batch_size=lambda d: d["batch_size"] * 16).to_csv(h100, index=False)
    ex = explore.Explorer(tree)
    assert ex.rendered.ratios.empty
    line = "latency_ms_median: no point measured on both this machine and h100, so no ratio"
    assert ex.rendered.ratio_line == line and f"<p><i>{line}</i></p>" in ex.table_html.value
    assert ex.table_html.value.count("<table") == 1  # the points plotted, and no empty table under them
    assert explore.ratio_keys(pd.DataFrame({"device_name": ["a"], "warmup": [2], "x_ms": [1.0]}),
                              pd.DataFrame({"device_name": ["b"], "warmup": [5], "x_ms": [2.0]}), "x_ms") == []


def test_a_table_being_written_is_skipped(tree):
    (tree / "00_quickstart").mkdir()
    (tree / "00_quickstart" / "quickstart_batch.csv").write_text("")  # a notebook has just opened it
    index = explore.find_tables(tree)
    assert explore.first_view(index).study == "01_batch_size"
    view = View("00_quickstart", "quickstart_batch", "latency_ms_median", "batch_size")
    assert explore.frames(index, "00_quickstart", "quickstart_batch", [THIS_MACHINE]) == {}
    assert "no readable table quickstart_batch" in explore.render(view, index).caption


def test_no_file_is_read_through_a_link(tree, capsys):
    """Issue 44, item 1: a table linked to /proc/self/environ or to a file outside, a claims.csv, a machine's
    environment.json and a sweep record linked out: none is listed or read, each is named on stderr once."""
    from hostile import environ_marker, link

    outside, h100 = tree.parent / "outside", tree / "reference" / "h100"
    outside.mkdir()
    pd.DataFrame({"batch_size": [1, 2], "latency_ms_median": [1.0, 2.0], "device_name": "OUTSIDE-DEVICE"}).to_csv(
        outside / "table.csv", index=False)
    pd.DataFrame([{"claim": "throughput rises with batch size", "paper": "Fig. 1", "ours": "OUTSIDE-CLAIM",
                   "held": "yes"}]).to_csv(outside / "claims.csv", index=False)
    (outside / "environment.json").write_text(json.dumps({"device_name": "OUTSIDE-DEVICE"}))
    planted = {tree / "01_batch_size" / "environ.csv": "/proc/self/environ",
               h100 / "01_batch_size" / "extra.csv": outside / "table.csv",
               h100 / "01_batch_size" / "claims.csv": outside / "claims.csv",
               h100 / "environment.json": outside / "environment.json",
               tree / "01_batch_size" / "stores" / "sweep_batch_0a1b2c3d.csv.env.json": outside / "environment.json"}
    for path, target in planted.items():
        link(path, target)
    index = explore.find_tables(tree)
    assert set(index["table"]) == {"batch_size_batch", "amp_amc"}, "a linked table is listed"
    view = explore.first_view(index)
    shown = " ".join(map(str, [explore.environment_table(index, view).to_dict(),
                               explore.claims_side_by_side(index, view).to_dict(), explore.render(view, index).table]))
    assert "OUTSIDE" not in shown and environ_marker().decode(errors="replace") not in shown
    for path in planted:
        with pytest.raises(OSError):
            explore.load_table(path)
    err = capsys.readouterr().err
    for path in planted:
        assert err.count(f"{path} is skipped: it is a symbolic link") == 1, (path, err)


@pytest.mark.parametrize("where", ["table", "environment"])
@pytest.mark.parametrize("kind", ["zero", "fifo", "folder", "oversized"])
def test_a_device_a_fifo_a_folder_or_an_oversized_file_is_named_and_left_out(tree, capsys, monkeypatch, kind, where):
    """Issue 44, item 2: the reference's table or environment.json a link to /dev/zero, a FIFO, a folder or over
    the cap: the explorer opens at once without it (no MemoryError, no wait on the FIFO) and names it with why."""
    from hostile import guard, plant

    h100 = tree / "reference" / "h100"
    path = h100 / "01_batch_size" / "batch_size_batch.csv" if where == "table" else h100 / "environment.json"
    monkeypatch.setattr(paths, "TABLE_MAX_BYTES", 4000, raising=False)
    monkeypatch.setattr(paths, "RECORD_MAX_BYTES", 4000, raising=False)
    if kind == "oversized":
        path.write_text(path.read_text() + " " * 4000)  # still a CSV (and JSON) that parses
    else:
        plant(path, kind)
    with guard(fifos=[path]) as released:
        index = explore.find_tables(tree)
        view = explore.first_view(index)
        view = View(view.study, view.table, view.metric, view.x, machines=(THIS_MACHINE, "h100"))
        rendered = explore.render(view, index)
        environment = explore.environment_table(index, view)
    assert not released, "the explorer waited on a FIFO"
    if where == "table":
        assert set(rendered.table["machine"]) == {THIS_MACHINE}, "the reference's table was read"
    else:
        assert environment.loc["source", "h100"] == "table columns", "the reference's environment.json was read"
    why = {"zero": "symbolic link", "fifo": "not a regular file", "folder": "not a regular file",
           "oversized": "over the 4,000"}[kind]
    lines = [line for line in capsys.readouterr().err.splitlines() if f"{path} is skipped" in line]
    assert len(lines) == 1 and why in lines[0], lines


@pytest.mark.parametrize("name", ["this machine", "this computer"])
def test_a_reference_folder_named_like_this_machine_never_takes_its_place(tree, name):
    """Issue 44, item 10: a reference folder "this machine" (or "this computer") is "reference/<name>"; this
    machine's own tables stay this machine's."""
    ref = tree / "reference" / name / "01_batch_size"
    ref.mkdir(parents=True)
    pd.DataFrame({"model": "resnet20", "batch_size": [1, 2], "status": "ok", "latency_ms_median": [0.1, 0.2],
                  "device_name": "FORGED GPU"}).to_csv(ref / "batch_size_batch.csv", index=False)
    index = explore.find_tables(tree)
    assert set(index["machine"]) == {THIS_MACHINE, "h100", f"reference/{name}"}
    local = index[index["machine"] == THIS_MACHINE]
    assert {Path(p).parent.parent for p in local["path"]} == {tree}
    view = explore.first_view(index)
    assert view.machines[0] == THIS_MACHINE
    rendered = explore.render(BATCH_VIEW, index)
    assert set(rendered.table["machine"]) == {THIS_MACHINE} and len(rendered.table) == 7


# --------------------------------------------------------------------------------------------------- environment
def test_environment_from_environment_json_from_sweep_records_or_from_columns(tree, index):
    summary = explore.environment_summary(tree / "reference" / "h100" / "01_batch_size")
    assert summary["device_name"] == "NVIDIA H100 80GB HBM3" and summary["cuda_version"] == "12.8"
    assert summary["gpu_names"] == "NVIDIA H100 80GB HBM3" and summary["source"] == "environment.json"
    here = explore.environment_summary(tree / "01_batch_size")
    assert here["torch_version"] == "2.13.0+cpu" and here["source"] == "sweep_batch_0a1b2c3d.csv.env.json"
    assert "cuda_version" not in here, "a field recorded as missing is not shown as a value"
    (tree / "01_batch_size" / "environment.json").write_text("{half a record")  # damaged: the next source
    assert explore.environment_summary(tree / "01_batch_size")["source"] == "sweep_batch_0a1b2c3d.csv.env.json"
    (tree / "01_batch_size" / "environment.json").write_text(json.dumps({"device_name": "written by save"}))
    assert explore.environment_summary(tree / "01_batch_size")["device_name"] == "written by save"
    columns_only = explore.environment_summary(tree / "03_amp_amc")
    assert columns_only == {"device_name": "AMD EPYC", "source": "table columns"}
    (tree / "empty").mkdir()
    assert explore.environment_summary(tree / "empty") == {"source": "nothing recorded"}


def test_environment_and_claims_side_by_side(index):
    view = explore.first_view(index)
    env = explore.environment_table(index, view)
    assert list(env.columns) == [THIS_MACHINE, "h100"]
    assert env.loc["device_name"].tolist() == ["AMD EPYC 9B14", "NVIDIA H100 80GB HBM3"]
    assert env.loc["cuda_version"].tolist() == ["", "12.8"]
    claims = explore.claims_side_by_side(index, view)
    assert claims[[f"held ({THIS_MACHINE})", "held (h100)"]].values.tolist() == [["held", "did not hold"]]


# -------------------------------------------------------------------------------------------------------- widgets
def test_explorer_opens_on_the_first_view(tree):
    ex = explore.Explorer(tree)
    assert ex.error is None and ex.view == explore.first_view(explore.find_tables(tree))
    assert bytes(ex.image.value)[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(ex.study.options) == ["01_batch_size", "03_amp_amc"] and ex.beside.value == "h100"
    assert "paper 001" in ex.header.value
    assert "NVIDIA H100 80GB HBM3" in ex.environment_html.value and "AMD EPYC 9B14" in ex.environment_html.value
    assert "throughput rises with batch size" in ex.environment_html.value


def test_setting_widgets_changes_the_figure_and_the_table(tree):
    ex = explore.Explorer(tree)
    image = bytes(ex.image.value)
    ex.metric.value = "throughput_items_per_s"
    here = ex.figure.axes[0]
    assert drawn_lines(here)[0][1] == pytest.approx([1000 * bs / latency("resnet20", bs) for bs in BATCH_SIZES])
    assert here.get_ylabel() == "Throughput (items/s)"
    assert "throughput_items_per_s" in ex.rendered.table.columns and "latency_ms_median" not in ex.rendered.table
    assert "Throughput (items/s)" in ex.caption.value and "throughput_items_per_s" in ex.table_html.value
    assert bytes(ex.image.value) != image

    ex.beside.value = NONE
    assert len(ex.figure.axes) == 1 and set(ex.rendered.table["machine"]) == {THIS_MACHINE}
    ex.hue.value = NONE
    assert len(drawn_lines(ex.figure.axes[0])) == 1
    ex.facet.value = "model"
    assert len(ex.figure.axes) == 2
    ex.log.value = True
    assert all(ax.get_yscale() == "log" for ax in ex.figure.axes)
    ex.machine.value = "h100"
    assert set(ex.rendered.table["machine"]) == {"h100"} and ex.metric.value == "throughput_items_per_s", \
        "another machine keeps the columns chosen"
    assert list(ex.study.options) == ["01_batch_size"], "only the studies the machines shown have"
    assert ex.error is None


def test_another_study_brings_its_tables_and_defaults(tree):
    ex = explore.Explorer(tree)
    ex.beside.value = NONE
    ex.study.value = "03_amp_amc"
    assert list(ex.table.options) == ["amp_amc"]
    assert (ex.metric.value, ex.x.value, ex.hue.value) == ("latency_ms_median", "model", "variant")
    assert bar_heights(ex.figure.axes[0])[0] == pytest.approx([8.0, 12.8])
    assert ex.error is None


def test_a_view_that_cannot_be_drawn_says_why_and_the_explorer_goes_on(tree):
    ex = explore.Explorer(tree)
    ex.facet.options = [NONE, "missing_column"]  # a column the table does not have
    ex.facet.value = "missing_column"
    assert "missing_column" in ex.error and "cannot draw" in ex.caption.value
    assert ex.rendered is None and bytes(ex.image.value) == b"" and ex.table_html.value == ""
    ex.facet.value = NONE
    assert ex.error is None and ex.rendered.table["machine"].nunique() == 2


def test_display_bundle_has_the_widget_and_a_static_figure(tree):
    ex = explore.Explorer(tree)
    bundle = ex._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == ex.widget.model_id
    assert bundle["image/png"][:8] == b"\x89PNG\r\n\x1a\n" and "widgets not shown here" in bundle["text/plain"]


def test_show_without_a_kernel_prints_why_and_shows_a_static_figure(tree, capsys):
    assert explore.widgets_available() == (False, "not running in a Jupyter kernel")
    assert explore.show(tree) is None
    out = capsys.readouterr().out
    assert "Widgets are not available (not running in a Jupyter kernel)" in out and "Figure" in out


@pytest.mark.parametrize("version", ["7.7.1", "8.1.5"])
def test_show_tells_a_reader_with_ipywidgets_7_what_jupyterlab_4_needs(tree, capsys, monkeypatch, version):
    import ipywidgets

    monkeypatch.setattr(ipywidgets, "__version__", version)
    monkeypatch.setattr(explore, "widgets_available", lambda: (True, ""))  # as in a kernel
    assert isinstance(explore.show(tree), explore.Explorer)
    out = capsys.readouterr().out
    said = f"ipywidgets {version}: JupyterLab 4 and Notebook 7 show widgets from ipywidgets 8 only"
    assert (said in out) == version.startswith("7"), out[-2000:]


def test_show_without_results_says_so(tmp_path, capsys):
    assert explore.show(tmp_path) is None
    assert "No result tables under" in capsys.readouterr().out
    (tmp_path / "07_vgg_quantization").mkdir()
    pd.DataFrame({"epoch": [1], "train_accuracy_pct": [40.0]}).to_csv(tmp_path / "07_vgg_quantization" / "t.csv")
    assert explore.show(tmp_path) is None  # one epoch so far: nothing varies, nothing to plot
    assert "Nothing to plot yet: no result table has a numeric metric that varies" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------------ notebook
def test_explore_notebook_is_no_study_notebook_and_is_committed_without_outputs():
    assert NOTEBOOK.exists()
    assert "explore" not in [nb.stem for nb in pipeline.find_notebooks()], "make figures runs only the studies"
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert all(not c["outputs"] and c["execution_count"] is None for c in code)
    assert any("explore.show()" in "".join(c["source"]) for c in code)


@pytest.mark.slow
@pytest.mark.parametrize("results", ["none", "tree"])
def test_explore_notebook_runs_headless(tmp_path, monkeypatch, results):
    """As papermill and nbval run it: without results it says so; with results its output holds the widget and,
    for a reader without widgets, a static figure."""
    import nbformat
    from nbclient import NotebookClient

    root = write_figures_tree(tmp_path / "figures") if results == "tree" else tmp_path / "figures"
    monkeypatch.setenv("CNNLAB_FIGURES_DIR", str(root))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    bundles = [o["data"] for o in outputs if o.output_type == "display_data"]
    if results == "none":
        assert "No result tables under" in text and str(root) in text
    else:
        assert "this machine: 2 tables of 2 studies" in text
        assert any("application/vnd.jupyter.widget-view+json" in b and "image/png" in b for b in bundles)


def test_without_ipywidgets_show_draws_the_static_figure(tree):
    """A Python without ipywidgets (blocked in a subprocess) still gets the first view, and is told why."""
    import subprocess

    code = ("import sys; sys.modules['ipywidgets'] = None\n"
            "from cnnlab import explore\n"
            "assert explore.show(sys.argv[1]) is None")
    proc = subprocess.run([sys.executable, "-c", code, str(tree)], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Widgets are not available (ipywidgets is not installed" in proc.stdout
    assert "Latency median (ms) against Batch size" in proc.stdout


def test_an_inconclusive_claim_is_shown_with_its_overlap(tree):
    path = tree / "01_batch_size" / "claims.csv"
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df.loc[0, ["held", "note"]] = ["inconclusive", "within noise: 2 (1.8-2.3) spans the threshold 2"]
    df.to_csv(path, index=False)
    index = explore.find_tables(tree)
    claims = explore.claims_side_by_side(index, explore.first_view(index))
    assert claims[f"held ({THIS_MACHINE})"].tolist() == ["inconclusive (within noise: 2 (1.8-2.3) spans the "
                                                          "threshold 2)"]
    assert claims["held (h100)"].tolist() == ["did not hold"]


def test_checks_beyond_the_paper_come_after_the_papers_claims_with_their_source(tree):
    path = tree / "01_batch_size" / "claims.csv"
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    ours = df.iloc[[0]].assign(claim="a check of ours", source="beyond the paper")
    pd.concat([ours, df.assign(source="paper")]).to_csv(path, index=False)  # ours first in the file
    index = explore.find_tables(tree)
    claims = explore.claims_side_by_side(index, explore.first_view(index))
    assert claims["claim"].tolist()[-1] == "a check of ours" and claims["source"].tolist()[-1] == "beyond the paper"
    assert claims["source"].tolist()[0] == "paper"


def test_the_explorer_offers_measured_metrics_every_category_and_the_reports_words(tree):
    """Settings (warmup, repeats, cpu_threads: every study's declared non-axis parameter) are not metrics; every
    text column is a hue or facet, even one with a single value; "n/a" is shown as the report shows it, not as a
    blank; text columns are left-aligned."""
    df = pd.DataFrame({"model": ["resnet20"] * 3, "batch_size": [1, 4, 16], "status": ["ok"] * 3,
                       "warmup": [2] * 3, "repeats": [20] * 3, "cpu_threads": [1] * 3, "device": ["cpu"] * 3,
                       "latency_ms_median": [1.0, 2.0, 3.0], "images_timed": [128, 128, 128]})
    found = explore.metrics(df)
    assert "latency_ms_median" in found and not {"warmup", "repeats", "cpu_threads", "batch_size"} & set(found)
    two_runs = df.assign(warmup=[1, 2, 2])  # a setting that differs between runs is still not a result
    assert "warmup" not in explore.metrics(two_runs) and "warmup" in explore.groupings(two_runs)
    assert {"model", "device"} <= set(explore.groupings(df))
    assert {"warmup", "repeats"} <= explore.settings() and "batch_sizes" not in explore.settings()  # axes are not
    path = tree / "01_batch_size" / "claims.csv"
    claims = pd.read_csv(path, dtype=str, keep_default_na=False)
    claims.loc[0, ["held", "note"]] = ["n/a", "no GPU here"]
    claims.to_csv(path, index=False)
    index = explore.find_tables(tree)
    assert explore.claims_side_by_side(index, explore.first_view(index))[f"held ({THIS_MACHINE})"].tolist() == ["n/a"]
    page = explore._frame_html(df, "batch")
    assert 'text-align: left' in page and ">resnet20<" in page and "1.0" not in page.split("latency")[0]


# ------------------------------------------------------------------------------------------ text from a results folder
IMG = "<img src=x onerror=alert(1)>"
SCRIPT = "<script>alert(2)</script>"


def hostile_tree(root: Path) -> Path:
    """A results folder whose every text is a payload (issue 33, item 1): the machine's folder name, a study folder, a
    table's name, column names and values, claims.csv's fields, environment.json's fields and figure names; this
    computer holds the same study, so both machines are shown side by side. Returns ``root``."""
    def study(folder: Path, device: str) -> None:
        folder.mkdir(parents=True)
        pd.DataFrame([{"model": IMG if bs % 2 else SCRIPT, "batch_size": bs, "status": "ok",
                       f"{SCRIPT}_ms": bs * 1.5, f"{IMG}": bs * 2.0, "device_name": device, "variant": SCRIPT}
                      for bs in BATCH_SIZES]).to_csv(folder / f"batch{IMG}.csv", index=False)
        pd.DataFrame([{"claim": SCRIPT, "paper": IMG, "ours": f"{IMG}{SCRIPT}", "held": SCRIPT, "device": IMG,
                       "criterion": SCRIPT, "note": IMG}]).to_csv(folder / "claims.csv", index=False)
        (folder / "environment.json").write_text(json.dumps(
            {field: f"{SCRIPT}{IMG}" for field in explore.ENVIRONMENT_FIELDS} | {"gpu_names": [IMG, SCRIPT],
                                                                                "figures": [IMG]}))
        (folder / f"{IMG}.png").write_bytes(b"\x89PNG\r\n\x1a\n")

    study(root / "00_quickstart", SCRIPT)
    study(root / "reference" / f"ref{IMG}" / "00_quickstart", IMG)
    (root / "reference" / f"ref{IMG}" / "environment.json").write_text(json.dumps({"device_name": SCRIPT}))
    (root / f"01_{IMG}").mkdir()  # not a notebook's folder name: never listed, but planted all the same
    pd.DataFrame({"batch_size": [1, 2], "latency_ms_median": [1.0, 2.0]}).to_csv(root / f"01_{IMG}" / "t.csv")
    return root


def html_values(ex) -> dict[str, str]:
    """Every text the explorer's widgets give the browser as HTML, by widget: HTML widgets' values (named by the
    explorer's attribute), and descriptions where a widget lets them be HTML."""
    import ipywidgets as w

    names = {id(v): k for k, v in vars(ex).items() if isinstance(v, w.Widget)}
    found, todo = {}, [ex.widget]
    while todo:
        widget = todo.pop()
        todo += list(getattr(widget, "children", ()))
        name = names.get(id(widget), f"{type(widget).__name__} {getattr(widget, 'description', '')}".strip())
        if isinstance(widget, w.HTML | w.HTMLMath):
            found[name] = widget.value
        if getattr(widget, "description_allow_html", False):
            found[f"{name}.description"] = widget.description
    return found


def test_no_text_from_a_results_folder_reaches_a_widget_as_live_html(tmp_path):
    root = hostile_tree(tmp_path / f"figures{IMG}")
    ex = explore.Explorer(root)
    assert ex.beside.value == f"ref{IMG}" and ex.error is None
    seen = {}
    # every column the payloads are in, as metric, x, hue and facet: each reaches the points table in turn
    for metric, x, hue, facet in ((f"{SCRIPT}_ms", "batch_size", "model", "variant"),
                                  (IMG, "model", "variant", NONE), (f"{SCRIPT}_ms", "device_name", NONE, NONE)):
        ex.metric.value, ex.x.value, ex.hue.value, ex.facet.value = metric, x, hue, facet
        assert ex.error is None, ex.error
        assert {metric, x} <= set(ex.rendered.table.columns)
        seen |= {f"{k} ({metric}, {x}, {hue}, {facet})": v for k, v in html_values(ex).items()}
    ex.facet.options = [NONE, f"{IMG}missing"]  # a view that cannot be drawn: the error names the column
    ex.facet.value = f"{IMG}missing"
    assert ex.error is not None
    seen |= {f"{k} (error)": v for k, v in html_values(ex).items()}
    live = {k: m.start() for k, v in seen.items() if (m := re.search("<img|<script", v, re.IGNORECASE))}
    assert not live, "unescaped payloads in: " + "; ".join(f"{k}: ...{seen[k][max(0, i - 60):i + 40]!r}"
                                                          for k, i in live.items())
    text = " ".join(seen.values())
    assert text.count("&lt;img src=x onerror=alert(1)&gt;") > 10 and "&lt;script&gt;alert(2)&lt;/script&gt;" in text


def test_damaged_environment_and_claims_files_are_skipped_and_the_explorer_opens(tree):
    """The files that crashed the report (issue 33, item 5): an environment.json that is no JSON object or whose
    figures are no list, a claims.csv without ``held``; the explorer uses the next source of each and draws."""
    (tree / "01_batch_size" / "environment.json").write_text("[1, 2]")
    (tree / "reference" / "h100" / "environment.json").write_text('"T4"')
    (tree / "reference" / "h100" / "01_batch_size" / "environment.json").write_text('{"figures": 5}')
    (tree / "03_amp_amc" / "environment.json").write_text('"T4"')
    (tree / "01_batch_size" / "claims.csv").write_text("claim,paper,ours\na claim,Fig. 1,3x\n")
    ex = explore.Explorer(tree)
    assert ex.error is None and ex.beside.value == "h100"
    env = explore.environment_table(ex.index, ex.view)
    assert env.loc["source"].tolist() == ["sweep_batch_0a1b2c3d.csv.env.json", "environment.json"]
    assert env.loc["device_name"].tolist() == ["AMD EPYC 9B14", ""]  # {"figures": 5}: a record without the device
    assert explore.claims_side_by_side(ex.index, ex.view).columns.tolist() == ["claim", "paper", "ours (h100)",
                                                                             "held (h100)"]
    ex.study.value = "03_amp_amc"
    assert ex.error is None and "table columns" in ex.environment_html.value
