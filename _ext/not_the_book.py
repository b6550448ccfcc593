"""Keep what is not the book out of the build: Python environments inside the project.

Sphinx reads every source file under the book's folder that ``exclude_patterns`` does not name, and
Jupyter Book's ``only_build_toc_files`` does not stop it where it matters most: sphinx-external-toc
lists the files outside ``_toc.yml`` with ``glob``, which skips hidden folders, so a ``.venv`` made
inside the clone was read whole, and a Markdown template in it (Hugging Face's model card,
``{{ card_data }}`` in its front matter) stopped the build with a YAML error. ``_config.yml``
excludes hidden folders and the usual build and cache folders by name; this extension adds every
folder that is a Python environment whatever its name (it holds ``pyvenv.cfg``, as every
``python -m venv`` and virtualenv does, or ``conda-meta``, as a conda environment does).
"""

from __future__ import annotations

import os
from pathlib import Path

MARKERS = ("pyvenv.cfg", "conda-meta")


def environments(srcdir: str | os.PathLike) -> list[str]:
    """The folders under ``srcdir`` that are Python environments, relative and in POSIX form."""
    found = []
    for root, dirs, _files in os.walk(srcdir):
        here = Path(root)
        if here != Path(srcdir) and any((here / marker).exists() for marker in MARKERS):
            found.append(here.relative_to(srcdir).as_posix())
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if not d.startswith((".", "_build"))]
    return sorted(found)


def _exclude(app, config) -> None:
    config.exclude_patterns = list(config.exclude_patterns) + environments(app.srcdir)


def setup(app):
    # before sphinx-external-toc (priority 500) lists the files outside the table of contents
    app.connect("config-inited", _exclude, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
