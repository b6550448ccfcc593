"""seqbook.rnn: our RNN, GRU and LSTM equal PyTorch's built-ins, values and gradients."""

import warnings

import pytest
import torch
from tolerance import assert_close, assert_same_math
from torch import nn

from seqbook.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell

# (num_layers, bidirectional, batch, seq_len, with_h0, bias)
CONFIGS = [
    (1, False, 3, 5, False, True),
    (1, False, 3, 5, True, True),
    (1, True, 2, 4, False, True),
    (1, True, 2, 4, True, True),
    (2, False, 3, 6, False, True),
    (2, False, 1, 3, True, True),    # batch size 1
    (2, True, 2, 5, True, True),
    (2, True, 1, 1, False, True),    # batch size 1, sequence length 1
    (1, False, 4, 1, True, True),    # sequence length 1
    (2, True, 3, 4, True, False),    # no bias
]
IDS = [f"L{c[0]}-{'bi' if c[1] else 'uni'}-B{c[2]}-T{c[3]}-{'h0' if c[4] else 'noh0'}"
       f"{'' if c[5] else '-nobias'}" for c in CONFIGS]
D_IN, H = 5, 4
F64 = torch.float64

KINDS = {
    "rnn_tanh": (RNN, lambda **kw: nn.RNN(nonlinearity="tanh", **kw)),
    "rnn_relu": (RNN, lambda **kw: nn.RNN(nonlinearity="relu", **kw)),
    "gru": (GRU, nn.GRU),
    "lstm": (LSTM, nn.LSTM),
}


