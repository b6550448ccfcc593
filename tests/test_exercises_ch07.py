"""Chapter 7's exercise checks (seqbook.exercises.ch07): each passes a right answer, calls the
untouched starter "not attempted" (the find-the-bug starters get their bug named), and names what
is wrong in each typical wrong answer."""

import math

import torch
import torch.nn.functional as F

from seqbook.exercises import check
from seqbook.hopfield import hebbian_weights


def starter(*args):
    raise NotImplementedError  # your code here


# --- find the bug: Hebb's rule ------------------------------------------------------------------


def test_hebb():
    def buggy(patterns):  # the starter of the exercise
        return patterns.T @ patterns

    def right(patterns):
        W = patterns.T @ patterns / patterns.shape[1]
        return W.fill_diagonal_(0)

    def no_factor(patterns):
        return (patterns.T @ patterns).fill_diagonal_(0)

    def over_P(patterns):
        return (patterns.T @ patterns / patterns.shape[0]).fill_diagonal_(0)

    name = "ex-ch7-hebb"
    assert check(name, right)
    assert check(name, hebbian_weights)
    assert check(name, starter).status == "not attempted"
    assert "diagonal is not zero" in check(name, buggy).message
    assert "N times too large" in check(name, no_factor).message
    assert "divided by P" in check(name, over_P).message
    assert "(N, N)" in check(name, lambda p: p @ p.T).message


# --- find the bug: a sweep that is not asynchronous ----------------------------------------------


def sign_keep(h, old):
    return torch.where(h > 0, 1.0, torch.where(h < 0, -1.0, old)).to(old.dtype)


def test_sync_cycle():
    def buggy(W, state, order):  # the starter of the exercise
        state = state.clone()
        h = state @ W
        for i in order:
            new = torch.sign(h[:, i])
            state[:, i] = torch.where(new == 0, state[:, i], new)
        return state

    def right(W, state, order):
        state = state.clone()
        for i in order:
            state[:, i] = sign_keep(state @ W[:, i], state[:, i])
        return state

    def in_place(W, state, order):
        for i in order:
            state[:, i] = sign_keep(state @ W[:, i], state[:, i])
        return state

    def plain_sign(W, state, order):
        state = state.clone()
        for i in order:
            state[:, i] = torch.sign(state @ W[:, i])
        return state

    def ties_up(W, state, order):
        state = state.clone()
        for i in order:
            state[:, i] = torch.where(state @ W[:, i] >= 0, 1.0, -1.0).to(state.dtype)
        return state

    def ignores_order(W, state, order):
        return right(W, state, range(W.shape[0]))

    name = "ex-ch7-sync-cycle"
    assert check(name, right)
    assert check(name, starter).status == "not attempted"
    assert "swapped values" in check(name, buggy).message
    assert "changed the state it was given" in check(name, in_place).message
    assert "other than -1 and +1" in check(name, plain_sign).message
    assert "becomes +1" in check(name, ties_up).message
    assert "in the order 0, 1" in check(name, ignores_order).message


# --- perfect recall --------------------------------------------------------------------------------


def phi(z):
    return 0.5 * math.erfc(-z / math.sqrt(2))


def test_perfect_recall():
    def right(N, P):
        p = phi(-math.sqrt((N - 1) / (P - 1)))
        return (1 - p) ** N, (1 - p) ** (N * P)

    def approximate(N, P):
        p = phi(-math.sqrt(N / P))
        return (1 - p) ** N, (1 - p) ** (N * P)

    def one_bit(N, P):
        p = phi(-math.sqrt((N - 1) / (P - 1)))
        return 1 - p, (1 - p) ** (N * P)

    def swapped(N, P):
        return right(N, P)[::-1]

    def all_P_only(N, P):
        p = phi(-math.sqrt((N - 1) / (P - 1)))
        return (1 - p) ** N, (1 - p) ** P

    def torch_normal(N, P):  # another way to write Phi
        p = torch.distributions.Normal(0.0, 1.0).cdf(torch.tensor(-math.sqrt((N - 1) / (P - 1)),
                                                                  dtype=torch.float64))
        return (1 - p) ** N, (1 - p) ** (N * P)

    name = "ex-ch7-perfect-recall"
    assert check(name, right)
    assert check(name, torch_normal)
    assert check(name, starter).status == "not attempted"
    assert "approximate form" in check(name, approximate).message
    assert "probability of one bit" in check(name, one_bit).message
    assert "swapped" in check(name, swapped).message
    assert "all P patterns, N P of them" in check(name, all_P_only).message
    assert "must return a pair" in check(name, lambda N, P: 0.5).message


