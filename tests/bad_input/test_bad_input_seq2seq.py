# 177 cases: 167 bad inputs that must end in a clear error (22 of them generators and loops, under a
# timeout; 4 also checked to be TypeErrors), 10 legal edge inputs checked for a correct result.
"""Bad input to seqbook.seq2seq and the encoder-decoder functions of seqbook.decoding: every public
callable refuses it clearly, or handles a legal edge.

Each ``ERRORS`` case must end in a ValueError/TypeError raised by seqbook whose message holds the
words listed (the argument's name and the expected or actual value, shape or dtype); generators are
run under a timeout.
"""

import numpy as np
import pytest
import torch
from torch import nn

from seqbook import batching as bt
from seqbook import data as dt
from seqbook import decoding as dec
from seqbook import seq2seq as s2s
from seqbook import vocab
from seqbook.seq2seq import AttentionDecoder, Encoder, PlainDecoder, Seq2Seq
from seqbook.train import fit_seq2seq as fit_s2s
from seqbook.transformer import Seq2SeqTransformer
from tests.badinput import assert_clear_error, assert_clear_error_in_time, table

DATA = dt.copy_dataset(8, 4, 1, seed=0)
V = len(DATA.src_vocab)
SRC, LEN, TGT = DATA.tensors("train")
MODEL = Seq2Seq(V, V, 4, 6).eval()
PLAIN = Seq2Seq(V, V, 4, 6, attention=False).eval()
MEM = MODEL.encode(SRC, LEN)
B = SRC.shape[0]
Y = torch.full((B,), 1, dtype=torch.long)
S0 = MODEL.decoder.init_state(MEM)
TF = Seq2SeqTransformer(V, V, 8, 2, 1, 1, dropout=0.0, max_len=8).eval()
NAN, EOS = float("nan"), vocab.Vocab.eos_id

ERRORS, case = table()
LOOPS, loop = table()  # calls that loop: run under a timeout


# data
case("tensors-split", lambda: DATA.tensors("dev"), "split must be", "'dev'")
case("encode_pairs-empty", lambda: bt.encode_pairs([], DATA.src_vocab, DATA.tgt_vocab), "pairs is empty")
case("encode_pairs-str", lambda: bt.encode_pairs("ab", DATA.src_vocab, DATA.tgt_vocab), "pairs", "str")
case("encode_pairs-not-pairs", lambda: bt.encode_pairs([("a",)], DATA.src_vocab, DATA.tgt_vocab), "pairs[0]")
case("encode_pairs-int-items", lambda: bt.encode_pairs([(1, 2)], DATA.src_vocab, DATA.tgt_vocab), "pairs[0]")
case("encode_pairs-vocab-dict", lambda: bt.encode_pairs([("a", "a")], {}, DATA.tgt_vocab), "src_vocab",
     "Vocab")
case("decode_ids-rank2", lambda: vocab.decode_ids(TGT, DATA.tgt_vocab), "ids must have shape (T,)")
case("decode_ids-float", lambda: vocab.decode_ids(TGT[0].float(), DATA.tgt_vocab), "ids", "float32")
case("decode_ids-out-of-range", lambda: vocab.decode_ids([4, 99], DATA.tgt_vocab), "ids", "99")
case("decode_ids-negative", lambda: vocab.decode_ids(torch.tensor([4, -1]), DATA.tgt_vocab), "ids", "-1")
case("decode_ids-str", lambda: vocab.decode_ids("abc", DATA.tgt_vocab), "ids", "str")
case("decode_ids-vocab-none", lambda: vocab.decode_ids([4], None), "vocab", "NoneType")
case("date_dataset-n_train-0", lambda: dt.date_dataset(0, 5), "n_train", "0")
case("date_dataset-n_test-float", lambda: dt.date_dataset(5, 2.5), "n_test", "float")
case("date_dataset-seed-str", lambda: dt.date_dataset(5, 5, seed="0"), "seed", "str")
case("copy_dataset-n_train-negative", lambda: dt.copy_dataset(-1, 4, 1), "n_train", "-1")
case("copy_dataset-max_len-0", lambda: dt.copy_dataset(4, 0, 1), "max_len", "0")
case("copy_dataset-n_test_per_length-bool", lambda: dt.copy_dataset(4, 3, True), "n_test_per_length", "bool")
case("copy_dataset-test_max_len-0", lambda: dt.copy_dataset(4, 3, 1, test_max_len=0), "test_max_len", "0")
case("copy_dataset-alphabet-short", lambda: dt.copy_dataset(4, 3, 1, alphabet="aa"), "alphabet", "'aa'")
case("copy_dataset-alphabet-list", lambda: dt.copy_dataset(4, 3, 1, alphabet=["a", "b"]), "alphabet", "list")

