"""Encoder-decoder models that translate one sequence into another (chapter 4).

The model of Bahdanau et al. (2014), eqs. (4.4)-(4.9) of the book, in three parts:

* :class:`Encoder`: a bidirectional GRU; the annotation of source position j is the pair of
  states ``h_j = [->h_j ; <-h_j]`` that read the source from the left and from the right.
* :class:`AttentionDecoder`: a GRU whose step i reads a fresh context
  ``c_i = sum_j alpha_ij h_j`` from :class:`~seqbook.attention.AdditiveAttention`, queried with the
  previous state ``s_{i-1}``; then ``s_i = GRU([E y_{i-1}; c_i], s_{i-1})``.
* :class:`PlainDecoder`: the same decoder with one fixed context for every step, the encoder's
  final states ``c = [->h_S ; <-h_1]`` (the encoder-decoder of Cho et al., 2014, without attention).

:class:`Seq2Seq` joins an encoder and a decoder and trains with teacher forcing (the decoder reads
the true previous character). For prediction it has the two methods of the decoding protocol of
:mod:`seqbook.decoding` (``encode`` and ``decode_step``), whose :func:`~seqbook.decoding.greedy_decode`,
:func:`~seqbook.decoding.beam_search` and :func:`~seqbook.decoding.translate` decode it, as they decode
chapter 6's :class:`seqbook.transformer.Seq2SeqTransformer`. Its state is the decoder's GRU state
(B, H). Token ids follow the reserved ids of :mod:`seqbook.decoding`: ``<pad>`` is
:data:`~seqbook.decoding.PAD_ID` 0 (the padding row of the embeddings, ignored by the loss).

The data sets live in :mod:`seqbook.data` (:func:`~seqbook.data.date_dataset`,
:func:`~seqbook.data.copy_dataset`, :class:`~seqbook.data.TranslationData`), the batches in
:mod:`seqbook.batching` (:func:`~seqbook.batching.bucket_batches`); :func:`exact_match` and
:func:`exact_match_by_length` score translations.

All recurrent parts are ``seqbook.rnn`` modules. ``fast=True`` runs them through PyTorch's fused
GRU kernels on the same parameters (same values, chapter 3); the tests check both paths agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import rnn
from .attention import AdditiveAttention, lengths_to_mask
from .checks import (
    check_bool_mask,
    check_flag,
    check_float_tensor,
    check_ids,
    check_lengths,
    check_positive_int,
    check_same_dtype,
    checked,
    has_values,
)
from .decoding import PAD_ID

__all__ = [
    "reverse_padded", "EncoderOutput", "Encoder", "Decoder", "AttentionDecoder", "PlainDecoder", "Seq2Seq",
    "exact_match", "exact_match_by_length",
]


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


# ---------------------------------------------------------------------------------------------
# The encoder.
# ---------------------------------------------------------------------------------------------


def _check_reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < 2 or _shape(lengths) != (x.shape[0],):
        raise ValueError(f"need x (B, T, ...) and lengths (B,), got {_shape(x)} and {_shape(lengths)}")
    check_lengths("lengths", lengths, x.shape[1], minimum=0, of="x (T)")


@checked(_check_reverse_padded, lengths=partial(check_ids, nonempty=False))
def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse the first ``lengths[b]`` steps of each row of ``x``; padding stays in place.

    Applying it twice gives ``x`` back. A backward RNN run on the reversed rows starts at
    each row's last real token instead of at the padding.

    Shape:
        x: (B, T, ...), lengths: (B,) with values in 0..T -> (B, T, ...)
    """
    B, T = x.shape[:2]
    t = torch.arange(T, device=x.device)
    idx = lengths.to(x.device)[:, None] - 1 - t       # (B, T): the mirrored position
    idx = torch.where(idx >= 0, idx, t.expand(B, T))  # padding maps to itself
    return x.gather(1, idx.view(B, T, *([1] * (x.dim() - 2))).expand_as(x))


class EncoderOutput(NamedTuple):
    """What the decoder reads from the encoder (every field batch-first)."""

    annotations: torch.Tensor         # (B, S, 2H): h_j = [->h_j ; <-h_j], zero at padding
    final: torch.Tensor               # (B, 2H): [->h at the last real token ; <-h_1]
    mask: torch.Tensor                # (B, S) bool: True at real tokens
    keys: torch.Tensor | None = None  # (B, S, A): U_a h_j + b_a, from AttentionDecoder.prepare


