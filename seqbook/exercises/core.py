"""The machinery of :mod:`seqbook.exercises`: the registry, results, hints and the checkers' helpers.

A chapter registers an exercise with :func:`exercise`: a function that receives the learner's
answer and returns quietly when it is right, or raises :class:`Wrong` with a message that says what
is wrong, in words a learner can act on, without the expected value. :func:`call` runs the
learner's code inside a check: an untouched starter (``NotImplementedError``) becomes "not
attempted", any other exception a :class:`Wrong` that names it.
"""

from __future__ import annotations

import contextlib
import decimal
import inspect
import math
import numbers
import random
import signal
import sys
import textwrap
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "EXERCISES", "CallWatch", "Exercise", "Hint", "NotAttempted", "Result", "Wrong", "agrees",
    "as_tensor", "call", "check", "close", "exercise", "expect", "float32_values", "float32_work",
    "hint", "name_slip", "time_limit", "tolerance", "untouched_random_state", "cut_off",
    "at_most_digits", "number", "number_list", "numbers_of", "two_numbers",
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
        return wrap_line(f"{mark} {self.name}: {self.message}")


def wrap_line(text: str, width: int = 88) -> str:
    """``text`` in lines of at most ``width`` columns (the book's printed width, readable on a
    phone), the continuations indented by two spaces; words are never broken."""
    return "\n".join(textwrap.fill(part, width, subsequent_indent="  ", break_long_words=False,
                                   break_on_hyphens=False) for part in text.split("\n"))


def check(name: str, *answer, **kwargs) -> Result:
    """Check the answer to exercise ``name``; see the module docstring.

    Always a verdict, never a traceback: answers that do not fit the exercise (one too many, one
    too few) and errors raised while the learner's code runs become a ✗ that says what to look
    at. The check runs inside :func:`untouched_random_state`, so the learner's random numbers
    after a check are the ones they would have drawn without it.
    """
    ex = _exercise(name)
    if not answer and not kwargs:
        return Result(name, "not attempted", "pass your answer, e.g. check(name, my_function)")
    if any(a is None or a is Ellipsis for a in (*answer, *kwargs.values())):
        return Result(name, "not attempted", "the answer is still ... (or None): fill it in, "
                      "then run this cell again")
    try:
        inspect.signature(ex.checker).bind(*answer, **kwargs)
    except TypeError:
        return Result(name, "fail", _arity_message(name, ex.checker, len(answer) + len(kwargs)))
    with untouched_random_state():
        try:
            ex.checker(*answer, **kwargs)
        except NotAttempted as err:
            return Result(name, "not attempted", str(err) or "the starter is untouched")
        except Wrong as err:
            return Result(name, "fail", str(err))
        except Exception as err:  # noqa: BLE001 - a verdict, never a traceback
            return Result(name, "fail", _error_message(err, "your answer"))
    return Result(name, "pass", "correct")


def _arity_message(name: str, checker: Callable, given: int) -> str:
    """What ``check(name, ...)`` takes, said as the call the learner should write."""
    params = [p for p in inspect.signature(checker).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
              and p.default is inspect.Parameter.empty]
    wanted = len(params)
    what = "one answer" if wanted == 1 else f"{wanted} answers"
    call_ = ", ".join([repr(name), *(p.name for p in params)])
    return (f"this exercise takes {what}, check({call_}); got {given}")


@contextlib.contextmanager
def untouched_random_state():
    """A context in which random draws leave no trace: the global generators of torch (CPU and
    every initialised CUDA device), NumPy and Python's ``random`` are restored on exit."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    python, numpy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(python)
            np.random.set_state(numpy)


def _in_a_library(filename: str) -> bool:
    """Whether ``filename`` is inside torch, NumPy or seqbook (not where the learner should look)."""
    package = Path(__file__).resolve().parent.parent  # seqbook
    dirs = tuple(str(Path(m.__file__).resolve().parent) for m in (torch, np)) + (str(package),)
    return str(Path(filename).resolve()).startswith(dirs)


def _learner_frame(err: BaseException):
    """The innermost frame of ``err``'s traceback that is not inside torch, NumPy or seqbook."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if not _in_a_library(f.filename) and not f.filename.startswith("<frozen")]
    return frames[-1] if frames else None


