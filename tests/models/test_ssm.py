"""State-space models (seqbook.ssm): the ZOH is the exact one-step solution; a
diagonal SSM's recurrent and convolutional views agree; the selective scan's loop and
scans agree; Mamba-2's attention form and its chunked algorithm equal its recurrence;
MambaBlock.from_hf and Mamba2Block.from_hf compute Hugging Face's MambaMixer and
Mamba2Mixer, outputs and gradients, in float64. Every Hugging
Face model here is small and random: nothing is downloaded, and those tests skip
without transformers."""

import importlib.util
import math

import numpy as np
import pytest
import torch
from tolerance import assert_close, assert_same_math, tol

from seqbook.ssm import (
    DiagonalSSM,
    Mamba2Block,
    MambaBlock,
    MambaLM,
    decay_mask,
    discretize_zoh,
    dplr_kernel,
    hippo_legs,
    legendre_basis,
    legs_scan,
    selective_scan,
    selective_scan_parallel,
    ssd_attention_form,
    ssd_chunk_scan,
    ssd_recurrent,
    ssm_convolution,
    ssm_kernel,
    ssm_recurrent,
)
from tests.badinput import assert_clear_error
from tests.ssm_inputs import diagonal_system, selective_inputs

F64 = torch.float64


def test_zoh_is_the_exact_solution_over_one_step(device):
    # h' = a h + b x with x held over [0, dt]: exp([[a, b], [0, 0]] dt) is
    # [[a_bar, b_bar], [0, 1]]: the augmented system's matrix exponential gives both.
    A, B, _, _, delta = diagonal_system(3, 4, device)
    A_bar, B_bar = discretize_zoh(A, B, delta)
    M = torch.zeros(3, 4, 2, 2, dtype=F64, device=device)
    M[..., 0, 0], M[..., 0, 1] = A * delta[:, None], B * delta[:, None]
    exact = torch.linalg.matrix_exp(M)
    assert_same_math(A_bar, exact[..., 0, 0], n=8)
    assert_same_math(B_bar, exact[..., 0, 1], n=8)


def test_hippo_legs_matrix_by_its_definition():
    A, B = hippo_legs(5)
    for n in range(5):
        assert B[n] == math.sqrt(2 * n + 1)
        for k in range(5):
            want = (-math.sqrt((2 * n + 1) * (2 * k + 1)) if n > k
                    else -(n + 1) if n == k else 0.0)
            assert A[n, k] == pytest.approx(want, rel=1e-15)
    assert A.dtype == F64 and hippo_legs(1)[0].tolist() == [[-1.0]]


@pytest.mark.parametrize("N", [2, 7, 16])
def test_hippo_legs_is_normal_plus_rank_one(N):
    # A + P P^T = -I/2 + a skew-symmetric matrix (S4's NPLR form), P_n = sqrt(n + 1/2)
    A, _ = hippo_legs(N)
    P = (torch.arange(N, dtype=F64) + 0.5).sqrt()
    S = A + torch.outer(P, P)
    assert_same_math(S + S.T, -torch.eye(N, dtype=F64), n=4)
    assert_same_math(S @ S.T, S.T @ S, n=4 * N, scale=float(N * N))


def test_time_invariant_legs_responses_are_warped_legendre_polynomials():
    # e^{sA} B = sqrt(2n + 1) P_n(2 e^{-s} - 1) e^{-s} (Gu et al., 2023)
    A, B = hippo_legs(8)
    for s in (0.0, 0.3, 1.0, 4.0):
        response = torch.linalg.matrix_exp(s * A) @ B
        warped = legendre_basis(torch.tensor(2 * math.exp(-s) - 1, dtype=F64), 8) * math.exp(-s)
        assert_same_math(response, warped, n=64, scale=10.0)  # matrix_exp of an 8 x 8


