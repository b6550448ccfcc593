"""Checks of chapter 7's exercises (Hopfield networks)."""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from ..hopfield import (
    async_sweep,
    dense_update_async,
    dense_update_sync,
    hebbian_weights,
    sign_keep,
    update_sync,
)
from .core import (
    Wrong,
    agrees,
    call,
    close,
    exercise,
    expect,
    float32_work,
    returned_tensor,
    two_numbers,
)

F64 = torch.float64


def _spins(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Random states in {-1, +1} of the given shape, float64."""
    return (torch.randint(0, 2, shape, generator=generator) * 2 - 1).to(F64)


def _binary(out: torch.Tensor, what: str) -> None:
    """A state must stay in {-1, +1}."""
    expect(bool(((out == 1) | (out == -1)).all()),
           f"{what} returns entries other than -1 and +1: a tie (a field, or a difference of "
           "energies, of exactly 0) must keep the neuron's value (torch.sign(0) is 0, which is "
           "not a state)")


# ---------------------------------------------------------------------------------------------
# Find the bug: Hebb's rule.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch7-hebb", hints=[
    "Compare the function with eq. (7.2) term by term: what multiplies the sum, and what happens "
    "to the entries W_ii?",
    "patterns.T @ patterns puts P on the diagonal (every pattern adds x_i x_i = 1) and has no "
    "factor in front. The rule divides by N, the number of neurons, and sets the diagonal to 0.",
])
def check_hebb(hebb):
    g = torch.Generator().manual_seed(0)
    P, N = 5, 12
    x = _spins((P, N), g)
    given = x.clone()
    W = returned_tensor(call(hebb, given, what="hebb"), "hebb")
    expect(torch.equal(given, x), "hebb changed the patterns it was given (an in-place operation "
           "such as /= or fill_ on its argument): compute W from them without modifying them")
    expect(W.shape == (N, N), f"for (P, N) = {(P, N)} patterns W must be (N, N) = {(N, N)}, got "
           f"{tuple(W.shape)}: sum the outer products of the rows, patterns.T @ patterns")
    ref = hebbian_weights(x)
    off = ~torch.eye(N, dtype=torch.bool)
    if close(W, x.T @ x):  # the starter: the symptom only (the bugs are for the hints)
        raise Wrong(f"for P = {P} patterns of N = {N} neurons, hebb(patterns) is not the weight "
                    "matrix of eq. (7.2): compute a few of its entries by hand from the "
                    "equation and compare")
    if not bool((W.diagonal().abs() < 1e-12).all()):
        raise Wrong("the diagonal is not zero: every pattern adds x_i x_i = 1 to W_ii, so each "
                    "neuron would excite itself; set W_ii = 0")
    if close(W, ref * N):
        raise Wrong("W is N times too large: the rule divides the sum by N, the number of neurons")
    if close(W, ref * N / (N - 1)):
        raise Wrong("W is divided by N - 1: eq. (7.2) divides the sum by N, the number of "
                    "neurons")
    if close(W, ref * N / P):
        raise Wrong("W is divided by P, the number of patterns: the rule divides by N, the number "
                    "of neurons")
    if close(W[off], torch.floor(x.T @ x / N)[off]):
        raise Wrong("the weights are whole numbers: // is floor division, which rounds the sum "
                    "over N down; divide with /")
    expect(close(W[off], ref[off], n=P), "the off-diagonal weights are not (1/N) sum_mu x_i x_j: "
           "check the outer products")
    expect(close(W, ref, n=P), "W is not the Hebbian weight matrix of eq. (7.2)")


# ---------------------------------------------------------------------------------------------
# Find the bug: a sweep that is not asynchronous.
# ---------------------------------------------------------------------------------------------


def _orders(order: list[int]) -> dict[str, list[int]]:
    """The orders of the typical slips: each neuron once (first or last turn), sorted,
    reversed, the first or the last turn left out."""
    return {
        "first": list(dict.fromkeys(order)),
        "last": list(dict.fromkeys(order[::-1]))[::-1],
        "sorted": sorted(set(order)),
        "reversed": order[::-1],
        "skips first": order[1:],
        "skips last": order[:-1],
    }


_ORDER_SLIPS = {
    "first": "a neuron listed twice in `order` is updated only at its first turn: it must be "
             "updated again at every later turn, from the state at that time",
    "last": "a neuron listed twice in `order` is updated only at its last turn: it must be "
            "updated at every one of its turns",
    "sorted": "the neurons are updated in increasing order, each once: update them in the order "
              "of `order`, repeats included",
    "reversed": "the neurons are updated from the end of `order` to its start: update them in "
                "the order given",
    "skips first": "the first entry of `order` is never used (the loop starts at order[1]): "
                   "update the neurons of every entry, the first included",
    "skips last": "the last entry of `order` is never used (the loop stops before it): update "
                  "the neurons of every entry, the last included",
}


def _tie_sweep(W: torch.Tensor, state: torch.Tensor, order: list[int], tie: float):
    """The asynchronous sweep with a field of exactly 0 turned to ``tie`` (a slip)."""
    state = state.clone()
    for i in order:
        field = state @ W[:, i]
        state[:, i] = torch.where(field == 0, tie, torch.sign(field))
    return state


@lru_cache(maxsize=1)
def _sync_cycle_case():
    """A network with integer weights (exact fields, ties among them) and an order with repeats
    chosen so that every slip of `_orders`, both tie rules and the synchronous rule change the
    result, each to a state of its own, so that the message names the slip made
    (tests/exercises/test_exercises_ch07.py holds this)."""
    g = torch.Generator().manual_seed(10)
    W = hebbian_weights(_spins((4, 16), g), normalize=False)
    state = _spins((24, 16), g)
    order = torch.randperm(16, generator=g).tolist() + torch.randint(0, 16, (8,), generator=g
                                                                        ).tolist()
    return W, state, order, async_sweep(W, state, order)


@exercise("ex-ch7-sync-cycle", hints=[
    "Run the sweep by hand in the two-neuron network from (1, -1) with order [0, 1]: when neuron "
    "1's turn comes, which value of neuron 0 does its field use?",
    "The fields h are computed once, before the loop, from the state before the sweep: every "
    "neuron reads the old state, which is the synchronous rule written as a loop. Compute the "
    "field of neuron i inside the loop, from the current state.",
])
def check_sync_cycle(sweep):
    # the two-neuron network of the exercise: it stores (1, 1)
    W2 = hebbian_weights(torch.tensor([[1.0, 1.0]], dtype=F64))
    s2 = torch.tensor([[1.0, -1.0]], dtype=F64)
    out = returned_tensor(call(sweep, W2.clone(), s2.clone(), [0, 1], what="sweep"), "sweep")
    expect(out.shape == s2.shape, f"sweep must return a state of the input's shape (B, N) = "
           f"{tuple(s2.shape)}, got {tuple(out.shape)}")
    if torch.equal(out, -s2):  # the starter: said as what the learner sees
        raise Wrong("in the two-neuron network that stores (1, 1), the sweep with order [0, 1] "
                    "takes (1, -1) to (-1, 1): the two neurons swapped values, a second sweep "
                    "swaps them back, and the state never settles")
    _binary(out, "sweep")
    # a slip that two neurons cannot tell apart (order reversed, or its first entry left out)
    # is named from the larger network
    if not torch.equal(out, async_sweep(W2, s2, [0, 1])):
        raise Wrong(_sync_cycle_slip(sweep) or
                    "in the two-neuron network, from (1, -1) with order [0, 1], the sweep does not "
                    "end in the state the asynchronous rule gives")
    out = returned_tensor(call(sweep, W2.clone(), s2.clone(), [1, 0], what="sweep"), "sweep")
    if not (out.shape == s2.shape and torch.equal(out, async_sweep(W2, s2, [1, 0]))):
        raise Wrong(_sync_cycle_slip(sweep) or
                    "in the two-neuron network, from (1, -1) with order [1, 0], the sweep does not "
                    "end in the state the asynchronous rule gives: neuron 1 goes first and copies "
                    "neuron 0")
    slip = _sync_cycle_slip(sweep)
    if slip:
        raise Wrong(slip)
    # the book's normalised weights, eq. (7.2): 3 patterns of 64 give fields of odd multiples of
    # 1/64, so that a field near 0 but not 0 must decide its neuron
    g = torch.Generator().manual_seed(11)
    W, state = hebbian_weights(_spins((3, 64), g)), _spins((24, 64), g)
    order = torch.randperm(64, generator=g).tolist()
    out = returned_tensor(call(sweep, W.clone(), state.clone(), order, what="sweep"), "sweep")
    expect(out.shape == state.shape and torch.equal(out, async_sweep(W, state, order)),
           "with the normalised weights of eq. (7.2), whose fields here are multiples of 1/64, "
           "the sweep does not give the asynchronous rule's states: a field that is small but "
           "not exactly 0 decides its neuron; only a field of exactly 0 keeps the value")


def _sync_cycle_slip(sweep) -> str | None:
    """None if the sweep gives the asynchronous rule's states on the larger network (repeats in
    the order and ties that matter); else what is wrong, naming the slip where it is a known one."""
    W, state, order, ref = _sync_cycle_case()
    given = state.clone()
    out = returned_tensor(call(sweep, W.clone(), given, list(order), what="sweep"), "sweep")
    expect(torch.equal(given, state), "sweep changed the state it was given: update a copy "
           "(state.clone()) and return it")
    expect(out.shape == state.shape, f"sweep must return a state of the input's shape (B, N) = "
           f"{tuple(state.shape)}, got {tuple(out.shape)}")
    _binary(out, "sweep")
    if torch.equal(out, ref):
        return None
    full_sync = update_sync(W, state)
    listed = sorted(set(order))
    sync_on_order = state.clone()
    sync_on_order[:, listed] = full_sync[:, listed]
    if torch.equal(out, sync_on_order) or torch.equal(out, full_sync):
        return ("every neuron reads the fields of the state before the sweep: that is the "
                "synchronous rule; compute the field of neuron i from the current state, after "
                "the updates before it")
    if torch.equal(out, async_sweep(W, state, list(range(16)))):
        return ("the neurons are updated in increasing order, 0, 1, ..., N-1: update the neurons "
                "of `order`, in that order (repeats included)")
    for slip, other in _orders(order).items():
        if torch.equal(out, async_sweep(W, state, other)):
            return _ORDER_SLIPS[slip]
    for tie in (1.0, -1.0):
        if torch.equal(out, _tie_sweep(W, state, order, tie)):
            return f"a neuron whose field is exactly 0 becomes {tie:+.0f}: it must keep its value"
    once = async_sweep(W, state, order)
    if torch.equal(out, async_sweep(W, once, order)):
        return ("the answer runs the sweep twice: one sweep goes through `order` once, each "
                "listed neuron updated once per appearance")
    settled = once
    for _ in range(100):  # sweeps until nothing changes
        settled, previous = async_sweep(W, settled, order), settled
        if torch.equal(settled, previous):
            break
    if torch.equal(out, settled):
        return ("the answer sweeps until the state stops changing: one sweep goes through "
                "`order` once and returns, settled or not")
    return ("the sweep does not give the states of the asynchronous rule: update the neurons of "
            "`order` one at a time, each from the field of the current state")


# ---------------------------------------------------------------------------------------------
# Perfect recall: the two probabilities of the Gaussian crosstalk estimate.
# ---------------------------------------------------------------------------------------------


def _phi(z: float) -> float:
    """The standard normal distribution function."""
    return 0.5 * math.erfc(-z / math.sqrt(2))


def _probability(value) -> float:
    """One probability of the learner's pair, as a float (a tensor or an array with one entry
    too)."""
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError) as err:
        raise Wrong(f"each probability must be a number, got {type(value).__name__}") from err


@exercise("ex-ch7-perfect-recall", hints=[
    "Compute the bit error probability first, with the first form of eq. (7.5) and the normal "
    "distribution function Phi(z) = erfc(-z / sqrt(2)) / 2 (math.erfc).",
    "One given pattern is a fixed point when all its N bits survive; all P patterns when all N P "
    "bits do. Each bit survives with probability 1 - P_err.",
])
def check_perfect_recall(stable_probabilities):
    # odd N and N P as well: a sign slip in 1 - P_err is invisible at even powers
    for N, P in [(100, 10), (101, 11), (100, 20), (1000, 60), (999, 61), (1000, 100)]:
        out = two_numbers(call(stable_probabilities, N, P, what="stable_probabilities"))
        expect(isinstance(out, (tuple, list)) and len(out) == 2,
               "stable_probabilities must return two numbers, as a tuple (one given pattern, "
               "all P patterns)")
        one, every = (_probability(v) for v in out)
        p_err = _phi(-math.sqrt((N - 1) / (P - 1)))
        p_approx = _phi(-math.sqrt(N / P))
        ref_one, ref_all = (1 - p_err) ** N, (1 - p_err) ** (N * P)

        def near(a, b):  # the precision the exercise asks for
            return agrees(a, b, digits=3)

        if near(one, (1 - p_approx) ** N) and not near(one, ref_one):
            raise Wrong("you used the approximate form Phi(-sqrt(N/P)); use the first form of "
                        "eq. (7.5), Phi(-sqrt((N-1)/(P-1))), which is more accurate at these N")
        if near(one, (1 - 2 * p_err) ** N):
            raise Wrong("P_err is twice too large: a bit flips only when the crosstalk pushes "
                        "against it, one tail of the Gaussian, Phi(-z) = erfc(z / sqrt(2)) / 2")
        if near(one, 1 - N * p_err) and not near(one, ref_one):
            raise Wrong("1 - N P_err is a bound on the probability that all N bits survive; the "
                        "estimate treats them as independent: (1 - P_err)^N")
        if agrees(one, p_err, digits=6) or agrees(one, 1 - p_err, digits=6):
            raise Wrong("the first number is the probability of one bit: a pattern is a fixed "
                        "point only when all its N bits survive")
        if agrees(one, 0.0) and agrees(every, 0.0):
            raise Wrong(f"both probabilities are about 0 (N = {N}, P = {P}): each bit survives "
                        "with probability 1 - P_err, and P_err = Phi(-z), z = sqrt((N - 1) / "
                        "(P - 1)), is small, a tail of the Gaussian")
        if one == 1.0 and not near(one, ref_one):
            raise Wrong("the square root is missing: P_err = Phi(-z) with z = "
                        "sqrt((N - 1) / (P - 1)), the ratio of the signal to the crosstalk's "
                        "standard deviation")
        for value, ref in ((one, ref_one), (every, ref_all)):
            if not near(value, ref) and value == round(ref, 3):
                raise Wrong(f"a probability is rounded to 3 decimal places (N = {N}, P = {P}), "
                            "which can turn a small one into 0: give 3 significant digits")
        if (not near(one, ref_one) and near(one, math.exp(-N * p_err))
                or not near(every, ref_all) and near(every, math.exp(-N * P * p_err))):
            raise Wrong("e^(-N P_err) is the small-P_err approximation of (1 - P_err)^N, and it "
                        f"differs in the digits asked for here (N = {N}, P = {P}): use the power")
        survive32 = torch.tensor(1 - p_err, dtype=torch.float32)
        one32 = survive32 ** N
        # the second number in float32: (1 - P_err)^(N P) at once, or the first one to the P
        for value, ref, in_float32 in ((one, ref_one, (one32,)),
                                       (every, ref_all, (survive32 ** (N * P), one32 ** P))):
            if not near(value, ref) and any(agrees(value, float(x), digits=6) for x in in_float32):
                raise Wrong("the powers are computed in float32, whose rounding of 1 - P_err "
                            "grows with the power: compute in float64 (Python floats)")
        if near(one, ref_all) and near(every, ref_one):
            raise Wrong("the two probabilities are swapped: the pair is (one given pattern, all "
                        "P patterns)")
        if near(-one, ref_one) or near(-every, ref_all):
            raise Wrong(f"a probability is negative (N = {N}, P = {P}): the probability that a "
                        "bit survives is 1 - P_err")
        if (0 < one < 1 and 0 < every < 1 and not near(one, ref_one)
                and agrees(every, one ** P, digits=3)):
            raise Wrong(f"the two numbers agree with each other, as (1 - q)^N and (1 - q)^(N P), but "
                        f"q is not P_err (N = {N}, P = {P}): compute the bit error probability "
                        "with the first form of eq. (7.5), Phi(-sqrt((N - 1) / (P - 1)))")
        expect(near(one, ref_one), f"the probability that one given pattern is a fixed point is "
               f"wrong (N = {N}, P = {P}): all its N bits must survive")
        if near(every, ref_one ** (1 / N)) or near(every, (1 - p_err) ** P):
            raise Wrong("the second number must count the bits of all P patterns, N P of them")
        expect(near(every, ref_all), f"the probability that all P patterns are fixed points is "
               f"wrong (N = {N}, P = {P}): all N P bits must survive")


# ---------------------------------------------------------------------------------------------
# The two halves of z-scoring.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch7-zscore", hints=[
    "Both functions work on each row (one image) by itself: statistics over the last dimension, "
    "with keepdim=True so that they broadcast against the row.",
    "centre subtracts the row's mean; to_common_norm divides the row by its length "
    "(x.norm(dim=-1, keepdim=True)) and multiplies by sqrt(d), d the row's length.",
])
def check_zscore(centre, to_common_norm):
    g = torch.Generator().manual_seed(2)
    x = torch.rand(7, 20, generator=g, dtype=F64) * torch.rand(7, 1, generator=g, dtype=F64) * 3
    given = x.clone()
    c = returned_tensor(call(centre, given, what="centre"), "centre")
    expect(torch.equal(given, x), "centre changed the images it was given (x -= ...?): return a "
           "new tensor, or the notebook's raw images are centred for every later use")
    expect(c.shape == x.shape, f"centre must keep the shape {tuple(x.shape)}, got {tuple(c.shape)}")
    if close(c, x - x.mean(0, keepdim=True)):
        raise Wrong("centre subtracts the mean image, over the patterns: subtract each image's own "
                    "mean, over its pixels (dim=-1)")
    if close(c, (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)):
        raise Wrong("centre also divides by the standard deviation: that is the full z-score; "
                    "centre only subtracts each row's mean")
    float32_work(c, x - x.mean(-1, keepdim=True), "centre(x)", n=20)
    expect(close(c, x - x.mean(-1, keepdim=True), n=20), "centre does not subtract each row's "
           "mean: every row of the result must have mean 0 and differ from the input by a "
           "constant")
    given = x.clone()
    s = returned_tensor(call(to_common_norm, given, what="to_common_norm"), "to_common_norm")
    expect(torch.equal(given, x), "to_common_norm changed the images it was given (x /= ...?): "
           "return a new tensor")
    expect(s.shape == x.shape, f"to_common_norm must keep the shape {tuple(x.shape)}, got "
           f"{tuple(s.shape)}")
    norms = s.norm(dim=-1)
    if close(s, x / x.std(-1, keepdim=True)):
        raise Wrong("dividing by the standard deviation alone does not give the rows a common "
                    "norm when they are not centred: divide by the row's norm instead")
    if close(norms, torch.ones(7, dtype=F64), n=20):
        raise Wrong("the rows have norm 1: scale them to norm sqrt(d), about the norm of a "
                    "z-scored row, so that beta = 1 means what it meant above")
    if close(s, x / x.norm(dim=-1, keepdim=True) * 28):
        raise Wrong("the rows have the norm sqrt(784) whatever their length: d is the length of "
                    "the rows of x, x.shape[-1]")
    if close(s, x / x.norm(dim=0, keepdim=True) * math.sqrt(7)):
        raise Wrong("to_common_norm scales the columns (one pixel across the images): scale each "
                    "row, one image, by its own norm")
    float32_work(s, x / x.norm(dim=-1, keepdim=True) * math.sqrt(20), "to_common_norm(x)", n=20)
    expect(close(norms, torch.full((7,), math.sqrt(20), dtype=F64), n=20),
           "the rows of to_common_norm(x) do not all have the norm sqrt(d), d the row length")
    expect(close(s, x / x.norm(dim=-1, keepdim=True) * math.sqrt(20), n=20),
           "to_common_norm must only rescale each row (a positive factor), not change its shape")


# ---------------------------------------------------------------------------------------------
# The exponential dense memory without overflow.
# ---------------------------------------------------------------------------------------------


def _sweep_without_factor(patterns, state, order):
    """Aryaman's bracket without the factor xi[l]: sgn[-E(xi) + E(flip_l xi)], F = exp."""
    state = state.clone()
    for i in order:
        flipped = state.clone()
        flipped[..., i] = -flipped[..., i]
        # -E(xi) + E(flipped) > 0  <=>  lse(overlaps of xi) > lse(overlaps of flipped)
        diff = torch.logsumexp(state @ patterns.T, -1) - torch.logsumexp(flipped @ patterns.T, -1)
        state[..., i] = sign_keep(diff, state[..., i])
    return state


