"""Checks of chapter 5's exercises (attention and self-attention)."""

# The running sum keeps the papers' name l (ruff's E741 finds it ambiguous).
# ruff: noqa: E741

from __future__ import annotations

import inspect
import math

import torch
from torch.overrides import TorchFunctionMode

from ..attention import MultiHeadAttention, lengths_to_mask, scaled_dot_product_attention
from ..online_softmax import tiled_attention
from .core import (
    CallWatch,
    Wrong,
    as_tensor,
    call,
    close,
    exercise,
    expect,
    expect_shape,
    returned_pair,
    returned_tensor,
    tolerance,
)

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
    if not isinstance(answer, (tuple, list)):  # one (2, 2) array or tensor: its two rows
        rows = as_tensor(answer, "answer (two pairs of numbers)")
        expect(rows.shape == (2, 2), "answer must be a pair (z at c = 0, the limit of z as c "
               "grows), two pairs of numbers")
        answer = tuple(rows)
    expect(len(answer) == 2,
           "answer must be a pair (z at c = 0, the limit of z as c grows)")
    zs = []
    for name, z in zip(("z at c = 0", "the limit"), answer, strict=True):
        z = as_tensor(z, f"{name} (two numbers, such as (0.5, 0.5))").flatten()
        expect(z.numel() == 2, f"{name} must be two numbers (z has two entries), got {z.numel()}")
        expect(not z.is_complex(), f"{name} must be two real numbers")
        zs.append(z.tolist())
    zero, limit = zs

    def near(z, target):  # to 3 decimal places, as the exercise asks
        return all(abs(a - b) <= 0.5e-3 * (1 + 1e-9) for a, b in zip(z, target, strict=True))

    if near(zero, [0.5, 0.5]):
        raise Wrong("z at c = 0 averages the two *different* values: the average runs over all "
                    "three keys, and two of them carry the value (1, 0)")
    if not near(zero, [2 / 3, 1 / 3]) and all(
            abs(a - b) < 1e-3 for a, b in zip(zero, [2 / 3, 1 / 3], strict=True)):
        raise Wrong("z at c = 0 is within 0.001 of the right numbers but not rounded to 3 "
                    "decimal places: round the third decimal, do not cut the rest off")
    pairs = list(zip(zero, [2 / 3, 1 / 3], strict=True))
    if all(abs(a - b) <= 5e-3 for a, b in pairs) and any(
            abs(a - b) > 0.5e-3 and a == round(a, 2) for a, b in pairs):
        raise Wrong("z at c = 0 is right to 2 decimal places, but the exercise asks for 3: "
                    "round less")
    expect(near(zero, [2 / 3, 1 / 3]),
           "z at c = 0 is not what equal weights on the three keys give (to 3 decimal places)")
    if near(limit, [1.0, 0.0]):
        raise Wrong("the limit is the value of a key that loses: compare the scores q . k_t of "
                    "the three keys")
    if near(limit, [0.5, 0.5]) or near(limit, [2 / 3, 1 / 3]):
        raise Wrong("the limit still averages the values: as c grows, the softmax puts all its "
                    "weight on the one key with the largest score q . k_t")
    expect(near(limit, [0.0, 1.0]),
           "the limit is not the value of the key with the largest score (to 3 decimal "
           "places); z at a large but finite c is not yet the limit")


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
        scores = x @ x.T / math.sqrt(d)
        if close(w, torch.softmax(scores + torch.ones(T, T, dtype=F64).tril(), -1), n=d):
            raise Wrong("the mask of 0s and 1s is a float tensor, and a float mask is added to "
                        "the scores: it blocks nothing. Make it bool (True where a query may "
                        "attend) or put -inf above the diagonal")
        ones = torch.ones(T, dtype=w.dtype)
        if close(w.sum(0), ones, n=T) and not close(w.sum(1), ones, n=T):
            raise Wrong("the weights are transposed: each column sums to one, so column i holds "
                        "the weights of query i; return one row per query, w[i, j] for query i "
                        "and key j")
        i, j = (int(t) for t in leaks.nonzero()[0])
        raise Wrong(f"position {i} attends to position {j}: the mask lets the future in")
    expect(bool((w.abs().sum(-1) > 1e-12).any()), "every row of the weights is all zeros: "
           "every key is blocked for every query. A mask passed with is_causal=True keeps only "
           "the keys that both allow")
    expect(bool((w.diagonal() > 0).all()), "a position does not attend to itself: the causal "
           "mask keeps j <= i, the diagonal included")
    ref, ref_w = scaled_dot_product_attention(x, x, x, is_causal=True)
    past = torch.ones(T, T, dtype=torch.bool).tril()
    blocked = (w.detach().abs() <= 1e-12) & past
    if bool(blocked.any()):
        i, j = (int(t) for t in blocked.nonzero()[0])
        raise Wrong(f"position {i} gives key {j} no weight, though j <= i: the causal mask "
                    "allows every earlier key and the position itself, and blocks none of them")
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
        if any(torch.equal(mask, d <= r) for d in (idx[:, None] - idx, idx - idx[:, None])):
            raise Wrong("the window is unbounded on one side (i - j <= r without the absolute "
                        "value): take |i - j|")
        if torch.equal(mask, right & (idx[None, :] <= idx[:, None])):
            raise Wrong("the window looks back only: restricted self-attention sees r "
                        "neighbours on both sides")
        raise Wrong(f"local_mask({n}, {r}) is not True exactly where |i - j| <= r")


