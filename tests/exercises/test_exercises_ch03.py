"""Chapter 3's exercise checks (seqbook.exercises.ch03): each passes a right answer, calls the
untouched starter "not attempted" (the find-the-bug starter gets its bug named), and names what is
wrong in each typical wrong answer."""

import numpy as np
import torch
from test_exercise_cells import FIX_WORDS
from torch import nn

from seqbook import gating
from seqbook.exercises import check
from seqbook.gating import unrolled_weights
from seqbook.rnn import GRU, LSTM, RNN, GRUCell

BLOCKS = {"rnn": 1, "gru": 3, "lstm": 4}


def starter(*args):
    raise NotImplementedError  # your code here


# --- parameters ----------------------------------------------------------------------------------


def test_params():
    name = "ex-ch3-params"
    assert check(name, lambda cell, D, H: BLOCKS[cell] * (H * D + H * H + 2 * H))
    assert check(name, starter).status == "not attempted"
    assert "two, b_ih and b_hh" in check(
        name, lambda cell, D, H: BLOCKS[cell] * (H * D + H * H + H)).message
    assert "biases are missing" in check(
        name, lambda cell, D, H: BLOCKS[cell] * (H * D + H * H)).message
    three = {"rnn": 1, "gru": 3, "lstm": 3}
    assert "LSTM has 4 of them, got 3" in check(
        name, lambda cell, D, H: three[cell] * (H * D + H * H + 2 * H)).message
    assert "whole number" in check(name, lambda cell, D, H: "many").message
    # a count computed in floats, as a NumPy integer or a 0-d tensor is the same count
    assert check(name, lambda cell, D, H: BLOCKS[cell] * (H * D + H * H + 2.0 * H))
    assert check(name, lambda cell, D, H: np.int64(BLOCKS[cell] * (H * D + H * H + 2 * H)))
    assert check(name, lambda cell, D, H: torch.tensor(BLOCKS[cell] * (H * D + H * H + 2 * H)))
    assert "not a whole number" in check(
        name, lambda cell, D, H: BLOCKS[cell] * (H * D + H * H + 2 * H) + 0.5).message
    # a layer built and its parameters added up is no count (PyTorch's layers, cells, or ours)
    built = {
        "nn": lambda cell, D, H: getattr(torch.nn, cell.upper())(D, H),
        "nn cell": lambda cell, D, H: getattr(torch.nn, cell.upper() + "Cell")(D, H),
        "seqbook": lambda cell, D, H: {"rnn": RNN, "gru": GRU, "lstm": LSTM}[cell](D, H),
    }
    for make in built.values():
        assert "builds a layer" in check(
            name, lambda cell, D, H, make=make: sum(p.numel() for p in make(cell, D, H)
                                                     .parameters())).message


# --- find the bug: the gate order ----------------------------------------------------------------


def gru_step(x, h, weight_ih, weight_hh, bias_ih, bias_hh, order="rzn", reset="after",
             bias_inside=True, swap=False):
    parts_x = dict(zip(order, (x @ weight_ih.T + bias_ih).chunk(3, dim=-1), strict=True))
    parts_h = dict(zip(order, (h @ weight_hh.T + bias_hh).chunk(3, dim=-1), strict=True))
    W_hn = dict(zip(order, weight_hh.chunk(3), strict=True))["n"]
    b_hn = dict(zip(order, bias_hh.chunk(3), strict=True))["n"]
    z = torch.sigmoid(parts_x["z"] + parts_h["z"])
    r = torch.sigmoid(parts_x["r"] + parts_h["r"])
    if reset == "before":
        n = torch.tanh(parts_x["n"] + (r * h) @ W_hn.T + b_hn)
    elif not bias_inside:
        n = torch.tanh(parts_x["n"] + r * (h @ W_hn.T) + b_hn)
    else:
        n = torch.tanh(parts_x["n"] + r * parts_h["n"])
    return z * n + (1 - z) * h if swap else (1 - z) * n + z * h