@pytest.mark.parametrize(("N", "L", "step"), [(4, 1, 0.5), (16, 64, 0.1), (24, 333, 0.3), (32, 256, 0.01)])
def test_dplr_kernel_equals_the_dense_bilinear_kernel(N, L, step):
    # S4's algorithm (roots of unity, Woodbury, Cauchy sums, inverse FFT) against
    # K_k = C A_bar^k B_bar with HiPPO's dense A, bilinear rule, C~ = (I - A_bar^L)^T C
    A, B = hippo_legs(N)
    P = (torch.arange(N, dtype=F64) + 0.5).sqrt()
    Lambda, V = torch.linalg.eig(A + torch.outer(P, P))  # unitary V: the normal part
    eye = torch.eye(N, dtype=F64)
    A_bar = torch.linalg.solve(eye - step / 2 * A, eye + step / 2 * A)
    B_bar = torch.linalg.solve(eye - step / 2 * A, step * B)
    C = torch.randn(N, dtype=F64, generator=torch.Generator().manual_seed(N))
    dense = torch.stack([C @ torch.linalg.matrix_power(A_bar, k) @ B_bar for k in range(L)])
    C_tilde = (eye - torch.linalg.matrix_power(A_bar, L)).T @ C
    cplx = torch.complex128
    K = dplr_kernel(Lambda, V.mH @ P.to(cplx), V.mH @ B.to(cplx), V.T @ C_tilde.to(cplx), step, L)
    assert K.dtype == F64 and K.shape == (L,)
    assert_same_math(K, dense, n=4 * N * L)


def test_legendre_basis_against_numpy_and_orthonormal():
    x = torch.linspace(-1, 1, 41, dtype=F64)
    got = legendre_basis(x, 12)
    assert got.shape == (41, 12)
    for n in range(12):
        coef = np.zeros(n + 1)
        coef[n] = 1.0
        want = np.polynomial.legendre.legval(x.numpy(), coef) * math.sqrt(2 * n + 1)
        assert_same_math(got[:, n], torch.from_numpy(want), n=n + 1, scale=float(2 * n + 1))
    nodes, weights = np.polynomial.legendre.leggauss(16)  # exact for degree < 32
    V = legendre_basis(torch.from_numpy(nodes), 12)
    gram = V.T @ (torch.from_numpy(weights)[:, None] / 2 * V)
    assert_same_math(gram, torch.eye(12, dtype=F64), n=16, scale=30.0)
    assert legendre_basis(x, 1).shape == (41, 1) and legendre_basis(x[:3].view(3, 1), 2).shape == (3, 1, 2)


def test_legs_scan_first_step_and_the_projection(device):
    # step 1 by hand, t = 1/2: (I - A) c_1 = 2 B x_1
    A, B = hippo_legs(6)
    x = torch.tensor([0.7, -0.2, 0.4], dtype=F64, device=device)
    c = legs_scan(x, 6)
    assert c.shape == (3, 6)
    want = torch.linalg.solve(torch.eye(6, dtype=F64) - A, 2 * B * 0.7)
    assert_same_math(c[0].cpu(), want, n=6)
    # the state after T steps is the projection of the whole history (midpoint rule)
    T = 800
    t = torch.arange(T, dtype=F64, device=device) / T
    signal = torch.sin(2 * math.pi * 2.5 * t) + 0.5 * torch.cos(2 * math.pi * 1.2 * t + 1)
    z = (torch.arange(T, dtype=F64, device=device) + 0.5) / T * 2 - 1
    projection = legendre_basis(z, 24).T @ signal / T
    last = legs_scan(signal, 24)[-1]
    assert ((last - projection).norm() / projection.norm()).item() < 0.005
    redrawn = legendre_basis(z, 24) @ last
    assert ((redrawn - signal).norm() / signal.norm()).item() < 0.01


def test_legs_scan_is_linear_and_batched(device):
    x = torch.randn(3, 9, dtype=F64, device=device)
    batch = legs_scan(x, 5)
    assert batch.shape == (3, 9, 5)
    for i in range(3):
        assert_same_math(batch[i], legs_scan(x[i], 5), n=5 * 9)
    assert_same_math(legs_scan(2 * x[0] - x[1], 5), 2 * batch[0] - batch[1], n=5 * 9, scale=3.0)
    assert legs_scan(x.float(), 5).dtype == torch.float32


