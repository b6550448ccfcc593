"""Byte-level byte-pair encoding (BPE), trained from scratch and run on GPT-4's ranks.

Byte-pair encoding (Sennrich et al., 2016) builds a subword vocabulary bottom up:
start from the smallest symbols, count every adjacent pair of symbols in the
training text, give the most frequent pair a new symbol of its own, merge it
everywhere, and repeat until the vocabulary has the size asked for. Frequent words
end up as one token, rare words as a few pieces.

GPT-2 (Radford et al., 2019) made the symbols *bytes*: the text is encoded as UTF-8
and the 256 possible byte values are the first 256 tokens. That is why a byte-level
BPE never needs an ``<unk>`` token. Every string is a sequence of bytes, and every
byte, whatever character it is part of (an accented letter, a Chinese character, an
emoji, a control character), is one of the 256 base tokens. So the worst case for an
unseen string is one token per byte, never an unknown token, and
``decode(encode(text)) == text`` holds for every text. A character-level or
word-level vocabulary can only map an unseen symbol to ``<unk>``
(``seqbook.vocab.Vocab``).

Two steps come before the merges:

1. **Pre-tokenisation.** A regular expression cuts the text into pieces (a word
   with its leading space, a run of digits, of punctuation, of whitespace), and
   merges never cross a piece boundary, so no token glues the end of one word to
   the start of the next. ``GPT2_PATTERN`` is GPT-2's expression,
   ``CL100K_PATTERN`` the one of ``cl100k_base`` (GPT-3.5 and GPT-4), which also
   cuts numbers into groups of at most three digits. Both need the ``regex``
   module for the Unicode classes ``\\p{L}`` (letters) and ``\\p{N}`` (numbers).
2. **Counting distinct pieces.** Training counts the pairs inside each *distinct*
   piece once, weighted by how often the piece occurs, and after a merge it
   recounts only the pieces that held the merged pair. The Time Machine (180k
   characters) has about 6k distinct pieces, so two thousand merges take well
   under a second.

**Encoding** follows tiktoken: inside each piece, repeatedly merge the adjacent pair
whose concatenation has the lowest rank in the table (the leftmost such pair on a
tie), until no adjacent pair is in the table; each part's rank is its id
(:func:`merge_piece`). A trained token's rank is the order in which training made
it, so lower ranks merge first, as in training. With the ranks of ``cl100k_base``
(:func:`seqbook.cl100k.cl100k_base`, which finds the rank file) the encoder gives
exactly tiktoken's ids (``tests/models/test_bpe.py`` checks it on the whole novel).

**Text that is not Unicode.** A Python ``str`` may hold a lone surrogate (half of a
UTF-16 pair, e.g. ``"a\ud800b"``), which has no UTF-8 bytes. Every function here that
takes text reads it as tiktoken does: surrogate pairs become the character they
spell, and each lone surrogate becomes U+FFFD, the replacement character
(:func:`well_formed`).

Shape:
    text: a ``str``; ``encode(text)``: a ``list[int]`` of at most
    ``len(text.encode("utf-8"))`` ids; ``decode(ids)``: a ``str``.
"""

from __future__ import annotations

import functools
import heapq
import numbers
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from itertools import pairwise

import numpy as np
import torch

from .checks import INTEGER_DTYPES, check_int, check_str

__all__ = [
    "GPT2_PATTERN",
    "CL100K_PATTERN",
    "ByteBPE",
    "well_formed",
    "pretokenize",
    "merge_piece",
    "train_bpe",
]

# GPT-2's pre-tokeniser (encoder.py of openai/gpt-2): English contractions, a letter
# run with its leading space, a digit run, a punctuation run, and whitespace (the
# last space of a run is left to the word after it).
GPT2_PATTERN = (
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)

# cl100k_base's pre-tokeniser, as tiktoken defines it: case-insensitive contractions,
# a letter run with one leading non-letter, numbers in groups of 1-3 digits,
# punctuation with its trailing newlines, and whitespace. ``?+``, ``++`` and ``*+``
# are possessive (they never backtrack).
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+"""
    r"""| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)

_CACHE_LIMIT = 1 << 16  # pieces an encoder remembers before it clears its cache


