"""The package's rooms and import layers (CONTRIBUTING.md, "Rooms" and "Import layers"): every module
of seqbook has a room and a layer, imports only modules of lower layers, and no model module reaches
a data module, directly or through another module (models take their data as arguments)."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "seqbook"


def layers() -> dict[str, int]:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("### Import layers", 1)[1]
    table = {}
    for layer, modules in re.findall(r"^\| (\d+) \| (.+) \|$", section, re.M):
        for name in re.findall(r"`(\w+)`", modules):
            table[name] = int(layer)
    return table


def rooms() -> dict[str, str]:
    """Module -> its kind (``model``, ``data``, ...): the first column of the Rooms table."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("## Rooms", 1)[1].split("### Import layers", 1)[0]
    table = {}
    for kind, _what, where in re.findall(r"^\| (\w+) \| (.+?) \| (.+) \|$", section, re.M):
        if kind != "kind":  # the header row
            for name in re.findall(r"`(\w+)`", where):
                table[name] = kind
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


def test_every_module_has_a_room_and_the_rooms_name_real_modules():
    table, found = rooms(), set(modules())
    missing = sorted(found - set(table))
    assert not missing, f"add these modules to the Rooms table of CONTRIBUTING.md: {missing}"
    unknown = sorted(set(table) - found)
    assert not unknown, f"the Rooms table names modules that do not exist: {unknown}"
    assert {"model", "data"} <= set(table.values())


def test_no_model_module_reaches_a_data_module():
    """Model files import no data module (vocabularies, loaders, fetching, data sets, batches),
    neither directly nor through a module they import: data is passed in."""
    kinds = rooms()
    graph = {name: set().union(*(imports(path) for path in paths)) for name, paths in modules().items()}
    wrong = []
    for model in sorted(n for n, kind in kinds.items() if kind == "model"):
        paths, todo = {model: [model]}, [model]  # the import chain that reached each module
        while todo:
            name = todo.pop()
            for target in sorted(graph.get(name, ())):
                if target in paths:
                    continue
                paths[target] = paths[name] + [target]
                if kinds.get(target) == "data":
                    wrong.append(" -> ".join(paths[target]))
                else:
                    todo.append(target)
    assert not wrong, "model modules that reach a data module:\n" + "\n".join(wrong)
