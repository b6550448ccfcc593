"""Checks of chapter 5's exercises (attention and self-attention)."""

# The running sum keeps the papers' name l (ruff's E741 finds it ambiguous).
# ruff: noqa: E741

from __future__ import annotations

import math

import torch

from ..attention import MultiHeadAttention, lengths_to_mask, scaled_dot_product_attention
from ..online_softmax import tiled_attention
from .core import Wrong, call, close, exercise, expect, expect_shape, returned_pair, returned_tensor

F64 = torch.float64


# ---------------------------------------------------------------------------------------------
# The temperature of a query: the two limits of the first worked example.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch5-temperature", hints=[
    "At c = 0 every score is 0. What does a softmax make of equal scores?",
    "As c grows, the differences between the scores grow with it, and the softmax puts all its "
    "weight on the key with the largest score q . k_t. Which value belongs to that key?",
])
def check_temperature(answer):
    expect(isinstance(answer, (tuple, list)) and len(answer) == 2,
           "answer must be a pair (z at c = 0, the limit of z as c grows)")
    zs = []
    for name, z in zip(("z at c = 0", "the limit"), answer, strict=True):
        try:
            z = torch.as_tensor(z, dtype=F64).flatten()
        except (TypeError, ValueError, RuntimeError) as err:
            raise Wrong(f"{name} must be two numbers, such as (0.5, 0.5)") from err
        expect(z.numel() == 2, f"{name} must be two numbers (z has two entries), got {z.numel()}")
        zs.append(z)
    zero, limit = zs

    def near(z, target):  # an answer computed in float32 is right too
        return bool((z - torch.tensor(target, dtype=F64)).abs().max() < 1e-4)

    if near(zero, [0.5, 0.5]):
        raise Wrong("z at c = 0 averages the two *different* values: the average runs over all "
                    "three keys, and two of them carry the value (1, 0)")
    expect(near(zero, [2 / 3, 1 / 3]),
           "z at c = 0 is not what equal weights on the three keys give")
    if near(limit, [1.0, 0.0]):
        raise Wrong("the limit is the value of a key that loses: compare the scores q . k_t of "
                    "the three keys")
    expect(near(limit, [0.0, 1.0]),
           "the limit is not the value of the key with the largest score")


# ---------------------------------------------------------------------------------------------
# Find the bug: the polarity of a causal mask.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch5-mask-bug", hints=[
    "Print the weights: which entries are non-zero, those below or those above the diagonal?",
    "In this book a boolean mask is True where a query MAY attend. torch.triu(..., 1) is True "
    "above the diagonal, at the keys that come after the query.",
    "causal_mask(T) gives the lower triangle, diagonal included; is_causal=True does the same.",
])
def check_mask_bug(fn):
    g = torch.Generator().manual_seed(50)
    T, d = 6, 4
    x = torch.randn(T, d, generator=g, dtype=F64)
    out, w = returned_pair(call(fn, x.clone(), what="causal_self_attention"),
                           "causal_self_attention", "(output, weights)")
    expect_shape(out, (T, d), "the output")
    expect_shape(w, (T, T), "the weights")
    bad_rows = torch.isnan(out).any(-1) | torch.isnan(w).any(-1)
    if bad_rows.any():
        i = int(bad_rows.nonzero()[0])
        raise Wrong(f"row {i} is NaN: a query whose keys are all blocked meets softmax(-inf, ..., "
                    "-inf) = 0/0; a causal mask keeps the diagonal, so no row is empty")
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    leaks = (w.abs() > 1e-12) & future
    if leaks.any():
        ones = torch.ones(T, dtype=w.dtype)
        if close(w.sum(0), ones, n=T) and not close(w.sum(1), ones, n=T):
            raise Wrong("the weights are transposed: each column sums to one, so column i holds "
                        "the weights of query i; return one row per query, w[i, j] for query i "
                        "and key j")
        i, j = (int(t) for t in leaks.nonzero()[0])
        raise Wrong(f"position {i} attends to position {j}: the mask lets the future in")
    expect(bool((w.diagonal() > 0).all()), "a position does not attend to itself: the causal "
           "mask keeps j <= i, the diagonal included")
    ref, ref_w = scaled_dot_product_attention(x, x, x, is_causal=True)
    expect(close(w, ref_w, n=d), "the weights differ from causal softmax attention: check the "
           "scaling by 1/sqrt(d) and the softmax over the keys")
    expect(close(out, ref, n=d + T), "the weights are right but the output is not their "
           "average of the values")


