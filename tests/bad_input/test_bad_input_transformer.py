# 222 cases: 215 bad inputs that must end in a clear error, 7 legal edge inputs checked for a correct result.
"""Bad input to seqbook.transformer: every public callable refuses it clearly, or handles a legal edge.

Each ``ERRORS`` case must end in a ValueError/TypeError raised by seqbook whose message holds the
words listed (the argument's name and the expected or actual value, shape or dtype).
"""

import numpy as np
import pytest
import torch
from torch import nn

from seqbook import train
from seqbook import transformer as tf
from seqbook.gpt import GPT, GPTBlock, GPTConfig
from seqbook.kv_cache import KVCache
from seqbook.rope import rope_angles
from seqbook.transformer import (
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    LayerNorm,
    PositionalEncoding,
    Seq2SeqTransformer,
)
from tests.badinput import BAD_FLAGS, assert_clear_error, table

NAN, INF = float("nan"), float("inf")


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


X = rand(2, 5, 8)
MEM = rand(2, 3, 8, seed=1)
ENC, DEC = EncoderLayer(8, 2, dropout=0.0), DecoderLayer(8, 2, dropout=0.0)
S2S = Seq2SeqTransformer(10, 12, 8, 2, 1, 1, dropout=0.0, max_len=16)
SRC = torch.tensor([[3, 4, 5, 2], [6, 7, 2, 0]])
TGT = torch.tensor([[1, 4, 5, 2], [1, 8, 2, 0]])
GPT_ = GPT(GPTConfig(12, 8, 1, 2, 8, dropout=0.0))
LEN = (SRC != 0).sum(1)
ENCODED = S2S.encode(SRC, LEN)  # (memory (2, 4, 8), src_pad (2, 4))
Y = torch.tensor([2, 2])  # <sos>
S2S_PARTS = lambda: (nn.Embedding(10, 8, padding_idx=0), nn.Embedding(12, 8, padding_idx=0), nn.Linear(8, 12))
IDX = torch.tensor([[5, 6, 7], [8, 9, 10]])
OPT = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)

ERRORS, case = table()


# positional code
case("positional_frequencies-odd", lambda: tf.positional_frequencies(7), "embed_dim", "even", "7")
case("positional_frequencies-float", lambda: tf.positional_frequencies(8.0), "embed_dim", "float")
case("positional_frequencies-base-0", lambda: tf.positional_frequencies(8, base=0.0), "base", "> 1.0")
case("positional_frequencies-base-nan", lambda: tf.positional_frequencies(8, base=NAN), "base", "nan")
case("positional_encoding-max_len-0", lambda: tf.positional_encoding(0, 8), "max_len", "int >= 1",
     "0")
case("positional_encoding-max_len-float", lambda: tf.positional_encoding(2.5, 8), "max_len", "float")
case("positional_encoding-max_len-bool", lambda: tf.positional_encoding(True, 8), "max_len", "bool")
case("positional_encoding-embed_dim-0", lambda: tf.positional_encoding(4, 0), "embed_dim", "0")
case("relative_position_matrix-k-nan", lambda: tf.relative_position_matrix(NAN, 8), "k", "nan")
case("relative_position_matrix-k-str", lambda: tf.relative_position_matrix("1", 8), "k", "str")
case("relative_position_matrix-embed_dim-odd", lambda: tf.relative_position_matrix(1, 5), "embed_dim", "5")
case("PositionalEncoding-embed_dim-odd", lambda: PositionalEncoding(7), "embed_dim", "7")
case("PositionalEncoding-max_len-0", lambda: PositionalEncoding(8, 0), "max_len", "0")
case("PositionalEncoding-dropout-1", lambda: PositionalEncoding(8, dropout=1.0), "dropout", "1.0")
case("PositionalEncoding-x-last-dim", lambda: PositionalEncoding(8)(rand(2, 5, 7)), "x must have shape",
     "(B, T, 8)", "(2, 5, 7)")
case("PositionalEncoding-x-int", lambda: PositionalEncoding(8)(X.long()), "x", "torch.int64")
case("PositionalEncoding-x-too-long", lambda: PositionalEncoding(8, 4)(X), "exceeds max_len=4")
case("PositionalEncoding-offset-negative", lambda: PositionalEncoding(8)(X, offset=-1), "offset", "-1")
case("PositionalEncoding-offset-float", lambda: PositionalEncoding(8)(X, offset=1.5), "offset", "float")

