"""Chapter 5's exercise checks (seqbook.exercises.ch05): one case per (exercise, answer, verdict).

Each check passes right answers, however they are written (float32, NumPy, another correct
formulation), calls the untouched starter "not attempted" (the find-the-bug starter gets its
symptom), and names what is wrong in each typical wrong answer, the wrong answers of the reviews
included."""

# The running sum keeps the papers' name l (ruff's E741 finds it ambiguous).
# ruff: noqa: E741

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from seqbook.attention import scaled_dot_product_attention
from seqbook.exercises import check


def starter(*args):
    raise NotImplementedError  # your code here


CASES = {}  # id -> (label, answer, expected: "pass", "not attempted" or a fragment of the ✗)


def case(name, label, answer, expected="pass"):
    CASES[name] = (label, answer, expected)


# --- the two limits of the temperature ----------------------------------------------------------

T = "ex-ch5-temperature"
case("temperature: exact fractions", T, ((2 / 3, 1 / 3), (0.0, 1.0)))
case("temperature: rounded to 3 significant digits", T, ((0.667, 0.333), (0, 1)))
case("temperature: float32 tensor and a list", T, (torch.tensor([2 / 3, 1 / 3]), [0, 1]))
case("temperature: NumPy arrays", T, (np.array([2 / 3, 1 / 3]), np.array([0.0, 1.0])))
case("temperature: a digit off in the third place", T, ((0.668, 0.333), (0, 1)),
     "not what equal weights on the three keys give")
case("temperature: two significant digits only", T, ((0.67, 0.33), (0, 1)),
     "right to 2 decimal places")
case("temperature: truncated, not rounded", T, ((0.666, 0.333), (0, 1)), "not rounded")
case("temperature: still ...", T, ..., "not attempted")
case("temperature: the average of the two different values", T, ((0.5, 0.5), (0, 1)),
     "two *different* values")
case("temperature: the limit of a losing key", T, ((2 / 3, 1 / 3), (1, 0)), "a key that loses")
case("temperature: the limit a digit off", T, ((2 / 3, 1 / 3), (0.01, 1)),
     "not the value of the key with the largest score")
case("temperature: the two pairs swapped", T, ((0, 1), (2 / 3, 1 / 3)),
     "not what equal weights on the three keys give")
case("temperature: not a pair", T, 3, "must be a pair")
case("temperature: three numbers", T, ((1, 2, 3), (0, 1)), "must be two numbers")
case("temperature: words", T, (("a", "b"), (0, 1)), "must be a tensor")


# --- find the bug: mask polarity ----------------------------------------------------------------


def buggy_mask(x):  # the starter of the exercise
    T = x.shape[0]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    return scaled_dot_product_attention(x, x, x, mask=future)


def right_mask(x):
    T = x.shape[0]
    return scaled_dot_product_attention(x, x, x, mask=torch.ones(T, T).tril().bool())


def no_diagonal(x):
    T = x.shape[0]
    w = torch.softmax((x @ x.T / math.sqrt(x.shape[1])).masked_fill(
        ~torch.ones(T, T, dtype=torch.bool).tril(-1), -math.inf), -1)
    return w @ x, w


def strict_safe(x):
    T = x.shape[0]
    return scaled_dot_product_attention(x, x, x, mask=torch.ones(T, T).tril(-1).bool())


def transposed_weights(x):
    out, w = scaled_dot_product_attention(x, x, x, is_causal=True)
    return out, w.T


def additive_mask(x):
    T = x.shape[0]
    blocked = torch.full((T, T), -math.inf, dtype=x.dtype).triu(1)
    return scaled_dot_product_attention(x, x, x, mask=blocked)


M = "ex-ch5-mask-bug"
case("mask-bug: lower triangle", M, right_mask)
case("mask-bug: is_causal=True", M, lambda x: scaled_dot_product_attention(x, x, x,
                                                                          is_causal=True))
case("mask-bug: additive float mask", M, additive_mask)
case("mask-bug: starter untouched", M, starter, "not attempted")
case("mask-bug: the buggy starter (symptom only)", M, buggy_mask,
     "position 0 attends to position 1: the mask lets the future in")
