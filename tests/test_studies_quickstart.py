"""Tests for cnnlab.studies.quickstart: the contract, a store that never returns another run's rows, the claim."""

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import numpy as np
import pandas as pd
import pytest
import torch

from cnnlab import models, studies
from cnnlab.claims import INCONCLUSIVE
from cnnlab.profiling import throughput
from cnnlab.studies import quickstart


def test_follows_the_contract_and_checks_parameters():
    assert studies.signature_problems(quickstart) == []
    with pytest.raises(ValueError, match="model_name: 'lstm_sentiment' is not a known model here"):
        quickstart.configure("quick", model_name="lstm_sentiment")
    with pytest.raises(ValueError, match="batch_sizes: 0 is not valid"):
        quickstart.configure("quick", batch_sizes=[0, 1])


def test_a_run_with_other_settings_never_returns_stored_rows(tmp_path, monkeypatch):
    calls = []
    real = quickstart.benchmark

    def counted(*args, **kwargs):
        calls.append(kwargs["repeats"])
        return real(*args, **kwargs)

    monkeypatch.setattr(quickstart, "benchmark", counted)
    two = dict(model_name="lenet5", batch_sizes=[1, 4], device="cpu", min_rounds=2, max_rounds=2)
    small = quickstart.configure("quick", repeats=2, **two)
    first = studies.tables(quickstart.measure(small, tmp_path, progress=False))["batch"]
    assert calls == [2] * 4 and list(first["repeats"]) == [4, 4]  # two rounds of two batches
    assert list(first["rounds"]) == [2, 2] and first["round_medians_ms"].str.count(",").eq(1).all()
    more = quickstart.configure("quick", repeats=3, **two)
    second = studies.tables(quickstart.measure(more, tmp_path, progress=False))["batch"]
    assert calls == [2] * 4 + [3] * 4 and list(second["repeats"]) == [6, 6]  # measured again, not the first rows
    calls.clear()
    again = studies.tables(quickstart.measure(small, tmp_path, progress=False))["batch"]
    assert calls == []  # the same settings: resumed from the store
    pd.testing.assert_frame_equal(again, first)
    # one throughput: the table's column is the rate the claim judges (batch size / median time per batch)
    for _, row in first.iterrows():
        rate = throughput.throughput(row)
        assert (row["throughput_items_per_s"], row["throughput_items_per_s_low"],
                row["throughput_items_per_s_high"]) == pytest.approx((rate.value, rate.low, rate.high))
        assert rate.value == pytest.approx(1e3 * row["batch_size"] / row["latency_ms_median"])


ROUNDS = 12


def _frame(latencies, spread=0.05, batch_sizes=(1, 8), seed=0):
    """A "batch" experiment: time per batch ``latencies`` (ms), each of ``ROUNDS`` paired rounds within
    +-``spread`` of it, drawn independently for every batch size."""
    lat = pd.Series(latencies, dtype=float)
    rng = np.random.default_rng(seed)
    rounds = [", ".join(f"{t * (1 + spread * u):.6g}" for u in rng.uniform(-1, 1, ROUNDS)) for t in lat]
    return studies.combine(batch=pd.DataFrame({
        "batch_size": list(batch_sizes), "status": "ok", "latency_ms_median": lat,
        "latency_ms_p10": lat * (1 - spread), "latency_ms_p90": lat * (1 + spread), "rounds": ROUNDS,
        "confidence": 0.95, "round_medians_ms": rounds}))


def test_claim_needs_more_than_twice_the_throughput_of_batch_1_on_paired_rounds():
    # batch 1: 10 ms -> 100 images/s; batch 8 in 16 ms -> 500 images/s (5x) or in 80 ms -> 100 images/s (1x)
    held = quickstart.check_claims(_frame([10.0, 16.0]), "cpu")[0]
    assert held.held is True and held.note == "" and "batch 8 5" in held.ours
    assert quickstart.check_claims(_frame([10.0, 80.0]), "cpu")[0].held is False
    assert quickstart.check_claims(_frame([10.0, 100.0]), "cpu")[0].held is False  # the best is batch 1 itself
    claim = quickstart.check_claims(_frame([10.0, 32.0]), "cpu")[0]
    assert "> 2" in claim.criterion and "paired" in claim.criterion and "criterion" not in claim.note
    assert "parallel processing" in claim.paper  # the paper's words beside the criterion
    empty = quickstart.check_claims(_frame([10.0, 32.0]).assign(status="error"), "cpu")[0]
    assert empty.held is None and empty.criterion and empty.note


