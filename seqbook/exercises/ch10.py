"""Checks of chapter 10's exercises (from attention back to recurrence)."""

from __future__ import annotations

import numbers

import torch
import torch.nn.functional as F

from ..linear_attention import linear_attention
from ..scan import linear_recurrence
from ..ssm import decay_mask, discretize_zoh, ssd_recurrent
from .core import Wrong, call, close, exercise, expect, returned_pair, returned_tensor

F64 = torch.float64


# ---------------------------------------------------------------------------------------------
# The size of a state: the KV cache against linear attention's (S, z).
# ---------------------------------------------------------------------------------------------

STATE_SIZE = {"T": 4096, "D": 64}


@exercise("ex-ch10-state-size", hints=[
    "The cache keeps, for every token read so far, what a later query needs to attend to it.",
    "Every token leaves a key and a value of D numbers each in the cache. The state is the pair "
    "(S, z): S has one number per pair of a key feature and a value feature, z one per key "
    "feature.",
])
def check_state_size(answer):
    T, D = STATE_SIZE["T"], STATE_SIZE["D"]
    expect(isinstance(answer, (tuple, list)) and len(answer) == 2,
           "answer must be a pair (numbers in the cache, numbers in the state)")
    cache, state = answer
    for name, value in (("the cache's count", cache), ("the state's count", state)):
        expect(isinstance(value, numbers.Real) and not isinstance(value, bool),
               f"{name} must be a number, got {type(value).__name__}")
    if cache == T * D:
        raise Wrong("the cache count holds one vector per token: a token leaves a key and a value")
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
# Find the bug: the composition of two steps of the gated linear recurrence.
# ---------------------------------------------------------------------------------------------


def _doubling_scan(combine, a, b):
    """Hillis and Steele's scan over dim 1 with the learner's ``combine``."""
    T, s = a.shape[1], 1
    while s < T:
        a_new, b_new = returned_pair(call(combine, (a[:, :-s], b[:, :-s]), (a[:, s:], b[:, s:]),
                                  what="combine"), "combine")
        a = torch.cat([a[:, :s], a_new], dim=1)
        b = torch.cat([b[:, :s], b_new], dim=1)
        s *= 2
    return b


@exercise("ex-ch10-combine", hints=[
    "Apply the two steps to a state h by hand: first h -> a1 h + b1, then the second step to "
    "the result. Multiply out and read off the new gate and the new input.",
    "The second step multiplies everything the first one produced by a2, including b1.",
])
def check_combine(combine):
    g = torch.Generator().manual_seed(0)
    a1, b1, a2, b2 = (torch.rand(3, 5, generator=g, dtype=F64) for _ in range(4))
    a, b = returned_pair(call(combine, (a1, b1), (a2, b2), what="combine"), "combine")
    expect(a.shape == a1.shape and b.shape == b1.shape,
           "combine must return a pair of tensors of the shape of its inputs")
    if close(b, a1 * b2 + b1):
        raise Wrong("the composite applies the steps in the wrong order: (a2, b2) first, then "
                    "(a1, b1); the first argument is the earlier step")
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
    """The typical slips of causal linear attention: no normaliser, no phi, no causality."""
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    causal = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool).tril()
    scores = (phi_q @ phi_k.transpose(-2, -1)).masked_fill(~causal, 0.0)
    raw = (q @ k.transpose(-2, -1)).masked_fill(~causal, 0.0)
    return {
        "no normaliser": scores @ v,
        "no feature map": (raw @ v) / (raw.sum(-1, keepdim=True) + eps),
        "not causal": linear_attention(q, k, v, causal=False, eps=eps),
    }


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
    # with or without the 1e-6 that the book's code adds to the normaliser
    right = [linear_attention(q, k, v, causal=True, eps=eps) for eps in (0.0, 1e-6)]
    if any(close(out, r, n=T * Dk) for r in right):
        return
    slips = [(slip, wrong) for eps in (0.0, 1e-6)
             for slip, wrong in _linear_attention_variants(q, k, v, eps).items()]
    for slip, wrong in slips:
        if close(out, wrong, n=T * Dk):
            raise Wrong({
                "no normaliser": "the outputs are not normalised: divide each one by the sum of "
                                 "its weights, phi(q_t)^T z_t",
                "no feature map": "the queries and keys enter as they are: apply the feature map "
                                  "phi(x) = elu(x) + 1 to both first",
                "not causal": "every position sees every key: the sums must run over the steps "
                              "up to t only",
            }[slip])
    later = v.clone()
    later[:, :, -1] += 1.0
    changed = returned_tensor(call(fn, q.clone(), k.clone(), later, what="causal_linear_attention"),
                      "causal_linear_attention")
    expect(torch.equal(changed[:, :, :-1], out[:, :, :-1]) or close(changed[:, :, :-1],
                                                                      out[:, :, :-1]),
           "changing the last value changes earlier outputs: position t must not see later "
           "tokens")
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
    A_bar, B_bar = returned_pair(call(fn, A.clone(), B.clone(), delta.clone(), what="zoh"), "zoh")
    expect(A_bar.shape == (E, N) and B_bar.shape == (E, N),
           f"A_bar and B_bar must both have A's shape (E, N) = {(E, N)}, got "
           f"{tuple(A_bar.shape)} and {tuple(B_bar.shape)}")
    ref_A, ref_B = discretize_zoh(A, B, delta)
    dA = delta[:, None] * A
    if close(A_bar, 1 + dA):
        raise Wrong("A_bar is 1 + Delta A, only the first-order term: over a whole step the "
                    "state decays by an exponential")
    expect(close(A_bar, ref_A), "A_bar is not the decay of the state over one step of length "
           "Delta (one step per channel: delta is (E,))")
    if close(B_bar, delta[:, None] * B):
        raise Wrong("B_bar is Delta B, Euler's rule: it takes the input's effect at the start of "
                    "the step; the zero-order hold adds it up over the whole step, while the state "
                    "decays")
    if close(B_bar, (ref_A - 1) * B):
        raise Wrong("B_bar is off by a factor: it must tend to Delta B as Delta goes to 0, and "
                    "(A_bar - 1) B tends to Delta A B")
    expect(close(B_bar, ref_B), "B_bar is not the zero-order hold's input matrix")