# bucket_batches: refused when called, never an endless loop
loop("bucket_batches-batch_size-0", lambda: bt.bucket_batches(SRC, LEN, TGT, 0), "batch_size", ">= 1", "0")
loop("bucket_batches-batch_size-above-N", lambda: bt.bucket_batches(SRC, LEN, TGT, 9), "batch_size", "9")
loop("bucket_batches-batch_size-float", lambda: bt.bucket_batches(SRC, LEN, TGT, 2.0), "batch_size", "float")
loop("bucket_batches-pool-0", lambda: bt.bucket_batches(SRC, LEN, TGT, 2, pool=0), "pool", "0")
loop("bucket_batches-pool-negative", lambda: bt.bucket_batches(SRC, LEN, TGT, 2, pool=-3), "pool", "-3")
loop("bucket_batches-N0", lambda: bt.bucket_batches(SRC[:0], LEN[:0], TGT[:0], 1), "src", "(0, 5)")
loop("bucket_batches-length-mismatch", lambda: bt.bucket_batches(SRC, LEN[:3], TGT, 2), "src_lengths",
     "(3,)")
loop("bucket_batches-tgt-batch", lambda: bt.bucket_batches(SRC, LEN, TGT[:3], 2), "tgt (N, T)", "(3, 6)")
loop("bucket_batches-src-float", lambda: bt.bucket_batches(SRC.float(), LEN, TGT, 2), "src", "float32")
loop("bucket_batches-lengths-float", lambda: bt.bucket_batches(SRC, LEN.float(), TGT, 2), "src_lengths",
     "float32")
loop("bucket_batches-lengths-0", lambda: bt.bucket_batches(SRC, LEN * 0, TGT, 2), "src_lengths", "[1, 5]")
loop("bucket_batches-generator-int", lambda: bt.bucket_batches(SRC, LEN, TGT, 2, generator=0), "generator")
loop("fit_seq2seq-steps-0", lambda: fit_s2s(MODEL, DATA, 0, progress=False), "steps", "0")
loop("fit_seq2seq-batch_size-above-N", lambda: fit_s2s(MODEL, DATA, 2, batch_size=9, progress=False),
     "batch_size", "<= 8", "9")
loop("fit_seq2seq-batch_size-0", lambda: fit_s2s(MODEL, DATA, 2, batch_size=0, progress=False),
     "batch_size", "0")
loop("fit_seq2seq-lr-0", lambda: fit_s2s(MODEL, DATA, 2, batch_size=2, lr=0.0, progress=False), "lr",
     "0.0")
loop("fit_seq2seq-data-tuple", lambda: fit_s2s(MODEL, (SRC, LEN, TGT), 2), "data", "TranslationData")
loop("fit_seq2seq-model-linear", lambda: fit_s2s(nn.Linear(2, 2), DATA, 2), "model", "loss")
loop("translate-batch_size-0", lambda: dec.translate(MODEL, ["ab"], DATA.src_vocab, DATA.tgt_vocab, 5,
     batch_size=0), "batch_size", "0")
loop("translate-batch_size-negative", lambda: dec.translate(MODEL, ["ab"], DATA.src_vocab, DATA.tgt_vocab, 5,
     batch_size=-1), "batch_size", "-1")
loop("greedy-max_len-0", lambda: dec.greedy_decode(MODEL, SRC, LEN, 0), "max_len", "int >= 1", "0")
loop("beam-max_len-float", lambda: dec.beam_search(MODEL, SRC, LEN, 2, 2.5), "max_len", "float")

# reverse_padded
case("reverse_padded-lengths-float", lambda: s2s.reverse_padded(torch.zeros(2, 4), torch.tensor([1.0, 2.0])),
     "lengths", "float32")
