import inspect
import numpy as np
import pandas as pd
import pytest

from cnnlab import claims
from cnnlab.claims import INCONCLUSIVE, Claim, Spread, report, table


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
    assert list(df.columns) == ["claim", "paper", "ours", "held", "device", "criterion", "note", "source"]
    assert df["criterion"].iloc[0] == "fp16 / fp32 time < 0.9"
    assert report([c]).endswith("Criterion: fp16 / fp32 time < 0.9.")


LONG = ("throughput at the best batch size is far above batch 1, and the words after the fiftieth character are "
        "still shown")


def test_show_gives_every_claim_once_in_full_html_and_wrapped_text(capsys):
    from cnnlab.claims import as_html, as_text
    from cnnlab.report import show

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


def test_noise_rule_decides_only_when_the_interval_clears_the_threshold():
    from cnnlab.claims import INCONCLUSIVE, Spread, judge

    assert judge(Spread(2.5, 2.2, 2.9), ">", 2) == (True, "")
    assert judge(Spread(1.5, 1.2, 1.9), ">", 2) == (False, "")
    held, note = judge(Spread(2.1, 1.8, 2.4), ">", 2)
    assert held == INCONCLUSIVE and "1.8-2.4" in note and "threshold 2" in note
    assert judge(Spread(0.8, 0.7, 0.85), "<", 0.9) == (True, "")
    assert judge(Spread(0.95, 0.85, 1.0), "<", 0.9)[0] == INCONCLUSIVE
    assert judge(Spread.exact(2.0), ">", 2) == (False, "")  # on the threshold: not above it


def test_named_puts_the_part_in_front_of_its_note_only_where_there_is_one():
    from cnnlab.claims import INCONCLUSIVE, named

    assert named("resnet20", (INCONCLUSIVE, "within noise")) == (INCONCLUSIVE, "resnet20: within noise")
    assert named("resnet20", (True, "")) == (True, "")


def test_joined_keeps_the_notes_that_say_something():
    from cnnlab.claims import joined

    assert joined("within noise", "", None, "one round") == "within noise; one round"
    assert joined("", None) == ""


def test_a_trend_holds_only_when_every_step_clears_the_noise():
    from cnnlab.claims import INCONCLUSIVE, Spread, all_of, trend

    clear = [Spread(1, 0.9, 1.1), Spread(2, 1.8, 2.2), Spread(4, 3.5, 4.5)]
    assert trend(clear, "up") == (True, "")
    assert trend(clear[::-1], "up") == (False, "")
    held, note = trend([Spread(1, 0.9, 1.1), Spread(1.05, 0.95, 1.2), Spread(4, 3.5, 4.5)], "up", labels=[1, 8, 64])
    assert held == INCONCLUSIVE and note.startswith("within noise at 1 -> 8:")
    assert trend([Spread.exact(4), Spread.exact(4), Spread.exact(8)], "up") == (False, "")  # an exact tie: no rise
    assert all_of((True, ""), (INCONCLUSIVE, "a")) == (INCONCLUSIVE, "a")
    assert all_of((True, ""), (INCONCLUSIVE, "a"), (False, ""))[0] is False
    assert all_of((None, "n/a"),) == (None, "n/a")


def test_an_inconclusive_claim_shows_its_overlap_everywhere():
    from cnnlab.claims import INCONCLUSIVE, as_html, as_text, verdict_words

    with pytest.raises(ValueError, match="needs a note showing the overlap"):
        Claim("x", "y", "z", INCONCLUSIVE, "cpu")
    with pytest.raises(ValueError, match="valid: True, False, None"):
        Claim("x", "y", "z", "maybe", "cpu", note="n")
    c = Claim("fp16 is faster", "Fig. 3", "0.9x", INCONCLUSIVE, "cpu", criterion="ratio < 0.9",
              note="within noise: 0.9 (0.8-1) spans the threshold 0.9")
    df = table([c])
    assert df["held"].tolist() == ["inconclusive"]
    assert "INCONCLUSIVE (within noise) on cpu" in report([c]) and "INCONCLUSIVE (within noise)" in as_text([c])
    assert "inconclusive: within noise" in as_html([c]) and "#9a6700" in as_html([c])
    assert verdict_words("inconclusive", c.note) == f"inconclusive ({c.note})"
    assert verdict_words("yes", "") == "held"