case("mask-bug: diagonal blocked, NaN row", M, no_diagonal, "row 0 is NaN")
case("mask-bug: transposed weights", M, transposed_weights, "the weights are transposed")
case("mask-bug: diagonal blocked, safe softmax", M, strict_safe, "does not attend to itself")
case("mask-bug: no 1/sqrt(d)", M, lambda x: scaled_dot_product_attention(
    x, x, x, is_causal=True, scale=1.0), "check the scaling by 1/sqrt(d)")
case("mask-bug: not a pair", M, lambda x: x, "pair (output, weights)")
case("mask-bug: a float mask of 0s and 1s", M, lambda x: scaled_dot_product_attention(
    x, x, x, mask=torch.ones(x.shape[0], x.shape[0], dtype=x.dtype).tril()), "float tensor")
case("mask-bug: the future mask and is_causal=True", M, lambda x: scaled_dot_product_attention(
    x, x, x, mask=torch.ones(x.shape[0], x.shape[0], dtype=torch.bool).triu(1), is_causal=True),
     "all zeros")


# --- the local window ---------------------------------------------------------------------------


def dist(n):
    i = torch.arange(n)
    return (i[:, None] - i[None, :]).abs()


L = "ex-ch5-local"
case("local: |i - j| <= r", L, lambda n, r: dist(n) <= r)
case("local: a band of ones", L, lambda n, r: torch.ones(n, n).triu(-r).tril(r).bool())
case("local: NumPy", L, lambda n, r: np.abs(np.subtract.outer(np.arange(n), np.arange(n))) <= r)
case("local: starter untouched", L, starter, "not attempted")
case("local: polarity flipped", L, lambda n, r: dist(n) > r, "True = may attend")
case("local: edges missed", L, lambda n, r: dist(n) < r, "misses its edges")
case("local: looks back only", L,
     lambda n, r: (dist(n) <= r) & torch.ones(n, n).tril().bool(), "looks back only")
case("local: float mask", L, lambda n, r: (dist(n) <= r).float(), "bool tensor")


# --- multi-head attention with a loop -----------------------------------------------------------


def loop(mha, x, bias=True, out_proj=True, scale=None):
    dh, heads, weights = mha.head_dim, [], []
    for i in range(mha.num_heads):
        rows = slice(i * dh, (i + 1) * dh)
        q, k, v = (x @ p.weight[rows].T + (p.bias[rows] if bias else 0)
                   for p in (mha.q_proj, mha.k_proj, mha.v_proj))
        out, w = scaled_dot_product_attention(q, k, v, scale=scale)
        heads.append(out)
        weights.append(w)
    concat = torch.cat(heads, -1)
    return (mha.out_proj(concat) if out_proj else concat), torch.stack(weights, 1)


def project_once(mha, x):  # project with the whole matrices, then slice the columns per head
    q, k, v = mha.q_proj(x), mha.k_proj(x), mha.v_proj(x)
    dh, heads, weights = mha.head_dim, [], []
    for i in range(mha.num_heads):
        cols = slice(i * dh, (i + 1) * dh)
        out, w = scaled_dot_product_attention(q[..., cols], k[..., cols], v[..., cols])
        heads.append(out)
        weights.append(w)
    return mha.out_proj(torch.cat(heads, -1)), torch.stack(weights, 1)


def interleaved(mha, x):  # head i takes every h-th row instead of a block of rows
    h, heads, weights = mha.num_heads, [], []
    for i in range(h):
        q, k, v = (x @ p.weight[i::h].T + p.bias[i::h]
                   for p in (mha.q_proj, mha.k_proj, mha.v_proj))
        out, w = scaled_dot_product_attention(q, k, v)
        heads.append(out)
        weights.append(w)
    return mha.out_proj(torch.cat(heads, -1)), torch.stack(weights, 1)


H = "ex-ch5-heads-loop"
case("heads-loop: rows of each projection", H, loop)
case("heads-loop: project once, slice columns", H, project_once)
case("heads-loop: starter untouched", H, starter, "not attempted")
case("heads-loop: no out_proj", H, lambda m, x: loop(m, x, out_proj=False), "not mixed")
case("heads-loop: biases dropped", H, lambda m, x: loop(m, x, bias=False), "biases")
case("heads-loop: scaled by sqrt(E)", H, lambda m, x: loop(m, x, scale=1 / math.sqrt(12)),
     "scaling by 1/sqrt(d_h)")
