"""Chapter 7's exercise checks (seqbook.exercises.ch07): each passes a right answer, calls the
untouched starter "not attempted" (the find-the-bug starters get their bug named), and names what
is wrong in each typical wrong answer."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from seqbook.exercises import check
from seqbook.hopfield import async_sweep, dense_update_async, hebbian_weights, update_sync


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

    def float32_buffer(patterns):  # float64 outer products accumulated into torch.zeros
        N = patterns.shape[1]
        W = torch.zeros(N, N)
        for x in patterns:
            W += torch.outer(x, x)
        W /= N
        W.fill_diagonal_(0)
        return W

    def einsum_masked(patterns):
        N = patterns.shape[1]
        return torch.einsum("pi,pj->ij", patterns, patterns) / N * (1 - torch.eye(N))

    def no_diagonal_zero(patterns):
        return patterns.T @ patterns / patterns.shape[1]

    name = "ex-ch7-hebb"
    assert check(name, right)
    floored = check(name, lambda p: (p.T @ p // p.shape[1]).fill_diagonal_(0))
    assert "floor division" in floored.message
    assert check(name, hebbian_weights)
    assert check(name, float32_buffer)
    assert check(name, einsum_masked)
    assert check(name, lambda p: right(p).numpy())
    assert check(name, starter).status == "not attempted"
    # the starter (both bugs): what the learner sees, not what to change
    message = check(name, buggy).message
    assert "is not the weight matrix of eq. (7.2)" in message and "by hand" in message
    assert "diagonal" not in message and "set" not in message and "divide" not in message
    assert "diagonal is not zero" in check(name, no_diagonal_zero).message
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

    def ties_down(W, state, order):
        state = state.clone()
        for i in order:
            state[:, i] = torch.where(state @ W[:, i] > 0, 1.0, -1.0).to(state.dtype)
        return state

    def ignores_order(W, state, order):
        return right(W, state, range(W.shape[0]))

    def once_each(W, state, order):  # a repeated neuron updated at its first turn only
        return right(W, state, list(dict.fromkeys(order)))

    def last_turn(W, state, order):
        return right(W, state, list(dict.fromkeys(order[::-1]))[::-1])

    def sorted_set(W, state, order):
        return right(W, state, sorted(set(order)))

    def reversed_order(W, state, order):
        return right(W, state, order[::-1])

    def skips_first(W, state, order):
        return right(W, state, order[1:])

    def skips_last(W, state, order):
        return right(W, state, order[:-1])

    def rowwise(W, state, order):  # the field from row i of W, and a nested where
        state = state.clone()
        for i in order:
            h = (W[i] * state).sum(-1)
            state[:, i] = torch.where(h > 0, 1.0, torch.where(h < 0, -1.0, state[:, i]))
        return state

    def float32(W, state, order):
        return right(W.float(), state.float(), order)

    def twice(W, state, order):
        return right(W, right(W, state, order), order)

    def until_settled(W, state, order):
        new = right(W, state, order)
        while not torch.equal(new, state):
            state, new = new, right(W, new, order)
        return new

    name = "ex-ch7-sync-cycle"
    assert check(name, right)
    assert check(name, rowwise)
    assert check(name, float32)
    assert check(name, lambda W, s, o: right(W, s, o).numpy())
    assert check(name, async_sweep)
    assert check(name, starter).status == "not attempted"
    # the starter: what the learner sees, not what to change
    message = check(name, buggy).message
    assert "swapped values" in message and "never settles" in message
    assert "synchronous" not in message and "must" not in message
    assert "changed the state it was given" in check(name, in_place).message
    assert "other than -1 and +1" in check(name, plain_sign).message
    assert "becomes +1" in check(name, ties_up).message
    assert "becomes -1" in check(name, ties_down).message
    assert "increasing order" in check(name, ignores_order).message
    assert "only at its first turn" in check(name, once_each).message
    assert "only at its last turn" in check(name, last_turn).message
    assert "increasing order" in check(name, sorted_set).message
    assert "from the end of `order`" in check(name, reversed_order).message
    # in the two-neuron network these two look like the reversed order: the larger one names them
    assert "first entry of `order` is never used" in check(name, skips_first).message
    assert "last entry of `order` is never used" in check(name, skips_last).message
    assert "runs the sweep twice" in check(name, twice).message
    assert "until the state stops changing" in check(name, until_settled).message

    def tolerant(W, state, order):  # a field below 0.1 keeps the value, "against round-off"
        state = state.clone()
        for i in order:
            h = state @ W[:, i]
            state[:, i] = torch.where(h.abs() < 0.1, state[:, i], torch.sign(h))
        return state

    assert "small but not exactly 0" in check(name, tolerant).message


def test_sync_cycle_case_makes_every_slip_matter():
    from seqbook.exercises.ch07 import _orders, _sync_cycle_case, _tie_sweep

    W, state, order, ref = _sync_cycle_case()
    assert len(order) > len(set(order))  # repeats
    assert torch.equal(ref, async_sweep(W, state, order))
    outs = [ref, update_sync(W, state)]
    outs += [async_sweep(W, state, other) for other in _orders(order).values()]
    outs += [_tie_sweep(W, state, order, tie) for tie in (1.0, -1.0)]
    outs.append(async_sweep(W, outs[0], order))  # two sweeps; and sweeps until settled:
    outs.append(async_sweep(W, async_sweep(W, outs[-1], order), order))
    assert torch.equal(outs[-1], async_sweep(W, outs[-1], order))
    # each slip ends in a state of its own, so the first one matched is the one made
    assert all(not torch.equal(a, b) for i, a in enumerate(outs) for b in outs[:i])
    assert torch.equal(W, W.round())  # integer weights: exact fields, exact ties


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

    def wrong_z(N, P):  # P_err from a wrong z, the powers right: named as P_err's slip
        p = phi(-N / math.sqrt((P - 1) * (N - 1)))
        return (1 - p) ** N, (1 - p) ** (N * P)

    assert "q is not P_err" in check("ex-ch7-perfect-recall", wrong_z).message

    def torch_normal(N, P):  # another way to write Phi
        p = torch.distributions.Normal(0.0, 1.0).cdf(torch.tensor(-math.sqrt((N - 1) / (P - 1)),
                                                                  dtype=torch.float64))
        return (1 - p) ** N, (1 - p) ** (N * P)

    def rounded(N, P):  # the precision the exercise asks for: 3 significant digits
        return tuple(float(f"{v:.3g}") for v in right(N, P))

    def a_digit_off(N, P):
        one, every = right(N, P)
        return float(f"{one:.3g}") + 2 * 10 ** (math.floor(math.log10(one)) - 2), every

    def sign_slip(N, P):  # (p - 1)^N: right only for even powers
        p = phi(-math.sqrt((N - 1) / (P - 1)))
        return (p - 1) ** N, (p - 1) ** (N * P)

    def two_tails(N, P):
        p = math.erfc(math.sqrt((N - 1) / (P - 1)) / math.sqrt(2))
        return (1 - p) ** N, (1 - p) ** (N * P)

    def union_bound(N, P):
        p = phi(-math.sqrt((N - 1) / (P - 1)))
        return 1 - N * p, (1 - p) ** (N * P)

    def in_logs(N, P):  # another order of operations, as tensors
        p = torch.special.ndtr(torch.tensor(-math.sqrt((N - 1) / (P - 1)), dtype=torch.float64))
        return torch.exp(N * torch.log1p(-p)), torch.exp(N * P * torch.log1p(-p))

    name = "ex-ch7-perfect-recall"
    assert check(name, right)
    assert check(name, torch_normal)
    assert check(name, rounded)
    assert check(name, in_logs)
    assert "wrong (N = 100, P = 10)" in check(name, a_digit_off).message
    assert "negative (N = 101, P = 11)" in check(name, sign_slip).message
    assert "twice too large" in check(name, two_tails).message
    assert "independent" in check(name, union_bound).message
    assert check(name, starter).status == "not attempted"
    assert "approximate form" in check(name, approximate).message
    assert "probability of one bit" in check(name, one_bit).message
    assert "swapped" in check(name, swapped).message
    assert "all P patterns, N P of them" in check(name, all_P_only).message
    assert "must return two numbers" in check(name, lambda N, P: 0.5).message
    for as_array in (np.array, torch.tensor):  # two numbers as one array are a pair too
        assert check(name, lambda N, P, f=as_array: f(right(N, P)))

    def no_root_two(N, P):  # the review's case: P_err too small, not "the probability of one bit"
        p = 0.5 * math.erfc(math.sqrt((N - 1) / (P - 1)))
        return (1 - p) ** N, (1 - p) ** (N * P)

    def float32_powers(N, P):
        survive = torch.tensor(1 - phi(-math.sqrt((N - 1) / (P - 1))), dtype=torch.float32)
        return float(survive ** N), float(survive ** (N * P))

    assert "probability of one bit" not in check(name, no_root_two).message
    assert "float32" in check(name, float32_powers).message

    def float32_chained(N, P):  # the first number, in float32, raised to the power P
        one = torch.tensor(1 - phi(-math.sqrt((N - 1) / (P - 1))), dtype=torch.float32) ** N
        return float(one), float(one ** P)

    def poisson(N, P):  # the right P_err, with e^(-N P_err) for (1 - P_err)^N
        p = phi(-math.sqrt((N - 1) / (P - 1)))
        return math.exp(-N * p), math.exp(-N * P * p)

    assert "float32" in check(name, float32_chained).message
    message = check(name, poisson).message
    assert "approximation of (1 - P_err)^N" in message and "q is not P_err" not in message


# --- the two halves of z-scoring ----------------------------------------------------------------


def test_zscore():
    def centre(x):
        return x - x.mean(-1, keepdim=True)

    def to_common_norm(x):
        return F.normalize(x, dim=-1) * math.sqrt(x.shape[-1])

    def to_common_norm_float32(x):  # a right answer computed in float32
        x = x.float()
        return x / torch.linalg.vector_norm(x, dim=1, keepdim=True) * x.shape[1] ** 0.5

    name = "ex-ch7-zscore"
    assert check(name, centre, to_common_norm)

    def centre_in_place(x):  # right values, but the caller's images are changed
        x -= x.mean(-1, keepdim=True)
        return x

    assert "changed the images" in check(name, centre_in_place, to_common_norm).message
    assert check(name, lambda x: x - x.mean(dim=1, keepdim=True), to_common_norm_float32)
    assert check(name, lambda x: (x - x.mean(-1, keepdim=True)).numpy(), to_common_norm)
    # one function where the exercise takes two: a verdict that says so, not a traceback
    one = check(name, centre)
    assert one.status == "fail" and "takes 2 answers" in one.message
    assert "whatever their length" in check(
        name, centre, lambda x: F.normalize(x, dim=-1) * 28).message
    assert "subtract each row's mean" in check(
        name, lambda x: x - x.median(-1, keepdim=True).values, to_common_norm).message
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


def dense_exp_slips(patterns, state, order, tie=None, amax=False, amax_plus=False):
    """rule (7.7) with F = exp, with a tie turned to +1/-1, or a maximum for one log-sum-exp
    (``amax``: the bit = -1 side; ``amax_plus`` as well: both sides)."""
    state = state.clone()
    for i in order:
        rest = state @ patterns.T - patterns[:, i] * state[:, i:i + 1]
        minus = (torch.amax if amax else torch.logsumexp)(rest - patterns[:, i], -1)
        plus = (torch.amax if amax_plus else torch.logsumexp)(rest + patterns[:, i], -1)
        diff = plus - minus
        old = state[:, i] if tie is None else torch.full_like(diff, tie)
        state[:, i] = sign_keep(diff, old)
    return state


def _recomputed(patterns, state, order, keep_ties=True):
    """The overlaps recomputed at every step, logaddexp; a tie keeps the old value, or (not
    keep_ties) is left at torch.sign's 0."""
    state = state.clone()
    for i in order:
        plus, minus = state.clone(), state.clone()
        plus[:, i], minus[:, i] = 1.0, -1.0
        diff = torch.logsumexp(plus @ patterns.T, -1) - torch.logsumexp(minus @ patterns.T, -1)
        if keep_ties:
            state[:, i] = torch.where(diff > 0, 1.0, torch.where(diff < 0, -1.0, state[:, i]))
        else:
            state[:, i] = torch.sign(diff)
    return state


