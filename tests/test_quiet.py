"""cnnlab.profiling.quiet: the C++ profiler's banners are dropped from fd 2, real errors are kept."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quiet_profiler_drops_only_the_profiler_banners_from_fd_2():
    # A subprocess: the banners are written by C++ to file descriptor 2, which pytest's capture does not see whole.
    script = textwrap.dedent("""
        import os, sys, torch
        from cnnlab.profiling import benchmark, memory_over_time, profile_ops
        from cnnlab.profiling.quiet import quiet_profiler
        profile_ops(lambda: torch.ones(8) + 1, device="cpu")
        memory_over_time(lambda: torch.ones(8) + 1, "cpu")
        benchmark(torch.nn.Linear(4, 4), torch.ones(2, 4), device="cpu", warmup=0, repeats=1)  # CPU peak pass
        with quiet_profiler(), torch.profiler.profile():
            os.write(2, b"a real error from C code\\n")
        try:
            with quiet_profiler():
                os.write(2, b"written before a raise\\n")
                raise KeyError
        except KeyError:
            os.write(2, b"fd 2 is back\\n")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "USDT" not in proc.stderr and "profiler_start" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines.index("a real error from C code") < lines.index("written before a raise") < lines.index("fd 2 is back")


def test_profiler_banner_pattern_matches_only_the_banners():
    from cnnlab.profiling.quiet import drop_banners

    text = (b"USDT:2026-11-23 21:43:45 7239:7239 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
            b"W1123 kineto: CUPTI error, a real problem\n"
            b"USDT:2026-11-23 21:43:45 7239:7239 SyncActivityProfilerHandler.cpp:59] profiler_stop\n"
            b"my USDT:... profiler_start in a sentence\n")
    assert drop_banners(text) == b"W1123 kineto: CUPTI error, a real problem\nmy USDT:... profiler_start in a sentence\n"


def test_the_no_gpu_line_is_dropped_only_where_cuda_is_not_available():
    from cnnlab.profiling.quiet import drop_banners

    text = (b"ERROR:2026-11-26 10:00:00 7239:7239 DeviceProperties.cpp:47] gpuGetDeviceCount failed with code 35\n"
            b"ERROR:2026-11-26 10:00:00 7239:7239 DeviceProperties.cpp:56] gpuGetDeviceProperties failed with 35\n")
    assert drop_banners(text, no_gpu=True) == text.splitlines(keepends=True)[1]  # only the device count line
    assert drop_banners(text) == text  # CUDA works here: the line is a real problem


@pytest.mark.gpu
def test_quiet_profiler_drops_the_no_gpu_line_from_fd_2_where_cuda_is_not_available():
    script = textwrap.dedent("""
        import os, torch
        from cnnlab.profiling.quiet import quiet_profiler
        with quiet_profiler():
            os.write(2, b"ERROR:2026-11-26 10:00:00 1:1 DeviceProperties.cpp:47] gpuGetDeviceCount failed with code 35\\n")
            os.write(2, b"a real error\\n")
        print(torch.cuda.is_available())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    cuda = proc.stdout.strip() == "True"
    assert ("gpuGetDeviceCount" in proc.stderr) == cuda and "a real error" in proc.stderr, proc.stderr


def test_no_profile_cnnlab_starts_warns_that_the_profiler_clears_events(monkeypatch):
    # torch 2.11 (Colab's) warns "Profiler clears events at the end of each cycle" whenever a profile starts
    # without acc_events=True: under the first profiling cell of every notebook. torch 2.13 warns only when a second
    # cycle starts, so this fails on torch 2.11 alone (checked there without quiet.ONE_CYCLE).
    import warnings

    import torch
    import torch.profiler.profiler as torch_profiler

    from cnnlab.profiling import memory_over_time, profile_ops

    monkeypatch.setattr(torch_profiler, "_WARNINGS_SHOWN", set(), raising=False)  # torch warns once per process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profile_ops(lambda: torch.ones(8) + 1, device="cpu", iterations=2)
        profile_ops(lambda: torch.ones(8) + 1, device="cpu", iterations=2, warmup=1, scheduled=True)
        memory_over_time(lambda: torch.ones(8) + 1, "cpu")
    assert not [str(w.message) for w in caught if "clears events" in str(w.message)]
