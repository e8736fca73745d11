"""cnnlab.profiling.memory: peak memory of a known allocation, the time-weighted average of a step, and the
profiler's raw allocator events it reads (weighted by device time where the host runs ahead)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pytest
import torch

from cnnlab.profiling import benchmark, profile_ops
from margins import check

MIB = 1024**2
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_cpu_peak_memory_of_a_256_mib_allocation():
    n = 256 * MIB // 4  # float32 elements

    def allocate(x):  # the 256 MiB tensor exists only inside the measured region
        big = torch.ones(n)
        return big[:1] + x

    m = benchmark(allocate, torch.zeros(1), device="cpu", warmup=0, repeats=1)
    # The allocator's events count tensor bytes exactly; 10% leaves room for small temporaries around the big one.
    check("CPU peak increment of a 256 MiB allocation, |MiB - 256| / 256", abs(m.peak_mem_increment_mib - 256) / 256,
          "<=", 0.10)
    check("CPU peak of a 256 MiB allocation, |MiB - 256| / 256", abs(m.peak_mem_alloc_mib - 256) / 256, "<=", 0.10)
    prof = profile_ops(lambda: allocate(torch.zeros(1)), iterations=1, warmup=0, device="cpu")
    check("profile_ops max CPU memory of a 256 MiB allocation, |MiB - 256| / 256",
          abs(prof.summary["max_cpu_mem_mib"] - 256) / 256, "<=", 0.10)


@cuda
@pytest.mark.gpu
def test_cuda_peak_memory_of_a_256_mib_allocation():
    n = 256 * MIB // 4
    m = benchmark(lambda x: torch.ones(n, device="cuda")[:1] + x, torch.zeros(1, device="cuda"),
                  device="cuda", warmup=0, repeats=2)
    assert m.peak_mem_increment_mib == pytest.approx(256, rel=0.10)


def test_memory_over_time_peak_and_average_of_a_known_workload():
    from cnnlab.profiling import memory_over_time

    mib = 1024**2

    def step():  # 8 MiB live for the first ~60 ms, then 8 + 24 MiB for ~60 ms
        a = torch.ones(2 * mib)
        time.sleep(0.06)
        b = torch.ones(6 * mib)
        time.sleep(0.06)
        return a.sum() + b.sum()

    out = memory_over_time(step, "cpu")
    assert out["events"] >= 4
    assert 31.9 * mib <= out["peak_bytes"] <= 33 * mib
    # time-weighted: about (8 x 0.06 + 32 x 0.06) / 0.12 = 20 MiB; never the peak, never the first block alone
    assert 15 * mib < out["avg_bytes"] < 25 * mib, out["avg_bytes"] / mib
    assert 0.11 < out["step_s"] < 1.0


def test_raw_profiler_events_fail_loudly_if_the_api_changes():
    from torch.profiler import ProfilerActivity, profile

    from cnnlab.profiling.memory import raw_events

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        torch.ones(1024).sum()
    events = raw_events(prof)  # the private API cnnlab reads allocator events from
    memory = [e for e in events if e.name() == "[memory]"]
    assert memory and all(isinstance(e.nbytes(), int) and isinstance(e.start_ns(), int) for e in memory)

    class Changed:
        profiler = object()  # no kineto_results: what a torch that moved it would give

    with pytest.raises(RuntimeError, match="changed the profiler's raw event API"):
        raw_events(Changed())


class FakeEvent:
    """A raw profiler event as memory.py reads it (name, host or device start, duration, device type, size,
    correlation id)."""

    def __init__(self, name, start, duration=0, device="DeviceType.CPU", nbytes=0, correlation=0):
        self._name, self._start, self._duration = name, start, duration
        self._device, self._nbytes, self._correlation = device, nbytes, correlation

    def name(self):
        return self._name

    def start_ns(self):
        return self._start

    def duration_ns(self):
        return self._duration

    def device_type(self):
        return self._device

    def nbytes(self):
        return self._nbytes

    def correlation_id(self):
        return self._correlation


def test_device_time_weighting_when_the_host_runs_ahead_of_the_gpu():
    """The host allocates A (100 B), launches k1, frees A, allocates B (300 B), launches k2 and frees B within
    5 ns, then waits ~1000 ns in the final synchronise; the GPU runs k1 over [10, 110) ns, idles, and runs k2
    over [150, 450). On the device's timeline A is live for 140 ns (k1 and the gap after it) and B for 300 ns."""
    from cnnlab.profiling.memory import device_activities, device_weighted_average, host_weighted_average

    gpu = "DeviceType.CUDA"
    events = [
        FakeEvent("[memory]", 0, device=gpu, nbytes=100), FakeEvent("cudaLaunchKernel", 1, 1, correlation=11),
        FakeEvent("[memory]", 2, device=gpu, nbytes=-100), FakeEvent("[memory]", 3, device=gpu, nbytes=300),
        FakeEvent("cudaLaunchKernel", 4, 1, correlation=12), FakeEvent("[memory]", 5, device=gpu, nbytes=-300),
        FakeEvent("aten::conv2d", 900, 5, correlation=12),  # a host op whose own id collides: not a launch
        FakeEvent("k1", 10, 100, device=gpu, correlation=11), FakeEvent("k2", 150, 300, device=gpu, correlation=12),
        FakeEvent("k_unlaunched", 500, 10, device=gpu, correlation=99),  # no launch inside the step: left out
    ]
    acts = device_activities(events, 0, 1000)
    assert sorted(acts) == [(1, 10, 110), (4, 150, 450)]
    mem = [(e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"]
    avg, span = device_weighted_average(mem, acts)
    assert span == 440 and avg == pytest.approx((100 * 140 + 300 * 300) / 440)
    # weighted by the host's wall time the final synchronise, with nothing live, would dominate: ~0.8 B
    assert host_weighted_average(mem, 0, 1000) == pytest.approx((100 * 2 + 300 * 2) / 1000)


@cuda
@pytest.mark.gpu
def test_cuda_memory_over_time_weights_by_device_time():
    """64 MiB live while 30 in-place passes run over it, then 192 MiB while 10 run over that: bandwidth-bound passes
    take time in proportion to their bytes, so the GPU spends about as long in each phase and the device-weighted
    average is about 128 MiB, whatever the host did meanwhile (it queued everything at once, then waited)."""
    from cnnlab.profiling import memory_over_time

    def step():
        a = torch.ones(16 * MIB, device="cuda")  # 64 MiB
        for _ in range(30):
            a.mul_(1.0)
        del a
        b = torch.ones(48 * MIB, device="cuda")  # 192 MiB
        for _ in range(10):
            b.mul_(1.0)

    step()
    out = memory_over_time(step, "cuda")
    assert out["weighting"] == "device time" and out["peak_bytes"] >= 192 * MIB
    check("device-weighted average of 64 and 192 MiB phases, |MiB - 128| / 128",
          abs(out["avg_bytes"] / MIB - 128) / 128, "<=", 0.25)


def test_average_and_peak_memory_of_a_step_add_what_is_resident():
    from cnnlab.profiling import memory

    def step():  # 8 MiB live for ~40 ms, then 32 MiB for ~40 ms: time-weighted about 20 MiB
        a = torch.ones(2 * MIB)
        time.sleep(0.04)
        b = torch.ones(6 * MIB)
        time.sleep(0.04)
        return a.sum() + b.sum()

    row = memory.average_memory(step, "cpu", resident=100 * MIB, repeats=3)
    assert row["avg_mem_missing_reason"] is None and row["avg_mem_weighting"] == "host wall time"
    assert row["avg_mem_mib_low"] <= row["avg_mem_mib"] <= row["avg_mem_mib_high"]
    assert 115 < row["avg_mem_mib_low"] and row["avg_mem_mib_high"] < 125, row  # 100 resident + about 20
    assert 131.9 <= memory.peak_memory_mib(step, "cpu", resident=100 * MIB) <= 133
    empty = memory.average_memory(lambda: None, "cpu", repeats=2)  # no allocation: nothing to average, say so
    assert empty["avg_mem_missing_reason"] and empty["avg_mem_mib"] != empty["avg_mem_mib"]  # NaN


def test_resident_now_and_train_step_peak_count_weights_grads_inputs_and_optimizer_state():
    from cnnlab.profiling import memory

    net, x = torch.nn.Linear(1024, 1024), torch.randn(256, 1024)  # 4 MiB of weights, 1 MiB of input
    assert memory.resident_now("cpu", net, [x]) == (1024 * 1024 + 1024 + 256 * 1024) * 4
    optimizer = torch.optim.Adam(net.parameters())

    def step():
        optimizer.zero_grad(set_to_none=False)
        net(x).sum().backward()
        optimizer.step()

    peak = memory.train_step_peak_mib(step, net, optimizer, [x], "cpu")
    assert optimizer.state  # the first step ran: Adam's two moments exist and are counted
    resident = (4 * (1024 * 1024 + 1024) + 256 * 1024) * 4 / MIB  # weights, grads, 2 moments, input: about 17 MiB
    assert resident < peak < resident + 16, (peak, resident)  # plus the step's activations and Adam's temporaries


def test_train_step_peak_sees_the_old_gradients_freed_and_cpp_says_nothing():
    # A subprocess: the C++ allocator's "Memory block of unknown size" line goes to fd 2, once per process.
    script = textwrap.dedent("""
        import torch
        from cnnlab.profiling import memory
        net, x = torch.nn.Linear(1024, 1024), torch.randn(256, 1024)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)  # no momentum: no optimizer state
        def step():
            optimizer.zero_grad(set_to_none=True)  # frees last step's 4 MiB of gradients
            net(x).sum().backward()
            optimizer.step()
        print(memory.train_step_peak_mib(step, net, optimizer, [x], "cpu"))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    peak = float(proc.stdout)
    # What the measurement must be, whatever the allocator does: the weights, the input and one set of gradients
    # (the new ones replace the old: never both), plus the step's own transient tensors, which are the (256, 1024)
    # output and at most its gradient. Counting last step's gradients on top (the defect: their free went unseen)
    # gives at least 4 MiB more. (A contrast with that old way is not asserted: on torch 2.11 c10's profiled CPU
    # allocator kept a stale size entry for a block freed outside a profile, so the old way was sometimes right.)
    params = (1024 * 1024 + 1024) * 4 / MIB
    held = 2 * params + 1.0  # weights, gradients, input
    assert held <= peak <= held + 2 * 1.0 + 0.01, (peak, held)
    assert "Memory block of unknown size" not in proc.stderr, proc.stderr


def test_cpu_peak_of_a_pruned_layer_counts_its_recomputed_weight_and_cpp_says_nothing():
    # torch.nn.utils.prune computes weight = weight_orig * mask on every forward and frees the last one: a block
    # from before the profile, freed inside it (the uncounted step before the measured one takes that free).
    script = textwrap.dedent("""
        import torch
        from torch.nn.utils import prune
        from cnnlab.profiling import memory
        layer = prune.l1_unstructured(torch.nn.Linear(1024, 1024), "weight", amount=0.5)
        x = torch.randn(4, 1024)
        with torch.no_grad():
            layer(x)
            print(memory.cpu_peak_bytes(lambda: layer(x)))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert 1024 * 1024 * 4 <= int(proc.stdout) < 1024 * 1024 * 4 + MIB  # the new weight, plus the small output
    assert "Memory block of unknown size" not in proc.stderr, proc.stderr
