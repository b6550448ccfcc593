"""Hopfield networks: classical, dense and continuous associative memories, and Hopfield layers.

Convention: stored patterns are the **rows** of a (P, N) tensor ``patterns`` (P patterns of N
neurons each); the papers write them as the columns of X, so their ``X^T xi`` is our
``patterns @ xi``. States are (..., N): any leading batch dimensions are carried along.

The module reads top to bottom, one associative memory at a time:

* classical (Hopfield 1982), binary states in {-1, +1}, eqs. (7.1)-(7.3) of the book:
  :func:`hebbian_weights`, :func:`energy`, :func:`update_sync`, :func:`update_async`, :func:`recall`;
* dense (Krotov and Hopfield 2016, Demircigil et al. 2017), eqs. (7.6)-(7.7), F(z) = z^n or exp(z):
  :func:`dense_energy`, :func:`dense_update_sync`, :func:`dense_update_async`, :func:`dense_recall`;
* continuous (Ramsauer et al. 2020), eqs. (7.8)-(7.9): :func:`continuous_energy`, :func:`retrieve`;
  with the next tokens of a text as values, a nearest-neighbour language model, eq. (7.12):
  :func:`neighbour_probs`;
* layers, eqs. (7.10)-(7.11): :class:`Hopfield` (associates two sets), :class:`HopfieldPooling` (a
  learned query pools a set), :class:`HopfieldLayer` (a learned memory looked up by the input).

The continuous update and the layers call :func:`seqbook.attention.scaled_dot_product_attention`,
because that is what they are: attention with ``scale = beta``.

Inputs are checked once per call, before anything is computed: states and patterns are
floating-point tensors (binary ones hold only -1 and +1, the others must be finite), sizes are ints
>= 1 (NumPy ints too), ``beta`` is a finite number > 0. Two tensors of different float dtypes meet in
their promoted dtype (float32 with float64 gives float64), except in the binary dense updates, which
cast the patterns to the state's dtype (exact for +-1). Empty batches are legal and give empty
results. The layers take inputs of their weights' dtype (under ``torch.autocast`` any float dtype but
float64, which autocast does not cast) and
do not read values, so a NaN input propagates to the outputs of its own batch element.
"""

from __future__ import annotations

import math
import numbers
from functools import partial

import torch
from torch import nn

from .attention import scaled_dot_product_attention
from .checks import (
    autocast_enabled,
    check_finite,
    check_flag,
    check_float_tensor,
    check_generator,
    check_ids,
    check_int,
    check_number,
    check_positive_int,
    check_tensor,
    checked,
    has_values,
    shape_of,
)

__all__ = [
    "hebbian_weights",
    "energy",
    "update_sync",
    "update_async",
    "recall",
    "dense_energy",
    "dense_update_sync",
    "dense_update_async",
    "async_sweep",
    "dense_async_sweep",
    "dense_recall",
    "continuous_energy",
    "retrieve",
    "neighbour_probs",
    "Hopfield",
    "HopfieldPooling",
    "HopfieldLayer",
]


# ---------------------------------------------------------------------------------------------
# Input checks shared by the functions below.
# ---------------------------------------------------------------------------------------------


def _check_binary(x: torch.Tensor, name: str) -> None:
    """Raise unless every entry of ``x`` is -1 or +1 (one sync; see ``has_values``)."""
    if not has_values(x):
        return
    if not bool(torch.all((x == 1) | (x == -1))):
        bad = x[(x != 1) & (x != -1)].flatten()[:3].tolist()
        raise ValueError(f"{name} must contain only -1 and +1 entries, found e.g. {bad}")


def _check_patterns(patterns: torch.Tensor, binary: bool) -> None:
    check_float_tensor("patterns", patterns, nonempty=False)
    if patterns.dim() != 2 or patterns.shape[0] == 0 or patterns.shape[1] == 0:
        raise ValueError(f"patterns must have shape (P, N) with P, N >= 1, got {tuple(patterns.shape)}")
    if binary:
        _check_binary(patterns, "patterns")
    else:
        check_finite("patterns", patterns)


def _check_state(state: torch.Tensor, N: int, binary: bool, name: str = "state") -> None:
    check_float_tensor(name, state, nonempty=False)
    if state.dim() < 1 or state.shape[-1] != N:
        raise ValueError(f"{name} must have shape (..., {N}), got {tuple(state.shape)}")
    if binary:
        _check_binary(state, name)
    else:
        check_finite(name, state)


def _check_weights(W: torch.Tensor) -> int:
    check_float_tensor("W", W, nonempty=False)
    if W.dim() < 2 or W.shape[-1] != W.shape[-2]:
        raise ValueError(f"W must have shape (..., N, N), got {tuple(W.shape)}")
    if W.shape[-1] == 0:
        raise ValueError(f"W must have at least one neuron (N >= 1), got shape {tuple(W.shape)}")
    check_finite("W", W)
    return W.shape[-1]


