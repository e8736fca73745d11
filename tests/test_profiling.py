"""Tests for cnnlab.profiling: each checks a number or behaviour that could be wrong."""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from cnnlab.profiling import (
    Measurement, OpsProfile, achieved, benchmark, cost_model, device_peaks, environment,
    hardware_counters, profile_ops, sweep,
)
from cnnlab.profiling.counters import _target_command, parse_ncu_csv
from cnnlab.profiling.store import ResultStore
from margins import check

MIB = 1024**2
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class SmallConvNet(nn.Module):
    """Three conv layers: profile_ops must count exactly 3 aten::conv2d per forward."""

    n_conv = 3

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(self.features(x))


# ---------------------------------------------------------------- benchmark


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
    # total covers the 5 batches (plus loop overhead); throughput follows from it
    assert sum(m.latencies_ms) / 1e3 <= row["total_time_s"] * 1.0001
    assert row["throughput_items_per_s"] == pytest.approx(8 * 5 / row["total_time_s"])
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


# ---------------------------------------------------------------- profile_ops


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


# ---------------------------------------------------------------- cost model


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


# ---------------------------------------------------------------- hardware counters


def test_hardware_counters_without_ncu_warns_and_returns_none(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no ncu
    with pytest.warns(UserWarning, match="not on the PATH"):
        assert hardware_counters("cnnlab.profiling:environment") is None


def test_hardware_counter_target_forms():
    assert _target_command(["python", "x.py"], "py") == ["python", "x.py"]
    cmd = _target_command("cnnlab.profiling:environment", "py")
    assert cmd[:2] == ["py", "-c"] and "'cnnlab.profiling'" in cmd[2] and "'environment'" in cmd[2]
    assert _target_command(environment, "py") == _target_command("cnnlab.profiling.environment:environment", "py")
    with pytest.raises(ValueError, match="module-level"):
        _target_command(lambda: None, "py")
    with pytest.raises(ValueError, match="module:function"):
        _target_command("no_colon", "py")


def test_parse_ncu_details_csv():
    # Layout of `ncu --import r.ncu-rep --csv --page details --print-units base` (one row per launch x metric).
    text = textwrap.dedent('''\
        ==PROF== Connected to process 1234
        "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
        "0","1234","python","h","void conv_kernel<float>(...)","1","7","(256, 1, 1)","(120, 1, 1)","0","7.5","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","61.25"
        "0","1234","python","h","void conv_kernel<float>(...)","1","7","(256, 1, 1)","(120, 1, 1)","0","7.5","Command line profiler metrics","gpu__time_duration.sum","usecond","12.5"
        "0","1234","python","h","void conv_kernel<float>(...)","1","7","(256, 1, 1)","(120, 1, 1)","0","7.5","Command line profiler metrics","sm__cycles_active.avg","cycle","1,234,567"
        "1","1234","python","h","relu_kernel","1","7","(128, 1, 1)","(64, 1, 1)","0","7.5","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","88"
        "1","1234","python","h","relu_kernel","1","7","(128, 1, 1)","(64, 1, 1)","0","7.5","Command line profiler metrics","smsp__inst_executed.sum","inst","42"
        ''')
    df = parse_ncu_csv(text)
    assert list(df["kernel_name"]) == ["void conv_kernel<float>(...)", "relu_kernel"]
    assert list(df["dram_throughput_pct"]) == [61.25, 88.0]
    assert df.loc[0, "kernel_time_ns"] == 12500.0  # usecond scaled to the column's ns
    assert df.loc[0, "sm_cycles_active"] == 1234567.0  # thousands separators removed
    assert df.loc[1, "smsp__inst_executed_sum_inst"] == 42.0 and math.isnan(df.loc[1, "kernel_time_ns"])


def test_hardware_counters_missing_can_raise_with_the_reason(monkeypatch, tmp_path):
    from cnnlab.profiling.counters import CountersMissing, counters_missing_reason

    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no ncu
    with pytest.raises(CountersMissing, match="not on the PATH"):
        hardware_counters("cnnlab.profiling:environment", missing="raise")
    assert "not on the PATH" in counters_missing_reason("cuda")
    assert "NVIDIA GPUs only" in counters_missing_reason("cpu")
    with pytest.raises(ValueError, match="missing='ignore'"):
        hardware_counters("cnnlab.profiling:environment", missing="ignore")


FAKE_NCU = '''#!{python}
"""A stand-in for Nsight Compute: logs its arguments, runs the target on `-o`, prints a CSV on `--import`."""
import json, os, subprocess, sys
args = sys.argv[1:]
with open(os.environ["FAKE_NCU_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if "--import" in args:
    print('"ID","Kernel Name","Block Size","Grid Size","Metric Name","Metric Unit","Metric Value"')
    print('"0","conv","(256, 1, 1)","(8, 1, 1)","gpu__time_duration.sum","nsecond","3000"')
    print('"0","conv","(256, 1, 1)","(8, 1, 1)","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","80"')
    print('"1","relu","(128, 1, 1)","(4, 1, 1)","gpu__time_duration.sum","nsecond","1000"')
    print('"1","relu","(128, 1, 1)","(4, 1, 1)","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","40"')
else:
    target = args[args.index("-c") - 1:]  # hardware_counters puts the target last: python -c CODE
    done = subprocess.run(target, capture_output=True, text=True)
    with open(os.environ["FAKE_NCU_LOG"], "a") as log:
        log.write("TARGET " + done.stdout + done.stderr)
    open(args[args.index("-o") + 1] + ".ncu-rep", "w").close()
'''


def test_hardware_counters_runs_the_target_with_its_kwargs_under_ncu(monkeypatch, tmp_path):
    """The whole ncu path with a fake ncu on the PATH: options, the target run with its kwargs, the CSV parsed,
    and the per-kernel table summarised with kernel-time weights."""
    from cnnlab.profiling.counters import summarise_counters

    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable))
    ncu.chmod(0o755)
    log = tmp_path / "ncu.log"
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NCU_LOG", str(log))
    table = hardware_counters("builtins:print", kwargs={"end": "KWARGS ARRIVED\n"}, launch_count=None,
                              profile_from_start=False)
    text = log.read_text()
    first = json.loads(text.splitlines()[0])
    assert first[first.index("--profile-from-start") + 1] == "off" and "--launch-count" not in first
    assert "TARGET KWARGS ARRIVED" in text
    assert list(table["kernel_name"]) == ["conv", "relu"]
    summary = summarise_counters(table)
    assert summary["kernels"] == 2 and summary["kernel_time_ms"] == pytest.approx(0.004)
    assert summary["dram_throughput_pct"] == pytest.approx(70.0)  # (3 x 80 + 1 x 40) / 4, not the plain 60
    assert math.isnan(summary["l2_throughput_pct"]) and math.isnan(summary["sm_cycles_active"])  # not collected
    with pytest.raises(ValueError, match="kwargs go to a 'module:function' target"):
        hardware_counters(["python", "x.py"], kwargs={"a": 1})


