"""Batching: sequences of different lengths as padded tensors, and streams as training chunks.

:func:`pad_sequences` pads id sequences to one length; :func:`lm_chunks` cuts a token stream into
the consecutive (inputs, targets) chunks of truncated backpropagation through time;
:func:`context_windows` makes the (context, centre) pairs of chapter 1; :func:`encode_pairs`
turns string pairs into padded id tensors, and :func:`bucket_batches` batches them by length.
The data sets themselves are in :mod:`seqbook.data`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch

from .checks import INTEGER_DTYPES, check_ids, check_int, has_values
from .vocab import Vocab, check_vocab

__all__ = ["pad_sequences", "lm_chunks", "context_windows", "encode_pairs", "bucket_batches"]


# ---------------------------------------------------------------------------------------------
# Batching helpers.
# ---------------------------------------------------------------------------------------------


def pad_sequences(
    sequences: Sequence[Sequence[int]], pad_id: int = Vocab.pad_id, max_len: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad integer sequences into one tensor.

    Args:
        sequences: B sequences of ids (lists of ints, or 1-D integer tensors or arrays), of any
            lengths (empty sequences are allowed). The ids are not range-checked here: any int
            passes, a negative one too (e.g. -100 for a target a loss ignores), and the model
            or loss that reads them checks them.
        pad_id: the id that fills the tail (any int, e.g. -100 for targets a loss ignores).
        max_len: pad (or truncate) to this length; default: the longest sequence. 0 would cut
            every token, so it is refused unless every sequence is empty (then it gives the
            (B, 0) tensor that the default gives too).

    Returns:
        ``padded`` (B, T) int64 and ``lengths`` (B,) int64, the true length of each row.
    """
    if isinstance(sequences, (str, bytes)) or not hasattr(sequences, "__len__") or not isinstance(
            sequences, Iterable):
        raise TypeError(f"sequences must be a list of id sequences, got {type(sequences).__name__}")
    if len(sequences) == 0:
        raise ValueError("sequences is empty: need at least one sequence to pad")
    pad_id = check_int("pad_id", pad_id, minimum=None)
    if max_len is not None:
        max_len = check_int("max_len", max_len, minimum=0)
    rows = [_id_row(seq, i) for i, seq in enumerate(sequences)]
    lengths = [len(r) for r in rows]
    if max_len == 0 and max(lengths):
        raise ValueError(f"max_len must be >= 1 to keep any token (0 would cut every sequence to "
                         f"nothing), got 0 for sequences of up to {max(lengths)} ids")
    T = max(lengths) if max_len is None else max_len
    padded = torch.full((len(rows), T), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        row = row[:T]
        if len(row):
            padded[i, : len(row)] = row
    return padded, torch.tensor([min(n, T) for n in lengths], dtype=torch.long)


def _id_row(seq, i: int) -> torch.Tensor:
    """``sequences[i]`` as a 1-D integer tensor (an empty one for an empty sequence)."""
    if isinstance(seq, (str, bytes)):
        raise TypeError(f"sequences[{i}] must be a sequence of int ids, got the str {seq!r} (encode it)")
    try:
        row = torch.as_tensor(seq)
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise TypeError(f"sequences[{i}] must be a sequence of int ids, got {type(seq).__name__} "
                        f"({type(exc).__name__}: {exc})") from None
    if row.dim() != 1:
        raise ValueError(f"sequences[{i}] must be a flat sequence of ids, got shape {tuple(row.shape)}")
    if row.numel() and row.dtype not in INTEGER_DTYPES:
        raise TypeError(f"sequences[{i}] must hold int ids, got {row.dtype} (floats would be truncated)")
    return row


def lm_chunks(ids: torch.Tensor, batch_size: int, seq_len: int, vocab_size: int | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut a long id stream into aligned language-model chunks for truncated BPTT.

    The stream is split into ``batch_size`` contiguous rows, so chunk k of row b continues chunk
    k-1 of row b (the hidden state can be carried across chunks). Every id must lie in
    [0, vocab_size) when ``vocab_size`` is given; without it only a negative id is refused (the
    model that reads the chunks, or :func:`seqbook.train.train_lm`, checks the upper end against
    its own ``vocab_size``).

    Returns:
        ``inputs`` and ``targets`` of shape (num_chunks, batch_size, seq_len); targets are the
        inputs shifted by one token.
    """
    if vocab_size is not None:
        vocab_size = check_int("vocab_size", vocab_size)
    check_ids("ids", ids, vocab_size, shape=(None,), names="(N,)")
    batch_size = check_int("batch_size", batch_size)
    seq_len = check_int("seq_len", seq_len)
    n_per_row = (len(ids) - 1) // batch_size
    n_chunks = n_per_row // seq_len
    if n_chunks == 0:
        raise ValueError(
            f"ids (a stream of {len(ids)} tokens) is too short for batch_size={batch_size}, "
            f"seq_len={seq_len}: need at least {batch_size * seq_len + 1} tokens"
        )
    usable = n_chunks * seq_len
    x = ids[: batch_size * n_per_row].view(batch_size, n_per_row)[:, :usable]
    y = ids[1 : batch_size * n_per_row + 1].view(batch_size, n_per_row)[:, :usable]
    x = x.view(batch_size, n_chunks, seq_len).transpose(0, 1).contiguous()
    y = y.view(batch_size, n_chunks, seq_len).transpose(0, 1).contiguous()
    return x, y


# ---------------------------------------------------------------------------------------------
# Context windows of a token stream (chapter 1).
# ---------------------------------------------------------------------------------------------


def context_windows(ids: torch.Tensor, window: int = 1, vocab_size: int | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Every position of a token stream with its ``window`` neighbours on each side.

    Example: ids = [a, b, c, d] and window = 1 give contexts [[a, c], [b, d]], centers [b, c].

    Every id must lie in [0, vocab_size) when ``vocab_size`` is given (the centres become the
    targets of a loss over the vocabulary, the contexts rows of an embedding table); without it
    only a negative id is refused (:class:`seqbook.embeddings.CBOW` checks the contexts against
    its ``vocab_size``).

    Shape:
        - ids: (N,)
        - output: contexts (N - 2 * window, 2 * window) ordered left to right, centers (N - 2 * window,)
    """
    if vocab_size is not None:
        vocab_size = check_int("vocab_size", vocab_size)
    check_ids("ids", ids, vocab_size, shape=(None,), names="(N,)", nonempty=False)
    window = check_int("window", window, 1)
    n = ids.shape[0] - 2 * window
    if n < 1:
        raise ValueError(f"ids must hold more than 2 * window = {2 * window} tokens, got {ids.shape[0]}")
    offsets = [k for k in range(-window, window + 1) if k != 0]
    contexts = torch.stack([ids[window + k : window + k + n] for k in offsets], dim=1)  # (n, 2w)
    return contexts, ids[window : window + n]


def encode_pairs(
    pairs: Sequence[tuple[str, str]], src_vocab: Vocab, tgt_vocab: Vocab
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Encode string pairs character by character and pad them.

    A source is its characters followed by ``<eos>`` (so even an empty string has length 1); a
    target is ``<sos>``, its characters, ``<eos>``. Unknown characters become ``<unk>``.

    Returns:
        ``src`` (N, S) int64, ``src_lengths`` (N,) int64 and ``tgt`` (N, T) int64, padded with
        ``<pad>`` = 0.
    """
    if isinstance(pairs, str) or not isinstance(pairs, Sequence):
        raise TypeError(f"pairs must be a list of (source, target) string pairs, got {type(pairs).__name__}")
    if len(pairs) == 0:
        raise ValueError("pairs is empty: need at least one (source, target) pair")
    check_vocab("src_vocab", src_vocab)
    check_vocab("tgt_vocab", tgt_vocab)
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, tuple | list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise TypeError(f"pairs[{i}] must be a (source, target) pair of strings, got {pair!r}")
    src, src_lengths = pad_sequences([src_vocab.encode(list(s), add_eos=True) for s, _ in pairs])
    tgt, _ = pad_sequences([tgt_vocab.encode(list(t), add_sos=True, add_eos=True) for _, t in pairs])
    return src, src_lengths, tgt


def bucket_batches(
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    tgt: torch.Tensor,
    batch_size: int,
    generator: torch.Generator | None = None,
    pool: int = 20,
    src_vocab_size: int | None = None,
    tgt_vocab_size: int | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """An endless stream of shuffled mini-batches of sequences of similar length.

    Every epoch shuffles the data, sorts each pool of ``pool * batch_size`` sequences by source
    length, cuts it into batches and yields the batches in random order. Each batch is trimmed
    to its longest source and target, so little time goes into padding.

    The arguments are checked when it is called, before the first batch: every id of ``src``
    and ``tgt`` must lie in [0, src_vocab_size) and [0, tgt_vocab_size) when those are given
    (without them only a negative id is refused, and the model checks the upper end), and
    every source length in [1, S]. The tensors may live on
    any one device; the shuffling runs on the CPU (with ``generator``) and the batches are cut on
    the data's device.

    Yields:
        ``(src (B, S_b), src_lengths (B,), tgt (B, T_b))``.
    """
    sizes = {"src": src_vocab_size, "src_lengths": None, "tgt": tgt_vocab_size}
    for name, size in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size)):
        if size is not None:
            check_int(name, size)
    for name, t in (("src", src), ("src_lengths", src_lengths), ("tgt", tgt)):
        check_ids(name, t, sizes[name], nonempty=False)
    n = src.shape[0] if src.dim() else 0
    if src.dim() != 2 or tuple(src_lengths.shape) != (n,) or tgt.dim() != 2 or tgt.shape[0] != n:
        raise ValueError(f"need src (N, S), src_lengths (N,), tgt (N, T) with one N, got "
                         f"{tuple(src.shape)}, {tuple(src_lengths.shape)}, {tuple(tgt.shape)}")
    if n == 0 or src.shape[1] == 0 or tgt.shape[1] == 0:
        raise ValueError(f"src and tgt must hold at least one sequence and one position, got "
                         f"{tuple(src.shape)} and {tuple(tgt.shape)}")
    if not src.device == src_lengths.device == tgt.device:
        raise ValueError(f"src, src_lengths and tgt must be on one device, got {src.device}, "
                         f"{src_lengths.device}, {tgt.device}")
    batch_size = check_int("batch_size", batch_size)
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be in [1, {n}], got {batch_size}")
    pool = check_int("pool", pool)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if has_values(src):
        lo, hi = int(src_lengths.min()), int(src_lengths.max())
        if lo < 1 or hi > src.shape[1]:
            raise ValueError(f"src_lengths must lie in [1, {src.shape[1]}] (the width of src), got values "
                             f"in [{lo}, {hi}]")
    return _bucket_batches(src, src_lengths, tgt, batch_size, generator, pool)


def _bucket_batches(src, src_lengths, tgt, batch_size, generator, pool):
    n = src.shape[0]
    tgt_lengths = (tgt != Vocab.pad_id).sum(1)
    while True:
        order = torch.randperm(n, generator=generator).to(src.device)  # drawn on the CPU, used on the data's
        batches = []
        for start in range(0, n, pool * batch_size):
            chunk = order[start : start + pool * batch_size]
            chunk = chunk[torch.argsort(src_lengths[chunk], stable=True)]
            batches += [chunk[i : i + batch_size] for i in range(0, len(chunk) - batch_size + 1, batch_size)]
        for b in torch.randperm(len(batches), generator=generator).tolist():
            idx = batches[b]
            S, T = int(src_lengths[idx].max()), int(tgt_lengths[idx].max())
            yield src[idx, :S], src_lengths[idx], tgt[idx, :T]
