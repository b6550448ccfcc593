"""Bad input for every public callable of ``seqbook.gating``: a clear error, or a correct edge result.

Cases: 43 rejected (each a ValueError/TypeError raised by seqbook that names the argument) and
8 legal edge checks in ``test_legal_edge_inputs``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from seqbook.data import adding_problem, first_token_task
from seqbook.gating import init_keep_bias, unroll, unrolled_weights
from seqbook.rnn import GRU, LSTM, RNN
from tests.badinput import assert_clear_error_in_time, table

Z = torch.rand(2, 5, 3, generator=torch.Generator().manual_seed(0))
N = torch.tanh(torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(1)))


def with_entry(x, value):
    x = x.clone()
    x.view(-1)[0] = value
    return x


ERRORS, case = table()
case("first_token_task-n-0", lambda: first_token_task(0, 5), "n must be", ">= 1", "0")
case("first_token_task-n-negative", lambda: first_token_task(-3, 5), "n must be", "-3")
case("first_token_task-n-float", lambda: first_token_task(2.0, 5), "n must be", "float")
case("first_token_task-n-bool", lambda: first_token_task(True, 5), "n must be", "bool")
case("first_token_task-length-0", lambda: first_token_task(2, 0), "length", "0")
case("first_token_task-length-inf", lambda: first_token_task(2, math.inf), "length", "float")
case("first_token_task-num_symbols-0", lambda: first_token_task(2, 5, num_symbols=0), "num_symbols", "0")
case("first_token_task-num_noise-negative", lambda: first_token_task(2, 5, num_noise=-1), "num_noise", "-1")
case("first_token_task-generator-int", lambda: first_token_task(2, 5, generator=0), "generator", "int")
case("adding_problem-n-0", lambda: adding_problem(0, 5), "n must be", "0")
case("adding_problem-n-str", lambda: adding_problem("4", 5), "n must be", "str")
case("adding_problem-length-1", lambda: adding_problem(4, 1), "length", ">= 2", "1")
case("adding_problem-length-float", lambda: adding_problem(4, 5.0), "length", "float")
case("adding_problem-generator-seed", lambda: adding_problem(4, 5, generator=7), "generator", "int")
case("init_keep_bias-RNN", lambda: init_keep_bias(RNN(2, 3)), "layer", "GRU or LSTM", "RNN")
case("init_keep_bias-torch-GRU", lambda: init_keep_bias(torch.nn.GRU(2, 3)), "layer", "GRU")
case("init_keep_bias-None", lambda: init_keep_bias(None), "layer", "NoneType")
case("init_keep_bias-no-biases", lambda: init_keep_bias(GRU(2, 3, bias=False)), "bias=False")
case("init_keep_bias-bias-nan", lambda: init_keep_bias(GRU(2, 3), math.nan), "bias", "nan")
case("init_keep_bias-bias-inf", lambda: init_keep_bias(LSTM(2, 3), math.inf), "bias", "inf")
case("init_keep_bias-bias-str", lambda: init_keep_bias(GRU(2, 3), "3"), "bias", "str")
case("init_keep_bias-bias-vector", lambda: init_keep_bias(GRU(2, 3), torch.ones(3)), "bias", "Tensor")
case("unrolled_weights-2d", lambda: unrolled_weights(torch.rand(4, 3)), "z", "(B, T, H)", "(4, 3)")
case("unrolled_weights-4d", lambda: unrolled_weights(torch.rand(1, 4, 3, 2)), "z", "(B, T, H)")
case("unrolled_weights-empty-T", lambda: unrolled_weights(torch.rand(2, 0, 3)), "z", "empty", "(2, 0, 3)")
case("unrolled_weights-empty-B", lambda: unrolled_weights(torch.rand(0, 4, 3)), "z", "empty")
case("unrolled_weights-int", lambda: unrolled_weights(torch.ones(2, 3, 4, dtype=torch.long)), "z",
     "floating-point", "torch.int64")
case("unrolled_weights-above-1", lambda: unrolled_weights(with_entry(Z, 1.5)), "z", "[0, 1]")
case("unrolled_weights-negative", lambda: unrolled_weights(with_entry(Z, -0.1)), "z", "[0, 1]")
case("unrolled_weights-nan", lambda: unrolled_weights(with_entry(Z, math.nan)), "z", "NaN")
case("unrolled_weights-list", lambda: unrolled_weights([[[0.5]]]), "z", "list")
case("unroll-z-2d", lambda: unroll(torch.rand(5, 3), torch.rand(5, 3)), "z and n", "(B, T, H)", "(5, 3)")
case("unroll-n-mismatch", lambda: unroll(Z, torch.rand(2, 5, 4)), "z and n", "(2, 5, 3) and (2, 5, 4)")
case("unroll-n-batch-mismatch", lambda: unroll(Z, torch.rand(3, 5, 3)), "z and n", "(3, 5, 3)")
case("unroll-n-int", lambda: unroll(Z, torch.ones(2, 5, 3, dtype=torch.long)), "n", "floating-point")
case("unroll-n-nan", lambda: unroll(Z, with_entry(N, math.nan)), "n", "finite")
case("unroll-n-None", lambda: unroll(Z, None), "n", "NoneType")
case("unroll-z-nan", lambda: unroll(with_entry(Z, math.nan), N), "z", "[0, 1]")
case("unroll-h0-shape", lambda: unroll(Z, N, torch.rand(2, 4)), "h0", "(2, 3)", "(2, 4)")
case("unroll-h0-3d", lambda: unroll(Z, N, torch.rand(1, 2, 3)), "h0", "(2, 3)", "(1, 2, 3)")
case("unroll-h0-int", lambda: unroll(Z, N, torch.ones(2, 3, dtype=torch.long)), "h0", "floating-point")
case("unroll-h0-inf", lambda: unroll(Z, N, torch.full((2, 3), math.inf)), "h0", "finite")
case("unroll-z-empty", lambda: unroll(torch.rand(2, 0, 3), torch.rand(2, 0, 3)), "z", "empty")


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly_in_time(fn, words):
    assert_clear_error_in_time(fn, *words, seconds=30)


def test_legal_edge_inputs():
    g = torch.Generator().manual_seed(0)
    ids, target = first_token_task(np.int64(3), np.int64(1), num_symbols=1, num_noise=1, generator=g)
    assert ids.shape == (3, 1) and target.tolist() == [0, 0, 0]
    x, y = adding_problem(1, 2, generator=g)  # the shortest sequence: one marker in each half
    assert x.shape == (1, 2, 2) and x[0, :, 1].tolist() == [1.0, 1.0]
    assert torch.allclose(y, x[0, :, 0].sum()[None])
    layer = init_keep_bias(GRU(2, 3), bias=np.float32(0.0))
    assert torch.all(layer.cells[0].bias_ih[3:6] == 0)
    assert init_keep_bias(LSTM(2, 3), bias=-2).cells[0].bias_ih[:3].tolist() == [2.0] * 3
    # gates exactly 0 and 1 are legal: 1 keeps h0 for ever, 0 takes the candidate
    z = torch.tensor([[[1.0], [0.0]]], dtype=torch.float64)
    n = torch.tensor([[[0.5], [-0.25]]], dtype=torch.float64)
    h = unroll(z, n, torch.tensor([[2.0]], dtype=torch.float64))
    assert h.dtype == torch.float64 and h.flatten().tolist() == [2.0, -0.25]
    w, w0 = unrolled_weights(Z.to(torch.bfloat16))
    assert w.dtype == w0.dtype == torch.bfloat16
    w, w0 = unrolled_weights(Z.to("meta"))  # no values to read on meta: the range check passes
    assert w.shape == (2, 5, 5, 3) and w0.device.type == "meta"