case("reverse_padded-lengths-shape", lambda: s2s.reverse_padded(torch.zeros(2, 4), torch.tensor([1])),
     "lengths (B,)", "(1,)")
case("reverse_padded-lengths-above-T", lambda: s2s.reverse_padded(torch.zeros(2, 4), torch.tensor([1, 5])),
     "lengths", "[0, 4]", "5")
case("reverse_padded-lengths-negative", lambda: s2s.reverse_padded(torch.zeros(2, 4), torch.tensor([1, -1])),
     "lengths", "-1")
case("reverse_padded-x-rank1", lambda: s2s.reverse_padded(torch.zeros(4), torch.tensor([1])),
     "x (B, T, ...)", "(4,)")
case("reverse_padded-x-list", lambda: s2s.reverse_padded([[1]], torch.tensor([1])), "x", "list")

# Encoder and decoders
case("Encoder-vocab_size-0", lambda: Encoder(0, 4, 6), "vocab_size", "0")
case("Encoder-embed_dim-float", lambda: Encoder(5, 4.0, 6), "embed_dim", "float")
case("Encoder-hidden_size-bool", lambda: Encoder(5, 4, True), "hidden_size", "bool")
case("Encoder-fast-str", lambda: Encoder(5, 4, 6, fast="y"), "fast", "bool")
case("Encoder-src-float", lambda: MODEL.encoder(SRC.float(), LEN), "src must be an int64 tensor", "float32")
case("Encoder-src-out-of-range", lambda: MODEL.encoder(SRC + V, LEN), "src ids must lie in", f"[0, {V})")
case("Encoder-src_lengths-float", lambda: MODEL.encoder(SRC, LEN.float()), "src_lengths", "float32")
case("Encoder-src_lengths-0", lambda: MODEL.encoder(SRC, LEN * 0), "src_lengths must lie in", "[1, 5]")
case("Encoder-src-B0", lambda: MODEL.encoder(SRC[:0], LEN[:0]), "src", "(0, 5)")
case("AttentionDecoder-attention_dim-0", lambda: AttentionDecoder(5, 4, 6, 12, 0), "attention_dim", "0")
case("PlainDecoder-annotation_dim-0", lambda: PlainDecoder(5, 4, 6, 0), "annotation_dim", "0")
case("decoder-memory-tuple", lambda: MODEL.decoder(TGT, tuple(MEM)), "memory", "EncoderOutput", "tuple")
case("decoder-memory-annotations-dim", lambda: MODEL.decoder(TGT,
     MEM._replace(annotations=MEM.annotations[..., :5])), "memory.annotations", "(B, S, 12)")
case("decoder-memory-mask-float", lambda: MODEL.decoder(TGT, MEM._replace(mask=MEM.mask.float())), "memory",
     "bool")
case("decoder-tgt_in-out-of-range", lambda: MODEL.decoder(TGT + V, MEM), "tgt_in", f"[0, {V - 1}]")
case("decoder-tgt_in-batch", lambda: MODEL.decoder(TGT[:2], MEM), "tgt_in", f"({B}, T>=1)", "(2, 6)")
case("decoder-tgt_in-float", lambda: MODEL.decoder(TGT.float(), MEM), "tgt_in", "float32")
case("decoder-step-y_prev-batch", lambda: MODEL.decoder.step(Y[:2], S0, MEM), "y_prev", f"({B},)", "(2,)")
case("decoder-step-y_prev-out-of-range", lambda: MODEL.decoder.step(Y + V, S0, MEM), "y_prev",
     f"[0, {V - 1}]")
case("decoder-step-s-shape", lambda: MODEL.decoder.step(Y, S0[:, :5], MEM), "s", f"({B}, 6)", f"({B}, 5)")
case("decoder-step-s-int", lambda: MODEL.decoder.step(Y, S0.long(), MEM), "s", "torch.int64")
case("decoder-init_state-list", lambda: MODEL.decoder.init_state([1]), "memory", "EncoderOutput")
case("decoder-prepare-list", lambda: MODEL.decoder.prepare([1]), "memory", "EncoderOutput")

