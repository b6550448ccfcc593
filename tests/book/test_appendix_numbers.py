"""``_ext/appendix_numbers.py``: each page without section numbers counts its equations, figures and
exercises from 1; numbered chapters keep Sphinx's numbers. (The built book: tests/rendered.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("appendix_numbers", ROOT / "_ext" / "appendix_numbers.py")
appendix_numbers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(appendix_numbers)


def test_unnumbered_pages_restart_and_numbered_chapters_keep_theirs():
    fignumbers = {
        "chapters/10_recurrence": {"displaymath": {"eq-a": (10, 1), "eq-b": (10, 2)}},
        "chapters/11_performance": {"displaymath": {"e1": (1,), "e2": (2,)},
                                    "figure": {"f1": (1,)}},
        "chapters/12_distributed": {"displaymath": {"e4": (4,), "e3": (3,)},
                                    "figure": {"f2": (2,), "f3": (3,)},
                                    "exercise": {"x9": (9,), "x8": (8,)}},
    }
    secnumbers = {"chapters/10_recurrence": {"": (10,), "#a-section": (10, 1)},
                  "chapters/12_distributed": {}}
    changed = appendix_numbers.renumber(fignumbers, secnumbers)
    assert changed == ["chapters/12_distributed"]
    assert fignumbers["chapters/10_recurrence"]["displaymath"] == {"eq-a": (10, 1), "eq-b": (10, 2)}
    assert fignumbers["chapters/11_performance"]["displaymath"] == {"e1": (1,), "e2": (2,)}
    twelve = fignumbers["chapters/12_distributed"]
    assert twelve["displaymath"] == {"e3": (1,), "e4": (2,)}  # in their order on the page
    assert twelve["figure"] == {"f2": (1,), "f3": (2,)}
    assert twelve["exercise"] == {"x8": (1,), "x9": (2,)}
    assert appendix_numbers.renumber(fignumbers, secnumbers) == []  # nothing left to change


def test_the_book_loads_it():
    assert "appendix_numbers: _ext" in (ROOT / "_config.yml").read_text()
