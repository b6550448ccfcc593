"""Checks of chapter 9's exercises (losses: cross-entropy, perplexity, label smoothing)."""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F

from ..losses import cross_entropy
from .core import Wrong, call, close, exercise, expect, returned_tensor

F64 = torch.float64


def _number(out, what: str) -> float:
    """The learner's result as a float, or a clear complaint."""
    if isinstance(out, torch.Tensor) and out.numel() == 1:
        out = out.item()
    if not isinstance(out, numbers.Real) or isinstance(out, bool):
        raise Wrong(f"{what} must be a number, got {type(out).__name__}")
    return float(out)


# ---------------------------------------------------------------------------------------------
# A bigram baseline: add-one smoothed counts as logits.
# ---------------------------------------------------------------------------------------------


def _bigram_reference(ids: torch.Tensor, C: int, add: float = 1.0) -> torch.Tensor:
    pairs = torch.zeros(C, C, dtype=F64)
    pairs.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=F64), accumulate=True)
    pairs = pairs + add
    return torch.log(pairs / pairs.sum(1, keepdim=True))


@exercise("ex-ch9-bigram", hints=[
    "Count how often each symbol b follows each symbol a in a C x C table; row a, once "
    "normalised, is the distribution q(. | a) of the next symbol.",
    "Add one to every cell of the table before you normalise, so that no pair has probability "
    "0. Each row must sum to 1, and the function returns the logarithm of the table.",
    "pairs.index_put_((ids[:-1], ids[1:]), ones, accumulate=True) counts every pair at once.",
])
def check_bigram(fn):
    g = torch.Generator().manual_seed(0)
    C = 6
    ids = torch.randint(0, C - 1, (300,), generator=g)  # symbol C - 1 never occurs
    ids[50:60] = 2  # a run: the pair (2, 2) is frequent
    out = returned_tensor(call(fn, ids.clone(), C, what="bigram_logits"), "bigram_logits")
    expect(out.shape == (C, C), f"the table must have shape (num_classes, num_classes) = {(C, C)}, "
           f"got {tuple(out.shape)}")
    dtype = out.dtype if out.dtype in (torch.float32, F64) else F64
    out = out.to(dtype)
    ref = _bigram_reference(ids, C).to(dtype)  # compared at the learner's precision
    if close(out, ref):
        return
    if close(out, ref.T) or close(out, _bigram_reference(ids.flip(0), C).to(dtype)):
        raise Wrong("the table is transposed: row a, column b must hold log q(b | a), the "
                    "probability that b follows a")
    if bool(torch.isinf(out).any()) or bool(torch.isnan(out).any()):
        raise Wrong("some entries are -inf or nan: a pair that never occurs gets probability 0; "
                    "add one to every count before normalising")
    if bool((out >= 0).all()) and close(out.log(), ref):
        raise Wrong("the table holds probabilities: return their logarithms, the logits")
    expect(close(out.exp().sum(1), torch.ones(C, dtype=dtype)),
           "the rows do not sum to 1 after exp: normalise each row, the distribution of the "
           "symbol that follows a, not the whole table")
    raise Wrong("the probabilities differ from add-one smoothed bigram counts: count each pair "
                "(a, b) of neighbours once, add one to every cell, normalise each row")