# ---------------------------------------------------------------------------------------------
# A window of neighbours: restricted self-attention.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch5-local", hints=[
    "Build a table of |i - j| for all pairs of positions: torch.arange(n) against itself, with "
    "broadcasting ([:, None] and [None, :]).",
    "The mask is True where attention is allowed (the book's convention), and position i may "
    "see j when |i - j| <= r, on both sides and itself included.",
])
def check_local(fn):
    for n, r in ((12, 2), (7, 0), (5, 6), (9, 3)):
        mask = returned_tensor(call(fn, n, r, what="local_mask"), "local_mask")
        expect(mask.dtype == torch.bool, f"the mask must be a bool tensor, got {mask.dtype}")
        expect_shape(mask, (n, n), f"local_mask({n}, {r})")
        idx = torch.arange(n)
        dist = (idx[:, None] - idx[None, :]).abs()
        right = dist <= r
        if torch.equal(mask, right):
            continue
        if torch.equal(mask, ~right):
            raise Wrong("the mask is True where attention is blocked: in this book True = may "
                        "attend")
        if torch.equal(mask, dist < r):
            raise Wrong("the window misses its edges: position i may see i - r and i + r too "
                        "(|i - j| <= r)")
        if torch.equal(mask, right & (idx[None, :] <= idx[:, None])):
            raise Wrong("the window looks back only: restricted self-attention sees r "
                        "neighbours on both sides")
        raise Wrong(f"local_mask({n}, {r}) is not True exactly where |i - j| <= r")


# ---------------------------------------------------------------------------------------------
# Multi-head attention with a loop over the heads.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch5-heads-loop", hints=[
    "Head i owns the rows i*d_h to (i+1)*d_h of q_proj.weight, k_proj.weight and v_proj.weight "
    "(and the same entries of their biases): nn.Linear computes x @ W.T + b.",
    "Call scaled_dot_product_attention once per head on its (B, T, d_h) queries, keys and "
    "values; concatenate the outputs along the last axis and stack the weights along a new "
    "axis 1.",
    "The concatenated heads still pass through out_proj, the matrix W^O of the equation.",
])
def check_heads_loop(fn):
    torch.manual_seed(51)
    mha = MultiHeadAttention(12, num_heads=3).to(F64).eval().requires_grad_(False)
    g = torch.Generator().manual_seed(52)
    with torch.no_grad():  # biases that are not zero, so that a forgotten one shows
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.bias.copy_(torch.randn(proj.bias.shape, generator=g, dtype=F64))
    x = torch.randn(2, 5, 12, generator=g, dtype=F64)
    with torch.no_grad():
        ref, ref_w = mha(x, x, x, average_attn_weights=False)
        out, w = returned_pair(call(fn, mha, x.clone(), what="heads_loop"), "heads_loop",
                               "(output, weights)")
    expect_shape(out, ref.shape, "the output")
    if tuple(w.shape) == (2, 5, 5):
        raise Wrong("the weights are one (T, T) map per sequence: keep one map per head, "
                    "shape (B, h, T, T)")
    expect_shape(w, ref_w.shape, "the weights (one map per head)")
    expect(close(w, ref_w, n=4), "the weights of the heads differ from MultiHeadAttention's: "
           "check which rows of q_proj and k_proj make head i, their biases, and the scaling by "
           "1/sqrt(d_h)")
    heads = torch.einsum("bhts,bhsd->bhtd", w, (x @ mha.v_proj.weight.T + mha.v_proj.bias)
                         .view(2, 5, 3, 4).transpose(1, 2))
    concat = heads.transpose(1, 2).reshape(2, 5, 12)
    if close(out, concat, n=12):
        raise Wrong("the heads are concatenated but not mixed: apply out_proj (W^O) to the "
                    "concatenation")
    expect(close(out, ref, n=12 + 5), "the weights are right but the output is not: check the "
           "values of each head (rows of v_proj, with its bias) and out_proj")


