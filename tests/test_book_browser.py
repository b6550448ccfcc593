"""The rendered book, checked in a real (headless) browser.

The book is built into a temporary folder and opened in Chromium through a local HTTP server on
127.0.0.1. The checks are what a reader sees: typeset math, a loaded figure, an exercise solution that
stays hidden until it is clicked, a chapter menu that opens on a phone, bibliography labels that read
like the citations, and no error in the browser console on any page. MathJax is served from the built site
(see ``_ext/local_mathjax.py``), so nothing here touches the network.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "chapters/01_embeddings"
CHAPTERS = sorted(f"chapters/{p.stem}" for p in (ROOT / "chapters").glob("*.ipynb"))
PAGES = ["intro", *CHAPTERS, "bibliography"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

if not (CHROMIUM and CHROMEDRIVER):
    if os.environ.get("CI"):
        raise RuntimeError("CI must install Chromium and ChromeDriver (Debian: chromium chromium-driver)")
    pytest.skip("Chromium and ChromeDriver are not installed", allow_module_level=True)

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Build the whole book with warnings as errors; serve it on 127.0.0.1."""
    out = tmp_path_factory.mktemp("book")
    build = subprocess.run(
        [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", "build", str(ROOT),
         "--path-output", str(out), "-W", "-n", "--keep-going"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    html = out / "_build" / "html"
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(html))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def page(site, tmp_path_factory):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-quic", "--window-size=1280,2000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER),
                              options=options)
    driver.set_page_load_timeout(60)
    driver.get(f"{site}/{CHAPTER}.html")
    # MathJax typesets asynchronously: wait until it says it is done.
    WebDriverWait(driver, 60).until(lambda d: d.execute_script(
        "return !!(window.MathJax && MathJax.startup && MathJax.startup.promise"
        " && document.querySelector('mjx-container'))"))
    driver.execute_async_script("MathJax.startup.promise.then(arguments[arguments.length - 1]);")
    yield driver
    driver.quit()


def test_mathjax_is_served_locally(page):
    sources = page.execute_script(
        "return Array.from(document.scripts).map(s => s.src).filter(s => s.includes('tex-'))")
    assert sources and all(s.startswith("http://127.0.0.1") for s in sources), sources


def test_math_is_typeset(page):
    counts = page.execute_script(
        """const math = Array.from(document.querySelectorAll('article .math'));
        return [math.length, math.filter(m => m.querySelector('mjx-container')).length];""")
    assert counts[0] >= 1 and counts[0] == counts[1], f"typeset {counts[1]} of {counts[0]} formulas"
    prose = page.execute_script(
        """const article = document.querySelector('article').cloneNode(true);
        article.querySelectorAll('pre, .cell_input, .cell_output, mjx-container, script')
               .forEach(e => e.remove());
        return article.innerText;""")
    for raw in ["$$", "\\[", "\\begin{", "\\frac"]:
        assert raw not in prose, f"raw TeX {raw!r} left in the rendered text"


def test_a_figure_loaded(page):
    widths = page.execute_script(
        "return Array.from(document.querySelectorAll('.cell_output img')).map(i => i.naturalWidth)")
    assert widths and max(widths) > 0, widths


def test_solution_is_hidden_until_clicked(page):
    solution = page.find_element(By.CSS_SELECTOR, "div.solution")
    body = solution.find_element(By.CSS_SELECTOR, "section")
    assert not body.is_displayed()
    button = solution.find_element(By.CSS_SELECTOR, "button.toggle-button")
    page.execute_script("arguments[0].scrollIntoView({block: 'center', behavior: 'instant'});", button)
    button.click()
    WebDriverWait(page, 10).until(lambda d: body.is_displayed())
    assert body.text.strip()


