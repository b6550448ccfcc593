"""Choosing the next token: the rules that reshape a model's logits before a token is drawn.

Each rule takes logits ``(..., V)`` (any leading dims, one distribution per row over the last
axis) and returns new logits of the same shape and dtype in which the tokens it removes hold
``-inf``, so that a softmax gives them probability 0; the input is never changed in place. These
are the logits warpers of Hugging Face's ``generate`` (``filter_value=-inf``), and the tests check
each against its twin in ``transformers.generation.logits_process`` value for value:

    z = temperature(logits, 0.8)    # logits / t                   (TemperatureLogitsWarper)
    z = top_k(z, 50)                # the k largest, ties kept      (TopKLogitsWarper)
    z = top_p(z, 0.9)               # the nucleus of mass p          (TopPLogitsWarper)
    z = min_p(z, 0.05)              # p_i >= p * max p               (MinPLogitsWarper)
    ids = torch.multinomial(torch.softmax(z, -1), 1)

:func:`warp` applies them in that order (Hugging Face's) and :func:`sample` draws one id per row
from the result (``temperature=0``: the argmax). A ``-inf`` logit in the input is a token that is
already removed; every row must keep at least one finite logit, and every rule keeps at least the
most probable token of a row.
"""

from __future__ import annotations

from functools import partial

import torch

from .checks import (
    check_generator,
    check_logits,
    check_number,
    check_positive_int,
    checked,
    optional,
)

__all__ = ["temperature", "top_k", "top_p", "min_p", "WARPERS", "warp", "sample"]


def _check_t(name: str, t, allow_zero: bool = False) -> None:
    """A temperature: a finite number > 0 (>= 0 where 0 means greedy)."""
    t = check_number(name, t, low=0.0)
    if t == 0 and not allow_zero:
        raise ValueError(f"{name} must be > 0, got 0.0 (t = 0 is greedy decoding: take "
                         f"logits.argmax(-1), or call sample(logits, temperature=0))")


def _check_temperature(logits, t) -> None:
    check_logits("logits", logits)
    _check_t("t", t)


@checked(_check_temperature)
def temperature(logits: torch.Tensor, t: float) -> torch.Tensor:
    r"""Temperature: divide the logits by :math:`t > 0` (Ackley, Hinton and
    Sejnowski, 1985, "A Learning Algorithm for Boltzmann Machines").

    .. math:: z'_i = z_i / t, \qquad
              \mathrm{softmax}(z')_i = e^{z_i / t} / \textstyle\sum_j e^{z_j / t}

    :math:`t < 1` sharpens the distribution towards the most probable token,
    :math:`t > 1` flattens it towards uniform; no token is removed (a ``-inf`` stays
    ``-inf``). The limit :math:`t \to 0` is greedy decoding, which the caller does as
    ``logits.argmax(-1)`` (:func:`sample` with ``temperature=0``); ``t = 0`` itself is
    refused here.

    Shape:
        logits: (..., V) float; t: a number > 0 -> (..., V), the dtype of ``logits``
    """
    return logits / t


@checked(logits=check_logits, k=check_positive_int)
def top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    r"""Top-k: keep the k largest logits of each row (Fan, Lewis and Dauphin, 2018,
    "Hierarchical Neural Story Generation").

    .. math:: z'_i = \begin{cases} z_i & z_i \ge z_{(k)} \\
              -\infty & \text{otherwise} \end{cases}

    where :math:`z_{(k)}` is the k-th largest logit of the row. Tokens tied with the
    k-th largest are all kept, so a row may keep more than k; ``k >= V`` keeps all.

    Shape:
        logits: (..., V) float; k: an int >= 1 -> (..., V), the dtype of ``logits``
    """
    k = min(k, logits.shape[-1])
    kth = logits.topk(k, dim=-1).values[..., -1:]           # (..., 1): k-th largest
    return logits.masked_fill(logits < kth, float("-inf"))  # (..., V)


@checked(logits=check_logits, p=partial(check_number, low=0.0, high=1.0, low_open=True))
def top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    r"""Top-p (nucleus) sampling: keep the most probable tokens whose probability
    sums to at least p (Holtzman, Buys, Du, Forbes and Choi, 2020, "The Curious Case of
    Neural Text Degeneration").

    With the logits sorted, :math:`z_{(1)} \ge z_{(2)} \ge \dots \ge z_{(V)}`, and
    :math:`\pi = \mathrm{softmax}(z)`:

    .. math:: m = \min \{ m : \textstyle\sum_{j \le m} \pi_{(j)} \ge p \}, \qquad
              z'_i = \begin{cases} z_i & z_i \ge z_{(m)} \\
              -\infty & \text{otherwise} \end{cases}

    The token whose probability carries the sum across p is kept, and so is the most
    probable token, whatever p. As Hugging Face's ``TopPLogitsWarper`` computes it, the
    tail is summed from the least probable token up and a token goes while that sum is
    at most :math:`1 - p`; so ``p = 1`` still removes the tokens whose probability is 0
    in the logits' dtype (an underflow), as that warper does.

    Ties: all tokens tied with :math:`z_{(m)}` are kept, as :func:`top_k` keeps its
    ties, so the result does not depend on the order of the ids. Hugging Face breaks
    such a tie by the order of an unstable ``torch.sort`` (it may keep some of the tied
    tokens only); the two agree on every row where no tie straddles the cut.

    Shape:
        logits: (..., V) float; p: a number in (0, 1] -> (..., V), dtype of ``logits``
    """
    ascending = logits.sort(dim=-1).values                    # (..., V)
    tail = ascending.softmax(dim=-1).cumsum(dim=-1)           # (..., V): mass so far
    removed = (tail <= 1 - p).sum(dim=-1, keepdim=True)       # (..., 1): a prefix goes
    removed = removed.clamp(max=logits.shape[-1] - 1)         # keep the top token
    least = ascending.gather(-1, removed)                     # (..., 1): z_(m)
    return logits.masked_fill(logits < least, float("-inf"))  # (..., V)


