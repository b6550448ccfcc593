"""Bad input for every public callable of ``seqbook.data``: a clear error, or a correct edge result.

Each rejected case must end in a ValueError/TypeError raised by seqbook that names the argument
(``tests/badinput.py``). The loaders' file checks (hashes, damaged files) are in
``test_data_integrity.py``; nothing here touches the network or the data folders.
"""

from __future__ import annotations

import math
from datetime import date, datetime
from pathlib import Path

import numpy as np
import pytest
import torch

from seqbook import batching as bt
from seqbook import data, fetch, vocab
from seqbook.attention import lengths_to_mask
from seqbook.fetch import RemoteFile
from seqbook.vocab import Vocab
from tests.badinput import assert_clear_error, assert_clear_error_in_time, table

V = Vocab(list("hello"))  # <pad> <unk> <sos> <eos> l e h o: a character vocabulary of size 8
W = Vocab("the cat the dog".split())  # a word vocabulary
GOOD_HASH = "0" * 64
MARKED = ("*** START OF THE PROJECT GUTENBERG EBOOK X ***\nbody\n"
          "*** END OF THE PROJECT GUTENBERG EBOOK X ***")


def ids(*values, dtype=torch.long):
    return torch.tensor(values, dtype=dtype)


# (call, words every message must contain)
ERRORS, case = table()
case("Vocab-min_freq-0", lambda: Vocab([], min_freq=0), "min_freq", ">= 1", "0")
case("Vocab-min_freq-negative", lambda: Vocab([], min_freq=-2), "min_freq", "-2")
case("Vocab-min_freq-float", lambda: Vocab([], min_freq=1.5), "min_freq", "float")
case("Vocab-min_freq-bool", lambda: Vocab([], min_freq=True), "min_freq", "bool")
case("Vocab-min_freq-str", lambda: Vocab([], min_freq="2"), "min_freq", "str")
case("Vocab-max_size-negative", lambda: Vocab(list("ab"), max_size=-1), "max_size", ">= 0", "-1")
case("Vocab-max_size-float", lambda: Vocab(list("ab"), max_size=2.0), "max_size", "float")
case("Vocab-max_size-bool", lambda: Vocab(list("ab"), max_size=True), "max_size", "bool")
case("Vocab-tokens-None", lambda: Vocab(None), "tokens", "NoneType")
case("Vocab-tokens-int", lambda: Vocab(5), "tokens", "int")
case("Vocab-tokens-ints", lambda: Vocab([1, 2]), "tokens", "int 1")
case("Vocab-tokens-nested-int", lambda: Vocab([["a", 3]]), "tokens", "int 3")
case("Vocab-tokens-tensor", lambda: Vocab(torch.arange(3)), "tokens", "Tensor")
case("Vocab-tokens-bytes", lambda: Vocab([b"ab"]), "tokens", "bytes")
case("Vocab.getitem-int", lambda: V[4], "token", "int")
case("Vocab.getitem-None", lambda: V[None], "token", "NoneType")
case("Vocab.getitem-list", lambda: V[["h"]], "token", "list")
case("encode-None", lambda: V.encode(None), "tokens", "NoneType")
case("encode-int", lambda: V.encode(5), "tokens", "int")
case("encode-ids-instead-of-tokens", lambda: V.encode([4, 5]), "tokens", "int 4", "position 0")
case("encode-nested-list", lambda: V.encode([["h"]]), "tokens", "list", "position 0")
case("encode-tensor", lambda: V.encode(ids(4, 5)), "tokens", "Tensor")
case("encode-str-with-word-vocab", lambda: W.encode("the"), "tokens", "multi-character", "tokenize_words")
case("encode-add_sos-int", lambda: V.encode(["h"], add_sos=1), "add_sos", "int")
case("encode-add_sos-str", lambda: V.encode(["h"], add_sos="yes"), "add_sos", "str")
case("encode-add_eos-None", lambda: V.encode(["h"], add_eos=None), "add_eos", "NoneType")
case("decode-id-too-large", lambda: V.decode([99]), "outside the vocabulary", "99", "[0, 7]")
case("decode-id-negative", lambda: V.decode([-1]), "outside the vocabulary", "-1", "[0, 7]")
case("decode-tensor-id-too-large", lambda: V.decode(ids(4, 8)), "outside the vocabulary", "8")
case("decode-float-id", lambda: V.decode([4.0]), "ids", "float", "position 0")
case("decode-bool-id", lambda: V.decode([True]), "ids", "bool")
case("decode-str-id", lambda: V.decode(["h"]), "ids", "str")
case("decode-float-tensor", lambda: V.decode(torch.tensor([4.0, 5.0])), "ids", "torch.float32")
case("decode-bool-tensor", lambda: V.decode(torch.tensor([True])), "ids", "torch.bool")
case("decode-2d-tensor", lambda: V.decode(ids(4, 5)[None]), "ids", "1-D", "(1, 2)")
case("decode-0d-tensor", lambda: V.decode(torch.tensor(4)), "ids", "1-D", "()")
case("decode-float-array", lambda: V.decode(np.array([4.0])), "ids", "float64")
case("decode-2d-array", lambda: V.decode(np.array([[4]])), "ids", "1-D", "(1, 1)")
case("decode-0d-float-tensor-entry", lambda: V.decode([torch.tensor(4.0)]), "ids", "float")
case("decode-str", lambda: V.decode("45"), "ids", "str")
case("decode-None", lambda: V.decode(None), "ids", "NoneType")
case("decode-strip_special-int", lambda: V.decode([4], strip_special=1), "strip_special", "int")
case("tokenize_chars-None", lambda: vocab.tokenize_chars(None), "text", "NoneType")
case("tokenize_chars-list", lambda: vocab.tokenize_chars(["ab"]), "text", "list")
case("tokenize_words-bytes", lambda: vocab.tokenize_words(b"the time"), "text", "bytes")
case("tokenize_words-int", lambda: vocab.tokenize_words(5), "text", "int")
case("normalize_text-None", lambda: vocab.normalize_text(None), "text", "NoneType")
case("normalize_text-list", lambda: vocab.normalize_text(["Ab"]), "text", "list")
case("strip_gutenberg-bytes", lambda: data.strip_gutenberg(MARKED.encode()), "text", "bytes")
case("strip_gutenberg-no-markers", lambda: data.strip_gutenberg("no markers"), "text", "START/END")
case("split_text-text-None", lambda: data.split_text(None), "text", "NoneType")
case("split_text-text-list", lambda: data.split_text(list("abc")), "text", "list")
case("split_text-valid_frac-0", lambda: data.split_text("abc", 0), "valid_frac", "(0, 1)", "0")
case("split_text-valid_frac-1", lambda: data.split_text("abc", 1), "valid_frac", "(0, 1)", "1")
case("split_text-valid_frac-negative", lambda: data.split_text("abc", -0.1), "valid_frac", "-0.1")
case("split_text-valid_frac-1.5", lambda: data.split_text("abc", 1.5), "valid_frac", "1.5")
case("split_text-valid_frac-nan", lambda: data.split_text("abc", math.nan), "valid_frac", "nan")
case("split_text-valid_frac-inf", lambda: data.split_text("abc", math.inf), "valid_frac", "inf")
case("split_text-valid_frac-str", lambda: data.split_text("abc", "0.1"), "valid_frac", "str")
case("split_text-valid_frac-bool", lambda: data.split_text("abc", True), "valid_frac", "bool")
case("load_names-str", lambda: data.load_names("French"), "languages", "str", "['French']")
case("load_names-empty", lambda: data.load_names([]), "languages", "at least one")
case("load_names-int", lambda: data.load_names(5), "languages", "int")
case("load_names-int-entry", lambda: data.load_names([5]), "languages", "int 5")
case("load_names-list-entry", lambda: data.load_names([["French"]]), "languages", "list")
case("load_names-unknown", lambda: data.load_names(["Klingon"]), "languages", "Klingon", "French")
case("make_dates-n-negative", lambda: data.make_dates(-1), "n must be", ">= 0", "-1")
case("make_dates-n-float", lambda: data.make_dates(1.5), "n must be", "float")
case("make_dates-n-bool", lambda: data.make_dates(True), "n must be", "bool")
case("make_dates-n-str", lambda: data.make_dates("3"), "n must be", "str")
case("make_dates-n-None", lambda: data.make_dates(None), "n must be", "NoneType")
case("make_dates-seed-float", lambda: data.make_dates(2, seed=1.5), "seed", "float")
case("make_dates-seed-str", lambda: data.make_dates(2, seed="a"), "seed", "str")
case("make_dates-seed-None", lambda: data.make_dates(2, seed=None), "seed", "NoneType")
case("make_dates-start-str", lambda: data.make_dates(2, start="2000-01-01"), "start", "datetime.date", "str")
case("make_dates-start-datetime", lambda: data.make_dates(2, start=datetime(2000, 1, 1)), "start", "datetime")
case("make_dates-end-None", lambda: data.make_dates(2, end=None), "end", "NoneType")
case("make_dates-end-before-start", lambda: data.make_dates(1, start=date(2000, 1, 1), end=date(1999, 1, 1)),
     "end", "before start", "1999-01-01")
