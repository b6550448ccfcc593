"""The rendered book, checked in a real (headless) browser.

The book is built from a clone of the project with virtual environments and build folders inside
(``book_build.clone_with_environments``: the build must ignore them) and opened in Chromium through a
local HTTP server on 127.0.0.1. Every page of the table of contents (read from ``_toc.yml``, so a new
chapter is covered without editing this file) is loaded once at a desktop width (1400 px) and once at a
phone width (400 px), and everything a reader would notice is collected on that one visit: math that
MathJax did not typeset, display equations that overflow or are covered by their number, figures that
did not load or are shown far from their intended size, alt texts that are file names, a chapter menu
that does not open, solutions that are open before they are clicked, code cells that scroll sideways,
test-harness markers and errors in the browser console. Each test then reports every problem of its kind
at once, naming the page, the width and the element. MathJax is served from the built site (see
``_ext/local_mathjax.py``), so nothing here touches the network; a reference
named twice ("Exercise Exercise 6.8") is reported too.
"""

from __future__ import annotations

import functools
import http.server
import threading
import urllib.request
from pathlib import Path

import pytest
from book_build import NOT_THE_BOOK, build_book, clone_with_environments
from browser import chromium, require_chromium

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = "chapters/01_embeddings"
WIDTHS = [1400, 400]
HEIGHT = 1000
require_chromium(module_level=True)

webdriver = pytest.importorskip("selenium.webdriver")
yaml = pytest.importorskip("yaml")
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def toc_pages() -> list[str]:
    """The pages of ``_toc.yml`` in reading order: the root, then every file of every part and section."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    pages = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                pages.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts") or [toc]:
        walk(part.get("chapters"))
    return [str(Path(p).with_suffix("")) if Path(p).suffix in {".md", ".ipynb"} else p for p in pages]


PAGES = toc_pages()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_the_planted_files_would_stop_a_build():
    """What ``site`` plants is the real hazard: its front matter is not YAML."""
    front = NOT_THE_BOOK.split("---")[1]
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(front)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Build the whole book with warnings as errors, from a clone with virtual environments and build
    folders inside (a reader's ``python -m venv .venv``); serve it on 127.0.0.1."""
    source = clone_with_environments(tmp_path_factory.mktemp("clone"))
    build_book(source, "-W", "-n", "--keep-going")
    html = source / "_build" / "html"
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(html)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def page(site, tmp_path_factory):
    """One headless Chromium for the whole module, with a fresh profile and the console log recorded."""
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"), WIDTHS[0], HEIGHT, console_log=True)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    yield driver
    driver.quit()


# Resolves to null once the page's math is typeset, its web fonts and images have loaded and the layout
# has settled; to a sentence when MathJax fails or never finishes.
SETTLED = """
const done = arguments[arguments.length - 1], start = Date.now();
const wantsMath = Array.from(document.scripts).some(s => /tex-[a-z]+\\.js/.test(s.src));
const settle = () => Promise.race([new Promise(r => setTimeout(r, 20000)),
  Promise.all([document.fonts.ready, ...Array.from(document.images).filter(i => !i.complete)
    .map(i => new Promise(r => { i.addEventListener('load', r); i.addEventListener('error', r); }))])])
  .then(() => requestAnimationFrame(() => setTimeout(() => done(null), 100)));
(function wait() {
  if (!wantsMath) return settle();
  if (window.MathJax && MathJax.startup && MathJax.startup.promise)
    return MathJax.startup.promise.then(settle, e => done(`MathJax failed: ${e}`));
  if (Date.now() - start > 40000) return done('MathJax did not start within 40 s');
  setTimeout(wait, 50);
})();"""

