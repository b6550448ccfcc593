"""Checks of chapter 9's exercises (losses: cross-entropy, perplexity, label smoothing)."""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np
import torch
import torch.nn.functional as F

from .. import losses as _losses
from ..losses import cross_entropy
from .core import (
    CallWatch,
    Wrong,
    agrees,
    as_tensor,
    call,
    close,
    exercise,
    expect,
    float32_work,
    number,
    returned_tensor,
)

F64 = torch.float64


def _expect_trained(run, reference, inputs: tuple[torch.Tensor, ...], what: str,
                    detached: str = "is part of the loss detached?") -> None:
    """A loss is for training: ``run(*inputs)``, the learner's loss at inputs that require
    gradients, must be a tensor autograd differentiates, with the gradients of ``reference``."""
    given = [t.clone().requires_grad_() for t in inputs]
    out = run(*given)
    expect(isinstance(out, torch.Tensor),
           f"the value is right, but {what} returns {type(out).__name__}: a loss is for "
           "training, so return the tensor, which backward() can differentiate")
    expect(out.requires_grad,
           f"the value is right, but {what} passes no gradient back (an .item(), float(), NumPy "
           "or torch.no_grad() inside?): a loss is for training, and training calls backward() "
           "on it")
    grads = torch.autograd.grad(out.sum(), given, allow_unused=True)
    mine = [t.clone().requires_grad_() for t in inputs]
    refs = torch.autograd.grad(reference(*mine), mine)
    for grad, ref, t in zip(grads, refs, inputs, strict=True):
        # judged at float32's precision: a float32 piece of a float64 loss is right
        expect(grad is not None and close(grad.float(), ref, n=t.numel()),
               f"the value is right but the gradient is not: {detached}")


# ---------------------------------------------------------------------------------------------
# A bigram baseline: add-one smoothed counts as logits.
# ---------------------------------------------------------------------------------------------


def _bigram_counts(ids: torch.Tensor, C: int) -> torch.Tensor:
    """How often each symbol b follows each symbol a: a (C, C) float64 table."""
    counts = torch.zeros(C, C, dtype=F64)
    counts.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=F64), accumulate=True)
    return counts


def _bigram_reference(ids: torch.Tensor, C: int, add: float = 1.0) -> torch.Tensor:
    pairs = _bigram_counts(ids, C) + add
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
    ids[-1] = (ids[0] + 1) % (C - 1)  # first and last differ: rows' and columns' totals differ
    out = returned_tensor(call(fn, ids.clone(), C, what="bigram_logits"), "bigram_logits")
    expect(out.shape == (C, C), f"the table must have shape (num_classes, num_classes) = {(C, C)}, "
           f"got {tuple(out.shape)}")
    ref = _bigram_reference(ids, C)
    if close(out, ref):  # at the precision of the learner's table (float32 is fine)
        return
    if close(out, ref.T) or close(out, _bigram_reference(ids.flip(0), C)):
        raise Wrong("the table is transposed: row a, column b must hold log q(b | a), the "
                    "probability that b follows a")
    if bool(torch.isinf(out).any()) or bool(torch.isnan(out).any()):
        raise Wrong("some entries are -inf or nan: a pair that never occurs gets probability 0; "
                    "add one to every count before normalising")
    if bool((out >= 0).all()) and close(out.log(), ref):
        raise Wrong("the table holds probabilities: return their logarithms, the logits")
    for base, name in ((2.0, "2"), (10.0, "10")):
        if close(out * math.log(base), ref):
            raise Wrong(f"the table holds logarithms to base {name}: the logits are natural "
                        "logarithms (torch.log), as cross_entropy's softmax exponentiates with e")
    seen = torch.zeros(C, C, dtype=F64)
    seen[ids[:-1], ids[1:]] = 1.0  # an assignment, not a count: a repeated pair counts once
    if close(out, torch.log((seen + 1) / (seen + 1).sum(1, keepdim=True))):
        raise Wrong("a pair that occurs several times is counted once: with indexing "
                    "t[a, b] += 1 and repeated pairs (a, b), only one of the additions lands; "
                    "accumulate the counts")
    counts = _bigram_counts(ids, C)
    if close(out, torch.log((counts + 1) / (counts.sum(1, keepdim=True) + 1))):
        raise Wrong("each row is divided by its count plus 1: the row's total must include the "
                    "one added to each of its C cells, count + C")
    n_seen = len(torch.unique(ids))
    if n_seen != C and close(out, torch.log((counts + 1) / (counts.sum(1, keepdim=True) + n_seen))):
        raise Wrong(f"each row is divided by its count plus {n_seen} (the symbols that occur, or "
                    f"C - 1): the one is added to all C = {C} cells of the row, the never-seen "
                    "symbols' included, so the total is count + C")
    if close(out, torch.log_softmax(counts + 1, dim=1)):
        raise Wrong("the counts (plus one or not) went through a softmax as if they were logits: a "
                    "softmax exponentiates them, so the probabilities grow as e^count; divide "
                    "each row by its total instead (or take the log of the counts plus one first)")
    if close(out, torch.log((counts + 1) / (counts.sum(0)[:, None] + C))):
        raise Wrong("each row is divided by the number of pairs that end in a (a column's total), "
                    "plus C: a row's total is the number of pairs that start with a, plus C")
    firsts = torch.bincount(ids, minlength=C).to(F64)[:, None]  # counts every symbol, the last too
    if close(out, torch.log((counts + 1) / (firsts + C))):
        raise Wrong("each row is divided by how often its symbol occurs, plus C: the last "
                    "symbol of the text starts no pair, so its row's total is one too large; a "
                    "row's total is the number of pairs that start with a, plus C")
    if close(out, torch.log((counts + 1) / (counts + 1).sum(0, keepdim=True))):
        raise Wrong("the columns are normalised: row a, the symbols that follow a, is the "
                    "distribution q(. | a), so each row must sum to 1")
    expect(close(out.exp().sum(1), torch.ones(C, dtype=F64)),
           "the rows do not sum to 1 after exp: normalise each row, the distribution of the "
           "symbol that follows a, not the whole table")
    raise Wrong("the probabilities differ from add-one smoothed bigram counts: count how often "
                "b follows a for every pair (a, b), add one to every cell, normalise each row")


# ---------------------------------------------------------------------------------------------
# Find the bug: a cross-entropy that overflows.
# ---------------------------------------------------------------------------------------------


#: what ex-ch9-overflow-bug's answer may not call: the finished losses the exercise rules out
_FINISHED_LOSSES = {"F.cross_entropy": F.cross_entropy, **{
    f"seqbook.losses.{name}": getattr(_losses, name) for name in _losses.__all__
    if callable(getattr(_losses, name))}}


