"""Looking inside gated recurrent layers: a "keep by default" gate initialisation, and the GRU
update unrolled into a weighted sum of candidate states.

The GRU's new state is a convex mix of its old state and a candidate (eq. (3.4) of the book),

    h_t = (1 - z_t) * n_t + z_t * h_{t-1}.

Substituting the recursion into itself turns h_t into a weighted sum of every candidate so far,

    h_t = sum_{k=1..t} w_{t,k} * n_k + w_{t,0} * h_0,
    w_{t,k} = (1 - z_k) * prod_{j=k+1..t} z_j,     w_{t,0} = prod_{j=1..t} z_j,

with weights that are non-negative and sum to one over k = 0..t (per hidden unit), eq. (3.7) of
the book: the additive "shortcut" through time that A. Erdem's attention lecture (COMP547, 2026)
turns into attention, and a fixed-form cousin of attention weights.
:func:`unrolled_weights` computes the w, :func:`unroll` rebuilds h_t from them.

The gates themselves come from ``seqbook.rnn.GRU(..., return_gates=True)``; the long-range memory
tasks these layers are tested on (:func:`seqbook.data.first_token_task`,
:func:`seqbook.data.adding_problem`) live with the other data sets.
"""

from __future__ import annotations

from functools import partial

import torch

from .checks import check_finite, check_float_tensor, check_gates, check_number, check_tensor, checked
from .rnn import GRU, LSTM

__all__ = [
    "init_keep_bias", "unrolled_weights", "unroll",
]


# ---------------------------------------------------------------------------------------------
# Start a gated layer in "keep" mode.
# ---------------------------------------------------------------------------------------------


def _check_init_keep_bias(layer: GRU | LSTM) -> None:
    if not isinstance(layer, (GRU, LSTM)):
        raise TypeError(f"layer must be a seqbook.rnn.GRU or LSTM, got {type(layer).__name__}")
    if not layer.bias:
        raise ValueError("layer has no biases (bias=False): nothing to initialise")


@torch.no_grad()
@checked(_check_init_keep_bias, bias=check_number)
def init_keep_bias(layer: GRU | LSTM, bias: float = 3.0) -> GRU | LSTM:
    r"""Set the gate biases so that, before training, a gated layer mostly keeps its state.

    GRU: the update-gate bias is ``bias`` (``b_iz = bias``, ``b_hz = 0``), so with a small input
    and state :math:`z_t \approx \sigma(\text{bias})` (0.95 for 3): each step keeps 95% of
    :math:`h_{t-1}` and writes 5% of the candidate. LSTM: the same split with its two separate
    gates, forget-gate bias ``+bias`` and input-gate bias ``-bias``. The other weights are left
    alone. PyTorch's default (all biases small and random) starts with :math:`z \approx 0.5`,
    which halves the memory of step 1 at every step.

    Args:
        layer: a :class:`seqbook.rnn.GRU` or :class:`seqbook.rnn.LSTM` with biases.
        bias: the gate pre-activation at zero input and state.

    Returns:
        ``layer`` (changed in place).
    """
    H = layer.hidden_size
    for cell in layer.cells:
        if isinstance(layer, GRU):          # rows stacked (r, z, n)
            cell.bias_ih[H:2 * H].fill_(bias)
            cell.bias_hh[H:2 * H].fill_(0.0)
        else:                               # rows stacked (i, f, g, o)
            cell.bias_ih[:H].fill_(-bias)
            cell.bias_hh[:H].fill_(0.0)
            cell.bias_ih[H:2 * H].fill_(bias)
            cell.bias_hh[H:2 * H].fill_(0.0)
    return layer


# ---------------------------------------------------------------------------------------------
# The GRU update as a weighted sum of candidates, eq. (3.7) of the book.
# ---------------------------------------------------------------------------------------------


@checked(z=partial(check_gates, shape=(None, None, None), names="(B, T, H)"))
def unrolled_weights(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The weights of the unrolled GRU update, from its update gates.

    .. math::
        w_{t,k} = (1 - z_k) \odot \prod_{j=k+1}^{t} z_j \quad (1 \le k \le t), \qquad
        w_{t,k} = 0 \quad (k > t), \qquad
        w_{t,0} = \prod_{j=1}^{t} z_j,

    so that :math:`h_t = \sum_{k=1}^{t} w_{t,k} \odot n_k + w_{t,0} \odot h_0`. For
    every t and unit the weights are non-negative and :math:`w_{t,0} + \sum_k w_{t,k} = 1`.

    Computed from cumulative sums of :math:`\log z` in float64 (products of many gates
    underflow gracefully instead of dividing by a tiny number).

    Shape:
        z: (B, T, H) with values in [0, 1] -> weights: (B, T, T, H) indexed [b, t, k, unit]
        with k = 0 .. T-1 standing for candidates n_1 .. n_T; initial: (B, T, H), the
        weight on h_0.
    """
    zd = z.double()
    tiny = torch.finfo(torch.float64).tiny
    log_z = zd.clamp_min(tiny).log()         # (B, T, H)
    cum = log_z.cumsum(dim=1)                # L_t = sum_{j<=t} log z_j
    # prod_{j=k+1..t} z_j = exp(L_t - L_k) for k <= t: rows t, columns k.
    log_keep = cum[:, :, None, :] - cum[:, None, :, :]  # (B, T, T, H)
    keep = log_keep.clamp_max(0.0).exp()
    T = z.shape[1]
    # (T, T), True where k <= t: a candidate from the future gets no weight
    causal = torch.ones(T, T, dtype=torch.bool, device=z.device).tril()
    w = keep * (1 - zd)[:, None, :, :]       # (B, T, T, H)
    weights = torch.where(causal[None, :, :, None], w, 0.0)
    initial = cum.exp()                      # (B, T, H)
    return weights.to(z.dtype), initial.to(z.dtype)


def unroll(z: torch.Tensor, n: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    r"""Rebuild every GRU state as a weighted sum of candidates,
    :math:`h_t = \sum_{k \le t} w_{t,k} \odot n_k + w_{t,0} \odot h_0` (see :func:`unrolled_weights`).

    Shape:
        z, n: (B, T, H) update gates and candidates (``gates["z"][layer]``, ``gates["n"][layer]``
        of :class:`seqbook.rnn.GRU`); h0: (B, H) or None (zeros) -> h: (B, T, H)
    """
    check_tensor("z", z, nonempty=False)
    check_tensor("n", n, nonempty=False)
    if z.dim() != 3 or n.shape != z.shape:
        raise ValueError(f"z and n must both have shape (B, T, H), got {tuple(z.shape)} and {tuple(n.shape)}")
    check_float_tensor("z", z)  # the range of z is checked in unrolled_weights
    check_float_tensor("n", n)
    check_finite("n", n)
    B, _, H = z.shape
    if h0 is not None:
        check_float_tensor("h0", h0, shape=(B, H))
        check_finite("h0", h0)
    weights, initial = unrolled_weights(z)                              # (B, T, T, H), (B, T, H)
    h = (weights * n[:, None, :, :]).sum(dim=2)                         # (B, T, H)
    if h0 is not None:
        h = h + initial * h0[:, None, :]
    return h