# LayerNorm, FeedForward
case("LayerNorm-embed_dim-0", lambda: LayerNorm(0), "embed_dim", "0")
case("LayerNorm-eps-negative", lambda: LayerNorm(8, eps=-1e-5), "eps", ">= 0.0")
case("LayerNorm-eps-nan", lambda: LayerNorm(8, eps=NAN), "eps", "nan")
case("LayerNorm-x-last-dim", lambda: LayerNorm(8)(rand(4, 7)), "x must have shape", "(..., 8)", "(4, 7)")
case("LayerNorm-x-int", lambda: LayerNorm(8)(X.long()), "x", "torch.int64")
case("LayerNorm-x-rank0", lambda: LayerNorm(8)(torch.tensor(1.0)), "x must have shape", "()")
case("LayerNorm-from_torch-linear", lambda: LayerNorm.from_torch(nn.Linear(2, 2)), "m", "nn.LayerNorm")
case("FeedForward-d_ff-0", lambda: FeedForward(8, 0), "d_ff", "0")
case("FeedForward-embed_dim-float", lambda: FeedForward(8.0, 16), "embed_dim", "float")
case("FeedForward-dropout-nan", lambda: FeedForward(8, 16, dropout=NAN), "dropout", "nan")
case("FeedForward-activation", lambda: FeedForward(8, 16, activation="tanh"), "activation", "tanh")
case("FeedForward-x-last-dim", lambda: FeedForward(8, 16)(rand(2, 7)), "x must have shape", "(..., 8)")
case("FeedForward-x-float64", lambda: FeedForward(8, 16)(X.double()), "x", "torch.float64")

# EncoderLayer, DecoderLayer
case("EncoderLayer-not-divisible", lambda: EncoderLayer(10, 3), "embed_dim must be divisible by num_heads")
case("EncoderLayer-num_heads-0", lambda: EncoderLayer(8, 0), "num_heads", "0")
case("EncoderLayer-embed_dim-bool", lambda: EncoderLayer(True, 1), "embed_dim", "bool")
case("EncoderLayer-d_ff-negative", lambda: EncoderLayer(8, 2, d_ff=-4), "d_ff", "-4")
case("EncoderLayer-dropout-2", lambda: EncoderLayer(8, 2, dropout=2.0), "dropout", "2.0")
case("EncoderLayer-activation", lambda: EncoderLayer(8, 2, activation="swish"), "activation", "swish")
case("EncoderLayer-fast-int", lambda: EncoderLayer(8, 2, fast=1), "fast", "bool")
case("EncoderLayer-x-last-dim", lambda: ENC(rand(2, 5, 6)), "x must have shape", "(B, T, 8)", "(2, 5, 6)")
case("EncoderLayer-x-T0", lambda: ENC(rand(2, 0, 8)), "x", "empty", "(2, 0, 8)")
case("EncoderLayer-x-B0", lambda: ENC(rand(0, 5, 8)), "x", "empty", "(0, 5, 8)")
case("EncoderLayer-x-int", lambda: ENC(X.long()), "x", "torch.int64")
case("EncoderLayer-x-float64", lambda: ENC(X.double()), "x", "torch.float32", "torch.float64")
case("EncoderLayer-key_padding_mask-shape", lambda: ENC(X, key_padding_mask=torch.zeros(2, 4,
     dtype=torch.bool)), "key_padding_mask must have shape", "(2, 5)", "(2, 4)")
case("EncoderLayer-attn_mask-int", lambda: ENC(X, attn_mask=torch.zeros(5, 5, dtype=torch.long)),
     "attn_mask", "torch.int64")
case("EncoderLayer-is_causal-int", lambda: ENC(X, is_causal=1), "is_causal", "bool")
case("EncoderLayer-from_torch-linear", lambda: EncoderLayer.from_torch(nn.Linear(2, 2)), "m",
     "nn.TransformerEncoderLayer")
case("EncoderLayer-from_torch-sequence-first",
     lambda: EncoderLayer.from_torch(nn.TransformerEncoderLayer(8, 2)), "batch_first=True")
case("EncoderLayer-norm_first-int", lambda: EncoderLayer(8, 2, norm_first=1), "norm_first", "bool")
case("DecoderLayer-not-divisible", lambda: DecoderLayer(10, 4), "divisible", "num_heads=4")
case("DecoderLayer-memory-rank2", lambda: DEC(X, MEM[0]), "memory must have shape", "(B, T, 8)", "(3, 8)")
case("DecoderLayer-memory-batch", lambda: DEC(X, rand(3, 3, 8)), "memory must have shape", "(2, S, 8)")
case("DecoderLayer-memory-S0", lambda: DEC(X, rand(2, 0, 8)), "memory", "empty")
case("DecoderLayer-memory-float64", lambda: DEC(X, MEM.double()), "memory", "torch.float64")
case("DecoderLayer-tgt_mask-shape", lambda: DEC(X, MEM, tgt_mask=torch.zeros(5, 4, dtype=torch.bool)),
     "tgt_mask must have shape", "(5, 5)", "(5, 4)")
