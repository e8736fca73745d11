"""Tests for benchmarks/conv_kernels.py's tiling part: every variant side by side, ratios per round, goals printed.

A tiny run (ResNet-20 at 64x64, batch 1, two rounds): what is checked is the table's shape and meaning, never a
timing outcome, which depends on the CPU and its load.
"""

import argparse
import importlib.util
from pathlib import Path

import pytest
import torch

import cnnlab  # noqa: F401

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "conv_kernels.py"


@pytest.fixture(scope="module")
def conv_kernels():
    spec = importlib.util.spec_from_file_location("conv_kernels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiling_part_times_every_variant_beside_the_untiled_model(conv_kernels, capsys):
    args = argparse.Namespace(tiles="8,16", tiling_rounds=2, repeats=1, until="avgpool", batched_until="layer1",
                              batch={"resnet20": 1}, image_size=64)
    df = conv_kernels.spatial_part(args, torch.device("cpu"))
    assert list(zip(df["method"], df["tile"].fillna(0).astype(int))) == [
        ("untiled", 0), ("untiled_folded", 0), ("spatial", 8), ("spatial", 16), ("spatial_folded", 8),
        ("spatial_folded", 16), ("batched", 8), ("batched", 16), ("triton", 8), ("triton", 16), ("spatial_triton", 8),
        ("spatial_triton", 16)]
    untiled = df.iloc[0]
    assert (untiled.time_ratio, untiled.time_ratio_low, untiled.time_ratio_high, untiled.memory_cut) == (1, 1, 1, 1)
    spatial = df[df["method"].isin(["spatial", "spatial_folded"])]
    assert len(spatial) == 4 and (spatial["rounds"] == 2).all() and spatial["skipped"].isna().all()
    assert ((spatial.time_ratio_low <= spatial.time_ratio) & (spatial.time_ratio <= spatial.time_ratio_high)).all()
    assert (spatial["memory_cut"] > 1).all() and (spatial["peak_mib"] < untiled.peak_mib).all()
    assert (spatial["until"] == "avgpool").all()
    batched = df[df["method"] == "batched"]
    assert (batched["until"] == "layer1").all() and batched["latency_ms"].notna().all()
    triton = df[df["method"].str.contains("triton")]  # never timed on a CPU: the reason, no number
    assert triton["skipped"].str.contains("only on a GPU").all() and triton["latency_ms"].isna().all()
    out = capsys.readouterr().out
    assert "Goal, spatial tiling on cpu: at most 1.0x the untiled time" in out and "spatial tile   8: time" in out
    assert "spatial_folded tile  16: time" in out
    assert "note: 2 rounds: two identical variants come out all one way in 2/2**2 of runs" in out
    assert "not timed: triton@8, triton@16, spatial_triton@8, spatial_triton@16" in out


def test_a_goal_is_met_only_when_the_whole_interval_is(conv_kernels):
    assert conv_kernels._verdict(0.8, 0.95, 1.0) == "met"
    assert conv_kernels._verdict(0.9, 1.05, 1.0) == "within noise"
    assert conv_kernels._verdict(1.01, 1.2, 1.0) == "not met"
