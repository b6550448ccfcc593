r"""Speculative decoding (Leviathan et al., 2023; Chen et al., 2023): a cheap draft model guesses the
next ``k`` tokens, the model scores all of them in one forward pass, and the tokens it keeps are
distributed exactly as its own samples.

Generating one token costs the model a whole forward pass, yet a pass over ``k + 1`` new positions
costs little more than a pass over one whenever the pass is bound by overhead or by reading the
weights rather than by arithmetic. A draft ``q`` proposes :math:`x_1, \dots, x_k`; the model gives
:math:`p_1, \dots, p_{k+1}` in one pass; :func:`verify` keeps :math:`x_i` with probability

.. math::  \min\!\big(1,\; p_i(x_i) / q_i(x_i)\big)

until the first rejection, where it draws the replacement from the residual
:math:`\max(p_i - q_i, 0)` normalised. If every guess is kept it draws one more token from
:math:`p_{k+1}`. Each round emits between 1 and ``k + 1`` tokens, and every token emitted has the
distribution :math:`p` of the model (temperature included): the draft changes the speed, never the
text's distribution. At temperature 0 the distributions are one-hot and the rounds reproduce greedy
decoding token for token.

- :func:`probabilities`: the next-token distribution at a temperature (0: all mass on the argmax).
- :func:`verify`: one round's accept/reject step, the twin of Hugging Face's speculative sampling.
- :func:`speculative_generate`: the whole loop, for one sequence, with the number of passes of the
  model it took.

Any language model with ``forward(idx) -> (logits, ...)`` can be the draft; chapter 6 uses
:class:`seqbook.lm.BigramLM`, a table of pair counts.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .checks import (
    check_count,
    check_flag,
    check_float_tensor,
    check_generator,
    check_ids,
    check_logits,
    check_module,
    check_number,
    check_positive_int,
    check_token_ids,
    checked,
)
from .kv_cache import KVCache

__all__ = ["probabilities", "verify", "speculative_generate"]


@checked(logits=check_logits, temperature=partial(check_number, low=0.0))
def probabilities(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    r"""The next token's distribution, :math:`\operatorname{softmax}(z / \tau)`, over the last dim;
    :math:`\tau = 0` puts all the mass on the largest logit (the first of a tie): greedy decoding.

    Shape:
        logits: (..., V) -> (..., V)
    """
    if temperature == 0:  # greedy: one-hot at the argmax
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    return (logits / temperature).softmax(-1)


def _check_verify(p, q, drafted) -> None:
    k = drafted.shape[0]
    check_float_tensor("q", q, shape=(k, p.shape[1]), names=f"(k, V) = ({k}, {p.shape[1]})",
                       nonempty=False)
    check_ids("drafted", drafted, p.shape[1], nonempty=False)
    if k and bool((q.gather(1, drafted[:, None]) <= 0).any()):
        raise ValueError("q must give every drafted token a probability > 0 (the draft drew them "
                         "from q), found one with 0")
    if p.shape[0] != k + 1:
        raise ValueError(f"p must have k + 1 = {k + 1} rows (one per drafted token and one more), "
                         f"got {p.shape[0]}")


@checked(_check_verify, p=partial(check_float_tensor, ndim=2, names="(k + 1, V)"),
         drafted=partial(check_ids, ndim=1, names="(k,)", nonempty=False), generator=check_generator)
def verify(
    p: torch.Tensor,
    q: torch.Tensor,
    drafted: torch.Tensor,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""One round of speculative sampling: keep each drafted token :math:`x_i` with probability
    :math:`\min(1, p_i(x_i) / q_i(x_i))` until the first rejection; there draw from
    :math:`\max(p_i - q_i, 0)` normalised, or, if all ``k`` are kept, from :math:`p_{k+1}`.

    ``p`` holds the model's distributions after each drafted prefix (row ``i`` predicts the token
    after ``i`` drafted tokens), ``q`` the draft's. Draws ``k`` uniforms, then one token, in the
    order Hugging Face's ``_speculative_sampling`` does, so with the same random state the two
    emit the same tokens.

    Returns:
        the emitted tokens: the ``n`` kept drafts and one drawn token, ``n + 1`` in all.

    Shape:
        p: (k + 1, V), q: (k, V), drafted: (k,) -> (n + 1,), 0 <= n <= k
    """
    k = drafted.shape[0]
    rows = torch.arange(k, device=p.device)
    ratio = p[rows, drafted] / q[rows, drafted]  # (k,): p_i(x_i) / q_i(x_i)
    u = torch.rand(k, generator=generator, dtype=p.dtype, device=p.device)  # (k,)
    n = int((u < ratio).cumprod(0).sum())  # the drafts kept before the first rejection
    if n < k:  # rejected at n: draw from where p has more mass than q
        residual = (p[n] - q[n]).clamp(min=0)  # (V,)
        if residual.sum() == 0:  # p = q up to rounding: nothing to correct
            residual = p[n]
        last = residual / residual.sum()
    else:  # every draft kept: one more token from the model
        last = p[k]  # (V,)
    token = torch.multinomial(last, 1, generator=generator)  # (1,)
    return torch.cat([drafted[:n], token])


