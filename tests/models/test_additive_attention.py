"""AdditiveAttention (seqbook.attention): Bahdanau's scoring network, masks, shapes, bad input."""

import pytest
import torch
from tolerance import assert_close, assert_same_math

from seqbook.attention import AdditiveAttention, lengths_to_mask

F64 = torch.float64


def make(query_dim=5, key_dim=6, hidden_dim=7, device="cpu", dtype=torch.float32):
    torch.manual_seed(0)
    return AdditiveAttention(query_dim, key_dim, hidden_dim).to(device=device, dtype=dtype)


def reference(att, q, k, v, mask=None):
    """e_j = v_a^T tanh(W_a q + U_a k_j + b), softmax over j, c = sum_j alpha_j v_j, one query."""
    W, U, b, va = att.W_a.weight, att.U_a.weight, att.U_a.bias, att.v_a.weight[0]
    e = torch.einsum("a,bsa->bs", va, torch.tanh((q @ W.T)[:, None, :] + k @ U.T + b))  # (B, S)
    if mask is not None:
        e = e.masked_fill(~mask, float("-inf"))
    alpha = torch.softmax(e, dim=-1)
    return torch.einsum("bs,bsd->bd", alpha, v), alpha


def test_matches_the_equations(device):
    att = make(device=device, dtype=F64)
    q, k = torch.randn(3, 5, device=device, dtype=F64), torch.randn(3, 4, 6, device=device, dtype=F64)
    v = torch.randn(3, 4, 2, device=device, dtype=F64)
    mask = lengths_to_mask(torch.tensor([4, 2, 1], device=device), 4)
    context, weights = att(q, k, v, mask=mask)
    ref_context, ref_weights = reference(att, q, k, v, mask)
    assert_same_math(weights, ref_weights, n=5 + 6 + 7 + 4)  # W_a q, U_a k, v_a^T tanh, softmax
    assert_same_math(context, ref_context, n=5 + 6 + 7 + 2 * 4)
    assert context.shape == (3, 2) and weights.shape == (3, 4)


def test_weights_sum_to_one_and_are_exactly_zero_on_padding(device):
    att = make(device=device)
    lengths = torch.tensor([6, 3, 1, 5], device=device)
    mask = lengths_to_mask(lengths, 6)
    _, weights = att(torch.randn(4, 5, device=device), torch.randn(4, 6, 6, device=device), mask=mask)
    assert_close(weights.sum(-1), torch.ones(4, device=device), n=2 * 6)  # softmax's sum, then ours
    assert torch.all(weights[~mask] == 0.0)
    assert torch.all(weights[mask] > 0.0)
    assert weights[2, 0].item() == 1.0  # one real key takes all the weight


def test_padding_values_do_not_leak(device):
    att = make(device=device)
    q, k = torch.randn(2, 5, device=device), torch.randn(2, 5, 6, device=device)
    mask = lengths_to_mask(torch.tensor([3, 5], device=device), 5)
    context, _ = att(q, k, mask=mask)
    k2 = k.clone()
    k2[0, 3:] = 100.0  # change only the padded keys (which are also the values)
    context2, _ = att(q, k2, mask=mask)
    assert_close(context, context2, n=5 + 6 + 7 + 2 * 5)


def test_fully_padded_row_gives_zeros_not_nan(device):
    att = make(device=device)
    q = torch.randn(2, 5, device=device, requires_grad=True)
    k = torch.randn(2, 3, 6, device=device, requires_grad=True)
    mask = torch.tensor([[True, True, False], [False, False, False]], device=device)
    context, weights = att(q, k, mask=mask)
    assert not torch.isnan(context).any() and not torch.isnan(weights).any()
    assert torch.all(weights[1] == 0.0) and torch.all(context[1] == 0.0)
    context.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()
    assert torch.all(q.grad[1] == 0.0)