# Names for the findings: an equation by its number and label (or its TeX when it has none), an
# element by the section it is in.
NAMES = """
const article = document.querySelector('article.bd-article') || document.querySelector('article');
const allMath = article ? Array.from(article.querySelectorAll('div.math')) : [];
const shorten = (s, n = 60) => { s = (s || '').replace(/\\s+/g, ' ').trim();
  return s.length > n ? s.slice(0, n - 1) + '…' : s; };
const section = e => { const s = e.closest('section[id]'); return s ? `#${s.id}` : 'the top of the page'; };
const tex = e => { try { const item = MathJax.startup.document.getMathItemsWithin(e)[0];
  return item ? item.math : e.textContent; } catch (err) { return e.textContent; } };
const label = (math, i) => {
  const number = math.querySelector('.eqno');
  const n = number && number.firstChild ? number.firstChild.textContent.trim() + ' ' : '';
  if (math.id) return `equation ${n}#${math.id}`;
  return `unlabelled equation ${allMath.indexOf(math)} "${shorten(tex(math), 50)}" in ${section(math)}`;
};
const seen = e => e.checkVisibility({visibilityProperty: true, opacityProperty: true})
  && e.getBoundingClientRect().height > 0;
const describe = e => {
  const r = e.getBoundingClientRect(), math = e.closest('div.math');
  const name = e.tagName.toLowerCase() + (e.id ? `#${e.id}` : '')
    + Array.from(e.classList).slice(0, 2).map(c => `.${c}`).join('');
  return `${name} (${Math.round(r.left)} to ${Math.round(r.right)} px)`
    + (math ? ` in ${label(math)}` : ` in ${section(e)}`)
    + (e.innerText ? `: "${shorten(e.innerText, 40)}"` : '');
};
"""

# Display equations: inside the text column, and their number beside them, not on top of them.
EQUATIONS = NAMES + """
const column = document.querySelector('article').getBoundingClientRect(), problems = [];
document.querySelectorAll('article div.math').forEach((math, i) => {
  const box = math.querySelector('mjx-container');
  if (!box) { problems.push(`${label(math, i)}: not typeset`); return; }
  const outer = math.getBoundingClientRect(), shown = box.getBoundingClientRect();
  const inner = (box.firstElementChild || box).getBoundingClientRect();
  const number = math.querySelector('.eqno');
  if (outer.right > column.right + 1 || outer.left < column.left - 1)
    problems.push(`${label(math, i)}: wider than the text column`);
  if (number) {
    const n = number.getBoundingClientRect();
    const right = Math.min(inner.right, shown.right);
    const apart = n.right <= inner.left || n.left >= right || n.bottom <= inner.top || n.top >= inner.bottom;
    if (!apart) problems.push(`${label(math, i)}: its number covers the equation`);
  }
});
return problems;"""

