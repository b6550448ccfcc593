"""Vector-symbolic architectures: FHRR operations, phasor layers, residual and attentional networks.

Symbols of the Fourier Holographic Reduced Representation (FHRR) are vectors of angles. Following
Olin-Ammentorp & Bazhenov (2022) every angle is divided by pi, so a symbol ``x`` of dimension ``D`` is a
real tensor with values in [-1, 1]; its complex ("phasor") view is ``exp(i*pi*x)``, D points on the unit
circle. The value -1 and the value +1 name the same angle: every operation here wraps around at +-1.

The functional core (one function per equation of the paper)::

    similarity(a, b)       mean_i cos(pi (a_i - b_i))                       (Eqn. 1)
    bundle(A)              angle(sum_j exp(i pi A_j)) / pi                   (Eqn. 2)
    bind(a, b, p)          (a + p b + 1) mod 2 - 1                           (Eqn. 3)
    generalized_bundle     angle(W_r exp(i pi A) W_p + bias) / pi            (Eqn. 4)
    vsa_attention          angle(sim(Q, K) exp(i pi V)) / pi                 (Eqn. 6)

and thin modules on top of it: :class:`PhasorLinear` (the generalized-bundling layer),
:class:`ResidualBlock` (binding as the skip connection), :class:`SelfAttentionBlock` and
:class:`CrossAttentionBlock`. The paper's networks (the Fashion-MNIST classifiers, the codebook
of class symbols, the molecule encoder) live in :mod:`seqbook.vsa_models`.

The complex view is computed with real arithmetic (a cosine part and a sine part, recombined with
``atan2``): the result is the same as with complex tensors, which no layer needs to store.
Every public function and module checks its arguments once, where the reader's call enters the
package (:func:`seqbook.checks.checked`): the functions read values (angles in [-1, 1]), the modules
only shapes and dtypes, so a forward pass never waits on a device-to-host check. The ``fhrr_*``
functions are the formulas alone, unchecked: what the chapters print and the modules call.

The fast path (same numbers, fewer cosines): code that chains several operations can convert its
symbols once with :func:`to_phasor`, work on the complex phasors with :func:`bind_phasor`,
:func:`unbind_phasor`, :func:`bundle_phasor`, :func:`similarity_phasor` and
:func:`vsa_attention_phasor` (multiplications, sums and matrix products; no trigonometry), and come
back once with :func:`from_phasor`. ``vsa_attention(..., fast=True)`` computes the same products
without complex tensors, on (cos, sin) pairs held as real tensors.
"""

from __future__ import annotations

import math
import numbers
from functools import partial

import torch
from torch import nn

from .checks import (
    check_angles,
    check_broadcast,
    check_finite,
    check_flag,
    check_generator,
    check_layer_input,
    check_number,
    check_phasors,
    check_positive_int,
    check_score_mask,
    check_set_dim,
    check_symbol_attention,
    check_symbol_pair,
    checked,
    optional,
)

__all__ = [
    "fhrr_similarity", "fhrr_bundle", "fhrr_bind", "fhrr_generalized_bundle", "fhrr_attention",
    "fhrr_attention_fast", "fhrr_wrap", "wrap", "to_complex", "from_complex", "random_symbols",
    "similarity", "bundle", "bind", "unbind", "fractional_power", "generalized_bundle",
    "PhasorLinear", "PhasorMLP", "ResidualBlock", "vsa_attention", "to_phasor", "from_phasor",
    "bind_phasor", "unbind_phasor", "bundle_phasor", "similarity_phasor", "vsa_attention_phasor",
    "SelfAttentionBlock", "CrossAttentionBlock",
]

# Input checks: each public function and module has one validator, right above it; the checks
# they share (check_angles, check_phasors, check_symbol_pair, ...) live in seqbook.checks.


