"""Three vector-symbolic architectures beside FHRR: HRR, MAP and BSC.

Every vector-symbolic architecture (VSA) has random symbols of a large dimension n that are nearly
orthogonal, a *bind* that makes a symbol unlike both of its inputs, from which either input is
recovered by *unbinding* with the other, and a *bundle* that stays similar to each of its members.
They differ in what a component is, and so in how binding is computed:

    VSA    component                 bind                   unbind                  bundle
    FHRR   an angle (seqbook.vsa)    add the angles         subtract the angles     phasor sum's angle
    HRR    a real, N(0, 1/n)         circular convolution   circular correlation    sum
    MAP    a sign, +1 or -1          multiply               multiply (self-inverse) sum
    BSC    a bit                     XOR                    XOR (self-inverse)      majority vote

HRR and MAP compare symbols by their cosine; BSC by ``1 - 2 hamming(a, b) / n``, which is the cosine
of their bipolar forms ``(-1)^a`` and ``(-1)^b``: a BSC is a MAP whose bundles are rounded to signs.
torch-hd (``torchhd``) implements all four; the tests check these functions against it.

Every public function checks its arguments once, where the reader's call enters the package.
"""

from __future__ import annotations

from functools import partial

import torch

from .checks import (
    check_bool_mask,
    check_broadcast,
    check_float_tensor,
    check_generator,
    checked,
    optional,
    shape_of,
)

__all__ = ["hrr_bind", "hrr_unbind", "map_bind", "bsc_bind", "bsc_bundle"]


def _check_symbol_pair(a, b) -> None:  # every bind and unbind: the dtype is checked per argument
    for name, x in (("a", a), ("b", b)):
        if x.dim() == 0:
            raise ValueError(f"{name} must have shape (..., n), got a scalar")
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"a and b must have the same symbol dimension n (last dim), got a "
                         f"{shape_of(a)} and b {shape_of(b)}")
    if a.device != b.device:
        raise ValueError(f"a and b must be on the same device, got {a.device} and {b.device}")
    check_broadcast("leading dims of a and b", a=a.shape[:-1], b=b.shape[:-1])


_REAL = partial(check_float_tensor, nonempty=False)


@checked(_check_symbol_pair, a=_REAL, b=_REAL)
def hrr_bind(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    r"""HRR binding: the circular convolution of ``a`` and ``b``,

    .. math:: (a \circledast b)_j = \sum_{k=0}^{n-1} a_k\, b_{(j - k) \bmod n},

    computed as ``ifft(fft(a) * fft(b))``: a convolution is a product of the Fourier transforms.

    Shape:
        a (..., n), b (..., n) -> (..., n) (leading dims broadcast)
    """
    n = a.shape[-1]
    return torch.fft.irfft(torch.fft.rfft(a) * torch.fft.rfft(b), n=n)


@checked(_check_symbol_pair, a=_REAL, b=_REAL)
def hrr_unbind(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    r"""HRR unbinding: the circular correlation of ``a`` with ``b``,

    .. math:: (a \circledcirc b)_j = \sum_{k=0}^{n-1} a_{(j + k) \bmod n}\, b_k,

    which is binding with the involution of b (b_0, b_{n-1}, ..., b_1), computed as
    ``ifft(fft(a) * conj(fft(b)))``. For random b of unit norm it approximately inverts binding:
    ``hrr_unbind(hrr_bind(x, b), b)`` is x plus noise.

    Shape:
        a (..., n), b (..., n) -> (..., n)
    """
    n = a.shape[-1]
    return torch.fft.irfft(torch.fft.rfft(a) * torch.fft.rfft(b).conj(), n=n)


@checked(_check_symbol_pair, a=_REAL, b=_REAL)
def map_bind(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """MAP binding (multiply-add-permute): the element-wise product. For bipolar symbols
    (entries +1 or -1) it is its own inverse: ``map_bind(map_bind(x, b), b) == x``.

    Shape:
        a (..., n), b (..., n) -> (..., n)
    """
    return a * b


@checked(_check_symbol_pair, a=check_bool_mask, b=check_bool_mask)
def bsc_bind(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """BSC binding (binary spatter codes): the element-wise XOR of two bit vectors, its own
    inverse: ``bsc_bind(bsc_bind(x, b), b) == x``.

    Shape:
        a (..., n), b (..., n) bool -> (..., n) bool
    """
    return a ^ b


@checked(x=partial(check_bool_mask, shape=(None, None), names="(K, n)"),
         generator=optional(check_generator))
def bsc_bundle(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """BSC bundling: the majority vote of K bit vectors, bit by bit. Where exactly half of them
    have a 1 (K even), the bit is drawn at random from ``generator``.

    Shape:
        x (K, n) bool -> (n,) bool
    """
    K, n = x.shape
    ones = x.sum(0)  # (n,): how many members have a 1
    coin = torch.rand(n, generator=generator, device=x.device) < 0.5  # (n,): breaks ties
    return (2 * ones > K) | ((2 * ones == K) & coin)
