"""cnnlab.profiling.timing: benchmark's latency, throughput and settings agree with torch.utils.benchmark and
with what was asked for; wall_time times the call (and waits for the GPU)."""

from __future__ import annotations

import math
import time

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import numpy as np
import pytest
import torch
from torch import nn

from cnnlab.profiling import Measurement, benchmark
from margins import check
from nets import SmallConvNet

MIB = 1024**2
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_cpu_benchmark_agrees_with_torch_utils_benchmark():
    """Same forward passes timed by both: medians within 15%.

    One thread and many short interleaved rounds, compared round by round (median of the per-round
    ratios of medians): on a shared 2-core machine the latency swings with whatever else runs, and
    long separate windows would compare the neighbours' load, not the two timers.
    """
    from torch.utils.benchmark import Timer

    torch.manual_seed(0)
    model, x = SmallConvNet().eval(), torch.randn(16, 3, 32, 32)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ratios = []
    try:
        timer = Timer("with torch.inference_mode(): model(x)", globals={"model": model, "x": x, "torch": torch},
                      num_threads=1)
        for _ in range(12):
            ours = benchmark(model, x, device="cpu", warmup=1, repeats=5, measure_memory=False).latency_ms_median
            ratios.append(ours / (timer.blocked_autorange(min_run_time=0.05).median * 1e3))
    finally:
        torch.set_num_threads(threads)
    ratio = float(np.median(ratios))
    print(f"benchmark / torch.utils.benchmark median latency: {ratio:.3f}")
    # Both time the same work; 15% is what two workers sharing 2 cores can add to either side (measured ratio on a
    # quiet machine 0.955-1.007).
    check("benchmark / torch.utils.benchmark median latency, |ratio - 1|", abs(ratio - 1), "<=", 0.15)


def test_measurement_row_has_settings_and_consistent_numbers():
    model, x = SmallConvNet(), torch.randn(8, 3, 32, 32)
    m = benchmark(model, x, device="cpu", warmup=1, repeats=5, labels={"model": "small"})
    assert isinstance(m, Measurement)
    row = m.as_row()
    for key in ("latency_ms_median", "latency_ms_p10", "latency_ms_p90", "throughput_items_per_s", "total_time_s",
                "peak_mem_alloc_mib", "peak_mem_reserved_mib", "peak_mem_method", "gpu_util_pct",
                "gpu_util_missing_reason", "device", "dtype", "autocast", "memory_format", "batch_size",
                "warmup", "repeats"):
        assert key in row, key
    assert "latencies_ms" not in row and row["model"] == "small"
    assert len(m.latencies_ms) == 5
    assert row["latency_ms_p10"] <= row["latency_ms_median"] <= row["latency_ms_p90"]
    # total covers the 5 batches (plus loop overhead); the summary and throughput derive from the raw batches, by
    # the one definition of throughput (batch size / the median time per batch)
    assert sum(m.latencies_ms) / 1e3 <= row["total_time_s"] * 1.0001
    assert row["latency_ms_median"] == pytest.approx(float(np.median(m.latencies_ms)))
    assert row["throughput_items_per_s"] == pytest.approx(8 * 1e3 / row["latency_ms_median"])
    m.latencies_ms[:] = [1.0, 2.0, 3.0, 4.0, 100.0]
    assert (m.latency_ms_median, m.throughput_items_per_s) == (3.0, pytest.approx(8e3 / 3))
    # CPU: utilisation and reserved memory are missing with a reason, never 0
    assert math.isnan(row["gpu_util_pct"]) and row["gpu_util_missing_reason"]
    assert math.isnan(row["peak_mem_reserved_mib"]) and row["peak_mem_reserved_missing_reason"]
    # the peak includes the weights and the input already resident
    resident = (sum(p.numel() for p in model.parameters()) * 4 + x.numel() * 4) / MIB
    assert row["peak_mem_alloc_mib"] >= resident + row["peak_mem_increment_mib"] - 1e-9


def test_bf16_autocast_halves_the_peak_of_a_matmul():
    """Under autocast the matmul's 16 MiB fp32 output is an 8 MiB bf16 one, on every CPU path (measured 16.0 -> 8.5
    MiB on AVX-512 and AVX2: the rest is the bf16 copies of the inputs), so the memory pass runs under autocast."""
    x, w = torch.randn(2048, 64), torch.randn(64, 2048)
    fp32 = benchmark(lambda a: a @ w, x, device="cpu", warmup=1, repeats=2).peak_mem_increment_mib
    bf16 = benchmark(lambda a: a @ w, x, device="cpu", warmup=1, repeats=2, autocast=torch.bfloat16)
    check("fp32 matmul peak increment, |MiB - 16| / 16", abs(fp32 - 16) / 16, "<=", 0.05)
    halved = fp32 / 2 + (x.numel() + w.numel()) * 2 / MIB  # half the fp32 peak, plus the inputs' bf16 copies
    check("bf16-autocast matmul peak, |MiB - (fp32 / 2 + 0.5)| / (fp32 / 2 + 0.5)",
          abs(bf16.peak_mem_increment_mib - halved) / halved, "<=", 0.05)


