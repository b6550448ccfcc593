"""The chapters print package code only through ``seqbook.utils.show_source``, and reformatting the
package with ``ruff format`` cannot change what they print beyond whitespace (and the trailing
comma a formatter adds after the last of one-per-line arguments).

The test reads every ``show_source(...)`` call in the chapters' code cells, resolves its object from
the chapter's own imports, and renders it twice: from the package as it is, and from a copy of the
package formatted by ``ruff format``. The two renderings must agree once whitespace is ignored.

It also holds every printed object to its chapter's level: what a chapter prints names no concept
that a later section introduces (``CONCEPTS``), and no decorator artefact or device-specific
branch (``ARTEFACTS``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import seqbook
from seqbook.utils import _source_text

ROOT = Path(__file__).resolve().parents[2]
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
    """(chapter, object path, module, qualname, docstring) for every show_source call."""
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
                    found.append((path.name, ast.unparse(target), module, qualname,
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


@pytest.mark.parametrize("chapter,expr,module,qualname,docstring", CALLS,
                         ids=[f"{c[0][:2]}-{c[1]}" for c in CALLS])
def test_printed_code_survives_ruff_format(formatted_package, chapter, expr, module, qualname,
                                           docstring):
    ours = _source_text(_resolve(module, qualname), docstring)
    formatted_module = module.replace("seqbook", formatted_package, 1)
    theirs = _source_text(_resolve(formatted_module, qualname), docstring)
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


@pytest.mark.parametrize("chapter,expr,module,qualname,docstring", CALLS,
                         ids=[f"{c[0][:2]}-{c[1]}" for c in CALLS])
def test_printed_code_is_the_math(chapter, expr, module, qualname, docstring):
    """What a chapter prints has no check, no raise, no private name, no line over 88 columns,
    and no '...' (the checks live in validators that show_source leaves out)."""
    text = _source_text(_resolve(module, qualname), docstring)
    problems = _problems(text)
    assert not problems, f"{chapter}: show_source({expr}):\n" + "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# Each printed object at its chapter's level: what a chapter prints names only concepts the book
# has introduced by then.
# ---------------------------------------------------------------------------------------------

_TODAYS_BLOCK = "Today's block: RMSNorm, SwiGLU and grouped-query attention"

# concept -> (a pattern that names it in code, case-insensitive; the chapter and the heading of
# the section that introduces it). A printed object may name a concept only in that section or
# after it, in the book's order.
CONCEPTS = {
    "multi-head attention": (r"\bnum_heads\b|MultiHeadAttention", "05_self_attention",
                             "Multi-head attention"),
    "FlashAttention": (r"flash", "05_self_attention", "Attention in tiles: the online softmax"),
    "positional encoding": (r"positional_encoding|\bpos_emb\b|\bpos_code\b", "06_transformer",
                            "Positional encoding"),
    "layer normalisation": (r"\bLayerNorm\b|layer_norm|\bln_f\b", "06_transformer",
                            "LayerNorm from scratch"),
    "pre-LN and post-LN": (r"\bnorm_first\b", "06_transformer", "Add & norm: pre-LN and post-LN"),
    "the fused path of attention and LayerNorm": (
        r"F\.scaled_dot_product_attention|\bfused_attention\b|\w_fused\b|F\.layer_norm",
        "06_transformer", "The fast path"),
    "rotary position embeddings (RoPE)": (r"\brope\b|rotary|rotate_half", "06_transformer",
                                          "Rotary position embeddings"),
    "the key-value cache": (r"\bcaches?\b|KVCache|kv_cache", "06_transformer",
                            "Generating with a key-value cache"),
    "grouped-query attention": (r"grouped|\bnum_kv_heads\b|\bGQA\b", "06_transformer", _TODAYS_BLOCK),
    "SwiGLU": (r"swiglu|\bsilu\b|gate_proj", "06_transformer", _TODAYS_BLOCK),
    "RMSNorm": (r"rmsnorm", "06_transformer", _TODAYS_BLOCK),
    "top-p and min-p sampling": (r"\btop_p\b|\bmin_p\b", "06_transformer", "Choosing the next token"),
    "linear attention": (r"linear_attention|feature_map", "10_recurrence", "Linear attention"),
    "the parallel scan": (r"parallel_scan|log_space_scan", "10_recurrence",
                          "Gated linear recurrences and the parallel scan"),
    "state-space models": (r"\bssm\b|discretize_zoh|selective_scan|\bmamba", "10_recurrence",
                           "State-space models"),
    "the delta rule": (r"delta_rule|DeltaNet", "10_recurrence", "The delta rule: a memory that overwrites"),
}

# What no printed object may show: the checking machinery, and code for one kind of device.
ARTEFACTS = {
    "a decorator's artefact": r"__wrapped__|@checked|\.validate\b",
    "a device-specific branch": r"\bmps\b|\bcuda\b|device\.type|is_available\(",
}


def _book() -> list[Path]:
    """The chapters in the book's order (``_toc.yml``)."""
    order = re.findall(r"file:\s*chapters/(\S+)", (ROOT / "_toc.yml").read_text())
    return [ROOT / "chapters" / f"{name}.ipynb" for name in order]


