"""Gated linear recurrences, and the scan that trains them in parallel.

A recurrence whose new state is a *linear* function of the old one,

    h_t = a_t * h_{t-1} + b_t,    t = 1, ..., T    (elementwise; h_0 = 0 by default),

with gates a_t and inputs b_t that depend on the input only (never on h), need not
be computed one step after another. Two steps compose into one step of the same form,

    (a1, b1) then (a2, b2)  =  (a1 * a2,  a2 * b1 + b2),

and this composition is associative, so all T prefixes can be computed in log2(T)
rounds of elementwise products: a *scan* (Blelloch, 1990). Four ways to the states:

* :func:`linear_recurrence`: the loop, T steps. The reference; a generator's way.
* :func:`parallel_scan`: Hillis and Steele's doubling scan, ceil(log2 T) rounds over
  the whole sequence, in plain torch operations along the time axis.
* :func:`blelloch_scan`: the work-efficient scan (Blelloch, 1990): compose neighbouring
  pairs, scan the half-length sequence, fill in the other half; O(T) work in about
  2 log2(T) rounds.
* :func:`log_space_scan`: the closed form h_t = sum_s (prod_{r=s+1..t} a_r) b_s as
  cumulative sums in log space (Heinsen, 2023), O(T) work.

:class:`MinGRU` (Feng et al., 2024, "Were RNNs all we needed?") is chapter 3's GRU
with its gates computed from x_t alone and no reset gate: its recurrence has this
form, so it trains with the scan and generates with a step.

Layout: batch first, time on dim 1: a and b are (B, T, *), h0 is (B, *).
"""

from __future__ import annotations

import torch
from torch import nn

from .checks import (
    autocast_enabled,
    check_flag,
    check_float_tensor,
    check_like,
    check_positive_int,
    check_tensor,
    checked,
    shape_of,
)

__all__ = ["linear_recurrence", "parallel_scan", "blelloch_scan", "log_space_scan", "MinGRU"]


def _check_scan(a_name: str, a, b, h0) -> None:
    """b: (B, T, *) floats; a (or log_a) of b's shape; h0: (B, *); one dtype."""
    check_float_tensor("b", b)
    if b.dim() < 2:
        got = shape_of(b)
        raise ValueError(f"b must have shape (B, T, *), time on dim 1, got {got}")
    check_float_tensor(a_name, a, shape=b.shape, names=f"{shape_of(b)}, b's shape")
    tensors = {a_name: a, "b": b}
    if h0 is not None:
        state = (b.shape[0], *b.shape[2:])
        check_float_tensor("h0", h0, shape=state, names=f"{state}, b's without T")
        tensors["h0"] = h0
    if len({t.dtype for t in tensors.values()}) > 1 and not autocast_enabled(b):
        got = ", ".join(f"{k}: {t.dtype}" for k, t in tensors.items())
        raise TypeError(f"{', '.join(tensors)} must have one dtype, got {got}")


def _check_gates(a, b, h0=None) -> None:
    _check_scan("a", a, b, h0)


def _check_log_gates(log_a, b, h0=None) -> None:
    _check_scan("log_a", log_a, b, h0)


@checked(_check_gates)
def linear_recurrence(
    a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None = None
) -> torch.Tensor:
    """The gated linear recurrence, one step at a time: ``h_t = a_t * h_{t-1} + b_t``.

    The reference the scans are checked against: T small steps, each waiting for the
    one before.

    Args:
        a: the gates (any real values; |a| <= 1 keeps the state bounded).
        b: the inputs.
        h0: the state before the first step; zeros by default.

    Returns:
        every state h_1, ..., h_T.

    Shape:
        a, b: (B, T, *), h0: (B, *) -> output: (B, T, *).
    """
    h = torch.zeros_like(b[:, 0]) if h0 is None else h0  # (B, *)
    states = []
    # step t's slices by unbind: the backward pass stays linear in T (T slices a[:, t]
    # would each give back a gradient as large as a)
    for a_t, b_t in zip(a.unbind(1), b.unbind(1), strict=True):
        h = a_t * h + b_t                                  # (B, *)
        states.append(h)
    return torch.stack(states, dim=1)                     # (B, T, *)