def _check_speculative(model, draft, idx, max_new_tokens, use_cache) -> None:
    sizes = {}
    for name, m in (("model", model), ("draft", draft)):
        check_module(name, m)
        sizes[name] = getattr(getattr(m, "config", None), "vocab_size", getattr(m, "vocab_size", None))
        if not isinstance(sizes[name], int):
            raise TypeError(f"{name} must be a language model with a vocab_size (or config.vocab_size), "
                            f"got {type(m).__name__}")
    if sizes["draft"] != sizes["model"]:
        raise ValueError(f"draft must have the model's vocab_size {sizes['model']}, got {sizes['draft']}")
    check_token_ids("idx", idx, sizes["model"])  # (B, T), not empty
    if idx.shape[0] != 1:
        raise ValueError(f"idx must hold one non-empty sequence, shape (1, T), got {tuple(idx.shape)}")
    for name, m in (("model", model), ("draft", draft)):
        block = getattr(getattr(m, "config", None), "block_size", None)
        if isinstance(block, int) and idx.shape[1] + max_new_tokens - 1 > block:
            raise ValueError(f"idx's {idx.shape[1]} tokens and max_new_tokens={max_new_tokens} must fit "
                             f"in {name}'s block_size {block} (T + max_new_tokens - 1 <= {block}): "
                             f"this loop never slides the window")
    if use_cache and not isinstance(getattr(model, "blocks", None), nn.ModuleList):
        raise TypeError(f"use_cache=True needs a model with one attention block per KVCache in "
                        f"model.blocks (a GPT or a Llama), got {type(model).__name__}")


@checked(_check_speculative, max_new_tokens=check_count, k=check_positive_int,
         temperature=partial(check_number, low=0.0), generator=check_generator,
         use_cache=check_flag)
@torch.no_grad()
def speculative_generate(
    model: nn.Module,
    draft: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    k: int = 4,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    use_cache: bool = False,
) -> tuple[torch.Tensor, int]:
    """Extend one sequence by ``max_new_tokens`` tokens drawn from ``model`` at ``temperature``,
    with ``draft`` guessing up to ``k`` tokens per round (:func:`verify`).

    Each round the draft proposes its tokens one at a time, the model runs once over the sequence
    and the proposals, and :func:`verify` keeps some and draws one. The tokens are distributed as
    the model's own samples (``temperature=0``: its greedy tokens, exactly). Both models run as
    they are (call ``eval()`` first on a model with dropout); the sequence must fit in their
    ``block_size``.

    Without a cache every pass of the model runs the whole sequence. ``use_cache=True`` keeps the
    model's keys and values in one :class:`~seqbook.kv_cache.KVCache` per block: a pass runs only
    the positions the caches lack (the prompt at first, then the last token emitted and the new
    guesses), and after :func:`verify` each cache forgets the rejected guesses by moving its
    ``length`` back. The draft always reads the whole sequence.

    Returns:
        ``(ids, passes)``: the sequence (1, T + max_new_tokens) and how many forward passes of the
        model it took.

    Shape:
        idx: (1, T) -> (1, T + max_new_tokens)
    """
    end, passes = idx.shape[1] + max_new_tokens, 0
    caches = [KVCache(end) for _ in model.blocks] if use_cache else None
    while idx.shape[1] < end:
        guesses = min(k, end - idx.shape[1] - 1)  # never guess past the end
        x, q = idx, []
        for _ in range(guesses):  # the draft proposes, one token at a time
            q.append(probabilities(draft(x)[0][0, -1], temperature))  # (V,)
            token = torch.multinomial(q[-1], 1, generator=generator)  # (1,)
            x = torch.cat([x, token[None]], dim=1)
        if use_cache:  # one pass over the positions the caches lack
            logits = model(x[:, caches[0].length :], caches=caches)[0]
        else:  # one pass over the whole sequence
            logits = model(x)[0]
        p = probabilities(logits[0, -(guesses + 1) :], temperature)  # (guesses + 1, V)
        q = torch.stack(q) if q else p[:0]  # (guesses, V)
        new = verify(p, q, x[0, idx.shape[1] :], generator)  # (n + 1,)
        if use_cache:  # forget the rejected guesses: keep idx and the n kept ones
            for cache in caches:
                cache.length = idx.shape[1] + len(new) - 1
        idx, passes = torch.cat([idx, new[None]], dim=1), passes + 1
    return idx, passes
