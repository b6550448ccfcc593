"""Tests of seqbook.attention against PyTorch's built-ins."""

import math

import pytest
import torch
import torch.nn.functional as F
from tolerance import assert_close, assert_same_math
from torch import nn

from seqbook.attention import (
    MultiHeadAttention,
    causal_mask,
    lengths_to_mask,
    padding_to_attn_mask,
    scaled_dot_product_attention,
)

F64 = torch.float64


def sdpa_terms(d_k, S):
    """The length of the sums behind one output of attention: q.k (d_k), softmax (S), weights @ v (S)."""
    return d_k + 2 * S

# ---------------------------------------------------------------------------------------------
# scaled_dot_product_attention


@pytest.mark.parametrize(
    "q_shape, S, d_v",
    [((5, 8), 7, 4), ((2, 5, 8), 5, 8), ((2, 3, 1, 16), 1, 3), ((1, 4, 9, 2), 11, 6)],
)
def test_sdpa_matches_torch(device, q_shape, S, d_v):
    torch.manual_seed(0)
    *batch, L, d_k = q_shape
    q = torch.randn(*batch, L, d_k, device=device, dtype=F64)
    k = torch.randn(*batch, S, d_k, device=device, dtype=F64)
    v = torch.randn(*batch, S, d_v, device=device, dtype=F64)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert_same_math(out, F.scaled_dot_product_attention(q, k, v), n=sdpa_terms(d_k, S))
    assert weights.shape == (*batch, L, S)
    assert_close(weights.sum(-1), torch.ones(*batch, L, device=device, dtype=F64), n=2 * S)
    # The readable formula, eq. (4.6).
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), dim=-1)
    assert_same_math(weights, expected, n=d_k + S)


def test_sdpa_boolean_and_float_masks_match_torch(device):
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 3, 6, 8, device=device, dtype=F64) for _ in range(3))
    mask = torch.rand(2, 1, 6, 6, device=device) > 0.4
    mask[..., 0] = True  # every query sees at least one key, so torch gives no NaN either
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    n = sdpa_terms(8, 6)
    assert_same_math(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), n=n)
    assert torch.all(weights[~mask.expand_as(weights)] == 0)
    additive = torch.zeros(mask.shape, device=device, dtype=F64).masked_fill(~mask, float("-inf"))
    out_f, weights_f = scaled_dot_product_attention(q, k, v, mask=additive)
    assert_same_math(out_f, out, n=n)
    assert_same_math(weights_f, weights, n=n)
    bias = torch.randn(6, 6, device=device, dtype=F64)  # a finite additive bias (a relative position bias)
    assert_same_math(scaled_dot_product_attention(q, k, v, mask=bias)[0],
                     F.scaled_dot_product_attention(q, k, v, attn_mask=bias), n=n)


@pytest.mark.parametrize("L, S", [(5, 5), (3, 7), (7, 3), (1, 1)])
def test_sdpa_causal_matches_torch(device, L, S):
    torch.manual_seed(2)
    q = torch.randn(2, L, 4, device=device, dtype=F64)
    k = torch.randn(2, S, 4, device=device, dtype=F64)
    v = torch.randn(2, S, 5, device=device, dtype=F64)
    out, weights = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_same_math(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), n=sdpa_terms(4, S))
    assert torch.all(weights.triu(1) == 0)
    out_m, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(L, S, device=device))
    assert_same_math(out_m, out, n=sdpa_terms(4, S))


def test_sdpa_causal_combines_with_mask():
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 4, 3) for _ in range(3))
    pad = torch.tensor([[True, True, True, False]])[:, None, :]  # last key is padding
    _, weights = scaled_dot_product_attention(q, k, v, mask=pad, is_causal=True)
    expected = causal_mask(4) & pad
    assert torch.equal(weights[0] > 0, expected[0])


