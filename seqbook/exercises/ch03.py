"""Checks of chapter 3's exercises (gated recurrent units)."""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np
import torch
from torch import nn

from .. import gating, rnn
from ..gating import unrolled_weights
from ..rnn import GRU, LSTM, RNN, GRUCell
from ..utils import count_parameters
from .core import CallWatch, Wrong, as_tensor, call, close, exercise, expect, returned_pair, returned_tensor

F64 = torch.float64


# ---------------------------------------------------------------------------------------------
# The number of parameters of one recurrent layer.
# ---------------------------------------------------------------------------------------------

LAYERS = {"rnn": (RNN, 1), "gru": (GRU, 3), "lstm": (LSTM, 4)}
#: PyTorch's recurrent layers and cells, whose parameters a count must not read off
_LAYER_BUILDERS = {"nn.RNN / nn.GRU / nn.LSTM": nn.RNNBase.__init__,
                   "nn.RNNCell / nn.GRUCell / nn.LSTMCell": nn.modules.rnn.RNNCellBase.__init__}


@functools.cache
def _layer_params(cell: str, D: int, H: int) -> int:
    """The parameters of seqbook's layer, counted by count_parameters (an int, made once)."""
    return count_parameters(LAYERS[cell][0](D, H))


def _whole_number(n, what: str) -> int:
    """A count: an int, or a float, NumPy number or one-element tensor with a whole value."""
    if isinstance(n, bool) or not isinstance(n, numbers.Real | torch.Tensor | np.ndarray
                                             | np.generic):
        raise Wrong(f"{what} must be a whole number, got {type(n).__name__}")
    t = as_tensor(n, what)
    expect(t.numel() == 1 and t.dtype != torch.bool and not t.is_complex(),
           f"{what} must be one whole number, got {t.numel()} values of type {t.dtype}")
    value = float(t.reshape(()))
    expect(math.isfinite(value) and value == round(value),
           f"{what} is {value}, not a whole number: a count of parameters is whole")
    return round(value)


@exercise("ex-ch3-params", hints=[
    "Count one block first: the weights of one Elman update, W_ih (H x D) and W_hh (H x H), and "
    "its biases. Then count the blocks of each layer.",
    "PyTorch keeps two bias vectors per block, b_ih and b_hh, H numbers each. The RNN has one "
    "block, the GRU three (r, z, n) and the LSTM four (i, f, g, o).",
])
def check_params(recurrent_params):
    for D, H in [(7, 11), (32, 128), (1, 5)]:
        for cell, (_, blocks) in LAYERS.items():
            # a count, not a layer built and its parameters added up
            with CallWatch(_LAYER_BUILDERS, modules=[rnn]) as watch:
                n = call(recurrent_params, cell, D, H, what="recurrent_params")
            expect(not watch.used, "recurrent_params builds a layer (PyTorch's or seqbook's) "
                   "and adds up its parameters: count them from D and H instead")
            n = _whole_number(n, f"recurrent_params({cell!r}, {D}, {H})")
            ref = _layer_params(cell, D, H)
            if n == ref:
                continue
            one_block = H * D + H * H
            if n == blocks * (one_block + H):
                raise Wrong("one bias vector per block is missing: PyTorch keeps two, b_ih and "
                            "b_hh (their sum is the bias of the equations)")
            if n == blocks * one_block:
                raise Wrong("the biases are missing: each block has two bias vectors of H "
                            "numbers, b_ih and b_hh")
            if n % (one_block + 2 * H) == 0:
                raise Wrong(f"one block is right, but the {cell.upper()} has {blocks} of them, "
                            f"got {n // (one_block + 2 * H)}")
            raise Wrong(f"the count for the {cell.upper()} with D = {D}, H = {H} is not right: "
                        "count W_ih, W_hh and the two biases of one block, then the blocks")


# ---------------------------------------------------------------------------------------------
# Find the bug: one GRU step from PyTorch's stacked weights.
# ---------------------------------------------------------------------------------------------


