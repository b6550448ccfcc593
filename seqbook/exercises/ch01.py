"""Checks of chapter 1's exercises (embeddings, linear layers and byte-level BPE)."""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from itertools import permutations

import torch
import torch.nn.functional as F
from torch import nn

from ..bpe import merge_piece, pretokenize, train_bpe
from .core import (
    CallWatch,
    Wrong,
    agrees,
    call,
    close,
    cut_off,
    exercise,
    expect,
    number,
    number_list,
    numbers_of,
    time_limit,
)

F64 = torch.float64

# A short text to train small tokenizers on inside a check (a check runs in milliseconds).
SAMPLE = (
    "The time traveller turned the lever, and the machine trembled. The others were "
    "watching the machine, then the traveller, then the machine again. There was a "
    "whirling, a rushing, and the room grew faint. When the thing stopped, the "
    "traveller found the machine standing on the grass of a garden, in the rain, in "
    "the year eight hundred and two thousand. The rather pale people there were "
    "gentle and pretty, and they gathered to watch the machine and the stranger. "
    "Together they wandered through the great halls, where there was nothing to "
    "fear; and then, in the evening, the traveller learned otherwise. 1895: 802,701."
)


def _time_limit(seconds: float, what: str):
    """A :class:`Wrong` if ``what`` uses more than ``seconds`` of CPU time on short inputs."""
    return time_limit(seconds, f"{what} had not returned after {seconds:g} s of work on short "
                      "inputs: does its loop always end?")


# ---------------------------------------------------------------------------------------------
# An embedding as a linear layer.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch1-linear-embedding", hints=[
    "A linear layer without bias maps a one-hot vector e_i to e_i A^T, which is row i of A^T. "
    "Which matrix must A^T be?",
    "nn.Linear(V, d, bias=False) stores its weight with shape (d, V), one row per output; "
    "nn.Embedding(V, d) stores (V, d), one row per token. Copy the transposed table, inside "
    "torch.no_grad().",
])
def check_linear_embedding(embedding_as_linear):
    V, d = 12, 5  # V != d, so a table that is not transposed cannot fit
    g = torch.Generator().manual_seed(0)
    emb = nn.Embedding(V, d).double()
    with torch.no_grad():
        emb.weight.copy_(torch.randn(V, d, generator=g, dtype=F64))
    table = emb.weight.detach().clone()
    lin = call(embedding_as_linear, emb, what="embedding_as_linear")
    expect(isinstance(lin, nn.Linear),
           f"embedding_as_linear must return an nn.Linear, got {type(lin).__name__}")
    expect(torch.equal(emb.weight.detach(), table),
           "embedding_as_linear changed the embedding's table: copy it, do not modify it")
    if (lin.in_features, lin.out_features) == (d, V):
        raise Wrong("the layer maps d features to V: it must read one-hot vectors of length V "
                    "(in_features = V) and give vectors of size d")
    expect((lin.in_features, lin.out_features) == (V, d),
           f"the layer must map V = {V} features (a one-hot vector) to d = {d}, got "
           f"nn.Linear({lin.in_features}, {lin.out_features})")
    expect(tuple(lin.weight.shape) == (d, V),
           f"the layer's weight must have nn.Linear's shape (d, V) = {(d, V)}, got "
           f"{tuple(lin.weight.shape)}: copy the table transposed")
    if lin.weight.untyped_storage().data_ptr() == emb.weight.untyped_storage().data_ptr():
        raise Wrong("the layer's weight shares the embedding's storage (a view such as "
                    "nn.Parameter(emb.weight.T)): the two layers are tied, and training one "
                    "moves the other; give the layer a copy of the table (transposed)")
    if not lin.weight.requires_grad:
        raise Wrong("the layer's weight does not require gradients (requires_grad=False): a "
                    "layer of its own must be trainable, as nn.Linear's weight is; copy the "
                    "table into a trainable nn.Parameter")
    if lin.bias is not None:
        raise Wrong("the layer has a bias: a lookup adds nothing to the row it copies "
                    "(bias=False; even a zero bias is a parameter that training would move)")
    if lin.weight.dtype in (torch.float16, torch.bfloat16):
        raise Wrong(f"the layer holds {str(lin.weight.dtype).removeprefix('torch.')}, which rounds "
                    "the table's numbers to about three significant digits: a lookup copies its "
                    "rows exactly, so keep at least float32 (the embedding's own dtype is best)")
    emb32 = nn.Embedding(V, d)  # float32, as a learner's is: .float() of it is a view
    lin32 = call(embedding_as_linear, emb32, what="embedding_as_linear")
    if (isinstance(lin32, nn.Linear) and lin32.weight.untyped_storage().data_ptr()
            == emb32.weight.untyped_storage().data_ptr()):
        raise Wrong("for a float32 embedding the layer's weight shares the embedding's storage "
                    "(a view such as nn.Parameter(emb.weight.T.float())): the two layers are "
                    "tied, and training one moves the other; give the layer a copy of the table")
    ids = torch.arange(V)  # every row of the table
    one_hot = F.one_hot(ids, V).to(lin.weight.dtype)
    with torch.no_grad():
        out = call(lin, one_hot, what="the returned layer")
    expect(close(out, emb(ids).detach(), n=V),
           "on one-hot vectors the layer does not give the embedding's rows: copy the whole "
           "table into the layer's weight (transposed)")
    other = nn.Embedding(7, 3).double()  # other sizes than the solution's demo
    lin = call(embedding_as_linear, other, what="embedding_as_linear")
    expect(isinstance(lin, nn.Linear) and (lin.in_features, lin.out_features) == (7, 3),
           "for an nn.Embedding(7, 3) the layer must be an nn.Linear(7, 3): take V and d from "
           "the embedding, not fixed numbers")
    with torch.no_grad():
        out = call(lin, F.one_hot(torch.arange(7), 7).to(lin.weight.dtype),
                   what="the returned layer")
    expect(close(out, other.weight.detach(), n=7),
           "for an nn.Embedding(7, 3) the layer does not give the embedding's rows")