def _check_batch(a_name: str, a_batch, b_name: str, b_batch, into_b: bool = False) -> None:
    """The leading (batch) dims of two arguments must broadcast (``into_b``: to b's own dims)."""
    try:
        ok = torch.broadcast_shapes(a_batch, b_batch) == b_batch or not into_b
    except RuntimeError:
        ok = False
    if not ok:
        how = "broadcast to those of" if into_b else "broadcast against those of"
        raise ValueError(f"the batch dims {tuple(a_batch)} of {a_name} must {how} {b_name}, {tuple(b_batch)}")


def _promoted(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``a`` and ``b`` in their promoted float dtype (unchanged when they already agree)."""
    dtype = torch.promote_types(a.dtype, b.dtype)
    return a.to(dtype), b.to(dtype)


def _check_order(order, N: int) -> None:
    """``order``: the neurons a sweep updates, in order: ints in [0, N), at least one (a list, tuple,
    range, NumPy array or 1-D integer tensor; repeats allowed)."""
    if isinstance(order, torch.Tensor):
        if order.dtype == torch.bool or order.is_floating_point() or order.is_complex() or order.dim() != 1:
            raise TypeError(f"order must be a 1-D integer tensor of neuron indices, got {order.dtype} "
                            f"of shape {shape_of(order)}")
        order = order.tolist()
    elif isinstance(order, (str, bytes)) or not hasattr(order, "__iter__"):
        raise TypeError(f"order must be a sequence of neuron indices, got {type(order).__name__}")
    order = list(order)
    if not order:
        raise ValueError(f"order must name at least one neuron to update (indices in [0, {N - 1}]), "
                         f"got an empty order")
    for i in order:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"order must hold int neuron indices, got {type(i).__name__} {i!r}")
        if not 0 <= i < N:
            raise ValueError(f"order must hold neuron indices in [0, {N - 1}], got {i}")


def _update_order(order, N: int, generator: torch.Generator | None) -> list[int]:
    """The neurons to update, in order: ``order`` (checked) as a list, or a random permutation of
    all N."""
    if order is None:
        return torch.randperm(N, generator=generator).tolist()
    return [int(i) for i in (order.tolist() if isinstance(order, torch.Tensor) else order)]


def sign_keep(h: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """sign(h), except that h == 0 keeps the old value (so states stay in {-1, +1}).

    Shape:
        h, old: the same shape -> that shape, in ``old``'s dtype
    """
    return torch.where(h > 0, 1.0, torch.where(h < 0, -1.0, old)).to(old.dtype)


# ---------------------------------------------------------------------------------------------
# Classical Hopfield network, eqs. (7.1)-(7.3) of the book.
# ---------------------------------------------------------------------------------------------


def hebbian_weights(patterns: torch.Tensor, normalize: bool = True) -> torch.Tensor:
    """Hebbian storage: W = (1/N) sum_mu x_mu x_mu^T with a zero diagonal.

    Every stored pattern adds its outer product, so neurons that agree in a pattern excite each
    other. The 1/N (``normalize=True``) only rescales W and never changes a sign; the zero diagonal
    removes self-coupling.

    Args:
        patterns: (P, N) stored patterns as rows, entries in {-1, +1}, a floating-point tensor.
        normalize: divide by N.

    Shape:
        patterns: (P, N).  Output: (N, N), symmetric, zero diagonal.
    """
    _check_patterns(patterns, binary=True)
    check_flag("normalize", normalize)
    N = patterns.shape[1]
    W = patterns.T @ patterns  # (N, N)
    W = W.fill_diagonal_(0)
    return W / N if normalize else W


def _fields(W: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """The local fields W xi, (..., N). einsum broadcasts W's batch dims without copying W
    (``W @ state[..., None]`` would copy a (K, 1, N, N) W once for each of the states)."""
    return torch.einsum("...ij,...j->...i", W, state)


def _energy(W: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    W, state = _promoted(W, state)
    return -0.5 * (_fields(W, state) * state).sum(-1)


def energy(W: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """Classical energy E(xi) = -1/2 xi^T W xi (thresholds U = 0).

    Any finite state is accepted (the dynamics need {-1, +1}, the energy does not). The result
    has the promoted dtype of W and state.

    Shape:
        W: (..., N, N) broadcastable against state's batch dims.  state: (..., N).  Output: (...).
    """
    N = _check_weights(W)
    _check_state(state, N, binary=False)
    _check_batch("W", W.shape[:-2], "state", state.shape[:-1])
    return _energy(W, state)


def _update_sync(W: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    Wp, statep = _promoted(W, state)
    h = _fields(Wp, statep)  # (..., N) local fields
    return sign_keep(h, state)


def update_sync(W: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """Synchronous update (Hopfield, 1982): every neuron at once, xi <- sign(W xi); sign(0) keeps xi.

    Shape:
        W: (..., N, N), batch dims broadcast against the state's.  state: (..., N) in {-1, +1}.
        Output: the broadcast batch dims, N; the state's dtype.
    """
    N = _check_weights(W)
    _check_state(state, N, binary=True)
    _check_batch("W", W.shape[:-2], "state", state.shape[:-1])
    return _update_sync(W, state)


def _check_async_sweep(W, state, order) -> None:
    N = _check_weights(W)
    _check_state(state, N, binary=True)
    _check_batch("W", W.shape[:-2], "state", state.shape[:-1], into_b=True)
    _check_order(order, N)


@checked(_check_async_sweep)
def async_sweep(W: torch.Tensor, state: torch.Tensor, order: list[int]) -> torch.Tensor:
    """One asynchronous sweep in the given ``order`` (neuron indices, at least one): the loop of
    :func:`update_async`, which draws a random order when none is given.

    Shape:
        W: (..., N, N).  state: (..., N) in {-1, +1}.  Output: like state.
    """
    state = state.clone()
    for i in order:
        h = (W[..., i, :] * state).sum(-1)  # (...) local field of neuron i
        state[..., i] = sign_keep(h, state[..., i])  # sign(h); h = 0 keeps the bit
    return state


def _check_update_async(W, state, order) -> None:
    N = _check_weights(W)
    _check_state(state, N, binary=True)
    _check_batch("W", W.shape[:-2], "state", state.shape[:-1], into_b=True)
    if order is not None:
        _check_order(order, N)


@checked(_check_update_async, generator=check_generator)
def update_async(
    W: torch.Tensor,
    state: torch.Tensor,
    order: torch.Tensor | list[int] | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One asynchronous sweep: neurons are updated one at a time, xi_i <- sign(sum_j W_ij xi_j).

    Each update sees the neurons changed before it. With a symmetric W with zero diagonal, no
    single update can raise the energy, which is why this dynamics always ends in a fixed point.

    Args:
        W: (..., N, N) weights; leading dims broadcast to the state's (e.g. (K, 1, N, N)
            for K networks and (K, Q, N) states, Q cues per network).
        state: (..., N) in {-1, +1}; not modified.
        order: the neurons to update, in order (ints in [0, N), at least one, repeats
            allowed); default a random permutation of all N (drawn from ``generator``), the
            same for every state in the batch.
        generator: random generator for the default order.

    Shape:
        Output: like state.
    """
    return async_sweep(W, state, _update_order(order, W.shape[-1], generator))


def _check_recall(W, state, mode) -> None:
    if mode not in ("async", "sync"):
        raise ValueError(f"mode must be 'async' or 'sync', got {mode!r}")
    N = _check_weights(W)
    _check_state(state, N, binary=True)
    _check_batch("W", W.shape[:-2], "state", state.shape[:-1], into_b=True)


@checked(_check_recall, max_sweeps=check_positive_int, generator=check_generator)
def recall(
    W: torch.Tensor,
    state: torch.Tensor,
    mode: str = "async",
    max_sweeps: int = 100,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the dynamics from ``state`` until nothing changes (or ``max_sweeps`` sweeps).

    Args:
        W: (..., N, N) weights; leading dims broadcast to the state's.
        state: (..., N) cue(s) in {-1, +1}.
        mode: ``"async"`` (sweeps of :func:`update_async`) or ``"sync"`` (:func:`update_sync`).
            Synchronous dynamics may end in a 2-cycle instead of a fixed point.
        max_sweeps: upper bound on the number of sweeps (an int >= 1).
        generator: random generator for the asynchronous update order.

    Returns:
        ``(final_state, energies)``: the last state (..., N) and the energy before the first
        sweep and after each sweep, (sweeps + 1, ...). The batch stops when no state changed.
    """
    N = W.shape[-1]
    energies = [_energy(W, state)]
    for _ in range(int(max_sweeps)):
        if mode == "async":
            new = async_sweep(W, state, _update_order(None, N, generator))
        else:
            new = _update_sync(W, state)
        energies.append(_energy(W, new))
        changed = not torch.equal(new, state)
        state = new
        if not changed:
            break
    return state, torch.stack(energies)


# ---------------------------------------------------------------------------------------------
# Dense associative memory, eqs. (7.6)-(7.7) of the book.
# ---------------------------------------------------------------------------------------------


def _check_F(F):
    """F: a positive int n (NumPy ints too) for F(z) = z^n, or the string 'exp'. Returns it."""
    if isinstance(F, str):
        if F == "exp":
            return F
        raise ValueError(f"F must be a positive int n (F(z) = z^n) or 'exp', got {F!r}")
    if isinstance(F, bool) or not isinstance(F, numbers.Integral):
        raise TypeError(f"F must be a positive int n (F(z) = z^n) or 'exp', got {type(F).__name__} {F!r}")
    if F < 1:
        raise ValueError(f"F must be a positive int n (F(z) = z^n) or 'exp', got {F!r}")
    return int(F)


def _check_F_range(F, P: int, N: int, dtype: torch.dtype) -> None:
    """The binary updates compare sums of P terms F(overlap), |overlap| <= N: z^n must not overflow."""
    if F != "exp" and math.log(P) + F * math.log(N) > math.log(torch.finfo(dtype).max):
        raise ValueError(
            f"F = {F} overflows {dtype} with P = {P} patterns of N = {N} neurons (P * N**F > "
            f"{torch.finfo(dtype).max:.3g}): pass float64 tensors, or use a smaller n or F = 'exp'"
        )


def sum_F(overlaps: torch.Tensor, F) -> torch.Tensor:
    """sum_mu F(overlap_mu) over the last dim, for F(z) = z^n; for 'exp' its logarithm (lse).

    Shape:
        overlaps: (..., P) -> (...)
    """
    if F == "exp":
        return torch.logsumexp(overlaps, dim=-1)
    return overlaps.pow(F).sum(-1)


def dense_energy(patterns: torch.Tensor, state: torch.Tensor, F=2) -> torch.Tensor:
    """Dense associative memory energy, eq. (7.6) of the book: E(xi) = -sum_mu F(x_mu^T xi).

    F = n gives Krotov and Hopfield's F(z) = z^n (n = 2 is the classical energy times 2N, plus a
    constant); F = ``"exp"`` gives Demircigil et al.'s F(z) = exp(z), computed as
    -exp(logsumexp(overlaps)). exp(100) overflows float32 (its limit is exp(88.7)): for binary
    states with N > 88 pass float64 tensors. Likewise z^n for large n: an overflow gives -inf,
    not an error. The update rules never need E itself and work in the log domain, so they do not
    overflow for F = exp. Any finite patterns and states are accepted; the result has their
    promoted dtype.

    Shape:
        patterns: (P, N).  state: (..., N).  Output: (...).
    """
    _check_patterns(patterns, binary=False)
    F = _check_F(F)
    _check_state(state, patterns.shape[1], binary=False)
    patterns, state = _promoted(patterns, state)
    overlaps = state @ patterns.T  # (..., P)
    if F == "exp":
        return -torch.exp(torch.logsumexp(overlaps, dim=-1))
    return -overlaps.pow(F).sum(-1)


def dense_update_sync(patterns: torch.Tensor, state: torch.Tensor, F=2) -> torch.Tensor:
    """Apply rule (7.7) to every neuron at once (each decision sees the old state):
    neuron l takes the value, +1 or -1, that gives the lower energy; a tie keeps the old value.

    A state is a fixed point of the asynchronous dynamics exactly when this leaves it unchanged,
    which makes it the cheap capacity test. Memory: (..., N, P). The patterns are cast to the
    state's dtype; F = n must not overflow it (P * N**n below its largest value, else a ValueError).

    Shape:
        patterns: (P, N) in {-1, +1}.  state: (..., N) in {-1, +1}.  Output: like state.
    """
    _check_patterns(patterns, binary=True)
    F = _check_F(F)
    _check_state(state, patterns.shape[1], binary=True)
    _check_F_range(F, *patterns.shape, state.dtype)
    X = patterns.to(state.dtype).T  # (N, P)
    # overlap of every pattern with xi when bit l is left out, for every l: (..., N, P)
    rest = (state @ X).unsqueeze(-2) - X * state.unsqueeze(-1)
    plus = sum_F(rest + X, F)  # (..., N)  -E(xi^(l+)), or its log for exp
    minus = sum_F(rest - X, F)  # (..., N)  -E(xi^(l-))
    return sign_keep(plus - minus, state)


def _check_dense_async(patterns: torch.Tensor, state: torch.Tensor, F, generator=None) -> None:
    """The checks of the asynchronous dense updates."""
    _check_patterns(patterns, binary=True)
    F = _check_F(F)
    P, N = patterns.shape
    _check_state(state, N, binary=True)
    _check_F_range(F, P, N, state.dtype)
    check_generator("generator", generator)


def _check_dense_async_sweep(patterns, state, F, order) -> None:
    _check_dense_async(patterns, state, F)
    _check_order(order, patterns.shape[1])


@checked(_check_dense_async_sweep)
def dense_async_sweep(
    patterns: torch.Tensor, state: torch.Tensor, F, order: list[int]
) -> torch.Tensor:
    """One asynchronous sweep of the dense network in the given ``order`` (neuron indices, at
    least one): the loop of :func:`dense_update_async`, which draws a random order when none is
    given.

    Shape:
        patterns: (P, N) in {-1, +1}.  state: (..., N) in {-1, +1}.  Output: like state.
    """
    patterns = patterns.to(state.dtype)
    state = state.clone()
    overlaps = state @ patterns.T  # (..., P)
    for i in order:
        x_i = patterns[:, i]  # (P,)
        rest = overlaps - x_i * state[..., i : i + 1]  # (..., P) overlaps without bit i
        # > 0 where bit i = +1 has the lower energy (for F = exp, logs of -E)
        diff = sum_F(rest + x_i, F) - sum_F(rest - x_i, F)  # (...)
        new = sign_keep(diff, state[..., i])
        overlaps = rest + x_i * new.unsqueeze(-1)
        state[..., i] = new
    return state


def _check_dense_update_async(patterns, state, F, order, generator) -> None:
    _check_dense_async(patterns, state, F, generator)
    if order is not None:
        _check_order(order, patterns.shape[1])


@checked(_check_dense_update_async)
def dense_update_async(
    patterns: torch.Tensor,
    state: torch.Tensor,
    F=2,
    order: torch.Tensor | list[int] | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One asynchronous sweep of rule (7.7) (Krotov and Hopfield's; Demircigil et al. take F = exp),
    one neuron at a time:

        xi_new[l] = sgn[ -E(xi^(l+)) + E(xi^(l-)) ],

    where xi^(l+) and xi^(l-) equal xi except for a +1 and a -1 at position l, E is
    :func:`dense_energy` and a tie keeps the old value. The overlaps x_mu^T xi are kept up to date
    as bits change, so a sweep costs O(N P) per state. For F = exp the comparison is made between
    log-sum-exps, which never overflows.

    Args:
        patterns: (P, N) in {-1, +1}; cast to the state's dtype.
        state: (..., N) in {-1, +1}; not modified.
        F: n for F(z) = z^n (P * N**n must not overflow the state's dtype), or ``"exp"``.
        order, generator: as in :func:`update_async`.

    Shape:
        Output: like state.
    """
    return dense_async_sweep(patterns, state, F, _update_order(order, patterns.shape[1], generator))


@checked(_check_dense_async, max_sweeps=check_positive_int)
def dense_recall(
    patterns: torch.Tensor,
    state: torch.Tensor,
    F=2,
    max_sweeps: int = 100,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Asynchronous sweeps of :func:`dense_update_async` until nothing changes.

    ``max_sweeps`` (an int >= 1) bounds the number of sweeps.

    Shape:
        patterns: (P, N).  state: (..., N).  Output: like state.
    """
    N = patterns.shape[1]
    for _ in range(int(max_sweeps)):
        new = dense_async_sweep(patterns, state, F, _update_order(None, N, generator))
        if torch.equal(new, state):
            break
        state = new
    return state


# ---------------------------------------------------------------------------------------------
# Continuous modern Hopfield network, eqs. (7.8)-(7.9) of the book.
# ---------------------------------------------------------------------------------------------


# beta: a finite number > 0 (a Python or NumPy number, or a one-element tensor)
_BETA = partial(check_number, low=0.0, low_open=True)


def _layer_beta(beta: float | None, key_dim: int) -> float:
    """beta, or 1/sqrt(d_k) by default (the scale of scaled dot-product attention)."""
    if beta is None:
        return 1.0 / math.sqrt(key_dim)
    return check_number("beta", beta, 0.0, low_open=True)


def continuous_energy(patterns: torch.Tensor, state: torch.Tensor, beta: float) -> torch.Tensor:
    """Energy of the continuous modern Hopfield network, eq. (7.8) of the book:

        E(xi) = -lse(beta, X^T xi) + 1/2 xi^T xi + beta^-1 log P + 1/2 M^2,

    with lse(beta, z) = beta^-1 log sum_mu exp(beta z_mu) and M the largest norm of a stored
    pattern. The update :func:`retrieve` never increases it. Patterns and states must be finite;
    beta a finite number > 0.

    Shape:
        patterns: (P, d).  state: (..., d).  Output: (...), in their promoted dtype.
    """
    _BETA("beta", beta)
    _check_patterns(patterns, binary=False)
    _check_state(state, patterns.shape[1], binary=False)
    patterns, state = _promoted(patterns, state)
    P = patterns.shape[0]
    overlaps = state @ patterns.T  # (..., P)
    lse = torch.logsumexp(beta * overlaps, dim=-1) / beta  # (...)
    M = patterns.norm(dim=-1).max()
    return -lse + 0.5 * (state * state).sum(-1) + math.log(P) / beta + 0.5 * M**2


def _check_retrieve(patterns, queries, beta) -> None:
    _BETA("beta", beta)
    if patterns.dim() not in (2, 3) or patterns.shape[-2] == 0 or patterns.shape[-1] == 0:
        raise ValueError(
            f"patterns must have shape (P, d) or (B, P, d) with P, d >= 1, got {tuple(patterns.shape)}"
        )
    check_finite("patterns", patterns)
    _check_state(queries, patterns.shape[-1], binary=False, name="queries")
    xi = queries.unsqueeze(0) if queries.dim() == 1 else queries  # (..., Q, d)
    _check_batch("queries", xi.shape[:-2], "patterns", patterns.shape[:-2])


@checked(_check_retrieve, steps=check_positive_int, return_weights=check_flag,
         patterns=partial(check_float_tensor, nonempty=False))
def retrieve(
    patterns: torch.Tensor,
    queries: torch.Tensor,
    beta: float,
    steps: int = 1,
    return_weights: bool = False,
):
    """Continuous Hopfield retrieval, eq. (7.9), applied ``steps`` times to every query:

        xi <- X softmax(beta X^T xi),   i.e. in rows:  xi <- softmax(beta xi X^T) X.

    That is scaled dot-product attention with the stored patterns as keys and values and
    ``scale = beta``: :func:`seqbook.attention.scaled_dot_product_attention`.

    Args:
        patterns: (P, d) stored patterns, or (B, P, d) one memory per batch element;
            P, d >= 1, finite.
        queries: (Q, d), or (B, Q, d) with a (B, P, d) memory; a single (d,) query is
            also accepted and gives (d,), or (B, d) with a (B, P, d) memory. Leading
            dims broadcast against the patterns'; finite. An empty batch gives an empty
            result.
        beta: inverse temperature, a finite number > 0; small beta averages, large beta
            picks the closest pattern.
        steps: number of updates, an int >= 1 (one usually suffices).
        return_weights: also return the softmax weights of the last step.

    Returns:
        The updated queries (in the promoted dtype of patterns and queries), and with
        ``return_weights`` the weights of the last step.

    Shape:
        patterns (P, d) or (B, P, d), queries (..., Q, d) -> (..., Q, d), the leading dims
        broadcast against the patterns'; the weights (..., Q, P). A single (d,) query drops
        the Q axis from both.
    """
    single = queries.dim() == 1
    xi = queries.unsqueeze(0) if single else queries  # (..., Q, d)
    dtype = torch.promote_types(patterns.dtype, xi.dtype)
    patterns, xi = patterns.to(dtype), xi.to(dtype)
    for _ in range(steps):
        xi, weights = scaled_dot_product_attention(xi, patterns, patterns, scale=beta)
    if single:  # (..., 1, d) -> (..., d): the query's axis goes, a memory's batch stays
        xi, weights = xi.squeeze(-2), weights.squeeze(-2)
    return (xi, weights) if return_weights else xi


def _check_neighbour_probs(queries, keys, next_tokens, vocab_size) -> None:
    check_float_tensor("keys", keys, shape=(None, None), names="(P, d) with P, d >= 1")
    P, d = keys.shape
    check_float_tensor("queries", queries, shape=(None, d), names=f"(Q, {d}), d as the keys'",
                       nonempty=False)
    check_finite("keys", keys)
    check_finite("queries", queries)
    check_ids("next_tokens", next_tokens, vocab_size, shape=(P,), names=f"({P},), one per key")


@checked(_check_neighbour_probs, vocab_size=check_positive_int, beta=_BETA)
def neighbour_probs(
    queries: torch.Tensor,
    keys: torch.Tensor,
    next_tokens: torch.Tensor,
    vocab_size: int,
    beta: float,
) -> torch.Tensor:
    """The next-token distribution of a nearest-neighbour language model, eq. (7.12) of the
    book: one Hopfield retrieval whose stored patterns are the keys and whose values are
    their next tokens, one-hot, with weights from squared distances,

        p(y | q) = sum_i softmax_i(-beta ||q - k_i||^2) [v_i = y].

    Shape:
        queries: (Q, d).  keys: (P, d), P >= 1.  next_tokens: (P,) ids in
        [0, vocab_size).  Output: (Q, vocab_size), in the promoted float dtype.
    """
    dtype = torch.promote_types(queries.dtype, keys.dtype)
    distances = torch.cdist(queries.to(dtype), keys.to(dtype)) ** 2  # (Q, P)
    weights = torch.softmax(-beta * distances, dim=-1)  # (Q, P)
    votes = nn.functional.one_hot(next_tokens, vocab_size).to(weights.dtype)  # (P, V)
    return weights @ votes  # (Q, V)


# ---------------------------------------------------------------------------------------------
# Hopfield layers, eqs. (7.10)-(7.11) of the book.
# ---------------------------------------------------------------------------------------------


def _check_set(x: torch.Tensor, dim: int, name: str, dtype: torch.dtype) -> None:
    """x: (B, length, dim) of the layer's dtype (under autocast, any float dtype but float64, which
    autocast does not cast)."""
    check_tensor(name, x, nonempty=False)
    if x.dim() != 3 or x.shape[-1] != dim:
        raise ValueError(f"{name} must have shape (B, length, {dim}), got {tuple(x.shape)}")
    castable = x.is_floating_point() and x.dtype != torch.float64 and autocast_enabled(x)
    if x.dtype != dtype and not castable:
        raise TypeError(f"{name} must have the dtype of the layer's weights, {dtype} (under autocast any "
                        f"float dtype but float64), got {x.dtype}")


def _check_dim(name: str, value, default: int | None = None) -> int:
    """A layer size: an int >= 1, or None for ``default``."""
    if value is None and default is not None:
        return default
    return check_positive_int(name, value)


def _check_stored_mask(mask, B: int, S: int) -> None:
    """``mask``: None or a (B, S) bool tensor, True at a real stored pattern (a float copy would
    be read as nothing, not as a mask: refused)."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a bool tensor of shape ({B}, {S}), got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True at real elements) of shape ({B}, {S}), got "
                        f"{mask.dtype}")
    if tuple(mask.shape) != (B, S):
        raise ValueError(f"mask must be a bool tensor of shape ({B}, {S}), got shape {tuple(mask.shape)}")


