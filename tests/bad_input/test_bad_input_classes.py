"""Bad input by class, over every public function that takes such an argument (issue 35, item 3).

Six classes of bad input slipped through the per-module tables: **lengths beyond the sequence**,
**ids beyond the vocabulary**, **zero sizes**, **empty inputs** (an update order, a training set, a
data function's list), **float masks where a bool mask is expected** and **text that is not
Unicode** (a lone surrogate, read as tiktoken reads it). Each class has one
parametrised test here, over every public callable of the package that takes such an argument,
and each table is held complete by a test that finds those callables *by signature* (the names
of their parameters), so a new function with a ``lengths``, ``mask`` or size parameter cannot
join the package without joining its class's table.

Every bad value must end in a clear error (``tests/badinput.py``: a ValueError or TypeError raised
by seqbook, naming the argument and the value it got). Where a value is meaningful, the function
must give the result the table names instead (``MEANINGFUL_ZERO``, ``EMPTY_MEANINGFUL``,
``FLOAT_MASK_ADDED``, ``SURROGATES``).

``CALLS`` holds one valid call of every callable that the classes need: each test replaces one
argument of that call with the class's bad value.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import os
import pkgutil
import re
import tempfile
from dataclasses import dataclass, field

import matplotlib
import pytest
import torch
from torch import nn

import seqbook
from tests.badinput import assert_clear_error, assert_clear_error_in_time, floats

matplotlib.use("Agg")


def ints(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


def beyond(ids: torch.Tensor, bad: int) -> torch.Tensor:
    """A copy of ``ids`` whose last entry is ``bad`` (one past the table)."""
    ids = ids.clone()
    ids.view(-1)[-1] = bad
    return ids


def gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def module(name: str):
    return importlib.import_module(f"seqbook.{name}")


def public(name: str):
    """The public object ``name`` ("module.Qualname"), looked up when a test runs."""
    mod, *path = name.split(".")
    obj = module(mod)
    for part in path:
        obj = getattr(obj, part)
    return obj


@dataclass
class Call:
    """A valid call: ``target()`` gives the callable (a function, or a method of a fresh object),
    called with ``args`` and ``kwargs``; a test overrides keyword arguments by name."""

    target: object
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def __call__(self, /, **overrides):
        return self.target()(*self.args, **{**self.kwargs, **overrides})


CALLS: dict[str, Call] = {}


def call(name: str, target=None, /, *args, **kwargs) -> None:
    """Register a valid call of ``name``; ``target`` defaults to the public object itself."""
    CALLS[name] = Call(target or (lambda: public(name)), args, kwargs)


def method(name: str, build, /, *args, **kwargs) -> None:
    """Register a valid call of the method ``name`` ("module.Class.method") of ``build()``; the
    method ``forward`` is called through the module (``instance(...)``)."""
    meth = name.rsplit(".", 1)[1]

    def target():
        obj = build()
        return obj if meth == "forward" else getattr(obj, meth)

    CALLS[name] = Call(target, args, kwargs)


# ---------------------------------------------------------------------------------------------
# Small objects the calls share.
# ---------------------------------------------------------------------------------------------

V = 11  # the vocabulary size of every language model below
X3 = floats(2, 4, 8)  # (B, T, D)
REAL = torch.tensor([[True, True, True, False], [True, True, False, False]])  # (B, T), True = real
IDS = torch.tensor([[4, 5, 6, 7], [8, 9, 10, 4]])  # (B, T) ids < V
STREAM = torch.arange(40) % V  # a token stream


def gpt_config(**kw):
    sizes = {"vocab_size": V, "block_size": 8, "n_layer": 1, "n_head": 2, "n_embd": 8, "dropout": 0.0}
    return public("gpt.GPTConfig")(**{**sizes, **kw})


def llama_config(**kw):
    sizes = {"vocab_size": V, "block_size": 8, "n_layer": 1, "n_head": 2, "n_kv_head": 1, "n_embd": 8}
    return public("llama.LlamaConfig")(**{**sizes, **kw})


def gpt():
    return public("gpt.GPT")(gpt_config())


def llama():
    return public("llama.Llama")(llama_config())


def char_lm():
    return public("lm.CharLM")(V, hidden_size=8, embed_dim=4)


def bigram_lm():
    return public("lm.BigramLM")(STREAM, V)


def conditional_lm():
    return public("lm.ConditionalCharLM")(len(VOCAB), num_conditions=3, hidden_size=8, embed_dim=4)


def seq2seq_model():
    return public("seq2seq.Seq2Seq")(V, V, embed_dim=4, hidden_size=6)


def seq2seq_transformer():
    return public("transformer.Seq2SeqTransformer")(V, V, embed_dim=8, num_heads=2, num_encoder_layers=1,
                                                    num_decoder_layers=1, dropout=0.0, max_len=16)


VOCAB = public("vocab.Vocab")(list("abcdefg"))  # 4 reserved tokens and 7 letters: V ids
SRC, SRC_LENGTHS, TGT = IDS, ints(4, 2), torch.tensor([[2, 4, 5, 3], [2, 6, 3, 0]])

# ---------------------------------------------------------------------------------------------
# The valid calls.
# ---------------------------------------------------------------------------------------------

# attention
call("attention.lengths_to_mask", None, lengths=ints(3, 1), max_len=4)
call("attention.causal_mask", None, L=3, S=4)
call("attention.scaled_dot_product_attention", None, q=X3, k=X3, v=X3, mask=REAL[:, None, :])
call("attention.restrict_mask", None, mask=REAL[:, None, :], allowed=torch.ones(4, 4, dtype=torch.bool))
call("attention.padding_to_attn_mask", None, key_padding_mask=~REAL)
call("attention.MultiHeadAttention", None, embed_dim=8, num_heads=2)
method("attention.MultiHeadAttention.forward", lambda: public("attention.MultiHeadAttention")(8, 2),
       query=X3, key=X3, value=X3, key_padding_mask=~REAL, attn_mask=~public("attention.causal_mask")(4))
call("attention.AdditiveAttention", None, query_dim=3, key_dim=8, hidden_dim=5)
method("attention.AdditiveAttention.forward", lambda: public("attention.AdditiveAttention")(3, 8, 5),
       query=floats(2, 3), keys=X3, mask=REAL)

# batching
call("batching.pad_sequences", None, sequences=[[4, 5, 6], [7]], max_len=3)
call("batching.lm_chunks", None, ids=STREAM, batch_size=2, seq_len=4, vocab_size=V)
call("batching.context_windows", None, ids=STREAM[:9], window=2, vocab_size=V)
call("batching.bucket_batches", lambda: lambda **kw: next(public("batching.bucket_batches")(**kw)),
     src=SRC, src_lengths=SRC_LENGTHS, tgt=TGT, batch_size=1, generator=gen(), pool=2,
     src_vocab_size=V, tgt_vocab_size=V)
call("batching.encode_pairs", None, pairs=[("ab", "ba")], src_vocab=VOCAB, tgt_vocab=VOCAB)

# bpe
call("bpe.train_bpe", None, text="aaabdaaabac", vocab_size=258)

# data
call("data.make_dates", None, n=3, seed=0)
call("data.first_token_task", None, n=3, length=4, num_symbols=2, num_noise=2, generator=gen())
call("data.adding_problem", None, n=3, length=4, generator=gen())
call("data.date_dataset", None, n_train=4, n_test=2)
call("data.copy_dataset", None, n_train=4, max_len=3, n_test_per_length=1, test_max_len=4)

# delta_rule
QKV4 = floats(1, 2, 4, 3)  # (B, H, T, D)
BETA = torch.sigmoid(floats(1, 2, 4))
call("delta_rule.delta_rule_chunked", None, q=QKV4, k=torch.nn.functional.normalize(QKV4, dim=-1), v=QKV4,
     beta=BETA, chunk_size=2)
call("delta_rule.DeltaNet", None, embed_dim=8, num_heads=2, chunk_size=2)

# diagrams
call("diagrams.draw_elman_rnn", None, steps=2)
call("diagrams.draw_bahdanau", None, source_length=3)

# distributed
call("distributed.Dist", None, world_size=1)
call("distributed.RunSettings", None, steps=2, batch_size=2)
call("distributed.global_batch_starts", None, seed=0, step=0, num_tokens=40, block_size=4, batch_size=2)
call("distributed.windows", None, ids=STREAM, starts=ints(0, 5), block_size=4)

# embeddings
IMAGES = floats(2, 1, 4, 4)
call("embeddings.patchify", None, images=IMAGES, patch=2)
call("embeddings.PatchEmbedding", None, patch=2, embed_dim=4)
call("embeddings.CBOW", None, vocab_size=V, embed_dim=4)
method("embeddings.CBOW.forward", lambda: public("embeddings.CBOW")(V, 4),
       context=ints(1, 2, 3, 4).view(2, 2))
call("embeddings.SkipGram", None, vocab_size=V, embed_dim=4)
method("embeddings.SkipGram.forward", lambda: public("embeddings.SkipGram")(V, 4),
       words=ints(1, 2), candidates=ints(3, 4, 5, 6).view(2, 2))
call("embeddings.unigram_cross_entropy", None, train_ids=STREAM, test_ids=STREAM[:5], vocab_size=V)
call("embeddings.nearest_neighbours", None, vectors=floats(6, 3), query=ints(0, 2), k=2)
call("embeddings.pca", None, x=floats(6, 3), k=2)

# gpt
call("gpt.GPTConfig", lambda: gpt_config)
call("gpt.GPT", lambda: lambda **kw: public("gpt.GPT")(gpt_config(**kw)))
method("gpt.GPT.forward", gpt, idx=IDS, targets=IDS)
method("gpt.GPT.generate", gpt, idx=IDS, max_new_tokens=2, top_k=3)

# hopfield
PATTERNS = torch.tensor([[1.0, -1, 1, -1, 1, -1], [1, 1, -1, -1, 1, 1]])
STATE = torch.tensor([[1.0, -1, 1, -1, 1, 1]])
call("hopfield.update_async", None, W=public("hopfield.hebbian_weights")(PATTERNS), state=STATE,
     order=[0, 3, 5])
call("hopfield.async_sweep", None, W=public("hopfield.hebbian_weights")(PATTERNS), state=STATE,
     order=[0, 3, 5])
call("hopfield.dense_update_async", None, patterns=PATTERNS, state=STATE, F=2, order=[1, 2])
call("hopfield.dense_async_sweep", None, patterns=PATTERNS, state=STATE, F=2, order=[1, 2])
call("hopfield.retrieve", None, patterns=floats(3, 4), queries=floats(2, 4), beta=1.0, steps=2)
call("hopfield.neighbour_probs", None, queries=floats(2, 4), keys=floats(3, 4), next_tokens=ints(0, 2, 1),
     vocab_size=3, beta=1.0)
call("hopfield.Hopfield", None, state_dim=8, stored_dim=6, key_dim=4, value_dim=5, steps=1)
method("hopfield.Hopfield.forward", lambda: public("hopfield.Hopfield")(8, 8), R=X3, Y=X3, mask=REAL)
call("hopfield.HopfieldPooling", None, input_dim=8, key_dim=4, value_dim=5, num_queries=2)
method("hopfield.HopfieldPooling.forward", lambda: public("hopfield.HopfieldPooling")(8), Y=X3, mask=REAL)
call("hopfield.HopfieldLayer", None, input_dim=8, num_stored=3, key_dim=4, value_dim=5)

# kv_cache
call("kv_cache.KVCache", None, max_len=4)
call("kv_cache.RollingKVCache", None, max_len=4, window=2)

# linear_attention
call("linear_attention.linear_attention_chunked", None, q=QKV4, k=QKV4, v=QKV4, chunk_size=2)
call("linear_attention.LinearAttention", None, embed_dim=8, num_heads=2, chunk_size=2)
call("linear_attention.LinearAttentionLM", None, vocab_size=V, embed_dim=8, num_heads=2, num_layers=1,
     d_ff=8, chunk_size=2)


def linear_lm():
    return public("linear_attention.LinearAttentionLM")(V, embed_dim=8, num_heads=2, num_layers=1)


method("linear_attention.LinearAttentionLM.forward", linear_lm, ids=IDS)
method("linear_attention.LinearAttentionLM.step", linear_lm, ids=IDS[:, 0])

# llama
call("llama.RMSNorm", None, embed_dim=8)
call("llama.SwiGLU", None, embed_dim=8, d_ff=6)
call("llama.GroupedQueryAttention", None, embed_dim=8, num_heads=2, num_kv_heads=1)
call("llama.LlamaBlock", None, embed_dim=8, num_heads=2, num_kv_heads=1, d_ff=6)
call("llama.LlamaConfig", lambda: llama_config)
method("llama.Llama.forward", llama, idx=IDS, targets=IDS)
method("llama.Llama.generate", llama, idx=IDS, max_new_tokens=2, top_k=3)

# lm
call("lm.CharLM", None, vocab_size=V, hidden_size=8, embed_dim=4, num_layers=1)
method("lm.CharLM.forward", char_lm, ids=IDS)
call("lm.ConditionalCharLM", None, vocab_size=V, num_conditions=3, hidden_size=8, embed_dim=4, num_layers=1)
method("lm.ConditionalCharLM.forward", conditional_lm, ids=IDS % len(VOCAB), cond=ints(0, 2))
call("lm.unigram_perplexity", None, train_ids=STREAM, eval_ids=STREAM[:5], vocab_size=V)
call("lm.BigramLM", None, ids=STREAM, vocab_size=V)
method("lm.BigramLM.forward", bigram_lm, idx=IDS)
call("speculative.speculative_generate", None, model=gpt(), draft=bigram_lm(), idx=IDS[:1], max_new_tokens=2)

# decoding
call("decoding.check_sampling", None, vocab_size=V, top_k=3)
call("decoding.forbid_tokens", None, logits=floats(2, V), forbid=(1, 2))
call("decoding.sample_next", None, logits=floats(2, V), top_k=3, generator=gen())
call("decoding.generate", lambda: lambda **kw: public("decoding.generate")(char_lm(), **kw),
     vocab=VOCAB, prefix="ab", n=3, generator=gen())
call("decoding.sample_sequence",
     lambda: lambda **kw: public("decoding.sample_sequence")(conditional_lm(), **kw),
     vocab=VOCAB, cond=1, max_len=3, generator=gen())
call("decoding.generate_tokens", lambda: lambda **kw: public("decoding.generate_tokens")(gpt(), **kw),
     idx=IDS, max_new_tokens=2, top_k=3)
call("decoding.greedy_decode", lambda: lambda **kw: public("decoding.greedy_decode")(seq2seq_model(), **kw),
     src=SRC, src_lengths=SRC_LENGTHS, max_len=3)
call("decoding.beam_search", lambda: lambda **kw: public("decoding.beam_search")(seq2seq_model(), **kw),
     src=SRC, src_lengths=SRC_LENGTHS, beam_width=2, max_len=3)
call("decoding.translate", lambda: lambda **kw: public("decoding.translate")(
    public("seq2seq.Seq2Seq")(len(VOCAB), len(VOCAB), 4, 6), **kw),
    sources=["abc", "d"], src_vocab=VOCAB, tgt_vocab=VOCAB, max_len=3, beam_width=1, batch_size=2)

# losses
PROBS = torch.softmax(floats(5, 3), -1)
call("losses.smooth_labels", None, target=ints(0, 2, 1), num_classes=3, label_smoothing=0.1)
call("losses.cross_entropy", None, logits=floats(5, 3), target=ints(0, 2, 1, 1, 0))
call("losses.focal_loss", None, logits=floats(5, 3), target=ints(0, 2, 1, 1, 0))
call("losses.chunked_cross_entropy", None, h=floats(5, 3), weight=floats(4, 3), target=ints(0, 2, 1, 3, 0),
     chunk_size=2)
call("losses.AdaptiveSoftmax", None, in_features=4, num_classes=5, cutoffs=[2], div_value=2.0)
method("losses.AdaptiveSoftmax.forward", lambda: public("losses.AdaptiveSoftmax")(4, 5, [2], 2.0),
       h=floats(5, 4), target=ints(0, 2, 1, 4, 0))
method("losses.AdaptiveSoftmax.log_prob", lambda: public("losses.AdaptiveSoftmax")(4, 5, [2], 2.0),
       h=floats(5, 4))
call("losses.calibration_bins", None, probs=PROBS, target=ints(0, 2, 1, 1, 0), n_bins=3)
call("losses.expected_calibration_error", None, probs=PROBS, target=ints(0, 2, 1, 1, 0), n_bins=3)
call("losses.macro_auroc", None, similarities=floats(6, 3), labels=ints(0, 1, 2, 0, 1, 2))
call("losses.entropy", None, p=PROBS)
call("losses.kl_divergence", None, p=PROBS, q=PROBS.flip(0))
call("losses.cross_entropy_dist", None, p=PROBS, q=PROBS.flip(0))
call("losses.log_softmax", None, z=floats(5, 3))
call("losses.logsumexp", None, z=floats(5, 3))
call("losses.free_energy", None, z=floats(5, 3))

# molecules
call("molecules.MoleculeEncoder", None, atom_features=3, bond_features=2, embed_dim=8)
call("molecules.encode_solubility", None, embed_dim=8)

# online_softmax
call("online_softmax.tiled_attention", None, q=X3, k=X3, v=X3, tile_size=2)
call("online_softmax.online_softmax", None, x=floats(2, 5))

# plot
call("plot.smooth", None, values=[1.0, 2.0, 3.0, 4.0], window=2)
call("plot.plot_history", lambda: lambda **kw: public("plot.plot_history")(
    public("train.History")(step_loss=[1.0, 2.0, 3.0, 4.0]), **kw), window=2)
call("plot.reliability_diagram", None, probs=PROBS, target=ints(0, 2, 1, 1, 0), n_bins=3)

# recall
call("recall.mqar", None, num_pairs=2, batch_size=2, num_queries=2, num_keys=4, num_values=3, generator=gen())
call("recall.mqar_updates", None, num_writes=4, batch_size=2, writes_per_key=2, num_queries=2, num_keys=4,
     num_values=3, generator=gen())

# rnn
call("rnn.RNNCell", None, input_size=3, hidden_size=4)
for _name in ("RNN", "GRU", "LSTM"):
    call(f"rnn.{_name}", None, input_size=3, hidden_size=4, num_layers=1)
call("rnn.SequenceClassifier", None, vocab_size=V, num_classes=3, hidden_size=4, embed_dim=3, num_layers=1)
method("rnn.SequenceClassifier.forward", lambda: public("rnn.SequenceClassifier")(V, 3, 4, embed_dim=3),
       ids=IDS)

# rope
call("rope.rope_angles", None, positions=torch.arange(4), head_dim=4)

# sampling
call("sampling.top_k", None, logits=floats(2, V), k=3)
call("sampling.warp", None, logits=floats(2, V), top_k=3)
call("sampling.sample", None, logits=floats(2, V), top_k=3, generator=gen())

# scan
call("scan.MinGRU", None, input_size=3, hidden_size=4)

# seq2seq
call("seq2seq.Encoder", None, vocab_size=V, embed_dim=4, hidden_size=6)
method("seq2seq.Encoder.forward", lambda: public("seq2seq.Encoder")(V, 4, 6), src=SRC,
       src_lengths=SRC_LENGTHS)
call("seq2seq.Decoder", None, vocab_size=V, embed_dim=4, hidden_size=6, annotation_dim=12)
call("seq2seq.AttentionDecoder", None, vocab_size=V, embed_dim=4, hidden_size=6, annotation_dim=12,
     attention_dim=5)
call("seq2seq.Seq2Seq", None, src_vocab_size=V, tgt_vocab_size=V, embed_dim=4, hidden_size=6, attention_dim=5)
method("seq2seq.Seq2Seq.encode", seq2seq_model, src=SRC, src_lengths=SRC_LENGTHS)
method("seq2seq.Seq2Seq.forward", seq2seq_model, src=SRC, src_lengths=SRC_LENGTHS, tgt_in=TGT[:, :-1])
method("seq2seq.Seq2Seq.loss", seq2seq_model, src=SRC, src_lengths=SRC_LENGTHS, tgt=TGT)
call("seq2seq.reverse_padded", None, x=X3, lengths=SRC_LENGTHS)

# ssm
A_BAR, B_BAR, C_SSM = torch.full((3, 2), 0.5), floats(3, 2), floats(3, 2)
call("ssm.ssm_kernel", None, A_bar=A_BAR, B_bar=B_BAR, C=C_SSM, length=4)
call("ssm.DiagonalSSM", None, embed_dim=3, d_state=2)
call("ssm.hippo_legs", None, d_state=3)
call("ssm.legendre_basis", None, x=floats(4), d_state=3)
call("ssm.legs_scan", None, x=floats(5), d_state=3)
call("tensor_parallel.column_shard", None, linear=nn.Linear(4, 6), rank=0, world_size=2)
call("tensor_parallel.row_shard", None, linear=nn.Linear(4, 6), rank=1, world_size=2)
ONES3 = torch.ones(3, dtype=torch.cfloat)
call("ssm.dplr_kernel", None, Lambda=torch.complex(-torch.ones(3), torch.ones(3)), P=ONES3, B=ONES3, C=ONES3,
     step=0.1, length=4)
method("ssm.DiagonalSSM.kernel", lambda: public("ssm.DiagonalSSM")(3, 2), length=4)
call("ssm.MambaBlock", None, embed_dim=8, d_state=2, d_conv=2, expand=2)
call("ssm.ssd_chunk_scan", None, x=floats(1, 2, 5, 3), log_a=-torch.rand(1, 2, 5), B=floats(1, 2, 5, 4),
     C=floats(1, 2, 5, 4), chunk_size=2)
call("ssm.Mamba2Block", None, embed_dim=8, d_state=2, d_conv=2, expand=2, head_dim=4, n_groups=2,
     chunk_size=3)
call("ssm.MambaLM", None, vocab_size=V, embed_dim=8, num_layers=1, d_state=2, d_conv=2, expand=2)


def mamba_lm():
    return public("ssm.MambaLM")(V, embed_dim=8, num_layers=1, d_state=2, d_conv=2)


method("ssm.MambaLM.forward", mamba_lm, ids=IDS)
method("ssm.MambaLM.step", mamba_lm, ids=IDS[:, 0])


# train
def mse(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).mean()


XY = (floats(6, 3), floats(6, 1, seed=1))
call("train.fit", None, model=nn.Linear(3, 1), loss_fn=mse, batches=[XY], steps=2, device="cpu",
     progress=False)
call("train.random_batches", lambda: lambda **kw: next(public("train.random_batches")(*XY, **kw)),
     batch_size=2, generator=gen())
call("train.noam_lr", None, step=3, embed_dim=8, warmup_steps=2)
call("train.warmup_factor", None, step=3, warmup_steps=2, total_steps=10)
call("train.warmup_schedule", lambda: lambda **kw: public("train.warmup_schedule")(
    torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1), **kw), warmup_steps=2, total_steps=10)


def chunks():
    return public("batching.lm_chunks")(STREAM, 2, 4)


call("train.train_lm", lambda: lambda **kw: public("train.train_lm")(char_lm(), *chunks(), **kw),
     steps=2, device="cpu", progress=False)


def copy_data():
    return public("data.copy_dataset")(6, 3, 1, seed=0, alphabet="abc")


def copy_model():
    d = copy_data()
    return public("seq2seq.Seq2Seq")(len(d.src_vocab), len(d.tgt_vocab), embed_dim=4, hidden_size=5)


call("train.fit_seq2seq", lambda: lambda **kw: public("train.fit_seq2seq")(copy_model(), copy_data(), **kw),
     steps=2, batch_size=2, device="cpu", progress=False)


def vsa_model():
    return public("vsa_models.build_classifier")("resnet", embed_dim=16, num_layers=1)


def vsa_split(n=6, seed=0):
    return torch.rand(n, 784, generator=torch.Generator().manual_seed(seed)), torch.arange(n) % 10


call("train.predict_similarities", lambda: lambda **kw: public("train.predict_similarities")(
    vsa_model(), vsa_split()[0], **kw), batch_size=4)
call("train.evaluate_vsa", lambda: lambda **kw: public("train.evaluate_vsa")(vsa_model(), *vsa_split(), **kw),
     batch_size=4)
call("train.train_vsa", lambda: lambda **kw: public("train.train_vsa")(vsa_model(), **kw),
     train=vsa_split(), test=vsa_split(4, 1), steps=2, batch_size=2, eval_size=2, device="cpu",
     progress=False)

# transformer
call("transformer.positional_frequencies", None, embed_dim=8)
call("transformer.positional_encoding", None, max_len=4, embed_dim=8)
call("transformer.relative_position_matrix", None, k=2, embed_dim=8)
call("transformer.PositionalEncoding", None, embed_dim=8, max_len=4)
call("transformer.LayerNorm", None, embed_dim=8)
call("transformer.FeedForward", None, embed_dim=8, d_ff=6)
call("transformer.EncoderLayer", None, embed_dim=8, num_heads=2, d_ff=6)
call("transformer.DecoderLayer", None, embed_dim=8, num_heads=2, d_ff=6)
method("transformer.EncoderLayer.forward", lambda: public("transformer.EncoderLayer")(8, 2, dropout=0.0),
       x=X3, key_padding_mask=~REAL, attn_mask=~public("attention.causal_mask")(4))
method("transformer.DecoderLayer.forward", lambda: public("transformer.DecoderLayer")(8, 2, dropout=0.0),
       x=X3, memory=X3, tgt_mask=~public("attention.causal_mask")(4), tgt_key_padding_mask=~REAL,
       memory_key_padding_mask=~REAL, memory_mask=torch.zeros(4, 4, dtype=torch.bool))
call("transformer.Seq2SeqTransformer", None, src_vocab_size=V, tgt_vocab_size=V, embed_dim=8, num_heads=2,
     num_encoder_layers=1, num_decoder_layers=1, d_ff=6, max_len=16)
method("transformer.Seq2SeqTransformer.encode", seq2seq_transformer, src=SRC, src_lengths=SRC_LENGTHS)
method("transformer.Seq2SeqTransformer.loss", seq2seq_transformer, src=SRC, src_lengths=SRC_LENGTHS, tgt=TGT)
method("transformer.Seq2SeqTransformer.forward", seq2seq_transformer, src=SRC, tgt=TGT)

# vocab
call("vocab.Vocab", None, tokens=list("abca"), max_size=2)

# vsa
SYM = (2 * torch.rand(2, 4, 8, generator=gen()) - 1)  # (B, T, D) angles in [-1, 1)
call("vsa.random_symbols", None, n=3, embed_dim=8, generator=gen())
call("vsa_family.hrr_bind", None, a=floats(2, 8), b=floats(2, 8))
call("vsa_family.hrr_unbind", None, a=floats(2, 8), b=floats(2, 8))
call("vsa_family.map_bind", None, a=floats(2, 8), b=floats(2, 8))
call("vsa_family.bsc_bind", None, a=floats(2, 8) > 0, b=floats(2, 8) < 0)
call("vsa_family.bsc_bundle", None, x=floats(3, 8) > 0, generator=gen())
call("vsa.vsa_attention", None, q=SYM, k=SYM, v=SYM, mask=REAL[:, None, :])
call("vsa.vsa_attention_phasor", None, q=public("vsa.to_phasor")(SYM), k=public("vsa.to_phasor")(SYM),
     v=public("vsa.to_phasor")(SYM), mask=REAL[:, None, :])
call("vsa.PhasorMLP", None, embed_dim=8, d_ff=6)
call("vsa.ResidualBlock", None, embed_dim=8, d_ff=6)
call("vsa.SelfAttentionBlock", None, embed_dim=8, d_ff=6)
call("vsa.CrossAttentionBlock", None, embed_dim=8, num_queries=2, d_ff=6)
method("vsa.SelfAttentionBlock.forward", lambda: public("vsa.SelfAttentionBlock")(8), x=SYM,
       mask=REAL[:, None, :])
method("vsa.CrossAttentionBlock.forward", lambda: public("vsa.CrossAttentionBlock")(8, 2), x=SYM, mask=REAL)

# vsa_models
call("vsa_models.SymbolProjection", None, in_features=4, embed_dim=8)
call("vsa_models.Codebook", None, num_classes=3, embed_dim=8)
call("vsa_models.VSAResNet", None, embed_dim=8, num_layers=1, in_features=4, num_classes=3, d_ff=6)
call("vsa_models.VSAAttentionClassifier", None, embed_dim=8, kind="self", num_queries=2, rows=4, cols=2,
     num_classes=3, d_ff=6)
method("vsa_models.VSAAttentionClassifier.forward", lambda: public("vsa_models.VSAAttentionClassifier")(
    8, kind="cross", num_queries=2, rows=4, cols=None, num_classes=3), x=SYM, mask=REAL)
call("vsa_models.build_classifier", None, kind="resnet", embed_dim=8, num_layers=1, d_ff=6)

# the inner steps, cells and decoders that take an argument of a class
Q4 = floats(2, 2, 4, 4)  # (B, H, T, D_h)
call("attention.fused_attention", None, q=Q4, k=Q4, v=Q4, mask=REAL[:, None, None, :])
for _name in ("attend", "attend_fused"):
    method(f"attention.MultiHeadAttention.{_name}", lambda: public("attention.MultiHeadAttention")(8, 2),
           q=Q4, k=Q4, v=Q4, mask=REAL[:, None, None, :])
method("attention.MultiHeadAttention.merge_masks", lambda: public("attention.MultiHeadAttention")(8, 2),
       key_padding_mask=~REAL, attn_mask=~public("attention.causal_mask")(4), B=2, L=4, S=4)
call("vsa.fhrr_attention", None, q=SYM, k=SYM, v=SYM, mask=REAL[:, None, :])
call("vsa.fhrr_attention_fast", None, q=SYM, k=SYM, v=SYM, mask=REAL[:, None, :])
call("rnn.GRUCell", None, input_size=3, hidden_size=4)
call("rnn.LSTMCell", None, input_size=3, hidden_size=4)
call("seq2seq.PlainDecoder", None, vocab_size=V, embed_dim=4, hidden_size=6, annotation_dim=12)
call("gpt.CausalSelfAttention", None, embed_dim=8, num_heads=2)
call("gpt.GPTBlock", None, embed_dim=8, num_heads=2, d_ff=6)
call("vsa.PhasorLinear", None, in_features=4, out_features=3)
method("lm.ConditionalCharLM.initial_state", conditional_lm, cond=ints(0, 2))


def decoder_call(**kw):
    model = seq2seq_model()
    return model.decoder(memory=model.encode(SRC, SRC_LENGTHS), **kw)


call("seq2seq.Decoder.forward", lambda: decoder_call, tgt_in=TGT[:, :-1])


def transformer_decode(**kw):
    model = seq2seq_transformer()
    memory, src_pad = model.encode(SRC, SRC_LENGTHS)
    return model.decode(memory=memory, src_pad=src_pad, **kw)


call("transformer.Seq2SeqTransformer.decode", lambda: transformer_decode, tgt=TGT)
call("vocab.Vocab.decode", lambda: VOCAB.decode, ids=[4, 5])
call("vocab.decode_ids", None, ids=[4, 5], vocab=VOCAB)
call("bpe.ByteBPE.decode", lambda: public("bpe.train_bpe")("aaabdaaabac", 258).decode, ids=[97, 256])
call("vsa_models.codebook_loss", None, similarities=floats(3, 4), labels=ints(0, 3, 1))


def load_ids(**kw):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("aaabdaaabac " * 20)
    try:
        return public("gpt_train.load_ids")(data=f.name, **kw)
    finally:
        os.unlink(f.name)


call("gpt_train.load_ids", lambda: load_ids, tokenizer="bpe", vocab_size=258, valid_frac=0.5)


def train_distributed(**kw):
    dist = public("distributed")
    return dist.train_distributed(gpt_config(), valid_ids=None, run=dist.RunSettings(steps=1, batch_size=2),
                                  d=dist.Dist(), data_info={}, progress=False, **kw)


call("distributed.train_distributed", lambda: train_distributed, train_ids=STREAM)


def test_every_registered_call_is_valid():
    """Each class test changes one argument of these calls: unchanged, every one runs."""
    failed = {}
    for name, c in CALLS.items():
        try:
            c()
        except Exception as exc:  # noqa: BLE001 - collected and reported together
            failed[name] = f"{type(exc).__name__}: {exc}"
    assert not failed, failed


# ---------------------------------------------------------------------------------------------
# Finding the callables of a class by signature.
# ---------------------------------------------------------------------------------------------


@functools.cache
def public_callables() -> dict[str, object]:
    """Every public function, class and method of the package, by ``module.Qualname``: the names
    in a module's ``__all__`` (or, without one, its names without a leading underscore) that the
    module defines, and the public methods (and ``forward``) that a class defines itself. Left
    out: ``seqbook.checks`` (the validators, whose arguments the package builds) and the exercise
    checkers."""
    found = {}
    for info in pkgutil.iter_modules(seqbook.__path__):
        if info.ispkg or info.name == "checks":
            continue
        mod = module(info.name)
        names = getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")]
        for name in names:
            obj = getattr(mod, name, None)
            if not callable(obj) or getattr(obj, "__module__", None) != mod.__name__:
                continue
            found[f"{info.name}.{name}"] = obj
            if inspect.isclass(obj):
                for attr, value in vars(obj).items():
                    if callable(value) and (not attr.startswith("_") or attr == "forward"):
                        found[f"{info.name}.{name}.{attr}"] = value
    return found


def parameters(obj) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return {}


def with_parameter(pattern: str, annotation: str | None = None) -> set[tuple[str, str]]:
    """``(callable, parameter)`` for every public callable whose parameter's name matches
    ``pattern`` (and whose annotation matches ``annotation``, if given)."""
    found = set()
    for name, obj in public_callables().items():
        for p, param in parameters(obj).items():
            typed = annotation is None or re.search(annotation, str(param.annotation))
            if re.fullmatch(pattern, p) and typed:
                found.add((name, p))
    return found


def assert_table_complete(table: dict, found: set[tuple[str, str]], exempt: dict) -> None:
    """Every ``(callable, parameter)`` found by signature is in ``table`` or ``exempt`` (with why)."""
    missing = sorted(f"{n}({p})" for n, p in found if (n, p) not in table and (n, p) not in exempt)
    assert not missing, f"not in the table of this class of bad input: {missing}"
    stale = sorted(f"{n}({p})" for n, p in {**table, **exempt} if n not in public_callables())
    assert not stale, f"the table names callables the package no longer has: {stale}"


# ---------------------------------------------------------------------------------------------
# Class 1: lengths beyond the sequence. A length is the number of real tokens of a sequence
# whose width T is known to the function (the tensor's width, or max_len): a length above T
# would mask or read positions that are not there.
# ---------------------------------------------------------------------------------------------

TOO_LONG = ints(5, 2)  # T = 4 everywhere below
LENGTHS = {  # (callable, parameter): the call's arguments with a length above T
    ("attention.lengths_to_mask", "lengths"): {"lengths": TOO_LONG, "max_len": 4},
    ("batching.bucket_batches", "src_lengths"): {"src_lengths": TOO_LONG},
    ("decoding.greedy_decode", "src_lengths"): {"src_lengths": TOO_LONG},
    ("decoding.beam_search", "src_lengths"): {"src_lengths": TOO_LONG},
    ("seq2seq.reverse_padded", "lengths"): {"lengths": TOO_LONG},
    ("seq2seq.Encoder.forward", "src_lengths"): {"src_lengths": TOO_LONG},
    ("seq2seq.Seq2Seq.encode", "src_lengths"): {"src_lengths": TOO_LONG},
    ("seq2seq.Seq2Seq.forward", "src_lengths"): {"src_lengths": TOO_LONG},
    ("seq2seq.Seq2Seq.loss", "src_lengths"): {"src_lengths": TOO_LONG},
    ("transformer.Seq2SeqTransformer.encode", "src_lengths"): {"src_lengths": TOO_LONG},
    ("transformer.Seq2SeqTransformer.loss", "src_lengths"): {"src_lengths": TOO_LONG},
}


def test_lengths_table_is_complete():
    assert_table_complete(LENGTHS, with_parameter(r"(\w+_)?lengths"), {})


@pytest.mark.parametrize(("name", "param"), sorted(LENGTHS), ids=lambda x: x)
def test_length_beyond_the_sequence_is_refused(name, param):
    assert_clear_error(lambda: CALLS[name](**LENGTHS[name, param]), param, "5", "4", exc=ValueError)


# ---------------------------------------------------------------------------------------------
# Class 2: ids beyond the vocabulary. Every callable that takes ids (or class labels) and knows
# the size of the table they index (its own vocab_size or num_classes, its module's, or the
# width of the logits) refuses an id equal to that size, naming the argument and the id.
# ---------------------------------------------------------------------------------------------

IDS_BEYOND = {  # (callable, parameter): (the call's arguments with an id too large, the id)
    ("batching.lm_chunks", "ids"): ({"ids": STREAM.clone().index_fill_(0, ints(7), V)}, V),
    ("batching.context_windows", "ids"): ({"ids": STREAM[:9].clone().index_fill_(0, ints(3), V)}, V),
    ("batching.bucket_batches", "src"): ({"src": IDS.clone().index_fill_(1, ints(2), V)}, V),
    ("batching.bucket_batches", "tgt"): ({"tgt": TGT.clone().index_fill_(1, ints(1), V)}, V),
    ("embeddings.CBOW.forward", "context"): ({"context": ints(1, V).view(1, 2)}, V),
    ("embeddings.SkipGram.forward", "words"): ({"words": ints(1, V)}, V),
    ("embeddings.SkipGram.forward", "candidates"): ({"candidates": ints(3, V, 5, 6).view(2, 2)}, V),
    ("embeddings.unigram_cross_entropy", "train_ids"): ({"train_ids": ints(1, V)}, V),
    ("embeddings.unigram_cross_entropy", "test_ids"): ({"test_ids": ints(1, V)}, V),
    ("embeddings.nearest_neighbours", "query"): ({"query": ints(6)}, 6),
    ("lm.unigram_perplexity", "train_ids"): ({"train_ids": ints(1, V)}, V),
    ("lm.unigram_perplexity", "eval_ids"): ({"eval_ids": ints(1, V)}, V),
    ("lm.CharLM.forward", "ids"): ({"ids": IDS + 1}, V),
    ("lm.BigramLM", "ids"): ({"ids": beyond(STREAM, V)}, V),
    ("lm.BigramLM.forward", "idx"): ({"idx": IDS + 1}, V),
    ("lm.ConditionalCharLM.forward", "ids"): ({"ids": beyond(IDS % len(VOCAB), V)}, V),
    ("lm.ConditionalCharLM.forward", "cond"): ({"cond": ints(0, 3)}, 3),
    ("lm.ConditionalCharLM.initial_state", "cond"): ({"cond": ints(0, 3)}, 3),
    ("decoding.sample_sequence", "cond"): ({"cond": 3}, 3),
    ("decoding.generate_tokens", "idx"): ({"idx": IDS + 1}, V),
    ("decoding.greedy_decode", "src"): ({"src": IDS + 1}, V),
    ("decoding.beam_search", "src"): ({"src": IDS + 1}, V),
    ("losses.smooth_labels", "target"): ({"target": ints(0, 3, 1)}, 3),
    ("losses.cross_entropy", "target"): ({"target": ints(0, 3, 1, 1, 0)}, 3),
    ("losses.focal_loss", "target"): ({"target": ints(0, 3, 1, 1, 0)}, 3),
    ("losses.AdaptiveSoftmax.forward", "target"): ({"target": ints(0, 2, 5, 1, 0)}, 5),
    ("losses.calibration_bins", "target"): ({"target": ints(0, 3, 1, 1, 0)}, 3),
    ("losses.expected_calibration_error", "target"): ({"target": ints(0, 3, 1, 1, 0)}, 3),
    ("losses.macro_auroc", "labels"): ({"labels": ints(0, 1, 2, 0, 1, 3)}, 3),
    ("plot.reliability_diagram", "target"): ({"target": ints(0, 3, 1, 1, 0)}, 3),
    ("vsa_models.codebook_loss", "labels"): ({"labels": ints(0, 4, 1)}, 4),
    ("rnn.SequenceClassifier.forward", "ids"): ({"ids": IDS + 1}, V),
    ("gpt.GPT.forward", "idx"): ({"idx": IDS + 1}, V),
    ("gpt.GPT.forward", "targets"): ({"targets": IDS + 1}, V),
    ("gpt.GPT.generate", "idx"): ({"idx": IDS + 1}, V),
    ("llama.Llama.forward", "idx"): ({"idx": IDS + 1}, V),
    ("llama.Llama.forward", "targets"): ({"targets": IDS + 1}, V),
    ("llama.Llama.generate", "idx"): ({"idx": IDS + 1}, V),
    ("linear_attention.LinearAttentionLM.forward", "ids"): ({"ids": IDS + 1}, V),
    ("linear_attention.LinearAttentionLM.step", "ids"): ({"ids": beyond(IDS[:, 0], V)}, V),
    ("ssm.MambaLM.forward", "ids"): ({"ids": IDS + 1}, V),
    ("ssm.MambaLM.step", "ids"): ({"ids": beyond(IDS[:, 0], V)}, V),
    ("seq2seq.Encoder.forward", "src"): ({"src": IDS + 1}, V),
    ("seq2seq.Decoder.forward", "tgt_in"): ({"tgt_in": beyond(TGT[:, :-1], V)}, V),
    ("seq2seq.Seq2Seq.encode", "src"): ({"src": IDS + 1}, V),
    ("seq2seq.Seq2Seq.forward", "src"): ({"src": IDS + 1}, V),
    ("seq2seq.Seq2Seq.forward", "tgt_in"): ({"tgt_in": beyond(TGT[:, :-1], V)}, V),
    ("seq2seq.Seq2Seq.loss", "src"): ({"src": IDS + 1}, V),
    ("seq2seq.Seq2Seq.loss", "tgt"): ({"tgt": beyond(TGT, V)}, V),
    ("transformer.Seq2SeqTransformer.encode", "src"): ({"src": IDS + 1}, V),
    ("transformer.Seq2SeqTransformer.decode", "tgt"): ({"tgt": beyond(TGT, V)}, V),
    ("transformer.Seq2SeqTransformer.forward", "src"): ({"src": IDS + 1}, V),
    ("transformer.Seq2SeqTransformer.forward", "tgt"): ({"tgt": beyond(TGT, V)}, V),
    ("transformer.Seq2SeqTransformer.loss", "src"): ({"src": IDS + 1}, V),
    ("transformer.Seq2SeqTransformer.loss", "tgt"): ({"tgt": beyond(TGT, V)}, V),
    ("vocab.Vocab.decode", "ids"): ({"ids": [4, len(VOCAB)]}, len(VOCAB)),
    ("vocab.decode_ids", "ids"): ({"ids": [4, len(VOCAB)]}, len(VOCAB)),
    ("bpe.ByteBPE.decode", "ids"): ({"ids": [97, 258]}, 258),
    ("distributed.train_distributed", "train_ids"): ({"train_ids": STREAM + 1}, V),
}
# Training loops whose ids are checked against the model they train (item 3 of the issue: the
# model's own checks run on the reader's data inside the loop).
class Wrapped(nn.Module):
    """A reader's model that states no vocabulary: only the model inside can check the ids."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, ids, state=None):
        return self.inner(ids, state)