case("DecoderLayer-memory_key_padding_mask-shape", lambda: DEC(X, MEM, memory_key_padding_mask=torch.zeros(2,
     5, dtype=torch.bool)), "memory_key_padding_mask must have shape", "(2, 3)", "(2, 5)")
case("DecoderLayer-memory_mask-int", lambda: DEC(X, MEM, memory_mask=torch.zeros(5, 3, dtype=torch.long)),
     "memory_mask", "torch.int64")
case("DecoderLayer-tgt_key_padding_mask-uint8", lambda: DEC(X, MEM, tgt_key_padding_mask=torch.zeros(2, 5,
     dtype=torch.uint8)), "tgt_key_padding_mask", "uint8")
case("DecoderLayer-tgt_is_causal-str", lambda: DEC(X, MEM, tgt_is_causal="no"), "tgt_is_causal", "bool")
# a float key padding mask is refused (a float copy of a bool mask would be added, not block)
case("EncoderLayer-key_padding_mask-float", lambda: ENC(X, key_padding_mask=torch.zeros(2, 5)),
     "key_padding_mask", "bool", "torch.float32")
case("DecoderLayer-tgt_key_padding_mask-float", lambda: DEC(X, MEM, tgt_key_padding_mask=torch.zeros(2, 5)),
     "tgt_key_padding_mask", "bool", "torch.float32")
case("DecoderLayer-memory_key_padding_mask-float",
     lambda: DEC(X, MEM, memory_key_padding_mask=torch.zeros(2, 3, dtype=torch.float64)),
     "memory_key_padding_mask", "bool", "torch.float64")
case("DecoderLayer-from_torch-encoder", lambda: DecoderLayer.from_torch(ENC), "m",
     "nn.TransformerDecoderLayer")

# Seq2SeqTransformer
case("S2S-src_vocab_size-0", lambda: Seq2SeqTransformer(0, 12, 8, 2), "src_vocab_size", "0")
case("S2S-tgt_vocab_size-float", lambda: Seq2SeqTransformer(10, 12.0, 8, 2), "tgt_vocab_size", "float")
case("S2S-embed_dim-odd", lambda: Seq2SeqTransformer(10, 12, 9, 3), "embed_dim", "9")
case("S2S-num_heads-not-dividing", lambda: Seq2SeqTransformer(10, 12, 8, 3), "divisible", "num_heads=3")
case("S2S-num_encoder_layers-0", lambda: Seq2SeqTransformer(10, 12, 8, 2, 0), "num_encoder_layers", "0")
case("S2S-num_decoder_layers-negative", lambda: Seq2SeqTransformer(10, 12, 8, 2, 1, -1),
     "num_decoder_layers", "-1")
case("S2S-dropout-1", lambda: Seq2SeqTransformer(10, 12, 8, 2, dropout=1.0), "dropout", "1.0")
case("S2S-max_len-0", lambda: Seq2SeqTransformer(10, 12, 8, 2, max_len=0), "max_len", "0")
case("S2S-pad_id-out-of-range", lambda: Seq2SeqTransformer(10, 12, 8, 2, pad_id=10), "pad_id", "<= 9", "10")
case("S2S-pad_id-negative", lambda: Seq2SeqTransformer(10, 12, 8, 2, pad_id=-1), "pad_id", "-1")
case("S2S-activation", lambda: Seq2SeqTransformer(10, 12, 8, 2, activation="elu"), "activation", "elu")
case("S2S-src-float", lambda: S2S(SRC.float(), TGT), "src must be an int64 or int32 tensor of shape (B, T)",
     "float32")
case("S2S-src-rank1", lambda: S2S(SRC[0], TGT), "src", "(B, T)", "(4,)")
case("S2S-src-uint8", lambda: S2S(SRC.to(torch.uint8), TGT), "src", "torch.uint8")
case("S2S-src-out-of-range", lambda: S2S(SRC + 7, TGT), "src", "[0, 9]", "14")
case("S2S-src-negative", lambda: S2S(SRC - 1, TGT), "src", "-1")
case("S2S-tgt-out-of-range", lambda: S2S(SRC, TGT + 10), "tgt", "[0, 11]")
case("S2S-src-T0", lambda: S2S(SRC[:, :0], TGT), "src", "empty", "(2, 0)")
case("S2S-src-B0", lambda: S2S(SRC[:0], TGT[:0]), "src", "empty", "(0, 4)")
case("S2S-src-too-long", lambda: S2S(torch.ones(2, 17, dtype=torch.long), TGT), "src", "max_len=16")
case("S2S-batch-mismatch", lambda: S2S(SRC, TGT[:1]), "share the batch size", "(2, 4)", "(1, 4)")
case("S2S-need_weights-int", lambda: S2S(SRC, TGT, need_weights=1), "need_weights", "bool")
case("S2S-encode-src-float", lambda: S2S.encode(SRC.float()), "src", "float32")
case("S2S-decode-memory-rank2", lambda: S2S.decode(TGT, rand(2, 8), SRC == 0), "memory", "(2, 8)")
case("S2S-decode-batch", lambda: S2S.decode(TGT[:1], rand(2, 4, 8), SRC == 0), "tgt", "(2, T)", "(1, 4)")
case("S2S-decode-src_pad-shape", lambda: S2S.decode(TGT, rand(2, 4, 8), SRC[:, :3] == 0), "src_pad", "(2, 4)")
case("S2S-decode-src_pad-int", lambda: S2S.decode(TGT, rand(2, 4, 8), SRC), "src_pad", "bool", "torch.int64")
case("S2S-loss-tgt-T1", lambda: S2S.loss(SRC, None, TGT[:, :1]), "tgt must have shape (B, T>=2)", "(2, 1)")
case("S2S-loss-tgt-all-pad", lambda: S2S.loss(SRC, None, torch.tensor([[1, 0, 0], [1, 0, 0]])), "tgt",
     "padding")