def _gru_step(x, h, w_ih, w_hh, b_ih, b_hh, order="rzn", reset="after", bias_inside=True,
              keep="z", order_h=None):
    """One GRU step with one of the typical mistakes switched on (``order_h``: the order the
    state's blocks are unpacked in, when it differs from the input's)."""
    order_h = order if order_h is None else order_h
    gi = dict(zip(order, (x @ w_ih.T + b_ih).chunk(3, dim=-1), strict=True))
    w_hn = dict(zip(order_h, w_hh.chunk(3), strict=True))["n"]
    b_hn = dict(zip(order_h, b_hh.chunk(3), strict=True))["n"]
    gh = dict(zip(order_h, (h @ w_hh.T + b_hh).chunk(3, dim=-1), strict=True))
    z = torch.sigmoid(gi["z"] + gh["z"])
    r = torch.sigmoid(gi["r"] + gh["r"])
    if reset == "before":                                  # Cho et al.'s variant
        n = torch.tanh(gi["n"] + (r * h) @ w_hn.T + b_hn)
    elif not bias_inside:
        n = torch.tanh(gi["n"] + r * (h @ w_hn.T) + b_hn)
    else:
        n = torch.tanh(gi["n"] + r * gh["n"])
    return (1 - z) * n + z * h if keep == "z" else z * n + (1 - z) * h


_GRU_MISTAKES = [
    # the starter's bug: its message states the symptom only
    ({"order": "zrn"}, "the new state differs from the one nn.GRU computes with the same weights "
     "and inputs, although its shape and its range are right"),
    ({"reset": "before"}, "the reset gate multiplies h_(t-1) before W_hn, as in Cho et al.'s GRU; "
     "PyTorch (and eq. (3.3)) applies it to W_hn h_(t-1) + b_hn"),
    ({"bias_inside": False}, "the reset gate must scale b_hn too: it multiplies the whole "
     "W_hn h_(t-1) + b_hn"),
    ({"keep": "1-z"}, "z and 1 - z are swapped: in eq. (3.4) z = 1 keeps h_(t-1) and z = 0 writes "
     "the candidate"),
    *(({"order": a, "order_h": b}, "the order is fixed in one of the two chunk(3) lines only: the "
       "input's blocks and the state's blocks are both stacked as (r, z, n)")
      for a, b in (("rzn", "zrn"), ("zrn", "rzn"))),
]

#: what ex-ch3-gate-order's answer may not call: PyTorch's own GRU step, and the book's
_GRU_KERNELS = {"torch.gru_cell (what nn.GRUCell runs)": torch._VF.gru_cell,
                "nn.GRU's kernel": torch._VF.gru,
                "seqbook.rnn.GRUCell's step": GRUCell.step}


@exercise("ex-ch3-gate-order", hints=[
    "The function gives a result of the right shape, so the arithmetic runs; compare which rows "
    "of the stacked weights it uses for which gate with what the chapter says about PyTorch's "
    "layout.",
    "PyTorch stacks the three blocks as (r, z, n): the first H rows belong to the reset gate, the "
    "next H to the update gate. The chunk(3) lines must unpack them in that order.",
])
def check_gate_order(gru_step):
    torch.manual_seed(0)
    ref = nn.GRU(5, 4, batch_first=True).double()
    weights = [ref.weight_ih_l0, ref.weight_hh_l0, ref.bias_ih_l0, ref.bias_hh_l0]
    weights = [w.detach().clone() for w in weights]
    g = torch.Generator().manual_seed(1)
    x, h = torch.randn(3, 5, generator=g, dtype=F64), torch.randn(3, 4, generator=g, dtype=F64)
    with torch.no_grad(), CallWatch(_GRU_KERNELS) as watch:
        out = returned_tensor(call(gru_step, x.clone(), h.clone(), *(w.clone() for w in weights),
                           what="gru_step"), "gru_step")
    if watch.used:
        raise Wrong(f"gru_step calls {watch.used[0]}: the exercise asks for the step written out, "
                    "gate by gate, from the stacked weights")
    with torch.no_grad():
        expected = ref(x[:, None], h[None])[1][0]           # h_1 (B, H)
    expect(out.shape == expected.shape, f"gru_step must return the new state of shape (B, H) = "
           f"{tuple(expected.shape)}, got {tuple(out.shape)}")
    if close(out, expected, n=16):
        return
    for variant, message in _GRU_MISTAKES:
        if close(out, _gru_step(x, h, *weights, **variant), n=16):
            raise Wrong(message)
    raise Wrong("the new state differs from nn.GRU's: check each gate against eqs. (3.1)-(3.4) "
                "and the (r, z, n) layout of the stacked weights")


# ---------------------------------------------------------------------------------------------
# The Elman RNN as a GRU.
# ---------------------------------------------------------------------------------------------


def _gru_tensors(gru: nn.Module):
    """(weight_ih, weight_hh, bias_ih, bias_hh) of a one-layer GRU (seqbook's or nn.GRU), float64,
    or None where the layer has no such parameters."""
    try:
        cell = gru.cells[0] if isinstance(gru, GRU) else None
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        found = [getattr(cell, n) if cell is not None else getattr(gru, f"{n}_l0") for n in names]
    except (AttributeError, IndexError, TypeError):
        return None
    if not all(isinstance(t, torch.Tensor) for t in found):
        return None
    return [t.detach().to(F64) for t in found]