@checked(_check_gates)
def parallel_scan(
    a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None = None
) -> torch.Tensor:
    """The states of :func:`linear_recurrence`, by Hillis and Steele's doubling scan.

    Position t holds a pair (a_t, b_t), "multiply the state by a_t, then add b_t". In
    round k = 0, 1, ... every position composes its pair with the pair s = 2^k places
    before it,

        (a_t, b_t)  <-  (a_{t-s} a_t,  a_t b_{t-s} + b_t),

    and then summarises the 2^(k+1) steps that end at t; a position with nothing that
    far back keeps its pair. After ceil(log2 T) rounds, b_t is h_t, for any T (not
    only powers of two). The initial state enters the first input: b_1 <- a_1 h_0 + b_1.

    O(T log T) work where the loop does O(T), but each round is a few elementwise
    operations over the whole sequence: depth O(log T) instead of T. It divides by
    nothing, so it is as stable as the loop in any dtype. Autograd keeps every round:
    memory O(T log T) times the state size.

    Shape:
        a, b: (B, T, *), h0: (B, *) -> output: (B, T, *).
    """
    if h0 is not None:  # fold h0 into the first input
        b = torch.cat([a[:, :1] * h0[:, None] + b[:, :1], b[:, 1:]], dim=1)
    T, s = b.shape[1], 1
    while s < T:
        b = torch.cat([b[:, :s], a[:, s:] * b[:, :-s] + b[:, s:]], dim=1)  # (B, T, *)
        a = torch.cat([a[:, :s], a[:, s:] * a[:, :-s]], dim=1)             # (B, T, *)
        s *= 2
    return b                                                              # (B, T, *)


@checked(_check_gates)
def blelloch_scan(
    a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None = None
) -> torch.Tensor:
    """The states of :func:`linear_recurrence` by the work-efficient scan (Blelloch, 1990).

    Compose the steps in neighbouring pairs, positions (2i, 2i+1) counted from 0, into
    one step each (the up-sweep); scan that sequence of T / 2 steps, recursively, which
    gives the states at the odd positions; then each state at an even position is one
    step after the odd one before it (the down-sweep):

        h[2i+1] = the scan of the composed pairs,    h[2i] = a[2i] h[2i-1] + b[2i].

    A level of n steps does n / 2 compositions up and n / 2 steps down, and the levels
    halve: about 2T in all, O(T) work like the loop, where :func:`parallel_scan` does
    O(T log T); in about 2 log2(T) rounds instead of log2(T). An odd length gets one
    more step that keeps the state (a = 1, b = 0). The initial state enters the first
    input: b[0] <- a[0] h0 + b[0].

    Shape:
        a, b: (B, T, *), h0: (B, *) -> output: (B, T, *).
    """
    if h0 is not None:  # fold h0 into the first input
        b = torch.cat([a[:, :1] * h0[:, None] + b[:, :1], b[:, 1:]], dim=1)
    T = b.shape[1]
    if T == 1:
        return b
    if T % 2:  # an odd length: one more step that keeps the state
        a = torch.cat([a, torch.ones_like(a[:, :1])], dim=1)
        b = torch.cat([b, torch.zeros_like(b[:, :1])], dim=1)
    a_even, a_odd, b_even, b_odd = a[:, 0::2], a[:, 1::2], b[:, 0::2], b[:, 1::2]
    # up: compose steps 2i and 2i+1 into one, eq. (10.7), and scan the T / 2 results
    h_odd = blelloch_scan(a_even * a_odd, a_odd * b_even + b_odd)  # h[1], h[3], ...
    # down: each even position is one step after the odd one before it
    h_next = a_even[:, 1:] * h_odd[:, :-1] + b_even[:, 1:]          # h[2], h[4], ...
    h_even = torch.cat([b_even[:, :1], h_next], dim=1)               # h[0], h[2], ...
    return torch.stack([h_even, h_odd], dim=2).flatten(1, 2)[:, :T]  # interleave


