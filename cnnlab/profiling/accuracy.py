"""Test accuracy as a measurement with its interval: the test set is a sample, so an accuracy measured on ``n``
images is known only to within a binomial interval, however exactly the evaluation repeats.

- :func:`accuracy` -> :class:`Spread` (%): ``correct`` / ``total`` within its Wilson score interval;
- :func:`difference` -> :class:`Spread` (percentage points): accuracy A - accuracy B of two models evaluated on the
  same test set, within Newcombe's score interval for the difference: the paired one where the discordant images are
  counted, else the one for independent samples, which is wider (conservative) for two models whose mistakes agree;
- :func:`correct_count`: the number of correct images behind an ``accuracy_pct`` of ``total`` images.

Why these: the Wilson score interval keeps close to its nominal coverage near 0% and 100% and for a few hundred
images, where the normal (Wald) interval p +- z sqrt(p(1-p)/n) undercovers and collapses to a point at 100%
(Brown, Cai and DasGupta, Stat. Sci. 16, 2001). A difference of two accuracies on the same images is a difference
of paired proportions: only the images the two models disagree on move it, so its interval comes from the
discordant counts (Newcombe, Stat. Med. 17:2635, 1998, method 10: the two Wilson intervals combined with the
correlation of the pairs). Where only the two totals are recorded, the square-and-add interval for independent
samples (Newcombe, Stat. Med. 17:873, 1998, method 10) is used: two versions of one trained model err on mostly the
same images (positive correlation), which makes the true interval narrower, so this one errs on the wide side.
"""

from __future__ import annotations

import math

from cnnlab.profiling.spread import Spread

Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval
LEVEL = "95%"
METHOD = (f"Wilson {LEVEL} score interval of correct / total test images; a difference on the same test set: "
          f"Newcombe's {LEVEL} score interval (paired from the discordant images where counted, else for "
          "independent samples: wider)")
RULE = (f"noise: the test set is a sample of images, so each accuracy carries its interval ({METHOD}); decided only "
        "when the whole interval is on one side of the bound, else inconclusive")

# The rule of every claim on two models scored on the same items (the discordant counts recorded): paired_exact
PAIRED_RULE = ("noise: the test set is a sample of items; two models scored on the same items are told apart only by "
               "the items one gets right and the other wrong: an exact McNemar-type 95% interval of the difference "
               "from those counts (accuracy.paired_exact; where they disagree on none, +- the discordance rate's upper "
               "bound), else, where they were not counted, Newcombe's unpaired interval (wider); decided only when "
               "the whole interval is on one side of the bound, else inconclusive")


def _wilson(correct: int, total: int, z: float) -> tuple[float, float, float]:
    """(p, low, high) as fractions."""
    p = correct / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return p, min(max(centre - half, 0.0), p), max(min(centre + half, 1.0), p)


def _counts(correct, total) -> tuple[int, int]:
    correct, total = int(correct), int(total)
    if total <= 0 or not 0 <= correct <= total:
        raise ValueError(f"correct={correct}, total={total}: needs 0 <= correct <= total and total > 0")
    return correct, total


def correct_count(accuracy_pct: float, total: int) -> int:
    """The correct images behind ``accuracy_pct`` (%) of ``total`` images (an accuracy is a count over the total;
    rounding undoes the division)."""
    total = int(total)
    count = round(float(accuracy_pct) * total / 100.0)
    if total <= 0 or not 0 <= count <= total or abs(count - float(accuracy_pct) * total / 100.0) > 1e-6 * total:
        raise ValueError(f"accuracy_pct={accuracy_pct} of total={total} images is not a whole count")
    return count


def accuracy(correct: int, total: int, z: float = Z95) -> Spread:
    """Accuracy in % (``correct`` / ``total``) within its Wilson score interval (95% by default)."""
    p, low, high = _wilson(*_counts(correct, total), z)
    return Spread(100 * p, 100 * low, 100 * high)


