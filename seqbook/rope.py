"""Rotary position embeddings, RoPE (Su et al., 2021, RoFormer).

Chapter 6 shows that a shift of the sinusoidal code by ``k`` positions is a rotation of each of its
(sin, cos) pairs by the angle ``k w_i``. RoPE puts that rotation where attention can use it: it
rotates the query and the key of the token at position ``m`` by the angles ``m w_i`` (pair ``i``
of their dimensions turns with frequency ``w_i = base^(-2i/d)``) instead of adding a code to the
token. Since ``R(m w)^T R(n w) = R((n - m) w)``, the score of query ``m`` and key ``n``::

    (R_m q)^T (R_n k) = q^T R_(n - m) k

depends on the tokens and on the offset ``n - m`` only, never on ``m`` and ``n`` themselves.

The pairs are (``x[i]``, ``x[i + d/2]``), the first half of the dimensions rotated against the
second half, as in most implementations (Hugging Face's Llama, GPT-NeoX); RoFormer's paper pairs
neighbours (``x[2i]``, ``x[2i + 1]``). A fixed permutation of the projections' output columns turns
one convention into the other, so the two give the same models.
"""

from __future__ import annotations

import math
from functools import partial

import torch

from .checks import check_even_size, check_float_tensor, check_number, check_pairs, check_tensor, checked

__all__ = ["angle_dtype", "rope_angles", "rotate_half", "apply_rope"]


def angle_dtype(device: torch.device) -> torch.dtype:
    """The dtype :func:`rope_angles` computes in: float64, or float32 on a device without float64
    (Apple's MPS)."""
    return torch.float32 if torch.device(device).type == "mps" else torch.float64


@checked(positions=partial(check_tensor, ndim=1, nonempty=False), head_dim=check_even_size,
         base=partial(check_number, low=1.0))
def rope_angles(positions: torch.Tensor, head_dim: int, base: float = 10000.0
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The cosines and sines of the angles ``m w_i`` that turn the token at position m.

    ``w_i = base^(-2i/head_dim)`` for i = 0 .. head_dim/2 - 1: the frequencies of
    eqs. (6.1)-(6.2) with ``head_dim`` for the width. Each angle is repeated for both
    halves of the dimensions. Computed and returned in float64 where the device has it
    (:func:`angle_dtype`); :func:`apply_rope` casts them to its input's dtype.

    Shape:
        positions: (T,) -> cos, sin: (T, head_dim)
    """
    exact = angle_dtype(positions.device)  # float64 where the device has it
    i = torch.arange(head_dim // 2, dtype=exact, device=positions.device)
    w = torch.exp(-math.log(base) * 2 * i / head_dim)  # (D_h/2,)
    angle = positions.to(exact)[:, None] * w  # (T, D_h/2)
    angle = torch.cat([angle, angle], dim=-1)  # (T, D_h)
    return angle.cos(), angle.sin()


@checked(x=check_pairs)
def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x1, x2) -> (-x2, x1)`` on the two halves of the last dimension: a quarter turn
    of each pair.

    Shape:
        x: (..., D) with D even -> (..., D)
    """
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def _check_apply_rope(x, cos, sin) -> None:
    T, D = x.shape[-2:]
    if D % 2:
        raise ValueError(f"x must have an even last dimension D_h (it turns in pairs), got {tuple(x.shape)}")
    check_float_tensor("cos", cos, shape=(T, D), names=f"({T}, {D})", nonempty=False)
    check_float_tensor("sin", sin, shape=(T, D), names=f"({T}, {D})", nonempty=False)


@checked(_check_apply_rope, x=partial(check_float_tensor, ndim=4, nonempty=False))
def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Turn each pair (``x[i]``, ``x[i + D/2]``) of the token at position ``m`` by
    the angle ``m w_i``: a rotation by ``a`` is ``x cos a + rotate_half(x) sin a``.

    Shape:
        x: (B, H, T, D_h) queries or keys; cos, sin: (T, D_h) from rope_angles.
        Output: (B, H, T, D_h)
    """
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)