def test_sdpa_scale_argument():
    torch.manual_seed(4)
    q, k, v = (torch.randn(3, 5, 8, dtype=F64) for _ in range(3))
    out, _ = scaled_dot_product_attention(q, k, v, scale=2.0)
    assert_same_math(out, F.scaled_dot_product_attention(q, k, v, scale=2.0), n=sdpa_terms(8, 5))


def test_sdpa_fully_masked_row_is_zero_without_nan(device):
    torch.manual_seed(5)
    q = torch.randn(2, 4, 8, device=device, requires_grad=True)
    k = torch.randn(2, 6, 8, device=device, requires_grad=True)
    v = torch.randn(2, 6, 3, device=device, requires_grad=True)
    mask = torch.ones(2, 4, 6, dtype=torch.bool, device=device)
    mask[0, 1] = False  # query 1 of batch 0 may attend nowhere
    mask[1] = False  # nothing in batch 1 may attend anywhere
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert torch.all(out[0, 1] == 0) and torch.all(weights[0, 1] == 0)
    assert torch.all(out[1] == 0)
    assert_close(weights[0, 0].sum(), torch.tensor(1.0, device=device), n=2 * 6)
    out.square().sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.all(q.grad[0, 1] == 0)
    # the same with a float mask of -inf
    additive = torch.zeros(mask.shape, device=device).masked_fill(~mask, float("-inf"))
    out_f, _ = scaled_dot_product_attention(q, k, v, mask=additive)
    assert_close(out_f, out, n=sdpa_terms(8, 6))


def test_sdpa_gradients_match_torch(device):
    torch.manual_seed(6)
    shapes = [(2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4)]
    ours = [torch.randn(s, device=device, dtype=torch.float64, requires_grad=True) for s in shapes]
    ref = [t.detach().clone().requires_grad_() for t in ours]
    mask = torch.rand(2, 1, 5, 7, device=device) > 0.3
    mask[..., 0] = True
    scaled_dot_product_attention(*ours, mask=mask)[0].sin().sum().backward()
    F.scaled_dot_product_attention(*ref, attn_mask=mask).sin().sum().backward()
    for a, b in zip(ours, ref, strict=True):
        assert_same_math(a.grad, b.grad, n=2 * sdpa_terms(8, 7))  # forward, then backward


def test_sdpa_gradcheck():
    torch.manual_seed(7)
    q, k, v = (torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[True, True, False], [True, False, False], [False, False, False]])
    assert torch.autograd.gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask)[0], (q, k, v))


def test_sdpa_dropout_zeroes_some_weights_and_keeps_scale():
    torch.manual_seed(8)
    q = torch.zeros(1, 2000, 4)
    k = torch.zeros(1, 10, 4)
    v = torch.ones(1, 10, 1)
    out, weights = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert_close(weights, torch.full_like(weights, 0.1), n=10)  # returned weights are before dropout
    assert (out == 0).any() or (out != 1).any()
    assert abs(out.mean().item() - 1.0) < 0.05  # inverted dropout keeps the expectation


def test_sdpa_bad_input_raises():
    q = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="k must have shape"):
        scaled_dot_product_attention(q, torch.randn(2, 7, 6), torch.randn(2, 7, 4))
    with pytest.raises(ValueError, match="v must have shape"):
        scaled_dot_product_attention(q, torch.randn(2, 7, 8), torch.randn(2, 6, 4))
    with pytest.raises(ValueError, match="at least 2 dims"):
        scaled_dot_product_attention(torch.randn(8), torch.randn(7, 8), torch.randn(7, 4))
    with pytest.raises(ValueError, match="leading dims"):
        scaled_dot_product_attention(q, torch.randn(3, 7, 8), torch.randn(3, 7, 4))
    with pytest.raises(ValueError, match="mask must broadcast"):
        scaled_dot_product_attention(q, torch.randn(2, 7, 8), torch.randn(2, 7, 4),
                                     mask=torch.ones(5, 6, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool or floating"):
        scaled_dot_product_attention(q, torch.randn(2, 7, 8), torch.randn(2, 7, 4),
                                     mask=torch.ones(5, 7, dtype=torch.long))


# ---------------------------------------------------------------------------------------------
# masks


def test_causal_mask_values():
    assert torch.equal(causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool))
    assert causal_mask(2, 4).tolist() == [[True, False, False, False], [True, True, False, False]]
    with pytest.raises(ValueError, match="L must be an int >= 0, got -1"):
        causal_mask(-1)
    # a window of w keeps the w keys i - w < j <= i
    assert causal_mask(4, window=2).int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0],
                                                        [0, 0, 1, 1]]
    assert torch.equal(causal_mask(5, window=5), causal_mask(5))


