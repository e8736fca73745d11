"""The paper's claim beside ours: every study notebook ends with this table.

A claim is checked on the hardware at hand; it may hold or not. ``held`` is True, False, :data:`INCONCLUSIVE`
when the measurements it compares overlap within their noise, or None when the claim does not apply here (e.g. a
GPU-only claim on a CPU), and ``note`` then says why. ``criterion`` is the rule that decided ``held``, in words and
numbers ("fp16 / fp32 time per batch < 0.9"), and names its noise rule, so that a reader can see the check could
have come out the other way.

The noise rule, the same for every claim (:func:`judge`, :func:`trend`, :func:`several`; :data:`NOISE_RULE` words
it in every criterion): a measured quantity is a :class:`Spread`, its value within the interval its noise allows. A
claim holds only when the whole interval clears the threshold, fails only when the whole interval is on the other
side, and is otherwise "inconclusive: within noise", with the interval shown and what it could have decided
(:func:`reach`). Times that a claim compares are paired rounds (``cnnlab.profiling.compare``: the sign test's
confidence interval of the median per-round ratio, more rounds while a claim is undecided, alpha split over the looks
and over a claim's parts); an absolute time keeps the between-process allowance ``TIME_NOISE``; accuracies on the
same items come with an exact paired interval (``cnnlab.profiling.accuracy.paired_exact``). docs/claims.md says why.

A notebook shows its claims once, with :func:`cnnlab.report.show`: every cell in full and wrapped (an HTML table in
Jupyter and in its HTML export, numbered paragraphs in plain text), never cut at pandas' 50 characters.
"""

from __future__ import annotations

import html
import math
import textwrap
from dataclasses import asdict, dataclass, replace
from typing import Mapping, Sequence

import pandas as pd

from cnnlab.profiling.compare import NoRounds, Paired, spent
from cnnlab.profiling.spread import TIME_NOISE, Spread  # noqa: F401  (a measurement; re-exported here)

INCONCLUSIVE = "inconclusive"
# The papers' words without numbers, read once for the whole workbook (each study's constants derive from these):
SLIGHT = 0.2  # "slight", "little": a change of at most a fifth (a rise of more than a fifth is not slight)
FAR_ABOVE = 2.0  # "far above": more than twice
ONE_ROUND = "one timing round: no range to judge the noise by, not judged (timing_rounds >= 2 judges it)"
NOISE_RULE = ("noise: decided only when the whole interval is on one side, else inconclusive; times compared in paired "
              "rounds (every variant once a round, the order alternating): the median of the rounds' ratios within "
              "the sign test's 95% confidence interval, alpha split over the looks at the rounds and over the claim's "
              "parts; an absolute time: the least to the most of its rounds' medians, never narrower than its median "
              f"/{TIME_NOISE:g} to x{TIME_NOISE:g} (another process's time of the same work can be that far off); "
              "other quantities: exact, or the interval stated with them")


def named(name: str, verdict: tuple[bool | str | None, str]) -> tuple[bool | str | None, str]:
    """A (held, note) verdict with ``name`` in front of its note ("resnet20: within noise: ..."), so that a claim of
    many parts says which part's interval spans its threshold; an empty note stays empty."""
    held, note = verdict
    return held, f"{name}: {note}" if note else ""


def joined(*notes: str | None) -> str:
    """The non-empty ``notes`` joined with "; ": a claim's note from parts that may be empty ("" when all are)."""
    return "; ".join(n for n in notes if n)


def judge(x: Spread, op: str, threshold: float, *, fmt: str = ".3g", unit: str = "") -> tuple[bool | str, str]:
    """(held, note) of "``x`` ``op`` ``threshold``" (op ">" or "<") by the noise rule: True when the whole
    interval is on the claimed side, False when the whole interval is on the other side (or on the threshold),
    else :data:`INCONCLUSIVE` with a note showing the overlap; the note is empty when decided."""
    if op not in (">", "<"):
        raise ValueError(f"op={op!r}: valid: '>', '<'")
    above, below = x.low > threshold, x.high < threshold
    if (op == ">" and above) or (op == "<" and below):
        return True, ""
    if (op == ">" and x.high <= threshold) or (op == "<" and x.low >= threshold):
        return False, ""
    return INCONCLUSIVE, (f"within noise: {x.text(fmt, unit)} spans the threshold {threshold:{fmt}}{unit}")