def test_gate_order():
    name = "ex-ch3-gate-order"
    assert check(name, gru_step)
    # PyTorch's own step is right, but not a fix of the bug the exercise asks for
    assert "calls torch.gru_cell" in check(name, lambda x, h, *w: torch.gru_cell(x, h, *w)).message
    assert "one of the two chunk(3) lines only" in check(name, _one_line_fixed).message

    def book_cell(x, h, w_ih, w_hh, b_ih, b_hh):  # the book's own cell, weights copied in
        cell = GRUCell(w_ih.shape[1], w_hh.shape[1]).to(x.dtype)
        for p, w in zip(cell.parameters(), (w_ih, w_hh, b_ih, b_hh), strict=True):
            p.data.copy_(w)
        return cell(x, h)

    assert "calls seqbook.rnn.GRUCell's step" in check(name, book_cell).message
    assert check(name, starter).status == "not attempted"
    bug = check(name, lambda *a: gru_step(*a, order="zrn"))  # the starter's bug
    assert bug.status == "fail" and "differs from the one nn.GRU computes" in bug.message
    assert not FIX_WORDS.search(bug.message), bug.message  # the symptom, not the fix
    # right answers in float32 and in NumPy
    assert check(name, lambda *a: gru_step(*(t.float() for t in a)))
    assert check(name, lambda *a: gru_step(*a).numpy())
    assert "Cho et al." in check(name, lambda *a: gru_step(*a, reset="before")).message
    assert "scale b_hn too" in check(name, lambda *a: gru_step(*a, bias_inside=False)).message
    assert "swapped" in check(name, lambda *a: gru_step(*a, swap=True)).message
    assert "(B, H)" in check(name, lambda x, h, *w: x).message
    assert "differs from nn.GRU's" in check(name, lambda *a: gru_step(*a) + 0.1).message


# --- the Elman RNN as a GRU ----------------------------------------------------------------------


def as_elman(rnn, z_bias=-40.0, r_bias=40.0, block=2, zero_gates=True, dtype=None):
    H = rnn.hidden_size
    gru = GRU(rnn.input_size, H).to(dtype or rnn.cells[0].weight_ih.dtype)
    cell_g, cell_r = gru.cells[0], rnn.cells[0]
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            param = getattr(cell_g, name)
            if zero_gates:
                param.zero_()
            param[block * H:(block + 1) * H].copy_(getattr(cell_r, name))
        cell_g.bias_ih[H:2 * H] = z_bias
        cell_g.bias_ih[:H] = r_bias
    return gru


def test_elman():
    name = "ex-ch3-elman"
    assert check(name, as_elman)
    assert check(name, starter).status == "not attempted"
    assert "keeps its initial state" in check(name, lambda r: as_elman(r, z_bias=40.0)).message
    assert "reset gate is closed" in check(name, lambda r: as_elman(r, r_bias=-40.0)).message
    assert "almost" in check(name, lambda r: as_elman(r, z_bias=-8.0, r_bias=8.0)).message
    # the right structure with gates pinned by too small a bias: the outputs differ by 1e-2 or more
    for z_bias, r_bias in [(-5.0, 5.0), (-3.0, 3.0), (-40.0, 5.0), (-5.0, 40.0), (-1.0, 1.0)]:
        weak = check(name, lambda r, z=z_bias, b=r_bias: as_elman(r, z_bias=z, r_bias=b))
        assert weak.status == "fail" and "biases larger" in weak.message, (z_bias, r_bias)
    weak_f32 = check(name, lambda r: as_elman(r, z_bias=-5.0, r_bias=5.0, dtype=torch.float32))
    assert "biases larger" in weak_f32.message
    # biases of 10 in front of random gate weights: close, but the weights are not in place
    near = check(name, lambda r: as_elman(r, z_bias=-10.0, r_bias=10.0, zero_gates=False))
    assert near.status == "fail" and "almost" in near.message, near.message
    assert "weights are in their places" not in near.message
    assert "does not compute" in check(name, lambda r: as_elman(r, block=0)).message
    assert "GRU layer" in check(name, lambda r: r).message
    assert "nn.Module" in check(name, lambda r: 3).message
    # the gates pinned by their biases only: right for inputs of order 1, not for large ones
    loose = check(name, lambda r: as_elman(r, zero_gates=False))
    assert loose.status == "fail" and "large inputs" in loose.message
    # the review's case: random gate weights behind biases of hundreds pass inputs of 100
    for bias in (200.0, 1000.0):
        huge = check(name, lambda r, b=bias: as_elman(r, z_bias=-b, r_bias=b, zero_gates=False))
        assert huge.status == "fail" and "large inputs" in huge.message, huge.message
    # the reader's case: biases of a million beat the check's large inputs, but not every input
    million = check(name, lambda r: as_elman(r, z_bias=-1e6, r_bias=1e6, zero_gates=False))
    assert million.status == "fail" and "weights that are not 0" in million.message
    assert check(name, lambda r: as_elman(r, z_bias=-1e6, r_bias=1e6))  # zero gate weights
    # a GRU made in float32 (PyTorch's default) with the RNN's weights is right at its precision
    assert check(name, lambda r: as_elman(r, dtype=torch.float32))

    def torch_gru(rnn, **kwargs):
        ours = as_elman(rnn, **kwargs)
        ref = nn.GRU(rnn.input_size, rnn.hidden_size, batch_first=True).double()
        with torch.no_grad():
            for name_ in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(ref, f"{name_}_l0").copy_(getattr(ours.cells[0], name_))
        return ref

    assert check(name, torch_gru)

    def time_first(rnn):  # nn.GRU's default layout: (T, B, D)
        gru = torch_gru(rnn)
        gru.batch_first = False
        return gru

    assert "batch_first=True" in check(name, time_first).message
    weak_torch = check(name, lambda r: torch_gru(r, z_bias=-5.0, r_bias=5.0))
    assert "biases larger" in weak_torch.message

    def pinned_in_bias_hh(rnn):  # the pins in bias_hh rather than bias_ih
        gru = as_elman(rnn, z_bias=0.0, r_bias=0.0)
        H = rnn.hidden_size
        with torch.no_grad():
            gru.cells[0].bias_hh[:H] = 40.0
            gru.cells[0].bias_hh[H:2 * H] = -40.0
        return gru

    assert check(name, pinned_in_bias_hh)


