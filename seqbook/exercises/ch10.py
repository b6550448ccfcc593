"""Checks of chapter 10's exercises (from attention back to recurrence)."""

from __future__ import annotations

import math
import numbers
import os
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ..delta_rule import DeltaNet, delta_rule_chunked, delta_rule_recurrent
from ..linear_attention import linear_attention
from ..scan import linear_recurrence
from ..ssm import decay_mask, discretize_zoh, ssd_chunk_scan
from .core import (
    CallWatch,
    Wrong,
    as_tensor,
    call,
    close,
    exercise,
    expect,
    expect_shape,
    float32_work,
    returned_pair,
    returned_tensor,
)

F64 = torch.float64


# ---------------------------------------------------------------------------------------------
# The size of a state: the KV cache against linear attention's (S, z).
# ---------------------------------------------------------------------------------------------

STATE_SIZE = {"T": 4096, "D": 64}


def _whole_number(value, name: str):
    """The learner's count as a Python number: an int, a float, a NumPy scalar or a one-element
    tensor or array (the exercise asks for the exact count, so a float must be a whole one)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    elif isinstance(value, np.ndarray) and value.size == 1:
        value = value.item()
    expect(isinstance(value, numbers.Real) and not isinstance(value, bool),
           f"{name} must be a number, got {type(value).__name__}")
    return value


def _pair_of_counts(answer, pair: str, names: tuple[str, str]):
    """The learner's pair of counts as two Python numbers: a tuple or list of two, or a 1-D
    tensor or array of two. ``pair`` describes the pair for the message when it is not one."""
    if isinstance(answer, torch.Tensor | np.ndarray) and answer.ndim == 1:
        answer = tuple(answer.tolist())
    expect(isinstance(answer, (tuple, list)) and len(answer) == 2, f"answer must be a pair {pair}")
    return tuple(_whole_number(value, name) for name, value in zip(names, answer, strict=True))


def _exact_counts(answer) -> None:
    """Counts given in a half-precision tensor are rounded (4161 becomes 4160 in bfloat16)."""
    parts = [answer] + (list(answer) if isinstance(answer, (tuple, list)) else [])
    expect(not any(isinstance(x, torch.Tensor) and x.dtype in (torch.float16, torch.bfloat16)
                   for x in parts),
           "a float16 or bfloat16 tensor cannot hold these counts exactly: give Python ints (or "
           "int64)")


@exercise("ex-ch10-state-size", hints=[
    "The cache keeps, for every token read so far, what a later query needs to attend to it.",
    "Every token leaves a key and a value of D numbers each in the cache. The state is the pair "
    "(S, z): S has one number per pair of a key feature and a value feature, z one per key "
    "feature.",
])
def check_state_size(answer):
    T, D = STATE_SIZE["T"], STATE_SIZE["D"]
    _exact_counts(answer)
    cache, state = _pair_of_counts(answer, "(numbers in the cache, numbers in the state)",
                                   ("the cache's count", "the state's count"))
    if cache == T * D:
        raise Wrong("the cache count holds one vector per token: a token leaves a key and a value")
    if (cache, state) == (D * D + D, 2 * T * D):
        raise Wrong("the two counts are right but swapped: the pair is (numbers in the cache, "
                    "numbers in the state)")
    for name, value, right in (("cache", cache, 2 * T * D), ("state", state, D * D + D)):
        expect(value == right or abs(value - right) > 0.01 * right,
               f"the {name} count is near the right one but not equal to it: count again, the "
               "exercise asks for the exact count")
    expect(cache == 2 * T * D, "the first number is not the cache's size: count the numbers "
           "every token leaves behind, for all T tokens")
    if state == D * D:
        raise Wrong("the state count has S only: the state is the pair (S, z), count z too")
    expect(state != 2 * T * D and state != T * D * D,
           "the state does not grow with T: it is what linear attention keeps instead of the "
           "tokens")
    expect(state == D * D + D, "the second number is not the size of (S, z): S is D_k x D_v and "
           "z has D_k entries")


# ---------------------------------------------------------------------------------------------
# The cache of a hybrid: 32 attention layers against 4 attention and 28 recurrent ones.
# ---------------------------------------------------------------------------------------------

#: the cache in bfloat16 (2 bytes a number), the recurrent states in float32 (4 bytes): with one
#: size for both, a state of width d in 4 bytes equalled the right one of width 2d in 2; now no
#: two slips (width d for 2d, 2 bytes for 4) cancel
HYBRID_CACHE = {"layers": 32, "d": 4096, "T": 131_072, "bytes": 2, "attention": 4, "N": 16,
                "state_bytes": 4}


def _hybrid_cache_bytes() -> tuple[int, int, int]:
    """Bytes of (the cache with every layer attention, the hybrid's attention cache, the
    hybrid's recurrent states); the hybrid holds the last two."""
    c = HYBRID_CACHE
    per_token = 2 * c["d"] * c["bytes"]  # a key and a value in one attention layer
    state = 2 * c["d"] * c["N"] * c["state_bytes"]  # Mamba's h: inner width 2d, N per channel
    recurrent = c["layers"] - c["attention"]
    return (c["layers"] * c["T"] * per_token, c["attention"] * c["T"] * per_token,
            recurrent * state)


@exercise("ex-ch10-hybrid-cache", hints=[
    "Count one attention layer first: what one token leaves in it, in numbers and then in bytes. "
    "A recurrent layer keeps its state, whatever the number of tokens.",
    "One token leaves a key and a value of 4096 numbers each in every attention layer, "
    "2 * 4096 * 2 bytes; multiply by T and by the number of attention layers. Each of the 28 "
    "recurrent layers adds 2 * 4096 * 16 numbers of 4 bytes (float32), once.",
])
def check_hybrid_cache(answer):
    all_attention, attention_only, states = _hybrid_cache_bytes()
    hybrid = attention_only + states
    c = HYBRID_CACHE
    _exact_counts(answer)
    first, second = _pair_of_counts(
        answer, "(bytes with 32 attention layers, bytes with the hybrid)",
        ("the first count", "the second count"))
    expect((first, second) != (hybrid, all_attention),
           "the two counts are swapped: the 32 attention layers come first")
    for value, right in ((first, all_attention), (second, hybrid)):
        ratio = right / value if value else 0.0
        expect(not any(abs(ratio / unit - 1) < 0.01 for unit in (2**10, 2**20, 2**30, 1e3, 1e6,
                                                                  1e9)),
               "the counts are wanted in bytes, not in KiB, MiB, GiB, kB, MB or GB")
    expect(first != c["layers"] * 128_000 * 2 * c["d"] * c["bytes"],
           "T is 131 072 tokens (2^17, what is often called 128k), not 128 000")
    for name, value, right, extra in (("first", first, all_attention, 0),
                                      ("second", second, hybrid, states)):
        if value == right:
            continue
        if value in (right / 2, (right - extra) / 2 + extra):
            raise Wrong(f"the {name} count is half what it should be: in every attention layer a "
                        "token leaves a key and a value, 4096 numbers each, and every number "
                        "takes 2 bytes")
        if value in (right / 4, (right - extra) / 4 + extra):
            raise Wrong(f"the {name} count is a quarter of what it should be: a token leaves a "
                        "key and a value in every attention layer, and every number takes 2 bytes")
    if second == attention_only:
        raise Wrong("the second count has the 4 attention layers only: the 28 recurrent layers "
                    "keep their states too (small, but not nothing)")
    if second == attention_only + states * c["layers"] / (c["layers"] - c["attention"]):
        raise Wrong("the second count gives all 32 layers a recurrent state: 4 of them are "
                    "attention layers, which keep their cache instead")
    if second == attention_only + states / 2:
        raise Wrong("the recurrent states are half what they should be: each is 2 * 4096 * 16 "
                    "numbers (Mamba's inner width is 2d), and every number of a state takes 4 "
                    "bytes (float32)")
    if second == attention_only + states / 4:
        raise Wrong("the recurrent states are a quarter of what they should be: each is 2 * 4096 "
                    "* 16 numbers (Mamba's inner width is 2d), of 4 bytes each (float32)")
    if second in (attention_only + states * (16 + kept) / 16 for kept in (3, 4)):
        raise Wrong("the recurrent states include the convolution's inputs: the exercise leaves "
                    "them out, and counts each state as 2 * 4096 * 16 numbers")
    if second == attention_only + states * 2:
        raise Wrong("the recurrent states are twice what they should be: each is 2 * 4096 * 16 "
                    "numbers, stored in float32, 4 bytes a number")
    for name, value, right in (("first", first, all_attention), ("second", second, hybrid)):
        expect(value == right or abs(value - right) > 1e-6 * right,
               f"the {name} count is near the right one but not equal to it: the exercise asks "
               "for the exact count in bytes, a whole number")
    expect(first == all_attention, "the first count is not the cache of 32 attention layers: "
           "the bytes a token leaves in one layer, times T, times 32")
    expect(second == hybrid, "the second count is not the hybrid's: the cache of its 4 "
           "attention layers, plus the 28 recurrent states, which do not grow with T")


# ---------------------------------------------------------------------------------------------
# Find the bug: the composition of two steps of the gated linear recurrence.
# ---------------------------------------------------------------------------------------------


def _combined(out, ndim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What the learner's ``combine`` returned, as the pair (a, b): a tuple or list, or one tensor
    or array of two stacked ones, ``torch.stack([a, b])``, which unpacks as a pair too (``ndim``:
    the number of axes of a and of b)."""
    if isinstance(out, torch.Tensor | np.ndarray) and out.ndim == ndim + 1 and len(out) == 2:
        out = tuple(out)
    return returned_pair(out, "combine")


def _doubling_scan(combine, a, b):
    """Hillis and Steele's scan over dim 1 with the learner's ``combine``, in the precision of
    what ``combine`` returns (a float32 combine gives float32 states)."""
    T, s, dtype = a.shape[1], 1, a.dtype
    while s < T:
        a_new, b_new = _combined(call(combine, (a[:, :-s], b[:, :-s]), (a[:, s:], b[:, s:]),
                                      what="combine"), a.ndim)
        for new in (a_new, b_new):
            if new.is_floating_point() and torch.finfo(new.dtype).eps > torch.finfo(dtype).eps:
                dtype = new.dtype
        a = torch.cat([a[:, :s], a_new], dim=1)
        b = torch.cat([b[:, :s], b_new], dim=1)
        s *= 2
    return b.to(dtype)


@exercise("ex-ch10-combine", hints=[
    "Apply the two steps to a state h by hand: first h -> a1 h + b1, then the second step to "
    "the result. Multiply out and read off the new gate and the new input.",
    "The second step multiplies everything the first one produced by a2, including b1.",
])
def check_combine(combine):
    g = torch.Generator().manual_seed(0)
    a1, b1, a2, b2 = (torch.rand(3, 5, generator=g, dtype=F64) for _ in range(4))
    given = [x.clone() for x in (a1, b1, a2, b2)]
    first, second = tuple(given[:2]), tuple(given[2:])
    a, b = _combined(call(combine, first, second, what="combine"), a1.ndim)
    changed = [name for name, x, y in zip(("a1", "b1", "a2", "b2"), (a1, b1, a2, b2), given,
                                          strict=True) if not torch.equal(x, y)]
    expect(not changed, f"combine changed its input{'s' if len(changed) > 1 else ''} "
           f"{' and '.join(changed)} in place: compute the new gate and input in tensors of their "
           "own, since a scan uses each step in more than one combination")
    expect(a.shape == a1.shape and b.shape == b1.shape,
           "combine must return a pair of tensors of the shape of its inputs")
    if close(b, a1 * b2 + b1) and close(a, a1 * a2):  # the find-the-bug starter: its symptom
        raise Wrong("applied to a state h, the composite step does not give what the step "
                    "(a1, b1) followed by the step (a2, b2) gives: its gate a is right, its input "
                    "b is not")
    if close(a, a2 * b1 + b2) and close(b, a1 * a2):
        raise Wrong("the two parts are right but swapped: combine returns the pair (a, b), the "
                    "gate first, then the input")
    expect(close(a, a1 * a2), "the gate of the composite step must be the product of the two "
           "gates")
    expect(close(b, a2 * b1 + b2), "the input of the composite step is wrong: apply the first "
           "step to h, then the second, and compare")
    a = torch.rand(2, 13, 4, generator=g, dtype=F64)
    b = torch.randn(2, 13, 4, generator=g, dtype=F64)
    expect(close(_doubling_scan(combine, a, b), linear_recurrence(a, b), n=13),
           "a doubling scan with this combine does not give the states of the loop")


# ---------------------------------------------------------------------------------------------
# Causal linear attention, written by the learner.
# ---------------------------------------------------------------------------------------------


def _linear_attention_variants(q, k, v, eps):
    """The typical slips of causal linear attention: no normaliser, no phi or elu without its + 1,
    the queries scaled by 1/sqrt(d), a division by t, no causality, and the sums of the steps
    before t only, S_(t-1) and z_(t-1) (compared from the second position on,
    where they are not empty)."""
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    causal = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool).tril()

    def weights(a, b, keep=causal):  # the similarities a_t^T b_j of the steps j kept for t
        return (a @ b.transpose(-2, -1)).masked_fill(~keep, 0.0)

    scores = weights(phi_q, phi_k)
    normalised = {  # each divided by the sum of its own weights, as it should be
        "no feature map": weights(q, k),
        "elu without + 1": weights(F.elu(q), F.elu(k)),
        # softmax attention's 1/sqrt(d) on the queries
        "queries scaled": weights(F.elu(q / q.shape[-1] ** 0.5) + 1, phi_k),
        "phi on the keys only": weights(q, phi_k),
        "phi on the queries only": weights(phi_q, k),
        "sums before t": weights(phi_q, phi_k, causal.tril(-1)),
    }
    steps = torch.arange(1, q.shape[2] + 1, dtype=q.dtype)[:, None]  # t, from 1
    return {
        "no normaliser": scores @ v,
        "divided by t": (scores @ v) / steps,
        "not causal": linear_attention(q, k, v, causal=False, eps=eps),
        **{slip: (w @ v) / (w.sum(-1, keepdim=True) + eps) for slip, w in normalised.items()},
    }


def _phi_constant(out, q, k, v) -> tuple[str, float] | None:
    """(side, c) if ``out`` is causal linear attention with a constant c > 0 added to the
    features of the queries, the keys or both (``side``), else None: c is fitted by a few
    Newton steps on the squared error, then the fit must match to float64's precision."""
    if out.shape != v.shape or not out.is_floating_point():
        return None
    out = out.detach().to(F64)
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    causal = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool).tril()

    def shifted(c, side):
        a = phi_q + (0.0 if side == "keys" else c)
        b = phi_k + (0.0 if side == "queries" else c)
        w = (a @ b.transpose(-2, -1)).masked_fill(~causal, 0.0)
        return (w @ v) / w.sum(-1, keepdim=True)

    for side in ("queries and keys", "keys", "queries"):
        c = 0.0
        for _ in range(5):
            h = max(abs(c), 1e-9) * 1e-3
            f = shifted(c, side)
            d = (shifted(c + h, side) - f) / h
            c += float(((out - f) * d).sum() / (d * d).sum())
        if c > 0 and close(out, shifted(c, side), n=q.shape[2] * q.shape[3]):
            return side, c
    return None


def _normaliser_constant(out, q, k, exact) -> float | None:
    """The constant eps >= 0 if ``out`` is causal linear attention with phi(q_t)^T z_t + eps as
    its normaliser (``exact`` is the one with none), else None."""
    if out.shape != exact.shape or not out.is_floating_point():
        return None
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    normaliser = (phi_q * phi_k.cumsum(2)).sum(-1, keepdim=True)     # (B, H, T, 1)
    numerator = exact * normaliser
    eps = float(torch.nanmedian(numerator / out.detach().to(F64) - normaliser))
    if not eps >= 0 or not close(out, numerator / (normaliser + eps), n=q.shape[2] * q.shape[3]):
        return None
    return eps


@exercise("ex-ch10-causal-linear-attention", hints=[
    "Write it as a recurrent network: two running sums over time, one matrix and one vector, "
    "updated with the key and value of step t, and read with the query of step t.",
    "Apply the feature map phi(x) = elu(x) + 1 to the queries and keys first. The running sums "
    "are S_t = S_(t-1) + phi(k_t) v_t^T and z_t = z_(t-1) + phi(k_t).",
    "The output of step t is phi(q_t)^T S_t divided by phi(q_t)^T z_t. torch.cumsum along the "
    "time axis computes every S_t at once, if you prefer that to a loop.",
])
def check_causal_linear_attention(fn):
    g = torch.Generator().manual_seed(1)
    B, H, T, Dk, Dv = 2, 3, 9, 4, 5
    q, k = (torch.randn(B, H, T, Dk, generator=g, dtype=F64) for _ in range(2))
    v = torch.randn(B, H, T, Dv, generator=g, dtype=F64)
    out = returned_tensor(call(fn, q.clone(), k.clone(), v.clone(), what="causal_linear_attention"),
                  "causal_linear_attention")
    expect(out.shape == v.shape, f"the output must have v's shape (B, H, T, D_v) = "
           f"{tuple(v.shape)}, got {tuple(out.shape)}")
    # with no constant added to the normaliser, or one of at most 1e-6, as the book's code adds
    right = [linear_attention(q, k, v, causal=True, eps=eps) for eps in (0.0, 1e-6)]
    if any(close(out, r, n=T * Dk) for r in right):
        # queries and keys far below 0: features near 0 and normalisers far below 1
        q_small, k_small = q - 4, k - 4
        out = returned_tensor(call(fn, q_small.clone(), k_small.clone(), v.clone(),
                                   what="causal_linear_attention"), "causal_linear_attention")
        right = [linear_attention(q_small, k_small, v, causal=True, eps=eps) for eps in (0.0, 1e-6)]
        if any(close(out, r, n=T * Dk) for r in right):
            return
        eps = _normaliser_constant(out, q_small, k_small, right[0])
        if eps is not None and eps <= 1e-6:
            return
        raise Wrong("right while the normalisers phi(q_t)^T z_t are large, wrong when they are "
                    "small (queries and keys far below 0): is the normaliser clamped, or a "
                    "constant added? Eq. (10.4) divides by phi(q_t)^T z_t itself")
    eps = _normaliser_constant(out, q, k, right[0])
    if eps is not None:
        if eps <= 1e-6:
            return
        raise Wrong(f"the outputs are causal linear attention's with a constant of about {eps:.0e} "
                    "added to the normaliser phi(q_t)^T z_t: eq. (10.4) has none, and the check "
                    "accepts one of at most 1e-6, the package's guard against a division by zero")
    shift = _phi_constant(out, q, k, v)
    if shift is not None:
        raise Wrong(f"a constant of about {shift[1]:.0e} is added to the features of the "
                    f"{shift[0]}: that changes every similarity phi(q)^T phi(k); phi(x) = elu(x) "
                    "+ 1 is already positive, and a guard against a division by zero, if any, "
                    "belongs to the normaliser")
    slips = [(slip, wrong) for eps in (0.0, 1e-6)
             for slip, wrong in _linear_attention_variants(q, k, v, eps).items()]
    for slip, wrong in slips:
        # the sums before t are empty at the first position: compared from the second on
        start = 1 if slip == "sums before t" else 0
        if out.is_floating_point() and close(out[:, :, start:], wrong[:, :, start:], n=T * Dk):
            raise Wrong({
                "no normaliser": "the outputs are not normalised: divide each one by the sum of "
                                 "its weights, phi(q_t)^T z_t",
                "no feature map": "the queries and keys enter as they are: apply the feature map "
                                  "phi(x) = elu(x) + 1 to both first",
                "elu without + 1": "the feature map is elu(x) + 1: elu alone can be negative, "
                                   "and so can the weights and their sum",
                "queries scaled": "the queries are divided by sqrt(d) first, as softmax attention "
                                  "scales its scores: the feature map takes them as they are",
                "divided by t": "each output is divided by the number of steps t: divide it by "
                                "the sum of its weights, phi(q_t)^T z_t",
                "phi on the keys only": "the feature map is applied to the keys only: the "
                                        "similarity is phi(q)^T phi(k), phi on both sides",
                "phi on the queries only": "the feature map is applied to the queries only: the "
                                           "similarity is phi(q)^T phi(k), phi on both sides",
                "not causal": "every position sees every key: the sums must run over the steps "
                              "up to t only",
                "sums before t": "position t reads the sums of the steps before it, S_(t-1) and "
                                 "z_(t-1): the sums must include step t's own key and value, as "
                                 "softmax attention lets a position attend to itself",
            }[slip])
    if out.is_floating_point() and bool(out.isnan().any()):
        raise Wrong("the output has NaN entries: a normaliser phi(q_t)^T z_t of 0 divides 0 by "
                    "0, as happens with a feature map that can be 0 (relu); phi(x) = elu(x) + 1 "
                    "is positive everywhere")
    later = v.clone()
    later[:, :, -1] += 1.0
    changed = returned_tensor(call(fn, q.clone(), k.clone(), later, what="causal_linear_attention"),
                      "causal_linear_attention")
    expect(torch.equal(changed[:, :, :-1], out[:, :, :-1]) or close(changed[:, :, :-1],
                                                                      out[:, :, :-1]),
           "changing the last value changes earlier outputs: position t must not see later "
           "tokens")
    float32_work(out, right[0], "the output", n=T * Dk)  # e.g. a state made by torch.zeros
    raise Wrong("the outputs differ from causal linear attention: check the feature map, the "
                "running sums and the division")


# ---------------------------------------------------------------------------------------------
# The zero-order hold.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch10-zoh", hints=[
    "Solve h'(s) = a h(s) + b x on one step of length Delta, with x constant over the step and "
    "a a negative number: the state decays, and the input is added up over the whole step.",
    "A_bar = exp(Delta A). For the input, integrate exp(a s) b x over s from 0 to Delta.",
    "Check your B_bar for a tiny Delta: it must tend to Delta B, the Euler step. And mind the "
    "shapes: A and B are (E, N), delta is (E,), one step per channel.",
])
def check_zoh(fn):
    g = torch.Generator().manual_seed(2)
    E, N = 3, 5
    A = -torch.rand(E, N, generator=g, dtype=F64) * 3 - 0.1
    B = torch.randn(E, N, generator=g, dtype=F64)
    delta = torch.rand(E, generator=g, dtype=F64) + 0.05
    try:
        out = call(fn, A.clone(), B.clone(), delta.clone(), what="zoh")
    except Wrong as err:  # delta (E,) against A (E, N): the last axes do not broadcast
        if "must match the size of tensor" in str(err) or "could not be broadcast" in str(err):
            raise Wrong(f"{err}. delta is (E,), one step per channel, and A is (E, N): give "
                        "delta a trailing axis, delta[:, None], so that it broadcasts over the N "
                        "states") from None
        raise
    A_bar, B_bar = returned_pair(out, "zoh", names="(A_bar, B_bar)")
    expect(A_bar.shape == (E, N) and B_bar.shape == (E, N),
           f"A_bar and B_bar must both have A's shape (E, N) = {(E, N)}, got "
           f"{tuple(A_bar.shape)} and {tuple(B_bar.shape)}")
    ref_A, ref_B = discretize_zoh(A, B, delta)
    dA = delta[:, None] * A
    if close(A_bar, 1 + dA):
        raise Wrong("A_bar is 1 + Delta A, only the first-order term: over a whole step the "
                    "state decays by an exponential")
    if close(A_bar, ref_B) and close(B_bar, ref_A):
        raise Wrong("the two matrices are right but swapped: zoh returns the pair (A_bar, B_bar), "
                    "the decay first")
    if close(A_bar, (1 + dA / 2) / (1 - dA / 2)):
        raise Wrong("A_bar follows the bilinear rule, S4's: this exercise discretises by the "
                    "zero-order hold, eq. (10.10), whose A_bar is an exponential")
    float32_work(A_bar, ref_A, "A_bar")
    expect(close(A_bar, ref_A), "A_bar is not the decay of the state over one step of length "
           "Delta (one step per channel: delta is (E,))")
    if close(B_bar, delta[:, None] * B):
        raise Wrong("B_bar is Delta B, Euler's rule: it takes the input's effect at the start of "
                    "the step; the zero-order hold adds it up over the whole step, while the state "
                    "decays")
    if close(B_bar, (ref_A - 1) * B):
        raise Wrong("B_bar is off by a factor: it must tend to Delta B as Delta goes to 0, and "
                    "(A_bar - 1) B tends to Delta A B")
    if close(B_bar, -ref_B):
        raise Wrong("B_bar has the wrong sign: it is (A_bar - 1) / A B, and for A < 0 both "
                    "A_bar - 1 and A are negative")
    if close(B_bar, ref_B / delta[:, None]):
        raise Wrong("B_bar is divided by Delta: it must tend to Delta B as Delta goes to 0, "
                    "(A_bar - 1) / A B, with A itself in the denominator, not Delta A")
    float32_work(B_bar, ref_B, "B_bar")
    expect(close(B_bar, ref_B), "B_bar is not the zero-order hold's input matrix")


