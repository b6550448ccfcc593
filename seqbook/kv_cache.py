"""A key-value cache for generation (Pope et al., 2023; Shazeer, 2019).

A decoder-only model generates one token at a time. Without a cache, every step runs the whole
prefix through every layer again, although the keys and values of the earlier tokens have not
changed: step t costs a full forward pass over t tokens. With a cache, each attention layer keeps
the keys and values it has computed, and a step only projects the one new token and attends from
it to everything kept so far. The cache of one layer holds two tensors of shape
(B, H, T_max, D_h), so a model of ``n_layer`` layers and width ``D = H * D_h`` keeps::

    2 * n_layer * B * T_max * D  numbers                                  (the cache's memory)

:class:`KVCache` allocates that memory once, for ``max_len`` positions, and fills it as the
sequence grows (:meth:`KVCache.append` writes into it and returns views, no copies of the past).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import torch

from .checks import check_positive_int, check_tensor, checked

__all__ = ["KVCache", "RollingKVCache", "check_cache", "check_caches", "check_window"]


class KVCache:
    """The keys and values one attention layer has computed so far, for up to ``max_len`` positions.

    The attention of a GPT block (:class:`~seqbook.gpt.CausalSelfAttention`) takes it as
    ``cache``: it appends the keys and values of the new tokens and attends over all of them.
    :meth:`seqbook.gpt.GPT.generate` makes one per layer (``use_cache=True``). Setting ``length``
    back forgets the positions after it: the next :meth:`append` writes over them (how
    :func:`seqbook.speculative.speculative_generate` takes back the guesses it rejected).
    For sliding-window attention, :class:`RollingKVCache` keeps only the positions the window
    can still reach.

    Shape:
        keys, values: (B, H, max_len, D_h), of which the first ``length`` positions are filled.
    """

    @checked(max_len=check_positive_int)
    def __init__(self, max_len: int):
        self.max_len = int(max_len)
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.length = 0

    def _check_append(self, k, v) -> None:
        B, H, T, _ = k.shape
        if self.keys is not None and (k.shape[:2] != self.keys.shape[:2] or k.shape[-1] != self.keys.shape[-1]
                                      or v.shape[-1] != self.values.shape[-1]):
            raise ValueError(f"k must have shape ({self.keys.shape[0]}, {self.keys.shape[1]}, T, "
                             f"{self.keys.shape[-1]}) like the cached keys, got {tuple(k.shape)}")
        if v.shape[:3] != k.shape[:3]:
            raise ValueError(f"v must have shape ({B}, {H}, {T}, D_v) to match k, got {tuple(v.shape)}")
        if self.length + T > self.max_len:
            raise ValueError(f"the cache holds max_len={self.max_len} positions: "
                             f"{self.length} kept + {T} new is too many")

    @checked(_check_append, k=partial(check_tensor, ndim=4), v=partial(check_tensor, ndim=4))
    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keep the keys ``k`` and values ``v`` of the new positions; return those of all.

        Shape:
            k, v: (B, H, T, D_h) -> (B, H, length + T, D_h), views of the cache's memory.
        """
        if self.keys is None:  # the first call fixes B, H, D_h, the dtype and the device
            B, H, _, D_h = k.shape
            self.keys = k.new_empty(B, H, self.max_len, D_h)  # (B, H, max_len, D_h)
            self.values = v.new_empty(B, H, self.max_len, v.shape[-1])
        end = self.length + k.shape[2]
        self.keys[:, :, self.length : end] = k  # written in place: the past is not copied
        self.values[:, :, self.length : end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def nbytes(self) -> int:
        """The memory the cache has allocated, in bytes (0 before the first :meth:`append`)."""
        if self.keys is None:
            return 0
        return self.keys.nbytes + self.values.nbytes


class RollingKVCache(KVCache):
    """A cache for sliding-window attention: it keeps only the last ``window - 1`` positions.

    With a window of w (``LlamaConfig(sliding_window=w)``) the next query reads its own key and
    the w - 1 before it, so older keys and values can be forgotten: Mistral's rolling buffer
    (Jiang et al., 2023). The memory stays that of w - 1 positions however long the sequence
    grows. ``length`` still counts every position seen (the next token's position, for RoPE);
    setting it back, as speculative decoding does, is not possible: the positions are gone.

    Shape:
        keys, values: (B, H, min(length, window - 1), D_h), the last positions seen.
    """

    @checked(max_len=check_positive_int, window=check_positive_int)
    def __init__(self, max_len: int, window: int):
        super().__init__(max_len)
        self.window = int(window)

    @checked(KVCache._check_append, k=partial(check_tensor, ndim=4), v=partial(check_tensor, ndim=4))
    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the new keys ``k`` and values ``v``; return the kept ones and the new ones.

        Shape:
            k, v: (B, H, T, D_h) -> (B, H, kept + T, D_h), kept <= window - 1.
        """
        self.length += k.shape[2]  # positions seen, kept or not
        if self.keys is not None:  # the kept past, then the new positions
            k, v = torch.cat([self.keys, k], dim=2), torch.cat([self.values, v], dim=2)
        start = max(k.shape[2] - (self.window - 1), 0)  # what the next query can still see
        # copies, so that the memory of the older positions is freed
        self.keys, self.values = k[:, :, start:].clone(), v[:, :, start:].clone()
        return k, v


def check_window(name: str, cache, window: int | None) -> None:
    """A :class:`RollingKVCache` serves only attention with its own window: it has forgotten the
    keys a wider (or unlimited) window would read."""
    if isinstance(cache, RollingKVCache) and cache.window != window:
        attends = "all earlier positions" if window is None else f"a window of {window}"
        raise ValueError(f"{name} is a RollingKVCache for window={cache.window}, but the attention "
                         f"reads {attends}: make the caches with the model's window (or KVCache)")


def check_cache(name: str, cache, T: int, window: int | None = None) -> None:
    """``cache`` is a :class:`KVCache` with room for ``T`` more positions, and a rolling cache only
    for attention with its ``window``."""
    if not isinstance(cache, KVCache):
        raise TypeError(f"{name} must be a KVCache, got {type(cache).__name__}")
    check_window(name, cache, window)
    if cache.length + T > cache.max_len:
        raise ValueError(f"{name} holds max_len={cache.max_len} positions: {cache.length} kept + "
                         f"{T} new is too many")


def check_caches(name: str, caches, n_blocks: int, T: int, block_size: int,
                 batch: int | None = None, window: int | None = None) -> None:
    """One :class:`KVCache` per block of a model, all holding the same positions, each with room
    for ``T`` more positions (its ``max_len``) within the model's ``block_size``, and, once
    filled, holding ``batch`` sequences (if given); rolling caches only for the model's
    ``window``."""
    if (not isinstance(caches, Sequence) or len(caches) != n_blocks
            or not all(isinstance(c, KVCache) for c in caches)):
        raise TypeError(f"{name} must be a sequence of {n_blocks} KVCache, got {caches!r:.80}")
    for cache in caches:
        check_window(name, cache, window)
    if len({id(c) for c in caches}) < n_blocks:
        raise ValueError(f"{name} must be {n_blocks} distinct KVCache objects, one per block: the "
                         f"same one appears more than once (as [KVCache(...)] * {n_blocks} makes)")
    if len({c.length for c in caches}) > 1:
        raise ValueError(f"{name} must hold the same positions in every block, got lengths "
                         f"{[c.length for c in caches]}")
    kept, room = caches[0].length, min(c.max_len for c in caches)
    if not 0 <= kept <= room:
        raise ValueError(f"{name} must hold 0 to max_len={room} positions, got length={kept} "
                         f"(a length set by hand?)")
    held = caches[0].keys.shape[0] if caches[0].keys is not None and kept else None
    if batch is not None and held is not None and held != batch:
        raise ValueError(f"{name} hold {held} sequences, got idx with {batch}: a cache keeps the "
                         f"sequences it was filled with")
    if kept + T > block_size:
        raise ValueError(f"the {name} hold {kept} positions: with idx's {T} more the sequence "
                         f"passes block_size={block_size}")
    if kept + T > room:
        raise ValueError(f"{name} hold max_len={room} positions: {kept} kept + {T} new is too many")