@checked(_check_log_gates)
def log_space_scan(
    log_a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None = None
) -> torch.Tensor:
    """The states for positive gates ``a_t = exp(log_a_t)``, by cumulative sums of logs.

    Unrolled, the recurrence is h_t = sum_{s<=t} exp(A_t - A_s) b_s, with the log of
    the running product of gates A_t = sum_{r<=t} log a_r. As exp(A_t) times
    cumsum(b_s exp(-A_s)) it overflows once the products get small; in log space
    (Heinsen, 2023, the minGRU paper's log-space scan) it does not:

        h_t = exp(A_t + logcumsumexp_s(log b_s - A_s)).

    That needs log b, so b is split into positive and negative parts, b = b+ - b-,
    each with its own logcumsumexp: h_t = h+_t - h-_t. A zero part enters as the log
    of the dtype's smallest normal number (-inf would make NaN gradients): an absolute
    error under T * finfo.tiny, 1e-38 T in float32 (use float32 or bfloat16, not
    float16).

    Rounding: A_t and the logcumsumexp are both of size |A_t| and cancel, so h_t is off
    by about eps |A_t| relative: fine for short sequences or gates near 1, growing for
    long sequences of strongly decaying gates (:func:`parallel_scan` does not grow).
    O(T) work in cumulative sums, the least of the parallel forms (not the fastest on a GPU:
    the doubling scan beat it there from T = 2048 on, in the performance appendix).

    Args:
        log_a: log of the gates, e.g. ``-F.softplus(-x)`` (stable) for sigmoid(x).
        b: the inputs, any sign.
        h0: the initial state; it enters the first input, b_1 <- a_1 h_0 + b_1.

    Shape:
        log_a, b: (B, T, *), h0: (B, *) -> output: (B, T, *).
    """
    if h0 is not None:
        b = torch.cat([log_a[:, :1].exp() * h0[:, None] + b[:, :1], b[:, 1:]], dim=1)
    tiny = torch.finfo(b.dtype).tiny
    A = log_a.cumsum(dim=1)                                   # (B, T, *) log prod a_r
    log_b_pos, log_b_neg = b.clamp_min(tiny).log(), (-b).clamp_min(tiny).log()
    h_pos = (A + (log_b_pos - A).logcumsumexp(dim=1)).exp()   # (B, T, *)
    h_neg = (A + (log_b_neg - A).logcumsumexp(dim=1)).exp()   # (B, T, *)
    return h_pos - h_neg                                      # (B, T, *)


class MinGRU(nn.Module):
    r"""The minimal GRU (Feng et al., 2024): gates from the input alone, so it scans.

    .. math::
        z_t &= \sigma(W_z x_t + b_z)                          && \text{update gate}\\
        \tilde h_t &= W_h x_t + b_h                            && \text{candidate}\\
        h_t &= (1 - z_t) \odot h_{t-1} + z_t \odot \tilde h_t  && \text{new state}

    Chapter 3's GRU, eqs. (3.1)-(3.4), without the reset gate, without h_{t-1} in the
    gate and the candidate, and without the tanh. Mind the paper's convention: z_t near
    1 *takes* the candidate, where in eq. (3.4) (PyTorch's GRU) it keeps the old state.
    What is left is a gated linear recurrence h_t = a_t h_{t-1} + b_t with
    a_t = 1 - z_t and b_t = z_t h~_t, all known before the loop: ``forward`` computes
    every state with :func:`parallel_scan`, ``step`` one state, for generation.

    Args:
        input_size: features of x_t.
        hidden_size: features of h_t.
        bias: whether the two linear maps have biases.

    Shape:
        x: (B, T, input_size), h0: (1, B, hidden_size), PyTorch's layout, zeros by
        default -> output: (B, T, hidden_size), h_n: (1, B, hidden_size).
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__()
        self.input_size = check_positive_int("input_size", input_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        check_flag("bias", bias)
        self.linear_z = nn.Linear(input_size, hidden_size, bias=bias)  # W_z, b_z
        self.linear_h = nn.Linear(input_size, hidden_size, bias=bias)  # W_h, b_h

    def _check_forward(self, x, h0=None) -> None:
        D, H = self.input_size, self.hidden_size
        check_tensor("x", x, shape=(None, None, D), names=f"(B, T, {D})")
        check_like("x", x, self.linear_z.weight)
        if h0 is not None:
            B = x.shape[0]
            check_tensor("h0", h0, shape=(1, B, H), names=f"(1, {B}, {H})")
            check_like("h0", h0, self.linear_z.weight)

    @checked(_check_forward)
    def forward(
        self, x: torch.Tensor, h0: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every state at once, by the parallel scan. Returns ``(output, h_n)``."""
        z = torch.sigmoid(self.linear_z(x))                # (B, T, H) update gate
        h_tilde = self.linear_h(x)                         # (B, T, H) candidate
        h0 = None if h0 is None else h0[0]                 # (B, H)
        output = parallel_scan(1 - z, z * h_tilde, h0)     # (B, T, H)
        return output, output[:, -1][None]                 # (B, T, H), (1, B, H)

    def step(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """One step, for generation: h_t from x_t (B, input_size) and h_{t-1} (B, H).

        Unchecked (it runs once per generated token); ``forward`` checks its input.
        """
        z = torch.sigmoid(self.linear_z(x))                # (B, H)
        h_tilde = self.linear_h(x)                         # (B, H)
        return (1 - z) * h + z * h_tilde                   # (B, H)

    def extra_repr(self) -> str:
        bias = self.linear_z.bias is not None
        return f"{self.input_size}, {self.hidden_size}, bias={bias}"
