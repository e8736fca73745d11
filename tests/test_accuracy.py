"""Tests for cnnlab.profiling.accuracy: Wilson and Newcombe intervals against the published values, their coverage,
and the counts behind an accuracy."""

import numpy as np
import pytest

from cnnlab.profiling import accuracy as acc


def test_wilson_and_newcombe_match_the_published_examples():
    # Newcombe, Stat. Med. 17:857 (1998), Table I: 81/263, score interval 0.2553-0.3662
    a = acc.accuracy(81, 263)
    assert (a.low, a.high) == pytest.approx((25.53, 36.62), abs=0.005) and a.value == pytest.approx(100 * 81 / 263)
    # 0/10 and 10/10: the interval stays inside 0-100% and is not a point (a Wald interval would be)
    zero, full = acc.accuracy(0, 10), acc.accuracy(10, 10)
    assert zero.low == 0 and zero.high == pytest.approx(27.75, abs=0.01) and full.high == 100 and full.low < 75
    # square-and-add (Newcombe, Stat. Med. 17:873, 1998, method 10) at equal n, checked against its formula on the
    # paper's 56/70 - 48/80 example recomputed at n = 70 and 80 by hand: 0.0524-0.3339
    pa, la, ua = acc._wilson(56, 70, acc.Z95)
    pb, lb, ub = acc._wilson(48, 80, acc.Z95)
    low = pa - pb - np.hypot(pa - la, ub - pb)
    high = pa - pb + np.hypot(ua - pa, pb - lb)
    assert (low, high) == pytest.approx((0.0524, 0.3339), abs=5e-5)


def test_a_difference_of_one_image_in_360_is_not_decided_and_pairing_narrows_it():
    unpaired = acc.difference(353, 352, 360)  # "int8 slightly greater" on 352 -> 353 correct
    assert unpaired.low < 0 < unpaired.high and unpaired.high - unpaired.low > 4  # about +-2.3 pp
    paired = acc.difference(353, 352, 360, only_a=1, only_b=0)  # they disagree on one image only
    assert unpaired.low < paired.low < 0 < paired.high < unpaired.high
    assert paired.value == unpaired.value == pytest.approx(100 / 360)
    # the same totals with many disagreements: wider than with one (the discordant images carry the noise)
    assert acc.difference(353, 352, 360, only_a=8, only_b=7).high > paired.high
    with pytest.raises(ValueError, match="do not fit"):
        acc.difference(353, 352, 360, only_a=1, only_b=1)


@pytest.mark.parametrize("paired", [False, True])
def test_the_difference_interval_covers_the_true_difference_at_least_at_its_level(paired):
    # two correlated classifiers on n images: A right with p 0.90, B right with 0.88, agreeing on most images
    rng = np.random.default_rng(0)
    n, trials, hits = 360, 2000, 0
    both, only_a, only_b = 0.86, 0.04, 0.02  # true difference: 2 pp
    for _ in range(trials):
        cells = rng.multinomial(n, [both, only_a, only_b, 1 - both - only_a - only_b])
        ca, cb = cells[0] + cells[1], cells[0] + cells[2]
        d = acc.difference(ca, cb, n, **(dict(only_a=cells[1], only_b=cells[2]) if paired else {}))
        hits += d.low <= 2.0 <= d.high
    assert hits / trials >= 0.93  # nominal 95%; the unpaired one, conservative here, covers more


def test_correct_count_undoes_the_percentage_and_refuses_a_fraction():
    assert acc.correct_count(100.0 * 353 / 360, 360) == 353
    with pytest.raises(ValueError, match="not a whole count"):
        acc.correct_count(89.7, 360)