def chunks_with_id(bad: int):
    """lm_chunks of a stream whose first id is ``bad``: the first input the model reads."""
    stream = STREAM.clone()
    stream[0] = bad
    return public("batching.lm_chunks")(stream, 2, 4)


def run_lm(model, bad=V):
    return public("train.train_lm")(model, *chunks_with_id(bad), steps=1, device="cpu", progress=False)


IDS_BEYOND_IN_TRAINING = {  # the call, and the words of the message
    # the validator knows the vocabulary: model.vocab_size, or a GPT's config.vocab_size
    "train_lm-CharLM": (lambda: run_lm(char_lm()), "inputs", "[0, 10]", "11"),
    "train_lm-GPT": (lambda: run_lm(gpt()), "inputs", "[0, 10]", "11"),
    # no vocabulary stated: the model's own check runs on the reader's data inside the loop
    "train_lm-a-model-without-vocab_size": (lambda: run_lm(Wrapped(char_lm())), "ids", "[0, 10]", "11"),
    "fit-GPT": (lambda: public("train.fit")(gpt(), lambda m, b: m(b, b)[1], [beyond(IDS, V)], steps=1,
                                            device="cpu", progress=False), "idx", "[0, 10]", "11"),
    "evaluate_vsa": (lambda: public("train.evaluate_vsa")(
        vsa_model(), vsa_split()[0], beyond(vsa_split()[1], 10)), "data[1]", "[0, 9]", "10"),
    "train_vsa": (lambda: public("train.train_vsa")(
        vsa_model(), vsa_split(), (vsa_split()[0], torch.arange(6) + 5), steps=1, batch_size=2, device="cpu",
        progress=False), "test[1]", "[0, 9]", "10"),
}