def step(a: Spread, b: Spread) -> tuple[bool, bool]:
    """(up, down) of the step from ``a`` to ``b``, each True only when clear: two quantities of the same paired rounds
    (:class:`~cnnlab.profiling.compare.Paired`) by their round-by-round ratio's interval (b / a clear of 1), others by
    their intervals (the next clear of the previous)."""
    if isinstance(a, Paired) and isinstance(b, Paired) and len(a.samples) == len(b.samples):
        r = b / a
        return r.low > 1, r.high < 1
    return b.low > a.high, b.high < a.low


def trend(xs: Sequence[Spread], direction: str = "up", *, labels: Sequence | None = None,
          fmt: str = ".3g", unit: str = "") -> tuple[bool | str, str]:
    """(held, note) of "``xs`` rise (direction "up") or fall ("down") at every step": True when every step moves
    the claimed way clearly (:func:`step`), False when any step clearly moves the other way or stays put between two
    equal exact quantities, else :data:`INCONCLUSIVE`, naming the steps that are not decided. All steps are judged
    together: each must hold for the trend to hold (no correction needed), and a step the other way, one among
    several, is decided at the level its rounds' alpha split over the steps gives (Bonferroni; Holm's first step)."""
    if direction not in ("up", "down"):
        raise ValueError(f"direction={direction!r}: valid: 'up', 'down'")
    if len(xs) < 2:
        raise ValueError("trend: needs at least two measurements")
    labels = list(labels) if labels is not None else list(range(len(xs)))
    overlapping, wrong = [], []
    wide = spent(list(xs), len(xs) - 1)  # for a step the other way: one of len - 1 steps
    for (a, la, wa), (b, lb, wb) in zip(zip(xs, labels, wide), zip(xs[1:], labels[1:], wide[1:])):
        up, down = step(a, b)
        if (direction == "up" and up) or (direction == "down" and down):
            continue
        text = f"{la} -> {lb}: {a.text(fmt, unit)} -> {b.text(fmt, unit)}"
        wide_up, wide_down = step(wa, wb)
        flat = a.low == a.high == b.low == b.high  # two exact quantities, equal: clearly no step
        against = wide_down if direction == "up" else wide_up
        (wrong if (against or flat) else overlapping).append(text)
    if wrong:
        return False, ""
    if overlapping:
        return INCONCLUSIVE, "within noise at " + "; ".join(overlapping)
    return True, ""


def band(x: Spread, low: float, high: float, *, fmt: str = ".3g", unit: str = "") -> tuple[bool | str, str]:
    """(held, note) of "``low`` < ``x`` < ``high``" by the noise rule: held when the whole interval is inside, did not
    hold when the whole interval is at or beyond either end, else inconclusive; where the interval is wider than the
    band itself, the note says the claim cannot be decided at this noise (it could only be refuted)."""
    held, note = all_of(judge(x, ">", low, fmt=fmt, unit=unit), judge(x, "<", high, fmt=fmt, unit=unit))
    if held == INCONCLUSIVE and x.low <= low and x.high >= high:
        note = joined(note, f"cannot be decided at this noise: the interval {x.text(fmt, unit)} is wider than the band "
                            f"{low:{fmt}}-{high:{fmt}}{unit}; only a value clear of the band decides")
    return held, note


def all_of(*verdicts: tuple[bool | str | None, str]) -> tuple[bool | str | None, str]:
    """(held, note) of a claim that needs every part: False if any part failed, inconclusive if any part is
    (and none failed), None if none applies, else True; the parts' notes joined."""
    held = [h for h, _ in verdicts if h is not None]
    notes = "; ".join(n for _, n in verdicts if n)
    if not held:
        return None, notes
    if any(h is False for h in held):
        return False, notes
    if any(h == INCONCLUSIVE for h in held):
        return INCONCLUSIVE, notes
    return True, notes


