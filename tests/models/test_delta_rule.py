"""The delta rule (seqbook.delta_rule): the recurrent loop and the chunked WY form both
compute the papers' recurrence, outputs, final state and gradients, in float64; the
rule overwrites, is one gradient step on the read-out error, and does nothing at
beta = 0; DeltaNet (gated or not) is its equations, continues a sequence from its
state, and does not depend on the chunk size.

The reference below is written from the papers, in their convention: the state S has
shape (D_v, D_k), S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T and
o_t = S_t q_t (DeltaNet: Schlag, Irie & Schmidhuber, 2021, and Yang et al., 2024,
"Parallelizing linear transformers with the delta rule over sequence length"; gated
DeltaNet: Yang, Kautz & Hatamizadeh, 2025). seqbook keeps the transpose, (D_k, D_v).

Float64 comparisons use the policy of tests/tolerance.py (about 1e-14 * sqrt(n)), far
inside 1e-10: a missing term or a float32 step fails them."""

import pytest
import torch
import torch.nn.functional as F
from tolerance import assert_close, assert_same_math

from seqbook.delta_rule import DeltaNet, delta_rule_chunked, delta_rule_recurrent

F64 = torch.float64


def paper_delta_rule(q, k, v, beta, log_alpha=None, state=None):
    """The papers' recurrence, one (B, H) matrix product per step.

    q, k (B, H, T, D_k), v (B, H, T, D_v), beta, log_alpha (B, H, T) and the papers'
    state S_0 (B, H, D_v, D_k) -> outputs (B, H, T, D_v), S_T (B, H, D_v, D_k)."""
    B, H, T, D_k = k.shape
    D_v = v.shape[-1]
    eye = torch.eye(D_k, dtype=k.dtype, device=k.device)
    S = torch.zeros(B, H, D_v, D_k, dtype=k.dtype, device=k.device) if state is None else state
    outputs = []
    for t in range(T):
        k_t = k[:, :, t, :, None]                                # column (D_k, 1)
        v_t = v[:, :, t, :, None]                                # column (D_v, 1)
        b_t = beta[:, :, t, None, None]
        a_t = 1.0 if log_alpha is None else torch.exp(log_alpha[:, :, t, None, None])
        S = a_t * S @ (eye - b_t * k_t @ k_t.mT) + b_t * v_t @ k_t.mT
        outputs.append((S @ q[:, :, t, :, None])[..., 0])      # o_t = S_t q_t
    return torch.stack(outputs, dim=2), S


def inputs(T, device, dtype=F64, B=2, H=3, D_k=4, D_v=5):
    """Queries, unit keys (as DeltaNet's), values, beta in (0, 1), log gates in
    [-1, 0] and a state (B, H, D_k, D_v) in seqbook's layout."""
    q = torch.randn(B, H, T, D_k, dtype=dtype, device=device)
    k = F.normalize(torch.randn(B, H, T, D_k, dtype=dtype, device=device), dim=-1)
    v = torch.randn(B, H, T, D_v, dtype=dtype, device=device)
    beta = torch.rand(B, H, T, dtype=dtype, device=device)
    log_alpha = -torch.rand(B, H, T, dtype=dtype, device=device)
    state = torch.randn(B, H, D_k, D_v, dtype=dtype, device=device)
    return q, k, v, beta, log_alpha, state