@exercise("ex-ch9-overflow-bug", hints=[
    "Run the function on logits of size 100 in float32 and look at exp(100).",
    "log(exp(z_y) / sum_k exp(z_k)) = z_y - log sum_k exp(z_k): write the loss as a "
    "difference, never as the log of a ratio.",
    "Subtract m = max_k z_k from every logit first: lse(z) = m + log sum_k exp(z_k - m), and every "
    "exponent is then at most 0.",
])
def check_overflow(fn):
    def run(z, y) -> float:
        """The learner's loss, refused if it calls a finished cross-entropy."""
        with CallWatch(_FINISHED_LOSSES) as watch:
            out = call(fn, z, y, what="cross_entropy_")
        if watch.used:
            raise Wrong(f"cross_entropy_ calls {watch.used[0]}: the exercise asks for the fix by "
                        "hand, without seqbook.losses or F.cross_entropy")
        size = out.numel() if isinstance(out, torch.Tensor) else getattr(out, "size", 1)
        if isinstance(out, torch.Tensor | np.ndarray) and size != 1:
            raise Wrong(f"cross_entropy_ must return one number, the mean over the batch, got "
                        f"shape {tuple(out.shape)}")
        return number(out, "cross_entropy_", finite=False)  # nan is the bug's symptom

    g = torch.Generator().manual_seed(1)
    z = 3 * torch.randn(16, 7, generator=g)
    y = torch.randint(0, 7, (16,), generator=g)
    small = run(z.clone(), y.clone())
    expect(abs(small - cross_entropy(z, y).item()) < 1e-4,
           "the loss is wrong already for ordinary logits (of size about 3): it must be the mean "
           "of lse(z) - z_y over the batch")
    big = z.clone()
    big[:, 0] += 200.0  # confident, and wrong wherever y != 0
    loss = run(big.clone(), y.clone())
    if math.isnan(loss):  # the starter's symptom, said without its cure
        raise Wrong("the loss is nan for confident predictions (logits near 200, in float32), "
                    "while for ordinary logits it is right")
    sure = z.clone()
    sure[torch.arange(len(y)), y] += 200.0  # confident and right: no q_y near 0 to underflow
    if math.isinf(loss) and not math.isfinite(run(sure, y.clone())):
        raise Wrong("the loss is inf for logits near 200, even where the true class has them "
                    "and its probability is nearly 1: an exponent overflows (exp(200) is inf in "
                    "float32); shift by the maximum inside the log-sum-exp, so that no exponent "
                    "is above 0")
    if math.isinf(loss):
        raise Wrong("the loss is inf for logits near 200: the probability of the true class "
                    "underflows to 0 before the log, which a shift by the maximum does not "
                    "prevent (exp(-200) is 0 in float32): compute log q_y as z_y - lse(z), never "
                    "as the log of a probability")
    expect(abs(loss - cross_entropy(big, y).item()) < 1e-3 * max(1.0, abs(loss)),
           "for logits near 200 the loss is finite but wrong: it must equal lse(z) - z_y, "
           "averaged over the batch")
    huge = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4]])
    out = run(huge, torch.tensor([0, 0]))
    sure_huge = torch.tensor([[1e4, -1e4, 0.0], [1e4, 0.0, -1e4]])  # the true class on top
    if math.isinf(out) and not math.isfinite(run(sure_huge, torch.tensor([0, 0]))):
        raise Wrong("logits of size 1e4 give an infinite loss even where the true class has them: "
                    "exp(1e4) overflows, even in float64; shift by the maximum inside the "
                    "log-sum-exp, so that no exponent is above 0")
    if math.isinf(out):
        raise Wrong("logits of size 1e4 still give an infinite loss: the probability of the true "
                    "class, e^(-20000), underflows to 0 before the log, even in float64 (and a "
                    "softmax already shifts by the maximum): compute log q_y as z_y - lse(z), "
                    "never as the log of a probability")
    expect(math.isfinite(out) and abs(out - cross_entropy(huge, torch.tensor([0, 0])).item()) < 0.1,
           "logits of size 1e4 still break the loss: shift by the maximum inside the log-sum-exp")
    mixed = torch.tensor([[200.0, 0.0], [0.0, 1.0]])  # one confident row, one ordinary row
    out = run(mixed, torch.tensor([0, 1]))
    expect(math.isfinite(out) and abs(out - cross_entropy(mixed, torch.tensor([0, 1])).item()) < 1e-3,
           "with one row of logits near 200 and one of ordinary logits, the loss is wrong: shift "
           "each row by its own maximum, not by the maximum of the whole batch")

    def loss_of(logits):
        with CallWatch(_FINISHED_LOSSES) as watch:  # as run() above, without the number
            out = call(fn, logits, y.clone(), what="cross_entropy_")
        expect(not watch.used, "cross_entropy_ calls a finished loss")
        return out

    _expect_trained(loss_of, lambda logits: cross_entropy(logits, y), (big,), "cross_entropy_",
                    "the gradient of lse(z) - z_y is softmax(z) - onehot(y); a detached maximum "
                    "is fine (it cancels), a detached log-sum-exp is not")


# ---------------------------------------------------------------------------------------------
# Where smoothing towards a prior stops: the margin at the minimum.
# ---------------------------------------------------------------------------------------------


def _prior_target(prior: torch.Tensor, y: int, eps: float) -> torch.Tensor:
    """p'(k) = (1 - eps) delta_{k,y} + eps prior_k."""
    target = eps * prior
    target[y] += 1 - eps
    return target


def margin_prior(prior: torch.Tensor, y: int, eps: float) -> float:
    """z_y - max_{k != y} z_k where H(p', softmax(z)) is smallest: there q = p', so the logits
    are log p' up to one constant."""
    target = _prior_target(prior, y, eps)
    wrong = torch.cat([target[:y], target[y + 1:]])
    return math.log(target[y] / wrong.max())


def _margin_cases():
    p1 = torch.tensor([0.1, 0.35, 0.05, 0.2, 0.3], dtype=F64)
    p2 = torch.tensor([0.3, 0.1, 0.15, 0.4, 0.05], dtype=F64)
    return [
        (p1, 2, 0.1),  # the largest wrong class sits just below the true one (class 1)
        (p1, 0, 0.2),  # the first class is the true one; the largest wrong one follows it
        (p2, 4, 0.3),  # the last class is the true one; the largest wrong one precedes it
        (p1, 1, 0.05),  # the true class has the largest prior
        (torch.full((10,), 0.1, dtype=F64), 7, 0.1),  # uniform: eq. (9.8)
        (torch.tensor([0.7, 0.3], dtype=F64), 1, 0.25),  # two classes
        (p1, 2, 0.95),  # so much smoothing that a wrong logit ends up above the true one
    ]


@exercise("ex-ch9-margin", hints=[
    "The gradient of H(p', q) with respect to the logits is q - p', whatever the target p' "
    "is (eq. 9.6). Where is it zero?",
    "At the minimum q = p', so each logit is log p'(k) plus one constant shared by all, and "
    "z_y - z_k = log(p'(y) / p'(k)). The true class keeps 1 - eps + eps * prior[y]; a wrong "
    "class k gets eps * prior[k].",
    "The largest wrong logit belongs to the wrong class with the largest prior: leave the true "
    "class out when you take the maximum.",
])
def check_margin(fn):
    for prior, y, eps in _margin_cases():
        m = number(call(fn, prior.clone(), y, eps, what="m_star_prior"), "m_star_prior",
                   finite=False)
        ref = margin_prior(prior, y, eps)
        if agrees(m, ref, 5):
            continue
        _name_margin_slip(m, prior, y, eps)