def _exp_sweep(patterns, state, order, tie=None, lse_minus=torch.logsumexp,
               lse_plus=torch.logsumexp, stale=False):
    """Rule (7.7) with F = exp, written out; ``tie`` (+1 or -1 instead of keeping the old value),
    ``lse_minus`` and ``lse_plus`` (what replaces the log-sum-exp of the bit = -1 and the
    bit = +1 overlaps) and ``stale`` (the overlaps of the sweep's start, never updated) make
    slips."""
    state = state.clone()
    start = state @ patterns.T  # (B, P): the overlaps before the sweep
    for i in order:
        overlaps = start if stale else state @ patterns.T
        rest = overlaps - patterns[:, i] * state[:, i:i + 1]
        diff = lse_plus(rest + patterns[:, i], -1) - lse_minus(rest - patterns[:, i], -1)
        old = state[:, i] if tie is None else torch.full_like(diff, tie)
        state[:, i] = sign_keep(diff, old)
    return state


@lru_cache(maxsize=1)
def _dense_exp_cases():
    """(patterns, state, order, reference) of three sweeps:

    * a small memory whose order repeats neurons, chosen so that every slip of `_orders`, the
      synchronous rule and a log-sum-exp replaced by a maximum change the result, and no
      difference comes within 0.08 of 0 (no near-tie that rounding could decide);
    * two patterns that differ in 5 bits: exact ties, which decide the state;
    * N = 1000 near a stored pattern, where exp(overlap) overflows float64.
    tests/exercises/test_exercises_ch07.py holds all of this.
    """
    cases = []
    for seed, (P, N, B, extra) in [(362, (5, 12, 16, 8)), (3, (2, 8, 16, 4))]:
        g = torch.Generator().manual_seed(seed)
        patterns, state = _spins((P, N), g), _spins((B, N), g)
        order = torch.randperm(N, generator=g).tolist() + torch.randint(0, N, (extra,),
                                                                        generator=g).tolist()
        cases.append((patterns, state, order))
    g = torch.Generator().manual_seed(3)
    patterns = _spins((20, 1000), g)
    flip = torch.zeros(2, 1000, dtype=torch.bool)
    flip[:, :60] = True
    cases.append((patterns, torch.where(flip, -patterns[:2], patterns[:2]),
                  list(range(5)) + list(range(500, 505))))
    return [(p, s, o, dense_update_async(p, s, "exp", order=o)) for p, s, o in cases]