# ---------------------------------------------------------------- sweep


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_sweep_interrupted_then_resumed_measures_each_point_once(tmp_path):
    store = tmp_path / "s.csv"
    grid = {"batch_size": [1, 2, 4], "width": [8, 16]}
    calls = []

    def fn(batch_size, width, stop_after=None):
        if stop_after is not None and len(calls) == stop_after:
            raise KeyboardInterrupt  # what Ctrl-C or a notebook "interrupt" does mid-sweep
        calls.append((batch_size, width))
        return {"latency_ms": batch_size * width / 10}

    with pytest.raises(KeyboardInterrupt):
        sweep(lambda **p: fn(**p, stop_after=3), grid, store, progress=False)
    assert len(_rows(store)) == 3
    df = sweep(fn, grid, store, progress=False)
    assert sorted(calls) == sorted((b, w) for b in grid["batch_size"] for w in grid["width"])
    assert len(calls) == 6 and len(df) == 6 and not df.duplicated(["batch_size", "width"]).any()
    assert (df["status"] == "ok").all()
    assert df.set_index(["batch_size", "width"]).loc[(4, 16), "latency_ms"] == pytest.approx(6.4)
    sweep(fn, grid, store, progress=False)  # a third run finds nothing to do
    assert len(calls) == 6


def test_sweep_killed_process_resumes(tmp_path):
    store = tmp_path / "killed.csv"
    log = tmp_path / "calls.log"
    script = textwrap.dedent(f'''
        import time, cnnlab
        from cnnlab.profiling import sweep
        def fn(i):
            with open({str(log)!r}, "a") as f:
                f.write(f"{{i}}\\n")
            time.sleep(0.5)
            return {{"value": i * i}}
        sweep(fn, {{"i": list(range(10))}}, {str(store)!r}, progress=False)
    ''')
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO)  # cwd on sys.path: cnnlab importable
    deadline = time.time() + 60
    while time.time() < deadline and (not store.exists() or len(_rows(store)) < 3):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = _rows(store)
    assert 3 <= len(before) < 10
    started_before = [int(v) for v in log.read_text().split()]

    resumed = []
    df = sweep(lambda i: resumed.append(i) or {"value": i * i}, {"i": list(range(10))}, store, progress=False)
    assert sorted(df["i"]) == list(range(10)) and (df["value"] == df["i"] ** 2).all()
    done_before = {int(r["i"]) for r in before}
    assert done_before.isdisjoint(resumed) and done_before | set(resumed) == set(range(10))
    # a point killed mid-measurement (started, never stored) is measured again, never lost
    assert set(started_before) - done_before <= set(resumed)