def _name_margin_slip(m, prior, y, eps):
    """A :class:`Wrong` that names the slip behind the margin ``m`` (5 significant digits)."""
    C = len(prior)
    case = f"for prior {[round(p, 2) for p in prior.tolist()]}, y = {y}, eps = {eps}"
    target = _prior_target(prior, y, eps)
    wrong = torch.cat([target[:y], target[y + 1:]])
    uniform = math.log((1 - eps + eps / C) * C / eps)
    if agrees(m, uniform, 5):
        raise Wrong(f"{case} your margin is that of uniform smoothing, eq. (9.8): with a prior, "
                    "wrong class k gets eps * prior[k] of the target, not eps / C")
    if agrees(m, math.log((1 - eps) / wrong.max()), 5):
        raise Wrong(f"{case} the true class keeps 1 - eps + eps * prior[y] of the target, not "
                    "1 - eps: it gets its share of the prior too")
    if agrees(m, math.log(target[y] / target.max()), 5):
        raise Wrong(f"{case} the margin is 0 or less: the maximum includes the true class "
                    "itself; the margin is over the largest wrong logit")
    top = int(prior.argmax())  # the largest prior over all classes, y included
    if top == y and agrees(m, math.log(target[y] / (eps * prior[top])), 5):
        raise Wrong(f"{case} the largest wrong class is taken as the class with the largest "
                    "prior, but that is y itself here: take the largest prior among the other "
                    "classes")
    top_two = target.sort(descending=True).values[:2]
    if target[y] < wrong.max() and agrees(m, math.log(top_two[0] / top_two[1]), 5):
        raise Wrong(f"{case} the margin is the gap between the two largest logits, but here a "
                    "wrong class ends up above the true one: the margin is z_y minus the largest "
                    "wrong logit, negative in such a case")
    if agrees(m, math.log(target[y] / wrong.min()), 5):
        raise Wrong(f"{case} that is the margin over the smallest wrong logit; the question asks "
                    "for the largest one")
    if agrees(m, math.log(target[y] / (1 - target[y])) + math.log(C - 1), 5):
        raise Wrong(f"{case} that is the margin for equal wrong logits, log(q_y / (1 - q_y)) + "
                    "log(C - 1): with a prior the wrong logits differ, so compare z_y with the "
                    "largest of them, log p'(y) - max over k != y of log p'(k)")
    wrong_prior = torch.cat([prior[:y], prior[y + 1:]])
    if agrees(m, math.log(target[y] / wrong_prior.max()), 5):
        raise Wrong(f"{case} the largest wrong class gets eps * prior[k] of the target, not "
                    "prior[k]: the eps is missing below the fraction")
    if agrees(m, float(torch.log(target[y]) - torch.log(wrong).mean()), 5):
        raise Wrong(f"{case} that is the margin over the mean of the wrong logits; the question "
                    "asks for the largest one")
    right = math.log(target[y] / wrong.max())
    if right > 0 and agrees(m, -right, 5):
        raise Wrong(f"{case} your margin has the opposite sign: it is z_y minus the largest wrong "
                    "logit, not the other way round")
    if right < 0 and (agrees(m, -right, 5) or abs(float(m)) < 1e-9):
        raise Wrong(f"{case} a wrong class ends up above the true one, so the margin, z_y minus "
                    "the largest wrong logit, is negative here: keep its sign")
    raise Wrong(f"{case} the margin is wrong: at the minimum of the loss the gradient q - p' is "
                "zero")


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
    gap = number(answer, "answer", finite=False)
    ref = math.log(C) / beta
    if agrees(gap, ref, 3):  # to 3 significant digits, as the exercise asks
        return
    if agrees(gap, math.log(C), 3):
        raise Wrong("that is the bound at beta = 1: at inverse temperature beta the log is "
                    "divided by beta")
    if agrees(gap, beta * math.log(C), 3):
        raise Wrong("the log is divided by beta, not multiplied: a small beta (high temperature) "
                    "widens the gap")
    if agrees(gap, math.log2(C) / beta, 3) or agrees(gap, math.log10(C) / beta, 3):
        raise Wrong("the log is in another base: the log-sum-exp, and its bound, use the "
                    "natural log")
    if abs(gap) < 1e-9:
        raise Wrong("0 is the smallest gap (one logit far above the others); the question asks "
                    "for the largest")
    if agrees(gap, math.log(C - 1) / beta, 3):
        raise Wrong("one term of the sum is e^0 = 1 and the other C - 1 are at most 1: the sum "
                    "is at most C, not C - 1")
    if abs(gap - ref) <= 0.01 * ref:
        raise Wrong(f"close to the largest gap, but not to the 3 significant digits the "
                    f"exercise asks for ({gap:g}): round the exact value to 3 digits, rather "
                    "than cut it short")
    raise Wrong("that is not the largest value of lse(beta, z) - max z to 3 significant digits: "
                "bound the sum of exp(beta (z_k - m)) from above")


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
    others = (-logq.sum(-1) - nll) / (z.shape[-1] - 1)  # mean over the C - 1 wrong classes
    return {
        "smoothing on pads": ((1 - eps) * nll * keep + eps * uniform).sum() / keep.sum(),
        "mean over all": masked.sum() / keep.numel(),
        "no mask": ((1 - eps) * nll + eps * uniform).mean(),
        "per sequence": (masked.sum(-1) / keep.sum(-1)).mean(),
        "eps over wrong classes": (((1 - eps) * nll + eps * others) * keep).sum() / keep.sum(),
        "uniform summed": (((1 - eps) * nll - eps * logq.sum(-1)) * keep).sum() / keep.sum(),
        "true class 1 - eps": (((1 - eps) * nll + eps / z.shape[-1] * (-logq.sum(-1) - nll))
                               * keep).sum() / keep.sum(),
        "ids <= 0 as pads": ((1 - eps) * nll + eps * uniform).mul(y > 0).sum() / (y > 0).sum(),
    }


