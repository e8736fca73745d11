"""The paper's claim beside ours: every study notebook ends with this table.

A claim is checked on the hardware at hand; it may hold or not. ``held`` is True, False, or None when the
claim does not apply here (e.g. a GPU-only claim on a CPU), and ``note`` then says why. ``criterion`` is the rule
that decided ``held``, in words and numbers ("fp16 / fp32 time per batch < 0.9"), so that a reader can see the
check could have come out the other way.

A notebook shows its claims once, with :func:`show`: every cell in full and wrapped (an HTML table in Jupyter
and in its HTML export, numbered paragraphs in plain text), never cut at pandas' 50 characters.
"""

from __future__ import annotations

import html
import textwrap
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


COLUMNS = ("claim", "paper", "ours", "held", "device", "criterion", "note")
HELD_WORDS = {"yes": "held", "no": "did not hold", "n/a": "n/a"}
HELD_COLOURS = {"yes": "#1a7f37", "no": "#cf222e", "n/a": "#6e7781"}
_VERDICTS = {"yes": "HELD", "no": "DID NOT HOLD", "n/a": "NOT APPLICABLE"}  # as report() words them
# Share of the width per column: the claim and the numbers get the room, held and device little.
_WIDTHS = {"claim": 20, "paper": 16, "ours": 18, "held": 7, "device": 6, "criterion": 21, "note": 12}
_CELL = "text-align:left; vertical-align:top; white-space:pre-wrap; overflow-wrap:anywhere; padding:4px 6px"


def _rows(claims: list[Claim] | pd.DataFrame) -> list[dict[str, str]]:
    """Each claim as {column: text}, from Claims or from :func:`table`'s frame (or a claims.csv read back)."""
    df = claims if isinstance(claims, pd.DataFrame) else table(claims)
    return [{c: "" if c not in df or pd.isna(row.get(c)) else str(row[c]) for c in COLUMNS}
            for row in df.to_dict("records")]


def as_text(claims: list[Claim] | pd.DataFrame, width: int = 100) -> str:
    """The claims as numbered paragraphs, every field in full, wrapped at ``width`` characters."""
    blocks = []
    for i, row in enumerate(_rows(claims), 1):
        head = f"{i}. {_VERDICTS.get(row['held'], row['held'])} on {row['device']}: {row['claim']}"
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
        cells = []
        for c in COLUMNS:
            verdict = c == "held"
            text = html.escape(HELD_WORDS.get(row[c], row[c]) if verdict else row[c])
            colour = HELD_COLOURS.get(row[c]) if verdict else None
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


def show(claims: list[Claim] | pd.DataFrame) -> None:
    """Display the claims once (``claims.show(studies.save(...))`` as a notebook's last line): an HTML table in
    Jupyter, wrapped text in a terminal. Returns None, so the cell has no ``Out[...]`` beside it."""
    try:
        from IPython.display import display
    except ImportError:  # an installed cnnlab without the notebook extras
        print(as_text(claims))
        return
    display(_Shown(claims))