case("heads-loop: weights averaged over the heads", H,
     lambda m, x: (loop(m, x)[0], loop(m, x)[1].mean(1)), "one map per head")
case("heads-loop: heads stacked, then reshaped (interleaved)", H,
     lambda m, x: (m.out_proj(torch.stack([scaled_dot_product_attention(
         *(x @ p.weight[i * 4:(i + 1) * 4].T + p.bias[i * 4:(i + 1) * 4]
           for p in (m.q_proj, m.k_proj, m.v_proj)))[0] for i in range(3)], -1).reshape(2, 5, 12)),
         loop(m, x)[1]), "interleaves the heads")
case("heads-loop: heads made of interleaved rows", H, interleaved, "which rows of q_proj")


def viewed_straight(mha, x):  # (B, T, E) viewed straight to (B, h, T, d_h): scrambled heads
    q, k, v = (p(x).view(2, mha.num_heads, 5, mha.head_dim)
               for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    pairs = [scaled_dot_product_attention(q[:, i], k[:, i], v[:, i]) for i in range(3)]
    heads = torch.stack([out for out, _ in pairs], 1)  # (B, h, T, d_h)
    return mha.out_proj(heads.transpose(1, 2).reshape(2, 5, 12)), torch.stack(
        [w for _, w in pairs], 1)


case("heads-loop: a view straight to (B, h, T, d_h)", H, viewed_straight,
     "pieces of different tokens")
case("heads-loop: the module called instead of a loop", H,
     lambda m, x: m(x, x, x, average_attn_weights=False), "runs MultiHeadAttention.forward")
case("heads-loop: the module's forward called by hand", H,
     lambda m, x: type(m).forward(m, x, x, x, average_attn_weights=False),
     "the module's own computation")


def split_heads(t, m):  # (B, T, E) -> (B, h, T, d_h), as the module's forward does
    return t.view(*t.shape[:2], m.num_heads, m.head_dim).transpose(1, 2)


def forward_body(m, x):  # the printed forward's lines copied: no loop, the module's attend
    q, k, v = (split_heads(p(x), m) for p in (m.q_proj, m.k_proj, m.v_proj))
    out, w = m.attend(q, k, v)
    return m.out_proj(out.transpose(1, 2).reshape(x.shape)), w


def all_heads_at_once(m, x):  # one call of scaled_dot_product_attention with a head axis
    q, k, v = (split_heads(p(x), m) for p in (m.q_proj, m.k_proj, m.v_proj))
    out, w = scaled_dot_product_attention(q, k, v)
    return m.out_proj(out.transpose(1, 2).reshape(x.shape)), w


def softmax_by_hand(m, x):  # a loop over the heads without scaled_dot_product_attention
    dh, heads, weights = m.head_dim, [], []
    q, k, v = m.q_proj(x), m.k_proj(x), m.v_proj(x)
    for i in range(m.num_heads):
        cols = slice(i * dh, (i + 1) * dh)
        w = torch.softmax(q[..., cols] @ k[..., cols].transpose(1, 2) / math.sqrt(dh), -1)
        heads.append(w @ v[..., cols])
        weights.append(w)
    return m.out_proj(torch.cat(heads, -1)), torch.stack(weights, 1)


case("heads-loop: the printed forward copied (its attend, no loop)", H, forward_body,
     "runs MultiHeadAttention.attend")
case("heads-loop: one call on all heads at once", H, all_heads_at_once, "once for all heads")
case("heads-loop: a loop with the softmax by hand", H, softmax_by_hand)


def vectorised_by_hand(m, x):  # the module's computation written out: no loop, no call
    q, k, v = (split_heads(p(x), m) for p in (m.q_proj, m.k_proj, m.v_proj))
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(m.head_dim), -1)  # (B, h, T, T)
    return m.out_proj((w @ v).transpose(1, 2).reshape(x.shape)), w


def fused_all_heads(m, x):  # PyTorch's fused attention on all heads, the weights by hand
    q, k, v = (split_heads(p(x), m) for p in (m.q_proj, m.k_proj, m.v_proj))
    out = F.scaled_dot_product_attention(q, k, v)
    w = torch.stack([torch.softmax(q[:, i] @ k[:, i].transpose(-2, -1) / math.sqrt(
        m.head_dim), -1) for i in range(m.num_heads)], 1)
    return m.out_proj(out.transpose(1, 2).reshape(x.shape)), w


