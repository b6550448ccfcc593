"""The first code a reader meets (issue 35): a chapter opens with a few lines, not with its imports.

A chapter imports what a section uses where it is used (as the Annotated Transformer and d2l do),
its opening cell holds what a reader needs first (torch, the random state, the device), and the
book's machinery (figure style, thread settings, ``glue``, reading committed files) sits in a
*folded* cell: tagged ``hide-input``, so that the book shows a "Show code cell source" button, and
with ``jupyter.source_hidden`` in its metadata, so that JupyterLab shows its first line only.
``tools/jupyterlab_notebooks.py`` writes that metadata from the tag (the tag is the one source of
truth; ``tests/rendered/test_jupyterlab.py`` runs it as a check).

Definitions, as this test reads a notebook:

* **the introduction** is the chapter's title cell, the first markdown cell (after the
  frontmatter cell that the book removes) whose first line is a ``# `` heading;
* **the first idea** is the next markdown cell after the introduction: the first words the
  reader meets after the code of the opening. Every code line between the two is the
  **opening**, and at most ``OPENING_LINES`` of them may be visible;
* a chapter may then announce its configuration cell (the sizes of every experiment, kept in one
  place so that a GPU run can raise them) in a sentence and show it before its first ``##``
  section; all the visible code before the first ``##`` section is held to ``BEFORE_SECTION``
  lines.

A visible line is any line, blank or not, of a code cell that the book shows (not tagged
``hide-input``, ``remove-input`` or ``remove-cell``).

Run ``python tests/book/test_setup_cells.py`` for the counts of every chapter.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))

OPENING_LINES = 15  # visible code lines between the introduction and the first idea
BEFORE_SECTION = 30  # visible code lines before the first ## section, configuration included
HIDDEN = {"hide-input", "remove-input", "remove-cell"}


def cells_of(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def text(cell: dict) -> str:
    return "".join(cell["source"])


def tags(cell: dict) -> set[str]:
    return set(cell["metadata"].get("tags", []))


def visible_lines(cell: dict) -> int:
    """The lines of code the book shows for a cell (0 for markdown and folded cells)."""
    if cell["cell_type"] != "code" or tags(cell) & HIDDEN:
        return 0
    return len(text(cell).splitlines())


def introduction(cells: list[dict]) -> int:
    """The index of the chapter's title cell."""
    for i, cell in enumerate(cells):
        if (cell["cell_type"] == "markdown" and "remove-cell" not in tags(cell)
                and text(cell).lstrip().startswith("# ")):
            return i
    raise AssertionError("no title cell (a markdown cell starting with '# ')")


def first_idea(cells: list[dict]) -> int:
    """The index of the first markdown cell after the introduction."""
    start = introduction(cells)
    return next(i for i in range(start + 1, len(cells)) if cells[i]["cell_type"] == "markdown")


def first_section(cells: list[dict]) -> int:
    """The index of the first markdown cell with a ``##`` heading."""
    return next(i for i, c in enumerate(cells)
                if c["cell_type"] == "markdown" and re.search(r"^## ", text(c), re.MULTILINE))


def counts(path: Path) -> dict:
    cells = cells_of(path)
    start = introduction(cells)
    return {
        "opening": sum(visible_lines(c) for c in cells[start + 1:first_idea(cells)]),
        "before_section": sum(visible_lines(c) for c in cells[start + 1:first_section(cells)]),
        "folded": sum(1 for c in cells[start + 1:first_section(cells)]
                      if c["cell_type"] == "code" and "hide-input" in tags(c)),
    }


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_opening_is_short(path):
    n = counts(path)
    assert n["opening"] <= OPENING_LINES, (
        f"{path.name} shows {n['opening']} lines of code before its first idea (at most "
        f"{OPENING_LINES}): import what a section uses where it is used, and fold the machinery "
        "(tag hide-input, then run python tools/jupyterlab_notebooks.py chapters)")
    assert n["before_section"] <= BEFORE_SECTION, (
        f"{path.name} shows {n['before_section']} lines of code before its first section "
        f"(at most {BEFORE_SECTION})")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_folded_cells_are_folded_in_both_and_say_what_they_do(path):
    problems = []
    for i, cell in enumerate(cells_of(path)):
        if cell["cell_type"] != "code":
            continue
        hidden = cell["metadata"].get("jupyter", {}).get("source_hidden") is True
        if "hide-input" in tags(cell):
            if not hidden:
                problems.append(f"cell {i} ({cell.get('id')}): tagged hide-input, but JupyterLab "
                                "shows it open (no jupyter.source_hidden)")
            first = text(cell).splitlines()[0] if text(cell) else ""
            if not first.startswith("# "):
                problems.append(f"cell {i} ({cell.get('id')}): a folded cell's first line (all "
                                f"that shows of it) is a comment saying what it does, not {first!r}")
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_opening_imports_no_machinery(path):
    """What the opening shows is for the reader: the machinery is folded."""
    cells = cells_of(path)
    machinery = re.compile(r"\b(use_book_style|small_model_threads|glue|warnings|mock)\b")
    shown = [text(c) for c in cells[introduction(cells) + 1:first_idea(cells)]
             if c["cell_type"] == "code" and not tags(c) & HIDDEN]
    found = sorted({m for source in shown for m in machinery.findall(source)})
    assert not found, f"{path.name}: the opening shows machinery {found}: fold it"


if __name__ == "__main__":
    for chapter in CHAPTERS:
        n = counts(chapter)
        print(f"{chapter.stem:<20} opening {n['opening']:>3} lines, before the first section "
              f"{n['before_section']:>3}, folded cells {n['folded']}")