# ---------------------------------------------------------------------------------------------
# Multi-head attention with a loop over the heads.
# ---------------------------------------------------------------------------------------------


#: the module whose heads the learner computes by hand
MODULE_ITSELF = {"MultiHeadAttention.forward": MultiHeadAttention.forward,
                 "MultiHeadAttention.attend": MultiHeadAttention.attend,
                 "MultiHeadAttention.attend_fused": MultiHeadAttention.attend_fused}
#: the code of scaled_dot_product_attention itself (under its checking wrapper)
_SDPA_CODE = inspect.unwrap(scaled_dot_product_attention).__code__


class _ScoresOfHeads(TorchFunctionMode):
    """Records whether a product, exponential or softmax makes the (T, T) scores of more than one
    head at once (a hand-written version of the module's all-heads computation), or whether
    PyTorch's fused attention gets the queries of more than one head."""

    PRODUCTS = {"matmul", "__matmul__", "bmm", "baddbmm", "einsum", "softmax", "exp"}

    def __init__(self, batch: int, T: int, head_dim: int):
        super().__init__()
        self.batch, self.T, self.head_dim, self.found = batch, T, head_dim, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        if name == "scaled_dot_product_attention" and args and isinstance(args[0], torch.Tensor):
            self.found |= args[0].numel() > self.batch * self.T * self.head_dim
        elif name in self.PRODUCTS and isinstance(out, torch.Tensor) and out.dim() >= 2:
            self.found |= (tuple(out.shape[-2:]) == (self.T, self.T)
                           and out.numel() > self.batch * self.T * self.T)
        return out