# --- the unrolled GRU ----------------------------------------------------------------------------


def weights_loop(z, write=lambda z: 1 - z, own=False):
    B, T, H = z.shape
    w = torch.zeros(B, T, T, H, dtype=z.dtype)
    for t in range(T):
        for k in range(t + 1):
            w[:, t, k] = write(z[:, k]) * z[:, (k if own else k + 1):t + 1].prod(1)
    return w, z.cumprod(1)


def test_sum_to_one():
    name = "ex-ch3-sum-to-one"
    assert check(name, weights_loop)
    library = check(name, unrolled_weights)  # the statement asks for it without seqbook.gating
    assert library.status == "fail" and "calls seqbook.gating (unrolled_weights" in library.message
    assert "seqbook.gating" in check(name, lambda z: gating.unrolled_weights(z)).message
    assert check(name, starter).status == "not attempted"

    def float32_buffer(z):  # torch.zeros is float32: a right answer at float32's precision
        B, T, H = z.shape
        w = torch.zeros(B, T, T, H)
        for t in range(T):
            for k in range(t + 1):
                w[:, t, k] = (1 - z[:, k]) * z[:, k + 1:t + 1].prod(1)
        return w, z.cumprod(1)

    assert check(name, float32_buffer)
    assert check(name, lambda z: tuple(t.numpy() for t in weights_loop(z)))

    def by_recursion(z):  # w_(t,k) = z_t w_(t-1,k), w_(t,t) = 1 - z_t; initial = 1 - sum
        B, T, H = z.shape
        w = torch.zeros(B, T, T, H, dtype=z.dtype)
        for t in range(T):
            if t:
                w[:, t, :t] = z[:, t, None] * w[:, t - 1, :t]
            w[:, t, t] = 1 - z[:, t]
        return w, 1 - w.sum(2)

    assert check(name, by_recursion)

    def cumprod_ratio(z):  # the review's case: right while no gate is 0, NaN where one is
        keep = z.cumprod(1)  # (B, T, H)
        ratio = keep[:, :, None] / keep[:, None, :]  # [b, t, k] = prod_(j<=t) / prod_(j<=k)
        mask = torch.ones(z.shape[1], z.shape[1], dtype=torch.bool).tril()[None, :, :, None]
        return torch.where(mask, ratio * (1 - z)[:, None], 0.0), keep

    assert "NaN where a gate is exactly 0" in check(name, cumprod_ratio).message
    assert "includes z_k itself" in check(name, lambda z: weights_loop(z, own=True)).message
    assert "write factor is missing" in check(
        name, lambda z: weights_loop(z, write=torch.ones_like)).message
    assert "indexed [b, k, t]" in check(
        name, lambda z: (weights_loop(z)[0].transpose(1, 2), weights_loop(z)[1])).message

    def wrong_initial(z):
        return weights_loop(z)[0], z.cumprod(1) * 0.5

    assert "k > t" in check(name, lambda z: (weights_loop(z)[0] + 0.1, weights_loop(z)[1])).message
    assert "weights of h_0" in check(name, wrong_initial).message
    assert "(B, T, T, H)" in check(name, lambda z: (z, z)).message
    assert "pair" in check(name, lambda z: z).message