def _gates_pinned_weakly(gru: nn.Module, rnn: RNN) -> bool:
    """Whether the GRU has the right structure (gates' weights 0, the RNN's weights in the
    candidate block) with z held below 1/2 and r above 1/2 by biases too small to pin them."""
    found = _gru_tensors(gru)
    if found is None:
        return False
    w_ih, w_hh, b_ih, b_hh = found
    H = rnn.hidden_size
    if w_ih.shape != (3 * H, rnn.input_size) or w_hh.shape != (3 * H, H):
        return False
    cell = rnn.cells[0]
    same = functools.partial(torch.allclose, atol=1e-6)
    gates_free = not w_ih[:2 * H].any() and not w_hh[:2 * H].any()
    candidate = (same(w_ih[2 * H:], cell.weight_ih) and same(w_hh[2 * H:], cell.weight_hh)
                 and same(b_ih[2 * H:] + b_hh[2 * H:], cell.bias_ih + cell.bias_hh))
    bias = b_ih[:2 * H] + b_hh[:2 * H]  # the gates' total biases: r then z
    return gates_free and candidate and bool((bias[:H] > 0).all() and (bias[H:] < 0).all())


@exercise("ex-ch3-elman", hints=[
    "Look at eqs. (3.3) and (3.4) one at a time: for which value of z_t is h_t the candidate "
    "itself, and for which value of r_t is the candidate an Elman step?",
    "A gate is pinned to 0 or 1 by a large bias: sigma(-40) and sigma(40) are within 1e-17 of 0 "
    "and 1. The rest of its pre-activation, W x + W h, must not move it, for any input: the "
    "gate's own weights must be 0. The biases of a block live in bias_ih (and bias_hh).",
    "The cell's weights are stacked (r, z, n): copy the RNN's weight_ih, weight_hh, bias_ih and "
    "bias_hh into the third block of the GRU's, zero the weights of the first (r) and the second "
    "(z) block, and set their biases to +40 and -40.",
])
def check_elman(gru_as_elman):
    torch.manual_seed(0)  # the RNN's weights (check restores the global random state)
    rnn = RNN(3, 5, nonlinearity="tanh").double()
    gru = call(gru_as_elman, rnn, what="gru_as_elman")
    expect(isinstance(gru, nn.Module), f"gru_as_elman must return a GRU layer (an nn.Module), "
           f"got {type(gru).__name__}")
    expect(isinstance(gru, (GRU, nn.GRU)), f"gru_as_elman must return a GRU layer, got "
           f"{type(gru).__name__}")
    expect(not isinstance(gru, nn.GRU) or gru.batch_first, "an nn.GRU reads (T, B, D) unless it "
           "is built with batch_first=True; the RNN, like every layer of the book, reads (B, T, D)")
    dtype = next(gru.parameters()).dtype  # a float32 GRU is judged at float32's precision
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 8, 3, generator=g, dtype=F64)
    h0 = torch.randn(1, 2, 5, generator=g, dtype=F64)
    # the gates' W x is large here (a bias of hundreds with random gate weights fails the second)
    large = [scale * torch.randn(2, 8, 3, generator=g, dtype=F64) for scale in (100, 1e6)]
    with torch.no_grad():
        out = call(gru, x.to(dtype), h0.to(dtype), what="your GRU")[0]
        expected = rnn(x, h0)[0]
        expect(out.shape == expected.shape, f"the GRU's output must have the RNN's shape "
               f"{tuple(expected.shape)}, got {tuple(out.shape)}: same input and hidden size")
        if close(out, expected, n=8):
            for x_large in large:
                out_large = call(gru, x_large.to(dtype), h0.to(dtype), what="your GRU")[0]
                expect(close(out_large, rnn(x_large, h0)[0], n=8),
                       "the GRU computes the RNN's states on inputs of order 1, but not on large "
                       f"inputs (entries of about {x_large.abs().mean():.0g}): there the rest of "
                       "a gate's pre-activation, W x + W h, outweighs its bias and moves the "
                       "gate. The gates must hold for any input, whatever their bias: what "
                       "else in a gate's pre-activation can you set?")
            found = _gru_tensors(gru)
            H = rnn.hidden_size
            if found is not None and (found[0][:2 * H].any() or found[1][:2 * H].any()):
                raise Wrong("the GRU computes the RNN's states on these inputs, but its gates "
                            "have weights that are not 0: on inputs larger still, W x + W h "
                            "outweighs any bias and moves the gates. The gates must hold for "
                            "any input")
            return
        if torch.allclose(out, h0[0][:, None].expand_as(out).to(dtype), atol=1e-6):
            raise Wrong("the GRU keeps its initial state: its update gate is open (z = 1) and "
                        "never writes. The update gate is the second block of PyTorch's (r, z, n)")
        cut = RNN(3, 5, nonlinearity="tanh").double()
        cut.cells[0].weight_ih.copy_(rnn.cells[0].weight_ih)
        cut.cells[0].bias_ih.copy_(rnn.cells[0].bias_ih)
        cut.cells[0].weight_hh.zero_()
        cut.cells[0].bias_hh.zero_()
        no_memory = cut(x, h0)[0]
    if torch.allclose(out.to(F64), no_memory, atol=1e-6):
        raise Wrong("the candidate ignores h_(t-1): the reset gate is closed (r = 0); it must be "
                    "open (r = 1), so the candidate is the full Elman step")
    if _gates_pinned_weakly(gru, rnn):
        raise Wrong("almost: the weights are in their places, but the gates are not quite 0 and "
                    "1, so the outputs differ. Make the gates' biases larger")
    if torch.allclose(out.to(F64), expected, atol=1e-2):
        raise Wrong("almost: the outputs are close to the RNN's, but not equal: a gate is not "
                    "quite 0 or 1 (what holds it there: its bias, and what else in its "
                    "pre-activation?), or the candidate's weights or the precision differ")
    raise Wrong("the GRU does not compute the RNN's states: z must be 0, r must be 1, and the "
                "candidate block (n, the third) must hold the RNN's weights and biases")


