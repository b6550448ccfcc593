"""Checks of chapter 8's exercises (attention with vector symbols, FHRR)."""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from ..vsa import (
    fhrr_bind,
    fhrr_bundle,
    fhrr_wrap,
    fractional_power,
    random_symbols,
    vsa_attention,
)
from .core import Wrong, call, close, exercise, expect, returned_tensor, tolerance

F64 = torch.float64


def _atol(out: torch.Tensor, ref: torch.Tensor, atol: float, n: int = 1) -> float:
    """``atol``, or the tolerance of the less precise of the two dtypes if that is larger: a
    right answer computed in float32 is judged at float32's precision."""
    dtypes = [t.dtype for t in (out, ref) if t.dtype.is_floating_point]
    if not dtypes:
        return atol
    coarse = max(dtypes, key=lambda d: torch.finfo(d).eps)
    return max(atol, tolerance(coarse, n)["atol"])


def _same_angles(out: torch.Tensor, ref: torch.Tensor, atol: float = 1e-9, n: int = 1) -> bool:
    """Whether two symbols name the same angles: equal modulo 2 (so -1 and +1 agree)."""
    if out.shape != ref.shape:
        return False
    diff = fhrr_wrap(out.to(F64) - ref.to(F64))
    return bool((diff.abs() <= _atol(out, ref, atol, n)).all())


def _in_range(out: torch.Tensor) -> bool:
    """Whether every entry is a pi-normalised angle in [-1, 1]."""
    return bool(((out >= -1) & (out <= 1)).all())


def _real(out: torch.Tensor, what: str) -> torch.Tensor:
    """The learner's tensor, refused if it holds phasors (complex numbers) instead of angles."""
    expect(not out.is_complex(), f"{what} returns complex numbers, phasors: a symbol holds their "
           "angles divided by pi, real numbers in [-1, 1] (torch.angle(z) / pi)")
    return out


def _name_units(out: torch.Tensor, ref: torch.Tensor) -> None:
    """Wrong if ``out`` is ``ref`` in other units: in radians, or from phasors without the pi."""
    if _same_angles(out / math.pi, ref, atol=1e-6):
        raise Wrong("the angles are in radians: a symbol holds them divided by pi, in [-1, 1]")
    if _same_angles(out * math.pi, ref, atol=1e-6):
        raise Wrong("a symbol holds its angles divided by pi: its phasors are exp(i pi x), so "
                    "the phasors of a and b take pi a and pi b")


def _symbol(out, ref: torch.Tensor, what: str) -> torch.Tensor:
    """The learner's symbol: a real tensor of the reference's shape."""
    out = _real(returned_tensor(out, what), what)
    expect(out.shape == ref.shape, f"{what} must return a tensor of shape {tuple(ref.shape)}, got "
           f"{tuple(out.shape)}")
    return out