case("heads-loop: all heads at once, by hand", H, vectorised_by_hand, "all the heads at once")
case("heads-loop: PyTorch's fused attention on all heads", H, fused_all_heads,
     "all the heads at once")


def folded_heads(m, x):  # one call with the heads folded into the batch: (B h, T, d_h)
    B, T, _ = x.shape
    q, k, v = (split_heads(p(x), m).reshape(B * m.num_heads, T, m.head_dim)
               for p in (m.q_proj, m.k_proj, m.v_proj))
    out, w = scaled_dot_product_attention(q, k, v)
    out = out.view(B, m.num_heads, T, m.head_dim).transpose(1, 2).reshape(x.shape)
    return m.out_proj(out), w.view(B, m.num_heads, T, T)


def loop_keeping_a_head_axis(m, x):  # one call per head on (B, 1, T, d_h): a right loop
    q, k, v = (split_heads(p(x), m) for p in (m.q_proj, m.k_proj, m.v_proj))
    heads, weights = [], []
    for i in range(m.num_heads):
        out, w = scaled_dot_product_attention(q[:, i:i + 1], k[:, i:i + 1], v[:, i:i + 1])
        heads.append(out)
        weights.append(w)
    out = torch.cat(heads, 1).transpose(1, 2).reshape(x.shape)
    return m.out_proj(out), torch.cat(weights, 1)


case("heads-loop: the heads folded into the batch", H, folded_heads, "1 time(s) for 3 heads")
case("heads-loop: a loop that keeps a head axis of 1", H, loop_keeping_a_head_axis)


# --- max pooling over real tokens ---------------------------------------------------------------


def max_pool(x, real):
    return x.masked_fill(~real[..., None], -math.inf).amax(dim=1)


def max_pool_loop(x, real):  # boolean indexing, one sequence at a time
    return torch.stack([x[b][real[b]].max(dim=0).values for b in range(x.shape[0])])


def max_pool_by_lengths(x, real):  # the real tokens come first (lengths_to_mask)
    return torch.stack([x[b, : int(n)].amax(0) for b, n in enumerate(real.sum(1))])


P = "ex-ch5-pooling"
case("pooling: masked_fill -inf, amax", P, max_pool)
case("pooling: a loop with boolean indexing", P, max_pool_loop)
case("pooling: slices by length", P, max_pool_by_lengths)
case("pooling: a large negative fill", P,
     lambda x, r: torch.where(r[..., None], x, torch.tensor(-1e9, dtype=x.dtype)).amax(1),
     "a finite fill loses only to the real values above it")
case("pooling: the lowest float64 as the fill", P,
     lambda x, r: x.masked_fill(~r[..., None], torch.finfo(x.dtype).min).amax(1))
case("pooling: one below the smallest value as the fill", P,
     lambda x, r: x.masked_fill(~r[..., None], x.min() - 1).amax(1))
case("pooling: starter untouched", P, starter, "not attempted")
case("pooling: a large number subtracted at the padding", P,
     lambda x, r: (x - 1000 * (~r)[..., None]).amax(1), "still wins")
case("pooling: a very large number subtracted at the padding", P,
     lambda x, r: (x - 1e9 * (~r)[..., None]).amax(1), "still wins")
case("pooling: padding included", P, lambda x, r: x.amax(1), "runs over the padding too")
case("pooling: multiplied by the mask", P, lambda x, r: (x * r[..., None]).amax(1),
     "holds 0 (multiplied by the mask, or filled with 0)")
case("pooling: multiplied by the float mask", P,
     lambda x, r: (x * r[..., None].to(x.dtype)).amax(1), "holds 0 (multiplied by the mask")
case("pooling: fill with 0", P, lambda x, r: x.masked_fill(~r[..., None], 0).amax(1),
     "or filled with 0")
case("pooling: fill with -1", P, lambda x, r: x.masked_fill(~r[..., None], -1.0).amax(1),
     "a finite fill loses only to the real values above it")
case("pooling: polarity flipped", P,
     lambda x, r: x.masked_fill(r[..., None], -math.inf).amax(1), "padding positions only")
case("pooling: torch.max's pair", P, lambda x, r: x.masked_fill(~r[..., None], -math.inf)
     .max(dim=1), "(values, indices)")