def test_a_clear_paired_gain_is_decided_and_exactly_2x_is_not():
    # 2.5x, rounds +-5%: the old rule (x/1.25 on each time, 1.5-3.75x) could not decide it; paired rounds do
    assert quickstart.check_claims(_frame([10.0, 32.0]), "cpu")[0].held is True
    # exactly 2x (batch 8 in 40 ms), rounds +-5% drawn independently: inconclusive, never decided
    tie = quickstart.check_claims(_frame([10.0, 40.0]), "cpu")[0]
    assert tie.held == INCONCLUSIVE and "spans the threshold 2x" in tie.note
    # two larger batches each within noise of 2x: inconclusive, naming each
    both = quickstart.check_claims(_frame([10.0, 40.0, 80.0], spread=0.3, batch_sizes=(1, 8, 16)), "cpu")[0]
    assert both.held == INCONCLUSIVE and both.note.count("spans the threshold 2x") == 2
    # one of two larger batches clear of 2x: held, with alpha split over the two (Holm's first step)
    one = quickstart.check_claims(_frame([10.0, 40.0, 32.0], batch_sizes=(1, 8, 16)), "cpu")[0]
    assert one.held is True


def test_the_smallest_batch_is_never_compared_with_itself_and_one_batch_is_not_judged():
    claim = quickstart.check_claims(_frame([10.0, 100.0]), "cpu")[0]
    assert claim.held is False and "over batch 1: batch 8 0.8" in claim.ours and "batch 1 1" not in claim.ours
    one = quickstart.check_claims(_frame([10.0], batch_sizes=(1,)), "cpu")[0]
    assert one.held is None and "two batch sizes" in one.note


def test_quick_pins_one_thread_while_measuring_and_keys_the_store_by_it(tmp_path):
    import torch

    from cnnlab import config

    assert quickstart.configure("quick").threads == 1 and quickstart.configure("standard").threads is None
    with pytest.raises(ValueError, match="threads"):
        quickstart.configure("quick", threads=0)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2) if config.cores() >= 2 else (1,):
            cfg = quickstart.configure("quick", model_name="lenet5", batch_sizes=[1, 2], repeats=2, device="cpu",
                                       threads=threads, min_rounds=2, max_rounds=2)
            batch = studies.tables(quickstart.measure(cfg, tmp_path, progress=False))["batch"]
            assert (batch["cpu_threads"] == threads).all()  # applied while measuring, not read from the store
    finally:
        torch.set_num_threads(before)
    assert len(list((tmp_path / "stores").glob("sweep_batch_*.csv"))) == (2 if config.cores() >= 2 else 1)


def test_save_traces_writes_the_profiled_batches_chrome_trace(tmp_path):
    import json

    cfg = quickstart.configure("quick", batch_sizes=[1, 2], repeats=2, save_traces=True, min_rounds=2, max_rounds=2)
    ops = studies.tables(quickstart.measure(cfg, tmp_path, progress=False))["operators"]
    path = ops["trace_file"].iloc[0]
    assert path.endswith("quickstart_resnet20_b2.pt.trace.json") and path.startswith(str(tmp_path / "traces"))
    assert any(e.get("name") == "aten::conv2d" for e in json.load(open(path))["traceEvents"])
    off = studies.tables(quickstart.measure(quickstart.configure("quick", batch_sizes=[1], repeats=2, min_rounds=2,
                                                                 max_rounds=2),
                                            tmp_path / "off", progress=False))["operators"]
    assert off["trace_file"].isna().all() and not (tmp_path / "off" / "traces").exists()


