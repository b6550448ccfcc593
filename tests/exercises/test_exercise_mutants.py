"""Every exercise check proven by mutation (tests/exercises/mutation.py): the check passes the chapter's
reference solution, refuses every mutant of it that computes something different, gives a verdict
(never a traceback) and leaves the learner's random state as it found it.

The equivalent mutants (the same values on every input the check uses) are listed, each with the
reason, in ``tests/exercises/mutants/chNN.py``; a listed mutant that no longer exists or that the check now
refuses fails the test, so the list cannot go stale. The kill rate per chapter is printed at the
end of the test run (tests/conftest.py).
"""

from __future__ import annotations

import importlib.util
import random
import time
from pathlib import Path

import mutation
import numpy as np
import pytest
import torch

HERE = Path(__file__).resolve().parent
PATHS = {p.stem[:2]: p for p in mutation.chapter_paths()}
SOLUTIONS = [(path, sol) for path in PATHS.values() for sol in mutation.solutions(path)]


@pytest.fixture(autouse=True)
def one_thread():
    """One thread per check: the checks' tensors are tiny, and two threads on a shared pair of
    cores make each call several times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def listed(chapter: str, table: str) -> dict:
    """A table of ``tests/exercises/mutants/chNN.py`` (EQUIVALENT, ...), by exercise label."""
    file = HERE / "mutants" / f"ch{chapter}.py"
    if not file.exists():
        return {}
    spec = importlib.util.spec_from_file_location(f"mutants_ch{chapter}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, table, {})


def random_state():
    return (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())


def same_state(a, b) -> bool:
    return torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]


def test_every_checked_exercise_has_a_reference_solution():
    from test_exercise_cells import exercises

    checked = {ex.label for path in PATHS.values() for ex in exercises(path)
               if ex.check is not None}
    assert checked == {sol.label for _, sol in SOLUTIONS}


@pytest.mark.parametrize(("path", "sol"), SOLUTIONS, ids=[s.label for _, s in SOLUTIONS])
def test_the_check_refuses_every_mutant(path, sol, record_property):
    chapter = path.stem[:2]
    equivalent = listed(chapter, "EQUIVALENT").get(sol.label, {})
    mutation.namespace(path)  # the chapter's imports once (a first import may draw numbers)
    torch.manual_seed(1234)
    before = random_state()
    # the reference gets time to spare on a loaded machine; a mutant gets three times what the
    # reference took (at least 3 s), so that a slow check's equivalent mutants are not cut off
    start = time.perf_counter()
    reference = mutation.run(sol, sol.source, path, timeout=30.0)
    limit = max(3.0, 3 * (time.perf_counter() - start))
    assert not isinstance(reference, str) and reference, f"the reference solution: {reference}"
    assert same_state(before, random_state()), "the check changed the global random state"
    survivors, moved, errors = [], [], []
    everything = mutation.mutants(sol)
    for mutant in everything:
        before = random_state()
        result = mutation.run(sol, mutant.source, path, timeout=limit)
        if isinstance(result, str) and result.startswith("check raised"):
            errors.append(f"{mutant.name}: {result}")
        elif not isinstance(result, str) and not same_state(before, random_state()):
            errors.append(f"{mutant.name}: the check changed the global random state")
        passed = not isinstance(result, str) and result.status == "pass"
        if passed and mutant.name not in equivalent:
            survivors.append(mutant.name)
        if not passed and mutant.name in equivalent:
            moved.append(mutant.name)
    names = {m.name for m in everything}
    stale = sorted(set(equivalent) - names)
    killed = len(everything) - len(equivalent) - len(survivors)
    record_property("mutants", (chapter, sol.label, len(everything), killed, len(equivalent)))
    assert not errors, "a check raised or touched the random state:\n" + "\n".join(errors)
    assert not survivors, (f"{len(survivors)} of {len(everything)} mutants pass the check "
                           "(refuse them, or list them in tests/exercises/mutants as equivalent, with "
                           "why):\n" + "\n".join(survivors))
    assert not moved, "listed as equivalent but refused (remove them):\n" + "\n".join(moved)
    assert not stale, "listed as equivalent but no longer made:\n" + "\n".join(stale)


@pytest.mark.parametrize(("path", "sol"), SOLUTIONS, ids=[s.label for _, s in SOLUTIONS])
def test_the_wrong_number_of_answers_is_a_verdict(path, sol):
    from seqbook.exercises import check

    answers = _answers(path, sol)
    check(sol.label, *answers)  # what a first check imports
    before = random_state()
    extra = check(sol.label, *answers, answers[0])
    assert extra.status == "fail" and "this exercise takes" in extra.message, extra
    if len(answers) > 1:
        fewer = check(sol.label, *answers[:-1])
        assert fewer.status == "fail" and "this exercise takes" in fewer.message, fewer
    assert same_state(before, random_state())


# --- right answers written differently --------------------------------------------------------


def _tree_map(fn, x):
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # a named tuple
        return type(x)(*(_tree_map(fn, v) for v in x))
    if isinstance(x, tuple | list):
        return type(x)(_tree_map(fn, v) for v in x)
    if isinstance(x, dict):
        return {k: _tree_map(fn, v) for k, v in x.items()}
    return fn(x)


def _to_float32(x):
    return x.float() if isinstance(x, torch.Tensor) and x.dtype == torch.float64 else x


def _to_numpy(x):
    if isinstance(x, torch.Tensor):
        array = x.detach().cpu().numpy()
        return array[()] if array.ndim == 0 else array  # a 0-d tensor is a NumPy scalar
    if isinstance(x, bool):
        return np.bool_(x)
    if isinstance(x, int | float):
        return np.float64(x) if isinstance(x, float) else np.int64(x)
    return x


def in_float32(fn):
    """The learner's function computed in float32: float64 tensors in become float32 (unless a
    module comes with them: then the module's dtype is the learner's to follow)."""
    def wrapped(*args, **kwargs):
        if any(isinstance(a, torch.nn.Module) for a in (*args, *kwargs.values())):
            return fn(*args, **kwargs)
        return fn(*_tree_map(_to_float32, args), **_tree_map(_to_float32, kwargs))
    wrapped.__name__ = getattr(fn, "__name__", "answer")
    return wrapped


def as_numpy(fn):
    """The learner's function returning NumPy arrays and scalars where it returned tensors."""
    def wrapped(*args, **kwargs):
        return _tree_map(_to_numpy, fn(*args, **kwargs))
    wrapped.__name__ = getattr(fn, "__name__", "answer")
    return wrapped