# Seq2Seq
case("Seq2Seq-hidden_size-0", lambda: Seq2Seq(5, 5, hidden_size=0), "hidden_size must be an int", "0")
case("Seq2Seq-src_vocab_size-float", lambda: Seq2Seq(5.0, 5), "src_vocab_size", "float")
case("Seq2Seq-attention_dim-0", lambda: Seq2Seq(5, 5, attention_dim=-2), "attention_dim", "-2")
case("Seq2Seq-attention-str", lambda: Seq2Seq(5, 5, attention="yes"), "attention", "bool")
case("Seq2Seq-tgt_in-batch", lambda: MODEL(SRC, LEN, TGT[:2]), "tgt_in must have shape", f"({B}, T>=1)",
     "(2, 6)")
case("Seq2Seq-tgt_in-T0", lambda: MODEL(SRC, LEN, TGT[:, :0]), "tgt_in", f"({B}, 0)")
case("Seq2Seq-tgt_in-out-of-range", lambda: MODEL(SRC, LEN, TGT + V), "tgt_in", f"[0, {V - 1}]")
case("Seq2Seq-tgt_in-float", lambda: MODEL(SRC, LEN, TGT.float()), "tgt_in", "float32")
case("Seq2Seq-return_attention-int", lambda: MODEL(SRC, LEN, TGT, return_attention=1), "return_attention",
     "bool")
case("Seq2Seq-loss-tgt-T1", lambda: MODEL.loss(SRC, LEN, TGT[:, :1]), "tgt must have shape (B, T>=2)")
case("Seq2Seq-loss-tgt-all-pad", lambda: MODEL.loss(SRC, LEN, TGT * 0), "tgt", "<pad>")
case("Seq2Seq-loss-tgt-negative", lambda: MODEL.loss(SRC, LEN, TGT - 1), "tgt", "-1")

# decoding, translation, scores
case("greedy-model-linear", lambda: dec.greedy_decode(nn.Linear(2, 2), SRC, LEN, 5),
     "model must be a Seq2Seq")
case("greedy-src-float", lambda: dec.greedy_decode(MODEL, SRC.float(), LEN, 5), "src", "float32")
case("greedy-return_attention-str", lambda: dec.greedy_decode(MODEL, SRC, LEN, 5, return_attention="y"),
     "return_attention", "bool")
case("beam-beam_width-0", lambda: dec.beam_search(MODEL, SRC, LEN, 0, 5), "beam_width must be an int")
case("beam-beam_width-float", lambda: dec.beam_search(MODEL, SRC, LEN, 2.0, 5), "beam_width", "float")
case("beam-return_scores-int", lambda: dec.beam_search(MODEL, SRC, LEN, 2, 5, return_scores=1),
     "return_scores")
case("beam-src_lengths-above", lambda: dec.beam_search(MODEL, SRC, LEN + 9, 2, 5), "src_lengths must lie in")
case("translate-one-string", lambda: dec.translate(MODEL, "ab", DATA.src_vocab, DATA.tgt_vocab, 5),
     "sources", "list of strings")
case("translate-ints", lambda: dec.translate(MODEL, [1, 2], DATA.src_vocab, DATA.tgt_vocab, 5), "sources")
case("translate-model", lambda: dec.translate(nn.Linear(2, 2), ["a"], DATA.src_vocab, DATA.tgt_vocab, 5),
     "model")
case("translate-vocab", lambda: dec.translate(MODEL, ["a"], None, DATA.tgt_vocab, 5), "src_vocab", "Vocab")
case("translate-max_len-0", lambda: dec.translate(MODEL, ["a"], DATA.src_vocab, DATA.tgt_vocab, 0),
     "max_len", "0")
case("translate-beam_width-0", lambda: dec.translate(MODEL, ["a"], DATA.src_vocab, DATA.tgt_vocab, 5,
     beam_width=0), "beam_width", "0")
case("translate-length_penalty-negative", lambda: dec.translate(MODEL, ["a"], DATA.src_vocab, DATA.tgt_vocab,
     5, beam_width=2, length_penalty=-0.5), "length_penalty", ">= 0", "-0.5")
case("translate-forbid-out-of-range", lambda: dec.translate(MODEL, ["a"], DATA.src_vocab, DATA.tgt_vocab, 5,
     forbid=(V,)), "forbid[0]", f"<= {V - 1}", str(V))
case("greedy-forbid-out-of-range", lambda: dec.greedy_decode(MODEL, SRC, LEN, 5, forbid=(1, V)), "forbid[1]",
     f"<= {V - 1}", str(V))