def _stored_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """(B, S) bool mask, True = real stored pattern -> (B, 1, S) attend-mask for the scores."""
    return None if mask is None else mask[:, None, :]


def _hopfield_update(q, k, w_v: nn.Linear, beta: float, steps: int, mask):
    """``steps - 1`` updates of the state patterns q in the key space, then the output update.

    q: (B, L, d_k), k: (B, S, d_k). Returns Z = softmax(beta q k^T) k W_V (B, L, d_v), weights.
    An empty set (S = 0) gives zero outputs and (B, L, 0) weights, still connected to the graph.
    """
    if k.shape[-2] == 0:
        weights = q.new_zeros(*q.shape[:-1], 0)  # (B, L, 0)
        return weights @ w_v(k), weights  # (B, L, d_v) zeros
    for _ in range(steps - 1):
        q, _ = scaled_dot_product_attention(q, k, k, mask=mask, scale=beta)  # xi <- softmax(.) K
    v = w_v(k)  # (B, S, d_v)  V = K W_V, eq. (7.10)
    return scaled_dot_product_attention(q, k, v, mask=mask, scale=beta)  # eq. (7.11)


class Hopfield(nn.Module):
    """Hopfield layer that associates two sets, eqs. (7.10)-(7.11) of the book:

        Q = R W_Q,   K = Y W_K,   V = K W_V,   Z = softmax(beta Q K^T) V.

    R holds the state patterns (queries), Y the stored patterns. With beta = 1/sqrt(d_k) this is
    exactly scaled dot-product attention with values tied to the keys (V = K W_V). With
    ``steps > 1`` the state patterns are first updated ``steps - 1`` times by the continuous
    Hopfield rule in the key space, xi <- softmax(beta xi K^T) K, before the output is read out.

    Args:
        state_dim: feature size d_r of R.
        stored_dim: feature size d_y of Y (default ``state_dim``).
        key_dim: d_k, the space in which R and Y are compared (default ``state_dim``).
        value_dim: d_v of the output (default ``key_dim``).
        beta: inverse temperature (default 1/sqrt(d_k)).
        steps: number of Hopfield updates (>= 1).
        bias: biases in the projections.

    Sizes are ints >= 1, ``beta`` a finite number > 0. R and Y must have the dtype of the
    weights (under ``torch.autocast`` any float dtype but float64). An empty or fully masked set Y
    gives zero outputs and zero weights, with finite gradients.

    Shape:
        R: (B, L, d_r), Y: (B, S, d_y), mask: (B, S) bool, True at real stored patterns.
        Output: Z (B, L, d_v) and weights (B, L, S).
    """

    def __init__(self, state_dim: int, stored_dim: int | None = None, key_dim: int | None = None,
                 value_dim: int | None = None, beta: float | None = None, steps: int = 1,
                 bias: bool = False):
        super().__init__()
        state_dim = _check_dim("state_dim", state_dim)
        stored_dim = _check_dim("stored_dim", stored_dim, state_dim)
        key_dim = _check_dim("key_dim", key_dim, state_dim)
        value_dim = _check_dim("value_dim", value_dim, key_dim)
        steps = check_int("steps", steps, 1)
        check_flag("bias", bias)
        self.state_dim, self.stored_dim = state_dim, stored_dim
        self.beta = _layer_beta(beta, key_dim)
        self.steps = steps
        self.w_q = nn.Linear(state_dim, key_dim, bias=bias)  # W_Q, eq. (7.10)
        self.w_k = nn.Linear(stored_dim, key_dim, bias=bias)  # W_K, eq. (7.10)
        self.w_v = nn.Linear(key_dim, value_dim, bias=bias)  # W_V, eq. (7.10)

    def _check_forward(self, R, Y, mask) -> None:
        _check_set(R, self.state_dim, "R", self.w_q.weight.dtype)
        _check_set(Y, self.stored_dim, "Y", self.w_k.weight.dtype)
        if Y.shape[0] != R.shape[0]:
            raise ValueError(
                f"R and Y must have the same batch size, got {tuple(R.shape)} and {tuple(Y.shape)}"
            )
        _check_stored_mask(mask, Y.shape[0], Y.shape[1])

    @checked(_check_forward)
    def forward(self, R: torch.Tensor, Y: torch.Tensor, mask: torch.Tensor | None = None):
        attend = _stored_mask(mask)  # (B, 1, S)
        q = self.w_q(R)  # (B, L, d_k)
        k = self.w_k(Y)  # (B, S, d_k)
        return _hopfield_update(q, k, self.w_v, self.beta, self.steps, attend)