@pytest.mark.parametrize("T", [1, 6, 17])
def test_recurrent_and_convolutional_views_agree(T, device):
    A, B, C, D, delta = diagonal_system(3, 4, device)
    A_bar, B_bar = discretize_zoh(A, B, delta)
    x = torch.randn(2, T, 3, dtype=F64, device=device)
    K = ssm_kernel(A_bar, B_bar, C, T)
    assert K.shape == (3, T)
    assert_same_math(K[:, 0], (C * B_bar).sum(-1), n=4)
    for skip in (None, D):
        expected = ssm_recurrent(x, A_bar, B_bar, C, skip)
        assert_same_math(ssm_convolution(x, K, skip), expected, n=4 * T)
        assert_same_math(ssm_convolution(x, K, skip, fft=True), expected, n=4 * T)


def test_diagonal_ssm_layer_runs_both_views(device):
    layer = DiagonalSSM(3, d_state=5, dt_min=0.1, dt_max=1.0).to(device, F64)
    x = torch.randn(2, 11, 3, dtype=F64, device=device)
    expected = ssm_recurrent(x, *layer.discretize(), layer.C, layer.D)
    assert_same_math(layer(x), expected, n=55)


@pytest.mark.parametrize("T", [1, 5, 16, 19])
def test_selective_scan_loop_equals_the_scans(T, device):
    x, delta, A, B, C, D = selective_inputs(2, T, 3, 4, device)
    for skip in (None, D):
        expected = selective_scan(x, delta, A, B, C, skip)
        assert expected.shape == (2, T, 3)
        assert_same_math(selective_scan_parallel(x, delta, A, B, C, skip), expected,
                         n=4 * T)
        # log space: rounding grows with |sum Delta A| (at most 1.1 * 1.05 * T here)
        log_space = selective_scan_parallel(x, delta, A, B, C, skip, log_space=True)
        assert_same_math(log_space, expected, n=4 * T * T)


def test_selective_scan_with_constant_parameters_is_a_time_invariant_ssm(device):
    # Delta, B, C the same at every step: the SSM of section 1, discretised with
    # A_bar = exp(Delta A) and Mamba's Euler rule B_bar = Delta B.
    x, delta, A, B, C, D = selective_inputs(2, 7, 3, 4, device)
    delta = delta[:1, :1].expand(2, 7, 3)
    B, C = B[:1, :1].expand(2, 7, 4), C[:1, :1].expand(2, 7, 4)
    dt = delta[0, 0][:, None]                                  # (E, 1)
    C_lti = C[0, 0].expand(3, 4)                               # (E, N)
    expected = ssm_recurrent(x, torch.exp(dt * A), dt * B[0, 0], C_lti, D)
    assert_same_math(selective_scan(x, delta, A, B, C, D), expected, n=28)


def test_gradcheck_selective_scans():
    inputs = tuple(t.requires_grad_() for t in selective_inputs(1, 4, 2, 2, "cpu"))
    for fn in (selective_scan,
               lambda *a: selective_scan_parallel(*a),
               lambda *a: selective_scan_parallel(*a, log_space=True)):
        assert torch.autograd.gradcheck(fn, inputs)


def test_decay_mask_by_hand():
    a = torch.tensor([0.5, 0.25, 2.0], dtype=F64)
    expected = torch.tensor([[1.0, 0.0, 0.0],
                             [0.25, 1.0, 0.0],
                             [0.5, 2.0, 1.0]], dtype=F64)
    assert_same_math(decay_mask(a.log()), expected, n=3)


def test_decay_mask_is_stable_over_long_sequences():
    # float32: sums of log a reach -1000, but each entry is a short segment's own sum
    log_a = -torch.rand(2, 1000)
    L = decay_mask(log_a)
    assert torch.isfinite(L).all() and (L.diagonal(dim1=-2, dim2=-1) == 1).all()
    assert_close(L[:, 1:, :-1].diagonal(dim1=-2, dim2=-1), log_a[:, 1:].exp())
    assert_close(L, decay_mask(log_a.double()).float(), n=1000)