def make_pair(kind, num_layers, bidirectional, bias, device, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    ours_cls, torch_ctor = KINDS[kind]
    ref = torch_ctor(input_size=D_IN, hidden_size=H, num_layers=num_layers, bias=bias,
                     bidirectional=bidirectional, batch_first=True).to(device=device, dtype=dtype)
    return ours_cls.from_torch(ref), ref


def make_inputs(kind, num_layers, bidirectional, batch, seq_len, with_h0, device, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, seq_len, D_IN, generator=g, dtype=dtype).to(device)
    h0 = None
    if with_h0:
        shape = (num_layers * (2 if bidirectional else 1), batch, H)
        h0 = torch.randn(shape, generator=g, dtype=dtype).to(device)
        if kind == "lstm":
            h0 = (h0, torch.randn(shape, generator=g, dtype=dtype).to(device))
    return x, h0


def rnn_terms(num_layers, D, T, d_in=D_IN, hidden=H):
    """The length of the sums behind one output: every step of every layer sums its input (d_in, then
    D * hidden) and its hidden state (hidden) into each gate, and a value passes through T steps."""
    return num_layers * T * (max(d_in, D * hidden) + hidden)


def grad_terms(n, B, T):
    """Forward and backward pass through the same sums, plus B * T terms for a parameter gradient."""
    return 2 * n + B * T


def call(module, x, h0):
    return module(x) if h0 is None else module(x, h0)


def flat_state(state):
    return torch.cat([s.reshape(-1) for s in state]) if isinstance(state, tuple) else state.reshape(-1)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_from_torch_forward_equal(kind, config, device):
    num_layers, bidirectional, batch, seq_len, with_h0, bias = config
    ours, ref = make_pair(kind, num_layers, bidirectional, bias, device)
    x, h0 = make_inputs(kind, num_layers, bidirectional, batch, seq_len, with_h0, device)
    out, h_n = call(ours, x, h0)
    out_ref, h_n_ref = call(ref, x, h0)
    D = 2 if bidirectional else 1
    n = rnn_terms(num_layers, D, seq_len)
    assert out.shape == (batch, seq_len, D * H)
    assert_same_math(out, out_ref, n=n)
    if kind == "lstm":
        assert isinstance(h_n, tuple) and len(h_n) == 2
        for a, b in zip(h_n, h_n_ref, strict=True):
            assert a.shape == (num_layers * D, batch, H)
            assert_same_math(a, b, n=n)
    else:
        assert h_n.shape == (num_layers * D, batch, H)
        assert_same_math(h_n, h_n_ref, n=n)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("config", [CONFIGS[1], CONFIGS[6], CONFIGS[7], CONFIGS[9]],
                         ids=[IDS[1], IDS[6], IDS[7], IDS[9]])
def test_from_torch_gradients_equal(kind, config, device):
    num_layers, bidirectional, batch, seq_len, with_h0, bias = config
    ours, ref = make_pair(kind, num_layers, bidirectional, bias, device)
    x, h0 = make_inputs(kind, num_layers, bidirectional, batch, seq_len, with_h0, device)
    x_ours, x_ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    g = torch.Generator().manual_seed(2)
    out_ref, h_ref = call(ref, x_ref, h0)
    w_out = torch.randn(out_ref.shape, generator=g, dtype=x.dtype).to(device)
    w_state = torch.randn(flat_state(h_ref).shape, generator=g, dtype=x.dtype).to(device)

    def loss(out, state):  # a random linear functional of every output, so no gradient is trivial
        return (out * w_out).sum() + (flat_state(state) * w_state).sum()

    loss(*call(ours, x_ours, h0)).backward()
    loss(out_ref, h_ref).backward()
    n = grad_terms(rnn_terms(num_layers, 2 if bidirectional else 1, seq_len), batch, seq_len)
    assert_same_math(x_ours.grad, x_ref.grad, n=n)
    names = [name for name, _ in ref.named_parameters()]
    assert len(names) == len(list(ours.parameters()))
    for name in names:
        ours_grad = ours.torch_parameter(name).grad
        assert ours_grad is not None, name
        assert_same_math(ours_grad, getattr(ref, name).grad, n=n, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("kind", ["rnn_tanh", "gru", "lstm"])
def test_float32_and_batch_first_false_source(kind, device):
    """from_torch also copies a module built with batch_first=False (the weights are the same), and a
    float32 one: our loop in float32 against PyTorch's fused float32 kernel."""
    torch.manual_seed(0)
    ours_cls, torch_ctor = KINDS[kind]
    ref = torch_ctor(input_size=D_IN, hidden_size=H, num_layers=2, bidirectional=True).to(device)
    ours = ours_cls.from_torch(ref)
    x = torch.randn(3, 7, D_IN, device=device)
    out, _ = ours(x)
    out_ref, _ = ref(x.transpose(0, 1))
    assert_close(out, out_ref.transpose(0, 1), n=rnn_terms(2, 2, 7))
    assert out.dtype == torch.float32 and out.device.type == device.type


def test_cells_match_torch_cells(device):
    torch.manual_seed(0)
    x = torch.randn(3, D_IN, device=device, dtype=torch.float64)
    h = torch.randn(3, H, device=device, dtype=torch.float64)
    c = torch.randn(3, H, device=device, dtype=torch.float64)
    for ours_cls, ref_cls, kwargs in [(RNNCell, nn.RNNCell, {"nonlinearity": "relu"}),
                                      (RNNCell, nn.RNNCell, {}), (GRUCell, nn.GRUCell, {})]:
        ref = ref_cls(D_IN, H, **kwargs).to(device=device, dtype=torch.float64)
        ours = ours_cls(D_IN, H, **kwargs).to(device=device, dtype=torch.float64)
        ours.load_state_dict(ref.state_dict())
        assert_same_math(ours(x, h), ref(x, h), n=D_IN + H)
    ref = nn.LSTMCell(D_IN, H).to(device=device, dtype=torch.float64)
    ours = LSTMCell(D_IN, H).to(device=device, dtype=torch.float64)
    ours.load_state_dict(ref.state_dict())
    for a, b in zip(ours(x, (h, c)), ref(x, (h, c)), strict=True):
        assert_same_math(a, b, n=D_IN + H)


def test_gru_gates_reproduce_the_state(device):
    """The returned update gate z, reset gate r and candidate n give h_t by eq. (3.4)."""
    torch.manual_seed(0)
    gru = GRU(D_IN, H, num_layers=2, bidirectional=True).to(device=device, dtype=F64)
    x = torch.randn(2, 6, D_IN, device=device, dtype=F64)
    out, h_n, gates = gru(x, return_gates=True)
    out2, h_n2 = gru(x)
    n = rnn_terms(2, 2, 6)
    assert_same_math(out, out2, n=n)
    assert_same_math(h_n, h_n2, n=n)
    assert set(gates) == {"r", "z", "n"}
    assert gates["z"].shape == (4, 2, 6, H)
    assert ((gates["z"] > 0) & (gates["z"] < 1)).all()
    # forward direction of the top layer (row 2): h_t = (1 - z_t) n_t + z_t h_{t-1}
    z, n = gates["z"][2], gates["n"][2]
    h = out[..., :H]
    h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)
    assert_same_math(h, (1 - z) * n + z * h_prev, n=3)  # two products and a sum per element


def test_lstm_gates_shapes(device):
    lstm = LSTM(D_IN, H).to(device)
    out, (h_n, c_n), gates = lstm(torch.randn(2, 3, D_IN, device=device), return_gates=True)
    assert set(gates) == {"i", "f", "g", "o"}
    assert all(g.shape == (1, 2, 3, H) for g in gates.values())
    assert torch.equal(out[:, -1], h_n[0])  # the last output is the final state itself


def test_dropout_between_layers_only_in_training():
    torch.manual_seed(0)
    rnn = RNN(D_IN, H, num_layers=2, dropout=0.5)
    x = torch.randn(2, 5, D_IN)
    rnn.eval()
    a, _ = rnn(x)
    b, _ = rnn(x)
    assert torch.equal(a, b)  # the same computation twice
    rnn.train()
    c, _ = rnn(x)
    with pytest.raises(AssertionError):  # dropout changes the output by far more than rounding
        assert_close(c, a, n=rnn_terms(2, 1, 5))


@pytest.mark.parametrize("cls", [RNN, GRU, LSTM])
def test_bad_input_raises(cls, device):
    layer = cls(D_IN, H, num_layers=2, bidirectional=True).to(device)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, 5\).*got \(7, 5\)"):
        layer(torch.randn(7, D_IN, device=device))
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, 5\), got \(2, 7, 6\)"):
        layer(torch.randn(2, 7, D_IN + 1, device=device))
    with pytest.raises(ValueError, match=r"at least one time step.*got \(2, 0, 5\)"):
        layer(torch.randn(2, 0, D_IN, device=device))
    x = torch.randn(2, 7, D_IN, device=device)
    bad = torch.zeros(2, 2, H, device=device)  # should be (4, 2, H)
    if cls is LSTM:
        with pytest.raises(ValueError, match=r"h0\[0\] must have shape \(4, 2, 4\).*got \(2, 2, 4\)"):
            layer(x, (bad, torch.zeros(4, 2, H, device=device)))
        with pytest.raises(TypeError, match=r"h0 must be a pair"):
            layer(x, torch.zeros(4, 2, H, device=device))
    else:
        with pytest.raises(ValueError, match=r"h0 must have shape \(4, 2, 4\).*got \(2, 2, 4\)"):
            layer(x, bad)