class Encoder(nn.Module):
    r"""Bidirectional GRU encoder, eq. (4.1) of the book read in both directions, eq. (4.4).

    .. math::
        \overrightarrow{h}_j = \mathrm{GRU}(E x_j, \overrightarrow{h}_{j-1}), \quad
        \overleftarrow{h}_j = \mathrm{GRU}'(E x_j, \overleftarrow{h}_{j+1}), \quad
        h_j = [\overrightarrow{h}_j; \overleftarrow{h}_j].

    The two directions are two one-directional :class:`seqbook.rnn.GRU` layers. The backward
    one reads each source reversed within its own length (:func:`reverse_padded`), so that
    padding never leaks into a real token's state (PyTorch gets the same effect by packing the
    sequences). On unpadded input this is exactly ``nn.GRU(..., bidirectional=True)``.

    Shape:
        src: (B, S) int64 ids, src_lengths: (B,) in 1..S
        -> :class:`EncoderOutput` with annotations (B, S, 2H), final (B, 2H), mask (B, S)
    """

    def __init__(self, vocab_size: int, embed_dim: int, hidden_size: int, fast: bool = False):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("embed_dim", embed_dim),
                            ("hidden_size", hidden_size)):
            check_positive_int(name, value)
        check_flag("fast", fast)
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD_ID)
        self.forward_rnn = rnn.GRU(embed_dim, hidden_size, fast=fast)    # reads x_1 .. x_S
        self.backward_rnn = rnn.GRU(embed_dim, hidden_size, fast=fast)   # reads x_S .. x_1

    def _check_forward(self, src: torch.Tensor, src_lengths: torch.Tensor) -> None:
        _check_source(src, src_lengths, self.embedding.num_embeddings)

    @checked(_check_forward)
    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor) -> EncoderOutput:
        B, S = src.shape
        lengths = src_lengths.to(src.device)
        x = self.embedding(src)                                 # (B, S, E)
        fwd, _ = self.forward_rnn(x)                            # (B, S, H)
        bwd, _ = self.backward_rnn(reverse_padded(x, lengths))  # (B, S, H), reversed
        bwd = reverse_padded(bwd, lengths)                      # back to source order
        mask = lengths_to_mask(lengths, S)                      # (B, S)
        annotations = torch.cat([fwd, bwd], dim=-1) * mask[..., None]  # (B, S, 2H)
        last = fwd[torch.arange(B, device=src.device), lengths - 1]  # (B, H): last token
        final = torch.cat([last, bwd[:, 0]], dim=-1)            # (B, 2H)
        return EncoderOutput(annotations, final, mask)


def _check_src_tensor(src) -> None:
    """``src``: an int64 tensor (B, S); a TypeError for another type or dtype, a ValueError for a shape."""
    if not isinstance(src, torch.Tensor):
        raise TypeError(f"src must be an int64 tensor of shape (B, S), got {type(src).__name__}")
    if src.dtype != torch.long:
        raise TypeError(f"src must be an int64 tensor of shape (B, S), got {src.dtype}")
    if src.dim() != 2:
        raise ValueError(f"src must be an int64 tensor of shape (B, S), got shape {_shape(src)}")


def _check_source(src: torch.Tensor, src_lengths: torch.Tensor, vocab_size: int) -> None:
    _check_src_tensor(src)
    B, S = src.shape
    if B == 0 or S == 0:
        raise ValueError(f"src must hold at least one sequence and one position, got shape {_shape(src)}")
    check_ids("src_lengths", src_lengths, shape=(B,), names=f"({B},)")
    check_lengths("src_lengths", src_lengths, S, of="src")
    if not has_values(src):  # shapes only: a meta tensor holds no values
        return
    if src.min() < 0 or src.max() >= vocab_size:
        raise ValueError(f"src ids must lie in [0, {vocab_size}), got values in [{int(src.min())}, "
                         f"{int(src.max())}]")