# --- the unrolled LSTM ---------------------------------------------------------------------------


def lstm_loop(f, i, gru_like=False, normalise=False):
    B, T, H = f.shape
    w = torch.zeros(B, T, T, H, dtype=f.dtype)
    for t in range(T):
        for k in range(t + 1):
            w[:, t, k] = ((1 - f[:, k]) if gru_like else i[:, k]) * f[:, k + 1:t + 1].prod(1)
    w0 = f.cumprod(1)
    if normalise:
        w = w / (w.sum(2, keepdim=True) + w0[:, :, None])
    return w, w0


def test_lstm_unroll():
    name = "ex-ch3-lstm-unroll"
    assert check(name, lstm_loop)
    assert check(name, starter).status == "not attempted"
    assert "GRU's weights" in check(name, lambda f, i: lstm_loop(f, i, gru_like=True)).message
    assert "normalised" in check(name, lambda f, i: lstm_loop(f, i, normalise=True)).message
    assert "(B, T, H)" in check(name, lambda f, i: (lstm_loop(f, i)[0], f[0])).message
    shifted = check(name, lambda f, i: (lstm_loop(f, i)[0], f.cumprod(1) * 0.5))
    assert "weights of c_0" in shifted.message and "h_0" not in shifted.message

    def log_space(f, i, floor=0.0):  # products as sums of logarithms, vectorised
        logf = torch.log(f.clamp_min(floor)).cumsum(1)  # (B, T, H): sum_{j<=t} log f_j
        t = torch.arange(f.shape[1])
        later = logf[:, :, None] - logf[:, None, :]  # [b, t, k]: sum_{k<j<=t} log f_j
        w = i[:, None] * torch.exp(later) * (t[None, :, None, None] >= t[None, None, :, None])
        return w, torch.exp(logf)

    assert check(name, lambda f, i: log_space(f, i, floor=1e-300))
    # a forget gate of exactly 0 makes log(0) - log(0) = NaN, as a ratio of cumprods does
    assert "NaN where a forget gate" in check(name, log_space).message

    def cumprod_ratio(f, i):  # prod_{k<j<=t} f_j as P_t / P_k: 0 / 0 after a zero gate
        P = f.cumprod(1)
        t = torch.arange(f.shape[1])
        w = i[:, None] * P[:, :, None] / P[:, None]
        return w * (t[None, :, None, None] >= t[None, None, :, None]), P

    assert "NaN where a forget gate" in check(name, cumprod_ratio).message

    def rescaled_gru(f, i):  # the GRU's weights times i_k / (1 - f_k): 0 / 0 where f_k = 1
        w, w0 = lstm_loop(f, i, gru_like=True)
        return w * (i / (1 - f))[:, None], w0

    assert "exactly 1" in check(name, rescaled_gru).message


def _one_line_fixed(x, h, w_ih, w_hh, b_ih, b_hh):  # the input's chunks fixed, the state's not
    r_i, z_i, n_i = (x @ w_ih.T + b_ih).chunk(3, dim=-1)
    z_h, r_h, n_h = (h @ w_hh.T + b_hh).chunk(3, dim=-1)
    z, r = torch.sigmoid(z_i + z_h), torch.sigmoid(r_i + r_h)
    n = torch.tanh(n_i + r * n_h)
    return (1 - z) * n + z * h