def any_of(*verdicts: tuple[bool | str | None, str]) -> tuple[bool | str | None, str]:
    """(held, note) of a claim that needs one of its parts ("sometimes", "not always"): True if any part held,
    else inconclusive if any part is, else False; None if no part applies; the undecided parts' notes joined."""
    held = [h for h, _ in verdicts if h is not None]
    notes = "; ".join(n for _, n in verdicts if n)
    if not held:
        return None, notes
    if any(h is True for h in held):
        return True, ""
    return (INCONCLUSIVE, notes) if any(h == INCONCLUSIVE for h in held) else (False, "")


@dataclass
class Claim:
    claim: str      # what the paper says, in a few words
    paper: str      # the paper's figure or number, as it reports it
    ours: str       # what we measured, with units
    held: bool | str | None  # True, False, INCONCLUSIVE (within noise) or None (does not apply here)
    device: str
    criterion: str = ""  # the rule that decides ``held``, e.g. "best / batch-1 throughput > 2", and its noise rule
    note: str = ""
    beyond: bool = False  # a check of ours that the paper does not claim ("beyond the paper"): shown apart

    def __post_init__(self):
        if isinstance(self.held, str):
            if self.held != INCONCLUSIVE:
                raise ValueError(f"claim {self.claim!r}: held={self.held!r}; valid: True, False, None, "
                                 f"{INCONCLUSIVE!r}")
            if not self.note:
                raise ValueError(f"claim {self.claim!r}: an inconclusive verdict needs a note showing the overlap")
        elif self.held is not None:
            self.held = bool(self.held)  # numpy bools print as np.True_
        if self.held is None and not self.note:
            raise ValueError(f"claim {self.claim!r}: held=None needs a note saying why it does not apply")


# --- Claims as declarations: what is claimed, on which quantity, by which test; :func:`check` judges them. ---

@dataclass(frozen=True)
class Test:
    """How a quantity is judged, by the noise rule: ``below``/``above`` a threshold, ``within`` a band, or a
    ``rises``/``falls`` trend over a sequence; it writes its own words for the criterion, so a threshold is stated once
    (where the test is declared). Build one with :func:`below`, :func:`above`, :func:`within`, :func:`rises`,
    :func:`falls`."""

    kind: str
    low: float = math.nan
    high: float = math.nan
    fmt: str = ".3g"
    unit: str = ""
    once: bool = False  # a part is several values ({label: Spread}): it passes when one of them does

    def words(self) -> str:
        f, u = self.fmt, self.unit
        return {"below": f"< {self.high:{f}}{u}", "above": f"> {self.low:{f}}{u}",
                "within": f"> {self.low:{f}}{u} and < {self.high:{f}}{u}", "rises": "rises at every step",
                "falls": "falls at every step", "same": f"spans {self.low:{f}}{u} (inconclusive), as identical work "
                "must"}[self.kind] + (" at least once" if self.once else "")

    def __call__(self, x, labels=None) -> tuple[bool | str | None, str]:
        if self.once:  # held when one value is clear, did not hold when every one is clearly on the other side
            one = replace(self, once=False)
            items = list(x.items() if isinstance(x, Mapping) else enumerate(x))
            return several(items, one, some=True, say_failed=False)
        kw = {"fmt": self.fmt, "unit": self.unit}
        if self.kind in ("rises", "falls"):
            return trend(list(x), "up" if self.kind == "rises" else "down", labels=labels, **kw)
        if self.kind == "within":
            return band(x, self.low, self.high, **kw)
        if self.kind == "same":  # a control: the noise rule must not tell identical work apart
            held, note = judge(x, ">", self.low, **kw)
            return (held, note) if held == INCONCLUSIVE else (False, "the noise rule failed its control: decided")
        return judge(x, "<" if self.kind == "below" else ">", self.high if self.kind == "below" else self.low, **kw)


