"""What a reader sees: result tables in a notebook, clean notebook outputs, and one page for every machine.

- :func:`show`: a results table in a notebook without the columns this device could not measure (empty in every
  row): they are named in one line under it, with the reason their ``*_missing_reason`` column gives; where every
  point failed, that line says so and why instead.
- :func:`output_problems`: what must not appear in an executed notebook's outputs (the C++ profiler's ``USDT ...
  profiler_start`` lines, a stray ``Out[...]`` holding paths or a matplotlib artist). ``notebooks/conftest.py``
  fails a cell that nbval runs in ``make test`` on any of them; the page below lists them for executed notebooks.
- :func:`write` (``make report``, ``python -m cnnlab.report``): ``figures/index.html``, one static page with the
  claims matrix (each paper's claims down, machines across: held, did not hold, inconclusive, n/a), the environment of every
  machine (and a reference's ``PROVENANCE.md``, where it has one), and per notebook its main figure, its claims in
  full, links to its data and executed notebook, and beside a GPU reference (:func:`gpu_reference`) this machine's
  main metric over the GPU's at the points both measured (:func:`ratio`).

Where the page reads from. This computer: ``figures/<NN_name>/`` (``make figures``). Another machine:
``figures/reference/<machine>/<NN_name>/``, laid out the same. Each folder holds the study's CSVs, its figures
(PNG and SVG), ``claims.csv`` and ``environment.json`` (all written by :func:`cnnlab.studies.save`); the sweeps'
stores (raw points, saved again as those CSVs), in its ``stores/`` subfolder, are not linked. A notebook's
main figure is the first figure its study's ``figures`` returns (``save`` records the order as the ``figures``
entry of ``environment.json``); a folder without that record shows its first PNG by name. Executed notebooks are
papermill's copies in ``build/notebooks/``, rendered by nbconvert into ``figures/notebooks/<NN_name>.html``; a
reference machine's rendered notebooks are linked from ``figures/reference/<machine>/notebooks/`` when present.

A results folder may come from anyone (git keeps symlinks, and the page is sent as an attachment): every file is
read through :func:`cnnlab.paths.read_result` (no link, only a regular file, at most its kind's cap), and a file
left out is named in one line.
"""

from __future__ import annotations

import argparse
import base64
import datetime as _dt
import hashlib
import html
import io
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pandas as pd

from cnnlab import claims as _claims
from cnnlab import paths
from cnnlab import tables as _tables

THIS_MACHINE = paths.THIS_MACHINE  # (a reference folder of that name is shown as "reference/this machine")
HELD_CLASS = {k: v.short.replace("/", "") for k, v in _claims.STORED.items()}  # CSS: held-held, -not, -inc, -na
# Environment fields shown for each machine, in this order (cnnlab.profiling.environment() writes them).
ENVIRONMENT_FIELDS = ("device_name", "gpu_names", "gpu_memory_mib", "driver_version", "cuda_version", "cudnn_version",
                      "cpu_model", "cpu_cores_physical", "cpu_cores_logical", "torch_num_threads", "torch_version",
                      "torchvision_version", "python_version", "cnnlab_version", "git_commit", "git_dirty", "preset",
                      "platform", "date_utc")
FAILED_REASONS = 3  # distinct reasons a table whose every point failed names in its line (the rest: each row's error)
# A stray value a cell returned: paths (save_figure's tuple) or matplotlib artists (a plot call's return value).
STRAY_RESULT = re.compile(r"(PosixPath|WindowsPath)\(|<matplotlib\.|^\[?<Axes[: ]|^Text\(", re.MULTILINE)
# Lines that alarm a reader and that cnnlab fixed at their cause or filters where it knows they are harmless: each
# is a regression when it shows in a notebook again. (text in the stream, what it means and where it is handled)
NOISE_LINES = (
    ("USDT", "the C++ profiler's USDT lines (enter torch.profiler through cnnlab.profiling.quiet.quiet_profiler)"),
    ("Memory block of unknown size", "the CPU profiler saw a block allocated before it started freed, so its curve "
     "misses that free (run the step before inside the profiler: memory_over_time(before=...), or profile_ops("
     "profile_memory=False) where no memory is read)"),
    ("gpuGetDeviceCount failed", "Kineto's line on a machine without a usable GPU (enter torch.profiler through "
     "cnnlab.profiling.quiet.quiet_profiler, which drops it where CUDA is not available)"),
    ("IProgress not found", "tqdm.auto's warning where ipywidgets is missing (use cnnlab.profiling.progress)"),
    ("Profiler clears events at the end of each cycle", "torch.profiler's warning on a second schedule cycle (one "
     "cycle per profile: cnnlab.profiling.profile_ops)"),
)


# ------------------------------------------------------------------------------------------------ notebook side

def _is_missing_reason(column: str) -> bool:
    return column.endswith("_missing_reason")


def _says_why(column: str) -> bool:
    """A column of reasons, not of measurements: ``*_missing_reason`` and a sweep's ``error``."""
    return _is_missing_reason(column) or column == "error"


def missing_columns(df: pd.DataFrame) -> dict[str, list[str]]:
    """The measured columns of ``df`` that are empty in every row, grouped by why: ``{reason: [columns]}``. A
    column's reason is the text of the ``<stem>_missing_reason`` column whose stem it contains (the longest
    stem: ``gpu_util_missing_reason`` explains ``gpu_util_pct``, ``device_missing_reason`` explains
    ``self_device_time_ms``); one without such a column is listed under "no reason recorded"."""
    reasons = [c for c in df.columns if _is_missing_reason(c)]
    grouped: dict[str, list[str]] = {}
    for col in df.columns:
        if _says_why(col) or not len(df) or df[col].notna().any():
            continue
        stems = [r for r in reasons if r.removesuffix("_missing_reason") in col]
        texts = []
        if stems:
            best = max(stems, key=len)
            texts = [str(t) for t in dict.fromkeys(df[best].dropna()) if str(t).strip()]
        grouped.setdefault("; ".join(texts) or "no reason recorded", []).append(col)
    return grouped


