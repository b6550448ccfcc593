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
Public functions check their inputs; the modules call the unchecked formulas (``fhrr_*``) so a
forward pass never waits on a device-to-host check.

The fast path (same numbers, fewer cosines): code that chains several operations can convert its
symbols once with :func:`to_phasor`, work on the complex phasors with :func:`bind_phasor`,
:func:`unbind_phasor`, :func:`bundle_phasor`, :func:`similarity_phasor` and
:func:`vsa_attention_phasor` (multiplications, sums and matrix products; no trigonometry), and come
back once with :func:`from_phasor`. ``vsa_attention(..., fast=True)`` does exactly that.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from .checks import (
    check_flag,
    check_int,
    check_module_input,
    check_number,
    check_positive_int,
    checked,
)

__all__ = [
    "fhrr_similarity", "fhrr_bundle", "fhrr_bind", "fhrr_generalized_bundle", "fhrr_attention",
    "fhrr_attention_fast", "fhrr_wrap", "wrap", "to_complex", "from_complex", "random_symbols",
    "similarity", "bundle", "bind", "unbind", "fractional_power", "generalized_bundle",
    "PhasorLinear", "PhasorMLP", "ResidualBlock", "vsa_attention", "to_phasor", "from_phasor",
    "bind_phasor", "unbind_phasor", "bundle_phasor", "similarity_phasor", "vsa_attention_phasor",
    "SelfAttentionBlock", "CrossAttentionBlock",
]

_TOL = 1e-5  # angles a hair outside [-1, 1] from float round-off are accepted

# ---------------------------------------------------------------------------------------------
# Input checks. A symbol is a real floating-point tensor (..., D) with D >= 1; a phasor a complex64
# or complex128 tensor (..., D). The functions check values (angles in [-1, 1], finite numbers);
# the modules check only shapes and dtypes, so that a forward pass never waits on the device.
# ---------------------------------------------------------------------------------------------


def _shape_text(min_dim: int) -> str:
    return "(" + ", ".join(["..."] + ["?"] * (min_dim - 1) + ["D"]) + ")"


def _check_tensor(name: str, x, min_dim: int = 1) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.is_complex():  # a ValueError, as it always was: a phasor passed where an angle belongs
        raise ValueError(f"{name} must be a real floating-point tensor of pi-normalised angles, "
                         f"got dtype {x.dtype}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a real floating-point tensor of pi-normalised angles, "
                        f"got dtype {x.dtype}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have shape {_shape_text(min_dim)}, got {tuple(x.shape)}")
    if min_dim >= 1 and x.shape[-1] == 0:
        raise ValueError(f"{name} must have a symbol dimension D >= 1 (last dim), got {tuple(x.shape)}")


def _check_range(name: str, x: torch.Tensor) -> None:
    """Symbols live in [-1, 1]; anything else is a caller bug (e.g. radians passed for angles / pi)."""
    if x.numel() == 0:
        return
    lo, hi = torch.aminmax(x.detach())
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo < -1 - _TOL or hi > 1 + _TOL:
        raise ValueError(f"{name} must hold pi-normalised angles in [-1, 1], got values in "
                         f"[{lo:.4g}, {hi:.4g}] (shape {tuple(x.shape)})")


def _check_finite(name: str, x: torch.Tensor) -> None:
    if x.numel() and not bool(torch.isfinite(x.detach()).all()):
        raise ValueError(f"{name} must be finite, got a NaN or infinite entry (shape {tuple(x.shape)})")


def _check_symbols(name: str, x, min_dim: int = 1) -> None:
    _check_tensor(name, x, min_dim)
    _check_range(name, x)


def _check_same_dim(a: torch.Tensor, b: torch.Tensor, a_name: str = "a", b_name: str = "b") -> None:
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"{a_name} and {b_name} must have the same symbol dimension D (last dim), "
                         f"got {a_name} {tuple(a.shape)} and {b_name} {tuple(b.shape)}")


def _check_broadcast(what: str, **shapes) -> tuple[int, ...]:
    """The broadcast of ``shapes``, or a ValueError that lists them."""
    try:
        return tuple(torch.broadcast_shapes(*shapes.values()))
    except RuntimeError:
        listed = ", ".join(f"{k} {tuple(s)}" for k, s in shapes.items())
        raise ValueError(f"the {what} must broadcast, got {listed}") from None