@pytest.mark.parametrize("text, kept, damaged, lines", [
    ("i,status,value\n0,ok,0\n1,ok,1\n2,o", ["0", "1"], "2,o", 1),  # killed while writing row 2
    # cut just after a line break inside a quoted multi-line error cell: the record is left open
    ('i,status,value,error\n0,ok,0,\n1,error,,"Traceback:\n  line 1\n', ["0"], '1,error,,"Traceback:', 2),
    ("i,status,value\n0,ok,0\n1,ok\n2,ok,2\n", ["0", "2"], "1,ok\n", 1),  # a row cut mid-file
])
def test_store_moves_damaged_records_aside_and_sweep_measures_them_again(tmp_path, text, kept, damaged, lines):
    path = tmp_path / "s.csv"
    path.write_text(text)
    store = ResultStore(path)
    with pytest.warns(UserWarning, match=rf"s\.csv: {lines} damaged line\(s\).*moved to s\.csv\.damaged"):
        with store.lock():
            assert [r["i"] for r in store.rows()] == kept
    assert damaged in (tmp_path / "s.csv.damaged").read_text()
    seen = []
    df = sweep(lambda i: seen.append(i) or {"value": i}, {"i": [0, 1, 2]}, path, progress=False)
    assert sorted(seen) == sorted({0, 1, 2} - {int(k) for k in kept})  # only the damaged points again
    assert list(df["i"]) == [0, 1, 2] and list(df["status"]) == ["ok", "ok", "ok"]
    assert len(pd.read_csv(path)) == 3  # later rows are not swallowed by an open quote