def test_dense_exp():
    recomputed = _recomputed

    def once_each(patterns, state, order):
        return dense_exp(patterns, state, list(dict.fromkeys(order)))

    def in_place(patterns, state, order):
        state[:] = dense_exp(patterns, state, order)
        return state

    name = "ex-ch7-dense-exp"
    assert check(name, dense_exp)
    assert check(name, recomputed)
    assert check(name, lambda p, s, o: dense_update_async(p, s, "exp", order=o))
    assert check(name, lambda p, s, o: dense_exp(p.float(), s.float(), o))
    assert check(name, starter).status == "not attempted"
    assert "overflows" in check(name, lambda p, s, o: dense_exp(p, s, o, log_domain=False)).message
    assert "multiply it by xi_l" in check(name, lambda p, s, o: dense_exp(p, s, o, factor=False)
                                          ).message
    assert "synchronous" in check(name, lambda p, s, o: dense_exp(p, s, o, sync=True)).message
    assert "wrong sign" in check(name, lambda p, s, o: -dense_exp(p, s, o)).message
    assert "changed the state it was given" in check(name, in_place).message

    def sign_of_diff(patterns, state, order):  # torch.sign leaves a tie at 0: not a state
        return _recomputed(patterns, state, order, keep_ties=False)

    assert "entries other than -1 and +1" in check(name, sign_of_diff).message
    # ties set to +1 or -1, where the rule keeps the old value
    for tie in (1.0, -1.0):
        message = check(name, lambda p, s, o, t=tie: dense_exp_slips(p, s, o, tie=t)).message
        assert f"a tie makes the neuron {tie:+.0f}" in message
    assert "only at its first turn" in check(name, once_each).message
    assert "first entry of `order` is never used" in check(
        name, lambda p, s, o: dense_exp(p, s, o[1:])).message
    assert "last entry of `order` is never used" in check(
        name, lambda p, s, o: dense_exp(p, s, o[:-1])).message
    assert "increasing order" in check(name, lambda p, s, o: dense_exp(p, s, sorted(set(o)))
                                       ).message
    assert "a maximum, not a log-sum-exp" in check(
        name, lambda p, s, o: dense_exp_slips(p, s, o, amax=True)).message


