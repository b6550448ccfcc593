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
    delta_rule,
    embeddings,
    gpt,
    hopfield,
    kv_cache,
    linear_attention,
    lm,
    molecules,
    online_softmax,
    rnn,
    rope,
    scan,
    seq2seq,
    speculative,
    ssm,
    tensor_parallel,
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
    # its table is frozen (counted, not trained): unfrozen here so that the backward pass runs
    "BigramLM": (lambda: lm.BigramLM(torch.arange(20) % 10, 10).requires_grad_(), lambda: (ids(B, T),)),
    "ConditionalCharLM": (
        lambda: lm.ConditionalCharLM(10, 3, hidden_size=6, embed_dim=4),
        lambda: (ids(B, T), ids(B)),
    ),
    "CBOW": (lambda: embeddings.CBOW(10, D), lambda: (ids(B, 4),)),
    "SkipGram": (lambda: embeddings.SkipGram(10, D), lambda: (ids(B), ids(B, 6))),
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
    "GPT-rope-fast": (lambda: gpt.GPT(gpt.GPTConfig(12, 8, 1, 2, D, positional="rope", fast=True)),
                      lambda: (ids(B, T),)),
    "GPTBlock": (lambda: gpt.GPTBlock(D, 2, dropout=0.0), lambda: (floats(B, T, D),)),
    "CausalSelfAttention": (
        lambda: gpt.CausalSelfAttention(D, 2),
        lambda: (floats(B, T, D), rope.rope_angles(torch.arange(T, device=META), D // 2)),
    ),
    "CausalSelfAttention-fast": (
        lambda: gpt.CausalSelfAttention(D, 2, fast=True),
        lambda: (floats(B, T, D), None, kv_cache.KVCache(T)),
    ),
    "LayerNorm-fast": (lambda: transformer.LayerNorm(D, fast=True), lambda: (floats(B, T, D),)),
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
    "LinearAttention": (lambda: linear_attention.LinearAttention(D, 2, chunk_size=2),
                        lambda: (floats(B, T, D),)),
    "LinearAttention-state": (
        lambda: linear_attention.LinearAttention(D, 2),
        lambda: (floats(B, 1, D), (floats(B, 2, 4, 4), floats(B, 2, 4))),
    ),
    "LinearAttentionLM": (lambda: linear_attention.LinearAttentionLM(10, D, 2, chunk_size=2),
                          lambda: (ids(B, T),)),
    "DeltaNet": (lambda: delta_rule.DeltaNet(D, 2, chunk_size=2), lambda: (floats(B, T, D),)),
    "DeltaNet-gated-state": (lambda: delta_rule.DeltaNet(D, 2, gated=True, chunk_size=2),
                             lambda: (floats(B, T, D), floats(B, 2, 4, 4))),
    "MinGRU": (lambda: scan.MinGRU(D, 6), lambda: (floats(B, T, D), floats(1, B, 6))),
    "DiagonalSSM": (lambda: ssm.DiagonalSSM(D, d_state=4), lambda: (floats(B, T, D),)),
    "PositiveRandomFeatures": (lambda: linear_attention.PositiveRandomFeatures(D, 8),
                               lambda: (floats(B, T, D),)),
    "MambaBlock": (lambda: ssm.MambaBlock(D, d_state=4), lambda: (floats(B, T, D),)),
    "MambaBlock-loop": (lambda: ssm.MambaBlock(D, d_state=4, scan="loop"), lambda: (floats(B, T, D),)),
    "MambaBlock-log": (lambda: ssm.MambaBlock(D, d_state=4, scan="log"), lambda: (floats(B, T, D),)),
    "MambaLM": (lambda: ssm.MambaLM(10, D, num_layers=2, d_state=4), lambda: (ids(B, T),)),
    "MambaLM-mamba2": (lambda: ssm.MambaLM(10, D, num_layers=2, d_state=4, mamba2=True,
                                           head_dim=4, chunk_size=2), lambda: (ids(B, T),)),
    "Mamba2Block": (lambda: ssm.Mamba2Block(D, d_state=4, head_dim=4, chunk_size=2),
                    lambda: (floats(B, T, D),)),
    # one process, no group: the shares are the whole layers
    "TensorParallelGPTBlock": (lambda: tensor_parallel.TensorParallelGPTBlock(gpt_block()),
                               lambda: (floats(B, T, D),)),
    "TensorParallelAttention": (lambda: tensor_parallel.TensorParallelAttention(gpt_block().self_attn),
                                lambda: (floats(B, T, D),)),
    "TensorParallelFeedForward": (lambda: tensor_parallel.TensorParallelFeedForward(gpt_block().ff),
                                  lambda: (floats(B, T, D),)),
    "TensorParallelGPTBlock-GPT": (
        lambda: tensor_parallel.parallelize_gpt(gpt.GPT(gpt.GPTConfig(10, 8, 2, 2, D, dropout=0.0))),
        lambda: (ids(B, T),)),
    "TensorParallelGPTBlock-shards": (
        lambda: torch.nn.Sequential(tensor_parallel.column_shard(torch.nn.Linear(D, 6), 1, 2),
                                    tensor_parallel.row_shard(torch.nn.Linear(3, D), 0, 1)),
        lambda: (floats(B, T, D),)),
}


def gpt_block():
    return gpt.GPTBlock(D, 2, dropout=0.0)


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


def as_module(fn):
    """A function as a module with one parameter, so the test can run a backward pass."""

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(()))

        def forward(self, *args):
            return first_tensor(fn(*args)) * self.w

    return Wrapped()


