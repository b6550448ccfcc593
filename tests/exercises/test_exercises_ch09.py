"""Chapter 9's exercise checks (seqbook.exercises.ch09): each passes a right answer, calls the
untouched starter "not attempted" (a find-the-bug starter gets its bug named), and names what is
wrong in each typical wrong answer."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from seqbook.exercises import check
from seqbook.losses import cross_entropy
from tests.random_state import assert_random_state_untouched


def starter(*args):
    raise NotImplementedError  # your code here


# --- the bigram baseline -----------------------------------------------------------------------


def bigram(ids, num_classes, add=1.0, transpose=False, log=True):
    pairs = torch.zeros(num_classes, num_classes, dtype=torch.float64)
    pairs.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64),
                     accumulate=True)
    pairs = pairs + add
    if transpose:
        pairs = pairs.T
    probs = pairs / pairs.sum(1, keepdim=True)
    return probs.log() if log else probs


def test_bigram():
    name = "ex-ch9-bigram"
    assert check(name, bigram)
    assert check(name, lambda ids, C: bigram(ids, C).float())  # float32 is fine
    assert check(name, starter).status == "not attempted"
    assert "transposed" in check(name, lambda ids, C: bigram(ids, C, transpose=True)).message

    def counts_as_logits(ids, C):  # a reader's slip: the smoothed counts into a softmax
        pairs = torch.zeros(C, C, dtype=torch.float64)
        pairs.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64),
                         accumulate=True)
        return torch.log_softmax(pairs + 1, dim=1)

    assert "as if they were logits" in check(name, counts_as_logits).message
    assert "add one" in check(name, lambda ids, C: bigram(ids, C, add=0.0)).message
    assert "logarithms" in check(name, lambda ids, C: bigram(ids, C, log=False)).message

    def whole_table(ids, C):
        pairs = bigram(ids, C, log=False) * 0 + 1
        pairs.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64),
                         accumulate=True)
        return (pairs / pairs.sum()).log()

    assert "rows do not sum to 1" in check(name, whole_table).message
    assert "shape" in check(name, lambda ids, C: torch.zeros(C)).message
    assert "must return a tensor" in check(name, lambda ids, C: 3.0).message

    def assigned(ids, C):  # t[a, b] += 1 with repeated pairs: each repeated pair counted once
        pairs = torch.zeros(C, C, dtype=torch.float64)
        pairs[ids[:-1], ids[1:]] += 1
        return ((pairs + 1) / (pairs + 1).sum(1, keepdim=True)).log()

    assert "counted once" in check(name, assigned).message

    def plus_one_total(ids, C):  # the row divided by its count + 1, not count + C
        counts = torch.zeros(C, C, dtype=torch.float64)
        counts.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64),
                          accumulate=True)
        return ((counts + 1) / (counts.sum(1, keepdim=True) + 1)).log()

    assert "count + C" in check(name, plus_one_total).message

    def by_bincount(ids, C):  # another right answer, in float32 and NumPy
        counts = torch.bincount(ids[:-1] * C + ids[1:], minlength=C * C).reshape(C, C) + 1
        return np.log((counts / counts.sum(1, keepdim=True)).float().numpy())

    assert check(name, by_bincount)


# --- find the bug: the overflowing cross-entropy ----------------------------------------------------


def buggy_ce(logits, target):  # the starter of the exercise
    q = torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True)
    return -torch.log(q.gather(-1, target[:, None])).mean()


def test_overflow_bug():
    name = "ex-ch9-overflow-bug"

    def right(logits, target):
        m = logits.max(-1, keepdim=True).values
        lse = m[:, 0] + torch.log(torch.exp(logits - m).sum(-1))
        return (lse - logits.gather(-1, target[:, None])[:, 0]).mean()

    def log_of_softmax(logits, target):
        return -torch.log(torch.softmax(logits, -1).gather(-1, target[:, None])).mean()

    assert check(name, right)
    assert check(name, starter).status == "not attempted"
    message = check(name, buggy_ce).message
    assert "nan" in message and "near 200" in message
    assert not any(w in message for w in ("subtract", "max", "lse", "shift"))  # no cure
    per_example = check(name, lambda z, y: torch.logsumexp(z, -1) - z[torch.arange(len(y)), y])
    assert "one number, the mean over the batch, got shape (16,)" in per_example.message
    # a loss is for training: a number, a 0-d array or a detached log-sum-exp is refused
    for answer in (lambda z, y: right(z, y).item(), lambda z, y: np.asarray(right(z, y).item()),
                   lambda z, y: torch.tensor(right(z, y).item())):
        assert "a loss is for training" in check(name, answer).message
    assert "a detached log-sum-exp is not" in check(
        name, lambda z, y: (torch.logsumexp(z, -1).detach() - z[torch.arange(len(y)), y]).mean()
    ).message
    assert check(name, lambda z, y: (torch.logsumexp(z, -1) - z[torch.arange(len(y)), y]).mean())
    shifted_by_mean = lambda z, y: right(z - z.mean(-1, keepdim=True), y)  # noqa: E731
    assert check(name, shifted_by_mean)  # the mean shift is right in exact arithmetic

    def mean_shift_exp(logits, target):  # exp(z - mean) still overflows at 200 in float32
        e = torch.exp(logits - logits.mean(-1, keepdim=True))
        return -torch.log(e.gather(-1, target[:, None])[:, 0] / e.sum(-1)).mean()

    assert "nan" in check(name, mean_shift_exp).message
    assert "underflows to 0" in check(name, log_of_softmax).message

    def batch_max(logits, target):  # one maximum for the whole batch, not one per row
        m = logits.max()
        lse = m + torch.log(torch.exp(logits - m).sum(-1))
        return (lse - logits.gather(-1, target[:, None])[:, 0]).mean()

    def mean_shift_lse(logits, target):  # lse(z - mean) + mean: exp overflows, the loss is inf
        mean = logits.mean(-1)
        lse = mean + torch.log(torch.exp(logits - mean[:, None]).sum(-1))
        return (lse - logits.gather(-1, target[:, None])[:, 0]).mean()

    assert "each row by its own maximum" in check(name, batch_max).message
    assert "an exponent overflows" in check(name, mean_shift_lse).message
    assert "ordinary logits" in check(name, lambda z, y: right(z, y) + 1).message
    assert "must be a number" in check(name, lambda z, y: "loss").message


# --- the margin with a prior ---------------------------------------------------------------------


def m_star_prior(prior, y, eps):
    target = eps * prior
    target[y] += 1 - eps
    others = torch.arange(len(prior)) != y
    return math.log(target[y] / target[others].max())


def test_margin():
    name = "ex-ch9-margin"
    assert check(name, m_star_prior)
    assert check(name, starter).status == "not attempted"

    def closed_form(prior, y, eps):  # another right answer: the formula, in a loop, as a tensor
        largest = max(p for k, p in enumerate(prior.tolist()) if k != y)
        return torch.tensor(math.log((1 - eps + eps * prior[y].item()) / (eps * largest)))

    assert check(name, closed_form)
    assert check(name, lambda p, y, e: np.float32(m_star_prior(p.float(), y, e)))  # float32

    uniform = lambda p, y, e: math.log((1 - e + e / len(p)) * len(p) / e)  # noqa: E731
    assert "uniform smoothing" in check(name, uniform).message

    def top_two(prior, y, eps):  # the two largest entries of the target, whichever is true
        target = eps * prior
        target[y] += 1 - eps
        first, second = target.sort(descending=True).values[:2]
        return math.log(first / second)

    assert "a wrong class ends up above the true one" in check(name, top_two).message

    def no_share(prior, y, eps):
        others = torch.arange(len(prior)) != y
        return math.log((1 - eps) / (eps * prior[others].max()))

    assert "its share of the prior" in check(name, no_share).message

    def argmax_of_all(prior, y, eps):  # the largest prior over all classes, y included
        return math.log((1 - eps + eps * prior[y]) / (eps * prior.max()))

    assert "that is y itself here" in check(name, argmax_of_all).message

    def with_true(prior, y, eps):
        target = eps * prior
        target[y] += 1 - eps
        return math.log(target[y] / target.max())

    assert "includes the true class" in check(name, with_true).message

    def smallest(prior, y, eps):
        target = eps * prior
        target[y] += 1 - eps
        return math.log(target[y] / target[torch.arange(len(prior)) != y].min())

    assert "smallest wrong logit" in check(name, smallest).message

    def to_mean(prior, y, eps):
        target = eps * prior
        target[y] += 1 - eps
        return (target[y].log() - target[torch.arange(len(prior)) != y].log().mean()).item()

    assert "mean of the wrong logits" in check(name, to_mean).message
    # the sign dropped, or the margin clipped at 0, where a wrong class ends above the true one
    for no_sign in (lambda p, y, e: abs(m_star_prior(p, y, e)),
                    lambda p, y, e: max(m_star_prior(p, y, e), 0.0)):
        assert "ends up above the true one" in check(name, no_sign).message
    flipped = lambda p, y, e: -m_star_prior(p, y, e)  # noqa: E731  the wrong way round
    assert "opposite sign" in check(name, flipped).message

    def neighbours(prior, y, eps):  # the true class's neighbour left out of the maximum
        target = eps * prior
        target[y] += 1 - eps
        return math.log(target[y] / torch.cat([target[:y - 1], target[y + 1:]]).max())

    assert not check(name, neighbours)
    rounded = lambda p, y, e: round(m_star_prior(p, y, e), 4)  # noqa: E731
    assert check(name, rounded)  # 5 significant digits, as the exercise says
    assert not check(name, lambda p, y, e: m_star_prior(p, y, e) * (1 + 1e-4))
    assert "must be a number" in check(name, lambda p, y, e: "big").message


# --- the log-sum-exp gap ---------------------------------------------------------------------------


def test_lse_bounds():
    name = "ex-ch9-lse-bounds"
    assert check(name, math.log(10) / 0.5)
    assert check(name, torch.tensor(math.log(10) / 0.5))
    assert check(name, 4.605)  # 3 significant digits, as the exercise asks
    assert check(name, 4.61)
    assert check(name, np.float32(4.6052))
    assert not check(name, 4.62)  # a digit off
    assert not check(name, 4.59)
    assert "another base" in check(name, math.log2(10) / 0.5).message
    assert check(name, ...).status == "not attempted"
    assert "at beta = 1" in check(name, math.log(10)).message
    assert "not multiplied" in check(name, 0.5 * math.log(10)).message
    assert "smallest gap" in check(name, 0.0).message
    assert "from above" in check(name, 7.0).message
    assert "must be a number" in check(name, "log 10").message


# --- find the bug: label smoothing on the padding -------------------------------------------------


def buggy_smoothed(logits, target, label_smoothing, ignore_index):  # the starter
    logq = torch.log_softmax(logits, dim=-1)
    real = target != ignore_index
    nll = -logq.gather(-1, target.masked_fill(~real, 0)[..., None])[..., 0]
    nll = nll * real
    uniform = -logq.mean(-1)
    loss = (1 - label_smoothing) * nll + label_smoothing * uniform
    return loss.sum() / real.sum()


def test_smoothing_bug():
    name = "ex-ch9-smoothing-bug"

    def right(logits, target, label_smoothing, ignore_index):
        logq = torch.log_softmax(logits, dim=-1)
        real = target != ignore_index
        nll = -logq.gather(-1, target.masked_fill(~real, 0)[..., None])[..., 0]
        loss = (1 - label_smoothing) * nll + label_smoothing * (-logq.mean(-1))
        return (loss * real).sum() / real.sum()

    def over_all(logits, target, label_smoothing, ignore_index):
        real = target != ignore_index
        return right(logits, target, label_smoothing, ignore_index) * real.sum() / real.numel()

    def no_mask(logits, target, label_smoothing, ignore_index):
        return right(logits, target, label_smoothing, ignore_index=-1)

    def where_nan(logits, target, label_smoothing, ignore_index):
        # right values, but a gradient leaks into the pads through a multiplication by 0.0
        return right(logits, target, label_smoothing, ignore_index) + 0.0 * logits[
            target == ignore_index].sum()

    assert check(name, right)
    # the finished losses do what the exercise asks to fix by hand: refused, by name
    finished = check(name, lambda z, y, e, i: cross_entropy(z, y, label_smoothing=e, ignore_index=i))
    assert "calls seqbook.losses.cross_entropy" in finished.message
    finished = check(name, lambda z, y, e, i: F.cross_entropy(
        z.flatten(0, 1), y.flatten(), label_smoothing=e, ignore_index=i))
    assert "calls F.cross_entropy" in finished.message
    assert check(name, starter).status == "not attempted"
    message = check(name, buggy_smoothed).message
    assert "differs from cross_entropy" in message
    assert "padded further" not in message  # the statement's question, not the verdict's
    assert "mask" not in message and "multiply" not in message  # the symptom, not the cure

    def no_masked_fill(logits, target, label_smoothing, ignore_index):  # breaks at pad -100
        logq = torch.log_softmax(logits, dim=-1)
        real = target != ignore_index
        nll = -logq.gather(-1, target[..., None])[..., 0]
        loss = (1 - label_smoothing) * nll + label_smoothing * (-logq.mean(-1))
        return (loss * real).sum() / real.sum()

    message = check(name, no_masked_fill).message
    assert "RuntimeError" in message and "A pad is not a class id" in message

    def pads_are_nonpositive(logits, target, label_smoothing, ignore_index):
        # ignores ignore_index and takes every id <= 0 for padding: wrong for a real class 0
        logq = torch.log_softmax(logits, dim=-1)
        real = target >= 1
        nll = -logq.gather(-1, target.clamp(min=0)[..., None])[..., 0]
        loss = (1 - label_smoothing) * nll + label_smoothing * (-logq.mean(-1))
        return (loss * real).sum() / real.sum()

    message = check(name, pads_are_nonpositive).message
    assert "not the ids <= 0" in message, message
    # a loss is for training: a 0-d array, or a loss whose smoothing term is detached, is refused
    assert "a loss is for training" in check(
        name, lambda z, y, e, i: right(z, y, e, i).detach().numpy()).message

    def detached_smoothing(logits, target, label_smoothing, ignore_index):
        logq = torch.log_softmax(logits, dim=-1)
        real = target != ignore_index
        nll = -logq.gather(-1, target.masked_fill(~real, 0)[..., None])[..., 0]
        loss = (1 - label_smoothing) * nll + label_smoothing * (-logq.detach().mean(-1))
        return (loss * real).sum() / real.sum()

    assert "the gradient is not" in check(name, detached_smoothing).message

    def smoothed_targets(logits, target, label_smoothing, ignore_index):  # another right answer
        real = target != ignore_index
        C = logits.shape[-1]
        p = F.one_hot(target.masked_fill(~real, 0), C) * (1 - label_smoothing) + label_smoothing / C
        per = -(p * torch.log_softmax(logits, -1)).sum(-1)
        return per[real].mean()

    assert check(name, smoothed_targets)
    assert "divide by the number of real tokens" in check(name, over_all).message
    assert "mask them out" in check(name, no_mask).message
    assert check(name, where_nan)  # 0 * x has an exact zero gradient: not a slip
    assert "scalar" in check(name, lambda z, y, e, i: z).message


# --- temperature scaling ---------------------------------------------------------------------------


def fit_temperature(logits, target, invert=False, log=False):
    s = torch.zeros((), dtype=logits.dtype, requires_grad=True)
    opt = torch.optim.LBFGS([s], lr=0.5, max_iter=100, tolerance_grad=1e-10,
                            tolerance_change=1e-12)

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(logits / s.exp(), target)
        loss.backward()
        return loss

    opt.step(closure)
    T = s.exp().item()
    return s.item() if log else (1 / T if invert else T)


def bisection(logits, target):  # another right answer: bisection on d NLL / d beta
    def slope(beta):
        q = torch.softmax(beta * logits, -1)
        return ((q * logits).sum(-1) - logits.gather(-1, target[:, None])[:, 0]).mean()

    lo, hi = 0.0, 100.0
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if slope(mid) < 0 else (lo, mid)
    return 2 / (lo + hi)


def test_temperature():
    name = "ex-ch9-temperature"
    assert check(name, fit_temperature)  # LBFGS on log T
    assert check(name, bisection)
    assert check(name, lambda z, y: torch.tensor(bisection(z.float(), y)))  # float32, a tensor
    assert check(name, lambda z, y: float(f"{bisection(z, y):.3g}"))  # 3 significant digits
    assert not check(name, lambda z, y: float(f"{bisection(z, y):.2g}"))  # 2: too coarse
    assert check(name, starter).status == "not attempted"
    assert "inverse" in check(name, lambda z, y: fit_temperature(z, y, invert=True)).message
    assert "log T" in check(name, lambda z, y: fit_temperature(z, y, log=True)).message
    assert "still 1" in check(name, lambda z, y: 1.0).message
    assert "positive" in check(name, lambda z, y: -2.0).message
    for constant in (2.5, 1.7, 1.5):  # the same T, whatever the network
        assert "the same T" in check(name, lambda z, y, c=constant: c).message
    assert "3 significant digits" in check(name, lambda z, y: bisection(z, y) * 1.01).message
    assert "stopped early" in check(name, lambda z, y: bisection(z, y) * 1.004).message
    assert "grid too coarse" in check(name, lambda z, y: bisection(z, y) * 1.004).message
    assert "stopped early" not in check(name, lambda z, y: bisection(z, y) * 1.05).message


# --- InfoNCE ---------------------------------------------------------------------------------------


def info_nce(x, y, temperature, normalise=True, both=True, divide=True):
    if normalise:
        x, y = F.normalize(x, dim=-1), F.normalize(y, dim=-1)
    s = x @ y.T
    s = s / temperature if divide else s * temperature
    target = torch.arange(len(x))
    one = F.cross_entropy(s, target)
    return (one + F.cross_entropy(s.T, target)) / 2 if both else one


def weighted_focal_loss(logits, target, alpha, gamma):
    logq_y = torch.log_softmax(logits, -1).gather(-1, target[:, None])[:, 0]
    weight = alpha[target]
    return -(weight * (1 - logq_y.exp()) ** gamma * logq_y).sum() / weight.sum()


def test_focal_weights():
    name = "ex-ch9-focal-weights"
    assert check(name, weighted_focal_loss)
    assert check(name, starter).status == "not attempted"

    def by_cross_entropy(logits, target, alpha, gamma):  # another right answer
        ce = F.cross_entropy(logits, target, reduction="none")
        weight = alpha[target]
        return (weight * (-torch.expm1(-ce)) ** gamma * ce).sum() / weight.sum()

    assert check(name, by_cross_entropy)
    assert check(name, lambda z, y, a, g: weighted_focal_loss(z.float(), y, a.float(), g))
    number = check(name, lambda z, y, a, g: weighted_focal_loss(z, y, a, g).item())
    assert number.status == "fail" and "autograd can differentiate" in number.message

    def detached_factor(logits, target, alpha, gamma):  # the right value, the wrong gradient
        logq_y = torch.log_softmax(logits, -1).gather(-1, target[:, None])[:, 0]
        weight = alpha[target]
        factor = (1 - logq_y.exp().detach()) ** gamma
        return -(weight * factor * logq_y).sum() / weight.sum()

    assert "gradient is not" in check(name, detached_factor).message

    def q_from_weighted_loss(logits, target, alpha, gamma):  # a widely copied slip
        ce = F.cross_entropy(logits, target, weight=alpha, reduction="none")  # alpha_y CE
        weight = alpha[target]
        return ((1 - torch.exp(-ce)) ** gamma * ce).sum() / weight.sum()

    assert "off the weighted cross-entropy" in check(name, q_from_weighted_loss).message

    def copied_focal_loss(logits, target, alpha, gamma):  # the snippet most often copied
        ce = F.cross_entropy(logits, target, weight=alpha, reduction="none")
        return ((1 - torch.exp(-ce)) ** gamma * ce).mean()

    message = check(name, copied_focal_loss).message
    assert "off the weighted cross-entropy" in message and "number of examples" in message

    def alpha_twice(logits, target, alpha, gamma):  # weight= and alpha[target] both
        ce = F.cross_entropy(logits, target, weight=alpha, reduction="none")  # alpha_y CE
        q_y = torch.exp(-F.cross_entropy(logits, target, reduction="none"))
        weight = alpha[target]
        return (weight * (1 - q_y) ** gamma * ce).sum() / weight.sum()

    assert "applied twice" in check(name, alpha_twice).message

    def batch_factor(logits, target, alpha, gamma):  # one factor from the mean loss
        ce = F.cross_entropy(logits, target, weight=alpha)
        return (1 - torch.exp(-ce)) ** gamma * ce

    assert "computed once" in check(name, batch_factor).message

    def per_example(logits, target, alpha, gamma, divisor="weights", at="target", focal=True,
                    q="true"):
        probs = logits.softmax(-1)
        q_y = probs.gather(-1, target[:, None])[:, 0]
        weight = alpha[target] if at == "target" else alpha[logits.argmax(-1)]
        factor = (1 - (q_y if q == "true" else probs.amax(-1))) ** gamma if focal else 1
        total = -(weight * factor * q_y.log()).sum()
        return total / {"weights": weight.sum(), "n": len(target),
                        "both": (weight * factor).sum()}[divisor]

    slips = {
        "divided by the number of examples": dict(divisor="n"),
        "divisor holds the focal factors": dict(divisor="both"),
        "taken at the predicted class": dict(at="predicted"),
        "focal factor (1 - q_y)^gamma is missing": dict(focal=False),
        "uses the largest probability": dict(q="largest"),
    }
    for words, slip in slips.items():
        result = check(name, lambda z, y, a, g, s=slip: per_example(z, y, a, g, **s))
        assert result.status == "fail" and words in result.message, (words, result)
    assert "not applied" in check(
        name, lambda z, y, a, g: weighted_focal_loss(z, y, torch.ones_like(a), g)).message
    assert "cannot be negative" in check(
        name, lambda z, y, a, g: -weighted_focal_loss(z, y, a, g)).message
    assert "scalar" in check(name, lambda z, y, a, g: z).message
    assert "used as log-probabilities" in check(
        name, lambda z, y, a, g: F.nll_loss(z, y, weight=a)).message


def test_infonce():
    name = "ex-ch9-infonce"
    assert check(name, info_nce)
    assert check(name, starter).status == "not attempted"
    assert "one direction" in check(name, lambda x, y, t: info_nce(x, y, t, both=False)).message
    assert "dot products" in check(name, lambda x, y, t: info_nce(x, y, t, normalise=False)).message
    assert "multiplied by the temperature" in check(
        name, lambda x, y, t: info_nce(x, y, t, divide=False)).message
    assert "symmetric InfoNCE" in check(name, lambda x, y, t: info_nce(x, y, t) + 0.1).message
    summed = lambda x, y, t: len(x) * info_nce(x, y, t)  # noqa: E731  reduction='sum'

    def x_only(x, y, temperature):  # only one side normalised
        s = F.normalize(x, dim=-1) @ y.T / temperature
        target = torch.arange(len(x))
        return (F.cross_entropy(s, target) + F.cross_entropy(s.T, target)) / 2

    assert "only one of x and y" in check(name, x_only).message
    assert "summed" in check(name, summed).message
    assert "scalar" in check(name, lambda x, y, t: x).message

    def without_match(x, y, temperature):  # the positive left out of the denominator
        s = F.normalize(x, dim=-1) @ F.normalize(y, dim=-1).T / temperature
        eye = torch.eye(len(x), dtype=torch.bool)
        one = (torch.logsumexp(s.masked_fill(eye, -math.inf), -1) - s.diag()).mean()
        other = (torch.logsumexp(s.T.masked_fill(eye, -math.inf), -1) - s.diag()).mean()
        return (one + other) / 2

    assert "match included" in check(name, without_match).message
    assert check(name, lambda x, y, t: info_nce(x.float(), y.float(), t))  # float32
    # a loss is for training: a number, or one with detached norms, is refused
    assert "a loss is for training" in check(name, lambda x, y, t: info_nce(x, y, t).item()).message

    def detached_norms(x, y, temperature):
        x = x / x.norm(dim=-1, keepdim=True).detach()
        y = y / y.norm(dim=-1, keepdim=True).detach()
        s = x @ y.T / temperature
        target = torch.arange(len(x))
        return (F.cross_entropy(s, target) + F.cross_entropy(s.T, target)) / 2

    assert "the norms of the rows" in check(name, detached_norms).message

    def nt_xent(x, y, temperature):  # SimCLR's form: the other views are negatives too
        z = F.normalize(torch.cat([x, y]), dim=-1)
        sim = (z @ z.T / temperature).fill_diagonal_(-math.inf)
        return F.cross_entropy(sim, torch.arange(2 * len(x)).roll(len(x)))

    assert "SimCLR's NT-Xent" in check(name, nt_xent).message

    def siglip(x, y, temperature):  # SigLIP's pairwise sigmoid loss, bias 0
        s = F.normalize(x, dim=-1) @ F.normalize(y, dim=-1).T / temperature
        signs = 2 * torch.eye(len(x), dtype=s.dtype) - 1
        return -F.logsigmoid(signs * s).sum() / len(x)

    assert "SigLIP" in check(name, siglip).message
    assert "SigLIP" in check(name, lambda x, y, t: siglip(x, y, t) * len(x) / len(x) ** 2).message

    def siglip_paper(x, y, temperature):  # the paper's form: similarities times t, summed
        s = F.normalize(x, dim=-1) @ F.normalize(y, dim=-1).T * temperature
        return -F.logsigmoid((2 * torch.eye(len(x), dtype=s.dtype) - 1) * s).sum()

    assert "SigLIP" in check(name, siglip_paper).message

    def columns_normalised(x, y, temperature):  # dim=0: each feature, not each vector
        s = F.normalize(x, dim=0) @ F.normalize(y, dim=0).T / temperature
        target = torch.arange(len(x))
        return (F.cross_entropy(s, target) + F.cross_entropy(s.T, target)) / 2

    assert "row by row" in check(name, columns_normalised).message

    def by_logsumexp(x, y, temperature):  # another right answer
        s = F.normalize(x, dim=-1) @ F.normalize(y, dim=-1).T / temperature
        rows = torch.logsumexp(s, 1) - s.diag()
        cols = torch.logsumexp(s, 0) - s.diag()
        return (rows.mean() + cols.mean()) / 2

    assert check(name, by_logsumexp)


# --- DPO on sequences -------------------------------------------------------------------------


def response_logprob(logits, ids, mask, shift=True, use_mask=True, mean=False, log_softmax=True,
                     mask_with_logits=False):
    z = torch.log_softmax(logits, -1) if log_softmax else logits
    if shift:
        token = z[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, T-1)
        keep = mask[:, :-1] if mask_with_logits else mask[:, 1:]
    else:
        token, keep = z.gather(-1, ids[..., None]).squeeze(-1), mask
    if not use_mask:
        return token.sum(1)
    total = (token * keep).sum(1)
    return total / keep.sum(1) if mean else total


def dpo_loss(pc, pr, rc, rr, beta, swap=False, ref=True, beta_inside=True, reduce="mean",
             stable=True):
    if swap:
        pc, pr, rc, rr = pr, pc, rr, rc
    m = (pc - rc) - (pr - rr) if ref else pc - pr
    per_pair = (-F.logsigmoid(beta * m) if stable else -torch.log(torch.sigmoid(beta * m))) \
        if beta_inside else -beta * F.logsigmoid(m)
    return per_pair.mean() if reduce == "mean" else per_pair.sum()


def test_dpo():
    name = "ex-ch9-dpo"
    assert check(name, response_logprob, dpo_loss)
    # right, with the last step upcast to float64 (a reader's answer): judged at the inputs' precision
    assert check(name, response_logprob, lambda pc, pr, rc, rr, b: -F.logsigmoid(
        (b * ((pc - rc) - (pr - rr))).double()).mean())
    assert check(name, starter, starter).status == "not attempted"
    assert check(name, response_logprob, starter).status == "not attempted"

    def wrong(rl=response_logprob, dl=dpo_loss):
        return check(name, rl, dl).message

    assert "t + 1" in wrong(lambda z, i, m: response_logprob(z, i, m, shift=False))
    assert "only the response" in wrong(lambda z, i, m: response_logprob(z, i, m, use_mask=False))
    assert "averaged" in wrong(lambda z, i, m: response_logprob(z, i, m, mean=True))
    assert "not log-probabilities" in wrong(lambda z, i, m: response_logprob(z, i, m, log_softmax=False))
    assert "mask[:, 1:]" in wrong(lambda z, i, m: response_logprob(z, i, m, mask_with_logits=True))
    assert "shape (4,)" in wrong(lambda z, i, m: response_logprob(z, i, m)[:, None])

    def product(logits, ids, mask):  # multiplies probabilities: underflows on long responses
        p = torch.softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        return torch.where(mask[:, 1:], p, torch.ones_like(p)).prod(1).log()

    assert "underflows" in wrong(product)

    def without_gradient(logits, ids, mask):  # right values, read out with .item()
        return torch.tensor(response_logprob(logits, ids, mask).tolist(), dtype=logits.dtype)

    def detached_normaliser(logits, ids, mask):  # right values, half of the gradient
        z = logits[:, :-1]
        token = z.gather(-1, ids[:, 1:, None]).squeeze(-1) - z.logsumexp(-1).detach()
        return (token * mask[:, 1:]).sum(1)

    def over_positions(logits, ids, mask):  # the softmax over the positions
        logq = torch.log_softmax(logits[:, :-1], 1)
        return (logq.gather(-1, ids[:, 1:, None]).squeeze(-1) * mask[:, 1:]).sum(1)

    assert "passes no gradient" in wrong(without_gradient)
    assert "not the right gradient" in wrong(detached_normaliser)
    assert "over the positions" in wrong(over_positions)
    assert "returned bfloat16" in wrong(lambda z, i, m: response_logprob(z.bfloat16(), i, m))
    assert "returned float16" in wrong(dl=lambda *a: dpo_loss(*(x.half() for x in a[:4]), a[4]))
    assert "upside down" in wrong(dl=lambda pc, pr, rc, rr, b: dpo_loss(rc, rr, pc, pr, b))
    assert "swapped" in wrong(dl=lambda *a: dpo_loss(*a, swap=True))
    assert "reference is left out" in wrong(dl=lambda *a: dpo_loss(*a, ref=False))
    assert "beta multiplies the loss" in wrong(dl=lambda *a: dpo_loss(*a, beta_inside=False))
    assert "summed" in wrong(dl=lambda *a: dpo_loss(*a, reduce="sum"))
    assert "F.logsigmoid" in wrong(dl=lambda *a: dpo_loss(*a, stable=False))
    assert "returns a number" in wrong(dl=lambda *a: dpo_loss(*a).item())
    assert "scalar" in wrong(dl=lambda pc, pr, rc, rr, b: -F.logsigmoid(b * ((pc - rc) - (pr - rr))))
    assert "detached" in wrong(dl=lambda pc, pr, rc, rr, b: dpo_loss(pc.detach(), pr.detach(), rc, rr, b))
    assert "log is missing" in wrong(
        dl=lambda pc, pr, rc, rr, b: (1 - torch.sigmoid(b * ((pc - rc) - (pr - rr)))).mean())
    assert "differs from -log sigma" in wrong(dl=lambda *a: dpo_loss(*a) + 0.1)

    # right answers written differently
    def by_cross_entropy(logits, ids, mask):  # F.cross_entropy with the prompt and padding ignored
        target = ids[:, 1:].masked_fill(~mask[:, 1:], -100)
        return -F.cross_entropy(logits[:, :-1].transpose(1, 2), target, reduction="none").sum(1)

    def by_softplus(pc, pr, rc, rr, beta):  # -log sigma(x) = softplus(-x), the log-ratios regrouped
        return F.softplus(-beta * ((pc - pr) - (rc - rr))).mean()

    def loops(logits, ids, mask):  # one token at a time
        rows = []
        for b in range(len(ids)):
            total = logits.new_zeros(())
            for t in range(1, ids.shape[1]):
                if mask[b, t]:
                    total = total + torch.log_softmax(logits[b, t - 1], -1)[ids[b, t]]
            rows.append(total)
        return torch.stack(rows)

    assert check(name, by_cross_entropy, by_softplus)
    assert check(name, loops, dpo_loss)
    assert check(name, lambda z, i, m: response_logprob(z.float(), i, m), dpo_loss)  # float32


# --- every check leaves the learner's random state alone -------------------------------------------


@pytest.mark.parametrize("name, answer", [
    ("ex-ch9-bigram", bigram),
    ("ex-ch9-overflow-bug", buggy_ce),
    ("ex-ch9-smoothing-bug", buggy_smoothed),
    ("ex-ch9-margin", m_star_prior),
    ("ex-ch9-lse-bounds", 4.605),
    ("ex-ch9-temperature", bisection),
    ("ex-ch9-focal-weights", weighted_focal_loss),
    ("ex-ch9-infonce", info_nce),
    ("ex-ch9-dpo", (response_logprob, dpo_loss)),
])
def test_the_random_state_is_untouched(name, answer):
    answers = answer if isinstance(answer, tuple) else (answer,)
    assert_random_state_untouched(lambda: check(name, *answers))


# --- messages that name the slip: a finished loss, too few digits, NaN, added directions ----------


def test_overflow_bug_refuses_the_finished_losses():
    import seqbook.losses

    for finished, called in ((lambda z, y: F.cross_entropy(z, y), "F.cross_entropy"),
                             (seqbook.losses.cross_entropy, "seqbook.losses.cross_entropy"),
                             (lambda z, y: torch.nn.CrossEntropyLoss()(z, y), "F.cross_entropy")):
        result = check("ex-ch9-overflow-bug", finished)
        assert result.status == "fail" and f"calls {called}" in result.message, result
    assert check("ex-ch9-overflow-bug",  # torch's log-sum-exp is the learner's own fix
                 lambda z, y: (torch.logsumexp(z, -1) - z.gather(1, y[:, None])[:, 0]).mean())


def test_named_slips_of_the_other_checks():
    assert "3 significant digits the exercise asks for" in check("ex-ch9-lse-bounds", 4.6).message
    assert "returns NaN" in check("ex-ch9-temperature", lambda z, y: float("nan")).message
    summed = check("ex-ch9-infonce", lambda x, y, t: 2 * info_nce(x, y, t))
    assert "the two directions are added" in summed.message

    def per_sequence(z, y, eps, pad):
        logq = torch.log_softmax(z, -1)
        real = y != pad
        nll = -logq.gather(-1, y.masked_fill(~real, 0)[..., None])[..., 0]
        loss = (1 - eps) * nll + eps * (-logq.mean(-1))
        return ((loss * real).sum(-1) / real.sum(-1)).mean()

    def eps_on_wrong_classes(z, y, eps, pad):
        logq = torch.log_softmax(z, -1)
        real = y != pad
        nll = -logq.gather(-1, y.masked_fill(~real, 0)[..., None])[..., 0]
        others = (-logq.sum(-1) - nll) / (z.shape[-1] - 1)
        return (((1 - eps) * nll + eps * others) * real).sum() / real.sum()

    assert "a short sequence then weighs" in check("ex-ch9-smoothing-bug", per_sequence).message
    assert "C - 1 wrong classes" in check("ex-ch9-smoothing-bug", eps_on_wrong_classes).message


def test_lse_bounds_names_c_minus_one():
    assert "not C - 1" in check("ex-ch9-lse-bounds", 2 * math.log(9)).message


# --- slips named by this edition's readers ------------------------------------------------------


def test_overflow_bug_accepts_a_one_element_tensor():
    def loss(z, y):
        return (torch.logsumexp(z, -1) - z.gather(-1, y[:, None])[:, 0]).mean()

    assert check("ex-ch9-overflow-bug", lambda z, y: loss(z, y).reshape(1))
    per_example = check("ex-ch9-overflow-bug",
                        lambda z, y: torch.logsumexp(z, -1) - z.gather(-1, y[:, None])[:, 0])
    assert "one number" in per_example.message and "(16,)" in per_example.message


def test_margin_names_the_equal_logits_formula_and_the_missing_eps():
    def target(prior, y, eps):
        t = eps * prior
        t[y] += 1 - eps
        return t

    def equal_logits(prior, y, eps):
        q = target(prior, y, eps)[y]
        return math.log(q / (1 - q)) + math.log(len(prior) - 1)

    def no_eps(prior, y, eps):
        others = torch.cat([prior[:y], prior[y + 1:]])
        return math.log(target(prior, y, eps)[y] / others.max())

    assert "equal wrong logits" in check("ex-ch9-margin", equal_logits).message
    assert "the eps is missing" in check("ex-ch9-margin", no_eps).message


def test_smoothing_bug_names_the_summed_uniform_term_and_the_true_class_share():
    def smoothed(z, y, eps, pad, kind):
        logq = torch.log_softmax(z, -1)
        real = y != pad
        nll = -logq.gather(-1, y.masked_fill(~real, 0)[..., None])[..., 0]
        if kind == "sum":
            loss = (1 - eps) * nll - eps * logq.sum(-1)
        else:  # the true class keeps 1 - eps, every wrong class eps / C
            loss = (1 - eps) * nll + eps / z.shape[-1] * (-logq.sum(-1) - nll)
        return (loss * real).sum() / real.sum()

    name = "ex-ch9-smoothing-bug"
    assert "do not add them up" in check(name, lambda *a: smoothed(*a, "sum")).message
    assert "the true class gets only 1 - eps" in check(name, lambda *a: smoothed(*a, "t")).message


def test_temperature_names_a_search_stopped_short():
    def short_lbfgs(logits, target):  # Guo et al.'s published recipe: lr 0.01, 50 iterations
        t = torch.tensor(1.5, dtype=logits.dtype, requires_grad=True)
        opt = torch.optim.LBFGS([t], lr=0.01, max_iter=50)

        def closure():
            opt.zero_grad()
            loss = F.cross_entropy(logits / t, target)
            loss.backward()
            return loss

        opt.step(closure)
        return t.item()

    result = check("ex-ch9-temperature", short_lbfgs)
    assert not result and "stopped before the minimum" in result.message


def test_focal_weights_refuses_a_probability_that_underflows():
    def naive(logits, target, alpha, gamma, floor=0.0):
        q = torch.softmax(logits, -1).gather(1, target[:, None])[:, 0].clamp(min=floor)
        weight = alpha[target]
        return -(weight * (1 - q) ** gamma * torch.log(q)).sum() / weight.sum()

    for floor in (0.0, 1e-4):
        result = check("ex-ch9-focal-weights", lambda *a, f=floor: naive(*a, floor=f))
        assert not result and "underflows to 0 before the log" in result.message
    negative = check("ex-ch9-focal-weights", lambda *a: -weighted_focal_loss(*a))
    assert "check the sign" in negative.message and "binary form" in negative.message


def test_infonce_refuses_an_overflow_at_clips_temperature_and_names_positives_only():
    def naive(x, y, t):
        x, y = F.normalize(x, dim=-1), F.normalize(y, dim=-1)
        e = torch.exp(x @ y.T / t)
        d = e.diagonal()
        return (-(d / e.sum(1)).log().mean() - (d / e.sum(0)).log().mean()) / 2

    def by_logsumexp(x, y, t):  # another right answer, stable at t = 0.01
        s = F.normalize(x, dim=-1) @ F.normalize(y, dim=-1).T / t
        rows = (torch.logsumexp(s, 1) - s.diag()).mean()
        return (rows + (torch.logsumexp(s, 0) - s.diag()).mean()) / 2

    result = check("ex-ch9-infonce", naive)
    assert not result and "overflows float32" in result.message
    assert check("ex-ch9-infonce", by_logsumexp)
    assert check("ex-ch9-infonce", lambda x, y, t: info_nce(x.float(), y.float(), t))
    positives = check("ex-ch9-infonce", lambda x, y, t: -(F.cosine_similarity(x, y) / t).mean())
    assert "only the matching pairs" in positives.message


def test_bigram_names_the_columns_and_the_symbols_seen():
    def counted(ids, C):
        pairs = torch.zeros(C, C, dtype=torch.float64)
        pairs.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64),
                         accumulate=True)
        return pairs

    def columns(ids, C):
        p = counted(ids, C) + 1
        return (p / p.sum(0, keepdim=True)).log()

    def seen(ids, C):
        p = counted(ids, C)
        return ((p + 1) / (p.sum(1, keepdim=True) + len(torch.unique(ids)))).log()

    assert "the columns are normalised" in check("ex-ch9-bigram", columns).message
    assert "symbols that occur" in check("ex-ch9-bigram", seen).message


def test_focal_names_an_eps_in_the_log_and_temperature_a_coarse_grid():
    def eps_log(logits, target, alpha, gamma):
        q = torch.softmax(logits, -1).gather(1, target[:, None])[:, 0]
        weight = alpha[target]
        return -(weight * (1 - q) ** gamma * torch.log(q + 1e-6)).sum() / weight.sum()

    assert "log(q_y + 1e-06)" in check("ex-ch9-focal-weights", eps_log).message
    coarse = check("ex-ch9-temperature", lambda z, y: bisection(z, y) * 1.02)
    assert not coarse and "within 3 %" in coarse.message
    rounded = check("ex-ch9-temperature", lambda z, y: float(f"{bisection(z, y):.2g}"))
    assert not rounded and "2 significant digits only" in rounded.message

    def keras_eps(logits, target, alpha, gamma):  # Keras's default epsilon
        q = torch.softmax(logits, -1).gather(1, target[:, None])[:, 0]
        weight = alpha[target]
        return -(weight * (1 - q) ** gamma * torch.log(q + 1e-7)).sum() / weight.sum()

    assert "log(q_y + 1e-07)" in check("ex-ch9-focal-weights", keras_eps).message


def test_bigram_names_row_totals_counted_from_every_symbol():
    import torch

    def totals_from_bincount(ids, C):  # the last symbol counted as a predecessor too
        counts = torch.zeros(C, C, dtype=torch.float64)
        ones = torch.ones(len(ids) - 1, dtype=torch.float64)
        counts.index_put_((ids[:-1], ids[1:]), ones, accumulate=True)
        totals = torch.bincount(ids, minlength=C).double()[:, None]
        return torch.log((counts + 1) / (totals + C))

    result = check("ex-ch9-bigram", totals_from_bincount)
    assert not result and "starts no pair" in result.message


def test_overflow_names_the_underflow_in_float64():
    import torch

    def log_of_softmax_in_float64(z, y):  # softmax shifts already; q_y still underflows
        return -torch.log(torch.softmax(z.double(), -1))[torch.arange(len(y)), y].mean()

    result = check("ex-ch9-overflow-bug", log_of_softmax_in_float64)
    assert not result and "underflows to 0 before the log, even in float64" in result.message


def test_bigram_refuses_column_totals():
    import torch

    def column_totals(ids, C):  # each row divided by the pairs that end in its symbol
        counts = torch.zeros(C, C, dtype=torch.float64)
        ones = torch.ones(len(ids) - 1, dtype=torch.float64)
        counts.index_put_((ids[:-1], ids[1:]), ones, accumulate=True)
        return torch.log((counts + 1) / (counts.sum(0)[:, None] + C))

    result = check("ex-ch9-bigram", column_totals)
    assert not result and "a column's total" in result.message


def test_overflow_names_exp_overflow_in_float64():
    import torch

    def unshifted_in_float64(z, y):  # no log of a probability, but exp(1e4) is inf
        z = z.double()
        return (torch.log(torch.exp(z).sum(-1)) - z[torch.arange(len(y)), y]).mean()

    result = check("ex-ch9-overflow-bug", unshifted_in_float64)
    assert not result and "exp(1e4) overflows" in result.message, result
