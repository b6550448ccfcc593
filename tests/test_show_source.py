"""The chapters print package code only through ``seqbook.utils.show_source``, and reformatting the
package with ``ruff format`` cannot change what they print beyond whitespace (and the trailing
comma a formatter adds after the last of one-per-line arguments).

The test reads every ``show_source(...)`` call in the chapters' code cells, resolves its object from
the chapter's own imports, and renders it twice: from the package as it is, and from a copy of the
package formatted by ``ruff format``. The two renderings must agree once whitespace is ignored, and
every ``start`` marker must still be found.
"""

from __future__ import annotations

import ast
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from seqbook.utils import _source_text

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


def _code_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def _imports(trees: list[ast.Module]) -> dict[str, tuple[str, str]]:
    """Local name -> (seqbook module, attribute path inside it, '' for the module itself)."""
    names = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("seqbook"):
                for alias in node.names:
                    if node.module == "seqbook":  # from seqbook import vsa [as v]
                        names[alias.asname or alias.name] = (f"seqbook.{alias.name}", "")
                    else:
                        names[alias.asname or alias.name] = (node.module, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("seqbook") and alias.asname:
                        names[alias.asname] = (alias.name, "")
    return names


def _dotted(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _calls():
    """(chapter, object path, module, qualname, start, docstring) for every show_source call."""
    found = []
    for path in CHAPTERS:
        trees = []
        for source in _code_cells(path):
            try:
                trees.append(ast.parse(source))
            except SyntaxError:  # a cell with IPython magics: no show_source call in those
                continue
        names = _imports(trees)
        for tree in trees:
            loops = {}  # for fn in (a, b, c): show_source(fn)
            for node in ast.walk(tree):
                if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(
                        node.iter, (ast.Tuple, ast.List)):
                    loops[node.target.id] = node.iter.elts
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id == "show_source"):
                    continue
                kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
                args = node.args[0]
                targets = loops.get(args.id, [args]) if isinstance(args, ast.Name) else [args]
                for target in targets:
                    dotted = _dotted(target)
                    assert dotted and dotted[0] in names, f"{path.name}: cannot resolve {ast.unparse(target)}"
                    module, attr = names[dotted[0]]
                    qualname = ".".join(([attr] if attr else []) + dotted[1:])
                    found.append((path.name, ast.unparse(target), module, qualname, kwargs.get("start"),
                                  kwargs.get("docstring", True)))
    return found


CALLS = _calls()


def _resolve(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def test_chapters_print_code_only_through_show_source():
    assert CALLS, "no show_source call found in the chapters"
    for path in CHAPTERS:
        for source in _code_cells(path):
            assert "getsource" not in source, f"{path.name} slices inspect.getsource; use show_source"


@pytest.fixture(scope="module")
def formatted_package(tmp_path_factory):
    """A copy of seqbook, formatted by ruff format, importable as ``seqbook_formatted``."""
    if shutil.which("ruff") is None:
        pytest.skip("ruff is not installed")
    root = tmp_path_factory.mktemp("formatted")
    shutil.copytree(ROOT / "seqbook", root / "seqbook_formatted",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["ruff", "format", "-q", "--config", str(ROOT / "pyproject.toml"),
                    str(root / "seqbook_formatted")], check=True)
    sys.path.insert(0, str(root))
    try:
        yield "seqbook_formatted"
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m.split(".")[0] == "seqbook_formatted"]:
            del sys.modules[name]


def _squeezed(code: str) -> str:
    """The code without whitespace and without the trailing commas a formatter adds when it
    puts one argument per line: what two layouts of the same code share."""
    import re

    return re.sub(r",([)\]}])", r"\1", "".join(code.split()))


@pytest.mark.parametrize("chapter,expr,module,qualname,start,docstring", CALLS,
                         ids=[f"{c[0][:2]}-{c[1]}" for c in CALLS])
def test_printed_code_survives_ruff_format(formatted_package, chapter, expr, module, qualname, start,
                                           docstring):
    ours = _source_text(_resolve(module, qualname), start, docstring)
    formatted_module = module.replace("seqbook", formatted_package, 1)
    theirs = _source_text(_resolve(formatted_module, qualname), start, docstring)
    assert _squeezed(ours) == _squeezed(theirs), (
        f"{chapter}: show_source({expr}) prints different code once the package is formatted")


def _problems(text: str) -> list[str]:
    """What keeps printed code from being the math: checks, raises, private names, wide lines."""
    import io
    import re
    import tokenize

    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > 88:
            found.append(f"line {number} is {len(line)} columns wide (the page shows 88)")
        if re.match(r"\s*\.\.\.\s*$", line):
            found.append(f"line {number} is '...': something was skipped")
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type != tokenize.NAME:
            continue
        if tok.string == "raise":
            found.append(f"line {tok.start[0]} raises: an argument check")
        elif tok.string.startswith("check_") or tok.string.startswith("_check"):
            found.append(f"line {tok.start[0]} calls {tok.string}: an argument check")
        elif tok.string.startswith("_") and not (tok.string.startswith("__") and tok.string.endswith("__")):
            if tok.string != "_":
                found.append(f"line {tok.start[0]} names {tok.string}, which a reader cannot look up")
    return found


@pytest.mark.parametrize("chapter,expr,module,qualname,start,docstring", CALLS,
                         ids=[f"{c[0][:2]}-{c[1]}" for c in CALLS])
def test_printed_code_is_the_math(chapter, expr, module, qualname, start, docstring):
    """What a chapter prints has no check, no raise, no private name, no line over 88 columns,
    and no '...' (the checks live in validators that show_source leaves out)."""
    text = _source_text(_resolve(module, qualname), start, docstring)
    problems = _problems(text)
    assert not problems, f"{chapter}: show_source({expr}):\n" + "\n".join(problems)