# ---------------------------------------------------------------------------------------------
# Mean pooling over the real tokens.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch5-pooling", hints=[
    "Turn the mask into numbers (1.0 at real tokens, 0.0 at padding) with a trailing axis, so "
    "that it multiplies every feature of a position.",
    "Sum the masked vectors over time and divide by the number of real tokens of each sequence, "
    "not by T.",
])
def check_pooling(fn):
    g = torch.Generator().manual_seed(53)
    B, T, d = 3, 7, 5
    x = torch.randn(B, T, d, generator=g, dtype=F64)
    lengths = torch.tensor([7, 4, 1])
    real = lengths_to_mask(lengths, T)
    out = returned_tensor(call(fn, x.clone(), real.clone(), what="mean_pool"), "mean_pool")
    expect_shape(out, (B, d), "the pooled vectors")
    keep = real[..., None].to(F64)
    ref = (x * keep).sum(1) / keep.sum(1)
    if close(out, x.mean(1), n=T):
        raise Wrong("the pooled vector changes when the same sequence is padded longer: the "
                    "mean includes the padding")
    if close(out, (x * keep).sum(1) / T, n=T):
        raise Wrong("the padding is left out of the sum but counted in the division: divide "
                    "by the number of real tokens")
    padded = (x * (1 - keep)).sum(1) / (1 - keep).sum(1)  # rows 1 and 2 hold padding
    if close(out[1:], padded[1:], n=T):
        raise Wrong("you averaged the padding positions: real is True at the real tokens")
    expect(close(out, ref, n=T), "the result is not the mean of each sequence's real tokens")


# ---------------------------------------------------------------------------------------------
# The softmax Jacobian.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch5-jacobian", hints=[
    "Differentiate p_i = exp(s_i) / Z with Z = sum_k exp(s_k) by the quotient rule, once for "
    "j = i and once for j != i.",
    "The result is J = diag(p) - p p^T. For a batch, torch.diag_embed(p) gives the diagonal "
    "matrices and p[..., :, None] * p[..., None, :] the outer products.",
])
def check_jacobian(fn):
    g = torch.Generator().manual_seed(54)
    s = torch.randn(3, 6, generator=g, dtype=F64)
    p = torch.softmax(s, dim=-1)
    J = returned_tensor(call(fn, p.clone(), what="softmax_jacobian"), "softmax_jacobian")
    expect_shape(J, (3, 6, 6), "the Jacobians of a batch of three p's")
    ref = torch.stack([torch.autograd.functional.jacobian(lambda t: torch.softmax(t, 0), row)
                       for row in s])
    outer = p[:, :, None] * p[:, None, :]
    if close(J, -outer):
        raise Wrong("the diagonal term diag(p) is missing")
    if close(J, torch.diag_embed(p)):
        raise Wrong("the term -p p^T is missing: every p_i depends on every s_j through the sum "
                    "in the denominator")
    if close(J, torch.diag_embed(p * (1 - p))):
        raise Wrong("only the diagonal is right: p_i also changes with s_j for j != i, by "
                    "-p_i p_j")
    expect(close(J, ref), "the Jacobian differs from the one autograd computes")


# ---------------------------------------------------------------------------------------------
# The online softmax: merging two partial results.
# ---------------------------------------------------------------------------------------------


def _partial(q, k, v, rows, start, stop, causal):
    """The (m, l, o) of the keys start..stop-1: maximum, sum of exp(s - m), sum of exp(s - m) v."""
    s = (q @ k[..., start:stop, :].transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.arange(start, stop) > rows, -math.inf)
    m = s.amax(dim=-1, keepdim=True)
    p = torch.exp(s - torch.where(torch.isinf(m), torch.zeros_like(m), m))
    return m, p.sum(-1, keepdim=True), p @ v[..., start:stop, :]