def _check_pair(a: torch.Tensor, b: torch.Tensor, lead: int, a_name: str = "a", b_name: str = "b",
                same_dtype: bool = False) -> None:
    """Two sets of symbols (or phasors) that are compared or combined: one D, one device, leading
    dims (all but the last ``lead``) that broadcast, and for matrix products one dtype."""
    _check_same_dim(a, b, a_name, b_name)
    if a.device != b.device:
        raise ValueError(f"{a_name} and {b_name} must be on the same device, got {a.device} and {b.device}")
    if same_dtype and a.dtype != b.dtype:
        raise TypeError(f"{a_name} and {b_name} must have the same dtype, got {a.dtype} and {b.dtype}")
    _check_broadcast(f"leading dims of {a_name} and {b_name}",
                     **{a_name: a.shape[:a.dim() - lead], b_name: b.shape[:b.dim() - lead]})


def _check_qkv(q, k, v, check) -> tuple[int, ...]:
    """Attention inputs: each a set of symbols (``check`` tells angles from phasors), q and k of one
    dimension D, k and v of one length Tk, one dtype and device, leading dims that broadcast.
    Returns the shape of the scores, (..., Tq, Tk)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check(name, x, 2)
    _check_same_dim(q, k, "q", "k")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must hold the same number of symbols Tk, got k {tuple(k.shape)} "
                         f"and v {tuple(v.shape)}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must have the same dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k and v must be on the same device, got {q.device}, {k.device} and {v.device}")
    _check_broadcast("leading dims of q, k and v", q=q.shape[:-2], k=k.shape[:-2], v=v.shape[:-2])
    return tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])) + (q.shape[-2], k.shape[-2])


def _check_mask(mask, target: tuple[int, ...], names: str) -> None:
    """A bool mask, True where a query may look at a key, that broadcasts to the scores ``target``."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a bool torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True where a query may look at a key), "
                        f"got {mask.dtype}")
    try:
        fits = tuple(torch.broadcast_shapes(mask.shape, target)) == tuple(target)
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"mask must broadcast to {names} = {tuple(target)}, got {tuple(mask.shape)}")


def _check_optional_size(name: str, value) -> int | None:
    return None if value is None else check_positive_int(name, value)


def _check_complexable(name: str, x: torch.Tensor) -> None:
    """torch has no bfloat16 complex type and few operations on complex32 (float16 parts)."""
    if x.dtype in (torch.float16, torch.bfloat16):
        raise TypeError(f"{name} must be float32 or float64 to make phasors (torch has no complex type "
                        f"with {x.dtype} parts that these operations support), got {x.dtype}")