def _headings(path: Path) -> dict[str, int]:
    """Section heading text -> the index of the markdown cell that holds it."""
    found = {}
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                heading = re.match(r"#{1,4} (.+)", line)
                if heading:
                    found.setdefault(heading.group(1).strip(), i)
    return found


def _printed() -> list[tuple[int, int, str, str]]:
    """(chapter's place in the book, cell index, chapter name, stored text) for every code cell
    that calls show_source: what the book shows the reader."""
    found = []
    for place, path in enumerate(_book()):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or "show_source(" not in source:
                continue
            text = "".join("".join(out.get("text", "")) for out in cell.get("outputs", [])
                           if out.get("output_type") == "stream")
            found.append((place, i, path.stem, text))
    return found

PRINTED = _printed()


def test_every_concept_s_section_is_in_the_book():
    chapters = {path.stem: path for path in _book()}
    for concept, (_, chapter, heading) in CONCEPTS.items():
        assert chapter in chapters, f"{concept}: no chapter {chapter} in _toc.yml"
        assert heading in _headings(chapters[chapter]), (
            f"{concept}: chapter {chapter} has no section headed {heading!r}")


def test_a_printed_object_names_no_concept_of_a_later_section():
    """What a chapter prints uses only what the book has taught up to that point."""
    assert PRINTED, "no show_source output found"
    book = {path.stem: place for place, path in enumerate(_book())}
    problems = []
    for concept, (pattern, chapter, heading) in CONCEPTS.items():
        taught = (book[chapter], _headings(_book()[book[chapter]])[heading])
        for place, cell, name, text in PRINTED:
            hits = sorted({m.group(0) for m in re.finditer(pattern, text, re.IGNORECASE)})
            if hits and (place, cell) < taught:
                problems.append(f"{name} cell {cell} prints {', '.join(hits)}: {concept}, taught "
                                f"later, in {chapter} under {heading!r}")
    assert not problems, "\n".join(problems)


def test_no_printed_object_shows_machinery_or_a_device_branch():
    problems = []
    for what, pattern in ARTEFACTS.items():
        for _, cell, name, text in PRINTED:
            hits = sorted({m.group(0) for m in re.finditer(pattern, text, re.IGNORECASE)})
            if hits:
                problems.append(f"{name} cell {cell} prints {', '.join(hits)}: {what}")
    assert not problems, "\n".join(problems)


#: printed functions that take no tensors, whose docstrings say what they take in words
NO_TENSORS = {"seqbook.train.train_lm", "seqbook.gating.init_keep_bias",
              "seqbook.memory.saved_tensor_bytes"}


def _shape_documented(obj) -> bool:
    """Whether ``obj``'s docstring has a ``Shape:`` section, or for a method, its class's."""
    docs = [inspect.getdoc(obj) or ""]
    owner = inspect.getmodule(obj)
    for part in getattr(obj, "__qualname__", "").split(".")[:-1]:  # a method: its classes
        owner = getattr(owner, part, None)
        docs.append(inspect.getdoc(owner) or "")
    return any("Shape:" in doc for doc in docs)


def test_every_printed_function_documents_its_shapes():
    missing = []
    for chapter, expr, module, qualname, _ in CALLS:
        obj = _resolve(module, qualname)
        name = f"{getattr(obj, '__module__', module)}.{getattr(obj, '__qualname__', qualname)}"
        if name not in NO_TENSORS and not _shape_documented(obj):
            missing.append(f"{chapter}: {expr} ({name})")
    assert not missing, "printed without a Shape: section in its docstring or its class's:\n" \
        + "\n".join(missing)


def test_every_module_documents_its_shapes():
    missing = []
    for info in pkgutil.iter_modules(seqbook.__path__):
        if info.name == "exercises":
            continue
        module = importlib.import_module(f"seqbook.{info.name}")
        for name, obj in vars(module).items():
            if (name.startswith("_") or not inspect.isclass(obj)
                    or obj.__module__ != module.__name__ or not issubclass(obj, torch.nn.Module)):
                continue
            forward = obj.__dict__.get("forward")
            docs = (inspect.getdoc(obj) or "") + (inspect.getdoc(forward) or "" if forward else "")
            if "Shape:" not in docs:
                missing.append(f"{module.__name__}.{name}")
    assert not missing, f"nn.Modules without a Shape: section: {missing}"
