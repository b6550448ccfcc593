"""Decoding: from a model's logits to tokens, for every model of the book (chapters 2, 4 and 6).

Every sampler draws its next token with :func:`sample_next`, one rule: the ids in ``forbid`` get the
logit -inf (:func:`forbid_tokens`: never drawn), ``temperature=0`` takes the argmax, otherwise the
logits are divided by the temperature, cut to the ``top_k`` largest and sampled (the logits warpers
of :mod:`seqbook.sampling`). The loops around it:

* the language models: :func:`generate` continues a text with a recurrent character model
  (:class:`seqbook.lm.CharLM`), :func:`sample_sequence` samples a sequence for a class
  (:class:`seqbook.lm.ConditionalCharLM`), and :func:`generate_tokens` is the token loop of the
  transformer language models (:meth:`seqbook.gpt.GPT.generate`, :meth:`seqbook.llama.Llama.generate`),
  with a KV cache;
* the encoder-decoders: :func:`greedy_decode`, :func:`beam_search` and :func:`translate` (strings in,
  strings out).

Models never import their data: a vocabulary is passed in, any object with the token table ``itos``,
``encode`` and the reserved ids ``pad_id unk_id sos_id eos_id`` (:class:`seqbook.vocab.Vocab`).

**The decoding protocol.** :func:`greedy_decode`, :func:`beam_search` and :func:`translate` work for
any encoder-decoder with two methods, chapter 4's :class:`seqbook.seq2seq.Seq2Seq` and chapter 6's
:class:`seqbook.transformer.Seq2SeqTransformer`:

* ``encode(src, src_lengths) -> memory``, run once per batch of sources: a tensor or a tuple of
  batch-first tensors (None allowed), which beam search repeats row by row for its beams;
* ``decode_step(prev_tokens, state, memory, need_weights=False) -> (logits, state)``: read the
  previous token of each row (B,) and the decoder state, return the next-token logits (B, V) and the
  new state, a batch-first tensor (or a tuple of them) whose rows beam search reorders. ``state`` is
  None before the first step, whose ``prev_tokens`` is ``<sos>``. With ``need_weights`` a third item
  is the step's attention over the source (B, S), or None for a model without attention.

Token ids follow the reserved ids of :class:`seqbook.vocab.Vocab`: ``<pad>`` = :data:`PAD_ID` 0,
``<sos>`` = :data:`SOS_ID` 2, ``<eos>`` = :data:`EOS_ID` 3.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from functools import partial

import torch
from torch import nn

from .checks import (
    check_count,
    check_flag,
    check_float_tensor,
    check_forbid,
    check_generator,
    check_ids,
    check_int,
    check_lengths,
    check_module,
    check_number,
    check_positive_int,
    check_str,
    check_token_ids,
    checked,
    has_values,
    readers_code,
)
from .kv_cache import KVCache, RollingKVCache
from .sampling import sample

__all__ = [
    "PAD_ID", "SOS_ID", "EOS_ID", "check_sampling", "check_generate", "forbid_tokens", "sample_next",
    "generate", "sample_sequence", "generate_tokens", "greedy_decode", "beam_search", "translate",
]

#: The reserved ids every decoder writes and reads, those of :class:`seqbook.vocab.Vocab`.
PAD_ID, SOS_ID, EOS_ID = 0, 2, 3

_VOCAB_FIELDS = ("itos", "encode", "pad_id", "unk_id", "sos_id", "eos_id")


# ---------------------------------------------------------------------------------------------
# The sampling rule.
# ---------------------------------------------------------------------------------------------


def check_sampling(vocab_size: int, temperature: float = 1.0, top_k: int | None = None,
                   forbid: Sequence[int] = (), generator: torch.Generator | None = None
                   ) -> tuple[float, int | None, tuple[int, ...]]:
    """Check the arguments of :func:`sample_next` for a vocabulary of ``vocab_size`` ids.

    Every sampler's validator calls it, so a bad argument is refused even when nothing is sampled.
    Returns ``(temperature, top_k, forbid)`` as a float, an int or None, and a tuple of ints. The
    errors are those listed in :func:`sample_next`, and one for ``vocab_size < 1``.
    """
    temperature = check_number("temperature", temperature, low=0.0)
    if top_k is not None:
        top_k = check_int("top_k", top_k, minimum=1)
    check_generator("generator", generator)
    return temperature, top_k, check_forbid("forbid", forbid, vocab_size)


def check_generate(self, idx, temperature, top_k, generator, forbid) -> None:
    """The validator of a language model's ``generate`` (:meth:`seqbook.gpt.GPT.generate`,
    :meth:`seqbook.llama.Llama.generate`), ``self`` the model and its ``config.vocab_size`` the
    vocabulary: ``idx`` as ``forward`` takes it (but it may be longer than the block) and the
    sampling arguments as :func:`check_sampling` checks them. ``max_new_tokens`` and ``use_cache``
    are checked on their own, named on ``@checked``."""
    check_token_ids("idx", idx, self.config.vocab_size)  # as forward, but idx may be longer
    check_sampling(self.config.vocab_size, temperature, top_k, forbid, generator)


_LOGITS = partial(check_float_tensor, ndim=2, names="(B, V)")  # the logits a decoder draws from


def _check_forbid_tokens(logits, forbid) -> None:
    check_forbid("forbid", forbid, logits.shape[-1])


@checked(_check_forbid_tokens, logits=_LOGITS)
def forbid_tokens(logits: torch.Tensor, forbid: Sequence[int] = ()) -> torch.Tensor:
    """The rule for tokens a model must never emit: their logits become -inf.

    ``forbid`` lists the ids to block, for instance the reserved ``<pad> <unk> <sos>`` (and ``<eos>``
    when a sample must not end); the caller decides which. A softmax then gives them probability 0,
    an argmax never picks them and a beam never extends a prefix by them. ``logits`` is not changed:
    the result is a new tensor (or ``logits`` itself when ``forbid`` is empty).

    Shape:
        logits: (B, V) float; forbid: ids in [0, V), at most V - 1 distinct -> (B, V)

    Raises:
        TypeError: ``forbid`` is not a sequence of ints (a single int, a string, a tensor).
        ValueError: an id lies outside [0, V), or ``forbid`` blocks all V ids.
    """
    if not len(forbid):
        return logits
    blocked = torch.tensor([int(i) for i in forbid], dtype=torch.long, device=logits.device)
    return logits.index_fill(-1, blocked, float("-inf"))  # (B, V)


def _check_sample_next(logits, temperature, top_k, forbid, generator) -> None:
    """The arguments, then the logits' values: no NaN or +inf, and a finite logit left in every row
    once ``forbid`` is applied (-inf is legal: a token never drawn)."""
    *_, forbid = check_sampling(logits.shape[-1], temperature, top_k, forbid, generator)
    if not has_values(logits):
        return
    dead = torch.isneginf(logits)
    dead[:, list(forbid)] = True
    bad, no_token = torch.stack([(torch.isnan(logits) | (logits == math.inf)).any(),
                                 dead.all(-1).any()]).tolist()  # one read of the values
    if bad:
        raise ValueError("logits must not hold NaN or +inf (-inf is allowed: a token never drawn)")
    if no_token:
        raise ValueError("logits must keep a finite entry in every row once forbid is applied, got a "
                         "row of -inf only (no token left to draw)")


@checked(_check_sample_next, logits=_LOGITS)
def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                forbid: Sequence[int] = (), generator: torch.Generator | None = None) -> torch.Tensor:
    r"""Draw the next token of each row from its logits: the one sampling rule of the book.

    In this order: the ids in ``forbid`` get the logit -inf (:func:`forbid_tokens`); then
    ``temperature=0`` takes the argmax (greedy, no randomness); otherwise the logits are divided by
    the temperature :math:`\tau`, all but the ``top_k`` largest are dropped (if ``top_k`` is given)
    and one id is drawn from :math:`\mathrm{softmax}(z / \tau)` (:func:`seqbook.sampling.sample`).
    Small :math:`\tau` sharpens the distribution towards the argmax, large :math:`\tau` flattens it.
    The logits are used in float32, or in float64 when they are float64. ``generator`` makes the
    draws reproducible; the probabilities are moved to its device for the draw (a CPU generator for
    logits on a GPU).

    Shape:
        logits: (B, V) float -> ids (B,) int64 on the device of ``logits``

    Raises:
        TypeError: ``logits`` is not a float tensor, ``top_k`` is not an int, ``generator`` is not a
            ``torch.Generator``, ``forbid`` is not a sequence of ints.
        ValueError: ``logits`` is not (B, V) or holds a NaN or +inf (-inf is legal: a token that
            is never drawn), or a row has no finite logit left once ``forbid`` is applied;
            ``temperature`` is negative, NaN or infinite; ``top_k < 1``; a ``forbid`` id is
            outside [0, V) or ``forbid`` blocks every id. The logits' values are read (one GPU
            sync per call from outside the package).
    """
    z = logits if logits.dtype == torch.float64 else logits.float()  # (B, V)
    return sample(forbid_tokens(z, forbid), temperature, top_k, generator=generator)  # (B,)


# ---------------------------------------------------------------------------------------------
# Language models: a recurrent character model, a conditional one, the transformers' loop.
# ---------------------------------------------------------------------------------------------


def _check_vocab(name: str, vocab, model: nn.Module | None = None) -> None:
    """``vocab`` is a vocabulary (``itos``, ``encode``, the reserved ids) with a token besides the
    reserved ones, of the model's ``vocab_size`` when the model states one."""
    if not all(hasattr(vocab, field) for field in _VOCAB_FIELDS):
        raise TypeError(f"{name} must be a vocabulary such as seqbook.vocab.Vocab (itos, encode and the "
                        f"reserved ids), got {type(vocab).__name__}")
    reserved = {vocab.pad_id, vocab.unk_id, vocab.sos_id, vocab.eos_id}
    if len(vocab.itos) <= len(reserved):
        raise ValueError(f"{name} must hold a token besides the {len(reserved)} reserved ones, got "
                         f"{len(vocab.itos)} tokens")
    size = getattr(model, "vocab_size", None)
    if isinstance(size, int) and size != len(vocab.itos):
        raise ValueError(f"{name} must have the model's vocab_size {size} tokens, got {len(vocab.itos)}")


