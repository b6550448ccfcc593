# 123 cases: 112 bad inputs that must end in a clear error, 11 legal edge inputs checked for a correct result.
"""Bad input to seqbook.attention: every public callable refuses it clearly, or handles a legal edge.

Each ``ERRORS`` case must end in a ValueError/TypeError raised by seqbook whose message holds the
words listed (the argument's name and the expected or actual value, shape or dtype).
"""

import numpy as np
import pytest
import torch
from torch import nn

from seqbook.attention import (
    AdditiveAttention,
    MultiHeadAttention,
    causal_mask,
    lengths_to_mask,
    padding_to_attn_mask,
    restrict_mask,
    scaled_dot_product_attention,
    softmax_with_sink,
)
from seqbook.rope import apply_rope, rope_angles, rotate_half
from tests.badinput import assert_clear_error, table

NAN = float("nan")


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype)


Q, K, V = rand(2, 3, 4), rand(2, 5, 4, seed=1), rand(2, 5, 6, seed=2)
X = rand(2, 5, 8)
MHA = MultiHeadAttention(8, 2, fast=False)
ADD = AdditiveAttention(5, 6, 7)
AQ, AK = rand(2, 5), rand(2, 3, 6)
KPM = torch.tensor([[False] * 5, [False, False, True, True, True]])

ERRORS, case = table()


# causal_mask
case("causal_mask-L-negative", lambda: causal_mask(-1), "L", "-1")
case("causal_mask-L-float", lambda: causal_mask(2.5), "L", "float")
case("causal_mask-L-bool", lambda: causal_mask(True), "L", "bool")
case("causal_mask-S-negative", lambda: causal_mask(3, -2), "S", "-2")
case("causal_mask-S-str", lambda: causal_mask(3, "4"), "S", "str")
case("causal_mask-window-zero", lambda: causal_mask(3, window=0), "window", "0")
case("causal_mask-window-float", lambda: causal_mask(3, window=2.0), "window", "float")

# softmax_with_sink
case("softmax_with_sink-sink-shape", lambda: softmax_with_sink(rand(2, 3), rand(3)), "sink", "(2,)", "(3,)")
case("softmax_with_sink-sink-dtype", lambda: softmax_with_sink(rand(2, 3), rand(2, dtype=torch.float64)),
     "sink", "float64")
case("softmax_with_sink-sink-number", lambda: softmax_with_sink(rand(2, 3), 0.5), "sink", "float")
case("softmax_with_sink-scores-int", lambda: softmax_with_sink(torch.ones(2, 3, dtype=torch.long), rand(2)),
     "scores", "int64")
case("softmax_with_sink-scores-empty", lambda: softmax_with_sink(rand(2, 0), rand(2)), "scores", "(2, 0)")

# lengths_to_mask
case("lengths_to_mask-lengths-list", lambda: lengths_to_mask([3, 1]), "lengths", "torch.Tensor")
case("lengths_to_mask-lengths-rank2", lambda: lengths_to_mask(torch.tensor([[3]])), "lengths", "(B,)",
     "(1, 1)")
case("lengths_to_mask-lengths-float", lambda: lengths_to_mask(torch.tensor([3.0])), "lengths", "float32")
case("lengths_to_mask-lengths-negative", lambda: lengths_to_mask(torch.tensor([3, -1])), "lengths", "-1")
case("lengths_to_mask-max_len-negative", lambda: lengths_to_mask(torch.tensor([3]), max_len=-1), "max_len",
     "-1")
case("lengths_to_mask-max_len-float", lambda: lengths_to_mask(torch.tensor([3]), max_len=3.5), "max_len",
     "float")

# padding_to_attn_mask
case("padding_to_attn_mask-float", lambda: padding_to_attn_mask(KPM.float()), "key_padding_mask", "bool")
case("padding_to_attn_mask-rank1", lambda: padding_to_attn_mask(KPM[0]), "key_padding_mask", "(B, S)", "(5,)")
case("padding_to_attn_mask-list", lambda: padding_to_attn_mask([[True]]), "key_padding_mask", "list")
case("padding_to_attn_mask-heads-int", lambda: padding_to_attn_mask(KPM, heads=1), "heads", "bool", "int")

