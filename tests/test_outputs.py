"""Outputs written whole or not at all: a full disk (ENOSPC, simulated by a writer that writes half and fails) must
leave the earlier good figure, table and claims in place, no part file beside them, and an error naming the file
and the free space."""

from __future__ import annotations

import errno
import os
import time

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


_SLOW_WRITER = """
import sys, time
from pathlib import Path
from cnnlab import plotting
target, tag, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
go.with_name(f"ready-{tag}").touch()
def slowly(tmp):
    with open(tmp, "w") as f:
        for i in range(100):
            f.write(f"{tag} {i}\\n")
            f.flush()
            time.sleep(0.01)
while not go.exists():
    time.sleep(0.005)
plotting.write_atomic(target, slowly)
"""


def test_two_writers_of_one_file_at_once_each_rename_a_whole_file_of_their_own(tmp_path):
    """Two runs saving the same figure at the same moment (two `make figures NB=00` a few seconds apart): both
    succeed and the file is one writer's, whole (one shared part file used to mix their lines, then fail the second
    rename with FileNotFoundError and advice to free some space)."""
    import subprocess
    import sys
    from pathlib import Path

    target, go = tmp_path / "figure.svg", tmp_path / "go"
    repo = Path(__file__).resolve().parents[1]
    writers = [subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, str(target), tag, str(go)], cwd=repo,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for tag in ("a", "b")]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{tag}").exists() for tag in "ab") and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # both wait for it: their 1 s writes overlap
    ends = [w.communicate(timeout=120) for w in writers]
    assert [w.returncode for w in writers] == [0, 0], [err[-1500:] for _, err in ends]
    lines = target.read_text().splitlines()
    assert lines in ([f"a {i}" for i in range(100)], [f"b {i}" for i in range(100)]), lines[:3] + lines[-3:]
    assert not [p.name for p in tmp_path.iterdir() if p.suffix == ".part"]  # no part file left


@pytest.mark.parametrize("code, full", [(errno.ENOSPC, True), (getattr(errno, "EDQUOT", errno.ENOSPC), True),
                                        (errno.EROFS, False), (errno.EACCES, False), (errno.ENOENT, False)])
def test_only_a_full_disk_or_quota_is_told_to_free_space(tmp_path, code, full):
    """A read-only folder, one without permission or one deleted under the writer is named with its cause; the free
    space and "Free some space" only where space is what is missing."""
    def fails(target):
        target.write_text("claim,he")
        raise OSError(code, os.strerror(code))

    with pytest.raises(OSError) as info:
        plotting.write_atomic(tmp_path / "claims.csv", fails)
    text = str(info.value)
    assert "claims.csv" in text and os.strerror(code) in text and info.value.errno == code
    assert ("Free some space" in text and "free on" in text) == full, text
    assert list(tmp_path.iterdir()) == []  # no part file left