def below(threshold: float, fmt: str = ".3g", unit: str = "", *, once: bool = False) -> Test:
    """The quantity is below ``threshold`` (its whole interval, by the noise rule); ``once``: a part is several
    values, one of which must be below ("sometimes", "can")."""
    return Test("below", high=threshold, fmt=fmt, unit=unit, once=once)


def above(threshold: float, fmt: str = ".3g", unit: str = "", *, once: bool = False) -> Test:
    """The quantity is above ``threshold`` (``once``: one of a part's values, as :func:`below`)."""
    return Test("above", low=threshold, fmt=fmt, unit=unit, once=once)


def within(low: float, high: float, fmt: str = ".3g", unit: str = "") -> Test:
    """``low`` < the quantity < ``high`` (:func:`band`: undecidable where the interval is wider than the band)."""
    return Test("within", low=low, high=high, fmt=fmt, unit=unit)


def same(value: float, fmt: str = ".3g", unit: str = "") -> Test:
    """A control: the same work measured twice, its ratio ``value`` (1) within noise. Inconclusive is the pass (the
    claim stays inconclusive); a decided verdict does not hold: the noise rule told identical work apart."""
    return Test("same", low=value, fmt=fmt, unit=unit)


def rises(fmt: str = ".3g", unit: str = "") -> Test:
    """A sequence of quantities rises at every step, each clear of the previous (:func:`trend`)."""
    return Test("rises", fmt=fmt, unit=unit)


def falls(fmt: str = ".3g", unit: str = "") -> Test:
    """A sequence of quantities falls at every step, each clear of the previous."""
    return Test("falls", fmt=fmt, unit=unit)


@dataclass(frozen=True)
class Ends:
    """A sequence judged at every step and at its ends, both needed ("falls significantly": every step down, and the
    last value / the first below a bound): ``steps`` a :func:`rises` or :func:`falls` test (None: no step may clearly
    fall), ``ratio`` a :func:`below`, :func:`above` or :func:`within` test of the last value / the first; ``ends``
    names that ratio in the criterion, ``at`` what a step's labels are ("tile": "clearly down at tile 8 -> 16")."""

    ratio: Test
    steps: Test | None = None
    ends: str = "last / first"
    at: str = ""

    @property
    def fmt(self) -> str:
        return (self.steps or self.ratio).fmt

    @property
    def unit(self) -> str:
        return (self.steps or self.ratio).unit

    def words(self) -> str:
        return f"{self.steps.words() if self.steps else 'never clearly falls'}, and {self.ends} {self.ratio.words()}"

    def __call__(self, xs, labels=None) -> tuple[bool | str | None, str]:
        xs, labels = list(xs), list(labels) if labels is not None else list(range(len(xs)))
        down = ", ".join(f"{a} -> {b}" for a, b, x, y in zip(labels, labels[1:], xs, xs[1:]) if y.high < x.low)
        at = f"{self.at} " if self.at else ""
        steps = self.steps(xs, labels) if self.steps else (not down, down and f"clearly down at {at}{down}")
        return all_of(steps, self.ratio(xs[-1] / xs[0]))


@dataclass
class Measured:
    """What a declaration's ``measure`` found: ``parts`` {name: a Spread, or a sequence of them for a trend} judged
    one by one and combined by the declaration's ``some``; ``labels`` {name: a trend's step labels}; ``ours`` the
    value in words (default: every part's interval); ``note`` said beside the verdict."""

    parts: Mapping[str, object]
    ours: str = ""
    note: str = ""
    labels: Mapping[str, Sequence] | None = None


