"""Linear attention (seqbook.linear_attention): its parallel, quadratic, chunked and
recurrent forms compute one function in float64; the state continues a sequence; the
module generates token by token (bad input: tests/bad_input/test_bad_input_linear_attention.py)."""

import pytest
import torch
import torch.nn.functional as F
from tolerance import assert_close, assert_same_math

from seqbook.linear_attention import (
    LinearAttention,
    LinearAttentionLM,
    PositiveRandomFeatures,
    elu_feature_map,
    linear_attention,
    linear_attention_chunked,
    linear_attention_quadratic,
    linear_attention_recurrent,
    linear_attention_step,
    taylor_feature_map,
)

F64 = torch.float64


def qkv(T, device, S=None, dtype=F64, D_k=4, D_v=5):
    """Queries (2, 3, T, D_k), keys (2, 3, S, D_k), values (2, 3, S, D_v)."""
    S = T if S is None else S
    q = torch.randn(2, 3, T, D_k, dtype=dtype, device=device)
    k = torch.randn(2, 3, S, D_k, dtype=dtype, device=device)
    v = torch.randn(2, 3, S, D_v, dtype=dtype, device=device)
    return q, k, v


def by_definition(q, k, v, causal, eps=1e-6):
    """out_i = sum_j w_ij v_j / (sum_j w_ij + eps), w_ij = phi(q_i).phi(k_j): loops."""
    q, k = F.elu(q) + 1, F.elu(k) + 1
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    for i in range(q.shape[2]):
        keys = range(i + 1) if causal else range(k.shape[2])
        w = [(q[:, :, i] * k[:, :, j]).sum(-1, keepdim=True) for j in keys]
        numerator = sum(wj * v[:, :, j] for wj, j in zip(w, keys, strict=True))
        out[:, :, i] = numerator / (sum(w) + eps)
    return out


def test_feature_map_is_elu_plus_one_and_positive():
    x = torch.linspace(-30, 3, 50, dtype=F64)
    assert torch.equal(elu_feature_map(x), F.elu(x) + 1)
    assert (elu_feature_map(x) > 0).all()


@pytest.mark.parametrize("d", [1, 3, 16])
def test_taylor_feature_map_is_the_second_order_taylor_kernel(d, device):
    q, k = torch.randn(2, 4, 7, d, dtype=F64, device=device)
    y = (q * k).sum(-1) / d**0.5
    phi_q, phi_k = taylor_feature_map(q), taylor_feature_map(k)
    assert phi_q.shape == (4, 7, 1 + d + d * d)
    assert_same_math((phi_q * phi_k).sum(-1), 1 + y + y * y / 2, n=d * d)
    # at least 1/2, the minimum of 1 + y + y^2/2 (at y = -1)
    x = torch.randn(200, d, dtype=F64, device=device) * 3
    kernel = taylor_feature_map(x) @ taylor_feature_map(x).T
    assert kernel.min() >= 0.5 - 1e-12
    assert kernel.min() < 0.5 + 0.2 or d == 1  # it gets close to the bound


def test_positive_random_features_are_positive_and_unbiased(device):
    g = torch.Generator().manual_seed(0)
    d = 8
    q, k = (0.5 * torch.randn(6, d, generator=g, dtype=F64) for _ in range(2))
    exact = torch.exp((q * k).sum(-1) / d**0.5)
    draws = []
    for seed in range(200):  # the mean over independent draws of W tends to exp(q.k / sqrt d)
        phi = PositiveRandomFeatures(d, 64, torch.Generator().manual_seed(seed))
        phi = phi.to(device=device, dtype=F64)
        fq, fk = phi(q.to(device)), phi(k.to(device))
        assert (fq > 0).all() and fq.shape == (6, 64)
        draws.append((fq * fk).sum(-1).cpu())
    draws = torch.stack(draws)  # (200, 6)
    spread = draws.std(0) / 200**0.5
    assert ((draws.mean(0) - exact).abs() < 4 * spread).all()
    # one draw: the relative error falls as 1 / sqrt(m)
    errors = []
    for m in (16, 4096):
        phi = PositiveRandomFeatures(d, m, torch.Generator().manual_seed(1)).to(F64)
        errors.append(((phi(q) * phi(k)).sum(-1) / exact - 1).abs().mean().item())
    assert errors[1] < errors[0] / 4
    assert "d=8, m=4096" in repr(phi)


