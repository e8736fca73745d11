"""cnnlab.profiling.cost: FLOPs and bytes of a layer counted by hand, achieved rates, and device peaks."""

from __future__ import annotations

import math

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pytest
import torch
from torch import nn

from cnnlab.profiling import achieved, cost_model, device_peaks


def test_cost_model_counts_conv_flops_and_bytes():
    conv = nn.Conv2d(3, 8, 3)  # 32x32 -> 30x30
    c = cost_model(conv, (3, 32, 32), batch_size=2)
    macs = 2 * 8 * 30 * 30 * 3 * 3 * 3
    assert c["flops"] == 2 * macs
    assert c["param_bytes"] == (8 * 3 * 3 * 3 + 8) * 4
    assert c["input_bytes"] == 2 * 3 * 32 * 32 * 4
    assert c["activation_bytes"] == 2 * 8 * 30 * 30 * 4
    assert c["memory_bytes"] == c["param_bytes"] + c["input_bytes"] + c["activation_bytes"]
    assert c["arithmetic_intensity_flop_per_byte"] == pytest.approx(c["flops"] / c["memory_bytes"])
    half = cost_model(conv, (3, 32, 32), batch_size=2, dtype="float16")
    assert half["flops"] == c["flops"] and half["memory_bytes"] * 2 == c["memory_bytes"]
    assert conv.weight.device.type == "cpu" and conv.weight.dtype == torch.float32  # untouched
    rate = achieved(c, 1e-3)
    assert rate["achieved_tflop_per_s"] == pytest.approx(c["flops"] / 1e-3 / 1e12)
    with pytest.raises(ValueError, match="time_s"):
        achieved(c, 0)


def test_device_peaks_known_unknown_and_cpu():
    t4 = device_peaks(device_name="Tesla T4")
    assert t4["peak_bandwidth_gb_per_s"] == 320 and t4["peak_fp16_tflop_per_s"] == 65 and t4["peaks_missing_reason"] is None
    assert device_peaks(device_name="NVIDIA H100 PCIe")["peak_bandwidth_gb_per_s"] == 2000  # not the SXM entry
    assert device_peaks(device_name="NVIDIA L40S")["peaks_missing_reason"]  # "L4" must not match L40S
    cpu = device_peaks("cpu")
    assert math.isnan(cpu["peak_fp32_tflop_per_s"]) and cpu["peaks_missing_reason"]


def test_roofline_point_places_a_timed_workload_on_the_roofline():
    from cnnlab.profiling import roofline_point

    cost = cost_model(nn.Linear(1024, 1024), (1024,), batch_size=64)
    row = roofline_point(cost, 2.0, "cpu")  # 2 ms per batch
    assert row["flops"] == cost["flops"] and row["memory_bytes"] == cost["memory_bytes"]
    assert row["arithmetic_intensity_flop_per_byte"] == cost["arithmetic_intensity_flop_per_byte"]
    assert math.isclose(row["achieved_tflop_per_s"], cost["flops"] / 2e-3 / 1e12)
    assert math.isclose(row["achieved_gb_per_s"], cost["memory_bytes"] / 2e-3 / 1e9)
    assert math.isnan(row["peak_fp32_tflop_per_s"]) and row["peaks_missing_reason"]  # a CPU has no datasheet roof
    assert row["cudnn_allow_tf32"] is None
    with pytest.raises(ValueError, match="time_s"):
        roofline_point(cost, 0.0, "cpu")  # no time, no rate
