"""The exercises as the chapters lay them out (CONTRIBUTING, "Exercises a learner can check").

Every numbered chapter has at least five exercises, each with a tier (★, ★★ or ★★★), at least one
find-the-bug exercise and at least one "predict, then run" prompt in its text. A checked exercise
reads: statement, starter cell, check cell (stored output: "not attempted", or for the buggy
starter of a find-the-bug exercise what is wrong), two or three hint
dropdowns with the texts that ``hint`` gives, and a solution that ends by passing its own check.
``python tests/exercises/test_exercise_cells.py`` prints the counts per chapter.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from seqbook.exercises import EXERCISES

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
APPENDIX = "11_performance"  # an appendix may keep fewer exercises
TIERS = ("★★★", "★★", "★")

DIRECTIVE = re.compile(r"```\{exercise\}[ \t]*([^\n]*)\n((?::[^\n]*\n)*)")
HINT = re.compile(r":::\{admonition\}\s*Hint (\d+)\s*\n:class:\s*dropdown\s*\n(.*?)\n:::", re.S)


def text(cell: dict) -> str:
    return "".join(cell["source"])


def squash(s: str) -> str:
    return " ".join(s.split())


@dataclass
class Exercise:
    label: str
    title: str
    tier: str | None
    starter: dict | None = None
    check: dict | None = None
    hints: list[tuple[int, str]] = field(default_factory=list)
    solution_code: list[str] = field(default_factory=list)


def exercises(path: Path) -> list[Exercise]:
    """The chapter's exercises with the cells that follow each statement."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found: list[Exercise] = []
    i = 0
    while i < len(cells):
        m = DIRECTIVE.search(text(cells[i])) if cells[i]["cell_type"] == "markdown" else None
        label = m and re.search(r":label:\s*(\S+)", m.group(2))
        if not label:
            i += 1
            continue
        title = m.group(1).strip()
        ex = Exercise(label.group(1), title, next((t for t in TIERS if title.startswith(t)), None))
        found.append(ex)
        j = i + 1
        # starter and check cells, then hints, up to the solution
        if j + 1 < len(cells) and cells[j]["cell_type"] == cells[j + 1]["cell_type"] == "code" \
                and f'check("{ex.label}"' in text(cells[j + 1]):
            ex.starter, ex.check = cells[j], cells[j + 1]
            j += 2
        while j < len(cells) and not text(cells[j]).lstrip().startswith("```{solution-start}"):
            if DIRECTIVE.search(text(cells[j])):
                break
            ex.hints += [(int(n), body) for n, body in HINT.findall(text(cells[j]))]
            j += 1
        if j < len(cells) and text(cells[j]).lstrip().startswith("```{solution-start}"):
            j += 1
            while j < len(cells) and "{solution-end}" not in text(cells[j]):
                if cells[j]["cell_type"] == "code":
                    ex.solution_code.append(text(cells[j]))
                j += 1
        i = j if j > i else i + 1
    return found


