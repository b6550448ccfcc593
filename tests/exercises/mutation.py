"""Mutation testing of the exercise checks: the reference solutions of the chapters, mutated.

A check is as good as the wrong answers it refuses. This module takes each checkable exercise's
reference solution from its chapter (the solution's code cells, up to the final
``assert check(label, answer...)``), keeps what defines the answer (imports, the functions and
classes the answer uses, the ``answer = ...`` assignment of a numeric exercise) and makes its
*mutants* mechanically, one small change each, as mutmut or cosmic-ray do:

- arithmetic: ``+`` <-> ``-``, ``*`` <-> ``/``, ``@`` -> ``*``, ``**`` -> ``*``, the operands of a
  non-commutative operator swapped, a term dropped (``a + b`` -> ``a`` and -> ``b``), a sign
  dropped (``-x`` -> ``x``);
- comparisons and logic: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``<`` <-> ``>``, ``==`` <-> ``!=``,
  ``and`` <-> ``or``, ``not x`` -> ``x``;
- constants: a number ``n`` -> ``n + 1``, ``n - 1``, ``2 n`` and ``0`` (``1`` for ``0``),
  ``True`` <-> ``False``;
- calls: ``sum`` <-> ``mean``, ``max`` <-> ``min`` (and ``amax``, ``maximum``, ``argmax``),
  ``exp`` <-> ``log``, ``sin`` <-> ``cos``, ``triu`` <-> ``tril``, ``softmax`` <->
  ``log_softmax``, ``cumsum`` <-> ``cumprod``; a call to ``detach``, ``clone``, ``masked_fill``,
  ``clamp``, ``abs``, ``sqrt``, ``softmax``, ``transpose`` and the like removed (``x.f(...)`` ->
  ``x``), ``.T`` removed, the first two positional arguments swapped;
- slices and ranges: each bound of a slice and the end of a ``range`` moved by one;
- statements: each statement of a function body removed (but a lone one), neighbours swapped.

Each mutant is named by the function it changes, the line within the solution, and the change,
e.g. ``merge:3 maximum -> minimum``; the names are stable while the solution is unchanged.
A mutant that computes the same as the solution on every input the check uses is *equivalent*;
``tests/exercise_mutants.py`` lists those with the reason.
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

# PyTorch imports sympy the first time a shape is broadcast in a process (seconds): import it now,
# so that no run of a check under the per-run alarm is cut in the middle of an import.
import torch
import torch.fx.experimental.symbolic_shapes  # noqa: F401

# Likewise the first step of any torch.optim optimiser imports torch._dynamo: take it now.
_weight = torch.zeros(1, requires_grad=True)
_weight.grad = torch.zeros(1)
torch.optim.SGD([_weight], lr=0.1).step()
del _weight

ROOT = Path(__file__).resolve().parents[2]

BINOP_SWAPS = {ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.Div], ast.Div: [ast.Mult],
               ast.FloorDiv: [ast.Div], ast.MatMult: [ast.Mult], ast.Pow: [ast.Mult],
               ast.Mod: [ast.FloorDiv]}
NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.MatMult, ast.Pow, ast.FloorDiv)
COMPARE_SWAPS = {ast.Lt: [ast.LtE, ast.Gt], ast.LtE: [ast.Lt, ast.GtE], ast.Gt: [ast.GtE, ast.Lt],
                 ast.GtE: [ast.Gt, ast.LtE], ast.Eq: [ast.NotEq], ast.NotEq: [ast.Eq],
                 ast.Is: [ast.IsNot], ast.IsNot: [ast.Is], ast.In: [ast.NotIn],
                 ast.NotIn: [ast.In]}
NAME_SWAPS = {}
for a, b in [("sum", "mean"), ("max", "min"), ("amax", "amin"), ("maximum", "minimum"),
             ("argmax", "argmin"), ("exp", "log"), ("sin", "cos"), ("triu", "tril"),
             ("softmax", "log_softmax"), ("cumsum", "cumprod"), ("logsumexp", "amax"),
             ("relu", "tanh"), ("sigmoid", "tanh"), ("zeros", "ones"), ("zeros_like", "ones_like"),
             ("all", "any"), ("rsqrt", "sqrt")]:
    NAME_SWAPS.setdefault(a, b)
    NAME_SWAPS.setdefault(b, a)
REMOVABLE_CALLS = {"detach", "clone", "masked_fill", "clamp", "clamp_min", "clamp_max", "abs",
                   "sqrt", "exp", "log", "softmax", "log_softmax", "transpose", "t", "flip",
                   "tril", "triu", "cumsum", "neg", "relu", "sigmoid", "tanh", "float", "double",
                   "squeeze", "unsqueeze", "round", "mean", "sum", "sign", "reciprocal",
                   "masked_fill_", "clamp_", "mul_", "add_", "sub_", "div_", "zero_", "copy_"}


@dataclass
class Mutant:
    name: str
    source: str


@dataclass
class Solution:
    """A reference solution: the chapter, the label, the code to run, and the answer's names."""

    chapter: str
    label: str
    source: str
    answers: list[str]
    targets: list[str]  # the functions (or "answer" assignments) that are mutated
    first_line: int  # the line of the first target, so that names count from there