# Everything else one visit can see, as [kind, finding] pairs. arguments[0]: the desktop width or not.
SURVEY = NAMES + """
const wide = arguments[0], found = [], add = (kind, text) => found.push([kind, text]);
if (!article) return [['math', 'the page has no article element']];
const column = article.getBoundingClientRect();

// 1. Math: every formula typeset, no MathJax error, no TeX left in the prose.
article.querySelectorAll('.math').forEach(m => {
  if (!m.querySelector('mjx-container'))
    add('math', `${m.tagName === 'DIV' ? label(m) : 'inline math "' + shorten(m.textContent, 50) + '" in '
        + section(m)} is not typeset`);
});
article.querySelectorAll('mjx-merror').forEach(e => {
  const m = e.closest('.math');
  add('math', `MathJax error "${shorten(e.textContent)}" in `
      + (m && m.tagName === 'DIV' ? label(m) : `"${shorten(m ? tex(m) : '', 50)}" in ${section(e)}`));
});
const prose = article.cloneNode(true);
prose.querySelectorAll('pre, .cell_input, .cell_output, mjx-container, script, style')
  .forEach(e => e.remove());
const text = prose.textContent;
const patterns = [/\\$\\$/g, /\\\\\\[/g, /\\\\begin\\{/g, /\\\\frac/g,
                  /\\$[A-Za-z\\\\{][^$\\n]{0,80}?\\$/g];  // the last: a lone $...$ around letters
for (const pattern of patterns)
  for (const hit of text.matchAll(pattern))
    add('math', `raw TeX "${shorten(hit[0], 30)}" in the text: `
        + `"${shorten(text.slice(Math.max(0, hit.index - 40), hit.index + hit[0].length + 40), 120)}"`);

// 2. Display equations: none scrolls inside its box, at desktop width or on a phone (a long one is
// broken into lines); nothing widens a phone's page.
article.querySelectorAll('mjx-container[display="true"]').forEach(box => {
  if (box.scrollWidth > box.clientWidth + 1)
    add('equations', `${label(box.closest('div.math') || box)} scrolls inside its box `
        + `(${box.scrollWidth} px of math in ${box.clientWidth} px)`);
});
const page = document.documentElement.scrollWidth, window_ = window.innerWidth;
if (!wide && page > window_) {
  // what sticks out: drawn, not in a fixed panel (the closed side menus), not clipped by a scroll box
  const clipped = e => { for (let p = e.parentElement; p && p !== document.body; p = p.parentElement)
    if (getComputedStyle(p).overflowX !== 'visible' && p.getBoundingClientRect().right <= window_ + 1)
      return true;
    return false; };
  const fixed = e => { for (let p = e; p; p = p.parentElement)
    if (getComputedStyle(p).position === 'fixed') return true;
    return false; };
  const shown = Array.from(document.body.querySelectorAll('*')).filter(e =>
    e.getBoundingClientRect().right > window_ + 1 && seen(e) && !fixed(e) && !clipped(e));
  const culprits = shown.filter(e => !shown.some(o => o !== e && e.contains(o)));
  add('equations', `the page is ${page} px wide in a ${window_} px window; it sticks out: `
      + culprits.slice(0, 5).map(describe).join('; ')
      + (culprits.length > 5 ? ` and ${culprits.length - 5} more` : ''));
}

// 3. Images: loaded, shown near their intended width (the width attribute or inline style width that
// myst-nb writes from the output's metadata, else the file's own width) and undistorted, never wider
// than the column, described by an alt text that is not a file name or a cross-reference label.
const pixels = v => (/^\\s*[0-9.]+(px)?\\s*$/.test(v || '') ? parseFloat(v) : null);
article.querySelectorAll('img').forEach(img => {
  const file = (img.getAttribute('src') || '').split('/').pop();
  const figure = img.closest('figure[id]');
  const name = `image ${file} in ` + (figure ? `figure #${figure.id}` : section(img));
  const alt = img.getAttribute('alt') || '';
  // a file name or path: an image extension, or a run of slashes between names ("../_images/x")
  const path = alt.search(/\\.(?:png|jpe?g|svg|gif)\\b|(?:^|\\s)\\S*\\/\\S*\\/\\S*|_images/);
  if (alt.length <= 10 || path >= 0)
    add('images', `${name}: the alt text reads like a file name, not a description (`
        + (alt.length <= 10 ? `${alt.length} characters: "${alt}")`
           : `"${shorten(alt.slice(Math.max(0, path - 40), path + 40), 90)}")`));
  for (const hit of alt.matchAll(/\\b(?:eq|fig|ex|sec|tab)-ch[0-9]+[-\\w]*/g))
    add('images', `${name} has the cross-reference label ${hit[0]} in its alt text: `
        + `"${shorten(alt.slice(Math.max(0, hit.index - 30), hit.index + hit[0].length + 10), 90)}"`);
  if (!(img.complete && img.naturalWidth > 0)) { add('images', `${name} did not load`); return; }
  const attribute = img.getAttribute('width'), styled = img.style.width;
  const intended = pixels(attribute) ?? pixels(styled) ?? img.naturalWidth;
  const box = img.getBoundingClientRect(), shown = box.width;
  if (!shown) return;  // not laid out (an image in a closed solution still is, and is measured)
  const size = `shown ${Math.round(shown)} px wide, intended ${Math.round(intended)} px (`
    + (pixels(attribute) ? `width attribute ${attribute}` : pixels(styled) ? `style width ${styled}`
       : `no width given: the file's ${img.naturalWidth} px`) + ')';
  const aspect = (shown / box.height) / (img.naturalWidth / img.naturalHeight);
  if (Math.abs(aspect - 1) > 0.02)
    add('images', `${name} is distorted: shown ${Math.round(shown)} x ${Math.round(box.height)} px, `
        + `the file is ${img.naturalWidth} x ${img.naturalHeight} px`);
  if (wide && intended > 600 && shown < 0.75 * intended) add('images', `${name} is too small: ${size}`);
  if (wide && shown > 1.01 * intended) add('images', `${name} is blown up: ${size}`);
  if (!wide && (box.right > column.right + 1 || box.left < column.left - 1 || shown > column.width + 1))
    add('images', `${name} is wider than the ${Math.round(column.width)} px column: ${size}`);
});

// 4. References read once: no "Exercise Exercise 6.8" where the text names the kind of a target
// whose reference already says it (a {ref} to an exercise reads "Exercise 6.8").
const twice = /\\b(exercise|solution|fig\\.|figure|equation|section|chapter|table)\\s+\\1(?=[\\s.,;:)]|$)/gi;
for (const hit of text.matchAll(twice))
  add('references', `the words "${hit[0].replace(/\\s+/g, ' ')}" name a reference's kind twice: "`
      + shorten(text.slice(Math.max(0, hit.index - 50), hit.index + hit[0].length + 30), 110) + '"');

// 5. No test-harness marker in the article, open or folded.
for (const hit of article.textContent.matchAll(/NBVAL\\w*/g))
  add('console', `the marker ${hit[0]} is in the article text`);

// 6. Solutions: every body hidden until its toggle is clicked.
article.querySelectorAll('div.solution').forEach(solution => {
  const title = shorten((solution.querySelector('.admonition-title') || solution).textContent, 40);
  const body = solution.querySelector(':scope > section');
  if (!body) add('solutions', `"${title}" (#${solution.id}) has no body`);
  else if (seen(body))
    add('solutions', `"${title}" (#${solution.id}) is open when the page loads`);
});

// 6b. Hints: every hint dropdown closed until its toggle is clicked.
article.querySelectorAll('.admonition.dropdown').forEach(box => {
  const title = (box.querySelector('.admonition-title') || box).textContent.trim();
  if (!/^Hint \\d/.test(title)) return;
  const open = Array.from(box.children).some(e => !e.classList.contains('admonition-title') && seen(e));
  if (open) add('solutions', `"${shorten(title, 40)}" is open when the page loads`);
});

// 7. Code: at desktop width at most three visible code cells scroll sideways.
if (wide) {
  const scrolling = Array.from(article.querySelectorAll('.cell_input pre'))
    .filter(pre => seen(pre) && pre.scrollWidth > pre.clientWidth + 1);
  if (scrolling.length > 3) {
    add('code', `${scrolling.length} visible code cells scroll sideways (at most 3 may); they are:`);
    scrolling.forEach(pre => {
      const longest = pre.textContent.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), '');
      add('code', `  the cell in ${section(pre)} (${pre.scrollWidth} px of code in ${pre.clientWidth} px), `
          + `longest line ${longest.length} characters: "${shorten(longest, 60)}"`);
    });
  }
}
return found;"""

