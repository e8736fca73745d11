"""The screenshots in docs/screenshots/, taken in headless Chromium (Debian's chromium and chromium-driver, as
tests/test_browser.py uses them, whose JupyterLab and Chromium helpers this reuses):

- report-in-jupyterlab.png: figures/index.html opened inside JupyterLab (its HTML viewer, as double-clicking the
  file in the file browser opens it), scrolled to the first notebook's figures. The report is written from the
  results `make test` left in build/test-figures/ (quick preset, this machine) where they exist, else from
  figures/.
- make-lab-landing.png: what the URL `make lab` prints opens (a copy of notebooks/ served, as `make lab` serves
  the checkout).

    .venv/bin/python docs/screenshots/make_screenshots.py [report] [lab]

Each is saved as a PNG of at most 256 colours (small enough to commit); the script says where and how large. To
add one, write a function taking (driver, work folder) that returns the image's path, and list it in SHOTS.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "tests")]

import test_browser as tb  # noqa: E402  (the tests' JupyterLab and Chromium helpers)

WINDOW = "1400,900"


def _small_png(png: bytes, path: Path) -> Path:
    """``png`` (a screenshot) saved as ``path`` with at most 256 colours."""
    import io

    from PIL import Image

    Image.open(io.BytesIO(png)).convert("RGB").quantize(256, dither=Image.Dither.NONE).save(path, optimize=True)
    return path


def report_in_jupyterlab(driver, work: Path) -> Path:
    from cnnlab import report

    results = next(p for p in (ROOT / "build" / "test-figures", ROOT / "figures") if any(p.glob("[0-9][0-9]_*")))
    shutil.copytree(results, work / "figures", ignore=shutil.ignore_patterns("stores", "traces", "notebooks"))
    report.write(work / "figures", work / "no-executed-notebooks")
    (work / "lab").mkdir()
    with tb.jupyterlab(work, work / "lab") as (url, token, _):
        images = tb.open_in_lab_html_viewer(driver, url, token, "figures/index.html")
        assert images and all(width > 0 for _, _, width in images), images
        # the first notebook's section, its figures in view (the frame is the current browsing context)
        driver.execute_script("document.querySelector('section').scrollIntoView({block: 'start'})")
        driver.switch_to.default_content()
        return _small_png(driver.get_screenshot_as_png(), HERE / "report-in-jupyterlab.png")


def make_lab_landing(driver, work: Path) -> Path:
    root = work / "checkout"
    (root / "build").mkdir(parents=True)
    (root / "figures").mkdir()
    shutil.copytree(ROOT / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    shutil.copy(ROOT / "README.md", root)
    (work / "lab").mkdir()
    with tb.make_lab(root, work / "lab") as url:
        tb.lands_on(driver, url, "notebooks/00_quickstart.ipynb")
        return _small_png(driver.get_screenshot_as_png(), HERE / "make-lab-landing.png")


SHOTS = {"report": report_in_jupyterlab, "lab": make_lab_landing}


def main(names: list[str]) -> int:
    if tb.MISSING:
        print(f"no screenshots: {tb.MISSING}", file=sys.stderr)
        return 1
    for name in names or list(SHOTS):
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            with tb.chromium(work, WINDOW) as driver:
                path = SHOTS[name](driver, work)
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size / 1000:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