def _shifted(patterns, state, order, batch_max=False):
    """exp after a fixed shift, by N or by one maximum over the batch: right where the overlaps
    are near the shift, 0 = 0 (a tie) where exp underflows."""
    state = state.clone()
    for i in order:
        plus, minus = state.clone(), state.clone()
        plus[:, i], minus[:, i] = 1.0, -1.0
        op, om = plus @ patterns.T, minus @ patterns.T
        shift = max(op.max(), om.max()) if batch_max else patterns.shape[1]
        diff = (op - shift).exp().sum(-1) - (om - shift).exp().sum(-1)
        state[:, i] = sign_keep(diff, state[:, i])
    return state


@pytest.mark.parametrize("batch_max", [False, True])
def test_dense_exp_refuses_a_fixed_shift(batch_max):
    message = check("ex-ch7-dense-exp", lambda p, s, o: _shifted(p, s, o, batch_max)).message
    assert "far from every stored pattern, is left unchanged" in message


def test_dense_exp_names_maxima_on_both_sides():
    assert "both sides of the comparison are maxima" in check(
        "ex-ch7-dense-exp", lambda p, s, o: dense_exp_slips(p, s, o, amax=True, amax_plus=True)
    ).message


def test_hebb_refuses_a_changed_argument():
    def in_place(patterns):  # right weights, but the learner's patterns are scaled in place
        patterns /= patterns.shape[1] ** 0.5
        return (patterns.T @ patterns).fill_diagonal_(0)

    assert "changed the patterns it was given" in check("ex-ch7-hebb", in_place).message