def test_lengths_to_mask_negated_is_pytorchs_key_padding_mask():
    kpm = ~lengths_to_mask(torch.tensor([3, 1]))
    assert kpm.tolist() == [[False, False, False], [False, True, True]]
    assert (~lengths_to_mask(torch.tensor([2]), max_len=4)).tolist() == [[False, False, True, True]]
    attend = padding_to_attn_mask(kpm)
    assert attend.shape == (2, 1, 1, 3) and torch.equal(attend[:, 0, 0], ~kpm)
    assert padding_to_attn_mask(kpm, heads=False).shape == (2, 1, 3)
    with pytest.raises(ValueError, match="lengths must have shape"):
        ~lengths_to_mask(torch.tensor([[3]]))
    with pytest.raises(TypeError, match="key_padding_mask must be a bool"):
        padding_to_attn_mask(kpm.float())


# ---------------------------------------------------------------------------------------------
# MultiHeadAttention


def _pair(embed_dim, num_heads, device, kdim=None, vdim=None, bias=True, seed=0, dtype=F64):
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(embed_dim, num_heads, bias=bias, kdim=kdim, vdim=vdim, batch_first=True)
    ref = ref.to(device=device, dtype=dtype).eval()
    with torch.no_grad():  # non-zero biases, so that copying them is tested too
        for name, p in ref.named_parameters():
            if "bias" in name:
                p.normal_()
    ours = MultiHeadAttention.from_torch(ref).eval()
    return ref, ours