@contextlib.contextmanager
def _eval_mode(model: nn.Module):
    """Run the block in eval mode (no dropout), then restore the model's train/eval mode."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def _check_generate(model, vocab, prefix, temperature, generator) -> None:
    if not check_str("prefix", prefix):
        raise ValueError("prefix must hold at least one character, got ''")
    check_module("model", model)
    _check_vocab("vocab", vocab, model)
    reserved = (vocab.pad_id, vocab.unk_id, vocab.sos_id, vocab.eos_id)
    check_sampling(len(vocab.itos), temperature, forbid=reserved, generator=generator)


@checked(_check_generate, n=check_count)
@torch.no_grad()
def generate(model: nn.Module, vocab, prefix: str, n: int, temperature: float = 1.0,
             generator: torch.Generator | None = None) -> str:
    r"""Continue ``prefix`` by ``n`` characters sampled from a recurrent model, one at a time.

    The prefix is read first (its state is the context); then each sampled character is fed back
    as the next input. The next-character distribution is :math:`\mathrm{softmax}(z / \tau)` for
    logits :math:`z` and temperature :math:`\tau`: small :math:`\tau` sharpens it towards the most
    likely character (``temperature=0`` takes the argmax), large :math:`\tau` flattens it. Each
    character is drawn by :func:`sample_next` with the reserved ``<pad> <unk> <sos> <eos>``
    forbidden: the continuation is plain text. ``model`` is called as ``model(ids, state) ->
    (logits, state)`` (a :class:`seqbook.lm.CharLM`), in eval mode (its mode is restored after);
    ``vocab`` maps characters to its ids (:class:`seqbook.vocab.Vocab`). ``n = 0`` returns the prefix.

    Returns:
        ``prefix`` followed by the ``n`` generated characters.
    """
    reserved = (vocab.pad_id, vocab.unk_id, vocab.sos_id, vocab.eos_id)
    device = next(model.parameters()).device
    with _eval_mode(model):
        ids = torch.tensor([vocab.encode(list(prefix))], device=device)  # (1, T)
        logits, state = model(ids)                                        # (1, T, V)
        if state is None:  # e.g. a GPT, whose forward returns (logits, loss): no state to carry
            raise TypeError(
                f"model must carry a state from step to step (model(ids, state) -> (logits, state)), "
                f"but {type(model).__name__} returned None for it; a model that reads its whole "
                "context at every step, such as seqbook.gpt.GPT, generates with its own "
                "GPT.generate"
            )
        if logits.shape[-1] != len(vocab.itos):
            raise ValueError(f"vocab must have one token per logit of the model, {logits.shape[-1]}, "
                             f"got {len(vocab.itos)}")
        out = []
        for _ in range(n):
            nxt = int(sample_next(logits[:, -1], temperature, forbid=reserved, generator=generator)[0])
            out.append(vocab.itos[nxt])
            logits, state = model(torch.tensor([[nxt]], device=device), state)  # (1, 1, V)
    return prefix + "".join(out)


def _check_sample_sequence(model, vocab, cond, temperature, generator) -> None:
    conditional = isinstance(model, nn.Module) and callable(getattr(model, "initial_state", None))
    if not conditional or not isinstance(getattr(model, "num_conditions", None), int):
        raise TypeError(f"model must be a ConditionalCharLM (an nn.Module with initial_state and "
                        f"num_conditions), got {type(model).__name__}")
    _check_vocab("vocab", vocab, model)
    check_int("cond", cond, 0, model.num_conditions - 1)
    forbid = (vocab.pad_id, vocab.unk_id, vocab.sos_id)
    check_sampling(len(vocab.itos), temperature, forbid=forbid, generator=generator)


@checked(_check_sample_sequence, max_len=check_positive_int)
@torch.no_grad()
def sample_sequence(model: nn.Module, vocab, cond: int, max_len: int = 20, temperature: float = 1.0,
                    generator: torch.Generator | None = None) -> str:
    """Sample one sequence for class ``cond`` from a :class:`seqbook.lm.ConditionalCharLM`: feed
    ``<sos>``, then each sampled character, until the model emits ``<eos>`` (or ``max_len``
    characters, at least 1).

    Each character is drawn by :func:`sample_next` with ``<pad> <unk> <sos>`` forbidden (``<eos>``
    stays allowed: it ends the sequence); ``temperature = 0`` takes the most likely character at
    every step (greedy). The model runs in eval mode (its mode is restored after).
    """
    forbid = (vocab.pad_id, vocab.unk_id, vocab.sos_id)  # <eos> stays allowed: it ends the sequence
    device = next(model.parameters()).device
    with _eval_mode(model):
        state = model.initial_state(torch.tensor([int(cond)], device=device))
        token, out = vocab.sos_id, []
        for _ in range(max_len):
            logits, state = model(torch.tensor([[token]], device=device), state=state)  # (1, 1, V)
            token = int(sample_next(logits[:, -1], temperature, forbid=forbid, generator=generator)[0])
            if token == vocab.eos_id:
                break
            out.append(vocab.itos[token])
    return "".join(out)


def _check_generate_tokens(model, idx, temperature, top_k, forbid, generator) -> None:
    config = getattr(model, "config", None)
    if not isinstance(model, nn.Module) or not all(
            isinstance(getattr(config, k, None), int) for k in ("block_size", "vocab_size")):
        raise TypeError(f"model must be a transformer language model such as seqbook.gpt.GPT (an "
                        f"nn.Module with config.block_size and config.vocab_size), got "
                        f"{type(model).__name__}")
    check_ids("idx", idx, config.vocab_size, shape=(None, None), names="(B, T)")
    check_sampling(config.vocab_size, temperature, top_k, forbid, generator)


@checked(_check_generate_tokens, max_new_tokens=check_count, use_cache=check_flag)
@torch.no_grad()
def generate_tokens(model: nn.Module, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                    top_k: int | None = None, forbid: Sequence[int] = (),
                    generator: torch.Generator | None = None, use_cache: bool = False) -> torch.Tensor:
    """The generation loop of the transformer language models (``GPT``, ``Llama``).

    Appends ``max_new_tokens`` ids drawn by :func:`sample_next` to ``idx`` (0 returns ``idx``),
    running ``model`` in eval mode (its mode is restored afterwards) as ``model(idx[, caches=...])
    -> (logits, loss)``. With ``use_cache`` the prompt runs once into one
    :class:`~seqbook.kv_cache.KVCache` per block of ``model.blocks`` (a
    :class:`~seqbook.kv_cache.RollingKVCache` for a model with a ``sliding_window``) and each step
    runs the one new token; once the sequence outgrows ``model.config.block_size`` the window
    slides and the steps run without the cache.

    Shape:
        idx: (B, T) ids -> (B, T + max_new_tokens)
    """
    block_size, caches = model.config.block_size, None
    window = getattr(model.config, "sliding_window", None)  # a sliding window needs less
    make_cache = KVCache if window is None else partial(RollingKVCache, window=window)
    with _eval_mode(model):
        for _ in range(max_new_tokens):
            if not use_cache or idx.shape[1] > block_size:  # the whole window, every step
                logits, _ = model(idx[:, -block_size:])  # (B, T, V)
            elif caches is None:  # the prompt fills the caches
                caches = [make_cache(block_size) for _ in model.blocks]
                logits, _ = model(idx, caches=caches)  # (B, T, V)
            else:  # only the newest token runs; the earlier ones are in the caches
                logits, _ = model(idx[:, -1:], caches=caches)  # (B, 1, V)
            next_id = sample_next(logits[:, -1], temperature, top_k, forbid, generator)  # (B,)
            idx = torch.cat([idx, next_id[:, None]], dim=1)
    return idx


# ---------------------------------------------------------------------------------------------
# Encoder-decoders: greedy decoding, beam search, translation.
# ---------------------------------------------------------------------------------------------


def _check_model(model) -> None:
    """``model`` follows the decoding protocol and the reserved ids of :class:`seqbook.vocab.Vocab`."""
    if not isinstance(model, nn.Module) or not all(
            callable(getattr(model, name, None)) for name in ("encode", "decode_step")):
        raise TypeError(f"model must be a Seq2Seq or a Seq2SeqTransformer (an nn.Module with encode and "
                        f"decode_step), got {type(model).__name__}")
    pad_id = getattr(model, "pad_id", PAD_ID)
    if pad_id != PAD_ID:
        raise ValueError(f"model.pad_id must be {PAD_ID}, the <pad> of seqbook.vocab.Vocab that the "
                         f"decoders write after <eos>, got {pad_id}")


def _check_source(src, src_lengths) -> None:
    """``src`` (B, S) ids, not empty, and ``src_lengths`` (B,) in [1, S]: no length beyond ``src``."""
    check_ids("src", src, shape=(None, None), names="(B, S)")
    B, S = src.shape
    check_ids("src_lengths", src_lengths, shape=(B,), names=f"({B},)")
    check_lengths("src_lengths", src_lengths, S, of="src")


def _check_decode(model, src, src_lengths) -> None:
    """The validator of greedy decoding and beam search: an encoder-decoder and its sources."""
    _check_model(model)
    _check_source(src, src_lengths)


@checked(_check_decode, max_len=check_positive_int, return_attention=check_flag, forbid=check_forbid)
@torch.no_grad()
def greedy_decode(model: nn.Module, src: torch.Tensor, src_lengths: torch.Tensor, max_len: int,
                  return_attention: bool = False, forbid: Sequence[int] = ()):
    """Feed back the most probable token at every step, until ``<eos>`` or ``max_len`` (>= 1).

    ``model`` is a :class:`seqbook.seq2seq.Seq2Seq` or a
    :class:`~seqbook.transformer.Seq2SeqTransformer` (any model with the decoding protocol of this
    module); it runs in eval mode, and its mode is restored after. Ids in ``forbid`` are never
    emitted (:func:`forbid_tokens`); the argmax is :func:`sample_next` at temperature 0.

    Shape:
        src: (B, S) int64 ids, src_lengths: (B,) in 1..S -> ys (B, L) with L <= max_len
        [, attention (B, L, S) or None]

    Returns:
        ``ys`` (B, L) int64 with L <= ``max_len``: each row's tokens, its ``<eos>`` (if it
        emitted one within ``max_len`` steps) and ``<pad>`` after it. Decoding stops as soon as
        every row has emitted ``<eos>``. With ``return_attention`` also the attention weights
        (B, L, S), zero after a row's ``<eos>`` (None for a model without attention; for the
        transformer, the last decoder layer's cross-attention averaged over its heads).
    """
    B, device = src.shape[0], src.device
    with _eval_mode(model):
        with readers_code():  # the reader's source enters the reader's model: its checks run
            memory = model.encode(src, src_lengths)
        state, y = None, torch.full((B,), SOS_ID, dtype=torch.long, device=device)
        done = torch.zeros(B, dtype=torch.bool, device=device)
        ys, attention = [], []
        for step in range(max_len):
            logits, state, *weights = model.decode_step(y, state, memory, need_weights=return_attention)
            if step == 0:
                check_forbid("forbid", forbid, logits.shape[-1])  # the target vocabulary is known now
            y = sample_next(logits, temperature=0.0, forbid=forbid).masked_fill(done, PAD_ID)  # (B,)
            ys.append(y)
            if weights and weights[0] is not None:
                attention.append(weights[0].masked_fill(done[:, None], 0.0))  # (B, S)
            done = done | (y == EOS_ID)
            if bool(done.all()):
                break
    ys = torch.stack(ys, 1)                                            # (B, L)
    if return_attention:
        return ys, (torch.stack(attention, 1) if attention else None)  # (B, L, S)
    return ys


def _rows(x, index: torch.Tensor):
    """Index the rows (dim 0) of a tensor, or of each tensor in a (named) tuple; None stays None."""
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        return x[index]
    items = [_rows(t, index) for t in x]
    return x._make(items) if hasattr(x, "_make") else type(x)(items)


def _length_penalty(lengths: torch.Tensor, alpha: float, dtype: torch.dtype) -> torch.Tensor:
    """lp(y) = ((5 + |y|) / 6) ** alpha of Wu et al. (2016); exactly 1 for alpha = 0."""
    return ((5.0 + lengths.to(dtype)) / 6.0) ** alpha


@checked(_check_decode, beam_width=check_positive_int, max_len=check_positive_int,
         return_scores=check_flag, length_penalty=partial(check_number, low=0.0), forbid=check_forbid)
@torch.no_grad()
def beam_search(model: nn.Module, src: torch.Tensor, src_lengths: torch.Tensor, beam_width: int,
                max_len: int, return_scores: bool = False, length_penalty: float = 0.0,
                forbid: Sequence[int] = ()):
    r"""Keep the ``beam_width`` most probable prefixes at every step; return the best sequence.

    A prefix scores the sum of the log-probabilities of its tokens. At each step every live
    prefix is extended by every token, and the ``beam_width`` best extensions per source
    survive. A prefix that emitted ``<eos>`` is finished: it keeps its score (later steps
    append ``<pad>`` at no cost), so it competes fairly with the live ones, whose scores can
    only fall. The search stops when every kept prefix has finished, or after ``max_len`` steps
    (>= 1). ``beam_width=1`` is greedy decoding; a ``beam_width`` above the vocabulary size is legal
    (the extra beams stay at -inf). Scores are float32, or float64 for a float64 model.

    **Length normalisation.** With ``length_penalty`` :math:`\alpha > 0`, prefixes are ranked (and
    the best one chosen) by :math:`\log p(y \mid x) / \mathrm{lp}(y)` with
    :math:`\mathrm{lp}(y) = ((5 + |y|) / 6)^\alpha` (Wu et al., 2016), :math:`|y|` the tokens written,
    ``<eos>`` included. Live prefixes all have the same length, so it changes only how finished
    prefixes compare with live ones and with each other; larger :math:`\alpha` favours longer
    outputs. ``length_penalty=0`` (the default) ranks by the raw sum.

    ``model`` is a :class:`seqbook.seq2seq.Seq2Seq` or a
    :class:`~seqbook.transformer.Seq2SeqTransformer` (any model with the decoding protocol of this
    module), run in eval mode (its mode is restored after). Ids in ``forbid`` never extend a prefix
    (:func:`forbid_tokens`).

    Shape:
        src: (B, S) int64 ids, src_lengths: (B,) in 1..S -> ys (B, L) with L <= max_len [, scores (B,)]

    Returns:
        ``ys`` (B, L), laid out as in :func:`greedy_decode`; with ``return_scores`` also the
        log-probability of each returned sequence (B,), the raw sum, whatever ``length_penalty``.
    """
    B, K, alpha, dev = src.shape[0], int(beam_width), float(length_penalty), src.device
    param = next(model.parameters(), None)
    dtype = torch.float64 if param is not None and param.dtype == torch.float64 else torch.float32  # scores
    offset = torch.arange(B, device=dev)[:, None] * K                  # (B, 1): first beam of each source
    with _eval_mode(model):
        with readers_code():  # the reader's source enters the reader's model: its checks run
            memory = model.encode(src, src_lengths)
        memory = _rows(memory, torch.arange(B, device=dev).repeat_interleave(K))
        y = torch.full((B * K,), SOS_ID, dtype=torch.long, device=dev)  # the beams of a source side by side
        state = None
        scores = torch.full((B, K), float("-inf"), dtype=dtype, device=dev)
        scores[:, 0] = 0.0                                             # the K start beams are one beam
        lengths = torch.zeros(B * K, dtype=torch.long, device=dev)     # tokens written, <eos> included
        done = torch.zeros(B * K, dtype=torch.bool, device=dev)
        ys = torch.zeros(B * K, 0, dtype=torch.long, device=dev)
        for step in range(max_len):
            logits, state = model.decode_step(y, state, memory)
            if step == 0:
                check_forbid("forbid", forbid, logits.shape[-1])  # the target vocabulary is known now
            logp = torch.log_softmax(forbid_tokens(logits.to(dtype), forbid), dim=-1)  # (B*K, V)
            V = logp.shape[-1]
            finished = torch.full_like(logp, float("-inf"))
            finished[:, PAD_ID] = 0.0                                  # a finished beam only pads, for free
            logp = torch.where(done[:, None], finished, logp)
            candidates = (scores.view(B * K, 1) + logp).view(B, K * V)  # every beam times every token
            grown = (lengths + ~done).view(B, K, 1).expand(B, K, V).reshape(B, K * V)  # their lengths
            ranks, index = (candidates / _length_penalty(grown, alpha, dtype)).topk(K, dim=-1)  # (B, K)
            scores = candidates.gather(1, index)                       # (B, K): the raw sums
            parent = (index // V + offset).view(-1)                    # (B*K,) the beam each one extends
            y = (index % V).view(-1)                                   # (B*K,) the token it appends
            state, done, ys = _rows(state, parent), done[parent], torch.cat([ys[parent], y[:, None]], 1)
            lengths = grown.gather(1, index).view(-1)
            done = done | (y == EOS_ID)
            if bool(done.all()):
                break
    best = ranks.argmax(-1)                                            # (B,)
    ys = ys[best + offset.squeeze(1)]                                  # (B, L)
    return (ys, scores.gather(1, best[:, None]).squeeze(1)) if return_scores else ys


def _check_translate(model, sources, src_vocab, tgt_vocab, forbid) -> None:
    if isinstance(sources, str):
        raise ValueError("sources must be a list of strings, got one string")
    _check_model(model)
    if not isinstance(sources, Sequence) or not all(isinstance(x, str) for x in sources):
        raise TypeError(f"sources must be a list of strings, got {type(sources).__name__}")
    _check_vocab("src_vocab", src_vocab)
    _check_vocab("tgt_vocab", tgt_vocab)
    check_forbid("forbid", forbid, len(tgt_vocab.itos))  # also when there is nothing to translate


def _text(ids: list[int], vocab) -> str:
    """The tokens of ``ids`` up to the first ``<eos>``, ``<pad>`` and ``<sos>`` left out."""
    if EOS_ID in ids:
        ids = ids[: ids.index(EOS_ID)]
    return "".join(vocab.itos[i] for i in ids if i not in (PAD_ID, SOS_ID))


@checked(_check_translate, max_len=check_positive_int, beam_width=check_positive_int,
         batch_size=check_positive_int, length_penalty=partial(check_number, low=0.0))
@torch.no_grad()
def translate(model: nn.Module, sources: Sequence[str], src_vocab, tgt_vocab, max_len: int,
              beam_width: int = 1, batch_size: int = 512, length_penalty: float = 0.0,
              forbid: Sequence[int] = ()) -> list[str]:
    """Translate strings with a :class:`seqbook.seq2seq.Seq2Seq` or a
    :class:`~seqbook.transformer.Seq2SeqTransformer`: greedy decoding (``beam_width=1``) or beam
    search (with ``length_penalty``), in batches.

    Each source is encoded with ``src_vocab`` character by character and ``<eos>`` (as
    :func:`seqbook.batching.encode_pairs` does), decoded with :func:`greedy_decode` or
    :func:`beam_search` on the model's device (in eval mode; the mode is restored after), and read
    back with ``tgt_vocab`` up to the first ``<eos>`` (as :func:`seqbook.vocab.decode_ids` does). The
    vocabularies are :class:`seqbook.vocab.Vocab` s (or alike). Ids in ``forbid`` are never emitted.

    Returns:
        one string per source, in order.
    """
    device = next(model.parameters()).device
    out: list[str] = []
    for start in range(0, len(sources), batch_size):
        chunk = sources[start : start + batch_size]
        rows = [torch.tensor(src_vocab.encode(list(s), add_eos=True)) for s in chunk]  # <eos> ends each
        src_lengths = torch.tensor([len(row) for row in rows], device=device)          # (B,)
        src = nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=PAD_ID)  # (B, S)
        src = src.to(device)
        if beam_width == 1:
            ys = greedy_decode(model, src, src_lengths, max_len, forbid=forbid)
        else:
            ys = beam_search(model, src, src_lengths, beam_width, max_len, length_penalty=length_penalty,
                             forbid=forbid)
        out += [_text(row, tgt_vocab) for row in ys.tolist()]
    return out