# scaled_dot_product_attention
sdpa = scaled_dot_product_attention
case("sdpa-q-list", lambda: sdpa([[1.0]], K, V), "q", "torch.Tensor")
case("sdpa-q-int", lambda: sdpa(Q.long(), K, V), "q", "floating-point", "torch.int64")
case("sdpa-v-int", lambda: sdpa(Q, K, V.long()), "v", "torch.int64")
case("sdpa-q-rank1", lambda: sdpa(Q[0, 0], K, V), "at least 2 dims", "(4,)")
case("sdpa-k-last-dim", lambda: sdpa(Q, rand(2, 5, 5), V), "k must have shape", "(..., S, 4)", "(2, 5, 5)")
case("sdpa-v-length", lambda: sdpa(Q, K, rand(2, 4, 6)), "v must have shape", "(..., 5, d_v)", "(2, 4, 6)")
case("sdpa-batch-mismatch", lambda: sdpa(Q, rand(3, 5, 4), rand(3, 5, 6)), "leading dims", "(2, 3, 4)",
     "(3, 5, 4)")
case("sdpa-k-empty-S", lambda: sdpa(Q, rand(2, 0, 4), rand(2, 0, 6)), "k", "S, d_k >= 1", "(2, 0, 4)")
case("sdpa-d_k-0", lambda: sdpa(rand(2, 3, 0), rand(2, 5, 0), V), "k", "S, d_k >= 1", "(2, 5, 0)")
case("sdpa-dtype-mismatch", lambda: sdpa(Q, K.double(), V), "same dtype", "torch.float64")
case("sdpa-mask-shape", lambda: sdpa(Q, K, V, mask=torch.ones(2, 3, 6, dtype=torch.bool)),
     "mask must broadcast", "(2, 3, 5)", "(2, 3, 6)")
case("sdpa-mask-int", lambda: sdpa(Q, K, V, mask=torch.ones(2, 3, 5, dtype=torch.long)), "mask",
     "torch.int64")
case("sdpa-mask-uint8", lambda: sdpa(Q, K, V, mask=torch.ones(3, 5, dtype=torch.uint8)), "mask",
     "torch.uint8")
case("sdpa-mask-list", lambda: sdpa(Q, K, V, mask=[[True]]), "mask", "list")
case("sdpa-causal-mask-shape", lambda: sdpa(Q, Q, Q, mask=torch.ones(2, 3, 6, dtype=torch.bool),
     is_causal=True), "mask must broadcast", "(2, 3, 6)")
case("sdpa-causal-mask-int", lambda: sdpa(Q, Q, Q, mask=torch.ones(2, 3, 3, dtype=torch.long),
     is_causal=True), "mask", "torch.int64")
case("sdpa-dropout_p-negative", lambda: sdpa(Q, K, V, dropout_p=-0.1), "dropout_p", "-0.1")
case("sdpa-dropout_p-above-1", lambda: sdpa(Q, K, V, dropout_p=1.5), "dropout_p", "1.5")
case("sdpa-dropout_p-nan", lambda: sdpa(Q, K, V, dropout_p=NAN), "dropout_p", "nan")
case("sdpa-is_causal-int", lambda: sdpa(Q, K, V, is_causal=1), "is_causal", "bool")
case("sdpa-scale-nan", lambda: sdpa(Q, K, V, scale=NAN), "scale", "nan")
case("sdpa-scale-inf", lambda: sdpa(Q, K, V, scale=float("inf")), "scale", "inf")
case("sdpa-scale-str", lambda: sdpa(Q, K, V, scale="1"), "scale", "str")

# MultiHeadAttention: constructor, from_torch, forward
case("MHA-embed_dim-0", lambda: MultiHeadAttention(0, 2), "embed_dim", "int >= 1", "0")
case("MHA-embed_dim-float", lambda: MultiHeadAttention(8.0, 2), "embed_dim", "float")
case("MHA-num_heads-negative", lambda: MultiHeadAttention(8, -2), "num_heads", "-2")
case("MHA-num_heads-bool", lambda: MultiHeadAttention(8, True), "num_heads", "bool")
case("MHA-not-divisible", lambda: MultiHeadAttention(10, 3), "divisible by num_heads", "embed_dim=10")
case("MHA-kdim-0", lambda: MultiHeadAttention(8, 2, kdim=0), "kdim", "0")
case("MHA-vdim-float", lambda: MultiHeadAttention(8, 2, vdim=2.5), "vdim", "2.5")
case("MHA-dropout-1", lambda: MultiHeadAttention(8, 2, dropout=1.0), "dropout", "1.0")
case("MHA-dropout-negative", lambda: MultiHeadAttention(8, 2, dropout=-0.5), "dropout", "-0.5")
case("MHA-fast-str", lambda: MultiHeadAttention(8, 2, fast="yes"), "fast", "bool", "str")
case("MHA-bias-none", lambda: MultiHeadAttention(8, 2, bias=None), "bias", "bool")
case("MHA-from_torch-linear", lambda: MultiHeadAttention.from_torch(nn.Linear(8, 8)), "m",
     "nn.MultiheadAttention")