# ---------------------------------------------------------------------------------------------
# The cost of a one-hot embedding.
# ---------------------------------------------------------------------------------------------

COST = {"V": 50_257, "d": 768, "B": 8, "T": 1024}


@exercise("ex-ch1-cost", hints=[
    "The one-hot batch has one vector of V numbers for each of the B x T tokens.",
    "A float32 takes 4 bytes. Multiplying a (B T, V) matrix by a (V, d) matrix costs one "
    "multiply-add for every entry of the (B T, d) result times every term of its sum.",
    "The lookup copies one row of d numbers per token.",
])
def check_cost(answer):
    def agrees4(value, right):  # to 4 significant digits, as the exercise asks
        return agrees(value, right, 4)

    V, d, B, T = COST["V"], COST["d"], COST["B"], COST["T"]
    memory, macs, copies = number_list(
        answer, ("the memory", "the number of multiply-adds", "the number of copies"),
        "three numbers: (bytes of the one-hot batch, multiply-adds of the product, numbers the "
        "lookup copies)")
    rights, given = (B * T * V * 4, B * T * V * d, B * T * d), (memory, macs, copies)
    if any(all(agrees(given[i], r) for i, r in zip(order, rights, strict=True))
           for order in permutations(range(3)) if order != (0, 1, 2)):
        raise Wrong("these are the three right numbers in another order: give them as (bytes "
                    "of the one-hot batch, multiply-adds of the product, numbers the lookup "
                    "copies)")
    # GPT-2's merges alone (50,000), or its table padded (50,304): a near miss in the fourth
    # digit can be another V, not a rounding slip
    for other in (50_000, 50_256, 50_258, 50_304):
        if other != V and all(agrees4(value, per_token * other) and not agrees4(value, per_token * V)
                              for value, per_token in ((memory, B * T * 4), (macs, B * T * d))):
            raise Wrong(f"the memory and the multiply-adds are those of a vocabulary of "
                        f"{other:,} tokens: the exercise's V is {V:,} (the merges, the 256 "
                        "bytes and the end-of-text token)")
    # exact (to 4 digits it is the right count), and not a vocabulary of V - 1 everywhere
    if float(macs) == B * T * (V - 1) * d and float(memory) != B * T * (V - 1) * 4:
        raise Wrong("the multiply-adds count V - 1 multiply-adds per dot product (its "
                    "additions): a dot product of length V is V multiply-adds (the first adds to "
                    "zero)")
    # an exact count with another vocabulary (50,256 or 50,304, say) can agree to three or
    # four digits; only an exact count shows which V it used
    for value, per_token, what in ((memory, B * T * 4, "the memory"),
                                   (macs, B * T * d, "the number of multiply-adds")):
        v = float(value)
        if (agrees(v, per_token * V) and v.is_integer() and int(v) % per_token == 0
                and int(v) // per_token != V):
            raise Wrong(f"{what} is the exact count for a vocabulary of "
                        f"{int(v) // per_token:,} tokens: the exercise's V is {V:,}")
    for value, right, what in ((memory, B * T * V * 4, "the memory"),
                               (macs, B * T * V * d, "the number of multiply-adds"),
                               (copies, B * T * d, "the number of copies")):
        if not agrees4(value, right) and agrees(value, right, 2):
            if cut_off(value, right, 4):
                raise Wrong(f"{what} is close, but not right to four significant digits: round "
                            "to the nearest rather than cut off")
            if any(float(value) == float(f"{right:.{k}g}") for k in (1, 2, 3)):
                raise Wrong(f"{what} is right to the significant digits it has, but it has at "
                            "most three: give (at least) four")
            raise Wrong(f"{what} is close, but not right: check the sizes it uses, "
                        f"V = {V:,}, d = {d}, B = {B} and T = {T:,}")
    if agrees(memory, B * T * V):
        raise Wrong("the memory counts numbers, not bytes: a float32 takes 4 bytes")
    if agrees(memory, B * T * V * 8):
        raise Wrong("the memory counts 8 bytes a number (int64, the dtype of F.one_hot, or "
                    "float64): the one-hot batch holds 32-bit floats, 4 bytes each")
    if agrees(memory, B * T * V * 4 / 1e9) or agrees(memory, B * T * V * 4 / 2**30):
        raise Wrong("give the memory in bytes, not in gigabytes")
    if agrees(memory, B * T * V * 4 / 1e6) or agrees(memory, B * T * V * 4 / 2**20):
        raise Wrong("give the memory in bytes, not in megabytes")
    expect(agrees4(memory, B * T * V * 4),
           "the memory of the one-hot batch is wrong: count its numbers, then the bytes of "
           "each")
    if agrees(macs, B * T * V):
        raise Wrong("the product's cost misses a factor: each one-hot row meets all d "
                    "columns of the table")
    if agrees(macs, V * d):
        raise Wrong("the product's cost is that of one token: there are B x T of them")
    if agrees(macs, 2 * B * T * V * d):
        raise Wrong("that counts floating-point operations, a multiply and an add each: the "
                    "exercise asks for multiply-adds, half as many")
    expect(agrees4(macs, B * T * V * d), "the number of multiply-adds is wrong: a (B T, V) "
           "matrix times a (V, d) matrix")
    if agrees(copies, B * T):
        raise Wrong("the lookup copies rows of d numbers: count numbers, not rows")
    if agrees(copies, 4 * B * T * d):
        raise Wrong("that counts the bytes the lookup copies: the exercise asks for numbers")
    if agrees(copies, V * d):
        raise Wrong("the lookup copies only the rows of the tokens in the batch, not the whole "
                    "table")
    expect(agrees4(copies, B * T * d), "the number of copied numbers is wrong: one row per "
           "token")


# ---------------------------------------------------------------------------------------------
# Patches of several sizes.
# ---------------------------------------------------------------------------------------------

PATCH = {"side": 8, "embed_dim": 32, "patches": (1, 2, 4, 8)}


@exercise("ex-ch1-patch-size", hints=[
    "An 8 x 8 image cut into p x p squares gives 8 / p squares along each side.",
    "Each token summarises the p * p pixels of its square. The projection is an nn.Linear "
    "from p * p numbers to 32: count its weight and its bias.",
])
def check_patch_size(answer):
    side, dim, sizes = PATCH["side"], PATCH["embed_dim"], PATCH["patches"]
    expect(isinstance(answer, dict), "answer must be a dict {patch side: (tokens, pixels per "
           f"token, parameters)}}, got {type(answer).__name__}")
    keys = set(answer) - {3}  # side 3 may be there too: the exercise asks about it
    expect(keys == set(sizes), f"answer must have the patch sides {sizes} as keys, got "
           f"{sorted(answer, key=str)!r}")
    if numbers_of(answer.get(3), 3) is not None:
        raise Wrong("patch 3: 3 does not divide 8, so no grid of 3 x 3 squares tiles the image; "
                    "there is no triple to give for side 3")
    for p in sizes:
        row = numbers_of(answer[p], 3)
        expect(row is not None,
               f"answer[{p}] must be three numbers (tokens, pixels per token, parameters)")
        tokens, pixels, params = (number(v, f"answer[{p}]") for v in row)
        n, area = (side // p) ** 2, p * p
        if tokens == side // p and p < side:
            raise Wrong(f"patch {p}: the tokens count one side of the image only: the squares "
                        "form a grid in both directions")
        expect(tokens == n, f"patch {p}: the number of tokens is wrong: how many p x p squares "
               "tile an 8 x 8 image?")
        if pixels == p and p > 1:
            raise Wrong(f"patch {p}: a token summarises a square of pixels, not a row of p")
        expect(pixels == area, f"patch {p}: the pixels per token are wrong")
        if params == area * dim:
            raise Wrong(f"patch {p}: the parameters miss the bias of the projection")
        if params == area * dim + area:
            raise Wrong(f"patch {p}: the bias has one entry per output, not per pixel")
        if params == n * (area * dim + dim) and n > 1:
            raise Wrong(f"patch {p}: the parameters count one projection per patch: a single "
                        "projection is shared by all the patches, as an embedding table is by "
                        "all the tokens")
        expect(params == area * dim + dim, f"patch {p}: the number of parameters is wrong: "
               "a linear map from the pixels of a patch to 32 numbers")


# ---------------------------------------------------------------------------------------------
# Find the bug: BPE merges applied in the wrong order.
# ---------------------------------------------------------------------------------------------


def _by_rank(piece: bytes, merges, rightmost: bool = False, rank=None) -> list[bytes]:
    """Sennrich et al.'s encoder: the earliest learned pair first (the leftmost of equal pairs,
    as training merged them; the rightmost is a slip), until none applies. ``rank``: another
    order of the merges, a number for each (equal numbers tie, settled by position)."""
    rank = rank or {pair: r for r, pair in enumerate(merges)}
    parts = [piece[i : i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        r, i = min((rank.get(pair, math.inf), -i if rightmost else i) for i, pair in enumerate(
            zip(parts, parts[1:], strict=False)))
        if r == math.inf:
            break
        i = abs(i)
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    return parts


def _left_to_right(piece: bytes, merges) -> list[bytes]:
    """The starter's encoder: merge any known pair where it is found, left to right."""
    known = set(merges)
    parts = [piece[i : i + 1] for i in range(len(piece))]
    i = 0
    while i < len(parts) - 1:
        if (parts[i], parts[i + 1]) in known:
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
            i = max(i - 1, 0)
        else:
            i += 1
    return parts


def _longest_match(piece: bytes, merges) -> list[bytes]:
    """Not BPE: from the left, cut off the longest known token each time."""
    tokens = {a + b for a, b in merges}
    parts, i = [], 0
    while i < len(piece):
        j = max(j for j in range(i + 1, len(piece) + 1) if j == i + 1 or piece[i:j] in tokens)
        parts.append(piece[i:j])
        i = j
    return parts


TINY = ((b"e", b"r"), (b"h", b"e"), (b"t", b"h"), (b"th", b"er"))
MADE = ((b"a", b"b"), (b"ab", b"c"), (b"c", b"d"))
LONGER = ((b"a", b"b"), (b"x", b"y"), (b"ab", b"xy"), (b"xy", b"d"))  # abxy before xyd


def _by_length(piece: bytes, merges, leftmost: bool = False) -> list[bytes]:
    """A slip: the pair that makes the shortest token goes first, as if shorter tokens were
    always learned before longer ones; ties by the order learned or (``leftmost``) by position."""
    by_length = {(a, b): len(a + b) * len(merges) + (0 if leftmost else r)
                 for r, (a, b) in enumerate(merges)}  # the token's length first, then r
    return _by_rank(piece, merges, rank=by_length)


def _in_rounds(piece: bytes, merges) -> list[bytes]:
    """A slip: each round merges every pair present at its start, in rank order, then looks
    again; a pair made within the round waits, though it may outrank the pairs still to come."""
    rank = {pair: r for r, pair in enumerate(merges)}
    parts = [piece[i : i + 1] for i in range(len(piece))]
    while True:
        present = sorted({rank[p] for p in zip(parts, parts[1:], strict=False) if p in rank})
        if not present:
            return parts
        for r in present:
            parts = list(_merge(tuple(parts), merges[r]))  # every occurrence, left to right


@lru_cache(maxsize=1)
def _bug_cases() -> tuple:
    """(piece, merges, right answers) for hand-made tables and a trained one; tuples of bytes,
    which the learner's code (given copies) cannot change."""
    runs = ((b"a", b"a"), (b"aa", b"a"))  # the same pair twice in a row: a tie
    cases = [(p, TINY) for p in (b"her", b"ther", b"the", b"other")]
    cases += [(p, runs) for p in (b"aaa", b"aaaaa", b"baaab")]
    cases += [(b"abcd", MADE)]  # (ab, c), made by the first merge, outranks (c, d)
    cases += [(b"abxyd", LONGER)]  # (ab, xy), the longer token, was learned before (xy, d)
    tok = train_bpe(SAMPLE, 256 + 60)
    merges = tuple(tok.merges)
    pieces = sorted(set(pretokenize(SAMPLE))) + [" weather", " theory", " gathered", " 🙂"]
    cases += [(p.encode("utf-8"), merges) for p in pieces]
    out = []
    for piece, table in cases:
        answers = [_by_rank(piece, table)]
        if table is merges:  # tiktoken's rule: the rank of the concatenation
            answers.append([tok.token_bytes(i) for i in merge_piece(piece, tok.ranks)])
        out.append((piece, table, tuple(tuple(a) for a in answers)))
    return tuple(out)


@exercise("ex-ch1-bpe-bug", hints=[
    "Encode b'her' by hand with the merges [(b'e', b'r'), (b'h', b'e')], once as training "
    "would and once as the function does.",
    "Training made (e, r) before (h, e), so in every piece it merged e and r first, wherever "
    "they stand. The function merges the first known pair it meets, left to right.",
    "Loop: among the adjacent pairs of the parts, find the one learned earliest (lowest index "
    "in merges); merge it; stop when no adjacent pair is a merge.",
])
def check_bpe_bug(encode_piece):
    mismatched = []  # (piece, merges, the learner's parts)
    cases = _bug_cases()  # built (and cached) outside the time limit: only encode_piece is timed
    with _time_limit(0.25, "encode_piece"):
        for piece, merges, answers in cases:
            out = call(encode_piece, piece, list(merges), what="encode_piece")
            expect(isinstance(out, (list, tuple)),
                   f"encode_piece must return a list of bytes objects, got {type(out).__name__}")
            other = next((p for p in out if not isinstance(p, bytes)), None)
            expect(other is None, "encode_piece must return a list of bytes objects, got a "
                   f"{type(out).__name__} holding {type(other).__name__} objects")
            expect(b"".join(out) == piece, f"the parts of {piece!r} do not spell it again: "
                   "every byte must end up in exactly one part")
            if tuple(out) not in answers:
                mismatched.append((piece, merges, list(out)))
    if not mismatched:
        return

    def every(encoder) -> bool:
        return all(out == encoder(piece, merges) for piece, merges, out in mismatched)

    if every(_in_rounds):
        raise Wrong("each round merges the pairs that were there at its start, in the order "
                    f"learned, but a merge can make a pair learned earlier than the rest: with "
                    f"the merges {list(MADE)}, b'abcd' comes out as [b'ab', b'cd'] instead of "
                    "[b'abc', b'd']; after every merge, look again for the earliest learned pair")
    if every(_by_length) or every(lambda piece, merges: _by_length(piece, merges, leftmost=True)):
        raise Wrong("the pair that makes the shortest token is merged first, but training "
                    "did not learn the short tokens first: with the merges "
                    f"{list(LONGER)}, b'abxyd' comes out as [b'ab', b'xyd'] instead of "
                    "[b'abxy', b'd']; merge the pair learned earliest, whatever its length")
    if every(lambda piece, merges: _by_rank(piece, merges, rightmost=True)):
        piece, _, out = next((m for m in mismatched if m[0] == b"aaa"), mismatched[0])
        raise Wrong(f"of two equal pairs the right one is merged first ({piece!r} comes out "
                    f"as {out}), but training merged a run of equal pairs from the left")
    latest = every(lambda piece, merges: _by_rank(piece, merges[::-1])) or every(
        lambda piece, merges: _by_rank(piece, merges[::-1], rightmost=True))
    longest = every(_longest_match)
    if latest and longest:
        raise Wrong("later merges win over earlier ones (as when the latest merges are applied "
                    "first, or the longest known token is cut off first): training applied the "
                    "earliest merge first")
    if longest:
        raise Wrong("each step cuts off the longest known token from the left, a greedy longest "
                    "match, which is not BPE: training applied its merges in the order it "
                    "learned them, the earliest first")
    if latest:
        raise Wrong("the latest merges are applied first: training applied the earliest "
                    "merge first")
    # the starter's slip: a symptom only (the fix is for the hints)
    piece, merges, out = mismatched[0]
    shown = f"with the merges {list(merges)}, " if len(merges) < 8 else ""
    verb = "is" if len(mismatched) == 1 else "are"
    raise Wrong(f"{len(mismatched)} of the {len(cases)} pieces {verb} split differently from "
                f"how training split them; {shown}{piece!r} comes out as {out}")


# ---------------------------------------------------------------------------------------------
# Learn BPE merges.
# ---------------------------------------------------------------------------------------------


def _merge(word: tuple[bytes, ...], pair: tuple[bytes, bytes]) -> tuple[bytes, ...]:
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def _replays(merges, words: Counter, weighted: bool = True, overlap: bool = True) -> bool:
    """Whether each merge is a most frequent pair of ``words`` at its step (ties either way);
    ``weighted=False`` counts each distinct word once, ``overlap=False`` a run of equal pairs
    without its overlaps."""
    for pair in merges:
        counts = _pair_counts(words, weighted, overlap)
        if not counts or counts[pair] != max(counts.values()):
            return False
        words = Counter({_merge(w, pair): f for w, f in words.items()})
    return True


def _pair_counts(words: dict, weighted: bool = True, overlap: bool = True) -> Counter:
    """Eq. (1.2)'s counts; ``overlap=False`` counts a run such as "aaa" as str.count does
    (once), a slip."""
    counts: Counter = Counter()
    for word, f in words.items():
        i = 0
        while i < len(word) - 1:
            pair = (word[i], word[i + 1])
            counts[pair] += f if weighted else 1
            run = pair[0] == pair[1] and i + 2 < len(word) and word[i + 2] == pair[1]
            i += 2 if run and not overlap else 1
    return counts


# "ab ab" has 2 merges only; the first merge of "ééé ééé ééé" joins the two bytes of "é"
_OVERLAP = ("a run such as 'aaaaa' holds the pair (a, a) four times: eq. (1.2) counts every "
            "position where a follows a, overlapping pairs and repeats in a piece included")
BPE_MERGES = {"num_merges": 40, "short": ("ab ab", 5), "bytes": "ééé ééé ééé",
              "twice": "abab abab abab", "run": "aaa aaa", "overlap": "aaaaa bc bc bc",
              "punctuation": "x. x. x. x.", "newline": "a\nb a\nb a\nb", "digits": "x 1 x 1 x 1"}


#: the chapter's own BPE trainer, which the learner's loop may not call
CHAPTER_TRAINER = {"seqbook.bpe.train_bpe": train_bpe}


@lru_cache(maxsize=4)
def _trained_merges(text: str, n: int) -> tuple:
    return tuple(train_bpe(text, 256 + n).merges)


@exercise("ex-ch1-bpe-merges", hints=[
    "Keep the distinct pieces of pretokenize(text) with how often each occurs, each spelled "
    "as a tuple of single bytes: bytes([b]) for every byte b of piece.encode('utf-8').",
    "One step: count every adjacent pair inside every piece, weighted by the piece's "
    "frequency; take the most frequent pair; replace it everywhere by the concatenation of "
    "its two parts.",
    "Count again after every merge: the counts change where the merged pair stood. Never "
    "count a pair across two pieces.",
])
def check_bpe_merges(learn_merges):
    n = BPE_MERGES["num_merges"]
    with _time_limit(0.5, "learn_merges"), CallWatch(CHAPTER_TRAINER) as watch:
        out = call(learn_merges, SAMPLE, n, what="learn_merges")
    expect(not watch.used, "learn_merges calls seqbook.bpe.train_bpe, the chapter's trainer: "
           "the exercise asks for its loop, written by you (pretokenize is yours to use)")
    expect(isinstance(out, (list, tuple)), "learn_merges must return a list of (left, right) "
           f"pairs, got {type(out).__name__}")
    expect(len(out) == n, f"learn_merges(text, {n}) must return {n} merges, got {len(out)}")
    for k, pair in enumerate(out):
        if isinstance(pair, (list, tuple)) and len(pair) == 2 \
                and all(isinstance(p, int) for p in pair):
            raise Wrong("the merges are pairs of ids: give each as its bytes, such as "
                        "(b't', b'h')")
        expect(isinstance(pair, (list, tuple)) and len(pair) == 2
               and all(isinstance(p, bytes) and p for p in pair),
               f"merge {k} must be a pair of non-empty bytes objects, got {pair!r}")
    out = [tuple(pair) for pair in out]
    if out == list(_trained_merges(SAMPLE, n)):
        _check_early_stop(learn_merges)
        return
    # replay: each merge must be a most frequent pair of the pieces at that step
    # (ties may go either way)
    words = Counter(tuple(bytes([b]) for b in p.encode("utf-8")) for p in pretokenize(SAMPLE))
    start = Counter(words)
    joined = {tuple(bytes([b]) for b in SAMPLE.encode("utf-8")): 1}
    static = _pair_counts(words)
    for k, pair in enumerate(out):
        counts = _pair_counts(words)
        best = max(counts.values())
        if counts[pair] == best:
            words = Counter({_merge(w, pair): f for w, f in words.items()})
            joined = {_merge(w, pair): f for w, f in joined.items()}
            continue
        if _replays(out, Counter(tuple(bytes([b]) for b in w.encode("utf-8"))
                                 for w in SAMPLE.split())):
            raise Wrong("no merge joins a space to a word, as when the text is cut into words "
                        "without their spaces (by text.split() or a regular expression, say): "
                        "the pieces of pretokenize(text) keep the space in front of a word, and "
                        "its pairs count too")
        across = _pair_counts(joined)
        if across[pair] == max(across.values()) or (counts[pair] == 0 and across[pair]):
            raise Wrong(f"merge {k} joins bytes of two different pieces: count pairs inside "
                        "the pieces of pretokenize(text) only, never across them")
        if k and static[pair] == max(static[p] for p in static if p not in out[:k]):
            raise Wrong(f"merge {k} is chosen from the counts of the text before any merge: "
                        "count the pairs again after every merge")
        expect(counts[pair], f"merge {k} is a pair that no piece holds at that step: apply "
               "every merge to every piece before counting again")
        if _replays(out, start, overlap=False):
            raise Wrong(_OVERLAP)
        if _replays(out, start, weighted=False):
            raise Wrong(f"merge {k} is the most frequent pair among the distinct pieces, "
                        "each counted once: weight each piece's pairs by how often the piece "
                        "occurs in the text")
        raise Wrong(f"merge {k} is not a most frequent pair of the pieces at that step")
    _check_early_stop(learn_merges)


def _check_early_stop(learn_merges) -> None:
    """Eight small texts: one cut by the pre-tokenizer between a word and its full stop (a cut
    that glues them merges (x, .)), two that only this pre-tokenizer cuts as it does (a line
    break apart from the next word, a number without its leading space), one whose first merge
    joins the two bytes of "é" (characters would merge "é" with "é"), one whose second merge
    occurs twice in a piece (a merge of the first occurrence only leaves the second), one with a
    run of three equal bytes (merged from the right, "aaa" leaves (a, aa)), one in which only
    overlapping counts make (a, a) the most frequent pair, and one that runs out of pairs before
    num_merges (the merges so far, then stop)."""
    def merges(text, n):  # the learner's first n merges of text, as a list of pairs
        with _time_limit(0.5, "learn_merges"):
            out = call(learn_merges, text, n, what=f"learn_merges({text!r}, {n})")
        return [tuple(p) for p in out] if isinstance(out, (list, tuple)) else out

    text = BPE_MERGES["punctuation"]
    expect(merges(text, 1) == [(b" ", b"x")],
           f"learn_merges({text!r}, 1) must return [(b' ', b'x')]: pretokenize cuts the text "
           "into 'x', '.', ' x', '.', ...; punctuation is a piece of its own, so no merge joins "
           "a word to the full stop after it (cut the text with pretokenize(text))")
    for key, cut in (("newline", "a line break is a piece of its own, apart from the word "
                                 "after it"),
                     ("digits", "a number takes no leading space, so the space before it is a "
                                "piece of its own")):
        text = BPE_MERGES[key]
        right = list(_trained_merges(text, 1))
        expect(merges(text, 1) == right,
               f"learn_merges({text!r}, 1) must return {right}: cut the text with "
               f"pretokenize(text), in which {cut} (another pattern cuts it otherwise)")
    text = BPE_MERGES["overlap"]
    expect(merges(text, 1) == [(b"a", b"a")],
           f"learn_merges({text!r}, 1) must return [(b'a', b'a')]: {_OVERLAP}, which makes "
           "four, more than the three (b, c)")
    text = BPE_MERGES["bytes"]
    expect(merges(text, 1) == [(b"\xc3", b"\xa9")],
           f"learn_merges({text!r}, 1) must return [(b'\\xc3', b'\\xa9')]: in UTF-8 'é' is "
           "two bytes, and merges start from bytes, not characters (work on "
           "piece.encode('utf-8'))")
    text = BPE_MERGES["twice"]
    expect(merges(text, 2) == list(_trained_merges(text, 2)),
           f"learn_merges({text!r}, 2) does not join the two b'ab' of a piece in its second "
           "merge: a merge replaces every occurrence of its pair in a piece, not only the first")
    text = BPE_MERGES["run"]
    right = list(_trained_merges(text, 2))  # [(b'a', b'a'), (b'aa', b'a')]
    expect(merges(text, 2) == right,
           f"learn_merges({text!r}, 2) must return {right}: in a run of equal bytes, 'aaa', a "
           "merge joins the pairs from the left, as a scan of the piece from its start finds "
           "them, which leaves (b'aa', b'a')")
    text, n = BPE_MERGES["short"]
    right = list(_trained_merges(text, n))
    out = merges(text, n)
    if isinstance(out, list) and len(out) < len(right) and out == right[:len(out)]:
        raise Wrong(f"learn_merges({text!r}, {n}) stops after {len(out)} merge(s), while a pair "
                    "is still left (a pair that occurs once is still the most frequent one): stop "
                    "only once every pre-token is one token")
    expect(out == right, f"learn_merges({text!r}, {n}) must stop once every pre-token is one "
           "token, and return the merges learned so far")


# ---------------------------------------------------------------------------------------------
# WordPiece's encoder, greedy longest match first, written by the learner.
# ---------------------------------------------------------------------------------------------

#: a vocabulary in which the check's words test each part of the rule: the longest match, the
#: "##" of a continuation, a whole word lost, and a spelling that only backtracking would find
WP_VOCAB = frozenset({
    "[UNK]", "a", "ab", "abc", "b", "play", "walk", "##a", "##b", "##c", "##d", "##bc", "##bz",
    "##ing", "##ed", "##s", "##play", "##er", "##abc", "x", "##x",
})
#: word -> its pieces by BERT's rule (the tests check them against Hugging Face's tokenizers)
WP_WORDS = {
    "abc": ["abc"],  # the whole word is in the vocabulary
    "abcd": ["abc", "##d"],  # the longest prefix, then a continuation
    "abbc": ["ab", "##bc"],  # "ab", then the longest continuation "##bc", not "##b"
    "playing": ["play", "##ing"],
    "playplay": ["play", "##play"],  # a continuation takes "##play", not "play"
    "walked": ["walk", "##ed"],
    "player": ["play", "##er"],
    "abcabc": ["abc", "##abc"],
    "walkz": ["[UNK]"],  # no piece for "z": the whole word, not "walk" and "[UNK]"
    "abz": ["[UNK]"],  # "ab" then no "##z": greedy gives up, though "a" + "##bz" would spell it
    "abcx": ["abc", "##x"],
    "ba": ["b", "##a"],
    "x": ["x"],
    "xab": ["x", "##a", "##b"],  # "##ab" is no piece: "##a" then "##b"
    "baa": ["b", "##a", "##a"],  # a piece may come twice
    "abccc": ["abc", "##c", "##c"],
    "xabb": ["x", "##a", "##b", "##b"],
    "Ab": ["[UNK]"],  # no "A": the rule does not change the case
    "playwalk": ["[UNK]"],  # no "##walk": the bare "walk" does not continue a word
    "ing": ["[UNK]"],  # only "##ing": a '##' piece never starts a word
}


def _wordpiece(word: str, vocab, longest: bool = True, marker: str = "##",
               whole_unknown: bool = True, bare_fallback: bool = False) -> list[str]:
    """BERT's rule, with optional slips: the shortest match first, no continuation marker, the
    pieces found before an unknown one kept, or a bare entry where no '##' piece matches."""
    pieces, start = [], 0
    while start < len(word):
        prefix = marker if start else ""
        ends = range(len(word), start, -1) if longest else range(start + 1, len(word) + 1)
        end = next((e for e in ends if prefix + word[start:e] in vocab), None)
        if end is None and start and bare_fallback:
            end = next((e for e in ends if word[start:e] in vocab), None)
            prefix = ""
        if end is None:
            return ["[UNK]"] if whole_unknown else [*pieces, "[UNK]"]
        pieces.append(prefix + word[start:end])
        start = end
    return pieces


def _spellings(word: str, vocab, first: bool = True):
    """Every way to spell ``word`` with the vocabulary (a search that backtracks)."""
    if not word:
        yield []
        return
    prefix = "" if first else "##"
    for end in range(len(word), 0, -1):
        if prefix + word[:end] in vocab:
            for rest in _spellings(word[end:], vocab, first=False):
                yield [prefix + word[:end], *rest]


@exercise("ex-ch1-wordpiece", hints=[
    "Keep a position in the word. At each position try the longest piece first, from there to "
    "the end of the word, and shorten it until it is in the vocabulary; after the first piece, "
    "look it up with '##' in front.",
    "If no piece that starts at the position is in the vocabulary, not even one character, "
    "return ['[UNK]'] for the whole word, not the pieces found before it.",
])
def check_wordpiece(wordpiece_encode):
    wrong = {}  # word -> the learner's pieces, where they differ from BERT's
    vocab = set(WP_VOCAB)  # one set for every word, as a reader would pass it
    with _time_limit(0.25, "wordpiece_encode"):
        for word, right in WP_WORDS.items():
            out = call(wordpiece_encode, word, vocab, what="wordpiece_encode")
            expect(isinstance(out, (list, tuple)) and all(isinstance(p, str) for p in out),
                   f"wordpiece_encode must return a list of str, got {out!r:.60}")
            if list(out) != right:
                wrong[word] = list(out)
    expect(vocab == WP_VOCAB, "wordpiece_encode changed the vocabulary it was given: look "
           "pieces up, never remove or add them (a piece may come more than once in a word)")
    if not wrong:
        return

    def every(encoder) -> bool:
        return all(out == encoder(word) for word, out in wrong.items())

    if every(lambda w: _wordpiece(w.lower(), WP_VOCAB)):
        raise Wrong("the word is lower-cased first: WordPiece looks pieces up as written and does "
                    "not change case (lower-casing is an uncased model's normaliser, before "
                    "WordPiece)")
    if every(lambda w: _wordpiece(w, WP_VOCAB, whole_unknown=False)):
        raise Wrong("a word with an unknown part keeps the pieces found before it: BERT gives up "
                    "on the whole word, which becomes ['[UNK]']")
    if every(lambda w: _wordpiece(w, WP_VOCAB, longest=False)):
        raise Wrong("each piece is the shortest match: WordPiece takes the longest piece of the "
                    "vocabulary that starts at the position")
    if every(lambda w: _wordpiece(w, WP_VOCAB, bare_fallback=True)):
        raise Wrong("where no '##' piece continues a word, a bare entry of the vocabulary is "
                    "taken: a bare entry only starts a word; with no '##' piece at a position, "
                    "the whole word becomes ['[UNK]']")
    if any(out == [] for out in wrong.values()):
        word = next(w for w, out in wrong.items() if out == [])
        raise Wrong(f"wordpiece_encode({word!r}, vocab) returns no piece at all: a word that "
                    "cannot be spelled from the vocabulary becomes ['[UNK]']")
    mixed = next((w for w, out in wrong.items() if "[UNK]" in out and len(out) > 1), None)
    if mixed is not None:
        raise Wrong(f"wordpiece_encode({mixed!r}, vocab) gives {wrong[mixed]}, pieces and "
                    "'[UNK]' together: where no piece matches at a position, BERT gives up on "
                    "the whole word, which becomes ['[UNK]'] alone")
    for word, out in wrong.items():
        spelled = "".join(p.removeprefix("##") for p in out)
        if WP_WORDS[word] == ["[UNK]"] and "[UNK]" not in out and len(spelled) < len(word):
            raise Wrong(f"the pieces of {word!r}, {out}, do not spell it: a character is left "
                        "out; where no piece matches at a position, the whole word becomes "
                        "['[UNK]']")
    if any(out and out[0].startswith("##") for out in wrong.values()):
        raise Wrong("a word may begin with a '##' piece: '##' marks a piece that continues a "
                    "word, so the first piece must be a bare entry (with none, the word is "
                    "['[UNK]'])")
    if every(lambda w: _wordpiece(w, WP_VOCAB, marker="")):
        raise Wrong("the pieces after the first are looked up without '##': inside a word, a "
                    "piece is the vocabulary's entry with '##' in front")
    if every(lambda w: [p.removeprefix("##") for p in _wordpiece(w, WP_VOCAB)]):
        raise Wrong("the pieces after the first lose their '##': return them as the vocabulary "
                    "writes them, '##' included, so that a reader can tell a word's start")
    if every(lambda w: next(_spellings(w, WP_VOCAB), ["[UNK]"])):
        word, out = next(iter(wrong.items()))
        raise Wrong(f"finds a spelling of {word!r}, {out}, that BERT's rule misses: the rule "
                    "takes the longest beginning, never goes back on it, and a word it cannot "
                    "finish from there becomes ['[UNK]']")
    word, out = next(iter(wrong.items()))
    raise Wrong(f"wordpiece_encode({word!r}, vocab) gives {out}, which is not what BERT's rule "
                "gives: follow the rule by hand on this word, the longest piece at each position")