def _dense_exp_far_case():
    """(patterns, state, order, reference) of N = 1000 with a state near a stored pattern beside a
    random one, far from every pattern: its overlaps are tens, the near state's about 880, so a
    shift by N or by one maximum for the whole batch makes exp of the far state's underflow."""
    g = torch.Generator().manual_seed(5)
    patterns = _spins((20, 1000), g)
    near = torch.where(torch.arange(1000) < 60, -patterns[0], patterns[0])
    state = torch.stack([near, _spins((1000,), g)])
    order = list(range(60))
    return patterns, state, order, dense_update_async(patterns, state, "exp", order=order)


@lru_cache(maxsize=1)
def _dense_exp_slips():
    """(message, result) of the typical slips: on the small case of `_dense_exp_cases`, and the
    two tie rules on its case of ties."""
    (patterns, state, order, ref), (p2, s2, o2, _), _ = _dense_exp_cases()
    slips = [
        ("the decisions are right where xi_l = +1 and wrong where xi_l = -1: the bracket "
         "compares the current state with the flipped one, so it says 'keep or flip'; multiply "
         "it by xi_l, or compare bit l = +1 with bit l = -1 as in eq. (7.7)",
         _sweep_without_factor(patterns, state, order)),
        ("every decision sees the state before the sweep (the synchronous rule): update the "
         "state after each neuron, so that the next one sees the change",
         dense_update_sync(patterns, state, "exp")),
        ("the overlaps are never updated after a decision, so the next neurons see the old "
         "value of the ones decided before them: after each decision, update the overlaps too "
         "(the overlaps without the bit, plus the column times the new value)",
         _exp_sweep(patterns, state, order, stale=True)),
        ("every decision has the wrong sign: neuron l takes the value that gives the lower "
         "energy, i.e. the larger sum of exp(overlap)", -ref),
        *((_ORDER_SLIPS[slip], dense_update_async(patterns, state, "exp", order=other))
          for slip, other in _orders(order).items()),
        ("one side of the comparison is a maximum, not a log-sum-exp: the maximum is only the "
         "largest term of the sum", _exp_sweep(patterns, state, order, lse_minus=torch.amax)),
        ("both sides of the comparison are maxima, not log-sum-exps: the maximum is only the "
         "largest term of each sum, and the rule compares the whole sums",
         _exp_sweep(patterns, state, order, lse_minus=torch.amax, lse_plus=torch.amax)),
    ]
    tie_slips = [(f"two patterns that differ in a few bits give exact ties (both sums equal), "
                  f"and a tie makes the neuron {tie:+.0f}: a tie keeps the old value",
                  _exp_sweep(p2, s2, o2, tie=tie)) for tie in (1.0, -1.0)]
    return slips, tie_slips


