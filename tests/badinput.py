"""Helpers for the bad-input tests (``tests/bad_input/``), and their one table style.

A bad input must end in a ``ValueError`` or ``TypeError`` raised by seqbook's own code, whose
message names the argument (and, where it has one, the expected and actual shape or value): never an
error from deep inside torch, never a silent result, never a hang.

Every bad-input file writes its cases in one style: a table made by ``table()``, one line per case
whose id reads ``function-argument-what``, and one runner per table::

    ERRORS, case = table()
    case("causal_mask-L-negative", lambda: causal_mask(-1), "L", "-1")

    @pytest.mark.parametrize(("fn", "words"), ERRORS)
    def test_bad_input_is_refused_clearly(fn, words):
        assert_clear_error(fn, *words)

Calls that could loop forever (generators, training loops) go in a second table,
``LOOPS, loop = table()``, whose runner calls ``assert_clear_error_in_time(fn, *words)``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

PACKAGE = str(Path(__file__).resolve().parent.parent / "seqbook")


def assert_clear_error(fn, *words: str, exc=(ValueError, TypeError)):
    """Call ``fn()`` and check that seqbook itself raises ``exc`` with every one of ``words``.

    ``words`` are the argument's name and, where useful, the expected or actual value or shape.
    The last frame of the traceback must be inside the ``seqbook`` package: an error raised by
    torch, numpy or Python on seqbook's behalf does not count as a clear error.
    """
    with pytest.raises(exc) as info:
        fn()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in the message {message!r}"
    where = str(info.traceback[-1].path)
    assert where.startswith(PACKAGE), f"raised in {where}, not by seqbook: {message!r}"
    return message


def table() -> tuple[list, Callable]:
    """A new bad-input table and its writer: ``rows, case = table()``.

    ``case(id_, fn, *words)`` appends ``pytest.param(fn, words, id=id_)`` to ``rows``: ``fn`` is the
    bad call (no arguments) and ``words`` what its message must hold. An id used twice is refused.
    """
    rows: list = []
    seen: set = set()

    def case(id_: str, fn: Callable, *words: str) -> None:
        assert id_ not in seen, f"case id {id_!r} used twice"
        seen.add(id_)
        rows.append(pytest.param(fn, words, id=id_))

    return rows, case


def finishes(fn, seconds: float = 10.0):
    """Run ``fn()`` in a thread; fail the test if it has not returned or raised within ``seconds``.

    Returns ``(result, exception)``. Generators that loop on a size must check the size before they
    loop, so a bad size ends in an error, never in an endless loop.
    """
    box: dict = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn} still running after {seconds} s: it hangs"
    return box.get("result"), box.get("error")


def assert_clear_error_in_time(fn, *words: str, seconds: float = 10.0, exc=(ValueError, TypeError)):
    """``assert_clear_error`` for calls that could loop forever (generators, training loops)."""
    result, error = finishes(lambda: assert_clear_error(fn, *words, exc=exc), seconds)
    if error is not None:
        raise error
    return result


NAN, INF = float("nan"), float("inf")


def floats(*shape, seed=0, dtype=torch.float32):
    """Reproducible standard-normal values of ``shape``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype)


def with_value(x, value=NAN):
    """A copy of ``x`` with its first entry set to ``value`` (NaN unless told)."""
    x = x.clone()
    x.view(-1)[0] = value
    return x


# Values that are not a flag, with the word the message must show: every flag goes through
# ``seqbook.checks.check_flag``, which takes True and False (NumPy's bools too) and nothing else.
BAD_FLAGS = [("str", "yes", "str"), ("int", 2, "int"), ("None", None, "NoneType")]

# Values that are not a size (an int >= 1), with the word the message must show.
BAD_SIZES = [("0", 0, "0"), ("negative", -1, "-1"), ("float", 2.5, "float"), ("bool", True, "bool"),
             ("str", "3", "str")]
