"""Multi-query associative recall (MQAR; Arora et al., 2023, "Zoology").

A sequence shows ``num_pairs`` key-value pairs, then asks for the values of
``num_queries`` of the keys. Arora et al. found that how well a model does this is what
separates attention from the models with a state of fixed size: attention keeps every
pair and looks the key up; a recurrent model must have squeezed every pair into its
state before the first query comes, and a state of a given size holds only so many.

Here a pair is one position, its key and its value two ids embedded side by side, so
that one layer can solve the task (in Zoology's token sequences, ``k1 v1 k2 v2 ...``, a
model first has to join each value to the key before it). The layout of one sequence
of ``T = num_pairs + num_queries`` positions::

    keys:     k_1 ... k_n    q_1 ... q_m       n distinct keys, then m of them again
    values:   v_1 ... v_n    blank ... blank   blank = num_values: no value given
    targets:  -100 ... -100  v(q_1) ... v(q_m) the value stored with q_j; -100 = no loss

The queries draw their keys from the n pairs at random (with replacement), so chance is
``1 / num_values`` at every query.
"""

from __future__ import annotations

import torch

from .checks import check_generator, check_int, check_positive_int, checked

__all__ = ["mqar", "mqar_updates"]


def _check_mqar(num_pairs, num_keys) -> None:
    n = check_int("num_pairs", num_pairs, 1)
    num_keys = check_int("num_keys", num_keys, 1)
    if n > num_keys:
        raise ValueError(f"num_pairs must be <= num_keys={num_keys} (the keys of a "
                         f"sequence are distinct), got {n}")


@checked(_check_mqar, batch_size=check_positive_int, num_queries=check_positive_int,
         num_values=check_positive_int, generator=check_generator)
def mqar(num_pairs: int, batch_size: int, num_queries: int = 16, num_keys: int = 128,
         num_values: int = 16, generator: torch.Generator | None = None
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of multi-query associative recall (Arora et al., 2023).

    Each sequence holds ``num_pairs`` pairs of a key (distinct within the sequence,
    from ``num_keys``) and a value (from ``num_values``), then ``num_queries``
    positions that repeat one of the keys with the blank value id ``num_values``. The
    target of a query is the value stored with its key; the pairs have the target
    -100, the ``ignore_index`` of ``F.cross_entropy``.

    Args:
        num_pairs: key-value pairs before the queries, at most ``num_keys``.
        batch_size: number of sequences.
        num_queries: queries after the pairs.
        num_keys: size of the key vocabulary.
        num_values: size of the value vocabulary; the id ``num_values`` is the blank.
        generator: the random numbers, for a reproducible batch.

    Returns:
        ``keys``, ``values`` and ``targets``, int64.

    Shape:
        keys, values, targets: (batch_size, num_pairs + num_queries).
    """
    B, n, m = batch_size, num_pairs, num_queries
    keys = torch.rand(B, num_keys, generator=generator).argsort(dim=-1)[:, :n]  # (B, n)
    values = torch.randint(num_values, (B, n), generator=generator)        # (B, n)
    pick = torch.randint(n, (B, m), generator=generator)   # the pair each query asks
    query_keys = keys.gather(1, pick)                                      # (B, m)
    blank = torch.full_like(query_keys, num_values)                        # (B, m)
    ignored = torch.full_like(keys, -100)                                  # (B, n)
    return (torch.cat([keys, query_keys], dim=1),                          # (B, n + m)
            torch.cat([values, blank], dim=1),
            torch.cat([ignored, values.gather(1, pick)], dim=1))


def _check_mqar_updates(num_writes, writes_per_key, num_keys) -> None:
    n = check_int("num_writes", num_writes, 1)
    r = check_int("writes_per_key", writes_per_key, 1)
    if n % r:
        raise ValueError(f"num_writes must be a multiple of writes_per_key={r}, got {n}")
    num_keys = check_int("num_keys", num_keys, 1)
    if n // r > num_keys:
        raise ValueError(f"num_writes / writes_per_key (the distinct keys of a sequence) must "
                         f"be <= num_keys={num_keys}, got {n} / {r}")


@checked(_check_mqar_updates, batch_size=check_positive_int, num_queries=check_positive_int,
         num_values=check_positive_int, generator=check_generator)
def mqar_updates(num_writes: int, batch_size: int, writes_per_key: int = 2,
                 num_queries: int = 16, num_keys: int = 128, num_values: int = 16,
                 generator: torch.Generator | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Multi-query associative recall in which keys are written again with new values.

    As :func:`mqar`, but the ``num_writes`` positions before the queries write
    ``num_writes // writes_per_key`` distinct keys ``writes_per_key`` times each, in a
    random order, each time with a value drawn afresh (so the two values of a key differ
    ``1 - 1 / num_values`` of the time); the target of a query is the value of its key's
    *last* write. A memory that adds every write on top of the others
    returns a mix of a key's old and new values; one that overwrites returns the new
    one. A model without positions cannot tell which of two equal keys came last from
    the keys alone.

    Args:
        num_writes: key-value writes before the queries, a multiple of ``writes_per_key``.
        batch_size: number of sequences.
        writes_per_key: how often each key is written.
        num_queries, num_keys, num_values, generator: as :func:`mqar` (the keys of a
            sequence are ``num_writes // writes_per_key`` distinct ids).

    Returns:
        ``keys``, ``values`` and ``targets``, int64, laid out as :func:`mqar`'s.

    Shape:
        keys, values, targets: (batch_size, num_writes + num_queries).
    """
    B, n, m = batch_size, num_writes, num_queries
    d = n // writes_per_key                                                # distinct keys
    distinct = torch.rand(B, num_keys, generator=generator).argsort(dim=-1)[:, :d]
    order = torch.rand(B, n, generator=generator).argsort(dim=-1)         # (B, n)
    keys = distinct.repeat(1, writes_per_key).gather(1, order)            # (B, n)
    values = torch.randint(num_values, (B, n), generator=generator)        # (B, n)
    pick = torch.randint(d, (B, m), generator=generator)
    query_keys = distinct.gather(1, pick)                                  # (B, m)
    written = keys[:, None, :] == query_keys[:, :, None]                   # (B, m, n)
    position = torch.arange(n, device=keys.device).expand_as(written)
    last = torch.where(written, position, -1).amax(dim=-1)                 # (B, m)
    blank = torch.full_like(query_keys, num_values)
    ignored = torch.full_like(keys, -100)
    return (torch.cat([keys, query_keys], dim=1),
            torch.cat([values, blank], dim=1),
            torch.cat([ignored, values.gather(1, last)], dim=1))