# ---------------------------------------------------------------------------------------------
# The decoders: the same GRU and read-out; they differ only in where the context comes from.
# ---------------------------------------------------------------------------------------------


class Decoder(nn.Module):
    r"""One decoder step: attend, update, predict, eq. (4.9) of the book:

    .. math::
        c_i = \text{context}(s_{i-1}), \quad
        s_i = \mathrm{GRU}([E y_{i-1}; c_i], s_{i-1}), \quad
        p(y_i \mid y_{<i}, x) = \mathrm{softmax}(W_o [s_i; c_i; E y_{i-1}] + b_o),

    starting from :math:`s_0 = \tanh(W_s [\overrightarrow{h}_S; \overleftarrow{h}_1] + b_s)`.
    The base class of :class:`AttentionDecoder` and :class:`PlainDecoder`, which define ``context``.
    """

    def __init__(self, vocab_size: int, embed_dim: int, hidden_size: int, annotation_dim: int,
                 fast: bool = False):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("embed_dim", embed_dim),
                            ("hidden_size", hidden_size),
                            ("annotation_dim", annotation_dim)):
            check_positive_int(name, value)
        check_flag("fast", fast)
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD_ID)
        self.init = nn.Linear(annotation_dim, hidden_size)                       # W_s
        self.cell = rnn.GRUCell(embed_dim + annotation_dim, hidden_size, fast=fast)
        self.out = nn.Linear(hidden_size + annotation_dim + embed_dim, vocab_size)  # W_o

    def prepare(self, enc: EncoderOutput) -> EncoderOutput:
        """Work done once per source before decoding (nothing here)."""
        return enc

    def context(self, s: torch.Tensor, memory: EncoderOutput):
        """``(c_i (B, 2H), weights (B, S) or None)`` for the previous state ``s`` (B, H)."""
        raise NotImplementedError

    def _check_memory(self, memory) -> int:
        """``memory`` must be an :class:`EncoderOutput` of this decoder's sizes; returns its batch size."""
        if not isinstance(memory, EncoderOutput):
            got = type(memory).__name__
            raise TypeError(f"memory must be an EncoderOutput (from Seq2Seq.encode), got {got}")
        A = self.init.in_features
        check_float_tensor("memory.annotations", memory.annotations, ndim=3, names=f"(B, S, {A})")
        if memory.annotations.shape[-1] != A:
            got = _shape(memory.annotations)
            raise ValueError(f"memory.annotations must have shape (B, S, {A}), got {got}")
        B, S = memory.annotations.shape[:2]
        check_float_tensor("memory.final", memory.final, shape=(B, A), names=f"({B}, {A})")
        check_bool_mask("memory.mask", memory.mask, shape=(B, S), names=f"({B}, {S})")
        dtype = self.init.weight.dtype
        for name, t in (("memory.annotations", memory.annotations), ("memory.final", memory.final)):
            check_same_dtype(name, t, dtype)
        self._check_keys(memory.keys, B, S)
        return B

    @checked(_check_memory)
    def init_state(self, memory: EncoderOutput) -> torch.Tensor:
        """:math:`s_0` (B, H) from the encoder's final states."""
        return torch.tanh(self.init(memory.final))

    def update(self, e: torch.Tensor, s: torch.Tensor, memory: EncoderOutput):
        """Attend and update, unchecked: ``(s_i, c_i, weights)``.

        Shape:
            e: (B, E) the embedded previous token, s: (B, H) the previous state
            -> s_i: (B, H), c_i: (B, 2H), weights: (B, S) or None
        """
        c, weights = self.context(s, memory)  # attend: (B, 2H), (B, S)
        x = torch.cat([e, c], dim=-1)         # (B, E + 2H)
        s = self.cell(x, s)                   # update: (B, H)
        return s, c, weights

    def _check_keys(self, keys, B: int, S: int) -> None:
        """``memory.keys``: None or a float tensor (B, S, A) (read by :class:`AttentionDecoder` only)."""
        if keys is not None:
            check_float_tensor("memory.keys", keys, shape=(B, S, None), names=f"({B}, {S}, A)")

    def _check_step(self, y_prev, s, memory) -> None:
        B = self._check_memory(memory)
        check_ids("y_prev", y_prev, self.vocab_size, shape=(B,))
        check_float_tensor("s", s, shape=(B, self.hidden_size))
        check_same_dtype("s", s, self.init.weight.dtype)

    @checked(_check_step)
    def step(self, y_prev: torch.Tensor, s: torch.Tensor, memory: EncoderOutput):
        """One step: ``(logits (B, V), s_i (B, H), weights (B, S) or None)``.

        Shape:
            y_prev: (B,) the previous token y_{i-1}, s: (B, H) the previous state
        """
        e = self.embedding(y_prev)                       # (B, E)
        s, c, weights = self.update(e, s, memory)
        logits = self.out(torch.cat([s, c, e], dim=-1))  # predict: (B, V)
        return logits, s, weights

    def _check_forward(self, tgt_in, memory) -> None:
        B = self._check_memory(memory)
        check_ids("tgt_in", tgt_in, self.vocab_size, shape=(B, None), names=f"({B}, T>=1)")

    @checked(_check_forward)
    def forward(self, tgt_in: torch.Tensor, memory: EncoderOutput):
        """Teacher forcing: step i reads the true ``tgt_in[:, i]``; returns ``(logits, weights)``.

        Shape:
            tgt_in: (B, T) -> logits (B, T, V), weights (B, T, S) or None
        """
        E = self.embedding(tgt_in)                                     # (B, T, E), all steps at once
        s = self.init_state(memory)
        states, contexts, weights = [], [], []
        for i in range(tgt_in.shape[1]):
            s, c, w = self.update(E[:, i], s, memory)
            states.append(s)
            contexts.append(c)
            weights.append(w)
        # the read-out does not feed back into the recurrence: apply it to every step at once
        logits = self.out(torch.cat([torch.stack(states, 1), torch.stack(contexts, 1), E], dim=-1))
        return logits, (torch.stack(weights, 1) if weights[0] is not None else None)


