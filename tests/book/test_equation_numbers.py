"""Every equation number written out in the package and the chapters' text ("eq. (9.22)", as a
docstring, a check's message or a hint must write it) still names the equation it was written
for.

The book numbers its labelled equations in order, chapter by chapter, so an equation inserted
above shifts every later number; the package cannot use the label. The table below says which
labelled equation each number written out means; a number that now falls on another label, or a
new number missing from the table, fails here, before a reader follows a hint to the wrong
equation (an inserted equation once turned "eq. (9.21)" from the DPO loss into the RLHF optimum).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9]*.ipynb"))
#: a reference written out: "eq. (9.2)", "eqs. (4.6)-(4.8)", "(eq. 9.6)", "eq. 5.2 of"
REFERENCE = re.compile(r"eqs?\. \(?[0-9.]+\)?(?:\s*(?:-|–|to|and)\s*\(?[0-9.]+\)?)?")
NUMBER = re.compile(r"([0-9]+)\.([0-9]+)")

#: the number written out -> the label of the equation it means
MEANS = {
    "1.2": "eq-ch1-bpe-count",
    "2.1": "eq-ch2-elman-state",
    "2.2": "eq-ch2-elman-output",
    "2.3": "eq-ch2-worked",
    "3.1": "eq-ch3-update",
    "3.3": "eq-ch3-candidate",
    "3.4": "eq-ch3-state",
    "3.6": "eq-ch3-lstm",
    "3.7": "eq-ch3-unrolled",
    "4.1": "eq-ch4-encoder",
    "4.4": "eq-ch4-annotations",
    "4.5": "eq-ch4-decoder",
    "4.6": "eq-ch4-context",
    "4.7": "eq-ch4-softmax",
    "4.8": "eq-ch4-energy",
    "4.9": "eq-ch4-step",
    "5.2": "eq-ch5-sdpa",
    "5.5": "eq-ch5-softmax-jacobian",
    "5.10": "eq-ch5-head",
    "5.11": "eq-ch5-multihead",
    "6.1": "eq-ch6-pe-sin",
    "6.2": "eq-ch6-pe-cos",
    "6.6": "eq-ch6-preln",
    "6.7": "eq-ch6-postln",
    "6.8": "eq-ch6-layernorm",
    "6.24": "eq-ch6-spec-tokens",
    "7.1": "eq-ch7-neuron",
    "7.2": "eq-ch7-hebb",
    "7.3": "eq-ch7-energy",
    "7.5": "eq-ch7-bit-error",
    "7.6": "eq-ch7-dense-energy",
    "7.7": "eq-ch7-dense-update",
    "7.8": "eq-ch7-continuous-energy",
    "7.9": "eq-ch7-continuous-update",
    "7.10": "eq-ch7-projections",
    "7.11": "eq-ch7-hopfield-attention",
    "7.12": "eq-ch7-neighbour",
    "8.7": "eq-ch8-fpe",
    "8.8": "eq-ch8-genbundle",
    "8.9": "eq-ch8-residual",
    "8.11": "eq-ch8-sdpa",
    "8.12": "eq-ch8-vsa-attention",
    "9.1": "eq-ch9-cross-entropy",
    "9.2": "eq-ch9-decomposition",
    "9.6": "eq-ch9-grad",
    "9.7": "eq-ch9-smoothing",
    "9.8": "eq-ch9-margin",
    "9.22": "eq-ch9-dpo",
    "10.4": "eq-ch10-la-recurrent",
    "10.7": "eq-ch10-combine",
    "10.10": "eq-ch10-zoh",
    "10.15": "eq-ch10-selective",
}


def numbered() -> dict[str, str]:
    """Each equation's number, as the book prints it -> its label: the labelled display
    equations of a chapter, in order, the chapter's number first."""
    numbers = {}
    for path in CHAPTERS:
        chapter, n = int(path.name[:2]), 0
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "markdown" or "remove-cell" in cell.get("metadata", {}).get(
                    "tags", []):
                continue
            for label in re.findall(r"\$\$ \((eq-[\w-]+)\)", "".join(cell["source"])):
                n += 1
                numbers[f"{chapter}.{n}"] = label
    return numbers


def written() -> list[tuple[str, str]]:
    """(where, number) of every equation number written out in the package and in the chapters'
    markdown (hints included)."""
    found = []
    for path in sorted((ROOT / "seqbook").rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for ref in REFERENCE.finditer(line):
                found += [(f"{path.relative_to(ROOT)}:{i}", f"{a}.{b}")
                          for a, b in NUMBER.findall(ref.group(0))]
    for path in CHAPTERS:
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                for ref in REFERENCE.finditer("".join(cell["source"])):
                    found += [(f"{path.name} cell {cell['id']}", f"{a}.{b}")
                              for a, b in NUMBER.findall(ref.group(0))]
    return found


def test_the_table_still_holds():
    now = numbered()
    moved = {number: (label, now.get(number)) for number, label in MEANS.items()
             if now.get(number) != label}
    assert not moved, ("these numbers now fall on other equations (meant, now): update the "
                       f"references written out, then this table: {moved}")


def test_every_number_written_out_is_in_the_table():
    # the appendices are not numbered: each counts its equations from (1), in the book
    # (_ext/appendix_numbers.py) as in JupyterLab, so "(1)" could be either; name them in words
    appendix = [(where, n) for where, n in written() if int(n.split(".")[0]) > len(CHAPTERS) - 2]
    assert not appendix, f"numbers written out for the appendices' equations: {appendix}"
    unknown = [(where, number) for where, number in written() if number not in MEANS]
    assert not unknown, ("equation numbers written out that the table does not know: add what "
                         f"each means to MEANS: {unknown}")


def test_the_reference_pattern_finds_them():
    assert len(written()) > 100 and ("seqbook/exercises/ch09.py", "9.22") in {
        (where.split(":")[0], number) for where, number in written()}


def test_no_label_written_as_a_number():
    """A hint or a page that writes "eq. (overlap)" shows the reader a label, not a number; the
    pages cite with {eq}`label`, the package with the number (chapters 11 and 12, whose
    equations are numbered from (1) on each page, by naming the equation in words)."""
    from seqbook.exercises import EXERCISES

    named = re.compile(r"eqs?\. \([a-z]")
    texts = [(label, hint) for label, ex in EXERCISES.items() for hint in ex.hints]
    for path in CHAPTERS:
        texts += [(f"{path.name} cell {cell['id']}", "".join(cell["source"]))
                  for cell in json.loads(path.read_text())["cells"]
                  if cell["cell_type"] == "markdown"]
    assert not [where for where, text in texts if named.search(text)]