def _text(cell: dict) -> str:
    return "".join(cell["source"])


def _strip_magics(src: str) -> str:
    return "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))


def solutions(path: Path) -> list[Solution]:
    """The reference solution of every checked exercise of the chapter at ``path``."""
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "exercises"))
    from test_exercise_cells import exercises

    found = []
    for ex in exercises(path):
        if ex.check is None or not ex.solution_code:
            continue
        code = "\n\n".join(_strip_magics(c) for c in ex.solution_code)
        tree = ast.parse(code)
        call = None
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "check" \
                    and node.args and isinstance(node.args[0], ast.Constant) \
                    and node.args[0].value == ex.label:
                call = node
        if call is None:
            continue
        answers = [ast.unparse(a) for a in call.args[1:]]
        defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        # the functions and classes the answers use, transitively
        wanted, todo = [], [a for a in answers if a in defs]
        while todo:
            name = todo.pop()
            if name in wanted:
                continue
            wanted.append(name)
            todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name)
                     and n.id in defs and n.id not in wanted]
        # the assignments the answers (or what they use) read, transitively, last one first
        needed = {a for a in answers if a not in defs}
        for name in wanted:
            needed |= _free_names(defs[name])
        chosen = []
        for node in reversed(tree.body):
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                if names & needed and not any(isinstance(n, ast.Name) and n.id in defs
                                              and n.id not in wanted for n in ast.walk(node)):
                    chosen.append(node)
                    needed |= {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
        keep = []
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                keep.append(node)
            elif isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in wanted:
                keep.append(node)
            elif any(node is c for c in chosen):
                keep.append(node)
        module = ast.Module(body=keep, type_ignores=[])
        source = ast.unparse(module)
        targets = wanted + [a for a in answers if a not in defs]
        targets += [n.id for c in chosen for t in (c.targets if isinstance(c, ast.Assign)
                                                   else [c.target])
                    for n in ast.walk(t) if isinstance(n, ast.Name) and n.id not in targets]
        found.append(Solution(path.stem, ex.label, source, answers, targets, 1))
    return found


def _free_names(node: ast.AST) -> set[str]:
    """The names a function or class reads but does not bind itself (its globals)."""
    bound = {a.arg for n in ast.walk(node) if isinstance(n, ast.arguments)
             for a in (*n.posonlyargs, *n.args, *n.kwonlyargs, n.vararg, n.kwarg) if a}
    bound |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Store)}
    bound |= {n.name for n in ast.walk(node) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)} - bound