# The chapter menu when it is open: the primary sidebar on screen, with the links it shows.
OPEN_MENU = """return Array.from(document.querySelectorAll('.bd-sidebar-primary'))
    .filter(e => { const r = e.getBoundingClientRect(); return r.width > 100 && r.left >= 0
                   && getComputedStyle(e).visibility === 'visible'; })
    .flatMap(e => Array.from(e.querySelectorAll('a[href]')).map(a => new URL(a.href).pathname));"""


def _visible(driver, selector: str) -> list:
    return [e for e in driver.find_elements(By.CSS_SELECTOR, selector) if e.is_displayed()]


def _check_menu(driver, wide: bool) -> list[str]:
    """One menu button and at most one search box; on a phone the button opens a menu that lists every
    page and closes again on Escape."""
    found = []
    toggles = _visible(driver, "button.primary-toggle")
    if len(toggles) != 1:
        found.append(f"{len(toggles)} visible menu buttons (button.primary-toggle), not 1")
    searches = _visible(driver, "button.search-button, .search-button-field")
    if len(searches) > 1:
        found.append(f"{len(searches)} visible search boxes: "
                     + ", ".join(e.get_attribute("class") for e in searches))
    if wide or not toggles:
        return found
    if driver.execute_script(OPEN_MENU):
        return [*found, "the chapter menu is open before the menu button is clicked"]
    toggles[0].click()
    try:
        WebDriverWait(driver, 10).until(lambda d: d.execute_script(OPEN_MENU))
    except TimeoutException:
        return [*found, "the chapter menu does not open when the menu button is clicked"]
    links = driver.execute_script(OPEN_MENU)
    missing = [p for p in PAGES if not any(link.endswith(f"/{p}.html") for link in links)]
    if missing:
        found.append(f"the open chapter menu has no link to {', '.join(missing)}")
    ActionChains(driver).send_keys(Keys.ESCAPE).perform()
    try:
        WebDriverWait(driver, 10).until(lambda d: not d.execute_script(OPEN_MENU))
    except TimeoutException:
        found.append("the open chapter menu does not close on Escape")
    return found


