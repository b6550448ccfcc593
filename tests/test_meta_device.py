"""Every public module runs forward and backward on PyTorch's ``meta`` device.

A meta tensor has a shape, a dtype and a device but no values, so a module that creates a tensor
on the wrong device (``torch.zeros(n)`` without ``device=``), or mixes devices, fails here the way it
would fail on a GPU. This keeps the package device-clean without needing a GPU in CI.

Checks that must read values (id ranges, finiteness) pass on meta tensors by design
(``seqbook.checks``), so the code behind them runs.
"""

from __future__ import annotations

import pytest
import torch

from seqbook import (
    attention,
    embeddings,
    gpt,
    hopfield,
    lm,
    molecules,
    rnn,
    seq2seq,
    transformer,
    vsa,
    vsa_models,
)

META = torch.device("meta")
B, T, D = 2, 5, 8


def floats(*shape):
    return torch.randn(*shape, device=META, requires_grad=True)


def ids(*shape, high=10):
    return torch.zeros(*shape, dtype=torch.long, device=META)


def angles(*shape):
    return torch.empty(*shape, device=META).uniform_(-1, 1).requires_grad_()


def lengths():
    return torch.full((B,), T, dtype=torch.long, device=META)


def first_tensor(out):
    """The first floating-point tensor in a module's output (tuples, named tuples)."""
    if isinstance(out, torch.Tensor):
        return out
    for item in out:
        if isinstance(item, torch.Tensor) and item.is_floating_point():
            return item
    raise AssertionError(f"no tensor in {type(out)}")