def test_linear_attention_takes_other_feature_maps(device):
    q, k, v = qkv(6, device)
    phi = PositiveRandomFeatures(4, 32, torch.Generator().manual_seed(0)).to(device, F64)
    for feature_map in (taylor_feature_map, phi):
        out = linear_attention(q, k, v, causal=True, feature_map=feature_map)
        fq, fk = feature_map(q), feature_map(k)
        weights = (fq @ fk.transpose(-2, -1)).tril()
        expected = weights @ v / (weights.sum(-1, keepdim=True) + 1e-6)
        assert_same_math(out, expected, n=fq.shape[-1] * 6)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("T", [1, 5, 9])
def test_parallel_and_quadratic_forms_equal_the_definition(causal, T, device):
    q, k, v = qkv(T, device)
    expected = by_definition(q, k, v, causal)
    out, _ = linear_attention_quadratic(q, k, v, causal=causal)
    assert_same_math(linear_attention(q, k, v, causal=causal), expected, n=4 * T)
    assert_same_math(out, expected, n=4 * T)
    _, weights = linear_attention_quadratic(q, k, v, causal=causal, eps=0.0)
    assert_same_math(weights.sum(-1), torch.ones_like(weights[..., 0]), n=T)
    if causal:
        assert (weights.triu(1) == 0).all()


def test_non_causal_keys_may_outnumber_queries(device):
    q, k, v = qkv(4, device, S=7)
    out = linear_attention(q, k, v)
    assert out.shape == (2, 3, 4, 5)
    assert_same_math(out, by_definition(q, k, v, causal=False), n=28)


@pytest.mark.parametrize("T", [1, 2, 7, 16, 21])
def test_recurrent_and_chunked_forms_equal_the_parallel_form(T, device):
    q, k, v = qkv(T, device)
    expected = linear_attention(q, k, v, causal=True)
    out, (S, z) = linear_attention_recurrent(q, k, v)
    assert S.shape == (2, 3, 4, 5) and z.shape == (2, 3, 4)
    assert_same_math(out, expected, n=4 * T)
    for chunk_size in (1, 4, 5, 64):
        chunked = linear_attention_chunked(q, k, v, chunk_size=chunk_size)
        assert_same_math(chunked, expected, n=4 * T)


def test_the_state_continues_a_sequence(device):
    q, k, v = qkv(10, device)
    whole, state = linear_attention_recurrent(q, k, v)
    first, mid = linear_attention_recurrent(q[:, :, :6], k[:, :, :6], v[:, :, :6])
    rest, end = linear_attention_recurrent(q[:, :, 6:], k[:, :, 6:], v[:, :, 6:], mid)
    assert_same_math(torch.cat([first, rest], dim=2), whole, n=40)
    for a, b in zip(end, state, strict=True):
        assert_same_math(a, b, n=10)
    out, _ = linear_attention_step(q[:, :, 6], k[:, :, 6], v[:, :, 6], mid)
    assert_same_math(out, whole[:, :, 6], n=28)


def test_the_state_has_a_constant_size():
    q, k, v = qkv(3, "cpu")
    _, short = linear_attention_recurrent(q, k, v)
    q, k, v = qkv(50, "cpu")
    _, long = linear_attention_recurrent(q, k, v)
    assert [t.shape for t in short] == [t.shape for t in long]