IDS_PARAMS = r"ids|idx|context|src|tgt|tgt_in|targets|target|labels|cond|train_ids|test_ids|eval_ids"
TABLE_SIZES = {"vocab_size", "num_classes", "src_vocab_size", "tgt_vocab_size", "num_conditions", "config"}


def ids_with_a_known_table() -> set[tuple[str, str]]:
    """``(callable, parameter)``: an ids parameter of a callable that knows the size of the table
    the ids index, by a size parameter of its own or of its class's constructor."""
    found, callables = set(), public_callables()
    for name, p in with_parameter(IDS_PARAMS):
        owner = callables.get(name.rsplit(".", 1)[0]) if name.count(".") == 2 else None
        sizes = set(parameters(callables[name]))
        if inspect.isclass(owner):
            sizes |= set(parameters(owner))
        if sizes & TABLE_SIZES:
            found.add((name, p))
    return found


def test_ids_table_is_complete():
    assert_table_complete(IDS_BEYOND, ids_with_a_known_table(), {})


@pytest.mark.parametrize(("name", "param"), sorted(IDS_BEYOND), ids=lambda x: x)
def test_id_beyond_the_vocabulary_is_refused(name, param):
    overrides, bad = IDS_BEYOND[name, param]
    assert_clear_error_in_time(lambda: CALLS[name](**overrides), param, str(bad), exc=ValueError, seconds=60)