def _raised_in_a_library(err: BaseException) -> bool:
    """Whether the frame that raised ``err`` is inside torch, NumPy or seqbook."""
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and _in_a_library(frames[-1].filename)


def _error_message(err: BaseException, what: str = "your code") -> str:
    frame = _learner_frame(err)
    error = f"{type(err).__name__}: {err}"
    if frame is None:
        return (f"{what} made the check fail with {error}; look at the type, shape and dtype "
                "of what it returns")
    line = f": {frame.line.strip()}" if frame.line else ""
    return f"{what} raised {error} (in {frame.name}, line {frame.lineno}{line})"


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
        if _raised_in_a_library(err):  # PyTorch's own, for what the learner's line asked
            raise Wrong(_error_message(err, what)) from err
        raise NotAttempted(f"{what} still raises NotImplementedError: write its body, then run "
                           "this cell again") from err
    except Exception as err:  # noqa: BLE001 - the learner's error becomes the check's message
        if isinstance(err, TypeError) and err.__traceback__.tb_next is None:  # the call itself
            raise Wrong(f"{what} cannot be called as the exercise calls it, with "
                        f"{len(args) + len(kwargs)} argument(s): TypeError: {err}") from err
        raise Wrong(_error_message(err, what)) from err


class _TooLong(BaseException):
    """The learner's code ran past its time; a BaseException, so that neither :func:`call` nor
    an ``except Exception`` in the learner's code takes it for an error of their own."""


@contextlib.contextmanager
def time_limit(seconds: float, message: str):
    """Raise :class:`Wrong` with ``message`` if the code inside uses more than ``seconds`` of
    the process's CPU time, so that a loop that never ends, or one that runs for hours, gives a
    verdict. (Without ``setitimer``, off the main thread, or inside another limit: no limit.)"""
    if not hasattr(signal, "setitimer") \
            or threading.current_thread() is not threading.main_thread() \
            or signal.getitimer(signal.ITIMER_VIRTUAL)[0] > 0:
        yield
        return

    def stop(*_):
        raise _TooLong

    old = signal.signal(signal.SIGVTALRM, stop)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    except _TooLong:
        raise Wrong(message) from None
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, old)


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