def _complex_parts(t: torch.Tensor) -> torch.Tensor:
    """A real part or imaginary part ready for ``torch.complex``: float16/bfloat16 become float32."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


# ---------------------------------------------------------------------------------------------
# The functional core: symbols, similarity, bundling, binding.
# ---------------------------------------------------------------------------------------------


def fhrr_wrap(x: torch.Tensor) -> torch.Tensor:
    """:func:`wrap` without input checks: ``(x + 1) mod 2 - 1``."""
    return torch.remainder(x + 1.0, 2.0) - 1.0


def wrap(x: torch.Tensor) -> torch.Tensor:
    """Map any real pi-normalised angle to its equivalent in [-1, 1): ``(x + 1) mod 2 - 1``.

    ``x`` is a finite real floating-point tensor of any shape (a single angle too).
    """
    _check_tensor("x", x, min_dim=0)
    _check_finite("x", x)
    return fhrr_wrap(x)


def to_complex(x: torch.Tensor) -> torch.Tensor:
    """The phasor view of a symbol: ``exp(i pi x)``, a complex tensor of the same shape.

    Any finite real angle is accepted (read modulo 2). ``x`` must be float32 or float64: torch has
    no bfloat16 complex type, so float16 and bfloat16 are refused with a TypeError (convert first).
    """
    _check_tensor("x", x)
    _check_complexable("x", x)
    _check_finite("x", x)
    return torch.polar(torch.ones_like(x), math.pi * x)


def from_complex(z: torch.Tensor) -> torch.Tensor:
    """Back from the complex plane to symbols: ``angle(z) / pi``, values in [-1, 1].

    ``z`` is a complex64 or complex128 tensor of any shape; the angle of 0 is taken as 0.
    """
    _check_phasors("z", z, min_dim=0)
    return torch.angle(z) / math.pi


def random_symbols(n: int, embed_dim: int, generator: torch.Generator | None = None,
                   device: torch.device | str | None = None,
                   dtype: torch.dtype | None = None) -> torch.Tensor:
    """``n`` random symbols of dimension ``embed_dim``: every angle independent and uniform on [-1, 1).

    Shape:
        Output: (n, embed_dim).
    """
    n = check_positive_int("n", n)
    embed_dim = check_positive_int("embed_dim", embed_dim)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype must be a real floating-point torch.dtype or None, got {dtype!r}")
    if device is not None:
        try:
            torch.device(device)
        except (RuntimeError, TypeError):
            raise ValueError(f"device must name a torch device such as 'cpu' or 'cuda', got {device!r}") \
                from None
    # Draw on the generator's device (so a seeded CPU generator gives the same symbols everywhere).
    where = generator.device if generator is not None else device
    x = 2.0 * torch.rand(n, embed_dim, generator=generator, device=where, dtype=dtype) - 1.0
    return x.to(device) if device is not None else x


def fhrr_similarity(
    a: torch.Tensor, b: torch.Tensor, pairwise: bool = False
) -> torch.Tensor:
    """Eqn. 1 without input checks: :func:`similarity` calls it once its arguments are
    checked, and the layers call it directly. The ``fhrr_*`` functions are the formulas on
    angles; use the checked ones unless your code has validated its tensors itself."""
    if not pairwise:
        return torch.cos(math.pi * (a - b)).mean(-1)
    # cos(x - y) = cos x cos y + sin x sin y: two matrix products, no (M, N, D) tensor
    ca, sa = torch.cos(math.pi * a), torch.sin(math.pi * a)  # (..., M, D)
    cb, sb = torch.cos(math.pi * b), torch.sin(math.pi * b)  # (..., N, D)
    dots = ca @ cb.transpose(-2, -1) + sa @ sb.transpose(-2, -1)  # (..., M, N)
    return dots / a.shape[-1]


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
    check_flag("pairwise", pairwise)
    min_dim = 2 if pairwise else 1
    _check_tensor("a", a, min_dim)
    _check_tensor("b", b, min_dim)
    _check_pair(a, b, min_dim, same_dtype=pairwise)
    _check_range("a", a)
    _check_range("b", b)
    return fhrr_similarity(a, b, pairwise)


def fhrr_bundle(symbols: torch.Tensor, dim: int = -2) -> torch.Tensor:
    """Eqn. 2 without input checks (see :func:`bundle`)."""
    re = torch.cos(math.pi * symbols).sum(dim)
    im = torch.sin(math.pi * symbols).sum(dim)
    return torch.atan2(im, re) / math.pi


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
    _check_symbols("symbols", symbols, 2)
    dim = check_int("dim", dim, minimum=None)
    nd = symbols.dim()
    if not -nd <= dim < nd or dim % nd == nd - 1:
        raise ValueError(f"dim must name a set dimension of symbols {tuple(symbols.shape)} "
                         f"(any but the last, the symbol dimension D), got dim={dim}")
    if symbols.shape[dim] == 0:
        raise ValueError(f"cannot bundle an empty set: symbols has shape {tuple(symbols.shape)} "
                         f"with size 0 along dim={dim}")
    return fhrr_bundle(symbols, dim)


def fhrr_bind(
    a: torch.Tensor, b: torch.Tensor, power: float | torch.Tensor = 1.0
) -> torch.Tensor:
    """Eqn. 3 without input checks (see :func:`bind`)."""
    return torch.remainder(a + power * b + 1.0, 2.0) - 1.0


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
    _check_tensor("a", a)
    _check_tensor("b", b)
    _check_pair(a, b, 1)
    _check_range("a", a)
    _check_range("b", b)
    if isinstance(power, torch.Tensor):
        if power.is_complex() or power.dtype == torch.bool:
            raise TypeError(f"power must be a real number or a real tensor, got dtype {power.dtype}")
        _check_broadcast("shapes of a, b and power", a=a.shape, b=b.shape, power=power.shape)
        if not torch.isfinite(power).all():
            raise ValueError("power must be finite, got a NaN or infinite entry")
    else:
        if isinstance(power, bool) or not isinstance(power, numbers.Real):
            raise TypeError(f"power must be a real number or a real tensor, got {type(power).__name__} "
                            f"{power!r}")
        if not math.isfinite(power):
            raise ValueError(f"power must be finite, got {power}")
    return fhrr_bind(a, b, power)


def unbind(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Undo :func:`bind`: rotate ``a`` back by ``b``, so ``unbind(bind(x, b), b) == x`` (mod 2).

    Shape:
        a (..., D), b (..., D) -> (..., D).
    """
    return bind(a, b, power=-1.0)


