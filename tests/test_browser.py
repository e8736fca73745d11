"""The explorer in a real browser: JupyterLab on 127.0.0.1 (a free port, a token) serving a copy of
notebooks/explore.ipynb over a small results tree, headless Chromium driven by Selenium through the system's
chromedriver. It opens the notebook, runs all cells from the Run menu, waits for the widgets, picks another metric
in the metric dropdown, checks that the plot's pixels and the caption change, and saves a screenshot as
build/explore-browser.png.

Skipped, with the reason, where Chromium, chromedriver or Selenium is missing (`.ci/run` installs Chromium).
Every process it starts (JupyterLab, its kernel, chromedriver, Chromium) is stopped at the end, pass or fail.
It waits on conditions, never on fixed sleeps, with generous limits: it runs beside other tests on two cores.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from test_explore import write_figures_tree
from test_report import png, two_machines  # noqa: F401  (two_machines: a fixture, two machines' results and an executed
#                                            notebook; png: a real PNG's bytes)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "explore.ipynb"
SCREENSHOT = ROOT / "build" / "explore-browser.png"
REPORT_SCREENSHOT = ROOT / "build" / "report-browser.png"
TIMEOUT_S = 240  # JupyterLab's first page load and a kernel start on two busy cores


def _browser() -> tuple[str | None, str | None, str]:
    """(chromium, chromedriver, why the test cannot run: "" when it can). $CNNLAB_CHROMIUM and
    $CNNLAB_CHROMEDRIVER name other binaries (a Chrome elsewhere); otherwise Debian's, found on PATH."""
    def find(variable: str, names: tuple[str, ...]) -> str | None:
        if os.environ.get(variable):
            return shutil.which(os.environ[variable])
        return next(filter(None, map(shutil.which, names)), None)

    chromium = find("CNNLAB_CHROMIUM", ("chromium", "chromium-browser", "google-chrome"))
    driver = find("CNNLAB_CHROMEDRIVER", ("chromedriver", "/usr/bin/chromedriver"))
    try:
        import selenium  # noqa: F401
    except ImportError:
        return chromium, driver, "Selenium is not installed (pip install -e '.[test]')"
    if not chromium or not driver:
        missing = " and ".join(n for n, path in (("Chromium", chromium), ("chromedriver", driver)) if not path)
        return chromium, driver, (f"{missing} not found (Debian: apt-get install chromium chromium-driver, as "
                                  ".ci/run does; or set CNNLAB_CHROMIUM / CNNLAB_CHROMEDRIVER)")
    return chromium, driver, ""


def _lab_cannot_show_widgets() -> str:
    """Why JupyterLab cannot show the explorer's widgets in this environment ("" when it can): JupyterLab 4 shows
    widgets from ipywidgets 8 only (`make setup`'s [lab] extra installs 8.1+; ipywidgets 7 is Colab's, whose
    frontend is not JupyterLab: the explorer then says what to install, tests/test_explore.py)."""
    try:
        import ipywidgets
    except ImportError:
        return "ipywidgets is not installed"
    if int(ipywidgets.__version__.split(".")[0]) < 8:
        return f"ipywidgets {ipywidgets.__version__}: JupyterLab 4 shows widgets from ipywidgets 8 only"
    return ""