def failed_line(df: pd.DataFrame) -> str:
    """One line saying that every point of ``df`` failed (or was skipped), with how many of each status and why (the
    distinct reasons in its ``error`` column, the first few), when it has points with a ``status`` and none is "ok";
    else ""."""
    if "status" not in df.columns or not len(df) or (df["status"] == "ok").any():
        return ""
    counts = ", ".join(f"{n} {status}" for status, n in df["status"].value_counts(sort=False).items())
    reasons = []
    for error in df["error"].dropna().astype(str) if "error" in df.columns else []:
        first = error.strip().splitlines()[0] if error.strip() else ""
        if first and first not in reasons:
            reasons.append(first)
    why = "; ".join(reasons[:FAILED_REASONS]) + (f"; and {len(reasons) - FAILED_REASONS} more (each row's error)"
                                                 if len(reasons) > FAILED_REASONS else "")
    verb = "was skipped" if (df["status"] == "skipped").all() else "failed"
    return f"Every point {verb} ({counts}), so nothing was measured. Why: {why or 'no reason recorded'}."


def compact(df: pd.DataFrame, columns: list[str] | None = None) -> tuple[pd.DataFrame, str]:
    """``df`` without its columns empty in every row, without the ``*_missing_reason`` columns that only explain
    those, and without reason columns (``*_missing_reason``, ``error``) that are empty (nothing was missing, nothing
    failed); and one line naming the measured columns left out and why ("" when none was), or, when every point
    failed, saying so and why (:func:`failed_line`). ``columns``: only these, in this order; one that ``df`` lacks is
    left out when every point failed (nothing measured it), else a KeyError naming it (a misspelt name). A table
    whose columns are not all names (a pivot's two-level columns) is shown as it is."""
    failed = failed_line(df)
    if columns is not None:
        absent = [c for c in columns if c not in df.columns]
        if absent and not failed:
            raise KeyError(f"columns {absent} are not in this table; its columns: {', '.join(map(str, df.columns))}")
        df = df[[c for c in columns if c in df.columns]]
    if not all(isinstance(c, str) for c in df.columns):
        return df, failed
    grouped = missing_columns(df)
    dropped = [c for cols in grouped.values() for c in cols]
    kept = [c for c in df.columns if c not in dropped]
    for reason_col in [c for c in kept if _says_why(c)]:
        stem = reason_col.removesuffix("_missing_reason")
        explains_kept = reason_col == "error" or any(stem in c for c in kept if not _says_why(c))
        if df[reason_col].isna().all() or not explains_kept:
            kept.remove(reason_col)
    line = "; ".join(f"{', '.join(cols)} ({reason})" for reason, cols in grouped.items())
    # (every point failed: its empty columns were not measured by any point, not missing on this device)
    return df[kept], failed or (f"Not measured on this device: {line}." if line else "")


class _Table:
    """What Jupyter displays for :func:`show`: the table and its line, as HTML or as text; its numbers rounded by
    their unit and its reasons beside the status (:func:`cnnlab.tables.readable`; the CSVs keep every digit)."""

    def __init__(self, df: pd.DataFrame, line: str):
        self.measured, self.df, self.line = df, _tables.readable(df), line

    def _repr_html_(self) -> str:  # (text left-aligned, a reason in full: pandas cut it at 50 characters)
        note = f'<p style="text-align:left"><em>{html.escape(self.line)}</em></p>' if self.line else ""
        return _tables.to_html(self.measured) + note

    def __repr__(self) -> str:
        return repr(self.df) + (f"\n{self.line}" if self.line else "")


def show(table, columns: list[str] | None = None) -> None:
    """Display a table in a notebook, once (returns None: no ``Out[...]`` beside it). The one ``show`` notebooks
    call: a results table (only ``columns``, where given) without the columns this device could not measure, and one
    line under it saying which and why, or that every point failed and why (:func:`compact`); claims (a list of
    :class:`cnnlab.claims.Claim`, or the table ``studies.save`` returns) as the claims table, wrapped, the verdicts
    coloured (:func:`cnnlab.claims.as_html`)."""
    is_claims = isinstance(table, list) or (isinstance(table, pd.DataFrame) and {"claim", "held"} <= set(table.columns))
    try:
        from IPython.display import display
    except ImportError:  # an installed cnnlab without the notebook extras
        print(_claims.as_text(table) if is_claims else repr(_Table(*compact(table, columns))))
        return
    display(_claims._Shown(table) if is_claims else _Table(*compact(table, columns)))


def output_problems(outputs: list) -> list[str]:
    """What a reader should not see in one cell's outputs (nbformat output dicts, or nbval's): one of the
    :data:`NOISE_LINES` (the C++ profiler's ``USDT:... profiler_start``, ...) on stdout or stderr, or an ``Out[...]``
    that is a stray return value (paths, matplotlib artists). Returns one message per problem; empty when the cell
    is clean."""
    problems = []
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            text = "".join(out.get("text", ""))
            problems += [f"{out.get('name', 'stream')} holds {what}" for line, what in NOISE_LINES if line in text]
        elif kind == "execute_result":
            text = "".join(out.get("data", {}).get("text/plain", ""))
            if STRAY_RESULT.search(text):
                problems.append(f"a stray Out[{out.get('execution_count')}] value: {text[:120]!r} (end the line "
                                "with ';' or assign it)")
    return problems