case("pad_sequences-empty", lambda: bt.pad_sequences([]), "sequences", "empty")
case("pad_sequences-str", lambda: bt.pad_sequences("abc"), "sequences", "str")
case("pad_sequences-generator", lambda: bt.pad_sequences([1] for _ in range(2)), "sequences", "generator")
case("pad_sequences-int", lambda: bt.pad_sequences(5), "sequences", "int")
case("pad_sequences-floats", lambda: bt.pad_sequences([[1.5, 2.0]]), "sequences[0]", "torch.float32",
     "truncated")
case("pad_sequences-float-in-second", lambda: bt.pad_sequences([[1], [0.5]]), "sequences[1]", "float")
case("pad_sequences-float-tensor", lambda: bt.pad_sequences([torch.tensor([1.0])]), "sequences[0]", "float")
case("pad_sequences-float-array", lambda: bt.pad_sequences([np.array([1.0])]), "sequences[0]", "float64")
case("pad_sequences-bools", lambda: bt.pad_sequences([[True, False]]), "sequences[0]", "torch.bool")
case("pad_sequences-tokens-not-ids", lambda: bt.pad_sequences([["a", "b"]]), "sequences[0]", "int ids")
case("pad_sequences-str-entry", lambda: bt.pad_sequences(["ab"]), "sequences[0]", "str", "'ab'")
case("pad_sequences-int-entry", lambda: bt.pad_sequences([5]), "sequences[0]", "flat", "()")
case("pad_sequences-nested", lambda: bt.pad_sequences([[[1, 2]]]), "sequences[0]", "flat", "(1, 2)")
case("pad_sequences-huge-id", lambda: bt.pad_sequences([[2**70]]), "sequences[0]", "int ids")
case("pad_sequences-ragged-entry", lambda: bt.pad_sequences([[[1], [2, 3]]]), "sequences[0]", "int ids")
case("pad_sequences-pad_id-float", lambda: bt.pad_sequences([[1]], pad_id=1.5), "pad_id", "float")
case("pad_sequences-pad_id-None", lambda: bt.pad_sequences([[1]], pad_id=None), "pad_id", "NoneType")
case("pad_sequences-pad_id-bool", lambda: bt.pad_sequences([[1]], pad_id=True), "pad_id", "bool")
case("pad_sequences-max_len-0-cuts-every-token", lambda: bt.pad_sequences([[1, 2]], max_len=0), "max_len",
     ">= 1", "0")