# -------------------------------------------------------------------------------------
# Pre-tokenisation.
# -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _compile(pattern: str):
    """The compiled ``regex`` pattern (the ``re`` module has no ``\\p{L}``)."""
    try:
        import regex
    except ImportError:  # pragma: no cover - regex is in requirements.txt
        raise ImportError(
            "seqbook.bpe needs the regex module for \\p{L}: pip install regex"
        ) from None
    try:
        return regex.compile(pattern)
    except regex.error as exc:
        raise ValueError(
            f"pattern must be a valid regular expression, got {pattern!r}: {exc}"
        ) from None


def _check_pattern(pattern) -> str:
    if not isinstance(pattern, str):
        raise TypeError(
            f"pattern must be a str (a regex), got {type(pattern).__name__}"
        )
    if pattern == "":
        raise ValueError("pattern must be a non-empty regular expression, got ''")
    _compile(pattern)
    return pattern


def well_formed(text: str) -> str:
    """``text`` as tiktoken reads it: every character has UTF-8 bytes.

    A ``str`` can hold surrogates, the halves of a UTF-16 pair, which have none. As
    tiktoken's ``encode`` does, a pair of surrogates becomes the one character it
    spells and a lone surrogate becomes U+FFFD (the replacement character), so
    ``"a\ud800b"`` reads ``"a\ufffdb"``. Any other text is returned as it is.

    Shape:
        text: a ``str``; returns a ``str`` that ``.encode("utf-8")`` accepts.
    """
    check_str("text", text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # surrogates: through UTF-16, which joins pairs and replaces lone ones
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def pretokenize(text: str, pattern: str = CL100K_PATTERN) -> list[str]:
    """Cut ``text`` into the pieces that merges never cross: the regex's matches.

    ``GPT2_PATTERN`` and ``CL100K_PATTERN`` match every character, so with either
    ``"".join(pretokenize(text, pattern)) == well_formed(text)`` (the text itself
    unless it holds surrogates, :func:`well_formed`).

    Shape:
        text: a ``str``; returns a ``list[str]`` of pieces, in order.
    """
    text = well_formed(text)
    return _compile(_check_pattern(pattern)).findall(text)


# -------------------------------------------------------------------------------------
# Encoding one piece: tiktoken's algorithm.
# -------------------------------------------------------------------------------------


def merge_piece(piece: bytes, ranks: Mapping[bytes, int]) -> list[int]:
    """The ids of one pre-token, merged as tiktoken merges it. Unchecked.

    A piece that is itself a token is that token. Otherwise the piece starts as
    single bytes and, while some adjacent pair's concatenation is in ``ranks``, the
    pair with the lowest rank (the leftmost on a tie) becomes one part. The ids are
    the ranks of the parts left. Every single byte must be in ``ranks``.

    Shape:
        piece: ``bytes`` of length n >= 1; returns a ``list[int]`` of 1 to n ids.
    """
    if piece in ranks:  # a whole piece in the table is one token
        return [ranks[piece]]
    parts = [piece[i : i + 1] for i in range(len(piece))]  # n single bytes
    while len(parts) > 1:
        best, where = None, -1  # the lowest rank of an adjacent pair, and where
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (best is None or rank < best):
                best, where = rank, i
        if best is None:  # no adjacent pair is a token: done
            break
        parts[where : where + 2] = [parts[where] + parts[where + 1]]  # one part less
    return [ranks[part] for part in parts]


# -------------------------------------------------------------------------------------
# The tokenizer.
# -------------------------------------------------------------------------------------


class ByteBPE:
    """A byte-level BPE tokenizer: a rank table, a pattern, special tokens.

    Build one with :func:`train_bpe` (from a text) or :meth:`from_ranks` (from an
    existing table, such as cl100k_base's: :func:`seqbook.cl100k.cl100k_base`).

    Args:
        ranks: ``bytes -> id``; the 256 single bytes must be in it, and the ids must
            be distinct ints >= 0. A token's id is its rank: lower ranks merge first.
        pattern: the pre-tokenisation regex (``regex`` syntax).
        special_tokens: ``str -> id`` for tokens such as ``"<|endoftext|>"`` that
            merges never make; their ids must not collide with ``ranks``.
        merges: the merges in training order, as ``(left, right)`` byte strings;
            empty for a loaded table (a rank table does not record its pairs).

    Attributes:
        ranks, pattern, special_tokens, merges: as given.
        vocab_size: one more than the largest id (the rows an embedding needs).

    Shape:
        ``encode(text)``: ``str`` -> ``list[int]``; ``decode(ids)``: ids -> ``str``.
    """

    def __init__(
        self,
        ranks: Mapping[bytes, int],
        pattern: str = CL100K_PATTERN,
        special_tokens: Mapping[str, int] | None = None,
        merges: Iterable[tuple[bytes, bytes]] = (),
    ):
        self.ranks = _check_ranks(ranks)
        self.pattern = _check_pattern(pattern)
        self.special_tokens = _check_special(special_tokens, self.ranks)
        self.merges = _check_merges(merges)
        self._bytes: dict[int, bytes] = {i: b for b, i in self.ranks.items()}
        for token, i in self.special_tokens.items():
            self._bytes[i] = token.encode("utf-8")
        self.vocab_size = max(self._bytes) + 1
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_ranks(
        cls,
        ranks: Mapping[bytes, int],
        pattern: str,
        special_tokens: Mapping[str, int] | None = None,
    ) -> ByteBPE:
        """A tokenizer from an existing rank table, e.g. tiktoken's.

        It encodes as tiktoken's ``Encoding(name, pat_str=pattern,
        mergeable_ranks=ranks, special_tokens=special_tokens)`` does.
        """
        return cls(ranks, pattern, special_tokens)

    def __len__(self) -> int:
        """The number of tokens (ranks and special tokens)."""
        return len(self._bytes)

    def __repr__(self) -> str:
        return (f"ByteBPE(tokens={len(self)}, vocab_size={self.vocab_size}, "
                f"special={list(self.special_tokens)})")

    def token_bytes(self, i: int) -> bytes:
        """The bytes of the token with id ``i``."""
        return self._bytes[self._check_id(i, "i")]

    def _encode_ordinary(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in _compile(self.pattern).findall(text):
            piece_ids = self._cache.get(piece)
            if piece_ids is None:  # a piece not met before: merge it, remember it
                if len(self._cache) >= _CACHE_LIMIT:
                    self._cache.clear()
                piece_ids = merge_piece(piece.encode("utf-8"), self.ranks)
                self._cache[piece] = piece_ids
            ids.extend(piece_ids)
        return ids

    def encode(self, text: str, allowed_special: Iterable[str] | str = ()) -> list[int]:
        """The ids of ``text``: pre-tokenise, merge each piece (:func:`merge_piece`).

        Args:
            text: any string (a lone surrogate reads as U+FFFD, as in tiktoken:
                :func:`well_formed`).
            allowed_special: special tokens to recognise in ``text`` (``"all"``: every
                one); each occurrence becomes its id. All other text, the spelling
                of another special token included, is encoded as ordinary text, as
                tiktoken's ``encode(text, allowed_special, disallowed_special=())``.

        Shape:
            text: a ``str``; returns a ``list[int]``.
        """
        text = well_formed(text)
        allowed = self._check_allowed(allowed_special)
        if not allowed:
            return self._encode_ordinary(text)
        # cut at the allowed special tokens (longest first), encode what is between
        longest_first = sorted(allowed, key=len, reverse=True)
        special = _compile("|".join(_escape(t) for t in longest_first))
        ids: list[int] = []
        start = 0
        for match in special.finditer(text):
            ids.extend(self._encode_ordinary(text[start : match.start()]))
            ids.append(self.special_tokens[match.group()])
            start = match.end()
        ids.extend(self._encode_ordinary(text[start:]))
        return ids

    def decode_bytes(self, ids) -> bytes:
        """The bytes of the tokens ``ids``, concatenated.

        Shape:
            ids: a sequence of n ints, or a 1-D integer tensor or array of n ids.
        """
        return b"".join(self._bytes[i] for i in self._check_ids(ids))

    def decode(self, ids, errors: str = "replace") -> str:
        """The text of ``ids``: their bytes decoded as UTF-8.

        Ids that end inside a multi-byte character leave a U+FFFD with the default
        ``errors="replace"``, as in tiktoken; ``errors="strict"`` raises instead.

        Shape:
            ids: a sequence of n ints, or a 1-D integer tensor or array; returns a
            ``str``.
        """
        if not isinstance(errors, str):
            raise TypeError(
                f"errors must be a str such as 'replace', got {type(errors).__name__}"
            )
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def _check_allowed(self, allowed_special) -> set[str]:
        if isinstance(allowed_special, str):
            if allowed_special != "all":
                raise ValueError(
                    "allowed_special must be 'all' or a collection of special tokens, "
                    f"got the str {allowed_special!r}"
                )
            return set(self.special_tokens)
        if not isinstance(allowed_special, Iterable):
            raise TypeError("allowed_special must be 'all' or a collection of str, "
                            f"got {type(allowed_special).__name__}")
        allowed = set()
        for token in allowed_special:
            if token not in self.special_tokens:
                raise ValueError(
                    "allowed_special must hold special tokens of this tokenizer "
                    f"({sorted(self.special_tokens)}), got {token!r}"
                )
            allowed.add(token)
        return allowed

    def _check_id(self, i, name: str, position: int | None = None) -> int:
        at = "" if position is None else f" at position {position}"
        if isinstance(i, (torch.Tensor, np.ndarray)) and i.ndim == 0:
            i = i.item()
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, numbers.Integral):
            raise TypeError(f"{name} must hold ints, got {type(i).__name__} {i!r}{at}")
        if int(i) not in self._bytes:
            raise ValueError(f"{name} must hold ids of this tokenizer (in [0, "
                             f"{self.vocab_size - 1}], not a gap), got {int(i)}{at}")
        return int(i)

    def _check_ids(self, ids) -> list[int]:
        if isinstance(ids, (torch.Tensor, np.ndarray)):
            if ids.ndim != 1:
                raise ValueError(f"ids must be 1-D, got shape {tuple(ids.shape)}")
            if isinstance(ids, torch.Tensor):
                integer = ids.dtype in INTEGER_DTYPES
            else:
                integer = ids.dtype.kind in "iu"
            if not integer:
                raise TypeError(
                    f"ids must be an integer tensor or array, got {ids.dtype}"
                )
            ids = ids.tolist()
        elif isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise TypeError(f"ids must be a sequence of ints, got {type(ids).__name__}")
        return [self._check_id(i, "ids", k) for k, i in enumerate(ids)]


def _escape(token: str) -> str:
    import regex

    return regex.escape(token)


def _check_ranks(ranks) -> dict[bytes, int]:
    if not isinstance(ranks, Mapping):
        raise TypeError(
            f"ranks must be a dict of bytes -> int, got {type(ranks).__name__}"
        )
    out: dict[bytes, int] = {}
    for token, rank in ranks.items():
        if not isinstance(token, bytes) or not token:
            raise TypeError(f"ranks must have non-empty bytes keys, got {token!r}")
        if isinstance(rank, bool) or not isinstance(rank, numbers.Integral):
            raise TypeError(f"ranks must map to ints, got {token!r}: {rank!r}")
        if rank < 0:
            raise ValueError(f"ranks must map to ints >= 0, got {token!r}: {rank!r}")
        out[token] = int(rank)
    missing = [b for b in range(256) if bytes([b]) not in out]
    if missing:
        raise ValueError(
            f"ranks must hold all 256 single bytes, got {256 - len(missing)} "
            f"(missing e.g. {bytes([missing[0]])!r})"
        )
    seen: dict[int, bytes] = {}
    for token, rank in out.items():
        if rank in seen:
            raise ValueError(f"ranks must be distinct, got {rank} for "
                             f"{seen[rank]!r} and {token!r}")
        seen[rank] = token
    return out


def _check_special(special_tokens, ranks: dict[bytes, int]) -> dict[str, int]:
    if special_tokens is None:
        return {}
    if not isinstance(special_tokens, Mapping):
        raise TypeError("special_tokens must be a dict of str -> int, got "
                        f"{type(special_tokens).__name__}")
    used = set(ranks.values())
    out: dict[str, int] = {}
    for token, i in special_tokens.items():
        if not isinstance(token, str) or not token:
            raise TypeError(
                f"special_tokens must have non-empty str keys, got {token!r}"
            )
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) or i < 0:
            raise TypeError(
                f"special_tokens must map to ints >= 0, got {token!r}: {i!r}"
            )
        if int(i) in used:
            raise ValueError("special_tokens must have ids that ranks and the other "
                             f"special tokens do not use, got {token!r}: {i}")
        used.add(int(i))
        out[token] = int(i)
    return out