def _wrapping_pair(seed: int, n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Two float64 symbols whose sums and differences cross +-1 in many entries."""
    g = torch.Generator().manual_seed(seed)
    a, b = random_symbols(2, n, generator=g, dtype=F64)
    return a, b


# ---------------------------------------------------------------------------------------------
# Binding, and why it keeps similarities.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch8-bind-invariance", hints=[
    "Binding adds the angles. The sum of two angles in [-1, 1) lies in [-2, 2): map it back to "
    "the same point of the circle in [-1, 1).",
    "Shift by 1, take the remainder modulo 2, shift back: (x + 1) mod 2 - 1. torch.remainder "
    "gives a result in [0, 2) for negative inputs too; torch.fmod and Python's math.fmod do not.",
])
def check_bind_invariance(bind_):
    a, b = _wrapping_pair(0)
    ref = fhrr_bind(a, b)
    out = _symbol(call(bind_, a.clone(), b.clone(), what="bind_"), ref, "bind_")
    if _same_angles(out, fhrr_bind(a, b, -1.0)):
        raise Wrong("bind_ subtracts the angles of b: that is unbinding; binding adds them")
    if _same_angles(out, ref + 1.0):
        raise Wrong("every angle is turned by pi (off by 1): add 1 before taking the remainder "
                    "modulo 2 and subtract it after")
    if close(out, torch.fmod(a + b + 1.0, 2.0) - 1.0):
        raise Wrong("sums below -1 stay below -1: wrap them too (torch.fmod and % in C keep "
                    "the sign of their input; torch.remainder's result lies in [0, 2))")
    if _same_angles(out, ref):
        expect(_in_range(out), "the angles are right but some lie outside [-1, 1]: wrap them "
               "back, (x + 1) mod 2 - 1")
        return
    _name_units(out, ref)
    raise Wrong("bind_ does not add the angles of a and b (modulo 2)")


# ---------------------------------------------------------------------------------------------
# Find the bug: unbinding.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch8-unbind", hints=[
    "Bind x with b by hand, angle by angle, then apply the function to the result and b: what "
    "comes out?",
    "Unbinding must turn every angle back by the angle of b: binding with the power p = -1, "
    "a - b wrapped to [-1, 1), not a + b.",
])
def check_unbind(unbind_):
    x, b = _wrapping_pair(1)
    bound = fhrr_bind(x, b)
    out = _symbol(call(unbind_, bound.clone(), b.clone(), what="unbind_"), x, "unbind_")
    if _same_angles(out, fhrr_bind(bound, b)):  # the starter: said as what the learner sees
        x, b = _wrapping_pair(11, n=1024)
        back = returned_tensor(call(unbind_, fhrr_bind(x, b), b.clone(), what="unbind_"), "")
        raise Wrong("unbind_(bind(x, b), b) is not x: for random symbols x and b of 1024 "
                    "angles, its similarity to x is "
                    f"{float(torch.cos(math.pi * (back - x)).mean()):.2f}, as for an unrelated "
                    "symbol")
    if _same_angles(out, -x):
        raise Wrong("unbind_(bind(x, b), b) gives -x, every angle of x negated: subtract b from "
                    "a, not a from b")
    if _same_angles(out, x + 1.0):
        raise Wrong("every angle is turned by pi (off by 1): add 1 before taking the remainder "
                    "modulo 2 and subtract it after")
    _name_units(out, x)
    expect(_same_angles(out, x), "unbind_(bind(x, b), b) does not give x back")
    if close(out, torch.fmod(bound - b + 1.0, 2.0) - 1.0):
        raise Wrong("differences below -1 stay below -1: wrap them too (torch.fmod and % in C "
                    "keep the sign of their input; torch.remainder's result lies in [0, 2))")
    expect(_in_range(out), "the angles are right but some lie outside [-1, 1]: wrap them back, "
           "(x + 1) mod 2 - 1")


# ---------------------------------------------------------------------------------------------
# Find the bug: bundling.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch8-bundle", hints=[
    "Bundle two copies of the same symbol: the bundle must be that symbol again. What does the "
    "function give?",
    "Eq. (8.3) adds phasors, not angles: the sum of cos(pi x) over the members is the real part, "
    "the sum of sin(pi x) the imaginary part, and torch.atan2(imaginary, real) / pi is the "
    "angle of the sum as a symbol.",
])
def check_bundle(bundle_):
    g = torch.Generator().manual_seed(2)
    symbols = random_symbols(5, 64, generator=g, dtype=F64)
    ref = fhrr_bundle(symbols, dim=0)
    out = _real(returned_tensor(call(bundle_, symbols.clone(), what="bundle_"), "bundle_"),
                "bundle_")
    expect(out.shape == ref.shape, f"bundle_ of (K, D) = {tuple(symbols.shape)} symbols must "
           f"return one symbol of shape (D,) = {tuple(ref.shape)}, got {tuple(out.shape)}: the "
           "members run along dim 0")
    if _same_angles(out, fhrr_wrap(symbols.sum(0))):  # the starter: what the learner sees
        x = random_symbols(1, 1024, generator=g, dtype=F64)
        twice = returned_tensor(call(bundle_, torch.cat([x, x]), what="bundle_"), "bundle_")
        similar = float(torch.cos(math.pi * (twice - x)).mean())
        raise Wrong("the bundle of two copies of one symbol (1024 angles) is not that symbol: "
                    f"its similarity to it is {similar:.2f}, as for an unrelated symbol")
    if close(out, symbols.mean(0)):
        raise Wrong("averaging the angles fails where the circle wraps: 0.9 and -0.9 are "
                    "neighbours (both near +-1), but their mean is 0")
    if close(out, ref * math.pi):
        raise Wrong("the angle of the sum is in radians: divide it by pi to get a symbol in "
                    "[-1, 1]")
    re, im = torch.cos(math.pi * symbols).sum(0), torch.sin(math.pi * symbols).sum(0)
    if _same_angles(out, torch.atan2(re, im) / math.pi, atol=1e-6):
        raise Wrong("torch.atan2 takes the imaginary part first, torch.atan2(im, re): the "
                    "arguments are swapped")
    if close(out, torch.atan(im / re) / math.pi, n=5) and not _same_angles(out, ref, atol=1e-6):
        raise Wrong("torch.atan(im / re) loses the quadrant: a sum with a negative real part "
                    "gets the angle of the opposite point; torch.atan2(im, re) keeps it")
    no_pi = torch.atan2(torch.sin(symbols).sum(0), torch.cos(symbols).sum(0)) / math.pi
    if _same_angles(out, no_pi, atol=1e-6) or close(out, no_pi * math.pi, n=5):
        raise Wrong("a symbol holds its angles divided by pi: its phasors are exp(i pi x), so "
                    "the cosine and the sine take pi x")
    expect(_same_angles(out, ref, atol=1e-6), "bundle_ does not give the angle of the sum of the "
           "phasors exp(i pi x) of the members")
    expect(_in_range(out), "some angles of the bundle lie outside [-1, 1]")


# ---------------------------------------------------------------------------------------------
# The bandwidth of the fractional power encoding.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch8-bandwidth", hints=[
    "The code of x is b^(beta x): every angle b_i is multiplied by beta x. Redo the integral of "
    "eq. (8.7) with beta (x - y) in place of x - y.",
    "Eq. (8.7) becomes a sinc of a scaled distance; torch.sinc(t) = sin(pi t) / (pi t) has "
    "the pi inside. Where does the sine first vanish?",
])
def check_bandwidth(kernel):
    d = torch.arange(-30, 31, dtype=F64) / 10  # d = 0 included
    nonzero = d != 0
    for beta in (0.5, 2.0, 1.0):
        no_pi = torch.ones_like(d)  # sin(beta d) / (beta d): the kernel with its pi forgotten
        no_pi[nonzero] = torch.sin(beta * d[nonzero]) / (beta * d[nonzero])
        out = returned_tensor(call(kernel, d.clone(), beta, what="kernel"), "kernel")
        expect(out.shape == d.shape, f"kernel must return one similarity per distance, shape "
               f"{tuple(d.shape)}, got {tuple(out.shape)}")
        bad = ~torch.isfinite(out)
        if bool(bad.any()):
            if bool(bad[d == 0].any()):
                if bool(torch.isfinite(out[nonzero]).all()) and close(
                        out[nonzero], no_pi[nonzero], n=4):
                    raise Wrong("kernel returns NaN at d = 0, where it must be 1, and elsewhere it "
                                "is sin(beta d) / (beta d), whose first zero is at pi / beta: the "
                                "similarity averages cos(pi beta d u), so the sine has a pi in it. "
                                "torch.sinc(t) = sin(pi t) / (pi t) includes both the pi and d = 0")
                raise Wrong("kernel returns NaN or infinity at d = 0, where it must be 1 (a code "
                            "is identical to itself), which torch.sinc handles")
            # a distance where sinc (of d or of beta d) is clearly negative, away from its zeros
            negative = bad & ((torch.sinc(d) < -0.05) | (torch.sinc(beta * d) < -0.05))
            if not bool(negative.any()):
                raise Wrong(f"kernel returns NaN or infinity at d = {d[bad][0].item():g} "
                            f"(beta = {beta:g})")
            raise Wrong(f"kernel returns NaN or infinity at d = {d[negative][0].item():g} "
                        f"(beta = {beta:g}), where sinc is negative: a root or a log of it? If "
                        "beta is your exponent, note that beta scales the distance, not the kernel's value")
        ref = torch.sinc(beta * d)
        if close(out, ref, n=4):
            continue
        if close(out, torch.sinc(d / beta), n=4):
            raise Wrong("the kernel widens as beta grows: with b^(beta x) the angles turn beta "
                        "times faster, so the kernel must narrow")
        if close(out, no_pi, n=4):
            raise Wrong("the first zero must be at d = 1/beta: the similarity averages "
                        "cos(pi beta d u), so the sine has a pi in it (torch.sinc includes it)")
        if bool(((out.double() - ref.double()).abs() < 1e-3).all()):
            raise Wrong(f"for beta = {beta} the kernel is close to the expected similarity (within "
                        "1e-3) but not equal to it to float64's precision: a numerical estimate, "
                        "such as a quadrature or an average over many random angles? The "
                        "expectation has a closed form: which function of beta d is it?")
        if bool(((out.double() - ref.double()).abs() < 0.05).all()):
            raise Wrong(f"for beta = {beta} the kernel is within 0.05 of the expected similarity, "
                        "but not equal to it: a measurement over random codes, whose similarities "
                        "scatter about the expectation? The expectation has a closed form: which "
                        "function of beta d is it?")
        raise Wrong(f"the kernel is wrong for beta = {beta}: it must be the expected similarity "
                    "of the codes of two numbers d apart")
    # the prediction agrees with a measurement
    g = torch.Generator().manual_seed(3)
    base = random_symbols(1, 4096, generator=g, dtype=F64)[0]
    x = torch.tensor([0.0, 0.3, 0.7], dtype=F64)
    codes = fractional_power(base, 2.0 * x)
    measured = torch.cos(math.pi * (codes[1:] - codes[0])).mean(-1)
    predicted = returned_tensor(call(kernel, x[1:].clone(), 2.0, what="kernel"), "kernel")
    expect(bool(((measured - predicted).abs() < 0.05).all()),
           "the kernel does not match the measured similarities of fractional power codes")


# ---------------------------------------------------------------------------------------------
# The capacity of a key-value record.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch8-capacity", hints=[
    "Write the condition as an inequality between the signal sqrt(pi / (4K)) and five times "
    "the spread of the noise, and square both sides.",
    "Squared, the condition is pi / (4K) > 25 / (2n): solve it for K, and return the bound "
    "itself or the largest whole K below it.",
])
def check_capacity(predicted_capacity):
    # n = 24 gives pi n / 50 = 1.51: rounding to the nearest whole number goes up there
    dims = (24, 64, 256, 1024, 4096)
    values = []
    for n in dims:
        k = call(predicted_capacity, n, what="predicted_capacity")
        if isinstance(k, torch.Tensor) and k.numel() == 1:
            k = k.item()
        elif isinstance(k, np.ndarray) and k.size == 1:
            k = k.item()  # a NumPy array holding one number
        expect(isinstance(k, numbers.Real) and not isinstance(k, bool),
               f"predicted_capacity must return a number, got {type(k).__name__}")
        values.append(float(k))
    bounds = [math.pi * n / 50 for n in dims]
    pairs = list(zip(dims, values, bounds, strict=True))

    def largest(k, bound):  # the bound itself (to float32's rounding) or its floor
        return abs(k - bound) <= 1e-6 * bound or k == math.floor(bound)

    if all(largest(k, bound) for _, k, bound in pairs):
        return
    if all(k == math.floor(bound) + 1 for _, k, bound in pairs):
        raise Wrong("each K is the whole number just above pi n / 50 (rounded up, or 1 added "
                    "after rounding down): that many pairs no longer meet the condition; round "
                    "down")
    if all(k == math.floor(bound) - 1 for _, k, bound in pairs):
        raise Wrong("each K is one below the largest whole number under pi n / 50: rounding down "
                    "once gives the largest K with K < pi n / 50; do not subtract 1 as well")
    if all(bound - 1 <= k <= bound + 1 for _, k, bound in pairs):  # the constant is right
        for n, k, bound in pairs:
            if k > bound * (1 + 1e-6):
                raise Wrong(f"K = {k:g} is just above pi n / 50 for n = {n}: round down, since "
                            "the signal must exceed five noise spreads")
        n, k, _ = next((n, k, bound) for n, k, bound in pairs if not largest(k, bound))
        raise Wrong(f"K = {k:g} for n = {n} meets the condition, but it is not the largest K "
                    "that does: give the bound itself, or round it down to a whole number")
    # the constant is wrong: judge it at the largest n, where rounding matters least
    if abs(values[-1] / (math.pi * dims[-1] / 100) - 1) < 0.05:
        raise Wrong("you used the spread 1/sqrt(n), that of random +-1 vectors or of the "
                    "difference of two scores; the statement counts five spreads of one noise "
                    "score, and FHRR similarities of random symbols spread 1/sqrt(2n)")
    large = values[2:]  # n = 256, 1024, 4096: quadrupling n should quadruple K
    ratios = [k2 / k1 if k1 else math.inf for k1, k2 in zip(large, large[1:], strict=False)]
    expect(all(abs(r - 4) < 0.5 for r in ratios), "the capacity must grow in proportion to n: "
           "quadrupling n quadruples the number of pairs")
    side = "large" if values[-1] > bounds[-1] else "small"
    raise Wrong(f"the constant is off: K is too {side} (n = {dims[-1]}); solve "
                "sqrt(pi / (4K)) = 5 / sqrt(2n) for K")


# ---------------------------------------------------------------------------------------------
# Position codes for the cross-attention classifier.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch8-order", hints=[
    "fractional_power(base, torch.arange(T)) gives the T codes b^0, ..., b^(T-1) at once, as a "
    "(T, D) tensor.",
    "bind broadcasts: bind(rows, codes) binds row t of every image with code t.",
])
def check_order(add_positions):
    g = torch.Generator().manual_seed(4)
    rows = random_symbols(3 * 7, 16, generator=g, dtype=F64).view(3, 7, 16)
    base = random_symbols(1, 16, generator=g, dtype=F64)[0]
    out = _symbol(call(add_positions, rows.clone(), base.clone(), what="add_positions"), rows,
                  "add_positions")
    codes = fractional_power(base, torch.arange(7, dtype=F64))  # (T, D)
    ref = fhrr_bind(rows, codes)
    if _same_angles(out, ref):
        expect(_in_range(out), "some angles lie outside [-1, 1]: wrap them back, (x + 1) mod 2 - 1")
        return
    if _same_angles(out, fhrr_bind(rows, fractional_power(base, torch.arange(1, 8, dtype=F64)))):
        raise Wrong("row t is bound with b^(t+1): number the rows from 0, so that the first row "
                    "gets b^0, the identity")
    if close(out, fhrr_bundle(torch.stack([rows, codes.expand_as(rows)], dim=-2)), n=2):
        raise Wrong("the rows are bundled with their codes: bind them instead, so that unbinding "
                    "recovers every row exactly")
    if _same_angles(out, fhrr_bind(rows, codes, -1.0)):
        raise Wrong("the rows are unbound from their codes: bind them (power +1)")
    raise Wrong("row t of every image must be bound with b^t, the fractional power code of t")


# ---------------------------------------------------------------------------------------------
# VSA attention from scratch.
# ---------------------------------------------------------------------------------------------


def _attention_variants(q, k, v, mask):
    """The typical slips of VSA attention, as (message, output) pairs."""
    def similarities(c):  # the mean of cos(c (q - k)); c = pi for symbols, 1 for radians
        cq, sq, ck, sk = torch.cos(c * q), torch.sin(c * q), torch.cos(c * k), torch.sin(c * k)
        return (cq @ ck.transpose(-2, -1) + sq @ sk.transpose(-2, -1)) / q.shape[-1]

    def parts(s, c=math.pi):  # real and imaginary parts of the s-weighted sum of exp(i c v)
        return s @ torch.cos(c * v), s @ torch.sin(c * v)

    def read(s):
        re, im = parts(s)
        return torch.atan2(im, re) / math.pi

    scores = similarities(math.pi)
    keep = mask if mask is not None else torch.ones_like(scores, dtype=torch.bool)
    masked = scores.masked_fill(~keep, 0.0)
    re, im = parts(masked)
    soft = torch.softmax(scores.masked_fill(~keep, -math.inf), -1).nan_to_num(0.0)
    # the angles taken as radians (the paper prints cos(a - b)): no pi in the scores, or nowhere
    radians = similarities(1.0).masked_fill(~keep, 0.0)
    re_r, im_r = parts(radians, 1.0)
    row_sums = masked.sum(-1, keepdim=True)
    large_fill = ("a masked key's score is a large negative number, as in softmax's mask; with no "
                  "softmax it outweighs every real score: a masked key's score is 0")
    no_pi = ("a symbol holds its angles divided by pi: the similarity is the mean of "
             "cos(pi (q - k)) and the values' phasors are exp(i pi v) (the paper prints cos(a - b), "
             "with its angles in radians)")
    return [
        ("the output is an angle in radians, in [-pi, pi]: divide torch.atan2's result by pi "
         "to get a symbol in [-1, 1]", torch.atan2(im, re)),
        ("torch.atan2 takes the imaginary part first, torch.atan2(im, re): the arguments are "
         "swapped", torch.atan2(re, im) / math.pi),
        ("there is no softmax in VSA attention: the raw similarities in [-1, 1] weigh the "
         "values", read(soft)),
        ("the values' phasors are exp(i pi v), not their conjugates: conjugate the keys only",
         -read(masked)),
        ("the scores weigh the angles of the values; they must weigh their phasors "
         "exp(i pi v), and the output is the angle of that sum", masked @ v),
        ("the mask is reversed: True means a query may look at that key", read(
            scores.masked_fill(keep, 0.0))),
        ("masked keys still count: set their scores to 0 before weighing the values",
         read(scores)),
        (no_pi, read(radians)),
        (no_pi, torch.atan2(im_r, re_r) / math.pi),
        (no_pi, torch.atan2(im_r, re_r)),
        *((large_fill, read(scores.masked_fill(~keep, fill))) for fill in (-1e4, -1e9, -1e30)),
        (large_fill, read(-(~keep).to(scores.dtype))),  # the limit of an ever larger fill
        ("each row of scores is divided by its sum, as linear attention normalises: where a row "
         "sums to a negative number that turns the output by pi. The angle ignores a positive "
         "factor, so no normaliser is needed",
         read(masked / torch.where(row_sums == 0, 1.0, row_sums))),  # an empty row stays 0
    ]


def _score_variants(q, k, mask):
    """The typical slips in VSA attention's scores, as (message, scores) pairs."""
    D = q.shape[-1]
    zq, zk = torch.polar(torch.ones_like(q), math.pi * q), torch.polar(torch.ones_like(k), math.pi * k)
    products = zq @ zk.conj().transpose(-2, -1)  # (B, Tq, Tk): D times the similarities
    keep = mask if mask is not None else torch.ones(products.shape, dtype=torch.bool)
    variants = [
        ("there is no 1/sqrt(d) scaling in VSA attention: the scores are the similarities "
         "themselves", products.real / D / math.sqrt(D)),
        ("the sum of the cosines is divided by sqrt(D), as softmax attention scales its dot "
         "products: the similarity is their mean, so divide by D", products.real / math.sqrt(D)),
        ("the scores are D times the similarities: the similarity is the mean of the cosines, "
         "so divide the sum by D", products.real),
        ("the keys' phasors must be conjugated: Re(zq zk^H) / D is the mean of cos(pi (q - k)); "
         "without the conjugate it is the mean of cos(pi (q + k))",
         (zq @ zk.transpose(-2, -1)).real / D),
        ("the similarity is the real part of the sum, not its absolute value: the absolute value "
         "forgets which way the phasors point, so opposite symbols would score 1",
         products.abs() / D),
    ]
    return [(message, s.masked_fill(~keep, 0.0)) for message, s in variants]


class _Sizes(TorchFunctionMode):
    """Records whether the code run inside it makes a tensor with an entry for every query, key
    and angle of one sequence or more, in any layout: a multiple of Tq Tk D entries. The
    exercise's sizes, Tq Tk D = 7 * 9 * 12 = 756, are chosen so that the tensors of a one-product
    answer are not such multiples: (B, Tq + Tk, D, 2) has 768 entries, (B, Tk, D, 2, 2) 864, and
    the scores, (B, Tq, Tk), 126."""

    def __init__(self, entries: int):
        super().__init__()
        self.entries, self.pairwise = entries, False  # entries: Tq Tk D

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            n = out.numel()
            if n >= self.entries and n % self.entries == 0:  # whatever its layout
                self.pairwise = True
        return out


def _same_output(output, ref, q, k, v, mask) -> bool:
    """Whether the learner's output symbols are VSA attention's, each angle judged by how well
    its weighted sum defines it: rounding moves the sum by about eps times the total weight, so
    the angle of a short sum is less certain (a query that may look at no key gets 0)."""
    if output.shape != ref.shape:
        return False
    _, scores = vsa_attention(q, k, v, mask=mask)
    total = scores.abs().sum(-1, keepdim=True)  # (B, Tq, 1)
    length = (scores.to(torch.complex128) @ torch.polar(torch.ones_like(v), math.pi * v)).abs()
    certainty = torch.where(total > 0, length / total.clamp_min(1e-300), 1.0)
    error = fhrr_wrap(output.to(F64) - ref.to(F64)).abs() * certainty
    return bool((error <= _atol(output, ref, 1e-9, n=k.shape[-2])).all())


@exercise("ex-ch8-attention", hints=[
    "Three steps: the scores are the pairwise similarities of queries and keys; masked scores "
    "become 0; the output is the angle of the value phasors weighted by the scores, divided by pi.",
    "With zq = torch.polar(torch.ones_like(q), math.pi * q), and zk likewise, the similarities of "
    "all pairs are the real part of zq @ zk.conj().transpose(-2, -1), divided by D: one matrix "
    "product, no (Tq, Tk, D) tensor.",
    "scores.to(zv.dtype) @ zv is the weighted sum of the value phasors, and torch.angle(...) / "
    "math.pi the output symbol. The angle of 0 is 0: a query that may look at no key gets the "
    "zero symbol.",
])
def check_attention(attention):
    g = torch.Generator().manual_seed(5)
    B, Tq, Tk, D, Dv = 2, 7, 9, 12, 8  # distinct, and Tq + Tk is not D
    q = random_symbols(B * Tq, D, generator=g, dtype=F64).view(B, Tq, D)
    k = random_symbols(B * Tk, D, generator=g, dtype=F64).view(B, Tk, D)
    v = random_symbols(B * Tk, Dv, generator=g, dtype=F64).view(B, Tk, Dv)
    mask = torch.rand(B, Tq, Tk, generator=g) > 0.3
    mask[0, 1] = False  # a query that may look at nothing
    mask[1, 2] = True
    for m in (None, mask):
        with _Sizes(Tq * Tk * D) as sizes:  # the method: no (B, Tq, Tk, D) tensor of angle differences
            out = call(attention, q.clone(), k.clone(), v.clone(), m, what="attention")
        expect(isinstance(out, (tuple, list)) and len(out) == 2,
               "attention must return the pair (output, scores)")
        output, scores = returned_tensor(out[0], "attention"), returned_tensor(out[1], "attention")
        expect(not scores.is_complex(), "the scores are complex: the similarity is the real part "
               "of the sum of zq times the conjugate of zk, divided by D")
        ref, ref_scores = vsa_attention(q, k, v, mask=m)
        expect(scores.shape == ref_scores.shape, f"the scores must have shape (B, Tq, Tk) = "
               f"{tuple(ref_scores.shape)}, got {tuple(scores.shape)}")
        expect(output.shape == ref.shape, f"the output must have shape (B, Tq, Dv) = "
               f"{tuple(ref.shape)}, got {tuple(output.shape)}")
        if not close(scores, ref_scores, n=D):
            for message, wrong in _score_variants(q, k, m):
                if close(scores, wrong, n=D):
                    raise Wrong(message)
        if not _same_output(output, ref, q, k, v, m):
            if torch.isnan(output).any() and torch.isinf(scores).any():
                raise Wrong("the output has NaN entries: a masked score of -inf (softmax's "
                            "mask) times a value phasor gives -inf + inf = NaN; there is no "
                            "softmax here, so a masked key's score is 0")
            expect(not torch.isnan(output).any(), "the output has NaN entries" + (
                ": a query that may look at no key gets the zero symbol (the angle of 0 is 0)"
                if m is not None else ""))
            for message, wrong in _attention_variants(q, k, v, m):
                if _same_output(wrong, ref, q, k, v, m):
                    continue  # without a mask, the mask's slips change nothing
                if _same_angles(output, wrong, atol=1e-9, n=Tk) or close(output, wrong, n=Tk):
                    raise Wrong(message)
            where = "with a mask" if m is not None else "without a mask"
            raise Wrong(f"the output differs from VSA attention {where}: each output symbol is "
                        "the angle of the score-weighted sum of the value phasors")
        expect(_in_range(output), "the output angles are right up to a whole turn, but some lie "
               "outside [-1, 1]: a symbol holds angles divided by pi in [-1, 1], as "
               "torch.angle(z) / pi gives them")
        expect(close(scores, ref_scores, n=D), "the scores are not the pairwise similarities of "
               "the queries and keys (with masked scores set to 0)")
        expect(not sizes.pairwise, "the values are right, but attention makes a "
               "tensor with an entry for every query, key and angle, (Tq, Tk, D) or more: "
               "compute all the similarities with one matrix product, as the exercise asks")