def test_many_queries_equal_one_at_a_time(device):
    att = make(device=device, dtype=F64)
    q, k = torch.randn(2, 4, 5, device=device, dtype=F64), torch.randn(2, 3, 6, device=device, dtype=F64)
    mask = lengths_to_mask(torch.tensor([3, 2], device=device), 3)
    context, weights = att(q, k, mask=mask)
    assert context.shape == (2, 4, 6) and weights.shape == (2, 4, 3)
    for i in range(4):
        c_i, w_i = att(q[:, i], k, mask=mask)
        assert_same_math(context[:, i], c_i, n=5 + 6 + 7 + 2 * 3)
        assert_same_math(weights[:, i], w_i, n=5 + 6 + 7 + 3)


def test_projected_keys_give_the_same_result(device):
    att = make(device=device, dtype=F64)
    q, k = torch.randn(2, 5, device=device, dtype=F64), torch.randn(2, 3, 6, device=device, dtype=F64)
    expected = att(q, k)
    got = att(q, k, projected_keys=att.project_keys(k))
    assert_same_math(got[0], expected[0], n=5 + 6 + 7 + 2 * 3)
    assert_same_math(got[1], expected[1], n=5 + 6 + 7 + 3)


@pytest.mark.parametrize("B,S", [(1, 1), (1, 4), (3, 1)])
def test_shapes_at_the_edges(device, B, S):
    att = make(device=device)
    context, weights = att(torch.randn(B, 5, device=device), torch.randn(B, S, 6, device=device),
                           torch.randn(B, S, 9, device=device))
    assert context.shape == (B, 9) and weights.shape == (B, S)
    assert_close(weights.sum(-1), torch.ones(B, device=device), n=2 * S)


def test_gradcheck_float64():
    att = make(3, 4, 5, dtype=torch.float64)
    q = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 4, 4, dtype=torch.float64, requires_grad=True)
    mask = lengths_to_mask(torch.tensor([4, 2]), 4)
    assert torch.autograd.gradcheck(lambda q, k: att(q, k, mask=mask), (q, k))


def test_follows_dtype():
    att = make(dtype=torch.float64)
    context, weights = att(torch.randn(2, 5, dtype=torch.float64), torch.randn(2, 3, 6, dtype=torch.float64))
    assert context.dtype == torch.float64 and weights.dtype == torch.float64


@pytest.mark.parametrize(
    "q_shape,k_shape,mask,match",
    [
        ((2, 4), (2, 3, 6), None, r"query must have shape \(2, 5\)"),
        ((3, 5), (2, 3, 6), None, r"query must have shape \(2, 5\)"),
        ((2, 5), (2, 3, 4), None, r"keys must have shape \(B, S, 6\), got \(2, 3, 4\)"),
        ((2, 5), (2, 6), None, r"keys must have shape \(B, S, 6\), got \(2, 6\)"),
        ((2, 5), (2, 0, 6), None, r"at least one position"),
        ((2, 5), (2, 3, 6), torch.ones(2, 4).bool(), r"mask must be a bool tensor of shape \(2, 3\)"),
        ((2, 5), (2, 3, 6), torch.ones(2, 3), r"mask must be a bool tensor"),
    ],
)
def test_bad_input_raises(q_shape, k_shape, mask, match):
    att = make()
    wrong_dtype = mask is not None and mask.dtype != torch.bool  # a wrong dtype is a TypeError
    with pytest.raises(TypeError if wrong_dtype else ValueError, match=match):
        att(torch.randn(*q_shape), torch.randn(*k_shape), mask=mask)


def test_bad_values_and_projected_keys_raise():
    att = make()
    q, k = torch.randn(2, 5), torch.randn(2, 3, 6)
    with pytest.raises(ValueError, match=r"values must have shape \(2, 3, D_v\), got \(2, 4, 6\)"):
        att(q, k, torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match=r"projected_keys must have shape \(2, 3, 7\)"):
        att(q, k, projected_keys=torch.randn(2, 3, 6))


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match="hidden_dim must be an int"):
        AdditiveAttention(4, 4, 0)