class AttentionDecoder(Decoder):
    r"""The decoder of Bahdanau et al. (2014): a fresh context at every step, eqs. (4.5)-(4.8) of the book.

    .. math::
        e_{ij} = v_a^\top \tanh(W_a s_{i-1} + U_a h_j + b_a), \quad
        \alpha_{ij} = \operatorname{softmax}_j(e_{ij}), \quad
        c_i = \sum_j \alpha_{ij} h_j .

    The query is :math:`s_{i-1}`, the keys and the values are the annotations :math:`h_j`.
    :meth:`prepare` computes :math:`U_a h_j + b_a` once per source.

    Shape:
        step: y_prev (B,), s (B, H) -> logits (B, V), s (B, H), weights (B, S)
    """

    def __init__(self, vocab_size: int, embed_dim: int, hidden_size: int, annotation_dim: int,
                 attention_dim: int, fast: bool = False):
        check_positive_int("attention_dim", attention_dim)
        super().__init__(vocab_size, embed_dim, hidden_size, annotation_dim, fast)
        self.attention = AdditiveAttention(hidden_size, annotation_dim, attention_dim)

    def _check_prepare(self, enc) -> None:
        self._check_memory(enc)

    @checked(_check_prepare)
    def prepare(self, enc: EncoderOutput) -> EncoderOutput:
        return enc._replace(keys=self.attention.project_keys(enc.annotations))  # (B, S, A)

    def _check_keys(self, keys, B: int, S: int) -> None:
        """``memory.keys``: None (projected at every step) or U_a h_j + b_a (B, S, attention_dim)."""
        if keys is not None:
            A = self.attention.hidden_dim
            check_float_tensor("memory.keys", keys, shape=(B, S, A), names=f"({B}, {S}, {A})")
            check_same_dtype("memory.keys", keys, self.attention.U_a.weight.dtype)

    def context(self, s: torch.Tensor, memory: EncoderOutput):
        keys = memory.keys  # U_a h_j + b_a, computed once by prepare
        return self.attention(s, memory.annotations, mask=memory.mask, projected_keys=keys)


class PlainDecoder(Decoder):
    r"""The decoder without attention: every step reads the same context, the encoder's final
    states :math:`c = [\overrightarrow{h}_S; \overleftarrow{h}_1]` (Cho et al., 2014). Everything
    the decoder learns about the source must pass through this one fixed-size vector.

    Shape:
        step: y_prev (B,), s (B, H) -> logits (B, V), s (B, H), None
    """

    def context(self, s: torch.Tensor, memory: EncoderOutput):
        return memory.final, None


