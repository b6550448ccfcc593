"""Every number the prose takes from a cell resolves: each ``{glue:...}`name``` role in a
markdown cell (or a figure caption) names a value that a code cell of the same notebook glued,
as its stored output records.

A renamed glue key, or a glue call removed with its cell, leaves the page with a missing number;
the book build reports it only as a warning, late. This test reads the stored notebooks, so it
runs in a second.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

CHAPTERS = sorted((Path(__file__).resolve().parents[2] / "chapters").glob("[0-9]*.ipynb"))
ROLE = re.compile(r"\{glue(?::[a-z]+)?\}`([^`]+)`")


def glued(nb: dict) -> set[str]:
    """The names that the notebook's stored outputs record as glued."""
    names = set()
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                names.add(name)
    return names


def referenced(nb: dict) -> dict[str, str]:
    """Each glue name a markdown cell or a figure caption uses -> the id of that cell."""
    refs = {}
    for cell in nb["cells"]:
        texts = ["".join(cell["source"])] if cell["cell_type"] == "markdown" else []
        figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
        texts.append(figure.get("caption", ""))
        for text in texts:
            for name in ROLE.findall(text):
                refs.setdefault(name.split(":")[0].strip(), cell.get("id", "?"))
    return refs


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_glue_reference_resolves(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    missing = {name: cid for name, cid in referenced(nb).items() if name not in glued(nb)}
    assert not missing, f"{path.name}: glue names used but never glued (name -> cell): {missing}"
