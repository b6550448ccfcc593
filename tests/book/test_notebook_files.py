"""The committed notebooks are clean files: opening and saving one in JupyterLab changes nothing, and
the test harness's instructions are cell tags, not comments a reader would see."""

import json
from pathlib import Path

import pytest

CHAPTERS = sorted((Path(__file__).resolve().parents[2] / "chapters").glob("*.ipynb"))
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_notebook_file_is_clean(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    # JupyterLab rewrites any other kernelspec to ipykernel's own on the first save.
    assert notebook["metadata"].get("kernelspec") == KERNELSPEC
    for index, cell in enumerate(notebook["cells"]):
        # execution timings change at every run; re-execute with
        # --ExecutePreprocessor.record_timing=False (CONTRIBUTING.md)
        assert "execution" not in cell["metadata"], f"cell {index} carries execution timings"
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            assert "NBVAL" not in source, f"cell {index}: nbval markers are cell tags, not comments"
