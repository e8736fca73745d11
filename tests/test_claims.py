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


LONG = ("throughput at the best batch size is far above batch 1, and the words after the fiftieth character are "
        "still shown")


def test_show_gives_every_claim_once_in_full_html_and_wrapped_text(capsys):
    from cnnlab.claims import as_html, as_text, show

    claims = [Claim(LONG, "Fig. 1: 10x", "3.2x", True, "cpu", criterion="best / batch-1 throughput > 2"),
              Claim("<b>utilisation</b> & more", "Fig. 2", "missing", None, "cpu", note="no GPU")]
    page = as_html(claims)
    assert LONG in page and "white-space:pre-wrap" in page  # in full, wrapped by the browser, never cut at 50
    assert "&lt;b&gt;utilisation&lt;/b&gt; &amp; more" in page and "<b>utilisation" not in page
    assert page.count("<tr>") == 3 and ">held<" in page and ">n/a<" in page
    text = as_text(table(claims), width=60)
    assert all(len(line) <= 60 for line in text.splitlines())
    assert " ".join(text.split()).count(LONG) == 1 and "NOT APPLICABLE on cpu" in text
    assert "criterion: best / batch-1 throughput > 2" in " ".join(text.split())
    assert show(claims) is None  # no Out[...] beside the table
    assert capsys.readouterr().out.count("throughput at the best batch size") == 1  # outside Jupyter: the text