# ---------------------------------------------------------------------------------------------
# The kernel of a complex diagonal SSM (S4D-Lin).
# ---------------------------------------------------------------------------------------------


def _s4d_real_system(A, B, C, delta, length) -> torch.Tensor:
    """The kernel of the real system of 2M states that M complex states stand for, each state
    a rotation-and-decay block [[Re a, -Im a], [Im a, Re a]] on (Re h, Im h), discretised by the
    matrix exponential (no complex arithmetic, no conjugate pairs)."""
    H = A.shape[0]
    M = torch.zeros(2 * H, 2 * H, dtype=F64)
    b, c = torch.zeros(2 * H, dtype=F64), torch.zeros(2 * H, dtype=F64)
    for n in range(H):
        i = 2 * n
        M[i, i] = M[i + 1, i + 1] = A[n].real
        M[i, i + 1], M[i + 1, i] = -A[n].imag, A[n].imag
        b[i], b[i + 1] = B[n].real, B[n].imag
        c[i], c[i + 1] = 2 * C[n].real, -2 * C[n].imag  # y = 2 Re(C h)
    M_bar = torch.linalg.matrix_exp(delta * M)
    b_bar = torch.linalg.solve(M, (M_bar - torch.eye(2 * H, dtype=F64)) @ b)
    out, state = [], b_bar
    for _ in range(length):
        out.append(c @ state)
        state = M_bar @ state
    return torch.stack(out)


