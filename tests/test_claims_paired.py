"""cnnlab.claims on paired quantities: a step judged by its round-by-round ratio, alpha split over the parts of a
claim (Holm/Bonferroni), and a study's rounds extended until its claims are decided."""

from __future__ import annotations

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pytest

from cnnlab import claims
from cnnlab.claims import INCONCLUSIVE, Claim
from cnnlab.profiling.accuracy import paired_exact, smallest_decidable_pp
from cnnlab.profiling.compare import Paired, until_decided

DRIFT = [1.0, 3.0, 1.5, 2.5, 1.2, 2.8, 1.1, 2.9, 1.4, 2.2, 1.3, 2.6]  # a load that drifts 3x between rounds


def test_a_step_of_paired_rounds_is_judged_by_its_ratio_not_by_the_overlap():
    a = Paired.of(DRIFT, 0.95)
    b = Paired.of([t * 1.1 for t in DRIFT], 0.95)
    # the two intervals overlap almost wholly, but every round is 1.1x: clearly up
    assert a.high > b.low
    assert claims.trend([a, b], "up") == (True, "")
    assert claims.trend([b, a], "up")[0] is False
    # unpaired quantities keep the overlap rule
    assert claims.trend([claims.Spread(1, 0.5, 3), claims.Spread(1.1, 0.6, 3.3)], "up")[0] == INCONCLUSIVE


def test_at_least_one_part_spends_alpha_over_the_parts():
    # each part: 7 of 8 rounds above 1.2 (at 95% over 8 rounds the interval is the least to the most)
    parts = [(f"m{i}", Paired.of([1.3] * 9 + [1.25], 0.95)) for i in range(3)]
    test = claims.above(1.2)
    # every part is clearly above at 95%; "at least one" judges at 1 - 0.05/3, where 10 rounds still decide
    assert claims.several(parts, test, some=True)[0] is True
    few = [(f"m{i}", Paired.of([1.3] * 6, 0.95)) for i in range(3)]
    # 6 rounds decide at 95% (2/64 <= 0.05) but not at 1 - 0.05/3: at-least-one of three is then undecided
    assert test(few[0][1])[0] is True
    assert claims.several(few, test, some=True)[0] == INCONCLUSIVE
    # every part must hold: each at its own level (no correction needed)
    assert claims.several(few, test, some=False)[0] is True


def test_one_failed_part_among_several_is_decided_at_the_split_level():
    test = claims.above(1.0)
    few = [("a", Paired.of([1.3] * 6, 0.95)), ("b", Paired.of([0.8] * 6, 0.95))]
    # b is below 1 at 95%, but "one of two failed" needs 1 - 0.05/2: 6 rounds cannot, so not "did not hold"
    held, note = claims.several(few, test)
    assert held == INCONCLUSIVE and "b" in note
    many = [("a", Paired.of([1.3] * 12, 0.95)), ("b", Paired.of([0.8] * 12, 0.95))]
    assert claims.several(many, test)[0] is False


def test_decided_means_no_claim_is_inconclusive():
    c = [Claim("x", "p", "o", True, "cpu"), Claim("y", "p", "o", None, "cpu", note="n/a here")]
    assert claims.decided(c)
    assert not claims.decided(c + [Claim("z", "p", "o", INCONCLUSIVE, "cpu", note="within noise")])


def test_rounds_are_added_until_decided_and_no_further():
    seen = []

    def run(n, level):
        seen.append((n, round(level, 4)))
        return n

    assert until_decided(run, lambda n: n >= 12, min_rounds=8, max_rounds=24) == 12
    assert seen == [(8, 0.9875), (12, 0.9875)]
    seen.clear()
    assert until_decided(run, lambda n: False, min_rounds=8, max_rounds=18) == 18
    assert [n for n, _ in seen] == [8, 12, 18]


def test_the_exact_paired_accuracy_interval():
    # 30 items only A gets right, 10 only B, of 500: +4 pp, decided above 0
    d = paired_exact(30, 10, 500)
    assert d.value == pytest.approx(4.0) and 0 < d.low < 4 < d.high
    # identical predictions on 360 images: no difference seen, but a discordance rate of up to ~1% is not ruled out
    same = paired_exact(0, 0, 360)
    assert same.value == 0 and -1.3 < same.low < -0.9 and 0.9 < same.high < 1.3
    # on 5,000 items the same agreement bounds the difference within 0.1 pp
    assert paired_exact(0, 0, 5000).high < 0.1
    # 6 discordant items all one way cannot decide at 95% (0.5**6 > 0.05 / 4), 7 can
    assert paired_exact(6, 0, 360).low < 0 < paired_exact(7, 0, 360).low
    assert smallest_decidable_pp(360) == pytest.approx(100 * 7 / 360)
    with pytest.raises(ValueError, match="only_a=5, only_b=6, total=10"):
        paired_exact(5, 6, 10)


def test_an_inconclusive_claim_says_what_it_could_have_decided():
    noisy = Paired.of([0.95, 1.1, 1.02, 0.97, 1.08, 1.01, 0.99, 1.05], 0.95)
    d = claims.Declared("b is slower", "p", "b / a", claims.above(1.0), lambda df: claims.Measured({"b": noisy}))
    c = d.judged(None, "cpu")
    assert c.held == INCONCLUSIVE
    # the interval is the least to the most round (8 rounds): 0.95-1.1 around 1.015
    assert "smallest effect decidable here: a value x1.08 or more from the bound after 8 rounds" in c.note
    assert "the standard preset (up to 48 rounds) would narrow that to about x1.03" in c.note
    decided = claims.Declared("b is slower", "p", "b / a", claims.above(1.0),
                              lambda df: claims.Measured({"b": Paired.of([1.2] * 8, 0.95)})).judged(None, "cpu")
    assert decided.held is True and "smallest effect" not in decided.note