def _complex_parts(t: torch.Tensor) -> torch.Tensor:
    """A real part or imaginary part ready for ``torch.complex``: float16/bfloat16 become float32."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


# ---------------------------------------------------------------------------------------------
# The functional core: symbols, similarity, bundling, binding.
# ---------------------------------------------------------------------------------------------


def fhrr_wrap(x: torch.Tensor) -> torch.Tensor:
    """:func:`wrap` without input checks: ``(x + 1) mod 2 - 1``."""
    return torch.remainder(x + 1.0, 2.0) - 1.0


@checked(x=partial(check_angles, min_dim=0, any_real=True))
def wrap(x: torch.Tensor) -> torch.Tensor:
    """Map any real pi-normalised angle to its equivalent in [-1, 1): ``(x + 1) mod 2 - 1``.

    ``x`` is a finite real floating-point tensor of any shape (a single angle too).
    """
    return fhrr_wrap(x)


@checked(x=partial(check_angles, any_real=True, complex_view=True))
def to_complex(x: torch.Tensor) -> torch.Tensor:
    """The phasor view of a symbol: ``exp(i pi x)``, a complex tensor of the same shape.

    Any finite real angle is accepted (read modulo 2). ``x`` must be float32 or float64: torch has
    no bfloat16 complex type, so float16 and bfloat16 are refused with a TypeError (convert first).
    """
    return torch.polar(torch.ones_like(x), math.pi * x)


@checked(z=partial(check_phasors, min_dim=0))
def from_complex(z: torch.Tensor) -> torch.Tensor:
    """Back from the complex plane to symbols: ``angle(z) / pi``, values in [-1, 1].

    ``z`` is a complex64 or complex128 tensor of any shape; the angle of 0 is taken as 0.
    """
    return torch.angle(z) / math.pi


def _check_random_symbols(device, dtype) -> None:
    if device is not None:
        try:
            torch.device(device)
        except (RuntimeError, TypeError):
            raise ValueError(f"device must name a torch device such as 'cpu' or 'cuda', got {device!r}") \
                from None
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype must be a real floating-point torch.dtype or None, got {dtype!r}")


@checked(_check_random_symbols, n=check_positive_int, embed_dim=check_positive_int, generator=check_generator)
def random_symbols(n: int, embed_dim: int, generator: torch.Generator | None = None,
                   device: torch.device | str | None = None,
                   dtype: torch.dtype | None = None) -> torch.Tensor:
    """``n`` random symbols of dimension ``embed_dim``: every angle independent and uniform on [-1, 1).

    Shape:
        Output: (n, embed_dim).
    """
    # Draw on the generator's device (so a seeded CPU generator gives the same symbols everywhere).
    where = generator.device if generator is not None else device
    x = 2.0 * torch.rand(n, embed_dim, generator=generator, device=where, dtype=dtype) - 1.0
    return x.to(device) if device is not None else x


def fhrr_similarity(
    a: torch.Tensor, b: torch.Tensor, pairwise: bool = False
) -> torch.Tensor:
    """Eqn. 1 without input checks: :func:`similarity` calls it once its arguments are
    checked, and the layers call it directly. The ``fhrr_*`` functions are the formulas on
    angles; use the checked ones unless your code has validated its tensors itself.

    Shape:
        a, b (..., D) -> (...); with ``pairwise``, a (..., M, D), b (..., N, D) -> (..., M, N).
    """
    if not pairwise:
        return torch.cos(math.pi * (a - b)).mean(-1)
    # cos(x - y) = cos x cos y + sin x sin y: two matrix products, no (M, N, D) tensor
    ca, sa = torch.cos(math.pi * a), torch.sin(math.pi * a)  # (..., M, D)
    cb, sb = torch.cos(math.pi * b), torch.sin(math.pi * b)  # (..., N, D)
    dots = ca @ cb.transpose(-2, -1) + sa @ sb.transpose(-2, -1)  # (..., M, N)
    return dots / a.shape[-1]


def _check_similarity(a, b, pairwise) -> None:
    check_symbol_pair("a", a, "b", b, pairwise=bool(pairwise))


@checked(_check_similarity, pairwise=check_flag)
def similarity(a: torch.Tensor, b: torch.Tensor, pairwise: bool = False) -> torch.Tensor:
    """FHRR similarity (Eqn. 1): the mean cosine of the element-wise angle differences,

    ``sim(a, b) = 1/D * sum_i cos(pi (a_i - b_i))``,

    1 for identical symbols, -1 for opposite ones (every angle turned by pi), near 0 for unrelated ones.

    Args:
        a, b: symbols, angles in [-1, 1].
        pairwise: False: compare ``a`` and ``b`` element by element (their leading dims broadcast).
            True: compare every symbol of ``a`` with every symbol of ``b`` (an "outer" similarity).

    Shape:
        pairwise=False: a (..., D), b (..., D) -> (...) (broadcast leading dims).
        pairwise=True: a (..., M, D), b (..., N, D) -> (..., M, N).
    """
    return fhrr_similarity(a, b, pairwise)


def fhrr_bundle(symbols: torch.Tensor, dim: int = -2) -> torch.Tensor:
    """Eqn. 2 without input checks (see :func:`bundle`).

    Shape:
        symbols (..., M, D) -> (..., D) with the default ``dim``: the M symbols bundled.
    """
    re = torch.cos(math.pi * symbols).sum(dim)
    im = torch.sin(math.pi * symbols).sum(dim)
    return torch.atan2(im, re) / math.pi


def _check_bundle(symbols, dim) -> None:
    check_set_dim("dim", dim, "symbols", symbols)


@checked(_check_bundle, symbols=partial(check_angles, min_dim=2))
def bundle(symbols: torch.Tensor, dim: int = -2) -> torch.Tensor:
    """FHRR bundling (Eqn. 2): one symbol similar to all of a set,

    ``bundle(A) = angle(sum_j exp(i pi A_j)) / pi``:

    add the phasors of the set and keep the angle of the sum.

    Args:
        symbols: angles in [-1, 1]; the set runs along ``dim``, the symbol along the last dim.
        dim: the dimension that holds the members of the set (not the last one).

    Shape:
        Input: (..., K, D) for the default ``dim=-2``. Output: the input without ``dim``, e.g. (..., D).
    """
    return fhrr_bundle(symbols, dim)


def fhrr_bind(
    a: torch.Tensor, b: torch.Tensor, power: float | torch.Tensor = 1.0
) -> torch.Tensor:
    """Eqn. 3 without input checks (see :func:`bind`).

    Shape:
        a and b broadcast against each other (and ``power``) -> their broadcast shape.
    """
    return torch.remainder(a + power * b + 1.0, 2.0) - 1.0


def _check_bind(a, b, power) -> None:
    check_symbol_pair("a", a, "b", b)
    if isinstance(power, torch.Tensor):
        if power.is_complex() or power.dtype == torch.bool:
            raise TypeError(f"power must be a real number or a real tensor, got dtype {power.dtype}")
        check_broadcast("shapes of a, b and power", a=a.shape, b=b.shape, power=power.shape)
        if not torch.isfinite(power).all():
            raise ValueError("power must be finite, got a NaN or infinite entry")
    else:
        if isinstance(power, bool) or not isinstance(power, numbers.Real):
            raise TypeError(f"power must be a real number or a real tensor, got {type(power).__name__} "
                            f"{power!r}")
        if not math.isfinite(power):
            raise ValueError(f"power must be finite, got {power}")


@checked(_check_bind)
def bind(a: torch.Tensor, b: torch.Tensor, power: float | torch.Tensor = 1.0) -> torch.Tensor:
    """FHRR binding (Eqn. 3): rotate every angle of ``a`` by ``power`` times the angle of ``b``,

    ``bind(a, b, p) = (a + p b + 1) mod 2 - 1``,

    i.e. multiply the phasors, ``exp(i pi a) * exp(i pi b)^p``. The result is unlike both inputs;
    ``power=1`` is ordinary binding, ``power=-1`` unbinding, and a real ``power`` the fractional
    power encoding of a number. The output lies in [-1, 1).

    Shape:
        a (..., D), b (..., D) -> (..., D) (leading dims broadcast); ``power`` a number or a tensor
        that broadcasts with them.
    """
    return fhrr_bind(a, b, power)


def unbind(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Undo :func:`bind`: rotate ``a`` back by ``b``, so ``unbind(bind(x, b), b) == x`` (mod 2).
    Its arguments are checked by :func:`bind`.

    Shape:
        a (..., D), b (..., D) -> (..., D).
    """
    return bind(a, b, power=-1.0)