@exercise("ex-ch7-dense-exp", hints=[
    "For F = exp, -E(xi) is sum_mu exp(x_mu . xi): neuron l takes +1 when that sum is larger with "
    "xi_l = +1 than with xi_l = -1. Comparing two sums of exponentials is comparing their "
    "logarithms, and torch.logsumexp computes those without overflow.",
    "Keep the overlaps x_mu . xi for the current state. The overlaps with bit l set to +1 or -1 "
    "are the overlaps without bit l, plus or minus the column patterns[:, l].",
    "Update the state (and the overlaps) after every decision, so that the next neuron sees the "
    "change; a difference of exactly 0 keeps the old value.",
])
def check_dense_exp(dense_exp_sweep):
    small, ties, large = _dense_exp_cases()
    patterns, state, order, ref = small
    given = state.clone()
    out = returned_tensor(call(dense_exp_sweep, patterns.clone(), given, list(order),
                               what="dense_exp_sweep"), "dense_exp_sweep")
    expect(torch.equal(given, state), "dense_exp_sweep changed the state it was given: update a "
           "copy (state.clone()) and return it")
    expect(out.shape == state.shape, f"dense_exp_sweep must return a state of the input's shape "
           f"{tuple(state.shape)}, got {tuple(out.shape)}")
    _binary(out, "dense_exp_sweep")
    slips, tie_slips = _dense_exp_slips()
    if not torch.equal(out, ref):
        for message, wrong in slips:
            if torch.equal(out, wrong):
                raise Wrong(message)
        raise Wrong("the sweep does not give the states of rule (7.7) with F = exp")
    def sweep(case):  # the learner's sweep of one more case, on copies of its inputs
        patterns, state, order, _ = case
        return returned_tensor(call(dense_exp_sweep, patterns.clone(), state.clone(), list(order),
                                    what="dense_exp_sweep"), "dense_exp_sweep")

    def is_state(out, state):  # the input's shape, every entry -1 or +1
        return out.shape == state.shape and bool(((out == 1) | (out == -1)).all())

    # exact ties: a difference of exactly 0 keeps the old value
    out, ref = sweep(ties), ties[3]
    for message, wrong in tie_slips:
        if out.shape == wrong.shape and torch.equal(out, wrong):
            raise Wrong(message)
    if out.shape == ref.shape:  # a tie left at torch.sign's 0 is not a state
        _binary(out, "dense_exp_sweep")
    expect(torch.equal(out, ref), "with two stored patterns that differ in 5 bits, the sweep "
           "does not give the states of rule (7.7)")
    # N = 1000 near a stored pattern: the overlaps are near 1000 and exp(1000) overflows float64
    out, state, ref = sweep(large), large[1], large[3]
    expect(is_state(out, state) and torch.equal(out, ref),
           "with N = 1000 neurons the overlaps reach about 880 and exp(880) overflows even float64: "
           "compare logarithms of the sums (torch.logsumexp) instead of the sums")
    # a random state beside one near a stored pattern: a fixed shift underflows in the far row
    far = _dense_exp_far_case()
    out, state, ref = sweep(far), far[1], far[3]
    ok = is_state(out, state)
    if ok and torch.equal(out[1], state[1]) and not torch.equal(ref[1], state[1]):
        raise Wrong("a random state, far from every stored pattern, is left unchanged: a fixed "
                    "shift before exp (by N, or by one maximum for the whole batch) lets its "
                    "exponentials underflow to 0; subtract each sum's own maximum, as "
                    "torch.logsumexp does")
    expect(ok and torch.equal(out, ref), "with N = 1000, a random state beside one near a stored "
           "pattern, the sweep does not give the states of rule (7.7)")