def _s4d_slips(A, B, C, delta, length) -> dict[str, torch.Tensor]:
    """The typical wrong kernels, each with what the message says about it."""
    k = torch.arange(length, dtype=F64)

    def kernel(A_, B_bar, powers):
        return ((C * B_bar)[:, None] * A_[:, None] ** powers).sum(0)

    A_bar = torch.exp(delta * A)
    B_bar = (A_bar - 1) / A * B
    right = kernel(A_bar, B_bar, k)
    real_A = A.real.to(A.dtype)
    return {
        "K is half of what it should be: each complex state stands for a conjugate pair, and the "
        "pair adds up to twice the real part": right.real,
        "K is twice what it should be: the conjugate partner is counted twice (2 Re already "
        "holds both members of a pair)": 4 * right.real,
        "B_bar is Delta B, Euler's rule: this exercise discretises by the zero-order hold, "
        "eq. (10.10), with complex A": 2 * kernel(A_bar, delta * B, k).real,
        "A_bar and B_bar follow the bilinear rule, S4's: this exercise discretises by the "
        "zero-order hold, eq. (10.10)": 2 * kernel((1 + delta / 2 * A) / (1 - delta / 2 * A),
                                                   delta * B / (1 - delta / 2 * A), k).real,
        "K starts one step late: K_0 = 2 Re(C B_bar), the response in the step of the impulse "
        "itself (A_bar^0 = 1)": 2 * kernel(A_bar, B_bar, k + 1).real,
        "K is built from |.| instead of the real part: the kernel of a complex pair oscillates, "
        "it changes sign": 2 * right.abs(),
        "C is conjugated: the pair adds up to 2 Re(C_n A_bar_n^k B_bar_n), with C_n itself; "
        "conj(C_n) belongs to a different real system": 2 * ((C.conj() * B_bar)[:, None]
                                                             * A_bar[:, None] ** k).sum(0).real,
        "the imaginary part of A is lost: a complex A_n rotates the state as it decays, "
        "exp(Delta A_n) must be a complex exponential": 2 * kernel(
            torch.exp(delta * real_A), (torch.exp(delta * real_A) - 1) / real_A * B, k).real,
    }