CHROMIUM, CHROMEDRIVER, MISSING = _browser()
LAB_WIDGETS_MISSING = _lab_cannot_show_widgets()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(MISSING), reason=f"real-browser test skipped: {MISSING}")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, what: str, timeout: float = TIMEOUT_S, interval: float = 0.25, log: Path | None = None):
    """Poll ``condition()`` until it returns something true and return that; AssertionError naming ``what`` (and
    the tail of ``log``) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{tail}")


def stop_processes(processes: list[psutil.Process], timeout: float = 20) -> list[psutil.Process]:
    """SIGTERM, then SIGKILL after ``timeout`` seconds, each of ``processes`` still running; returns those that
    survived both (none, normally)."""
    alive = [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for stop in (psutil.Process.terminate, psutil.Process.kill):
        for p in alive:
            try:
                stop(p)
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(alive, timeout=timeout)
    return alive


def _family(pid: int) -> list[psutil.Process]:
    try:
        parent = psutil.Process(pid)
        return [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@contextlib.contextmanager
def jupyterlab(root: Path, tmp_path: Path, env: dict[str, str] | None = None):
    """JupyterLab serving the folder ``root`` on 127.0.0.1 (a free port, a token), with its own config, settings and
    workspace folders (no user state, no news pop-up) and ``env`` added to its environment. Yields (base URL,
    token, a function noting the processes it started); stops the server, its kernels and anything else it
    started."""
    settings = tmp_path / "lab-settings"
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False, "doNotDisturbMode": True}))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, **(env or {}), "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"), "JUPYTERLAB_SETTINGS_DIR": str(settings),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "lab-workspaces"), "OMP_NUM_THREADS": "1"}
    env.pop("MPLBACKEND", None)  # the kernel's own (inline) backend, as a person's JupyterLab has
    log = tmp_path / "jupyter.log"
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               "--ServerApp.terminals_enabled=False", "--LabApp.extension_manager=readonly"]
    if os.geteuid() == 0:
        command.append("--allow-root")  # CI and this machine run as root
    with open(log, "w") as out:
        server = subprocess.Popen(command, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    seen: dict[int, psutil.Process] = {}

    def up() -> bool:
        assert server.poll() is None, f"jupyter lab exited with {server.returncode}:\n{log.read_text()[-3000:]}"
        seen.update({p.pid: p for p in _family(server.pid)})
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        wait_for(up, "JupyterLab to answer", log=log)
        yield url, token, lambda: seen.update({p.pid: p for p in _family(server.pid)})
    finally:
        seen.update({p.pid: p for p in _family(server.pid)})  # the kernels are children of the server
        try:  # the server's own shutdown stops its kernels cleanly
            request = urllib.request.Request(f"{url}/api/shutdown", method="POST",
                                             headers={"Authorization": f"token {token}"})
            urllib.request.urlopen(request, timeout=10).close()
        except OSError:
            pass
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGTERM)
        survivors = stop_processes(list(seen.values()))
        server.wait(timeout=30)
        assert not survivors, f"processes left running: {survivors}"


@pytest.fixture
def lab(tmp_path):
    """JupyterLab (:func:`jupyterlab`) serving a copy of the explorer notebook, with CNNLAB_FIGURES_DIR on a small
    results tree, the notebook's kernel already started. Yields (base URL, token, note the processes)."""
    figures = write_figures_tree(tmp_path / "figures")
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(NOTEBOOK, work / NOTEBOOK.name)  # a copy: Lab saves outputs into what it opens
    with jupyterlab(work, tmp_path, {"CNNLAB_FIGURES_DIR": str(figures)}) as (url, token, note_processes):
        # The notebook's session and kernel started beforehand, as a notebook opened before would have them: Lab
        # then attaches to it instead of asking, in a dialog, which kernel to start.
        session = {"path": NOTEBOOK.name, "name": NOTEBOOK.name, "type": "notebook", "kernel": {"name": "python3"}}
        request = urllib.request.Request(f"{url}/api/sessions", data=json.dumps(session).encode(), method="POST",
                                         headers={"Authorization": f"token {token}",
                                                  "Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=60).close()
        note_processes()
        yield url, token, note_processes


@contextlib.contextmanager
def chromium(tmp_path: Path, window: str = "1400,2200"):
    """Headless Chromium through the system's chromedriver (a browser cannot be downloaded here), its profile and
    logs in ``tmp_path``. Quits it and stops chromedriver and every Chromium process at the end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", f"--window-size={window}", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(arg)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to run as root inside its sandbox
    from selenium.common.exceptions import WebDriverException

    for attempt in range(3):  # selenium picks chromedriver's port free, then chromedriver binds it: a process
        # beside it (another test worker) may take it in between ("bind() failed: Address already in use", exit 1)
        log = tmp_path / f"chromedriver-{attempt}.log"
        service = Service(executable_path=CHROMEDRIVER, log_output=str(log))
        try:
            driver = webdriver.Chrome(service=service, options=options)
            break
        except WebDriverException:
            if attempt == 2 or "Address already in use" not in log.read_text(errors="replace"):
                raise
    driver.set_page_load_timeout(TIMEOUT_S)
    family = _family(service.process.pid)
    try:
        yield driver
    finally:
        family += _family(service.process.pid)
        try:
            driver.quit()
        finally:
            survivors = stop_processes(family)
            assert not survivors, f"browser processes left running: {survivors}"


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium (:func:`chromium`)."""
    with chromium(tmp_path) as driver:
        yield driver


# JavaScript run in the page: the plot's pixels (the <img> drawn on a canvas), so that "the plot changed" means
# the picture changed, not only its blob URL (a new one is made on every update).
PIXELS_JS = """
const img = document.querySelector('img.widget-image');
if (!img || !img.complete || img.naturalWidth === 0) return null;
const canvas = document.createElement('canvas');
canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
canvas.getContext('2d').drawImage(img, 0, 0);
return canvas.toDataURL('image/png');
"""


def _pixels(driver) -> str | None:
    data = driver.execute_script(PIXELS_JS)
    return hashlib.sha256(data.encode()).hexdigest() if data else None


def _caption(driver) -> str:
    texts = driver.execute_script(
        "return Array.from(document.querySelectorAll('.widget-html i')).map(e => e.textContent)")
    return next((t for t in texts if " against " in t), "")


def _kernel_ready(driver) -> bool:
    """The notebook is open, its kernel connected and idle, and no dialog is in the way (a kernel chooser, should
    Lab ask despite the running session, is answered with its default: this checkout's "python3")."""
    from selenium.webdriver.common.by import By

    for button in driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog .jp-Dialog-button.jp-mod-accept"):
        if button.text.strip() == "Select":
            button.click()
            return False
    if driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog"):
        return False
    return bool(driver.execute_script(
        "const p = document.querySelector('.jp-NotebookPanel');"
        "return p && p.querySelector('.jp-Notebook-ExecutionIndicator[data-status=\"idle\"]') &&"
        " !/No Kernel|Unknown/.test((p.querySelector('.jp-KernelName, .jp-Toolbar-kernelName') || {}).textContent"
        " || 'No Kernel')"))


def _dropdown(driver, label: str):
    from selenium.webdriver.common.by import By

    for box in driver.find_elements(By.CSS_SELECTOR, ".widget-dropdown"):
        if box.find_element(By.CSS_SELECTOR, "label").text.strip() == label:
            return box.find_element(By.CSS_SELECTOR, "select")
    return None


@pytest.mark.skipif(bool(LAB_WIDGETS_MISSING),
                    reason=f"JupyterLab cannot show the explorer's widgets: {LAB_WIDGETS_MISSING}")
def test_explorer_in_jupyterlab_changes_the_plot_when_a_dropdown_changes(lab, browser):
    url, token, note_processes = lab
    try:
        _open_run_and_change_the_metric(browser, url, token, note_processes)
    except BaseException:
        SCREENSHOT.parent.mkdir(exist_ok=True)
        browser.save_screenshot(str(SCREENSHOT.with_name("explore-browser-failed.png")))  # what the page showed
        raise


def _open_run_and_change_the_metric(browser, url: str, token: str, note_processes) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    started = time.monotonic()
    browser.get(f"{url}/lab/tree/{NOTEBOOK.name}?token={token}")
    wait_for(lambda: _kernel_ready(browser), "the notebook to open with an idle kernel")
    note_processes()

    # Run > Run All Cells, as a person would.
    menu = wait_for(lambda: next((e for e in browser.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-item")
                                  if e.text.strip() == "Run"), None), "the Run menu")
    menu.click()
    wait_for(lambda: next((e for e in browser.find_elements(By.CSS_SELECTOR, ".lm-Menu-item .lm-Menu-itemLabel")
                           if e.text.strip() == "Run All Cells"), None), "Run All Cells in the Run menu").click()

    first = wait_for(lambda: _pixels(browser), "the explorer's plot")
    caption = wait_for(lambda: _caption(browser), "the explorer's caption")
    assert "Latency median (ms) against Batch size: 14 rows" in caption, caption
    # The last cell (the notebook's checks) prints the caption only when every cell before it ran without error.
    # JupyterLab renders only the cells in view (4.2's windowing), so the notebook is scrolled to its end first (and
    # back after), and the last cell is the last .jp-Cell, not :last-child (4.2 puts a "Click to add a cell" footer
    # after it).
    def scroll(to: str) -> None:
        browser.execute_script("for (const el of document.querySelectorAll('.jp-WindowedPanel-outer, .jp-Notebook')) "
                               f"el.scrollTop = {to};")

    def last_cell_passed():
        scroll("el.scrollHeight")
        cells = browser.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell")
        return bool(cells) and any("against Batch size" in e.text for e in cells[-1].find_elements(
            By.CSS_SELECTOR, ".jp-OutputArea-output"))

    wait_for(last_cell_passed, "the notebook's last cell to pass")
    scroll("0")
    metric = wait_for(lambda: _dropdown(browser, "metric"), "the metric dropdown")
    assert Select(metric).first_selected_option.text == "latency_ms_median"
    # measured metrics only: not the grid (batch_size), the bookkeeping (point_time_s) or the status
    assert [o.text for o in Select(metric).options] == [
        "latency_ms_median", "throughput_items_per_s", "peak_mem_alloc_mib"]
    ran_all = time.monotonic() - started

    Select(metric).select_by_visible_text("throughput_items_per_s")
    wait_for(lambda: "Throughput (items/s) against Batch size" in _caption(browser), "the caption to follow")
    wait_for(lambda: (p := _pixels(browser)) and p != first, "the plot to change")
    tables = browser.find_elements(By.CSS_SELECTOR, ".widget-html table")
    assert "throughput_items_per_s" in tables[0].text and "latency_ms_median" not in tables[0].text
    assert "Error displaying widget" not in browser.page_source

    browser.execute_script("arguments[0].scrollIntoView({block: 'start'});", _dropdown(browser, "machine"))
    SCREENSHOT.parent.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOT)) and SCREENSHOT.stat().st_size > 10_000
    print(f"browser test: notebook opened and run in {ran_all:.0f} s, plot changed "
          f"{time.monotonic() - started - ran_all:.1f} s later; screenshot {SCREENSHOT}")
    note_processes()


