"""The PDF edition, built with the README's command and read back as text.

``jupyter-book build . --builder pdflatex`` runs Sphinx's LaTeX builder and XeLaTeX (see README, "The
book on paper"); this builds it once from a clone with virtual environments inside (as the browser
test does), then reads the PDF with ``pdftotext`` and the LaTeX log, and checks what a reader of the
paper edition relies on: every chapter is there; every exercise is there, numbered as on the web, and
its hints and solution are in the chapter's last section "Hints and solutions", not under the exercise;
no reference or citation is left unresolved ("??"); figures, equations and citations are numbered;
every character has a glyph; no line runs off the page.

Needs TeX Live, latexmk, poppler-utils and the fonts named in ``_config.yml`` (Debian packages in the
README); without them the tests skip, except in CI, where ``.ci/run`` installs them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
from book_build import ROOT, build_book, clone_with_environments

TOOLS = ["xelatex", "latexmk", "pdftotext", "fc-list"]
FONTS = ["FreeSerif", "DejaVu Sans Mono", "WenQuanYi Micro Hei", "Symbola"]
# LaTeX may overfill a line by a few points (hyphenation is not perfect), which stays inside the margin;
# more than this is text running towards the page's edge.
OVERFULL_PT = 10.0

missing = [t for t in TOOLS if shutil.which(t) is None]
if not missing:
    fonts = subprocess.run(["fc-list", ":", "family"], capture_output=True, text=True).stdout
    missing = [f for f in FONTS if f not in fonts]
if missing:
    if os.environ.get("CI"):
        raise RuntimeError(f"CI must install what the PDF needs (README, 'The book on paper'): {missing}")
    pytest.skip(f"the PDF edition needs {', '.join(missing)}", allow_module_level=True)

EXERCISE = re.compile(r"^(```+|:::+)\{exercise\}", re.M)
SOLUTION = re.compile(r"^(```+|:::+)\{solution(-start)?\}", re.M)
HINT = re.compile(r"^(```+|:::+)\{admonition\} Hint \d+$", re.M)


def chapters() -> list[tuple[str, str, int, int, int]]:
    """(notebook, title, exercises, solutions, hints) of every chapter, from the notebooks themselves."""
    found = []
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
                         and "remove-cell" not in c.get("metadata", {}).get("tags", []))
        title = re.search(r"^# (.+)$", text, re.M).group(1).strip()
        found.append((path.stem, title, *(len(p.findall(text)) for p in (EXERCISE, SOLUTION, HINT))))
    return found


CHAPTERS = chapters()


@pytest.fixture(scope="module")
def pdf(tmp_path_factory):
    """The PDF's text (one string per page) and the LaTeX log."""
    source = clone_with_environments(tmp_path_factory.mktemp("clone"))
    build_book(source, "--builder", "pdflatex")
    latex = source / "_build" / "latex"
    text = subprocess.run(["pdftotext", "-layout", str(latex / "seqbook.pdf"), "-"],
                          capture_output=True, text=True, check=True).stdout
    return text.split("\f"), (latex / "seqbook.log").read_text(encoding="utf-8", errors="replace")


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_every_chapter_is_in_the_pdf(pdf):
    pages, _ = pdf
    whole = _flat(" ".join(pages))
    absent = [title for _, title, *_ in CHAPTERS if title not in whole]
    assert not absent, f"chapter titles not in the PDF: {absent}"
    assert len(pages) > 100, f"the PDF has {len(pages)} pages"


def test_no_unresolved_reference_or_citation(pdf):
    pages, log = pdf
    unresolved = [f"page {i + 1}: ...{_flat(p[max(0, p.index('??') - 80):p.index('??') + 20])}..."
                  for i, p in enumerate(pages) if "??" in p]
    assert not unresolved, "\n".join(unresolved)
    warnings = re.findall(r"LaTeX Warning: (?:Reference|Citation|Hyper reference) .*? undefined.*", log)
    assert not warnings, "\n".join(warnings[:20])


def test_figures_equations_and_citations_are_numbered(pdf):
    whole = _flat(" ".join(pdf[0]))
    for wanted in ["Fig. 1.1", "Fig. 6.1", "Zipf’s law (1.1)", "[Harris, 1954]",
                   "[Harris, 1954] Zellig S. Harris"]:
        assert wanted in whole, f"{wanted!r} is not in the PDF"


def test_every_exercise_with_its_hints_and_solution_at_the_end_of_its_chapter(pdf):
    """Each exercise in its chapter, numbered as on the web; its solution after the heading "Hints and
    solutions" of the same chapter, and after the exercise; no solution or hint under its exercise."""
    lines = [line.strip() for page in pdf[0] for line in page.splitlines()]
    exercise = re.compile(r"^Exercise (?:(\d+)\.)?(\d+) \(")
    solution = re.compile(r"^Solution to Exercise (?:(\d+)\.)?(\d+) \(")
    answers = re.compile(r"^(\d+)\.\d+ Hints and solutions$")
    in_answers, sections, seen, problems = None, [], set(), []
    exercises = solutions = hints = 0
    for line in lines:
        if m := answers.match(line):
            in_answers = m.group(1)  # the chapter whose answers these are
            sections.append(in_answers)
        elif m := exercise.match(line):
            exercises += 1
            seen.add(m.groups())
            in_answers = None
        elif m := solution.match(line):
            solutions += 1
            if in_answers is None:
                problems.append(f"{line!r} stands under its exercise, not in 'Hints and solutions'")
            elif m.group(1) and m.group(1) != in_answers:
                problems.append(f"{line!r} is in chapter {in_answers}'s 'Hints and solutions'")
            if m.groups() not in seen:
                problems.append(f"{line!r} comes before its exercise")
        elif re.match(r"^Hint \d+ to Exercise ", line):
            hints += 1
            if in_answers is None:
                problems.append(f"{line!r} stands under its exercise, not in 'Hints and solutions'")
        elif re.match(r"^Hint \d+$", line):
            problems.append(f"{line!r}: a hint that does not name its exercise")
    assert not problems, "\n".join(problems[:20])
    assert exercises == sum(c[2] for c in CHAPTERS), (exercises, [(c[0], c[2]) for c in CHAPTERS])
    assert solutions == sum(c[3] for c in CHAPTERS), (solutions, [(c[0], c[3]) for c in CHAPTERS])
    assert hints == sum(c[4] for c in CHAPTERS), (hints, [(c[0], c[4]) for c in CHAPTERS])
    assert len(sections) == len(set(sections)) == sum(1 for c in CHAPTERS if c[3]), sections


def test_every_character_has_a_glyph(pdf):
    missing_glyphs = sorted(set(re.findall(r"Missing character: There is no (.+?) in font", pdf[1])))
    assert not missing_glyphs, f"no font of the PDF has {missing_glyphs} (see _config.yml, latex_elements)"


def test_no_line_runs_off_the_page(pdf):
    overfull = [(float(m.group(1)), m.group(0)) for m in re.finditer(
        r"Overfull \\hbox \(([0-9.]+)pt too wide\).*\n.*", pdf[1])]
    wide = [text for points, text in overfull if points > OVERFULL_PT]
    assert not wide, "\n".join(wide[:10])
