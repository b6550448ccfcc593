"""The machinery of :mod:`seqbook.exercises`: the registry, results, hints and the checkers' helpers.

A chapter registers an exercise with :func:`exercise`: a function that receives the learner's
answer and returns quietly when it is right, or raises :class:`Wrong` with a message that says what
is wrong, in words a learner can act on, without the expected value. :func:`call` runs the
learner's code inside a check: an untouched starter (``NotImplementedError``) becomes "not
attempted", any other exception a :class:`Wrong` that names it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = [
    "EXERCISES", "Exercise", "Hint", "NotAttempted", "Result", "Wrong", "call", "check",
    "close", "exercise", "expect", "hint", "tolerance",
]


class Wrong(Exception):
    """The answer is wrong; the message says what is wrong (never the expected value)."""


class NotAttempted(Exception):
    """The answer is still the starter: nothing to check yet."""


@dataclass
class Exercise:
    """One checkable exercise: its label in the book, its checker and its hints (vaguest first)."""

    name: str
    checker: Callable
    hints: list[str] = field(default_factory=list)
    hints_given: int = 0


EXERCISES: dict[str, Exercise] = {}


def exercise(name: str, hints: list[str] | tuple[str, ...] = ()) -> Callable:
    """Register the decorated function as the checker of exercise ``name`` (its book label).

    The checker takes the learner's answer (positional arguments of :func:`check`) and raises
    :class:`Wrong` or :class:`NotAttempted`, or returns None when the answer is right.
    """
    if not isinstance(name, str) or not name.startswith("ex-"):
        raise ValueError(f"name must be an exercise label such as 'ex-ch2-clip', got {name!r}")
    if name in EXERCISES:
        raise ValueError(f"exercise {name!r} is registered twice")
    if not all(isinstance(h, str) and h for h in hints):
        raise TypeError(f"hints must be non-empty strings, got {hints!r}")

    def register(checker: Callable) -> Callable:
        EXERCISES[name] = Exercise(name, checker, list(hints))
        return checker

    return register


def _exercise(name) -> Exercise:
    if not isinstance(name, str):
        raise TypeError(f"name must be an exercise label (str), got {type(name).__name__}")
    if name not in EXERCISES:
        known = ", ".join(sorted(EXERCISES)) or "none"
        raise ValueError(f"no exercise is called {name!r}; the checkable ones are: {known}")
    return EXERCISES[name]


@dataclass
class Result:
    """What :func:`check` found: ``status`` is "pass", "fail" or "not attempted".

    Shown as one line in a notebook; true only when the answer passed.
    """

    name: str
    status: str
    message: str

    def __bool__(self) -> bool:
        return self.status == "pass"

    def __repr__(self) -> str:
        mark = {"pass": "✓", "fail": "✗", "not attempted": "…"}[self.status]
        return f"{mark} {self.name}: {self.message}"


def check(name: str, *answer, **kwargs) -> Result:
    """Check the answer to exercise ``name``; see the module docstring."""
    ex = _exercise(name)
    if not answer and not kwargs:
        return Result(name, "not attempted", "pass your answer, e.g. check(name, my_function)")
    if any(a is None or a is Ellipsis for a in (*answer, *kwargs.values())):
        return Result(name, "not attempted", "the answer is still ... (or None): fill it in, "
                      "then run this cell again")
    try:
        ex.checker(*answer, **kwargs)
    except NotAttempted as err:
        return Result(name, "not attempted", str(err) or "the starter is untouched")
    except Wrong as err:
        return Result(name, "fail", str(err))
    return Result(name, "pass", "correct")


@dataclass
class Hint:
    """A hint, shown as one line: which of how many, and the text."""

    name: str
    level: int
    of: int
    text: str

    def __repr__(self) -> str:
        return f"Hint {self.level}/{self.of} for {self.name}: {self.text}"


def hint(name: str, level: int | None = None) -> Hint:
    """The next hint for exercise ``name`` (or hint number ``level``, counting from 1).

    Each call without ``level`` gives the next hint, more explicit than the last; after the last
    one it repeats the last.
    """
    ex = _exercise(name)
    if not ex.hints:
        raise ValueError(f"exercise {name!r} has no hints")
    if level is None:
        ex.hints_given = min(ex.hints_given + 1, len(ex.hints))
        level = ex.hints_given
    elif isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= len(ex.hints):
        raise ValueError(f"level must be an int in [1, {len(ex.hints)}], got {level!r}")
    return Hint(name, level, len(ex.hints), ex.hints[level - 1])


# ---------------------------------------------------------------------------------------------
# Helpers for the checkers.
# ---------------------------------------------------------------------------------------------


def call(fn, *args, what: str | None = None, **kwargs):
    """Run the learner's ``fn(*args, **kwargs)`` inside a check.

    An untouched starter (``NotImplementedError``) raises :class:`NotAttempted`; any other
    exception raises :class:`Wrong` naming it, so an error in the learner's code run through
    ``call`` ends in a verdict, not a traceback. (Learner's code that a checker runs outside
    ``call``, such as a returned module applied to a test input, is not covered.)
    """
    what = what or getattr(fn, "__name__", "your function")
    if not callable(fn):
        raise Wrong(f"the answer must be a function, got {type(fn).__name__}")
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as err:
        raise NotAttempted(f"{what} still raises NotImplementedError: write its body, then run "
                           "this cell again") from err
    except Exception as err:  # noqa: BLE001 - the learner's error becomes the check's message
        raise Wrong(f"{what} raised {type(err).__name__}: {err}") from err


def expect(condition, message: str) -> None:
    """Raise :class:`Wrong` with ``message`` unless ``condition`` holds."""
    if not bool(condition):
        raise Wrong(message)


def tolerance(dtype: torch.dtype, n: int = 1, scale: float = 1.0) -> dict[str, float]:
    """The book's tolerance policy: ``rtol = 32 sqrt(n) eps``, ``atol = rtol * scale``.

    ``n`` counts the terms summed into one compared number (see the unit tests' tolerance policy,
    ``tests/tolerance.py``); ``scale`` is the size of those terms.
    """
    rtol = 32 * math.sqrt(max(n, 1)) * torch.finfo(dtype).eps
    return {"rtol": rtol, "atol": rtol * max(scale, 1.0)}


def close(actual, expected: torch.Tensor, n: int = 1) -> bool:
    """Whether ``actual`` equals ``expected`` within the tolerance policy at ``expected``'s dtype.

    ``actual`` may be a tensor or a number; a wrong shape is simply not close.
    """
    if not isinstance(expected, torch.Tensor):
        expected = torch.as_tensor(expected, dtype=torch.float64)
    if not isinstance(actual, torch.Tensor):
        try:
            actual = torch.as_tensor(actual, dtype=expected.dtype, device=expected.device)
        except (TypeError, ValueError, RuntimeError):
            return False
    if actual.shape != expected.shape:
        return False
    dtype = expected.dtype if expected.is_floating_point() else torch.float64
    scale = float(expected.abs().max()) if expected.numel() else 1.0
    return torch.allclose(actual.to(expected.device, dtype), expected.to(dtype),
                          **tolerance(dtype, n, scale))


def returned_tensor(out, what: str) -> torch.Tensor:
    """The learner's result as a tensor, or a :class:`Wrong` that names ``what`` returned instead."""
    if not isinstance(out, torch.Tensor):
        raise Wrong(f"{what} must return a tensor, got {type(out).__name__}")
    return out


def returned_pair(out, what: str, names: str = "(a, b)") -> tuple[torch.Tensor, torch.Tensor]:
    """The learner's result as a pair of tensors (``names`` says which), or a :class:`Wrong`."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise Wrong(f"{what} must return a pair {names} of tensors, got {type(out).__name__}")
    return returned_tensor(out[0], what), returned_tensor(out[1], what)


def expect_shape(t: torch.Tensor, shape: tuple, what: str) -> None:
    """A :class:`Wrong` unless ``t`` has ``shape``, naming both shapes."""
    expect(tuple(t.shape) == tuple(shape),
           f"{what} must have shape {tuple(shape)}, got {tuple(t.shape)}")

