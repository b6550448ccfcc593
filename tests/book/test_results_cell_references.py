"""The results scripts name the chapters' cells by id, never by number (numbers go stale as soon as
a cell is inserted above them), and every id they name is a cell of some chapter."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "results").glob("*.py"))
# "cell 28c1b9dd", "cells ``units-corr``, ``units-rise``", "cells ``a``-``b``"
REFERENCE = re.compile(r"\b[Cc]ells? ((?:``)?[\w-]+(?:``)?(?:(?:,| and|, and|-) ?(?:``)?[\w-]+"
                       r"(?:``)?)*)")
ID = re.compile(r"``([a-z0-9-]+)``|\b([0-9a-f]{8}|[a-z0-9]+(?:-[a-z0-9]+)+)\b")


def cell_ids() -> set[str]:
    return {cell["id"] for path in (ROOT / "chapters").glob("*.ipynb")
            for cell in json.loads(path.read_text())["cells"]}


def test_no_cell_named_by_number():
    numbered = [(path.name, m.group(0)) for path in SCRIPTS
                for m in re.finditer(r"\b[Cc]ells? \d+\b", path.read_text())]
    assert not numbered, f"name the cells by id (the notebook's 'id' field): {numbered}"


def test_every_cell_named_exists():
    ids = cell_ids()
    named = [(path.name, a or b) for path in SCRIPTS for ref in REFERENCE.finditer(path.read_text())
             for a, b in ID.findall(ref.group(1))]
    assert len(named) > 20, named
    missing = [(script, cell) for script, cell in named if cell not in ids]
    assert not missing, f"cells named in results scripts that no chapter has: {missing}"
