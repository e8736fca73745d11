"""cnnlab.profiling.ops: profile_ops counts operators, kernels, copies, synchronisations and allocations, and
reads torch 2.11's and 2.13's profiler events alike."""

from __future__ import annotations

import json
import math

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pandas as pd
import pytest
import torch

from cnnlab.profiling import OpsProfile, profile_ops
from nets import SmallConvNet

MIB = 1024**2
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_profile_ops_counts_k_times_n_conv_calls(tmp_path):
    model, x, k = SmallConvNet().eval(), torch.randn(4, 3, 32, 32), 4
    trace = tmp_path / "trace.json"
    with torch.inference_mode():
        prof = profile_ops(lambda: model(x), iterations=k, device="cpu", record_shapes=True, trace_path=trace)
    assert isinstance(prof, OpsProfile)
    ops = prof.operators.set_index("name")
    assert ops.loc["aten::conv2d", "calls"] == k * SmallConvNet.n_conv
    assert ops.loc["aten::linear", "calls"] == k
    assert ops.loc["aten::conv2d", "cpu_time_total_us"] >= ops.loc["aten::conv2d", "self_cpu_time_us"] > 0
    s = prof.summary
    assert s["iterations"] == k and 0 < s["cpu_time_total_ms"] <= s["wall_time_ms"] * 1.01
    # no device on CPU: missing with a reason, never 0
    assert math.isnan(s["kernel_time_total_ms"]) and math.isnan(s["sync_wait_ms"]) and s["device_missing_reason"]
    assert ops["device_time_total_us"].isna().all() and prof.kernels.empty
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e.get("name") == "aten::conv2d" for e in events) == k * SmallConvNet.n_conv


def test_scheduled_profile_records_only_the_active_steps():
    from torch.profiler import record_function

    model, x = SmallConvNet().eval(), torch.randn(2, 3, 16, 16)
    calls = []

    def step():
        calls.append(1)
        with record_function("test::step"), torch.inference_mode():
            return model(x)

    prof = profile_ops(step, iterations=3, warmup=2, device="cpu", scheduled=True)
    assert len(calls) == 5  # the warm-up steps ran (under the profiler), but only 3 were recorded
    ops = prof.operators.set_index("name")
    assert ops.loc["test::step", "calls"] == 3 and ops.loc["aten::conv2d", "calls"] == 3 * SmallConvNet.n_conv
    assert not prof.operators["name"].str.startswith("ProfilerStep#").any()  # the schedule's own annotations
    assert prof.summary["iterations"] == 3 and prof.summary["cpu_time_total_ms"] > 0
    calls.clear()
    plain = profile_ops(step, iterations=3, warmup=2, device="cpu")  # unscheduled: warm-up before the profiler
    assert len(calls) == 5 and plain.operators.set_index("name").loc["test::step", "calls"] == 3


def test_cumulative_allocation_counts_every_allocation_and_the_peak_one():
    n, size_mib = 6, 8
    elements = size_mib * MIB // 4

    def allocate_and_free():  # n tensors of 8 MiB, each freed before the next is allocated
        for _ in range(n):
            t = torch.ones(elements)
            del t

    s = profile_ops(allocate_and_free, iterations=2, warmup=0, device="cpu").summary
    # allocator events count tensor bytes exactly; 5% leaves room for the profiler's own small tensors
    assert 2 * n * size_mib <= s["cpu_mem_allocated_mib"] <= 1.05 * 2 * n * size_mib, s["cpu_mem_allocated_mib"]
    assert size_mib <= s["max_cpu_mem_mib"] <= 1.05 * size_mib, s["max_cpu_mem_mib"]  # one tensor live at a time
    assert math.isnan(s["device_mem_allocated_mib"])  # no device on a CPU run: missing, not 0
    off = profile_ops(allocate_and_free, iterations=1, warmup=0, device="cpu", profile_memory=False).summary
    assert math.isnan(off["cpu_mem_allocated_mib"]) and off["memory_missing_reason"] == "profile_memory=False"