# ---------------------------------------------------------------------------------------------
# Separation and the one-step retrieval error of the continuous network.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch7-separation", hints=[
    "All the overlaps at once: G = patterns @ patterns.T, a (P, P) matrix whose diagonal holds "
    "x_i . x_i.",
    "For row i, the largest overlap with another pattern is the maximum of G[i] without its "
    "diagonal entry: fill the diagonal with -inf (masked_fill with torch.eye(P, dtype=bool)) "
    "before taking the maximum.",
])
def check_separation(separation):
    g = torch.Generator().manual_seed(4)
    P, d = 9, 6
    randn = torch.randn(P, d, generator=g, dtype=F64)
    randn[3] = 0.9 * randn[5] + 0.1 * randn[3]  # a close pair: their separation is small
    # and three patterns where the first one's overlaps with the others are all negative
    opposed = torch.tensor([[1.0, 2.0, 3.0, 0.0], [-1.0, -2.0, -3.0, 1.0], [0.5, -3.0, 1.0, 2.0]],
                     dtype=F64)
    for x in (randn, opposed):
        P, d = x.shape
        delta = returned_tensor(call(separation, x.clone(), what="separation"), "separation")
        expect(delta.shape == (P,), f"separation must return one number per pattern, shape "
               f"(P,) = {(P,)}, got {tuple(delta.shape)}")
        G = x @ x.T
        eye = torch.eye(P, dtype=torch.bool)
        ref = G.diagonal() - G.masked_fill(eye, -math.inf).max(-1).values
        if close(delta, ref, n=d):
            continue
        float32_work(delta, ref, "separation(x)", n=d)
        if bool((torch.isinf(delta) | torch.isnan(delta)).all()):
            raise Wrong("every separation is -inf or NaN: was G's diagonal filled with -inf in "
                        "place (fill_diagonal_ or masked_fill_) before it was read? G.diagonal() "
                        "is a view: take a copy of it first (G.diagonal().clone()), or fill a copy "
                        "of G (masked_fill, not masked_fill_)")
        if close(delta, G.diagonal() - G.sort(-1).values[:, -2]):
            raise Wrong("the second-largest overlap of a row is not always the largest over "
                        "j != i: another pattern's overlap x_i . x_j can exceed x_i . x_i (as for "
                        "a close pair of unequal lengths); mask the diagonal instead")
        if close(delta, G.diagonal() - G.max(-1).values):
            raise Wrong("the maximum includes the pattern itself (j = i): it must run over the "
                        "other patterns, j != i")
        if close(delta, -G.masked_fill(eye, 0.0).max(-1).values):
            raise Wrong("the diagonal was zeroed in place (fill_diagonal_(0) or masked_fill_) "
                        "before it was read: G.diagonal() is a view, so x_i . x_i reads 0 too. "
                        "Take a copy first (G.diagonal().clone()), or mask a copy of G")
        if close(delta, G.diagonal() - G.masked_fill(eye, 0.0).max(-1).values):
            raise Wrong("the pattern itself still takes part in the maximum, as an overlap of 0: "
                        "when all the other overlaps of a pattern are negative, the maximum over "
                        "j != i is negative, not 0; fill the diagonal with -inf")
        if close(delta, G.diagonal() - G.masked_fill(eye, math.inf).min(-1).values):
            raise Wrong("you subtract the smallest overlap: the separation is measured against "
                        "the closest other pattern, the largest overlap")
        if close(delta, -ref):
            raise Wrong("the sign is reversed: Delta_i = x_i . x_i - max_(j != i) x_i . x_j")
        xn = x / x.norm(dim=-1, keepdim=True)
        C = xn @ xn.T
        if close(delta, 1 - C.masked_fill(eye, -math.inf).max(-1).values):
            raise Wrong("you compare cosines: the separation uses the dot products themselves, "
                        "whose size matters to the softmax")
        raise Wrong("separation does not give x_i . x_i - max_(j != i) x_i . x_j for every "
                    "pattern")