@pytest.mark.parametrize("T", [1, 7, 12])
def test_ssd_attention_form_equals_the_recurrence(T, device):
    x = torch.randn(2, 3, T, 5, dtype=F64, device=device)
    log_a = -torch.rand(2, 3, T, dtype=F64, device=device)
    B, C = (torch.randn(2, 3, T, 4, dtype=F64, device=device) for _ in range(2))
    expected = ssd_recurrent(x, log_a, B, C)
    assert_same_math(ssd_attention_form(x, log_a, B, C), expected, n=4 * T)
    # a = 1: unnormalised causal linear attention, queries C, keys B, values x
    zero = torch.zeros_like(log_a)
    plain = (C @ B.transpose(-2, -1)).tril() @ x
    assert_same_math(ssd_attention_form(x, zero, B, C), plain, n=4 * T)
    assert_same_math(ssd_recurrent(x, zero, B, C), plain, n=4 * T)


@pytest.mark.parametrize("chunk", [1, 3, 5, 12, 40])
@pytest.mark.parametrize("T", [1, 12])
def test_ssd_chunk_scan_equals_the_recurrence(T, chunk, device):
    # chunks that divide T, that leave a short last chunk, of one step and longer than T
    x = torch.randn(2, 3, T, 5, dtype=F64, device=device)
    log_a = -torch.rand(2, 3, T, dtype=F64, device=device)
    B, C = (torch.randn(2, 3, T, 4, dtype=F64, device=device) for _ in range(2))
    g = torch.randn(2, 3, T, 5, dtype=F64, device=device)
    inputs = [t.requires_grad_() for t in (x, log_a, B, C)]
    out = ssd_chunk_scan(*inputs, chunk)
    ref = ssd_recurrent(*inputs)
    assert_same_math(out, ref, n=4 * T)
    for got, want in zip(torch.autograd.grad(out, inputs, g),
                         torch.autograd.grad(ref, inputs, g), strict=True):
        assert_same_math(got, want, n=8 * T * T)


@pytest.mark.parametrize("cut", [1, 7, 12, 22])
def test_ssd_chunk_scan_in_pieces_equals_one_scan(cut, device):
    # a sequence read in two pieces, the second from the state the first left, gives the
    # outputs and the final state of one scan; the final state is the recurrence's h_T
    T = 23
    x = torch.randn(2, 3, T, 5, dtype=F64, device=device)
    log_a = -torch.rand(2, 3, T, dtype=F64, device=device)
    B, C = (torch.randn(2, 3, T, 4, dtype=F64, device=device) for _ in range(2))
    y, h = ssd_chunk_scan(x, log_a, B, C, 4, return_final_state=True)
    h_loop = torch.zeros(2, 3, 4, 5, dtype=F64, device=device)
    for t in range(T):
        h_loop = log_a[:, :, t, None, None].exp() * h_loop + B[:, :, t, :, None] * x[:, :, t, None, :]
    assert_same_math(h, h_loop, n=4 * T)
    first = [t[:, :, :cut] for t in (x, log_a, B, C)]
    second = [t[:, :, cut:] for t in (x, log_a, B, C)]
    y1, h1 = ssd_chunk_scan(*first, 5, return_final_state=True)
    y2, h2 = ssd_chunk_scan(*second, 3, initial_state=h1, return_final_state=True)
    assert_same_math(torch.cat([y1, y2], dim=2), y, n=4 * T)
    assert_same_math(h2, h, n=4 * T)
    assert_same_math(ssd_chunk_scan(*second, 3, initial_state=h1), y2, n=4 * T)


