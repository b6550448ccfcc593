"""Write every checked exercise's hint dropdowns from the one place hints are written: the
registry of ``seqbook.exercises`` (``@exercise(label, hints=[...])`` in ``seqbook/exercises/chNN.py``).

    python tools/exercise_hints.py            # rewrite the dropdowns of every chapter
    python tools/exercise_hints.py chapters/05_self_attention.ipynb   # of one chapter
    python tools/exercise_hints.py --check    # exit 1 if a chapter's dropdowns differ

The notebook's hint cells (one ``:::{admonition} Hint N`` dropdown each, between the check cell
and the solution) are replaced by one cell per registered hint, in order; nothing else changes,
so a chapter need not be executed again. ``hint(label)`` in a notebook reads the same texts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "exercises"))

from test_exercise_cells import CHAPTERS, HINT, exercises, text  # noqa: E402

from seqbook.exercises import EXERCISES  # noqa: E402


def hint_cell(label: str, level: int, body: str) -> dict:
    # "<eos>" would be read as an HTML tag and vanish from the page: escape a "<" that starts
    # a tag (not "<=" or "j < t")
    body = re.sub(r"<(?=[A-Za-z/!])", r"\\<", body)
    source = f":::{{admonition}} Hint {level}\n:class: dropdown\n{body}\n:::"
    return {"cell_type": "markdown", "id": f"{label}-hint{level}", "metadata": {},
            "source": source.splitlines(keepends=True)}


def rewrite(path: Path, write: bool = True) -> bool:
    """Rewrite the hint cells of the chapter at ``path`` (with ``write``); True if any differ."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = nb["cells"]
    changed = False
    for ex in exercises(path):
        if ex.check is None or ex.label not in EXERCISES:
            continue
        start = next(i for i, c in enumerate(cells) if c.get("id") == ex.check.get("id")
                     and text(c) == text(ex.check))
        end = start + 1
        while end < len(cells) and not text(cells[end]).lstrip().startswith("```{solution-start}"):
            end += 1
        spots = [i for i in range(start + 1, end) if cells[i]["cell_type"] == "markdown"
                 and HINT.fullmatch(text(cells[i]).strip())]
        hints = EXERCISES[ex.label].hints
        new = [hint_cell(ex.label, n + 1, body) for n, body in enumerate(hints)]
        old = [(cells[i].get("id"), text(cells[i])) for i in spots]
        if old == [(c["id"], "".join(c["source"])) for c in new]:
            continue
        changed = True
        at = spots[0] if spots else start + 1
        for i in reversed(spots):
            del cells[i]
        cells[at:at] = new
    if changed and write:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report, change nothing")
    parser.add_argument("chapters", nargs="*", type=Path, help="notebooks (default: all)")
    args = parser.parse_args()
    stale = []
    for path in [p.resolve() for p in args.chapters] or CHAPTERS:
        if args.check:
            if rewrite(path, write=False):
                stale.append(path.name)
        elif rewrite(path):
            print(f"rewrote the hints of {path.name}")
    if stale:
        print("hints differ from the registry in: " + ", ".join(stale)
              + " (run python tools/exercise_hints.py)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
