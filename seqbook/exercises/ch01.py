"""Checks of chapter 1's exercises (embeddings, linear layers and byte-level BPE)."""

from __future__ import annotations

import numbers
from collections import Counter

import torch
import torch.nn.functional as F
from torch import nn

from ..bpe import merge_piece, pretokenize, train_bpe
from .core import Wrong, call, close, exercise, expect

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


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise Wrong(f"{what} must be a number, got {type(value).__name__}")
    return float(value)


def _near(value: float, right: float) -> bool:
    """Within 1 % (a rounded answer such as 1.65e9 counts)."""
    return abs(value - right) <= 0.01 * abs(right)


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
    torch.manual_seed(0)
    V, d = 12, 5  # V != d, so a table that is not transposed cannot fit
    emb = nn.Embedding(V, d).double()
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
    if lin.bias is not None and bool((lin.bias != 0).any()):
        raise Wrong("the layer has a bias: a lookup adds nothing to the row it copies "
                    "(bias=False)")
    ids = torch.tensor([[3, 0, 11], [7, 7, 1]])
    one_hot = F.one_hot(ids, V).to(lin.weight.dtype)
    with torch.no_grad():
        out = lin(one_hot).double()
    expect(close(out, emb(ids).detach()),
           "on one-hot vectors the layer does not give the embedding's rows: copy the table "
           "into the layer's weight (transposed)")


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
    V, d, B, T = COST["V"], COST["d"], COST["B"], COST["T"]
    expect(isinstance(answer, (tuple, list)) and len(answer) == 3,
           "answer must be three numbers: (bytes of the one-hot batch, multiply-adds of the "
           "product, numbers the lookup copies)")
    memory, macs, copies = (_number(a, what) for a, what in zip(
        answer, ("the memory", "the number of multiply-adds", "the number of copies"),
        strict=True))
    if _near(memory, B * T * V):
        raise Wrong("the memory counts numbers, not bytes: a float32 takes 4 bytes")
    if _near(memory, B * T * V * 4 / 1e9) or _near(memory, B * T * V * 4 / 2**30):
        raise Wrong("give the memory in bytes, not in gigabytes")
    expect(_near(memory, B * T * V * 4),
           "the memory of the one-hot batch is wrong: count its numbers, then the bytes of "
           "each")
    if _near(macs, B * T * V):
        raise Wrong("the product's cost misses a factor: each one-hot row meets all d "
                    "columns of the table")
    if _near(macs, V * d):
        raise Wrong("the product's cost is that of one token: there are B x T of them")
    expect(_near(macs, B * T * V * d), "the number of multiply-adds is wrong: a (B T, V) "
           "matrix times a (V, d) matrix")
    if _near(copies, B * T):
        raise Wrong("the lookup copies rows of d numbers: count numbers, not rows")
    if _near(copies, V * d):
        raise Wrong("the lookup copies only the rows of the tokens in the batch, not the whole "
                    "table")
    expect(_near(copies, B * T * d), "the number of copied numbers is wrong: one row per "
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
    expect(sorted(answer) == sorted(sizes), f"answer must have the patch sides {sizes} as "
           f"keys, got {sorted(answer)!r}")
    for p in sizes:
        row = answer[p]
        expect(isinstance(row, (tuple, list)) and len(row) == 3,
               f"answer[{p}] must be three numbers (tokens, pixels per token, parameters)")
        tokens, pixels, params = (_number(v, f"answer[{p}]") for v in row)
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
        expect(params == area * dim + dim, f"patch {p}: the number of parameters is wrong: "
               "a linear map from the pixels of a patch to 32 numbers")


# ---------------------------------------------------------------------------------------------
# Find the bug: BPE merges applied in the wrong order.
# ---------------------------------------------------------------------------------------------


def _by_rank(piece: bytes, merges) -> list[bytes]:
    """Sennrich et al.'s encoder: the earliest learned pair first, until none applies."""
    rank = {pair: r for r, pair in enumerate(merges)}
    parts = [piece[i : i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        r, i = min((rank.get(pair, len(rank)), i) for i, pair in enumerate(
            zip(parts, parts[1:], strict=False)))
        if r == len(rank):
            break
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


def _bug_cases():
    """(piece, merges, right answers) for a hand-made table and a trained one."""
    tiny = [(b"e", b"r"), (b"h", b"e"), (b"t", b"h"), (b"th", b"er")]
    cases = [(p, tiny) for p in (b"her", b"ther", b"the", b"other")]
    tok = train_bpe(SAMPLE, 256 + 60)
    pieces = sorted(set(pretokenize(SAMPLE))) + [" weather", " theory", " gathered", " 🙂"]
    cases += [(p.encode("utf-8"), tok.merges) for p in pieces]
    out = []
    for piece, merges in cases:
        answers = [_by_rank(piece, merges)]
        if merges is tok.merges:  # tiktoken's rule: the rank of the concatenation
            answers.append([tok.token_bytes(i) for i in merge_piece(piece, tok.ranks)])
        out.append((piece, merges, answers))
    return out


@exercise("ex-ch1-bpe-bug", hints=[
    "Encode b'her' by hand with the merges [(b'e', b'r'), (b'h', b'e')], once as training "
    "would and once as the function does.",
    "Training made (e, r) before (h, e), so in every piece it merged e and r first, wherever "
    "they stand. The function merges the first known pair it meets, left to right.",
    "Loop: among the adjacent pairs of the parts, find the one learned earliest (lowest index "
    "in merges); merge it; stop when no adjacent pair is a merge.",
])
def check_bpe_bug(encode_piece):
    mismatched = []  # (matches the left-to-right slip, matches the latest-first slip)
    for piece, merges, answers in _bug_cases():
        out = call(encode_piece, piece, list(merges), what="encode_piece")
        expect(isinstance(out, (list, tuple)) and all(isinstance(p, bytes) for p in out),
               f"encode_piece must return a list of bytes objects, got {type(out).__name__}")
        expect(b"".join(out) == piece, f"the parts of {piece!r} do not spell it again: "
               "every byte must end up in exactly one part")
        if list(out) not in answers:
            mismatched.append((list(out) == _left_to_right(piece, merges),
                               list(out) == _by_rank(piece, merges[::-1]),
                               list(out) == _longest_match(piece, merges)))
    if not mismatched:
        return
    latest = all(m[1] for m in mismatched)
    longest = all(m[2] for m in mismatched)
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
    if all(m[0] for m in mismatched):
        raise Wrong(f"{len(mismatched)} pieces are split differently from training: the "
                    "merges are applied where they are found, left to right, not in the "
                    "order training learned them")
    raise Wrong(f"{len(mismatched)} pieces are split differently from the tokenizer's: each "
                "step merges the adjacent pair that training learned earliest, until no "
                "adjacent pair is a merge")


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


def _pair_counts(words: dict, weighted: bool = True) -> Counter:
    counts: Counter = Counter()
    for word, f in words.items():
        for pair in zip(word, word[1:], strict=False):
            counts[pair] += f if weighted else 1
    return counts


BPE_MERGES = {"num_merges": 40}


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
    out = call(learn_merges, SAMPLE, n, what="learn_merges")
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
    if out == train_bpe(SAMPLE, 256 + n).merges:
        return
    # replay: each merge must be a most frequent pair of the pieces at that step
    # (ties may go either way)
    words = Counter(tuple(bytes([b]) for b in p.encode("utf-8")) for p in pretokenize(SAMPLE))
    joined = {tuple(bytes([b]) for b in SAMPLE.encode("utf-8")): 1}
    static = _pair_counts(words)
    for k, pair in enumerate(out):
        counts = _pair_counts(words)
        best = max(counts.values())
        if counts[pair] == best:
            words = Counter({_merge(w, pair): f for w, f in words.items()})
            joined = {_merge(w, pair): f for w, f in joined.items()}
            continue
        across = _pair_counts(joined)
        if across[pair] == max(across.values()) or (counts[pair] == 0 and across[pair]):
            raise Wrong(f"merge {k} joins bytes of two different pieces: count pairs inside "
                        "the pieces of pretokenize(text) only, never across them")
        if k and static[pair] == max(static[p] for p in static if p not in out[:k]):
            raise Wrong(f"merge {k} is chosen from the counts of the text before any merge: "
                        "count the pairs again after every merge")
        expect(counts[pair], f"merge {k} is a pair that no piece holds at that step: apply "
               "every merge to every piece before counting again")
        unweighted = _pair_counts(words, weighted=False)
        if unweighted[pair] == max(unweighted.values()):
            raise Wrong(f"merge {k} is the most frequent pair among the distinct pieces, "
                        "each counted once: weight each piece's pairs by how often the piece "
                        "occurs in the text")
        raise Wrong(f"merge {k} is not a most frequent pair of the pieces at that step")