@dataclass(frozen=True)
class Declared:
    """One claim, declared: ``claim`` (what is claimed, a few words), ``paper`` (the paper's words with its section),
    ``quantity`` (what we judge, in words), ``test`` (how), ``measure`` (df -> :class:`Measured`, or a string saying
    why nothing was measured: :func:`missing`), over ``each`` part (e.g. "model": every model must pass, or at least
    one with ``some``). ``bound`` says whose threshold it is ("our bound, the paper gives none"); ``gpu_only`` is why
    the claim is a GPU's (on another device the value is shown and the verdict is n/a); ``beyond``: a check of ours
    that the paper does not make. The criterion is written from these, with :data:`NOISE_RULE` or ``noise``."""

    claim: str
    paper: str
    quantity: str
    test: Test
    measure: object
    each: str = ""
    some: bool = False
    bound: str = ""
    noise: str = NOISE_RULE
    gpu_only: str = ""
    beyond: bool = False
    not_judged: str = ""  # why the claim is shown and not judged (settled by design, not our quantity): n/a

    def criterion(self) -> str:
        over = f", {'at least one' if self.some else 'every'} {self.each}" if self.each else ""
        bound = f" ({self.bound})" if self.bound else ""
        shown = "not judged (see the note); the rule it would have: " if self.not_judged else ""
        return f"{shown}{self.quantity} {self.test.words()}{over}{bound}; {self.noise}"

    def judged(self, df: pd.DataFrame, device) -> Claim:
        dev, criterion = str(device), self.criterion()
        try:
            m = self.measure(df)
        except NoRounds as err:  # e.g. a stored table from before paired rounds: said, not judged
            m = str(err)
        if isinstance(m, str) or not m.parts:
            note = m if isinstance(m, str) else joined(m.note, "nothing measured to judge")
            return Claim(self.claim, self.paper, "not measured", None, dev, criterion, note, self.beyond)
        ours = m.ours or ", ".join(f"{k} {_value_text(v, self.test)}" for k, v in m.parts.items())
        if self.not_judged:
            return Claim(self.claim, self.paper, ours, None, dev, criterion, joined(self.not_judged, m.note),
                         self.beyond)
        if self.gpu_only and not dev.startswith("cuda"):
            return Claim(self.claim, self.paper, ours, None, dev, criterion,
                         joined(f"a GPU claim ({self.gpu_only}); the value here is shown for reference", m.note),
                         self.beyond)
        labels = m.labels or {}
        held, note = several(list(m.parts.items()), self.test, some=self.some, labels=labels, name=bool(self.each),
                             say_failed=bool(self.each))
        if held == INCONCLUSIVE:
            note = joined(note, reach(m.parts.values(), self.test))
        return Claim(self.claim, self.paper, ours, held, dev, criterion, joined(note, m.note), self.beyond)


def _half_widths(x) -> list[tuple[float, bool, int]]:
    """(half-width, relative, rounds) of each quantity in ``x`` (a Spread, a trend's sequence: its steps' paired
    ratios, or a mapping of them): relative (a factor, for positive ratios and times) or absolute (in the unit)."""
    if isinstance(x, Mapping):
        return [w for v in x.values() for w in _half_widths(v)]
    if isinstance(x, Sequence) and not isinstance(x, Spread):
        xs = list(x)
        steps = [b / a for a, b in zip(xs, xs[1:]) if isinstance(a, Paired) and isinstance(b, Paired)]
        return [w for r in (steps or xs) for w in _half_widths(r)]
    if not isinstance(x, Spread) or x.low == x.high:
        return []
    rounds = x.rounds if isinstance(x, Paired) else 0
    if x.low > 0:
        return [(max(x.high / x.value, x.value / x.low), True, rounds)]
    return [(max(x.high - x.value, x.value - x.low), False, rounds)]