# ---------------------------------------------------------------------------------------------
# The decay mask of a scalar-gated SSM.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch10-decay-mask", hints=[
    "Compute L for T = 3 by hand, with gates a_1, a_2, a_3, and compare it with what the "
    "function returns, entry by entry.",
    "Above the diagonal, j > i, step j has not happened yet when output i is computed. What does "
    "exp(A_i - A_j) give there, and what should L hold?",
    "Keep the entries with j <= i and put zeros elsewhere: masked_fill with the complement of a "
    "lower-triangular boolean mask, torch.ones(T, T, dtype=torch.bool).tril().",
])
def check_decay_mask(fn):
    g = torch.Generator().manual_seed(3)
    log_a = -torch.rand(2, 3, 7, generator=g, dtype=F64)
    L = returned_tensor(call(fn, log_a.clone(), what="decay_mask_"), "decay_mask_")
    expect(L.shape == (2, 3, 7, 7), f"log_a of shape (2, 3, 7) gives L of shape (2, 3, 7, 7), "
           f"got {tuple(L.shape)}")
    ref = decay_mask(log_a)
    upper = torch.ones(7, 7, dtype=torch.bool).triu(1)
    expect(not bool(L[..., upper].abs().gt(0).any()),
           "L[i, j] is not zero for some j > i: the mask lets the future in")
    if close(L, ref * log_a.exp()[..., None, :]):
        raise Wrong("L[i, j] also multiplies a_j: the product runs over the steps after j, "
                    "a_(j+1) ... a_i")
    expect(close(L.diagonal(dim1=-2, dim2=-1), torch.ones(2, 3, 7, dtype=F64)),
           "the diagonal must be 1: what step i wrote is all there at step i (an empty product)")
    expect(close(L, ref, n=7), "below the diagonal, L[i, j] is not the product of the gates of "
           "the steps j+1, ..., i")


# ---------------------------------------------------------------------------------------------
# Mamba-2's chunked algorithm.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch10-chunked", hints=[
    "Cut the time axis into chunks. Inside a chunk, use the attention form with the chunk's own "
    "decay mask; between chunks, carry one state h of shape (batch, H, N, P), the recurrence's.",
    "A query at step i of a chunk also reads the state h that entered the chunk, decayed by the "
    "gates of the chunk's steps up to i: C_i^T h times exp(cumsum of log a inside the chunk).",
    "After a chunk, the new state is the old one decayed by all the chunk's gates, plus what each "
    "step j wrote, B_j x_j^T, decayed by the gates after j to the end of the chunk.",
])
def check_chunked(fn):
    g = torch.Generator().manual_seed(4)
    b, H, T, N, P = 2, 2, 11, 3, 4
    x = torch.randn(b, H, T, P, generator=g, dtype=F64)
    log_a = -torch.rand(b, H, T, generator=g, dtype=F64)
    B, C = (torch.randn(b, H, T, N, generator=g, dtype=F64) for _ in range(2))
    ref = ssd_recurrent(x, log_a, B, C)
    for chunk in (T, 4, 3, 1):
        y = returned_tensor(call(fn, x.clone(), log_a.clone(), B.clone(), C.clone(), chunk,
                         what="ssd_chunked"), "ssd_chunked")
        expect(y.shape == ref.shape, f"the output must have x's shape (batch, H, T, P) = "
               f"{tuple(ref.shape)}, got {tuple(y.shape)} (chunk_size={chunk})")
        if close(y, ref, n=T * N):
            continue
        first = min(chunk, T)
        if not close(y[:, :, :first], ref[:, :, :first], n=T * N):
            raise Wrong(f"with chunk_size={chunk} the first chunk is already wrong: inside a chunk "
                        "the output is the masked attention form with the chunk's decay mask")
        raise Wrong(f"with chunk_size={chunk} the first chunk is right but a later one is not: "
                    "check how the state enters a chunk (decayed up to each step) and how it is "
                    "updated at the chunk's end")
