"""The online softmax, and attention computed tile by tile as FlashAttention does.

A softmax needs the maximum of its inputs (to subtract it, so no exponential
overflows) and the sum of the exponentials (to normalise), which looks like two
passes over the inputs before the output can be written. Milakov and Gimelshein
(2018) showed that one pass is enough for both: keep a running maximum ``m`` and a
running sum ``l`` of ``exp(x - m)``, and whenever the maximum grows, rescale the sum
by ``exp(m_old - m_new)``. For x_1, ..., x_N, starting from m_0 = -inf and l_0 = 0,

    m_j = max(m_(j-1), x_j)
    l_j = exp(m_(j-1) - m_j) l_(j-1) + exp(x_j - m_j)
    softmax(x)_i = exp(x_i - m_N) / l_N

(:func:`online_softmax`). Rabe and Staats (2021) and FlashAttention (Dao et al.,
2022) apply the same rescaling to the *output* of attention: the weighted sum of
values is one more running sum, so attention can be computed over tiles of keys
without ever holding all the scores of a query at once. For a tile of keys K_t and values V_t, with
S_t = scale Q K_t^T,

    m_new = max(m, rowmax(S_t))
    l_new = exp(m - m_new) l + rowsum(exp(S_t - m_new))
    o_new = exp(m - m_new) o + exp(S_t - m_new) V_t

and after the last tile, ``out = o / l`` (:func:`tiled_attention`). Each factor
``exp(m - m_new)`` brings the sums kept so far to the new maximum, so after the last
tile every term is ``exp(s - m_N)`` and ``o / l`` is exactly softmax(S) V.

The memory argument. Plain attention materialises the scores and weights, a
(L, S) matrix per head (L queries, S keys): for L = S = 32k tokens in float32 that is
4 GiB per head. The loop here holds one (L, tile) block of scores and the running state
m, l: (L, 1) and o: (L, D_v), so its memory grows as L (tile + D_v), linearly in the
length.
FlashAttention also tiles the queries, keeps each block in the GPU's on-chip memory
(SRAM) and fuses the loop into one kernel, so the scores never reach the GPU's main
memory either; its backward pass recomputes the scores from Q, K and the saved
statistics instead of storing them (m and l; FlashAttention-2 saves their
log-sum-exp m + log l). This readable version runs each tile
as ordinary PyTorch operations, and autograd saves every tile for the backward pass,
so only its forward pass has the small memory footprint.
"""

# The running sum keeps the papers' name l (ruff's E741 finds it ambiguous).
# ruff: noqa: E741

from __future__ import annotations

import math

import torch

from .checks import (
    check_flag,
    check_float_tensor,
    check_number,
    check_positive_int,
    checked,
    optional,
    shape_of,
)

__all__ = ["online_softmax", "tiled_attention"]