def reach(parts, test: "Test") -> str:
    """What an inconclusive claim's intervals could have decided: the smallest effect, as a distance from its bound
    (its widest interval's half-width: a value further from the bound than that would have been decided), and whether
    the standard preset would decide it: paired rounds narrow about as 1 / sqrt(rounds), so up to its most rounds
    (``cnnlab.contract.MAX_ROUNDS``) the half-width shrinks by sqrt(rounds here / rounds there)."""
    from cnnlab.contract import MAX_ROUNDS

    widths = [w for x in parts for w in _half_widths(x)]
    if not widths:
        return ""
    half, relative, rounds = max(widths, key=lambda w: w[0] if not w[1] else math.log(w[0]))
    unit = test.unit if test.unit != "x" else ""
    effect = f"x{half:.3g}" if relative else f"{half:.3g}{unit}"
    said = f"smallest effect decidable here: a value {effect} or more from the bound"
    if not rounds:
        return f"{said} (not paired rounds: the standard preset decides more only through its larger sample)"
    standard = MAX_ROUNDS.values()["standard"]
    if rounds >= standard:
        return f"{said} after {rounds} rounds; the standard preset (at most {standard} rounds) would not narrow it"
    shrink = math.sqrt(rounds / standard)
    then = f"x{half ** shrink:.3g}" if relative else f"{half * shrink:.3g}{unit}"
    return (f"{said} after {rounds} rounds; the standard preset (up to {standard} rounds) would narrow that to about "
            f"{then}: it decides only if the true value is further from the bound than that")


def several(parts: Sequence[tuple], test, *, some: bool = False, labels: Mapping | None = None,
            name: bool = True, say_failed: bool = True) -> tuple[bool | str | None, str]:
    """(held, note) of a claim over several ``parts`` ((name, quantity) pairs, each judged by ``test``): every part
    (``some`` False) or at least one (``some`` True), with the error rate kept over the parts. A verdict that needs
    every part decided one way (all held, or all failed) judges each at its own level (an intersection-union test needs
    no correction); one that follows from a single part ("at least one held", "one failed") judges the parts at
    their level with alpha split over them: Bonferroni, which for at-least-one is Holm's step-down (it rejects some
    part exactly when the smallest p-value is at most alpha / parts). Only paired quantities (:class:`Paired`) have a
    level to split; exact ones and times with a fixed allowance are judged as they are. ``name``: each part's note
    names it; ``say_failed``: a failed part's note says so."""
    labels = labels or {}

    def judged(x, k):
        v = test(x, labels.get(k))
        return named(str(k), _failed_said(v) if say_failed else v) if name else v
    own = [judged(x, k) for k, x in parts]
    wide = [judged(spent(x, len(parts)), k) for k, x in parts]
    if some:  # held on one part decided at the split level; failed when every part failed at its own
        held, note = any_of(*wide)
        if held is True:
            return held, note
        held, note = any_of(*own)
        return (INCONCLUSIVE, f"held at one part's own level, not at the level split over {len(parts)} parts") \
            if held is True else (held, note)
    held, note = all_of(*own)  # failed on one part decided at the split level; held when every part held at its own
    if held is False and not any(h is False for h, _ in wide):
        return all_of(*[(INCONCLUSIVE, n or "undecided at the level split over the parts") if h is False else (h, n)
                        for (h, n) in own])
    return held, note


def _failed_said(verdict: tuple) -> tuple:
    """A part's verdict whose failure says so, so that a claim of many parts names the part that failed."""
    held, note = verdict
    return held, note or ("did not hold" if held is False else "")


def _value_text(v, test: Test) -> str:
    if isinstance(v, Spread):
        return v.text(test.fmt, test.unit)
    if isinstance(v, Mapping):
        return ", ".join(f"{k} {x.text(test.fmt, test.unit)}" for k, x in v.items())
    return " -> ".join(x.text(test.fmt, test.unit) for x in v)


def decided(claims: Sequence[Claim]) -> bool:
    """Whether none of ``claims`` is inconclusive (n/a and settled claims count as decided): what
    :func:`cnnlab.profiling.compare.until_decided` asks before it adds rounds."""
    return not any(c.held == INCONCLUSIVE for c in claims)