@pytest.mark.parametrize("case", sorted(IDS_BEYOND_IN_TRAINING))
def test_id_beyond_the_model_vocabulary_is_refused_inside_training(case):
    fn, *words = IDS_BEYOND_IN_TRAINING[case]
    assert_clear_error_in_time(fn, *words, exc=ValueError, seconds=60)


# ---------------------------------------------------------------------------------------------
# Class 3: zero sizes. Every int size (a length, a count, a width, a number of steps or layers)
# is refused at 0, naming the size and the 0, unless 0 means something; then the call gives
# the empty result named here.
# ---------------------------------------------------------------------------------------------

SIZE_NAMES = (r"n|k|length|max_len|batch_size|seq_len|window|steps|chunk_size|tile_size|block_size"
              r"|beam_width|max_new_tokens|pool|n_bins|patch|rows|cols|expand|top_k|L|S|num_\w+|n_\w+|d_\w+"
              r"|\w+_size|\w+_dim|\w+_len|\w+_length|\w+_steps|\w+_features|\w+_channels|\w+_per_\w+")
NOT_SIZES = {  # (callable, parameter): why 0 is not a size here
    ("transformer.relative_position_matrix", "k"): "k is an offset between positions (0: the same one)",
    ("attention.MultiHeadAttention.merge_masks", "L"): "the shape of the scores, given by forward",
    ("attention.MultiHeadAttention.merge_masks", "S"): "the shape of the scores, given by forward",
}
MEANINGFUL_ZERO = {  # (callable, parameter): what the call with 0 (``zero(**other_arguments)``) gives
    ("attention.causal_mask", "L"): lambda zero: zero().shape == (0, 4),  # no queries
    ("attention.causal_mask", "S"): lambda zero: zero().shape == (3, 0),  # no keys
    # the empty mask of empty sequences; a length above 0 is refused (class 1)
    ("attention.lengths_to_mask", "max_len"): lambda zero: zero(lengths=ints(0, 0)).shape == (2, 0),
    ("data.make_dates", "n"): lambda zero: zero() == [],
    ("vocab.Vocab", "max_size"): lambda zero: len(zero()) == 4,  # the reserved tokens only
    ("train.warmup_factor", "warmup_steps"): lambda zero: 0 < zero() <= 1,  # no warm-up
    ("train.warmup_schedule", "warmup_steps"): lambda zero: 0 < zero().get_last_lr()[0] <= 0.1,
    # asked for no new token: the prompt comes back unchanged
    ("gpt.GPT.generate", "max_new_tokens"): lambda zero: torch.equal(zero(), IDS),
    ("llama.Llama.generate", "max_new_tokens"): lambda zero: torch.equal(zero(), IDS),
    ("decoding.generate_tokens", "max_new_tokens"): lambda zero: torch.equal(zero(), IDS),
    ("speculative.speculative_generate", "max_new_tokens"): lambda zero: torch.equal(zero()[0], IDS[:1]),
    ("decoding.generate", "n"): lambda zero: zero() == "ab",
    # the paper's trainability test without hidden blocks: projection and codebook only
    ("vsa_models.VSAResNet", "num_layers"): lambda zero: not any(
        isinstance(m, public("vsa.ResidualBlock")) for m in zero().modules()),
    ("vsa_models.build_classifier", "num_layers"): lambda zero: not any(
        isinstance(m, public("vsa.ResidualBlock")) for m in zero().modules()),
}


