"""seqbook.gating: memory tasks, the keep-bias initialisation and the unrolled GRU update."""

import math

import pytest
import torch
from tolerance import assert_close, assert_same_math
from torch import nn

from seqbook.data import adding_problem, first_token_task
from seqbook.gating import init_keep_bias, unroll, unrolled_weights
from seqbook.rnn import GRU, LSTM, RNN

# ---------------------------------------------------------------------------------------------
# Tasks.
# ---------------------------------------------------------------------------------------------


def test_first_token_task_layout():
    g = torch.Generator().manual_seed(0)
    ids, target = first_token_task(500, 12, num_symbols=5, num_noise=3, generator=g)
    assert ids.shape == (500, 12) and target.shape == (500,)
    assert ids.dtype == torch.long and target.dtype == torch.long
    assert torch.equal(ids[:, 0], target)
    assert target.min() >= 0 and target.max() <= 4
    assert set(target.tolist()) == set(range(5))               # every signal symbol occurs
    assert ids[:, 1:].min() >= 5 and ids[:, 1:].max() <= 7     # noise never repeats a signal id


def test_first_token_task_is_seeded():
    a = first_token_task(8, 6, generator=torch.Generator().manual_seed(3))
    b = first_token_task(8, 6, generator=torch.Generator().manual_seed(3))
    c = first_token_task(8, 6, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_adding_problem_targets_and_markers():
    x, y = adding_problem(300, 10, generator=torch.Generator().manual_seed(0))
    assert x.shape == (300, 10, 2) and y.shape == (300,)
    marks = x[..., 1]
    assert torch.equal(marks.sum(1), torch.full((300,), 2.0))
    assert torch.equal(marks[:, :5].sum(1), torch.ones(300))   # one marker in each half
    assert_close(y, (x[..., 0] * marks).sum(1), n=10)
    assert x[..., 0].min() >= 0 and x[..., 0].max() < 1
    # predicting the mean (1) leaves the variance of a sum of two uniforms, 1/6
    big_x, big_y = adding_problem(20000, 6, generator=torch.Generator().manual_seed(1))
    assert abs(((big_y - 1) ** 2).mean().item() - 1 / 6) < 0.01


@pytest.mark.parametrize("kwargs, match", [
    (dict(n=0, length=5), "n must be an int >= 1"),
    (dict(n=3, length=0), "length must be an int >= 1"),
    (dict(n=3, length=5, num_symbols=0), "num_symbols"),
])
def test_first_token_task_bad_sizes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        first_token_task(**kwargs)


def test_adding_problem_needs_two_steps():
    with pytest.raises(ValueError, match="length must be >= 2"):
        adding_problem(4, 1)


# ---------------------------------------------------------------------------------------------
# Keep-bias initialisation.
# ---------------------------------------------------------------------------------------------


def test_init_keep_bias_gru_sets_update_gate(device):
    torch.manual_seed(0)
    gru = GRU(3, 4, num_layers=2, bidirectional=True).to(device)
    init_keep_bias(gru, 2.0)
    x = torch.zeros(2, 3, 3, device=device)
    _, _, gates = gru(x, return_gates=True)
    # the first step sees x = 0 and h = 0: z is exactly sigmoid(b_iz + b_hz) = sigmoid(2)
    z_first = gates["z"][0, :, 0]                                # layer 0, forward, step 1
    assert_close(z_first, torch.full_like(z_first, 1 / (1 + math.exp(-2.0))), n=1)
    for cell in gru.cells:
        assert torch.all(cell.bias_hh[4:8] == 0)


def test_init_keep_bias_lstm_sets_forget_and_input(device):
    torch.manual_seed(0)
    lstm = init_keep_bias(LSTM(3, 5).to(device), 3.0)
    _, _, gates = lstm(torch.zeros(1, 1, 3, device=device), return_gates=True)
    s = 1 / (1 + math.exp(-3.0))
    assert_close(gates["f"][0, 0, 0], torch.full((5,), s, device=device), n=1)
    assert_close(gates["i"][0, 0, 0], torch.full((5,), 1 - s, device=device), n=1)


def test_init_keep_bias_rejects_other_layers():
    with pytest.raises(TypeError, match="GRU or LSTM"):
        init_keep_bias(RNN(2, 3))
    with pytest.raises(TypeError, match="GRU or LSTM"):
        init_keep_bias(nn.GRU(2, 3))
    with pytest.raises(ValueError, match="no biases"):
        init_keep_bias(GRU(2, 3, bias=False))


# ---------------------------------------------------------------------------------------------
# The unrolled update.
# ---------------------------------------------------------------------------------------------


def test_unrolled_weights_small_case_by_hand():
    z = torch.tensor([[[0.5], [0.25], [0.8]]])                  # (B=1, T=3, H=1)
    w, w0 = unrolled_weights(z)
    expected = torch.tensor([
        [0.5, 0.0, 0.0],                  # h1 = 0.5 n1 + 0.5 h0
        [0.5 * 0.25, 0.75, 0.0],          # h2 = 0.25 h1 + 0.75 n2
        [0.5 * 0.25 * 0.8, 0.75 * 0.8, 0.2],
    ])
    assert_close(w[0, :, :, 0], expected, n=3)  # products of up to 3 gates
    assert_close(w0[0, :, 0], torch.tensor([0.5, 0.125, 0.1]), n=3)


def test_unrolled_weights_sum_to_one_and_are_causal(device):
    g = torch.Generator().manual_seed(0)
    z = torch.rand(3, 7, 5, generator=g, dtype=torch.float64).to(device)
    w, w0 = unrolled_weights(z)
    assert w.shape == (3, 7, 7, 5) and w0.shape == (3, 7, 5)
    assert w.min() >= 0 and w0.min() >= 0
    assert_close(w.sum(2) + w0, torch.ones_like(w0), n=7 + 7)  # 7 products of up to 7 gates, summed
    upper = torch.ones(7, 7, dtype=torch.bool, device=device).triu(1)
    assert torch.all(w[:, upper] == 0)                           # no weight on future candidates


def test_unrolled_weights_extreme_gates():
    z = torch.tensor([[[1.0], [0.0], [1.0], [1.0]]])             # keep, overwrite, keep, keep
    w, w0 = unrolled_weights(z)
    assert_close(w[0, 3, :, 0], torch.tensor([0.0, 1.0, 0.0, 0.0]), n=4)
    assert_close(w0[0, :, 0], torch.tensor([1.0, 0.0, 0.0, 0.0]), n=4)
    assert torch.isfinite(w).all()


@pytest.mark.parametrize("with_h0", [False, True])
def test_unroll_reproduces_gru_states(device, with_h0):
    torch.manual_seed(0)
    ref = nn.GRU(4, 6, batch_first=True).to(device=device, dtype=torch.float64)
    gru = GRU.from_torch(ref)
    x = torch.randn(3, 9, 4, device=device, dtype=torch.float64)
    h0 = torch.randn(1, 3, 6, device=device, dtype=torch.float64) if with_h0 else None
    output, _, gates = gru(x, h0, return_gates=True)
    rebuilt = unroll(gates["z"][0], gates["n"][0], None if h0 is None else h0[0])
    n = 9 * (4 + 6)  # 9 steps, each summing D + H = 10 terms
    assert_same_math(rebuilt, output, n=n)
    assert_same_math(rebuilt, ref(x, h0)[0], n=n)


def test_unroll_gradients_match_the_recursion():
    torch.manual_seed(0)
    z = torch.rand(2, 5, 3, dtype=torch.float64, requires_grad=True)
    n = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)

    def recursion(z, n, h0):
        h, hs = h0, []
        for t in range(z.shape[1]):
            h = (1 - z[:, t]) * n[:, t] + z[:, t] * h
            hs.append(h)
        return torch.stack(hs, 1)

    weights = torch.randn(2, 5, 3, dtype=torch.float64)
    grads = torch.autograd.grad((unroll(z, n, h0) * weights).sum(), (z, n, h0))
    expected = torch.autograd.grad((recursion(z, n, h0) * weights).sum(), (z, n, h0))
    for a, b in zip(grads, expected, strict=True):
        assert_same_math(a, b, n=2 * 5)  # 5 steps forward and backward


@pytest.mark.parametrize("z, n, h0, match", [
    (torch.rand(5, 3), torch.rand(5, 3), None, r"z and n must both have shape \(B, T, H\)"),
    (torch.rand(2, 5, 3), torch.rand(2, 5, 4), None, r"got \(2, 5, 3\) and \(2, 5, 4\)"),
    (torch.rand(2, 5, 3), torch.rand(2, 5, 3), torch.rand(2, 4),
     r"h0 must have shape \(2, 3\), got \(2, 4\)"),
])
def test_unroll_bad_shapes(z, n, h0, match):
    with pytest.raises(ValueError, match=match):
        unroll(z, n, h0)


def test_unrolled_weights_bad_input():
    with pytest.raises(ValueError, match=r"z must have shape \(B, T, H\), got \(4, 3\)"):
        unrolled_weights(torch.rand(4, 3))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        unrolled_weights(torch.full((1, 2, 2), 1.5))