def test_any_of_holds_when_one_part_does():
    from cnnlab.claims import INCONCLUSIVE, any_of

    assert any_of((False, ""), (True, "")) == (True, "")
    assert any_of((False, ""), (INCONCLUSIVE, "a")) == (INCONCLUSIVE, "a")
    assert any_of((False, ""), (False, "")) == (False, "")
    assert any_of((None, "n/a")) == (None, "n/a")


def test_a_band_holds_inside_fails_outside_and_says_when_the_noise_is_wider_than_it():
    from cnnlab.claims import band

    assert band(Spread(1.1, 1.05, 1.15), 1.0, 1.2) == (True, "")
    assert band(Spread(1.5, 1.3, 1.7), 1.0, 1.2)[0] is False  # wholly beyond the upper end
    assert band(Spread(0.8, 0.7, 0.95), 1.0, 1.2)[0] is False  # wholly below the lower end
    edge = band(Spread(1.15, 1.1, 1.3), 1.0, 1.2)
    assert edge[0] == INCONCLUSIVE and "cannot be decided" not in edge[1]  # spans one end: more rounds may decide
    wide = band(Spread(1.1, 0.7, 1.7), 1.0, 1.2, fmt=".2f", unit="x")
    assert wide[0] == INCONCLUSIVE and "cannot be decided at this noise" in wide[1] and "1.00-1.20x" in wide[1]


def test_claims_beyond_the_paper_come_after_the_papers_under_their_own_heading():
    from cnnlab.claims import BEYOND_HEADING, as_html, as_text

    ours = Claim("tiling beats untiled", "-", "0.9x", True, "cpu", criterion="< 1", beyond=True)
    papers = [Claim(f"paper claim {i}", "Fig. 1", "1x", True, "cpu", criterion="> 0") for i in range(2)]
    df = table([ours, *papers])
    assert list(df["claim"]) == ["paper claim 0", "paper claim 1", "tiling beats untiled"]
    assert list(df["source"]) == ["paper", "paper", "beyond the paper"]
    text = as_text(df)
    assert text.index("paper claim 1") < text.index(BEYOND_HEADING) < text.index("tiling beats untiled")
    assert as_html(df).count(BEYOND_HEADING) == 1 and BEYOND_HEADING not in as_html(papers)
    # a claims.csv written before the column existed: every claim the paper's, no heading
    assert BEYOND_HEADING not in as_text(df.drop(columns="source"))


def test_quickstarts_gain_is_marked_beyond_the_paper():
    """Issue 32, item 9: a check the paper never makes (00's > 2x gain) is labelled and shown apart."""
    import pandas as pd

    from cnnlab.studies import quickstart

    frame = pd.DataFrame({"experiment": "batch", "batch_size": [1, 8], "status": "ok",
                          "latency_ms_median": [10.0, 16.0], "latency_ms_p10": [9.5, 15.0],
                          "latency_ms_p90": [10.5, 17.0]})
    assert [c.beyond for c in quickstart.check_claims(frame, "cpu")] == [True]


def test_the_workbooks_readings_of_slight_and_far_above_are_written_once():
    """No study writes the bound of "slight"/"little" or "far above" as its own number (issue 32: a threshold written
    once): every module-level constant of cnnlab/studies/ equal to one of them, or to 1 +- SLIGHT or 100 x SLIGHT,
    must be derived from cnnlab.claims, not a literal (float bounds: counts such as a batch of 2 are not bounds)."""
    import ast
    from pathlib import Path

    from cnnlab import claims

    shared = {claims.SLIGHT, 1 + claims.SLIGHT, 1 - claims.SLIGHT, 100 * claims.SLIGHT, claims.FAR_ABOVE}
    written = []
    for path in sorted((Path(claims.__file__).parent / "studies").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, float) \
                    and any(abs(node.value.value - v) < 1e-12 for v in shared) \
                    and all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets):
                written.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    assert written == [], f"write these from cnnlab.claims.SLIGHT / FAR_ABOVE: {written}"


def test_a_table_of_only_inconclusive_and_not_applicable_verdicts_keeps_every_word():
    """pandas 3 reads a column of strings and None as strings, None as NaN: the verdicts are words before it sees
    them (notebook 08 on a CPU had only these two and failed)."""
    checks = [Claim("a", "p", "o", INCONCLUSIVE, "cpu", note="within noise"), Claim("b", "p", "o", None, "cpu", note="x")]
    assert table(checks)["held"].tolist() == [INCONCLUSIVE, "n/a"]


