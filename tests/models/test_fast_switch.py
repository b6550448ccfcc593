"""One ``fast`` switch for the whole package: ``set_fast`` on each chapter's top-level model flips
every part that has a fused twin, both settings compute the same values, and every such part
starts on the readable path (``fast=False``, the one default). On the fused path every layer of
the transformers runs PyTorch's own kernel: ``F.layer_norm`` and ``F.scaled_dot_product_attention``
(the MLP's GELU is ``F.gelu`` on both paths)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from seqbook.attention import MultiHeadAttention
from seqbook.gpt import GPT, CausalSelfAttention, GPTConfig
from seqbook.hopfield import HopfieldLayer
from seqbook.lm import CharLM, ConditionalCharLM
from seqbook.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell, SequenceClassifier
from seqbook.seq2seq import Seq2Seq
from seqbook.transformer import DecoderLayer, EncoderLayer, LayerNorm, Seq2SeqTransformer
from seqbook.utils import set_fast
from seqbook.vsa import CrossAttentionBlock, SelfAttentionBlock
from seqbook.vsa_models import VSAAttentionClassifier

F64 = torch.float64


def _ids(*shape, high=9):
    return torch.randint(1, high, shape, generator=torch.Generator().manual_seed(0))


# chapter -> (its top-level model, the inputs of one forward call, the module types that must flip)
MODELS = {
    "ch2 CharLM": (lambda: CharLM(10, hidden_size=8, cell="rnn", embed_dim=4), lambda: (_ids(2, 5),), {RNN}),
    "ch2 ConditionalCharLM": (
        lambda: ConditionalCharLM(10, 3, hidden_size=8, embed_dim=4),
        lambda: (_ids(2, 5), _ids(2, high=3)),
        {RNN},
    ),
    "ch2 SequenceClassifier": (
        lambda: SequenceClassifier(10, 3, hidden_size=8, embed_dim=4, bidirectional=True),
        lambda: (_ids(2, 5),),
        {RNN},
    ),
    "ch3 CharLM gru": (
        lambda: CharLM(10, hidden_size=8, cell="gru", embed_dim=4),
        lambda: (_ids(2, 5),),
        {GRU},
    ),
    "ch3 SequenceClassifier lstm": (
        lambda: SequenceClassifier(10, 3, hidden_size=8, cell="lstm", embed_dim=4),
        lambda: (_ids(2, 5),),
        {LSTM},
    ),
    "ch4 Seq2Seq": (
        lambda: Seq2Seq(10, 9, embed_dim=4, hidden_size=6),
        lambda: (_ids(2, 5), torch.tensor([5, 3]), _ids(2, 4)),
        {GRU, GRUCell},
    ),
    "ch4 Seq2Seq plain": (
        lambda: Seq2Seq(10, 9, embed_dim=4, hidden_size=6, attention=False),
        lambda: (_ids(2, 5), torch.tensor([5, 3]), _ids(2, 4)),
        {GRU, GRUCell},
    ),
    "ch5 MultiHeadAttention": (
        lambda: MultiHeadAttention(8, 2),
        lambda: (torch.randn(2, 5, 8, dtype=F64),) * 3,
        {MultiHeadAttention},
    ),
    "ch6 Seq2SeqTransformer": (
        lambda: Seq2SeqTransformer(10, 9, embed_dim=8, num_heads=2, dropout=0.0),
        lambda: (_ids(2, 5), _ids(2, 4)),
        {MultiHeadAttention, LayerNorm},
    ),
    "ch6 GPT": (
        lambda: GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=2, n_head=2, n_embd=8, dropout=0.0)),
        lambda: (_ids(2, 6),),
        {CausalSelfAttention, LayerNorm},
    ),
    "ch6 GPT rope": (
        lambda: GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=2, n_head=2, n_embd=8, dropout=0.0,
                              positional="rope", activation="gelu_tanh")),
        lambda: (_ids(2, 6),),
        {CausalSelfAttention, LayerNorm},
    ),
    "ch8 VSAAttentionClassifier self": (
        lambda: VSAAttentionClassifier(16, "self", rows=4, cols=5, num_classes=3),
        lambda: (torch.rand(2, 4, 5, dtype=F64),),
        {SelfAttentionBlock},
    ),
    "ch8 VSAAttentionClassifier cross": (
        lambda: VSAAttentionClassifier(16, "cross", num_queries=3, rows=4, cols=5, num_classes=3),
        lambda: (torch.rand(2, 4, 5, dtype=F64),),
        {CrossAttentionBlock},
    ),
}


def _first(out):
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("name", list(MODELS))
def test_set_fast_flips_every_part_and_keeps_the_values(name):
    build, inputs, kinds = MODELS[name]
    torch.manual_seed(0)
    model = build().to(F64).eval()
    switches = [m for m in model.modules() if isinstance(getattr(m, "fast", None), bool)]
    assert switches and not any(m.fast for m in switches), "every part starts readable (fast=False)"
    assert kinds <= {type(m) for m in switches}
    x = inputs()
    with torch.no_grad():
        readable = _first(model(*x))
        assert set_fast(model, True) is model
        assert all(m.fast for m in switches)
        fused = _first(model(*x))
        set_fast(model, False)
        assert not any(m.fast for m in switches)
    torch.testing.assert_close(fused, readable)


@pytest.mark.parametrize("cell", [RNNCell, GRUCell, LSTMCell])
def test_recurrent_cells_have_the_switch(cell):
    torch.manual_seed(0)
    ours = cell(3, 4).to(F64)
    x, h = torch.randn(2, 3, dtype=F64), torch.randn(2, 4, dtype=F64)
    state = (h, torch.randn(2, 4, dtype=F64)) if cell is LSTMCell else h
    readable = ours(x, state)
    fused = set_fast(ours, True)(x, state)
    torch.testing.assert_close(fused, readable)


def test_transformer_layers_switch_with_their_attention_and_norms():
    layers = nn.ModuleList([EncoderLayer(8, 2), DecoderLayer(8, 2)])
    set_fast(layers, True)
    parts = [m for m in layers.modules() if isinstance(m, (MultiHeadAttention, LayerNorm))]
    assert len(parts) == 8 and all(m.fast for m in parts)


def test_layer_norm_fused_equals_readable_with_gradients():
    torch.manual_seed(0)
    readable = LayerNorm(16).to(F64)
    with torch.no_grad():
        readable.weight.normal_(), readable.bias.normal_()
    fused = LayerNorm(16, fast=True).to(F64)
    fused.load_state_dict(readable.state_dict())
    x = (3 * torch.randn(4, 5, 16, dtype=F64) + 2).requires_grad_()
    outs, grads = [], []
    for m in (readable, fused):
        y = m(x)
        outs.append(y)
        grads.append(torch.autograd.grad(y.pow(3).sum(), (x, m.weight, m.bias)))
    torch.testing.assert_close(outs[1], outs[0])
    for g_fused, g_readable in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(g_fused, g_readable)
    no_bias = LayerNorm(16, bias=False)
    torch.testing.assert_close(set_fast(no_bias, True)(x), set_fast(no_bias, False)(x))  # float32 gains
    for dtype in (torch.bfloat16, F64):  # an input of another dtype than the weights: its own back
        assert set_fast(no_bias, True)(x.to(dtype)).dtype == dtype


class _Calls(TorchFunctionMode):
    """Record the torch functions a computation calls, by name."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_the_fused_gpt_runs_pytorch_s_kernels_in_every_layer(positional):
    """fast=True: every LayerNorm is F.layer_norm and every attention F.scaled_dot_product_attention,
    with the readable ones (their sqrt and softmax) nowhere; the GELU is F.gelu either way."""
    config = GPTConfig(vocab_size=20, block_size=8, n_layer=3, n_head=2, n_embd=8, dropout=0.0,
                       positional=positional, activation="gelu_tanh", fast=True)
    model = GPT(config).eval()
    with torch.no_grad(), _Calls() as calls:
        model(_ids(2, 6, high=20))
    names = calls.names
    assert names.count(F.layer_norm.__name__) == 2 * config.n_layer + 1, names
    assert names.count(F.scaled_dot_product_attention.__name__) == config.n_layer, names
    assert names.count(F.gelu.__name__) == config.n_layer, names
    assert "sqrt" not in names and "softmax" not in names, names
    with torch.no_grad(), _Calls() as calls:  # the readable path, for contrast
        set_fast(model, False)(_ids(2, 6, high=20))
    assert F.layer_norm.__name__ not in calls.names
    assert F.scaled_dot_product_attention.__name__ not in calls.names


def test_the_readable_methods_have_no_fused_branch():
    """The fused twins are methods of their own, which the fast switch puts in place: the
    readable methods the chapters print never mention them."""
    import inspect

    for method in (MultiHeadAttention.forward, MultiHeadAttention.attend, CausalSelfAttention.forward,
                   LayerNorm.forward, GPT.forward):
        source = inspect.getsource(method)
        assert "fast" not in source and "fused" not in source, method.__qualname__
    m = MultiHeadAttention(8, 2)
    assert m.attend.__func__ is MultiHeadAttention.attend
    m.fast = True
    assert m.attend.__func__ is MultiHeadAttention.attend_fused
    with pytest.raises(TypeError, match="fast must be a bool"):
        m.fast = "yes"


def test_set_fast_refuses_what_it_cannot_switch():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got str"):
        set_fast("model", True)
    with pytest.raises(TypeError, match="fast must be a bool, got int"):
        set_fast(MultiHeadAttention(8, 2), 1)
    # chapter 7's Hopfield layer has no fused twin: the call would do nothing, so it is refused
    with pytest.raises(ValueError, match="no module with a fast switch.*HopfieldLayer"):
        set_fast(HopfieldLayer(8, 4), True)