def _answers(path, sol):
    ns = mutation.namespace(path)
    exec(sol.source, ns)  # noqa: S102
    return [eval(a, ns) for a in sol.answers]  # noqa: S307


# Every exercise takes both forms of its reference answer; the only exception is the NumPy form of
# a loss trained through autograd (TRAINED_THROUGH_AUTOGRAD), which must be refused by name.
VARIANTS = {"float32": (in_float32, _to_float32), "numpy": (as_numpy, _to_numpy)}

# The one kind of answer that NumPy cannot give: a loss the learner trains with, whose gradient is
# part of the answer. Its NumPy form must be refused with a message that says so (these words).
TRAINED_THROUGH_AUTOGRAD = {"ex-ch9-dpo": "the policy is trained through it",
                            "ex-ch9-focal-weights": "training calls backward() on it",
                            "ex-ch9-overflow-bug": "a loss is for training",
                            "ex-ch9-smoothing-bug": "a loss is for training",
                            "ex-ch9-infonce": "a loss is for training"}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(("path", "sol"), SOLUTIONS, ids=[s.label for _, s in SOLUTIONS])
def test_a_right_answer_in_float32_or_numpy_passes(path, sol, variant):
    """The reference answer computed in float32 (float64 tensors in become float32), or
    returning NumPy arrays and scalars where it returned tensors, still passes."""
    from seqbook.exercises import check

    wrap, convert = VARIANTS[variant]
    answers = [wrap(a) if callable(a) and not isinstance(a, type | torch.nn.Module)
               else _tree_map(convert, a) for a in _answers(path, sol)]
    result = check(sol.label, *answers)
    if variant == "numpy" and sol.label in TRAINED_THROUGH_AUTOGRAD:
        assert not result and TRAINED_THROUGH_AUTOGRAD[sol.label] in result.message, result
        return
    assert result, result