class HopfieldPooling(nn.Module):
    """Pool a set with a learned state pattern (a trainable query), eq. (7.11) with Q learned.

    The query is one (or a few) trainable vectors, the same for every input: a prototype of
    "what matters". Every element y_s of the set is projected to a key k_s = y_s W_K; the query
    asks each element how well it matches the prototype (beta q k_s^T), the softmax turns the
    answers into weights, and the output is the weighted average of the values V = K W_V. Unlike
    mean or max pooling, the weights depend on content, so a few relevant elements can dominate
    a large set.

    Args:
        input_dim: feature size d_y of the set's elements.
        key_dim: d_k (default ``input_dim``).
        value_dim: d_v (default ``key_dim``).
        num_queries: how many learned state patterns (each gives one pooled vector).
        beta: inverse temperature (default 1/sqrt(d_k)).
        bias: a bias in the key and value projections.

    Sizes are ints >= 1, ``beta`` a finite number > 0, Y of the weights' dtype. An empty or
    fully masked set gives a zero pooled vector and zero weights, with finite gradients.

    Shape:
        Y: (B, S, d_y), mask: (B, S) bool, True at real elements.
        Output: pooled (B, num_queries, d_v) and weights (B, num_queries, S).
    """

    def __init__(self, input_dim: int, key_dim: int | None = None, value_dim: int | None = None,
                 num_queries: int = 1, beta: float | None = None, bias: bool = False):
        super().__init__()
        input_dim = _check_dim("input_dim", input_dim)
        key_dim = _check_dim("key_dim", key_dim, input_dim)
        value_dim = _check_dim("value_dim", value_dim, key_dim)
        num_queries = check_int("num_queries", num_queries, 1)
        check_flag("bias", bias)
        self.input_dim = input_dim
        self.beta = _layer_beta(beta, key_dim)
        self.query = nn.Parameter(torch.randn(num_queries, key_dim))  # learned Q = R W_Q, (L, d_k)
        self.w_k = nn.Linear(input_dim, key_dim, bias=bias)
        self.w_v = nn.Linear(key_dim, value_dim, bias=bias)

    def _check_forward(self, Y, mask) -> None:
        _check_set(Y, self.input_dim, "Y", self.w_k.weight.dtype)
        _check_stored_mask(mask, Y.shape[0], Y.shape[1])

    @checked(_check_forward)
    def forward(self, Y: torch.Tensor, mask: torch.Tensor | None = None):
        attend = _stored_mask(mask)  # (B, 1, S)
        q = self.query.expand(Y.shape[0], -1, -1)  # (B, L, d_k)
        k = self.w_k(Y)  # (B, S, d_k)
        return _hopfield_update(q, k, self.w_v, self.beta, 1, attend)


