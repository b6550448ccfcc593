"""Arguments are checked once, where the reader's call enters the package.

A checked function called by the package while another checked call runs (a GPT's blocks, a
block's attention, the token loop of ``generate``) does not check again: its arguments were built
from arguments already checked. These tests count the calls into ``seqbook.checks`` made from
outside it during one reader's call, grouped by the argument each one names.
"""

from __future__ import annotations

import collections
import functools
import inspect
import sys

import pytest
import torch

import seqbook.checks as checks
from seqbook.checks import check_int, checked, readers_code
from seqbook.gpt import GPT, GPTConfig

# The functions of seqbook.checks that are not checks: the decorator's wrapper and helpers.
NOT_CHECKS = {"run", "readers_code", "has_values", "shape_of", "autocast_enabled", "_shape_text",
              "decorate", "checked", "__enter__", "__exit__", "check", "check_optional"}

# The frames of seqbook.checks that call the per-argument checks named on ``@checked(x=check)``:
# the decorator's ``check`` and the wrapper of ``optional(check)``.
SPEC_CALLERS = {"check", "check_optional"}


def count_checks(call) -> collections.Counter:
    """Run ``call()`` and count the checks made into ``seqbook.checks`` from outside it, and the
    per-argument checks that ``@checked`` runs for it, by the argument name each check was given
    (its first argument)."""
    counts: collections.Counter = collections.Counter()

    def profile(frame, event, arg):
        if event != "call" or frame.f_code.co_filename != checks.__file__:
            return
        caller = frame.f_back
        if caller is None or frame.f_code.co_name in NOT_CHECKS:
            return
        first = frame.f_code.co_varnames[0] if frame.f_code.co_argcount else None
        name = frame.f_locals.get(first, frame.f_code.co_name)
        if caller.f_code.co_filename == checks.__file__:
            # a check that another check calls is not counted; one named on @checked is
            if caller.f_code.co_name not in SPEC_CALLERS or not isinstance(name, str):
                return
        counts[name] += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return counts


@pytest.fixture(scope="module")
def gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=4, n_head=4, n_embd=64)).eval()


def test_one_gpt_forward_checks_each_argument_once(gpt):
    idx = torch.randint(0, 50, (2, 8))
    counts = count_checks(lambda: gpt(idx, idx))
    params = set(inspect.signature(GPT.forward).parameters) - {"self"}
    assert counts, "no check ran: the reader's call was not checked"
    assert set(counts) <= params, f"checks named {set(counts) - params}, not arguments of forward"
    assert max(counts.values()) == 1, f"an argument was checked more than once: {dict(counts)}"


@pytest.mark.parametrize("use_cache", [False, True])
def test_one_generate_call_checks_each_argument_once(gpt, use_cache):
    idx = torch.randint(0, 50, (2, 5))
    counts = count_checks(lambda: gpt.generate(idx, 6, top_k=5, use_cache=use_cache))
    params = set(inspect.signature(GPT.generate).parameters) - {"self"}
    assert counts, "no check ran: the reader's call was not checked"
    assert set(counts) <= params, f"checks named {set(counts) - params}, not arguments of generate"
    assert max(counts.values()) == 1, f"an argument was checked more than once: {dict(counts)}"


def test_forward_and_generate_give_the_same_error_for_the_same_mistake(gpt):
    for call in (lambda: gpt([[1, 2]]), lambda: gpt.generate([[1, 2]], 2)):
        with pytest.raises(TypeError, match="idx"):
            call()
    for call in (lambda: gpt(torch.tensor([[1, 99]])), lambda: gpt.generate(torch.tensor([[1, 99]]), 2)):
        with pytest.raises(ValueError, match="idx"):
            call()


def _check_inner(n):
    check_int("n", n)


@checked(_check_inner)
def inner(n):
    return n


def _check_outer(n, reader=None):
    check_int("n", n)


@checked(_check_outer)
def outer(n, reader=None):
    if reader is not None:
        with readers_code():
            return reader(n)
    return inner(n - 1)  # n - 1 may be 0: the package's own call is not checked again