case("pad_sequences-max_len-negative", lambda: bt.pad_sequences([[1]], max_len=-1), "max_len", ">= 0", "-1")
case("pad_sequences-max_len-float", lambda: bt.pad_sequences([[1]], max_len=2.5), "max_len", "float")
case("pad_sequences-max_len-bool", lambda: bt.pad_sequences([[1]], max_len=True), "max_len", "bool")
case("lengths_to_mask-list", lambda: lengths_to_mask([1, 2]), "lengths", "torch.Tensor", "list")
case("lengths_to_mask-2d", lambda: lengths_to_mask(torch.ones(2, 2, dtype=torch.long)), "lengths", "(B,)",
     "(2, 2)")
case("lengths_to_mask-0d", lambda: lengths_to_mask(torch.tensor(3)), "lengths", "(B,)", "()")
case("lengths_to_mask-float", lambda: lengths_to_mask(torch.tensor([2.5, 1.0])), "lengths", "torch.float32")
case("lengths_to_mask-bool", lambda: lengths_to_mask(torch.tensor([True])), "lengths", "torch.bool")
case("lengths_to_mask-negative", lambda: lengths_to_mask(ids(2, -1)), "lengths", ">= 0", "-1")
case("lengths_to_mask-negative-with-max_len", lambda: lengths_to_mask(ids(-3), 4), "lengths", "-3")
case("lengths_to_mask-length-above-max_len", lambda: lengths_to_mask(ids(5, 1), 3), "lengths", "[0, 3]",
     "max_len", "5")