@exercise("ex-ch10-s4d", hints=[
    "Discretise each complex state as in eq. (10.10), with complex numbers: A_bar = exp(Delta A) "
    "and B_bar = (A_bar - 1) / A * B work element-wise on complex tensors.",
    "The kernel of one complex state is C_n A_bar_n^k B_bar_n for k = 0, 1, ..., length - 1. "
    "Its conjugate partner gives the complex conjugate, so the pair together gives twice the real "
    "part.",
    "Sum over the M states, then take 2 * (...).real: K must be a real tensor of shape "
    "(length,).",
])
def check_s4d(fn):
    H, length = 6, 50
    lin = torch.complex(torch.full((H,), -0.5, dtype=F64), math.pi * torch.arange(H, dtype=F64))
    g = torch.Generator().manual_seed(4)
    free = torch.complex(-torch.rand(H, generator=g, dtype=F64) - 0.05,
                         3 * torch.randn(H, generator=g, dtype=F64))
    for A, delta in ((lin, 0.05), (free, 0.3)):
        B = torch.complex(torch.randn(H, generator=g, dtype=F64),
                          torch.randn(H, generator=g, dtype=F64))
        C = torch.complex(torch.randn(H, generator=g, dtype=F64),
                          torch.randn(H, generator=g, dtype=F64))
        K = returned_tensor(call(fn, A.clone(), B.clone(), C.clone(), delta, length,
                                 what="s4d_kernel"), "s4d_kernel")
        expect(not K.is_complex(), "K must be real: the output of a real system, twice the real "
               "part of the sum over the complex states")
        expect_shape(K, (length,), "K")
        for message, slip in _s4d_slips(A, B, C, delta, length).items():
            if close(K, slip, n=H):
                raise Wrong(message)
        exact = _s4d_real_system(A, B, C, delta, length)
        float32_work(K, exact, "K", n=4 * H)
        expect(close(K, exact, n=4 * H),
               "K is not the kernel of the real system that the complex states stand for")


# ---------------------------------------------------------------------------------------------
# The decay mask of a scalar-gated SSM.
# ---------------------------------------------------------------------------------------------


class _ExpOverflow(TorchFunctionMode):
    """Whether an exp run inside it gave inf from a finite number: an overflow."""

    def __init__(self):
        super().__init__()
        self.seen = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        watched = getattr(func, "__name__", "") in ("exp", "exp_", "exp2", "exp2_") \
            and isinstance(args[0], torch.Tensor) and args[0].is_floating_point()
        finite = torch.isfinite(args[0]) if watched else None  # before an in-place exp
        out = func(*args, **(kwargs or {}))
        if watched and isinstance(out, torch.Tensor) and bool((torch.isinf(out) & finite).any()):
            self.seen = True
        return out


@exercise("ex-ch10-decay-mask", hints=[
    "Compute L for T = 3 by hand, with gates a_1, a_2, a_3, and compare it with what the "
    "function returns, entry by entry.",
    "Above the diagonal, j > i, step j has not happened yet when output i is computed. What does "
    "exp(A_i - A_j) give there, and what should L hold?",
    "Keep the entries with j <= i and make the others zero by masking the exponent before exp, "
    "since exp(-inf) = 0. Zeros put in after exp come too late: on a long sequence those entries "
    "overflow to inf first, a 0/1 mask then gives 0 * inf = NaN, and even an entry replaced by 0 "
    "has a NaN gradient.",
])
def check_decay_mask(fn):
    g = torch.Generator().manual_seed(3)
    log_a = -torch.rand(2, 3, 7, generator=g, dtype=F64)
    L = returned_tensor(call(fn, log_a.clone(), what="decay_mask_"), "decay_mask_")
    expect(L.shape == (2, 3, 7, 7), f"log_a of shape (2, 3, 7) gives L of shape (2, 3, 7, 7), "
           f"got {tuple(L.shape)}")
    ref = decay_mask(log_a)
    upper = torch.ones(7, 7, dtype=torch.bool).triu(1)
    A = log_a.cumsum(-1)
    if close(L, (A[..., :, None] - A[..., None, :]).exp()):  # the starter: what the learner sees
        i, j = divmod(int(L[0, 0].argmax()), 7)
        raise Wrong(f"for T = 7, L has entries above 1 (L[{i}, {j}] = {L[0, 0, i, j]:.2f} in the "
                    "first sequence): a product of gates, each at most 1, never exceeds 1")
    expect(not bool(L[..., upper].abs().gt(0).any()),
           "L[i, j] is not zero for some j > i: the mask lets the future in")
    if close(L, ref * log_a.exp()[..., None, :]):
        raise Wrong("L[i, j] also multiplies a_j: the product runs over the steps after j, "
                    "a_(j+1) ... a_i")
    expect(close(L.diagonal(dim1=-2, dim2=-1), torch.ones(2, 3, 7, dtype=F64)),
           "the diagonal must be 1: what step i wrote is all there at step i (an empty product)")
    expect(close(L, ref, n=7), "below the diagonal, L[i, j] is not the product of the gates of "
           "the steps j+1, ..., i")
    # longer sequences: above the diagonal exp(A_i - A_j) reaches e^99 in float32 and e^990 in
    # float64, past the largest number of each, unless the exponent is masked first; an exp that
    # overflows is seen whether or not L carries a gradient (and NumPy's by its warning)
    for dtype, log_gate in ((torch.float32, -1.0), (F64, -10.0)):
        long_log_a = torch.full((1, 1, 100), log_gate, dtype=dtype)
        # (NumPy's warning is silenced by a learner's own np.errstate(over="ignore"))
        with _ExpOverflow() as torch_exp, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            long_L = call(fn, long_log_a, what="decay_mask_")
        numpy_exp = any("overflow" in str(w.message) for w in caught)
        expect(not (torch_exp.seen or numpy_exp),
               f"with 100 gates of e^{log_gate:g} in {str(dtype).removeprefix('torch.')}, an "
               f"entry above the diagonal overflows to inf (its exponent reaches "
               f"{-99 * log_gate:g}) before it is set to 0: multiplied by a 0 of a mask it gives "
               "NaN, and even where it is set to 0 the gradient there is 0 * inf = NaN. Mask the "
               "exponent (with -inf) before exp, not the result after it")
        long_L = returned_tensor(long_L, "decay_mask_")
        expect(bool(torch.isfinite(long_L).all()),
               f"with 100 gates of e^{log_gate:g} in {str(dtype).removeprefix('torch.')}, L has "
               "NaN or inf entries: a product of many gates underflows to 0, and a ratio of two "
               "such products is 0 / 0. Work with sums of log a (the exponent A_i - A_j), not "
               "with ratios of products of gates")
    log_a = torch.full((1, 1, 100), -1.0)
    if isinstance(call(fn, log_a.clone(), what="decay_mask_"), torch.Tensor):  # not NumPy
        log_a.requires_grad_()
        L = call(fn, log_a, what="decay_mask_")
        if isinstance(L, torch.Tensor) and L.requires_grad:  # a detached L has no gradient
            L.sum().backward()
            expect(log_a.grad is not None and bool(torch.isfinite(log_a.grad).all()),
                   "with 100 gates of 0.37 in float32, the gradient of L is NaN: above the "
                   "diagonal an entry overflows to inf before it is set to 0 (exp(A_i - A_j), "
                   "or a ratio of two products of gates), and the gradient there is 0 * inf. "
                   "Compute the exponent A_i - A_j, mask it with -inf, then take exp")


# ---------------------------------------------------------------------------------------------
# Mamba-2's chunked algorithm.
# ---------------------------------------------------------------------------------------------


def _ssd_states(x, log_a, B, C):
    """The scalar-gated SSM step by step: the outputs y (batch, H, T, P) and the state after
    every step, h (batch, H, T, N, P)."""
    h = x.new_zeros(*B.shape[:2], B.shape[-1], x.shape[-1])
    states = []
    for t in range(x.shape[2]):
        h = log_a[:, :, t, None, None].exp() * h + B[:, :, t, :, None] * x[:, :, t, None, :]
        states.append(h)
    states = torch.stack(states, dim=2)
    return torch.einsum("bhtn,bhtnp->bhtp", C, states), states


def _chunk_states(states) -> torch.Tensor:
    """The learner's states as one tensor; a list of per-chunk states is stacked along dim 2."""
    if isinstance(states, list | tuple) and states \
            and all(isinstance(h, torch.Tensor | np.ndarray) for h in states):
        states = torch.stack([as_tensor(h, "each state in states") for h in states], dim=2)
    return _item_tensor(states, "states, the second item of the pair (y, states),")