case("greedy-forbid-int", lambda: dec.greedy_decode(MODEL, SRC, LEN, 5, forbid=3), "forbid", "sequence",
     "int")
case("greedy-forbid-all", lambda: dec.greedy_decode(MODEL, SRC, LEN, 5, forbid=range(V)), "forbid",
     "at least one id", str(V))
case("beam-forbid-str", lambda: dec.beam_search(MODEL, SRC, LEN, 2, 5, forbid="ab"), "forbid", "str")
case("beam-forbid-negative", lambda: dec.beam_search(MODEL, SRC, LEN, 2, 5, forbid=[-1]), "forbid[0]", "-1")
case("beam-length_penalty-negative", lambda: dec.beam_search(MODEL, SRC, LEN, 2, 5, length_penalty=-1.0),
     "length_penalty", ">= 0", "-1.0")
case("beam-length_penalty-nan", lambda: dec.beam_search(MODEL, SRC, LEN, 2, 5, length_penalty=NAN),
     "length_penalty", "nan")
case("beam-length_penalty-str", lambda: dec.beam_search(MODEL, SRC, LEN, 2, 5, length_penalty="1"),
     "length_penalty", "str")
# lengths beyond the sequence: every door that takes src_lengths (or reverse_padded's lengths) names
# the argument, the range [1, S], and the longest length found; the transformer ignores src_lengths
# (padding is pad_id), so the decoders check them at their own door
LONG = LEN.clone()
LONG[2] = SRC.shape[1] + 3  # one source said to be 3 tokens longer than src
TOO_LONG = ("src_lengths", f"[1, {SRC.shape[1]}]", f"longest length of {SRC.shape[1] + 3}")
case("Encoder-src_lengths-above-S", lambda: MODEL.encoder(SRC, LONG), *TOO_LONG)
case("Seq2Seq-src_lengths-above-S", lambda: MODEL(SRC, LONG, TGT), *TOO_LONG)
case("Seq2Seq.encode-src_lengths-above-S", lambda: MODEL.encode(SRC, LONG), *TOO_LONG)
case("Seq2Seq.loss-src_lengths-above-S", lambda: MODEL.loss(SRC, LONG, TGT), *TOO_LONG)
case("plain-Seq2Seq-src_lengths-above-S", lambda: PLAIN(SRC, LONG, TGT), *TOO_LONG)
case("greedy-src_lengths-above-S", lambda: dec.greedy_decode(MODEL, SRC, LONG, 5), *TOO_LONG)
case("beam-src_lengths-above-S", lambda: dec.beam_search(MODEL, SRC, LONG, 2, 5), *TOO_LONG)
case("greedy-transformer-src_lengths-above-S", lambda: dec.greedy_decode(TF, SRC, LONG, 3), *TOO_LONG)
case("beam-transformer-src_lengths-above-S", lambda: dec.beam_search(TF, SRC, LONG, 2, 3), *TOO_LONG)
case("greedy-transformer-src_lengths-0", lambda: dec.greedy_decode(TF, SRC, LEN * 0, 3), "src_lengths",
     f"[1, {SRC.shape[1]}]", "shortest length of 0")
case("reverse_padded-lengths-far-above-T", lambda: s2s.reverse_padded(torch.zeros(2, 4, 3),
     torch.tensor([9, 1])), "lengths", "[0, 4]", "longest length of 9")
# max_len=0: a decoder writes at least one token (<eos>), so every max_len of decoding is >= 1
case("beam-max_len-0", lambda: dec.beam_search(MODEL, SRC, LEN, 2, 0), "max_len", ">= 1", "0")
case("beam-transformer-max_len-0", lambda: dec.beam_search(TF, SRC, LEN, 2, 0), "max_len", ">= 1", "0")
case("greedy-transformer-max_len-0", lambda: dec.greedy_decode(TF, SRC, LEN, 0), "max_len", ">= 1", "0")
# empty sources and vocabularies that are not vocabularies
case("greedy-src-B0", lambda: dec.greedy_decode(MODEL, SRC[:0], LEN[:0], 3), "src", "empty", "(0, 5)")
case("beam-src-S0", lambda: dec.beam_search(MODEL, SRC[:, :0], LEN, 2, 3), "src", "empty")
case("translate-tgt_vocab-dict", lambda: dec.translate(MODEL, ["a"], DATA.src_vocab, {"a": 4}, 5),
     "tgt_vocab", "Vocab", "dict")