def test_gradcheck_ssd_chunk_scan_initial_state():
    x, log_a = torch.randn(1, 2, 5, 2, dtype=F64), -torch.rand(1, 2, 5, dtype=F64)
    B, C = torch.randn(1, 2, 5, 3, dtype=F64), torch.randn(1, 2, 5, 3, dtype=F64)
    h0 = torch.randn(1, 2, 3, 2, dtype=F64)
    inputs = tuple(t.requires_grad_() for t in (x, log_a, B, C, h0))

    def scan(x, log_a, B, C, h0):
        return ssd_chunk_scan(x, log_a, B, C, 2, initial_state=h0, return_final_state=True)

    assert torch.autograd.gradcheck(scan, inputs)


def test_ssd_chunk_scan_survives_long_inputs():
    # 4096 steps of gates near e^-1: the summed log-gates reach -4000, and only segment
    # sums are exponentiated, so nothing overflows
    x, log_a = torch.randn(1, 1, 4096, 2), -torch.rand(1, 1, 4096)
    B, C = torch.randn(1, 1, 4096, 3), torch.randn(1, 1, 4096, 3)
    y = ssd_chunk_scan(x, log_a, B, C, 64)
    assert torch.isfinite(y).all()
    assert_close(y[..., -100:, :], ssd_recurrent(x, log_a, B, C)[..., -100:, :], n=64)


def test_gradcheck_ssd():
    x, log_a = torch.randn(1, 1, 4, 2, dtype=F64), -torch.rand(1, 1, 4, dtype=F64)
    B, C = torch.randn(1, 1, 4, 2, dtype=F64), torch.randn(1, 1, 4, 2, dtype=F64)
    inputs = tuple(t.requires_grad_() for t in (x, log_a, B, C))
    assert torch.autograd.gradcheck(ssd_attention_form, inputs)


def test_mamba_block_is_causal_and_its_scans_agree(device):
    block = MambaBlock(8, d_state=4, d_conv=3).to(device, F64)
    u = torch.randn(2, 9, 8, dtype=F64, device=device)
    out = block(u)
    changed = u.clone()
    changed[:, 5:] += 1.0
    assert torch.equal(block(changed)[:, :5], out[:, :5])
    assert not torch.allclose(block(changed)[:, 5:], out[:, 5:])
    for scan in ("loop", "log"):
        block.scan = scan
        assert_same_math(block(u), out, n=200)


@pytest.mark.parametrize("sizes", [dict(d_conv=4), dict(d_conv=1, conv_bias=False),
                                   dict(d_conv=3, bias=True, expand=3, d_state=2)])
def test_mamba_block_steps_give_the_parallel_output(sizes, device):
    """Token by token, step computes what forward computes at once, and its state has
    the same size after any number of tokens."""
    torch.manual_seed(0)
    block = MambaBlock(8, **sizes).to(device, F64)
    u = torch.randn(2, 7, 8, dtype=F64, device=device)
    state, outs = None, []
    for t in range(u.shape[1]):
        out, state = block.step(u[:, t], state)
        outs.append(out)
        conv_state, h = state
        assert conv_state.shape == (2, block.d_inner, block.d_conv - 1)
        assert h.shape == (2, block.d_inner, block.d_state)
    assert_same_math(torch.stack(outs, dim=1), block(u), n=200)


def test_mamba_lm_steps_give_the_logits_of_forward(device):
    torch.manual_seed(0)
    model = MambaLM(11, 8, num_layers=2, d_state=4, init_std=0.5).to(device, F64)
    ids = torch.randint(11, (2, 9), device=device)
    logits, state = model(ids)
    assert logits.shape == (2, 9, 11) and state is None
    state, steps = None, []
    for t in range(ids.shape[1]):
        step_logits, state = model.step(ids[:, t], state)
        steps.append(step_logits)
    assert len(state) == 2
    assert_same_math(torch.stack(steps, dim=1), logits, n=400)
    for scan in ("parallel", "log"):
        for mixer in model.mixers:
            mixer.scan = scan
        assert_same_math(model(ids)[0], logits, n=400)