# ------------------------------------------------------------------------------------------------ reading results

@dataclass
class Machine:
    """One machine's results: ``root/<NN_name>/`` per notebook, and its rendered notebooks in ``html``."""

    name: str
    root: Path
    notebooks: list[str] = field(default_factory=list)
    html: dict[str, Path] = field(default_factory=dict)
    executed: dict[str, Path] = field(default_factory=dict)  # NN_name -> the executed copy of its last run
    damaged: dict[Path, str] = field(default_factory=dict)  # a file that was skipped -> what is wrong with it
    _read: dict = field(default_factory=dict, repr=False, compare=False)

    def folder(self, notebook: str) -> Path:
        return self.root / notebook

    def claims(self, notebook: str) -> pd.DataFrame | None:
        """The notebook's claims (:func:`read_claims`), read once; None where it has none or they are damaged."""
        return self._once("claims.csv", notebook, read_claims)

    def environment(self, notebook: str) -> dict | None:
        """The notebook's ``environment.json`` (:func:`read_environment`), read once; None where it has none or
        it is damaged."""
        return self._once("environment.json", notebook, read_environment)

    def _once(self, name: str, notebook: str, read):
        if (name, notebook) not in self._read:  # (each damaged file is named once, not once per use)
            self._read[name, notebook] = read(self.folder(notebook), self.damaged) if notebook in self.notebooks \
                else None
        return self._read[name, notebook]


def _notebook_folders(root: Path) -> list[str]:
    return [p.name for p in paths.notebook_folders(root)]


def find_machines(figures_root: Path) -> list[Machine]:
    """This machine (``figures_root/<NN_name>/``) first, when it has results, then every
    ``figures_root/reference/<machine>/`` with results, by name (:func:`cnnlab.paths.machine_folders`: a folder
    named "this machine" is not this machine)."""
    found = []
    for name, root in paths.machine_folders(figures_root).items():
        if _notebook_folders(root):
            rendered = {} if name == THIS_MACHINE else \
                {p.stem: p for p in sorted((root / "notebooks").glob("*.html")) if paths.listable(p)}
            found.append(Machine(name, root, _notebook_folders(root), rendered))
    return found


def read_claims(folder: Path, damaged: dict[Path, str] | None = None) -> pd.DataFrame | None:
    """``folder/claims.csv`` as text (``n/a`` stays ``n/a``), or None when the notebook did not get that far. A
    damaged file (cut short, not a claims table: no ``claim`` or ``held`` column) is named on stderr with what to
    do, recorded in ``damaged`` (path -> what is wrong), and read as absent."""
    path = folder / "claims.csv"
    if not os.path.lexists(path):
        return None
    try:
        table = pd.read_csv(io.BytesIO(paths.read_result(folder, path.name, paths.TABLE_MAX_BYTES)), dtype=str,
                            keep_default_na=False)
        missing = [c for c in ("claim", "held") if c not in table.columns]
        if missing:
            raise ValueError(f"no {' or '.join(map(repr, missing))} column (columns: "
                             f"{', '.join(map(str, table.columns))})")
        return table
    except (OSError, ValueError, UnicodeDecodeError) as err:  # pandas' ParserError and EmptyDataError are ValueErrors
        _skip(path, err, "the page shows that notebook as not run", damaged)
        return None


def _warn(message: str) -> None:
    print(f"cnnlab.report: {message}", file=sys.stderr)


def _skip(path: Path, err: Exception, consequence: str, damaged: dict[Path, str] | None) -> None:
    """Name a damaged ``path`` on stderr with what is wrong and what to do, and record it in ``damaged``."""
    wrong = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:160]}"
    if damaged is not None:
        damaged[path] = f"{wrong}; {consequence}"
    _warn(f"{path} cannot be read ({wrong}); {consequence}. Run it again (make figures NB={path.parent.name[:2]}) "
          "to rewrite it")


def read_environment(folder: Path, damaged: dict[Path, str] | None = None) -> dict | None:
    """``folder/environment.json``, or None when absent. A damaged one (not JSON, not a JSON object, a
    ``figures`` entry that is not a list of figure names, a ``run_id`` that is not text) is named on stderr,
    recorded in ``damaged`` (path -> what is wrong), and read as absent."""
    path = folder / "environment.json"
    if not os.path.lexists(path):
        return None
    try:
        data = paths.read_result(folder, path.name, paths.RECORD_MAX_BYTES)
        try:
            record = json.loads(data)
        except ValueError as err:
            raise ValueError(f"not JSON ({err})") from None
        if not isinstance(record, dict):
            raise ValueError(f"not a JSON object (a {_JSON_TYPES.get(type(record), type(record).__name__)})")
        figures = record.get("figures", [])
        if not isinstance(figures, list) or not all(isinstance(n, str) and n and Path(n).name == n for n in figures):
            raise ValueError(f"its figures entry is not a list of figure names: {json.dumps(figures)[:80]}")
        if not isinstance(record.get("run_id", ""), str):
            raise ValueError(f"its run_id is not text: {json.dumps(record['run_id'])[:80]}")
        return record
    except (OSError, ValueError, UnicodeDecodeError) as err:
        _skip(path, err, "the page shows that notebook's figures and environment as not recorded", damaged)
        return None