def _padded_batch(pad: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    B, T, C = 4, 9, 6
    z = 2 * torch.randn(B, T, C, generator=g, dtype=F64)
    # real targets: every class but the pad's own id, so with pad -100 class 0 is a real token
    # (an answer that takes "id <= 0" for padding, not ignore_index, is wrong there)
    y = torch.randint(1 if pad == 0 else 0, C, (B, T), generator=g)
    for b, length in enumerate((9, 5, 2, 7)):
        y[b, length:] = pad
    return z, y


@exercise("ex-ch9-smoothing-bug", hints=[
    "Compare the function with cross_entropy(..., ignore_index=pad) twice: with "
    "label_smoothing=0 and with label_smoothing=0.1. Which term does the difference come from?",
    "The loss has two terms, the true-class term and the uniform term of label smoothing. Are "
    "both of them zero at a padded position?",
    "Multiply the whole per-position loss, both terms, by the mask of real tokens before you sum "
    "it, and divide by the number of real tokens.",
])
def check_smoothing_bug(fn):
    # pad id 0 (a class id, as the chapter's vocabulary has it) and PyTorch's default -100
    for pad, seed in ((0, 2), (-100, 5)):
        z, y = _padded_batch(pad, seed)
        B, T, C = z.shape
        for eps in (0.0, 0.1, 0.3):
            with CallWatch(_FINISHED_LOSSES) as watch:
                try:
                    out = call(fn, z.clone(), y.clone(), eps, pad, what="smoothed_loss")
                except Wrong as err:
                    if pad >= 0:
                        raise
                    raise Wrong(f"with the padding id {pad} (PyTorch's default ignore_index) "
                                f"{err}. A pad is not a class id: replace the pads by a real id "
                                "(masked_fill) before one_hot, gather or indexing, and mask "
                                "their loss") from None
            if watch.used:
                raise Wrong(f"smoothed_loss calls {watch.used[0]}: the exercise asks for the fix "
                            "of the function by hand, without seqbook.losses or F.cross_entropy")
            out = as_tensor(out, "the loss of smoothed_loss")
            expect(out.numel() == 1, f"the loss must be a scalar, got shape {tuple(out.shape)}")
            ref = cross_entropy(z, y, label_smoothing=eps, ignore_index=pad)
            # judged at float32's precision: a float32 target (F.one_hot(y) * (1 - eps)) in a
            # float64 loss is right; the slips with the padding change the loss far more
            out = out.reshape(()).float()
            if close(out, ref, n=B * T * C):
                continue
            _name_smoothing_slip(out, z, y, eps, pad)
    z, y = _padded_batch(0, 2)
    _expect_trained(lambda logits: call(fn, logits, y.clone(), 0.1, 0, what="smoothed_loss"),
                    lambda logits: cross_entropy(logits, y, label_smoothing=0.1, ignore_index=0),
                    (z,), "smoothed_loss", "is part of the loss detached, or do the padded "
                    "positions get a gradient? Nothing may flow back from a pad")


def _name_smoothing_slip(out, z, y, eps, pad):
    """A :class:`Wrong` that names what the wrong loss does with the padding."""
    B, T, C = z.shape
    for slip, wrong in _smoothing_variants(z, y, eps, pad).items():
        if not close(out, wrong, n=B * T * C):
            continue
        if slip == "smoothing on pads":  # the starter's bug: its symptom, not its cure
            raise Wrong(f"with label_smoothing={eps} the loss on a padded batch differs from "
                        f"cross_entropy(..., label_smoothing={eps}, ignore_index=pad)")
        raise Wrong({
            "mean over all": "the loss is divided by every position, pads included: divide by "
                             "the number of real tokens",
            "no mask": "the padded positions count in the loss: mask them out",
            "per sequence": "each sequence's loss is averaged over its own tokens, then the "
                            "sequences are averaged: a short sequence then weighs as much as a "
                            "long one. Average over all real tokens of the batch at once",
            "eps over wrong classes": "eps is spread over the C - 1 wrong classes: PyTorch's "
                                      "label smoothing, and the book's, spread it over all C "
                                      "classes, the true one included (eps / C each)",
            "ids <= 0 as pads": f"the pads are the positions equal to the padding id ({pad}), "
                                "not the ids <= 0: with PyTorch's -100, class 0 is a real token",
            "uniform summed": "the uniform part is summed over the classes: it is eps / C per "
                              "class, so average -log q_k over the C classes, do not add them up",
            "true class 1 - eps": "the true class gets only 1 - eps, so the target sums to "
                                  "1 - eps / C: eps / C goes to every class, the true one "
                                  "included, and the true class keeps 1 - eps + eps / C",
        }[slip])
    raise Wrong(f"with label_smoothing={eps} and padding id {pad} the loss differs from the "
                "masked, smoothed cross-entropy")


# ---------------------------------------------------------------------------------------------
# Temperature scaling.
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _temperature_tasks():
    """Held-out logits of three networks, 1.7 and 2.9 times too confident and 0.6 times too
    little (scaled logits of a calibrated model, whose labels are drawn from its softmax), each
    with its best temperature. Cached: the learner gets copies."""
    tasks = []
    for seed, (N, C, factor) in enumerate(((300, 5, 1.7), (200, 7, 2.9), (300, 4, 0.6))):
        g = torch.Generator().manual_seed(30 + seed)
        z = 1.5 * torch.randn(N, C, generator=g, dtype=F64)
        y = torch.multinomial(torch.softmax(z, -1), 1, generator=g)[:, 0]  # z is calibrated
        tasks.append((factor * z, y, _best_temperature(factor * z.numpy(), y.numpy())))
    return tuple(tasks)


def _best_temperature(logits: np.ndarray, y: np.ndarray) -> float:
    """argmin_T NLL(logits / T), by golden-section search on log T (in NumPy: many small steps)."""
    true = logits[np.arange(len(y)), y]

    def f(s):
        z = logits / math.exp(s)
        top = z.max(1)
        lse = top + np.log(np.exp(z - top[:, None]).sum(1))
        return float((lse - true / math.exp(s)).mean())

    lo, hi = math.log(0.05), math.log(20.0)
    phi = (math.sqrt(5) - 1) / 2
    a, b = hi - phi * (hi - lo), lo + phi * (hi - lo)
    fa, fb = f(a), f(b)
    for _ in range(64):  # the bracket shrinks to 6e-14 of its width
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
    "held-out logits and labels. Before you run it: does dividing every logit of an image by "
    "the same T > 0 change which class has the largest?",
    "The NLL is convex in beta = 1 / T, and its derivative is the mean over the examples of "
    "E_q[z] - z_y, with q = softmax(beta z): it grows with beta, so you can find its zero by "
    "bisection. (torch.optim.LBFGS on s = log T works too, run until the loss stops changing: "
    "the check wants T to 3 significant digits.)",
])
def check_temperature(fn):
    tasks = _temperature_tasks()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a fit is many small steps: on a busy machine, one thread is
    try:  # far faster (the results are the same)
        found = [number(call(fn, logits.clone(), y.clone(), what="fit_temperature"),
                         "fit_temperature", finite=False) for logits, y, _ in tasks]
    finally:
        torch.set_num_threads(threads)
    for T, (_, _, ref) in zip(found, tasks, strict=True):
        if agrees(T, ref, 3):
            continue
        expect(not math.isnan(T), "fit_temperature returns NaN: the fit diverged (a step too "
               "large, or T passed through 0); optimise log T, or bound the search for T")
        expect(T > 0, "the temperature must be positive: a T <= 0 flips or breaks the softmax")
        if T == 1:
            raise Wrong("T is still 1: the optimiser did not move; minimise the NLL of logits / T")
        if len(set(found)) == 1:
            raise Wrong("fit_temperature returns the same T for three networks that need "
                        "different ones: fit T to the logits and labels it is given")
        if agrees(T, 1 / ref, 3):
            raise Wrong("your T is the inverse: the logits are divided by T (an over-confident "
                        "network needs T > 1)")
        if agrees(T, math.log(ref), 3):
            raise Wrong("that is log T: return the temperature itself, exp of what you optimised")
        if abs(T - float(f"{ref:.2g}")) < 1e-9:  # the 2-digit rounding of the best T
            raise Wrong(f"T = {T:.4g} is right to 2 significant digits only: the check wants 3 "
                        "(do not round it so far, and a grid must be finer than that)")
        if all(abs(t / r - 1) < 0.03 for t, (_, _, r) in zip(found, tasks, strict=True)):
            raise Wrong("T is within 3 % of the best temperature, but not to 3 significant "
                        "digits: the search stopped short of the minimum (an optimiser stopped "
                        "early, or a grid too coarse); run it until the loss stops changing, or "
                        "bisect on the derivative")
        more = "above" if ref > 1 else "below"
        if min(1, ref) < T < max(1, ref):
            raise Wrong(f"T = {T:.4g} lies between 1 and this network's best temperature, which "
                        f"is {more} 1: the search stopped before the minimum of the NLL (an "
                        "optimiser with a small step or few iterations does, and so does a coarse "
                        "grid; run it until the loss stops changing, or bisect on the "
                        "derivative), or it minimises something else than the NLL")
        raise Wrong(f"T does not minimise the cross-entropy of the held-out logits divided by T "
                    f"to 3 significant digits (this network's best T is {more} 1)")