case("S2S-loss-label_smoothing-2", lambda: S2S.loss(SRC, None, TGT, label_smoothing=2.0), "label_smoothing",
     "2.0")
case("S2S-encode-src_lengths-shape", lambda: S2S.encode(SRC, LEN[:1]), "src_lengths", "(2,)", "(1,)")
case("S2S-encode-src_lengths-float", lambda: S2S.encode(SRC, LEN.float()), "src_lengths", "float32")
# the decoding protocol: decode_step(prev_tokens, state, memory, need_weights)
case("S2S-decode_step-memory-list", lambda: S2S.decode_step(Y, None, list(ENCODED)), "memory", "pair", "list")
case("S2S-decode_step-memory-rank2", lambda: S2S.decode_step(Y, None, (rand(2, 8), ENCODED[1])), "memory",
     "(B, T, 8)", "(2, 8)")
case("S2S-decode_step-src_pad-int", lambda: S2S.decode_step(Y, None, (ENCODED[0], SRC)), "memory[1]", "bool",
     "torch.int64")
case("S2S-decode_step-prev_tokens-batch", lambda: S2S.decode_step(Y[:1], None, ENCODED), "prev_tokens",
     "(2,)", "(1,)")
case("S2S-decode_step-prev_tokens-out-of-range", lambda: S2S.decode_step(Y + 12, None, ENCODED),
     "prev_tokens", "[0, 11]", "14")
case("S2S-decode_step-prev_tokens-float", lambda: S2S.decode_step(Y.float(), None, ENCODED), "prev_tokens",
     "float32")
case("S2S-decode_step-state-batch", lambda: S2S.decode_step(Y, TGT[:1], ENCODED), "state", "(2, t)", "(1, 4)")
case("S2S-decode_step-state-out-of-range", lambda: S2S.decode_step(Y, TGT + 12, ENCODED), "state", "[0, 11]")
case("S2S-decode_step-state-too-long", lambda: S2S.decode_step(Y, torch.ones(2, 16, dtype=torch.long),
     ENCODED), "max_len=16", "17 positions", "max_len <= 16")
case("S2S-decode_step-need_weights-int", lambda: S2S.decode_step(Y, None, ENCODED, need_weights=1),
     "need_weights", "bool")


def s2s_from_torch(*replace, pad_id=None, max_len=16, fast=True, **transformer_kw):
    """``Seq2SeqTransformer.from_torch`` of nn.Transformer (pre-LN, batch-first, embed_dim 8) plus embeddings
    (vocabularies 10 and 12, pad 0) and an output layer; ``replace`` gives (index, part) to swap in."""
    kw = dict(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16, dropout=0.0,
              norm_first=True, batch_first=True)
    parts = [nn.Transformer(**{**kw, **transformer_kw}), nn.Embedding(10, 8, padding_idx=0),
             nn.Embedding(12, 8, padding_idx=0), nn.Linear(8, 12)]
    for i, part in replace:
        parts[i] = part
    return Seq2SeqTransformer.from_torch(*parts, pad_id=pad_id, max_len=max_len, fast=fast)


def plain_encoder():
    layer = nn.TransformerEncoderLayer(8, 2, 16, norm_first=True, batch_first=True)
    return nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)  # norm=None: no final LayerNorm


case("S2S-from_torch-transformer-layer", lambda: Seq2SeqTransformer.from_torch(ENC, *S2S_PARTS()),
     "transformer", "nn.Transformer", "EncoderLayer")