def zero_sizes() -> set[tuple[str, str]]:
    found = with_parameter(SIZE_NAMES, annotation=r"^(int|int \| None|int \| float)$")
    return {(n, p) for n, p in found if not n.rsplit(".", 1)[-1].startswith("check_")}


def test_zero_size_table_is_complete():
    """Every int size found by signature has a valid call to change (``CALLS``)."""
    missing = sorted(f"{n}({p})" for n, p in zero_sizes() if n not in CALLS and (n, p) not in NOT_SIZES)
    assert not missing, f"no valid call registered in CALLS for: {missing}"
    assert_table_complete(MEANINGFUL_ZERO, set(), NOT_SIZES)


@pytest.mark.parametrize(("name", "param"), sorted(zero_sizes()), ids=lambda x: x)
def test_zero_size_is_refused_or_meaningful(name, param):
    if (name, param) in NOT_SIZES:
        pytest.skip(NOT_SIZES[name, param])
    if (name, param) in MEANINGFUL_ZERO:
        assert MEANINGFUL_ZERO[name, param](lambda **kw: CALLS[name](**{param: 0, **kw}))
    else:
        assert_clear_error_in_time(lambda: CALLS[name](**{param: 0}), param, "got 0", exc=ValueError,
                                   seconds=60)


# ---------------------------------------------------------------------------------------------
# Class 4: empty inputs. An update order, a training set, the list a data function turns into a
# batch: empty, each is refused by name, unless an empty input has an empty answer (named here).
# ---------------------------------------------------------------------------------------------

