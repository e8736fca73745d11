"""cnnlab.profiling.gpu_util: GPU utilisation from NVML samples whose whole period lies in the timed region,
with its spread, missing with a reason when too few; benchmark extends its loop until there are enough."""

from __future__ import annotations

import math
import sys
import time

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pytest
import torch

from cnnlab.profiling import benchmark


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
                  measure_gpu_util=True, util_min_run_time_s=0.3, gpu_util_source=source)
    # 2 timed calls were asked for; the loop went on until it had lasted 0.3 s (> 4 periods of 0.05 s)
    assert len(calls) == 1 + m.repeats and m.repeats == len(m.latencies_ms) > 2
    assert sum(m.latencies_ms) / 1e3 >= 0.3 - 0.005 and m.total_time_s >= 0.3
    assert m.gpu_util_samples >= 3 and (source.opened, source.closed) == (1, 1)
    assert m.throughput_items_per_s == pytest.approx(2 * 1e3 / m.latency_ms_median)  # batch / median time per batch
    # a source that samples every 0.1 s needs (3 + 1) periods: 0.4 s, more than the 0.1 s asked for
    slow = benchmark(model, torch.ones(2), device="cpu", warmup=0, repeats=1, measure_memory=False,
                     measure_gpu_util=True, util_min_run_time_s=0.1, gpu_util_source=FakeSamples(period_s=0.1))
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