# the decoding protocol of Seq2Seq: decode_step(prev_tokens, state, memory, need_weights)
case("decode_step-memory-tuple", lambda: MODEL.decode_step(Y, None, tuple(MEM)), "memory", "EncoderOutput",
     "tuple")
case("decode_step-prev_tokens-batch", lambda: MODEL.decode_step(Y[:2], S0, MEM), "prev_tokens", f"({B},)",
     "(2,)")
case("decode_step-prev_tokens-out-of-range", lambda: MODEL.decode_step(Y + V, None, MEM), "prev_tokens",
     f"[0, {V - 1}]")
case("decode_step-prev_tokens-float", lambda: MODEL.decode_step(Y.float(), None, MEM), "prev_tokens",
     "float32")
case("decode_step-state-shape", lambda: MODEL.decode_step(Y, S0[:, :5], MEM), "state", f"({B}, 6)",
     f"({B}, 5)")
case("decode_step-state-int", lambda: MODEL.decode_step(Y, S0.long(), MEM), "state", "torch.int64")
case("decode_step-need_weights-int", lambda: MODEL.decode_step(Y, None, MEM, need_weights=1), "need_weights",
     "bool")
# the transformer through the same decoders
case("greedy-transformer-pad_id", lambda: dec.greedy_decode(Seq2SeqTransformer(V, V, 8, 2, pad_id=1), SRC,
     LEN, 3), "model.pad_id", "0", "1")
case("greedy-transformer-src-float", lambda: dec.greedy_decode(TF, SRC.float(), LEN, 3), "src", "float32")
case("greedy-transformer-src-out-of-range", lambda: dec.greedy_decode(TF, SRC + V, LEN, 3), "src",
     f"[0, {V - 1}]")
case("greedy-transformer-src_lengths-shape", lambda: dec.greedy_decode(TF, SRC, LEN[:2], 3), "src_lengths",
     f"({B},)", "(2,)")
case("greedy-transformer-max_len-too-long", lambda: dec.greedy_decode(TF, SRC, LEN, 9, forbid=[EOS]),
     "max_len=8", "max_len <= 8", "9 positions")
case("beam-transformer-max_len-too-long", lambda: dec.beam_search(TF, SRC, LEN, 2, 9, forbid=[EOS]),
     "max_len=8", "max_len <= 8")
case("exact_match-lengths", lambda: s2s.exact_match(["a"], ["a", "b"]), "equally many", "1 and 2")
case("exact_match-empty", lambda: s2s.exact_match([], []), "equally many")
case("exact_match-str", lambda: s2s.exact_match("ab", "ab"), "predictions", "list of strings")
case("exact_match-ints", lambda: s2s.exact_match(["a"], [1]), "targets", "list of strings")
case("exact_match_by_length-lengths", lambda: s2s.exact_match_by_length(["a"], []), "equally many")
case("exact_match_by_length-pairs-str", lambda: s2s.exact_match_by_length(["a"], ["ab"]), "pairs")

# memory's fields: the type and dtype checked before any shape is read (the review's examples: an
# integer memory.final gave "mat1 and mat2 must have the same dtype" from torch, a list memory.mask
# "'list' object has no attribute 'shape'"), and every field named as the caller wrote it
MEM_PLAIN = PLAIN.encode(SRC, LEN)
REVIEW = Seq2Seq(9, 8, embed_dim=6, hidden_size=7, attention_dim=5)
REVIEW_MEM = REVIEW.encode(torch.randint(4, 9, (3, 5), generator=torch.Generator().manual_seed(0)),
                           torch.tensor([5, 3, 1]))
case("init_state-memory.final-long", lambda: REVIEW.decoder.init_state(
     REVIEW_MEM._replace(final=REVIEW_MEM.final.round().long())), "memory.final", "floating-point", "int64")
case("init_state-memory.mask-list", lambda: REVIEW.decoder.init_state(
     REVIEW_MEM._replace(mask=REVIEW_MEM.mask.tolist())), "memory.mask", "list")