EMPTY_LONG = torch.zeros(0, dtype=torch.long)


def no_pairs():
    return public("data.TranslationData")([], [], VOCAB, VOCAB)


EMPTY = {  # (callable, parameter): (the call with the empty input, words of the message)
    ("hopfield.update_async", "order"): (lambda: CALLS["hopfield.update_async"](order=[]), "empty"),
    ("hopfield.async_sweep", "order"): (lambda: CALLS["hopfield.async_sweep"](order=[]), "empty"),
    ("hopfield.dense_update_async", "order"): (
        lambda: CALLS["hopfield.dense_update_async"](order=torch.zeros(0, dtype=torch.long)), "empty"),
    ("hopfield.dense_async_sweep", "order"): (lambda: CALLS["hopfield.dense_async_sweep"](order=()), "empty"),
    ("train.fit", "batches"): (lambda: CALLS["train.fit"](batches=[]), "at least one batch"),
    ("train.random_batches", "tensors"): (
        lambda: next(public("train.random_batches")(XY[0][:0], XY[1][:0], batch_size=1)), "at least one",
        "(0, 3)"),
    ("train.train_lm", "inputs"): (
        lambda: public("train.train_lm")(char_lm(), IDS[None, :0], IDS[None, :0], steps=1, progress=False),
        "inputs", "empty", "(1, 0, 4)"),
    ("train.ChunksInOrder", "inputs"): (lambda: public("train.ChunksInOrder")(IDS[None, :0], IDS[None, :0]),
                                        "inputs", "empty", "(1, 0, 4)"),
    ("train.fit_seq2seq", "data"): (
        lambda: public("train.fit_seq2seq")(copy_model(), no_pairs(), steps=1, progress=False), "data.train",
        "at least one"),
    ("train.predict_similarities", "inputs"): (
        lambda: public("train.predict_similarities")(vsa_model(), vsa_split()[0][:0]), "inputs", "N >= 1"),
    ("train.evaluate_vsa", "data"): (
        lambda: public("train.evaluate_vsa")(vsa_model(), *(t[:0] for t in vsa_split())), "data", "N >= 1"),
    ("train.train_vsa", "train"): (lambda: CALLS["train.train_vsa"](train=tuple(t[:0] for t in vsa_split())),
                                   "train", "N >= 1"),
    ("train.train_vsa", "test"): (lambda: CALLS["train.train_vsa"](test=tuple(t[:0] for t in vsa_split())),
                                  "test", "N >= 1"),
    ("batching.pad_sequences", "sequences"): (lambda: CALLS["batching.pad_sequences"](sequences=[]), "empty"),
    ("batching.encode_pairs", "pairs"): (lambda: CALLS["batching.encode_pairs"](pairs=[]), "empty"),
    ("batching.lm_chunks", "ids"): (lambda: CALLS["batching.lm_chunks"](ids=EMPTY_LONG), "empty"),
    ("batching.context_windows", "ids"): (lambda: CALLS["batching.context_windows"](ids=EMPTY_LONG), "got 0"),
    ("batching.bucket_batches", "src"): (
        lambda: CALLS["batching.bucket_batches"](src=SRC[:0], src_lengths=SRC_LENGTHS[:0], tgt=TGT[:0]),
        "at least one sequence"),
    ("seq2seq.exact_match_by_length", "pairs"): (
        lambda: public("seq2seq.exact_match_by_length")([], []), "pairs", "at least one"),
    ("data.strip_gutenberg", "text"): (lambda: public("data.strip_gutenberg")(""), "text", "markers"),
    ("plot.coloured_text", "text"): (lambda: public("plot.coloured_text")("", []), "text", "at least one"),
    ("data.load_names", "languages"): (lambda: public("data.load_names")([]), "at least one language"),
    ("embeddings.unigram_cross_entropy", "train_ids"): (
        lambda: CALLS["embeddings.unigram_cross_entropy"](train_ids=EMPTY_LONG), "empty"),
    ("embeddings.unigram_cross_entropy", "test_ids"): (
        lambda: CALLS["embeddings.unigram_cross_entropy"](test_ids=EMPTY_LONG), "empty"),
    ("lm.unigram_perplexity", "train_ids"): (
        lambda: CALLS["lm.unigram_perplexity"](train_ids=EMPTY_LONG), "empty"),
    ("lm.unigram_perplexity", "eval_ids"): (
        lambda: CALLS["lm.unigram_perplexity"](eval_ids=EMPTY_LONG), "empty"),
    ("lm.evaluate_perplexity", "inputs"): (
        lambda: public("lm.evaluate_perplexity")(char_lm(), IDS[None, :0], IDS[None, :0]), "empty"),
    ("distributed.train_distributed", "train_ids"): (
        lambda: CALLS["distributed.train_distributed"](train_ids=EMPTY_LONG), "train_ids"),
}
EMPTY_MEANINGFUL = {  # (callable, parameter): why the empty input has an answer, checked here
    ("decoding.translate", "sources"): lambda: CALLS["decoding.translate"](sources=[]) == [],
    ("data.split_text", "text"): lambda: public("data.split_text")("", 0.1) == ("", ""),
    ("vocab.tokenize_chars", "text"): lambda: public("vocab.tokenize_chars")("") == [],
    ("vocab.tokenize_words", "text"): lambda: public("vocab.tokenize_words")("") == [],
    ("vocab.normalize_text", "text"): lambda: public("vocab.normalize_text")("") == "",
    ("bpe.pretokenize", "text"): lambda: public("bpe.pretokenize")("") == [],
    ("bpe.well_formed", "text"): lambda: public("bpe.well_formed")("") == "",
    ("bpe.ByteBPE.encode", "text"): lambda: public("bpe.train_bpe")("abab", 257).encode("") == [],
    ("bpe.train_bpe", "text"): lambda: public("bpe.train_bpe")("", 258).vocab_size == 256,  # no merge
    # a container of splits: the functions that train or encode a split refuse an empty one
    ("data.TranslationData", "train"): lambda: len(no_pairs().train) == 0,
    ("data.TranslationData", "test"): lambda: len(no_pairs().test) == 0,
    # a path to a text file, not a collection
    ("gpt_train.load_ids", "data"): lambda: True,
}
EMPTY_PARAMS = (r"order|batches|train|test|tensors|inputs|data|sequences|pairs|sources|languages|text"
                r"|train_ids|test_ids|eval_ids")