@pytest.mark.parametrize("with_state", [False, True], ids=["zero-state", "state"])
@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
@pytest.mark.parametrize("T", [1, 12])
def test_both_forms_equal_the_papers_recurrence(T, gated, with_state, device):
    q, k, v, beta, log_alpha, state = inputs(T, device)
    log_alpha = log_alpha if gated else None
    state = state if with_state else None
    paper_state = None if state is None else state.mT
    expected, S_T = paper_delta_rule(q, k, v, beta, log_alpha, paper_state)
    n = 4 * T                                                  # D_k terms per step
    out, S = delta_rule_recurrent(q, k, v, beta, log_alpha, state)
    assert out.shape == (2, 3, T, 5) and S.shape == (2, 3, 4, 5)
    assert_same_math(out, expected, n=n)
    assert_same_math(S, S_T.mT, n=n)
    for chunk_size in (1, 3, 5, 16):                           # 3 | 12, 5 does not, 16 > T
        out, S = delta_rule_chunked(q, k, v, beta, log_alpha, state, chunk_size=chunk_size)
        assert out.shape == (2, 3, T, 5) and S.shape == (2, 3, 4, 5)
        assert_same_math(out, expected, n=n, msg=f"chunk_size={chunk_size}")
        assert_same_math(S, S_T.mT, n=n, msg=f"chunk_size={chunk_size}")


@pytest.mark.parametrize("chunk_size", [1, 4, 5])
@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
def test_chunked_gradients_equal_the_loop(gated, chunk_size, device):
    """Every input's gradient through the chunked form equals the one through the loop,
    for a random weighting of the outputs and of the final state."""
    q, k, v, beta, log_alpha, state = inputs(10, device)
    leaves = [q, k, v, beta, state] + ([log_alpha] if gated else [])
    for x in leaves:
        x.requires_grad_()
    gates = log_alpha if gated else None
    w_out = torch.randn(2, 3, 10, 5, dtype=F64, device=device)
    w_state = torch.randn(2, 3, 4, 5, dtype=F64, device=device)

    def grads(fn):
        out, S = fn(q, k, v, beta, gates, state)
        return torch.autograd.grad((out * w_out).sum() + (S * w_state).sum(), leaves)

    expected = grads(delta_rule_recurrent)
    chunked = grads(lambda *a: delta_rule_chunked(*a, chunk_size=chunk_size))
    for name, a, b in zip(["q", "k", "v", "beta", "state", "log_alpha"], chunked, expected,
                          strict=False):
        assert_same_math(a, b, n=4 * 10 * 10, msg=name)        # backward through T steps


def test_gradcheck_chunked():
    q, k, v, beta, log_alpha, state = inputs(5, "cpu", B=1, H=1, D_k=2, D_v=3)
    args = tuple(x.requires_grad_() for x in (q, k, v, beta, log_alpha, state))
    assert torch.autograd.gradcheck(lambda *a: delta_rule_chunked(*a, chunk_size=2), args)


# --- properties of the rule


FORMS = {"recurrent": delta_rule_recurrent,
         "chunked": lambda *a: delta_rule_chunked(*a, chunk_size=2)}


@pytest.mark.parametrize("form", FORMS)
def test_a_unit_key_with_beta_one_overwrites_its_value(form, device):
    """One step with ||k|| = 1 and beta = 1: the memory returns v for k afterwards,
    whatever it held before, and keys orthogonal to k read what they read before."""
    q, k, v, beta, _, S_0 = inputs(1, device)
    beta = torch.ones_like(beta)
    _, S_1 = FORMS[form](q, k, v, beta, None, S_0)
    read = lambda S, key: (key[..., None, :] @ S)[..., 0, :]  # noqa: E731  S^T key
    assert_same_math(read(S_1, k[:, :, 0]), v[:, :, 0], n=8)
    other = torch.randn_like(k[:, :, 0])
    other = other - (other * k[:, :, 0]).sum(-1, keepdim=True) * k[:, :, 0]  # k^T other = 0
    assert_same_math(read(S_1, other), read(S_0, other), n=8)


@pytest.mark.parametrize("form", FORMS)
def test_beta_zero_writes_nothing(form, device):
    q, k, v, beta, _, S_0 = inputs(5, device)
    out, S = FORMS[form](q, k, v, torch.zeros_like(beta), None, S_0)
    assert torch.equal(S, S_0)                                 # exactly: every write is 0
    assert_same_math(out, q @ S_0, n=4)                        # every step reads S_0