class HopfieldLayer(nn.Module):
    """A learned memory looked up by the input: the input is the state pattern, the stored
    patterns (already projected, K = Y W_K) are parameters, and V = K W_V.

        Z = softmax(beta (R W_Q) K^T) K W_V

    A differentiable lookup table with ``num_stored`` learned entries: each input row retrieves a
    softmax-weighted mix of the entries it matches.

    Args:
        input_dim: feature size d_r of R.
        num_stored: number of learned stored patterns.
        key_dim: d_k (default ``input_dim``).
        value_dim: d_v (default ``key_dim``).
        beta: inverse temperature (default 1/sqrt(d_k)).
        bias: a bias in the query and value projections.

    Sizes are ints >= 1, ``beta`` a finite number > 0, R of the weights' dtype.

    Shape:
        R: (B, L, d_r).  Output: Z (B, L, d_v) and weights (B, L, num_stored).
    """

    def __init__(self, input_dim: int, num_stored: int, key_dim: int | None = None,
                 value_dim: int | None = None, beta: float | None = None, bias: bool = False):
        super().__init__()
        input_dim = _check_dim("input_dim", input_dim)
        num_stored = check_int("num_stored", num_stored, 1)
        key_dim = _check_dim("key_dim", key_dim, input_dim)
        value_dim = _check_dim("value_dim", value_dim, key_dim)
        check_flag("bias", bias)
        self.input_dim = input_dim
        self.beta = _layer_beta(beta, key_dim)
        self.w_q = nn.Linear(input_dim, key_dim, bias=bias)
        self.stored = nn.Parameter(torch.randn(num_stored, key_dim))  # K, (S, d_k)
        self.w_v = nn.Linear(key_dim, value_dim, bias=bias)

    def _check_forward(self, R) -> None:
        _check_set(R, self.input_dim, "R", self.w_q.weight.dtype)

    @checked(_check_forward)
    def forward(self, R: torch.Tensor):
        q = self.w_q(R)  # (B, L, d_k)
        k = self.stored.expand(R.shape[0], -1, -1)  # (B, S, d_k)
        return _hopfield_update(q, k, self.w_v, self.beta, 1, None)