# ---------------------------------------------------------------------------------------------
# The weights of the unrolled GRU, eq. (3.7).
# ---------------------------------------------------------------------------------------------


def _unrolled(write: torch.Tensor, keep: torch.Tensor, with_own: bool = False):
    """w[b, t, k] = write_k * prod_{j=k+1..t} keep_j (k <= t), w0 = prod_{j<=t} keep_j, by loops."""
    B, T, H = keep.shape
    w = torch.zeros(B, T, T, H, dtype=keep.dtype)
    for t in range(T):
        for k in range(t + 1):
            start = k if with_own else k + 1
            w[:, t, k] = write[:, k] * keep[:, start:t + 1].prod(dim=1)
    return w, keep.cumprod(dim=1)


def _check_weights_shape(w, w0, B, T, H, what):
    expect(w.shape == (B, T, T, H), f"{what}: the weights must have shape (B, T, T, H) = "
           f"{(B, T, T, H)}, indexed [b, t, k, unit]; got {tuple(w.shape)}")
    expect(w0.shape == (B, T, H), f"{what}: the initial weights must have shape (B, T, H) = "
           f"{(B, T, H)}; got {tuple(w0.shape)}")


def _diagnose_weights(w, w0, ref, ref0, gate: str, write: str, variants,
                      initial: str = "h_0") -> None:
    """Name what is wrong in weights ``w`` (and ``w0``) against the reference."""
    T = w.shape[1]
    future = ~torch.ones(T, T, dtype=torch.bool).tril()
    if close(w.transpose(1, 2), ref, n=T):
        raise Wrong("the weights are indexed [b, k, t]: the first time index must be t, the step "
                    "of the state, the second k, the candidate's")
    if (w[:, future] != 0).any():
        raise Wrong("some weights with k > t are not 0: at step t the candidate of a later step "
                    "does not exist yet")
    for alt, message in variants:
        if close(w, alt, n=T):
            raise Wrong(message)
    if not close(w, ref, n=T):
        raise Wrong(f"the candidates' weights are not right: candidate k enters with {write} and "
                    f"then loses a factor {gate}_j at every later step j")
    raise Wrong(f"the weights of {initial} are not right: {initial} is kept by every gate, "
                f"{gate}_1 to {gate}_t")