def difference(correct_a: int, correct_b: int, total: int, *, only_a: int | None = None,
               only_b: int | None = None, z: float = Z95) -> Spread:
    """Accuracy A - accuracy B in percentage points, both on the same ``total`` test images, within Newcombe's
    score interval: paired (method 10 of Stat. Med. 17:2635) when ``only_a`` (images A gets right and B wrong) and
    ``only_b`` (the reverse) are given, else for independent samples (square-and-add of the two Wilson intervals,
    method 10 of Stat. Med. 17:873), which is the wider for two models that err on the same images."""
    (ca, n), (cb, _) = _counts(correct_a, total), _counts(correct_b, total)
    pa, la, ua = _wilson(ca, n, z)
    pb, lb, ub = _wilson(cb, n, z)
    phi = 0.0
    if only_a is not None or only_b is not None:
        b, c = int(only_a), int(only_b)
        both = ca - b
        neither = n - ca - c
        if min(b, c, both, neither) < 0 or cb != both + c:
            raise ValueError(f"only_a={only_a}, only_b={only_b} do not fit correct_a={ca}, correct_b={cb}, total={n}")
        # the phi coefficient of the 2x2 table (A right?, B right?); 0 where a margin is empty
        denom = math.sqrt(float(ca) * (n - ca) * cb * (n - cb))
        phi = (both * neither - b * c) / denom if denom > 0 else 0.0
    d = pa - pb
    below = math.sqrt(max((pa - la) ** 2 - 2 * phi * (pa - la) * (ub - pb) + (ub - pb) ** 2, 0.0))
    above = math.sqrt(max((ua - pa) ** 2 - 2 * phi * (ua - pa) * (pb - lb) + (pb - lb) ** 2, 0.0))
    return Spread(100 * d, 100 * max(d - below, -1.0), 100 * min(d + above, 1.0))


def text(x: Spread, unit: str = " pp", signed: bool = True) -> str:
    """E.g. "+0.28 pp (95%: -2.01 to +2.60 pp)": an accuracy or a difference with its interval."""
    f = "+.2f" if signed else ".2f"
    return f"{x.value:{f}}{unit} ({LEVEL}: {x.low:{f}} to {x.high:{f}}{unit})"


def paired_exact(only_a: int, only_b: int, total: int, confidence: float = 0.95) -> Spread:
    """Accuracy A - accuracy B in percentage points of two models scored on the same ``total`` items, within an exact
    McNemar-type interval. The difference is D x (2 share - 1), where D is the rate of discordant items (A right and
    B wrong, ``only_a``, or the reverse, ``only_b``) and share the part of them A gets right; each gets its exact
    Clopper-Pearson interval (``scipy.stats.binomtest``) at half the leftover level (Bonferroni), and the difference
    ranges over both. Where the models agree on every item the share is unknown (0 to 1) and the interval is
    +-D's upper end: 0 of 360 images changed still allows a 1% discordance rate in the population the test set samples.
    (Conditioning on the discordant count alone would give exactly 0 there, as if the test set were the population.)"""
    import scipy.stats

    b, c, n = int(only_a), int(only_b), int(total)
    if n <= 0 or min(b, c) < 0 or b + c > n:
        raise ValueError(f"only_a={only_a}, only_b={only_b}, total={total}: need counts >= 0 with only_a + only_b <= "
                         f"total > 0")
    m, level = b + c, 1 - (1 - confidence) / 2
    rate = scipy.stats.binomtest(m, n).proportion_ci(confidence_level=level, method="exact")
    share = (scipy.stats.binomtest(b, m).proportion_ci(confidence_level=level, method="exact") if m else None)
    share_low, share_high = (share.low, share.high) if share else (0.0, 1.0)
    # D >= 0: the least difference takes the most discordance where the share is below 1/2, the least where above
    low = (rate.high if share_low < 0.5 else rate.low) * (2 * share_low - 1)
    high = (rate.high if share_high > 0.5 else rate.low) * (2 * share_high - 1)
    d = (b - c) / n
    return Spread(100 * d, 100 * min(low, d), 100 * max(high, d))


def smallest_decidable_pp(total: int, confidence: float = 0.95) -> float:
    """The smallest accuracy difference (percentage points) that :func:`paired_exact` can tell from 0 on ``total``
    items: every discordant item one way, and enough of them that 1/2 lies outside the share's Clopper-Pearson
    interval at its level (0.5**k <= (1 - confidence) / 4)."""
    k = math.ceil(math.log2(4 / (1 - confidence)) - 1e-12)
    return 100 * k / int(total)
