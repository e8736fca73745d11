"""Work and traffic of one forward pass, and where a measured time puts it on a roofline.

:func:`cost_model` counts FLOPs with ``torch.utils.flop_counter.FlopCounterMode`` (2 FLOPs per
multiply-accumulate; convolutions, matmuls, attention; elementwise ops are not counted) and bytes
from the tensors themselves. The model runs on the ``meta`` device by default: shapes only, no
memory or compute, so any batch size is cheap to cost. :func:`achieved` turns a measured time into
achieved FLOP/s and bandwidth; :func:`device_peaks` gives the device's datasheet peaks where known,
so a roofline plot (Williams et al., CACM 2009) can place each model against them.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from cnnlab import config


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def _nbytes(obj) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(obj))


def cost_model(
    model: torch.nn.Module,
    input_shape: tuple[int, ...],
    *,
    batch_size: int = 1,
    dtype: str | torch.dtype = "float32",
    input_dtype: str | torch.dtype | None = None,
    device: str = "meta",
) -> dict[str, Any]:
    """FLOPs and bytes of one forward pass of ``model`` on a batch of shape ``(batch_size, *input_shape)``.

    dtype: dtype of parameters and floating activations. input_dtype: dtype of the input tensor
    (default ``dtype``; pass ``torch.long`` for token ids). The model is copied, never modified.
    device: "meta" (default: shapes only) or "cpu" (runs for real, for models without meta kernels).

    Returns a dict (one table row): model (class name), batch_size, dtype, flops (forward FLOPs),
    param_bytes, buffer_bytes, input_bytes, activation_bytes (sum of the outputs of all leaf modules),
    memory_bytes (minimum traffic if every leaf layer reads its input and weights and writes its
    output once, with no reuse between layers), arithmetic_intensity_flop_per_byte = flops / memory_bytes.
    """
    torch_dtype = config.to_dtype(dtype)
    batch_size = config.positive_int(batch_size, parameter="batch_size")
    if device not in ("meta", "cpu"):
        raise ValueError(f"device={device!r} is not valid for cost_model; valid: meta, cpu")
    in_dtype = torch_dtype if input_dtype is None else (
        input_dtype if isinstance(input_dtype, torch.dtype) else config.to_dtype(input_dtype, parameter="input_dtype"))
    net = copy.deepcopy(model).to(device=device, dtype=torch_dtype).eval()
    x = torch.zeros((batch_size, *tuple(input_shape)), dtype=in_dtype, device=device)

    leaf_traffic = {"activation_bytes": 0, "memory_bytes": 0}

    def hook(module, args, output):
        out = _nbytes(output)
        own = sum(p.numel() * p.element_size() for p in module.parameters(recurse=False))
        leaf_traffic["activation_bytes"] += out
        leaf_traffic["memory_bytes"] += _nbytes(args) + own + out

    handles = [m.register_forward_hook(hook) for m in net.modules() if not list(m.children())]
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            net(x)
    finally:
        for h in handles:
            h.remove()
    param_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    flops = int(counter.get_total_flops())
    memory_bytes = leaf_traffic["memory_bytes"]
    return {
        "model": type(model).__name__,
        "batch_size": batch_size,
        "dtype": config.dtype_name(torch_dtype),
        "flops": flops,
        "param_bytes": param_bytes,
        "buffer_bytes": sum(b.numel() * b.element_size() for b in net.buffers()),
        "input_bytes": x.numel() * x.element_size(),
        "activation_bytes": leaf_traffic["activation_bytes"],
        "memory_bytes": memory_bytes,
        "arithmetic_intensity_flop_per_byte": flops / memory_bytes if memory_bytes else math.nan,
    }


def achieved(cost: dict[str, Any], time_s: float) -> dict[str, float]:
    """Achieved rates for a forward pass of ``cost`` that took ``time_s`` seconds (e.g. median latency).

    Returns achieved_tflop_per_s (flops / time / 1e12) and achieved_gb_per_s (memory_bytes / time / 1e9,
    the bandwidth the minimum traffic implies; real traffic can be higher).
    """
    if not time_s or time_s <= 0 or math.isnan(time_s):
        raise ValueError(f"time_s={time_s!r} must be a positive number of seconds")
    return {
        "achieved_tflop_per_s": cost["flops"] / time_s / 1e12,
        "achieved_gb_per_s": cost["memory_bytes"] / time_s / 1e9,
    }


def roofline_point(cost: dict[str, Any], latency_ms: float, device: str | torch.device) -> dict[str, Any]:
    """One workload on the roofline (Williams et al., CACM 2009): ``cost`` (:func:`cost_model` of the whole batch)
    run in ``latency_ms`` ms on ``device``. Returns flops, memory_bytes (minimum traffic), arithmetic intensity
    (FLOP/byte), :func:`achieved`'s achieved_tflop_per_s and achieved_gb_per_s, :func:`device_peaks`' datasheet
    peaks (NaN on a CPU, with ``peaks_missing_reason``) and ``cudnn_allow_tf32`` (on CUDA whether cuDNN may run
    fp32 convolutions on tensor cores in TF32, PyTorch's default, which raises the roof; None on a CPU)."""
    dev = torch.device(device)
    return {**{k: cost[k] for k in ("flops", "memory_bytes", "arithmetic_intensity_flop_per_byte")},
            **achieved(cost, latency_ms / 1e3), **device_peaks(dev),
            "cudnn_allow_tf32": config.tf32_enabled("conv") if dev.type == "cuda" else None}


# Datasheet peaks, dense (no sparsity): FP32 on CUDA cores, TF32 / FP16 on tensor cores with FP32
# accumulate, DRAM bandwidth in GB/s. Sources: NVIDIA datasheets for H100 (2023; PCIe, NVL, SXM5),
# H200 (2024), A100 (2021), V100 (2020, SXM2), T4 (2019), L4 (2023). GeForce cards have no datasheet
# with these numbers: FP32 = 2 x CUDA cores x boost clock (RTX 3060: 3584 x 1.777 GHz; 3060 Ti:
# 4864 x 1.665 GHz; GTX 1050: 640 x 1.455 GHz), GeForce Ampere tensor cores run FP16 with FP32
# accumulate at 2x and TF32 at 1x the FP32 rate (Ampere GA102 whitepaper); Pascal has no tensor cores.
# Patterns are matched against torch.cuda.get_device_name(), most specific first.
_PEAKS: list[tuple[str, dict[str, float]]] = [
    (r"H100 PCIe", dict(fp32=51.2, tf32=378.0, fp16=756.0, bandwidth=2000.0)),
    (r"H100 NVL", dict(fp32=60.0, tf32=417.5, fp16=835.0, bandwidth=3900.0)),
    (r"H100", dict(fp32=67.0, tf32=494.7, fp16=989.4, bandwidth=3350.0)),  # SXM5 80GB HBM3
    (r"H200", dict(fp32=67.0, tf32=494.7, fp16=989.4, bandwidth=4800.0)),
    (r"A100-SXM4-80GB", dict(fp32=19.5, tf32=156.0, fp16=312.0, bandwidth=2039.0)),
    (r"A100 80GB PCIe", dict(fp32=19.5, tf32=156.0, fp16=312.0, bandwidth=1935.0)),
    (r"A100", dict(fp32=19.5, tf32=156.0, fp16=312.0, bandwidth=1555.0)),  # 40GB, as in paper 002
    (r"V100", dict(fp32=15.7, tf32=math.nan, fp16=125.0, bandwidth=900.0)),
    (r"\bT4\b", dict(fp32=8.1, tf32=math.nan, fp16=65.0, bandwidth=320.0)),
    (r"\bL4\b", dict(fp32=30.3, tf32=60.0, fp16=121.0, bandwidth=300.0)),
    (r"RTX 3060 Ti", dict(fp32=16.2, tf32=16.2, fp16=32.4, bandwidth=448.0)),
    (r"RTX 3060\b", dict(fp32=12.7, tf32=12.7, fp16=25.5, bandwidth=360.0)),
    (r"GTX 1050\b", dict(fp32=1.86, tf32=math.nan, fp16=math.nan, bandwidth=112.0)),
]
_KNOWN = ", ".join(pattern.replace("\\b", "") for pattern, _ in _PEAKS)


def device_peaks(device: str | torch.device | None = None, *, device_name: str | None = None) -> dict[str, Any]:
    """Datasheet peaks of a GPU: peak_fp32_tflop_per_s, peak_tf32_tflop_per_s, peak_fp16_tflop_per_s
    (tensor cores, dense), peak_bandwidth_gb_per_s, plus device_name and peaks_missing_reason.

    ``device_name`` overrides the lookup (e.g. to draw the paper's T4 roofline). Unknown GPUs and
    CPUs give NaN with a reason: peak tables for CPUs depend on the SKU, cores and clocks in use.
    """
    if device_name is None:
        dev = torch.device("cuda" if device is None and torch.cuda.is_available() else (device or "cpu"))
        device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else None
    row: dict[str, Any] = {"device_name": device_name, "peak_fp32_tflop_per_s": math.nan,
                           "peak_tf32_tflop_per_s": math.nan, "peak_fp16_tflop_per_s": math.nan,
                           "peak_bandwidth_gb_per_s": math.nan, "peaks_missing_reason": None}
    if device_name is None:
        row["peaks_missing_reason"] = "CPU: no datasheet peak table; measure with a GEMM/STREAM micro-benchmark"
        return row
    for pattern, peaks in _PEAKS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            row.update(peak_fp32_tflop_per_s=peaks["fp32"], peak_tf32_tflop_per_s=peaks["tf32"],
                       peak_fp16_tflop_per_s=peaks["fp16"], peak_bandwidth_gb_per_s=peaks["bandwidth"])
            return row
    row["peaks_missing_reason"] = f"{device_name!r} is not in cnnlab's peak table (known: {_KNOWN})"
    return row