case("pooling: the mean of the real tokens", P,
     lambda x, r: (x * r[..., None]).sum(1) / r.sum(1, keepdim=True), "the mean")
case("pooling: max over the features", P, lambda x, r: x.masked_fill(~r[..., None], -math.inf)
     .amax(2), "must have shape")


# --- the Jacobian of log-softmax ----------------------------------------------------------------


def log_softmax_jacobian(s):
    p = torch.softmax(s, dim=-1)
    return torch.eye(s.shape[-1], dtype=p.dtype) - p[..., None, :]


def by_autograd(s):
    flat = s.reshape(-1, s.shape[-1])
    J = torch.stack([torch.autograd.functional.jacobian(lambda t: torch.log_softmax(t, 0), row)
                     for row in flat])
    return J.reshape(*s.shape, s.shape[-1])


def via_softmax_jacobian(s):  # diag(1/p) (diag(p) - p p^T)
    p = torch.softmax(s, dim=-1)
    J = torch.diag_embed(p) - p[..., :, None] * p[..., None, :]
    return J / p[..., :, None]


def after_float(s):  # a right answer computed in float32
    p = torch.softmax(s.float(), dim=-1)
    return torch.eye(s.shape[-1]) - p[..., None, :]


def softmax_jacobian(s):
    p = torch.softmax(s, dim=-1)
    return torch.diag_embed(p) - p[..., :, None] * p[..., None, :]


J = "ex-ch5-jacobian"
case("jacobian: I - 1 p^T", J, log_softmax_jacobian)
case("jacobian: autograd, row by row", J, by_autograd)
# right on ordinary scores, NaN where the softmax saturates, which the exercise is about
case("jacobian: the softmax Jacobian divided by p", J, via_softmax_jacobian, "NaN or infinite")
case("jacobian: computed after s.float()", J, after_float)
# hint 1's form: at scores of 800, s - logsumexp(s) rounds by their spacing, 1e-13
case("jacobian: I - exp(s - logsumexp(s))", J, lambda s: torch.eye(s.shape[-1], dtype=s.dtype)
     - (s - s.logsumexp(-1, keepdim=True)).exp()[..., None, :])
case("jacobian: autograd of s - logsumexp(s)", J, lambda s: torch.func.vmap(torch.func.jacrev(
    lambda t: t - t.logsumexp(-1, keepdim=True)))(s.reshape(-1, s.shape[-1])).reshape(
    *s.shape, s.shape[-1]))
case("jacobian: unshifted exp(s) / sum", J, lambda s: torch.eye(s.shape[-1], dtype=s.dtype)
     - (s.exp() / s.exp().sum(-1, keepdim=True))[..., None, :], "NaN or infinite")
case("jacobian: NumPy", J, lambda s: np.eye(s.shape[-1]) - torch.softmax(s, -1).numpy()[
    ..., None, :])
case("jacobian: starter untouched", J, starter, "not attempted")
case("jacobian: transposed", J,
     lambda s: torch.eye(s.shape[-1]) - torch.softmax(s, -1)[..., :, None], "the transpose")
case("jacobian: sign flipped", J, lambda s: -log_softmax_jacobian(s), "sign is flipped")
case("jacobian: the softmax's own Jacobian", J, softmax_jacobian, "Jacobian of the softmax")
case("jacobian: the diagonal only", J,
     lambda s: torch.diag_embed(1 - torch.softmax(s, -1)), "only the diagonal")
case("jacobian: the identity only", J,
     lambda s: torch.eye(s.shape[-1]).expand(*s.shape, s.shape[-1]), "log Z is missing")
case("jacobian: softmax over the wrong axis", J,
     lambda s: torch.eye(s.shape[-1]) - torch.softmax(s, -2)[..., None, :], "wrong axis")
case("jacobian: one vector only", J, lambda s: log_softmax_jacobian(s[0, 0]), "must have shape")


# --- the online softmax: merging two partials ---------------------------------------------------


def merge(a, b):  # the book's solution: a finite shift where both blocks are empty
    (m1, l1, o1), (m2, l2, o2) = a, b
    m = torch.maximum(m1, m2)
    shift = torch.where(torch.isinf(m), 0.0, m)
    f1, f2 = torch.exp(m1 - shift), torch.exp(m2 - shift)
    return m, f1 * l1 + f2 * l2, f1 * o1 + f2 * o2