@exercise("ex-ch5-heads-loop", hints=[
    "Head i owns the rows i*d_h to (i+1)*d_h of q_proj.weight, k_proj.weight and v_proj.weight "
    "(and the same entries of their biases): nn.Linear computes x @ W.T + b.",
    "Call scaled_dot_product_attention once per head on its (B, T, d_h) queries, keys and "
    "values; concatenate the outputs along the last axis and stack the weights along a new "
    "axis 1.",
    "The concatenated heads still pass through out_proj, the matrix W^O of the equation.",
])
def check_heads_loop(fn):
    # float32, the default: a learner's buffers made with torch.zeros fit the module
    mha = MultiHeadAttention(12, num_heads=3).eval().requires_grad_(False)
    g = torch.Generator().manual_seed(52)
    with torch.no_grad():  # biases that are not zero, so that a forgotten one shows
        for p in mha.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
    x = torch.randn(2, 5, 12, generator=g)
    with torch.no_grad():
        ref, ref_w = mha(x, x, x, average_attn_weights=False)
    # mha(...) itself is not the exercise, nor its forward or attend called by hand; nor one
    # call of scaled_dot_product_attention on all heads at once (queries with a head axis)
    query_shapes = []

    def sdpa_queries(frame, event, arg):
        if event == "call" and frame.f_code is _SDPA_CODE:
            query_shapes.append(tuple(frame.f_locals["q"].shape))

    with torch.no_grad(), CallWatch(MODULE_ITSELF, other=sdpa_queries) as watch, \
            _ScoresOfHeads(2, 5, mha.head_dim) as scores:
        out, w = returned_pair(call(fn, mha, x.clone(), what="heads_loop"), "heads_loop",
                               "(output, weights)")
    expect(not watch.used, f"heads_loop runs {', '.join(watch.used)}, the module's own "
           "computation: compute the heads one by one from the rows of q_proj, k_proj and v_proj "
           "with scaled_dot_product_attention")
    expect(not any(len(q) > 3 and q[-3] > 1 for q in query_shapes), "heads_loop calls "
           "scaled_dot_product_attention once for all heads, on queries with a head axis "
           "(B, h, T, d_h), as the module does: the exercise is the loop, one call per head on "
           "its (B, T, d_h) slices")
    expect(not query_shapes or len(query_shapes) >= mha.num_heads, f"heads_loop calls "
           f"scaled_dot_product_attention {len(query_shapes)} time(s) for {mha.num_heads} heads "
           "(the heads folded into the batch?): the exercise is the loop, one call per head on "
           "its (B, T, d_h) slices")
    expect(not scores.found, "heads_loop computes the scores of all the heads at once (a "
           "(B, h, T, T) tensor, or PyTorch's fused attention on queries with a head axis), as "
           "the module does: the exercise is the loop, one call of scaled_dot_product_attention "
           "per head on its (B, T, d_h) slices")
    expect_shape(out, ref.shape, "the output")
    if tuple(w.shape) == (2, 5, 5):
        raise Wrong("the weights are one (T, T) map per sequence: keep one map per head, "
                    "shape (B, h, T, T)")
    expect_shape(w, ref_w.shape, "the weights (one map per head)")
    if not close(w, ref_w, n=4):
        q, k = ((x @ p.weight.T + p.bias).view(2, 3, 5, 4) for p in (mha.q_proj, mha.k_proj))
        if close(w, torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1), n=4):
            raise Wrong("each head holds pieces of different tokens: a view straight to "
                        "(B, h, T, d_h) has the right shape but cuts the rows in the wrong "
                        "place; split the last axis, view(B, T, h, d_h), then swap the axes "
                        "with transpose(1, 2)")
    expect(close(w, ref_w, n=4), "the weights of the heads differ from MultiHeadAttention's: "
           "check which rows of q_proj and k_proj make head i, their biases, and the scaling by "
           "1/sqrt(d_h)")
    heads = torch.einsum("bhts,bhsd->bhtd", w.to(x.dtype), (x @ mha.v_proj.weight.T + mha.v_proj.bias)
                         .view(2, 5, 3, 4).transpose(1, 2))
    concat = heads.transpose(1, 2).reshape(2, 5, 12)
    if close(out, concat, n=12):
        raise Wrong("the heads are concatenated but not mixed: apply out_proj (W^O) to the "
                    "concatenation")
    interleaved = heads.permute(0, 2, 3, 1).reshape(2, 5, 12)  # feature j of every head, then j+1
    if close(out, mha.out_proj(interleaved), n=12 + 5):
        raise Wrong("each head's output is right, but the concatenation interleaves the heads: "
                    "head i's d_h features must sit side by side, in columns i*d_h to "
                    "(i+1)*d_h, as torch.cat(heads, dim=-1) puts them")
    expect(close(out, ref, n=12 + 5), "the weights are right but the output is not: check the "
           "values of each head (rows of v_proj, with its bias) and out_proj")


# ---------------------------------------------------------------------------------------------
# Max pooling over the real tokens.
# ---------------------------------------------------------------------------------------------


def _pooling_case(g, lengths, T, d, pad, low=1.0):
    """x (B, T, d) with padding vectors larger than every real one (at least ``pad``), and one
    sequence, sequence 1, whose real values are all below ``-3 * low`` (so that 0, -1 or another
    constant above them cannot stand in for -inf; with ``low`` = 4e37 they lie near float32's
    lowest number, so that only a fill that loses to every float32 value passes). The first
    full-length sequence (if any) holds the largest value of feature 0 at its last step."""
    lengths = torch.tensor(lengths)
    real = lengths_to_mask(lengths, T)
    x = torch.randn(len(lengths), T, d, generator=g, dtype=F64)
    x = torch.where(real[..., None], x, pad * (1 + x.abs()))  # padding: large positive values
    x[1] = torch.where(real[1, :, None], -low * (3.0 + x[1].abs()), x[1])  # below -3 low
    for b in (lengths == T).nonzero()[:1, 0].tolist():  # a sequence with no padding:
        x[b, T - 1, 0] = x[b, :, 0].max() + 1.0  # its last step wins feature 0
    return x, real


