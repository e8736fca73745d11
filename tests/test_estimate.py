"""cnnlab.profiling.estimate: a study's expected duration from its plan and short probes."""

import math
import time

import pytest
import torch

from cnnlab.profiling import estimate
from cnnlab.profiling.estimate import Work


def sleeper(seconds):
    calls = []

    def unit():
        calls.append(1)
        time.sleep(seconds)

    unit.calls = calls
    return unit


def test_expect_times_each_unit_warm_and_multiplies_by_its_count():
    fast, slow = sleeper(0.01), sleeper(0.03)
    e = estimate.expect([Work("a", 100, fast), Work("b", 10, slow), Work("a", 50, fast), Work("c", 2, 1.5)],
                        device="cpu")
    assert e.parts["a"] == pytest.approx(150 * 0.01, rel=0.5)
    assert e.parts["b"] == pytest.approx(10 * 0.03, rel=0.5)
    assert e.parts["c"] == 3.0  # given in seconds: not probed
    assert e.seconds == pytest.approx(sum(e.parts.values()))
    assert list(e.parts) == ["c", "a", "b"]  # largest first
    # one untimed call and a few timed ones, once per distinct unit however often it appears
    assert 2 <= len(fast.calls) <= 1 + estimate.PROBE_CALLS
    assert e.probe_s < 1.0 and e.device == "cpu"
    assert [u[0] for u in e.units] == ["a", "b", "a", "c"]


def test_a_unit_whose_first_call_pays_a_start_up_is_timed_warm():
    state = {"first": True}

    def unit():
        time.sleep(0.5 if state["first"] else 0.01)
        state["first"] = False

    assert estimate.unit_seconds(unit, "cpu") < 0.1


def test_a_slow_unit_is_timed_once_after_its_warm_up():
    slow = sleeper(estimate.PROBE_BUDGET_S + 0.05)
    assert estimate.unit_seconds(slow, "cpu") >= estimate.PROBE_BUDGET_S
    assert len(slow.calls) == 2


def test_interpolate_probes_two_sizes_when_calls_are_fast_and_one_when_slow():
    probed = []

    def at(cost_per_item, fixed):
        def unit_at(size):
            probed.append(size)
            return lambda: time.sleep(fixed + cost_per_item * size)
        return unit_at

    line = estimate.interpolate([1, 4, 16], at(0.001, 0.005), "cpu")
    assert probed == [1, 16]  # the ends only
    assert line[1] < line[4] < line[16] and line[4] == pytest.approx(line[1] + (line[16] - line[1]) * 3 / 15)
    probed.clear()
    # already slow at the smallest: no large call is probed; the line through the smallest and a near size
    slow = estimate.interpolate([2, 8, 64], at(0.02, estimate.SLOW_CALL_S), "cpu")
    assert probed == [2, 8]
    assert slow[64] == pytest.approx(slow[2] + (slow[8] - slow[2]) * 62 / 6) and slow[64] > slow[8]
    # a slow call that is mostly its fixed part is not scaled as if it were all per item (1024x batch 1's)
    assert slow[64] < 32 * slow[2] / 2
    probed.clear()
    alone = estimate.interpolate([2, 64], at(estimate.SLOW_CALL_S / 2, 0.0), "cpu")
    assert probed == [2] and alone[64] == pytest.approx(alone[2] * 32)  # no size within reach: in proportion
    assert estimate.interpolate([], at(0, 0), "cpu") == {}


def test_by_batch_counts_calls_at_each_batch_size():
    works = estimate.by_batch("batches", {1: 10, 8: 0, 4: 5}, lambda b: (lambda: None), "cpu")
    assert sorted((w.count, w.label) for w in works) == [(5, "batches"), (10, "batches")]
    assert all(isinstance(w.unit, float) for w in works)


def test_text_and_duration():
    assert estimate.duration(45) == "45 s" and estimate.duration(150) == "2.5 min"
    assert estimate.duration(7200) == "2.0 h" and estimate.duration(math.nan) == "unknown"
    e = estimate.Expectation(seconds=150.0, parts={"training": 120.0, "profiles": 30.0, "tiny": 0.1}, probe_s=1.2)
    text = e.text()
    assert text.startswith("about 2.5 min on cpu (training 2.0 min, profiles 30 s)") and "1.2 s probe" in text
    assert "tiny" not in text


def test_profiler_session_is_a_small_unit_after_the_first_profile():
    unit = estimate.profiler_session(torch.device("cpu"))
    assert estimate.unit_seconds(unit, "cpu") < 1.0


def test_on_a_gpu_the_estimate_profiles_without_cuda_activity(monkeypatch):
    """An estimate runs before the study's timings, and a CUDA profile may slow the launches timed after it
    (cnnlab.profiling.cupti): on a GPU its profiled units record the CPU activity only; on a CPU they profile as
    the studies do."""
    from torch import profiler

    from cnnlab.profiling import cupti

    seen, real = [], profiler.profile

    def recording(*args, activities=None, **kwargs):
        seen.append(list(activities))
        return real(*args, activities=[profiler.ProfilerActivity.CPU], **kwargs)

    monkeypatch.setattr(profiler, "profile", recording)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(cupti, "_cuda_profiles", 0)
    x = torch.ones(8)
    estimate.under_profiler(lambda: x + 1, "cuda")
    assert seen == [[profiler.ProfilerActivity.CPU]] and cupti.cuda_profiles() == 0
    estimate.under_profiler(lambda: x + 1, "cpu")
    assert seen[-1] == [profiler.ProfilerActivity.CPU]


def test_forward_is_one_pass_without_autograd():
    import torch

    net = torch.nn.Linear(3, 2)
    out = estimate.forward(net, torch.ones(4, 3))
    assert out.shape == (4, 2) and not out.requires_grad and torch.is_inference(out)