def test_report_page_opens_with_the_summary_line_per_machine_and_paper(two_machines, browser):  # noqa: F811
    """figures/index.html as a reader's browser shows it: the summary comes first, with each machine's counts."""
    from selenium.webdriver.common.by import By

    from cnnlab import report

    page = report.write(two_machines / "figures", two_machines / "build" / "notebooks")
    browser.get(page.as_uri())
    summary = wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "ul.summary li"), "the summary line")
    assert [li.text for li in summary] == [
        "this machine, paper 001: 1 held, 1 did not hold, 0 inconclusive, 1 n/a",
        "h100, paper 001: 0 held, 1 did not hold, 0 inconclusive, 0 n/a"]
    first_heading = browser.find_element(By.CSS_SELECTOR, "h2")
    assert summary[0].location["y"] < first_heading.location["y"], "the summary stands above the first section"
    REPORT_SCREENSHOT.parent.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(REPORT_SCREENSHOT)) and REPORT_SCREENSHOT.stat().st_size > 10_000


IMAGES_JS = "return Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth])"


def open_in_lab_html_viewer(driver, url: str, token: str, path: str) -> list[list]:
    """Open the HTML file ``path`` (relative to the server's root) in JupyterLab's HTML viewer, as double-clicking it
    in the file browser does, and switch ``driver`` into the viewer's frame once the page and its images have
    loaded. Returns every image's [alt, complete, naturalWidth] (a broken one: complete, width 0)."""
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/lab/tree/{path}?token={token}")
    frame = wait_for(lambda: next(iter(driver.find_elements(By.CSS_SELECTOR, ".jp-HTMLViewer iframe")), None),
                     f"JupyterLab's HTML viewer to open {path}")

    def loaded():
        driver.switch_to.default_content()
        driver.switch_to.frame(frame)
        if not driver.execute_script("return document.readyState === 'complete' && !!document.querySelector('h1')"):
            return None
        images = driver.execute_script(IMAGES_JS)
        return images if images and all(complete for _, complete, _ in images) else None

    return wait_for(loaded, f"{path}'s page and its images to load inside JupyterLab")