@exercise("ex-ch5-pooling", hints=[
    "The maximum must never pick a padding position, whatever the values there. Which number "
    "loses every comparison with a real value?",
    "Multiplying by the mask leaves a 0 at the padding, and 0 beats a real value that is "
    "negative. Note that x.max(dim=1) returns a pair (values, indices); x.amax(dim=1) returns "
    "the values only.",
    "Overwrite the padding positions with -inf, x.masked_fill(~real[..., None], float('-inf')), "
    "then take the maximum over the time axis.",
])
def check_pooling(fn):
    g = torch.Generator().manual_seed(53)
    # padding of about 5, of about a million and near float64's largest: subtracting a large
    # number is not -inf, whatever the number; in the last case sequence 1's real values lie
    # near float32's lowest: a fill must lose to every float32 value (-inf, the dtype's lowest)
    # (not below it: a right answer computed in float32 must pass)
    cases = (((7, 4, 1, 5), 7, 5, 5.0, 1.0), ((2, 3), 4, 3, 1e6, 1.0),
             ((3, 1, 2), 3, 2, 1e300, 4e37))
    for lengths, T, d, pad, low in cases:
        x, real = _pooling_case(g, lengths, T, d, pad, low)
        out = call(fn, x.clone(), real.clone(), what="max_pool")
        if isinstance(out, tuple) and hasattr(out, "values") and hasattr(out, "indices"):
            raise Wrong("max_pool returns the pair (values, indices) that torch.max gives along a "
                        "dimension: return the values only")
        out = returned_tensor(out, "max_pool")
        expect_shape(out, (len(lengths), d), "the pooled vectors")
        ref = x.masked_fill(~real[..., None], -math.inf).amax(1)
        if close(out, ref):
            continue
        if pad > 5 and bool((out >= pad / 2).any()):  # right on the smaller padding(s)
            raise Wrong(f"with padding values of about {pad:g}, a padded position still wins "
                        "the maximum: lowering the padding by a finite amount is not enough for "
                        "every input; put -inf there (masked_fill) so that it loses every "
                        "comparison")
        if close(out, x.amax(1)):
            raise Wrong("the pooled vectors hold the values of padding positions: the maximum "
                        "runs over the padding too")
        if close(out, (x * real[..., None]).amax(1)):
            raise Wrong("sequence 1, whose real values are all negative, pools to 0: the "
                        "padding holds 0 (multiplied by the mask, or filled with 0) and wins "
                        "the maximum")
        if close(out, x.masked_fill(real[..., None], -math.inf).amax(1)):
            raise Wrong("the maximum runs over the padding positions only: real is True at the "
                        "real tokens")
        if close(out, (x * real[..., None]).sum(1) / real.sum(1, keepdim=True)):
            raise Wrong("that is the mean over the real tokens, the pooling the chapter's "
                        "classifier uses: take the maximum of each feature instead")
        off = ~torch.isclose(out.double(), ref, rtol=1e-6, atol=0.0)  # the wrong maxima
        fills = out.double()[off]
        if bool(off.any()) and bool((fills == fills[0]).all()) and bool((fills > ref[off]).all()):
            raise Wrong(f"some features pool to {fills[0].item():g}, a number above all of their "
                        "real values: a finite fill loses only to the real values above it; put "
                        "-inf there (masked_fill), which loses every comparison")
        raise Wrong("the result is not the maximum of each feature over each sequence's real "
                    "tokens")


