"""The exercise checker (seqbook.exercises): results, hints, not-attempted detection, and every
registered exercise against a right answer, its starter and wrong answers (one test file per
chapter's checks: tests/test_exercises_chNN.py)."""

import pytest
import torch

from seqbook.exercises import EXERCISES, Wrong, call, check, close, exercise, expect, hint


def test_results_are_one_line_and_true_only_when_passed():
    @exercise("ex-test-square", hints=["square it", "x * x"])
    def checker(fn):
        expect(call(fn, 3) == 9, "3 does not give 9")

    try:
        def starter(x):
            raise NotImplementedError

        r = check("ex-test-square", starter)
        assert not r and r.status == "not attempted" and "NotImplementedError" in repr(r)
        r = check("ex-test-square", lambda x: x + x)
        assert not r and r.status == "fail" and repr(r) == "✗ ex-test-square: 3 does not give 9"
        r = check("ex-test-square", lambda x: x / 0)
        assert r.status == "fail" and "ZeroDivisionError" in r.message  # no traceback
        assert check("ex-test-square", lambda x: x * x) and repr(check("ex-test-square", lambda x: x * x)) \
            == "✓ ex-test-square: correct"
        assert check("ex-test-square", ...).status == "not attempted"
        assert check("ex-test-square").status == "not attempted"
        assert repr(hint("ex-test-square")) == "Hint 1/2 for ex-test-square: square it"
        assert hint("ex-test-square").level == 2
        assert hint("ex-test-square").level == 2  # the last one repeats
        assert hint("ex-test-square", 1).text == "square it"
    finally:
        del EXERCISES["ex-test-square"]


def test_bad_input():
    with pytest.raises(ValueError, match="no exercise is called 'ex-nope'"):
        check("ex-nope", 1)
    with pytest.raises(TypeError, match="name must be an exercise label"):
        hint(3)
    with pytest.raises(ValueError, match="name must be an exercise label"):
        exercise("clip")
    with pytest.raises(ValueError, match="registered twice"):
        exercise(next(iter(EXERCISES)))
    with pytest.raises(ValueError, match=r"level must be an int in \[1, "):
        hint("ex-ch2-clip", 0)


def test_close_follows_the_tolerance_policy():
    x = torch.randn(100, dtype=torch.float64)
    assert close(x + 1e-15, x) and not close(x + 1e-9, x)
    assert not close(x[:50], x)  # another shape is not close
    assert close(x.float(), x.float()) and not close("text", x)
    # never looser than float32: at bfloat16's tolerance, a slip of a few percent would pass
    assert not close((x * 1.03).bfloat16(), x) and not close((x * 1.03).half(), x, n=36)
    # a NaN or an infinity where a value is expected is not close, and breaks nothing (a
    # learner's tensor compared as the expected one made the tolerance NaN and the check crash)
    y = x.clone()
    y[3] = float("nan")
    assert not close(x, y) and not close(y, x)
    y[3] = float("inf")
    assert not close(x, y) and not close(x * 1e6, y)  # an infinity did make every value close


def test_a_half_precision_answer_is_refused_with_its_reason():
    import numpy as np

    from seqbook.exercises.core import returned_tensor

    for t in (torch.ones(3, dtype=torch.bfloat16), torch.ones(3, dtype=torch.float16),
              np.ones(3, dtype=np.float16)):
        with pytest.raises(Wrong, match="returned (b?float16), which keeps about 3 significant"):
            returned_tensor(t, "f")
    # wrong answers in bfloat16 that the loose tolerance let through (values unchanged, zeros)
    for answer in (lambda q, k, v: v.bfloat16(), lambda q, k, v: torch.zeros_like(v).bfloat16()):
        assert "returned bfloat16" in check("ex-ch10-causal-linear-attention", answer).message


def test_every_exercise_has_hints():
    for name, ex in EXERCISES.items():
        assert 2 <= len(ex.hints) <= 3, name


def test_wrong_is_an_exception_for_checkers():
    with pytest.raises(Wrong, match="boom"):
        expect(False, "boom")


def test_pytorch_not_implemented_is_a_verdict_not_not_attempted():
    @exercise("ex-test-ce", hints=["one", "two"])
    def checker(fn):
        call(fn, torch.randn(3, 5))

    try:
        def wrong(logits):  # arguments swapped: PyTorch raises NotImplementedError itself
            return torch.nn.functional.cross_entropy(torch.tensor([1, 2, 0]), logits)

        def starter(logits):
            raise NotImplementedError  # your code here

        r = check("ex-test-ce", wrong)
        assert r.status == "fail" and "NotImplementedError" in r.message, r
        assert check("ex-test-ce", starter).status == "not attempted"
    finally:
        del EXERCISES["ex-test-ce"]


def test_call_watch_sees_functions_modules_and_builtins_and_keeps_the_outer_hook():
    import functools
    import sys

    import numpy as np

    from seqbook import gating
    from seqbook.exercises.core import CallWatch

    def plain(x):
        return x

    wrapped = functools.wraps(plain)(lambda x: plain(x))  # a checking wrapper around plain
    seen = []

    def outer(frame, event, arg):
        seen.append(event)

    sys.setprofile(outer)
    try:
        with CallWatch({"plain": plain, "solve": np.linalg.solve, "inv": torch.linalg.inv},
                       modules=[gating]) as watch:
            alias = wrapped
            alias(1)
            np.linalg.solve(np.eye(2), np.ones(2))
            torch.linalg.inv(torch.eye(2))
            gating.unrolled_weights(torch.full((1, 2, 1), 0.5))
        assert sys.getprofile() is outer
    finally:
        sys.setprofile(None)
    assert watch.used[:3] == ["plain", "solve", "inv"]  # by code, by identity, in order
    assert "unrolled_weights" in watch.used[3:]  # and every function of gating, by its name
    assert "call" in seen  # the hook in place before saw the calls too
    with CallWatch({"plain": plain}) as quiet:
        pass
    assert quiet.used == []
    # operators by their PyTorch name, however they are reached, and only while watched
    with CallWatch(aten={"linalg_inv_ex": "inverse"}) as ops:
        torch.ops.aten.linalg_inv(torch.eye(2))
        torch.eye(2) @ torch.ones(2)
    assert ops.used == ["inverse"]
    torch.linalg.inv(torch.eye(2))
    assert ops.used == ["inverse"]