def test_report_opened_in_jupyterlab_shows_every_figure(two_machines, browser, tmp_path):  # noqa: F811
    """figures/index.html opened in JupyterLab's file view (its HTML viewer, a sandboxed frame): every figure loads
    (issue 34: they were links to the PNGs beside the page, which JupyterLab's server refused the frame, 403
    "Blocking request from unknown origin", also after Trust HTML). So does an executed notebook's page."""
    import nbformat

    from cnnlab import report

    # an executed notebook with a figure among its outputs: its rendered page (figures/notebooks/) holds it too
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("plot()", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        "image/png": base64.b64encode(png("a figure output", 60, 40)).decode(), "text/plain": "<Figure>"})]
    nb.cells = [nbformat.v4.new_markdown_cell("# 02"), cell]
    nbformat.write(nb, two_machines / "build" / "notebooks" / "02_fp16.ipynb")
    report.write(two_machines / "figures", two_machines / "build" / "notebooks")
    (tmp_path / "lab").mkdir()
    with jupyterlab(two_machines, tmp_path / "lab") as (url, token, _):
        images = open_in_lab_html_viewer(browser, url, token, "figures/index.html")
        shown = [alt for alt, complete, width in images if complete and width > 0]
        assert shown == ["01_time", "01_time", "02_fig3"], f"images not shown inside JupyterLab: {images}"
        images = open_in_lab_html_viewer(browser, url, token, "figures/notebooks/02_fp16.html")
        assert [width for _, _, width in images] == [60], f"the executed notebook's figure inside JupyterLab: {images}"