# ---------------------------------------------------------------------------------------------
# Find the bug: a cross-entropy that overflows.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch9-overflow-bug", hints=[
    "Run the function on logits of size 100 in float32 and look at exp(100).",
    "log(exp(z_y) / sum_k exp(z_k)) = z_y - log sum_k exp(z_k): write the loss as a "
    "difference, never as the log of a ratio.",
    "Subtract m = max_k z_k from every logit first: lse(z) = m + log sum_k exp(z_k - m), and every "
    "exponent is then at most 0.",
])
def check_overflow(fn):
    g = torch.Generator().manual_seed(1)
    z = 3 * torch.randn(16, 7, generator=g)
    y = torch.randint(0, 7, (16,), generator=g)
    small = _number(call(fn, z.clone(), y.clone(), what="cross_entropy_"), "cross_entropy_")
    expect(abs(small - cross_entropy(z, y).item()) < 1e-4,
           "the loss is wrong already for ordinary logits (of size about 3): it must be the mean "
           "of lse(z) - z_y over the batch")
    big = z.clone()
    big[:, 0] += 200.0  # confident, and wrong wherever y != 0
    loss = _number(call(fn, big.clone(), y.clone(), what="cross_entropy_"), "cross_entropy_")
    if math.isnan(loss):
        raise Wrong("the loss is nan for logits near 200 in float32: exp(200) overflows to inf, "
                    "and inf / inf is nan; subtract the largest logit before exp")
    if math.isinf(loss):
        raise Wrong("the loss is inf for a confident wrong prediction: the probability of the "
                    "true class underflows to 0 before the log; compute log q_y as z_y - lse(z)")
    expect(abs(loss - cross_entropy(big, y).item()) < 1e-3 * max(1.0, abs(loss)),
           "for logits near 200 the loss is finite but wrong: it must equal lse(z) - z_y, "
           "averaged over the batch")
    huge = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4]])
    out = _number(call(fn, huge, torch.tensor([0, 0]), what="cross_entropy_"), "cross_entropy_")
    expect(math.isfinite(out) and abs(out - cross_entropy(huge, torch.tensor([0, 0])).item()) < 0.1,
           "logits of size 1e4 still break the loss: shift by the maximum inside the log-sum-exp")


# ---------------------------------------------------------------------------------------------
# Where label smoothing stops: the margin m*.
# ---------------------------------------------------------------------------------------------


def margin_star(C: int, eps: float) -> float:
    """The margin at which the smoothed loss is smallest, eq. (9.8)."""
    return math.log((1 - eps + eps / C) * C / eps)


@exercise("ex-ch9-margin", hints=[
    "With all wrong logits equal and the true one ahead by m, q_y = e^m / (e^m + C - 1). The "
    "gradient of the smoothed loss with respect to m is q_y - p'_y.",
    "Set q_y equal to the smoothed target of the true class, p'_y = 1 - eps + eps / C, and solve "
    "for e^m.",
    "1 - p'_y = eps (C - 1) / C: the factor C - 1 cancels.",
])
def check_margin(fn):
    for C, eps in ((10, 0.1), (10, 0.2), (2, 0.3), (1000, 0.05)):
        m = _number(call(fn, C, eps, what="m_star"), "m_star")
        ref = margin_star(C, eps)
        if abs(m - ref) < 1e-9 * max(1.0, abs(ref)):
            continue
        if abs(m - math.log((1 - eps) * (C - 1) / eps)) < 1e-9 * max(1.0, abs(ref)):
            raise Wrong("your smoothing spreads eps over the C - 1 wrong classes only; the book "
                        "(and PyTorch) spread it over all C classes, the true one included")
        if abs(m - math.log((1 - eps) * C / eps)) < 1e-9 * max(1.0, abs(ref)):
            raise Wrong("the true class keeps 1 - eps + eps / C of the target, not 1 - eps: it "
                        "gets its share of the uniform part too")
        if abs(m - ref) < 1e-3 * max(1.0, abs(ref)):
            raise Wrong(f"for C = {C}, eps = {eps} the margin is close but not exact: use the "
                        "closed form, not a numerical minimum")
        raise Wrong(f"for C = {C}, eps = {eps} the margin is wrong: solve q_y = p'_y for m")


# ---------------------------------------------------------------------------------------------
# Bounds on log-sum-exp: the gap to the largest logit.
# ---------------------------------------------------------------------------------------------

LSE_GAP = {"C": 10, "beta": 0.5}


@exercise("ex-ch9-lse-bounds", hints=[
    "Write lse(beta, z) = m + (1 / beta) log sum_k exp(beta (z_k - m)) with m = max z, and bound "
    "the sum: one of its terms is exactly 1, and every term is at most 1.",
    "The sum lies between 1 and C, so lse - max z lies between 0 and log(C) / beta. Which logits "
    "reach the upper end?",
])
def check_lse_gap(answer):
    C, beta = LSE_GAP["C"], LSE_GAP["beta"]
    gap = _number(answer, "answer")
    ref = math.log(C) / beta
    if abs(gap - ref) < 1e-6:
        return
    if abs(gap - math.log(C)) < 1e-6:
        raise Wrong("that is the bound at beta = 1: at inverse temperature beta the log is "
                    "divided by beta")
    if abs(gap - beta * math.log(C)) < 1e-6:
        raise Wrong("the log is divided by beta, not multiplied: a small beta (high temperature) "
                    "widens the gap")
    if abs(gap) < 1e-9:
        raise Wrong("0 is the smallest gap (one logit far above the others); the question asks "
                    "for the largest")
    raise Wrong("that is not the largest value of lse(beta, z) - max z: bound the sum of "
                "exp(beta (z_k - m)) from above")