def _check_merges(merges) -> list[tuple[bytes, bytes]]:
    if isinstance(merges, (str, bytes)) or not isinstance(merges, Iterable):
        raise TypeError(
            f"merges must be a list of (bytes, bytes), got {type(merges).__name__}"
        )
    out = []
    for pair in merges:
        if (not isinstance(pair, tuple) or len(pair) != 2
                or not all(isinstance(p, bytes) for p in pair)):
            raise TypeError(f"merges must hold (bytes, bytes) pairs, got {pair!r}")
        out.append(pair)
    return out


# -------------------------------------------------------------------------------------
# Training.
# -------------------------------------------------------------------------------------


def _merge_word(word: tuple[int, ...], a: int, b: int, new: int) -> tuple[int, ...]:
    """``word`` with each (a, b) replaced by ``new``, left to right, not overlapping."""
    out: list[int] = []
    i, n = 0, len(word)
    while i < n:
        if i + 1 < n and word[i] == a and word[i + 1] == b:
            out.append(new)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def train_bpe(text: str, vocab_size: int, pattern: str = CL100K_PATTERN) -> ByteBPE:
    """Learn a byte-level BPE from ``text`` (Sennrich et al., 2016; bytes as in GPT-2).

    The vocabulary starts as the 256 bytes (id = byte value). Each step finds the
    most frequent adjacent pair of tokens inside the pre-tokens, over the whole text,
    and gives it the next id. For distinct pieces w with frequencies f(w),

        count(a, b) = sum_w f(w) * #{i : w_i = a and w_(i+1) = b}.

    **Ties** go to the pair with the smaller ids, ``(left, right)`` compared as a
    tuple, so a text always gives the same tokenizer. The counts are kept per
    distinct piece, and after a merge only the pieces that held the pair are
    recounted; a heap yields the most frequent pair (stale entries are skipped).

    A pair that spells an existing token (two merge paths to the same bytes, rare)
    is merged into that token, and no id is added. Training stops early when no
    adjacent pair is left (each distinct piece is one token), so the result can have
    fewer than ``vocab_size`` tokens.

    Args:
        text: the training text (a lone surrogate reads as U+FFFD: :func:`well_formed`).
        vocab_size: the number of tokens wanted, the 256 bytes included (>= 256).
        pattern: the pre-tokenisation regex (default ``CL100K_PATTERN``).

    Returns:
        a :class:`ByteBPE`: ``ranks`` (``bytes -> id``: the 256 bytes, then the new
        tokens in the order they were made) and ``merges`` (the pairs in that order).

    Shape:
        text: a ``str``; the tokenizer has at most ``vocab_size`` tokens.
    """
    text = well_formed(text)
    vocab_size = check_int("vocab_size", vocab_size, minimum=256)
    pieces = Counter(pretokenize(text, pattern))  # distinct piece -> frequency
    words = [tuple(p.encode("utf-8")) for p in pieces]  # each a tuple of byte ids
    freqs = list(pieces.values())
    vocab = [bytes([b]) for b in range(256)]  # id -> bytes
    ranks = {token: i for i, token in enumerate(vocab)}  # bytes -> id
    counts: dict[tuple[int, int], int] = defaultdict(int)  # pair -> weighted count
    where: dict[tuple[int, int], set[int]] = defaultdict(set)  # pair -> its words
    for w, word in enumerate(words):
        for pair in pairwise(word):
            counts[pair] += freqs[w]
            where[pair].add(w)
    heap = [(-c, a, b) for (a, b), c in counts.items()]  # most frequent, smallest ids
    heapq.heapify(heap)
    merges: list[tuple[bytes, bytes]] = []
    while len(vocab) < vocab_size and heap:
        neg, a, b = heapq.heappop(heap)
        if counts.get((a, b), 0) != -neg:  # stale: the count changed since the push
            continue
        token = vocab[a] + vocab[b]
        new = ranks.get(token)
        if new is None:  # a new token, with the next id
            new = len(vocab)
            vocab.append(token)
            ranks[token] = new
        merges.append((vocab[a], vocab[b]))
        changed = set()
        for w in where.pop((a, b)):
            word = words[w]
            merged = _merge_word(word, a, b, new)
            if len(merged) == len(word):  # the pair left this word in an earlier merge
                continue
            for pair in pairwise(word):  # the word's old pairs out ...
                counts[pair] -= freqs[w]
                changed.add(pair)
            for pair in pairwise(merged):  # ... and its new pairs in
                counts[pair] += freqs[w]
                where[pair].add(w)
                changed.add(pair)
            words[w] = merged
        for pair in changed:
            if counts[pair] > 0:
                heapq.heappush(heap, (-counts[pair], *pair))
            else:
                del counts[pair]
    return ByteBPE(ranks, pattern, merges=merges)