@checked(logits=check_logits, p=partial(check_number, low=0.0, high=1.0))
def min_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    r"""Min-p sampling: remove the tokens less than p times as probable as the most
    probable one (Nguyen, Baker, Neo, Roush, Kirsch and Shwartz-Ziv, 2024, "Turning Up
    the Heat: Min-p Sampling for Creative and Coherent LLM Outputs").

    .. math:: \pi = \mathrm{softmax}(z), \qquad
              z'_i = \begin{cases} z_i & \pi_i \ge p \max_j \pi_j \\
              -\infty & \text{otherwise} \end{cases}

    The cut scales with the model's confidence: a peaked row keeps few tokens, a flat
    row many. ``p = 0`` keeps every token, ``p = 1`` only those tied with the top one.

    Shape:
        logits: (..., V) float; p: a number in [0, 1] -> (..., V), dtype of ``logits``
    """
    probs = logits.softmax(dim=-1)                            # (..., V)
    cutoff = p * probs.amax(dim=-1, keepdim=True)             # (..., 1)
    return logits.masked_fill(probs < cutoff, float("-inf"))  # (..., V)


#: The rules in the order :func:`warp` applies them: Hugging Face's order in ``generate``.
WARPERS = (temperature, top_k, top_p, min_p)


# The rules' arguments of warp and sample, each None (the rule is skipped) or as top_k, top_p and
# min_p take it.
_RULES = {"top_k": optional(check_positive_int),
          "top_p": optional(partial(check_number, low=0.0, high=1.0, low_open=True)),
          "min_p": optional(partial(check_number, low=0.0, high=1.0))}


def _check_warp(logits, temperature) -> None:
    check_logits("logits", logits)
    _check_t("temperature", temperature)


@checked(_check_warp, **_RULES)
def warp(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
         top_p: float | None = None, min_p: float | None = None) -> torch.Tensor:
    r"""The logits :func:`sample` draws from: the rules of :data:`WARPERS` one after
    the other, in Hugging Face's order (temperature, top-k, top-p, min-p); ``None``
    skips a rule.

    .. math:: z' = \mathrm{min\_p}(\mathrm{top\_p}(\mathrm{top\_k}(z / t, k), p),
              p_{\min})

    Each rule sees the logits the previous one left, so top-p and min-p measure
    probabilities after the temperature and after top-k's cut.

    Shape:
        logits: (..., V) float -> (..., V), the dtype of ``logits``
    """
    z = logits
    for rule, arg in zip(WARPERS, (temperature, top_k, top_p, min_p), strict=True):
        if arg is not None:
            z = rule(z, arg)  # checked once, by warp
    return z


def _check_sample(logits, temperature) -> None:
    _check_t("temperature", temperature, allow_zero=True)
    check_logits("logits", logits)


@checked(_check_sample, **_RULES, generator=check_generator)
def sample(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
           top_p: float | None = None, min_p: float | None = None,
           generator: torch.Generator | None = None) -> torch.Tensor:
    r"""Draw one token id per row: :func:`warp` the logits, then draw from their
    softmax.

    .. math:: y \sim \mathrm{softmax}(z'), \qquad z' = \mathrm{warp}(z)

    ``temperature=0`` is greedy decoding, :math:`y = \arg\max_i z_i` (the first id of
    a tie), with no randomness: no rule ever removes the most probable token, so the
    filters cannot change it. The logits are used in float32, or in float64 when they
    are float64 (as ``generate`` does). ``generator`` makes the draws reproducible; the
    probabilities go to its device for the draw, the ids to the device of ``logits``.

    Shape:
        logits: (..., V) float -> ids (...) int64
    """
    if temperature == 0:
        return logits.argmax(dim=-1)                           # (...): greedy
    z = logits if logits.dtype == torch.float64 else logits.float()
    z = warp(z, temperature, top_k, top_p, min_p)              # checked once, by sample
    probs = z.softmax(dim=-1).reshape(-1, z.shape[-1])         # (N, V): N rows
    on = generator.device if generator is not None else probs.device
    ids = torch.multinomial(probs.to(on), 1, generator=generator)  # (N, 1)
    return ids.reshape(logits.shape[:-1]).to(logits.device)    # (...)
