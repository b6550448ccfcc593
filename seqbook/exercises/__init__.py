"""Checks for the book's exercises: ``check`` says whether an answer is right, and if not, what is wrong.

Every coding or numeric exercise of the book has a starter cell (a function with its signature and
docstring, whose body raises ``NotImplementedError``, or a number set to ``...``) and a check cell::

    from seqbook.exercises import check, hint

    check("ex-ch2-clip", clip_)   # ✗ / ✓ / "not attempted", with a reason a learner can act on
    hint("ex-ch2-clip")           # the next hint, one level more explicit each time

A check runs property tests and seeded comparisons against the book's own implementation. It
never prints the expected value or the reference code: it says *what* is wrong ("the norm is not
capped at max_norm", "position 3 attends to position 5: the mask lets the future in"), or
"not attempted" while the starter is untouched. :func:`check` returns a :class:`Result`, shown as
one line in a notebook and true when the answer passed (``assert check(...)`` in a solution).

The exercises of each chapter are registered by a module of this package (``ch02``, ...).
"""

from __future__ import annotations

import importlib
import pkgutil

from .core import (
    EXERCISES,
    Hint,
    NotAttempted,
    Result,
    Wrong,
    call,
    check,
    close,
    exercise,
    expect,
    hint,
    tolerance,
)

__all__ = [
    "EXERCISES", "Hint", "NotAttempted", "Result", "Wrong", "call", "check", "close", "exercise",
    "expect", "hint", "tolerance",
]

# Register every chapter's exercises: each module ``chNN`` of this package.
for _module in pkgutil.iter_modules(__path__):
    if _module.name.startswith("ch"):
        importlib.import_module(f"{__name__}.{_module.name}")
