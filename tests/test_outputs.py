"""Outputs written whole or not at all: a full disk (ENOSPC, simulated by a writer that writes half and fails) must
leave the earlier good figure, table and claims in place, no part file beside them, and an error naming the file
and the free space."""

from __future__ import annotations

import errno

import matplotlib

matplotlib.use("Agg")

import cnnlab  # noqa: E402,F401  (first: registers torchvision's schemas)
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from cnnlab import plotting, studies  # noqa: E402
from cnnlab.claims import Claim  # noqa: E402


def _disk_full(write_half):
    """A writer that puts some bytes into its file, then fails as a full disk does."""
    def writer(target, *args, **kwargs):
        write_half(target)
        raise OSError(errno.ENOSPC, "No space left on device")
    return writer


def test_write_atomic_keeps_the_earlier_file_and_names_it_with_the_free_space(tmp_path):
    good = tmp_path / "claims.csv"
    good.write_text("claim,held\nold,yes\n")
    with pytest.raises(OSError, match=r"could not write .*claims\.csv .*No space left.*free on") as info:
        plotting.write_atomic(good, _disk_full(lambda p: p.write_text("claim,he")))
    assert info.value.errno == errno.ENOSPC
    assert good.read_text() == "claim,held\nold,yes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["claims.csv"]  # no part file left


def test_save_figure_on_a_full_disk_keeps_the_good_png(tmp_path, monkeypatch):
    fig, ax = plt.subplots()
    ax.plot([1, 2])
    png, svg = plotting.save_figure(fig, "demo", tmp_path)
    before = png.read_bytes(), svg.read_bytes()
    monkeypatch.setattr(fig, "savefig", _disk_full(lambda p: p.write_bytes(b"\x89PNG trunc")))
    with pytest.raises(OSError, match="demo.png"):
        plotting.save_figure(fig, "demo", tmp_path)
    plt.close(fig)
    assert (png.read_bytes(), svg.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.png", "demo.svg"]


def test_studies_save_on_a_full_disk_keeps_every_earlier_result(tmp_path, monkeypatch):
    df = pd.DataFrame({"batch_size": [1, 2], "latency_ms": [1.0, 2.0]})
    checks = [Claim("a claim", paper="p", ours="o", held=True, device="cpu", criterion="c")]
    studies.save(df, {}, checks, tmp_path, name="demo", env={"device_name": "cpu"})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert set(before) == {"demo.csv", "claims.csv", "environment.json"}
    real = pd.DataFrame.to_csv

    def half_then_full(self, target, **kwargs):
        real(self.head(1), target, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_then_full)
    with pytest.raises(OSError, match=r"demo\.csv.*free on"):
        studies.save(df.assign(latency_ms=[9.0, 9.0]), {}, checks, tmp_path, name="demo", env={"device_name": "cpu"})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
