"""Tests for cnnlab.plotting: files written, axes scaled and labelled as promised."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import seaborn as sns  # noqa: E402

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