def _item_tensor(x, what: str) -> torch.Tensor:
    """An item of the learner's pair as a tensor (a NumPy array is taken as one), or a
    :class:`Wrong` that says ``what`` must be a tensor."""
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x.copy())
    expect(isinstance(x, torch.Tensor), f"{what} must be a tensor, got {type(x).__name__}")
    return x


class _TorchCalls(TorchFunctionMode):
    """Counts the torch functions and tensor methods the code run inside it calls (those that
    PyTorch calls inside them are not counted); measures the longest chain of states made from
    states (``chain``), where a state is a tensor with an axis of length N and one of length P,
    in any order, or one of N P (``state`` is (N, P), lengths no other axis has), or a part of
    one (an axis of length N or P) without an axis of length T, and a call that writes into a
    tensor (``h[t] = ...``, ``h.mul_(a)``, ``out=h``, or into a view of h) extends that tensor's
    chain; and keeps
    the shape of the first result with two axes of length ``T``: a T x T matrix. A recurrence
    makes a chain as long as its steps; reading one state many times does not."""

    def __init__(self, T: int, state: tuple[int, int] = (0, 0)):
        super().__init__()
        self.T, self.state, self.calls, self.chain, self.square = T, state, 0, 0, None

    def _is_state(self, t: torch.Tensor) -> bool:
        """A state, or a part of one without a time axis (a state kept as P columns of N)."""
        N, P = self.state
        shape = set(t.shape)
        return {N, P} <= shape or N * P in shape or (bool({N, P} & shape)
                                                      and self.T not in shape)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        out = func(*args, **(kwargs or {}))
        results = [t for t in (out if isinstance(out, tuple | list) else (out,))
                   if isinstance(t, torch.Tensor)]
        inputs = [t for a in (*args, *(kwargs or {}).values())
                  for t in (a if isinstance(a, tuple | list) else (a,))
                  if isinstance(t, torch.Tensor)]
        depth = 1 + max((getattr(t, "_seqbook_chain", 0) for t in inputs), default=0)
        name = getattr(func, "__name__", "")
        # writes: h[t] = ..., h.mul_(a), torch.add(..., out=h), and the tensor a view writes into
        # (h[t].copy_(...)); reads such as h[t], h.T or h.shape (dunders) are no writes
        in_place = name == "__setitem__" or (name.endswith("_") and not name.startswith("__"))
        written = inputs[:1] if in_place else []
        into = (kwargs or {}).get("out")
        written += [t for t in (into if isinstance(into, tuple | list) else (into,))
                    if isinstance(t, torch.Tensor)]
        written += [t._base for t in written if t._base is not None]
        # what is written counts the chains of what it is made from, not the target's own: a
        # mask filled row by row is no chain, a state written from the last one is
        sources = [t for t in inputs if not any(t is w for w in written)]
        written_depth = 1 + max((getattr(t, "_seqbook_chain", 0) for t in sources), default=0)
        for t, d in [*((t, depth) for t in results), *((t, written_depth) for t in written)]:
            if self._is_state(t):
                t._seqbook_chain = max(d, getattr(t, "_seqbook_chain", 0))
                self.chain = max(self.chain, t._seqbook_chain)
        if self.square is None:
            for t in results:
                if list(t.shape).count(self.T) >= 2:
                    self.square = tuple(t.shape)
                    break
        return out


def _ssd_inputs(b, H, T, N, P, seed):
    """x, log_a, B, C of the scalar-gated SSM, float64, from a local generator."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, H, T, P, generator=g, dtype=F64)
    log_a = -torch.rand(b, H, T, generator=g, dtype=F64)
    B, C = (torch.randn(b, H, T, N, generator=g, dtype=F64) for _ in range(2))
    return x, log_a, B, C


def _watch_chunked(fn, T: int, chunk_size: int) -> _TorchCalls:
    """Runs the learner's ssd_chunked on T steps in chunks of ``chunk_size`` and returns what it
    called; batch 1, H = 2, N = 5, P = 7, so that only the time axes have length T, and only a
    state has axes of lengths 5 and 7 (or 35)."""
    inputs = _ssd_inputs(1, 2, T, 5, 7, seed=5)
    with _TorchCalls(T, state=(5, 7)) as watch:
        out = call(fn, *inputs, chunk_size, what="ssd_chunked")
    # NumPy answers (accepted) make no torch calls to count
    watch.numpy = isinstance(out, tuple | list) and any(isinstance(item, np.ndarray)
                                                         for item in out)
    return watch


def _check_chunked_method(fn) -> None:
    """A :class:`Wrong` unless ``fn`` works by chunks, one after another: with one chunk of T
    steps its longest chain of states made from states does not grow with T (no step per
    position inside a chunk; other calls may: a mask built row by row, or entry by entry, or the
    entering state read row by row, is the attention form, slowly),
    with chunks of 4 steps it makes no T x T matrix (no attention form over the whole
    sequence), and it makes more calls for more chunks (a loop over the chunks, not the states
    between them all at once)."""
    short, mid, long = (_watch_chunked(fn, T, T) for T in (8, 16, 32))
    # calls that grow with the square of the chunk's length come from a loop over the entries of
    # a chunk x chunk matrix (a decay mask built entry by entry): slow, but the attention form
    entrywise = long.calls - mid.calls > 3 * (mid.calls - short.calls) > 0
    stepwise = long.chain - short.chain >= (32 - 8) // 2  # a state made from the last, a step
    if long.calls - short.calls >= (32 - 8) // 2 and stepwise and not entrywise:
        raise Wrong("ssd_chunked runs a step per position inside a chunk: with one chunk "
                    f"(chunk_size = T) it makes {short.calls} torch calls for T = 8 and "
                    f"{long.calls} for T = 32. Inside a chunk, compute all its outputs at once with "
                    "the attention form, and the state at its end with one matrix product")
    whole = _watch_chunked(fn, 32, 4)
    if whole.square is not None:
        raise Wrong("ssd_chunked makes a T x T matrix with chunks of 4 steps (a tensor of shape "
                    f"{whole.square} for T = 32): it computes over the whole sequence at once. "
                    "Inside a chunk the attention form needs the chunk's steps only, "
                    "chunk_size x chunk_size")
    few, many = (_watch_chunked(fn, 32, c) for c in (16, 4))
    if not many.numpy and not entrywise and many.calls - few.calls < 8 - 2:
        if long.calls - short.calls >= (32 - 8) // 2:  # calls per position, whatever the chunks
            raise Wrong("ssd_chunked runs a step per position: its torch calls grow with T "
                        f"({short.calls} for T = 8, {long.calls} for T = 32, in one chunk) and "
                        "not with the number of chunks. Inside a chunk, compute all its outputs "
                        "at once with the attention form, and the state at its end with one "
                        "matrix product")
        raise Wrong("ssd_chunked makes about as many torch calls for 8 chunks as for 2 "
                    f"({many.calls} and {few.calls} for T = 32 in chunks of 4 and of 16): it "
                    "passes the states between the chunks all at once, as ssd_chunk_scan does. "
                    "The exercise asks for the other way: a loop over the chunks that carries "
                    "one state h from each chunk to the next")


#: the package's chunked algorithm, which the learner's loop may not call
MAIN_TEXT_SSD = {"seqbook.ssm.ssd_chunk_scan": ssd_chunk_scan}

#: the lengths of the chunks the check cuts T = 11 steps into: 3 chunks with a last one of 3
#: steps, 3 chunks with a last one of a single step, and the attention form (one chunk of T)
CHUNK_SIZES = (4, 5, 11)


@exercise("ex-ch10-chunked", hints=[
    "Cut the time axis into chunks. Inside a chunk, use the attention form with the chunk's own "
    "decay mask; between chunks, carry one state h of shape (batch, H, N, P), the recurrence's, "
    "and keep a copy of it after every chunk.",
    "A query at step i of a chunk also reads the state h that entered the chunk, decayed by the "
    "gates of the chunk's steps up to i: C_i^T h times exp(cumsum of log a inside the chunk).",
    "After a chunk, the new state is the old one decayed by all the chunk's gates, plus what each "
    "step j wrote, B_j x_j^T, decayed by the gates after j to the end of the chunk. Stack these "
    "states with torch.stack(..., dim=2).",
])
def check_chunked(fn):
    b, H, T, N, P = 2, 3, CHUNK_SIZES[-1], 5, 4  # all different: a missing or swapped axis fails
    x, log_a, B, C = _ssd_inputs(b, H, T, N, P, seed=4)
    ref, every_state = _ssd_states(x, log_a, B, C)
    for chunk in CHUNK_SIZES:
        with CallWatch(MAIN_TEXT_SSD) as watch:
            try:
                out = call(fn, x.clone(), log_a.clone(), B.clone(), C.clone(), chunk,
                           what="ssd_chunked")
            except Wrong as err:
                shapes = ("unflatten", "is invalid for input of size", "multiply up to",
                          "must match the size of tensor")
                if T % chunk and any(words in str(err) for words in shapes):
                    # an answer that assumes the chunk size divides T
                    raise Wrong(f"{err}. Here T = {T} steps in chunks of {chunk}: the "
                                f"last chunk has {T % chunk} steps only") from None
                raise
        if watch.used:
            raise Wrong(f"ssd_chunked calls {watch.used[0]}, the main text's chunked algorithm: "
                        "write the chunks yourself, a loop that carries the state from chunk "
                        "to chunk")
        if isinstance(out, torch.Tensor | np.ndarray):
            raise Wrong("ssd_chunked returns one tensor: it must return the pair (y, states), the "
                        "outputs and the state after each chunk")
        expect(isinstance(out, tuple | list) and len(out) == 2, "ssd_chunked must return the "
               f"pair (y, states), got {type(out).__name__}")
        y = _item_tensor(out[0], "y, the first item of the pair (y, states),")
        states = _chunk_states(out[1])
        expect(y.shape == ref.shape, f"y must have x's shape (batch, H, T, P) = "
               f"{tuple(ref.shape)}, got {tuple(y.shape)} (chunk_size={chunk})")
        if not close(y, ref, n=T * N):
            first = min(chunk, T)
            if not close(y[:, :, :first], ref[:, :, :first], n=T * N):
                raise Wrong(f"with chunk_size={chunk} the first chunk of y is already wrong: "
                            "inside a chunk the output is the masked attention form with the "
                            "chunk's decay mask")
            raise Wrong(f"with chunk_size={chunk} the first chunk of y is right but a later one "
                        "is not: check how the state enters a chunk (decayed up to each step) and "
                        "how it is updated at the chunk's end")
        chunks = -(-T // chunk)
        ends = [min(end, T) - 1 for end in range(chunk, T + chunk, chunk)]
        want = every_state[:, :, ends]                             # (b, H, chunks, N, P)
        if tuple(states.shape) == (b, H, N, P):
            raise Wrong("states is a single state of shape (batch, H, N, P): it must hold the "
                        "state after each chunk, stacked along dim 2, (batch, H, number of "
                        f"chunks, N, P) = {tuple(want.shape)} for chunk_size={chunk}")
        if states.ndim == 5 and tuple(states.shape[:2]) + tuple(states.shape[3:]) == (b, H, N, P) \
                and states.shape[2] != chunks:
            extra = (": the first is the zero state before the first chunk"
                     if states.shape[2] == chunks + 1 and not states[:, :, 0].any() else "")
            raise Wrong(f"with chunk_size={chunk}, T = {T} steps make {chunks} chunks, but states "
                        f"holds {states.shape[2]} state{'' if states.shape[2] == 1 else 's'}{extra}")
        expect(tuple(states.shape) == tuple(want.shape), "states must have shape (batch, H, "
               f"number of chunks, N, P) = {tuple(want.shape)} for chunk_size={chunk}, got "
               f"{tuple(states.shape)}")
        if close(states, want, n=T * N):
            continue
        entering = torch.cat([torch.zeros_like(want[:, :, :1]), want[:, :, :-1]], dim=2)
        if chunks > 1 and close(states, entering, n=T * N):
            raise Wrong(f"with chunk_size={chunk}, states[:, :, j] is the state that enters chunk "
                        "j: it must be the state after chunk j, the last one the state after "
                        "step T")
        if chunks > 1 and close(states, want[:, :, -1:].expand_as(want), n=T * N):
            raise Wrong(f"with chunk_size={chunk}, every state in states is the last one: the "
                        "state kept after each chunk changes with the later updates (an in-place "
                        "update of h, such as h *= ..., changes the copies already kept)")
        wrong = next(j for j in range(chunks) if not close(states[:, :, j], want[:, :, j],
                                                            n=T * N))
        raise Wrong(f"with chunk_size={chunk}, y is right but the state after chunk {wrong} is "
                    "not the recurrence's state at the chunk's last step")
    _check_chunked_method(fn)


# ---------------------------------------------------------------------------------------------
# The delta rule overwrites where the Hebb rule adds: one worked memory.
# ---------------------------------------------------------------------------------------------

#: the memory of the exercise: D_k = 3, D_v = 2, one pair stored under e_1; a new value for e_1
OVERWRITE = {"S": [[1.0, 2.0], [0.0, 0.0], [0.0, 0.0]], "key": [1.0, 0.0, 0.0],
             "value": [3.0, -1.0]}


def _numbers(x) -> torch.Tensor:
    """``x`` (a number, a list or tuple of them, a NumPy array or a tensor of any float dtype) as
    a flat float64 tensor; a TypeError or ValueError for anything else."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().to(F64).flatten()
    if isinstance(x, (list, tuple)):
        parts = [_numbers(p) for p in x]
        return torch.cat(parts) if parts else torch.zeros(0, dtype=F64)
    if isinstance(x, (str, bytes, bool)) or x is None:
        raise TypeError(f"not a number: {x!r}")
    return torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=F64).flatten()


