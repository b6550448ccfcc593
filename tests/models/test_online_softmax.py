"""seqbook.online_softmax: the online softmax and tiled (FlashAttention) attention.

Same math as the plain softmax and as ``scaled_dot_product_attention`` in float64, for
tile sizes that divide the key length and tile sizes that do not, with and without the
causal mask; the same gradients; and the (T, S) score matrix never exists.
"""

import math

import pytest
import torch
from torch.overrides import TorchFunctionMode

from seqbook.attention import scaled_dot_product_attention
from seqbook.online_softmax import online_softmax, tiled_attention
from tests.badinput import assert_clear_error, floats
from tests.tolerance import assert_close, assert_same_math

F64 = torch.float64


def qkv(B, H, T, S, D, Dv, device, dtype=F64, grad=False):
    g = torch.Generator().manual_seed(T * 100 + S)
    q, k, v = (torch.randn(B, H, n, d, generator=g, dtype=dtype).to(device)
               for n, d in ((T, D), (S, D), (S, Dv)))
    return [t.requires_grad_(grad) for t in (q, k, v)]


# --- online softmax -------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 17), (2, 3, 40)])
def test_online_softmax_is_softmax(shape, device):
    x = 4 * torch.randn(shape, dtype=F64).to(device)
    assert_same_math(online_softmax(x), torch.softmax(x, dim=-1), n=shape[-1])


def test_online_softmax_masked_and_large_entries(device):
    x = torch.tensor([[-math.inf, -math.inf, 1.0, 2.0],  # masked first: no NaN
                      [1000.0, 1001.0, -math.inf, 999.0],  # exp(1000) would overflow
                      [-math.inf] * 4], dtype=F64, device=device)
    y = online_softmax(x)
    assert_same_math(y[:2], torch.softmax(x[:2], dim=-1), n=4)
    assert torch.isnan(y[2]).all() and torch.isnan(torch.softmax(x[2], -1)).all()


def test_online_softmax_float32(device):
    x = 3 * torch.randn(4, 50, device=device)
    assert_close(online_softmax(x), torch.softmax(x, dim=-1), n=50)


# --- tiled attention: same math as softmax attention ---------------------------------

S = 13  # tiles of 1, 3, 4, 5 and 6 leave a shorter last tile
TILES = [1, 3, 4, 5, 6, 13, 20]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("tile_size", TILES)
def test_tiled_attention_equals_attention(tile_size, causal, device):
    for T in (1, 9, S, 17):  # fewer, as many and more queries than keys
        q, k, v = qkv(2, 3, T, S, 8, 5, device)
        expected, _ = scaled_dot_product_attention(q, k, v, is_causal=causal)
        actual = tiled_attention(q, k, v, tile_size, causal=causal)
        assert actual.shape == (2, 3, T, 5)
        assert_same_math(actual, expected, n=8 + S)


def test_tiled_attention_scale_and_broadcast(device):
    q, _, _ = qkv(2, 3, 6, S, 4, 4, device)
    _, k, v = qkv(1, 3, 7, S, 4, 4, device)  # one batch of keys for both queries
    for scale in (0.0, 0.1, 2.5):
        expected, _ = scaled_dot_product_attention(q, k, v, scale=scale)
        assert_same_math(tiled_attention(q, k, v, 4, scale=scale), expected, n=4 + S)
    q3, k3, v3 = (t[0] for t in qkv(2, 1, 6, S, 4, 3, device))  # (H, T, D) layout
    expected, _ = scaled_dot_product_attention(q3, k3, v3, is_causal=True)
    assert_same_math(tiled_attention(q3, k3, v3, 5, causal=True), expected, n=4 + S)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_tiled_attention_gradients(causal, device):
    q, k, v = qkv(2, 2, 7, 10, 4, 3, device, grad=True)
    grad_out = torch.randn(2, 2, 7, 3, dtype=F64, device=device)
    out, _ = scaled_dot_product_attention(q, k, v, is_causal=causal)
    expected = torch.autograd.grad(out, (q, k, v), grad_out)
    tiled = tiled_attention(q, k, v, 3, causal=causal)
    actual = torch.autograd.grad(tiled, (q, k, v), grad_out)
    for a, e in zip(actual, expected, strict=True):
        assert_same_math(a, e, n=2 * (4 + 10))