case("lengths_to_mask-max_len-0-cuts-tokens", lambda: lengths_to_mask(ids(2, 0), 0), "lengths", "[0, 0]", "2")
case("lengths_to_mask-max_len-negative", lambda: lengths_to_mask(ids(2), -1), "max_len", ">= 0", "-1")
case("lengths_to_mask-max_len-float", lambda: lengths_to_mask(ids(2), 1.5), "max_len", "float")
case("lengths_to_mask-max_len-bool", lambda: lengths_to_mask(ids(2), True), "max_len", "bool")
case("lengths_to_mask-meta-without-max_len", lambda: lengths_to_mask(ids(2).to("meta")), "max_len", "meta")
case("lm_chunks-list", lambda: bt.lm_chunks(list(range(20)), 2, 3), "ids", "torch.Tensor", "list")
case("lm_chunks-2d", lambda: bt.lm_chunks(torch.arange(20).view(4, 5), 2, 3), "ids", "(N,)", "(4, 5)")
case("lm_chunks-0d", lambda: bt.lm_chunks(torch.tensor(3), 2, 3), "ids", "(N,)", "()")
case("lm_chunks-empty", lambda: bt.lm_chunks(torch.zeros(0, dtype=torch.long), 2, 3), "ids", "empty", "(0,)")
case("lm_chunks-float", lambda: bt.lm_chunks(torch.arange(20.0), 2, 3), "ids", "integer", "torch.float32")
case("lm_chunks-bool", lambda: bt.lm_chunks(torch.ones(20, dtype=torch.bool), 2, 3), "ids", "torch.bool")
case("lm_chunks-batch_size-0", lambda: bt.lm_chunks(torch.arange(20), 0, 3), "batch_size", ">= 1", "0")
case("lm_chunks-batch_size-negative", lambda: bt.lm_chunks(torch.arange(20), -2, 3), "batch_size", "-2")
case("lm_chunks-batch_size-float", lambda: bt.lm_chunks(torch.arange(20), 2.0, 3), "batch_size", "float")
case("lm_chunks-batch_size-bool", lambda: bt.lm_chunks(torch.arange(20), True, 3), "batch_size", "bool")
case("lm_chunks-seq_len-0", lambda: bt.lm_chunks(torch.arange(20), 2, 0), "seq_len", ">= 1", "0")
case("lm_chunks-seq_len-negative", lambda: bt.lm_chunks(torch.arange(20), 2, -3), "seq_len", "-3")
case("lm_chunks-seq_len-inf", lambda: bt.lm_chunks(torch.arange(20), 2, math.inf), "seq_len", "float")
case("lm_chunks-too-short", lambda: bt.lm_chunks(torch.arange(6), 2, 3), "ids", "too short", "batch_size=2",
     "seq_len=3", "7 tokens")
case("RemoteFile-fname-empty", lambda: RemoteFile("", "u", GOOD_HASH), "fname", "''")
case("RemoteFile-fname-dotdot", lambda: RemoteFile("..", "u", GOOD_HASH), "fname", "'..'")
case("RemoteFile-fname-with-folder", lambda: RemoteFile("../x.txt", "u", GOOD_HASH), "fname", "'../x.txt'")
case("RemoteFile-fname-int", lambda: RemoteFile(5, "u", GOOD_HASH), "fname", "5")
case("RemoteFile-url-empty", lambda: RemoteFile("a.txt", "", GOOD_HASH), "url", "''")
case("RemoteFile-url-None", lambda: RemoteFile("a.txt", None, GOOD_HASH), "url", "None")
case("RemoteFile-sha256-short", lambda: RemoteFile("a.txt", "u", "abc"), "sha256", "64", "'abc'")
case("RemoteFile-sha256-not-hex", lambda: RemoteFile("a.txt", "u", "g" * 64), "sha256", "0-9a-f")
case("RemoteFile-sha256-None", lambda: RemoteFile("a.txt", "u", None), "sha256", "None")
case("RemoteFile-sha256-with-prefix", lambda: RemoteFile("a.txt", "u", "sha256:" + GOOD_HASH), "sha256", "64")
case("RemoteFile-system_paths-str", lambda: RemoteFile("a.txt", "u", GOOD_HASH, "/usr/a.txt"), "system_paths",
     "tuple of str", "'/usr/a.txt'")