@contextlib.contextmanager
def make_lab(root: Path, tmp_path: Path):
    """`make lab` as a person starts it (the Makefile's recipe; ``STAMP=`` skips its setup prerequisite), serving
    the folder ``root`` (passed in LAB_ARGS) on a free port, with its own Jupyter config, settings and workspace
    folders. Yields the URL of the line it prints under JupyterLab's URLs ("start with ...: <URL>"); stops the
    server, its kernels and everything else it started."""
    import queue
    import re
    import threading

    settings = tmp_path / "lab-settings"
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False, "doNotDisturbMode": True}))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"), "OMP_NUM_THREADS": "1",
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"), "JUPYTERLAB_SETTINGS_DIR": str(settings),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "lab-workspaces")}
    # (the PyPI extension manager's request, offline here, held the server's shutdown for 50 s)
    args = (f"--no-browser --port={_free_port()} --ServerApp.port_retries=0 --ServerApp.root_dir={root} "
            "--LabApp.extension_manager=readonly")
    proc = subprocess.Popen(["make", "--no-print-directory", "-C", str(ROOT), "lab", "STAMP=", f"LAB_ARGS={args}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    lines: queue.Queue = queue.Queue()  # read beside: a line that never comes fails at the deadline, not hangs
    threading.Thread(target=lambda: [*map(lines.put, proc.stdout), lines.put("")], daemon=True).start()
    seen: dict[int, psutil.Process] = {}
    printed, url = [], None
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while url is None and time.monotonic() < deadline:
            seen.update({p.pid: p for p in _family(proc.pid)})
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            assert line, "make lab ended:\n" + "".join(printed)
            printed.append(line)
            found = re.search(r"^ +start with \S+: (http://\S+)$", line)
            url = found and found[1]
        assert url, "make lab printed no start line:\n" + "".join(printed)
        yield url
    finally:
        seen.update({p.pid: p for p in _family(proc.pid)})  # the kernels are the server's children
        if url:
            try:  # the server's own shutdown stops its kernels cleanly
                base, token = re.match(r"(http://[^/]+)/.*[?&]token=(\w+)", url).groups()
                request = urllib.request.Request(f"{base}/api/shutdown", method="POST",
                                                 headers={"Authorization": f"token {token}"})
                urllib.request.urlopen(request, timeout=10).close()
                proc.wait(timeout=30)
            except (OSError, AttributeError, subprocess.TimeoutExpired):
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        survivors = stop_processes(list(seen.values()))
        proc.wait(timeout=30)
        assert not survivors, f"processes left running: {survivors}"


LANDING_JS = """
const tab = document.querySelector('#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel');
const crumbs = document.querySelector('.jp-FileBrowser .jp-BreadCrumbs');
const listed = Array.from(document.querySelectorAll('.jp-FileBrowser .jp-DirListing-itemText')).map(e => e.textContent);
const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
const cells = panel && !panel.querySelector('.jp-Spinner') ? panel.querySelectorAll('.jp-RenderedMarkdown').length : 0;
return [tab ? tab.textContent : null, crumbs ? crumbs.textContent : null, listed, cells];
"""


def lands_on(driver, url: str, notebook: str) -> list:
    """Open ``url`` and wait until JupyterLab shows ``notebook`` (a path under its root) as the current tab, its
    cells drawn, with the file browser in its folder; returns [current tab, the file browser's breadcrumbs, its
    listing, the number of markdown cells drawn]."""
    folder, name = notebook.rsplit("/", 1)
    driver.get(url)

    def landed():
        tab, crumbs, listed, cells = shown = driver.execute_script(LANDING_JS)
        return shown if tab == name and crumbs and folder in crumbs and name in listed and cells else None

    try:
        return wait_for(landed, f"JupyterLab to show {notebook}")
    except AssertionError as err:
        raise AssertionError(f"{err}: it shows {driver.execute_script(LANDING_JS)}") from None


def test_make_lab_printed_url_lands_on_the_quickstart_notebook(browser, tmp_path):
    """The URL `make lab` prints opens notebooks/00_quickstart.ipynb, the file browser in notebooks/ (issue 34: it
    opened the Launcher at the root)."""
    root = tmp_path / "checkout"  # a copy: JupyterLab may save what it opens
    (root / "build").mkdir(parents=True)
    shutil.copytree(ROOT / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    (tmp_path / "lab").mkdir()
    with make_lab(root, tmp_path / "lab") as url:
        assert "/lab/tree/notebooks/00_quickstart.ipynb?token=" in url, url
        tab, crumbs, listed, cells = lands_on(browser, url, "notebooks/00_quickstart.ipynb")
    assert "explore.ipynb" in listed and "Launcher" not in browser.title