# --- the two halves of z-scoring ----------------------------------------------------------------


def test_zscore():
    def centre(x):
        return x - x.mean(-1, keepdim=True)

    def to_common_norm(x):
        return F.normalize(x, dim=-1) * math.sqrt(x.shape[-1])

    name = "ex-ch7-zscore"
    assert check(name, centre, to_common_norm)
    assert check(name, starter, starter).status == "not attempted"
    assert check(name, centre, starter).status == "not attempted"
    assert "mean image" in check(name, lambda x: x - x.mean(0), to_common_norm).message
    full = lambda x: (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)  # noqa: E731
    assert "full z-score" in check(name, full, to_common_norm).message
    assert "standard deviation alone" in check(
        name, centre, lambda x: x / x.std(-1, keepdim=True)).message
    assert "norm 1" in check(name, centre, lambda x: F.normalize(x, dim=-1)).message
    assert "columns" in check(
        name, centre, lambda x: F.normalize(x, dim=0) * math.sqrt(x.shape[0])).message


# --- the exponential dense memory without overflow ------------------------------------------------


def dense_exp(patterns, state, order, log_domain=True, factor=True, sync=False):
    """One asynchronous sweep of rule (7.7), F = exp; the switches make the typical slips."""
    state = state.clone()
    old = state.clone()
    for i in order:
        seen = old if sync else state
        plus, minus = seen.clone(), seen.clone()
        plus[:, i], minus[:, i] = 1.0, -1.0
        if not factor:  # Aryaman's bracket (current against flipped) without the factor xi[l]
            plus, minus = seen.clone(), seen.clone()
            minus[:, i] = -minus[:, i]
        if log_domain:
            diff = torch.logsumexp(plus @ patterns.T, -1) - torch.logsumexp(minus @ patterns.T, -1)
        else:
            diff = (plus @ patterns.T).exp().sum(-1) - (minus @ patterns.T).exp().sum(-1)
        state[:, i] = sign_keep(diff, seen[:, i])
    return state


def test_dense_exp():
    name = "ex-ch7-dense-exp"
    assert check(name, dense_exp)
    assert check(name, starter).status == "not attempted"
    assert "overflows" in check(name, lambda p, s, o: dense_exp(p, s, o, log_domain=False)).message
    assert "multiply it by xi_l" in check(name, lambda p, s, o: dense_exp(p, s, o, factor=False)
                                          ).message
    assert "synchronous" in check(name, lambda p, s, o: dense_exp(p, s, o, sync=True)).message
    assert "wrong sign" in check(name, lambda p, s, o: -dense_exp(p, s, o)).message


def test_dense_exp_check_has_no_ties():
    # a tie would make the right answer depend on the order of a sum
    g = torch.Generator().manual_seed(3)
    patterns = (torch.randint(0, 2, (30, 40), generator=g) * 2 - 1).double()
    state = (torch.randint(0, 2, (8, 40), generator=g) * 2 - 1).double()
    for i in range(40):
        rest = state @ patterns.T - patterns[:, i] * state[:, i:i + 1]
        diff = torch.logsumexp(rest + patterns[:, i], -1) - torch.logsumexp(rest - patterns[:, i], -1)
        assert (diff.abs() > 1e-9).all()


# --- separation ------------------------------------------------------------------------------------


def test_separation():
    def right(patterns):
        G = patterns @ patterns.T
        others = G.masked_fill(torch.eye(len(G), dtype=torch.bool), -math.inf)
        return G.diagonal() - others.max(-1).values

    def with_self(patterns):
        G = patterns @ patterns.T
        return G.diagonal() - G.max(-1).values

    def smallest(patterns):
        G = patterns @ patterns.T
        return G.diagonal() - G.masked_fill(torch.eye(len(G), dtype=torch.bool), math.inf).min(-1).values

    def cosines(patterns):
        return right(F.normalize(patterns, dim=-1))

    name = "ex-ch7-separation"
    assert check(name, right)
    assert check(name, starter).status == "not attempted"
    assert "includes the pattern itself" in check(name, with_self).message
    assert "smallest overlap" in check(name, smallest).message
    assert "sign is reversed" in check(name, lambda p: -right(p)).message
    assert "cosines" in check(name, cosines).message
    assert "shape (P,)" in check(name, lambda p: p @ p.T).message