def fractional_power(base: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Fractional power encoding of real numbers: ``bind(0, base, power=x) = wrap(x * base)``.

    Nearby numbers get similar symbols; with ``base`` uniform on [-1, 1] the expected similarity of
    the codes of ``x`` and ``y`` is ``sinc(x - y) = sin(pi (x - y)) / (pi (x - y))``.

    Shape:
        base (D,), x (...) -> (..., D).
    """
    _check_symbols("base", base)
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
    return fhrr_wrap(x.unsqueeze(-1) * base)


# ---------------------------------------------------------------------------------------------
# Generalized bundling: the one neural layer of the paper.
# ---------------------------------------------------------------------------------------------


def fhrr_generalized_bundle(
    a, w_r=None, w_p=None, bias_real=None, bias_imag=None
) -> torch.Tensor:
    """Eqn. 4 without input checks (see :func:`generalized_bundle`)."""
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
    _check_tensor("a", a, 2)
    m, n = a.shape[-2], a.shape[-1]
    if m == 0:
        raise ValueError(f"cannot bundle an empty set: a has shape {tuple(a.shape)} with M = 0")
    _check_finite("a", a)
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
            _check_finite(name, w)
    bias_real = bias_imag = None
    if bias is not None:
        if isinstance(bias, bool) or not isinstance(bias, (numbers.Number, torch.Tensor)):
            raise TypeError(f"bias must be a number, a tensor or None, got {type(bias).__name__} {bias!r}")
        bias = torch.as_tensor(bias, device=a.device)
        if bias.dtype == torch.bool:
            raise TypeError(f"bias must be a real or complex number or tensor, got {bias.dtype}")
        out = a.shape[:-2] + (m if w_r is None else w_r.shape[0], n if w_p is None else w_p.shape[1])
        _check_broadcast("shapes of bias and the output (..., R, P)", bias=bias.shape, output=out)
        _check_finite("bias", bias)
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

    Weights are drawn from N(0, init_scale^2 / in_features) (variance scaling, as in the paper's code
    for ``init_scale=1``).

    ``init_scale=0`` is allowed: all weights start at 0, so the output starts at the bias's angle.
    The forward pass checks shapes and dtypes but reads no values (a NaN input gives NaN angles).

    Shape:
        Input: (..., in_features). Output: (..., out_features), angles in [-1, 1].
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, bias_init: complex = 1.0,
                 init_scale: float = 1.0):
        super().__init__()
        in_features = check_positive_int("in_features", in_features)
        out_features = check_positive_int("out_features", out_features)
        check_flag("bias", bias)
        if isinstance(bias_init, torch.Tensor) and bias_init.numel() == 1:
            bias_init = bias_init.item()
        if isinstance(bias_init, bool) or not isinstance(bias_init, numbers.Number):
            raise TypeError(f"bias_init must be a complex number, got {type(bias_init).__name__} "
                            f"{bias_init!r}")
        if not (math.isfinite(complex(bias_init).real) and math.isfinite(complex(bias_init).imag)):
            raise ValueError(f"bias_init must be finite, got {bias_init}")
        check_number("init_scale", init_scale, low=0.0)
        self.in_features, self.out_features = in_features, out_features
        std = init_scale / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.randn(in_features, out_features) * std)
        if bias:
            b = complex(bias_init)
            self.bias_real = nn.Parameter(torch.full((out_features,), b.real))
            self.bias_imag = nn.Parameter(torch.full((out_features,), b.imag))
        else:
            self.register_parameter("bias_real", None)
            self.register_parameter("bias_imag", None)

    def _check_input(self, x) -> None:
        shape = f"(..., {self.in_features})"
        check_module_input("x", x, self.weight, shape)
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x must have shape {shape}, got {tuple(x.shape)}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        return fhrr_generalized_bundle(x, None, self.weight, self.bias_real, self.bias_imag)

    def pre_activation(self, x: torch.Tensor) -> torch.Tensor:
        """The complex value ``exp(i pi x) W + b`` before its angle is taken (for plots).

        complex64 for a float32, float16 or bfloat16 layer (and under autocast), complex128 for float64.
        """
        self._check_input(x)
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

    def __init__(self, embed_dim: int, d_ff: int | None = None, out_scale: float = 1.0):
        super().__init__()
        embed_dim, d_ff = check_positive_int("embed_dim", embed_dim), _check_optional_size("d_ff", d_ff)
        check_number("out_scale", out_scale, low=0.0)
        d_ff = d_ff or 2 * embed_dim
        self.fc1 = PhasorLinear(embed_dim, d_ff)
        self.fc2 = PhasorLinear(d_ff, embed_dim, init_scale=out_scale)

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
    states no scale) up to 16% of the output angles (where it is negative) sit near +-1, a turn
    by pi, and 12 such blocks in a row
    forget their input. ``out_scale=0.25`` (the default here, measured in chapter 8) keeps a deep
    stack near the identity; ``out_scale=0`` makes every block start as the exact identity.
    The input is checked by the block's first phasor layer.

    Shape:
        Input: (..., embed_dim). Output: (..., embed_dim).
    """

    def __init__(self, embed_dim: int, d_ff: int | None = None, skip: bool = True, out_scale: float = 0.25):
        super().__init__()
        embed_dim, d_ff = check_positive_int("embed_dim", embed_dim), _check_optional_size("d_ff", d_ff)
        check_flag("skip", skip)
        check_number("out_scale", out_scale, low=0.0)
        self.mlp = PhasorMLP(embed_dim, d_ff, out_scale)
        self.skip = skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.mlp(x)  # (..., D)
        return fhrr_bind(x, h) if self.skip else h


# ---------------------------------------------------------------------------------------------
# Attention with symbols.
# ---------------------------------------------------------------------------------------------


def fhrr_attention(q, k, v, mask=None):
    """Eqn. 6 without input checks (see :func:`vsa_attention`)."""
    # (..., Tq, Tk) in [-1, 1]: no scaling, no softmax
    scores = fhrr_similarity(q, k, pairwise=True)
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)  # a masked key contributes nothing
    re = scores @ torch.cos(math.pi * v)  # (..., Tq, Dv): Re(sim(Q, K) exp(i pi V))
    im = scores @ torch.sin(math.pi * v)  # (..., Tq, Dv): Im(...)
    return torch.atan2(im, re) / math.pi, scores


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
        ``(output, scores)`` of shapes (..., Tq, Dv) and (..., Tq, Tk).
    """
    check_flag("fast", fast)
    target = _check_qkv(q, k, v, _check_symbols)
    if mask is not None:
        _check_mask(mask, target, "(..., Tq, Tk)")
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


def _check_phasors(name: str, z, min_dim: int = 1) -> None:
    if not isinstance(z, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(z).__name__}")
    if not z.is_complex():  # a ValueError, as it always was: an angle passed where a phasor belongs
        raise ValueError(f"{name} must be a complex tensor of phasors (see to_phasor), got dtype {z.dtype}")
    if z.dtype not in (torch.complex64, torch.complex128):
        raise TypeError(f"{name} must be a complex64 or complex128 tensor of phasors, got {z.dtype}")
    if z.dim() < min_dim:
        raise ValueError(f"{name} must have shape {_shape_text(min_dim)}, got {tuple(z.shape)}")
    if min_dim >= 1 and z.shape[-1] == 0:
        raise ValueError(f"{name} must have a symbol dimension D >= 1 (last dim), got {tuple(z.shape)}")


def to_phasor(x: torch.Tensor) -> torch.Tensor:
    """Symbols to phasors, ``exp(i pi x)`` (as :func:`to_complex`), with a backward pass that reuses
    the forward's cosines and sines. Any real angle is accepted (read modulo 2).

    ``x`` must be float32 or float64: torch has no bfloat16 complex type, so float16 and bfloat16
    are refused with a TypeError (convert first, or use ``vsa_attention(..., fast=True)``, which
    keeps (cos, sin) pairs and works in any floating dtype).

    Shape:
        (..., D) real -> (..., D) complex (complex64 for float32, complex128 for float64).
    """
    _check_tensor("x", x)
    _check_complexable("x", x)
    _check_finite("x", x)
    return _to_phasor(x)


def from_phasor(z: torch.Tensor) -> torch.Tensor:
    """Phasors (of any magnitude but 0) to symbols, ``angle(z) / pi`` (as :func:`from_complex`),
    values in [-1, 1], with a backward pass that needs no trigonometry. A phasor 0 (e.g. the bundle
    of two opposite symbols) is not refused: its angle is 0, but its gradient is not finite.

    Shape:
        (..., D) complex -> (..., D) real.
    """
    _check_phasors("z", z)
    return _from_phasor(z)


def bind_phasor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """:func:`bind` on phasors: the element-wise product ``a * b``, so that
    ``from_phasor(bind_phasor(to_phasor(x), to_phasor(y))) == bind(x, y)`` (mod 2).

    Shape:
        a (..., D), b (..., D) complex -> (..., D) complex (leading dims broadcast).
    """
    _check_phasors("a", a)
    _check_phasors("b", b)
    _check_pair(a, b, 1)
    return a * b


def unbind_phasor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """:func:`unbind` on phasors: ``a * conj(b)`` (the inverse of a unit phasor is its conjugate).

    Shape:
        a (..., D), b (..., D) complex -> (..., D) complex.
    """
    _check_phasors("a", a)
    _check_phasors("b", b)
    _check_pair(a, b, 1)
    return a * b.conj()


def bundle_phasor(z: torch.Tensor, dim: int = -2, normalize: bool = False) -> torch.Tensor:
    """:func:`bundle` on phasors: the sum over the set, ``sum_j z_j`` (Eqn. 2 before the angle).

    ``normalize=False`` (default, as torch-hd's ``multibundle``) keeps the magnitude, which counts
    how well the members agree, so that bundles of bundles add up member by member;
    ``normalize=True`` divides by it and returns the unit phasor of :func:`bundle`:
    ``from_phasor(bundle_phasor(to_phasor(x))) == bundle(x)`` either way.

    Shape:
        (..., K, D) complex for the default ``dim=-2`` -> (..., D) complex.
    """
    _check_phasors("z", z, 2)
    dim = check_int("dim", dim, minimum=None)
    check_flag("normalize", normalize)
    nd = z.dim()
    if not -nd <= dim < nd or dim % nd == nd - 1:
        raise ValueError(f"dim must name a set dimension of z {tuple(z.shape)} "
                         f"(any but the last, the symbol dimension D), got dim={dim}")
    if z.shape[dim] == 0:  # as bundle: the sum would be 0, a phasor without an angle
        raise ValueError(f"cannot bundle an empty set: z has shape {tuple(z.shape)} "
                         f"with size 0 along dim={dim}")
    out = z.sum(dim)
    return torch.sgn(out) if normalize else out


def _similarity_phasor(a: torch.Tensor, b: torch.Tensor, pairwise: bool = False) -> torch.Tensor:
    # Re(a conj(b)) = Re a Re b + Im a Im b: a real dot product of the interleaved (Re, Im) views.
    ar, br = _real_view(a), _real_view(b)  # (..., 2D)
    if pairwise:
        return ar @ br.transpose(-2, -1) / a.shape[-1]  # (..., M, N): one real matrix product
    return (ar * br).sum(-1) / a.shape[-1]  # (...)


def similarity_phasor(a: torch.Tensor, b: torch.Tensor, pairwise: bool = False) -> torch.Tensor:
    """:func:`similarity` on phasors: ``1/D * sum_i Re(a_i conj(b_i))``.

    On unit phasors it equals ``similarity`` of the angles; on unnormalised bundles it is linear in
    each member (torch-hd's ``dot_similarity`` divided by D).

    Shape:
        pairwise=False: a (..., D), b (..., D) complex -> (...) real (broadcast leading dims).
        pairwise=True: a (..., M, D), b (..., N, D) complex -> (..., M, N) real.
    """
    check_flag("pairwise", pairwise)
    min_dim = 2 if pairwise else 1
    _check_phasors("a", a, min_dim)
    _check_phasors("b", b, min_dim)
    _check_pair(a, b, min_dim, same_dtype=pairwise)
    return _similarity_phasor(a, b, pairwise)


def _vsa_attention_phasor(q, k, v, mask=None):
    scores = _similarity_phasor(q, k, pairwise=True)  # (..., Tq, Tk), real
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    out = scores @ _real_view(v)  # (..., Tq, 2 Dv): real scores times (Re, Im) of the values
    return torch.view_as_complex(out.unflatten(-1, (-1, 2))), scores


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


def vsa_attention_phasor(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`vsa_attention` on phasors: ``sim(Q, K) V`` (Eqn. 6 before the angle), unnormalised.

    ``from_phasor`` of the output is the output of ``vsa_attention`` on the angles.

    Shape:
        q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) complex; mask as in :func:`vsa_attention`
        -> ``(output, scores)``: (..., Tq, Dv) complex and (..., Tq, Tk) real.
    """
    target = _check_qkv(q, k, v, _check_phasors)
    if mask is not None:
        _check_mask(mask, target, "(..., Tq, Tk)")
    return _vsa_attention_phasor(q, k, v, mask)


def _check_block_input(block: nn.Module, x, mask, num_queries: int | None) -> None:
    """The input of an attention block, checked on entry (``__call__``): x (B, T, embed_dim) of the block's
    dtype and device, and a bool mask broadcastable to the scores (B, Tq, T)."""
    shape = f"(B, T, {block.embed_dim})"
    check_module_input("x", x, block.key.weight, shape, min_dim=3)
    if x.dim() != 3 or x.shape[-1] != block.embed_dim:
        raise ValueError(f"x must have shape {shape}, got {tuple(x.shape)}")
    if mask is not None:
        b, t = x.shape[:2]
        tq = t if num_queries is None else num_queries
        _check_mask(mask, (b, tq, t), "(B, T, T)" if num_queries is None else "(B, num_queries, T)")


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

    def __init__(self, embed_dim: int, d_ff: int | None = None, fast: bool = False):
        super().__init__()
        embed_dim, d_ff = check_positive_int("embed_dim", embed_dim), _check_optional_size("d_ff", d_ff)
        self.embed_dim, self.fast = embed_dim, check_flag("fast", fast)
        self.query = PhasorLinear(embed_dim, embed_dim)
        self.key = PhasorLinear(embed_dim, embed_dim)
        self.value = PhasorLinear(embed_dim, embed_dim)
        self.residual = ResidualBlock(embed_dim, d_ff or embed_dim)

    def _check_forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        _check_block_input(self, x, mask, num_queries=None)

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

    def __init__(self, embed_dim: int, num_queries: int = 32, d_ff: int | None = None, fast: bool = False):
        super().__init__()
        embed_dim, d_ff = check_positive_int("embed_dim", embed_dim), _check_optional_size("d_ff", d_ff)
        num_queries = check_positive_int("num_queries", num_queries)
        self.embed_dim, self.fast = embed_dim, check_flag("fast", fast)
        self.queries = nn.Parameter(random_symbols(num_queries, embed_dim))  # inducing points
        self.key, self.value = PhasorLinear(embed_dim, embed_dim), PhasorLinear(embed_dim, embed_dim)
        self.residual = ResidualBlock(embed_dim, d_ff or embed_dim)

    def _check_forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        _check_block_input(self, x, mask, num_queries=self.queries.shape[0])

    @checked(_check_forward)
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None):
        q = self.queries.expand(x.shape[0], -1, -1)  # (B, Q, D)
        attend = fhrr_attention_fast if self.fast else fhrr_attention
        a, scores = attend(q, self.key(x), self.value(x), mask)  # (B, Q, D), (B, Q, T)
        h = fhrr_bind(q, a)  # first skip: onto the queries
        return self.residual(h), scores