case("MHA-from_torch-bias_kv", lambda: MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2,
     add_bias_kv=True)), "add_bias_kv")
case("MHA-query-list", lambda: MHA([[0.0]], X, X), "query", "torch.Tensor")
case("MHA-query-rank2", lambda: MHA(X[0], X, X), "query must have shape", "(B, L, 8)", "(5, 8)")
case("MHA-query-last-dim", lambda: MHA(rand(2, 5, 7), X, X), "query must have shape", "(B, L, 8)",
     "(2, 5, 7)")
case("MHA-query-int", lambda: MHA(X.long(), X, X), "query", "torch.int64")
case("MHA-key-batch", lambda: MHA(X, rand(3, 5, 8), rand(3, 5, 8)), "key must have shape", "(2, S, 8)",
     "(3, 5, 8)")
case("MHA-value-length", lambda: MHA(X, X, rand(2, 4, 8)), "value must have shape", "(2, 5, 8)", "(2, 4, 8)")
case("MHA-query-B0", lambda: MHA(rand(0, 5, 8), rand(0, 5, 8), rand(0, 5, 8)), "query", "empty", "(0, 5, 8)")
case("MHA-query-T0", lambda: MHA(rand(2, 0, 8), X, X), "query", "empty", "(2, 0, 8)")
case("MHA-key-S0", lambda: MHA(X, rand(2, 0, 8), rand(2, 0, 8)), "key", "empty", "(2, 0, 8)")
case("MHA-query-float64", lambda: MHA(X.double(), X.double(), X.double()), "query", "torch.float32",
     "torch.float64")
case("MHA-query-float16", lambda: MHA(X.half(), X.half(), X.half()), "query", "torch.float16")
case("MHA-key_padding_mask-shape", lambda: MHA(X, X, X, key_padding_mask=KPM[:, :4]),
     "key_padding_mask must have shape", "(2, 5)", "(2, 4)")
case("MHA-key_padding_mask-int", lambda: MHA(X, X, X, key_padding_mask=KPM.long()), "key_padding_mask",
     "torch.int64")
case("MHA-key_padding_mask-float", lambda: MHA(X, X, X, key_padding_mask=KPM.float()), "key_padding_mask",
     "bool", "torch.float32")
case("MHA-key_padding_mask-list", lambda: MHA(X, X, X, key_padding_mask=KPM.tolist()), "key_padding_mask",
     "list")
case("MHA-attn_mask-shape", lambda: MHA(X, X, X, attn_mask=torch.ones(5, 4, dtype=torch.bool)),
     "attn_mask must have shape", "(5, 5)", "(5, 4)")
case("MHA-attn_mask-uint8", lambda: MHA(X, X, X, attn_mask=torch.ones(5, 5, dtype=torch.uint8)), "attn_mask",
     "torch.uint8")
case("MHA-need_weights-int", lambda: MHA(X, X, X, need_weights=0), "need_weights", "bool")
case("MHA-is_causal-str", lambda: MHA(X, X, X, is_causal="True"), "is_causal", "bool")
case("MHA-average_attn_weights-none", lambda: MHA(X, X, X, average_attn_weights=None), "average_attn_weights")

# AdditiveAttention: constructor, project_keys, forward
case("Additive-query_dim-0", lambda: AdditiveAttention(0, 6, 7), "query_dim", "int >= 1", "0")
case("Additive-key_dim-float", lambda: AdditiveAttention(5, 6.0, 7), "key_dim", "float")
case("Additive-hidden_dim-bool", lambda: AdditiveAttention(5, 6, True), "hidden_dim", "bool")
case("Additive-hidden_dim-negative", lambda: AdditiveAttention(5, 6, -1), "hidden_dim", "-1")
case("Additive-project_keys-rank2", lambda: ADD.project_keys(AK[0]), "keys must have shape", "(B, S, 6)",
     "(3, 6)")