_JSON_TYPES = {list: "list", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def main_figure(folder: Path, env: dict | None = None) -> Path | None:
    """The notebook's main figure as a PNG: the first of ``env``'s ``figures`` (default: ``folder``'s
    ``environment.json``, :func:`read_environment`) that exists, else the first PNG by name, else None; only a PNG
    that may be embedded (:func:`cnnlab.paths.result_file` with :data:`cnnlab.paths.FIGURE_MAX_BYTES`), another is
    named on stderr and passed over."""
    env = read_environment(folder) if env is None else env
    names = [f"{name}.png" for name in (env or {}).get("figures", [])] + sorted(p.name for p in folder.glob("*.png"))
    for name in dict.fromkeys(names):
        try:
            return paths.result_file(folder, name, paths.FIGURE_MAX_BYTES)
        except FileNotFoundError:  # a recorded figure not saved: the next
            continue
        except OSError as err:  # (Refused: a link, not a regular file, too large)
            paths.skipped(folder / name, str(err))
    return None



def render_notebooks(executed: Path, dest: Path) -> dict[str, Path]:
    """Render each executed notebook ``executed/NN_name.ipynb`` to ``dest/NN_name.html`` with nbconvert (again
    only when the notebook's content differs from the one its HTML was rendered from, whose SHA-256 the HTML
    records, or the HTML is missing or cut short: file dates are not compared, a clock set wrong would keep an old
    page for ever); returns ``{NN_name: html path}``. Empty without nbconvert. A notebook that cannot be read is
    named on stderr and left out."""
    notebooks = sorted(executed.glob("[0-9][0-9]_*.ipynb")) if executed.is_dir() else []
    if not notebooks:
        return {}
    try:
        import nbformat
        from nbconvert import HTMLExporter
    except ImportError:
        print("cnnlab.report: nbconvert is not installed; executed notebooks are not rendered", file=sys.stderr)
        return {}
    from cnnlab.plotting import write_atomic

    dest.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter(template_name="lab")
    rendered = {}
    for nb in notebooks:
        out = dest / f"{nb.stem}.html"
        digest = hashlib.sha256(nb.read_bytes()).hexdigest()
        if not _html_complete(out) or _rendered_from(out) != digest:
            try:
                body, _ = exporter.from_notebook_node(nbformat.read(nb, as_version=4))
                body = re.sub(r"<head\b[^>]*>", lambda m: f'{m[0]}<meta name="{SOURCE_META}" content="{digest}">',
                              body, count=1)
            except Exception as err:  # nbformat's NotJSONError, a ValidationError, a bad cell: name the file instead
                _warn(f"executed notebook {nb} cannot be rendered ({type(err).__name__}: "
                      f"{(str(err).splitlines() or [''])[0][:160]}); it is left out of the page. Run it again "
                      f"(make figures NB={nb.stem[:2]}) to rewrite it")
                continue
            write_atomic(out, lambda tmp, body=body: tmp.write_text(body, encoding="utf-8"))
        rendered[nb.stem] = out
    return rendered


SOURCE_META = "cnnlab-notebook-sha256"  # a rendered notebook's record of the content it was rendered from


def _rendered_from(path: Path) -> str | None:
    """The SHA-256 of the notebook ``path`` (a rendered page) was rendered from, None where it records none."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(16384)
    except OSError:
        return None
    found = re.search(rf'<meta name="{SOURCE_META}" content="([0-9a-f]{{64}})">', head)
    return found[1] if found else None


def _html_complete(path: Path) -> bool:
    """Whether ``path`` is a whole page (ends with ``</html>``): one cut short, by a full disk say, is rendered
    again even though it is newer than its notebook."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64))
            return f.read().rstrip().lower().endswith(b"</html>")
    except OSError:
        return False


def _outputs_text(path: Path) -> str:
    """Every text an executed notebook's cells put out (streams, plain text, HTML), "" where it cannot be read."""
    try:
        cells = json.loads(path.read_text())["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    texts = []
    for cell in cells if isinstance(cells, list) else []:
        for out in cell.get("outputs", []) if isinstance(cell, dict) else []:
            if not isinstance(out, dict):
                continue
            data = out.get("data") if isinstance(out.get("data"), dict) else {}
            for text in (out.get("text"), data.get("text/plain"), data.get("text/html")):
                texts.append("".join(text) if isinstance(text, list) else text if isinstance(text, str) else "")
    return "\n".join(texts)


def notebook_problems(path: Path) -> list[str]:
    """An executed notebook's errors and unclean outputs (:func:`output_problems`), each named by its cell's
    ``In [n]`` as the rendered notebook shows it."""
    try:
        cells = json.loads(path.read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return [f"{path.name} cannot be read"]
    problems = []
    for cell in cells:
        outputs, where = cell.get("outputs", []), f"In [{cell.get('execution_count') or ' '}]"
        problems += [f"{where}: {p}" for p in output_problems(outputs)]
        problems += [f"{where} stopped with {o.get('ename')}: {o.get('evalue')}" for o in outputs
                     if o.get("output_type") == "error"]
    return problems


# ------------------------------------------------------------------------------------------------ the page

def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _link(target: Path, base: Path) -> str:
    """``target`` relative to the folder ``base``, as a URL path."""
    return quote(Path(os.path.relpath(target, base)).as_posix())


def _data_uri(png: Path, base: Path) -> str:
    """The PNG file ``png`` as a ``data:`` URI, so that the page shows it wherever the page alone is opened: inside
    JupyterLab (its HTML viewer, a sandboxed frame, may not load the page's neighbours from the server: 403
    "Blocking request from unknown origin"), from file://, as an e-mail attachment. Read by
    :func:`cnnlab.paths.read_result` (at most :data:`cnnlab.paths.FIGURE_MAX_BYTES`): a file it refuses gives ""
    (neither held nor linked), another unreadable one its address relative to the folder ``base``."""
    try:
        data = paths.read_result(png.parent, png.name, paths.FIGURE_MAX_BYTES)
        return "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    except paths.Refused as err:  # (not linked either: a link could point at any file)
        _warn(f"figure {png} cannot be read ({err}); the page leaves it out")
        return ""
    except OSError as err:
        _warn(f"figure {png} cannot be read ({err}); the page links it instead of holding it")
        return _link(png, base)


def _paper_of(notebook: str) -> tuple[str, str]:
    from cnnlab import studies

    number = studies.paper_of(notebook) or ""
    return number, studies.PAPERS.get(number, "not one of the three papers")


def _device_of(machine: Machine) -> str:
    """The device the machine's notebooks ran on (environment.json's device_name), "" when not recorded."""
    names = [(machine.environment(nb) or {}).get("device_name") for nb in machine.notebooks]
    return ", ".join(dict.fromkeys(str(n) for n in names if n))


def _matrix_cell(row: pd.Series) -> str:
    """One machine's verdict on one claim: held / did not hold / inconclusive / n/a over what it measured;
    criterion and note shown on hover, and an inconclusive verdict's overlap shown in the cell."""
    held = row.get("held", "")
    detail = f"criterion: {row.get('criterion', '')}" + (f"; note: {row['note']}" if row.get("note") else "")
    overlap = f'<span class="ours">{_e(row["note"])}</span>' if held == _claims.INCONCLUSIVE and row.get("note") else ""
    return (f'<td class="held-{HELD_CLASS.get(held, "none")}" title="{_e(detail)}"><span class="verdict">'
            f'{_e(_claims.HELD_WORDS.get(held, held))}</span><span class="ours">{_e(row.get("ours", ""))}</span>'
            f'{overlap}</td>')


def summary(machines: list[Machine], notebooks: list[str]) -> list[tuple[str, str, dict[str, int]]]:
    """Verdict counts per machine and paper: ``[(machine, paper number, {"held": n, "did not hold": n,
    "inconclusive": n, "n/a": n}), ...]`` from every notebook's claims.csv: the paper's claims only (checks of ours
    beyond the paper, ``source`` "beyond the paper", are not the paper's to count)."""
    out = []
    for m in machines:
        counts: dict[str, dict[str, int]] = {}
        for nb in notebooks:
            table = m.claims(nb)
            if table is None:
                continue
            paper = counts.setdefault(_paper_of(nb)[0], {k: 0 for k in SUMMARY_WORDS.values()})
            papers = table[table["source"] != _claims.SOURCES[True]] if "source" in table else table
            for held in papers["held"]:
                word = SUMMARY_WORDS.get(held)
                if word:
                    paper[word] += 1
        out += [(m.name, number, c) for number, c in sorted(counts.items())]
    return out


SUMMARY_WORDS = {k: v.word for k, v in _claims.STORED.items()}


def _summary_html(machines: list[Machine], notebooks: list[str]) -> str:
    lines = []
    for machine, number, counts in summary(machines, notebooks):
        parts = ", ".join(f'<span class="held-{HELD_CLASS[k]}">{n} {_e(word)}</span>'
                          for k, word in SUMMARY_WORDS.items() for n in [counts[word]])
        lines.append(f"<li><b>{_e(machine)}</b>, paper {_e(number)}: {parts}</li>")
    return f'<ul class="summary">{"".join(lines)}</ul>' if lines else ""


def _claims_matrix(machines: list[Machine], notebooks: list[str]) -> str:
    """The claims matrix: one row per claim (grouped by paper), one column per machine."""
    head = "".join(f'<th>{_e(m.name)}<div class="criterion">{_e(_device_of(m))}</div></th>' for m in machines)
    rows, current_paper = [], None
    for nb in sorted(notebooks, key=lambda nb: (_paper_of(nb)[0], nb)):  # one block per paper
        tables = {m.name: m.claims(nb) for m in machines}
        texts = list(dict.fromkeys(c for t in tables.values() if t is not None for c in t["claim"]))
        beyond = {c for t in tables.values() if t is not None and "source" in t
                  for c in t.loc[t["source"] == _claims.SOURCES[True], "claim"]}
        texts.sort(key=lambda c: c in beyond)  # the paper's claims first, then ours beyond them
        number, title = _paper_of(nb)
        if number != current_paper:
            rows.append(f'<tr class="paper"><th colspan="{3 + len(machines)}">Paper {_e(number)}: {_e(title)}'
                        f"</th></tr>")
            current_paper = number
        if not texts:
            rows.append(f'<tr><td><a href="#{_e(nb)}">{_e(nb)}</a></td><td colspan="{2 + len(machines)}">'
                        "no claims.csv on any machine</td></tr>")
        for text in texts:
            found = {name: t[t["claim"] == text].iloc[0] for name, t in tables.items()
                     if t is not None and (t["claim"] == text).any()}
            first = next(iter(found.values()))
            cells = [_matrix_cell(found[m.name]) if m.name in found else
                     f'<td class="held-none">{"not run" if tables[m.name] is None else "claim not checked"}</td>'
                     for m in machines]
            criterion = "; ".join(dict.fromkeys(str(r.get("criterion", "")) for r in found.values()
                                                if r.get("criterion")))
            label = f'<div class="criterion">{_e(_claims.SOURCES[True])}</div>' if text in beyond else ""
            rows.append(f'<tr><td><a href="#{_e(nb)}">{_e(nb)}</a></td><td>{_e(text)}{label}<div class="criterion">'
                        f"criterion: {_e(criterion) or 'not recorded'}</div></td><td>{_e(first.get('paper', ''))}"
                        f"</td>{''.join(cells)}</tr>")
    share = 50 / max(len(machines), 1)  # machines share what the claim columns leave, equally
    cols = '<col style="width:12%"><col style="width:24%"><col style="width:14%">' + \
        f'<col style="width:{share:.1f}%">' * len(machines)
    return (f'<table class="matrix"><colgroup>{cols}</colgroup><thead><tr><th>notebook</th><th>claim</th>'
            f"<th>paper reports</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _environment_value(key: str, env: dict) -> str:
    if key not in env:
        return "not recorded"
    value = env[key]
    if value is None or value == []:
        stems = [k.removesuffix("_missing_reason") for k in env if k.endswith("_missing_reason")]
        stem = next((s for s in stems if key.startswith(s) or key.startswith("gpu") and s == "cuda"), None)
        return f"none ({env[stem + '_missing_reason']})" if stem else "none"
    if isinstance(value, list):
        return ", ".join(f"{v:.0f}" if isinstance(v, float) else str(v) for v in value)
    return str(value)


def _environment_table(machines: list[Machine]) -> str:
    envs = {m.name: {nb: e for nb in m.notebooks if (e := m.environment(nb))} for m in machines}
    head = "".join(f"<th>{_e(m.name)}</th>" for m in machines)
    rows = []
    for key in ENVIRONMENT_FIELDS:
        cells = []
        for m in machines:
            per_nb = envs[m.name]
            if not per_nb:
                cells.append("<td>not recorded (environment.json is written by studies.save)</td>")
                continue
            if key == "date_utc":
                dates = sorted(str(e.get(key)) for e in per_nb.values() if e.get(key))
                cells.append(f"<td>{_e(dates[0])} to {_e(dates[-1])}</td>" if dates else "<td>not recorded</td>")
                continue
            values: dict[str, list[str]] = {}
            for nb, env in per_nb.items():
                values.setdefault(_environment_value(key, env), []).append(nb[:2])
            text = values.popitem()[0] if len(values) == 1 else \
                "; ".join(f"{v} (notebooks {', '.join(nbs)})" for v, nbs in values.items())
            cells.append(f"<td>{_e(text)}</td>")
        rows.append(f"<tr><th>{_e(key)}</th>{''.join(cells)}</tr>")
    return f'<table class="env"><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _provenance_html(machines: list[Machine], base: Path) -> str:
    """A link to each machine's ``PROVENANCE.md`` (where a reference's results came from), "" when none has one."""
    found = [(m, m.root / "PROVENANCE.md") for m in machines if paths.listable(m.root / "PROVENANCE.md")]
    items = "".join(f'<li>{_e(m.name)}: where its results come from, <a href="{_link(p, base)}">PROVENANCE.md</a></li>'
                    for m, p in found)
    return f"<ul>{items}</ul>" if items else ""


def _last_run_flag(nb: str, env: dict | None, problems: list[str], executed: Path | None) -> str:
    """What a reader must know before trusting this notebook's figures and claims: its last run failed (before its
    save: they are an earlier run's; after it: they are its own), or the linked executed notebook is not the run
    that wrote them (run again elsewhere, say in Jupyter). Told by content, not file dates (a clock set wrong would
    hide it for ever): the ``run_id`` that :func:`cnnlab.studies.save` writes into ``env`` (environment.json) and
    prints in the notebook. "" when there is nothing to say, or results without a run id (older cnnlab) ran
    cleanly."""
    failed = [p for p in problems if " stopped with " in p]
    run_id = (env or {}).get("run_id")
    ours = bool(run_id) and executed is not None and run_id in _outputs_text(executed)
    if failed and ours:
        return f"The last run of {nb} failed ({failed[0]}) after it saved the figures and claims below."
    if failed:
        written = _when((env or {}).get("date_utc"))
        return (f"The last run of {nb} failed ({failed[0]}): the figures and claims below are from an earlier run"
                + (f", written {written}" if written else "") + ".")
    if run_id and executed is not None and executed.is_file() and not ours:
        return (f"These results were not written by the executed notebook linked here (it does not show their run "
                f"id {run_id}): {nb} was run again elsewhere, e.g. in Jupyter, or its results were copied here; the "
                "linked notebook is another run.")
    return ""


def _when(recorded) -> str:
    """A recorded ISO date as "YYYY-MM-DD HH:MM UTC" (as it was recorded where it is not one; "" when absent)."""
    try:
        return f"{_dt.datetime.fromisoformat(str(recorded)).astimezone(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC"
    except ValueError:
        return str(recorded or "")


def gpu_reference(machines: list[Machine]) -> Machine | None:
    """The machine the page compares this machine with: the first reference (by name) whose environment.json names
    a GPU (``gpu_names``) that is not this machine's device, as :func:`cnnlab.explore.beside_default` picks it; None
    without this machine's results or such a reference."""
    from cnnlab.explore import is_gpu

    here = next((m for m in machines if m.name == THIS_MACHINE), None)
    if here is None:
        return None
    own = set(_device_of(here).split(", ")) - {""}
    for m in machines:
        envs = [e for nb in m.notebooks if (e := m.environment(nb))]
        if m is not here and any(is_gpu(e) and e.get("device_name") not in own for e in envs):
            return m
    return None


def ratio(nb: str, here: Machine, other: Machine) -> tuple[str, pd.DataFrame] | None:
    """``nb``'s main metric on ``here`` over ``other`` at the points both measured: (the
    :func:`cnnlab.explore.ratio_summary` line naming the table, the :func:`cnnlab.explore.ratios` table), from the
    first table (by name) both machines have where the explorer's first metric for it
    (:func:`cnnlab.explore.defaults`) was measured at a point in common; None where no table has one."""
    from cnnlab import explore

    if nb not in here.notebooks or nb not in other.notebooks:
        return None
    names = (here.name, other.name)
    for path in sorted(here.folder(nb).glob("*.csv")):
        theirs = other.folder(nb) / path.name
        if path.name == "claims.csv" or not theirs.is_file() or path.with_name(path.name + ".env.json").exists():
            continue
        try:
            mine, them = explore.load_table(path), explore.load_table(theirs)
        except (OSError, ValueError):  # a table being written, or damaged: the next one
            continue
        picked = explore.defaults(mine)
        if picked["metric"] is None or picked["metric"] not in them.columns:
            continue
        table = explore.ratios(mine, them, picked["metric"], names)  # at the grid's points (a sweep's parameters)
        if len(table):
            return f"{path.stem}: {explore.ratio_summary(table, picked['metric'], names)}", table
    return None


def _ratio_html(nb: str, here: Machine | None, other: Machine | None, max_rows: int = 12) -> str:
    """This machine's main metric over the GPU reference's for ``nb`` (:func:`ratio`): one line and a small table
    (at most ``max_rows`` rows), or one line saying no point was measured on both; "" without the two machines'
    results for ``nb``."""
    if here is None or other is None or nb not in here.notebooks or nb not in other.notebooks:
        return ""
    found = ratio(nb, here, other)
    if found is None:
        return (f'<p class="ratio">No table of {_e(nb)} has its main metric measured at the same points on '
                f"{_e(here.name)} and {_e(other.name)}: no ratio.</p>")
    line, table = found
    shown = table.head(max_rows)
    head = "".join(f"<th>{_e(c)}</th>" for c in shown.columns)
    cells = {c: _tables.format_column(shown[c]) for c in shown.columns}
    rows = "".join("<tr>" + "".join(f"<td>{_e(cells[c].iloc[i])}</td>" for c in shown.columns) + "</tr>"
                   for i in range(len(shown)))
    more = f"<p class=\"links\">{len(table) - max_rows} more rows not shown.</p>" if len(table) > max_rows else ""
    return (f'<p class="ratio"><b>{_e(here.name)} / {_e(other.name)}</b>: {_e(line)}</p>'
            f'<table class="ratios"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{more}')


def _notebook_section(nb: str, machines: list[Machine], base: Path, problems: dict[str, list[str]],
                      gpu: Machine | None = None) -> str:
    number, title = _paper_of(nb)
    parts = [f'<section id="{_e(nb)}"><h3>{_e(nb)}</h3><p class="paper-of">Paper {_e(number)}: {_e(title)}</p>']
    figures = []
    for m in machines:
        fig = main_figure(m.folder(nb), m.environment(nb) or {}) if nb in m.notebooks else None
        if fig is not None:
            svg = fig.with_suffix(".svg")
            target = svg if paths.listable(svg) else fig
            figures.append(f'<figure><a href="{_link(target, base)}">'
                           f'<img src="{_data_uri(fig, base)}" alt="{_e(fig.stem)}">'
                           f"</a><figcaption>{_e(m.name)}: {_e(fig.stem)}</figcaption></figure>")
    parts.append(f'<div class="figures">{"".join(figures)}</div>' if figures else "<p>No figure saved.</p>")
    parts.append(_ratio_html(nb, next((m for m in machines if m.name == THIS_MACHINE), None), gpu))
    for m in machines:
        if nb not in m.notebooks:
            continue
        folder = m.folder(nb)
        # The sweeps' stores are in stores/, not globbed; older cnnlab kept them here, with their .env.json beside.
        tables = [p for p in sorted(folder.glob("*.csv")) if not p.with_name(p.name + ".env.json").exists()
                  and paths.listable(p)]
        links = [f'<a href="{_link(p, base)}">{_e(p.name)}</a>' for p in tables]
        if nb in m.html:
            links.insert(0, f'<a href="{_link(m.html[nb], base)}"><strong>executed notebook</strong></a>')
        parts.append(f"<h4>{_e(m.name)}</h4><p class=\"links\">{' · '.join(links) or 'no files'}</p>")
        if m.name == THIS_MACHINE:
            flag = _last_run_flag(nb, m.environment(nb), problems.get(nb, []), m.executed.get(nb))
            parts.append(f'<div class="stale">{_e(flag)}</div>' if flag else "")
        if m.name == THIS_MACHINE and problems.get(nb):
            items = "".join(f"<li>{_e(p)}</li>" for p in problems[nb])
            parts.append(f'<div class="problems">The executed notebook has outputs to look at:<ul>{items}</ul></div>')
        table = m.claims(nb)
        parts.append(_claims.as_html(table) if table is not None and len(table) else
                     "<p>No claims: the notebook stopped before <code>studies.save</code>.</p>")
    parts.append("</section>")
    return "".join(parts)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1400px; padding: 0 1em; color: #1f2328; }
table { border-collapse: collapse; margin: 1em 0; width: 100%; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
thead th { background: #f6f8fa; position: sticky; top: 0; }
tr.paper th { background: #ddf4ff; }
.matrix { table-layout: fixed; } .matrix td { overflow-wrap: anywhere; }
.criterion { color: #57606a; font-size: 0.85em; margin-top: 2px; }
.verdict { display: block; font-weight: bold; } .ours { display: block; font-size: 0.85em; }
.held-held { background: #dafbe1; } .held-held .verdict { color: #1a7f37; }
.held-not { background: #ffebe9; } .held-not .verdict { color: #cf222e; }
.held-inc { background: #fff8c5; } .held-inc .verdict { color: #9a6700; }
.held-na, .held-none { background: #f6f8fa; color: #57606a; }
.env th { width: 14em; } .figures { display: flex; flex-wrap: wrap; gap: 1em; }
figure { margin: 0; flex: 1 1 640px; max-width: 100%; }
figure img { display: block; max-width: 100%; max-height: 85vh; width: auto; height: auto; margin: 0 auto;
             border: 1px solid #d0d7de; }
.summary span { padding: 1px 6px; border-radius: 3px; } .stale { background: #ffebe9; padding: 0.5em 1em; }
figcaption, .paper-of, .links { color: #57606a; font-size: 0.9em; }
.damaged { background: #ffebe9; padding: 0.5em 1em; }
.ratio { background: #ddf4ff; padding: 0.5em 1em; } .ratios { width: auto; font-size: 0.9em; }
.problems { background: #fff8c5; padding: 0.5em 1em; } section { border-top: 2px solid #d0d7de; margin-top: 2em; }
"""


def _damaged_html(machines: list[Machine], base: Path) -> str:
    """A note naming each file the page skipped and what is wrong with it ("" when none was)."""
    damaged = {path: wrong for m in machines for path, wrong in m.damaged.items()}
    if not damaged:
        return ""
    items = "".join(f"<li><code>{_e(_shown_path(path, base))}</code>: {_e(wrong)}</li>"
                    for path, wrong in sorted(damaged.items()))
    return (f'<div class="damaged"><b>{len(damaged)} damaged file{"s" if len(damaged) > 1 else ""} left out</b> '
            f"(run the notebook again to rewrite it, or copy the file again from the machine that made it):"
            f"<ul>{items}</ul></div>")


def _shown_path(path: Path, base: Path) -> str:
    """``path`` relative to the page's folder where it is inside it, else in full."""
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return str(path)


def build_page(machines: list[Machine], base: Path, problems: dict[str, list[str]] | None = None) -> str:
    """The report page's HTML for ``machines`` (links relative to the folder ``base``, where the page goes)."""
    problems = problems or {}
    notebooks = sorted({nb for m in machines for nb in m.notebooks})
    when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    if not machines:
        body = "<p>No results yet: run <code>make figures</code>.</p>"
    else:
        toc = "".join(f'<li><a href="#{_e(nb)}">{_e(nb)}</a></li>' for nb in notebooks)
        gpu = gpu_reference(machines)
        body = (
            _summary_html(machines, notebooks) +
            "<h2>Claims</h2><p>Each row is a claim of a paper, each column a machine: <b>held</b>, <b>did not hold</b>,"
            " <b>inconclusive: within noise</b> (the measurements compared overlap within their p10-p90 spread, shown"
            " in the cell) or <b>n/a</b> (does not apply on that device), with what we measured. Hover a cell for its"
            " criterion and note.</p>" + _claims_matrix(machines, notebooks) +
            "<h2>Machines</h2>" + _environment_table(machines) + _provenance_html(machines, base) +
            f"<h2>Notebooks</h2><ul>{toc}</ul>" +
            "".join(_notebook_section(nb, machines, base, problems, gpu) for nb in notebooks))
        body = _damaged_html(machines, base) + body  # (after the rest: reading it names the damaged files)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>cnnlab report</title>'
            f"<style>{STYLE}</style></head><body><h1>cnnlab: three papers' claims, checked</h1>"
            f"<p>Written {_e(when)} by <code>make report</code> from <code>figures/</code>; "
            f"machines: {_e(', '.join(m.name for m in machines)) or 'none'}.</p>{body}</body></html>\n")


def write(figures_root: str | Path | None = None, executed: str | Path | None = None,
          out: str | Path | None = None) -> Path:
    """Write the report page (default ``figures/index.html``) from ``figures_root`` (default
    :func:`cnnlab.paths.figures_root`) and the executed notebooks in ``executed`` (default ``build/notebooks``),
    rendered into ``figures_root/notebooks/``. Returns the page's path."""
    from cnnlab.plotting import write_atomic

    figures_root = Path(figures_root) if figures_root else paths.figures_root()
    executed = Path(executed) if executed else paths.base() / "build" / "notebooks"
    out = Path(out) if out else figures_root / "index.html"
    machines = find_machines(figures_root)
    rendered = render_notebooks(executed, figures_root / "notebooks")
    problems = {nb: notebook_problems(executed / f"{nb}.ipynb") for nb in rendered}
    for m in machines:
        if m.name == THIS_MACHINE:
            m.html = rendered
            m.executed = {nb: executed / f"{nb}.ipynb" for nb in rendered}
    page = build_page(machines, out.parent, problems)
    return write_atomic(out, lambda tmp: tmp.write_text(page, encoding="utf-8"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write figures/index.html: every machine's claims, figures and "
                                                 "environment on one static page.")
    parser.add_argument("--figures", help="results folder (default: $CNNLAB_FIGURES_DIR or figures/)")
    parser.add_argument("--notebooks", help="executed notebooks (default: build/notebooks/)")
    parser.add_argument("--out", help="the page (default: <figures>/index.html)")
    args = parser.parse_args(argv)
    try:
        page = write(args.figures, args.notebooks, args.out)
    except OSError as err:  # write_atomic's message names the file and the free space; no traceback needed
        print(f"cnnlab.report: the report was not written: {err}", file=sys.stderr)
        return 1
    print(f"[cnnlab] report: {page.resolve()}")  # the last line make figures prints: where to open it
    return 0


if __name__ == "__main__":
    sys.exit(main())