def test_benchmark_applies_dtype_and_memory_format():
    seen = {}

    def probe(x):
        seen["dtype"], seen["channels_last"] = x.dtype, x.is_contiguous(memory_format=torch.channels_last)
        return x.sum()

    m = benchmark(probe, torch.randn(2, 3, 8, 8), device="cpu", dtype="fp64", memory_format="channels_last",
                  warmup=0, repeats=2, measure_memory=False)
    assert seen == {"dtype": torch.float64, "channels_last": True}
    assert (m.dtype, m.memory_format) == ("float64", "channels_last")
    model = nn.Conv2d(3, 4, 3)
    benchmark(model, torch.randn(2, 3, 8, 8), device="cpu", dtype="float64", memory_format="channels_last",
              warmup=0, repeats=1, measure_memory=False)
    assert model.weight.dtype == torch.float64 and model.weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("kwargs, parameter, valid", [
    ({"dtype": "fp12"}, "dtype", "float16"),
    ({"memory_format": "nhcw"}, "memory_format", "channels_last"),
    ({"autocast": "int8"}, "autocast", "bfloat16"),
    ({"device": "tpu"}, "device", "cpu"),
    ({"repeats": 0}, "repeats", ">= 1"),
])
def test_benchmark_rejects_bad_settings_naming_them(kwargs, parameter, valid):
    args = {"device": "cpu", "warmup": 0, "repeats": 1, **kwargs}
    with pytest.raises(ValueError) as err:
        benchmark(nn.Identity(), torch.zeros(1), **args)
    assert parameter in str(err.value) and valid in str(err.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_benchmark_cuda_without_gpu_says_so():
    with pytest.raises(ValueError, match="CUDA is not available"):
        benchmark(nn.Identity(), torch.zeros(1), device="cuda", warmup=0, repeats=1)


def test_benchmark_first_call_is_timed_apart():
    calls = []

    def model(x):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.05)  # a first call that compiles
        return x + 1

    m = benchmark(model, torch.ones(2), device="cpu", warmup=1, repeats=3, first_call=True, measure_memory=False)
    assert m.first_call_ms >= 45 and m.latency_ms_median < 20
    assert len(calls) == 1 + 1 + 3  # first call, warm-up, timed
    plain = benchmark(model, torch.ones(2), device="cpu", warmup=0, repeats=2, measure_memory=False)
    assert math.isnan(plain.first_call_ms)


def test_benchmark_min_run_time_sets_repeats():
    # 50 ms a call: a busy machine's scheduling delays (tens of ms on CI's 2 shared cores turned a 10 ms probe into
    # 25 ms and 4 repeats) stay small beside it, and a call is never shorter than its sleep
    model = lambda x: time.sleep(0.05) or x  # noqa: E731
    m = benchmark(model, torch.ones(2), device="cpu", warmup=0, repeats=2, min_run_time_s=0.5, measure_memory=False)
    assert 5 <= m.repeats <= 10 and len(m.latencies_ms) == m.repeats
    capped = benchmark(model, torch.ones(2), device="cpu", warmup=0, repeats=2, min_run_time_s=1.0, max_repeats=4,
                       measure_memory=False)
    assert capped.repeats == 4
    fast = benchmark(lambda x: x, torch.ones(2), device="cpu", warmup=0, repeats=3, min_run_time_s=1e-9,
                     measure_memory=False)
    assert fast.repeats == 3  # never fewer than asked for


def test_wall_time_measures_the_call_and_returns_its_result():
    from cnnlab.profiling import wall_time

    timed = wall_time(lambda: time.sleep(0.05) or 7, device="cpu")
    assert timed.result == 7
    assert 0.045 <= timed.seconds < 1.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_wall_time_waits_for_the_gpu():
    from cnnlab.profiling import wall_time

    x = torch.randn(4096, 4096, device="cuda")
    x @ x  # the first matmul of a process starts cuBLAS (0.22 s on an H100, more than twenty warm ones): not timed
    one = wall_time(lambda: x @ x, device="cuda").seconds
    many = wall_time(lambda: [x @ x for _ in range(20)], device="cuda").seconds
    assert many > 5 * one  # without a synchronise both would be the launch time only