def test_empty_table_is_complete():
    found = with_parameter(EMPTY_PARAMS) | {(n, p) for n, p in with_parameter(r"ids|src")
                                            if n.split(".")[0] == "batching"}
    assert_table_complete(EMPTY, found, EMPTY_MEANINGFUL)


@pytest.mark.parametrize(("name", "param"), sorted(EMPTY), ids=lambda x: x)
def test_empty_input_is_refused(name, param):
    fn, *words = EMPTY[name, param]
    assert_clear_error_in_time(fn, *words, exc=ValueError, seconds=60)


@pytest.mark.parametrize(("name", "param"), sorted(EMPTY_MEANINGFUL), ids=lambda x: x)
def test_empty_input_with_an_answer(name, param):
    assert EMPTY_MEANINGFUL[name, param]()


# ---------------------------------------------------------------------------------------------
# Class 5: float masks where a bool mask is expected. A float copy of a bool mask (1.0 / 0.0)
# would be *added* to the scores, not block anything: every mask that must be bool refuses it
# with a TypeError naming the mask and its dtype. The masks that PyTorch's own functions take
# as additive (``attn_mask``, the ``mask`` of scaled dot-product attention) accept a float mask
# and add it: there, 0 / -inf must give what the bool mask gives.
# ---------------------------------------------------------------------------------------------