def mha_terms(E, H, S, kdim=None):
    """Sums behind one output of multi-head attention: the input projection, attention, W^O."""
    return max(E, kdim or E) + sdpa_terms(E // H, S) + E


@pytest.mark.parametrize(
    "B, L, S, E, H",
    [(2, 5, 5, 16, 4), (1, 1, 1, 8, 2), (3, 4, 9, 12, 3), (1, 7, 3, 6, 1), (2, 6, 6, 32, 8)],
)
@pytest.mark.parametrize("fast", [False, True])
def test_mha_matches_torch(device, B, L, S, E, H, fast):
    ref, ours = _pair(E, H, device)
    ours.fast = fast
    q = torch.randn(B, L, E, device=device, dtype=F64)
    kv = torch.randn(B, S, E, device=device, dtype=F64)
    n = mha_terms(E, H, S)
    out_ref, w_ref = ref(q, kv, kv)
    out, w = ours(q, kv, kv)
    assert_same_math(out, out_ref, n=n)
    assert_same_math(w, w_ref, n=n)
    out_ref, w_ref = ref(q, kv, kv, average_attn_weights=False)
    out, w = ours(q, kv, kv, average_attn_weights=False)
    assert w.shape == (B, H, L, S)
    assert_same_math(w, w_ref, n=n)
    out_nw, w_nw = ours(q, kv, kv, need_weights=False)
    assert w_nw is None
    assert_same_math(out_nw, out_ref, n=n)


def test_mha_self_attention_no_grad_matches_torch_fast_path(device):
    # Under no_grad, in eval mode, with query is key is value, PyTorch takes its own fused path.
    ref, ours = _pair(16, 4, device)
    x = torch.randn(3, 6, 16, device=device, dtype=F64)
    kpm = ~lengths_to_mask(torch.tensor([6, 4, 2], device=device))
    with torch.no_grad():
        out_ref, _ = ref(x, x, x, key_padding_mask=kpm, need_weights=False)
        out, _ = ours(x, x, x, key_padding_mask=kpm, need_weights=False)
    real = ~kpm  # PyTorch's fused path may leave padded query positions out
    assert_same_math(out[real], out_ref[real], n=mha_terms(16, 4, 6))


@pytest.mark.parametrize("kdim, vdim", [(10, 10), (6, 9), (16, 5)])
def test_mha_kdim_vdim_matches_torch(device, kdim, vdim):
    ref, ours = _pair(16, 4, device, kdim=kdim, vdim=vdim)
    assert not ref._qkv_same_embed_dim
    q = torch.randn(2, 3, 16, device=device, dtype=F64)
    k = torch.randn(2, 5, kdim, device=device, dtype=F64)
    v = torch.randn(2, 5, vdim, device=device, dtype=F64)
    n = mha_terms(16, 4, 5, kdim=max(kdim, vdim))
    for fast in (False, True):
        ours.fast = fast
        out_ref, w_ref = ref(q, k, v)
        out, w = ours(q, k, v, need_weights=not fast)
        assert_same_math(out, out_ref, n=n)
        if not fast:
            assert_same_math(w, w_ref, n=n)


def test_mha_without_bias_matches_torch(device):
    ref, ours = _pair(8, 2, device, bias=False)
    assert ours.q_proj.bias is None
    x = torch.randn(2, 4, 8, device=device, dtype=F64)
    assert_same_math(ours(x, x, x)[0], ref(x, x, x)[0], n=mha_terms(8, 2, 4))


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask:UserWarning")
@pytest.mark.parametrize("fast", [False, True])
def test_mha_masks_match_torch(device, fast):
    B, L, E, H = 3, 6, 16, 4
    ref, ours = _pair(E, H, device, seed=1)
    ours.fast = fast
    x = torch.randn(B, L, E, device=device, dtype=F64)
    kpm = ~lengths_to_mask(torch.tensor([6, 4, 2], device=device))
    blocked = ~causal_mask(L, device=device)  # nn.MultiheadAttention: True = blocked
    per_head = torch.rand(B * H, L, L, device=device) > 0.6
    per_head[..., 0] = False  # keep one key per row
    float_mask = torch.randn(L, L, device=device, dtype=F64)
    n = mha_terms(E, H, L)
    cases = [
        {"key_padding_mask": kpm},
        {"attn_mask": blocked},
        {"key_padding_mask": kpm, "attn_mask": blocked},
        {"attn_mask": per_head},
        {"key_padding_mask": kpm, "attn_mask": float_mask},
        {"key_padding_mask": kpm, "attn_mask": torch.zeros(L, L, device=device, dtype=F64)},
        {"attn_mask": blocked, "is_causal": True},
    ]
    for kw in cases:
        out_ref, w_ref = ref(x, x, x, need_weights=True, **kw)
        out, w = ours(x, x, x, need_weights=not fast, **kw)
        assert_same_math(out, out_ref, n=n, msg=lambda m, kw=kw: f"{sorted(kw)}: {m}")
        if not fast:
            assert_same_math(w, w_ref, n=n)
    # is_causal alone (PyTorch wants the mask as well) equals the explicit causal mask
    assert_same_math(ours(x, x, x, is_causal=True)[0], ref(x, x, x, attn_mask=blocked)[0], n=n)
    # a 4-D (B, H, L, S) mask is the (B*H, L, S) mask viewed per head
    assert_same_math(ours(x, x, x, attn_mask=per_head.view(B, H, L, L))[0],
                     ref(x, x, x, attn_mask=per_head)[0], n=n)


def test_mha_fast_and_readable_paths_agree_with_gradients(device):
    torch.manual_seed(3)
    readable = MultiHeadAttention(24, 3, fast=False, kdim=10, vdim=7).to(device=device, dtype=F64)
    fast = MultiHeadAttention(24, 3, fast=True, kdim=10, vdim=7).to(device=device, dtype=F64)
    fast.load_state_dict(readable.state_dict())
    q = torch.randn(2, 5, 24, device=device, dtype=F64)
    k = torch.randn(2, 8, 10, device=device, dtype=F64)
    v = torch.randn(2, 8, 7, device=device, dtype=F64)
    n = 2 * mha_terms(24, 3, 8) + 2 * 5  # forward and backward; parameter gradients sum over B * L
    kpm = ~lengths_to_mask(torch.tensor([8, 3], device=device))
    kpm_full = kpm.clone()
    kpm_full[1] = True  # a fully padded sequence: zeros, no NaN, on both paths
    cases = ({}, {"key_padding_mask": kpm}, {"is_causal": True},
             {"key_padding_mask": kpm, "is_causal": True}, {"key_padding_mask": kpm_full})
    for kw in cases:
        outs = []
        for m in (readable, fast):
            m.zero_grad()
            out, _ = m(q, k, v, need_weights=False, **kw)
            out.square().sum().backward()
            outs.append((out, {n: p.grad.clone() for n, p in m.named_parameters()}))
        (o1, g1), (o2, g2) = outs
        assert torch.isfinite(o1).all() and torch.isfinite(o2).all()
        assert_same_math(o1, o2, n=n)
        for name in g1:
            assert torch.isfinite(g1[name]).all()
            assert_same_math(g1[name], g2[name], n=n, msg=lambda m, name=name: f"{name}: {m}")
    out, w = readable(q, k, v, key_padding_mask=kpm_full)
    assert torch.all(w[1] == 0)
    assert_same_math(out[1], readable.out_proj.bias.expand(5, 24), n=24)  # zero attention, then W^O + b


def test_mha_train_mode_dropout(device):
    torch.manual_seed(4)
    m = MultiHeadAttention(8, 2, dropout=0.5).to(device)
    x = torch.randn(2, 30, 8, device=device)
    m.train()
    assert not torch.allclose(m(x, x, x)[0], m(x, x, x)[0])
    m.eval()
    assert torch.equal(m(x, x, x)[0], m(x, x, x)[0])  # the same computation twice


def test_mha_weights_are_a_distribution():
    torch.manual_seed(5)
    m = MultiHeadAttention(12, 4)
    x = torch.randn(2, 5, 12)
    _, w = m(x, x, x, average_attn_weights=False)
    assert_close(w.sum(-1), torch.ones(2, 4, 5), n=2 * 5)


def test_mha_from_torch_rejects_unsupported():
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(TypeError, match="nn.MultiheadAttention"):
        MultiHeadAttention.from_torch(nn.Linear(8, 8))


def test_mha_bad_input_raises():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        MultiHeadAttention(10, 3)
    m = MultiHeadAttention(8, 2, kdim=6)
    q = torch.randn(2, 4, 8)
    k = torch.randn(2, 5, 6)
    v = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"query must have shape \(B, L, 8\), got \(2, 4, 7\)"):
        m(torch.randn(2, 4, 7), k, v)
    with pytest.raises(ValueError, match="query must have shape"):
        m(torch.randn(4, 8), k, v)
    with pytest.raises(ValueError, match="key must have shape"):
        m(q, torch.randn(2, 5, 8), v)
    with pytest.raises(ValueError, match="key must have shape"):
        m(q, torch.randn(3, 5, 6), v)
    with pytest.raises(ValueError, match="value must have shape"):
        m(q, k, torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(2, 5\)"):
        m(q, k, v, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="attn_mask must have shape"):
        m(q, k, v, attn_mask=torch.zeros(4, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool or floating"):
        m(q, k, v, attn_mask=torch.zeros(4, 5, dtype=torch.int64))