def mamba_step(*args):
    torch.manual_seed(0)
    return ssm.MambaBlock(D, d_state=4).to(META).step(*args)


def mamba2_step(*args):
    torch.manual_seed(0)
    return ssm.Mamba2Block(D, d_state=4, head_dim=4, n_groups=2).to(META).step(*args)


def lm_step(model):
    def step(token, state=None):
        torch.manual_seed(0)
        return model().to(META).step(token, state)
    return step


def cache_append(k, v):
    cache = kv_cache.KVCache(2 * T)
    cache.append(k, v)
    keys, values = cache.append(k, v)
    assert keys.shape == (B, 2, 2 * T, 4) and cache.length == 2 * T
    return keys + values


# The functional cores of the newer modules: name -> (function, inputs factory, shape of
# the first floating-point output). Each must compute on meta without touching another device.
FUNCTIONS = {
    "linear_attention": (linear_attention.linear_attention,
                         lambda: (floats(B, 2, T, 4), floats(B, 2, 7, 4), floats(B, 2, 7, 3)),
                         (B, 2, T, 3)),
    "linear_attention-causal": (lambda q, k, v: linear_attention.linear_attention(q, k, v, True),
                                lambda: (floats(B, 2, T, 4), floats(B, 2, T, 4), floats(B, 2, T, 3)),
                                (B, 2, T, 3)),
    "linear_attention_quadratic": (
        lambda q, k, v: linear_attention.linear_attention_quadratic(q, k, v, causal=True),
        lambda: (floats(B, 2, T, 4), floats(B, 2, T, 4), floats(B, 2, T, 3)), (B, 2, T, 3)),
    "linear_attention_chunked": (
        lambda q, k, v: linear_attention.linear_attention_chunked(q, k, v, chunk_size=2),
        lambda: (floats(B, 2, T, 4), floats(B, 2, T, 4), floats(B, 2, T, 3)), (B, 2, T, 3)),
    "linear_attention_recurrent": (
        linear_attention.linear_attention_recurrent,
        lambda: (floats(B, 2, T, 4), floats(B, 2, T, 4), floats(B, 2, T, 3)), (B, 2, T, 3)),
    "delta_rule_recurrent": (
        delta_rule.delta_rule_recurrent,
        lambda: (floats(B, 2, T, 4), floats(B, 2, T, 4), floats(B, 2, T, 3), floats(B, 2, T)),
        (B, 2, T, 3)),
    "delta_rule_recurrent-gated-state": (
        delta_rule.delta_rule_recurrent,
        lambda: (floats(B, 2, T, 4), floats(B, 2, T, 4), floats(B, 2, T, 3), floats(B, 2, T),
                 floats(B, 2, T), floats(B, 2, 4, 3)), (B, 2, T, 3)),
    "delta_rule_chunked": (
        lambda q, k, v, beta: delta_rule.delta_rule_chunked(q, k, v, beta, chunk_size=2),
        lambda: (floats(B, 2, T, 4), floats(B, 2, T, 4), floats(B, 2, T, 3), floats(B, 2, T)),
        (B, 2, T, 3)),
    "delta_rule_chunked-gated-state": (
        lambda *args: delta_rule.delta_rule_chunked(*args, chunk_size=2),
        lambda: (floats(B, 2, T, 4), floats(B, 2, T, 4), floats(B, 2, T, 3), floats(B, 2, T),
                 floats(B, 2, T), floats(B, 2, 4, 3)), (B, 2, T, 3)),
    "linear_recurrence": (scan.linear_recurrence, lambda: (floats(B, T, 3), floats(B, T, 3)),
                          (B, T, 3)),
    "parallel_scan": (scan.parallel_scan,
                      lambda: (floats(B, T, 3), floats(B, T, 3), floats(B, 3)), (B, T, 3)),
    "blelloch_scan": (scan.blelloch_scan,
                      lambda: (floats(B, T, 3), floats(B, T, 3), floats(B, 3)), (B, T, 3)),
    "log_space_scan": (scan.log_space_scan, lambda: (floats(B, T, 3), floats(B, T, 3)),
                       (B, T, 3)),
    "discretize_zoh": (ssm.discretize_zoh, lambda: (floats(3, 4), floats(3, 4), floats(3)),
                       (3, 4)),
    "ssm_kernel": (lambda a, b, c: ssm.ssm_kernel(a, b, c, T),
                   lambda: (floats(3, 4), floats(3, 4), floats(3, 4)), (3, T)),
    "ssm_convolution": (ssm.ssm_convolution, lambda: (floats(B, T, 3), floats(3, T), floats(3)),
                        (B, T, 3)),
    "ssm_convolution-fft": (lambda x, k: ssm.ssm_convolution(x, k, fft=True),
                            lambda: (floats(B, T, 3), floats(3, T)), (B, T, 3)),
    "legendre_basis": (lambda x: ssm.legendre_basis(x, 4), lambda: (floats(B, T),), (B, T, 4)),
    "legs_scan": (lambda x: ssm.legs_scan(x, 4), lambda: (floats(B, T),), (B, T, 4)),
    "dplr_kernel": (lambda *v: ssm.dplr_kernel(*v, 0.1, T),
                    lambda: tuple(torch.randn(4, dtype=torch.cfloat, device=META, requires_grad=True)
                                  for _ in range(4)), (T,)),
    "ssm_recurrent": (ssm.ssm_recurrent,
                      lambda: (floats(B, T, 3), floats(3, 4), floats(3, 4), floats(3, 4)),
                      (B, T, 3)),
    "selective_scan": (ssm.selective_scan,
                       lambda: (floats(B, T, 3), floats(B, T, 3), floats(3, 4), floats(B, T, 4),
                                floats(B, T, 4), floats(3)), (B, T, 3)),
    "selective_scan_parallel": (ssm.selective_scan_parallel,
                                lambda: (floats(B, T, 3), floats(B, T, 3), floats(3, 4),
                                         floats(B, T, 4), floats(B, T, 4)), (B, T, 3)),
    "decay_mask": (ssm.decay_mask, lambda: (floats(B, 2, T),), (B, 2, T, T)),
    "ssd_attention_form": (ssm.ssd_attention_form,
                           lambda: (floats(B, 2, T, 3), floats(B, 2, T), floats(B, 2, T, 4),
                                    floats(B, 2, T, 4)), (B, 2, T, 3)),
    "ssd_recurrent": (ssm.ssd_recurrent,
                      lambda: (floats(B, 2, T, 3), floats(B, 2, T), floats(B, 2, T, 4),
                               floats(B, 2, T, 4)), (B, 2, T, 3)),
    "MambaBlock.step": (mamba_step, lambda: (floats(B, D),), (B, D)),
    "MambaBlock.step-state": (mamba_step,
                              lambda: (floats(B, D), (floats(B, 2 * D, 3), floats(B, 2 * D, 4))),
                              (B, D)),
    "ssd_chunk_scan": (lambda x, log_a, B_, C_: ssm.ssd_chunk_scan(x, log_a, B_, C_, 2),
                       lambda: (floats(B, 2, T, 3), floats(B, 2, T), floats(B, 2, T, 4),
                                floats(B, 2, T, 4)), (B, 2, T, 3)),
    "ssd_chunk_scan-state": (lambda x, log_a, B_, C_, h0: ssm.ssd_chunk_scan(
        x, log_a, B_, C_, 2, initial_state=h0, return_final_state=True)[1],
        lambda: (floats(B, 2, T, 3), floats(B, 2, T), floats(B, 2, T, 4), floats(B, 2, T, 4),
                 floats(B, 2, 4, 3)), (B, 2, 4, 3)),
    "Mamba2Block.step": (mamba2_step, lambda: (floats(B, D),), (B, D)),
    "Mamba2Block.step-state": (mamba2_step,
                               lambda: (floats(B, D), (floats(B, 2 * D + 16, 3),
                                                       floats(B, 2 * D // 4, 4, 4))),
                               (B, D)),
    "MambaLM.step": (lm_step(lambda: ssm.MambaLM(10, D, d_state=4)), lambda: (ids(B),), (B, 10)),
    "LinearAttentionLM.step": (lm_step(lambda: linear_attention.LinearAttentionLM(10, D, 2)),
                               lambda: (ids(B),), (B, 10)),
    "rope": (lambda x: rope.apply_rope(x, *rope.rope_angles(torch.arange(T, device=META), 4)),
             lambda: (floats(B, 2, T, 4),), (B, 2, T, 4)),
    "rotate_half": (rope.rotate_half, lambda: (floats(B, 2, T, 4),), (B, 2, T, 4)),
    "online_softmax": (online_softmax.online_softmax, lambda: (floats(B, T, 6),), (B, T, 6)),
    "tiled_attention": (lambda q, k, v: online_softmax.tiled_attention(q, k, v, 2, causal=True),
                        lambda: (floats(B, 2, T, 4), floats(B, 2, T, 4), floats(B, 2, T, 3)),
                        (B, 2, T, 3)),
    "all_reduce": (tensor_parallel.all_reduce, lambda: (floats(B, T, D),), (B, T, D)),
    "CopyToRanks-SumOverRanks": (
        lambda x: tensor_parallel.SumOverRanks.apply(tensor_parallel.CopyToRanks.apply(x, None), None),
        lambda: (floats(B, T, D),), (B, T, D)),
    "probabilities": (lambda z: speculative.probabilities(z, 0.7), lambda: (floats(B, T, 6),), (B, T, 6)),
    "KVCache": (cache_append, lambda: (floats(B, 2, T, 4), floats(B, 2, T, 4)), (B, 2, 2 * T, 4)),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_forward_and_backward_on_meta(name):
    fn, make_inputs, shape = FUNCTIONS[name]
    module = as_module(fn).to(META)
    inputs = make_inputs()
    out = module(*inputs)
    assert out.device.type == "meta" and tuple(out.shape) == shape, (name, out.shape)
    out.float().sum().backward()
    assert module.w.grad is not None and module.w.grad.device.type == "meta"
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.requires_grad:
            assert x.grad is None or x.grad.device.type == "meta", name


def test_every_public_module_has_a_meta_case():
    """A new public module must be added to CASES (variants such as ``RNN-fast`` are extra)."""
    modules = set()
    for package in (attention, embeddings, gpt, hopfield, lm, rnn, seq2seq, transformer, vsa,
                    linear_attention, scan, ssm, delta_rule, tensor_parallel):
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