def unguarded(a, b):  # right for one empty block, NaN for two
    (m1, l1, o1), (m2, l2, o2) = a, b
    m = torch.maximum(m1, m2)
    f1, f2 = torch.exp(m1 - m), torch.exp(m2 - m)
    return m, f1 * l1 + f2 * l2, f1 * o1 + f2 * o2


def nan_to_num(a, b):  # another guard: the NaN factors of two empty blocks set to 0
    (m1, l1, o1), (m2, l2, o2) = a, b
    m = torch.maximum(m1, m2)
    f1, f2 = (torch.exp(mi - m).nan_to_num(0.0) for mi in (m1, m2))
    return m, f1 * l1 + f2 * l2, f1 * o1 + f2 * o2


def where_factors(a, b):  # another guard: a block's factor is 0 where it saw nothing
    (m1, l1, o1), (m2, l2, o2) = a, b
    m = torch.maximum(m1, m2)
    f1, f2 = (torch.where(torch.isneginf(mi), 0.0, torch.exp(mi - m)) for mi in (m1, m2))
    return m, f1 * l1 + f2 * l2, f1 * o1 + f2 * o2


def logsumexp_merge(a, b):  # through log l + m: the same triple written another way
    (m1, l1, o1), (m2, l2, o2) = a, b
    m = torch.maximum(m1, m2)
    safe = m.masked_fill(torch.isinf(m), 0.0)
    f1, f2 = torch.exp(m1 - safe), torch.exp(m2 - safe)
    return m, torch.exp(torch.log(f1 * l1 + f2 * l2)), f1 * o1 + f2 * o2


def in_float32(fn):
    def wrapped(a, b):
        return fn(*(tuple(t.float() for t in x) for x in (a, b)))
    return wrapped


def no_rescale(a, b):
    return torch.maximum(a[0], b[0]), a[1] + b[1], a[2] + b[2]


def inverted(a, b):
    m = torch.maximum(a[0], b[0])
    f1, f2 = torch.exp(m - a[0]), torch.exp(m - b[0])
    return m, f1 * a[1] + f2 * b[1], f1 * a[2] + f2 * b[2]


def o_not_rescaled(a, b):
    m, l, _ = merge(a, b)
    return m, l, a[2] + b[2]


def normalised(a, b):
    m, l, o = merge(a, b)
    return m, l, o / l


def first_block_shift(a, b):  # tests the first block for -inf instead of the common maximum
    (m1, l1, o1), (m2, l2, o2) = a, b
    m = torch.maximum(m1, m2)
    shift = torch.where(torch.isinf(m1), 0.0, m)
    f1, f2 = torch.exp(m1 - shift), torch.exp(m2 - shift)
    return m, f1 * l1 + f2 * l2, f1 * o1 + f2 * o2


def empty_as_zero_max(a, b):  # two empty blocks leave m = 0 instead of -inf
    m, l, o = merge(a, b)
    return torch.nan_to_num(m, neginf=0.0), l, o


G = "ex-ch5-merge"
case("merge: the book's solution", G, merge)
case("merge: nan_to_num on the factors", G, nan_to_num)
case("merge: a factor of 0 where a block saw nothing", G, where_factors)
case("merge: l through exp(log)", G, logsumexp_merge)
case("merge: computed in float32", G, in_float32(merge))
case("merge: starter untouched", G, starter, "not attempted")
case("merge: no guard for two empty blocks", G, unguarded, "(m = -inf in both) merge to NaN")
case("merge: added without rescaling", G, no_rescale, "added as they are")
case("merge: factor inverted", G, inverted, "inverted")
case("merge: o not rescaled", G, o_not_rescaled, "o is not rescaled")
case("merge: o normalised", G, normalised, "already divided by l")
case("merge: maxima added", G, lambda a, b: (a[0] + b[0], *merge(a, b)[1:]),
     "larger of the two maxima")
case("merge: two empty blocks give m = 0", G, empty_as_zero_max, "empty partial result")
case("merge: the smaller maximum", G,
     lambda a, b: (torch.minimum(a[0], b[0]), *merge(a, b)[1:]), "larger of the two maxima")
case("merge: the first block's maximum kept", G, lambda a, b: (a[0], *merge(a, b)[1:]),
     "larger of the two maxima")
