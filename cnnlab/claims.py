"""The paper's claim beside ours: every study notebook ends with this table.

A claim is checked on the hardware at hand; it may hold or not. ``held`` is True, False, or None when the
claim does not apply here (e.g. a GPU-only claim on a CPU), and ``note`` then says why. ``criterion`` is the rule
that decided ``held``, in words and numbers ("fp16 / fp32 time per batch < 0.9"), so that a reader can see the
check could have come out the other way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd


@dataclass
class Claim:
    claim: str      # what the paper says, in a few words
    paper: str      # the paper's figure or number, as it reports it
    ours: str       # what we measured, with units
    held: bool | None
    device: str
    criterion: str = ""  # the rule that decides ``held``, e.g. "best / batch-1 throughput > 2"
    note: str = ""

    def __post_init__(self):
        if self.held is not None:
            self.held = bool(self.held)  # numpy bools print as np.True_
        if self.held is None and not self.note:
            raise ValueError(f"claim {self.claim!r}: held=None needs a note saying why it does not apply")


def table(claims: list[Claim]) -> pd.DataFrame:
    """One row per claim: claim, paper, ours, held ("yes"/"no"/"n/a"), device, criterion, note."""
    df = pd.DataFrame([asdict(c) for c in claims], columns=["claim", "paper", "ours", "held", "device", "criterion",
                                                             "note"])
    df["held"] = df["held"].map({True: "yes", False: "no", None: "n/a"})
    return df


def report(claims: list[Claim]) -> str:
    """The claims in words, one line each, e.g. "HELD on cpu: peak memory grows with batch size (...)"."""
    words = {True: "HELD", False: "DID NOT HOLD", None: "NOT APPLICABLE"}
    lines = []
    for c in claims:
        line = f"{words[c.held]} on {c.device}: {c.claim}. Paper: {c.paper}. Ours: {c.ours}."
        line += f" Criterion: {c.criterion}." if c.criterion else ""
        lines.append(line + (f" ({c.note})" if c.note else ""))
    return "\n".join(lines)