# ---------------------------------------------------------------------------------------------
# The Jacobian of log-softmax.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch5-jacobian", hints=[
    "log p_i = s_i - log Z with Z = sum_k exp(s_k). Differentiate both terms with respect to "
    "s_j: the first gives delta_ij, and d log Z / d s_j is a softmax weight.",
    "d log Z / d s_j = exp(s_j) / Z = p_j, so J[i, j] = delta_ij - p_j: the identity minus a "
    "matrix whose every row is p. torch.eye(m) and p[..., None, :] broadcast to (..., m, m).",
])
def check_jacobian(fn):
    g = torch.Generator().manual_seed(54)
    s = 2 * torch.randn(2, 3, 6, generator=g, dtype=F64)  # a batch (2, 3) of m = 6 scores
    p = torch.softmax(s, dim=-1)
    J = returned_tensor(call(fn, s.clone(), what="log_softmax_jacobian"), "log_softmax_jacobian")
    expect_shape(J, (2, 3, 6, 6), "the Jacobians of a (2, 3) batch of m = 6 scores")
    eye = torch.eye(6, dtype=F64)
    ref = eye - p[..., None, :]
    if close(J, ref):
        return _saturated_jacobian(fn)
    if close(J, eye - p[..., :, None]):
        raise Wrong("J[i, j] holds d log p_j / d s_i, the transpose: row i must be the "
                    "derivatives of log p_i, J[i, j] = d log p_i / d s_j")
    if close(J, -ref):
        raise Wrong("the sign is flipped: log p_i grows with s_i")
    if close(J, torch.diag_embed(p) - p[..., :, None] * p[..., None, :]):
        raise Wrong("that is the Jacobian of the softmax itself, eq. (5.5); the log divides "
                    "row i by p_i")
    if close(J, torch.diag_embed(1 - p)):
        raise Wrong("only the diagonal is right: log p_i also changes with s_j for j != i, "
                    "through log Z")
    if close(J, eye.expand_as(ref)):
        raise Wrong("the term of log Z is missing: every s_j changes Z, and with it every log p_i")
    if close(J, eye - torch.softmax(s, dim=-2)[..., None, :]):
        raise Wrong("the softmax runs over the wrong axis: the scores of one vector are on the "
                    "last axis")
    raise Wrong("the Jacobian differs from d log p_i / d s_j: compare a row with "
                "torch.autograd.functional.jacobian of torch.log_softmax")