def test_separation_names_a_diagonal_filled_in_place():  # the second-largest: test_separation
    def filled_in_place(patterns):
        G = patterns @ patterns.T
        G.fill_diagonal_(-math.inf)
        return G.diagonal() - G.max(-1).values

    assert "filled with -inf in place" in check("ex-ch7-separation", filled_in_place).message

    def zeroed_in_place(patterns):  # the view reads 0 after the fill
        G = patterns @ patterns.T
        return G.diagonal() - G.fill_diagonal_(0).max(-1).values

    assert "zeroed in place" in check("ex-ch7-separation", zeroed_in_place).message


def test_dense_exp_cases_make_every_slip_matter():
    from seqbook.exercises.ch07 import _dense_exp_cases, _orders

    small, ties, large = _dense_exp_cases()
    patterns, state, order, ref = small
    assert len(order) > len(set(order))
    assert torch.equal(dense_exp(patterns, state, order), ref)
    for other in _orders(order).values():
        assert not torch.equal(dense_exp(patterns, state, other), ref)
    assert not torch.equal(dense_exp(patterns, state, order, sync=True), ref)
    assert not torch.equal(dense_exp_slips(patterns, state, order, amax=True), ref)
    # no near-tie along the sweep: rounding cannot decide a neuron
    s = state.clone()
    for i in order:
        rest = s @ patterns.T - patterns[:, i] * s[:, i:i + 1]
        diff = torch.logsumexp(rest + patterns[:, i], -1) - torch.logsumexp(rest - patterns[:, i], -1)
        assert (diff.abs() > 0.08).all()
        s[:, i] = sign_keep(diff, s[:, i])
    # two patterns: ties are exact (equal pairs of integer overlaps), and both tie slips matter
    patterns, state, order, ref = ties
    assert patterns.shape[0] == 2
    for tie in (1.0, -1.0):
        assert not torch.equal(dense_exp_slips(patterns, state, order, tie=tie), ref)
    # N = 1000: the sums of exponentials overflow
    patterns, state, order, ref = large
    assert torch.isinf((state @ patterns.T).exp().sum(-1)).all()


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

    def zero_diagonal(patterns):  # the review's wrong answer: the diagonal filled with 0
        G = patterns @ patterns.T
        return G.diagonal() - G.clone().fill_diagonal_(0).max(-1).values

    def second_largest(patterns):
        G = patterns @ patterns.T
        return G.diagonal() - G.topk(2, dim=-1).values[:, 1]

    def looped(patterns):  # a loop with torch.cat, in float32
        patterns = patterns.float()
        out = []
        for i in range(len(patterns)):
            others = torch.cat([patterns[:i], patterns[i + 1:]]) @ patterns[i]
            out.append(patterns[i] @ patterns[i] - others.max())
        return torch.stack(out)

    name = "ex-ch7-separation"
    assert check(name, right)
    assert check(name, looped)
    assert check(name, lambda p: right(p).numpy())
    assert check(name, starter).status == "not attempted"
    assert "includes the pattern itself" in check(name, with_self).message
    assert "as an overlap of 0" in check(name, zero_diagonal).message
    assert "second-largest overlap" in check(name, second_largest).message
    assert "smallest overlap" in check(name, smallest).message
    assert "sign is reversed" in check(name, lambda p: -right(p)).message
    assert "cosines" in check(name, cosines).message
    assert "shape (P,)" in check(name, lambda p: p @ p.T).message