def missing(df: pd.DataFrame, column: str, otherwise: str) -> str:
    """Why ``column`` was not measured: the distinct ``<column>_missing_reason``s of ``df`` (at most three named),
    else ``otherwise``."""
    col = f"{column}_missing_reason"
    reasons = sorted(set(df[col].dropna())) if col in df else []
    more = f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else ""
    return "; ".join(reasons[:3]) + more if reasons else otherwise


def check(declarations: Sequence, df: pd.DataFrame, device) -> list[Claim]:
    """Every declaration judged on ``df`` (a :class:`Declared`, or a function ``(df, device) -> Claim`` for a claim
    that needs its own judging), in order."""
    return [d.judged(df, device) if isinstance(d, Declared) else d(df, device) for d in declarations]


def checker(declarations: Sequence, rows=None):
    """A study's ``check_claims(df, device) -> list[Claim]``: ``declarations`` judged by :func:`check` on ``df``, or
    on ``rows(df)`` where the claims are about some of its rows; for a study that needs nothing else to judge."""
    def check_claims(df: pd.DataFrame, device) -> list[Claim]:
        """The study's claims (its ``CLAIMS``) judged on ``df`` by :func:`cnnlab.claims.check`."""
        return check(declarations, df if rows is None else rows(df), device)
    return check_claims


@dataclass(frozen=True)
class Verdict:
    """One verdict in every form the workbook writes it: ``stored`` (claims.csv's ``held``), ``word`` (a table's
    cell, a count's label), ``long`` (the claims table's cell), ``loud`` (:func:`report`'s lines), ``short`` (a
    narrow column: ``cnnlab.gpucheck``'s counts, the report page's CSS class), ``colour``."""

    stored: str
    word: str
    long: str
    loud: str
    short: str
    colour: str


# The workbook's one verdict vocabulary, by ``Claim.held``; every other map is read off it.
VERDICTS = {True: Verdict("yes", "held", "held", "HELD", "held", "#1a7f37"),
            False: Verdict("no", "did not hold", "did not hold", "DID NOT HOLD", "not", "#cf222e"),
            INCONCLUSIVE: Verdict(INCONCLUSIVE, "inconclusive", "inconclusive: within noise",
                                  "INCONCLUSIVE (within noise)", "inc", "#9a6700"),
            None: Verdict("n/a", "n/a", "n/a", "NOT APPLICABLE", "n/a", "#6e7781")}
STORED = {v.stored: v for v in VERDICTS.values()}  # claims.csv's held -> its Verdict
VERDICT = {held: v.stored for held, v in VERDICTS.items()}


SOURCES = {False: "paper", True: "beyond the paper"}  # the ``source`` column: whose claim it is
BEYOND_HEADING = "Beyond the paper: checks of ours that the paper does not claim"


def table(claims: list[Claim]) -> pd.DataFrame:
    """One row per claim: claim, paper, ours, held ("yes"/"no"/"inconclusive"/"n/a"), device, criterion, note, source
    ("paper" or "beyond the paper"); the paper's claims first, then ours beyond them, each in the order given."""
    claims = sorted(claims, key=lambda c: c.beyond)  # stable: the order within each kind stays
    # the verdict's word before pandas sees it: a column of strings and None is read as strings (pandas 3), None NaN
    rows = [{**asdict(c), "held": VERDICT[c.held], "source": SOURCES[bool(c.beyond)]} for c in claims]
    return pd.DataFrame(rows, columns=["claim", "paper", "ours", "held", "device", "criterion", "note", "source"])


def report(claims: list[Claim]) -> str:
    """The claims in words, one line each, e.g. "HELD on cpu: peak memory grows with batch size (...)"."""
    lines = []
    for c in claims:
        line = f"{VERDICTS[c.held].loud} on {c.device}: {c.claim}. Paper: {c.paper}. Ours: {c.ours}."
        line += f" Criterion: {c.criterion}." if c.criterion else ""
        lines.append(line + (f" ({c.note})" if c.note else ""))
    return "\n".join(lines)