def _survey(driver, site: str, width: int) -> dict[str, list[str]]:
    """Load every page once at this width; return the findings by kind, each naming page and width."""
    wide = width >= 1000
    findings: dict[str, list[str]] = {}
    driver.set_window_size(width, HEIGHT)
    # Start as a new reader would, with nothing cached or stored: some errors happen on a first visit only.
    driver.execute_cdp_cmd("Network.clearBrowserCache", {})
    driver.execute_cdp_cmd("Storage.clearDataForOrigin", {"origin": site, "storageTypes": "all"})
    for name in PAGES:
        where = f"{name} at {width} px"

        def add(kind: str, text: str, where=where):
            findings.setdefault(kind, []).append(f"{where}: {text}")

        driver.get_log("browser")  # drop what earlier pages logged
        driver.get(f"{site}/{name}.html")
        shown = driver.execute_script("return window.innerWidth")
        assert shown == width, f"Chromium shows {name} {shown} px wide, not {width} px"
        failure = driver.execute_async_script(SETTLED)
        if failure:
            add("math", failure)
        for kind, text in driver.execute_script(SURVEY, wide):
            add(kind, text)
        for text in driver.execute_script(EQUATIONS):
            add("equations", text)
        for text in _check_menu(driver, wide):
            add("menu", text)
        for entry in driver.get_log("browser"):
            if entry["level"] == "SEVERE":
                add("console", entry["message"])
    return findings


@pytest.fixture(scope="module")
def survey(page, site):
    """The findings at one width, collected on the first request and kept for the other tests."""
    cache: dict[int, dict[str, list[str]]] = {}

    def findings(width: int, kind: str) -> list[str]:
        if width not in cache:
            cache[width] = _survey(page, site, width)
        return cache[width].get(kind, [])

    return findings


def _report(problems: list[str]) -> str:
    return f"{len(problems)} problem{'s' * (len(problems) != 1)}:\n" + "\n".join(problems)


def test_every_chapter_is_a_page_of_the_table_of_contents():
    """The pages checked here are the book's: every chapter notebook, the introduction, the bibliography."""
    chapters = sorted(f"chapters/{p.stem}" for p in (ROOT / "chapters").glob("*.ipynb"))
    assert PAGES[0] == "intro" and "bibliography" in PAGES and CHAPTER in PAGES, PAGES
    assert sorted(p for p in PAGES if p.startswith("chapters/")) == chapters, PAGES
    assert all((ROOT / f"{p}.ipynb").is_file() or (ROOT / f"{p}.md").is_file() for p in PAGES), PAGES


def test_each_appendix_numbers_its_equations_figures_and_exercises_from_one(site):
    """The appendices are unnumbered pages, which Sphinx numbers on from one page to the next
    (chapter 12's first equation was (3)); ``_ext/appendix_numbers.py`` restarts each at 1, as
    JupyterLab does."""
    for name in ("11_performance", "12_distributed"):
        html = urllib.request.urlopen(f"{site}/chapters/{name}.html").read().decode()
        for first in ('class="eqno">(1)', 'caption-number">Fig. 1 ',
                      'caption-number">Exercise 1 '):
            assert first in html, (name, first)
        assert 'class="eqno">(10.1)' not in html


def test_mathjax_is_served_locally(page, site):
    page.get(f"{site}/{CHAPTER}.html")
    sources = page.execute_script(
        "return Array.from(document.scripts).map(s => s.src).filter(s => s.includes('tex-'))")
    assert sources and all(s.startswith("http://127.0.0.1") for s in sources), sources