def test_tiled_attention_gradcheck():
    q, k, v = qkv(1, 1, 3, 5, 2, 2, "cpu", grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, v: tiled_attention(q, k, v, 2, causal=True), (q, k, v))


def test_tiled_attention_float32(device):
    q, k, v = qkv(2, 2, 16, 33, 8, 8, device, dtype=torch.float32)
    expected, _ = scaled_dot_product_attention(q, k, v)
    assert_close(tiled_attention(q, k, v, 8), expected, n=8 + 33)


class LargestTensor(TorchFunctionMode):
    """Records the shapes of all tensors that torch functions return."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            self.shapes.append(tuple(out.shape))
        return out


def test_the_score_matrix_never_exists():
    T, S_long, tile, D = 16, 64, 8, 4
    q, k, v = qkv(1, 2, T, S_long, D, D, "cpu")
    with torch.no_grad(), LargestTensor() as seen:
        tiled_attention.__wrapped__(q, k, v, tile)
    assert max(math.prod(s) for s in seen.shapes) == 2 * T * tile  # one (T, tile) block
    with torch.no_grad(), LargestTensor() as seen:  # the probe does see a (T, S) one
        scaled_dot_product_attention(q, k, v)
    assert (1, 2, T, S_long) in seen.shapes


# --- bad input ------------------------------------------------------------------------

Q, K, V = floats(2, 5, 8), floats(2, 7, 8), floats(2, 7, 3)
ERRORS = [
    ("q-type", lambda: tiled_attention([[1.0]], K, V, 2), "q", "list"),
    ("q-rank", lambda: tiled_attention(floats(8), K, V, 2), "q", "(8,)"),
    ("q-int", lambda: tiled_attention(Q.long(), K, V, 2), "q", "int64"),
    ("q-empty", lambda: tiled_attention(floats(2, 0, 8), K, V, 2), "q", "(2, 0, 8)"),
    ("k-dim", lambda: tiled_attention(Q, floats(2, 7, 6), V, 2), "k", "(..., S, 8)",
     "(2, 7, 6)"),
    ("v-length", lambda: tiled_attention(Q, K, floats(2, 6, 3), 2), "v",
     "(..., 7, D_v)", "(2, 6, 3)"),
    ("dtype", lambda: tiled_attention(Q.double(), K, V, 2), "dtype", "float64",
     "float32"),
    ("batch", lambda: tiled_attention(Q, floats(3, 7, 8), floats(3, 7, 3), 2),
     "broadcast", "(2, 5, 8)", "(3, 7, 8)"),
    ("tile-zero", lambda: tiled_attention(Q, K, V, 0), "tile_size", ">= 1", "0"),
    ("tile-float", lambda: tiled_attention(Q, K, V, 2.0), "tile_size", "float"),
    ("causal", lambda: tiled_attention(Q, K, V, 2, causal=1), "causal", "int"),
    ("scale-type", lambda: tiled_attention(Q, K, V, 2, scale="1"), "scale", "str"),
    ("scale-nan", lambda: tiled_attention(Q, K, V, 2, scale=math.nan), "scale", "nan"),
    ("x-type", lambda: online_softmax([1.0, 2.0]), "x", "list"),
    ("x-int", lambda: online_softmax(torch.arange(3)), "x", "int64"),
    ("x-scalar", lambda: online_softmax(torch.tensor(1.0)), "x", "(..., N)", "()"),
    ("x-empty", lambda: online_softmax(floats(3, 0)), "x", "N >= 1", "(3, 0)"),
]


@pytest.mark.parametrize(
    "fn, words", [pytest.param(c[1], c[2:], id=c[0]) for c in ERRORS])
def test_bad_input_is_a_clear_error(fn, words):
    assert_clear_error(fn, *words)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device")
def test_inputs_on_two_devices_are_refused():
    assert_clear_error(lambda: tiled_attention(Q.cuda(), K, V, 2), "device", "cuda")