# --- a cache of the text so far --------------------------------------------------------------------


def test_cache_size_zero():  # a reader's two answers that broke only at size 0
    def slice_from_end(h, next_tokens, vocab_size, theta, size):  # [-0:] is everything
        out = torch.zeros(len(h), vocab_size, dtype=h.dtype)
        for t in range(1, len(h)):
            w = torch.softmax(theta * h[:t][-size:] @ h[t], 0)
            out[t].index_add_(0, next_tokens[:t][-size:], w)
        return out

    def row_zero_only(h, next_tokens, vocab_size, theta, size):  # NaN rows when size = 0
        T = h.shape[0]
        t, i = torch.arange(T)[:, None], torch.arange(T)[None, :]
        kept = (i < t) & (i >= t - size)
        w = torch.softmax((theta * h @ h.T).masked_fill(~kept, -math.inf), -1)
        w[0] = 0
        return w @ F.one_hot(next_tokens, vocab_size).to(h.dtype)

    for answer in (slice_from_end, row_zero_only):
        assert "with size = 0 the cache holds nothing" in check("ex-ch7-cache", answer).message

    def negative_start(h, next_tokens, vocab_size, theta, size):  # h[t - size:t], no max(0, .)
        out = torch.zeros(len(h), vocab_size, dtype=h.dtype)
        for t in range(1, len(h)):
            keys = h[t - size:t] if size else h[:0]
            if len(keys):
                w = torch.softmax(theta * keys @ h[t], 0)
                out[t].index_add_(0, next_tokens[t - size:t], w)
        return out

    assert "start the window at max(0, t - size)" in check("ex-ch7-cache", negative_start).message


