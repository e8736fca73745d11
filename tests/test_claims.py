import numpy as np
import pytest

from cnnlab.claims import Claim, report, table


def test_table_and_report_words():
    claims = [Claim("memory grows with batch", "Fig. 1", "1.0 -> 9.0 MiB", np.True_, "cpu"),
              Claim("utilisation rises", "Fig. 2", "missing", None, "cpu", note="no GPU"),
              Claim("fp16 is faster", "Fig. 3", "0.8x", False, "cpu")]
    df = table(claims)
    assert df["held"].tolist() == ["yes", "n/a", "no"]
    text = report(claims)
    assert text.splitlines()[0].startswith("HELD on cpu: memory grows with batch")
    assert "NOT APPLICABLE" in text and "(no GPU)" in text and "DID NOT HOLD" in text


def test_not_applicable_needs_a_reason():
    with pytest.raises(ValueError, match="needs a note"):
        Claim("x", "y", "z", None, "cpu")


def test_criterion_is_a_column_and_in_the_words():
    c = Claim("fp16 is faster", "Fig. 3", "0.8x", False, "cpu", criterion="fp16 / fp32 time < 0.9")
    df = table([c])
    assert list(df.columns) == ["claim", "paper", "ours", "held", "device", "criterion", "note"]
    assert df["criterion"].iloc[0] == "fp16 / fp32 time < 0.9"
    assert report([c]).endswith("Criterion: fp16 / fp32 time < 0.9.")