def _overwrite_reads() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the memory returns for e_1 before the write, after the Hebb write and after the
    delta write (beta = 1), the last from the package's delta rule."""
    S = torch.tensor(OVERWRITE["S"], dtype=F64)
    k = torch.tensor(OVERWRITE["key"], dtype=F64)
    v = torch.tensor(OVERWRITE["value"], dtype=F64)
    before = S.T @ k
    hebb = (S + torch.outer(k, v)).T @ k
    one = torch.ones(1, 1, 1, dtype=F64)
    _, S_delta = delta_rule_recurrent(k.view(1, 1, 1, 3), k.view(1, 1, 1, 3), v.view(1, 1, 1, 2),
                                      one, state=S.view(1, 1, 3, 2))
    return before, hebb, S_delta[0, 0].T @ k


@exercise("ex-ch10-overwrite", hints=[
    "S^T e_1 is the first row of S. With the key e_1, both rules change the first row only.",
    "Hebb's rule adds k v^T to S, whatever S holds. The delta rule first reads what the memory "
    "returns for the key, S^T e_1, and then adds beta k times the difference between the new "
    "value and that read-out.",
])
def check_overwrite(answer):
    what = "answer must be a pair (read-out after the Hebb write, read-out after the delta write)"
    if isinstance(answer, (np.ndarray, torch.Tensor)) and tuple(answer.shape) == (2, 2):
        answer = tuple(answer)
    expect(isinstance(answer, (tuple, list)) and len(answer) == 2, what)
    reads = []
    for name, x in zip(("the Hebb read-out", "the delta read-out"), answer, strict=True):
        try:
            r = _numbers(x)
        except (TypeError, ValueError, RuntimeError) as err:
            raise Wrong(f"{name} must be two numbers, such as (0.0, 1.0)") from err
        if r.numel() == 6:
            raise Wrong(f"{name} has 6 numbers, a whole state: a read-out is what the memory "
                        "returns for the key, S^T e_1, D_v = 2 numbers")
        expect(r.numel() == 2, f"{name} must be two numbers (a read-out S^T e_1 has D_v = 2 "
               f"entries), got {r.numel()}")
        reads.append(r)
    hebb, delta = reads
    before, ref_hebb, ref_delta = _overwrite_reads()
    error = torch.tensor(OVERWRITE["value"], dtype=F64) - before

    def near(a, b):
        return bool((a - b).abs().max() <= 1e-6)

    if near(hebb, ref_delta) and near(delta, ref_hebb):
        raise Wrong("the two read-outs are in the wrong order: first the one after the Hebb "
                    "write, then the one after the delta write")
    if not near(hebb, ref_hebb):
        if near(hebb, ref_delta):
            raise Wrong("the Hebb read-out is only the new value: Hebb's rule adds k v^T on top "
                        "of what S holds, and the old value of e_1 is still there")
        if near(hebb, before):
            raise Wrong("the Hebb read-out is what the memory returned before the write")
        raise Wrong("the Hebb read-out is not right: add the outer product k v^T to S, then read "
                    "S^T e_1")
    if not near(delta, ref_delta):
        if near(delta, ref_hebb):
            raise Wrong("the delta read-out equals the Hebb read-out: the delta rule writes only "
                        "the error, the new value minus what the memory returns for e_1")
        if near(delta, error):
            raise Wrong("the delta read-out is the error that the delta rule writes, not what the "
                        "memory returns after the write: read S_t^T e_1 from the new S")
        if near(delta, before - error):
            raise Wrong("the error has the wrong sign: it is the value wanted minus the value "
                        "read, v_t - S^T k_t; the other way round the write moves the read-out "
                        "away from v_t")
        if near(delta, before):
            raise Wrong("the delta read-out is what the memory returned before the write")
        if near(delta, before + error / 2):
            raise Wrong("that is the read-out after a write with beta = 1/2, half the error: "
                        "this part asks for beta = 1")
        raise Wrong("the delta read-out is not right: read S^T e_1, subtract it from the new "
                    "value, write beta k times that difference, then read again")


# ---------------------------------------------------------------------------------------------
# Find the bug: one write of the delta rule, for a batch of memories.
# ---------------------------------------------------------------------------------------------

#: (B, D_k, D_v, seed) of the random memories a write is compared on; the first is square, so
#: that a read-out S k taken from the wrong side runs and gives other numbers
DELTA_CASES = ((3, 4, 4, 20), (2, 5, 3, 21), (1, 3, 2, 22))


def _call_on(fn, args, what: str, case: str):
    """:func:`call`, with the inputs (``case``) named when the learner's code raises."""
    try:
        return call(fn, *args, what=what)
    except Wrong as err:
        raise Wrong(f"{err} (with {case})") from err