def test_mamba2_lm_steps_give_the_logits_of_forward(device):
    torch.manual_seed(0)
    model = MambaLM(11, 8, num_layers=2, d_state=3, init_std=0.5, mamba2=True, head_dim=4,
                    chunk_size=4).to(device, F64)
    assert all(isinstance(m, Mamba2Block) for m in model.mixers) and model.mamba2
    ids = torch.randint(11, (2, 9), device=device)
    logits, _ = model(ids)
    state, steps = None, []
    for t in range(ids.shape[1]):
        step_logits, state = model.step(ids[:, t], state)
        steps.append(step_logits)
    assert state[0][1].shape == (2, 4, 3, 4)  # (batch, H, N, P) per layer
    assert_same_math(torch.stack(steps, dim=1), logits, n=400)


def test_mamba_lm_trains_and_ties_its_head():
    model = MambaLM(11, 8, num_layers=2, d_state=4)
    ids = torch.randint(11, (3, 6))
    logits, _ = model(ids)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()
    assert all(p.grad is not None for p in model.parameters())
    block = sum(p.numel() for p in model.mixers[0].parameters())
    assert sum(p.numel() for p in model.parameters()) == 11 * 8 + 2 * (block + 8) + 8


# --- the peer: Hugging Face's MambaMixer -----------------------------------------

CONFIGS = {
    "default": {},
    "biases": {"use_bias": True, "use_conv_bias": False, "conv_kernel": 2},
    "long-kernel": {"conv_kernel": 6, "time_step_rank": 3, "expand": 3},
}


def mixer(device, **changes):
    """A random MambaMixer in float64, every parameter drawn from N(0, 0.3^2)."""
    mamba = pytest.importorskip("transformers.models.mamba.modeling_mamba")
    sizes = dict(hidden_size=8, state_size=4, expand=2, conv_kernel=4, time_step_rank=2,
                 num_hidden_layers=1, vocab_size=16)
    config = mamba.MambaConfig(**{**sizes, **changes})
    hf = mamba.MambaMixer(config, layer_idx=0).to(device, F64)
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.3)
    return hf


def outputs_and_gradients(module, u, g, names):
    """The output for ``u``, the gradients of <output, g> for u and the parameters."""
    u = u.detach().requires_grad_()
    out = module(u)
    params = dict(module.named_parameters())
    # T = 1 leaves A unused (h_1 = B_bar x_1): its gradient is zero
    grads = torch.autograd.grad(out, [u, *(params[n] for n in names)], g,
                                allow_unused=True, materialize_grads=True)
    return out, dict(zip(["input", *names], grads, strict=True))


def mixer_terms(hf, T):
    """The length of the sums behind one output (in_proj, conv, x_proj, dt_proj, the
    scan over T steps of N states, out_proj), twice for a gradient, plus B T more."""
    c = hf.config
    forward = (c.hidden_size + c.conv_kernel + 2 * c.intermediate_size
               + c.time_step_rank + T * c.state_size)
    return 2 * forward + 2 * T


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("T", [1, 9])
def test_from_hf_equals_mamba_mixer_in_float64(T, config, training, device,
                                                 monkeypatch):
    if importlib.util.find_spec("mamba_ssm") is not None:
        pytest.skip("mamba_ssm is installed: Hugging Face would run float32 kernels")
    hf = mixer(device, **config).train(training)
    u = torch.randn(2, T, 8, dtype=F64, device=device)
    g = torch.randn(2, T, 8, dtype=F64, device=device)
    names = [n for n, _ in hf.named_parameters()]
    ours = {scan: MambaBlock.from_hf(hf, scan=scan) for scan in ("parallel", "log",
                                                                  "loop")}
    results = {scan: outputs_and_gradients(m, u, g, names) for scan, m in ours.items()}
    # Hugging Face's reference path up-casts A_log, D, the Delta bias, B and x with
    # .float(), which for a float64 model rounds them to float32. With .float() made the
    # identity, both compute one float64 function, and must agree to float64 rounding.
    monkeypatch.setattr(torch.Tensor, "float", lambda self, *args, **kwargs: self)
    ref, ref_grads = outputs_and_gradients(hf, u, g, names)
    n = mixer_terms(hf, T)
    for scan, (out, grads) in results.items():
        block = ours[scan]
        assert block.training == training and block.A_log.dtype == F64
        assert block.A_log.device.type == device.type
        assert_same_math(out, ref, n=n, msg=scan)
        for name in ["input", *names]:
            assert_same_math(grads[name], ref_grads[name], n=n, msg=f"{scan}: {name}")