case("init_state-memory.final-list", lambda: MODEL.decoder.init_state(MEM._replace(final=MEM.final.tolist())),
     "memory.final", "list")
case("init_state-memory.final-float64", lambda: MODEL.decoder.init_state(
     MEM._replace(final=MEM.final.double())), "memory.final", "torch.float64")
case("init_state-memory.final-shape", lambda: MODEL.decoder.init_state(MEM._replace(final=MEM.final[:, :5])),
     "memory.final", f"({B}, 12)", f"({B}, 5)")
case("plain-init_state-memory.final-long", lambda: PLAIN.decoder.init_state(
     MEM_PLAIN._replace(final=MEM_PLAIN.final.long())), "memory.final", "int64")
case("decode_step-memory.final-ndarray", lambda: MODEL.decode_step(Y, None, MEM._replace(
     final=MEM.final.detach().numpy())), "memory.final", "ndarray")
case("decode_step-memory.mask-list", lambda: MODEL.decode_step(Y, S0, MEM._replace(mask=MEM.mask.tolist())),
     "memory.mask", "list")
case("decode_step-memory.mask-shape", lambda: MODEL.decode_step(Y, S0, MEM._replace(mask=MEM.mask[:, :2])),
     "memory.mask", f"({B}, 5)", f"({B}, 2)")
case("decode_step-memory.annotations-list", lambda: MODEL.decode_step(Y, S0, MEM._replace(
     annotations=MEM.annotations.tolist())), "memory.annotations", "list")
case("plain-decode_step-memory.mask-list", lambda: PLAIN.decode_step(Y, None, MEM_PLAIN._replace(
     mask=MEM_PLAIN.mask.tolist())), "memory.mask", "list")
case("step-memory.mask-ndarray", lambda: MODEL.decoder.step(Y, S0, MEM._replace(mask=MEM.mask.numpy())),
     "memory.mask", "ndarray")
case("plain-step-memory.final-list", lambda: PLAIN.decoder.step(Y, S0, MEM_PLAIN._replace(
     final=MEM_PLAIN.final.tolist())), "memory.final", "list")
# memory.keys was reported as "projected_keys must have shape ..."
case("decode_step-memory.keys-shape", lambda: MODEL.decode_step(Y, S0, MEM._replace(keys=MEM.keys[:, :2])),
     "memory.keys", f"({B}, 5, 6)", f"({B}, 2, 6)")
case("step-memory.keys-list", lambda: MODEL.decoder.step(Y, S0, MEM._replace(keys=MEM.keys.tolist())),
     "memory.keys", "list")
case("decoder-memory.keys-int", lambda: MODEL.decoder(TGT, MEM._replace(keys=MEM.keys.long())), "memory.keys",
     "int64")
case("plain-decode_step-memory.keys-list", lambda: PLAIN.decode_step(Y, None, MEM_PLAIN._replace(keys=[1])),
     "memory.keys", "list")
# the state: its dtype is the decoder's (a float64 state gave "query must have the dtype ...")
case("decode_step-state-float64", lambda: MODEL.decode_step(Y, S0.double(), MEM), "state", "torch.float64")
case("step-s-float64", lambda: MODEL.decoder.step(Y, S0.double(), MEM), "s", "torch.float64")
# a wrong type is a TypeError, before shapes: tgt of loss, src of the decoders
case("Seq2Seq-loss-tgt-list", lambda: MODEL.loss(SRC, LEN, TGT.tolist()), "tgt", "list")
case("greedy-src-list", lambda: dec.greedy_decode(MODEL, SRC.tolist(), LEN, 5), "src", "list")
case("Encoder-src_lengths-list", lambda: MODEL.encoder(SRC, LEN.tolist()), "src_lengths", "list")
# forbid is checked even when there is nothing to translate
case("translate-empty-forbid-out-of-range", lambda: dec.translate(MODEL, [], DATA.src_vocab, DATA.tgt_vocab,
     5, forbid=(V,)), "forbid[0]", str(V))
case("translate-empty-forbid-str", lambda: dec.translate(MODEL, [], DATA.src_vocab, DATA.tgt_vocab, 5,
     forbid="ab"), "forbid", "str")


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)