class _Points(ast.NodeVisitor):
    """Every place in the target code where a mutation applies, as (node path, change, label)."""

    def __init__(self):
        self.points: list[tuple[int, str, str]] = []
        self.index = -1

    def mutations(self, node: ast.AST) -> list[tuple[str, str]]:
        """The changes that apply to ``node``: (kind, description)."""
        out = []
        if isinstance(node, ast.BinOp):
            op = type(node.op)
            sym = _sym(node.op)
            for new in BINOP_SWAPS.get(op, []):
                out.append((f"op:{new.__name__}", f"{sym} -> {_sym(new())}"))
            if isinstance(node.op, NON_COMMUTATIVE):
                out.append(("swap", f"operands of {sym} swapped"))
            if isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div | ast.MatMult):
                out.append(("left", f"drop the right operand of {sym}"))
                out.append(("right", f"drop the left operand of {sym}"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.Not):
            out.append(("unwrap", f"drop {_sym(node.op)}"))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            for new in COMPARE_SWAPS.get(type(node.ops[0]), []):
                out.append((f"cmp:{new.__name__}", f"{_sym(node.ops[0])} -> {_sym(new())}"))
        elif isinstance(node, ast.BoolOp):
            other = "or" if isinstance(node.op, ast.And) else "and"
            out.append(("bool", f"{_sym(node.op)} -> {other}"))
        elif isinstance(node, ast.Constant) and not isinstance(node.value, str | bytes) \
                and node.value is not None and node.value is not Ellipsis:
            v = node.value
            if isinstance(v, bool):
                out.append(("const:flip", f"{v} -> {not v}"))
            elif isinstance(v, int | float):
                changes = {v + 1, v - 1, v * 2, 0 if v != 0 else 1}
                changes.discard(v)
                for new in sorted(changes):
                    out.append((f"const:{new!r}", f"{v!r} -> {new!r}"))
        elif isinstance(node, ast.Attribute):
            if node.attr in NAME_SWAPS:
                out.append((f"name:{NAME_SWAPS[node.attr]}", f"{node.attr} -> {NAME_SWAPS[node.attr]}"))
            if node.attr in ("T", "mT", "H"):
                out.append(("untranspose", f"drop .{node.attr}"))
        elif isinstance(node, ast.Name) and node.id in ("max", "min", "sum", "abs"):
            swap = {"max": "min", "min": "max", "sum": "max", "abs": None}[node.id]
            if swap:
                out.append((f"name:{swap}", f"{node.id} -> {swap}"))
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in REMOVABLE_CALLS \
                    and not (isinstance(func.value, ast.Name)
                             and func.value.id in ("torch", "F", "math", "np", "nn")):
                out.append(("uncall", f"drop .{func.attr}(...)"))
            elif isinstance(func, ast.Attribute) and func.attr in REMOVABLE_CALLS and node.args:
                out.append(("unwrap-call", f"drop {ast.unparse(func)}(...)"))
            if len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
                out.append(("args", f"swap the first two arguments of {_callee(node)}"))
            if isinstance(func, ast.Name) and func.id == "range" and node.args:
                out.append(("range:+1", "range's end + 1"))
                out.append(("range:-1", "range's end - 1"))
        if isinstance(node, ast.Slice):
            for side in ("lower", "upper"):
                if getattr(node, side) is not None:
                    out.append((f"slice:{side}:+1", f"slice {side} + 1"))
                    out.append((f"slice:{side}:-1", f"slice {side} - 1"))
        return out


def _callee(node: ast.Call) -> str:
    return ast.unparse(node.func)


def _sym(op) -> str:
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
            ast.MatMult: "@", ast.Pow: "**", ast.Mod: "%", ast.USub: "-", ast.Not: "not",
            ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
            ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in",
            ast.NotIn: "not in", ast.And: "and", ast.Or: "or"}.get(type(op), type(op).__name__)