def test_gradcheck():
    q, k, v = (t[:1, :2].detach().requires_grad_() for t in qkv(5, "cpu", D_k=2, D_v=2))
    for fn in (lambda q, k, v: linear_attention(q, k, v, causal=True),
               lambda q, k, v: linear_attention_chunked(q, k, v, chunk_size=2),
               lambda q, k, v: linear_attention_recurrent(q, k, v)[0]):
        assert torch.autograd.gradcheck(fn, (q, k, v))


def test_forms_agree_in_float32(device):
    q, k, v = qkv(40, device, dtype=torch.float32)
    expected = linear_attention(q, k, v, causal=True)
    assert expected.dtype == torch.float32 and expected.device.type == device.type
    assert_close(linear_attention_chunked(q, k, v, chunk_size=16), expected, n=160)
    assert_close(linear_attention_recurrent(q, k, v)[0], expected, n=160)


def test_module_generates_token_by_token(device):
    layer = LinearAttention(8, num_heads=2, chunk_size=4).to(device, F64)
    x = torch.randn(2, 9, 8, dtype=F64, device=device)
    out, state = layer(x)
    assert out.shape == (2, 9, 8)
    prefix, state_prefix = layer(x[:, :5])
    steps = [prefix]
    s = state_prefix
    for t in range(5, 9):
        y, s = layer(x[:, t:t + 1], s)
        steps.append(y)
    assert_same_math(torch.cat(steps, dim=1), out, n=8 * 9)
    for a, b in zip(s, state, strict=True):
        assert_same_math(a, b, n=9)


def test_module_is_multi_head_linear_attention():
    layer = LinearAttention(6, num_heads=3).double()
    x = torch.randn(2, 5, 6, dtype=F64)
    q, k, v = (p(x).view(2, 5, 3, 2).transpose(1, 2)
               for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    heads = by_definition(q, k, v, causal=True).transpose(1, 2).reshape(2, 5, 6)
    assert_same_math(layer(x)[0], layer.out_proj(heads), n=40)


def lm_and_ids(device, T=11):
    torch.manual_seed(0)
    model = LinearAttentionLM(13, 8, num_heads=2, num_layers=2, chunk_size=4,
                              init_std=0.5).to(device, F64)
    ids = torch.randint(13, (2, T), device=device)
    return model, ids


def test_lm_steps_give_the_logits_of_the_parallel_form(device):
    """Token by token from a zero state, step computes what forward computes at once."""
    model, ids = lm_and_ids(device)
    logits, state = model(ids)
    assert logits.shape == (2, 11, 13)
    step_state, steps = None, []
    for t in range(ids.shape[1]):
        step_logits, step_state = model.step(ids[:, t], step_state)
        steps.append(step_logits)
    assert_same_math(torch.stack(steps, dim=1), logits, n=64)
    for (S, z), (S_step, z_step) in zip(state, step_state, strict=True):
        assert S.shape == (2, 2, 4, 4) and z.shape == (2, 2, 4)
        assert_same_math(S_step, S, n=64)
        assert_same_math(z_step, z, n=64)


def test_lm_state_continues_a_sequence(device):
    """forward on a prefix, then on the rest from the returned state = forward on all."""
    model, ids = lm_and_ids(device)
    logits, _ = model(ids)
    head, state = model(ids[:, :6])
    tail, _ = model(ids[:, 6:], state)
    assert_same_math(torch.cat([head, tail], dim=1), logits, n=64)


def test_lm_ties_the_head_to_the_embedding_and_trains():
    model = LinearAttentionLM(13, 8, num_heads=2)
    ids = torch.randint(13, (3, 7))
    logits, _ = model(ids)
    F.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()
    assert all(p.grad is not None for p in model.parameters())
    n = sum(p.numel() for p in model.parameters())
    # embedding + 2 x (4 projections + 2 LayerNorms + MLP) + final LayerNorm; no head
    per_layer = 4 * (8 * 8 + 8) + 2 * 16 + (8 * 32 + 32 + 32 * 8 + 8)
    assert n == 13 * 8 + 2 * per_layer + 16