@pytest.mark.parametrize("form", FORMS)
def test_gate_one_is_no_gate(form, device):
    q, k, v, beta, log_alpha, state = inputs(7, device)
    ones, none = (FORMS[form](q, k, v, beta, g, state) for g in (torch.zeros_like(log_alpha), None))
    assert torch.equal(ones[0], none[0]) and torch.equal(ones[1], none[1])


@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
@pytest.mark.parametrize("form", FORMS)
def test_the_rule_is_a_gradient_step_on_the_read_out_error(form, gated, device):
    """S_t = S' - beta_t grad_S 1/2 ||S^T k_t - v_t||^2 at S' = alpha_t S_{t-1}."""
    q, k, v, beta, log_alpha, S_0 = inputs(1, device)
    log_alpha = log_alpha if gated else None
    S = (S_0 if log_alpha is None else log_alpha.exp()[..., None] * S_0).detach().requires_grad_()
    loss = 0.5 * ((k[:, :, 0, None, :] @ S)[..., 0, :] - v[:, :, 0]).pow(2).sum()
    (grad,) = torch.autograd.grad(loss, S)
    expected = S.detach() - beta[..., None] * grad
    _, S_1 = FORMS[form](q, k, v, beta, log_alpha, S_0)
    assert_same_math(S_1, expected, n=8)


# --- the layer


def layer_and_input(gated, device, dtype=F64, T=11, chunk_size=4):
    torch.manual_seed(0)
    layer = DeltaNet(8, num_heads=2, gated=gated, chunk_size=chunk_size).to(device, dtype)
    if gated:  # gates well below 1, so that the decay is visible in every comparison
        torch.nn.init.normal_(layer.gate_proj.bias)
    x = torch.randn(2, T, 8, dtype=dtype, device=device)
    return layer, x


@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
def test_layer_is_its_equations(gated, device):
    layer, x = layer_and_input(gated, device)
    out, state = layer(x)
    assert out.shape == (2, 11, 8) and state.shape == (2, 2, 4, 4)
    heads = lambda p: p(x).view(2, 11, 2, 4).transpose(1, 2)  # noqa: E731  (B, H, T, D_h)
    q, k = F.normalize(heads(layer.q_proj), dim=-1), F.normalize(heads(layer.k_proj), dim=-1)
    beta = torch.sigmoid(layer.beta_proj(x)).transpose(1, 2)
    log_alpha = -F.softplus(layer.gate_proj(x)).transpose(1, 2) if gated else None
    o, S = paper_delta_rule(q, k, heads(layer.v_proj), beta, log_alpha)
    assert_same_math(out, layer.out_proj(o.transpose(1, 2).reshape(2, 11, 8)), n=200)
    assert_same_math(state, S.mT, n=100)


@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
def test_layer_state_continues_a_sequence(gated, device):
    layer, x = layer_and_input(gated, device)
    whole, state = layer(x)
    head, mid = layer(x[:, :6])
    tail, end = layer(x[:, 6:], mid)
    assert_same_math(torch.cat([head, tail], dim=1), whole, n=200)
    assert_same_math(end, state, n=100)
    token, _ = layer(x[:, 6:7], mid)                           # one token at a time
    assert_same_math(token, whole[:, 6:7], n=200)


@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
def test_layer_output_does_not_depend_on_the_chunk_size(gated, device):
    layer, x = layer_and_input(gated, device)
    expected, S = layer(x)
    for chunk_size in (1, 3, 11, 64):
        other = DeltaNet(8, num_heads=2, gated=gated, chunk_size=chunk_size).to(device, F64)
        other.load_state_dict(layer.state_dict())
        out, S_other = other(x)
        assert_same_math(out, expected, n=200, msg=f"chunk_size={chunk_size}")
        assert_same_math(S_other, S, n=100, msg=f"chunk_size={chunk_size}")