def _apply(node: ast.AST, kind: str) -> ast.AST:
    """The mutated node (a new node, or ``node`` changed in place)."""
    one = ast.Constant(1)
    if kind.startswith("op:"):
        node.op = getattr(ast, kind[3:])()
    elif kind == "swap":
        node.left, node.right = node.right, node.left
    elif kind == "left":
        return node.left
    elif kind == "right":
        return node.right
    elif kind == "unwrap":
        return node.operand
    elif kind.startswith("cmp:"):
        node.ops = [getattr(ast, kind[4:])()]
    elif kind == "bool":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "const:flip":
        node.value = not node.value
    elif kind.startswith("const:"):
        node.value = ast.literal_eval(kind[6:])
    elif kind.startswith("name:"):
        if isinstance(node, ast.Attribute):
            node.attr = kind[5:]
        else:
            node.id = kind[5:]
    elif kind == "untranspose":
        return node.value
    elif kind == "uncall":
        return node.func.value
    elif kind == "unwrap-call":
        return node.args[0]
    elif kind == "args":
        node.args[0], node.args[1] = node.args[1], node.args[0]
    elif kind.startswith("range:"):
        delta = ast.Add() if kind.endswith("+1") else ast.Sub()
        end = 1 if len(node.args) >= 2 else 0
        node.args[end] = ast.BinOp(node.args[end], delta, one)
    elif kind.startswith("slice:"):
        _, side, d = kind.split(":")
        delta = ast.Add() if d == "+1" else ast.Sub()
        setattr(node, side, ast.BinOp(getattr(node, side), delta, one))
    return node


def _targets(tree: ast.Module, names: list[str]) -> list[ast.AST]:
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in names:
            out.append(node)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names
                                                 for t in node.targets):
            out.append(node)
    return out


def _walk(node: ast.AST):
    """The nodes under ``node`` in a fixed order, skipping docstrings and decorators."""
    for field_name, value in ast.iter_fields(node):
        if field_name in ("decorator_list", "returns", "annotation", "type_comment"):
            continue
        if field_name == "args" and isinstance(node, ast.FunctionDef):
            continue  # the signature is the exercise's, not the solution's
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            if not isinstance(item, ast.AST):
                continue
            if field_name == "body" and i == 0 and isinstance(item, ast.Expr) \
                    and isinstance(item.value, ast.Constant) and isinstance(item.value.value, str):
                continue  # a docstring
            yield node, field_name, i if isinstance(value, list) else None, item
            yield from _walk(item)


def mutants(solution: Solution) -> list[Mutant]:
    """Every mutant of the solution's targets, each a full source to run; unique by source."""
    tree = ast.parse(solution.source)
    points = []  # (index in walk order, kind, description, line)
    for t_index, target in enumerate(_targets(tree, solution.targets)):
        owner = getattr(target, "name", None) or ast.unparse(target.targets[0])
        start = target.lineno
        for w_index, (_, _, _, node) in enumerate(_walk(target)):
            for kind, what in _Points().mutations(node):
                line = getattr(node, "lineno", start) - start
                points.append((t_index, w_index, kind, f"{owner}:{line} {what}"))
        # statements: remove one (not a lone one), swap neighbours
        for w_index, (parent, field_name, i, node) in enumerate(_walk(target)):
            if field_name in ("body", "orelse") and isinstance(node, ast.stmt) and i is not None:
                body = getattr(parent, field_name)
                line = node.lineno - start
                if len(body) > 1 and not _is_docstring(body[0]) or len(body) > 2:
                    points.append((t_index, w_index, "stmt:drop",
                                   f"{owner}:{line} drop the statement"))
                if i + 1 < len(body) and not _is_docstring(node) \
                        and not _commute(node, body[i + 1]):
                    points.append((t_index, w_index, "stmt:swap",
                                   f"{owner}:{line} swap with the next statement"))
    seen, out = {ast.unparse(tree)}, []
    names: dict[str, int] = {}
    for t_index, w_index, kind, what in points:
        copy_tree = copy.deepcopy(tree)
        target = _targets(copy_tree, solution.targets)[t_index]
        parent, field_name, i, node = list(_walk(target))[w_index]
        if kind.startswith("stmt:"):
            body = getattr(parent, field_name)
            if kind == "stmt:drop":
                del body[i]
                if not body:
                    body.append(ast.Pass())
            else:
                body[i], body[i + 1] = body[i + 1], body[i]
        else:
            new = _apply(node, kind)
            if new is not node:
                if i is None:
                    setattr(parent, field_name, new)
                else:
                    getattr(parent, field_name)[i] = new
        ast.fix_missing_locations(copy_tree)
        try:
            source = ast.unparse(copy_tree)
            compile(source, "<mutant>", "exec")
        except (SyntaxError, ValueError, TypeError):
            continue
        if source in seen:
            continue
        seen.add(source)
        names[what] = names.get(what, 0) + 1
        name = what if names[what] == 1 else f"{what} #{names[what]}"
        out.append(Mutant(name, source))
    return out