# ---------------------------------------------------------------------------------------------
# A cache of the text so far.
# ---------------------------------------------------------------------------------------------

# (T, d, V, theta, size): a short cache, a cache of one, one longer than the text, one position
CACHE_GRID = [(12, 4, 5, 0.7, 3), (10, 3, 4, 1.3, 1), (9, 4, 6, 0.4, 20), (1, 3, 4, 0.5, 2),
              (8, 3, 4, 0.6, 0)]  # size 0: an empty cache, every row zeros


def _cache(h, next_tokens, V, theta, size, before=True, closest=False, dim=-1):
    """The cache's distribution (and its typical slips): row t from the last ``size`` positions
    before t (``before=False``: up to t itself), scored by ``theta h_t . h_i`` (``closest``: by
    ``-theta ||h_t - h_i||^2``), the softmax over ``dim``; a row with no position is zero."""
    T = h.shape[0]
    t, i = torch.arange(T)[:, None], torch.arange(T)[None, :]
    kept = ((i < t) if before else (i <= t)) & (i >= t - size)
    scores = -theta * torch.cdist(h, h) ** 2 if closest else theta * h @ h.T
    weights = torch.softmax(scores.masked_fill(~kept, -math.inf), dim=dim).nan_to_num(0.0)
    return weights @ torch.nn.functional.one_hot(next_tokens, V).to(h.dtype)


