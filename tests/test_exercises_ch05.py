"""Chapter 5's exercise checks (seqbook.exercises.ch05): each passes a right answer, calls the
untouched starter "not attempted" (the find-the-bug starter gets its bug named), and names what is
wrong in each typical wrong answer."""

# The running sum keeps the papers' name l (ruff's E741 finds it ambiguous).
# ruff: noqa: E741

import math

import torch

from seqbook.attention import MultiHeadAttention, scaled_dot_product_attention
from seqbook.exercises import check


def starter(*args):
    raise NotImplementedError  # your code here


# --- the two limits of the temperature ----------------------------------------------------------


def test_temperature():
    assert check("ex-ch5-temperature", ((2 / 3, 1 / 3), (0.0, 1.0)))
    assert check("ex-ch5-temperature", (torch.tensor([2 / 3, 1 / 3]), [0, 1]))
    assert check("ex-ch5-temperature", ...).status == "not attempted"
    assert "two *different* values" in check("ex-ch5-temperature",
                                             ((0.5, 0.5), (0, 1))).message
    assert "a key that loses" in check("ex-ch5-temperature", ((2 / 3, 1 / 3), (1, 0))).message
    assert "must be a pair" in check("ex-ch5-temperature", 3).message


# --- find the bug: mask polarity ----------------------------------------------------------------


def test_mask_bug():
    def buggy(x):  # the starter of the exercise
        T = x.shape[0]
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        return scaled_dot_product_attention(x, x, x, mask=future)

    def right(x):
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

    assert check("ex-ch5-mask-bug", right)
    assert check("ex-ch5-mask-bug", lambda x: scaled_dot_product_attention(x, x, x,
                                                                          is_causal=True))
    assert check("ex-ch5-mask-bug", starter).status == "not attempted"
    message = check("ex-ch5-mask-bug", buggy).message
    assert "position 0 attends to position 1: the mask lets the future in" in message
    assert "row 0 is NaN" in check("ex-ch5-mask-bug", no_diagonal).message

    def transposed(x):
        out, w = scaled_dot_product_attention(x, x, x, is_causal=True)
        return out, w.T

    assert "the weights are transposed" in check("ex-ch5-mask-bug", transposed).message
    assert "does not attend to itself" in check("ex-ch5-mask-bug", strict_safe).message
    assert "pair (output, weights)" in check("ex-ch5-mask-bug", lambda x: x).message


# --- the local window ---------------------------------------------------------------------------


def dist(n):
    i = torch.arange(n)
    return (i[:, None] - i[None, :]).abs()


def test_local():
    assert check("ex-ch5-local", lambda n, r: dist(n) <= r)
    assert check("ex-ch5-local", starter).status == "not attempted"
    assert "True = may attend" in check("ex-ch5-local", lambda n, r: dist(n) > r).message
    assert "misses its edges" in check("ex-ch5-local", lambda n, r: dist(n) < r).message
    back = check("ex-ch5-local", lambda n, r: (dist(n) <= r) & torch.ones(n, n).tril().bool())
    assert "looks back only" in back.message
    assert "bool tensor" in check("ex-ch5-local", lambda n, r: (dist(n) <= r).float()).message


# --- multi-head attention with a loop -----------------------------------------------------------


def loop(mha, x, bias=True, out_proj=True):
    dh, heads, weights = mha.head_dim, [], []
    for i in range(mha.num_heads):
        rows = slice(i * dh, (i + 1) * dh)
        q, k, v = (x @ p.weight[rows].T + (p.bias[rows] if bias else 0)
                   for p in (mha.q_proj, mha.k_proj, mha.v_proj))
        out, w = scaled_dot_product_attention(q, k, v)
        heads.append(out)
        weights.append(w)
    concat = torch.cat(heads, -1)
    return (mha.out_proj(concat) if out_proj else concat), torch.stack(weights, 1)


def test_heads_loop():
    assert check("ex-ch5-heads-loop", loop)
    assert check("ex-ch5-heads-loop", starter).status == "not attempted"
    assert "not mixed" in check("ex-ch5-heads-loop",
                                lambda m, x: loop(m, x, out_proj=False)).message
    assert "biases" in check("ex-ch5-heads-loop", lambda m, x: loop(m, x, bias=False)).message
    averaged = check("ex-ch5-heads-loop", lambda m, x: (loop(m, x)[0], loop(m, x)[1].mean(1)))
    assert "one map per head" in averaged.message
    assert isinstance(MultiHeadAttention, type)


# --- mean pooling over real tokens ----------------------------------------------------------------


def test_pooling():
    def right(x, real):
        keep = real[..., None].to(x.dtype)
        return (x * keep).sum(1) / keep.sum(1)

    assert check("ex-ch5-pooling", right)
    assert check("ex-ch5-pooling", starter).status == "not attempted"
    assert "includes the padding" in check("ex-ch5-pooling", lambda x, r: x.mean(1)).message
    by_T = check("ex-ch5-pooling", lambda x, r: (x * r[..., None]).sum(1) / x.shape[1])
    assert "number of real tokens" in by_T.message
    assert "averaged the padding" in check("ex-ch5-pooling",
                                           lambda x, r: right(x, ~r)).message


# --- the softmax Jacobian -----------------------------------------------------------------------


def test_jacobian():
    def right(p):
        return torch.diag_embed(p) - p[..., :, None] * p[..., None, :]

    assert check("ex-ch5-jacobian", right)
    assert check("ex-ch5-jacobian", starter).status == "not attempted"
    assert "diag(p) is missing" in check("ex-ch5-jacobian",
                                         lambda p: -p[..., :, None] * p[..., None, :]).message
    assert "-p p^T is missing" in check("ex-ch5-jacobian", torch.diag_embed).message
    assert "only the diagonal" in check("ex-ch5-jacobian",
                                        lambda p: torch.diag_embed(p * (1 - p))).message


# --- the online softmax: merging two partials -----------------------------------------------------


def merge(a, b):
    (m1, l1, o1), (m2, l2, o2) = a, b
    m = torch.maximum(m1, m2)
    f1, f2 = torch.exp(m1 - m), torch.exp(m2 - m)
    return m, f1 * l1 + f2 * l2, f1 * o1 + f2 * o2


def test_merge():
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

    def nan_on_empty(a, b):  # shifts by m2 - m1 directly: -inf - (-inf) is NaN
        (m1, l1, o1), (m2, l2, o2) = a, b
        m = torch.maximum(m1, m2)
        return m, torch.exp(m1 - m) * l1 + torch.exp(m2 - m1) * torch.exp(m1 - m) * l2 \
            * torch.exp(m2 - m2), torch.exp(m1 - m) * o1 + torch.exp(m2 - m) * o2 * (m2 - m2)

    assert check("ex-ch5-merge", merge)
    assert check("ex-ch5-merge", starter).status == "not attempted"
    assert "added as they are" in check("ex-ch5-merge", no_rescale).message
    assert "inverted" in check("ex-ch5-merge", inverted).message
    assert "o is not rescaled" in check("ex-ch5-merge", o_not_rescaled).message
    assert "already divided by l" in check("ex-ch5-merge", normalised).message
    assert "larger of the two maxima" in check("ex-ch5-merge",
                                               lambda a, b: (a[0] + b[0], *merge(a, b)[1:])
                                               ).message
    assert "triple (m, l, o)" in check("ex-ch5-merge", lambda a, b: a[:2]).message
