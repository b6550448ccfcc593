"""The package's import layers (CONTRIBUTING.md, "Import layers"): every module of seqbook imports
only modules of lower layers, and every module has a layer."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "seqbook"


def layers() -> dict[str, int]:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("### Import layers", 1)[1]
    table = {}
    for layer, modules in re.findall(r"^\| (\d+) \| (.+) \|$", section, re.M):
        for name in re.findall(r"`(\w+)`", modules):
            table[name] = int(layer)
    return table


def imports(path: Path) -> set[str]:
    """The seqbook modules ``path`` imports (relative imports), by top-level name."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            inside_subpackage = path.parent != PACKAGE
            if node.level == 1 and inside_subpackage:
                continue  # a subpackage's own modules (seqbook.exercises.core)
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


def modules() -> dict[str, list[Path]]:
    """Top-level module name -> its files (a subpackage counts as one module)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if rel.name == "__init__.py" and rel.parent == Path("."):
            continue
        found.setdefault(rel.parts[0].removesuffix(".py"), []).append(path)
    return found


def test_every_module_has_a_layer():
    table = layers()
    missing = sorted(set(modules()) - set(table))
    assert not missing, f"add these modules to the layer table of CONTRIBUTING.md: {missing}"


def test_imports_go_down_the_layers():
    table = layers()
    wrong = []
    for name, paths in modules().items():
        for path in paths:
            for target in imports(path):
                if target in table and table[target] >= table.get(name, 99):
                    wrong.append(f"{path.relative_to(ROOT)} (layer {table.get(name)}) imports "
                                 f"{target} (layer {table[target]})")
    assert not wrong, "imports that do not go down the layers:\n" + "\n".join(wrong)


def test_the_table_names_real_modules_only_once():
    text = (ROOT / "CONTRIBUTING.md").read_text().split("### Import layers", 1)[1]
    names = re.findall(r"^\| \d+ \| (.+) \|$", text, re.M)
    listed = [n for row in names for n in re.findall(r"`(\w+)`", row)]
    assert len(listed) == len(set(listed)), "a module is in two layers"