def _delta_case(B, Dk, Dv, seed, unit=False, beta_one=False, empty=False):
    """Random memories S (non-zero unless ``empty``), keys of length 1.5 to 2.5 (1 if ``unit``),
    values, and beta in [0.2, 0.8] (1 if ``beta_one``), all float64, from a local generator."""
    g = torch.Generator().manual_seed(seed)
    S = torch.randn(B, Dk, Dv, generator=g, dtype=F64)
    k = F.normalize(torch.randn(B, Dk, generator=g, dtype=F64), dim=-1)
    length = 1.5 + torch.rand(B, 1, generator=g, dtype=F64)
    v = torch.randn(B, Dv, generator=g, dtype=F64)
    beta = 0.2 + 0.6 * torch.rand(B, generator=g, dtype=F64)
    return (torch.zeros_like(S) if empty else S, k if unit else k * length, v,
            torch.ones_like(beta) if beta_one else beta)


def _delta_reference(S, k, v, beta):
    """One step of the package's delta rule for each memory of the batch."""
    heads = (S.shape[0], 1, 1)
    _, S_new = delta_rule_recurrent(k.view(*heads, -1), k.view(*heads, -1), v.view(*heads, -1),
                                    beta.view(heads), state=S[:, None])
    return S_new[:, 0]


def _read(S, k):
    """What each memory of the batch returns for its key, S^T k: (B, D_v)."""
    return torch.einsum("bkv,bk->bv", S, k)


def _write(key, value):
    """The outer product key value^T of each memory of the batch: (B, D_k, D_v)."""
    return torch.einsum("bk,bv->bkv", key, value)


def _delta_slips(S, k, v, beta):
    """The typical slips of a delta-rule write, each with what it does wrong in words."""
    b = beta[:, None]
    read = _read(S, k)
    error = b * (v - read)

    slips = [
        (S + _write(k, b * v - read),
         "with beta = 1 the write is right, but with beta < 1 it is not: for a unit key the "
         "read-out for k must move the fraction beta of the way from what it was towards v"),
        (S + _write(k, v - read),
         "beta has no effect: a write with beta < 1 is as large as one with beta = 1"),
        (_delta_reference(S, F.normalize(k, dim=-1), v, beta),
         "the write is right for unit keys only, not for longer ones: the rule takes k as it is "
         "given (a layer normalises its keys before they reach the rule)"),
        (S + _write(k, b * (read - v)),
         "the write moves what the memory returns for k away from v, not towards it"),
        (_write(k, error),
         "the new state has lost what the memory held before the write"),
    ]
    if S.shape[1] == S.shape[2]:
        read_wrong_side = torch.einsum("bkv,bv->bk", S, k)
        slips += [
            (S + _write(k, b * (v - read_wrong_side)),
             "the read-out for k is taken from the wrong side of S: the memory returns a value "
             "of D_v numbers for a key of D_k numbers (with D_k != D_v the shapes do not fit)"),
            (S + _write(k, error).transpose(1, 2),
             "the write puts the key and the value on the wrong axes: the D_k rows of S belong "
             "to the key's entries, its D_v columns to the value's"),
        ]
    return slips


def _nlms_epsilon(out, S, k, v, beta) -> float | None:
    """The constant eps >= 0 (0 within rounding) if ``out`` is the delta rule's write divided by
    |k|^2 + eps (the normalised LMS rule, with or without a guard against division by zero),
    else None; eps is read from the first memory and must fit every memory of the batch."""
    W = _write(k, beta[:, None] * (v - _read(S, k)))  # the delta rule's write

    def nlms(eps):
        return S + W / ((k * k).sum(-1) + eps)[:, None, None]

    if close(out, nlms(0.0), n=S.shape[1]):  # plain NLMS, at the answer's precision
        return 0.0
    D = out - S
    ratio = (D[0] * W[0]).sum() / (W[0] * W[0]).sum()
    if not ratio > 0:
        return None
    eps = float(1 / ratio - (k[0] * k[0]).sum())
    if not 0 < eps < 1:
        return None
    return eps if close(out, nlms(eps), n=S.shape[1]) else None


def _delta_symptom(fn) -> str:
    """The symptom of a wrong write, seen by writing (k, v) with beta = 1 and unit keys into an
    empty memory and into a full one, and reading k back."""
    for empty in (True, False):
        S, k, v, beta = _delta_case(3, 4, 2, 23, unit=True, beta_one=True, empty=empty)
        case = f"B = 3, D_k = 4, D_v = 2, unit keys, beta = 1{', S = 0' if empty else ''}"
        out = returned_tensor(_call_on(fn, (S, k, v, beta), "delta_write", case), "delta_write")
        if out.shape != S.shape or not close(_read(out, k), v, n=4):
            if empty:
                return ("after writing (k, v) with beta = 1 and a unit key into an empty memory, "
                        "the memory does not return v for k")
            return ("after writing (k, v) with beta = 1 and a unit key, the memory does not "
                    "return v for k")
    return ("with beta = 1 and unit keys the memory returns v for k after the write, but for "
            "random memories, keys of other lengths and beta < 1 the new state is not one step "
            "of the delta rule")


@exercise("ex-ch10-delta-bug", hints=[
    "Write a value for a unit key k with beta = 1 into a memory that already holds another value "
    "for k, then read S^T k back. What should come out, and what does?",
    "The delta rule does not write v_t itself: compare the code with the equation in the "
    "docstring, term by term.",
    "What the memory returns for k_t before the write, S_(t-1)^T k_t, is never computed. The "
    "delta rule writes the error of that read-out, not the value.",
])
def check_delta_bug(fn):
    for B, Dk, Dv, seed in DELTA_CASES:
        S, k, v, beta = _delta_case(B, Dk, Dv, seed)
        given = [x.clone() for x in (S, k, v, beta)]
        case = f"B = {B}, D_k = {Dk}, D_v = {Dv}"
        out = returned_tensor(_call_on(fn, given, "delta_write", case), "delta_write")
        expect(tuple(out.shape) == tuple(S.shape), f"the new state must have S's shape "
               f"(B, D_k, D_v) = {tuple(S.shape)}, got {tuple(out.shape)}")
        for name, x, x_given in zip(("k", "v", "beta"), (k, v, beta), given[1:], strict=True):
            expect(torch.equal(x, x_given), f"delta_write changed its argument {name} in place: "
                   "it writes into the memory S only, and leaves k, v and beta as they were")
        # the write may go into S itself (S += ...), if S then holds the new state it returns
        expect(torch.equal(given[0], S) or close(given[0], out, n=Dk),
               "delta_write changed its argument S in place, but S does not hold the new state it "
               "returns: either write the new state into S, or leave S as it was")
        out = out.detach()
        ref = _delta_reference(S, k, v, beta)
        if close(out, ref, n=Dk):
            continue
        for wrong, message in _delta_slips(S, k, v, beta):
            if close(out, wrong, n=Dk):
                raise Wrong(message)
        eps = _nlms_epsilon(out, S, k, v, beta)
        if eps is not None:
            by = ("|k|^2, as in the normalised LMS rule" if eps == 0 else
                  f"|k|^2 + {eps:.3g}, as in the normalised LMS rule with a small constant "
                  "against division by zero")
            raise Wrong(f"the write is divided by {by}: the delta rule here takes k as it is "
                        "given, with no division (a layer normalises its keys before they reach "
                        "the rule)")
        right = [close(out[i], ref[i], n=Dk) for i in range(B)]
        if any(right) and not all(right):
            raise Wrong(f"memory {right.index(False)} of the batch is written wrongly while "
                        f"memory {right.index(True)} is right: each memory of the batch has its "
                        "own k, v and beta")
        raise Wrong(_delta_symptom(fn))


# ---------------------------------------------------------------------------------------------
# The errors of one chunk, by forward substitution (the triangular system of the chunked form).
# ---------------------------------------------------------------------------------------------

#: what the learner's chunk_errors may not call: solvers and inverses, and the package's delta rule
SOLVERS = {
    "torch.linalg.solve_triangular": torch.linalg.solve_triangular,
    "torch.linalg.solve": torch.linalg.solve, "torch.linalg.solve_ex": torch.linalg.solve_ex,
    "torch.linalg.inv": torch.linalg.inv, "torch.linalg.inv_ex": torch.linalg.inv_ex,
    "torch.linalg.pinv": torch.linalg.pinv, "torch.linalg.lstsq": torch.linalg.lstsq,
    "torch.linalg.lu_solve": torch.linalg.lu_solve,
    "torch.linalg.tensorinv": torch.linalg.tensorinv,
    "torch.linalg.tensorsolve": torch.linalg.tensorsolve,
    "torch.inverse": torch.inverse, "torch.pinverse": torch.pinverse,
    "torch.triangular_solve": torch.triangular_solve, "torch.cholesky_solve": torch.cholesky_solve,
    "torch.cholesky_inverse": torch.cholesky_inverse,
    "numpy.linalg.solve": np.linalg.solve, "numpy.linalg.inv": np.linalg.inv,
    "numpy.linalg.pinv": np.linalg.pinv, "numpy.linalg.lstsq": np.linalg.lstsq,
    "numpy.linalg.tensorinv": np.linalg.tensorinv,
    "numpy.linalg.tensorsolve": np.linalg.tensorsolve,
    "torch.linalg.det": torch.linalg.det, "torch.det": torch.det,
    "torch.linalg.slogdet": torch.linalg.slogdet, "numpy.linalg.det": np.linalg.det,
    "seqbook.delta_rule.delta_rule_recurrent": delta_rule_recurrent,
    "seqbook.delta_rule.delta_rule_chunked": delta_rule_chunked,
    "seqbook.delta_rule.DeltaNet.forward": DeltaNet.forward,
}
#: the same as methods of a tensor, A.inverse() and so on
SOLVER_METHODS = ("inverse", "pinverse", "triangular_solve", "cholesky_solve", "cholesky_inverse")
#: the PyTorch operators that solve or invert, however they are reached (torch.ops.aten.linalg_inv,
#: torch.linalg.matrix_power(A, -1), a decomposition by SVD), by the name the message gives
ATEN_SOLVERS = {op: f"torch.ops.aten.{op}" for op in (
    "linalg_inv_ex", "_linalg_solve_ex", "linalg_solve_triangular", "triangular_solve",
    "linalg_pinv", "linalg_lstsq", "linalg_lu_solve", "lu_solve", "cholesky_solve",
    "cholesky_inverse", "_linalg_svd", "linalg_ldl_factor_ex", "linalg_ldl_solve", "_linalg_eigh",
    "linalg_eig", "_linalg_det", "_linalg_slogdet")}  # determinants: Cramer's rule solves too