case("Additive-project_keys-int", lambda: ADD.project_keys(AK.long()), "keys", "torch.int64")
case("Additive-project_keys-float64", lambda: ADD.project_keys(AK.double()), "keys", "torch.float64")
case("Additive-keys-rank2", lambda: ADD(AQ, AK[0]), "keys must have shape", "(B, S, 6)", "(3, 6)")
case("Additive-keys-S0", lambda: ADD(AQ, rand(2, 0, 6)), "keys", "at least one position", "(2, 0, 6)")
case("Additive-keys-B0", lambda: ADD(rand(0, 5), rand(0, 3, 6)), "keys", "B >= 1", "(0, 3, 6)")
case("Additive-query-batch", lambda: ADD(rand(3, 5), AK), "query must have shape", "(2, 5)", "(3, 5)")
case("Additive-query-last-dim", lambda: ADD(rand(2, 4), AK), "query must have shape", "(2, 4)")
case("Additive-query-L0", lambda: ADD(rand(2, 0, 5), AK), "query", "L >= 1", "(2, 0, 5)")
case("Additive-query-int", lambda: ADD(AQ.long(), AK), "query", "torch.int64")
case("Additive-query-float64", lambda: ADD(AQ.double(), AK.double()), "torch.float32", "torch.float64")
case("Additive-values-length", lambda: ADD(AQ, AK, rand(2, 4, 6)), "values must have shape", "(2, 3, D_v)")
case("Additive-values-int", lambda: ADD(AQ, AK, torch.zeros(2, 3, 6, dtype=torch.long)), "values",
     "torch.int64")
case("Additive-mask-float", lambda: ADD(AQ, AK, mask=torch.ones(2, 3)), "mask", "bool", "torch.float32")
case("Additive-mask-shape", lambda: ADD(AQ, AK, mask=torch.ones(2, 4, dtype=torch.bool)), "mask", "(2, 3)",
     "(2, 4)")
case("Additive-mask-list", lambda: ADD(AQ, AK, mask=[[True]]), "mask", "list")
case("Additive-projected_keys-shape", lambda: ADD(AQ, AK, projected_keys=rand(2, 3, 6)),
     "projected_keys must have shape", "(2, 3, 7)", "(2, 3, 6)")
case("Additive-projected_keys-int", lambda: ADD(AQ, AK, projected_keys=torch.zeros(2, 3, 7,
     dtype=torch.long)), "projected_keys", "torch.int64")

# restrict_mask(mask, allowed): types before shapes (a list mask gave AttributeError, an integer one
# an overflow from torch, a float allowed "bitwise_and_cpu not implemented")
ALLOWED = causal_mask(3, 5)
case("restrict_mask-mask-list", lambda: restrict_mask(ALLOWED.tolist(), ALLOWED), "mask", "list")
case("restrict_mask-mask-long", lambda: restrict_mask(ALLOWED.long(), ALLOWED), "mask", "int64")
case("restrict_mask-allowed-float", lambda: restrict_mask(None, ALLOWED.float()), "allowed", "bool",
     "float32")
case("restrict_mask-allowed-None", lambda: restrict_mask(ALLOWED, None), "allowed", "NoneType")
case("restrict_mask-shapes", lambda: restrict_mask(torch.ones(2, 4, dtype=torch.bool), ALLOWED), "mask",
     "allowed", "(2, 4)", "(3, 5)")
# rope: rotate_half and apply_rope check their tensors (cos and sin must be floating point: an
# integer cosine was cast silently)
COS, SIN = rope_angles(torch.arange(3), 4)
Q4 = rand(2, 1, 3, 4)
case("rotate_half-x-list", lambda: rotate_half([1.0, 2.0]), "x", "list")
case("rotate_half-x-odd", lambda: rotate_half(rand(2, 3)), "x", "even", "(2, 3)")
case("rotate_half-x-int", lambda: rotate_half(torch.ones(2, 4, dtype=torch.long)), "x", "int64")
case("apply_rope-cos-long", lambda: apply_rope(Q4, COS.long(), SIN), "cos", "floating-point", "int64")
case("apply_rope-sin-list", lambda: apply_rope(Q4, COS, SIN.tolist()), "sin", "list")
case("apply_rope-x-odd", lambda: apply_rope(rand(2, 1, 3, 3), COS[:, :3], SIN[:, :3]), "x", "even")


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)