def _saturated_jacobian(fn) -> None:
    """A saturated softmax: scores hundreds apart, so that some p_j is 0 in float64."""
    # scores hundreds below the largest, and hundreds above 0 (exp overflows unless shifted)
    s = torch.tensor([[0.0, -800.0, 3.0, -900.0], [800.0, 0.0, 803.0, -100.0]], dtype=F64)
    p = torch.softmax(s, dim=-1)  # some p_j = 0 exactly
    J = returned_tensor(call(fn, s.clone(), what="log_softmax_jacobian"), "log_softmax_jacobian")
    expect(bool(torch.isfinite(J).all()),
           "at scores hundreds apart, where the softmax saturates and some p_j is exactly 0 in "
           "float64, or scores of several hundred, whose exponentials overflow unless shifted by "
           "their maximum, the Jacobian has NaN or infinite entries (a division by p, or exp of "
           "the raw scores?): write it with a softmax that subtracts the maximum (torch.softmax "
           "does), which stays finite however small p_j is")
    # s - logsumexp(s) at scores of 800 rounds by their own spacing, 1e-13: judge each row at
    # the precision that its log Z allows (a right answer via logsumexp errs by 4e-14 there)
    ref = torch.eye(4, dtype=F64) - p[..., None, :]
    dtype = F64 if J.dtype == F64 else torch.float32  # a float32 answer at float32's precision
    rtol = tolerance(dtype)["rtol"]
    atol = rtol * torch.logsumexp(s, -1).abs().clamp_min(1)[:, None, None]  # (2, 1, 1)
    expect(J.shape == ref.shape and bool(((J.double() - ref).abs() <= atol + rtol * ref.abs()).all()),
           "at scores hundreds apart, where the softmax saturates, the Jacobian differs from "
           "I - softmax(s), the Jacobian of log_softmax")


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
    "Return the unnormalised o: the division by l comes once, after the last merge. A query that "
    "sees no key of either block has m1 = m2 = m = -inf, and exp(-inf - (-inf)) is NaN: shift by "
    "a finite stand-in there, torch.where(torch.isinf(m), 0.0, m), so that both factors are "
    "exp(-inf) = 0.",
])
def check_merge(fn):
    g = torch.Generator().manual_seed(55)
    T, S, D, Dv = 7, 13, 4, 3
    q = torch.randn(2, T, D, generator=g, dtype=F64)
    k = torch.randn(2, S, D, generator=g, dtype=F64)
    v = torch.randn(2, S, Dv, generator=g, dtype=F64)
    rows = torch.arange(T)[:, None]

    def merged(x, y):
        # copies: a merge that updates its inputs in place is still right
        x, y = (tuple(t.clone() for t in z) for z in (x, y))
        return _triple(call(fn, x, y, what="merge"), "merge")

    a = _partial(q, k, v, rows, 0, 5, False)
    b = _partial(q, k, v, rows, 5, S, False)
    m, l, o = merged(a, b)
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
    # merging the other way round
    m2, l2, o2 = merged(b, a)
    expect(close(o2 / l2, o / l, n=D + S), "merge(b, a) differs from merge(a, b): the order "
           "of two blocks of keys must not matter")
    # causal, block by block: from the second block on, some queries see no key of the block
    state = _partial(q, k, v, rows, 0, 3, True)
    for start in range(3, S, 3):
        block = _partial(q, k, v, rows, start, min(start + 3, S), True)
        state = merged(state, block)
        if any(torch.isnan(t).any() for t in state):
            raise Wrong("a block in which a query sees no key (m = -inf, l = 0, o = 0, as causal "
                        "attention gives) makes the merge NaN: exp(-inf) = 0 is fine, but "
                        "-inf - (-inf) is not")
    expect(close(state[2] / state[1], tiled_attention(q, k, v, 3, causal=True), n=D + S),
           "merging the blocks of a causal attention one by one does not give causal attention")
    # the same with each new block first: now the empty rows are those of merge's first argument
    state = _partial(q, k, v, rows, 0, 3, True)
    for start in range(3, S, 3):
        end = min(start + 3, S)
        state = merged(_partial(q, k, v, rows, start, end, True), state)
        if any(torch.isnan(t).any() for t in state):
            raise Wrong("merge(block, state), with a first block in which a query sees no key, "
                        "is NaN: -inf - (-inf) is not 0")
        whole = _partial(q, k, v, rows, 0, end, True)
        expect(all(close(t, r, n=S) for t, r in zip(state, whole, strict=True)),
               "merge(block, state) is wrong when a query sees no key of the first block "
               "(m = -inf, l = 0, o = 0): m, l and o must come out relative to the common "
               "maximum, whichever of the two is empty")
    # large scores (about a thousand): exp(m1) / exp(m) overflows, exp(m1 - m) does not
    big = 300 * q
    a, b = (_partial(big, k, v, rows, lo, hi, False) for lo, hi in ((0, 5), (5, S)))
    state = merged(a, b)
    expect(not any(torch.isnan(t).any() or torch.isinf(t[1:]).any() for t in state)
           and close(state[2] / state[1], tiled_attention(big, k, v, 5), n=D + S),
           "with scores near a thousand the merge overflows: exp of a score, or of a maximum, "
           "is inf in float64")
    # causal, as a tree: queries 0, 1, 2 see no key of either block 3..5 or 6..8
    empty = merged(_partial(q, k, v, rows, 3, 6, True), _partial(q, k, v, rows, 6, 9, True))
    blind = slice(0, 3)
    if any(torch.isnan(t[..., blind, :]).any() for t in empty):
        raise Wrong("two blocks in which a query sees no key at all (m = -inf in both) merge to "
                    "NaN for that query: m1 - m is -inf - (-inf)")
    expect(bool(torch.isneginf(empty[0][..., blind, :]).all())
           and not empty[1][..., blind, :].any() and not empty[2][..., blind, :].any(),
           "two blocks in which a query sees no key at all must merge to an empty partial "
           "result for it: m = -inf, l = 0, o = 0")
    state = merged(_partial(q, k, v, rows, 0, 3, True),
                   merged(empty, _partial(q, k, v, rows, 9, S, True)))
    expect(close(state[2] / state[1], tiled_attention(q, k, v, 3, causal=True), n=D + S),
           "merging the blocks of a causal attention as a tree (two empty blocks first) does "
           "not give causal attention")
