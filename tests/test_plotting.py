"""Tests for cnnlab.plotting: files written, axes scaled and labelled as promised."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import seaborn as sns  # noqa: E402

from cnnlab import plotting  # noqa: E402
from cnnlab.plotting import label_for, log2_batch_axis, save_figure, set_theme  # noqa: E402


def test_save_figure_writes_png_and_svg(tmp_path):
    set_theme()
    fig, ax = plt.subplots()
    ax.plot([1, 2, 4], [3, 2, 1])
    png, svg = save_figure(fig, "demo_fig", tmp_path / "figs")
    plt.close(fig)
    assert png == tmp_path / "figs" / "demo_fig.png" and svg == tmp_path / "figs" / "demo_fig.svg"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert ET.parse(svg).getroot().tag.endswith("svg")


@pytest.mark.parametrize("name", ["", "a/b", "fig.png", "../up"])
def test_save_figure_rejects_paths_and_extensions(tmp_path, name):
    fig = plt.figure()
    with pytest.raises(ValueError, match="name="):
        save_figure(fig, name, tmp_path)
    plt.close(fig)


def test_log2_batch_axis_has_power_of_two_integer_ticks():
    fig, ax = plt.subplots()
    ax.plot([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], range(11))
    log2_batch_axis(ax)
    assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
    ticks = [t for t in ax.get_xticks() if 1 <= t <= 1024]
    assert ticks == [2**k for k in range(11)]
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert "1024" in labels and "64" in labels  # plain integers, not 2^10
    assert ax.get_xlabel() == "Batch size"
    log2_batch_axis(ax, axis="y", values=[1, 4, 16])
    assert list(ax.get_yticks()) == [1, 4, 16]
    with pytest.raises(ValueError, match="axis="):
        log2_batch_axis(ax, axis="z")
    plt.close(fig)


@pytest.mark.parametrize("column, label", [
    ("latency_ms_median", "Latency median (ms)"),
    ("peak_mem_alloc_mib", "Peak memory allocated (MiB)"),
    ("throughput_items_per_s", "Throughput (items/s)"),
    ("gpu_util_pct", "GPU utilisation (%)"),
    ("total_time_s", "Total time (s)"),
    ("arithmetic_intensity_flop_per_byte", "Arithmetic intensity (FLOP/byte)"),
    ("batch_size", "Batch size"),
    ("accuracy", "Accuracy"),
])
def test_label_for_puts_units_in_labels(column, label):
    assert label_for(column) == label


def test_set_theme_applies_one_style():
    set_theme()
    assert plt.rcParams["savefig.dpi"] == 150
    first = plt.rcParams["axes.prop_cycle"].by_key()["color"][0]
    assert matplotlib.colors.to_hex(first) == matplotlib.colors.to_hex(sns.color_palette("colorblind")[0])


def test_whiskers_span_low_to_high_around_the_median():
    import numpy as np

    fig, ax = plt.subplots()
    median, low, high = np.array([2.0, 5.0]), np.array([1.0, 4.5]), np.array([4.0, 5.0])
    container = plotting.whiskers(ax, [0, 1], median, low, high, capsize=3)
    (segments,) = container.lines[2]
    spans = [tuple(seg[:, 1]) for seg in segments.get_segments()]
    assert spans == [(1.0, 4.0), (4.5, 5.0)]
    assert container.lines[0] is None  # fmt="none": no marker, no line through the medians
    plt.close(fig)


def test_bars_label_values_and_draw_p10_p90_whiskers_from_the_median_column():
    import pandas as pd

    df = pd.DataFrame({"method": ["a", "b"], "latency_ms_median": [2.0, 3.0], "latency_ms_p10": [1.5, 2.0],
                       "latency_ms_p90": [2.5, 3.5]})
    fig, ax = plt.subplots()
    plotting.bars(ax, df, "method", "latency_ms_median", "Latency (ms)", errors=True, values="%.1f", fontsize=7)
    assert [t.get_text() for t in ax.texts] == ["2.0", "3.0"] and ax.texts[0].get_fontsize() == 7
    assert [round(p.get_height(), 6) for p in ax.patches] == [2.0, 3.0]
    (segments,) = ax.containers[-1].lines[2]
    assert [tuple(seg[:, 1]) for seg in segments.get_segments()] == [(1.5, 2.5), (2.0, 3.5)]
    assert ax.get_ylabel() == "Latency (ms)" and ax.get_xlabel() == "" and ax.get_legend() is None
    plt.close(fig)


def test_bar_whiskers_sit_on_their_hue_bars():
    import pandas as pd

    df = pd.DataFrame({"model": ["m1", "m2", "m1", "m2"], "variant": ["x", "x", "y", "y"],
                       "t_median": [1.0, 2.0, 3.0, 4.0], "t_p10": [0.5, 1.5, 2.5, 3.5], "t_p90": [1.5, 2.5, 3.5, 4.5]})
    fig, ax = plt.subplots()
    sns.barplot(data=df, x="model", y="t_median", order=["m1", "m2"], hue="variant", hue_order=["y", "x"], ax=ax,
                errorbar=None)
    bars_of = {v: [b.get_x() + b.get_width() / 2 for b in c] for v, c in zip(["y", "x"], ax.containers)}
    plotting.bar_whiskers(ax, df, "model", ["m1", "m2"], "variant", ["y", "x"], "t_median", "t_p10", "t_p90")
    for container, variant in zip(ax.containers[2:], ["y", "x"]):
        (segments,) = container.lines[2]
        assert [seg[0, 0] for seg in segments.get_segments()] == bars_of[variant]
        want = df[df["variant"] == variant].set_index("model").loc[["m1", "m2"]]
        assert [tuple(seg[:, 1]) for seg in segments.get_segments()] == list(zip(want["t_p10"], want["t_p90"]))
    plt.close(fig)


def test_batch_panels_log_y_linear_columns_whiskers_and_no_panel_for_a_column_without_values():
    import pandas as pd

    df = pd.DataFrame({"model": ["a", "a", "b", "b"], "batch_size": [1, 4, 1, 4], "time_s": [1.0, 3.0, 2.0, 5.0],
                       "time_s_p10": [0.9, 2.5, 1.8, 4.0], "time_s_p90": [1.2, 3.3, 2.4, 6.0],
                       "util_pct": [20.0, 80.0, 30.0, 90.0], "mem_mib": [float("nan")] * 4,
                       "mem_missing_reason": ["no CUDA"] * 4})
    fig = plotting.batch_panels(df, [("time_s", "Time (s)", "Time"), ("util_pct", "Util (%)", "Util"),
                                     ("mem_mib", "Memory (MiB)", "Memory")], linear={"util_pct": (0, 100)},
                                note="batch 8 not timed", markersize=8)
    # the all-NaN column gets no panel: the line under the figure names it and why
    assert [t.get_text() for t in fig.texts] == ["Memory: not measured on this device (no CUDA)\nbatch 8 not timed"]
    assert len(fig.axes) == 2 and fig.get_size_inches()[1] == 8
    assert fig.axes[0].get_lines()[0].get_markersize() == 8
    time, util = fig.axes
    assert time.get_yscale() == "log" and util.get_yscale() == "linear" and util.get_ylim() == (0, 100)
    assert time.get_legend() is not None and util.get_legend() is None  # the legend once, in the top panel
    assert list(util.get_xticks()) == [1, 4] and util.get_xscale() == "log"
    # p10-p90 whiskers where the table holds them (time), none where it does not (util)
    segments = [seg for c in time.containers for seg in c.lines[2][0].get_segments()]
    assert sorted(tuple(seg[:, 1]) for seg in segments) == [(0.9, 1.2), (1.8, 2.4), (2.5, 3.3), (4.0, 6.0)]
    assert not util.containers
    plt.close(fig)
    alone = plotting.batch_panels(df, [("mem_mib", "Memory (MiB)", "Memory")])  # nothing measured: the panel says so
    assert "Memory not measured on this device:\nno CUDA" in [t.get_text() for t in alone.axes[0].texts]
    plt.close(alone)


@pytest.mark.parametrize("low, high", [(600.0, 1000.0), (0.3, 0.9), (0.5, 3.0), (0.22, 3.3), (1.7, 86.0),
                                       (0.05, 400.0)])
def test_every_log_axis_of_a_figure_gets_plain_labelled_ticks_at_1_2_5(low, high):
    # notebook 01's figure 2 had two labels (6x10^2, 10^3) over 600-1000 ms; lenet5's sub-millisecond ones none
    fig, ax = plt.subplots()
    ax.plot([1, 2], [low, high])
    ax.set_yscale("log")
    plotting.keep({"f": fig})  # what every notebook's figures go through (save_figure does the same)
    fig.canvas.draw()
    lo, hi = ax.get_ylim()
    labels = [t.get_text() for t in ax.get_yticklabels() if lo <= t.get_position()[1] <= hi and t.get_text()]
    assert len(labels) >= 3, labels
    assert all("10^" not in t and "times" not in t for t in labels) and all(float(t) > 0 for t in labels)
    steps = {f"{float(t):g}".lstrip("0.").rstrip("0")[0] for t in labels}
    if high / low > 12:  # over more than a decade: the 1-2-5 steps only (1..9 crowded 0.7, 0.8, 0.9, 1 together)
        assert steps <= {"1", "2", "5"}, labels


def test_log_axes_leaves_a_batch_axis_and_fixed_ticks_alone():
    fig, ax = plt.subplots()
    ax.plot([1, 2, 4, 8], [1, 10, 100, 1000])
    log2_batch_axis(ax, values=[1, 2, 4, 8])
    ax.set_yscale("log")
    ax.set_yticks([1, 1000], ["1x", "1000x"])
    plotting.log_axes(fig)
    assert list(ax.get_xticks()) == [1, 2, 4, 8] and [t.get_text() for t in ax.get_yticklabels()] == ["1x", "1000x"]
    plt.close(fig)


def test_roofline_draws_min_of_peak_and_bandwidth_roofs_or_says_why_there_are_none():
    import numpy as np

    fig = plotting.roofline([2.0, 50.0], [100.0, 900.0], ["a", "b"], {"FP32": 1000.0}, 100.0, "Roofline: dev")
    ax = fig.axes[0]
    (roof,) = ax.get_lines()
    x, y = roof.get_data()
    assert np.allclose(y, np.minimum(1000.0, x * 100.0)) and x.min() <= 0.5 and x.max() >= 1e3
    assert ax.get_title() == "Roofline: dev" and ax.get_xscale() == ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b", "roof FP32: 1 TFLOP/s, 100 GB/s"]
    assert ax.get_xlabel() == "Arithmetic intensity (FLOP/byte)" and ax.get_ylabel() == "Achieved (GFLOP/s)"
    plt.close(fig)
    fig = plotting.roofline([2.0], [100.0], ["a"], {}, float("nan"), "no roof lines: peaks unknown")
    assert fig.axes[0].get_lines() == [] and fig.axes[0].get_title() == "no roof lines: peaks unknown"
    plt.close(fig)


def test_panel_per_value_says_why_a_value_has_no_measured_rows():
    import pandas as pd

    df = pd.DataFrame({"f": [1.0, 1.0, 0.5, 0.5], "b": [2, 8, 2, 8], "t_ms": [3.0, 9.0, None, None], "w": [1, 1, 1, 1],
                       "error": [None, None, "out of memory", None]})
    ok = df[df["t_ms"].notna()]
    fig = plotting.panel_per_value(df, ok, "f", "b", "t_ms", "w", title=lambda v: f"f {v:g}", xlabel="Batch",
                                   ylabel="Time (ms)", legend="processes", reverse=True,
                                   why=lambda rows: rows["error"].dropna().iloc[0])
    full, empty = fig.axes
    assert [full.get_title(), empty.get_title()] == ["f 1", "f 0.5"]  # descending
    assert list(full.get_xticks()) == [2, 8] and full.get_legend().get_title().get_text() == "processes"
    assert [t.get_text() for t in empty.texts] == ["not measured:\nout of memory"] and list(empty.get_xticks()) == []
    assert full.get_ylabel() == empty.get_ylabel() == "Time (ms)"
    plt.close(fig)


def test_epoch_times_draws_train_and_test_medians_per_hue():
    import pandas as pd

    loaders = pd.DataFrame({"num_workers": [0, 0, 2, 2], "pin": ["no"] * 4, "round": [0, 1, 0, 1],
                            "train_epoch_s": [1.0, 3.0, 2.0, 2.0], "test_epoch_s": [0.5, 0.5, 0.25, 0.75],
                            "epoch_time_s": [9.0] * 4})  # a column of that name in the sweep's table is not drawn
    grid = plotting.epoch_times(loaders, "num_workers", "pin")
    assert [ax.get_title() for ax in grid.axes.flat] == ["phase = train", "phase = test"]
    train, test = (ax.get_lines()[0].get_ydata().tolist() for ax in grid.axes.flat)
    assert train == [2.0, 2.0] and test == [0.5, 0.5]  # medians of the rounds
    assert sorted(grid.data["phase"].unique()) == ["test", "train"]
    plt.close(grid.figure)


def test_legend_below_names_each_label_once_under_the_panels():
    fig, (left, right) = plt.subplots(1, 2)
    left.plot([1, 2], label="a")
    left.plot([1, 2], label="b")
    right.plot([2, 1], label="b")
    right.plot([2, 1], label="c")
    legend = plotting.legend_below(fig, [left, right], -0.05, fontsize=7)
    assert [t.get_text() for t in legend.get_texts()] == ["a", "b", "c"] and legend.get_texts()[0].get_fontsize() == 7
    assert legend.legend_handles[1] is not None and legend._ncols == 3 and fig.legends == [legend]
    plt.close(fig)


@pytest.mark.parametrize("points", [1, 3])
def test_whiskers_take_pandas_series_without_a_warning(points):
    # matplotlib 3.10 calls float() on what it is given: a one-point Series warned under notebook 07's figure with
    # pandas 2.2 (Colab's), a one-point array under 03's with numpy 2.1
    import warnings

    import pandas as pd

    df = pd.DataFrame({"x": range(points), "m": 2.0, "lo": 1.0, "hi": 4.0})
    fig, ax = plt.subplots()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bars = plotting.whiskers(ax, df["x"], df["m"], df["lo"], df["hi"])
    segments = bars.lines[2][0].get_segments()
    assert [tuple(map(tuple, s)) for s in segments] == [((i, 1.0), (i, 4.0)) for i in range(points)]
    plt.close(fig)


@pytest.mark.parametrize("name", ["quickstart", "batch_size", "fp16", "amp_amc", "tiling", "ddp_scaling",
                                  "lstm_pruning", "vgg_quantization", "validation_li2016"])
def test_each_study_draws_with_its_plotting_module_which_sits_below_the_studies(name):
    import ast
    import importlib
    from pathlib import Path

    from cnnlab import studies

    drawing = importlib.import_module(f"cnnlab.plotting.{name}")
    assert name in studies.STUDIES and studies.load(name).figures is drawing.figures
    tree = ast.parse(Path(drawing.__file__).read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    above = [m for m in imported if m.startswith(("cnnlab.studies", "cnnlab.results", "cnnlab.contract"))]
    assert not above, f"cnnlab.plotting.{name} imports {above}: plotting sits below the studies"