# ---------------------------------------------------------------------------------------------
# The model.
# ---------------------------------------------------------------------------------------------


class Seq2Seq(nn.Module):
    """An :class:`Encoder` and an :class:`AttentionDecoder` (``attention=True``) or a
    :class:`PlainDecoder` (``attention=False``).

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (id 0 is ``<pad>``).
        embed_dim: size of the character embeddings (source and target).
        hidden_size: H, the size of each encoder direction and of the decoder state.
        attention: use attention; otherwise the fixed context of :class:`PlainDecoder`.
        attention_dim: width of the attention's scoring network (default ``hidden_size``).
        fast: run the GRUs through PyTorch's fused kernels (set or clear it later with
            ``model.fast = ...``; the parameters are the same).

    For decoding it has the two methods of the decoding protocol (see :mod:`seqbook.decoding`):
    :meth:`encode` runs the encoder once, and :meth:`decode_step` runs one decoder step, whose state
    is the GRU state :math:`s_{i-1}`.

    Shape:
        forward: src (B, S), src_lengths (B,), tgt_in (B, T) -> logits (B, T, V_tgt)
        decode_step: prev_tokens (B,), state (B, H) or None -> logits (B, V_tgt), state (B, H)
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, embed_dim: int = 32, hidden_size: int = 64,
                 attention: bool = True, attention_dim: int | None = None, fast: bool = False):
        super().__init__()
        for name, value in (("src_vocab_size", src_vocab_size), ("tgt_vocab_size", tgt_vocab_size),
                            ("embed_dim", embed_dim), ("hidden_size", hidden_size)):
            check_positive_int(name, value)
        check_flag("attention", attention)
        check_flag("fast", fast)
        if attention_dim is not None:
            check_positive_int("attention_dim", attention_dim)
        self.attention = attention
        self.encoder = Encoder(src_vocab_size, embed_dim, hidden_size, fast)
        if attention:
            self.decoder = AttentionDecoder(tgt_vocab_size, embed_dim, hidden_size, 2 * hidden_size,
                                            attention_dim or hidden_size, fast)
        else:
            self.decoder = PlainDecoder(tgt_vocab_size, embed_dim, hidden_size, 2 * hidden_size, fast)

    def _check_encode(self, src, src_lengths) -> None:
        _check_source(src, src_lengths, self.encoder.embedding.num_embeddings)

    @checked(_check_encode)
    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> EncoderOutput:
        """Run the encoder and the decoder's per-source preparation (the first method of the
        decoding protocol of :mod:`seqbook.decoding`).

        Shape:
            src: (B, S) int64 ids, src_lengths: (B,) in 1..S -> :class:`EncoderOutput` of batch B
        """
        return self.decoder.prepare(self.encoder(src, src_lengths))

    def _check_decode_step(self, prev_tokens, state, memory) -> None:
        B = self.decoder._check_memory(memory)
        check_ids("prev_tokens", prev_tokens, self.decoder.vocab_size, shape=(B,))
        if state is not None:
            check_float_tensor("state", state, shape=(B, self.decoder.hidden_size))
            check_same_dtype("state", state, self.decoder.init.weight.dtype)

    @checked(_check_decode_step, need_weights=check_flag)
    def decode_step(self, prev_tokens: torch.Tensor, state: torch.Tensor | None, memory: EncoderOutput,
                    need_weights: bool = False):
        """One decoder step (the second method of the decoding protocol): attend, update, predict.

        ``state`` is the decoder state :math:`s_{i-1}`, or None before the first step (then
        :math:`s_0` is computed from ``memory``). With ``need_weights`` the step also returns its
        attention weights over the source, or None for the model without attention.

        Shape:
            prev_tokens: (B,) ids y_{i-1}; state: (B, H) or None; memory: from :meth:`encode`
            -> logits (B, V_tgt), state s_i (B, H) [, weights (B, S) or None]
        """
        if state is None:
            state = self.decoder.init_state(memory)                    # s_0 (B, H)
        logits, s, weights = self.decoder.step(prev_tokens, state, memory)  # (B, V), (B, H), (B, S)
        return (logits, s, weights) if need_weights else (logits, s)

    def _check_forward(self, src, src_lengths, tgt_in) -> None:
        _check_source(src, src_lengths, self.encoder.embedding.num_embeddings)
        if not isinstance(tgt_in, torch.Tensor):
            raise TypeError(f"tgt_in must be a torch.Tensor, got {type(tgt_in).__name__}")
        if tgt_in.dim() != 2 or tgt_in.shape[0] != src.shape[0] or tgt_in.shape[1] == 0:
            raise ValueError(f"tgt_in must have shape ({src.shape[0]}, T>=1), got {_shape(tgt_in)}")
        check_ids("tgt_in", tgt_in, self.decoder.vocab_size)

    @checked(_check_forward, return_attention=check_flag)
    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor,
                return_attention: bool = False):
        """Teacher-forced logits; with ``return_attention`` also the weights (B, T, S) or None."""
        logits, weights = self.decoder(tgt_in, self.encode(src, src_lengths))
        return (logits, weights) if return_attention else logits

    def _check_loss(self, src, src_lengths, tgt) -> None:
        if not isinstance(tgt, torch.Tensor):
            raise TypeError(f"tgt must be an integer tensor of shape (B, T>=2), got {type(tgt).__name__}")
        if tgt.dim() != 2 or tgt.shape[1] < 2:
            raise ValueError(f"tgt must have shape (B, T>=2) (<sos> ... <eos>), got {_shape(tgt)}")
        check_ids("tgt", tgt, self.decoder.vocab_size)
        if has_values(tgt) and not bool((tgt[:, 1:] != PAD_ID).any()):
            raise ValueError("tgt must hold at least one target that is not <pad>: the mean loss over no "
                             "token is undefined")
        self._check_forward(src, src_lengths, tgt[:, :-1])

    @checked(_check_loss)
    def loss(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of ``tgt[:, 1:]`` given ``tgt[:, :-1]`` (teacher forcing), padding ignored.

        ``tgt`` is ``<sos> y_1 ... y_T <eos>`` padded, as made by :func:`seqbook.batching.encode_pairs`.
        """
        logits = self(src, src_lengths, tgt[:, :-1])                   # (B, T-1, V)
        return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD_ID)


