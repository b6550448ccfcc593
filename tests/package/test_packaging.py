"""What ``pip install .`` puts in the wheel: the package and every subpackage.

A list of package names in ``pyproject.toml`` (``packages = ["seqbook"]``) once left
``seqbook.exercises`` out of every non-editable install, so that no chapter's check cell ran; the
editable install of ``requirements.txt`` hid it, since it maps the whole folder.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import setuptools
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


def test_a_wheel_built_offline_holds_every_file_and_the_licence(tmp_path):
    """Build the wheel as ``pip install .`` does, from a copy of what it reads, without the
    network: the installed setuptools builds it (the project asks for 77 or later, the first to
    read an SPDX ``license``), and no deprecation warning may come out."""
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} is older than the build asks for")
    src = tmp_path / "src"
    src.mkdir()
    for name in ["pyproject.toml", "README.md", "LICENSE"]:
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "seqbook", src / "seqbook",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-v", "-w", str(tmp_path / "out"), str(src)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "DeprecationWarning" not in done.stdout + done.stderr, done.stderr[-3000:]
    (wheel,) = (tmp_path / "out").glob("seqbook-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = z.read(metadata).decode()
    on_disk = {p.relative_to(ROOT).as_posix() for p in (ROOT / "seqbook").rglob("*.py")}
    assert on_disk <= names, sorted(on_disk - names)
    assert "License-Expression: MIT" in meta and "License-File: LICENSE" in meta
    assert any(n.endswith("licenses/LICENSE") for n in names), sorted(names)