# What each kind of finding covers (collected by _survey, one page load per page and width):
#   math       MathJax finished, every formula typeset, no MathJax error, no raw TeX in the prose
#   equations  no display equation wider than the column or covered by its number, none scrolling
#              inside its box (at 1400 px or at 400 px), no page wider than the window
#   images     loaded, near their intended width and undistorted, alt text not a file name or a label
#   menu       one menu button and at most one search box; on a phone the menu opens, lists every page
#              and closes
#   console    no SEVERE console message (first visit included), no visible NBVAL
#   solutions  every solution and every hint hidden when the page loads
#   references no reference named twice ("Exercise Exercise 6.8")
KINDS = ["math", "equations", "images", "menu", "console", "solutions", "references"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("width", WIDTHS)
def test_every_page(survey, width, kind):
    problems = survey(width, kind)
    assert not problems, _report(problems)


def test_solutions_open_when_clicked(page, site):
    page.set_window_size(WIDTHS[0], HEIGHT)
    page.get(f"{site}/{CHAPTER}.html")
    solutions = page.find_elements(By.CSS_SELECTOR, "div.solution")
    assert solutions, f"{CHAPTER} has no solutions"
    for solution in solutions:
        body = solution.find_element(By.CSS_SELECTOR, ":scope > section")
        assert not body.is_displayed(), solution.get_attribute("id")
        button = solution.find_element(By.CSS_SELECTOR, "button.toggle-button")
        page.execute_script("arguments[0].scrollIntoView({block: 'center', behavior: 'instant'});", button)
        button.click()
        WebDriverWait(page, 10).until(lambda d, body=body: body.is_displayed())
        assert body.text.strip(), solution.get_attribute("id")


@pytest.mark.parametrize("width", WIDTHS)
def test_an_exercise_as_the_book_shows_it(page, site, width):
    """Chapter 1's first checked exercise: its starter and its check's verdict in view, its hints
    and solution folded; a hint opens when clicked, at desktop and at phone width."""
    page.set_window_size(width, HEIGHT)
    page.get(f"{site}/{CHAPTER}.html")
    found = page.execute_script("""
      const checks = Array.from(document.querySelectorAll('article .cell'))
        .filter(c => /check\\("ex-/.test((c.querySelector('.cell_input') || c).textContent));
      if (!checks.length) return null;
      const check = checks[0], starter = check.previousElementSibling;
      let hint = check.nextElementSibling;
      while (hint && !(hint.matches('.admonition.dropdown')
                       && /^Hint 1/.test(hint.textContent.trim()))) hint = hint.nextElementSibling;
      return [starter, check, hint];""")
    assert found, f"{CHAPTER} shows no check cell"
    starter, check, hint = found
    assert starter.is_displayed() and "cell" in starter.get_attribute("class"), "no starter cell"
    verdict = check.find_element(By.CSS_SELECTOR, ".cell_output")
    assert verdict.is_displayed() and verdict.text.strip().startswith(("…", "✗")), verdict.text
    assert hint is not None, "no Hint 1 dropdown after the check cell"
    body = [e for e in hint.find_elements(By.XPATH, "./*")
            if "admonition-title" not in (e.get_attribute("class") or "")]
    assert body and not any(e.is_displayed() for e in body), "Hint 1 is open when the page loads"
    button = hint.find_element(By.CSS_SELECTOR, "button.toggle-button")
    page.execute_script("arguments[0].scrollIntoView({block: 'center', behavior: 'instant'});", button)
    button.click()
    WebDriverWait(page, 10).until(lambda d: any(e.is_displayed() for e in body))
    box = hint.rect
    assert box["x"] >= 0 and box["x"] + box["width"] <= width + 1, f"the hint overflows at {width} px"


def test_code_cells_rarely_scroll_sideways_at_desktop_width(survey):
    problems = survey(WIDTHS[0], "code")
    assert not problems, _report(problems)


def test_bibliography_labels_read_like_the_citations(page, site):
    page.get(f"{site}/bibliography.html")
    labels = page.execute_script(
        "return Array.from(document.querySelectorAll('.citation .label, dt.label'))"
        ".map(e => e.innerText)")
    assert labels, "no bibliography entries found"
    assert any("Harris, 1954" in label for label in labels), labels[:5]
    assert not [label for label in labels if "{" in label or "}" in label], "BibTeX braces in a label"
    assert not any(label.strip("[]") == "Har54" for label in labels)


def test_search_snippets_read_as_prose(page, site):
    """Search results quote the chapter's text: formulas as plain text, none of the theme's chrome."""
    page.get(f"{site}/search.html?q=attention")
    read = "return Array.from(document.querySelectorAll('#search-results li p.context'))"

    def snippets_shown(driver):  # the results arrive one page fetch at a time
        found = driver.execute_script(read + ".map(p => p.innerText)")
        return found if len(found) >= 8 else None

    snippets = WebDriverWait(page, 60).until(snippets_shown)
    problems = [s for s in snippets if "\\(" in s or "\\mathbb" in s or " Contents" in s or ".pdf" in s]
    assert not problems, _report(problems)