COLUMNS = ("claim", "paper", "ours", "held", "device", "criterion", "note")
HELD_WORDS = {k: v.long for k, v in STORED.items()}
# Share of the width per column: the claim and the numbers get the room, held and device little.
_WIDTHS = {"claim": 20, "paper": 16, "ours": 18, "held": 7, "device": 6, "criterion": 21, "note": 12}
_CELL = "text-align:left; vertical-align:top; white-space:pre-wrap; overflow-wrap:anywhere; padding:4px 6px"


def verdict_words(held, note="") -> str:
    """A stored verdict ("yes", "no", "inconclusive", "n/a") in words; an inconclusive one with its overlap."""
    held = "" if held is None or (isinstance(held, float) and math.isnan(held)) else str(held)
    words = HELD_WORDS.get(held, held)
    if held == INCONCLUSIVE and isinstance(note, str) and note:
        return f"inconclusive ({note})"
    return words


def _rows(claims: list[Claim] | pd.DataFrame) -> list[dict[str, str]]:
    """Each claim as {column: text} plus its ``source``, from Claims or from :func:`table`'s frame (or a claims.csv
    read back; one written before the column existed holds the paper's claims only), the paper's first."""
    df = claims if isinstance(claims, pd.DataFrame) else table(claims)
    rows = [{**{c: "" if c not in df or pd.isna(row.get(c)) else str(row[c]) for c in COLUMNS},
             "source": SOURCES[True] if row.get("source") == SOURCES[True] else SOURCES[False]}
            for row in df.to_dict("records")]
    return sorted(rows, key=lambda r: r["source"] == SOURCES[True])


def as_text(claims: list[Claim] | pd.DataFrame, width: int = 100) -> str:
    """The claims as numbered paragraphs, every field in full, wrapped at ``width`` characters."""
    blocks = []
    for i, row in enumerate(_rows(claims), 1):
        if row["source"] == SOURCES[True] and not any(BEYOND_HEADING in b for b in blocks):
            blocks.append(BEYOND_HEADING + ":")
        verdict = STORED[row["held"]].loud if row["held"] in STORED else row["held"]
        head = f"{i}. {verdict} on {row['device']}: {row['claim']}"
        lines = textwrap.wrap(head, width, subsequent_indent="   ")
        for field in ("paper", "ours", "criterion", "note"):
            if row[field]:
                lines += textwrap.wrap(row[field], width, initial_indent=f"   {field + ':':<11}",
                                       subsequent_indent=" " * 14)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def as_html(claims: list[Claim] | pd.DataFrame) -> str:
    """The claims as one HTML table, every cell in full and wrapped (inline styles: they survive JupyterLab, the
    notebook's HTML export and ``make report``); all text escaped."""
    cols = "".join(f'<col style="width:{_WIDTHS[c]}%">' for c in COLUMNS)
    head = "".join(f'<th style="{_CELL}">{c}</th>' for c in COLUMNS)
    body = []
    for row in _rows(claims):
        if row["source"] == SOURCES[True] and not any(BEYOND_HEADING in b for b in body):
            body.append(f'<tr><td colspan="{len(COLUMNS)}" style="{_CELL}; font-weight:bold; background:#f6f8fa">'
                        f"{html.escape(BEYOND_HEADING)}</td></tr>")
        cells = []
        for c in COLUMNS:
            verdict = c == "held"
            text = html.escape(HELD_WORDS.get(row[c], row[c]) if verdict else row[c])
            colour = STORED[row[c]].colour if verdict and row[c] in STORED else None
            style = _CELL + (f"; font-weight:bold; color:{colour}" if colour else "")
            cells.append(f'<td style="{style}">{text}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<table class="cnnlab-claims" style="width:100%; table-layout:fixed; border-collapse:collapse">'
            f"<colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


class _Shown:
    """What Jupyter displays: the HTML table, or the text where only text is shown."""

    def __init__(self, claims):
        self.claims = claims

    def _repr_html_(self) -> str:
        return as_html(self.claims)

    def __repr__(self) -> str:
        return as_text(self.claims)
