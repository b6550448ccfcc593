"""The chapters as JupyterLab shows them, with jupyterlab-myst (see README, "Running the notebooks yourself").

Two kinds of check:

* without a browser: every chapter carries what ``tools/jupyterlab_notebooks.py`` adds (the
  frontmatter cell that makes jupyterlab-myst number equations and exercises as the book does, no
  unlabelled ``$$`` block, collapsed solution cells, and the cells the book folds (tag
  ``hide-input``) folded);
* in a real JupyterLab (headless Chromium, a server on 127.0.0.1 that serves a copy of chapter 1, so
  that JupyterLab's autosave cannot touch the repository): equations and exercises carry the book's
  numbers, references to exercises further down resolve, citations are rendered by MyST (as their keys:
  jupyterlab-myst reads no bibliography), no raw MyST markup is left, and the solution cells and
  the folded cells are collapsed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from browser import chromium, require_chromium

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
CHAPTER = ROOT / "chapters" / "01_embeddings.ipynb"

TOOL = ROOT / "tools" / "jupyterlab_notebooks.py"
_spec = importlib.util.spec_from_file_location("jupyterlab_notebooks", TOOL)
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def numbered_chapters() -> dict[str, int]:
    """Chapter file stem -> its number in the book: the order of the numbered part of _toc.yml."""
    stems, numbered = [], False
    for line in (ROOT / "_toc.yml").read_text().splitlines():
        if re.match(r"\s*- caption:", line):
            numbered = False
        elif re.match(r"\s*numbered:\s*true", line):
            numbered = True
        elif numbered and (m := re.match(r"\s*- file:\s*chapters/(\S+)", line)):
            stems.append(m.group(1))
    return {stem: i for i, stem in enumerate(stems, start=1)}


# ------------------------------------------------------------------ without a browser


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_is_prepared_for_jupyterlab(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    changes = tool.apply(nb, path.stem)
    assert not changes, (
        f"{path.name} lacks what JupyterLab needs ({'; '.join(changes)}): "
        "run `python tools/jupyterlab_notebooks.py chapters`"
    )


def test_frontmatter_numbers_match_the_table_of_contents():
    numbers = numbered_chapters()
    assert numbers, "no numbered chapters found in _toc.yml"
    for path in CHAPTERS:
        first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]
        if path.stem in numbers:
            assert first.get("id") == tool.FRONTMATTER_ID, path.name
            assert f'enumerator: "{numbers[path.stem]}.%s"' in "".join(first["source"]), path.name
            assert "remove-cell" in first["metadata"].get("tags", []), path.name
        else:
            assert first.get("id") != tool.FRONTMATTER_ID, f"{path.name} is not numbered in the book"


def test_only_solution_and_folded_cells_are_collapsed():
    for path in CHAPTERS:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        expected = {id(c) for c in tool.hidden_cells(cells)}
        inside = [c.get("id") for c in cells if id(c) in expected]
        hidden = [c.get("id") for c in cells if c["metadata"].get("jupyter", {}).get("source_hidden")]
        assert hidden == inside, (f"{path.name}: collapsed cells {hidden}, solution and hide-input "
                                  f"cells {inside}")


# ------------------------------------------------------------------ in JupyterLab



def expected_numbers(nb: dict, chapter: int) -> tuple[dict[str, str], dict[str, str]]:
    """The numbers the book gives chapter 1's labelled equations and exercises, in order."""
    equations, exercises = {}, {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown" or "remove-cell" in cell["metadata"].get("tags", []):
            continue
        source = "".join(cell["source"])
        for label in re.findall(r"^\$\$[ \t]*\(([\w-]+)\)", source, re.MULTILINE):
            equations[label] = f"({chapter}.{len(equations) + 1})"
        for block in re.findall(r"```\{exercise\}[^\n]*\n((?::[^\n]*\n)*)", source):
            if m := re.search(r":label:\s*(\S+)", block):
                exercises[m.group(1)] = f"{chapter}.{len(exercises) + 1}"
    return equations, exercises


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path_factory):
    """JupyterLab on 127.0.0.1, serving a copy of chapter 1 with fresh settings."""
    require_chromium()
    pytest.importorskip("selenium.webdriver")
    pytest.importorskip("jupyterlab")
    pytest.importorskip("jupyterlab_myst")
    root = tmp_path_factory.mktemp("lab")
    (root / "chapters").mkdir()
    shutil.copy(CHAPTER, root / "chapters" / CHAPTER.name)
    # what the chapter reads beside it (../results/*.json): a learner's run above an exercise
    # reaches the exercise, and its import cell, as in a checkout
    shutil.copytree(ROOT / "results", root / "results", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    port = free_port()
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(root / ".settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(root / ".workspaces"),
           "JUPYTER_RUNTIME_DIR": str(root / ".runtime")}
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip", "127.0.0.1", f"--port={port}",
               "--ServerApp.token=", "--ServerApp.password=", "--ServerApp.port_retries=0",
               f"--ServerApp.root_dir={root}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log = open(root / "server.log", "w")  # closed in the finally below
    server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            assert server.poll() is None, (root / "server.log").read_text()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not start: " + (root / "server.log").read_text()[-3000:])
        # The page lists the prebuilt extensions the server found in its data path (jupyter --paths).
        # A virtual environment made with --system-site-packages imports jupyterlab_myst from the
        # base Python but does not look in that Python's share/jupyter for its labextension.
        page = ""
        for _ in range(20):
            try:
                page = urllib.request.urlopen(f"{url}/lab", timeout=10).read().decode()
                break
            except OSError:
                time.sleep(0.5)
        assert '"name": "jupyterlab-myst"' in page, (
            "JupyterLab does not load the jupyterlab-myst labextension: it is not in any folder of "
            "`jupyter --paths` (data)")
        yield url, root
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


# Everything read from the rendered notebook in one go.
READ = """
const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
const myst = [...panel.querySelectorAll('.jp-MarkdownCell .myst')];
const equations = {}, exercises = {};
panel.querySelectorAll('.jp-MarkdownCell a[title="Link to this Equation"]')
     .forEach(a => { equations[a.getAttribute('href').slice(1)] = a.textContent.trim(); });
panel.querySelectorAll('.jp-MarkdownCell [id^="ex-"]').forEach(e => {
  const m = e.textContent.match(/Exercise\\s*([\\d.]+)/); if (m) exercises[e.id] = m[1]; });
const notFound = [...panel.querySelectorAll('.jp-MarkdownCell .myst [title$="Not Found"]')]
  .map(e => [e.getAttribute('title'), e.textContent.trim()]);
const references = [...panel.querySelectorAll('.jp-MarkdownCell .myst a[href^="#ex-"]')]
  .map(a => [a.getAttribute('href').slice(1), a.textContent.replace(/\\s+/g, ' ').trim()]);
return {equations, exercises, notFound, references,
        text: myst.map(m => m.textContent).join('\\n'),
        inputPlaceholders: panel.querySelectorAll('.jp-InputPlaceholder').length,
        outputPlaceholders: panel.querySelectorAll('.jp-OutputPlaceholder').length};
"""


def read_rendered(url: str, profile: Path) -> tuple[dict, dict, dict, list]:
    """Chapter 1 opened in JupyterLab, read once every markdown cell has rendered and settled."""
    driver = chromium(profile, 1280, 1600)
    driver.set_page_load_timeout(120)
    nb = json.loads(CHAPTER.read_text(encoding="utf-8"))
    equations, exercises = expected_numbers(nb, 1)
    collapsed = tool.hidden_cells(nb["cells"])
    try:
        driver.get(f"{url}/lab/tree/chapters/{CHAPTER.name}?reset")
        # jupyterlab-myst renders the cells one by one and re-resolves the whole notebook's references
        # after each, and JupyterLab collapses cells as it reaches them: wait until every equation,
        # exercise and collapsed cell is there and nothing changes for 3 s (the checks below then
        # also catch a wrong count, since the wait ends at the deadline).
        deadline, last, quiet = time.time() + 150, None, 0
        while time.time() < deadline:
            try:
                state = driver.execute_script(READ)
            except Exception:  # the notebook panel is not there yet
                state = None
            complete = state and (len(state["equations"]) >= len(equations)
                                  and len(state["exercises"]) >= len(exercises)
                                  and state["inputPlaceholders"] >= len(collapsed))
            if complete:
                quiet = quiet + 1 if state == last else 0
                if quiet >= 6:
                    break
            last = state
            time.sleep(0.5)
    finally:
        driver.quit()
    assert last, "the notebook never rendered"
    return last, equations, exercises, collapsed


def test_chapter_1_in_jupyterlab(lab, tmp_path_factory):
    """One test, so that pytest-xdist starts one JupyterLab and one browser, not one per check."""
    url, _ = lab
    state, equations, exercises, collapsed = read_rendered(url, tmp_path_factory.mktemp("chromium-profile"))
    problems = []

    # equations and exercises carry the book's numbers, (1.1) and 1.1, not (1) and 1
    assert equations and exercises and collapsed, "chapter 1 lacks what this test checks"
    if state["equations"] != equations:
        problems.append(f"equation numbers {state['equations']}, the book's {equations}")
    if state["exercises"] != exercises:
        problems.append(f"exercise numbers {state['exercises']}, the book's {exercises}")

    # the text refers to exercises further down the notebook before they appear
    if not state["references"]:
        problems.append("no reference to an exercise found")
    for label, text in state["references"]:
        if text != f"Exercise {exercises.get(label)}":
            problems.append(f"reference to {label} reads {text!r}")
    problems += [f"unresolved: {key}" for title, key in state["notFound"] if key.startswith("ex-")]

    # citations: jupyterlab-myst 2.7 reads no bibliography, so each shows its key, marked "Citation
    # Not Found" (what the README says); should a later version resolve them, update the README.
    cites = [key for title, key in state["notFound"] if title.startswith("Citation")]
    resolved = "Zipf" in state["text"] and "zipf1949human" not in state["text"]
    if not (resolved or "zipf1949human" in cites):
        problems.append(f"the citation of zipf1949human is not rendered by MyST: {cites[:5]}")

    for raw in ["```{", "{cite", "{eq}`", "{ref}`", "{numref}`", ":label:", "$$"]:
        if raw in state["text"]:
            problems.append(f"raw markup {raw!r} in the rendered notebook")

    # solutions: every solution cell collapsed, with its output; folded cells: their source only
    if state["inputPlaceholders"] != len(collapsed):
        problems.append(f"{state['inputPlaceholders']} collapsed cells, {len(collapsed)} solution "
                        "and folded cells")
    code = sum(c["cell_type"] == "code" and c["metadata"].get("jupyter", {}).get("outputs_hidden") is True
               for c in collapsed)
    if state["outputPlaceholders"] != code:
        problems.append(f"{state['outputPlaceholders']} collapsed outputs, {code} solution code cells")

    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ an exercise, as a learner does it

FIND_CELLS = """
const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
const cells = [...panel.querySelectorAll('.jp-Cell')];
"""
IDLE = """
const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
const status = document.querySelector('.jp-Notebook-ExecutionIndicator');
return Boolean(panel && status && status.dataset.status === 'idle'
               && panel.querySelectorAll('.jp-Cell').length > arguments[0]);
"""


def first_checked_exercise(nb: dict) -> tuple[str, int, str]:
    """(label, index of its starter cell, its solution's code) of the notebook's first exercise that
    has a starter and a check cell."""
    cells = nb["cells"]
    for i, cell in enumerate(cells):
        source = "".join(cell["source"])
        m = re.search(r"```\{exercise\}[^\n]*\n(?::[^\n]*\n)*?:label:\s*(\S+)", source)
        if cell["cell_type"] != "markdown" or not m:
            continue
        label = m.group(1)
        follow = cells[i + 1: i + 3]
        if (len(follow) == 2 and all(c["cell_type"] == "code" for c in follow)
                and f'check("{label}"' in "".join(follow[1]["source"])):
            solution = [c for c in tool.solution_cells(cells) if c["cell_type"] == "code"
                        and f'check("{label}"' in "".join(c["source"])]
            assert solution, f"{label} has no solution code ending in its check"
            return label, i + 1, "".join(solution[0]["source"])
    raise AssertionError("chapter 1 has no exercise with a starter and a check cell")


def test_an_exercise_in_jupyterlab(lab, tmp_path_factory):
    """A learner's round: run the chapter down to an exercise, run its check on the untouched
    starter ("not attempted"), fill the starter in, run the check again and read "✓"."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url, _ = lab
    label, starter, solution = first_checked_exercise(json.loads(CHAPTER.read_text(encoding="utf-8")))
    driver = chromium(tmp_path_factory.mktemp("chromium-exercise"), 1280, 1600)
    driver.set_page_load_timeout(120)

    def cell(index: int):
        return driver.execute_script(FIND_CELLS + "cells[arguments[0]].scrollIntoView();"
                                     "return cells[arguments[0]];", index)

    def run_starter_and_check():
        cell(starter).find_element(By.CSS_SELECTOR, ".jp-InputPrompt").click()
        for _ in range(2):  # shift-enter runs the cell and selects the next one
            ActionChains(driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()

    def verdict(previous: str | None = None) -> str:
        """The check cell's output once it has run (and differs from ``previous``)."""
        deadline = time.time() + 180
        while time.time() < deadline:
            text = driver.execute_script(
                FIND_CELLS + "const o = cells[arguments[0]].querySelector('.jp-OutputArea-output');"
                "return o ? o.textContent : '';", starter + 1)
            if label in text and text != previous:
                return text
            time.sleep(0.5)
        pytest.fail(f"the check cell of {label} printed nothing within 180 s (last: {text!r})")

    def wait_for_kernel(seconds: float = 300):
        """Until the notebook's kernel is idle for 2 s in a row."""
        deadline, quiet = time.time() + seconds, 0
        while time.time() < deadline and quiet < 4:
            try:
                idle = driver.execute_script(IDLE, starter + 1)
            except Exception:  # the notebook panel is not there yet
                idle = False
            quiet = quiet + 1 if idle else 0
            time.sleep(0.5)

    try:
        driver.get(f"{url}/lab/tree/chapters/{CHAPTER.name}?reset")
        wait_for_kernel()
        # the learner selects the starter and runs everything above it (Run > Run All Above)
        cell(starter).find_element(By.CSS_SELECTOR, ".jp-InputPrompt").click()
        next(m for m in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-itemLabel")
             if m.text == "Run").click()
        time.sleep(1)
        next(m for m in driver.find_elements(By.CSS_SELECTOR, ".lm-Menu-itemLabel")
             if m.text == "Run All Above Selected Cell").click()
        wait_for_kernel()

        run_starter_and_check()
        untouched = verdict()
        assert untouched.startswith("…"), f"the untouched starter is not 'not attempted': {untouched}"

        # the learner types an answer into the starter (here: the book's solution)
        driver.execute_script(
            FIND_CELLS + "const view = cells[arguments[0]].querySelector('.cm-content').cmView.view;"
            "view.dispatch({changes: {from: 0, to: view.state.doc.length, insert: arguments[1]}});",
            starter, solution)
        run_starter_and_check()
        answered = verdict(untouched)
        assert "✓" in answered and "correct" in answered, answered
    finally:
        driver.quit()
