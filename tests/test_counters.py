"""cnnlab.profiling.counters: Nsight Compute's counters, parsed from its CSV, run through a fake ncu on the PATH,
and missing with the reason where ncu is not there."""

from __future__ import annotations

import json
import math
import os
import sys
import textwrap

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pytest

from cnnlab.profiling import environment, hardware_counters
from cnnlab.profiling.counters import _target_command, parse_ncu_csv


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
    # ncu's defaults (clocks locked to base, caches flushed per replay), set explicitly and said in every row
    assert first[first.index("--clock-control") + 1] == "base" and first[first.index("--cache-control") + 1] == "all"
    assert set(table["ncu_clock_control"]) == {"base"} and set(table["ncu_cache_control"]) == {"all"}
    assert "TARGET KWARGS ARRIVED" in text
    assert list(table["kernel_name"]) == ["conv", "relu"]
    summary = summarise_counters(table)
    assert summary["kernels"] == 2 and summary["kernel_time_ms"] == pytest.approx(0.004)
    assert summary["ncu_clock_control"] == "base" and summary["ncu_cache_control"] == "all"
    assert summary["dram_throughput_pct"] == pytest.approx(70.0)  # (3 x 80 + 1 x 40) / 4, not the plain 60
    assert math.isnan(summary["l2_throughput_pct"]) and math.isnan(summary["sm_cycles_active"])  # not collected
    with pytest.raises(ValueError, match="kwargs go to a 'module:function' target"):
        hardware_counters(["python", "x.py"], kwargs={"a": 1})
    with pytest.raises(ValueError, match="valid: clock_control base | none"):
        hardware_counters("builtins:print", clock_control="boost")


def test_profiled_region_runs_the_warmup_outside_the_profiled_call(monkeypatch):
    import torch

    from cnnlab.profiling.counters import profiled_region

    log = []
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: log.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: log.append("stop"))
    profiled_region(lambda: log.append("step"), "cpu", warmup=2)
    assert log == ["step", "step", "start", "step", "stop"]  # only the last call is between start and stop
    log.clear()
    profiled_region(lambda: log.append("step"), "cpu", warmup=0)
    assert log == ["start", "step", "stop"]