@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
def test_layer_in_float32_agrees_with_float64(gated, device):
    """The same weights in float32 and float64: only float32 rounding differs. An output
    passes three projections of 8 terms, a delta rule whose state sums 40 steps of
    4-term products and a chunk's triangular solve of 16 rows: n = 4 * 8 + 4 * 40 + 16
    ~ 200 terms. Measured: below a tenth of this tolerance (tests/tolerance.py)."""
    layer, x = layer_and_input(gated, device, dtype=torch.float32, T=40, chunk_size=16)
    out32, S32 = layer(x)
    out64, S64 = layer.to(F64)(x.double())
    assert out32.dtype == S32.dtype == torch.float32
    assert_close(out32, out64.float(), n=200)
    assert_close(S32, S64.float(), n=200)


@pytest.mark.parametrize("gated", [False, True], ids=["delta", "gated"])
def test_layer_runs_under_autocast(gated):
    layer, x = layer_and_input(gated, "cpu", dtype=torch.float32)
    expected, _ = layer(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, state = layer(x)
        more, _ = layer(x[:, :3], state)                       # and from a returned state
    assert out.shape == expected.shape and more.shape == (2, 3, 8)
    assert torch.isfinite(out.float()).all() and torch.isfinite(state.float()).all()
    # bfloat16 keeps 8 significant bits (unit roundoff 2^-8 = 0.004) and every product
    # rounds to it: projections, the rule's chunk products, the output projection. A dozen
    # such roundings of order-1 values stay below 0.05 (the fixed layer: 0.007 measured);
    # the policy's formula, 32 sqrt(n) eps, would allow 0.7 and test nothing.
    torch.testing.assert_close(out.float(), expected, rtol=0.05, atol=0.05)
    out.float().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())


def test_layer_describes_itself():
    assert DeltaNet(8, 2, gated=True).extra_repr() == "8, num_heads=2, gated=True"


# --- the naive references of the flash-linear-attention package, where it is installed


def test_agrees_with_the_flash_linear_attention_references():
    """fla's naive PyTorch functions (they need triton to import, not a GPU) compute in
    float32 and scale q by D_k^-1/2; their states have seqbook's layout (D_k, D_v), the
    gated ones take (B, T, H, D). Float32 on both sides: the policy's float32 tolerance."""
    fla_delta = pytest.importorskip("fla.ops.delta_rule.naive")
    fla_gated = pytest.importorskip("fla.ops.gated_delta_rule.naive")
    q, k, v, beta, log_alpha, state = inputs(8, "cpu", dtype=torch.float32)
    scaled = q * q.shape[-1] ** -0.5
    n = 4 * 8 * 4

    out, S = delta_rule_recurrent(scaled, k, v, beta, None, state)
    theirs, their_S = fla_delta.delta_rule_recurrence(q, k, v, beta, initial_state=state.clone())
    assert_close(out, theirs, n=n)
    assert_close(S, their_S, n=n)
    out, S = delta_rule_recurrent(scaled, k, v, beta)
    theirs, their_S = fla_delta.delta_rule_chunkwise(q, k, v, beta, chunk_size=4)
    assert_close(out, theirs, n=n)
    assert_close(S, their_S, n=n)

    out, S = delta_rule_recurrent(q, k, v, beta, log_alpha, state)
    bthd = lambda x: x.transpose(1, 2)  # noqa: E731  (B, H, T, ...) <-> (B, T, H, ...)
    theirs, their_S = fla_gated.naive_recurrent_gated_delta_rule(
        bthd(q), bthd(k), bthd(v), bthd(beta), bthd(log_alpha), scale=1.0,
        initial_state=state, output_final_state=True)
    assert_close(out, bthd(theirs), n=n)
    assert_close(S, their_S, n=n)
    theirs, their_S = fla_gated.naive_chunk_gated_delta_rule(  # note: g before beta here
        bthd(q), bthd(k), bthd(v), bthd(log_alpha), bthd(beta), chunk_size=3, scale=1.0,
        initial_state=state, output_final_state=True)
    assert_close(out, bthd(theirs), n=n)
    assert_close(S, their_S, n=n)