# ---------------------------------------------------------------------------------------------
# Class weights and the focal loss.
# ---------------------------------------------------------------------------------------------


def weighted_focal_reference(logits, target, alpha, gamma):
    """Lin et al.'s alpha-balanced focal loss, divided by the sum of the examples' weights."""
    logq_y = torch.log_softmax(logits, -1).gather(-1, target[:, None])[:, 0]  # (N,)
    weight = alpha[target]  # (N,)
    return -(weight * (1 - logq_y.exp()) ** gamma * logq_y).sum() / weight.sum()


def _name_focal_slip(out, logits, target, alpha, gamma) -> None:
    """Raise Wrong naming the learner's slip, if it is one of the usual ones."""
    n = logits.numel()
    logq = torch.log_softmax(logits, -1)
    logq_y = logq.gather(-1, target[:, None])[:, 0]
    weight = alpha[target]
    factor = (1 - logq_y.exp()) ** gamma

    def weighted(w, f, divisor):
        return -(w * f * logq_y).sum() / divisor

    mean_ce = weighted(weight, 1, weight.sum())  # the class-weighted cross-entropy
    if close(out, weighted(weight, factor, len(target)), n=n):
        raise Wrong("the weighted sum is divided by the number of examples: divide it by the sum "
                    "of their weights alpha[target], as F.cross_entropy(..., weight=alpha) does")
    if close(out, weighted(weight, factor, alpha.sum()), n=n):
        raise Wrong("the weighted sum is divided by alpha.sum(), the sum of the C class weights: "
                    "divide it by the sum of the examples' weights alpha[target], one term per "
                    "example, as F.cross_entropy(..., weight=alpha) does")
    if close(out, weighted(1, factor, len(target)), n=n):
        raise Wrong("the class weights alpha are not applied: weigh each example's loss by "
                    "alpha[y], the weight of its true class")
    if close(out, weighted(weight, factor, (weight * factor).sum()), n=n):
        raise Wrong("the divisor holds the focal factors too: divide by the sum of the weights "
                    "alpha[target] alone, so that gamma = 0 gives F.cross_entropy with weight=alpha")
    predicted = alpha[logits.argmax(-1)]
    if close(out, weighted(predicted, factor, predicted.sum()), n=n):
        raise Wrong("alpha is taken at the predicted class: use the weight of the true class, "
                    "alpha[target]")
    if gamma != 0 and close(out, mean_ce, n=n):
        raise Wrong("the focal factor (1 - q_y)^gamma is missing: this is the weighted "
                    "cross-entropy, right only at gamma = 0")
    largest = (1 - logq.exp().amax(-1)) ** gamma
    if gamma != 0 and close(out, weighted(weight, largest, weight.sum()), n=n):
        raise Wrong("(1 - q)^gamma uses the largest probability: use q_y, the probability of the "
                    "true class")
    weighted_q = (weight * logq_y).exp()  # exp(-alpha_y CE) = q_y^alpha_y
    if close(out, weighted(weight, (1 - weighted_q) ** gamma, len(target)), n=n):
        # the focal loss most often copied: ce = F.cross_entropy(..., weight=alpha,
        # reduction='none'); pt = exp(-ce); ((1 - pt)**gamma * ce).mean()
        raise Wrong("q_y is read off the weighted cross-entropy (exp(-alpha_y CE) is q_y to the "
                    "power alpha_y), and the sum is divided by the number of examples: take q_y "
                    "from the unweighted loss (or from the softmax), and divide by the sum of "
                    "alpha[target]")
    if close(out, weighted(weight, (1 - weighted_q) ** gamma, weight.sum()), n=n):
        raise Wrong("q_y is read off the weighted cross-entropy: exp(-alpha_y CE) is q_y to the "
                    "power alpha_y; take q_y from the unweighted loss (or from the softmax)")
    if any(close(out, weighted(weight**2, factor, d), n=n)
           for d in (weight.sum(), (weight**2).sum(), len(target))):
        raise Wrong("alpha is applied twice: F.cross_entropy(..., weight=alpha, "
                    "reduction='none') has already multiplied each example's loss by alpha[y]; "
                    "weigh it by alpha[target] once")
    if gamma != 0 and any(  # one q for the whole batch, from a mean loss
            close(out, (1 - torch.exp(-ce)) ** gamma * mean_ce, n=n)
            for ce in (mean_ce, weighted(1, 1, len(target)))):
        raise Wrong("the focal factor is computed once, from the batch's mean loss: each "
                    "example has its own factor (1 - q_y)^gamma, from its own q_y (take the "
                    "losses with reduction='none')")
    q_y = logq_y.exp()
    for eps in (1e-12, 1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2):
        if close(out, -(weight * (1 - q_y) ** gamma * torch.log(q_y + eps)).sum() / weight.sum(),
                 n=n):
            raise Wrong(f"that is the loss with log(q_y + {eps:g}): a small constant inside the "
                        "log changes the loss; take log q_y from log_softmax, which needs none")
    z_y = logits.gather(-1, target[:, None])[:, 0]
    if any(close(out, -(weight * f * z_y).sum() / weight.sum(), n=n) for f in (1, factor)):
        raise Wrong("the logits are used as log-probabilities (F.nll_loss expects "
                    "log_softmax(logits)): log q_y is the log-softmax of the true class")
    expect(float(out) >= 0, "a focal loss cannot be negative: check the sign of log q_y (and "
           "if you wrote Lin et al.'s binary form, alpha for the true class and 1 - alpha for the "
           "others, the exercise asks for the softmax form -alpha_y (1 - q_y)^gamma log q_y, with "
           "the weight of the true class alone)")
    raise Wrong(f"at gamma = {gamma:g} the loss differs from the class-weighted focal loss "
                "-alpha_y (1 - q_y)^gamma log q_y, summed and divided by the sum of alpha[target]")