@cuda
@pytest.mark.gpu
def test_cuda_benchmark_host_inputs_memory_and_utilisation():
    model, x = SmallConvNet(), torch.randn(64, 3, 32, 32)
    m = benchmark(model, x, device="cuda", warmup=5, repeats=50, measure_gpu_util=True)
    assert m.timer == "cuda_events" and m.input_location == "host"
    assert 0 < m.latency_ms_p10 <= m.latency_ms_median <= m.latency_ms_p90
    assert m.peak_mem_alloc_mib >= x.numel() * 4 / MIB  # the copied input lives on the GPU
    assert m.peak_mem_reserved_mib >= m.peak_mem_alloc_mib
    assert (0 <= m.gpu_util_pct <= 100) or (math.isnan(m.gpu_util_pct) and m.gpu_util_missing_reason)
    on_gpu = benchmark(model, x.cuda(), device="cuda", warmup=5, repeats=50, pin_memory=True)
    assert on_gpu.input_location == "device"
    # utilisation only where asked for: no second of sampling otherwise
    assert math.isnan(on_gpu.gpu_util_pct) and "measure_gpu_util=False" in on_gpu.gpu_util_missing_reason
    assert on_gpu.total_time_s < 0.5 < m.total_time_s or math.isnan(m.gpu_util_pct)


def test_cold_start_times_build_and_first_pass_per_round_from_fresh_copies():
    from cnnlab.profiling.timing import cold_start

    model, x, built = nn.Linear(8, 4), torch.randn(16, 8), []

    def build(net):
        assert net is not model and not net.training  # a fresh copy in eval mode, never the caller's model
        built.append(net)
        time.sleep(0.02)
        return net

    def first_pass(runner):
        time.sleep(0.01 * len(built))  # rounds 1, 2, 3: 10, 20, 30 ms
        return runner(x)

    got = cold_start(model.train(), build, first_pass, x, warmup=1, repeats=3, rounds=3)
    row = got["row"]
    assert len(built) == 3 and got["runner"] is built[-1] and model.training  # the caller's model left as it was
    assert got["first"].shape == (16, 4)  # the first round's first_pass result
    assert row["build_s"] >= 0.02 and row["first_pass_rounds"] == 3
    assert 0.01 <= row["first_pass_s_min"] < row["first_pass_s"] < row["first_pass_s_max"]
    assert not any(k.startswith("profile_") for k in row)  # nothing profiled among the timings
    assert row["batch_size"] == 16 and row["latency_ms_p10"] <= row["latency_ms_median"] <= row["latency_ms_p90"]
    once = cold_start(model, build, first_pass, x, warmup=0, repeats=2)["row"]
    assert once["first_pass_rounds"] == 1


def test_median_seconds_is_the_median_of_timed_calls_after_untimed_ones():
    from cnnlab.profiling.timing import median_seconds

    naps = iter([0.5, 0.0, 0.03, 0.01, 0.02])  # the first call is the untimed one: its 0.5 s never counts

    def nap():
        time.sleep(next(naps))

    seconds = median_seconds(nap, device="cpu", repeats=4, warmup=1)
    assert 0.01 <= seconds < 0.05  # median of about 0, 30, 10, 20 ms: 15 ms
    calls = []
    median_seconds(lambda: calls.append(1), repeats=2, warmup=0)
    assert len(calls) == 2


def test_the_models_own_memory_on_a_cpu_is_all_that_is_counted():
    m = benchmark(SmallConvNet(), torch.randn(4, 3, 32, 32), device="cpu", warmup=1, repeats=2)
    assert m.peak_mem_model_mib == m.peak_mem_alloc_mib and math.isnan(m.peak_mem_other_mib)
    assert "CPU run" in m.peak_mem_other_missing_reason


@cuda
@pytest.mark.gpu
def test_the_models_own_memory_leaves_the_library_workspaces_out():
    # a matmul and a convolution leave cuBLAS's and cuDNN's workspaces resident: not the model's bytes
    a = torch.randn(512, 512, device="cuda")
    (a @ a).sum().item()
    model, x = SmallConvNet(), torch.randn(16, 3, 32, 32)
    m = benchmark(model, x.cuda(), device="cuda", warmup=2, repeats=5)
    own = sum(p.numel() * p.element_size() for p in model.parameters()) + x.numel() * 4
    assert m.peak_mem_other_mib > 0.5 and m.peak_mem_other_missing_reason is None  # a (1 MiB), the workspaces
    assert m.peak_mem_model_mib == pytest.approx(own / MIB + m.peak_mem_increment_mib, rel=1e-6)
    assert m.peak_mem_model_mib + m.peak_mem_other_mib == pytest.approx(m.peak_mem_alloc_mib, abs=0.01)