def _declared(test, measure, **kw):
    return claims.Declared("x is small", 'Sec. 1: "x is small"', "x / y", test, measure, **kw)


def test_a_declaration_writes_its_criterion_from_its_test_once():
    d = _declared(claims.below(0.9, ".2f", "x"), lambda df: claims.Measured({"a": Spread.exact(0.5)}), each="model",
                  bound="our bound")
    assert d.criterion().startswith("x / y < 0.90x, every model (our bound); noise:")
    assert claims.within(1, 1.2, ".2f").words() == "> 1.00 and < 1.20"
    assert claims.above(2).words() == "> 2" and claims.rises().words() == "rises at every step"
    assert _declared(claims.above(2), None, each="model", some=True).criterion().startswith("x / y > 2, at least one model")


def test_a_declaration_is_judged_part_by_part_and_combined():
    parts = {"a": Spread.exact(0.5), "b": Spread(0.95, 0.8, 1.1), "c": Spread.exact(1.5)}
    every = _declared(claims.below(0.9), lambda df: claims.Measured(parts), each="model").judged(pd.DataFrame(), "cpu")
    assert every.held is False and every.ours == "a 0.5, b 0.95 (0.8-1.1), c 1.5" and "b: within noise" in every.note
    some = _declared(claims.below(0.9), lambda df: claims.Measured(parts), each="model", some=True)
    assert some.judged(pd.DataFrame(), "cpu").held is True
    two = {"a": Spread.exact(0.5), "b": Spread(0.95, 0.8, 1.1)}
    assert _declared(claims.below(0.9), lambda df: claims.Measured(two), each="model").judged(
        pd.DataFrame(), "cpu").held == claims.INCONCLUSIVE
    trend = _declared(claims.falls(), lambda df: claims.Measured({"a": [Spread.exact(2), Spread.exact(1)]},
                                                                   labels={"a": [1, 64]}))
    c = trend.judged(pd.DataFrame(), "cuda")
    assert c.held is True and c.ours == "a 2 -> 1"


def test_a_declaration_says_why_it_was_not_judged():
    df = pd.DataFrame({"gpu_util_pct": [float("nan")] * 2, "gpu_util_missing_reason": ["no NVML on a CPU"] * 2})
    gone = _declared(claims.below(1), lambda df: claims.missing(df, "gpu_util", "no point measured")).judged(df, "cpu")
    assert (gone.held, gone.ours, gone.note) == (None, "not measured", "no NVML on a CPU")
    assert claims.missing(pd.DataFrame({"a": [1]}), "gpu_util", "none measured") == "none measured"
    gpu = _declared(claims.below(1), lambda df: claims.Measured({"a": Spread.exact(0.5)}), gpu_only="CUDA allocator")
    on_cpu, on_gpu = gpu.judged(df, "cpu"), gpu.judged(df, "cuda:0")
    assert on_cpu.held is None and "a GPU claim (CUDA allocator)" in on_cpu.note and on_cpu.ours == "a 0.5"
    assert on_gpu.held is True
    beyond = _declared(claims.below(1), lambda df: claims.Measured({"a": Spread.exact(0.5)}), beyond=True)
    custom = lambda df, device: claims.Claim("c", "p", "o", True, str(device))  # noqa: E731
    assert [c.beyond for c in claims.check([beyond, custom], df, "cpu")] == [True, False]


def test_a_part_that_failed_is_named_in_the_note():
    parts = {"a": Spread.exact(0.5), "b": Spread.exact(1.5)}
    c = _declared(claims.below(0.9), lambda df: claims.Measured(parts), each="model").judged(pd.DataFrame(), "cpu")
    assert c.held is False and c.note == "b: did not hold"