# ---------------------------------------------------------------------------------------------
# Find the bug: label smoothing on the padding.
# ---------------------------------------------------------------------------------------------


def _smoothing_variants(z, y, eps, ignore_index):
    """The book's loss and its typical slips with padding, per (eps, ignore_index)."""
    logq = torch.log_softmax(z, -1)
    keep = y != ignore_index
    y0 = y.masked_fill(~keep, 0)
    nll = -logq.gather(-1, y0[..., None])[..., 0]
    uniform = -logq.mean(-1)
    masked = ((1 - eps) * nll + eps * uniform) * keep
    return {
        "smoothing on pads": ((1 - eps) * nll * keep + eps * uniform).sum() / keep.sum(),
        "mean over all": masked.sum() / keep.numel(),
        "no mask": ((1 - eps) * nll + eps * uniform).mean(),
    }


@exercise("ex-ch9-smoothing-bug", hints=[
    "Compare the function with cross_entropy(..., ignore_index=pad) twice: with "
    "label_smoothing=0 and with label_smoothing=0.1. Which term does the difference come from?",
    "The loss has two terms, the true-class term and the uniform term of label smoothing. Are "
    "both of them zero at a padded position?",
    "Multiply the whole per-position loss, both terms, by the mask of real tokens before you sum "
    "it, and divide by the number of real tokens.",
])
def check_smoothing_bug(fn):
    g = torch.Generator().manual_seed(2)
    B, T, C, pad = 4, 9, 6, 0
    z = 2 * torch.randn(B, T, C, generator=g, dtype=F64)
    y = torch.randint(1, C, (B, T), generator=g)
    for b, length in enumerate((9, 5, 2, 7)):
        y[b, length:] = pad
    for eps in (0.0, 0.1, 0.3):
        out = returned_tensor(call(fn, z.clone(), y.clone(), eps, pad, what="smoothed_loss"),
                      "smoothed_loss")
        expect(out.dim() == 0, f"the loss must be a scalar, got shape {tuple(out.shape)}")
        ref = cross_entropy(z, y, label_smoothing=eps, ignore_index=pad)
        if close(out, ref, n=B * T * C):
            continue
        for slip, wrong in _smoothing_variants(z, y, eps, pad).items():
            if close(out, wrong, n=B * T * C):
                raise Wrong({
                    "smoothing on pads": "the padded positions still add the label-smoothing "
                                         "term: mask the uniform part of the loss as well as "
                                         "the true-class part",
                    "mean over all": "the loss is divided by every position, pads included: "
                                     "divide by the number of real tokens",
                    "no mask": "the padded positions count in the loss: mask them out",
                }[slip])
        raise Wrong(f"with label_smoothing={eps} the loss differs from the masked, smoothed "
                    "cross-entropy")
    zg = z.clone().requires_grad_()
    out = returned_tensor(call(fn, zg, y.clone(), 0.1, pad, what="smoothed_loss"), "smoothed_loss")
    (grad,) = torch.autograd.grad(out, zg)
    expect(bool((grad[y == pad] == 0).all()),
           "the padded positions get a gradient: nothing may flow back from a pad")


# ---------------------------------------------------------------------------------------------
# Temperature scaling.
# ---------------------------------------------------------------------------------------------


def _temperature_task():
    g = torch.Generator().manual_seed(3)
    N, C = 3000, 5
    z = 1.5 * torch.randn(N, C, generator=g, dtype=F64)
    y = torch.multinomial(torch.softmax(z, -1), 1, generator=g)[:, 0]  # z is calibrated
    return 2.5 * z, y  # an over-confident network: logits 2.5 times too large