@exercise("ex-ch9-focal-weights", hints=[
    "For each example take q_y, the softmax probability of its true class, and its weight "
    "alpha[y]; its loss is -alpha[y] (1 - q_y)^gamma log q_y.",
    "F.cross_entropy(logits, target, weight=alpha) divides the weighted sum by the sum of the "
    "weights alpha[target], not by N: do the same, and gamma = 0 gives exactly its value.",
])
def check_focal_weights(fn):
    g = torch.Generator().manual_seed(9)
    N, C = 40, 5
    logits = 2 * torch.randn(N, C, generator=g, dtype=F64)
    target = torch.randint(C, (N,), generator=g)
    alpha = 0.25 + 2 * torch.rand(C, generator=g, dtype=F64)  # unequal class weights
    for gamma in (2.0, 0.0, 0.5):
        out = as_tensor(call(fn, logits.clone(), target.clone(), alpha.clone(), gamma,
                             what="weighted_focal_loss"), "the loss of weighted_focal_loss")
        expect(out.numel() == 1, f"the loss must be a scalar, got shape {tuple(out.shape)}")
        out = out.reshape(())  # compared at its own precision: float32 is fine
        if not close(out, weighted_focal_reference(logits, target, alpha, gamma), n=N * C):
            _name_focal_slip(out, logits, target, alpha, gamma)
    # a loss is for training: its gradient must be the loss's too
    z = logits.clone().requires_grad_()
    out = call(fn, z, target.clone(), alpha.clone(), 2.0, what="weighted_focal_loss")
    expect(isinstance(out, torch.Tensor) and out.requires_grad,
           "the value is right, but the loss must be a tensor that autograd can differentiate "
           "(no .item(), float() or torch.no_grad()): training calls backward() on it")
    (grad,) = torch.autograd.grad(out.sum(), z)
    ref_z = logits.clone().requires_grad_()
    (ref,) = torch.autograd.grad(weighted_focal_reference(ref_z, target, alpha, 2.0), ref_z)
    expect(close(grad.to(out.dtype), ref, n=N * C),  # judged at the loss's precision
           "the value is right but the gradient is not: is part of the loss detached, such as "
           "the focal factor (1 - q_y)^gamma? Its gradient belongs to the loss")
    # confidently wrong rows in float32: a true class 200 below the largest logit
    far = 2 * torch.randn(N, C, generator=g)
    far[:4] = 0.0
    far[torch.arange(4), target[:4]] = -200.0
    out = as_tensor(call(fn, far.clone(), target.clone(), alpha.float(), 2.0,
                         what="weighted_focal_loss"), "the loss of weighted_focal_loss")
    ref = weighted_focal_reference(far.double(), target, alpha, 2.0)
    expect(bool(torch.isfinite(out).all()) and close(out.reshape(()), ref.float(), n=N * C),
           f"right on ordinary logits, but for float32 logits where the true class lies 200 below "
           f"the largest (a confidently wrong example) the loss is {float(out.reshape(-1)[0]):.6g} "
           f"against {float(ref):.6g}: q_y underflows to 0 before the log (a clamp or an eps keeps "
           "the loss finite, but wrong); take log q_y from log_softmax, and q_y as its exp")


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
    out = as_tensor(call(fn, x.clone(), y.clone(), tau, what="info_nce"), "the loss of info_nce")
    expect(out.numel() == 1, f"the loss must be a scalar, got shape {tuple(out.shape)}")
    out = out.reshape(())  # compared at its own precision: float32 is fine
    if close(out, info_nce_reference(x, y, tau), n=N * D):
        _expect_trained(lambda a, b: call(fn, a, b, tau, what="info_nce"),
                        lambda a, b: info_nce_reference(a, b, tau), (x, y), "info_nce",
                        "is part of the loss detached, such as the norms of the rows?")
        # CLIP's temperature: its learned logit scale is capped at 100, tau = 0.01, in float32
        x32 = torch.randn(N, D, generator=g)
        y32 = x32 + 2 * torch.randn(N, D, generator=g)  # a loss of order 1 to 10
        out = as_tensor(call(fn, x32.clone(), y32.clone(), 0.01, what="info_nce"),
                        "the loss of info_nce")
        ref = info_nce_reference(x32.double(), y32.double(), 0.01)
        expect(bool(torch.isfinite(out).all()) and close(out.reshape(()), ref.float(), n=N * D),
               f"right at temperature {tau}, but at 0.01 (CLIP's, whose learned scale is capped at "
               f"100) in float32 the loss is {float(out.reshape(-1)[0]):.4g} against "
               f"{float(ref):.4g}: exp of similarities / 0.01 overflows float32; use "
               "cross_entropy or logsumexp, which shift by the largest logit first")
        return
    s = F.normalize(x, dim=-1) @ F.normalize(y, dim=-1).T
    target = torch.arange(N)
    if close(out, cross_entropy(s / tau, target), n=N * D) or close(
            out, cross_entropy(s.T / tau, target), n=N * D):
        raise Wrong("only one direction: average the loss of matching x to y and of matching y "
                    "to x")
    if close(out, 2 * info_nce_reference(x, y, tau), n=N * D):
        raise Wrong("the two directions are added: average them (divide their sum by 2), so that "
                    "the loss stays on the scale of one cross-entropy")
    if any(close(out, k * N * info_nce_reference(x, y, tau), n=N * D) for k in (1, 2)):
        raise Wrong("the losses of the rows are summed: average them over the N pairs "
                    "(reduction='mean', cross_entropy's default), so that the loss does not grow "
                    "with the batch")
    raw = x @ y.T / tau
    if close(out, (cross_entropy(raw, target) + cross_entropy(raw.T, target)) / 2, n=N * D):
        raise Wrong("the similarities are plain dot products: normalise the rows to unit length "
                    "first (cosine similarity)")
    for one_side in (F.normalize(x, dim=-1) @ y.T, x @ F.normalize(y, dim=-1).T):
        if close(out, (cross_entropy(one_side / tau, target)
                       + cross_entropy(one_side.T / tau, target)) / 2, n=N * D):
            raise Wrong("only one of x and y is normalised: divide the rows of both by their "
                        "lengths, so that every similarity is a cosine")
    for wrong_norm in (F.normalize(x, dim=0) @ F.normalize(y, dim=0).T,
                       x @ y.T / (x.norm() * y.norm())):
        if close(out, (cross_entropy(wrong_norm / tau, target)
                       + cross_entropy(wrong_norm.T / tau, target)) / 2, n=N * D):
            raise Wrong("the vectors are not normalised row by row: each row of x and of y "
                        "is one vector, divided by its own length (dim=-1)")
    if close(out, (cross_entropy(s * tau, target) + cross_entropy(s.T * tau, target)) / 2,
             n=N * D):
        raise Wrong("the similarities are multiplied by the temperature: divide by it, so that a "
                    "small temperature sharpens the softmax")
    eye = torch.eye(N, dtype=torch.bool)
    left_out = [(torch.logsumexp((m / tau).masked_fill(eye, -math.inf), -1) - m.diag() / tau)
                .mean() for m in (s, s.T)]
    if close(out, (left_out[0] + left_out[1]) / 2, n=N * D):
        raise Wrong("the matching pair is left out of each softmax's denominator: row i is a "
                    "classification among all N candidates, the match included, as in "
                    "cross-entropy")
    both = torch.cat([F.normalize(x, dim=-1), F.normalize(y, dim=-1)])  # (2N, D)
    sim = (both @ both.T / tau).masked_fill(torch.eye(2 * N, dtype=torch.bool), -math.inf)
    if close(out, cross_entropy(sim, torch.arange(2 * N).roll(N)), n=N * D):
        raise Wrong("that is SimCLR's NT-Xent, which also counts the other views of x (and of y) "
                    "as negatives: the exercise asks for CLIP's form, where row i of x is "
                    "compared with the N rows of y only, and the other way round")
    signs = 2 * torch.eye(N, dtype=F64) - 1  # +1 for the matching pairs, -1 for the others
    if any(close(out, -F.logsigmoid(signs * logits).sum() / divisor, n=N * D)
           for logits in (s / tau, s, s * tau) for divisor in (N * N, N, 1)):
        raise Wrong("that is SigLIP's pairwise sigmoid loss, one binary question per pair: "
                    "InfoNCE is a softmax over the N candidates of each row, a cross-entropy "
                    "with target i for row i, in both directions")
    if any(close(out, -(m.diag() / t).mean(), n=N * D) for m in (s, raw) for t in (tau, 1)):
        raise Wrong("only the matching pairs are scored: each row is a cross-entropy over all N "
                    "candidates, the log-sum-exp of the row's logits minus the match's")
    expect(float(out) >= 0, "a cross-entropy cannot be negative: check the sign")
    raise Wrong("the loss differs from the symmetric InfoNCE loss: cross-entropy over cosine "
                "similarities / temperature, target i for row i, averaged over both directions")



