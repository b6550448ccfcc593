"""What ``pip install .`` puts in the wheel: the package and every subpackage.

A list of package names in ``pyproject.toml`` (``packages = ["seqbook"]``) once left
``seqbook.exercises`` out of every non-editable install, so that no chapter's check cell ran; the
editable install of ``requirements.txt`` hid it, since it maps the whole folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from setuptools import find_packages

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_every_subpackage():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools_config = config["tool"]["setuptools"]
    assert "packages" in setuptools_config, "pyproject.toml must say which packages to install"
    found = setuptools_config["packages"]
    if isinstance(found, dict):  # [tool.setuptools.packages.find]
        include = found["find"].get("include", ["*"])
        packages = set(find_packages(where=str(ROOT), include=include))
    else:
        packages = set(found)
    on_disk = {".".join(p.parent.relative_to(ROOT).parts)
               for p in (ROOT / "seqbook").rglob("__init__.py")}
    assert on_disk <= packages, sorted(on_disk - packages)
    assert all(p.split(".")[0] == "seqbook" for p in packages), sorted(packages)
