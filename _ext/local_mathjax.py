"""Serve MathJax 3 from the built site instead of a CDN.

Readers online and CI offline see the same typeset math: the MathJax files shipped in the
``django-static-mathjax`` wheel are copied into the built site's
_static folder, and Sphinx loads them from there.
Only the CommonHTML bundle and what it loads at run time are copied (about 1 MB).
"""

from __future__ import annotations

import shutil
from pathlib import Path

TARGET = "_mathjax"
WANTED = ["tex-chtml.js", "output/chtml", "input/tex", "ui", "a11y", "adaptors"]


def _mathjax_root() -> Path:
    import mathjax  # provided by the django-static-mathjax wheel

    root = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (root / "tex-chtml.js").is_file():
        raise RuntimeError(f"MathJax 3 not found under {root}; pip install django-static-mathjax")
    return root


def _set_path(app, config) -> None:
    config.mathjax_path = f"{TARGET}/tex-chtml.js"


def _copy(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    root, out = _mathjax_root(), Path(app.outdir) / "_static" / TARGET
    for item in WANTED:
        src, dst = root / item, out / item
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def setup(app):
    _mathjax_root()  # fail early, with a clear message
    app.connect("config-inited", _set_path, priority=900)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