def _best_temperature(logits, y) -> float:
    """argmin_T NLL(logits / T), by golden-section search on log T."""
    lo, hi = math.log(0.05), math.log(20.0)
    phi = (math.sqrt(5) - 1) / 2
    f = lambda s: F.cross_entropy(logits / math.exp(s), y).item()  # noqa: E731
    a, b = hi - phi * (hi - lo), lo + phi * (hi - lo)
    fa, fb = f(a), f(b)
    for _ in range(80):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - phi * (hi - lo)
            fa = f(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + phi * (hi - lo)
            fb = f(b)
    return math.exp((lo + hi) / 2)


@exercise("ex-ch9-temperature", hints=[
    "Divide the logits by one number T > 0 and choose T to minimise the cross-entropy on the "
    "held-out logits and labels. Dividing keeps the order of the logits, so no prediction changes.",
    "Optimise s = log T instead of T, so that T = exp(s) stays positive; torch.optim.LBFGS on the "
    "one parameter s converges in a few steps.",
])
def check_temperature(fn):
    logits, y = _temperature_task()
    T = _number(call(fn, logits.clone(), y.clone(), what="fit_temperature"), "fit_temperature")
    ref = _best_temperature(logits, y)
    if abs(T - ref) < 0.01 * ref:
        return
    expect(T > 0, "the temperature must be positive: optimise log T, and return exp of it")
    if abs(T - 1 / ref) < 0.01 / ref:
        raise Wrong("your T is the inverse: the logits are divided by T, so an over-confident "
                    "network needs T > 1")
    if abs(T - math.log(ref)) < 0.01:
        raise Wrong("that is log T: return the temperature itself, exp of what you optimised")
    if abs(T - 1) < 1e-6:
        raise Wrong("T is still 1: the optimiser did not move; minimise the NLL of logits / T")
    raise Wrong("T does not minimise the cross-entropy of the held-out logits divided by T "
                "(the test network is over-confident: its best T is above 1)")


# ---------------------------------------------------------------------------------------------
# InfoNCE: cross-entropy over similarities.
# ---------------------------------------------------------------------------------------------


def info_nce_reference(x, y, temperature):
    """The symmetric InfoNCE (CLIP) loss: row i of x matches row i of y among all rows."""
    s = F.normalize(x, dim=-1) @ F.normalize(y, dim=-1).T / temperature  # (N, N)
    target = torch.arange(len(x))
    return (cross_entropy(s, target) + cross_entropy(s.T, target)) / 2


@exercise("ex-ch9-infonce", hints=[
    "It is cross-entropy with N classes: for row i of x, the classes are the N rows of y, and "
    "the right class is i. The logits are cosine similarities divided by the temperature.",
    "Normalise the rows of x and y to unit length, form the N x N matrix S = x y^T / temperature, "
    "and use torch.arange(N) as the targets.",
    "Symmetric: average the loss of matching x to y (the rows of S) and of matching y to x (the "
    "rows of S transposed).",
])
def check_infonce(fn):
    g = torch.Generator().manual_seed(4)
    N, D, tau = 8, 5, 0.2
    x = torch.randn(N, D, generator=g, dtype=F64)
    y = x + 0.7 * torch.randn(N, D, generator=g, dtype=F64)
    y[0] *= 3.0  # a long vector: only cosine similarity ignores its length
    out = returned_tensor(call(fn, x.clone(), y.clone(), tau, what="info_nce"), "info_nce")
    expect(out.numel() == 1, f"the loss must be a scalar, got shape {tuple(out.shape)}")
    out = out.reshape(()).to(F64)
    if close(out, info_nce_reference(x, y, tau), n=N * D):
        return
    s = F.normalize(x, dim=-1) @ F.normalize(y, dim=-1).T
    target = torch.arange(N)
    if close(out, cross_entropy(s / tau, target), n=N * D) or close(
            out, cross_entropy(s.T / tau, target), n=N * D):
        raise Wrong("only one direction: average the loss of matching x to y and of matching y "
                    "to x")
    raw = x @ y.T / tau
    if close(out, (cross_entropy(raw, target) + cross_entropy(raw.T, target)) / 2, n=N * D):
        raise Wrong("the similarities are plain dot products: normalise the rows to unit length "
                    "first (cosine similarity)")
    if close(out, (cross_entropy(s * tau, target) + cross_entropy(s.T * tau, target)) / 2,
             n=N * D):
        raise Wrong("the similarities are multiplied by the temperature: divide by it, so that a "
                    "small temperature sharpens the softmax")
    expect(float(out) >= 0, "a cross-entropy cannot be negative: check the sign")
    raise Wrong("the loss differs from the symmetric InfoNCE loss: cross-entropy over cosine "
                "similarities / temperature, target i for row i, averaged over both directions")