def test_a_nested_call_is_not_checked_again_and_the_reader_s_code_is():
    assert outer(1) == 0
    with pytest.raises(ValueError, match="n must be an int >= 1, got 0"):
        inner(0)
    with pytest.raises(ValueError, match="n must be an int >= 1, got 0"):
        outer(1, reader=lambda n: inner(n - 1))
    # the door is open again after an error inside a checked call
    with pytest.raises(ValueError):
        outer(0)
    with pytest.raises(ValueError):
        inner(0)


def test_a_validator_names_only_parameters_of_its_function():
    def _check(x, y):
        pass

    with pytest.raises(TypeError, match="names \\['y'\\]"):
        checked(_check)(lambda x: x)


def test_a_validator_may_name_a_subset_and_receives_the_defaults():
    seen = {}

    def _check(b):
        seen["b"] = b

    @checked(_check)
    def f(a, b=3):
        return a + b

    assert f(1) == 4 and seen["b"] == 3
    assert f(1, b=5) == 6 and seen["b"] == 5


def _is_public_check(spec) -> bool:
    """A public function of seqbook.checks, an ``optional(...)`` of one or a functools.partial of one."""
    if isinstance(spec, functools.partial):
        return not spec.args and _is_public_check(spec.func)
    if spec.__qualname__.startswith("optional(") and hasattr(spec, "check"):
        return _is_public_check(spec.check)
    return spec.__module__ == checks.__name__ and spec.__name__ in checks.__all__ and \
        getattr(checks, spec.__name__) is spec


def _checked_functions():
    """Every ``@checked`` function and method of seqbook: (qualname, function, validate, specs)."""
    import importlib
    import pkgutil

    import seqbook

    for info in pkgutil.walk_packages(seqbook.__path__, "seqbook."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            members = [obj] + (list(vars(obj).values()) if inspect.isclass(obj) else [])
            for fn in members:
                if not hasattr(fn, "specs") or not hasattr(fn, "__wrapped__"):
                    continue
                yield fn.__qualname__, fn, fn.validate, fn.specs


def test_every_validator_sits_next_to_its_function_and_names_its_parameters():
    """Each ``@checked(v, **specs)`` function's validator (if any) takes a subset of its parameters,
    under the same names, in the same order (the call's bound values arrive), and lives next to the
    function (its module) or is a public check; each spec names a parameter and is a public check of
    seqbook.checks, an ``optional(...)`` of one or a ``functools.partial`` of one with literal
    keywords: no private twin of a signature to check arguments one by one."""
    found = 0
    for name, fn, validate, specs in _checked_functions():
        found += 1
        params = list(inspect.signature(fn.__wrapped__).parameters)
        assert validate is not None or specs, f"{name}: @checked with nothing to check"
        for arg, spec in specs.items():
            assert arg in params, f"{name}: a check names {arg!r}, not a parameter"
            assert _is_public_check(spec), f"{name}: the check of {arg!r} is not a public check: {spec!r}"
        if validate is None:
            continue
        own = inspect.signature(validate).parameters
        variadic = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in own.values())
        names = [n for n in own if n in params]
        assert variadic or names == [p for p in params if p in names], name
        base = getattr(validate, "func", validate)  # a partial of a public check is public
        public = not base.__name__.startswith("_")
        assert public or base.__module__ == fn.__module__, \
            f"{name}: its private validator {base.__qualname__} lives in another module"
    assert found > 50


# How many private ``def _check...`` functions seqbook holds (validators and their helpers): 211 when
# ``@checked`` took only a validator; per-argument checks are now named on ``@checked``. Lower it
# when you remove more; never raise it.
MOST_PRIVATE_CHECKS = 179


def test_private_checks_do_not_grow_back():
    import ast
    import re
    from pathlib import Path

    import seqbook

    found = []
    for path in sorted(Path(seqbook.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            is_def = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            if is_def and re.match(r"_check(_|$)", node.name):
                found.append(f"{path.name}:{node.name}")
    assert len(found) <= MOST_PRIVATE_CHECKS, (
        f"{len(found)} private _check functions, more than {MOST_PRIVATE_CHECKS}: name a check of one "
        f"argument on @checked (checked(x=check_...)) instead of writing a validator for it")
