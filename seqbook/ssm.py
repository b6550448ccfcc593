"""State-space models: S4D's diagonal SSM, Mamba's selective SSM and Mamba-2's duality.

A state-space model maps an input signal x(t) to an output y(t) through a state h(t),

    h'(t) = A h(t) + B x(t),    y(t) = C h(t) + D x(t),

one such system per channel, with an N-dimensional state. With a *diagonal* A (S4D;
Gu et al., 2022) each state coordinate is a decaying memory of the input. Sampled with
a step Delta by the zero-order hold (the input held constant over each step),

    A_bar = exp(Delta A),    B_bar = (A_bar - 1) / A * B,                (ZOH)
    h_t = A_bar h_{t-1} + B_bar x_t,    y_t = C h_t + D x_t,            (recurrence)

and because A_bar, B_bar, C do not change with t, the output is also a causal
convolution of the input with the kernel K_k = C A_bar^k B_bar (:func:`ssm_kernel`,
:func:`ssm_convolution`): one model, a recurrent view for generation and a
convolutional view for training.

Mamba (Gu and Dao, 2023) makes Delta, B and C functions of the input, Delta =
softplus(Linear(x) + bias), B = Linear(x), C = Linear(x): the *selective* SSM
(:func:`selective_scan`). It is no longer a convolution, but still a gated linear
recurrence, so it runs on the scans of :mod:`seqbook.scan`
(:func:`selective_scan_parallel`). :class:`MambaBlock` is the mixer of a Mamba layer,
equal to Hugging Face's ``MambaMixer`` (:meth:`MambaBlock.from_hf`).

Mamba-2 (Dao and Gu, 2024) takes a scalar gate a_t per head, and the SSM becomes
masked linear attention, Y = (L o C B^T) X with the decay mask L of
:func:`decay_mask`: :func:`ssd_attention_form` against the loop :func:`ssd_recurrent`.
:func:`ssd_chunk_scan` computes it by chunks, Mamba-2's algorithm, and
:class:`Mamba2Block` is the mixer of a Mamba-2 layer, equal to Hugging Face's
``Mamba2Mixer`` (:meth:`Mamba2Block.from_hf`).

Layout: batch first, (batch, T, E) for sequences of E channels; N is the state size.
B and C name the SSM's matrices here, so the batch size is written ``batch``.
"""

from __future__ import annotations

import importlib
import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .attention import causal_mask
from .checks import (
    autocast_enabled,
    check_flag,
    check_float_tensor,
    check_ids,
    check_int,
    check_like,
    check_number,
    check_positive_int,
    check_tensor,
    checked,
)
from .scan import log_space_scan, parallel_scan

__all__ = [
    "discretize_zoh",
    "ssm_recurrent",
    "ssm_kernel",
    "ssm_convolution",
    "DiagonalSSM",
    "hippo_legs",
    "legendre_basis",
    "legs_scan",
    "dplr_kernel",
    "selective_scan",
    "selective_scan_parallel",
    "MambaBlock",
    "MambaLM",
    "decay_mask",
    "ssd_attention_form",
    "ssd_recurrent",
    "ssd_chunk_scan",
    "Mamba2Block",
]


def _check_one_dtype(tensors: dict) -> None:
    """Every tensor given has one dtype (autocast aside)."""
    first = next(iter(tensors.values()))
    if len({t.dtype for t in tensors.values()}) > 1 and not autocast_enabled(first):
        got = ", ".join(f"{k}: {t.dtype}" for k, t in tensors.items())
        raise TypeError(f"{', '.join(tensors)} must have one dtype, got {got}")


# ---------------------------------------------------------------------------------
# 1. A diagonal SSM (S4D): the recurrent and the convolutional view.
# ---------------------------------------------------------------------------------


def _check_zoh(A, B, delta) -> None:
    E, N = A.shape
    check_float_tensor("B", B, shape=(E, N), names=f"({E}, {N})")
    check_float_tensor("delta", delta, shape=(E,), names=f"({E},)")
    _check_one_dtype({"A": A, "B": B, "delta": delta})