def _effects(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    """The names a statement may change and the names it reads (a method call on a name, such
    as ``xs.append(y)``, may change it)."""
    writes, reads = set(), set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name):
            (writes if isinstance(node.ctx, ast.Store | ast.Del) else reads).add(node.id)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base = node.func.value
            while isinstance(base, ast.Attribute | ast.Subscript):
                base = base.value
            if isinstance(base, ast.Name):
                writes.add(base.id)
        if isinstance(node, ast.Subscript | ast.Attribute) and isinstance(node.ctx, ast.Store):
            base = node.value
            while isinstance(base, ast.Attribute | ast.Subscript):
                base = base.value
            if isinstance(base, ast.Name):
                writes.add(base.id)
    return writes, reads


def _commute(a: ast.stmt, b: ast.stmt) -> bool:
    """Whether swapping two neighbouring statements cannot change anything: neither writes a
    name the other reads or writes, and neither returns, raises or leaves a loop. Swapping them
    gives an equivalent mutant by construction, so none is made."""
    jumps = (ast.Return, ast.Raise, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom)
    if any(isinstance(n, jumps) for s in (a, b) for n in ast.walk(s)):
        return False
    (wa, ra), (wb, rb) = _effects(a), _effects(b)
    return not (wa & (rb | wb)) and not (wb & ra)


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
        and isinstance(node.value.value, str)


def chapter_paths() -> list[Path]:
    return sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


def notebook_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def setup_source(path: Path) -> str:
    """The imports of the chapter's code cells: the names a solution may use."""
    lines = []
    for cell in notebook_json(path)["cells"]:
        if cell["cell_type"] != "code":
            continue
        try:
            tree = ast.parse(_strip_magics(_text(cell)))
        except SyntaxError:
            continue
        lines += [ast.unparse(n) for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    return "\n".join(dict.fromkeys(lines))


LABEL = re.compile(r"ex-[a-z0-9-]+")


@functools.cache
def _imports(path: Path) -> dict:
    ns: dict = {"__name__": "__solution__"}
    exec(setup_source(path), ns)  # noqa: S102 - the book's own import lines
    exec("import torch\ndevice = torch.device('cpu')", ns)  # noqa: S102
    return ns


def namespace(path: Path) -> dict:
    """A fresh namespace with the chapter's imports (and ``device``, the CPU), as a solution
    cell sees them (the imports run once per chapter; each call gets its own copy)."""
    return dict(_imports(path))


class MutantTimeout(BaseException):
    """A mutant ran too long (a loop that never ends): killed. A BaseException, so that no
    ``except Exception`` in the check or the mutant can swallow it."""


def run(solution: Solution, source: str, path: Path, timeout: float = 3.0):
    """``check(label, *answers)`` for the solution (or a mutant) given as ``source``.

    Returns the :class:`Result`, or a string naming what went wrong before the check ran
    (a mutant that does not run at all is killed by the learner's interpreter, not by the
    check: "error: ...").
    """
    import signal
    import warnings

    from seqbook.exercises import check

    ns = namespace(path)

    def alarm(*_):
        raise MutantTimeout(f"over {timeout} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                exec(compile(source, f"<{solution.label}>", "exec"), ns)  # noqa: S102
                answers = [eval(a, ns) for a in solution.answers]  # noqa: S307
            except MutantTimeout as err:
                return f"timeout: {err}"
            except Exception as err:  # noqa: BLE001 - a mutant that does not define its answer
                return f"error: {type(err).__name__}: {err}"
            try:
                return check(solution.label, *answers)
            except MutantTimeout as err:
                return f"timeout: {err}"
            except BaseException as err:  # noqa: BLE001 - a check must give a verdict
                return f"check raised {type(err).__name__}: {err}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
