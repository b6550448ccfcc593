"""Building the book as a reader does: from a clone of the project, with the README's command.

A reader's clone is seldom clean: ``python -m venv .venv`` inside it is the most common habit there
is, and every environment with ``transformers`` installed holds Markdown that stops a Sphinx build
that reads it. ``clone_with_environments`` copies the project's files (tracked and new, not ignored)
and plants such folders, so the tests that build the book (the browser test, the PDF test) build it
the way it breaks in practice.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A Markdown file that stops any build that reads it: Hugging Face's model-card template, which every
# environment with `transformers` installed holds (its front matter is a Jinja placeholder, not YAML).
NOT_THE_BOOK = "---\n# model card metadata\n{{ card_data }}\n---\n\n# Model Card for {{ model_id }}\n"
# Where a reader's habits put such files inside the clone: virtual environments under the usual names
# and one under a name of its own, a conda environment, tox's folders, a build folder.
PLANTED = {
    ".venv": "lib/python3.11/site-packages/huggingface_hub/templates/modelcard_template.md",
    "venv": "lib/python3.11/site-packages/huggingface_hub/templates/modelcard_template.md",
    "env": "README.md",
    "my-project-env": "lib/python3.11/site-packages/huggingface_hub/templates/modelcard_template.md",
    "conda-env": "share/doc/README.md",
    ".tox/py311": "README.md",
    "build": "README.md",
}


def _project_files() -> list[str]:
    """The project's files: git's tracked and new ones (not ignored); in a copy without git (an
    unpacked archive), every file outside hidden, build and cache folders."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True)
    if listed.returncode == 0 and (ROOT / ".git").exists():
        return [name for name in listed.stdout.decode().split("\0") if name]
    files = []
    for root, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_build", "__pycache__"))
                   and not d.endswith(".egg-info") and not (Path(root) / d / "pyvenv.cfg").exists()]
        files += [(Path(root) / n).relative_to(ROOT).as_posix() for n in names]
    return files


def clone_with_environments(dest: Path) -> Path:
    """The project's files as a clone has them, with the folders of ``PLANTED`` inside, each holding
    ``NOT_THE_BOOK`` and a notebook that is not JSON."""
    # the reader's own environments in the project, under names .gitignore does not know, stay out
    environments = [p.name for p in ROOT.iterdir()
                    if (p / "pyvenv.cfg").is_file() or (p / "conda-meta").is_dir()]
    for name in _project_files():
        if name.split("/")[0] not in environments and (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    for folder, page in PLANTED.items():
        (dest / folder / page).parent.mkdir(parents=True, exist_ok=True)
        (dest / folder / page).write_text(NOT_THE_BOOK, encoding="utf-8")
        (dest / folder / "notes.ipynb").write_text("not a notebook", encoding="utf-8")
    for venv in (".venv", "venv", "my-project-env"):
        (dest / venv / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")
    (dest / "conda-env" / "conda-meta").mkdir()
    return dest


def build_book(source: Path, *options: str) -> subprocess.CompletedProcess:
    """``jupyter-book build . OPTIONS`` in ``source``; fails with the end of its output if it fails."""
    build = subprocess.run(
        [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", "build", ".", *options],
        capture_output=True, text=True, cwd=source,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return build