# ---------------------------------------------------------------------------------------------
# DPO on sequences: the log-probability of a response, and the loss of a preference pair.
# ---------------------------------------------------------------------------------------------


def _token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """(B, T - 1): log q(ids[:, t] | ids[:, :t]) for t >= 1, read from the logits at t - 1."""
    return torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def response_logprob_reference(logits, ids, mask):
    """The summed log-probability of each row's response tokens (mask True), shape (B,)."""
    return (_token_logprobs(logits, ids) * mask[:, 1:]).sum(1)


def dpo_loss_reference(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    """Eq. (9.22), averaged over the pairs."""
    logit = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))
    return -F.logsigmoid(logit).mean()


def _dpo_batch(seed: int, B: int, T: int, V: int, dtype=F64):
    """Logits, ids and a response mask: a prompt of 1 to T/2 tokens, then the response, then
    padding (0 to 3 positions) at the end of some rows."""
    g = torch.Generator().manual_seed(seed)
    logits = 2 * torch.randn(B, T, V, generator=g, dtype=dtype)
    ids = torch.randint(0, V, (B, T), generator=g)
    pos = torch.arange(T)
    start = torch.randint(1, T // 2 + 1, (B,), generator=g)  # the response's first position
    end = T - torch.randint(0, 4, (B,), generator=g)  # padding from here on
    mask = (pos >= start[:, None]) & (pos < end[:, None])  # (B, T)
    return logits, ids, mask


def _name_logprob_slip(out, logits, ids, mask) -> None:
    """Raise a :class:`Wrong` naming the slip ``out`` makes, if it is one of the known ones."""
    logq = torch.log_softmax(logits, -1)
    same_pos = logq.gather(-1, ids[..., None]).squeeze(-1)  # (B, T): no shift
    shifted = _token_logprobs(logits, ids)  # (B, T - 1)
    raw = logits[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    back = logq[:, 1:].gather(-1, ids[:, :-1, None]).squeeze(-1)  # shifted the wrong way
    slips = [
        ((same_pos * mask).sum(1), "the logits at position t predict the token at t + 1: score "
         "ids[:, 1:] with logits[:, :-1], not each token with its own position's logits"),
        ((back * mask[:, :-1]).sum(1), "the shift goes the wrong way: the logits at position t "
         "predict the token at t + 1, so score ids[:, 1:] with logits[:, :-1]"),
        ((back * mask[:, 1:]).sum(1), "the shift goes the wrong way: the logits at position t "
         "predict the token at t + 1, so score ids[:, 1:] with logits[:, :-1]"),
        ((shifted * mask[:, :-1]).sum(1), "the mask is shifted with the logits: mask[:, t] marks "
         "token t, so it goes with the tokens scored, ids[:, 1:], that is mask[:, 1:]"),
        (shifted.sum(1), "every token is counted: only the response's tokens (mask True) belong to "
         "the response, not the prompt or the padding"),
        ((shifted * mask[:, 1:]).sum(1) / mask[:, 1:].sum(1), "the log-probabilities are "
         "averaged: log pi(y) is the sum over the response's tokens (the log of a product)"),
        ((raw * mask[:, 1:]).sum(1), "these are logits, not log-probabilities: take log_softmax "
         "over the vocabulary first"),
        (-(shifted * mask[:, 1:]).sum(1), "the sign is flipped: a log-probability is <= 0"),
        ((torch.log_softmax(logits[:, :-1], 1).gather(-1, ids[:, 1:, None]).squeeze(-1)
          * mask[:, 1:]).sum(1), "the softmax runs over the positions (dim 1): the "
         "probabilities of a token are over the vocabulary, the last dimension"),
        (shifted.mean(1), "the log-probabilities of every position are averaged: log pi(y) is "
         "the sum over the response's tokens only"),
    ]
    for value, message in slips:
        if close(out, value, n=ids.shape[1]):
            raise Wrong(message)


def _logprob_verdict(response_logprob) -> None:
    for seed, (B, T, V) in enumerate([(4, 12, 7), (1, 9, 5), (3, 20, 11)]):
        logits, ids, mask = _dpo_batch(seed, B, T, V)
        given = logits.clone().requires_grad_()  # the policy is trained through the answer
        out = returned_tensor(call(response_logprob, given, ids.clone(), mask.clone(),
                                   what="response_logprob"), "response_logprob")
        expect(tuple(out.shape) == (B,), f"response_logprob must return one number per row, shape "
               f"({B},), got {tuple(out.shape)}")
        if not close(out.detach(), response_logprob_reference(logits, ids, mask), n=T):
            float32_work(out.detach(), response_logprob_reference(logits, ids, mask),
                         "response_logprob", n=T)
            _name_logprob_slip(out.detach(), logits, ids, mask)
            raise Wrong("response_logprob differs from the sum, over the response's tokens, of "
                        "each token's log-probability under the logits of the position before it")
        expect(out.requires_grad, "response_logprob passes no gradient to the logits (an .item(), "
               "torch.no_grad or a tensor made anew?): keep the computation in torch, on the logits "
               "it is given (the policy is trained through it)")
        weights = torch.linspace(0.5, 1.5, B, dtype=F64)
        (got,) = torch.autograd.grad((out * weights.to(out.dtype)).sum(), given)
        ref_logits = logits.clone().requires_grad_()
        (want,) = torch.autograd.grad((response_logprob_reference(ref_logits, ids, mask)
                                       * weights).sum(), ref_logits)
        expect(close(got.to(out.dtype), want, n=V), "response_logprob has the right value but "
               "not the right gradient with respect to the logits (is part of it detached?)")
    # a long response: 200 to 400 tokens, a probability far below the smallest float64
    _extreme_case(response_logprob, _dpo_batch(7, 2, 402, 50), "a long response gets -inf: its "
                  "probability (a product of hundreds of probabilities) underflows to 0; add "
                  "log-probabilities instead of multiplying probabilities", "on a long response "
                  "(hundreds of tokens)")
    # a response token 800 below the largest logit of its position: exp underflows in float64
    logits, ids, mask = _dpo_batch(8, 2, 12, 7)
    for b in range(2):
        t = int(mask[b, 1:].nonzero()[0]) + 1  # the first response token of row b
        logits[b, t - 1, ids[b, t]] = logits[b, t - 1].max() - 800.0
    _extreme_case(response_logprob, (logits, ids, mask), "a token whose logit lies 800 below "
                  "the largest logit of its position gets -inf: its softmax probability "
                  "underflows to 0 before the log; take log_softmax, which subtracts the "
                  "log-sum-exp instead of dividing", "when a token's logit lies far below the "
                  "others")


def _extreme_case(response_logprob, batch, infinite: str, where: str) -> None:
    """response_logprob on a batch that breaks a naive answer: finite, and the reference."""
    logits, ids, mask = batch
    out = returned_tensor(call(response_logprob, logits.clone(), ids.clone(), mask.clone(),
                               what="response_logprob"), "response_logprob").detach()
    expect(bool(torch.isfinite(out).all()), infinite)
    expect(close(out, response_logprob_reference(logits, ids, mask), n=logits.shape[1]),
           f"response_logprob is wrong {where}")


def _dpo_inputs(seed: int, B: int, dtype=F64, scale: float = 30.0):
    g = torch.Generator().manual_seed(seed)
    return [(-scale * torch.rand(B, generator=g, dtype=F64)).to(dtype) for _ in range(4)]


def _name_dpo_slip(out, pc, pr, rc, rr, beta) -> None:
    ref = dpo_loss_reference
    m = (pc - rc) - (pr - rr)
    slips = [
        (ref(pr, pc, rr, rc, beta), "the logit has the wrong sign: chosen and rejected are "
         "swapped, or a log-ratio is upside down (log pi_ref / pi instead of log pi / pi_ref), "
         "or a minus sign slipped in; the loss must fall as the policy prefers the chosen "
         "response"),
        (ref(pc, pr, torch.zeros_like(rc), torch.zeros_like(rr), beta), "the reference is left "
         "out: DPO scores log-ratios, log pi(y) - log pi_ref(y), for both responses"),
        (-F.logsigmoid(beta * ((pc + rc) - (pr + rr))).mean(), "the reference is added: subtract "
         "its log-probabilities, log pi(y) - log pi_ref(y)"),
        (-F.logsigmoid(beta * ((pc - rc) + (pr - rr))).mean(), "the two log-ratios are added: "
         "the logit is the chosen response's log-ratio minus the rejected one's"),
        (-beta * F.logsigmoid(m).mean(), "beta multiplies the loss: it belongs inside the sigmoid, "
         "scaling the difference of the log-ratios"),
        (-F.logsigmoid(m).mean(), "beta is missing: it scales the difference of the log-ratios "
         "inside the sigmoid"),
        (-F.logsigmoid(m / beta).mean(), "the difference is divided by beta: multiply it"),
        (-F.logsigmoid(beta * m).sum(), "the losses are summed: average them over the pairs"),
        (F.logsigmoid(beta * m).mean(), "the sign is flipped: the loss is the negative "
         "log-likelihood, -log sigma(...), which is >= 0"),
        (-torch.sigmoid(beta * m).mean(), "the log is missing: the loss is -log sigma(...), the "
         "binary cross-entropy of 'the chosen response wins'"),
        ((1 - torch.sigmoid(beta * m)).mean(), "the log is missing: the loss is -log sigma(...), "
         "the binary cross-entropy of 'the chosen response wins'"),
    ]
    for value, message in slips:
        if close(out, value, n=len(pc)):
            raise Wrong(message)


def _dpo_verdict(dpo_loss) -> None:
    for seed, (B, beta) in enumerate([(6, 0.1), (1, 0.5), (9, 2.0)]):
        pc, pr, rc, rr = _dpo_inputs(seed, B)
        pc.requires_grad_()
        pr.requires_grad_()
        out = call(dpo_loss, pc, pr, rc.clone(), rr.clone(), beta, what="dpo_loss")
        if isinstance(out, numbers.Real):
            raise Wrong("dpo_loss returns a number: return a tensor, so that the loss can be "
                        "backpropagated (the policy is trained through it)")
        out = returned_tensor(out, "dpo_loss")
        expect(out.numel() == 1, f"dpo_loss must return a scalar, the mean over the pairs, got "
               f"shape {tuple(out.shape)}")
        out = out.reshape(())
        want = dpo_loss_reference(pc, pr, rc, rr, beta)
        if not close(out.detach(), want.detach(), n=B):
            float32_work(out.detach(), want.detach(), "dpo_loss", n=B)
            with torch.no_grad():
                _name_dpo_slip(out, pc, pr, rc, rr, beta)
            raise Wrong("dpo_loss differs from -log sigma(beta [(log pi(y_w) - log pi_ref(y_w)) - "
                        "(log pi(y_l) - log pi_ref(y_l))]), averaged over the pairs")
        expect(out.requires_grad, "the loss does not depend on the policy's log-probabilities "
               "for autograd (was something detached, or computed outside torch?)")
        got = torch.autograd.grad(out, (pc, pr), allow_unused=True)
        expect(all(gr is not None for gr in got), "the loss must depend on both the chosen and "
               "the rejected log-probabilities of the policy")
        want_grads = torch.autograd.grad(want, (pc, pr))
        expect(all(close(a.to(out.dtype), b, n=B) for a, b in zip(got, want_grads, strict=True)),
               "the loss has the right value but not the right gradient")
    # pairs the policy gets badly wrong: a logit of -198, as long float32 responses give
    pc, pr, rc, rr = (torch.tensor(v, dtype=torch.float32) for v in
                      ([-2000.0, -30.0], [-20.0, -31.0], [-1000.0, -30.5], [-1000.0, -30.5]))
    out = returned_tensor(call(dpo_loss, pc, pr, rc, rr, 0.1, what="dpo_loss"), "dpo_loss")
    expect(bool(torch.isfinite(out).all()), "a pair the policy gets badly wrong (a logit of -198, "
           "log-probabilities near -2000, in float32) gives an infinite or NaN loss: compute "
           "-log sigma(x) without forming sigmoid(x) or exp(-x) (F.logsigmoid, or "
           "F.softplus(-x)), and keep the log-probabilities as logs (exp(-2000) is 0)")
    want = dpo_loss_reference(*(x.double() for x in (pc, pr, rc, rr)), 0.1)
    # judged at float32's precision, the inputs' (an answer may compute the last step in float64)
    expect(out.numel() == 1 and close(out.reshape(()).float(), want, n=2),
           "dpo_loss is wrong on a pair with a very negative logit (-198)")


@exercise("ex-ch9-dpo", hints=[
    "A causal language model's logits at position t are its prediction of the token at t + 1. "
    "Which logits score token t, and which tokens belong to the response?",
    "response_logprob: turn the logits into log-probabilities over the vocabulary, then line up "
    "each token with the logits of the position before it: which slices of logits, ids and mask "
    "go together? dpo_loss: which two log-ratios does eq. (9.22) subtract, and which torch "
    "function gives log sigma(x) without computing sigma(x)?",
    "response_logprob: the log-probabilities from every position but the last, read (gather) at "
    "the tokens one position later, kept where those tokens' mask is True and summed over each "
    "row. dpo_loss: beta times (the chosen log-ratio minus the rejected one) is the logit of the "
    "preference; the loss is minus its log-sigmoid, averaged over the pairs.",
])
def check_dpo(response_logprob, dpo_loss):
    _logprob_verdict(response_logprob)
    _dpo_verdict(dpo_loss)