case("S2S-from_torch-mixed-LN", lambda: s2s_from_torch(custom_encoder=nn.TransformerEncoder(
     nn.TransformerEncoderLayer(8, 2, 16, norm_first=False, batch_first=True), 1, norm=nn.LayerNorm(8),
     enable_nested_tensor=False)), "transformer", "all pre-LN or all post-LN")
case("S2S-from_torch-sequence-first", lambda: s2s_from_torch(batch_first=False), "transformer",
     "batch_first=True")
case("S2S-from_torch-custom-decoder", lambda: s2s_from_torch(custom_decoder=nn.Linear(8, 8)), "transformer",
     "own encoder and decoder", "Linear")
case("S2S-from_torch-no-final-norm", lambda: s2s_from_torch(custom_encoder=plain_encoder()), "transformer",
     "must end with an nn.LayerNorm", "None")
case("S2S-from_torch-activation", lambda: s2s_from_torch(activation=nn.SiLU()), "activations can be copied",
     "SiLU")
case("S2S-from_torch-src_embedding-linear", lambda: s2s_from_torch((1, nn.Linear(10, 8))), "src_embedding",
     "nn.Embedding", "Linear")
case("S2S-from_torch-src_embedding-width", lambda: s2s_from_torch((1, nn.Embedding(10, 6))), "src_embedding",
     "(num_embeddings, 8)", "Embedding(10, 6)")
case("S2S-from_torch-tgt_embedding-max_norm", lambda: s2s_from_torch((2, nn.Embedding(12, 8, max_norm=1.0))),
     "tgt_embedding", "max_norm")
case("S2S-from_torch-tgt_embedding-float64", lambda: s2s_from_torch((2, nn.Embedding(12, 8).double())),
     "tgt_embedding", "torch.float32", "torch.float64")
case("S2S-from_torch-generator-embedding", lambda: s2s_from_torch((3, nn.Embedding(8, 12))), "generator",
     "nn.Linear", "Embedding")
case("S2S-from_torch-generator-vocabulary", lambda: s2s_from_torch((3, nn.Linear(8, 11))), "generator",
     "nn.Linear(8, 12)", "out_features=11")
case("S2S-from_torch-pad_id-missing", lambda: s2s_from_torch((1, nn.Embedding(10, 8)),
     (2, nn.Embedding(12, 8))), "pad_id must be given", "None and None")
case("S2S-from_torch-pad_id-disagree", lambda: s2s_from_torch((2, nn.Embedding(12, 8, padding_idx=1))),
     "pad_id must be given", "0 and 1")
case("S2S-from_torch-pad_id-out-of-range", lambda: s2s_from_torch(pad_id=10), "pad_id", "<= 9", "10")
case("S2S-from_torch-max_len-0", lambda: s2s_from_torch(max_len=0), "max_len", "0")
case("S2S-from_torch-fast-int", lambda: s2s_from_torch(fast=1), "fast", "bool")

# GPTConfig, GPT
case("GPTConfig-vocab_size-0", lambda: GPTConfig(0), "vocab_size", "0")
case("GPTConfig-vocab_size-float", lambda: GPTConfig(12.5), "vocab_size", "float")
case("GPTConfig-block_size-negative", lambda: GPTConfig(12, block_size=-1), "block_size", "-1")
case("GPTConfig-n_layer-0", lambda: GPTConfig(12, n_layer=0), "n_layer", "0")
case("GPTConfig-n_head-0", lambda: GPTConfig(12, n_head=0), "n_head", "0")
case("GPTConfig-n_embd-bool", lambda: GPTConfig(12, n_embd=True), "n_embd", "bool")
case("GPTConfig-not-divisible", lambda: GPTConfig(12, n_head=3, n_embd=8),
     "n_embd must be divisible by n_head")
case("GPTConfig-d_ff-0", lambda: GPTConfig(12, d_ff=0), "d_ff", "0")
case("GPTConfig-dropout-1", lambda: GPTConfig(12, dropout=1.0), "dropout", "1.0")
case("GPTConfig-dropout-negative", lambda: GPTConfig(12, dropout=-0.1), "dropout", "-0.1")
case("GPTConfig-activation", lambda: GPTConfig(12, activation="tanh"), "activation", "tanh")
case("GPTConfig-positional", lambda: GPTConfig(12, positional="rotary"), "positional", "rotary")
case("GPTConfig-sinusoidal-odd", lambda: GPTConfig(12, n_head=3, n_embd=9, positional="sinusoidal"),
     "n_embd", "even", "9")
case("GPTConfig-init_std-nan", lambda: GPTConfig(12, init_std=NAN), "init_std", "nan")
case("GPTConfig-tie_weights-str", lambda: GPTConfig(12, tie_weights="yes"), "tie_weights", "bool")
case("GPTConfig-layer_norm_eps-negative", lambda: GPTConfig(12, layer_norm_eps=-1e-5), "layer_norm_eps",
     ">= 0.0")