def test_cache():
    def right(h, next_tokens, vocab_size, theta, size):
        T = h.shape[0]
        t, i = torch.arange(T)[:, None], torch.arange(T)[None, :]
        kept = (i < t) & (i >= t - size)
        scores = (theta * h @ h.T).masked_fill(~kept, -math.inf)
        return torch.softmax(scores, -1).nan_to_num(0.0) @ F.one_hot(next_tokens, vocab_size).double()

    def looped(h, next_tokens, vocab_size, theta, size):  # one row at a time, in float32
        h = h.float()
        out = torch.zeros(len(h), vocab_size)
        for t in range(1, len(h)):
            keys = range(max(0, t - size), t)
            if not keys:  # size 0: nothing to read, the row stays zero
                continue
            w = torch.softmax(torch.stack([theta * h[t] @ h[i] for i in keys]), 0)
            for weight, i in zip(w, keys, strict=True):
                out[t, next_tokens[i]] += weight
        return out

    def with_mask(h, next_tokens, vocab_size, theta, size, before=True, bias=0, scale=None):
        T = h.shape[0]
        t, i = torch.arange(T)[:, None], torch.arange(T)[None, :]
        kept = ((i < t) if before else (i <= t)) & (i >= t - size - bias)
        s = theta if scale is None else scale
        scores = (s * h @ h.T).masked_fill(~kept, -math.inf)
        return torch.softmax(scores, -1).nan_to_num(0.0) @ F.one_hot(next_tokens, vocab_size).double()

    def nan_row(h, next_tokens, vocab_size, theta, size):  # no nan_to_num
        T = h.shape[0]
        t, i = torch.arange(T)[:, None], torch.arange(T)[None, :]
        kept = (i < t) & (i >= t - size)
        scores = (theta * h @ h.T).masked_fill(~kept, -math.inf)
        return torch.softmax(scores, -1) @ F.one_hot(next_tokens, vocab_size).double()

    def uniform_row0(h, next_tokens, vocab_size, theta, size):
        out = right(h, next_tokens, vocab_size, theta, size)
        out[0] = 1 / vocab_size
        return out

    name = "ex-ch7-cache"
    assert check(name, right)
    assert check(name, looped)
    assert "up to and including t itself" in check(name, lambda *a: with_mask(
        *a, before=False, bias=-1)).message
    assert check(name, lambda *a: right(*a).numpy())
    assert check(name, starter).status == "not attempted"
    assert "very token row t must predict" in check(
        name, lambda *a: with_mask(*a, before=False)).message
    assert "size + 1" in check(name, lambda *a: with_mask(*a, bias=1)).message
    assert "without theta" in check(name, lambda h, n, V, th, s: with_mask(h, n, V, th, s, scale=1.0)
                                    ).message
    assert "divided by theta" in check(name, lambda h, n, V, th, s: with_mask(h, n, V, th, s,
                                                                              scale=1 / th)).message
    assert "row 0 is NaN" in check(name, nan_row).message
    assert "row 0 must be all zeros" in check(name, uniform_row0).message
    assert "shape (T, V)" in check(name, lambda h, n, V, th, s: right(h, n, V, th, s).T).message
    rolled = check(name, lambda *a: right(*a).roll(1, dims=-1)).message
    assert "which is not the softmax" in rolled and "expected" not in rolled  # no answer shown

    def mask_after(h, next_tokens, vocab_size, theta, size):  # the weights masked after the softmax
        T = h.shape[0]
        t, i = torch.arange(T)[:, None], torch.arange(T)[None, :]
        kept = (i < t) & (i >= t - size)
        weights = torch.softmax(theta * h @ h.T, -1) * kept
        return weights @ F.one_hot(next_tokens, vocab_size).double()

    assert "sums to" in check(name, mask_after).message and "before the softmax" in check(
        name, mask_after).message


def test_float32_work_returned_as_float64_is_named():
    def centre(x):
        return x - x.mean(-1, keepdim=True)

    def to_common_norm_numpy32(x):  # NumPy 2: np.sqrt(d) is float64, the product float64 too
        a = x.numpy().astype(np.float32)
        return a / np.linalg.norm(a, axis=-1, keepdims=True) * np.sqrt(a.shape[-1])

    def separation32(x):
        G = x.float() @ x.float().T
        eye = torch.eye(len(x), dtype=torch.bool)
        return (G.diagonal() - G.masked_fill(eye, -math.inf).max(-1).values).double()

    for result in (check("ex-ch7-zscore", centre, to_common_norm_numpy32),
                   check("ex-ch7-separation", separation32)):
        assert result.status == "fail" and "right to float32's precision only" in result.message
    assert check("ex-ch7-separation", lambda x: separation32(x).float())  # float32: judged so
    centre32 = check("ex-ch7-zscore", lambda x: x - x.float().mean(-1, keepdim=True),
                     lambda x: x / x.norm(dim=-1, keepdim=True) * math.sqrt(x.shape[-1]))
    assert "centre(x) is right to float32's precision only" in centre32.message