# name: (module factory, inputs factory)
CASES = {
    "RNNCell": (lambda: rnn.RNNCell(D, 6), lambda: (floats(B, D), floats(B, 6))),
    "GRUCell": (lambda: rnn.GRUCell(D, 6), lambda: (floats(B, D), floats(B, 6))),
    "LSTMCell": (lambda: rnn.LSTMCell(D, 6), lambda: (floats(B, D), (floats(B, 6), floats(B, 6)))),
    "RNN": (lambda: rnn.RNN(D, 6, num_layers=2, bidirectional=True), lambda: (floats(B, T, D),)),
    "RNN-fast": (lambda: rnn.RNN(D, 6, fast=True), lambda: (floats(B, T, D),)),
    "GRU": (lambda: rnn.GRU(D, 6, num_layers=2, bidirectional=True), lambda: (floats(B, T, D),)),
    "LSTM": (lambda: rnn.LSTM(D, 6, num_layers=2, bidirectional=True), lambda: (floats(B, T, D),)),
    "SequenceClassifier": (
        lambda: rnn.SequenceClassifier(10, 3, hidden_size=6, cell="gru", embed_dim=4),
        lambda: (ids(B, T),),
    ),
    "CharLM": (lambda: lm.CharLM(10, hidden_size=6, cell="lstm", embed_dim=4), lambda: (ids(B, T),)),
    "ConditionalCharLM": (
        lambda: lm.ConditionalCharLM(10, 3, hidden_size=6, embed_dim=4),
        lambda: (ids(B, T), ids(B)),
    ),
    "CBOW": (lambda: embeddings.CBOW(10, D), lambda: (ids(B, 4),)),
    "PatchEmbedding": (lambda: embeddings.PatchEmbedding(4, D), lambda: (floats(B, 8, 8),)),
    "Seq2Seq-attention": (
        lambda: seq2seq.Seq2Seq(10, 12, 4, 6, attention=True),
        lambda: (ids(B, T), lengths(), ids(B, T)),
    ),
    "Seq2Seq-plain": (
        lambda: seq2seq.Seq2Seq(10, 12, 4, 6, attention=False),
        lambda: (ids(B, T), lengths(), ids(B, T)),
    ),
    "MultiHeadAttention": (
        lambda: attention.MultiHeadAttention(D, 2, fast=False),
        lambda: (floats(B, T, D), floats(B, T, D), floats(B, T, D)),
    ),
    "MultiHeadAttention-fast": (
        lambda: attention.MultiHeadAttention(D, 2, fast=True),
        lambda: (floats(B, T, D), floats(B, T, D), floats(B, T, D), None, None, False),
    ),
    "AdditiveAttention": (
        lambda: attention.AdditiveAttention(D, 6, 5),
        lambda: (floats(B, D), floats(B, T, 6)),
    ),
    "PositionalEncoding": (lambda: transformer.PositionalEncoding(D), lambda: (floats(B, T, D),)),
    "LayerNorm": (lambda: transformer.LayerNorm(D), lambda: (floats(B, T, D),)),
    "FeedForward": (lambda: transformer.FeedForward(D, 16, activation="gelu"), lambda: (floats(B, T, D),)),
    "EncoderLayer": (lambda: transformer.EncoderLayer(D, 2, dropout=0.0), lambda: (floats(B, T, D),)),
    "DecoderLayer": (
        lambda: transformer.DecoderLayer(D, 2, dropout=0.0),
        lambda: (floats(B, T, D), floats(B, T + 1, D)),
    ),
    "Seq2SeqTransformer": (
        lambda: transformer.Seq2SeqTransformer(10, 12, D, 2, 1, 1, dropout=0.0),
        lambda: (ids(B, T), ids(B, T)),
    ),
    "GPT": (lambda: gpt.GPT(gpt.GPTConfig(12, 8, 1, 2, D)), lambda: (ids(B, T),)),
    "Hopfield": (lambda: hopfield.Hopfield(D, 6, key_dim=4), lambda: (floats(B, 3, D), floats(B, T, 6))),
    "HopfieldPooling": (lambda: hopfield.HopfieldPooling(D, num_queries=2), lambda: (floats(B, T, D),)),
    "HopfieldLayer": (lambda: hopfield.HopfieldLayer(D, 7), lambda: (floats(B, T, D),)),
    "Codebook": (lambda: vsa_models.Codebook(4, 16), lambda: (angles(B, 16),)),
    "PhasorLinear": (lambda: vsa.PhasorLinear(16, 12), lambda: (angles(B, 16),)),
    "PhasorMLP": (lambda: vsa.PhasorMLP(16), lambda: (angles(B, 16),)),
    "ResidualBlock": (lambda: vsa.ResidualBlock(16), lambda: (angles(B, 16),)),
    "SymbolProjection": (lambda: vsa_models.SymbolProjection(6, 16), lambda: (floats(B, 6),)),
    "SelfAttentionBlock": (lambda: vsa.SelfAttentionBlock(16), lambda: (angles(B, T, 16),)),
    "CrossAttentionBlock": (lambda: vsa.CrossAttentionBlock(16, num_queries=3), lambda: (angles(B, T, 16),)),
    "VSAAttentionClassifier-self": (
        lambda: vsa_models.VSAAttentionClassifier(16, "self", rows=6, cols=5, num_classes=3),
        lambda: (floats(B, 6, 5),),
    ),
    "VSAAttentionClassifier-cross": (
        lambda: vsa_models.VSAAttentionClassifier(16, "cross", num_queries=3, rows=6, cols=5, num_classes=3),
        lambda: (floats(B, 6, 5),),
    ),
    "VSAAttentionClassifier-symbols": (
        lambda: vsa_models.VSAAttentionClassifier(16, "self", rows=6, cols=None, num_classes=3),
        lambda: (angles(B, 6, 16), torch.ones(B, 6, dtype=torch.bool, device="meta")),
    ),
    "MoleculeEncoder": (
        lambda: molecules.MoleculeEncoder(atom_features=4, bond_features=2, embed_dim=16),
        lambda: (floats(5, 4), ids(3, 2), floats(3, 2)),
    ),
    "VSAResNet": (
        lambda: vsa_models.VSAResNet(16, num_layers=2, in_features=30, num_classes=3),
        lambda: (floats(B, 6, 5),),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_backward_on_meta(name):
    make_module, make_inputs = CASES[name]
    torch.manual_seed(0)
    module = make_module().to(META)
    inputs = make_inputs()
    out = first_tensor(module(*inputs))
    assert out.device.type == "meta"
    out.float().sum().backward()
    params = [p for p in module.parameters() if p.requires_grad]
    assert any(p.grad is not None for p in params) or not params
    for p in params:
        assert p.grad is None or p.grad.device.type == "meta", name


def test_every_public_module_has_a_meta_case():
    """A new public module must be added to CASES (variants such as ``RNN-fast`` are extra)."""
    modules = set()
    for package in (attention, embeddings, gpt, hopfield, lm, rnn, seq2seq, transformer, vsa):
        for name in dir(package):
            obj = getattr(package, name)
            if (
                isinstance(obj, type)
                and issubclass(obj, torch.nn.Module)
                and not name.startswith("_")
                and obj.__module__ == package.__name__
            ):
                modules.add(name)
    # Building blocks reached through a covered model rather than called directly (Decoder is the
    # abstract base of the two decoders, RecurrentCell of the three cells).
    through_parent = {"Encoder", "Decoder", "AttentionDecoder", "PlainDecoder", "RecurrentCell"}
    covered = {name.split("-")[0] for name in CASES} | through_parent
    assert modules <= covered, f"no meta case for {sorted(modules - covered)}"
