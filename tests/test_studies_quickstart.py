"""Tests for cnnlab.studies.quickstart: the contract, a store that never returns another run's rows, the claim."""

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pandas as pd
import pytest

from cnnlab import studies
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
    small = quickstart.configure("quick", model_name="lenet5", batch_sizes=[1, 4], repeats=2, device="cpu")
    first = studies.tables(quickstart.measure(small, tmp_path, progress=False))["batch"]
    assert calls == [2, 2] and list(first["repeats"]) == [2, 2]
    more = quickstart.configure("quick", model_name="lenet5", batch_sizes=[1, 4], repeats=3, device="cpu")
    second = studies.tables(quickstart.measure(more, tmp_path, progress=False))["batch"]
    assert calls == [2, 2, 3, 3] and list(second["repeats"]) == [3, 3]  # measured again, not the first run's rows
    calls.clear()
    again = studies.tables(quickstart.measure(small, tmp_path, progress=False))["batch"]
    assert calls == []  # the same settings: resumed from the store
    pd.testing.assert_frame_equal(again, first)


def test_claim_needs_more_than_twice_the_throughput_of_batch_1():
    def frame(rates):
        return studies.combine(batch=pd.DataFrame({"batch_size": [1, 8], "status": "ok",
                                                    "throughput_items_per_s": rates}))

    assert quickstart.check_claims(frame([100.0, 250.0]), "cpu")[0].held is True
    assert quickstart.check_claims(frame([100.0, 190.0]), "cpu")[0].held is False
    assert quickstart.check_claims(frame([250.0, 100.0]), "cpu")[0].held is False  # the best is batch 1 itself
    claim = quickstart.check_claims(frame([100.0, 250.0]), "cpu")[0]
    assert "> 2" in claim.criterion and "criterion" not in claim.note
    empty = quickstart.check_claims(frame([100.0, 250.0]).assign(status="error"), "cpu")[0]
    assert empty.held is None and empty.criterion and empty.note
