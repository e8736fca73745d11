"""Tests for cnnlab.profiling.cupti: which profiles count as CUDA profiles, and the timings that record one."""

from __future__ import annotations

import cnnlab  # noqa: F401
import torch

from cnnlab.profiling import benchmark, cupti, memory_over_time, profile_ops


def test_a_cpu_profile_is_not_counted_and_a_cuda_one_marks_later_timings(monkeypatch):
    monkeypatch.setattr(cupti, "_cuda_profiles", 0)
    net = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    assert benchmark(net, x, device="cpu", warmup=0, repeats=2).after_cuda_profile is False
    profile_ops(lambda: net(x), iterations=1, device="cpu")
    memory_over_time(lambda: net(x), "cpu")
    assert cupti.cuda_profiles() == 0  # CPU-only profiles attach no CUPTI
    row = benchmark(net, x, device="cpu", warmup=0, repeats=2).as_row()
    assert row["after_cuda_profile"] is False
    cupti.note_profile(cuda=True)  # what profile_ops does when ProfilerActivity.CUDA is among its activities
    assert cupti.cuda_profiles() == 1
    assert benchmark(net, x, device="cpu", warmup=0, repeats=2).as_row()["after_cuda_profile"] is True
