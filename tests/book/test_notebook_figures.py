"""Every figure in the book is numbered, captioned and described: the notebook cell that draws it
carries myst-nb metadata with a label, a caption and an alt text (what a screen reader reads, and what
shows when the image cannot load)."""

import base64
import json
import re
from pathlib import Path

import pytest

CHAPTERS = sorted((Path(__file__).resolve().parents[2] / "chapters").glob("*.ipynb"))


def figure_cells(path):
    for index, cell in enumerate(json.loads(path.read_text())["cells"]):
        outputs = cell.get("outputs", []) if cell["cell_type"] == "code" else []
        if any("image/png" in o.get("data", {}) or "image/svg+xml" in o.get("data", {}) for o in outputs):
            yield index, cell


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_figure_has_a_label_caption_and_alt_text(path):
    labels = []
    for index, cell in figure_cells(path):
        meta = cell["metadata"].get("mystnb", {})
        figure, image = meta.get("figure", {}), meta.get("image", {})
        assert figure.get("name", "").startswith("fig-"), f"cell {index}: no figure label"
        assert len(figure.get("caption", "")) > 20, f"cell {index}: no caption"
        alt = image.get("alt", "")
        assert len(alt) > 20 and "$" not in alt and "`" not in alt, f"cell {index}: no plain-text alt text"
        assert not re.search(r"\b(?:eq|fig|ex)-ch\d", alt), f"cell {index}: a label in the alt text"
        assert "width" not in image, f"cell {index}: figures keep their natural width (at most the column)"
        labels.append(figure["name"])
    assert len(labels) == len(set(labels)), "figure labels must be unique"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_figures_are_stored_at_twice_their_display_size(path):
    """seqbook.plot.use_book_style: sharp on dense screens, shown at the size the chapter chose."""
    for index, cell in figure_cells(path):
        for output in cell["outputs"]:
            if "image/png" not in output.get("data", {}):
                continue
            shown = output.get("metadata", {}).get("image/png", {}).get("width")
            png = base64.b64decode(output["data"]["image/png"])
            stored = int.from_bytes(png[16:20], "big")  # the IHDR width
            assert shown and abs(stored - 2 * shown) <= 2, f"cell {index}: {stored} px stored, shown {shown}"