def _cache_slips(h, next_tokens, V, theta, size):
    T = h.shape[0]
    wrapped = _cache(h, next_tokens, V, theta, size)
    wrapped[1:min(size, T)] = 0  # h[t - size:t] with t - size < 0 counts from the end: empty
    return [
        (wrapped,
         f"rows 1 to {min(size, T) - 1} are zero: for t < size, t - size is negative, and a slice "
         "such as h[t - size:t] then counts from the end of the sequence and comes out empty; "
         "start the window at max(0, t - size)"),
        (_cache(h, next_tokens, V, theta, size, before=False),
         "row t also reads position t itself, whose next token is the very token row t must "
         "predict: the cache may hold only the positions before t (i < t)"),
        (_cache(h, next_tokens, V, theta, size - 1, before=False),  # the last size up to t
         "row t reads the last size positions up to and including t itself, whose next token is "
         "the very token row t must predict: the cache holds the size positions before t "
         "(t - size <= i < t)"),
        (_cache(h, next_tokens, V, theta, size + 1),
         f"each row keeps size + 1 = {size + 1} earlier positions: the cache holds the last "
         f"size = {size} (t - size <= i < t)"),
        (_cache(h, next_tokens, V, theta, size - 1),
         f"each row keeps size - 1 = {size - 1} earlier positions: the cache holds the last "
         f"size = {size} (t - size <= i < t)"),
        (_cache(h, next_tokens, V, theta, T),
         "every earlier position is kept: the cache holds only the last size positions"),
        (_cache(h, next_tokens, V, 1.0, size),
         "the scores are h_t . h_i without theta: multiply them by theta"),
        (_cache(h, next_tokens, V, 1 / theta, size),
         "the scores are divided by theta: theta is an inverse temperature, multiply by it"),
        (_cache(h, next_tokens, V, theta, size, closest=True),
         "the scores are negative squared distances: the cache scores by dot products, "
         "theta h_t . h_i"),
        (_cache(torch.nn.functional.normalize(h, dim=-1), next_tokens, V, theta, size),
         "the scores are cosines (h_t and h_i normalised to length 1): the cache scores by plain "
         "dot products, theta h_t . h_i"),
        (_cache(h, next_tokens, V, theta, size, dim=0),
         "the softmax runs over the queries (dim 0): each row t must sum over its keys i"),
    ]


