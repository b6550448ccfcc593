"""Chapter 9's exercise checks (seqbook.exercises.ch09): each passes a right answer, calls the
untouched starter "not attempted" (a find-the-bug starter gets its bug named), and names what is
wrong in each typical wrong answer."""

import math

import torch
import torch.nn.functional as F

from seqbook.exercises import check
from seqbook.losses import cross_entropy


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
    assert check(name, lambda z, y: F.cross_entropy(z, y))
    assert check(name, starter).status == "not attempted"
    assert "overflows" in check(name, buggy_ce).message
    assert "underflows to 0" in check(name, log_of_softmax).message
    assert "ordinary logits" in check(name, lambda z, y: right(z, y) + 1).message
    assert "must be a number" in check(name, lambda z, y: "loss").message


# --- the margin m* -------------------------------------------------------------------------------


def test_margin():
    name = "ex-ch9-margin"
    assert check(name, lambda C, eps: math.log((1 - eps + eps / C) * C / eps))
    assert check(name, starter).status == "not attempted"
    wrong_classes_only = lambda C, eps: math.log((1 - eps) * (C - 1) / eps)  # noqa: E731
    assert "C - 1 wrong classes only" in check(name, wrong_classes_only).message
    no_share = lambda C, eps: math.log((1 - eps) * C / eps)  # noqa: E731
    assert "its share" in check(name, no_share).message
    nearly = lambda C, eps: math.log((1 - eps + eps / C) * C / eps) + 1e-5  # noqa: E731
    assert "closed form" in check(name, nearly).message
    assert "solve q_y" in check(name, lambda C, eps: 1.0).message


# --- the log-sum-exp gap ---------------------------------------------------------------------------


def test_lse_bounds():
    name = "ex-ch9-lse-bounds"
    assert check(name, math.log(10) / 0.5)
    assert check(name, torch.tensor(math.log(10) / 0.5))
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
    assert check(name, lambda z, y, e, i: cross_entropy(z, y, label_smoothing=e, ignore_index=i))
    assert check(name, starter).status == "not attempted"
    assert "uniform part" in check(name, buggy_smoothed).message
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


def test_temperature():
    name = "ex-ch9-temperature"
    assert check(name, fit_temperature)
    assert check(name, starter).status == "not attempted"
    assert "inverse" in check(name, lambda z, y: fit_temperature(z, y, invert=True)).message
    assert "log T" in check(name, lambda z, y: fit_temperature(z, y, log=True)).message
    assert "still 1" in check(name, lambda z, y: 1.0).message
    assert "positive" in check(name, lambda z, y: -2.0).message
    assert "above 1" in check(name, lambda z, y: 1.5).message


# --- InfoNCE ---------------------------------------------------------------------------------------


def info_nce(x, y, temperature, normalise=True, both=True, divide=True):
    if normalise:
        x, y = F.normalize(x, dim=-1), F.normalize(y, dim=-1)
    s = x @ y.T
    s = s / temperature if divide else s * temperature
    target = torch.arange(len(x))
    one = F.cross_entropy(s, target)
    return (one + F.cross_entropy(s.T, target)) / 2 if both else one


def test_infonce():
    name = "ex-ch9-infonce"
    assert check(name, info_nce)
    assert check(name, starter).status == "not attempted"
    assert "one direction" in check(name, lambda x, y, t: info_nce(x, y, t, both=False)).message
    assert "dot products" in check(name, lambda x, y, t: info_nce(x, y, t, normalise=False)).message
    assert "multiplied by the temperature" in check(
        name, lambda x, y, t: info_nce(x, y, t, divide=False)).message
    assert "symmetric InfoNCE" in check(name, lambda x, y, t: info_nce(x, y, t) + 0.1).message
    assert "scalar" in check(name, lambda x, y, t: x).message
