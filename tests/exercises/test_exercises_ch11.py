"""The performance appendix's checkers pass the solutions, name the usual slips, and see starters."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest
import torch

from seqbook.exercises import check
from tests.random_state import assert_random_state_untouched

GIB = 2 * 12 * 8 * 16384 * 768 * 4 / 2**30  # the float32 cache of the exercise


def verdict(name, answer):
    result = check(name, answer)
    return result.status, result.message


def test_slopes():
    def exponent(lengths, ms):
        return np.polyfit(np.log(lengths[-3:]), np.log(ms[-3:]), 1)[0]

    def starter(lengths, ms):
        raise NotImplementedError

    assert check("ex-perf-slopes", exponent)
    assert verdict("ex-perf-slopes", starter)[0] == "not attempted"
    status, message = verdict("ex-perf-slopes",
                              lambda n, t: np.polyfit(np.log(n), np.log(t), 1)[0])
    assert status == "fail" and "every length" in message
    status, message = verdict("ex-perf-slopes",
                              lambda n, t: np.polyfit(np.log(t[-3:]), np.log(n[-3:]), 1)[0])
    assert status == "fail" and "the fit is of log T against log t" in message
    status, message = verdict("ex-perf-slopes", lambda n, t: "fast")
    assert status == "fail" and "must be a number" in message
    # "the three longest" written as a fixed slice of six lengths
    status, message = verdict("ex-perf-slopes",
                              lambda n, t: np.polyfit(np.log(n[3:]), np.log(t[3:]), 1)[0])
    assert status == "fail" and "the 4 longest lengths of a series of 7" in message
    for part, named in ((slice(-4, None), "4 longest"), (slice(-2, None), "2 longest"),
                        (slice(None, 3), "3 shortest")):
        status, message = verdict("ex-perf-slopes", lambda n, t, part=part: np.polyfit(
            np.log(n[part]), np.log(t[part]), 1)[0])
        assert status == "fail" and f"the {named} lengths" in message, message

    def closed_form(lengths, ms):  # another right answer: least squares by hand, as a tensor
        x, y = torch.log(torch.tensor(lengths[-3:])), torch.log(torch.tensor(ms[-3:]))
        x = x - x.mean()
        return (x * y).sum() / (x * x).sum()

    assert check("ex-perf-slopes", closed_form)  # in float32
    assert check("ex-perf-slopes", lambda n, t: float(f"{exponent(n, t):.3g}"))  # 3 digits
    assert not check("ex-perf-slopes", lambda n, t: exponent(n, t) * 1.01)
    # the slope between the first and last of the three: right for doublings, not in general
    status, message = verdict("ex-perf-slopes", lambda n, t: np.log(t[-1] / t[-3])
                              / np.log(n[-1] / n[-3]))
    assert status == "fail" and "first and the last of the three points" in message
    assert "lengths that double" in message
    # the times left unlogged: a fit of t against log T (a reader's slip)
    status, message = verdict("ex-perf-slopes", lambda n, t: np.polyfit(
        np.log(n[-3:]), t[-3:], 1)[0])
    assert status == "fail" and "logarithm of the times too" in message, message
    for log in (np.log2, np.log10):
        status, message = verdict("ex-perf-slopes", lambda n, t, log=log: np.polyfit(
            log(n[-3:]), t[-3:], 1)[0])
        assert status == "fail" and "logarithm of the times too" in message, message

    def reverses_in_place(lengths, ms):  # right number, but the caller's lists are reversed
        lengths.reverse()
        ms.reverse()
        return np.polyfit(np.log(lengths[:3]), np.log(ms[:3]), 1)[0]

    status, message = verdict("ex-perf-slopes", reverses_in_place)
    assert status == "fail" and "changed the lists it was given" in message, message


def test_kv_memory():
    assert check("ex-perf-kv-memory", (GIB, GIB / 8))
    assert check("ex-perf-kv-memory", (9.0, 1.1))  # the solution's own rounding: 2 digits
    assert check("ex-perf-kv-memory", (9, 1.13))
    assert check("ex-perf-kv-memory", np.array([GIB, GIB / 8], dtype=np.float32))
    assert check("ex-perf-kv-memory", (torch.tensor(GIB), torch.tensor(GIB / 8)))
    # exact in bfloat16 too (9 and 1.125 are short numbers): right, whatever the dtype
    assert check("ex-perf-kv-memory", torch.tensor([GIB, GIB / 8], dtype=torch.bfloat16))
    assert check("ex-perf-kv-memory", np.array([[GIB], [GIB / 8]]))  # any shape of two numbers
    assert not check("ex-perf-kv-memory", (9.0, 1.2))  # a digit off
    assert not check("ex-perf-kv-memory", (8.9, 1.1))
    assert "rounded up" in check("ex-perf-kv-memory", (9.0, 1.2)).message
    # "4 key-value heads" of 12 instead of one per 4 query heads: a third, not rounding
    slip = check("ex-perf-kv-memory", (9.0, 1.5))
    assert not slip and "12 / 4 = 3" in slip.message
    assert verdict("ex-perf-kv-memory", ...)[0] == "not attempted"
    for answer, fragment in [((GIB / 2, GIB / 8), "half"),
                             ((GIB / 12, GIB / 8), "one layer"),
                             ((GIB / 8, GIB / 8), "one sequence"),
                             ((GIB * 2**30 / 1e9, GIB / 8), "GB"),
                             ((GIB, GIB / 2), "shrink too"),
                             ((GIB, GIB / 4), "grouped-query attention in float32"),
                             ((GIB, GIB / 8 * 2**30 / 1e9), "GB"),
                             ((GIB, GIB / 16), "grouped-query size is not right"),
                             ((GIB,), "pair"),
                             ((GIB, "small"), "must be a number")]:
        status, message = verdict("ex-perf-kv-memory", answer)
        assert status == "fail" and fragment in message, (answer, message)


MFU = 855_383_040 * 32 * 1024 / 0.25 / 312e12  # the exercise's run: 0.3593...


def test_mfu():
    assert check("ex-perf-mfu", MFU)
    assert check("ex-perf-mfu", 0.359)  # 3 significant digits, as asked
    assert check("ex-perf-mfu", np.float32(MFU))
    assert check("ex-perf-mfu", torch.tensor(MFU))
    assert check("ex-perf-mfu", 112.1e12 / 312e12)  # via the achieved TFLOP/s, rounded
    assert not check("ex-perf-mfu", 0.36)  # 2 digits only
    assert check("ex-perf-mfu", 0.3594) and check("ex-perf-mfu", 0.3593)
    assert not check("ex-perf-mfu", 0.358)
    assert verdict("ex-perf-mfu", ...)[0] == "not attempted"
    # half precision is refused in a list of one as it is alone
    for half in (np.float16(MFU), [np.float16(MFU)], (torch.tensor(MFU, dtype=torch.float16),)):
        status, message = verdict("ex-perf-mfu", half)
        assert status == "fail" and "half precision" in message, (half, message)
    n = 124_475_904 - 1024 * 768
    attention = 12 * 12 * 1024 * 768
    rate = 32 * 1024 / 0.25
    for answer, fragment in [(100 * MFU, "percentage"),
                             (6 * n * rate / 312e12, "attention"),
                             ((6 * 124_475_904 + attention) * rate / 312e12, "position table"),
                             (6 * 124_475_904 * rate / 312e12, "two slips"),
                             ((2 * n + attention / 3) * rate / 312e12, "forward pass only"),
                             (MFU / 32, "one sequence"),
                             (MFU / 1024, "one token per sequence"),
                             (MFU * 312 / 989.4, "H200"),
                             (MFU * 312e12 / 312, "312e12"),
                             (MFU * 1e12 / 2**40, "2**40"),
                             (MFU * 312, "model's TFLOP/s"),
                             ((6 * n + attention / 2) * rate / 312e12, "whole T x T"),
                             ((8 * n + attention * 4 / 3) * rate / 312e12, "hardware FLOPs"),
                             ((8 * n + attention) * rate / 312e12, "hardware FLOPs"),
                             ((6 * (n + 768 * 50_304) + attention) * rate / 312e12, "once"),
                             ((6 * (n - 768 * 50_304) + attention) * rate / 312e12,
                              "non-embedding"),
                             (MFU / 2, "2:4 structured sparsity"),
                             (0.36, "2 significant digits"),
                             ((6 * n + 12 * 12 * 32 * 1024 * 768) * rate / 312e12, "above 1"),
                             (MFU * 1.1, "not right to 3 significant digits"),
                             ("35.9 %", "must be a number")]:
        status, message = verdict("ex-perf-mfu", answer)
        assert status == "fail" and fragment in message, (answer, message)


RIDGE = (989.4 / 3.35, 16 * 4096 / (16 + 4096 + 16), 16 * 4096 / (16 + 4096 + 16) * 3.35)


def test_ridge():
    ridge, intensity, ceiling = RIDGE
    assert check("ex-perf-ridge", RIDGE)
    assert check("ex-perf-ridge", (295.3, 15.88, 53.18))  # 4 significant digits, as asked
    assert check("ex-perf-ridge", [ridge, intensity, ceiling])
    assert check("ex-perf-ridge", np.array(RIDGE, dtype=np.float32))
    assert check("ex-perf-ridge", torch.tensor(RIDGE, dtype=torch.float64))
    assert check("ex-perf-ridge", (989.4e12 / 3.35e12, 2 * 16 * 4096**2
                                   / (2 * (2 * 16 * 4096 + 4096**2)), 53.184))
    assert not check("ex-perf-ridge", (295, 15.9, 53.2))  # 3 digits only
    assert check("ex-perf-ridge", (295.3, 15.88, 15.88 * 3.35))  # rounded, then multiplied
    assert check("ex-perf-ridge", tuple(Decimal(f"{x:.5g}") for x in RIDGE))
    assert check("ex-perf-ridge", torch.tensor([RIDGE], dtype=torch.float64))  # (1, 3)
    assert verdict("ex-perf-ridge", ...)[0] == "not attempted"
    for answer, fragment in [
        ((1 / ridge, intensity, ceiling), "inverse"),
        ((989.4 / 4.8, intensity, ceiling), "H200's bandwidth"),
        ((1979 / 3.35, intensity, ceiling), "2:4 structured sparsity"),
        ((ridge * 1e12, intensity, ceiling), "units of 10**12"),
        ((ridge * 1.01, intensity, ceiling), "ridge point is not right"),
        ((intensity, ridge, ceiling), "another order"),
        ((ridge, 2 * intensity, 2 * ceiling), "numbers, not bytes"),
        ((ridge, intensity / 2, ceiling / 2), "mkn FLOPs"),
        ((ridge, 4096 / (1 + 4096 + 1), 3.35), "one token"),
        ((ridge, 16 * 4096 / (16 + 4096), 53.39), "the activations read or the output"),
        ((ridge, intensity * 1.01, ceiling), "intensity is not right"),
        ((ridge, intensity, 989.4), "compute-bound"),
        ((ridge, intensity, ceiling * 1e12), "in FLOP/s"),
        ((ridge, intensity, intensity * 4.8), "H200's bandwidth"),
        ((ridge, intensity, ceiling / 989.4), "fraction of the peak"),
        ((ridge, intensity, ceiling * 1.01), "ceiling is not right"),
        ((295.3, 15.87, ceiling), "the intensity is cut off"),
        ((ridge, ceiling, intensity), "another order"),
        ((ceiling, intensity, ridge), "another order"),
        ((ridge, intensity / 2, ceiling / 2), "a bf16 number takes 2 bytes, not 4"),
        ((ridge, 16.0, 53.6), "only the weights"),
        ((989.4e12 / (3.35 * 2**40), intensity, ceiling), "2**40"),
        ((ridge, intensity, ceiling * 2**40 / 1e12), "2**40"),
        ((989.4 / 3350, intensity, ceiling), "GB/s"),
        ((989.4 / 3.35e12, intensity, ceiling), "bytes/s"),
        ((ridge, intensity, 100 * ceiling / 989.4), "percentage"),
        ((ridge, intensity, ceiling / 1e3), "PFLOP/s"),
        ((ridge, intensity, ceiling * 1e3), "GFLOP/s"),
        (torch.tensor(RIDGE, dtype=torch.bfloat16), "half precision"),
        ((np.float16(ridge), intensity, ceiling), "half precision"),
        ((ridge, intensity), "triple"),
        ((ridge, "low", ceiling), "must be a number"),
    ]:
        status, message = verdict("ex-perf-ridge", answer)
        assert status == "fail" and fragment in message, (answer, message)


DECODE = (3.2734375, 1056, 44235.22, 69.3256)  # the exercise's four numbers
CACHE = 2 * 2 * 12 * 2048 * 768  # bytes of one sequence's cache, bf16


def test_decode_batch():
    equal, fits, rate, ratio = DECODE
    name = "ex-perf-decode"
    assert check(name, DECODE)
    assert check(name, (3.27, 1056, 44200, 69))  # the digits asked for
    assert check(name, [equal, 1056.0, rate, ratio])  # a whole number as a float
    assert check(name, np.array(DECODE))
    assert check(name, torch.tensor(DECODE, dtype=torch.float64))
    assert check(name, (2 * 123_568_128 / CACHE, 1056, 1056 / 23.87e-3, 23.87 / 0.344))  # rounded
    assert check(name, (equal, np.int64(1056), Decimal("44235"), Decimal("69.3")))
    assert check(name, (3.27, 1056, 1056 / 0.0239, 23.9 / 0.344))  # the solution's rounding
    assert not check(name, (3.3, 1056, rate, ratio))  # 2 digits only
    assert verdict(name, ...)[0] == "not attempted"
    for answer, fragment in [
        ((1 / equal, fits, rate, ratio), "inverted"),
        ((2 * equal, fits, rate, ratio), "weights are in bf16"),
        ((12 * equal, fits, rate, ratio), "one layer's (or one head's) cache"),
        ((equal / 2, fits, rate, ratio), "half the right one"),
        ((equal * 1.05, fits, rate, ratio), "not right to 3 significant digits"),
        ((equal, 1057, rate, ratio), "1057 sequences do not fit"),
        ((equal, 1059, rate, ratio), "leave room for them"),
        ((equal, 1056.5, rate, ratio), "whole number"),
        ((equal, 1134, rate, ratio), "GiB"),
        ((equal, 528, rate, ratio), "bf16"),
        ((equal, 2112, rate, ratio), "not a key only"),
        ((equal, 12676, rate, ratio), "every layer"),
        ((equal, 1000, rate, ratio), "largest batch is not right"),
        ((equal, fits, 1 / 23.8724e-3, ratio), "each sequence's rate"),
        ((equal, fits, 42, ratio), "each sequence's rate"),  # as the solution's text writes it
        ((equal, fits, 44372.35, ratio), "reads the weights"),
        ((equal, fits, 1056 / 0.34435e-3, ratio), "arithmetic's floor"),
        ((equal, fits, rate / 1e3, ratio), "per millisecond"),
        ((equal, fits, rate * 1.05, ratio), "tokens per second are not right"),
        ((3, fits, rate, ratio), "need not be a whole batch"),
        ((equal, 1864, rate, ratio), "H200's memory"),
        ((equal, 1055, rate, ratio), "not 2049"),
        ((equal, 1053, rate, ratio), "bf16 too"),
        ((equal, fits, 63381.8, ratio), "H200's bandwidth"),
        ((equal, fits, 48637.1, ratio), "2**40"),
        ((equal, fits, 43606.2, ratio), "not their sum"),
        ((equal, fits, rate, 48.4), "H200's bandwidth"),
        ((equal, fits, rate, 138.7), "two FLOPs"),
        ((equal, fits, rate), "four numbers"),
        ((equal, fits, rate, 1 / ratio), "inverted"),
        ((equal, fits, rate, 90.5), "attention"),
        ((equal, fits, rate, 296.3), "matrix products"),
        ((equal, fits, rate, 78.51), "not 2 L B t D"),
        ((equal, fits, rate, 60), "ratio of the floors is not right"),
        ((equal, "many", rate, ratio), "must be a number"),
        (torch.tensor(DECODE, dtype=torch.float16), "half precision"),
    ]:
        status, message = verdict(name, answer)
        assert status == "fail" and fragment in message, (answer, message)


@pytest.mark.parametrize("name, answer", [
    ("ex-perf-decode", (3.27, 1056, 44200, 69)),
    ("ex-perf-ridge", (295.3, 15.88, 53.18)),
    ("ex-perf-slopes", lambda n, t: np.polyfit(np.log(n[-3:]), np.log(t[-3:]), 1)[0]),
    ("ex-perf-kv-memory", (9.0, 1.1)),
    ("ex-perf-mfu", 0.359),
])
def test_the_random_state_is_untouched(name, answer):
    assert_random_state_untouched(lambda: check(name, answer))


def test_kv_memory_names_a_swapped_pair_and_one_digit_and_slopes_a_rounding():
    assert "wrong order" in check("ex-perf-kv-memory", (1.125, 9.0)).message
    assert "1 significant digit" in check("ex-perf-kv-memory", (9.0, 1.0)).message
    import numpy as np

    def rounded(lengths, ms):
        k = np.polyfit(np.log(lengths[-3:]), np.log(ms[-3:]), 1)[0]
        return float(f"{k:.2g}")

    result = check("ex-perf-slopes", rounded)
    assert not result and "2 significant digits only" in result.message


def test_slopes_names_a_cut_off_exponent_and_kv_memory_only_the_one_digit_rounding():
    import math

    import numpy as np

    def cut(lengths, ms):
        k = np.polyfit(np.log(lengths[-3:]), np.log(ms[-3:]), 1)[0]
        unit = 10.0 ** (math.floor(math.log10(abs(k))) - 2)
        return math.floor(k / unit) * unit

    result = check("ex-perf-slopes", cut)
    assert not result and "cut off" in result.message
    assert "1 significant digit" not in check("ex-perf-kv-memory", (9.0, 0.8)).message