@exercise("ex-ch7-cache", hints=[
    "Build a (T, T) bool mask of the positions each row may read: t = torch.arange(T)[:, None] "
    "for the rows and i = torch.arange(T)[None, :] for the columns, then one comparison for "
    "'before t' and one for 'among the last size'.",
    "Mask before the softmax, not after it: a score of -inf gets weight 0 and the kept weights "
    "still sum to 1. Row 0 keeps no position at all, so mind what its softmax gives. The weights "
    "of keys with the same next token add up, which a product with a (T, vocab_size) table does "
    "in one step.",
])
def check_cache(cache_probs):
    g = torch.Generator().manual_seed(23)
    for T, d, V, theta, size in CACHE_GRID:
        h = torch.randn(T, d, generator=g, dtype=F64)
        next_tokens = torch.randint(0, V, (T,), generator=g)
        what = f"cache_probs(h, next_tokens, {V}, {theta}, {size}) with T = {T}"
        out = returned_tensor(call(cache_probs, h.clone(), next_tokens.clone(), V, theta, size,
                                   what="cache_probs"), "cache_probs").cpu()
        expect(tuple(out.shape) == (T, V), f"{what} must have shape (T, V) = {(T, V)}, got "
                                           f"{tuple(out.shape)}")
        expect(out.is_floating_point(), f"{what} must return probabilities (a float tensor), "
                                        f"got {out.dtype}")
        expect(not out[0].isnan().any(),
               f"{what}: row 0 is NaN. Position 0 has no earlier position, so every score is "
               "-inf and the softmax divides 0 by 0: make the row zero (nan_to_num(0.0))")
        right = _cache(h, next_tokens, V, theta, size)
        if close(out, right, n=T * d):
            continue
        if size == 0:
            raise Wrong(f"{what}: with size = 0 the cache holds nothing, so every row must be all "
                        "zeros. Mind that a slice [-0:] is the whole sequence, not an empty one, "
                        "and that a row with no position to read is NaN after the softmax")
        for slip, message in _cache_slips(h, next_tokens, V, theta, size):
            if close(out, slip, n=T * d):
                raise Wrong(f"{what}: {message}")
        expect(close(out[0], right[0]), f"{what}: row 0 must be all zeros (no earlier position "
                                        f"to read), got {out[0].tolist()}")
        sums = out[1:].double().sum(-1)
        if T > 1 and size > 0 and not close(sums, torch.ones_like(sums), n=T):
            row = 1 + int((sums - 1).abs().argmax())
            raise Wrong(f"{what}: row {row} sums to {sums[row - 1].item():.4f}, not 1. Every row "
                        "after the first is a distribution over the next token: mask the scores "
                        "with -inf before the softmax (not the weights after it), and keep only "
                        "the positions t - size <= i < t")
        row = next(t for t in range(T) if not close(out[t], right[t], n=T * d))
        raise Wrong(f"{what}: row {row} is {[round(v, 4) for v in out[row].tolist()]}, which is "
                    "not the softmax over theta h_t . h_i (plain dot products) of the positions "
                    "t - size <= i < t with each weight added to the entry of that position's "
                    "next token")
