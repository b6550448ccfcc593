"""Make the chapters read in JupyterLab (jupyterlab-myst) the way they read in the book, as far as it can.

Usage::

    python tools/jupyterlab_notebooks.py chapters            # edit the notebooks in place
    python tools/jupyterlab_notebooks.py chapters --check    # change nothing; exit 1 if one needs it
    python tools/jupyterlab_notebooks.py chapters/01_embeddings.ipynb   # named notebooks only

Four changes, invisible in the built book, and idempotent (a second run writes nothing):

1. Chapters 01-10 get a first markdown cell with the id ``jupyterlab-myst-frontmatter`` that holds only
   a MyST frontmatter block, ``numbering: enumerator: "N.%s"``. jupyterlab-myst reads page frontmatter
   from the first markdown cell of a notebook (and from nowhere else: no notebook metadata, no
   myst.yml), and with that enumerator it numbers equations (N.1), (N.2), ... and exercises N.1, N.2,
   ... as the book does. The cell carries the tag ``remove-cell``, so myst-nb drops it before parsing
   and the book page does not change. Chapters 11 and 12 are unnumbered appendices in the book
   (their exercises are numbered 1, 2, 3, ... without a chapter), which is what jupyterlab-myst
   shows without this cell.

2. Each unlabelled ``$$ ... $$`` display block becomes ``\\begin{equation*} ... \\end{equation*}``
   (only its two delimiter lines change). The book numbers labelled equations only, jupyterlab-myst
   numbers every ``$$`` block (there is no option for that in either renderer that the other accepts),
   so a single unlabelled block shifted every later number in JupyterLab by one. Both renderers leave
   ``equation*`` unnumbered and typeset it like ``$$``. The script prints the ids of the cells it touches.

3. Every cell strictly between a ``{solution-start}`` cell and its ``{solution-end}`` cell, and a
   start or end cell that holds solution text beside its directive, gets the standard nbformat cell
   metadata ``jupyter.source_hidden: true`` (and, for code cells, ``jupyter.outputs_hidden: true`` and
   its older twin ``collapsed: true``, which JupyterLab writes beside it when it saves the notebook).
   JupyterLab opens such cells collapsed to one line (the first line of the source, then "..."), with
   the outputs hidden, until the reader clicks the line or the bar at its left. myst-nb,
   sphinx-exercise and nbval ignore these keys. The cells are found by their gate markers (not by a
   fixed list of ids) so that solution cells added later are covered; the script prints the ids it
   touched.

4. Every code cell tagged ``hide-input`` (the book folds its source behind a "Show code cell source"
   button and shows its outputs) gets ``jupyter.source_hidden: true``, so that JupyterLab folds the
   same cells, to their first line, with their outputs shown. The tag is the one source of truth: a
   cell that carries ``source_hidden`` without the tag, outside a solution, loses it (JupyterLab
   writes it when a reader folds a cell and saves). A folded cell's first line is a comment that
   says what the cell does, so that it can be found (``tests/book/test_setup_cells.py``).

Nothing else is rewritten: the script only inserts/updates the one cell named above, swaps the
delimiter lines of unlabelled display math, and sets the ``jupyter`` key of the solution cells' and
the folded cells' metadata. Notebooks are written with json.dump(indent=1,
ensure_ascii=False) plus a trailing newline, as everywhere in the project.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

FRONTMATTER_ID = "jupyterlab-myst-frontmatter"
NUMBERED = {f"{n:02d}": n for n in range(1, 11)}  # chapter file prefix -> chapter number in the book


def frontmatter_source(chapter: int) -> list[str]:
    """The source lines of the frontmatter cell for a chapter."""
    text = (
        "---\n"
        "# Read by jupyterlab-myst, which takes page frontmatter from the first markdown cell: it numbers\n"
        f"# equations ({chapter}.1), ({chapter}.2), ... and exercises {chapter}.1, {chapter}.2, ... "
        "as the book does.\n"
        "# The book skips this cell (tag remove-cell).\n"
        "numbering:\n"
        f'  enumerator: "{chapter}.%s"\n'
        "---"
    )
    return text.splitlines(keepends=True)


def frontmatter_cell(chapter: int) -> dict:
    return {
        "cell_type": "markdown",
        "id": FRONTMATTER_ID,
        "metadata": {"tags": ["remove-cell"]},
        "source": frontmatter_source(chapter),
    }


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


START = re.compile(r"^\s*(```+|:::+)\{solution-start\}", re.MULTILINE)
END = re.compile(r"^\s*(```+|:::+)\{solution-end\}", re.MULTILINE)
# a gate directive block: the opening fence, option lines, the closing fence
START_BLOCK = re.compile(
    r"^\s*(?P<fence>```+|:::+)\{solution-start\}[^\n]*\n(?:[^\n]*\n)*?\s*(?P=fence)[ \t]*(?:\n|$)"
)


def _start_has_text(source: str) -> bool:
    """Whether a solution-start cell holds solution text after its directive."""
    block = START_BLOCK.match(source)
    return block is None or bool(source[block.end() :].strip())


def _end_has_text(source: str) -> bool:
    """Whether a solution-end cell holds solution text before its directive."""
    return bool(source[: END.search(source).start()].strip())


def solution_cells(cells: list[dict]) -> list[dict]:
    """The cells that hold a gated solution's content.

    Every cell strictly between a ``{solution-start}`` cell and its ``{solution-end}`` cell, plus a start
    cell with text after its directive and an end cell with text before its directive (the book puts
    that text inside the solution too). A start or end cell that holds only its directive stays open: it
    renders as the "Start of Solution to Exercise N" bar and an empty closing box.
    """
    inside, found = False, []
    for cell in cells:
        is_md = cell["cell_type"] == "markdown"
        source = _source(cell)
        if is_md and START.search(source):
            if inside:
                raise ValueError(f"cell {cell.get('id')}: solution-start inside an open solution")
            inside = True
            if _start_has_text(source):
                found.append(cell)
        elif is_md and END.search(source):
            if not inside:
                raise ValueError(f"cell {cell.get('id')}: solution-end without solution-start")
            inside = False
            if _end_has_text(source):
                found.append(cell)
        elif inside:
            found.append(cell)
    if inside:
        raise ValueError("a solution-start has no solution-end")
    return found


def number_free_math(source: str) -> str:
    """Rewrite each unlabelled ``$$`` display block as ``\\begin{equation*} ... \\end{equation*}``.

    The book (Sphinx) numbers only labelled equations; jupyterlab-myst numbers every ``$$`` block, so one
    unlabelled block shifts the numbers of all the equations after it. Both renderers leave an
    ``equation*`` block unnumbered and typeset it the same as ``$$``. Only the two delimiter lines change;
    labelled blocks (``$$ (label)``), inline math and code fences are left alone.
    """
    lines = source.split("\n")
    out, i, fences = [], 0, []  # fences: the open fences, (marker, is_code); directives nest, code does not
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        opening = re.match(r"(```+|~~~+|:::+)(.*)", stripped)
        in_code = bool(fences) and fences[-1][1]
        if fences and stripped.startswith(fences[-1][0]) and not stripped.lstrip("`~:").strip():
            fences.pop()
        elif opening and not in_code:
            fences.append((opening.group(1), not opening.group(2).strip().startswith("{")))
        elif not in_code and stripped == "$$":
            close = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("$$")), None)
            if close is not None:
                if lines[close].strip() == "$$":  # no label: the book leaves it unnumbered
                    out += ["\\begin{equation*}", *lines[i + 1 : close], "\\end{equation*}"]
                else:
                    out += lines[i : close + 1]
                i = close + 1
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


def hidden_flags(cell: dict) -> dict:
    flags = {"source_hidden": True}
    if cell["cell_type"] == "code":
        flags["outputs_hidden"] = True
    return flags


def folded_cells(cells: list[dict]) -> list[dict]:
    """The code cells whose source the book folds (tag ``hide-input``)."""
    return [c for c in cells if c["cell_type"] == "code" and "hide-input" in c["metadata"].get("tags", [])]


def hidden_cells(cells: list[dict]) -> list[dict]:
    """Every cell that JupyterLab opens with its source folded: the solution cells and the folded
    cells (a solution cell may be both)."""
    seen = {id(c) for c in solution_cells(cells)}
    return solution_cells(cells) + [c for c in folded_cells(cells) if id(c) not in seen]


def _sorted(d: dict) -> dict:
    """Keys in sorted order, as nbformat writes them, so a later nbconvert --inplace changes nothing."""
    return {k: d[k] for k in sorted(d)}


def apply(nb: dict, stem: str) -> list[str]:
    """Apply the changes to one notebook dict in place; return a description of what changed."""
    changes = []
    cells = nb["cells"]
    chapter = NUMBERED.get(stem[:2])
    existing = [i for i, c in enumerate(cells) if c.get("id") == FRONTMATTER_ID]
    if chapter is not None:
        want = frontmatter_cell(chapter)
        if existing != [0] or cells[0] != want:
            for i in reversed(existing):
                del cells[i]
            cells.insert(0, want)
            changes.append(f"frontmatter cell {FRONTMATTER_ID} (enumerator {chapter}.%s)")
    elif existing:
        for i in reversed(existing):
            del cells[i]
        changes.append(f"removed {FRONTMATTER_ID} (unnumbered chapter)")
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        source = _source(cell)
        new = number_free_math(source)
        if new != source:
            cell["source"] = new.splitlines(keepends=True)
            changes.append(f"unlabelled $$ block -> equation* in cell {cell.get('id')}")
    for cell in solution_cells(cells):
        meta = cell.get("metadata", {})
        jup = meta.get("jupyter", {})
        want = _sorted({**jup, **hidden_flags(cell)})
        extra = {"collapsed": True} if cell["cell_type"] == "code" else {}
        if jup != want or any(meta.get(k) != v for k, v in extra.items()):
            cell["metadata"] = _sorted({**meta, **extra, "jupyter": want})
            changes.append(f"collapsed solution cell {cell.get('id')} ({cell['cell_type']})")
    solutions = {id(c) for c in solution_cells(cells)}
    folded = {id(c) for c in folded_cells(cells)}
    for cell in cells:
        if id(cell) in solutions:
            continue
        meta = cell.get("metadata", {})
        jup = meta.get("jupyter", {})
        if id(cell) in folded and jup.get("source_hidden") is not True:
            cell["metadata"] = _sorted({**meta, "jupyter": _sorted({**jup, "source_hidden": True})})
            changes.append(f"folded hide-input cell {cell.get('id')}")
        elif id(cell) not in folded and "source_hidden" in jup:
            rest = {k: v for k, v in jup.items() if k != "source_hidden"}
            cell["metadata"] = _sorted({k: v for k, v in meta.items() if k != "jupyter"}
                                       | ({"jupyter": rest} if rest else {}))
            changes.append(f"unfolded cell {cell.get('id')} (source_hidden without hide-input)")
    return changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", type=Path, nargs="+",
                        help="a folder with the chapter notebooks (NN_name.ipynb), or notebooks")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if changes are due")
    args = parser.parse_args(argv)
    paths = sorted(p for arg in args.chapters
                   for p in (arg.glob("[0-9][0-9]_*.ipynb") if arg.is_dir() else [arg]))
    if not paths:
        parser.error(f"no chapter notebooks in {' '.join(map(str, args.chapters))}")
    due = False
    for path in paths:
        text = path.read_text(encoding="utf-8")
        nb = json.loads(text)
        changes = apply(nb, path.stem)
        if not changes:
            print(f"{path.name}: up to date")
            continue
        due = True
        print(f"{path.name}: " + "; ".join(changes))
        if not args.check:
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 1 if (args.check and due) else 0


if __name__ == "__main__":
    sys.exit(main())