def test_from_hf_equals_the_unmodified_mixer_to_float32_rounding(device):
    hf = mixer(device)
    ours = MambaBlock.from_hf(hf)
    u = torch.randn(2, 9, 8, dtype=F64, device=device)
    g = torch.randn(2, 9, 8, dtype=F64, device=device)
    names = [n for n, _ in hf.named_parameters()]
    # Rule 3 of the policy: Hugging Face rounds A_log, D, the Delta bias, B and x to
    # float32 (see above), so the gap is float32 rounding, not float64's.
    assert_float32_rounding(ours, hf, u, g, names, mixer_terms(hf, 9))


def assert_float32_rounding(ours, hf, u, g, names, n):
    """Our block's output and gradients against Hugging Face's mixer's, to float32
    rounding of sums of n terms."""
    out, grads = outputs_and_gradients(ours, u, g, names)
    ref, ref_grads = outputs_and_gradients(hf, u, g, names)
    torch.testing.assert_close(out, ref, **tol(torch.float32, n))
    for name in ["input", *names]:
        scale = max(1.0, ref_grads[name].abs().max().item())
        torch.testing.assert_close(grads[name], ref_grads[name],
                                   **tol(torch.float32, n, scale), msg=name)


def test_from_hf_refuses_what_it_cannot_copy():
    hf = mixer("cpu")
    assert_clear_error(lambda: MambaBlock.from_hf(hf.config), "mixer", "MambaMixer",
                       "MambaConfig")
    hf.activation = "gelu"
    assert_clear_error(lambda: MambaBlock.from_hf(hf), "mixer", "SiLU", "'gelu'")


# --- the peer: Hugging Face's Mamba2Mixer ------------------------------------------

CONFIGS2 = {
    "default": {},
    "groups": {"n_groups": 4},
    "biases": {"use_bias": True, "use_conv_bias": False, "conv_kernel": 2},
    "wide": {"expand": 3, "head_dim": 6, "num_heads": 4, "n_groups": 2, "state_size": 3},
}


def mixer2(device, **changes):
    """A random Mamba2Mixer in float64, chunks of 4 steps, every parameter N(0, 0.3^2)."""
    mamba2 = pytest.importorskip("transformers.models.mamba2.modeling_mamba2")
    sizes = dict(hidden_size=8, state_size=4, expand=2, head_dim=4, num_heads=4, n_groups=1,
                 conv_kernel=4, chunk_size=4, num_hidden_layers=1, vocab_size=16)
    config = mamba2.Mamba2Config(**{**sizes, **changes})
    hf = mamba2.Mamba2Mixer(config, layer_idx=0).to(device, F64)
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.3)
    return hf