case("merge: a pair instead of a triple", G, lambda a, b: a[:2], "triple (m, l, o)")
case("merge: shifted by m only where the first block is empty", G,
     lambda a, b: first_block_shift(a, b), "merge(block, state) is wrong")


# --- the runner ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_verdict(name):
    label, answer, expected = CASES[name]
    result = check(label, answer)
    if expected in ("pass", "not attempted"):
        assert result.status == expected, result
    else:
        assert result.status == "fail" and expected in result.message, result


def test_no_check_prints_the_expected_values():
    assert "0.667" not in check(T, ((0.6, 0.3), (0, 1))).message
    assert "2/3" not in check(T, ((0.6, 0.3), (0, 1))).message


# --- found by a fresh reading ---------------------------------------------------------------------


def _merge(a, b, ratio=False, in_place=False):
    (m1, l1, o1), (m2, l2, o2) = a, b
    m = torch.maximum(m1, m2)
    safe = torch.where(torch.isinf(m), 0.0, m)
    if ratio:  # exp(m1) / exp(m): right on paper, overflows for large scores
        f1 = torch.where(torch.isinf(m1), 0.0, torch.exp(m1) / torch.exp(safe))
        f2 = torch.where(torch.isinf(m2), 0.0, torch.exp(m2) / torch.exp(safe))
    else:
        f1, f2 = torch.exp(m1 - safe), torch.exp(m2 - safe)
    if in_place:
        return m, l1.mul_(f1).add_(f2 * l2), o1.mul_(f1).add_(f2 * o2)
    return m, f1 * l1 + f2 * l2, f1 * o1 + f2 * o2


def test_merge_overflow_and_in_place():
    assert "overflows" in check("ex-ch5-merge", lambda a, b: _merge(a, b, ratio=True)).message
    assert check("ex-ch5-merge", lambda a, b: _merge(a, b, in_place=True))


def test_temperature_as_one_array_and_not_a_finite_c():
    import numpy as np

    assert check("ex-ch5-temperature", np.array([[2 / 3, 1 / 3], [0.0, 1.0]]))
    assert check("ex-ch5-temperature", torch.tensor([[0.667, 0.333], [0.0, 1.0]]))
    # z at c = 7 is (0.0018, 0.998): close to the limit, not the limit
    assert not check("ex-ch5-temperature", ((0.667, 0.333), (0.0018, 0.998)))


def test_temperature_names_what_is_not_a_number():
    strings = check("ex-ch5-temperature", (("0.667", "0.333"), ("0", "1")))
    assert "got a tuple of str" in strings.message
    from seqbook.exercises.core import Wrong, as_tensor

    with pytest.raises(Wrong, match="different shapes"):  # a ragged list of tensors
        as_tensor([torch.tensor([0.667, 0.333]), torch.tensor([1.0])])


def test_temperature_limit_that_averages():
    answer = ((0.667, 0.333), (0.5, 0.5))
    assert "still averages the values" in check("ex-ch5-temperature", answer).message
    answer = ((0.667, 0.333), (0.667, 0.333))
    assert "still averages the values" in check("ex-ch5-temperature", answer).message


def test_local_without_absolute_value():
    def one_sided(n, r):
        i = torch.arange(n)
        return (i[:, None] - i[None, :]) <= r

    def other_side(n, r):
        i = torch.arange(n)
        return (i[None, :] - i[:, None]) <= r

    for fn in (one_sided, other_side):
        assert "unbounded on one side" in check("ex-ch5-local", fn).message


def test_a_call_with_the_wrong_parameters_is_named():
    message = check("ex-ch5-local", lambda n: torch.ones(n, n, dtype=torch.bool)).message
    assert "cannot be called as the exercise calls it, with 2 argument(s)" in message
    # an error inside the learner's body still names the learner's line
    def body_error(n, r):
        return torch.ones(n, n, dtype=torch.bool) @ r

    assert "line" in check("ex-ch5-local", body_error).message


def test_mask_bug_names_a_window_of_keys():
    def windowed(x, window=3):
        T = x.shape[0]
        i, j = torch.arange(T)[:, None], torch.arange(T)[None]
        allowed = (j <= i) & (j > i - window)
        return scaled_dot_product_attention(x, x, x, mask=allowed)

    result = check(M, windowed)
    assert not result and "blocks none of them" in result.message