@pytest.mark.parametrize(("fn", "words"), LOOPS)
def test_bad_sizes_of_loops_are_refused_in_time(fn, words):
    assert_clear_error_in_time(fn, *words)


# ------------------------------------------------------------------ legal edge inputs


def test_numpy_sizes_are_accepted():
    m = Seq2Seq(np.int64(V), np.int64(V), np.int64(4), np.int32(6))
    assert m(SRC, LEN, TGT).shape == (B, TGT.shape[1], V)
    batch = next(bt.bucket_batches(SRC, LEN, TGT, np.int64(2), pool=np.int64(1)))
    assert batch[0].shape[0] == 2
    ys = dec.beam_search(MODEL, SRC, LEN, np.int64(2), np.int64(3))
    assert ys.shape[0] == B


def test_beam_search_keeps_float64_scores():
    m = Seq2Seq(V, V, 4, 6).double().eval()
    ys, scores = dec.beam_search(m, SRC, LEN, 3, 4, return_scores=True)
    assert scores.dtype == torch.float64 and torch.isfinite(scores).all()
    _, scores32 = dec.beam_search(MODEL, SRC, LEN, 3, 4, return_scores=True)
    assert scores32.dtype == torch.float32


def test_beam_wider_than_the_vocabulary_is_legal():
    ys, scores = dec.beam_search(MODEL, SRC, LEN, V + 3, 3, return_scores=True)
    assert ys.shape[0] == B and torch.isfinite(scores).all()


def test_translate_empty_list_and_decode_empty_ids():
    assert dec.translate(MODEL, [], DATA.src_vocab, DATA.tgt_vocab, 5) == []
    assert vocab.decode_ids(torch.zeros(0, dtype=torch.long), DATA.tgt_vocab) == ""


def test_reverse_padded_zero_length_row_stays_in_place():
    x = torch.arange(8.0).view(2, 4)
    assert s2s.reverse_padded(x, torch.tensor([0, 4])).tolist() == [[0, 1, 2, 3], [7, 6, 5, 4]]


def test_wrong_types_in_memory_are_type_errors():
    final = MEM._replace(final=MEM.final.long())
    assert_clear_error(lambda: MODEL.decoder.init_state(final), "memory.final", exc=TypeError)
    mask = MEM._replace(mask=[1])
    assert_clear_error(lambda: MODEL.decode_step(Y, None, mask), "memory.mask", exc=TypeError)
    assert_clear_error(lambda: MODEL.loss(SRC, LEN, None), "tgt", exc=TypeError)
    assert_clear_error(lambda: MODEL.encoder(SRC.float(), LEN), "src", exc=TypeError)


def test_memory_without_keys_and_a_plain_memory_with_keys_decode():
    logits, state = MODEL.decode_step(Y, None, MEM._replace(keys=None))  # projected at every step
    assert torch.allclose(logits, MODEL.decode_step(Y, None, MEM)[0], atol=1e-6)
    assert PLAIN.decode_step(Y, None, MEM_PLAIN._replace(keys=MEM.keys))[0].shape == logits.shape


def test_plain_decoder_model_decodes():
    assert dec.greedy_decode(PLAIN, SRC, LEN, 3).shape[0] == B


def test_forbid_may_leave_one_id_and_length_penalty_may_be_an_int():
    allowed = 5
    forbid = [i for i in range(V) if i != allowed]
    for ys in (dec.greedy_decode(MODEL, SRC, LEN, 3, forbid=forbid),
               dec.beam_search(MODEL, SRC, LEN, 2, 3, forbid=tuple(forbid), length_penalty=np.int64(1))):
        assert ys.shape == (B, 3) and (ys == allowed).all()
    ys = dec.greedy_decode(TF, SRC, LEN, 8, forbid=np.arange(4).tolist())  # 8 = the model's max_len: legal
    assert ys.shape[0] == B and ys.shape[1] <= 8


def test_bucket_batches_index_tensors_follow_the_data_device():
    # On CUDA the shuffled order must be moved to the data's device before it indexes; here the same
    # path runs on the CPU and must give batches drawn from the data.
    src, lengths, tgt = next(bt.bucket_batches(SRC, LEN, TGT, 3, torch.Generator().manual_seed(0)))
    assert src.device == SRC.device and src.shape[0] == 3 and int(lengths.max()) == src.shape[1]
