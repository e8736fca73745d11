"""README.md: short enough to read, its links to docs/ resolve, and its tables are docs/findings_table.py's output
(issue 34, item 7)."""

import importlib.util
import re
import shutil
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _findings_table():
    spec = importlib.util.spec_from_file_location("findings_table", ROOT / "docs" / "findings_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _links(path: Path) -> list[str]:
    """Relative link targets of a Markdown file (no scheme, no pure anchor), anchors dropped."""
    targets = re.findall(r"\]\(([^)\s]+)\)", path.read_text())
    return [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_the_readme_is_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= 300


def test_every_relative_link_in_the_readme_and_docs_resolves():
    pages = [README] + sorted((ROOT / "docs").glob("*.md"))
    broken = [f"{page.relative_to(ROOT)} -> {t}" for page in pages for t in _links(page)
              if not (page.parent / t).resolve().exists()]
    assert broken == []
    docs = [t for t in _links(README) if t.startswith("docs/")]
    assert docs, "the README links its deep notes in docs/"
    assert {"docs/api-audit.md", "docs/under-the-hood.md"} <= set(docs)


def test_the_readme_tables_are_what_docs_findings_table_prints():
    """Nothing in "What it found" or "How long a run takes" is typed by hand: both are the script's output for the
    results copied under docs/findings/."""
    text = README.read_text()
    ft = _findings_table()
    for table in (ft.findings(), ft.times()):
        assert table in text, "README.md's table differs from python docs/findings_table.py: paste its output"
    for run in (ft.CPU, ft.GPU):
        assert ft.source(run) in text


def test_the_findings_table_names_every_verdict_and_every_notebook():
    ft = _findings_table()
    table = ft.findings()
    rows = [r for r in table.splitlines()[2:]]
    assert {r.split(" | ")[0].strip("| ") for r in rows} - {""} == set(ft.NOTEBOOKS)
    cpu = {r.split(" | ")[2] for r in rows}
    assert cpu <= {"held", "did not hold", "inconclusive", "n/a", "—"}
    assert "not run" in table  # the GPU run has no claims.csv for the studies it stopped


def test_the_findings_table_renames_verdicts_and_marks_claims_one_run_lacks(tmp_path):
    ft = _findings_table()
    for run, held in (("a", ["yes", "n/a"]), ("b", ["inconclusive", "no"])):
        (tmp_path / run / "quickstart").mkdir(parents=True)
        claims = ["same claim", f"only in {run}"]
        (tmp_path / run / "quickstart" / "claims.csv").write_text(
            "claim,held\n" + "".join(f"{c},{h}\n" for c, h in zip(claims, held)))
    table = ft.findings(tmp_path / "a", tmp_path / "b")
    assert "| 00_quickstart | same claim | held | inconclusive |" in table
    assert "|  | only in a | n/a | — |" in table and "|  | only in b | — | did not hold |" in table
    assert "| 01_batch_size |" not in table


def test_the_findings_table_judges_the_stored_tables_with_this_checkouts_claims(tmp_path):
    ft = _findings_table()
    stored = ROOT / "docs" / "findings" / "cpu-47358f6" / "00_quickstart"
    for run in ("a", "b"):
        shutil.copytree(stored, tmp_path / run / "00_quickstart")
    judged = ft.verdicts(tmp_path / "a", "00_quickstart")
    assert set(judged.values()) <= {"held", "did not hold", "inconclusive", "n/a"}
    claims_csv = tmp_path / "a" / "00_quickstart" / "claims.csv"
    table = pd.read_csv(claims_csv, keep_default_na=False)
    table["held"] = "wrong"  # what claims.csv says is not read where the tables are there
    table.to_csv(claims_csv, index=False)
    assert ft.verdicts(tmp_path / "a", "00_quickstart") == judged
    for f in (tmp_path / "b" / "00_quickstart").glob("quickstart*.csv"):
        f.unlink()  # without the tables: claims.csv's verdicts
    assert list(ft.verdicts(tmp_path / "b", "00_quickstart").values()) == [
        ft.VERDICT[h] for h in pd.read_csv(stored / "claims.csv", keep_default_na=False)["held"]]