@cuda
@pytest.mark.gpu
def test_cuda_profile_ops_kernels_copies_and_syncs():
    model, k = SmallConvNet().cuda().eval(), 3
    x = torch.randn(8, 3, 32, 32)

    def step():
        with torch.inference_mode():
            y = model(x.cuda())  # one HtoD copy per iteration
            y.cpu()              # one DtoH copy (synchronising) per iteration
            torch.cuda.synchronize()

    prof = profile_ops(step, iterations=k, device="cuda")
    s = prof.summary
    assert prof.operators.set_index("name").loc["aten::conv2d", "calls"] == k * SmallConvNet.n_conv
    assert s["memcpy_htod_count"] == k and s["memcpy_dtoh_count"] == k
    assert s["kernel_launches"] >= k * SmallConvNet.n_conv and s["kernel_time_total_ms"] > 0
    assert s["sync_calls"] >= k and s["sync_wait_ms"] >= 0 and s["device_missing_reason"] is None
    assert s["device_time_total_ms"] >= s["kernel_time_total_ms"]


def _cuda_step_events(shape: str):
    """One profiled CUDA step as torch's ``FunctionEvent``s, shaped like torch 2.13's (with ``activity_type``) or
    like torch 2.8-2.11's (without it): host ops and runtime calls, one kernel, one copy, one memset, and the device
    copies of two ``record_function`` ranges (user annotations on the GPU timeline: not work)."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    def event(i, name, start, end, device=DeviceType.CPU, annotation=False, activity=None):
        e = FunctionEvent(id=i, name=name, thread=0, start_us=start, end_us=end, device_type=device,
                          is_user_annotation=annotation, use_device="cuda")
        if shape == "2.13":
            e.activity_type = activity
        elif hasattr(e, "activity_type"):
            del e.activity_type  # torch 2.11's FunctionEvent has no such attribute
        return e

    gpu = DeviceType.CUDA
    return [
        event(1, "cnnlab::iteration", 0, 100, annotation=True, activity="user_annotation"),
        event(2, "aten::conv2d", 5, 60, activity="cpu_op"),
        event(3, "cudaLaunchKernel", 10, 15, activity="cuda_runtime"),
        event(4, "cudaMemcpyAsync", 20, 25, activity="cuda_runtime"),
        event(5, "cudaStreamSynchronize", 26, 50, activity="cuda_runtime"),
        event(6, "cnnlab::iteration", 0, 100, device=gpu, annotation=True, activity="gpu_user_annotation"),
        event(7, "ProfilerStep#1", 0, 100, device=gpu, annotation=True, activity="gpu_user_annotation"),
        event(8, "implicit_gemm_kernel", 12, 40, device=gpu, activity="kernel"),
        event(9, "Memcpy HtoD (Pageable -> Device)", 21, 30, device=gpu, activity="gpu_memcpy"),
        event(10, "Memset (Device)", 41, 42, device=gpu, activity="gpu_memset"),
    ]


@pytest.mark.parametrize("shape", ["2.11", "2.13"])
def test_breakdown_is_the_same_from_torch_2_11_and_2_13_profiler_events(shape, monkeypatch):
    """Device copies of record_function ranges are neither kernels nor device time, whether or not the events carry
    torch 2.13's ``activity_type`` (torch 2.11's do not): one kernel launch of 28 us, one 9 us copy, one memset."""
    from cnnlab.profiling import ops

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 0)
    events = _cuda_step_events(shape)
    kernels, operators = ops._kernels_table(events), ops._operators_table(events, True)
    summary = ops._summary(events, kernels, operators, None, torch.device("cuda"), 1, False)
    assert sorted(kernels["kind"]) == ["gpu_memcpy", "gpu_memset", "kernel"]
    assert summary["kernel_launches"] == 1 and summary["kernel_time_total_ms"] == pytest.approx(0.028)
    assert summary["device_time_total_ms"] == pytest.approx(0.038)
    assert summary["memcpy_htod_count"] == 1 and summary["sync_calls"] == 1
    assert dict(zip(operators["name"], operators["kind"])) == {
        "aten::conv2d": "cpu_op", "cudaLaunchKernel": "cuda_runtime", "cudaMemcpyAsync": "cuda_runtime",
        "cudaStreamSynchronize": "cuda_runtime"}
    other = _cuda_step_events("2.13" if shape == "2.11" else "2.11")
    other_kernels = ops._kernels_table(other)
    pd.testing.assert_frame_equal(kernels, other_kernels)
    assert ops._summary(other, other_kernels, ops._operators_table(other, True), None, torch.device("cuda"), 1,
                        False) == summary


def test_step_components_partition_the_wall_time_per_iteration():
    from cnnlab.profiling.ops import STEP_COMPONENTS, OpsProfile, step_components

    summary = dict(iterations=2, device="cuda:0", wall_time_ms=20.0, kernel_time_total_ms=8.0, memcpy_htod_ms=2.0,
                   memcpy_dtoh_ms=1.0, device_time_total_ms=12.0)
    gpu, wall = step_components(OpsProfile(pd.DataFrame(), pd.DataFrame(), summary), sync_wait_ms=3.5)
    assert wall == 10.0 and list(gpu) == list(STEP_COMPONENTS)
    assert gpu == {"kernel / compute": 4.0, "memcpy HtoD": 1.0, "memcpy DtoH": 0.5, "other device work": 0.5,
                   "CPU-side overhead": 4.0, "host waits for the GPU": 3.5}
    # the host's wait overlaps the rest
    assert math.isclose(sum(v for c, v in gpu.items() if c != "host waits for the GPU"), wall)
    summary.update(kernel_time_total_ms=30.0, device_time_total_ms=30.0)  # the device busier than the wall: no < 0
    assert step_components(OpsProfile(pd.DataFrame(), pd.DataFrame(), summary))[0]["CPU-side overhead"] == 0.0
    ops = pd.DataFrame({"self_cpu_time_us": [3000.0, 1000.0]})  # 4 ms of operators over 2 iterations
    cpu, wall = step_components(OpsProfile(ops, pd.DataFrame(), dict(iterations=2, device="cpu", wall_time_ms=10.0)))
    assert wall == 5.0 and cpu == {"kernel / compute": 2.0, "CPU-side overhead": 3.0}


def test_step_components_of_a_real_cpu_profile():
    from cnnlab.profiling import profile_ops
    from cnnlab.profiling.ops import step_components

    x = torch.randn(64, 64)
    prof = profile_ops(lambda: x @ x, iterations=3, device="cpu", profile_memory=False)
    parts, wall = step_components(prof)
    assert set(parts) == {"kernel / compute", "CPU-side overhead"} and wall > 0
    assert parts["kernel / compute"] > 0 and parts["kernel / compute"] + parts["CPU-side overhead"] >= wall * 0.999


def test_top_operators_sorts_cuts_and_shares_of_every_operator():
    from cnnlab.profiling.ops import top_operators

    ops = pd.DataFrame({"name": ["a", "b", "c", "d"], "self_cpu_time_us": [1000.0, 4000.0, 3000.0, 2000.0],
                        "self_device_time_us": [math.nan] * 4, "calls": [1, 2, 3, 4]})
    top = top_operators(OpsProfile(ops, pd.DataFrame(), {}), by="self_cpu_time_us", n=2)
    assert list(top["name"]) == ["b", "c"] and list(top.index) == [0, 1]
    assert list(top["share_pct"]) == [40.0, 30.0]  # of all four operators' 10 ms, not of the two kept
    assert list(top["self_cpu_time_ms"]) == [4.0, 3.0] and top["self_device_time_ms"].isna().all()
    assert list(top_operators(OpsProfile(ops, pd.DataFrame(), {}))["name"]) == ["b", "c", "d", "a"]


def test_the_peak_of_profiled_training_steps_does_not_count_the_warm_ups_gradients_twice():
    # zero_grad(set_to_none=True) first frees the last step's 4 MiB of gradients, then backward makes new ones: the
    # live bytes go down by 4 MiB, then up by 4 MiB. The first profiled step's free is of gradients made before the
    # profile (by the warm-up), which the CPU profiler cannot size: a peak over it read about 4 MiB.
    net, x = torch.nn.Linear(1024, 1024), torch.randn(4, 1024)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)

    def step():
        optimizer.zero_grad(set_to_none=True)
        net(x).sum().backward()
        optimizer.step()

    s = profile_ops(step, iterations=3, warmup=1, device="cpu").summary
    grads_mib = (1024 * 1024 + 1024) * 4 / MIB
    assert s["max_cpu_mem_mib"] < 0.5 * grads_mib, s["max_cpu_mem_mib"]  # the new gradients replace the old ones
    assert s["cpu_mem_allocated_mib"] >= 3 * grads_mib  # every step's new gradients are still counted as allocated


@pytest.mark.parametrize("shape", ["2.11", "2.13"])
def test_the_profilers_own_events_are_not_the_workloads(shape, monkeypatch):
    """Kineto's "Activity Buffer Request" (a CUPTI buffer allocation inside a profiled step: 2.0 ms, 28% of
    quickstart's CPU total on the first H100 run) is left out of the operators, the CPU total and the wall time."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    from cnnlab.profiling import ops

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 0)
    plain = _cuda_step_events(shape)
    request = FunctionEvent(id=11, name="Activity Buffer Request", thread=0, start_us=61, end_us=81,
                            device_type=DeviceType.CPU, is_user_annotation=False, use_device="cuda")
    if shape == "2.13":
        request.activity_type = "cpu_op"
    elif hasattr(request, "activity_type"):
        del request.activity_type
    with_request = [*plain, request]
    assert "Activity Buffer Request" in ops.PROFILER_EVENTS

    def summary(events):
        kernels, operators = ops._kernels_table(events), ops._operators_table(events, True)
        return operators, ops._summary(events, kernels, operators, None, torch.device("cuda"), 1, False)

    (base_ops, base), (ops_with, got) = summary(plain), summary(with_request)
    assert list(ops_with["name"]) == list(base_ops["name"])  # not an operator
    assert got["cpu_time_total_ms"] == pytest.approx(base["cpu_time_total_ms"])
    assert got["wall_time_ms"] == pytest.approx(base["wall_time_ms"] - 0.020)
    assert got["profiler_overhead_ms"] == pytest.approx(0.020) and base["profiler_overhead_ms"] == 0