def prose(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join(text(c) for c in cells if c["cell_type"] == "markdown")


def stats(path: Path) -> dict:
    found = exercises(path)
    return {
        "exercises": len(found),
        "checked": sum(e.check is not None for e in found),
        "hints": sum(len(e.hints) for e in found),
        "tiers": {t: sum(e.tier == t for e in found) for t in reversed(TIERS)},
        "bugs": sum("bug" in e.title.lower() for e in found),
        "predict": len(re.findall(r"predict, then run", prose(path), re.I)),
    }


NUMBERED = [p for p in CHAPTERS if p.stem != APPENDIX]


@pytest.mark.parametrize("path", NUMBERED, ids=lambda p: p.stem)
def test_every_chapter_has_its_exercises(path):
    s = stats(path)
    assert s["exercises"] >= 5, f"{path.name}: {s['exercises']} exercises, at least 5 wanted"
    assert s["bugs"] >= 1, f"{path.name}: no find-the-bug exercise (a title naming the bug)"
    assert s["predict"] >= 1, f"{path.name}: no 'Predict, then run' prompt in the text"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_exercise_layout(path):
    problems = []
    for ex in exercises(path):
        if ex.tier is None:
            problems.append(f"{ex.label}: the title {ex.title!r} starts with no tier (★, ★★, ★★★)")
        if ex.check is None:
            continue
        if ex.label not in EXERCISES:
            problems.append(f"{ex.label}: checked in the chapter but registered by no checker")
            continue
        outputs = "".join("".join(o.get("text", o.get("data", {}).get("text/plain", "")))
                          for o in ex.check.get("outputs", []))
        # a find-the-bug starter holds the buggy code: its check says what is wrong
        allowed = ("…", "✗") if "bug" in ex.title.lower() else ("…",)
        if not outputs.startswith(allowed):
            problems.append(f"{ex.label}: the check cell's stored output is not 'not attempted': "
                            f"{outputs[:80]!r}")
        registered = [squash(h) for h in EXERCISES[ex.label].hints]
        shown = [squash(body.replace("\\<", "<")) for _, body in sorted(ex.hints)]
        if [n for n, _ in ex.hints] != list(range(1, len(ex.hints) + 1)):
            problems.append(f"{ex.label}: hints numbered {[n for n, _ in ex.hints]}")
        if shown != registered:
            problems.append(f"{ex.label}: the hint dropdowns differ from hint() (write hints in the "
                            "registry, then run python tools/exercise_hints.py): "
                            f"{len(shown)} shown, {len(registered)} registered"
                            + next((f"; first difference: {a!r} vs {b!r}"
                                    for a, b in zip(shown, registered, strict=False) if a != b), ""))
        if not ex.solution_code or f'assert check("{ex.label}"' not in ex.solution_code[-1]:
            problems.append(f"{ex.label}: the solution does not end in assert check(...)")
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


# Words that tell a learner what to change. Under a find-the-bug starter the stored check output is
# the symptom only ("the loss of a confident mistake is inf"); the fix is for the hints and the
# solution.
FIX_WORDS = re.compile(r"\b(should|instead|must|use|using|set|replace|swap|change|add|remove|"
                       r"detach|subtract|fix|try|rather|need|needs|keep|make|apply|before the|"
                       r"after the|mask the)\b", re.I)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_stored_output_tells_the_fix(path):
    problems = []
    for ex in exercises(path):
        if ex.check is None or "bug" not in ex.title.lower():
            continue
        outputs = "".join("".join(o.get("text", o.get("data", {}).get("text/plain", "")))
                          for o in ex.check.get("outputs", []))
        said = outputs.replace(ex.label, "")  # the label is the exercise's name, not advice
        words = sorted({w.lower() for w in FIX_WORDS.findall(said)})
        if words:
            problems.append(f"{ex.label}: the stored output under the buggy starter says what to "
                            f"do ({', '.join(words)}): {outputs.strip()[:160]!r}")
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_most_exercises_are_checked():
    every = [ex for path in CHAPTERS for ex in exercises(path)]
    checked = sum(ex.check is not None for ex in every)
    assert checked >= 0.8 * len(every), f"{checked} of {len(every)} exercises have a check cell"


def test_an_exercise_without_a_check_says_so():
    """A learner who finds no check cell is told why, in the statement."""
    silent = []
    for path in CHAPTERS:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        statements = {}
        for cell in cells:
            text = "".join(cell["source"])
            match = re.search(r":label: (ex-[\w-]+)", text)
            if cell["cell_type"] == "markdown" and match:
                statements[match.group(1)] = text[match.end():text.index("\n```", match.end())]
        silent += [f"{path.stem}: {ex.label}" for ex in exercises(path)
                   if ex.check is None and "no check cell" not in statements[ex.label]]
    assert not silent, f"exercises without a check cell whose statement does not say so: {silent}"


def test_every_registered_exercise_is_in_a_chapter():
    labels = {ex.label for path in CHAPTERS for ex in exercises(path) if ex.check is not None}
    missing = sorted(name for name in EXERCISES if name not in labels)  # the appendices' too
    assert not missing, f"registered but checked in no chapter: {missing}"


if __name__ == "__main__":
    total = {"exercises": 0, "checked": 0, "hints": 0}
    for path in CHAPTERS:
        s = stats(path)
        for k in total:
            total[k] += s[k]
        tiers = " ".join(f"{t}{n}" for t, n in s["tiers"].items())
        print(f"{path.stem:22s} exercises {s['exercises']:2d}  checked {s['checked']:2d}  "
              f"hints {s['hints']:2d}  {tiers}  find-the-bug {s['bugs']}  predict {s['predict']}")
    print(f"{'total':22s} exercises {total['exercises']:2d}  checked {total['checked']:2d}  "
          f"hints {total['hints']:2d}")