def _importing(frame) -> bool:
    """Whether ``frame`` runs inside an import (a module's or a class's body being executed)."""
    while frame is not None:
        if "importlib" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def _solver_call(frame, event, arg) -> str | None:
    """The name of a solver that :data:`SOLVERS` cannot list: SciPy's, by name and file (SciPy
    may be imported inside the learner's function), and the tensor methods, A.inverse() and so
    on; ``None`` for any other call."""
    if event == "call":
        code = frame.f_code
        for package in ("linalg", f"sparse{os.sep}linalg"):  # any of SciPy's solvers
            if f"scipy{os.sep}{package}{os.sep}" in code.co_filename \
                    and not _importing(frame):
                return f"scipy.{package.replace(os.sep, '.')}.{code.co_name}"
    elif event == "c_call" and getattr(arg, "__name__", None) in SOLVER_METHODS \
            and isinstance(getattr(arg, "__self__", None), torch.Tensor):
        return f"Tensor.{arg.__name__}"
    return None


def _ut_case(C, Dk, Dv, dtype, seed):
    """Keys of length 0.6 to 1.2, values, and beta in [0.2, 0.9], from a local generator."""
    g = torch.Generator().manual_seed(seed)
    k = F.normalize(torch.randn(C, Dk, generator=g, dtype=F64), dim=-1)
    k = k * (0.6 + 0.6 * torch.rand(C, 1, generator=g, dtype=F64))
    v = torch.randn(C, Dv, generator=g, dtype=F64)
    beta = 0.2 + 0.7 * torch.rand(C, generator=g, dtype=F64)
    return k.to(dtype), v.to(dtype), beta.to(dtype)


def _ut_reference(k, v, beta):
    """U from the triangular system (I + A) U = diag(beta) V, A_tj = beta_t k_t^T k_j (j < t), and
    the memory after the chunk from the package's recurrent delta rule, both in float64."""
    k, v, beta = (x.to(F64) for x in (k, v, beta))
    A = (beta[:, None] * (k @ k.T)).tril(-1)
    U = torch.linalg.solve_triangular(torch.eye(len(k), dtype=F64) + A, beta[:, None] * v,
                                      upper=False)
    _, S = delta_rule_recurrent(k[None, None], k[None, None], v[None, None], beta[None, None])
    return U, S[0, 0]


def _ut_slips(k, v, beta):
    """Rows computed with a typical slip, each with what it does wrong in words."""
    k, v, beta = (x.to(F64) for x in (k, v, beta))
    gram = (k @ k.T).tril(-1)                                   # k_t^T k_j for j < t
    b = beta[:, None]

    def rows(step):
        U = torch.zeros_like(v)
        for t in range(len(k)):
            U[t] = step(t, gram[t, :t] @ U[:t])
        return U

    return [
        (b * v, "every row is beta_t v_t, what the steps would write into an empty memory: from "
                "the second step on, the memory already returns something for k_t"),
        (rows(lambda t, read: beta[t] * (v[t] + read)),
         "each row adds what the memory returns for k_t instead of taking it away"),
        *((b * (v - gram @ w),
           "the sum runs over the values v_j: the memory holds what the earlier steps wrote, the "
           "errors u_j") for w in (v, b * v)),
        (rows(lambda t, read: beta[t] * v[t] - read),
         "beta_t scales v_t only: it scales the whole error, v_t minus what the memory returns"),
        (rows(lambda t, read: v[t] - beta[t] * read),
         "beta_t scales only what the memory returns: it scales the whole error, v_t minus that "
         "read-out, so the first row is beta_1 v_1"),
        (rows(lambda t, read: v[t] - read),
         "beta is missing: each row is beta_t times the error v_t minus what the memory returns "
         "for k_t, so the first row is beta_1 v_1"),
        (_ut_reference(k / k.norm(dim=-1, keepdim=True), v, beta)[0],
         "the keys are normalised: the exercise's keys are not of unit length, and the memory's "
         "read-out uses the keys as they are"),
    ]


def _close_at(out: torch.Tensor, expected: torch.Tensor, n: int) -> bool:
    """:func:`close` at the lower of the two precisions: float32 work is right too."""
    if torch.float32 in (out.dtype, expected.dtype) and out.is_floating_point():
        return close(out.to(torch.float32), expected.to(torch.float32), n=n)
    return close(out, expected, n=n)


#: (C, D_k, D_v, dtype, seed): chunks longer than D_k (dependent keys), float32, and one step
UT_CASES = ((7, 4, 3, F64, 30), (5, 3, 5, torch.float32, 31), (1, 2, 2, F64, 32),
            (12, 6, 4, F64, 33))


@exercise("ex-ch10-ut", hints=[
    "Row t depends only on the rows before it, and the first row is beta_1 v_1, since the memory "
    "is empty before the first step. Compute the rows in order, in a loop over t.",
    "Before step t the memory is S_(t-1) = sum over j < t of k_j u_j^T, so what it returns for "
    "k_t is the sum over j < t of (k_j^T k_t) u_j: the dot products of k_t with the earlier keys "
    "weight the earlier rows of U.",
    "Start from U = torch.zeros_like(v). For t = 0, ..., C - 1, take from v[t] what the memory "
    "returns for k[t] (hint 2), and scale the difference by beta[t]; at t = 0 the sum is empty.",
])
def check_ut(fn):
    for C, Dk, Dv, dtype, seed in UT_CASES:
        k, v, beta = _ut_case(C, Dk, Dv, dtype, seed)
        given = [x.clone() for x in (k, v, beta)]
        case = f"C = {C}, D_k = {Dk}, D_v = {Dv}, {str(dtype).removeprefix('torch.')}"
        with CallWatch(SOLVERS, other=_solver_call, aten=ATEN_SOLVERS) as watch:
            try:
                out = _call_on(fn, given, "chunk_errors", case)
            except Wrong:
                if not watch.used:
                    raise
                out = None
        if watch.used:
            raise Wrong(f"chunk_errors calls {watch.used[0]}: solve the system by forward "
                        "substitution, one row after another, without a solver, an inverse, a "
                        "determinant (Cramer's rule) or seqbook.delta_rule")
        if isinstance(out, np.ndarray):
            out = torch.from_numpy(out)
        out = returned_tensor(out, "chunk_errors").detach()
        expect(tuple(out.shape) == (C, Dv), f"U must have v's shape (C, D_v) = {(C, Dv)}, got "
               f"{tuple(out.shape)}")
        expect(out.is_floating_point(), f"U must hold floating-point numbers, got {out.dtype}")
        for name, x, x_given in zip(("k", "v", "beta"), (k, v, beta), given, strict=True):
            expect(torch.equal(x, x_given), f"chunk_errors changed its argument {name} in "
                   "place: compute U in a tensor of its own")
        U, S = _ut_reference(k, v, beta)
        if dtype == torch.float32:  # float32 inputs: judged at float32, whatever the work's dtype
            out = out.to(torch.float32)
        if _close_at(out, U, n=C * Dk):
            expect(_close_at(k.to(out.dtype).T @ out, S, n=C * Dk),
                   f"with C = {C}, the memory that U writes, the sum of k_t u_t^T, is not the one "
                   "the delta rule leaves after the chunk")
            continue
        for wrong, message in _ut_slips(k, v, beta):
            if _close_at(out, wrong, n=C * Dk):
                raise Wrong(message)
        rows = [_close_at(out[t], U[t], n=C * Dk) for t in range(C)]
        first = next((t for t, right in enumerate(rows) if not right), None)
        if first is None:
            raise Wrong(f"with C = {C}, U is not the errors of the chunk's steps")
        if first == 0:
            raise Wrong(f"with C = {C}, the first row U[0] is already wrong: before the first step "
                        "the memory is empty, so U[0] = beta_1 v_1")
        right = "U[0] is" if first == 1 else f"U[0] to U[{first - 1}] are"
        raise Wrong(f"with C = {C}, {right} right and U[{first}] is not: what the memory returns "
                    "for k_t sums over all the earlier steps j < t, each error u_j weighted by "
                    "k_j^T k_t")