def _triple(out, what: str):
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise Wrong(f"{what} must return a triple (m, l, o) of tensors, got {type(out).__name__}")
    return tuple(returned_tensor(t, what) for t in out)


@exercise("ex-ch5-merge", hints=[
    "Each partial sum was taken relative to its own maximum: l1 = sum of exp(s - m1) over its "
    "keys. Write both relative to the larger maximum m = max(m1, m2).",
    "exp(s - m) = exp(s - m1) exp(m1 - m), so l1 becomes exp(m1 - m) l1, a factor <= 1; o1 gets "
    "the same factor. Then add.",
    "Return the unnormalised o: the division by l comes once, after the last merge. torch.maximum "
    "takes the larger of two tensors entry by entry.",
])
def check_merge(fn):
    g = torch.Generator().manual_seed(55)
    T, S, D, Dv = 7, 13, 4, 3
    q = torch.randn(2, T, D, generator=g, dtype=F64)
    k = torch.randn(2, S, D, generator=g, dtype=F64)
    v = torch.randn(2, S, Dv, generator=g, dtype=F64)
    rows = torch.arange(T)[:, None]
    a = _partial(q, k, v, rows, 0, 5, False)
    b = _partial(q, k, v, rows, 5, S, False)
    m, l, o = _triple(call(fn, a, b, what="merge"), "merge")
    for name, t, ref in (("m", m, a[0]), ("l", l, a[1]), ("o", o, a[2])):
        expect_shape(t, ref.shape, f"the merged {name}")
    whole = _partial(q, k, v, rows, 0, S, False)
    if torch.isnan(m).any() or torch.isnan(l).any() or torch.isnan(o).any():
        raise Wrong("the merge gives NaN on ordinary scores: check for inf - inf or 0 * inf")
    expect(close(m, whole[0]), "m must be the larger of the two maxima")
    if close(l, a[1] + b[1]):
        raise Wrong("the two sums are added as they are, but each was taken relative to its "
                    "own maximum: bring both to the common maximum first")
    inverse = torch.exp(m - a[0]) * a[1] + torch.exp(m - b[0]) * b[1]
    if close(l, inverse):
        raise Wrong("the rescaling factor is inverted: a sum taken at a smaller maximum must "
                    "shrink, by exp(m_old - m_new) <= 1")
    expect(close(l, whole[1], n=S), "l is not the sum of exp(s - m) over the keys of both "
           "blocks, with m the new maximum")
    if close(o, whole[2] / whole[1], n=S):
        raise Wrong("o is already divided by l: return the unnormalised sum, the division comes "
                    "once at the very end")
    if close(o, a[2] + b[2], n=S):
        raise Wrong("o is not rescaled like l: both sums of a block need the same factor "
                    "exp(m_old - m_new)")
    expect(close(o, whole[2], n=S), "o is not the sum of exp(s - m) v over both blocks")
    expect(close(o / l, tiled_attention(q, k, v, 5), n=D + S),
           "o / l differs from tiled attention")
    # merging the other way round, and many blocks one after the other, causal
    m2, l2, o2 = _triple(call(fn, b, a, what="merge"), "merge")
    expect(close(o2 / l2, o / l, n=D + S), "merge(b, a) differs from merge(a, b): the order "
           "of two blocks of keys must not matter")
    state = _partial(q, k, v, rows, 0, 3, True)
    for start in range(3, S, 3):
        block = _partial(q, k, v, rows, start, min(start + 3, S), True)
        state = _triple(call(fn, state, block, what="merge"), "merge")
        if any(torch.isnan(t).any() for t in state):
            raise Wrong("a block in which a query sees no key (m = -inf, l = 0, o = 0, as causal "
                        "attention gives) makes the merge NaN: exp(-inf) = 0 is fine, but "
                        "-inf - (-inf) is not")
    expect(close(state[2] / state[1], tiled_attention(q, k, v, 3, causal=True), n=D + S),
           "merging the blocks of a causal attention one by one does not give causal attention")