@pytest.mark.parametrize("bad, match", [
    (dict(batch_sizes=[10**6]), r"batch_sizes: 1000000 is not valid; valid: integers >= 1 and <= 65536"),
    (dict(repeats=True), "repeats=True must be an integer"),
    (dict(save_traces=1), "save_traces=1 is not valid; valid: True, False"),
])
def test_configure_rejects_bools_non_finite_and_out_of_range_values_naming_the_parameter(bad, match):
    with pytest.raises(ValueError, match=match):
        quickstart.configure("quick", **bad)


class _FitsUpTo(torch.nn.Module):
    """LeNet-5 that runs out of memory above ``limit`` images, as a GPU does at too large a batch (every call:
    the timed ones in the sweep and any profile outside it)."""

    def __init__(self, net: torch.nn.Module, limit: int):
        super().__init__()
        self.net, self.limit = net, limit
        self.input_shape = self.net.input_shape

    def forward(self, x):
        if x.shape[0] > self.limit:
            raise torch.OutOfMemoryError(f"out of memory at batch {x.shape[0]} (simulated)")
        return self.net(x)


@pytest.mark.parametrize("limit, profiled", [(2, 2), (0, None)])
def test_an_out_of_memory_batch_profiles_the_largest_that_fit_and_claims_and_figures_come_out(
        tmp_path, monkeypatch, limit, profiled):
    real = models.get
    monkeypatch.setattr(models, "get", lambda name: _FitsUpTo(real(name), limit))
    cfg = quickstart.configure("quick", model_name="lenet5", batch_sizes=[1, 2, 4], repeats=2, device="cpu",
                               min_rounds=2, max_rounds=2)
    with pytest.warns(UserWarning, match="points failed"):
        df = quickstart.measure(cfg, tmp_path, progress=False)
    parts = studies.tables(df)
    assert list(parts["batch"]["status"]) == (["ok", "ok", "oom"] if limit else ["oom"] * 3)
    operators = parts["operators"]
    if profiled:
        assert (operators["batch_size"] == profiled).all() and "aten::conv2d" in set(operators["name"])
    else:  # no batch fit: no operator table, and a row saying why
        assert len(operators) == 1 and operators["status"].iloc[0] == "skipped"
        assert "no batch size fit in memory" in operators["error"].iloc[0]
    claim = quickstart.check_claims(df, cfg.device)[0]
    assert (claim.held is None) == (profiled is None)  # judged from the batches that fit
    figs = quickstart.figures(df)
    if profiled is None:  # the figure says why it is empty
        assert "no batch size measured" in figs["quickstart_latency_throughput"].axes[0].texts[0].get_text()
    saved = studies.save(df, figs, [claim], tmp_path / "out", name="quickstart", env={})
    assert len(saved) == 1 and (tmp_path / "out" / "quickstart_latency_throughput.png").exists()
    assert studies.check_results(df, cfg).startswith("results checked")


def test_notebook_00_with_every_point_failed_says_so_and_why(tmp_path, monkeypatch, capsys):
    # issue 44: cell 6 stopped with KeyError "['latency_ms_median', ...] not in index" when no batch fit
    import json
    from pathlib import Path

    from cnnlab import report

    cells = json.loads((Path(__file__).parents[1] / "notebooks" / "00_quickstart.ipynb").read_text())["cells"]
    measure_cell = next("".join(c["source"]) for c in cells if "study.measure(cfg, out)" in "".join(c["source"]))
    real = models.get
    monkeypatch.setattr(models, "get", lambda name: _FitsUpTo(real(name), 0))
    cfg = quickstart.configure("quick", model_name="lenet5", batch_sizes=[1, 2], repeats=2, device="cpu")
    with pytest.warns(UserWarning, match="points failed"):
        exec(measure_cell, dict(study=quickstart, studies=studies, report=report, cfg=cfg, out=tmp_path))
    out = capsys.readouterr().out
    assert "Every point failed (2 oom), so nothing was measured. Why: OutOfMemoryError: out of memory at batch 1 " \
           "(simulated); OutOfMemoryError: out of memory at batch 2 (simulated)." in out, out
    assert "Every point was skipped (1 skipped), so nothing was measured. Why: no batch size fit in memory" in out