def test_a_part_of_several_values_passes_once_and_a_shown_claim_is_not_judged():
    once = claims.above(2, unit="x", once=True)
    assert once.words() == "> 2x at least once"
    assert once({"batch 8": Spread.exact(1.5), "batch 16": Spread.exact(3)})[0] is True
    assert once([Spread.exact(1.5), Spread.exact(1.8)])[0] is False
    held, note = once({"batch 8": Spread(2.1, 1.5, 3), "batch 16": Spread.exact(1)})
    assert held == claims.INCONCLUSIVE and note.startswith("batch 8: within noise")
    d = _declared(claims.below(1), lambda df: claims.Measured({"a": Spread.exact(0.5)}), not_judged="settled by design")
    c = d.judged(pd.DataFrame(), "cuda")
    assert (c.held, c.note, c.ours) == (None, "settled by design", "a 0.5")
    assert c.criterion.startswith("not judged (see the note); the rule it would have: x / y < 1")


def test_no_study_writes_a_threshold_where_it_judges():
    """A threshold is a named constant of its study (or of cnnlab.claims), written once: no number other than 0, 1
    or 100 (no change, a ratio of one, a whole) is a literal argument of a test or judgement in cnnlab/studies/
    (``claims.below``/``above``/``within``/``same``, ``judge``, ``band``), so the criterion, the notebook and the
    test read one value (issue 32)."""
    import ast
    from pathlib import Path

    thresholds = {"judge": [2], "band": [1, 2], "below": [0], "above": [0], "within": [0, 1], "same": [0]}
    written = []
    for path in sorted((Path(claims.__file__).parent / "studies").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for i in thresholds.get(name, []):
                numbers = [c.value for c in ast.walk(node.args[i]) if isinstance(c, ast.Constant)
                           and type(c.value) in (int, float) and c.value not in (0, 1, 100)] if i < len(node.args) else []
                if numbers:
                    written.append(f"{path.name}:{node.lineno} {name}(... {ast.unparse(node.args[i])} ...)")
    assert written == [], f"name these thresholds once, as constants: {written}"


def test_same_passes_identical_work_only_as_inconclusive():
    control = claims.same(1.0, ".2f", "x")
    assert control.words() == "spans 1.00x (inconclusive), as identical work must"
    assert control(Spread(1.02, 0.8, 1.3))[0] == claims.INCONCLUSIVE
    for decided in (Spread(1.5, 1.3, 1.7), Spread(0.7, 0.6, 0.8)):  # faster or slower: the rule told them apart
        assert control(decided) == (False, "the noise rule failed its control: decided")


def test_checker_is_a_check_claims_that_judges_the_rows_it_is_given():
    rows = pd.DataFrame({"part": ["a", "b"], "x": [3.0, 0.5]})
    declared = claims.Declared("x is above 1", "Sec. 0", "x", claims.above(1.0),
                               lambda df: claims.Measured({p: Spread.exact(x) for p, x in zip(df["part"], df["x"])}),
                               each="part", noise="noise: none, exact")
    check_claims = claims.checker([declared])
    assert list(inspect.signature(check_claims).parameters) == ["df", "device"]
    (whole,) = check_claims(rows, "cpu")
    assert whole.held is False and "b: did not hold" in whole.note
    (only_a,) = claims.checker([declared], rows=lambda df: df[df["part"] == "a"])(rows, "cpu")
    assert only_a.held is True and only_a.ours == "a 3"


def test_ends_needs_every_step_and_the_ends_ratio():
    exact = [Spread.exact(v) for v in (10.0, 5.0, 2.0)]
    significant = claims.Ends(claims.below(0.9), claims.falls(), ends="largest / smallest tile")
    assert significant.words() == "falls at every step, and largest / smallest tile < 0.9"
    assert significant(exact, [8, 16, 32])[0] is True
    assert significant([Spread.exact(v) for v in (10.0, 11.0, 2.0)], [8, 16, 32])[0] is False  # a step up
    assert significant([Spread.exact(v) for v in (10.0, 9.5)], [8, 16])[0] is False  # down, not by a tenth
    slight_rise = claims.Ends(claims.within(1.0, 1.2), at="tile")
    assert slight_rise.words().startswith("never clearly falls, and last / first > 1")
    held, note = slight_rise([Spread.exact(v) for v in (1.0, 0.5, 1.1)], [8, 16, 32])
    assert held is False and note.startswith("clearly down at tile 8 -> 16")
    assert slight_rise([Spread(1.0, 0.8, 1.2), Spread(0.9, 0.7, 1.1), Spread(1.1, 1.05, 1.15)], [8, 16, 32])[0] \
        == INCONCLUSIVE  # no step clearly down; 1.1 / 1.0 spans 1