# ------------------------------------------------------------------ legal edge inputs


def test_restrict_mask_and_rope_edges():
    assert torch.equal(restrict_mask(None, ALLOWED), ALLOWED)
    additive = restrict_mask(torch.zeros(2, 1, 3, 5), ALLOWED)  # a float mask gets -inf where blocked
    assert additive.shape == (2, 1, 3, 5) and torch.isneginf(additive[0, 0, 0, 1:]).all()
    assert torch.equal(rotate_half(torch.tensor([1.0, 2.0])), torch.tensor([-2.0, 1.0]))
    assert apply_rope(Q4.double(), COS.float(), SIN.float()).dtype == torch.float64


def test_numpy_sizes_are_accepted():
    assert causal_mask(np.int64(3)).shape == (3, 3)
    assert MultiHeadAttention(np.int64(8), np.int32(2)).head_dim == 4
    assert AdditiveAttention(np.int64(5), 6, 7).hidden_dim == 7
    assert lengths_to_mask(torch.tensor([2]), max_len=np.int64(3)).shape == (1, 3)


def test_causal_mask_empty_and_key_padding_mask_empty_batch():
    assert causal_mask(0).shape == (0, 0)
    assert lengths_to_mask(torch.zeros(0, dtype=torch.long), max_len=3).shape == (0, 3)


def test_sdpa_empty_queries_and_batch_give_empty_outputs():
    out, w = sdpa(rand(2, 0, 4), K, V)
    assert out.shape == (2, 0, 6) and w.shape == (2, 0, 5)
    out, w = sdpa(rand(0, 3, 4), rand(0, 5, 4), rand(0, 5, 6))
    assert out.shape == (0, 3, 6)


def test_sdpa_scale_zero_gives_uniform_weights():
    _, w = sdpa(Q, K, V, scale=0.0)
    assert torch.allclose(w, torch.full_like(w, 1 / 5))


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_fully_masked_rows_are_zero_with_finite_gradients(causal):
    q = Q.clone().requires_grad_()
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[0, 1] = False
    out, w = sdpa(q, K, V, mask=mask, is_causal=causal)
    out.sum().backward()
    assert torch.equal(out[0, 1], torch.zeros(6)) and torch.isfinite(q.grad).all()


@pytest.mark.parametrize("fast", [False, True])
def test_mha_fully_masked_rows_are_finite(fast):
    m = MultiHeadAttention(8, 2, fast=fast)
    x = X.clone().requires_grad_()
    out, _ = m(x, x, x, key_padding_mask=torch.ones(2, 5, dtype=torch.bool), need_weights=not fast)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("fast", [False, True])
def test_mha_refuses_a_float_key_padding_mask_and_adds_a_float_attn_mask(fast):
    """The package's choice for PyTorch's twin: a key_padding_mask is bool (True at padding), as a
    float copy of a bool mask would be added to the scores (1.0 at padding) rather than block them;
    an additive float mask is taken by attn_mask, as in PyTorch."""
    m = MultiHeadAttention(8, 2, fast=fast).eval()
    for kpm in (KPM.float(), KPM.double(), torch.zeros(2, 5).masked_fill(KPM, float("-inf"))):
        with pytest.raises(TypeError, match=r"key_padding_mask must be a bool tensor \(True at padding\)"):
            m(X, X, X, key_padding_mask=kpm)
    additive = torch.zeros(2 * 2, 5, 5).masked_fill(KPM.repeat_interleave(2, 0)[:, None, :], float("-inf"))
    with torch.no_grad():
        torch.testing.assert_close(m(X, X, X, attn_mask=additive, need_weights=False)[0],
                                   m(X, X, X, key_padding_mask=KPM, need_weights=False)[0])


def test_mha_float64_module_takes_float64_input():
    m = MultiHeadAttention(8, 2).double()
    out, _ = m(X.double(), X.double(), X.double())
    assert out.dtype == torch.float64


def test_additive_all_masked_row_gives_zero_context():
    c, w = ADD(AQ, AK, mask=torch.tensor([[True, True, False], [False, False, False]]))
    assert torch.equal(c[1], torch.zeros(6)) and torch.equal(w[1], torch.zeros(3))