def online_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension, its maximum and sum found in one pass.

    Milakov and Gimelshein (2018): with m_0 = -inf and l_0 = 0, for j = 1, ..., N

        m_j = max(m_(j-1), x_j),   l_j = exp(m_(j-1) - m_j) l_(j-1) + exp(x_j - m_j),

    and then softmax(x)_i = exp(x_i - m_N) / l_N. The loop runs over the N entries
    one at a time (all leading dimensions at once), to show the recurrence; it equals
    ``torch.softmax(x, -1)``. Entries of -inf get weight 0; a row of -inf only gives
    NaN, as in PyTorch.

    Shape:
        x: (..., N) floating point, N >= 1; returns (..., N).
    """
    check_float_tensor("x", x, nonempty=False)
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"x must have shape (..., N) with N >= 1, got {shape_of(x)}")
    m = x.new_full(x.shape[:-1], -math.inf)  # (...,) running maximum
    l = x.new_zeros(x.shape[:-1])  # (...,) running sum of exp(x_j - m)
    for j in range(x.shape[-1]):
        x_j = x[..., j]  # (...,)
        m_new = torch.maximum(m, x_j)
        # while every entry so far is -inf, shift by 0 (not -inf) so no inf - inf = NaN
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        l = torch.exp(m - shift) * l + torch.exp(x_j - shift)
        m = m_new
    return torch.exp(x - m[..., None]) / l[..., None]  # (..., N)


def _check_tiled_attention(q, k, v) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_float_tensor(name, t)
        if t.dim() < 2:
            raise ValueError(
                f"{name} must have shape (..., length, dim), got {shape_of(t)}"
            )
    D, S = q.shape[-1], k.shape[-2]
    if k.shape[-1] != D:
        raise ValueError(
            f"k must have shape (..., S, {D}) to match q, got {shape_of(k)}"
        )
    if v.shape[-2] != S:
        raise ValueError(
            f"v must have shape (..., {S}, D_v) to match k, got {shape_of(v)}"
        )
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(
            f"q, k, v must have the same dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if not q.device == k.device == v.device:
        raise ValueError(
            f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}"
        )
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "q, k, v must have leading dimensions that broadcast, got "
            f"{shape_of(q)}, {shape_of(k)}, {shape_of(v)}"
        ) from None


@checked(_check_tiled_attention, tile_size=check_positive_int, causal=check_flag,
         scale=optional(check_number))
def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tile_size: int,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Softmax attention over tiles of keys with an online softmax (FlashAttention).

    Computes ``softmax(scale q k^T) v`` (eq. 5.2 of the book; Dao et al., 2022)
    without the (L, S) score matrix: the keys and values are taken ``tile_size`` at
    a time, and a running maximum m, a running sum l and an output accumulator o are
    rescaled at each tile (the module docstring gives the equations). The result
    equals ``seqbook.attention.scaled_dot_product_attention(q, k, v,
    is_causal=causal, scale=scale)[0]`` up to rounding; the weights are never formed.

    Args:
        q, k, v: queries, keys and values; leading dimensions must broadcast, e.g.
            (B, H) for heads.
        tile_size: keys per tile (>= 1); the last tile is shorter when it does not
            divide S.
        causal: query i sees keys j <= i only (the top-left lower triangle, as in
            ``scaled_dot_product_attention``); tiles after the last query are
            skipped.
        scale: multiplier of the scores, ``1 / sqrt(D)`` by default.

    Shape:
        q: (..., L, D), k: (..., S, D), v: (..., S, D_v); returns (..., L, D_v).
        Scores exist one (..., L, tile_size) block at a time.
    """
    L, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    m = q.new_full((*batch, L, 1), -math.inf)  # (..., L, 1) running max of the scores
    l = q.new_zeros((*batch, L, 1))  # (..., L, 1) running sum of exp(s - m)
    o = q.new_zeros((*batch, L, v.shape[-1]))  # (..., L, D_v) sum of exp(s - m) v
    rows = torch.arange(L, device=q.device)[:, None]  # (L, 1) query positions
    for start in range(0, S, tile_size):
        if causal and start >= L:  # every query comes before this tile and the rest
            break
        stop = min(start + tile_size, S)
        k_t, v_t = k[..., start:stop, :], v[..., start:stop, :]  # (..., tile, D|D_v)
        s = scale * (q @ k_t.transpose(-2, -1))  # (..., L, tile) scores of this tile
        if causal:
            cols = torch.arange(start, stop, device=q.device)  # (tile,) key positions
            s = s.masked_fill(cols > rows, -math.inf)  # key after query: blocked
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., L, 1)
        p = torch.exp(s - m_new)  # (..., L, tile)
        alpha = torch.exp(m - m_new)  # (..., L, 1) brings old sums to the new max
        l = alpha * l + p.sum(dim=-1, keepdim=True)  # (..., L, 1)
        o = alpha * o + p @ v_t  # (..., L, D_v)
        m = m_new
    return o / l  # (..., L, D_v)