@cuda
@pytest.mark.gpu
def test_timing_after_a_cuda_profile_in_the_same_process_is_not_slowed():
    """The studies time points after CUDA profiles in the same process (quickstart, tiling's average memory, 02's
    and 07's profiles before their timings). Kineto kept CUPTI attached after a profile on older versions
    (pytorch#144455), which slowed every later launch; torch's profiler has torn it down since PR 146604. This is
    the check that it does here: the same benchmark before and after a profile agrees within its noise. If it
    fails on a GPU, those timings must move before the profiles, or the profiles into a subprocess."""
    from cnnlab import models
    from cnnlab.profiling import benchmark

    net = models.get("resnet20").cuda().eval()
    x = models.example_input(net, 32).cuda()
    before = [benchmark(net, x, device="cuda", warmup=10, repeats=50, measure_memory=False) for _ in range(2)]
    with torch.inference_mode():
        profile_ops(lambda: net(x), iterations=3, device="cuda", warmup=1)
    after = benchmark(net, x, device="cuda", warmup=10, repeats=50, measure_memory=False)
    low = min(m.latency_ms_p10 for m in before)
    high = max(m.latency_ms_p90 for m in before)
    assert low * 0.9 <= after.latency_ms_median <= high * 1.1, (
        [m.latency_ms_median for m in before], after.latency_ms_median, (low, high))


def test_cpu_totals_profiles_each_call_apart_and_says_nan_for_none():
    from cnnlab.profiling.ops import cpu_totals

    net, x, seen = torch.nn.Linear(16, 8), torch.randn(4, 16), []

    def call():
        seen.append(torch.is_inference_mode_enabled())
        return net(x)

    got = cpu_totals(call, 3, device="cpu")
    assert got["profile_calls"] == 3 and seen == [True] * 3  # each call profiled once, in inference mode
    assert 0 < got["profile_cpu_total_ms_min"] <= got["profile_cpu_total_ms"] <= got["profile_cpu_total_ms_max"]
    none = cpu_totals(call, 0, device="cpu")
    assert none["profile_calls"] == 0 and len(seen) == 3 and math.isnan(none["profile_cpu_total_ms"])
