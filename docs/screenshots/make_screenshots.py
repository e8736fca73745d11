"""The screenshots in docs/screenshots/, taken in headless Chromium (Debian's chromium and chromium-driver, as
tests/test_browser.py uses them, whose JupyterLab and Chromium helpers this reuses):

- report-in-jupyterlab.png: figures/index.html opened inside JupyterLab (its HTML viewer, as double-clicking the
  file in the file browser opens it), scrolled to the first notebook's figures. The report is written from the
  results `make test` left in build/test-figures/ (quick preset, this machine) where they exist, else from
  figures/.
- make-lab-landing.png: what the URL `make lab` prints opens (a copy of notebooks/ served, as `make lab` serves
  the checkout).
- explorer-beside-gpu.png: notebooks/explore.ipynb run in JupyterLab over this machine's results (build/test-figures/
  where they exist, else figures/; or the folder named by $SCREENSHOT_RESULTS) with figures/reference/ beside them:
  the explorer opens with the GPU reference beside this machine, the plot, the points and their ratio.

    .venv/bin/python docs/screenshots/make_screenshots.py [report] [lab] [explorer]

Each is saved as a PNG of at most 256 colours (small enough to commit); the script says where and how large. To
add one, write a function taking (driver, work folder) that returns the image's path, and list it in SHOTS.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import urllib.request
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


def explorer_beside_gpu(driver, work: Path) -> Path:
    from selenium.webdriver.common.by import By

    named = os.environ.get("SCREENSHOT_RESULTS")
    results = Path(named) if named else next(p for p in (ROOT / "build" / "test-figures", ROOT / "figures")
                                             if any(p.glob("[0-9][0-9]_*")))
    figures = work / "figures"
    shutil.copytree(results, figures, ignore=shutil.ignore_patterns("stores", "traces", "notebooks", "reference"))
    shutil.copytree(ROOT / "figures" / "reference", figures / "reference")
    (work / "nb").mkdir()
    shutil.copy(tb.NOTEBOOK, work / "nb" / tb.NOTEBOOK.name)
    (work / "lab").mkdir()
    driver.set_window_size(1400, 1700)  # the dropdowns, the plot, the points and their ratio in one view
    with tb.jupyterlab(work / "nb", work / "lab", {"CNNLAB_FIGURES_DIR": str(figures)}) as (url, token, _):
        session = {"path": tb.NOTEBOOK.name, "name": tb.NOTEBOOK.name, "type": "notebook",
                   "kernel": {"name": "python3"}}  # (started first: Lab attaches to it, no kernel dialog)
        urllib.request.urlopen(urllib.request.Request(
            f"{url}/api/sessions", data=json.dumps(session).encode(), method="POST",
            headers={"Authorization": f"token {token}", "Content-Type": "application/json"}), timeout=60).close()
        driver.get(f"{url}/lab/tree/{tb.NOTEBOOK.name}?token={token}")
        tb.wait_for(lambda: tb._kernel_ready(driver), "the notebook to open with an idle kernel")
        tb.wait_for(lambda: next((e for e in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-item")
                                  if e.text.strip() == "Run"), None), "the Run menu").click()
        tb.wait_for(lambda: next((e for e in driver.find_elements(By.CSS_SELECTOR, ".lm-Menu-item .lm-Menu-itemLabel")
                                  if e.text.strip() == "Run All Cells"), None), "Run All Cells").click()
        tb.wait_for(lambda: tb._pixels(driver), "the explorer's plot")
        caption = tb.wait_for(lambda: tb._caption(driver), "the explorer's caption")
        beside = tb.wait_for(lambda: tb._dropdown(driver, "beside"), "the beside dropdown")
        chosen = beside.find_element(By.CSS_SELECTOR, "option:checked").text
        assert chosen in {p.name for p in (figures / "reference").iterdir()}, chosen
        assert f"this machine / {chosen}" in caption, caption
        driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", tb._dropdown(driver, "machine"))
        return _small_png(driver.get_screenshot_as_png(), HERE / "explorer-beside-gpu.png")


SHOTS = {"report": report_in_jupyterlab, "lab": make_lab_landing, "explorer": explorer_beside_gpu}


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