def _check_fractional_power(base, x) -> None:
    if base.dim() != 1:
        raise ValueError(f"base must have shape (D,), got {tuple(base.shape)}")
    if isinstance(x, bool) or (isinstance(x, torch.Tensor) and (x.is_complex() or x.dtype == torch.bool)):
        raise TypeError(f"x must be a real number or a tensor of real numbers, got {x!r}")
    try:
        x = torch.as_tensor(x, dtype=base.dtype, device=base.device)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"x must be a real number or a tensor of real numbers, got {type(x).__name__} "
                        f"{x!r}") from None
    if not torch.isfinite(x).all():
        raise ValueError("x must be finite, got a NaN or infinite entry")


@checked(_check_fractional_power, base=check_angles)
def fractional_power(base: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Fractional power encoding of real numbers: ``bind(0, base, power=x) = wrap(x * base)``.

    Nearby numbers get similar symbols; with ``base`` uniform on [-1, 1] the expected similarity of
    the codes of ``x`` and ``y`` is ``sinc(x - y) = sin(pi (x - y)) / (pi (x - y))``.

    Shape:
        base (D,), x (...) -> (..., D).
    """
    x = torch.as_tensor(x, dtype=base.dtype, device=base.device)
    return fhrr_wrap(x.unsqueeze(-1) * base)


# ---------------------------------------------------------------------------------------------
# Generalized bundling: the one neural layer of the paper.
# ---------------------------------------------------------------------------------------------


def fhrr_generalized_bundle(
    a, w_r=None, w_p=None, bias_real=None, bias_imag=None
) -> torch.Tensor:
    """Eqn. 4 without input checks (see :func:`generalized_bundle`).

    Shape:
        a (..., M, N) -> (..., R, P), R the rows of ``w_r`` and P the columns of ``w_p`` (M and
        N without them).
    """
    re, im = torch.cos(math.pi * a), torch.sin(math.pi * a)  # (..., M, N): exp(i pi A)
    if w_r is not None:
        re, im = w_r @ re, w_r @ im  # (..., R, N): mix the symbols of the set
    if w_p is not None:
        re, im = re @ w_p, im @ w_p  # (..., R, P): project every symbol
    if bias_real is not None:
        re = re + bias_real
    if bias_imag is not None:
        im = im + bias_imag
    return torch.atan2(im, re) / math.pi  # angle(z) / pi


def _check_generalized_bundle(a, w_r, w_p, bias) -> None:
    m, n = a.shape[-2], a.shape[-1]
    if m == 0:
        raise ValueError(f"cannot bundle an empty set: a has shape {tuple(a.shape)} with M = 0")
    for name, w in (("w_r", w_r), ("w_p", w_p)):
        if w is None:
            continue
        if not isinstance(w, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor or None, got {type(w).__name__}")
        if w.dtype != a.dtype:
            raise TypeError(f"{name} must have the dtype of a, {a.dtype}, got {w.dtype}")
        if w.device != a.device:
            raise ValueError(f"{name} must be on the device of a, {a.device}, got {w.device}")
    if w_r is not None and (w_r.dim() != 2 or w_r.shape[1] != m or w_r.shape[0] == 0):
        raise ValueError(f"w_r must have shape (R, {m}) with R >= 1 for a of shape {tuple(a.shape)}, "
                         f"got {tuple(w_r.shape)}")
    if w_p is not None and (w_p.dim() != 2 or w_p.shape[0] != n or w_p.shape[1] == 0):
        raise ValueError(f"w_p must have shape ({n}, P) with P >= 1 for a of shape {tuple(a.shape)}, "
                         f"got {tuple(w_p.shape)}")
    for name, w in (("w_r", w_r), ("w_p", w_p)):
        if w is not None:
            check_finite(name, w)
    if bias is None:
        return
    if isinstance(bias, bool) or not isinstance(bias, (numbers.Number, torch.Tensor)):
        raise TypeError(f"bias must be a number, a tensor or None, got {type(bias).__name__} {bias!r}")
    bias = torch.as_tensor(bias, device=a.device)
    if bias.dtype == torch.bool:
        raise TypeError(f"bias must be a real or complex number or tensor, got {bias.dtype}")
    out = a.shape[:-2] + (m if w_r is None else w_r.shape[0], n if w_p is None else w_p.shape[1])
    check_broadcast("shapes of bias and the output (..., R, P)", bias=bias.shape, output=out)
    if not bool(torch.isfinite(bias).all()):  # a complex bias too
        raise ValueError(f"bias must be finite, got a NaN or infinite entry (shape {tuple(bias.shape)})")


@checked(_check_generalized_bundle, a=partial(check_angles, min_dim=2, any_real=True))
def generalized_bundle(a: torch.Tensor, w_r: torch.Tensor | None = None, w_p: torch.Tensor | None = None,
                       bias: complex | torch.Tensor | None = None) -> torch.Tensor:
    """Generalized bundling (Eqn. 4) with an optional complex bias,

    ``y = angle(W_r exp(i pi A) W_p + bias) / pi``.

    With ``W_r`` a (1, M) row of ones, ``W_p`` the identity and no bias it is :func:`bundle`; with
    ``W_r`` the identity and a trainable ``W_p`` it is a neural layer (:class:`PhasorLinear`).

    Args:
        a: a non-empty set of M symbols of dimension N (angles; any finite real value is read modulo 2).
        w_r: real reduction weights (R, M), or None for the identity.
        w_p: real projection weights (N, P), or None for the identity.
        bias: a complex number or a complex/real tensor broadcastable to (..., R, P), or None.

    Shape:
        a (..., M, N) -> (..., R, P).
    """
    bias_real = bias_imag = None
    if bias is not None:
        bias = torch.as_tensor(bias, device=a.device)
        bias_real = bias.real.to(a.dtype)
        bias_imag = bias.imag.to(a.dtype) if bias.is_complex() else None
    return fhrr_generalized_bundle(a, w_r, w_p, bias_real, bias_imag)


class PhasorLinear(nn.Module):
    """The generalized-bundling layer (Eqn. 4 with ``W_r = I``): a fully connected phasor layer,

    ``y = angle(exp(i pi x) W + b) / pi``,

    with real weights ``W`` (in_features, out_features) and a complex bias ``b`` that starts at
    ``bias_init`` (1 + 0i by default). With zero-mean random weights the weighted sum of phasors is a
    cloud around the origin, so without the bias the output angles are uniform; the bias moves the
    cloud to 1 + 0i and the output angles start concentrated around 0 (figure 1 of the paper), which
    is what lets a binding skip connection start near the identity.

    Weights are drawn from N(0, init_scale^2 / in_features): for ``init_scale=1`` the variance of
    the paper's code, which truncates the normal (variance scaling).

    ``init_scale=0`` is allowed: all weights start at 0, so the output starts at the bias's angle.
    The forward pass checks shapes and dtypes but reads no values (a NaN input gives NaN angles).

    Shape:
        Input: (..., in_features). Output: (..., out_features), angles in [-1, 1].
    """

    def _check_init(bias_init) -> None:
        if isinstance(bias_init, torch.Tensor) and bias_init.numel() == 1:
            bias_init = bias_init.item()
        if isinstance(bias_init, bool) or not isinstance(bias_init, numbers.Number):
            raise TypeError(f"bias_init must be a complex number, got {type(bias_init).__name__} "
                            f"{bias_init!r}")
        if not (math.isfinite(complex(bias_init).real) and math.isfinite(complex(bias_init).imag)):
            raise ValueError(f"bias_init must be finite, got {bias_init}")

    @checked(_check_init, in_features=check_positive_int, out_features=check_positive_int, bias=check_flag,
             init_scale=partial(check_number, low=0.0))
    def __init__(self, in_features: int, out_features: int, bias: bool = True, bias_init: complex = 1.0,
                 init_scale: float = 1.0):
        super().__init__()
        if isinstance(bias_init, torch.Tensor):
            bias_init = bias_init.item()
        self.in_features, self.out_features = int(in_features), int(out_features)
        std = init_scale / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.randn(in_features, out_features) * std)
        if bias:
            b = complex(bias_init)
            self.bias_real = nn.Parameter(torch.full((out_features,), b.real))
            self.bias_imag = nn.Parameter(torch.full((out_features,), b.imag))
        else:
            self.register_parameter("bias_real", None)
            self.register_parameter("bias_imag", None)

    def _check_input(self, x) -> None:  # forward's and pre_activation's
        check_layer_input("x", x, self.weight, (..., self.in_features))

    @checked(_check_input)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fhrr_generalized_bundle(x, None, self.weight, self.bias_real, self.bias_imag)

    @checked(_check_input)
    def pre_activation(self, x: torch.Tensor) -> torch.Tensor:
        """The complex value ``exp(i pi x) W + b`` before its angle is taken (for plots).

        complex64 for a float32, float16 or bfloat16 layer (and under autocast), complex128 for float64.
        """
        z = torch.complex(_complex_parts(torch.cos(math.pi * x) @ self.weight),
                          _complex_parts(torch.sin(math.pi * x) @ self.weight))
        if self.bias_real is not None:
            z = z + torch.complex(_complex_parts(self.bias_real), _complex_parts(self.bias_imag))
        return z

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, " \
               f"bias={self.bias_real is not None}"


class PhasorMLP(nn.Module):
    """Two phasor layers, D -> d_ff -> D (d_ff = 2D by default); ``out_scale`` scales the
    initial weights of the second one.

    Shape:
        Input: (..., embed_dim). Output: (..., embed_dim).
    """

    @checked(embed_dim=check_positive_int, d_ff=optional(check_positive_int),
             out_scale=partial(check_number, low=0.0))
    def __init__(self, embed_dim: int, d_ff: int | None = None, out_scale: float = 1.0):
        super().__init__()
        d_ff = d_ff or 2 * embed_dim
        self.fc1 = PhasorLinear(embed_dim, d_ff)
        self.fc2 = PhasorLinear(d_ff, embed_dim, init_scale=out_scale)

    def _check_forward(self, x) -> None:
        check_layer_input("x", x, self.fc1.weight, (..., self.fc1.in_features))

    @checked(_check_forward)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1(x))


class ResidualBlock(nn.Module):
    """A residual block whose skip connection is binding (section 2.1 of the paper):

    ``y = bind(x, MLP(x))``  (or ``y = MLP(x)`` with ``skip=False``).

    At initialisation the biased phasor layers output angles near 0, and binding with angles near 0
    barely turns ``x``: the block starts close to the identity, as a ResNet block does. How close
    depends on the spread of the second layer's weights: the input of that layer is already bunched
    near angle 0, so its pre-activation is roughly ``1 + sum_j w_j``, a real Gaussian around 1 with
    standard deviation at most ``out_scale``. With ``out_scale=1`` (the authors' code; the paper
    states no scale) up to 16% of the output angles (where it is negative) lie beyond +-1/2, a
    turn by more than pi/2, and 12 such blocks in a row forget their input.
    ``out_scale=0.25`` (the default here, measured in chapter 8) keeps a deep
    stack near the identity; ``out_scale=0`` makes every block start as the exact identity.

    Shape:
        Input: (..., embed_dim). Output: (..., embed_dim).
    """

    @checked(embed_dim=check_positive_int, d_ff=optional(check_positive_int), skip=check_flag,
             out_scale=partial(check_number, low=0.0))
    def __init__(self, embed_dim: int, d_ff: int | None = None, skip: bool = True, out_scale: float = 0.25):
        super().__init__()
        self.mlp = PhasorMLP(embed_dim, d_ff, out_scale)
        self.skip = bool(skip)

    def _check_forward(self, x) -> None:
        check_layer_input("x", x, self.mlp.fc1.weight, (..., self.mlp.fc1.in_features))

    @checked(_check_forward)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.mlp(x)  # (..., D)
        return fhrr_bind(x, h) if self.skip else h


# ---------------------------------------------------------------------------------------------
# Attention with symbols.
# ---------------------------------------------------------------------------------------------


def fhrr_attention(q, k, v, mask=None):
    """Eqn. 6 without input checks (see :func:`vsa_attention`).

    Shape:
        q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) -> ``(output, scores)``: (..., Tq, Dv)
        and (..., Tq, Tk).
    """
    # (..., Tq, Tk) in [-1, 1]: no scaling, no softmax
    scores = fhrr_similarity(q, k, pairwise=True)
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)  # a masked key contributes nothing
    re = scores @ torch.cos(math.pi * v)  # (..., Tq, Dv): Re(sim(Q, K) exp(i pi V))
    im = scores @ torch.sin(math.pi * v)  # (..., Tq, Dv): Im(...)
    return torch.atan2(im, re) / math.pi, scores


@checked(check_symbol_attention, fast=check_flag)
def vsa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  mask: torch.Tensor | None = None, fast: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """VSA attention (Eqn. 6): similarity scores weigh the value phasors,

    ``out = angle(sim(Q, K) exp(i pi V)) / pi``.

    The scores are raw FHRR similarities in [-1, 1]: no 1/sqrt(d) scaling and no softmax. Each
    output symbol is a weighted bundle of the values; a negative score turns a value by pi.

    Args:
        q: queries (..., Tq, D); k: keys (..., Tk, D); v: values (..., Tk, Dv); angles in [-1, 1].
        mask: optional bool tensor broadcastable to (..., Tq, Tk), True where a query may look at a
            key; masked scores are set to 0. A query that may look at no key (a fully masked row,
            or Tk = 0) gets the angle 0, with finite gradients.
        fast: False: the readable form above. True: the same numbers on the phasor fast path: one
            cosine and one sine per input symbol, kept for a backward pass without trigonometry (the
            products of :func:`vsa_attention_phasor` written on (cos, sin) pairs), one atan2 at the end.

    Returns:
        ``(output, scores)``.

    Shape:
        q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) -> (..., Tq, Dv) and (..., Tq, Tk).
    """
    return fhrr_attention_fast(q, k, v, mask) if fast else fhrr_attention(q, k, v, mask)


# ---------------------------------------------------------------------------------------------
# The fast path: the same operations on complex phasors exp(i pi x).
# ---------------------------------------------------------------------------------------------
#
# An angle costs a cosine and a sine every time an operation needs its phasor, and an atan2 every
# time a result goes back to an angle; autograd's backward of cos and sin computes them once more.
# On phasors the FHRR operations are products, sums and matrix products. The conversions below are
# autograd functions whose backward reuses what the forward computed: no trigonometry at all.
# The phasor functions return unnormalised complex numbers where the book's formulas do (a bundle,
# an attention output); their angle is the symbol, their magnitude how much the members agreed.


class _CosSin(torch.autograd.Function):
    """``(cos pi x, sin pi x)``: the real and imaginary parts of ``exp(i pi x)``; the backward reuses
    them, d/dx (cos pi x, sin pi x) = pi (-sin pi x, cos pi x)."""

    @staticmethod
    def forward(ctx, x):
        t = math.pi * x
        c, s = torch.cos(t), torch.sin(t)
        ctx.save_for_backward(c, s)
        return c, s

    @staticmethod
    def backward(ctx, grad_c, grad_s):
        c, s = ctx.saved_tensors
        if grad_c is None:
            return math.pi * (grad_s * c)
        if grad_s is None:
            return -math.pi * (grad_c * s)
        return math.pi * (grad_s * c - grad_c * s)


class _FromPhasor(torch.autograd.Function):
    """``angle(z) / pi`` as ``atan2(Im z, Re z) / pi`` on contiguous parts (the vectorised kernel)."""

    @staticmethod
    def forward(ctx, z):
        re, im = z.real.contiguous(), z.imag.contiguous()
        ctx.save_for_backward(re, im)
        return torch.atan2(im, re) / math.pi

    @staticmethod
    def backward(ctx, grad):
        re, im = ctx.saved_tensors
        # d angle / d(Re, Im) = (-Im, Re) / |z|^2, as complex: i z / |z|^2
        g = grad / (math.pi * (re * re + im * im))
        return torch.complex(-im * g, re * g)


def _cos_sin(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _CosSin.apply(x)


def _to_phasor(x: torch.Tensor) -> torch.Tensor:
    return torch.complex(*_cos_sin(x))


def _from_phasor(z: torch.Tensor) -> torch.Tensor:
    return _FromPhasor.apply(z)


def _real_view(z: torch.Tensor) -> torch.Tensor:
    """(..., D) complex -> (..., 2D) real, (Re z_1, Im z_1, Re z_2, ...): a view when z is contiguous."""
    return torch.view_as_real(z.resolve_conj()).flatten(-2)


@checked(x=partial(check_angles, any_real=True, complex_view=True))
def to_phasor(x: torch.Tensor) -> torch.Tensor:
    """Symbols to phasors, ``exp(i pi x)`` (as :func:`to_complex`), with a backward pass that reuses
    the forward's cosines and sines. Any real angle is accepted (read modulo 2).

    ``x`` must be float32 or float64: torch has no bfloat16 complex type, so float16 and bfloat16
    are refused with a TypeError (convert first, or use ``vsa_attention(..., fast=True)``, which
    keeps (cos, sin) pairs and works in any floating dtype).

    Shape:
        (..., D) real -> (..., D) complex (complex64 for float32, complex128 for float64).
    """
    return _to_phasor(x)


@checked(z=check_phasors)
def from_phasor(z: torch.Tensor) -> torch.Tensor:
    """Phasors (of any magnitude but 0) to symbols, ``angle(z) / pi`` (as :func:`from_complex`),
    values in [-1, 1], with a backward pass that needs no trigonometry. A phasor 0 (e.g. the bundle
    of two opposite symbols) is not refused: its angle is 0, but its gradient is not finite.

    Shape:
        (..., D) complex -> (..., D) real.
    """
    return _from_phasor(z)


def _check_phasor_pair(a, b, pairwise=False) -> None:  # bind, unbind and similarity on phasors
    check_symbol_pair("a", a, "b", b, pairwise=bool(pairwise), phasors=True)


@checked(_check_phasor_pair)
def bind_phasor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """:func:`bind` on phasors: the element-wise product ``a * b``, so that
    ``from_phasor(bind_phasor(to_phasor(x), to_phasor(y))) == bind(x, y)`` (mod 2).

    Shape:
        a (..., D), b (..., D) complex -> (..., D) complex (leading dims broadcast).
    """
    return a * b


@checked(_check_phasor_pair)
def unbind_phasor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """:func:`unbind` on phasors: ``a * conj(b)`` (the inverse of a unit phasor is its conjugate).

    Shape:
        a (..., D), b (..., D) complex -> (..., D) complex.
    """
    return a * b.conj()


def _check_bundle_phasor(z, dim) -> None:
    check_set_dim("dim", dim, "z", z)  # a sum over an empty set would be 0, a phasor without angle


@checked(_check_bundle_phasor, z=partial(check_phasors, min_dim=2), normalize=check_flag)
def bundle_phasor(z: torch.Tensor, dim: int = -2, normalize: bool = False) -> torch.Tensor:
    """:func:`bundle` on phasors: the sum over the set, ``sum_j z_j`` (Eqn. 2 before the angle).

    ``normalize=False`` (default, as torch-hd's ``multibundle``) keeps the magnitude, which counts
    how well the members agree, so that bundles of bundles add up member by member;
    ``normalize=True`` divides by it and returns the unit phasor of :func:`bundle`:
    ``from_phasor(bundle_phasor(to_phasor(x))) == bundle(x)`` either way.

    Shape:
        (..., K, D) complex for the default ``dim=-2`` -> (..., D) complex.
    """
    out = z.sum(dim)
    return torch.sgn(out) if normalize else out


@checked(_check_phasor_pair, pairwise=check_flag)
def similarity_phasor(a: torch.Tensor, b: torch.Tensor, pairwise: bool = False) -> torch.Tensor:
    """:func:`similarity` on phasors: ``1/D * sum_i Re(a_i conj(b_i))``.

    On unit phasors it equals ``similarity`` of the angles; on unnormalised bundles it is linear in
    each member (torch-hd's ``dot_similarity`` divided by D).

    Shape:
        pairwise=False: a (..., D), b (..., D) complex -> (...) real (broadcast leading dims).
        pairwise=True: a (..., M, D), b (..., N, D) complex -> (..., M, N) real.
    """
    # Re(a conj(b)) = Re a Re b + Im a Im b: a real dot product of the interleaved (Re, Im) views.
    ar, br = _real_view(a), _real_view(b)  # (..., 2D)
    if pairwise:
        return ar @ br.transpose(-2, -1) / a.shape[-1]  # (..., M, N): one real matrix product
    return (ar * br).sum(-1) / a.shape[-1]  # (...)


def fhrr_attention_fast(q, k, v, mask=None):
    """Eqn. 6 without input checks, on the phasor fast path (the same values as
    :func:`fhrr_attention`): every phasor kept as its (cos, sin) pair, one cosine and one sine
    per input and none in the backward pass, the products of :func:`vsa_attention_phasor`
    written with real matrices.

    Shape:
        q: (..., Tq, D), k: (..., Tk, D), v: (..., Tk, Dv), mask: bool (..., Tq, Tk)
        -> ``(output, scores)``: (..., Tq, Dv) angles and (..., Tq, Tk)
    """
    (cq, sq), (ck, sk), (cv, sv) = _cos_sin(q), _cos_sin(k), _cos_sin(v)  # (..., T, D) each
    scores = (cq @ ck.transpose(-2, -1) + sq @ sk.transpose(-2, -1)) / q.shape[-1]  # (..., Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    re, im = scores @ cv, scores @ sv  # (..., Tq, Dv): Re and Im of sim(Q, K) exp(i pi V)
    return torch.atan2(im, re) / math.pi, scores


@checked(partial(check_symbol_attention, phasors=True))
def vsa_attention_phasor(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`vsa_attention` on phasors: ``sim(Q, K) V`` (Eqn. 6 before the angle), unnormalised.

    ``from_phasor`` of the output is the output of ``vsa_attention`` on the angles.

    Shape:
        q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) complex; mask as in :func:`vsa_attention`
        -> ``(output, scores)``: (..., Tq, Dv) complex and (..., Tq, Tk) real.
    """
    scores = similarity_phasor(q, k, pairwise=True)  # (..., Tq, Tk), real
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    out = scores @ _real_view(v)  # (..., Tq, 2 Dv): real scores times (Re, Im) of the values
    return torch.view_as_complex(out.unflatten(-1, (-1, 2))), scores


class SelfAttentionBlock(nn.Module):
    """The symbolic self-attention block (figure 4 of the paper).

    Three phasor layers turn the input symbols into queries, keys and values; VSA attention
    (Eqn. 6) mixes them; the result is bound to the input (first skip), then a two-layer phasor MLP
    follows and its output is bound again (second skip, a :class:`ResidualBlock`)::

        a = vsa_attention(FC_q(x), FC_k(x), FC_v(x))
        h = bind(x, a)
        y = bind(h, MLP(h))

    ``mask`` (optional): bool, broadcastable to (B, T, T), True where a query may look at a key;
    a fully masked row gives the angle 0 before the skip, with finite gradients. ``fast=True``
    computes the attention on the phasor fast path (``vsa_attention(..., fast=True)``, same values).

    Shape:
        Input: (B, T, embed_dim). Output: ``(y, scores)`` of shapes (B, T, embed_dim) and (B, T, T).
    """

    @checked(embed_dim=check_positive_int, d_ff=optional(check_positive_int), fast=check_flag)
    def __init__(self, embed_dim: int, d_ff: int | None = None, fast: bool = False):
        super().__init__()
        self.embed_dim, self.fast = int(embed_dim), bool(fast)
        self.query = PhasorLinear(embed_dim, embed_dim)
        self.key = PhasorLinear(embed_dim, embed_dim)
        self.value = PhasorLinear(embed_dim, embed_dim)
        self.residual = ResidualBlock(embed_dim, d_ff or embed_dim)

    def _check_forward(self, x, mask) -> None:
        d = self.embed_dim
        check_layer_input("x", x, self.key.weight, (None, None, d), f"(B, T, {d})")
        if mask is not None:
            b, t = x.shape[:2]
            check_score_mask("mask", mask, (b, t, t), "(B, T, T)")

    @checked(_check_forward)
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None):
        attend = fhrr_attention_fast if self.fast else fhrr_attention
        q, k, v = self.query(x), self.key(x), self.value(x)  # (B, T, D) each
        a, scores = attend(q, k, v, mask)  # (B, T, D), (B, T, T)
        h = fhrr_bind(x, a)  # first skip
        return self.residual(h), scores  # bind(h, MLP(h)): second skip


class CrossAttentionBlock(nn.Module):
    """The symbolic cross-attention block (figure 5 of the paper).

    As :class:`SelfAttentionBlock`, but the queries are not computed from the input: they are
    ``num_queries`` trainable symbols ("inducing points"), so the cost grows linearly with the number
    of inputs T, and the output has ``num_queries`` symbols whatever T is::

        a = vsa_attention(P, FC_k(x), FC_v(x))      P: (num_queries, embed_dim), trainable
        h = bind(P, a)
        y = bind(h, MLP(h))

    ``mask`` (optional): bool, broadcastable to (B, num_queries, T). T = 0 (no input symbols) is
    allowed: every attention row is empty, and the output starts from the queries themselves.
    ``fast`` as in :class:`SelfAttentionBlock`.

    Shape:
        Input: (B, T, embed_dim). Output: ``(y, scores)`` of shapes (B, num_queries, embed_dim) and
        (B, num_queries, T).
    """

    @checked(embed_dim=check_positive_int, num_queries=check_positive_int, d_ff=optional(check_positive_int),
             fast=check_flag)
    def __init__(self, embed_dim: int, num_queries: int = 32, d_ff: int | None = None, fast: bool = False):
        super().__init__()
        self.embed_dim, self.fast = int(embed_dim), bool(fast)
        self.queries = nn.Parameter(random_symbols(num_queries, embed_dim))  # inducing points
        self.key, self.value = PhasorLinear(embed_dim, embed_dim), PhasorLinear(embed_dim, embed_dim)
        self.residual = ResidualBlock(embed_dim, d_ff or embed_dim)

    def _check_forward(self, x, mask) -> None:
        d = self.embed_dim
        check_layer_input("x", x, self.key.weight, (None, None, d), f"(B, T, {d})")
        if mask is not None:
            b, t = x.shape[:2]
            check_score_mask("mask", mask, (b, self.queries.shape[0], t), "(B, num_queries, T)")

    @checked(_check_forward)
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None):
        q = self.queries.expand(x.shape[0], -1, -1)  # (B, Q, D)
        attend = fhrr_attention_fast if self.fast else fhrr_attention
        a, scores = attend(q, self.key(x), self.value(x), mask)  # (B, Q, D), (B, Q, T)
        h = fhrr_bind(q, a)  # first skip: onto the queries
        return self.residual(h), scores