case("RemoteFile-system_paths-int-entry", lambda: RemoteFile("a.txt", "u", GOOD_HASH, (5,)), "system_paths",
     "int 5")
case("RemoteFile-other_sha256-str", lambda: RemoteFile("a.txt", "u", GOOD_HASH, (), "1" * 64), "other_sha256",
     "tuple of str")
case("RemoteFile-other_sha256-bad-entry", lambda: RemoteFile("a.txt", "u", GOOD_HASH, (), ("zz",)),
     "other_sha256", "'zz'")
case("fetch-remote-str", lambda: fetch.fetch("timemachine.txt"), "remote", "RemoteFile", "str")
case("fetch-remote-None", lambda: fetch.fetch(None), "remote", "NoneType")
case("fetch-download-str", lambda: fetch.fetch(data.TIME_MACHINE, download="no"), "download", "str")
case("fetch-download-int", lambda: fetch.fetch(data.TIME_MACHINE, download=0), "download", "int")
case("load_time_machine-download-str", lambda: data.load_time_machine(download="yes"), "download", "str")
case("load_fashion_mnist-split-valid", lambda: data.load_fashion_mnist("valid"), "split", "'valid'")
case("load_fashion_mnist-split-None", lambda: data.load_fashion_mnist(None), "split", "None")
case("load_fashion_mnist-split-int", lambda: data.load_fashion_mnist(1), "split", "1")
case("load_fashion_mnist-split-list", lambda: data.load_fashion_mnist(["train"]), "split", "['train']")
case("load_fashion_mnist-split-upper", lambda: data.load_fashion_mnist("Train"), "split", "'Train'")
case("load_fashion_mnist-split-all", lambda: data.load_fashion_mnist("all"), "split", "'all'")
case("load_solubility-split-valid", lambda: data.load_solubility("valid"), "split", "'valid'")
case("load_solubility-split-int", lambda: data.load_solubility(1), "split", "1")
case("load_solubility-download-str", lambda: data.load_solubility("test", download="no"), "download", "'no'")
TWO_MOLECULES = data.Molecules([torch.zeros(1, 1)] * 2, [torch.zeros(0, 2, dtype=torch.int64)] * 2,
                              [torch.zeros(0, 1)] * 2, torch.tensor([0, 1]), ["C", "CC"], ["a", "b"])
case("scaffold_split-molecules-list", lambda: data.scaffold_split(["CCO", "c1ccccc1"]), "molecules",
     "Molecules", "list")
case("scaffold_split-molecules-one", lambda: data.scaffold_split(data._subset(TWO_MOLECULES, [0])),
     "molecules", "at least 2", "got 1")
case("scaffold_split-smiles-unreadable", lambda: data.scaffold_split(data.Molecules(
    TWO_MOLECULES.atoms, TWO_MOLECULES.bonds, TWO_MOLECULES.bond_features, TWO_MOLECULES.labels,
    ["C", "not a molecule"], TWO_MOLECULES.classes)), "molecules.smiles[1]", "'not a molecule'")
case("scaffold_split-smiles-short", lambda: data.scaffold_split(data.Molecules(
    TWO_MOLECULES.atoms, TWO_MOLECULES.bonds, TWO_MOLECULES.bond_features, TWO_MOLECULES.labels,
    ["C"], TWO_MOLECULES.classes)), "molecules", "one entry per molecule")
case("scaffold_split-empty-part", lambda: data.scaffold_split(TWO_MOLECULES, 0.2), "test_fraction",
     "0 test molecules", "empty")
for label, frac, word in [("0", 0.0, "0.0"), ("1", 1.0, "1.0"), ("negative", -0.2, "-0.2"),
                          ("nan", math.nan, "finite"), ("str", "0.2", "str"), ("bool", True, "bool")]:
    case(f"scaffold_split-test_fraction-{label}",
         lambda frac=frac: data.scaffold_split(TWO_MOLECULES, frac), "test_fraction", word)