@checked(_check_zoh, A=partial(check_float_tensor, ndim=2, names="(E, N)"))
def discretize_zoh(A: torch.Tensor, B: torch.Tensor, delta: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-order-hold discretisation of a diagonal SSM (Gu et al., 2022, S4D).

        A_bar = exp(Delta A),    B_bar = (A_bar - 1) / A * B

    The exact solution of h' = A h + B x over one step of length Delta with x held
    constant. A is the diagonal of the state matrix, real and negative (a decay).

    Shape:
        A, B: (E, N), delta: (E,) -> A_bar, B_bar: (E, N).
    """
    A_bar = torch.exp(delta[:, None] * A)                    # (E, N)
    B_bar = (A_bar - 1) / A * B                              # (E, N)
    return A_bar, B_bar


# The input x of the SSMs of this module, checked first: its shape gives the sizes of the others.
_SEQUENCE = partial(check_float_tensor, ndim=3, names="(batch, T, E)")


_NOT_TAKEN = object()  # the default of a validator's argument the checked function lacks


def _check_ssm(x, A_bar=_NOT_TAKEN, B_bar=_NOT_TAKEN, C=_NOT_TAKEN, K=_NOT_TAKEN,
               D=None) -> None:
    """The two views' arguments against x's E channels: ssm_recurrent's A_bar, B_bar, C
    (E, N), or ssm_convolution's kernel K (E, L >= T); and D (E,)."""
    _, T, E = x.shape
    tensors = {"x": x}
    if K is _NOT_TAKEN:  # ssm_recurrent
        check_float_tensor("A_bar", A_bar, shape=(E, None), names=f"({E}, N)")
        N = A_bar.shape[1]
        for name, t in (("B_bar", B_bar), ("C", C)):
            check_float_tensor(name, t, shape=(E, N), names=f"({E}, {N})")
        tensors.update(A_bar=A_bar, B_bar=B_bar, C=C)
    else:  # ssm_convolution
        check_float_tensor("K", K, shape=(E, None), names=f"({E}, L)")
        if K.shape[1] < T:
            raise ValueError(f"K must have at least T = {T} taps, got {K.shape[1]}")
        tensors["K"] = K
    if D is not None:
        tensors["D"] = check_float_tensor("D", D, shape=(E,), names=f"({E},)")
    _check_one_dtype(tensors)


@checked(_check_ssm, x=_SEQUENCE)
def ssm_recurrent(x: torch.Tensor, A_bar: torch.Tensor, B_bar: torch.Tensor,
                  C: torch.Tensor, D: torch.Tensor | None = None) -> torch.Tensor:
    """A discrete diagonal SSM, step by step: the recurrent view.

        h_t = A_bar h_{t-1} + B_bar x_t,    y_t = C h_t + D x_t     (h_0 = 0)

    Each of the E channels has its own N-dimensional state; products are elementwise
    because A_bar is diagonal.

    Shape:
        x: (batch, T, E), A_bar, B_bar, C: (E, N), D: (E,) -> y: (batch, T, E).
    """
    h = x.new_zeros(x.shape[0], *A_bar.shape)                # (batch, E, N)
    ys = []
    for x_t in x.unbind(1):  # unbind: the backward pass stays linear in T
        h = A_bar * h + B_bar * x_t[..., None]               # (batch, E, N)
        ys.append((h * C).sum(dim=-1))                       # (batch, E)
    y = torch.stack(ys, dim=1)                               # (batch, T, E)
    return y if D is None else y + D * x


def _check_kernel(A_bar, B_bar, C) -> None:
    for name, t in (("B_bar", B_bar), ("C", C)):
        check_float_tensor(name, t, shape=A_bar.shape, names=f"{tuple(A_bar.shape)}")
    _check_one_dtype({"A_bar": A_bar, "B_bar": B_bar, "C": C})


@checked(_check_kernel, A_bar=partial(check_float_tensor, ndim=2, names="(E, N)"), length=check_positive_int)
def ssm_kernel(A_bar: torch.Tensor, B_bar: torch.Tensor, C: torch.Tensor,
               length: int) -> torch.Tensor:
    """The convolution kernel of a discrete diagonal SSM: ``K_k = C A_bar^k B_bar``.

    Unrolling the recurrence from h_0 = 0 gives y_t = sum_{k=0}^{t} C A_bar^k B_bar
    x_{t-k}: the response to an impulse, k steps later, is K_k.

    Shape:
        A_bar, B_bar, C: (E, N) -> K: (E, length).
    """
    k = torch.arange(length, device=A_bar.device, dtype=A_bar.dtype)
    powers = A_bar[..., None] ** k                           # (E, N, L)  A_bar^k
    return ((C * B_bar)[..., None] * powers).sum(dim=1)      # (E, L)


@checked(_check_ssm, x=_SEQUENCE, fft=check_flag)
def ssm_convolution(x: torch.Tensor, K: torch.Tensor, D: torch.Tensor | None = None,
                    fft: bool = False) -> torch.Tensor:
    """The convolutional view: ``y_t = sum_{k=0}^{t} K_k x_{t-k} + D x_t``, per channel.

    Causal: y_t sees x_t and the past. Direct, a depthwise ``F.conv1d`` (which
    correlates, so the kernel is flipped) of the input padded with T - 1 zeros on the
    left, O(T^2) per channel; with ``fft=True``, a product of Fourier transforms of
    length 2T, O(T log T), the way S4 trains.

    Shape:
        x: (batch, T, E), K: (E, L) with L >= T (only K_0..K_{T-1} are used),
        D: (E,) -> y: (batch, T, E).
    """
    _, T, E = x.shape
    K, u = K[:, :T], x.transpose(1, 2)                       # (E, T), (batch, E, T)
    if fft:
        n = 2 * T                                            # no wrap-around
        y = torch.fft.irfft(torch.fft.rfft(u, n) * torch.fft.rfft(K, n), n)[..., :T]
    else:
        weight = K.flip(-1)[:, None, :]                      # (E, 1, T) flipped
        y = F.conv1d(F.pad(u, (T - 1, 0)), weight, groups=E)  # (batch, E, T)
    y = y.transpose(1, 2)                                    # (batch, T, E)
    return y if D is None else y + D * x


class DiagonalSSM(nn.Module):
    """A diagonal state-space layer, S4D-style (Gu et al., 2022), with real A.

    E independent channels, each an SSM with N states: A = -exp(A_log) < 0 (S4D-Real
    initialisation, A_n = -(n + 1)), B, C, D learned, a learned step Delta per channel
    (log-uniform in [dt_min, dt_max] at first), discretised by :func:`discretize_zoh`.
    ``forward`` runs the convolutional view (FFT); ``ssm_recurrent(x,
    *layer.discretize(), layer.C, layer.D)`` runs the recurrent view, with the same
    numbers.

    Shape:
        x: (batch, T, embed_dim) -> y: (batch, T, embed_dim).
    """

    def __init__(self, embed_dim: int, d_state: int = 16, dt_min: float = 1e-3,
                 dt_max: float = 1e-1):
        super().__init__()
        E = self.embed_dim = check_positive_int("embed_dim", embed_dim)
        N = self.d_state = check_positive_int("d_state", d_state)
        dt_min = check_number("dt_min", dt_min, low=0.0, low_open=True)
        dt_max = check_number("dt_max", dt_max, low=dt_min)
        n = torch.arange(1, N + 1, dtype=torch.float32)
        self.A_log = nn.Parameter(n.log().repeat(E, 1))          # (E, N)  A = -n
        self.B = nn.Parameter(torch.ones(E, N))                   # (E, N)
        self.C = nn.Parameter(torch.randn(E, N) / math.sqrt(N))   # (E, N)
        self.D = nn.Parameter(torch.randn(E))                     # (E,)
        lo, hi = math.log(dt_min), math.log(dt_max)
        self.log_dt = nn.Parameter(torch.rand(E) * (hi - lo) + lo)  # (E,)

    def discretize(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(A_bar, B_bar)``, each (E, N), by the zero-order hold."""
        return discretize_zoh(-torch.exp(self.A_log), self.B, self.log_dt.exp())

    def kernel(self, length: int) -> torch.Tensor:
        """The convolution kernel K_0, ..., K_{length-1}: (E, length)."""
        return ssm_kernel(*self.discretize(), self.C, length)

    def _check_forward(self, x) -> None:
        E = self.embed_dim
        check_tensor("x", x, shape=(None, None, E), names=f"(batch, T, {E})")
        check_like("x", x, self.B)

    @checked(_check_forward)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ssm_convolution(x, self.kernel(x.shape[1]), self.D, fft=True)

    def extra_repr(self) -> str:
        return f"{self.embed_dim}, d_state={self.d_state}"


# ---------------------------------------------------------------------------------
# 1b. HiPPO: where S4's A comes from.
# ---------------------------------------------------------------------------------


@checked(d_state=check_positive_int)
def hippo_legs(d_state: int) -> tuple[torch.Tensor, torch.Tensor]:
    """HiPPO-LegS's matrices (Gu et al., 2020), in float64, with A's stable sign.

        A_nk = -sqrt(2n + 1) sqrt(2k + 1) (n > k),  -(n + 1) (n = k),  0 (n < k)
        B_n = sqrt(2n + 1)

    The coefficients c(t) of the input's history on the first N Legendre polynomials,
    over [0, t] with equal weight, follow c'(t) = (A c(t) + B x(t)) / t
    (:func:`legs_scan`). S4 uses the same A in the time-invariant h' = A h + B x.

    Shape:
        A: (N, N), B: (N,) with N = d_state.
    """
    n = torch.arange(d_state, dtype=torch.float64)
    r = (2 * n + 1).sqrt()                                   # (N,)
    A = torch.tril(-r[:, None] * r[None, :], diagonal=-1) - torch.diag(n + 1)  # (N, N)
    return A, r


@checked(x=check_float_tensor, d_state=check_positive_int)
def legendre_basis(x: torch.Tensor, d_state: int) -> torch.Tensor:
    """The scaled Legendre polynomials sqrt(2n + 1) P_n(x), n = 0 .. N - 1.

    Bonnet's recursion, (n + 1) P_{n+1} = (2n + 1) x P_n - n P_{n-1}, from P_0 = 1 and
    P_1 = x. Scaled so, they are orthonormal on [-1, 1] under the weight dx / 2: a
    function f on [-1, 1] is sum_n c_n sqrt(2n + 1) P_n(x) with
    c_n = int f(x) sqrt(2n + 1) P_n(x) dx / 2.

    Shape:
        x: (...) -> (..., N) with N = d_state.
    """
    P = [torch.ones_like(x), x]
    for n in range(1, d_state - 1):
        P.append(((2 * n + 1) * x * P[n] - n * P[n - 1]) / (n + 1))
    scale = torch.arange(d_state, dtype=x.dtype, device=x.device).mul(2).add(1).sqrt()
    return torch.stack(P[:d_state], dim=-1) * scale          # (..., N)


@checked(x=partial(check_float_tensor, ndim=(1, 2), names="(T,) or (batch, T)"),
         d_state=check_positive_int)
def legs_scan(x: torch.Tensor, d_state: int) -> torch.Tensor:
    """HiPPO-LegS online: after each step, the Legendre coefficients of the past.

    The step k (k = 1 .. T) integrates c'(t) = (A c + B x) / t from t = k - 1 to k by
    the bilinear rule, with the input x_k held over the step and 1/t taken at the
    middle of the step, t_k = k - 1/2 (at t = 0 the equation is singular):

        (I - A / 2t_k) c_k = (I + A / 2t_k) c_{k-1} + B x_k / t_k

    Then x_1 .. x_k, stretched onto [-1, 1], is about sum_n c_{k,n} sqrt(2n + 1) P_n
    (:func:`legendre_basis`): N numbers summarise the whole history, at every length.

    Shape:
        x: (T,) or (batch, T) -> c: (T, N) or (batch, T, N) with N = d_state.
    """
    A, B = (m.to(x) for m in hippo_legs(d_state))            # (N, N), (N,)
    eye = torch.eye(d_state, dtype=x.dtype, device=x.device)
    c = x.new_zeros(*x.shape[:-1], d_state)                  # (..., N)
    out = []
    for k in range(1, x.shape[-1] + 1):
        t = k - 0.5                                          # the middle of step k
        rhs = c + c @ A.T / (2 * t) + B * x[..., k - 1, None] / t    # (..., N)
        lhs = eye - A / (2 * t)                                      # lower triangular
        c = torch.linalg.solve_triangular(lhs, rhs[..., None], upper=False)[..., 0]
        out.append(c)
    return torch.stack(out, dim=-2)                          # (..., T, N)


def _check_dplr(Lambda, P, B, C) -> None:
    check_tensor("Lambda", Lambda, ndim=1, names="(N,)")
    N = Lambda.shape[0]
    for name, t in (("P", P), ("B", B), ("C", C)):
        check_tensor(name, t, shape=(N,), names=f"({N},)")
    for name, t in (("Lambda", Lambda), ("P", P), ("B", B), ("C", C)):
        if not t.is_complex():
            raise TypeError(f"{name} must be a complex tensor, got {t.dtype}")
    _check_one_dtype({"Lambda": Lambda, "P": P, "B": B, "C": C})


@checked(_check_dplr, step=partial(check_number, low=0.0, low_open=True),
         length=check_positive_int)
def dplr_kernel(Lambda: torch.Tensor, P: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                step: float, length: int) -> torch.Tensor:
    """S4's kernel of A = diag(Lambda) - P P^*, discretised by the bilinear rule.

    With A_bar = (I - step/2 A)^-1 (I + step/2 A) and B_bar = (I - step/2 A)^-1 step B,
    the kernel's generating function at the L-th roots of unity (z^L = 1) is

        K_hat(z) = sum_{k<L} K_k z^k = 2 C^T ((2/step)(1 - z) - (1 + z) A)^-1 B

    where C stands for S4's C~ = (I - A_bar^L)^T C_orig, which S4 learns directly. The
    Woodbury identity turns the inverse of a diagonal plus (1 + z) P P^* into four
    Cauchy sums, sum_n u_n v_n / ((2/step)(1 - z) - (1 + z) Lambda_n); the inverse FFT
    of the L values is the kernel. O(N L) work and an FFT; no N x N matrix.
    (Gu et al., 2022, Algorithm 1, without the fast Cauchy algorithm.)

    Lambda, P, B, C are in the eigenbasis of A's normal part, from a real system: the
    kernel is real, and the real part is returned.

    Shape:
        Lambda, P, B, C: (N,) complex -> K: (length,) real.
    """
    k = torch.arange(length, dtype=Lambda.real.dtype, device=Lambda.device)
    z = torch.exp(-2j * math.pi * k / length)[:, None]      # (L, 1): the roots of unity
    denom = (2 / step) * (1 - z) - (1 + z) * Lambda          # (L, N)

    def cauchy(u, v):  # sum_n u_n v_n / denom_n at every z: (L,)
        return (u * v / denom).sum(-1)

    k_CB, k_CP = cauchy(C, B), cauchy(C, P)
    k_PB, k_PP = cauchy(P.conj(), B), cauchy(P.conj(), P)
    z = z[:, 0]                                              # (L,)
    K_hat = 2 * (k_CB - (1 + z) * k_CP * k_PB / (1 + (1 + z) * k_PP))  # Woodbury
    return torch.fft.ifft(K_hat).real                        # (L,)


# ---------------------------------------------------------------------------------
# 2. Mamba's selective SSM.
# ---------------------------------------------------------------------------------


def _check_selective(x, delta, A, B, C, D) -> None:
    b, T, E = x.shape
    check_float_tensor("delta", delta, shape=(b, T, E), names=f"({b}, {T}, {E})")
    check_float_tensor("A", A, shape=(E, None), names=f"({E}, N)")
    N = A.shape[1]
    for name, t in (("B", B), ("C", C)):
        check_float_tensor(name, t, shape=(b, T, N), names=f"({b}, {T}, {N})")
    tensors = {"x": x, "delta": delta, "A": A, "B": B, "C": C}
    if D is not None:
        tensors["D"] = check_float_tensor("D", D, shape=(E,), names=f"({E},)")
    _check_one_dtype(tensors)


@checked(_check_selective, x=_SEQUENCE)
def selective_scan(x: torch.Tensor, delta: torch.Tensor, A: torch.Tensor,
                   B: torch.Tensor, C: torch.Tensor, D: torch.Tensor | None = None
                   ) -> torch.Tensor:
    """Mamba's selective SSM, step by step (Gu and Dao, 2023, Algorithm 2).

        h_t = exp(Delta_t A) h_{t-1} + Delta_t B_t x_t,    y_t = C_t h_t + D x_t

    Delta_t, B_t and C_t change with the input, so the model chooses, token by token,
    what to write into its state and what to forget. Like Mamba's own code (and
    Hugging Face's), B is discretised by Euler's rule, B_bar = Delta B, the first-order
    term of the ZOH's (A_bar - 1) / A B; A_bar = exp(Delta A) is exact.

    Args:
        x: the input, E channels.
        delta: the step sizes, > 0 (Mamba: softplus of a projection of x).
        A: the diagonal state matrix, negative (Mamba: -exp(A_log)), not selective.
        B, C: the input and output matrices, one per step, shared by the channels.
        D: the skip connection, optional.

    Shape:
        x, delta: (batch, T, E), A: (E, N), B, C: (batch, T, N), D: (E,)
        -> y: (batch, T, E).
    """
    h = x.new_zeros(x.shape[0], *A.shape)                    # (batch, E, N)
    ys = []
    # step t's slices by unbind: the backward pass stays linear in T (T slices
    # delta[:, t] would each give back a gradient as large as delta)
    steps = zip(delta.unbind(1), B.unbind(1), C.unbind(1), x.unbind(1), strict=True)
    for dt, B_t, C_t, x_t in steps:
        dt = dt[..., None]                                   # (batch, E, 1)
        A_bar = torch.exp(dt * A)                            # (batch, E, N)
        B_bar_x = dt * B_t[:, None, :] * x_t[..., None]      # (batch, E, N)
        h = A_bar * h + B_bar_x                              # (batch, E, N)
        ys.append((h * C_t[:, None, :]).sum(dim=-1))         # (batch, E)
    y = torch.stack(ys, dim=1)                               # (batch, T, E)
    return y if D is None else y + D * x


@checked(_check_selective, x=_SEQUENCE, log_space=check_flag)
def selective_scan_parallel(x: torch.Tensor, delta: torch.Tensor, A: torch.Tensor,
                            B: torch.Tensor, C: torch.Tensor,
                            D: torch.Tensor | None = None, log_space: bool = False
                            ) -> torch.Tensor:
    """The selective SSM of :func:`selective_scan` on a parallel scan.

    Every step's gate a_t = exp(Delta_t A) and input b_t = Delta_t B_t x_t are known
    before the recurrence, so all states come from one scan over T: Hillis and
    Steele's :func:`~seqbook.scan.parallel_scan`, or with ``log_space=True``
    :func:`~seqbook.scan.log_space_scan`, which takes log a_t = Delta_t A directly.
    Both materialise every state, (batch, T, E, N) numbers (Mamba's kernel keeps them
    in on-chip memory instead); the doubling scan keeps the pairs (a, b) of each of its
    ceil(log2 T) rounds, about 2 log2 T such tensors, for the backward pass, the
    log-space scan about ten, whatever T.

    Shape:
        x, delta: (batch, T, E), A: (E, N), B, C: (batch, T, N), D: (E,)
        -> y: (batch, T, E).
    """
    dt = delta[..., None]                                    # (batch, T, E, 1)
    log_a = dt * A                                           # (batch, T, E, N)
    b = dt * B[:, :, None, :] * x[..., None]                 # (batch, T, E, N)
    h = log_space_scan(log_a, b) if log_space else parallel_scan(log_a.exp(), b)
    y = torch.einsum("bten,btn->bte", h, C)                  # (batch, T, E)
    return y if D is None else y + D * x


_SCANS = ("loop", "parallel", "log")


def _check_mixer_input(self, u) -> None:
    """The input of a Mamba or Mamba-2 mixer's forward: (batch, T, embed_dim)."""
    width = self.embed_dim
    check_tensor("u", u, shape=(None, None, width), names=f"(batch, T, {width})")
    check_like("u", u, self.in_proj.weight)


def _check_mixer_step(self, u, state=None) -> None:
    """The input of a mixer's step, (batch, embed_dim), and its state: None or the pair
    (conv_state, h) of the shapes the mixer's ``_state_shapes`` gives."""
    width = self.embed_dim
    check_tensor("u", u, shape=(None, width), names=f"(batch, {width})")
    check_like("u", u, self.in_proj.weight)
    if state is None:
        return
    if not isinstance(state, (tuple, list)) or len(state) != 2:
        raise TypeError(f"state must be a pair (conv_state, h), "
                        f"got {type(state).__name__}")
    shapes = self._state_shapes(u.shape[0])
    for (name, shape), value in zip(shapes.items(), state, strict=True):
        check_tensor(name, value, shape=shape, nonempty=name == "h")
        check_like(name, value, self.in_proj.weight)


def _hf_mixer_sizes(mixer, model: str, name: str) -> tuple[int, int]:
    """The width and the inner width of a Hugging Face mixer that ``from_hf`` can copy:
    ``mixer`` must be a ``transformers.models.<model>`` ``<name>`` with the SiLU activation
    and an inner width that is a multiple of its width."""
    try:
        module = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
        cls = getattr(module, name)
    except ImportError:  # without transformers there is no mixer to copy
        cls = None
    if cls is None or not isinstance(mixer, cls):
        raise TypeError(f"mixer must be a transformers {name}, got {type(mixer).__name__}")
    if mixer.activation != "silu":
        raise ValueError(f"mixer must use the SiLU activation, got "
                         f"config.hidden_act={mixer.activation!r}")
    width, E = mixer.hidden_size, mixer.intermediate_size
    if E % width:
        raise ValueError(f"mixer's intermediate_size must be a multiple of its "
                         f"hidden_size, got {E} and {width}")
    return width, E


class MambaBlock(nn.Module):
    """The mixer of a Mamba layer (Gu and Dao, 2023): a gated selective SSM.

        x, z = in_proj(u)                   two branches, E = expand * embed_dim wide
        x = SiLU(conv1d(x))                 a causal depthwise convolution over time
        dt, B, C = x_proj(x)                split into dt_rank, N and N features
        Delta = softplus(dt_proj(dt))       the step, one per channel and token
        y = selective_scan(x, Delta, -exp(A_log), B, C, D)
        out = out_proj(y * SiLU(z))

    The block Mamba stacks adds an RMSNorm before and a residual connection around it
    (Hugging Face's ``MambaBlock``); this is what Hugging Face calls ``MambaMixer``,
    and :meth:`from_hf` copies one. The names follow Mamba's code; the convolution is
    padded with d_conv - 1 steps and cut to T, so it sees no future step.

    Args:
        embed_dim: width of the input and the output.
        d_state: state size N per channel.
        d_conv: kernel size of the depthwise convolution.
        expand: E = expand * embed_dim channels inside.
        dt_rank: width of the low-rank projection to Delta; "auto" is
            ceil(embed_dim / 16), as in Mamba.
        bias: biases of in_proj and out_proj; conv_bias: of the convolution.
        scan: "parallel" (:func:`selective_scan_parallel`, the default), "log" (the
            same in log space) or "loop" (:func:`selective_scan`); same numbers.

    Shape:
        u: (batch, T, embed_dim) -> (batch, T, embed_dim).
    """

    def __init__(self, embed_dim: int, d_state: int = 16, d_conv: int = 4,
                 expand: int = 2, dt_rank: int | str = "auto", bias: bool = False,
                 conv_bias: bool = True, scan: str = "parallel"):
        super().__init__()
        width = self.embed_dim = check_positive_int("embed_dim", embed_dim)
        N = self.d_state = check_positive_int("d_state", d_state)
        self.d_conv = check_positive_int("d_conv", d_conv)
        E = self.d_inner = check_positive_int("expand", expand) * width
        if dt_rank == "auto":
            dt_rank = math.ceil(width / 16)
        R = self.dt_rank = check_int("dt_rank", dt_rank)
        check_flag("bias", bias)
        check_flag("conv_bias", conv_bias)
        if scan not in _SCANS:
            raise ValueError(f"scan must be one of {_SCANS}, got {scan!r}")
        self.scan = scan
        self.in_proj = nn.Linear(width, 2 * E, bias=bias)
        self.conv1d = nn.Conv1d(E, E, d_conv, groups=E, padding=d_conv - 1,
                                bias=conv_bias)
        self.x_proj = nn.Linear(E, R + 2 * N, bias=False)
        self.dt_proj = nn.Linear(R, E, bias=True)
        self.A_log = nn.Parameter(torch.arange(1, N + 1.0).log().repeat(E, 1))  # (E, N)
        self.D = nn.Parameter(torch.ones(E))                                  # (E,)
        self.out_proj = nn.Linear(E, width, bias=bias)
        with torch.no_grad():  # Mamba's: Delta log-uniform in [1e-3, 0.1] at first
            nn.init.uniform_(self.dt_proj.weight, -R**-0.5, R**-0.5)
            dt = torch.exp(torch.rand(E) * (math.log(0.1) - math.log(1e-3))
                           + math.log(1e-3))
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1

    @checked(_check_mixer_input)
    def forward(self, u: torch.Tensor) -> torch.Tensor:
        T, N = u.shape[1], self.d_state
        x, z = self.in_proj(u).chunk(2, dim=-1)                   # (batch, T, E) each
        x = self.conv1d(x.transpose(1, 2))[..., :T].transpose(1, 2)  # (batch, T, E)
        x = F.silu(x)
        dt, B, C = self.x_proj(x).split([self.dt_rank, N, N], dim=-1)  # R, N, N
        delta = F.softplus(self.dt_proj(dt))                      # (batch, T, E)
        A = -torch.exp(self.A_log)                                # (E, N)
        if self.scan == "loop":
            y = selective_scan(x, delta, A, B, C, self.D)         # (batch, T, E)
        else:
            y = selective_scan_parallel(x, delta, A, B, C, self.D,
                                        log_space=self.scan == "log")
        return self.out_proj(y * F.silu(z))                       # (batch, T, width)

    def _state_shapes(self, batch: int) -> dict:
        """The shapes of :meth:`step`'s state for ``batch`` sequences, by name."""
        return {"conv_state": (batch, self.d_inner, self.d_conv - 1),
                "h": (batch, self.d_inner, self.d_state)}

    @checked(_check_mixer_step)
    def step(self, u: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None
             ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """One token, for generation: the recurrent form of :meth:`forward`.

        The state is the pair (conv_state, h): the last ``d_conv - 1`` inputs of the
        convolution and the SSM's state h_{t-1} of eq. (10.15), zeros by default.
        Its size does not depend on how many tokens came before, and neither does the
        work of a step (Mamba's ``selective_state_update``, Hugging Face's
        ``slow_forward`` with a cache). Feeding a sequence token by token gives the
        outputs of :meth:`forward`.

        Returns:
            ``(out, state)``.

        Shape:
            u: (batch, embed_dim), conv_state: (batch, E, d_conv - 1), h: (batch, E, N)
            -> out: (batch, embed_dim).
        """
        N = self.d_state
        x, z = self.in_proj(u).chunk(2, dim=-1)                   # (batch, E) each
        if state is None:
            state = (x.new_zeros(*x.shape, self.d_conv - 1), x.new_zeros(*x.shape, N))
        conv_state, h = state
        window = torch.cat([conv_state, x[..., None]], dim=-1)    # (batch, E, d_conv)
        x = (window * self.conv1d.weight[:, 0]).sum(dim=-1)       # (batch, E)
        if self.conv1d.bias is not None:
            x = x + self.conv1d.bias
        x = F.silu(x)
        dt, B, C = self.x_proj(x).split([self.dt_rank, N, N], dim=-1)  # R, N, N
        delta = F.softplus(self.dt_proj(dt))[..., None]           # (batch, E, 1)
        A = -torch.exp(self.A_log)                                # (E, N)
        h = torch.exp(delta * A) * h + delta * B[:, None] * x[..., None]  # (batch, E, N)
        y = (h * C[:, None]).sum(dim=-1) + self.D * x             # (batch, E)
        return self.out_proj(y * F.silu(z)), (window[..., 1:], h)

    @classmethod
    def from_hf(cls, mixer, scan: str = "parallel") -> MambaBlock:
        """A copy of a Hugging Face ``transformers`` ``MambaMixer``: the same function.

        The sizes are read from ``mixer``; the copy has its dtype, device and train/eval
        mode. ``transformers`` is needed only to make ``mixer``.

        Raises:
            TypeError: ``mixer`` is not a ``MambaMixer``.
            ValueError: its activation is not SiLU, or its inner width is not an
                integer multiple of its width.
        """
        width, E = _hf_mixer_sizes(mixer, "mamba", "MambaMixer")
        weight = mixer.in_proj.weight
        ours = cls(width, d_state=mixer.ssm_state_size, d_conv=mixer.conv_kernel_size,
                   expand=E // width, dt_rank=mixer.time_step_rank,
                   bias=mixer.in_proj.bias is not None,
                   conv_bias=mixer.conv1d.bias is not None, scan=scan)
        ours = ours.to(weight.device, weight.dtype)  # the dtype first: float32 rounds
        ours.load_state_dict(mixer.state_dict())  # the same names and shapes
        return ours.train(mixer.training)

    def extra_repr(self) -> str:
        return (f"{self.embed_dim}, d_state={self.d_state}, d_conv={self.d_conv}, "
                f"d_inner={self.d_inner}, dt_rank={self.dt_rank}, scan={self.scan!r}")


class MambaLM(nn.Module):
    """A Mamba language model (Gu and Dao, 2023): :class:`MambaBlock` mixers in residual
    blocks, or Mamba-2's :class:`Mamba2Block` (Dao and Gu, 2024) with ``mamba2=True``.

        x_0 = E[ids]
        x <- x + MambaBlock(RMSNorm(x))     (num_layers times)
        logits = RMSNorm(x) W_E^T           (the head shares the token embedding)

    Hugging Face's ``MambaForCausalLM`` in small: no attention, no MLP (the block's
    gate and projections take its place), no position embedding. :meth:`forward` runs
    a whole sequence on the parallel scan from a zero state (training, evaluation);
    :meth:`step` runs one token from a state of fixed size, one
    (conv_state, h) per layer, for generation.

    The embedding starts normal with standard deviation ``init_std`` (GPT-2's
    0.02); the blocks keep :class:`MambaBlock`'s initialisation.

    Args:
        vocab_size: number of token ids.
        embed_dim: model width.
        num_layers: number of blocks.
        d_state, d_conv, expand: passed to every mixer.
        scan: the Mamba blocks' scan for :meth:`forward`: "parallel", "log" or "loop".
        init_std: standard deviation of the initial embedding.
        mamba2: :class:`Mamba2Block` mixers instead, with heads of ``head_dim`` channels
            and chunks of ``chunk_size`` steps (``scan`` is then not used).

    Shape:
        ids: (B, T) int64 -> logits: (B, T, vocab_size).
    """

    def __init__(self, vocab_size: int, embed_dim: int = 64, num_layers: int = 2,
                 d_state: int = 16, d_conv: int = 4, expand: int = 2,
                 scan: str = "parallel", init_std: float = 0.02, mamba2: bool = False,
                 head_dim: int = 16, chunk_size: int = 64):
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        E = check_positive_int("embed_dim", embed_dim)
        self.num_layers = check_positive_int("num_layers", num_layers)
        check_number("init_std", init_std, low=0.0)
        self.mamba2 = check_flag("mamba2", mamba2)
        check_positive_int("head_dim", head_dim)      # used by Mamba-2's blocks only,
        check_positive_int("chunk_size", chunk_size)  # but never a size of 0
        self.embed = nn.Embedding(vocab_size, E)
        if mamba2:
            self.mixers = nn.ModuleList([
                Mamba2Block(E, d_state=d_state, d_conv=d_conv, expand=expand,
                            head_dim=head_dim, chunk_size=chunk_size)
                for _ in range(num_layers)])
        else:
            self.mixers = nn.ModuleList([
                MambaBlock(E, d_state=d_state, d_conv=d_conv, expand=expand, scan=scan)
                for _ in range(num_layers)])
        self.norms = nn.ModuleList([nn.RMSNorm(E, eps=1e-5) for _ in range(num_layers)])
        self.norm = nn.RMSNorm(E, eps=1e-5)
        nn.init.normal_(self.embed.weight, mean=0.0, std=init_std)

    def _check_forward(self, ids) -> None:
        check_ids("ids", ids, self.vocab_size, shape=(None, None), names="(B, T)")

    @checked(_check_forward)
    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, None]:
        """Returns ``(logits, None)``: the parallel form keeps no state (:meth:`step`
        does), and the second item is there for the book's ``(logits, state)``
        convention of language models."""
        x = self.embed(ids)                                  # (B, T, E)
        for norm, mixer in zip(self.norms, self.mixers, strict=True):
            x = x + mixer(norm(x))                           # (B, T, E)
        return self.norm(x) @ self.embed.weight.T, None      # (B, T, V)

    def _check_step(self, ids, state=None) -> None:
        check_ids("ids", ids, self.vocab_size, shape=(None,), names="(B,)")
        if state is not None:
            n = self.num_layers
            if not isinstance(state, (tuple, list)) or len(state) != n:
                raise TypeError(f"state must be a list of {n} pairs (conv_state, h), one "
                                f"per layer, got {type(state).__name__}")
            u = self.embed.weight.new_empty(ids.shape[0], self.embed.embedding_dim)
            for mixer, layer_state in zip(self.mixers, state, strict=True):
                _check_mixer_step(mixer, u, layer_state)

    @checked(_check_step)
    def step(self, ids: torch.Tensor, state: list | None = None
             ) -> tuple[torch.Tensor, list]:
        """One token per sequence, for generation: ``(logits (B, V), state)``.

        Every block runs its mixer's ``step``: constant time and memory per token,
        however many tokens came before. ``state`` is None (zeros) or what the
        previous step returned.
        """
        x = self.embed(ids)                                  # (B, E)
        new_state = []
        for i, (norm, mixer) in enumerate(zip(self.norms, self.mixers, strict=True)):
            out, s = mixer.step(norm(x), None if state is None else state[i])
            x = x + out                                      # (B, E)
            new_state.append(s)
        return self.norm(x) @ self.embed.weight.T, new_state  # (B, V)

    def extra_repr(self) -> str:
        return (f"vocab_size={self.vocab_size}, num_layers={self.num_layers}, "
                f"mamba2={self.mamba2}")


# ---------------------------------------------------------------------------------
# 3. Mamba-2's duality: a scalar-gated SSM is masked linear attention.
# ---------------------------------------------------------------------------------


@checked(log_a=partial(check_float_tensor, ndim=range(1, 9), names="(..., T)"))
def decay_mask(log_a: torch.Tensor) -> torch.Tensor:
    """The decay mask of a scalar-gated SSM: ``L[i, j] = a_{j+1} ... a_i`` for j <= i.

        L[i, j] = prod_{k=j+1..i} a_k = exp(sum_{k=j+1..i} log a_k)  (j <= i),  else 0

    The diagonal is 1 (an empty product). Each segment sum is a cumulative sum of
    log a restricted to the segment (Mamba-2's ``segsum``), not a difference of two
    long cumulative sums, which would lose digits when they are large.

    Shape:
        log_a: (..., T) -> L: (..., T, T).
    """
    T = log_a.shape[-1]
    lower = causal_mask(T, device=log_a.device)                      # (T, T) j <= i
    x = log_a[..., :, None].expand(*log_a.shape, T)                  # x[i, j] = log a_i
    x = torch.where(lower.tril(-1), x, 0.0)                          # keep i > j
    segsum = x.cumsum(dim=-2)                    # (..., T, T) sum_{k=j+1..i} log a_k
    return torch.where(lower, segsum.exp(), 0.0)                     # (..., T, T)


# x of a scalar-gated SSM, checked first: its shape gives the sizes of the others.
_HEADS = partial(check_float_tensor, ndim=4, names="(batch, H, T, P)")


def _check_ssd(x, log_a, B, C, initial_state=None) -> None:
    b, H, T, P = x.shape
    check_float_tensor("log_a", log_a, shape=(b, H, T), names=f"({b}, {H}, {T})")
    check_float_tensor("B", B, shape=(b, H, T, None), names=f"({b}, {H}, {T}, N)")
    N = B.shape[-1]
    check_float_tensor("C", C, shape=(b, H, T, N), names=f"({b}, {H}, {T}, {N})")
    tensors = {"x": x, "log_a": log_a, "B": B, "C": C}
    if initial_state is not None:  # ssd_chunk_scan's state from before the sequence
        tensors["initial_state"] = check_float_tensor(
            "initial_state", initial_state, shape=(b, H, N, P), names=f"({b}, {H}, {N}, {P})")
    _check_one_dtype(tensors)


@checked(_check_ssd, x=_HEADS)
def ssd_attention_form(x: torch.Tensor, log_a: torch.Tensor, B: torch.Tensor,
                       C: torch.Tensor) -> torch.Tensor:
    """A scalar-gated SSM computed as masked attention (Dao and Gu, 2024, Mamba-2).

        Y = (L o C B^T) X,     L = decay_mask(log a)

    The SSM h_t = a_t h_{t-1} + B_t x_t^T, y_t = C_t^T h_t unrolls to y_i =
    sum_{j<=i} (prod_{k=j+1..i} a_k) (C_i . B_j) x_j: attention with queries C, keys
    B, values X, no softmax, and the causal mask replaced by the decay mask L. With
    a = 1 and B, C = phi(K), phi(Q) it is unnormalised causal linear attention.
    O(T^2) like attention, every step a matrix product.

    Shape:
        x: (batch, H, T, P), log_a: (batch, H, T), B, C: (batch, H, T, N)
        -> y: (batch, H, T, P).
    """
    L = decay_mask(log_a)                                    # (batch, H, T, T)
    scores = C @ B.transpose(-2, -1)                         # (batch, H, T, T)
    return (L * scores) @ x                                  # (batch, H, T, P)


@checked(_check_ssd, x=_HEADS)
def ssd_recurrent(x: torch.Tensor, log_a: torch.Tensor, B: torch.Tensor,
                  C: torch.Tensor) -> torch.Tensor:
    """The same scalar-gated SSM as a recurrence with a matrix state (Mamba-2).

        h_t = a_t h_{t-1} + B_t x_t^T,    y_t = h_t^T C_t        (h_0 = 0)

    Per head, the state h_t is N x P and a_t is one number: Mamba's selective SSM with
    A a scalar times the identity.

    Shape:
        x: (batch, H, T, P), log_a: (batch, H, T), B, C: (batch, H, T, N)
        -> y: (batch, H, T, P).
    """
    h = x.new_zeros(*B.shape[:2], B.shape[-1], x.shape[-1])  # (batch, H, N, P)
    ys = []
    # step t's slices by unbind: the backward pass stays linear in T
    steps = zip(x.unbind(2), log_a.unbind(2), B.unbind(2), C.unbind(2), strict=True)
    for x_t, log_a_t, B_t, C_t in steps:
        a = log_a_t[..., None, None].exp()                   # (batch, H, 1, 1)
        h = a * h + B_t[..., :, None] * x_t[..., None, :]    # (batch, H, N, P)
        ys.append((C_t[..., None, :] @ h).squeeze(-2))       # (batch, H, P)
    return torch.stack(ys, dim=2)                            # (batch, H, T, P)


# ---------------------------------------------------------------------------------
# 4. Mamba-2's chunked algorithm and its block.
# ---------------------------------------------------------------------------------


@checked(_check_ssd, x=_HEADS, chunk_size=check_positive_int,
         return_final_state=check_flag)
def ssd_chunk_scan(x: torch.Tensor, log_a: torch.Tensor, B: torch.Tensor,
                   C: torch.Tensor, chunk_size: int = 64,
                   initial_state: torch.Tensor | None = None,
                   return_final_state: bool = False
                   ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The scalar-gated SSM by chunks of c steps: Mamba-2's algorithm (Dao and Gu, 2024).

    Cut the T x T matrix L o C B^T of :func:`ssd_attention_form` into c x c blocks. The
    blocks on the diagonal are small attention forms; each block below them has rank at
    most N, because every path from step j of an earlier chunk to step i of a later one
    passes through the state between the chunks. Four steps, each a batch of matrix
    products over all chunks at once (Lambda_i: the log-gates summed inside the chunk up
    to step i), as in the paper's minimal SSD code:

        1. inside each chunk:  Y = (L_chunk o C B^T) X
        2. the state each chunk writes from zero:  S = sum_j e^(Lambda_end - Lambda_j) B_j x_j^T
        3. the states between chunks: the same gated recurrence over the T / c chunks,
           h_k = e^(Lambda_end of chunk k) h_(k-1) + S_k, here in its attention form
        4. what each step reads of the state that entered its chunk:
           Y += e^(Lambda_i) C_i^T h_(k-1)

    O(T c (N + P)) for step 1, O(T N P) for steps 2 and 4 and O((T / c)^2 N P) for step 3
    in this attention form (a loop over the chunks would take O((T / c) N P), in T / c
    steps one after another). The same outputs as :func:`ssd_recurrent` for every c; with
    c = T it is the attention form. The last chunk is padded with steps that neither
    write (x = 0) nor forget (log a = 0), and the padding is cut off.

    ``initial_state`` is the state before the first step (zeros by default), and with
    ``return_final_state`` the state after the last step comes back too: a long prompt
    can be read in pieces, each starting from the state the previous one left, and
    generation can go on from it one step at a time.

    Shape:
        x: (batch, H, T, P), log_a: (batch, H, T), B, C: (batch, H, T, N),
        initial_state: (batch, H, N, P) -> y: (batch, H, T, P), and with
        ``return_final_state`` the state after step T: (batch, H, N, P).
    """
    T, c = x.shape[2], chunk_size
    pad = -T % c                                   # steps added to fill the last chunk
    # pad the time axis at its end (F.pad's pairs go from the last axis back), then cut
    x, B, C = (F.pad(t, (0, 0, 0, pad)).unflatten(2, (-1, c)) for t in (x, B, C))
    # x: (batch, H, K, c, P), B and C: (batch, H, K, c, N) for K chunks
    log_a = F.pad(log_a, (0, pad)).unflatten(2, (-1, c))    # (batch, H, K, c)
    Lambda = log_a.cumsum(-1)                               # (batch, H, K, c)
    # 1. inside each chunk: the attention form with the chunk's own decay mask
    scores = C @ B.transpose(-2, -1)                        # (batch, H, K, c, c)
    y = (decay_mask(log_a) * scores) @ x                    # (batch, H, K, c, P)
    # 2. the state each chunk writes, from a zero state
    to_end = (Lambda[..., -1:] - Lambda).exp()              # (batch, H, K, c)
    S = (B * to_end[..., None]).transpose(-2, -1) @ x       # (batch, H, K, N, P)
    # 3. the state after each chunk: a gated recurrence over the chunks, all at once
    chunk_mask = decay_mask(Lambda[..., -1])                # (batch, H, K, K)
    # h[:, :, k]: the state after chunk k
    h = torch.einsum("...kj,...jnp->...knp", chunk_mask, S)  # (batch, H, K, N, P)
    if initial_state is None:
        initial_state = torch.zeros_like(S[:, :, 0])        # (batch, H, N, P)
    # plus the state from before the sequence, decayed through chunks 1 .. k
    decay = Lambda[..., -1].cumsum(-1).exp()                # (batch, H, K)
    h = h + decay[..., None, None] * initial_state[:, :, None]
    # the state entering each chunk: shifted by one chunk
    h_in = torch.cat([initial_state[:, :, None], h[:, :, :-1]], dim=2)
    # 4. each step reads the state that entered its chunk, decayed up to the step
    y = y + Lambda.exp()[..., None] * (C @ h_in)            # (batch, H, K, c, P)
    y = y.flatten(2, 3)[:, :, :T]                           # (batch, H, T, P)
    return (y, h[:, :, -1]) if return_final_state else y


class Mamba2Block(nn.Module):
    """The mixer of a Mamba-2 layer (Dao and Gu, 2024): the SSD layer with heads.

        z, xBC, dt = in_proj(u)                  E, E + 2 G N and H features
        x, B, C = SiLU(conv1d(xBC))              one causal depthwise convolution
        Delta = softplus(dt + dt_bias)           one step per head and token
        y = SSD(x Delta, log a = Delta A, B, C) + D x     A = -exp(A_log), one per head
        out = out_proj(RMSNorm_G(y * SiLU(z)))   a gated norm over each group

    Mamba's selective SSM (:class:`MambaBlock`) with three changes: A and Delta are one
    number per head, so a head's P channels share one scalar gate and its state is an
    N x P matrix (:func:`ssd_chunk_scan`); all of z, x, B, C and Delta come from one input
    projection; and a norm comes before the output projection. B and C are shared by
    all heads, as Mamba's by all channels, or by the H / G heads of each of G groups.
    E = expand * embed_dim channels form H = E / head_dim heads of P = head_dim channels.

    This is Hugging Face's ``Mamba2Mixer`` (:meth:`from_hf` copies one); the names
    follow Mamba-2's code.

    Args:
        embed_dim: width of the input and the output.
        d_state: state size N per head.
        d_conv: kernel size of the depthwise convolution.
        expand: E = expand * embed_dim channels inside.
        head_dim: channels P per head; E must be a multiple of it.
        n_groups: G groups of heads that share B and C; H must be a multiple of it.
        chunk_size: the chunks of :func:`ssd_chunk_scan`; the outputs do not depend on it.
        bias: biases of in_proj and out_proj; conv_bias: of the convolution.
        eps: the norm's epsilon.

    Shape:
        u: (batch, T, embed_dim) -> (batch, T, embed_dim).
    """

    @checked(embed_dim=check_positive_int, d_state=check_positive_int,
             d_conv=check_positive_int, expand=check_positive_int,
             head_dim=check_positive_int, n_groups=check_positive_int,
             chunk_size=check_positive_int, bias=check_flag, conv_bias=check_flag,
             eps=partial(check_number, low=0.0, low_open=True))
    def __init__(self, embed_dim: int, d_state: int = 64, d_conv: int = 4, expand: int = 2,
                 head_dim: int = 16, n_groups: int = 1, chunk_size: int = 64,
                 bias: bool = False, conv_bias: bool = True, eps: float = 1e-5):
        super().__init__()
        E = expand * embed_dim
        if E % head_dim:
            raise ValueError(f"head_dim must divide expand * embed_dim = {E}, "
                             f"got head_dim={head_dim}")
        H = E // head_dim
        if H % n_groups:
            raise ValueError(f"n_groups must divide the number of heads, {H}, "
                             f"got n_groups={n_groups}")
        self.embed_dim, self.d_inner, self.d_state, self.d_conv = embed_dim, E, d_state, d_conv
        self.head_dim, self.n_heads, self.n_groups = head_dim, H, n_groups
        self.chunk_size, self.eps = chunk_size, eps
        conv_dim = E + 2 * n_groups * d_state                   # x, B and C
        self.in_proj = nn.Linear(embed_dim, E + conv_dim + H, bias=bias)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, d_conv, groups=conv_dim,
                                padding=d_conv - 1, bias=conv_bias)
        self.dt_bias = nn.Parameter(torch.empty(H))             # (H,)
        self.A_log = nn.Parameter(torch.empty(H))               # (H,)
        self.D = nn.Parameter(torch.ones(H))                    # (H,)
        # holds the norm's weight (E,); not called: gated_norm normalises each group
        self.norm = nn.RMSNorm(E, eps=eps)
        self.out_proj = nn.Linear(E, embed_dim, bias=bias)
        with torch.no_grad():  # Mamba-2's: A in [1, 16], Delta log-uniform in [1e-3, 0.1]
            self.A_log.copy_(torch.empty(H).uniform_(1, 16).log())
            dt = torch.exp(torch.rand(H) * (math.log(0.1) - math.log(1e-3))
                           + math.log(1e-3)).clamp(min=1e-4)
            self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1

    def gated_norm(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """RMSNorm(y * SiLU(z)) over each group's E / G channels, times the norm's weight.

        Shape:
            y, z: (..., E) -> (..., E).
        """
        y = (y * F.silu(z)).unflatten(-1, (self.n_groups, -1))     # (..., G, E / G)
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        # the weight of self.norm, an nn.RMSNorm not called: it would normalise all E
        return y.flatten(-2) * self.norm.weight                    # (..., E)

    @checked(_check_mixer_input)
    def forward(self, u: torch.Tensor) -> torch.Tensor:
        b, T, _ = u.shape
        E, G, N, H, P = (self.d_inner, self.n_groups, self.d_state, self.n_heads,
                         self.head_dim)
        # z: (b, T, E), xBC: (b, T, E + 2GN), dt: (b, T, H)
        z, xBC, dt = self.in_proj(u).split([E, E + 2 * G * N, H], dim=-1)
        # the convolution is padded on both sides: its first T outputs see no future step
        xBC = F.silu(self.conv1d(xBC.transpose(1, 2))[..., :T].transpose(1, 2))
        x, B, C = xBC.split([E, G * N, G * N], dim=-1)
        x = x.view(b, T, H, P).transpose(1, 2)                   # (b, H, T, P)
        B, C = (t.view(b, T, G, N).transpose(1, 2).repeat_interleave(H // G, dim=1)
                for t in (B, C))                                 # (b, H, T, N): G -> H
        delta = F.softplus(dt + self.dt_bias).transpose(1, 2)    # (b, H, T)
        A = -torch.exp(self.A_log)                               # (H,)
        # the SSM's input Delta_t x_t (B_bar = Delta B) and log-gate log a_t = Delta_t A
        y = ssd_chunk_scan(x * delta[..., None], delta * A[:, None], B, C,
                           self.chunk_size)                      # (b, H, T, P)
        y = y + self.D[:, None, None] * x                        # (b, H, T, P)
        y = y.transpose(1, 2).reshape(b, T, E)                   # (b, T, E)
        return self.out_proj(self.gated_norm(y, z))              # (b, T, embed_dim)

    def _state_shapes(self, batch: int) -> dict:
        """The shapes of :meth:`step`'s state for ``batch`` sequences, by name."""
        conv_dim = self.d_inner + 2 * self.n_groups * self.d_state
        return {"conv_state": (batch, conv_dim, self.d_conv - 1),
                "h": (batch, self.n_heads, self.d_state, self.head_dim)}

    @checked(_check_mixer_step)
    def step(self, u: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None
             ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """One token, for generation: the recurrent form of :meth:`forward`.

        The state is the pair (conv_state, h): the last ``d_conv - 1`` inputs of the
        convolution and each head's N x P state, zeros by default. Feeding a sequence
        token by token gives the outputs of :meth:`forward`.

        Returns:
            ``(out, state)``.

        Shape:
            u: (batch, embed_dim), conv_state: (batch, E + 2 G N, d_conv - 1),
            h: (batch, H, N, P) -> out: (batch, embed_dim).
        """
        b = u.shape[0]
        E, G, N, H, P = (self.d_inner, self.n_groups, self.d_state, self.n_heads,
                         self.head_dim)
        z, xBC, dt = self.in_proj(u).split([E, E + 2 * G * N, H], dim=-1)
        if state is None:
            state = (u.new_zeros(b, xBC.shape[-1], self.d_conv - 1),
                     u.new_zeros(b, H, N, P))
        conv_state, h = state
        window = torch.cat([conv_state, xBC[..., None]], dim=-1)  # (b, E + 2GN, d_conv)
        xBC = (window * self.conv1d.weight[:, 0]).sum(dim=-1)
        if self.conv1d.bias is not None:
            xBC = xBC + self.conv1d.bias
        x, B, C = F.silu(xBC).split([E, G * N, G * N], dim=-1)
        x = x.view(b, H, P)                                      # (b, H, P)
        B, C = (t.view(b, G, N).repeat_interleave(H // G, dim=1) for t in (B, C))
        delta = F.softplus(dt + self.dt_bias)                    # (b, H)
        a = torch.exp(delta * -torch.exp(self.A_log))            # (b, H): the gate
        h = a[..., None, None] * h + (delta[..., None] * B)[..., None] * x[:, :, None]
        y = (C[..., None] * h).sum(dim=-2) + self.D[:, None] * x  # (b, H, P)
        out = self.out_proj(self.gated_norm(y.reshape(b, E), z))
        return out, (window[..., 1:], h)

    @classmethod
    def from_hf(cls, mixer, chunk_size: int | None = None) -> Mamba2Block:
        """A copy of a Hugging Face ``transformers`` ``Mamba2Mixer``: the same function.

        The sizes are read from ``mixer`` (its chunk size unless ``chunk_size`` is
        given); the copy has its dtype, device and train/eval mode. ``transformers`` is
        needed only to make ``mixer``.

        Raises:
            TypeError: ``mixer`` is not a ``Mamba2Mixer``.
            ValueError: its activation is not SiLU, its time-step limit clamps, or its
                inner width is not an integer multiple of its width.
        """
        width, E = _hf_mixer_sizes(mixer, "mamba2", "Mamba2Mixer")
        if tuple(mixer.time_step_limit) != (0.0, float("inf")):
            raise ValueError(f"mixer's time_step_limit must be (0.0, inf), no clamp, got "
                             f"{tuple(mixer.time_step_limit)}")
        weight = mixer.in_proj.weight
        ours = cls(width, d_state=mixer.ssm_state_size, d_conv=mixer.conv_kernel_size,
                   expand=E // width, head_dim=mixer.head_dim, n_groups=mixer.n_groups,
                   chunk_size=mixer.chunk_size if chunk_size is None else chunk_size,
                   bias=mixer.in_proj.bias is not None,
                   conv_bias=mixer.conv1d.bias is not None,
                   eps=mixer.norm.variance_epsilon)
        ours = ours.to(weight.device, weight.dtype)  # the dtype first: float32 rounds
        ours.load_state_dict(mixer.state_dict())  # the same names and shapes
        return ours.train(mixer.training)

    def extra_repr(self) -> str:
        return (f"{self.embed_dim}, d_state={self.d_state}, d_conv={self.d_conv}, "
                f"d_inner={self.d_inner}, heads={self.n_heads}x{self.head_dim}, "
                f"n_groups={self.n_groups}, chunk_size={self.chunk_size}")