def mixer2_terms(hf, T):
    """The length of the sums behind one output (in_proj, conv, the chunked scan over T
    steps of N states, the norm, out_proj), twice for a gradient, plus B T more."""
    forward = (hf.hidden_size + hf.conv_kernel_size + 2 * hf.intermediate_size
               + T * hf.ssm_state_size)
    return 2 * forward + 2 * T


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("config", CONFIGS2.values(), ids=CONFIGS2.keys())
@pytest.mark.parametrize("T", [1, 10])
def test_mamba2_from_hf_equals_mamba2_mixer_in_float64(T, config, training, device,
                                                       monkeypatch):
    if importlib.util.find_spec("mamba_ssm") is not None:
        pytest.skip("mamba_ssm is installed: Hugging Face would run float32 kernels")
    hf = mixer2(device, **config).train(training)
    u = torch.randn(2, T, 8, dtype=F64, device=device)
    g = torch.randn(2, T, 8, dtype=F64, device=device)
    names = [n for n, _ in hf.named_parameters()]
    # chunks of 4 (Hugging Face's), 3 (a short last chunk) and T: the same function
    ours = {c: Mamba2Block.from_hf(hf, chunk_size=c) for c in (None, 3, T)}
    results = {c: outputs_and_gradients(m, u, g, names) for c, m in ours.items()}
    # Hugging Face's reference path computes the scan and the norm in float32 (.float(),
    # .to(torch.float32)); with both casts made the identity for a float64 tensor, the
    # two compute one float64 function and must agree to float64 rounding.
    to = torch.Tensor.to

    def keep_float64(self, *args, **kwargs):
        if self.dtype == F64 and (args[:1] == (torch.float32,)
                                  or kwargs.get("dtype") == torch.float32):
            return self
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "float", lambda self, *args, **kwargs: self)
    monkeypatch.setattr(torch.Tensor, "to", keep_float64)
    ref, ref_grads = outputs_and_gradients(hf, u, g, names)
    monkeypatch.undo()
    n = mixer2_terms(hf, T)
    for c, (out, grads) in results.items():
        block = ours[c]
        assert block.training == training and block.A_log.dtype == F64
        assert block.chunk_size == (4 if c is None else c)
        assert_same_math(out, ref, n=n, msg=f"chunks of {c}")
        for name in ["input", *names]:
            assert_same_math(grads[name], ref_grads[name], n=n, msg=f"chunks of {c}: {name}")


def test_mamba2_from_hf_equals_the_unmodified_mixer_to_float32_rounding(device):
    hf = mixer2(device, n_groups=2).float()
    ours = Mamba2Block.from_hf(hf)
    u = torch.randn(2, 10, 8, device=device)
    g = torch.randn(2, 10, 8, device=device)
    names = [n for n, _ in hf.named_parameters()]
    assert_float32_rounding(ours, hf, u, g, names, mixer2_terms(hf, 10))


def test_mamba2_from_hf_refuses_what_it_cannot_copy():
    hf = mixer2("cpu")
    assert_clear_error(lambda: Mamba2Block.from_hf(hf.norm), "mixer", "Mamba2Mixer",
                       "MambaRMSNormGated")
    hf.time_step_limit = (0.0, 0.1)
    assert_clear_error(lambda: Mamba2Block.from_hf(hf), "time_step_limit", "0.1")
    hf.activation = "gelu"
    assert_clear_error(lambda: Mamba2Block.from_hf(hf), "mixer", "SiLU", "'gelu'")


def test_mamba2_step_by_step_equals_the_forward_pass(device):
    torch.manual_seed(0)
    block = Mamba2Block(8, d_state=4, head_dim=4, n_groups=2, chunk_size=3)
    block = block.to(device, F64)
    u = torch.randn(2, 11, 8, dtype=F64, device=device)
    state, outs = None, []
    for t in range(11):
        out, state = block.step(u[:, t], state)
        outs.append(out)
    assert_same_math(torch.stack(outs, dim=1), block(u), n=64)
    assert state[0].shape == (2, 16 + 2 * 2 * 4, 3) and state[1].shape == (2, 4, 4, 4)


def test_mamba2_block_is_causal_and_its_chunks_change_nothing(device):
    torch.manual_seed(0)
    block = Mamba2Block(8, d_state=4, head_dim=4).to(device, F64)
    u = torch.randn(2, 9, 8, dtype=F64, device=device)
    out = block(u)
    changed = u.clone()
    changed[:, 5:] += 1.0
    assert_same_math(block(changed)[:, :5], out[:, :5], n=64)
    assert not torch.allclose(block(changed)[:, 5:], out[:, 5:])
    for c in (1, 2, 9, 20):
        block.chunk_size = c
        assert_same_math(block(u), out, n=64)
    # Mamba-2's initialisation: A in [1, 16], Delta = softplus(dt_bias) in [1e-3, 0.1]
    A = block.A_log.exp()
    assert ((A >= 1) & (A <= 16)).all()
    delta = torch.nn.functional.softplus(block.dt_bias)
    assert ((delta > 1e-3 * (1 - 1e-6)) & (delta < 0.1 * (1 + 1e-6))).all()