def _lower_precision(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """The less precise of two dtypes (float64 for anything not floating)."""
    a = a if a.is_floating_point else torch.float64
    b = b if b.is_floating_point else torch.float64
    return a if torch.finfo(a).eps >= torch.finfo(b).eps else b


def float32_values(t: torch.Tensor) -> bool:
    """Whether the Python numbers in ``t`` (float64) are float32 values, not all whole, as
    ``.item()`` or ``.tolist()`` of a float32 tensor gives: an answer computed in float32."""
    return (t.dtype == torch.float64 and t.numel() > 0 and bool(t.isfinite().all())
            and bool((t != t.round()).any()) and torch.equal(t, t.float().double()))


def float32_work(out: torch.Tensor, ref: torch.Tensor, what: str, n: int = 1) -> None:
    """Raise :class:`Wrong` if ``out``, float64, is ``ref`` to float32's precision only: a
    computation that ran in float32 in part (a float32 copy, NumPy's float32 with a float64 factor)
    and came back as float64, judged at float64's precision. Say so, rather than that it is wrong.
    """
    # an error of float32's size, far above float64's rounding (float32's eps is 5e8 times
    # float64's; 10^8 times n is 10^4 times the float64 tolerance)
    if out.dtype == torch.float64 and close(out.float(), ref.float(), n=n) \
            and not close(out, ref, n=n * 10**8):
        raise Wrong(f"{what} is right to float32's precision only, though it is float64: part of "
                    "the computation ran in float32, while the inputs are float64. Keep to their "
                    "precision")


def as_tensor(x, what: str = "the answer", dtype: torch.dtype | None = None) -> torch.Tensor:
    """The learner's tensor, NumPy array, list or number as a tensor, or a :class:`Wrong`.

    The answer's own precision is kept (a float32 array stays float32); ``dtype`` is used for
    Python numbers and lists only, except that Python floats that are all float32 values (from
    ``.item()`` or ``.tolist()`` of a float32 tensor) become a float32 tensor, so that they are
    judged at float32's precision.
    """
    if isinstance(x, torch.Tensor):
        return x
    try:
        if isinstance(x, np.ndarray | np.generic):
            return torch.from_numpy(np.asarray(x).copy())
        t = torch.as_tensor(x, dtype=dtype or torch.float64)
        return t.float() if float32_values(t) else t
    except (TypeError, ValueError, RuntimeError) as err:
        raise Wrong(f"{what} must be a tensor (or an array or numbers), got "
                    f"{_kind(x)}") from err


def _kind(x) -> str:
    """What ``x`` is, for a message: ``tuple``, or ``a tuple of str`` for a nest of strings."""
    inner = x
    while isinstance(inner, (list, tuple)) and inner:
        inner = inner[0]
    if inner is x or isinstance(inner, numbers.Number):
        return type(x).__name__
    if isinstance(inner, torch.Tensor | np.ndarray) and len({
            tuple(t.shape) for t in x if isinstance(t, torch.Tensor | np.ndarray)}) > 1:
        return (f"a {type(x).__name__} of arrays of different shapes (stack them, or return one "
                "tensor)")
    return f"a {type(x).__name__} of {type(inner).__name__}"


#: half precision: about 3 significant digits, too few to tell a right answer from a slip
_HALF = (torch.float16, torch.bfloat16)


def close(actual, expected: torch.Tensor, n: int = 1) -> bool:
    """Whether ``actual`` equals ``expected`` within the tolerance policy.

    The tolerance is that of the less precise of the two dtypes: a right answer computed in
    float32 (a buffer made with ``torch.zeros(n)``) is judged at float32's precision, as it
    should be; never looser than float32's, since at half precision's a slip passes.
    ``actual`` may be a tensor, a NumPy array, a list or a number; a wrong shape is simply not
    close.
    """
    if not isinstance(expected, torch.Tensor):
        expected = torch.as_tensor(expected, dtype=torch.float64)
    try:
        actual = as_tensor(actual, dtype=expected.dtype if expected.is_floating_point()
                           else torch.float64)
    except Wrong:
        return False
    if actual.shape != expected.shape or actual.is_complex() != expected.is_complex():
        return False
    dtype = _lower_precision(actual.dtype, expected.dtype) if not expected.is_complex() \
        else expected.dtype
    if dtype in _HALF:  # never looser than float32: half precision's tolerance lets slips through
        dtype = torch.float32

    # the scale of the finite entries (a NaN or an infinity, in a learner's tensor compared as
    # `expected`, is simply not close; it must not make the tolerance NaN)
    finite = expected.abs()[torch.isfinite(expected)] if expected.numel() else expected
    scale = float(finite.max()) if finite.numel() else 1.0
    high = expected.dtype if expected.is_floating_point() or expected.is_complex() \
        else torch.float64
    return torch.allclose(actual.to(expected.device, high), expected.to(high),
                          **tolerance(dtype, n, scale))


def agrees(value, expected: float, digits: int = 3) -> bool:
    """Whether the number ``value`` equals ``expected`` to ``digits`` significant digits.

    Half a unit of the last asked-for digit either way, so both a rounded answer (0.667 for 2/3)
    and the exact one pass.
    """
    try:
        value = float(value)
    except (TypeError, ValueError, RuntimeError):
        return False
    if expected == 0:
        return abs(value) <= 0.5 * 10.0 ** (1 - digits)
    unit = 10.0 ** (math.floor(math.log10(abs(expected))) - digits + 1)
    return abs(value - expected) <= 0.5 * unit * (1 + 1e-9) + 1e-12 * abs(expected)


def cut_off(value, expected: float, digits: int = 3) -> bool:
    """Whether the number ``value`` is ``expected`` cut off after ``digits`` significant digits
    (6.03e8 for 603 979 776), where rounding was asked for."""
    unit = 10.0 ** (math.floor(math.log10(abs(expected))) - digits + 1)
    return math.isclose(float(value), math.floor(expected / unit) * unit, rel_tol=1e-9)


def at_most_digits(value, digits: int) -> bool:
    """Whether the number ``value`` is written with at most ``digits`` significant digits (6.0e8
    has two)."""
    return float(value) == float(f"{float(value):.{digits}g}")


def name_slip(value, slips, digits: int = 3) -> None:
    """Raise :class:`Wrong` with the message of the first ``(expected, message)`` of ``slips``
    whose expected number ``value`` equals to ``digits`` significant digits (see :func:`agrees`):
    the usual wrong answers of a numeric exercise, each named by its cause."""
    for expected, message in slips:
        if agrees(value, expected, digits):
            raise Wrong(message)


def returned_tensor(out, what: str) -> torch.Tensor:
    """The learner's result as a tensor (a NumPy array is taken as one), or a :class:`Wrong`;
    also for a half-precision result (float16, bfloat16), whose 3 significant digits cannot tell a
    right answer from a slip (no check gives half-precision inputs)."""
    if not isinstance(out, torch.Tensor):
        if isinstance(out, np.ndarray):
            out = torch.from_numpy(out.copy())
        else:
            raise Wrong(f"{what} must return a tensor, got {type(out).__name__}")
    if out.dtype in _HALF:
        raise Wrong(f"{what} returned {str(out.dtype).removeprefix('torch.')}, which keeps about "
                    "3 significant digits: compute in the dtype of the inputs (float32 or "
                    "float64)")
    return out


def number(value, what: str, verb: str = "must be", finite: bool = True) -> float:
    """The learner's number as a float: a Python, NumPy or ``Decimal`` number, or a tensor,
    array, list or tuple that holds one number; else a :class:`Wrong` that ``what`` ``verb`` a
    number (a finite one unless ``finite`` is false)."""
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    if isinstance(value, torch.Tensor | np.ndarray | np.generic):
        size = value.numel() if isinstance(value, torch.Tensor) else np.size(value)
        expect(size == 1, f"{what} {verb} one number, got {size} values")
        value = value.item()
    elif isinstance(value, decimal.Decimal):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise Wrong(f"{what} {verb} a number, got {type(value).__name__}")
    value = float(value)
    expect(not finite or math.isfinite(value), f"{what} is not a finite number")
    return value


def numbers_of(out, count: int) -> list | None:
    """``out`` as a list of ``count`` entries when it is a tuple or list of that many, or a
    tensor or NumPy array of that many numbers, of any shape (a learner's numbers written as one
    array: each entry then a 0-d tensor or NumPy scalar, at the array's precision); else None."""
    if isinstance(out, torch.Tensor | np.ndarray) and math.prod(out.shape) == count:
        return list(out.reshape(-1))
    if isinstance(out, tuple | list) and len(out) == count:
        return list(out)
    return None


def number_list(answer, names: tuple[str, ...], shape: str, read=number) -> list[float]:
    """The learner's answer as ``len(names)`` floats (see :func:`numbers_of`; each entry read by
    ``read`` and named by its entry of ``names``), else a :class:`Wrong` that the answer must be
    ``shape``."""
    got = numbers_of(answer, len(names))
    expect(got is not None, f"answer must be {shape}")
    return [read(v, name) for v, name in zip(got, names, strict=True)]


def two_numbers(out):
    """``out`` as a tuple of two Python numbers when it is a tensor or NumPy array of two
    numbers, of any shape (a learner's pair written as one array), else ``out`` itself."""
    pair = numbers_of(out, 2) if isinstance(out, torch.Tensor | np.ndarray) else None
    return out if pair is None else tuple(x.item() for x in pair)


def returned_pair(out, what: str, names: str = "(a, b)") -> tuple[torch.Tensor, torch.Tensor]:
    """The learner's result as a pair of tensors (``names`` says which), or a :class:`Wrong`."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        got = (f"a {type(out).__name__} of {len(out)}" if isinstance(out, (tuple, list))
               else type(out).__name__)
        raise Wrong(f"{what} must return a pair {names} of tensors, got {got}")
    return returned_tensor(out[0], what), returned_tensor(out[1], what)


def expect_shape(t: torch.Tensor, shape: tuple, what: str) -> None:
    """A :class:`Wrong` unless ``t`` has ``shape``, naming both shapes."""
    expect(tuple(t.shape) == tuple(shape),
           f"{what} must have shape {tuple(shape)}, got {tuple(t.shape)}")


class CallWatch:
    """A context that records the names of the watched functions that the code run inside it
    calls, in the order first seen, each once (in ``used``).

    A profile hook (``sys.setprofile``) sees every call, and passes it on to the hook in place
    before, if any. ``functions`` maps a name to a function: a Python function is known by its
    code, unwrapped (a checking wrapper changes nothing, nor how the learner imported it), a
    builtin by its identity. Every function defined in one of ``modules`` is recorded by its own
    name. ``other(frame, event, arg)`` may name further calls (``None`` for the rest).

    ``aten`` maps the names of PyTorch operators (``"linalg_inv_ex"``) to the names to record:
    a dispatch mode sees each operator that runs, however it was called (``torch.linalg.inv``,
    ``A.inverse()``, ``torch.linalg.matrix_power(A, -1)`` or ``torch.ops.aten.linalg_inv``, which
    has no Python code of its own for the profile hook to see).
    """

    def __init__(self, functions: dict | None = None, modules=(), other: Callable | None = None,
                 aten: dict[str, str] | None = None):
        self.used: list[str] = []
        self._aten = dict(aten or {})
        self._mode = None
        self._codes: dict = {}
        self._builtins: dict[int, str] = {}
        for name, fn in (functions or {}).items():
            # NumPy's dispatchers keep the Python function in _implementation
            code = getattr(inspect.unwrap(getattr(fn, "_implementation", fn)), "__code__", None)
            if code is not None:
                self._codes[code] = name
            else:
                self._builtins[id(fn)] = name
        self._files = {module.__file__ for module in modules}
        self._other = other
        self._outer = None

    def _hook(self, frame, event, arg):
        name = None
        if event == "call":
            name = self._codes.get(frame.f_code)
            if name is None and frame.f_code.co_filename in self._files:
                name = frame.f_code.co_name
        elif event == "c_call":
            name = self._builtins.get(id(arg))
        if name is None and self._other is not None:
            name = self._other(frame, event, arg)
        if name is not None:
            self._record(name)
        if self._outer is not None:
            self._outer(frame, event, arg)

    def _record(self, name: str) -> None:
        if name not in self.used:
            self.used.append(name)

    def __enter__(self) -> CallWatch:
        self._outer = sys.getprofile()
        sys.setprofile(self._hook)
        if self._aten:
            self._mode = _OperatorWatch(self._aten, self._record)
            self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        if self._mode is not None:
            self._mode.__exit__(*exc)
            self._mode = None
        sys.setprofile(self._outer)
        return False


class _OperatorWatch(TorchDispatchMode):
    """Passes every PyTorch operator on unchanged, and records those named in ``names``."""

    def __init__(self, names: dict[str, str], record: Callable[[str], None]):
        super().__init__()
        self._names, self._seen = names, record

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = self._names.get(func.overloadpacket.__name__)
        if name is not None:
            self._seen(name)
        return func(*args, **(kwargs or {}))