def test_jsonl_store_moves_a_damaged_line_aside(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"i": 0, "status": "ok"}\n{"i": 1, "sta\n{"i": 2, "status": "ok"}\n')
    with pytest.warns(UserWarning, match=r"s\.jsonl: 1 damaged line"):
        df = sweep(lambda i: {"value": i}, {"i": [0, 1, 2]}, path, progress=False)
    assert list(df["i"]) == [0, 1, 2] and (df["status"] == "ok").all()


def test_two_runs_on_one_store_take_turns(tmp_path):
    """Two processes sweep the same store at once (two notebooks on one sweep): every point is measured once,
    no row is lost or doubled, and a column added midway does not break the other writer."""
    script = textwrap.dedent(f"""
        import sys, time
        import cnnlab
        from cnnlab.profiling import sweep
        def fn(i):
            time.sleep(0.01)
            return {{"value": i, "who": sys.argv[1], **({{"c7": 1}} if i == 30 else {{}})}}
        sweep(fn, {{"i": list(range(60))}}, {str(tmp_path / "shared.csv")!r}, progress=False)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, name], stderr=subprocess.PIPE, text=True)
             for name in ("a", "b")]
    errors = [p.communicate(timeout=240)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    df = pd.read_csv(tmp_path / "shared.csv")
    assert sorted(df["i"]) == list(range(60))  # each point once: none lost, none measured twice
    assert set(df.columns) >= {"i", "status", "value", "who", "c7"} and df["c7"].notna().sum() == 1
    assert not list(tmp_path.glob("*.tmp"))


def test_sweep_records_oom_and_errors_and_goes_on(tmp_path):
    store = tmp_path / "oom.csv"
    ran = []

    def fn(batch_size):
        ran.append(batch_size)
        if batch_size == 2:
            torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: a real allocation failure
        if batch_size == 4:
            raise ZeroDivisionError("boom")
        return {"latency_ms": float(batch_size), **({"extra_col": 1} if batch_size == 8 else {})}

    with pytest.warns(UserWarning, match="2 of 4 points failed") as record:
        df = sweep(fn, {"batch_size": [1, 2, 4, 8]}, store, progress=False)
    assert ran == [1, 2, 4, 8]
    status = df.set_index("batch_size")["status"].to_dict()
    assert status == {1: "ok", 2: "oom", 4: "error", 8: "ok"}
    errors = df.set_index("batch_size")["error"]
    assert "allocate" in errors[2] and "ZeroDivisionError: boom" in errors[4]
    assert math.isnan(df.set_index("batch_size").loc[2, "latency_ms"])  # missing, not 0
    assert df.set_index("batch_size").loc[8, "extra_col"] == 1  # a column that appeared late
    assert "oom" in str(record[0].message) and "boom" in str(record[0].message)

    # a GPU-style OOM exception is recognised too, and retry_errors re-runs only the error point
    def fn2(batch_size):
        ran.append(("again", batch_size))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.warns(UserWarning, match="1 of 1 points failed"):
        df = sweep(fn2, {"batch_size": [1, 2, 4, 8]}, store, retry_errors=True, progress=False)
    assert ran[-1] == ("again", 4) and len(df) == 4
    assert df.set_index("batch_size").loc[4, "status"] == "oom"


@pytest.mark.parametrize("grid, parameter, valid", [
    ({"batch_size": [8, 0]}, "batch_size", ">= 1"),
    ({"dtype": ["float32", "fp12"]}, "dtype", "float16"),
    ({"batch_size": 8}, "batch_size", "list"),
])
def test_sweep_rejects_bad_grid_values_before_any_work(tmp_path, grid, parameter, valid):
    store = tmp_path / "bad.csv"
    ran = []
    with pytest.raises(ValueError) as err:
        sweep(lambda **p: ran.append(p) or {}, grid, store, progress=False)
    assert parameter in str(err.value) and valid in str(err.value)
    assert ran == [] and not store.exists() and not (tmp_path / "bad.csv.env.json").exists()


def test_sweep_user_validate_hook_runs_first(tmp_path):
    def validate(point):
        if point["tile"] not in (8, 16):
            raise ValueError(f"tile={point['tile']} is not valid; valid: 8, 16")

    with pytest.raises(ValueError, match="tile=3"):
        sweep(lambda tile: pytest.fail("ran"), {"tile": [8, 3]}, tmp_path / "v.csv", validate=validate)


def test_sweep_writes_environment_beside_store_and_supports_jsonl(tmp_path):
    store = tmp_path / "r.jsonl"
    df = sweep(lambda n, shape: [{"part": 0, "v": n}, {"part": 1, "v": -n}],
               [{"n": 1, "shape": (3, 32, 32)}, {"n": 2, "shape": (3, 32, 32)}], store, progress=False)
    assert len(df) == 4 and sorted(df["v"]) == [-2, -1, 1, 2]
    again = sweep(lambda **p: pytest.fail("re-ran a stored point"),
                  [{"n": 1, "shape": (3, 32, 32)}, {"n": 2, "shape": (3, 32, 32)}], store, progress=False)
    assert len(again) == 4
    env = json.loads((tmp_path / "r.jsonl.env.json").read_text())
    for key in ("device_name", "driver_version", "cuda_version", "cudnn_version", "torch_version",
                "cnnlab_version", "cpu_model", "cpu_cores_logical", "git_commit", "preset", "date_utc"):
        assert key in env, key
    assert env["torch_version"] == torch.__version__ and env["cnnlab_version"] == cnnlab.__version__
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO)
    from cnnlab import paths

    if paths.checkout() is None:  # an installed cnnlab: there is no checkout to name
        assert env["git_commit"] is None
    elif head.returncode == 0:
        assert env["git_commit"] == head.stdout.strip()
    if not torch.cuda.is_available():
        assert env["driver_version"] is None and env["driver_missing_reason"]


# ---------------------------------------------------------------- GPU paths (run on a CUDA machine)


@cuda
def test_cuda_benchmark_host_inputs_memory_and_utilisation():
    model, x = SmallConvNet(), torch.randn(64, 3, 32, 32)
    m = benchmark(model, x, device="cuda", warmup=5, repeats=50)
    assert m.timer == "cuda_events" and m.input_location == "host"
    assert 0 < m.latency_ms_p10 <= m.latency_ms_median <= m.latency_ms_p90
    assert m.peak_mem_alloc_mib >= x.numel() * 4 / MIB  # the copied input lives on the GPU
    assert m.peak_mem_reserved_mib >= m.peak_mem_alloc_mib
    assert (0 <= m.gpu_util_pct <= 100) or (math.isnan(m.gpu_util_pct) and m.gpu_util_missing_reason)
    on_gpu = benchmark(model, x.cuda(), device="cuda", warmup=5, repeats=50, pin_memory=True)
    assert on_gpu.input_location == "device"


@cuda
def test_cuda_peak_memory_of_a_256_mib_allocation():
    n = 256 * MIB // 4
    m = benchmark(lambda x: torch.ones(n, device="cuda")[:1] + x, torch.zeros(1, device="cuda"),
                  device="cuda", warmup=0, repeats=2)
    assert m.peak_mem_increment_mib == pytest.approx(256, rel=0.10)


@cuda
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


def test_sweep_store_is_keyed_by_every_setting_and_returns_only_its_grid(tmp_path):
    from cnnlab.profiling import store_file

    calls = []

    def fn(batch_size, dataset, hidden):
        calls.append((batch_size, dataset, hidden))
        return {"value": batch_size * hidden + (100 if dataset == "cifar10" else 0)}

    def run(batch_sizes, **settings):
        cfg = {"dataset": "digits", "hidden": 8, "device": "cpu", **settings}
        point = lambda batch_size: fn(batch_size, cfg["dataset"], cfg["hidden"])  # noqa: E731
        return sweep(point, {"batch_size": batch_sizes}, tmp_path / "s.csv", settings=cfg, progress=False)

    first = run([1, 2, 4])
    assert list(first["value"]) == [8, 16, 32] and len(calls) == 3
    assert first.attrs["store"].parent == tmp_path and first.attrs["store"].name.startswith("s_")
    # another data set, model size or device: its own store, never the first run's rows
    for change in (dict(dataset="cifar10"), dict(hidden=16), dict(device="cuda")):
        calls.clear()
        other = run([1, 2], **change)
        assert len(calls) == 2 and other.attrs["store"] != first.attrs["store"], change
        assert list(other["batch_size"]) == [1, 2], change
    # the same settings, a smaller grid in another order: nothing measured, only these rows, in this order
    calls.clear()
    again = run([4, 1])
    assert calls == [] and list(again["batch_size"]) == [4, 1] and list(again["value"]) == [32, 8]
    # the key covers cnnlab's own source and every setting, in any order
    assert store_file(tmp_path / "s.csv", {"a": 1, "b": 2}) == store_file(tmp_path / "s.csv", {"b": 2, "a": 1})
    assert store_file(tmp_path / "s.csv", {"a": 1}) != store_file(tmp_path / "s.csv", {"a": 2})


def test_sweep_skips_points_with_a_reason_and_keeps_grid_order(tmp_path):
    seen = []

    def fn(method, tile):
        seen.append((method, tile))
        return {"t": tile}

    skip = lambda method, tile: "not on this device" if method == "triton" else None  # noqa: E731
    grid = [{"method": "untiled", "tile": 0}] + [{"method": m, "tile": t} for m in ("spatial", "triton")
                                                 for t in (8, 16)]
    df = sweep(fn, grid, tmp_path / "s.csv", settings={}, skip=skip, progress=False)
    assert list(zip(df["method"], df["tile"])) == [(p["method"], p["tile"]) for p in grid]
    assert list(df["status"]) == ["ok", "ok", "ok", "skipped", "skipped"]
    assert (df.loc[df["status"] == "skipped", "error"] == "not on this device").all()
    assert ("triton", 8) not in seen
    # skipped points are never stored: the store holds only what was measured
    assert len(pd.read_csv(df.attrs["store"])) == 3


def test_sweep_without_store_uses_a_temporary_one(tmp_path):
    df = sweep(lambda x: {"y": x * 2}, {"x": [3, 1]}, None, progress=False)
    assert list(df["y"]) == [6, 2] and "store" not in df.attrs


# ------------------------------------------------------------------------------------------------ wall_time

def test_wall_time_measures_the_call_and_returns_its_result():
    from cnnlab.profiling import wall_time

    timed = wall_time(lambda: time.sleep(0.05) or 7, device="cpu")
    assert timed.result == 7
    assert 0.045 <= timed.seconds < 1.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_wall_time_waits_for_the_gpu():
    from cnnlab.profiling import wall_time

    x = torch.randn(4096, 4096, device="cuda")
    one = wall_time(lambda: x @ x, device="cuda").seconds
    many = wall_time(lambda: [x @ x for _ in range(20)], device="cuda").seconds
    assert many > 5 * one  # without a synchronise both would be the launch time only


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


# ------------------------------------------------------------------------------------------------ GPU utilisation

def test_utilisation_keeps_only_samples_whose_whole_period_is_inside_the_region():
    from cnnlab.profiling.gpu_util import Sample, utilisation_in_window

    # one sample a second; warm-up (100%) before 3.0 s, the timed loop (40%) from 2.5 s to 7.2 s, idle (0%) after
    samples = [Sample(t, 100.0 if t <= 3 else 40.0 if t <= 7 else 0.0) for t in range(11)]
    util = utilisation_in_window(samples, 2.5, 7.2, min_samples=3)
    # periods (3, 4], (4, 5], (5, 6], (6, 7] lie inside; (2, 3] began before the loop, (7, 8] ends after it
    assert util.samples == 4 and util.gpu_util_pct == 40.0 and util.missing_reason is None
    assert utilisation_in_window(list(reversed(samples)), 2.5, 7.2).gpu_util_pct == 40.0  # any order
    assert (util.p10, util.p90) == (40.0, 40.0)


def test_utilisation_records_the_spread_of_its_samples():
    from cnnlab.profiling.gpu_util import Sample, utilisation_in_window

    samples = [Sample(t, v) for t, v in enumerate([0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100])]
    util = utilisation_in_window(samples, 0, 10, min_samples=3)  # the ten periods ending at 1..10 s
    assert util.gpu_util_pct == 55.0 and util.p10 == pytest.approx(19.0) and util.p90 == pytest.approx(91.0)
    skewed = utilisation_in_window([Sample(t, 100.0 if t < 10 else 0.0) for t in range(11)], 0, 10, min_samples=3)
    assert skewed.p10 <= skewed.gpu_util_pct <= skewed.p90  # widened to hold the mean: a Spread can take it
    missing = utilisation_in_window(samples[:2], 0, 10)
    assert math.isnan(missing.p10) and math.isnan(missing.p90)


def test_too_few_utilisation_samples_are_missing_with_the_reason():
    from cnnlab.profiling.gpu_util import Sample, utilisation_in_window

    samples = [Sample(t / 6, 50.0) for t in range(30)]  # every 1/6 s
    short = utilisation_in_window(samples, 1.05, 1.45, min_samples=3)  # 0.4 s: one whole period, (7/6, 8/6]
    assert math.isnan(short.gpu_util_pct) and short.samples == 1
    assert "1 NVML sample(s)" in short.missing_reason and "0.167 s" in short.missing_reason
    far = utilisation_in_window([Sample(1e9 + t, 50.0) for t in range(5)], 1.0, 3.0)  # another clock
    assert math.isnan(far.gpu_util_pct) and "clock" in far.missing_reason


class FakeSamples:
    """A utilisation source sampling every ``period_s`` on the host clock: ``busy`` (%) once ``busy_from`` is set,
    100% before it (a warm-up that must not leak into the result)."""

    def __init__(self, period_s: float, busy: float = 70.0):
        self.period_s, self.busy, self.busy_from = period_s, busy, math.inf
        self.opened = self.closed = 0

    def open(self):
        self.opened += 1
        return None

    def read(self, since_s):
        from cnnlab.profiling.gpu_util import Sample

        now, p = time.time(), self.period_s
        stamps = [k * p for k in range(math.floor(since_s / p) + 1, math.floor(now / p) + 1)]
        return [Sample(t, self.busy if t - p >= self.busy_from else 100.0) for t in stamps]

    def close(self):
        self.closed += 1


def test_benchmark_extends_the_timed_loop_until_utilisation_has_enough_samples():
    calls = []

    def model(x):
        calls.append(1)
        time.sleep(0.005)
        return x

    source = FakeSamples(period_s=0.05)
    source.busy_from = time.time() + 0.5  # long after the warm-up: no sample counts it
    m = benchmark(model, torch.ones(2), device="cpu", warmup=1, repeats=2, measure_memory=False,
                  util_min_run_time_s=0.3, gpu_util_source=source)
    # 2 timed calls were asked for; the loop went on until it had lasted 0.3 s (> 4 periods of 0.05 s)
    assert len(calls) == 1 + m.repeats and m.repeats == len(m.latencies_ms) > 2
    assert sum(m.latencies_ms) / 1e3 >= 0.3 - 0.005 and m.total_time_s >= 0.3
    assert m.gpu_util_samples >= 3 and (source.opened, source.closed) == (1, 1)
    assert m.throughput_items_per_s == pytest.approx(2 * m.repeats / m.total_time_s)
    # a source that samples every 0.1 s needs (3 + 1) periods: 0.4 s, more than the 0.1 s asked for
    slow = benchmark(model, torch.ones(2), device="cpu", warmup=0, repeats=1, measure_memory=False,
                     util_min_run_time_s=0.1, gpu_util_source=FakeSamples(period_s=0.1))
    assert slow.total_time_s >= 0.4
    calls.clear()
    plain = benchmark(model, torch.ones(2), device="cpu", warmup=0, repeats=2, measure_memory=False)
    assert len(calls) == 2 and plain.repeats == 2  # nothing sampled on a CPU: the loop is not extended
    assert math.isnan(plain.gpu_util_pct) and plain.gpu_util_samples == 0 and "CPU" in plain.gpu_util_missing_reason


def test_utilisation_window_drops_the_warm_up_it_follows():
    from cnnlab.profiling.gpu_util import UtilisationWindow

    source = FakeSamples(period_s=0.02, busy=30.0)
    time.sleep(0.1)  # a "warm-up" sampled at 100%
    source.busy_from = time.time()
    with UtilisationWindow(source, min_run_time_s=0.0, min_samples=3) as window:
        time.sleep(0.2)
    assert window.min_run_time_s == pytest.approx(4 * 0.02)  # MIN_SAMPLES + 1 periods
    assert window.result.gpu_util_pct == 30.0 and window.result.samples >= 3  # no 100% sample kept
    with UtilisationWindow(FakeSamples(period_s=0.5), min_run_time_s=0.0) as short:
        time.sleep(0.05)
    assert math.isnan(short.result.gpu_util_pct) and "0 NVML sample(s)" in short.result.missing_reason


def test_nvml_samples_read_time_stamped_samples(monkeypatch):
    """NvmlSamples against a fake pynvml: microsecond timestamps, the value field named by the value type, no
    sample newer than asked (NotFound) is an empty list, init and shutdown balanced, an unsupported GPU says so."""
    import types

    from cnnlab.profiling import gpu_util

    class NVMLError(Exception):
        pass

    class NotFound(NVMLError):
        pass

    calls = {"init": 0, "shutdown": 0, "since_us": []}
    start = time.time()

    def get_samples(handle, kind, since_us):
        calls["since_us"].append(since_us)
        if fake.unsupported:
            raise NVMLError("Not Supported")
        stamps = [int((start + k * 0.01) * 1e6) for k in range(-50, 6000)]  # 10 ms apart, up to a minute on
        new = [t for t in stamps if t > since_us and t <= time.time() * 1e6]
        if not new:
            raise NotFound()
        value = lambda t: types.SimpleNamespace(uiVal=25 if t >= start * 1e6 else 99)  # noqa: E731
        return 1, [types.SimpleNamespace(timeStamp=t, sampleValue=value(t)) for t in new]

    fake = types.SimpleNamespace(
        NVMLError=NVMLError, NVMLError_NotFound=NotFound, NVML_GPU_UTILIZATION_SAMPLES=1,
        NVML_VALUE_TYPE_DOUBLE=0, NVML_VALUE_TYPE_UNSIGNED_INT=1, unsupported=False,
        nvmlInit=lambda: calls.__setitem__("init", calls["init"] + 1),
        nvmlShutdown=lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1),
        nvmlDeviceGetSamples=get_samples)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(gpu_util, "_nvml_handle", lambda index: f"handle {index}")
    source = gpu_util.NvmlSamples(0)
    assert source.open() is None
    samples = source.read(start - 0.1)
    assert calls["since_us"][-1] == int((start - 0.1) * 1e6)
    # the fake's samples are 99 % before ``start`` and 25 % after; how many after depends on this machine's speed
    assert any(s.util_pct == 99.0 for s in samples)
    assert all((s.util_pct == 99.0) == (s.timestamp_s < start) for s in samples)
    assert source.read(time.time() + 10) == []  # NVML: nothing newer than that
    source.close()
    with gpu_util.UtilisationWindow(gpu_util.NvmlSamples(0), min_run_time_s=0.0) as window:
        time.sleep(0.12)
    assert window.result.gpu_util_pct == 25.0 and window.result.samples >= 3
    assert calls["init"] == calls["shutdown"] == 2
    fake.unsupported = True
    with gpu_util.UtilisationWindow(gpu_util.NvmlSamples(0)) as unsupported:
        pass
    assert math.isnan(unsupported.result.gpu_util_pct) and "Not Supported" in unsupported.result.missing_reason
    assert unsupported.min_run_time_s == 0 and calls["init"] == calls["shutdown"] == 3  # no loop extension


# ------------------------------------------------------------------------------------------------ memory over time

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


# ------------------------------------------------------------------------------------------------ loader_sweep

def test_loader_sweep_times_epochs_per_setting_and_skips_too_many_workers(tmp_path, monkeypatch):
    from torch.utils.data import TensorDataset

    from cnnlab.profiling import loader_sweep

    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    train_set = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    test_set = TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))
    for split in (train_set, test_set):  # what cnnlab.data's data sets carry
        split.data_source, split.name, split.num_classes, split.input_shape = "synthetic", "toy", 2, (4,)
    seen = []

    def train_epoch(net, loader):
        seen.append(("train", loader.batch_size, loader.num_workers))
        for x, _ in loader:
            net(x)

    def test_epoch(net, loader):
        seen.append(("test", loader.batch_size))
        for x, _ in loader:
            net(x)

    kwargs = dict(batch_sizes=[8, 16], num_workers=[0, 2], fraction=0.5, device="cpu", store=tmp_path / "l.csv",
                  settings={"study": "test"}, progress=False)
    df = loader_sweep(nn.Linear(4, 2), train_epoch, test_epoch, train_set, test_set, **kwargs)
    assert list(zip(df["batch_size"], df["num_workers"])) == [(8, 0), (8, 2), (16, 0), (16, 2)]
    assert list(df["status"]) == ["ok", "skipped", "ok", "skipped"]
    assert df.loc[df["status"] == "skipped", "error"].str.contains("os.cpu_count").all()
    ok = df[df["status"] == "ok"]
    assert (ok["train_epoch_s"] > 0).all() and (ok["test_epoch_s"] > 0).all()
    assert (ok["train_items"] == 32).all() and (ok["test_items"] == 16).all()
    assert not ok["pin_memory_effective"].any() and (df["num_workers_cap"] == 1).all()
    assert ("train", 8, 0) in seen and ("train", 8, 2) not in seen
    seen.clear()
    again = loader_sweep(nn.Linear(4, 2), train_epoch, test_epoch, train_set, test_set, **kwargs)
    assert seen == [] and list(again["train_epoch_s"].fillna(-1)) == list(df["train_epoch_s"].fillna(-1))
    wider = loader_sweep(nn.Linear(4, 3), train_epoch, test_epoch, train_set, test_set, **kwargs)
    assert len(seen) == 4 and wider.attrs.get("store") != df.attrs.get("store")  # another model: measured again


def test_a_point_that_kills_its_process_twice_is_stored_as_killed_and_retry_measures_failed_points(tmp_path):
    store = tmp_path / "k.csv"
    script = textwrap.dedent(f"""
        import os, signal, sys
        import cnnlab
        from cnnlab.profiling import sweep
        def fn(i):
            if i == 1 and os.environ.get("DIE") == "1":
                os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer does
            if i == 2:
                raise ValueError("a Python error")
            return {{"value": i}}
        df = sweep(fn, {{"i": [0, 1, 2]}}, {str(store)!r}, progress=False)
        print("STATUS", list(df["status"]))
    """)

    def run(**env):
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                              env={**os.environ, **env})

    first, second = run(DIE="1"), run(DIE="1")
    assert first.returncode == second.returncode == -signal.SIGKILL  # each run dies on point 1
    third = run(DIE="1")
    assert third.returncode == 0 and "STATUS ['ok', 'killed', 'error']" in third.stdout, third.stderr
    assert "died 2 times" in pd.read_csv(store).set_index("i").loc[1, "error"]
    fourth = run(DIE="0")  # failed points are reused, and the notebook is told so
    assert "STATUS ['ok', 'killed', 'error']" in fourth.stdout and "reused, not measured again" in fourth.stderr
    fifth = run(DIE="0", CNNLAB_RETRY="1")  # RETRY=1: measured again (point 2 fails again, as it should)
    assert "STATUS ['ok', 'ok', 'error']" in fifth.stdout, fifth.stderr
    assert sorted(pd.read_csv(store)["i"]) == [0, 1, 2]


@pytest.mark.parametrize("message", ["CUDNN_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate",
                                     "DefaultCPUAllocator: can't allocate memory"])
def test_allocation_failures_of_any_library_are_stored_as_oom(tmp_path, message):
    def fn(i):
        raise RuntimeError(f"cuDNN error: {message}")

    with pytest.warns(UserWarning, match="1 of 1 points failed"):
        df = sweep(fn, {"i": [0]}, tmp_path / "s.csv", progress=False)
    assert list(df["status"]) == ["oom"]


# ---------------------------------------------------------------- quiet profiler, traces


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


def test_saved_chrome_trace_is_json_with_trace_events(tmp_path):
    import gzip

    from cnnlab.profiling import traces

    model, x = SmallConvNet().eval(), torch.randn(2, 3, 16, 16)
    path = traces.trace_file(tmp_path / "new_folder", "small")
    with torch.inference_mode():
        prof = profile_ops(lambda: model(x), device="cpu", trace_path=path)
    assert prof.trace_path == str(path) and path.name == "small.pt.trace.json"
    names = {e.get("name") for e in json.loads(path.read_text())["traceEvents"]}
    assert {"aten::conv2d", "cnnlab::iteration"} <= names
    with torch.profiler.profile() as raw:
        model(x)
    packed = traces.save_chrome_trace(raw, tmp_path / "t.json.gz")
    assert "aten::conv2d" in {e.get("name") for e in json.loads(gzip.decompress(packed.read_bytes()))["traceEvents"]}


def test_memory_snapshot_on_cpu_is_missing_with_a_reason_and_does_not_run(tmp_path):
    from cnnlab.profiling import traces

    calls = []
    row = traces.memory_snapshot(lambda: calls.append(1), tmp_path / "s.memory.pickle", "cpu")
    assert row["memory_snapshot_path"] is None and "CUDA" in row["memory_snapshot_missing_reason"]
    assert not calls and not (tmp_path / "s.memory.pickle").exists()


def test_memory_snapshot_stops_recording_when_the_function_raises(tmp_path, monkeypatch):
    # The CUDA path with the allocator's recorder replaced (no GPU here): recording must be off again afterwards.
    from cnnlab.profiling import traces

    log = []
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history",
                        lambda enabled="all", **kw: log.append(("record", enabled)))
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", lambda path: log.append(("dump", path)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "device", lambda dev: contextlib.nullcontext())
    dev = torch.device("cuda", 0)
    row = traces._record_cuda(lambda: log.append("fn"), tmp_path / "a.pickle", dev, 10)
    assert log == [("record", "all"), "fn", ("dump", str(tmp_path / "a.pickle")), ("record", None)]
    assert row == {"memory_snapshot_path": str(tmp_path / "a.pickle"), "memory_snapshot_missing_reason": None}
    log.clear()
    with pytest.raises(ZeroDivisionError):
        traces._record_cuda(lambda: 1 / 0, tmp_path / "b.pickle", dev, 10)
    assert log == [("record", "all"), ("record", None)]


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


def test_rounds_combine_into_one_row_per_point_and_the_time_is_judged_within_them():
    from cnnlab.claims import Spread
    from cnnlab.profiling import combine_rounds, time_spread

    rows = [{"round": r, "net": "a", "status": "ok", "latency_ms_median": m, "latency_ms_p10": m - 0.1,
             "latency_ms_p90": m + 0.2, "repeats": 5, "mem": 10 + r, "mem_low": 9 + r, "mem_high": 11 + r}
            for r, m in enumerate((1.0, 1.5, 0.9))]
    rows.append({"round": 0, "net": "b", "status": "skipped", "error": "no GPU"})
    out = combine_rounds(pd.DataFrame(rows), ["net"], spreads=["mem"]).set_index("net")
    a = out.loc["a"]
    assert (a["latency_ms_median"], a["latency_ms_rounds_min"], a["latency_ms_rounds_max"]) == (1.0, 0.9, 1.5)
    assert a["latency_ms_p10"] == pytest.approx(0.8) and a["latency_ms_p90"] == pytest.approx(1.7)
    assert (a["repeats"], a["rounds"], a["round_medians_ms"]) == (15, 3, "1, 1.5, 0.9")
    assert (a["mem"], a["mem_low"], a["mem_high"]) == (11, 9, 13)
    assert out.loc["b", "rounds"] == 0 and "round" not in out
    assert time_spread(a.to_dict()) == Spread(1.0, 0.9, 1.5)  # the drift between rounds, not the batches' spread
    assert time_spread({**a.to_dict(), "rounds": 1}) == Spread.of(a.to_dict(), "latency_ms")
