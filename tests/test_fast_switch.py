"""One ``fast`` switch for the whole package: ``set_fast`` on each chapter's top-level model flips
every part that has a fused twin, both settings compute the same values, and every such part
starts on the readable path (``fast=False``, the one default)."""

import pytest
import torch
from torch import nn

from seqbook.attention import MultiHeadAttention
from seqbook.gpt import GPT, GPTConfig
from seqbook.hopfield import HopfieldLayer
from seqbook.lm import CharLM, ConditionalCharLM
from seqbook.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell, SequenceClassifier
from seqbook.seq2seq import Seq2Seq
from seqbook.transformer import DecoderLayer, EncoderLayer, Seq2SeqTransformer
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
        {MultiHeadAttention},
    ),
    "ch6 GPT": (
        lambda: GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=2, n_head=2, n_embd=8, dropout=0.0)),
        lambda: (_ids(2, 6),),
        {MultiHeadAttention},
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


def test_transformer_layers_switch_with_their_attention():
    layers = nn.ModuleList([EncoderLayer(8, 2), DecoderLayer(8, 2)])
    set_fast(layers, True)
    assert all(m.fast for m in layers.modules() if isinstance(m, MultiHeadAttention))


def test_set_fast_refuses_what_it_cannot_switch():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got str"):
        set_fast("model", True)
    with pytest.raises(TypeError, match="fast must be a bool, got int"):
        set_fast(MultiHeadAttention(8, 2), 1)
    # chapter 7's Hopfield layer has no fused twin: the call would do nothing, so it is refused
    with pytest.raises(ValueError, match="no module with a fast switch.*HopfieldLayer"):
        set_fast(HopfieldLayer(8, 4), True)