def test_no_console_errors_and_no_test_markers_on_any_page(page, site):
    problems = []
    try:
        for name in PAGES:
            page.get(f"{site}/{name}.html")
            WebDriverWait(page, 30).until(
                lambda d: d.execute_script("return document.readyState") == "complete")
            errors = [entry["message"] for entry in page.get_log("browser") if entry["level"] == "SEVERE"]
            problems += [f"{name}: {e}" for e in errors]
            text = page.execute_script("return document.querySelector('article').innerText")
            if "NBVAL" in text:
                problems.append(f"{name}: an nbval marker is visible")
    finally:
        page.get(f"{site}/{CHAPTER}.html")
    assert not problems, "\n".join(problems)


def test_sidebar_opens_from_the_toggle_on_a_phone(page, site):
    page.set_window_size(400, 900)
    try:
        page.get(f"{site}/chapters/06_transformer.html")
        toggles = [b for b in page.find_elements(By.CSS_SELECTOR, "button.primary-toggle")
                   if b.is_displayed()]
        assert len(toggles) == 1, f"{len(toggles)} visible menu buttons"
        open_sidebar = """return Array.from(document.querySelectorAll('.bd-sidebar-primary'))
            .filter(e => { const r = e.getBoundingClientRect(); return r.width > 100 && r.left >= 0
                           && getComputedStyle(e).visibility === 'visible'; })
            .map(e => e.innerText).join(' ');"""
        assert not page.execute_script(open_sidebar), "the chapter menu is open before the click"
        toggles[0].click()
        WebDriverWait(page, 10).until(lambda d: d.execute_script(open_sidebar))
        assert "transformer" in page.execute_script(open_sidebar).lower()
        searches = [e for e in page.find_elements(By.CSS_SELECTOR,
                                                  "button.search-button, .search-button-field")
                    if e.is_displayed()]
        assert len(searches) <= 1, "a second search box is shown"
    finally:
        page.set_window_size(1280, 2000)
        page.get(f"{site}/{CHAPTER}.html")


def test_bibliography_labels_read_like_the_citations(page, site):
    page.get(f"{site}/bibliography.html")
    try:
        labels = page.execute_script(
            "return Array.from(document.querySelectorAll('.citation .label, dt.label'))"
            ".map(e => e.innerText)")
        assert labels, "no bibliography entries found"
        assert any("Harris, 1954" in label for label in labels), labels[:5]
        assert not any(label.strip("[]") == "Har54" for label in labels)
    finally:
        page.get(f"{site}/{CHAPTER}.html")


EQUATIONS = """
const column = document.querySelector('article').getBoundingClientRect(), problems = [];
document.querySelectorAll('article div.math').forEach((math, i) => {
  const box = math.querySelector('mjx-container');
  if (!box) { problems.push(`${math.id || i}: not typeset`); return; }
  const outer = math.getBoundingClientRect(), shown = box.getBoundingClientRect();
  const inner = (box.firstElementChild || box).getBoundingClientRect();
  const number = math.querySelector('.eqno');
  if (outer.right > column.right + 1 || outer.left < column.left - 1)
    problems.push(`${math.id || i}: wider than the text column`);
  if (number) {
    const n = number.getBoundingClientRect();
    const right = Math.min(inner.right, shown.right);
    const apart = n.right <= inner.left || n.left >= right || n.bottom <= inner.top || n.top >= inner.bottom;
    if (!apart) problems.push(`${math.id || i}: its number covers the equation`);
  }
});
return problems;"""


@pytest.mark.parametrize("width", [1400, 400])
def test_display_equations_fit_and_numbers_do_not_cover_them(page, site, width):
    page.set_window_size(width, 1000)
    problems = []
    try:
        for name in PAGES:
            page.get(f"{site}/{name}.html")
            page.execute_async_script(
                "const done = arguments[arguments.length - 1];"
                "(window.MathJax && MathJax.startup ? MathJax.startup.promise : Promise.resolve())"
                ".then(() => setTimeout(done, 200));")
            problems += [f"{name} at {width} px: {p}" for p in page.execute_script(EQUATIONS)]
    finally:
        page.set_window_size(1280, 2000)
        page.get(f"{site}/{CHAPTER}.html")
    assert not problems, "\n".join(problems)