case("load_fashion_mnist-download-str", lambda: data.load_fashion_mnist("test", download="no"), "download",
     "str")

# Ids that index a table are never negative: checked even where no vocabulary gives the upper end
# (the review's examples: context_windows and bucket_batches put -3 into their output)
SRC = torch.randint(0, 9, (8, 5), generator=torch.Generator().manual_seed(0))
SRC_LENGTHS = torch.full((8,), 5)
TGT = torch.randint(0, 9, (8, 4), generator=torch.Generator().manual_seed(1))


def with_id(t, value, where=(0, 0)):
    t = t.clone()
    t[where] = value
    return t


case("context_windows-negative-id", lambda: bt.context_windows(torch.tensor([-3, 11, 12, 13]), window=1),
     "ids", ">= 0", "-3")
case("context_windows-negative-id-int32", lambda: bt.context_windows(ids(4, 5, -1, 7, dtype=torch.int32)),
     "ids", "-1")
case("lm_chunks-negative-id", lambda: bt.lm_chunks(with_id(torch.arange(20), -5, 7), 2, 3), "ids", ">= 0",
     "-5")
case("bucket_batches-src-negative-id", lambda: bt.bucket_batches(with_id(SRC, -3), SRC_LENGTHS, TGT, 4),
     "src", ">= 0", "-3")
case("bucket_batches-src-negative-id-last-row",
     lambda: bt.bucket_batches(with_id(SRC, -1, (7, 4)), SRC_LENGTHS, TGT, 4), "src", "-1")
case("bucket_batches-tgt-negative-id",
     lambda: bt.bucket_batches(SRC, SRC_LENGTHS, with_id(TGT, -2, (3, 1)), 4), "tgt", ">= 0", "-2")
case("bucket_batches-src_lengths-negative",
     lambda: bt.bucket_batches(SRC, with_id(SRC_LENGTHS, -5, 2), TGT, 4), "src_lengths", "-5")
case("context_windows-id-beyond-vocab_size", lambda: bt.context_windows(ids(4, 5, 9, 7), 1, vocab_size=9),
     "ids", "[0, 8]", "9")
case("context_windows-vocab_size-0", lambda: bt.context_windows(ids(4, 5, 6), 1, vocab_size=0), "vocab_size",
     ">= 1", "0")
case("lm_chunks-id-beyond-vocab_size", lambda: bt.lm_chunks(torch.arange(20), 2, 3, vocab_size=19), "ids",
     "[0, 18]", "19")
case("lm_chunks-vocab_size-float", lambda: bt.lm_chunks(torch.arange(20), 2, 3, vocab_size=20.0),
     "vocab_size", "float")
case("bucket_batches-src-beyond-src_vocab_size",
     lambda: bt.bucket_batches(with_id(SRC, 9, (5, 2)), SRC_LENGTHS, TGT, 4, src_vocab_size=9), "src",
     "[0, 8]", "9")
case("bucket_batches-tgt-beyond-tgt_vocab_size",
     lambda: bt.bucket_batches(SRC, SRC_LENGTHS, TGT, 4, tgt_vocab_size=int(TGT.max())), "tgt",
     f"[0, {int(TGT.max()) - 1}]", str(int(TGT.max())))
case("bucket_batches-src_vocab_size-0", lambda: bt.bucket_batches(SRC, SRC_LENGTHS, TGT, 4, src_vocab_size=0),
     "src_vocab_size", "0")
case("bucket_batches-src_lengths-beyond-src",
     lambda: bt.bucket_batches(SRC, with_id(SRC_LENGTHS, 6, 2), TGT, 4), "src_lengths", "[1, 5]", "6")


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly_in_time(fn, words):
    assert_clear_error_in_time(fn, *words, seconds=30)


def test_out_of_range_id_is_still_an_index_error():
    """``decode`` raised IndexError before the checks; it still does (and is a ValueError too)."""
    with pytest.raises(IndexError, match="outside the vocabulary"):
        V.decode([99])
    assert_clear_error(lambda: V.decode([99]), "outside the vocabulary", exc=ValueError)


def _check_pad(out, padded, lengths):
    assert out[0].dtype == out[1].dtype == torch.long
    assert out[0].tolist() == padded and out[1].tolist() == lengths
    return True


