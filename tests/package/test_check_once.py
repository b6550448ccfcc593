"""Arguments are checked once, where the reader's call enters the package.

A checked function called by the package while another checked call runs (a GPT's blocks, a
block's attention, the token loop of ``generate``) does not check again: its arguments were built
from arguments already checked. These tests count the calls into ``seqbook.checks`` made from
outside it during one reader's call, grouped by the argument each one names.
"""

from __future__ import annotations

import collections
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


def test_every_validator_sits_next_to_its_function_and_names_its_parameters():
    """Each ``@checked(v)`` function's validator takes a subset of its parameters, under the same
    names, in the same order, without defaults of its own (the call's bound values arrive)."""
    import importlib
    import pkgutil

    import seqbook

    found = 0
    for info in pkgutil.walk_packages(seqbook.__path__, "seqbook."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            members = [obj] + (list(vars(obj).values()) if inspect.isclass(obj) else [])
            for fn in members:
                validate = getattr(fn, "validate", None)
                if validate is None or not hasattr(fn, "__wrapped__"):
                    continue
                found += 1
                params = list(inspect.signature(fn.__wrapped__).parameters)
                own = inspect.signature(validate).parameters
                variadic = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in own.values())
                names = [n for n in own if n in params]
                assert variadic or names == [p for p in params if p in names], fn.__qualname__
    assert found > 50