def test_bad_construction_raises():
    with pytest.raises(ValueError, match="nonlinearity"):
        RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="num_layers"):
        GRU(3, 4, num_layers=0)
    with pytest.raises(ValueError, match="dropout"):
        LSTM(3, 4, dropout=1.5)
    with pytest.raises(TypeError, match="m must be an nn.GRU"):
        GRU.from_torch(nn.LSTM(3, 4))
    with pytest.raises(ValueError, match="proj_size"):
        LSTM.from_torch(nn.LSTM(3, 4, proj_size=2))
    with pytest.raises(ValueError, match=r"x must have shape \(B, 3\), got \(2, 4\)"):
        RNNCell(3, 4)(torch.zeros(2, 4), torch.zeros(2, 4))


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("config", [CONFIGS[0], CONFIGS[6], CONFIGS[9]], ids=[IDS[0], IDS[6], IDS[9]])
def test_fast_path_equals_readable_loop(kind, config, device):
    """fast=True (PyTorch's fused kernel on our parameters) gives the loop's values and gradients."""
    num_layers, bidirectional, batch, seq_len, with_h0, bias = config
    slow, _ = make_pair(kind, num_layers, bidirectional, bias, device)
    fast, _ = make_pair(kind, num_layers, bidirectional, bias, device)
    fast.fast = True
    x, h0 = make_inputs(kind, num_layers, bidirectional, batch, seq_len, with_h0, device)
    results = []
    for layer in (slow, fast):
        out, state = call(layer, x, h0)
        (out.sum() + flat_state(state).square().sum()).backward()
        results.append((out, flat_state(state), [p.grad for p in layer.parameters()]))
    (out_s, st_s, g_s), (out_f, st_f, g_f) = results
    n = rnn_terms(num_layers, 2 if bidirectional else 1, seq_len)
    assert_same_math(out_f, out_s, n=n)
    assert_same_math(st_f, st_s, n=n)
    assert len(g_s) == len(g_f)
    for a, b in zip(g_f, g_s, strict=True):
        assert_same_math(a, b, n=grad_terms(n, batch, seq_len))


@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
def test_sequence_classifier_pools_the_right_states(cell, device):
    from seqbook.rnn import SequenceClassifier

    torch.manual_seed(0)
    ids = torch.randint(0, 10, (3, 6), device=device)
    n = rnn_terms(1, 2, 6, d_in=32, hidden=5) + 6 + 2 * 5  # the layer, the mean over T, the head
    last = SequenceClassifier(10, 4, hidden_size=5, cell=cell, bidirectional=True)
    last = last.to(device=device, dtype=F64)
    output, _ = last.rnn(last.embed(ids))
    expected = torch.cat([output[:, -1, :5], output[:, 0, 5:]], dim=-1)  # forward end, backward end
    assert_same_math(last(ids), last.head(expected), n=n)
    mean = SequenceClassifier(10, 4, hidden_size=5, cell=cell, bidirectional=True, pooling="mean")
    mean = mean.to(device=device, dtype=F64)
    output, _ = mean.rnn(mean.embed(ids))
    assert_same_math(mean(ids), mean.head(output.mean(1)), n=n)
    assert mean(ids).shape == (3, 4)
    with pytest.raises(ValueError, match=r"ids must have shape \(B, T\), got \(6,\)"):
        mean(ids[0])


@pytest.mark.parametrize("cls", [RNN, GRU, LSTM])
def test_fast_path_is_silent(cls, device):
    """The fused kernel gets our separate weights; on CUDA cuDNN would warn about that at each call."""
    model = cls(3, 4, num_layers=2, bidirectional=True, fast=True).to(device)
    x = torch.randn(2, 5, 3, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(x)[0].sum().backward()