@exercise("ex-ch3-sum-to-one", hints=[
    "Follow one candidate: n_k enters the state at step k with weight 1 - z_k, and every later "
    "step j multiplies what is left of it by z_j.",
    "w[b, t, k] = (1 - z_k) times the product of z_j for j = k+1 .. t (an empty product is 1), "
    "and 0 for k > t. h_0 is kept by every gate: its weight is the product of z_1 .. z_t, "
    "torch.cumprod along the time axis.",
])
def check_sum_to_one(gru_weights):
    g = torch.Generator().manual_seed(0)
    B, T, H = 2, 6, 3
    z = 0.05 + 0.9 * torch.rand(B, T, H, generator=g, dtype=F64)
    z[0, 2, 1] = 0.0  # a unit that overwrites itself completely at step 3
    with CallWatch(modules=[gating]) as watch:
        out = call(gru_weights, z.clone(), what="gru_weights")
    used = watch.used
    public = sorted(name for name in used if not name.startswith("_")) or sorted(used)
    expect(not used, f"gru_weights calls seqbook.gating ({', '.join(public)}): the exercise "
           "asks for the weights computed from the gates by your own code")
    w, w0 = returned_pair(out, "gru_weights", "(weights, initial)")
    _check_weights_shape(w, w0, B, T, H, "gru_weights")
    expect(not torch.isnan(torch.as_tensor(w)).any(), "the weights contain NaN where a gate is "
           "exactly 0 (z = 0 writes the candidate over the whole state): a ratio of cumulative "
           "products (or a difference of cumulative log-gates) gives 0 / 0 or -inf + inf there; "
           "multiply the gates of the steps after k instead")
    ref, ref0 = unrolled_weights(z)
    if close(w, ref, n=T) and close(w0, ref0, n=T):
        return
    variants = [
        (_unrolled(1 - z, z, with_own=True)[0], "the product of gates includes z_k itself: it "
         "runs over the steps after k, j = k+1 .. t; z_k already decided the write, as 1 - z_k"),
        (_unrolled(torch.ones_like(z), z)[0], "the write factor is missing: candidate n_k enters "
         "with weight 1 - z_k, eq. (3.4)"),
        (_unrolled(z, 1 - z)[0], "z and 1 - z are swapped: in eq. (3.4) z keeps the old state and "
         "1 - z writes the candidate"),
    ]
    _diagnose_weights(w, w0, ref, ref0, "z", "weight 1 - z_k", variants)


# ---------------------------------------------------------------------------------------------
# The LSTM's cell unrolled: weights that are not tied.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch3-lstm-unroll", hints=[
    "Substitute c_t = f_t c_(t-1) + i_t g_t into itself, as the chapter did for the GRU: g_k "
    "enters at step k with weight i_k and every later step multiplies it by its forget gate.",
    "w[b, t, k] = i_k times the product of f_j for j = k+1 .. t, and 0 for k > t; the weight of "
    "c_0 is the product of f_1 .. f_t. Nothing ties i_k to 1 - f_k.",
])
def check_lstm_unroll(lstm_weights):
    g = torch.Generator().manual_seed(0)
    B, T, H = 2, 6, 3
    f = 0.05 + 0.9 * torch.rand(B, T, H, generator=g, dtype=F64)
    i = 0.05 + 0.9 * torch.rand(B, T, H, generator=g, dtype=F64)
    f[0, 2, 1] = 0.0  # a unit that forgets everything at step 3
    f[1, 3, 0] = 1.0  # and one that keeps everything at step 4
    out = call(lstm_weights, f.clone(), i.clone(), what="lstm_weights")
    w, w0 = returned_pair(out, "lstm_weights", "(weights, initial)")
    _check_weights_shape(w, w0, B, T, H, "lstm_weights")
    nan = torch.isnan(torch.as_tensor(w))
    expect(not nan[1].any() or nan[0].any(), "the weights contain NaN where a forget gate is "
           "exactly 1 (f = 1 keeps the whole cell): an answer that divides by 1 - f (the GRU's "
           "weights rescaled) divides 0 by 0 there; write i_k in directly")
    expect(not nan.any(), "the weights contain NaN where a forget "
           "gate is exactly 0 (f = 0 forgets the whole cell): a ratio of cumulative products "
           "divides 0 by 0 there; multiply the gates of the steps after k instead")
    ref, ref0 = _unrolled(i, f)
    if close(w, ref, n=T) and close(w0, ref0, n=T):
        return
    gru_like = _unrolled(1 - f, f)[0]
    variants = [
        (gru_like, "these are the GRU's weights, with 1 - f_k as the write gate: the LSTM writes "
         "with its own input gate i_k, which is not tied to f_k"),
        (_unrolled(i, f, with_own=True)[0], "the product of forget gates includes f_k itself: it "
         "runs over the steps after k, j = k+1 .. t"),
        (ref / (ref.sum(2, keepdim=True) + ref0[:, :, None]), "the weights are normalised to sum "
         "to one; the LSTM's weights are not, and that is the point"),
    ]
    _diagnose_weights(w, w0, ref, ref0, "f", "weight i_k", variants, initial="c_0")
