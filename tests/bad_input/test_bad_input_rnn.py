"""Bad input for every public callable of ``seqbook.rnn``: a clear error, or a correct edge result.

Cases: 196 rejected (each a ValueError/TypeError raised by seqbook that names the argument; 4 of
them also checked to be TypeErrors) and 10 legal edge checks in ``test_legal_edge_inputs``. The
cells' ``step``/``project_*`` are the unchecked pieces of the time loop (documented); their checked
entry is ``forward``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from seqbook.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell, SequenceClassifier
from tests.badinput import BAD_FLAGS, assert_clear_error, table

X2, H2 = torch.randn(2, 3), torch.randn(2, 4)  # one step: (B, input_size), (B, hidden_size)
X3 = torch.randn(2, 5, 3)  # (B, T, input_size)
CELLS = {"RNNCell": RNNCell(3, 4), "GRUCell": GRUCell(3, 4)}
LSTM_CELL = LSTMCell(3, 4)
LAYERS = {"RNN": RNN(3, 4), "GRU": GRU(3, 4), "LSTM": LSTM(3, 4),
          "RNN-fast": RNN(3, 4, fast=True), "GRU-bi": GRU(3, 4, num_layers=2, bidirectional=True)}
CLF = SequenceClassifier(10, 3, hidden_size=4, embed_dim=5)
IDS = torch.tensor([[4, 5, 6], [7, 8, 9]])

ERRORS, case = table()


# --- constructors: RNNCell, GRUCell, LSTMCell, RNN, GRU, LSTM
for cls in (RNNCell, GRUCell, LSTMCell, RNN, GRU, LSTM):
    n = cls.__name__
    case(f"{n}-input_size-0", lambda c=cls: c(0, 4), "input_size", ">= 1", "0")
    case(f"{n}-input_size-float", lambda c=cls: c(3.0, 4), "input_size", "float")
    case(f"{n}-hidden_size-negative", lambda c=cls: c(3, -4), "hidden_size", "-4")
    case(f"{n}-hidden_size-bool", lambda c=cls: c(3, True), "hidden_size", "bool")
    case(f"{n}-hidden_size-None", lambda c=cls: c(3, None), "hidden_size", "NoneType")
    case(f"{n}-bias-str", lambda c=cls: c(3, 4, bias="no"), "bias", "str")
for cls in (RNN, GRU, LSTM):
    n = cls.__name__
    case(f"{n}-num_layers-0", lambda c=cls: c(3, 4, num_layers=0), "num_layers", "0")
    case(f"{n}-num_layers-float", lambda c=cls: c(3, 4, num_layers=2.0), "num_layers", "float")
    case(f"{n}-dropout-1", lambda c=cls: c(3, 4, dropout=1.0), "dropout", "1.0")
    case(f"{n}-dropout-negative", lambda c=cls: c(3, 4, dropout=-0.1), "dropout", "-0.1")
    case(f"{n}-dropout-nan", lambda c=cls: c(3, 4, dropout=math.nan), "dropout", "nan")
    case(f"{n}-dropout-str", lambda c=cls: c(3, 4, dropout="0.1"), "dropout", "str")
    case(f"{n}-bidirectional-int", lambda c=cls: c(3, 4, bidirectional=2), "bidirectional", "int")
    case(f"{n}-fast-str", lambda c=cls: c(3, 4, fast="yes"), "fast", "str")
case("RNNCell-nonlinearity", lambda: RNNCell(3, 4, nonlinearity="sigmoid"), "nonlinearity", "'sigmoid'")
case("RNN-nonlinearity", lambda: RNN(3, 4, nonlinearity="gelu"), "nonlinearity", "'gelu'")

# --- cell forward(x, h)
for n, cell in CELLS.items():
    case(f"{n}.forward-x-3d", lambda c=cell: c(X3, H2), "x", "(B, 3)", "(2, 5, 3)")
    case(f"{n}.forward-x-wrong-features", lambda c=cell: c(torch.randn(2, 4), H2), "x", "(B, 3)", "(2, 4)")
    case(f"{n}.forward-x-empty", lambda c=cell: c(torch.randn(0, 3), H2[:0]), "x", "empty")
    case(f"{n}.forward-x-list", lambda c=cell: c([[0.0] * 3], H2), "x", "list")
    case(f"{n}.forward-x-int", lambda c=cell: c(X2.long(), H2), "x", "floating-point", "torch.int64")
    case(f"{n}.forward-x-float64", lambda c=cell: c(X2.double(), H2), "x", "torch.float32", "torch.float64")
    case(f"{n}.forward-h-batch", lambda c=cell: c(X2, torch.randn(3, 4)), "h must", "(2, 4)", "(3, 4)")
    case(f"{n}.forward-h-size", lambda c=cell: c(X2, torch.randn(2, 5)), "h must", "(2, 4)", "(2, 5)")
    case(f"{n}.forward-h-float16", lambda c=cell: c(X2, H2.half()), "h must", "torch.float16")
    case(f"{n}.forward-h-None", lambda c=cell: c(X2, None), "h must", "NoneType")
case("LSTMCell.forward-state-tensor", lambda: LSTM_CELL(X2, H2), "state", "pair", "Tensor")
case("LSTMCell.forward-state-triple", lambda: LSTM_CELL(X2, (H2, H2, H2)), "state", "pair")
case("LSTMCell.forward-state-c-shape", lambda: LSTM_CELL(X2, (H2, torch.randn(2, 5))), "state[1]", "(2, 4)",
     "(2, 5)")
case("LSTMCell.forward-state-h-int", lambda: LSTM_CELL(X2, (H2.long(), H2)), "state[0]", "floating-point")
case("LSTMCell.forward-x-wrong-features", lambda: LSTM_CELL(torch.randn(2, 2), (H2, H2)), "x", "(B, 3)")
case("LSTMCell.forward-x-float64", lambda: LSTM_CELL(X2.double(), (H2, H2)), "x", "torch.float64")

# --- layer forward(x, h0)
for n, layer in LAYERS.items():
    case(f"{n}.forward-x-2d", lambda m=layer: m(X2), "x", "(B, T, 3)", "(2, 3)")
    case(f"{n}.forward-x-4d", lambda m=layer: m(X3[None]), "x", "(B, T, 3)", "(1, 2, 5, 3)")
    case(f"{n}.forward-x-features", lambda m=layer: m(torch.randn(2, 5, 4)), "x", "(B, T, 3)", "(2, 5, 4)")
    case(f"{n}.forward-x-T-0", lambda m=layer: m(torch.randn(2, 0, 3)), "x", "time step", "(2, 0, 3)")
    case(f"{n}.forward-x-B-0", lambda m=layer: m(torch.randn(0, 5, 3)), "x", "one sequence", "(0, 5, 3)")
    case(f"{n}.forward-x-int", lambda m=layer: m(X3.long()), "x", "floating-point", "torch.int64")
    case(f"{n}.forward-x-float64", lambda m=layer: m(X3.double()), "x", "torch.float32", "torch.float64")
    case(f"{n}.forward-x-bfloat16", lambda m=layer: m(X3.bfloat16()), "x", "torch.bfloat16")
    case(f"{n}.forward-x-numpy", lambda m=layer: m(X3.numpy()), "x", "ndarray")
for n in ("RNN", "GRU", "RNN-fast"):
    layer = LAYERS[n]
    case(f"{n}.forward-h0-batch", lambda m=layer: m(X3, torch.zeros(1, 3, 4)), "h0", "(1, 2, 4)", "(1, 3, 4)")
    case(f"{n}.forward-h0-2d", lambda m=layer: m(X3, torch.zeros(2, 4)), "h0", "(1, 2, 4)", "(2, 4)")
    case(f"{n}.forward-h0-float64", lambda m=layer: m(X3, torch.zeros(1, 2, 4, dtype=torch.float64)), "h0",
         "torch.float64")
    case(f"{n}.forward-h0-int", lambda m=layer: m(X3, torch.zeros(1, 2, 4, dtype=torch.long)), "h0",
         "floating-point")
    case(f"{n}.forward-h0-list", lambda m=layer: m(X3, [[0.0]]), "h0", "list")
case("GRU-bi.forward-h0-layers", lambda: LAYERS["GRU-bi"](X3, torch.zeros(2, 2, 4)), "h0", "(4, 2, 4)",
     "(2, 2, 4)")
case("LSTM.forward-h0-tensor", lambda: LAYERS["LSTM"](X3, torch.zeros(1, 2, 4)), "h0", "pair")
case("LSTM.forward-h0-c-shape", lambda: LAYERS["LSTM"](X3, (torch.zeros(1, 2, 4), torch.zeros(1, 2, 5))),
     "h0[1]", "(1, 2, 4)", "(1, 2, 5)")
case("LSTM.forward-h0-h-float64",
     lambda: LAYERS["LSTM"](X3, (torch.zeros(1, 2, 4).double(), torch.zeros(1, 2, 4))),
     "h0[0]", "torch.float64")

# --- from_torch(m, fast), torch_parameter(name)
case("GRU.from_torch-lstm", lambda: GRU.from_torch(nn.LSTM(3, 4)), "m must be", "nn.GRU", "LSTM")
case("RNN.from_torch-None", lambda: RNN.from_torch(None), "m must be", "NoneType")
case("LSTM.from_torch-proj_size", lambda: LSTM.from_torch(nn.LSTM(3, 4, proj_size=2)), "proj_size", "2")
case("LSTM.from_torch-fast-str", lambda: LSTM.from_torch(nn.LSTM(3, 4), fast="no"), "fast", "str")
case("GRU.torch_parameter-unknown", lambda: LAYERS["GRU"].torch_parameter("weight_hh_l1"), "name",
     "'weight_hh_l1'")
case("GRU.torch_parameter-int", lambda: LAYERS["GRU"].torch_parameter(0), "name", "int")

# --- SequenceClassifier(vocab_size, num_classes, ...) and its forward(ids)
case("SequenceClassifier-vocab_size-0", lambda: SequenceClassifier(0, 3), "vocab_size", "0")
case("SequenceClassifier-num_classes-0", lambda: SequenceClassifier(10, 0), "num_classes", "0")
case("SequenceClassifier-num_classes-float", lambda: SequenceClassifier(10, 3.0), "num_classes", "float")
case("SequenceClassifier-embed_dim-negative", lambda: SequenceClassifier(10, 3, embed_dim=-1),
     "embed_dim", "-1")
case("SequenceClassifier-hidden_size-0", lambda: SequenceClassifier(10, 3, hidden_size=0), "hidden_size", "0")
case("SequenceClassifier-num_layers-0", lambda: SequenceClassifier(10, 3, num_layers=0), "num_layers", "0")
case("SequenceClassifier-dropout-2", lambda: SequenceClassifier(10, 3, dropout=2.0), "dropout", "2.0")
case("SequenceClassifier-cell", lambda: SequenceClassifier(10, 3, cell="transformer"),
     "cell", "'transformer'")
case("SequenceClassifier-pooling", lambda: SequenceClassifier(10, 3, pooling="max"), "pooling", "'max'")
case("SequenceClassifier.forward-1d", lambda: CLF(IDS[0]), "ids", "(B, T)", "(3,)")
case("SequenceClassifier.forward-3d", lambda: CLF(IDS[None]), "ids", "(B, T)", "(1, 2, 3)")
case("SequenceClassifier.forward-float", lambda: CLF(IDS.float()), "ids", "integer", "torch.float32")
case("SequenceClassifier.forward-id-too-large", lambda: CLF(IDS + 1), "ids", "[0, 9]", "10")
case("SequenceClassifier.forward-id-negative", lambda: CLF(-IDS), "ids", "[0, 9]", "-9")
case("SequenceClassifier.forward-T-0", lambda: CLF(IDS[:, :0]), "ids", "empty", "(2, 0)")
case("SequenceClassifier.forward-B-0", lambda: CLF(IDS[:0]), "ids", "empty", "(0, 3)")

# --- return_gates goes through check_flag like every flag (the review's example: GRU(3, 4)(x,
# return_gates="yes") returned the gates)
GATED = {"GRU": (LAYERS["GRU"], X3), "LSTM": (LAYERS["LSTM"], X3), "GRU-bi": (LAYERS["GRU-bi"], X3),
         "GRUCell": (CELLS["GRUCell"], X2), "GRU-fast": (GRU(3, 4, fast=True), X3)}
for n, (module, x) in GATED.items():
    for kind, value, word in BAD_FLAGS:
        h = H2 if n == "GRUCell" else None
        case(f"{n}.forward-return_gates-{kind}", lambda m=module, x=x, h=h, v=value: m(x, h, return_gates=v),
             "return_gates", word)
for kind, value, word in BAD_FLAGS:
    case(f"LSTMCell.forward-return_gates-{kind}", lambda v=value: LSTM_CELL(X2, (H2, H2), return_gates=v),
         "return_gates", word)
# --- a wrong type is a TypeError, checked before any shape: names as strings, not in a list
case("LSTM.forward-h0-list-of-three", lambda: LAYERS["LSTM"](X3, [torch.zeros(1, 2, 4)] * 3), "h0", "pair",
     "3 items")
case("SequenceClassifier-cell-list", lambda: SequenceClassifier(10, 3, cell=["gru"]), "cell", "['gru']")
case("SequenceClassifier-pooling-None", lambda: SequenceClassifier(10, 3, pooling=None), "pooling", "None")
case("RNN-nonlinearity-list", lambda: RNN(3, 4, nonlinearity=["tanh"]), "nonlinearity", "['tanh']")


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)


def test_wrong_types_are_type_errors():
    assert_clear_error(lambda: LAYERS["GRU"](X3, [[0.0]]), "h0", "list", exc=TypeError)
    assert_clear_error(lambda: LAYERS["LSTM"](X3, torch.zeros(1, 2, 4)), "h0", "Tensor", exc=TypeError)
    assert_clear_error(lambda: LSTM_CELL(X2, H2), "state", "Tensor", exc=TypeError)
    assert_clear_error(lambda: LAYERS["GRU"](X3, return_gates=1), "return_gates", exc=TypeError)


def test_legal_edge_inputs():
    # NumPy sizes, T = 1, B = 1
    layer = GRU(np.int64(3), np.int64(4), num_layers=np.int64(2), bias=np.bool_(True))
    out, h_n = layer(X3[:1, :1])
    assert out.shape == (1, 1, 4) and h_n.shape == (2, 1, 4)
    # float64 modules take float64 input and keep float64
    lstm = LSTM(3, 4).double()
    out, (h, c) = lstm(X3.double(), (torch.zeros(1, 2, 4).double(), torch.zeros(1, 2, 4).double()))
    assert out.dtype == h.dtype == c.dtype == torch.float64
    assert RNNCell(3, 4).double()(X2.double(), H2.double()).dtype == torch.float64
    # under autocast a float32 module takes bfloat16 input
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.isfinite(RNN(3, 4)(X3.bfloat16())[0].float()).all()
    # dropout with one layer is legal (nothing to drop between layers), as in nn.RNN
    rnn = RNN(3, 4, dropout=0.5).train()
    assert torch.equal(rnn(X3)[0], rnn(X3)[0])
    assert RNN.from_torch(nn.RNN(3, 4), fast=np.bool_(False))(X3)[0].shape == (2, 5, 4)
    assert LAYERS["GRU"].torch_parameter("bias_hh_l0").shape == (12,)
    assert SequenceClassifier(10, 1, hidden_size=2)(torch.tensor([[9]], dtype=torch.int32)).shape == (1, 1)
    # NumPy's bools are flags too
    assert len(LAYERS["GRU"](X3, return_gates=np.bool_(True))) == 3
    assert len(LSTM_CELL(X2, (H2, H2), return_gates=np.bool_(False))) == 2