def exact_match(predictions: Sequence[str], targets: Sequence[str]) -> float:
    """The fraction of predictions equal to their target, character for character."""
    _check_strings("predictions", predictions)
    _check_strings("targets", targets)
    if len(predictions) != len(targets) or len(targets) == 0:
        raise ValueError(f"need equally many predictions and targets (at least one), got "
                         f"{len(predictions)} and {len(targets)}")
    return sum(p == t for p, t in zip(predictions, targets, strict=True)) / len(targets)


def exact_match_by_length(predictions: Sequence[str], pairs: Sequence[tuple[str, str]]):
    """Exact match grouped by source length: ``(lengths, accuracy, count)`` as NumPy arrays."""
    _check_strings("predictions", predictions)
    if isinstance(pairs, str) or not isinstance(pairs, Sequence) or not all(
            isinstance(p, tuple | list) and len(p) == 2 and isinstance(p[0], str) for p in pairs):
        raise TypeError(f"pairs must be a list of (source, target) string pairs, got {type(pairs).__name__}")
    if len(predictions) != len(pairs) or len(pairs) == 0:
        raise ValueError(f"need equally many predictions and pairs (at least one), got "
                         f"{len(predictions)} and {len(pairs)}")
    lengths = np.array([len(s) for s, _ in pairs])
    correct = np.array([p == t for p, (_, t) in zip(predictions, pairs, strict=True)], dtype=float)
    keys = np.unique(lengths)
    acc = np.array([correct[lengths == k].mean() for k in keys])
    count = np.array([(lengths == k).sum() for k in keys])
    return keys, acc, count


def _check_strings(name: str, items) -> None:
    strings = isinstance(items, Sequence) and all(isinstance(x, str) for x in items)
    if isinstance(items, str) or not strings:
        raise TypeError(f"{name} must be a list of strings, got {type(items).__name__}")