BOOL_MASKS = {  # (callable, parameter): why the mask must be bool
    ("attention.padding_to_attn_mask", "key_padding_mask"): "PyTorch's key padding mask, True at padding",
    ("attention.MultiHeadAttention.forward", "key_padding_mask"): "True at padding",
    ("attention.AdditiveAttention.forward", "mask"): "True at a real source token",
    ("hopfield.Hopfield.forward", "mask"): "True at a stored element",
    ("hopfield.HopfieldPooling.forward", "mask"): "True at a set element",
    ("transformer.EncoderLayer.forward", "key_padding_mask"): "True at padding",
    ("transformer.DecoderLayer.forward", "tgt_key_padding_mask"): "True at padding",
    ("transformer.DecoderLayer.forward", "memory_key_padding_mask"): "True at padding",
    ("vsa.vsa_attention", "mask"): "True where a query may attend",
    ("vsa.vsa_attention_phasor", "mask"): "True where a query may attend",
    ("vsa.SelfAttentionBlock.forward", "mask"): "True where a query may attend",
    ("vsa.CrossAttentionBlock.forward", "mask"): "True at a real element",
    ("vsa_models.VSAAttentionClassifier.forward", "mask"): "True at a real element",
}
FLOAT_MASK_ADDED = {  # (callable, parameter): True when a True of the bool mask blocks (PyTorch's)
    ("attention.scaled_dot_product_attention", "mask"): False,
    ("attention.restrict_mask", "mask"): False,
    ("attention.MultiHeadAttention.forward", "attn_mask"): True,
    ("transformer.EncoderLayer.forward", "attn_mask"): True,
    ("transformer.DecoderLayer.forward", "tgt_mask"): True,
    ("transformer.DecoderLayer.forward", "memory_mask"): True,
    ("attention.fused_attention", "mask"): False,
    ("attention.MultiHeadAttention.attend", "mask"): False,
    ("attention.MultiHeadAttention.attend_fused", "mask"): False,
    ("attention.MultiHeadAttention.merge_masks", "attn_mask"): True,
}
MASK_EXEMPT = {  # (callable, parameter): why it is not in the tables above
    ("seq2seq.EncoderOutput", "mask"): "a named tuple of the encoder's outputs (built by the package)",
    ("vsa.fhrr_attention", "mask"): "eq. 6 as chapter 8 prints it, documented as unchecked: "
    "vsa_attention and the blocks check the mask at their door",
    ("vsa.fhrr_attention_fast", "mask"): "the unchecked fast twin of fhrr_attention (vsa_attention "
    "checks the mask)",
    ("attention.MultiHeadAttention.merge_masks", "key_padding_mask"): "the step of forward that "
    "combines masks forward has checked (a float attn_mask is PyTorch's additive mask)",
}


def additive(mask: torch.Tensor, blocks: bool) -> torch.Tensor:
    """The float mask that means what the bool ``mask`` means: 0 where allowed, -inf where blocked."""
    blocked = mask if blocks else ~mask
    return torch.zeros(mask.shape).masked_fill(blocked, -math.inf)


def test_float_mask_table_is_complete():
    table = {**BOOL_MASKS, **FLOAT_MASK_ADDED}
    assert_table_complete(table, with_parameter(r"(\w+_)?mask"), MASK_EXEMPT)
    for name, param in table:
        assert CALLS[name].kwargs[param].dtype == torch.bool, f"CALLS[{name!r}] needs a bool {param}"


@pytest.mark.parametrize(("name", "param"), sorted(BOOL_MASKS), ids=lambda x: x)
def test_float_mask_is_refused_where_a_bool_mask_is_expected(name, param):
    float_mask = CALLS[name].kwargs[param].float()
    assert_clear_error(lambda: CALLS[name](**{param: float_mask}), param, "torch.float32", exc=TypeError)


@pytest.mark.parametrize(("name", "param"), sorted(FLOAT_MASK_ADDED), ids=lambda x: x)
def test_float_mask_is_added_where_pytorch_adds_it(name, param):
    mask = CALLS[name].kwargs[param]
    torch.manual_seed(0)
    with_bool = CALLS[name]()
    torch.manual_seed(0)
    with_float = CALLS[name](**{param: additive(mask, FLOAT_MASK_ADDED[name, param])})
    first = lambda out: out[0] if isinstance(out, tuple) else out  # noqa: E731
    a, b = first(with_bool), first(with_float)
    if a.dtype == torch.bool:  # restrict_mask returns the mask it restricts
        a = additive(a, blocks=False)
    torch.testing.assert_close(b, a)


# ---------------------------------------------------------------------------------------------
# Class 6: text that is not Unicode. A Python str may hold a lone surrogate (half of a UTF-16
# pair), which has no UTF-8 bytes. Every function that turns text into bytes reads it as
# tiktoken does: a lone surrogate is U+FFFD, so the result equals the result for that text.
# ---------------------------------------------------------------------------------------------

LONE, READ_AS = "ab \ud800cd ab\udfff ab", "ab \ufffdcd ab\ufffd ab"


def new_axes():
    import matplotlib.pyplot as plt

    plt.close("all")
    return plt.figure().gca()


def byte_bpe():
    return public("bpe.train_bpe")("ab ab cd ab", 259)


SURROGATES = {  # (callable, parameter): a call of the text, compared with its result for READ_AS
    ("bpe.well_formed", "text"): lambda text: public("bpe.well_formed")(text),
    ("bpe.pretokenize", "text"): lambda text: public("bpe.pretokenize")(text),
    ("bpe.ByteBPE.encode", "text"): lambda text: byte_bpe().encode(text),
    ("bpe.train_bpe", "text"): lambda text: public("bpe.train_bpe")(text * 3, 260).merges,
    ("plot.coloured_text", "text"): lambda text: [  # the characters drawn, on new axes each time
        t.get_text() for t in public("plot.coloured_text")(text, [0.0] * len(text), ax=new_axes()).texts],
}
SURROGATES_EXEMPT = {  # (callable, parameter): why a lone surrogate is no error there
    (name, "text"): "reads characters, not bytes: a surrogate is one character of the text"
    for name in ("data.strip_gutenberg", "data.split_text", "vocab.tokenize_chars", "vocab.tokenize_words",
                 "vocab.normalize_text")
}


def test_surrogate_table_is_complete():
    assert_table_complete(SURROGATES, with_parameter("text"), SURROGATES_EXEMPT)


@pytest.mark.parametrize(("name", "param"), sorted(SURROGATES), ids=lambda x: x)
def test_lone_surrogate_reads_as_the_replacement_character(name, param):
    assert SURROGATES[name, param](LONE) == SURROGATES[name, param](READ_AS)