case("GPTConfig-layer_norm_eps-str", lambda: GPTConfig(12, layer_norm_eps="1e-5"), "layer_norm_eps", "str")
case("GPT-config-dict", lambda: GPT({"vocab_size": 12}), "config", "GPTConfig", "dict")


def gpt2(cls="GPT2LMHeadModel", **changes):
    """A tiny random Hugging Face GPT-2 (``cls`` names the transformers class); skips without transformers."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(**{**dict(n_layer=1, n_head=2, n_embd=8, n_positions=8, vocab_size=12,
                                               bos_token_id=0, eos_token_id=0), **changes})
    return getattr(transformers, cls)(config)


def gpt2_renamed():
    model = gpt2()
    model.config.model_type = "llama"
    return model


case("GPT-from_hf-linear", lambda: GPT.from_hf(nn.Linear(2, 2)), "model", "GPT2LMHeadModel", "Linear")
case("GPT-from_hf-ours", lambda: GPT.from_hf(GPT_), "model", "GPT2LMHeadModel", "GPT")
case("GPT-from_hf-config", lambda: GPT.from_hf(gpt2().config), "model", "GPT2LMHeadModel", "GPT2Config")
case("GPT-from_hf-no-head", lambda: GPT.from_hf(gpt2("GPT2Model")), "model", "GPT2LMHeadModel", "GPT2Model")
case("GPT-from_hf-model_type", lambda: GPT.from_hf(gpt2_renamed()), "model", "GPT2Config", "'llama'")
case("GPT-from_hf-cross-attention", lambda: GPT.from_hf(gpt2(add_cross_attention=True)), "model",
     "cross-attention", "add_cross_attention=True")
case("GPT-from_hf-activation", lambda: GPT.from_hf(gpt2(activation_function="silu")), "model",
     "activation_function", "'silu'")
case("GPT-from_hf-unscaled", lambda: GPT.from_hf(gpt2(scale_attn_weights=False)), "model",
     "scale_attn_weights=False")
case("GPT-from_hf-scaled-by-layer", lambda: GPT.from_hf(gpt2(scale_attn_by_inverse_layer_idx=True)), "model",
     "scale_attn_by_inverse_layer_idx=True")
case("GPT-from_hf-dropouts", lambda: GPT.from_hf(gpt2(attn_pdrop=0.0)), "model", "one dropout rate",
     "'attn_pdrop': 0.0")
case("GPT-from_hf-fast-int", lambda: GPT.from_hf(gpt2(), fast=1), "fast", "bool")
case("GPT-idx-float", lambda: GPT_(IDX.float()), "idx must be an int64 or int32 tensor", "float32")
case("GPT-idx-rank1", lambda: GPT_(IDX[0]), "idx", "(B, T)", "(3,)")
case("GPT-idx-T0", lambda: GPT_(IDX[:, :0]), "idx", "empty", "(2, 0)")
case("GPT-idx-out-of-range", lambda: GPT_(IDX + 2), "idx", "[0, 11]", "12")
case("GPT-idx-negative", lambda: GPT_(IDX - 6), "idx", "-1")
case("GPT-idx-too-long", lambda: GPT_(torch.zeros(1, 9, dtype=torch.long)), "block_size=8")
case("GPT-targets-shape", lambda: GPT_(IDX, IDX[:, :2]), "targets must have shape", "(2, 3)", "(2, 2)")
case("GPT-targets-out-of-range", lambda: GPT_(IDX, IDX + 5), "targets", "[0, 11]")
case("GPT-targets-float", lambda: GPT_(IDX, IDX.float()), "targets", "float32")
case("GPT-targets-all-ignored", lambda: GPT_(IDX, torch.full_like(IDX, -100)), "targets", "-100")
case("GPT-label_smoothing-negative", lambda: GPT_(IDX, IDX, label_smoothing=-0.1), "label_smoothing", "-0.1")
case("GPT-need_weights-int", lambda: GPT_(IDX, need_weights=1), "need_weights", "bool")
# a GPT block and its attention, called by a reader (the GPT's own calls are checked at its door)
BLOCK, X3 = GPT_.blocks[0], rand(2, 3, 8)
case("GPTBlock-d_ff-0", lambda: GPTBlock(8, 2, d_ff=0), "d_ff", "0")
case("GPTBlock-x-last-dim", lambda: BLOCK(rand(2, 3, 6)), "x must have shape", "(B, T, 8)", "(2, 3, 6)")
case("GPTBlock-x-float64", lambda: BLOCK(X3.double()), "x", "torch.float64")
case("GPTBlock-need_weights-int", lambda: BLOCK(X3, need_weights=1), "need_weights", "bool")
case("CausalSelfAttention-rotary-shape", lambda: BLOCK.self_attn(X3, rope_angles(torch.arange(4), 4)),
     "rotary[0]", "(3, 4)", "(4, 4)")
case("CausalSelfAttention-rotary-tensor", lambda: BLOCK.self_attn(X3, torch.zeros(3, 4)), "rotary",
     "(cos, sin)", "Tensor")
case("CausalSelfAttention-cache-list", lambda: BLOCK.self_attn(X3, cache=[]), "cache", "KVCache", "list")
case("CausalSelfAttention-cache-full", lambda: BLOCK.self_attn(X3, cache=KVCache(2)), "cache", "max_len=2")
case("GPT-generate-idx-list", lambda: GPT_.generate([[1, 2]], 2), "idx", "list")
case("GPT-generate-idx-T0", lambda: GPT_.generate(IDX[:, :0], 3), "idx", "empty", "(2, 0)")
case("GPT-generate-idx-out-of-range", lambda: GPT_.generate(IDX + 2, 3), "idx", "[0, 11]")
case("GPT-generate-max_new_tokens-negative", lambda: GPT_.generate(IDX, -1), "max_new_tokens", "-1")
case("GPT-generate-max_new_tokens-float", lambda: GPT_.generate(IDX, 2.5), "max_new_tokens", "float")
case("GPT-generate-temperature-negative", lambda: GPT_.generate(IDX, 2, temperature=-1.0), "temperature",
     "-1.0")
case("GPT-generate-temperature-nan", lambda: GPT_.generate(IDX, 2, temperature=NAN), "temperature", "nan")
case("GPT-generate-temperature-inf", lambda: GPT_.generate(IDX, 2, temperature=INF), "temperature", "inf")
case("GPT-generate-top_k-0", lambda: GPT_.generate(IDX, 2, top_k=0), "top_k", "0")
case("GPT-generate-generator-int", lambda: GPT_.generate(IDX, 2, generator=0), "generator", "torch.Generator")
case("GPT-generate-forbid-int", lambda: GPT_.generate(IDX, 2, forbid=3), "forbid", "tuple")
case("GPT-generate-forbid-out-of-range", lambda: GPT_.generate(IDX, 2, forbid=(12,)), "forbid", "<= 11", "12")
case("GPT-generate-forbid-negative", lambda: GPT_.generate(IDX, 2, forbid=(-1,)), "forbid", "-1")
case("GPT-generate-forbid-all-greedy", lambda: GPT_.generate(IDX, 3, temperature=0, forbid=tuple(range(12))),
     "forbid", "at least one id", "12")
case("GPT-generate-forbid-all-sampled", lambda: GPT_.generate(IDX, 3, forbid=tuple(range(12))), "forbid")

# schedules
case("noam_lr-warmup_steps-0", lambda: train.noam_lr(1, 512, 0), "warmup_steps", ">= 1", "0")
case("noam_lr-embed_dim-0", lambda: train.noam_lr(1, 0, 10), "embed_dim", "0")
case("noam_lr-step-float", lambda: train.noam_lr(1.5, 512, 10), "step", "float")
case("warmup_factor-step-negative", lambda: train.warmup_factor(-1, 10, 100), "step", "-1")
case("warmup_factor-warmup_steps-negative", lambda: train.warmup_factor(0, -1, 100), "warmup_steps", "-1")
case("warmup_factor-total_steps-missing", lambda: train.warmup_factor(0, 10), "needs total_steps", "None")
case("warmup_factor-total_steps-not-above", lambda: train.warmup_factor(0, 10, 10, "linear"), "total_steps",
     "10")
case("warmup_factor-total_steps-float", lambda: train.warmup_factor(0, 10, 100.0), "total_steps", "float")
case("warmup_factor-kind", lambda: train.warmup_factor(0, 10, 100, "step"), "kind must be", "'step'")
case("warmup_factor-min_factor-above-1", lambda: train.warmup_factor(0, 10, 100, min_factor=1.5),
     "min_factor", "1.5")
case("warmup_factor-min_factor-nan", lambda: train.warmup_factor(0, 10, 100, min_factor=NAN), "min_factor",
     "nan")
case("warmup_schedule-optimizer-list", lambda: train.warmup_schedule([], 10, 100), "optimizer", "list")
case("warmup_schedule-kind", lambda: train.warmup_schedule(OPT, 10, 100, kind="exp"), "kind", "'exp'")

# residual(x, sublayer, norm, dropout, norm_first): the flag through check_flag, the rest typed
ID = nn.Identity()
for kind, value, word in BAD_FLAGS:
    case(f"residual-norm_first-{kind}", lambda v=value: tf.residual(X, ID, ID, ID, norm_first=v),
         "norm_first", word)
case("residual-x-list", lambda: tf.residual(X.tolist(), ID, ID, ID), "x", "list")
case("residual-sublayer-None", lambda: tf.residual(X, None, ID, ID), "sublayer", "NoneType")
# Seq2SeqTransformer.loss checks src_lengths too, though it finds the padding from pad_id
case("S2S-loss-src_lengths-shape", lambda: S2S.loss(SRC, LEN[:1], TGT), "src_lengths", "(2,)", "(1,)")
case("S2S-loss-src_lengths-negative", lambda: S2S.loss(SRC, -LEN, TGT), "src_lengths", ">= 0")
case("S2S-loss-src_lengths-list", lambda: S2S.loss(SRC, LEN.tolist(), TGT), "src_lengths", "list")
case("S2S-loss-tgt-list", lambda: S2S.loss(SRC, LEN, TGT.tolist()), "tgt", "list")
case("S2S-encode-src_lengths-negative", lambda: S2S.encode(SRC, torch.tensor([4, -1])), "src_lengths", "-1")
# decode_step's memory pair: each part named as its place in the pair
case("S2S-decode_step-memory-triple", lambda: S2S.decode_step(Y, None, (*ENCODED, None)), "memory", "pair",
     "3 items")
case("S2S-decode_step-memory[0]-list", lambda: S2S.decode_step(Y, None, (ENCODED[0].tolist(), ENCODED[1])),
     "memory[0]", "list")
case("S2S-decode_step-memory[1]-shape", lambda: S2S.decode_step(Y, None, (ENCODED[0], ENCODED[1][:, :2])),
     "memory[1]", "(2, 4)", "(2, 2)")
case("S2S-decode_step-memory[1]-list", lambda: S2S.decode_step(Y, None, (ENCODED[0], ENCODED[1].tolist())),
     "memory[1]", "list")
case("S2S-decode-src_pad-list", lambda: S2S.decode(TGT, ENCODED[0], ENCODED[1].tolist()), "src_pad", "list")


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # nn.Transformer, norm_first=True
@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)


# ------------------------------------------------------------------ legal edge inputs


def test_numpy_sizes_are_accepted():
    cfg = GPTConfig(np.int64(12), np.int64(8), np.int32(1), np.int64(2), np.int64(8))
    assert cfg.vocab_size == 12 and type(cfg.vocab_size) is int
    assert EncoderLayer(np.int64(8), np.int64(2))(X).shape == X.shape
    assert tf.positional_encoding(np.int64(4), np.int64(8)).shape == (4, 8)
    assert LayerNorm(np.int64(8))(X).shape == X.shape
    assert train.noam_lr(np.int64(5), 512, np.int64(10)) > 0


def test_layernorm_follows_the_input_dtype():
    assert LayerNorm(8)(X.bfloat16()).dtype == torch.bfloat16
    assert LayerNorm(8)(X.double()).dtype == torch.float64


def test_generate_zero_tokens_and_float64_model():
    assert torch.equal(GPT_.generate(IDX, 0), IDX)
    g = GPT(GPTConfig(12, 8, 1, 2, 8, dropout=0.0)).double()
    out = g.generate(IDX, 3, temperature=0.5, generator=torch.Generator().manual_seed(0), forbid=(0, 1))
    assert out.shape == (2, 6) and (out[:, 3:] >= 2).all()


def test_generate_leaves_one_id_allowed():
    out = GPT_.generate(IDX, 3, temperature=0, forbid=tuple(range(11)))
    assert (out[:, 3:] == 11).all()
    g = torch.Generator().manual_seed(0)
    out = GPT_.generate(IDX, 3, top_k=1, forbid=tuple(range(1, 12)), generator=g)
    assert (out[:, 3:] == 0).all()


def test_warmup_zero_steps_and_step_zero_are_legal():
    assert train.warmup_factor(0, 0, 10, "linear") == pytest.approx(0.9)
    assert train.noam_lr(0, 512, 10) == train.noam_lr(1, 512, 10)


def test_decode_step_from_no_state_and_to_the_longest_prefix():
    logits, state = S2S.decode_step(Y, None, ENCODED)
    assert logits.shape == (2, 12) and state.tolist() == [[2], [2]]
    longest = torch.ones(2, 15, dtype=torch.long)
    logits, state, weights = S2S.decode_step(Y, longest, ENCODED, need_weights=True)
    assert state.shape == (2, 16) and weights.shape == (2, 4)  # max_len=16 positions: the longest legal
    assert S2S.encode(SRC)[0].shape == (2, 4, 8)  # src_lengths may be left out


def test_fully_padded_source_row_gives_finite_logits():
    src = torch.tensor([[3, 4, 2], [0, 0, 0]])
    assert torch.isfinite(S2S(src, TGT[:, :3])).all()