# Legal edge inputs: each call must give the stated, correct result.
LEGAL = {
    "Vocab-numpy-sizes": lambda: len(Vocab(list("aaabbc"), min_freq=np.int64(2), max_size=np.int64(1))) == 5,
    "Vocab-max_size-0-keeps-reserved": lambda: Vocab(list("abc"), max_size=0).itos == list(vocab.RESERVED),
    "Vocab-empty": lambda: len(Vocab()) == 4 and Vocab([]).encode(["a"]) == [1],
    "Vocab-from-str-reads-chars": lambda: Vocab("aab").itos[4:] == ["a", "b"],
    "Vocab-nested-tuples": lambda: Vocab([("a", "b"), ("a",)]).itos[4:] == ["a", "b"],
    "Vocab-reserved-tokens-not-counted": lambda: Vocab(["<pad>", "a"]).itos == list(vocab.RESERVED) + ["a"],
    "Vocab.getitem-unknown-is-unk": lambda: V["zz"] == V.unk_id,
    "Vocab.contains-non-str-is-False": lambda: 5 not in V and ["h"] not in V and "h" in V,
    "encode-str-as-chars": lambda: V.encode("hello") == V.encode(list("hello")),
    "encode-empty-str": lambda: V.encode("") == [] and V.encode("", add_sos=True, add_eos=True) == [2, 3],
    "encode-empty-list": lambda: W.encode([]) == [],
    "encode-one-char-str-word-vocab": lambda: Vocab(["a", "b"]).encode("ab") == [4, 5],
    "encode-numpy-bool-flags": lambda: V.encode(["h"], add_sos=np.bool_(True)) == [2, V["h"]],
    "encode-unknown-is-unk": lambda: V.encode(["z", "h"]) == [1, V["h"]],
    "decode-empty": lambda: V.decode([]) == [] and V.decode(torch.zeros(0, dtype=torch.long)) == [],
    "decode-numpy-array": lambda: V.decode(np.array([4, 5], dtype=np.int32)) == ["l", "e"],
    "decode-uint8-tensor": lambda: V.decode(ids(4, 5, dtype=torch.uint8)) == ["l", "e"],
    "decode-0d-tensor-entries": lambda: V.decode([torch.tensor(4), np.int64(5)]) == ["l", "e"],
    "decode-last-id": lambda: V.decode([len(V) - 1]) == [V.itos[-1]],
    "decode-strip-all-special": lambda: V.decode([0, 2, 3], strip_special=True) == [],
    "tokenize_chars-empty": lambda: vocab.tokenize_chars("") == [],
    "tokenize_words-no-words": lambda: vocab.tokenize_words("42 !!") == [],
    "normalize_text-empty": lambda: vocab.normalize_text("") == "",
    "strip_gutenberg-empty-body": lambda: data.strip_gutenberg(MARKED.replace("body", "")) == "",
    "split_text-empty-text": lambda: data.split_text("", 0.1) == ("", ""),
    "split_text-numpy-frac": lambda: data.split_text("abcd", np.float64(0.25)) == ("abc", "d"),
    "split_text-short-text": lambda: data.split_text("ab", 0.1) == ("a", "b"),
    "load_names-tuple": lambda: {g for _, g in data.load_names(("Dutch",))} == {"Dutch"},
    "make_dates-n-0": lambda: data.make_dates(0) == [],
    "make_dates-numpy-n-and-seed": lambda: data.make_dates(np.int64(3), seed=np.int64(4))
    == data.make_dates(3, 4),
    "make_dates-negative-seed": lambda: len(data.make_dates(2, seed=-1)) == 2,
    "make_dates-one-day": lambda: {t for _, t in data.make_dates(20, start=date(2001, 2, 3),
                                                                  end=date(2001, 2, 3))} == {"2001-02-03"},
    "pad_sequences-all-empty": lambda: _check_pad(bt.pad_sequences([[], []]), [[], []], [0, 0]),
    "pad_sequences-max_len-0-all-empty": lambda: _check_pad(bt.pad_sequences([[], []], max_len=0), [[], []],
                                                             [0, 0]),
    "pad_sequences-numpy-max_len": lambda: _check_pad(bt.pad_sequences([[1, 2, 3]], max_len=np.int64(2)),
                                                      [[1, 2]], [2]),
    "pad_sequences-negative-pad_id": lambda: _check_pad(bt.pad_sequences([[1], [2, 3]], pad_id=-100),
                                                        [[1, -100], [2, 3]], [1, 2]),
    "pad_sequences-int-tensors-and-arrays": lambda: _check_pad(
        bt.pad_sequences([torch.tensor([1], dtype=torch.int32), np.array([2, 3]), (4,)]),
        [[1, 0], [2, 3], [4, 0]], [1, 2, 1]),
    "pad_sequences-2d-tensor": lambda: _check_pad(bt.pad_sequences(torch.tensor([[1, 2], [3, 4]])),
                                                  [[1, 2], [3, 4]], [2, 2]),
    "pad_sequences-longer-max_len": lambda: _check_pad(bt.pad_sequences([[1]], max_len=3), [[1, 0, 0]],
                                                        [1]),
    "lengths_to_mask-empty": lambda: lengths_to_mask(ids()).shape == (0, 0),
    "lengths_to_mask-empty-with-max_len": lambda: lengths_to_mask(ids(), 3).shape == (0, 3),
    "lengths_to_mask-max_len-0": lambda: lengths_to_mask(ids(0, 0), 0).shape == (2, 0),
    "lengths_to_mask-zero-lengths": lambda: lengths_to_mask(ids(0, 0)).shape == (2, 0),
    "lengths_to_mask-length-equal-to-max_len": lambda: lengths_to_mask(ids(3, 1), 3).tolist()
    == [[True] * 3, [True, False, False]],
    "lengths_to_mask-int32-and-numpy-max_len": lambda: lengths_to_mask(ids(2, 1, dtype=torch.int32),
                                                                      np.int64(2)).tolist()
    == [[True, True], [True, False]],
    "lengths_to_mask-meta-with-max_len": lambda: lengths_to_mask(ids(2).to("meta"), 3).shape == (1, 3),
    "lm_chunks-exact-length": lambda: bt.lm_chunks(torch.arange(7), 2, 3)[0].shape == (1, 2, 3),
    "lm_chunks-numpy-sizes": lambda: bt.lm_chunks(torch.arange(7), np.int64(2), np.int64(3))[1].shape
    == (1, 2, 3),
    "lm_chunks-int32-ids": lambda: bt.lm_chunks(torch.arange(7, dtype=torch.int32), 1, 6)[0].dtype
    == torch.int32,
    "context_windows-last-id-of-vocab_size": lambda: bt.context_windows(ids(4, 5, 8), 1,
                                                                         vocab_size=9)[1].tolist() == [5],
    "lm_chunks-vocab_size-numpy": lambda: bt.lm_chunks(torch.arange(7), 2, 3, vocab_size=np.int64(7))[0].shape
    == (1, 2, 3),
    # no vocabulary given, so a large id passes (the model checks it), and pad_sequences takes any int
    "context_windows-large-id": lambda: bt.context_windows(ids(10**6, 1, 2))[1].tolist() == [1],
    "bucket_batches-large-id": lambda: next(bt.bucket_batches(SRC + 10**6, SRC_LENGTHS, TGT, 8))[0].min()
    >= 10**6,
    "pad_sequences-negative-ids-pass": lambda: bt.pad_sequences([[-100, 4]])[0].tolist() == [[-100, 4]],
    "RemoteFile-upper-case-hash": lambda: RemoteFile("a.txt", "u", "AB" * 32).sha256 == "ab" * 32,
    "RemoteFile-list-of-paths": lambda: RemoteFile("a.txt", "u", GOOD_HASH, [Path("/x/a.txt")]).system_paths
    == ("/x/a.txt",),
    "RemoteFile-known-hashes": lambda: RemoteFile("a.txt", "u", GOOD_HASH, (), ("1" * 64,)).known_hashes
    == (GOOD_HASH, "1" * 64),
    "cache_dir-is-a-path": lambda: isinstance(fetch.cache_dir(), Path),
    "errors-are-the-documented-kinds": lambda: issubclass(fetch.DataNotFoundError, FileNotFoundError)
    and issubclass(fetch.DataFileError, ValueError),
}


@pytest.mark.parametrize("case", sorted(LEGAL))
def test_legal_edge_input_gives_the_right_result(case):
    assert LEGAL[case]()
