"""The delta rule: an associative memory that writes the error of its read-out.

Linear attention (Katharopoulos et al., 2020) writes every pair into its matrix state by
adding an outer product, S_t = S_{t-1} + k_t v_t^T: the Hebb rule. The state is a
memory that maps a key to a value, S^T k, and the Hebb rule adds the new pair on top of
whatever S already returns for k_t. The delta rule (Widrow & Hoff, 1960) writes only
the difference between the value wanted and the value read,

    S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T
        = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,

one step of gradient descent with learning rate beta_t on the read-out error
1/2 ||S^T k_t - v_t||^2. With a unit key and beta_t = 1 the memory returns v_t for k_t
afterwards, whatever it held for k_t before: it overwrites where the Hebb rule adds.
As a layer with beta_t and the keys computed from the input this is DeltaNet (Schlag,
Irie & Schmidhuber, 2021; Yang et al., 2024); gated DeltaNet (Yang, Kautz & Hatamizadeh,
2025) also lets the whole memory decay by a gate alpha_t = exp(log_alpha_t) in (0, 1]:

    S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   out_t = S_t^T q_t.

:func:`delta_rule_recurrent` runs this loop step by step. :func:`delta_rule_chunked`
computes the same numbers a chunk of C steps at a time with matrix products, the
parallel form of Yang et al. (2024): within a chunk the written errors
u_t = beta_t (v_t - alpha_t S_{t-1}^T k_t) solve one triangular system (the "UT
transform" of the WY representation), so only the state between chunks is carried by
a loop. :class:`DeltaNet` is the layer. The book's layout: heads as (B, H, T, D), the
state S as (B, H, D_k, D_v), as in :mod:`seqbook.linear_attention` (the papers write its
transpose).
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .checks import (
    autocast_enabled,
    check_flag,
    check_float_tensor,
    check_like,
    check_positive_int,
    check_tensor,
    checked,
)

__all__ = ["delta_rule_recurrent", "delta_rule_chunked", "DeltaNet"]


# k, checked first: its shape (B, H, T, D_k) gives the sizes the other tensors must have.
_KEYS = partial(check_float_tensor, ndim=4, names="(B, H, T, D_k)")


def _check_delta_rule(q, k, v, beta, log_alpha, state) -> None:
    """q like k, v (B, H, T, D_v), beta and log_alpha (B, H, T), state (B, H, D_k, D_v), one
    dtype, one device; the checks of both forms of the delta rule."""
    B, H, T, Dk = k.shape
    check_float_tensor("q", q, shape=(B, H, T, Dk), names=f"({B}, {H}, {T}, {Dk}) like k")
    check_float_tensor("v", v, shape=(B, H, T, None), names=f"({B}, {H}, {T}, D_v)")
    Dv = v.shape[-1]
    check_float_tensor("beta", beta, shape=(B, H, T), names=f"({B}, {H}, {T})")
    tensors = {"q": q, "k": k, "v": v, "beta": beta}
    if log_alpha is not None:
        check_float_tensor("log_alpha", log_alpha, shape=(B, H, T), names=f"({B}, {H}, {T})")
        tensors["log_alpha"] = log_alpha
    if state is not None:
        check_float_tensor("state", state, shape=(B, H, Dk, Dv),
                           names=f"({B}, {H}, {Dk}, {Dv})")
        tensors["state"] = state
    dtypes = {x.dtype for x in tensors.values()}
    if len(dtypes) > 1 and not autocast_enabled(k):
        got = ", ".join(f"{name} {x.dtype}" for name, x in tensors.items())
        raise TypeError(f"q, k, v, beta, log_alpha and state must have one dtype, got {got}")
    if len({x.device for x in tensors.values()}) > 1:
        got = ", ".join(f"{name} {x.device}" for name, x in tensors.items())
        raise ValueError(f"q, k, v, beta, log_alpha and state must be on one device, got {got}")


@checked(_check_delta_rule, k=_KEYS)
def delta_rule_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_alpha: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The delta rule, one step at a time (Widrow & Hoff, 1960; DeltaNet).

        S_t = alpha_t S_{t-1} + beta_t k_t (v_t - alpha_t S_{t-1}^T k_t)^T,
        out_t = S_t^T q_t

    Each step reads what the memory holds for the key, ``alpha_t S_{t-1}^T k_t``, and
    writes ``beta_t`` times the error of that read-out. ``log_alpha = None`` is
    DeltaNet (alpha_t = 1); a gate log alpha_t <= 0 is gated DeltaNet. The keys are
    used as given: DeltaNet normalises them to unit length first, which with
    0 < beta_t <= 1 keeps I - beta_t k_t k_t^T non-expansive (norm 1).

    Args:
        q, k, v: queries, keys, values, heads first.
        beta: the writing strength of every step, usually in (0, 1).
        log_alpha: the log of the decay gate of every step, or None (no decay).
        state: S before the first step; zeros by default.

    Returns:
        ``(output, state)``: the read-outs and S after the last step.

    Shape:
        q, k: (B, H, T, D_k), v: (B, H, T, D_v), beta, log_alpha: (B, H, T),
        state: (B, H, D_k, D_v) -> output: (B, H, T, D_v), state: (B, H, D_k, D_v).
    """
    B, H, T, D_k = k.shape
    # the memory S: (B, H, D_k, D_v)
    S = k.new_zeros(B, H, D_k, v.shape[-1]) if state is None else state
    alpha = torch.ones_like(beta) if log_alpha is None else log_alpha.exp()  # (B, H, T)
    outputs = []
    for q_t, k_t, v_t, b_t, a_t in zip(*(x.unbind(2) for x in (q, k, v, beta, alpha)),
                                       strict=True):
        S = a_t[..., None, None] * S                           # forget: alpha_t S
        read = (k_t[..., None, :] @ S).squeeze(-2)             # (B, H, D_v): S^T k_t
        error = b_t[..., None] * (v_t - read)                  # (B, H, D_v)
        S = S + k_t[..., :, None] * error[..., None, :]        # write the error
        outputs.append((q_t[..., None, :] @ S).squeeze(-2))    # (B, H, D_v): S^T q_t
    return torch.stack(outputs, dim=2), S                      # (B, H, T, D_v)


@checked(_check_delta_rule, k=_KEYS, chunk_size=check_positive_int)
def delta_rule_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_alpha: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The delta rule a chunk at a time: the parallel form of Yang et al. (2024).

    Within a chunk of C steps that starts from the state S_0, write g_t for the summed
    log gates of the chunk up to step t, G_t = exp(g_t), and u_t for the error that
    step t writes. Unrolled, S_t = G_t S_0 + sum_{j<=t} (G_t / G_j) k_j u_j^T, and so

        u_t = beta_t (v_t - G_t S_0^T k_t - sum_{j<t} (G_t / G_j) (k_j^T k_t) u_j),

    a lower-triangular system (I + A) U = diag(beta) (V - diag(G) K S_0) with
    A_tj = beta_t (G_t / G_j) k_t^T k_j for j < t. Its solution U = MV - MK S_0, with
    MV = M V, MK = M diag(G) K and M = (I + A)^-1 diag(beta), needs no S_0 (the WY
    representation; Yang et al. call the inverse the UT transform). Then

        out_t = G_t S_0^T q_t + sum_{j<=t} (G_t / G_j) (k_j^T q_t) u_j,
        S_C = G_C S_0 + sum_j (G_C / G_j) k_j u_j^T.

    Everything but the last two lines is computed for all chunks at once; a loop over
    the T / C chunks carries S. The same numbers as :func:`delta_rule_recurrent` (to
    rounding). The sequence is padded to a multiple of C with beta = 0 and no decay,
    steps that write nothing.

    Shape:
        q, k: (B, H, T, D_k), v: (B, H, T, D_v), beta, log_alpha: (B, H, T),
        state: (B, H, D_k, D_v) -> output: (B, H, T, D_v), state: (B, H, D_k, D_v).
    """
    B, H, T, D_k = k.shape
    C = chunk_size
    pad = (-T) % C
    n = (T + pad) // C
    if log_alpha is None:
        log_alpha = torch.zeros_like(beta)                     # alpha_t = 1
    q, k, v = (F.pad(x, (0, 0, 0, pad)).reshape(B, H, n, C, -1) for x in (q, k, v))
    beta, log_alpha = (F.pad(x, (0, pad)).reshape(B, H, n, C)     # (B, H, n, C)
                       for x in (beta, log_alpha))

    g = log_alpha.cumsum(dim=-1)                               # (B, H, n, C): log G_t
    lower = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()  # j <= t
    decay = (g[..., :, None] - g[..., None, :]).masked_fill(~lower, -torch.inf).exp()
    A = beta[..., None] * (k @ k.transpose(-2, -1)) * decay   # (B, H, n, C, C)
    A = A.tril(-1)                                             # j < t only
    solve = torch.promote_types(A.dtype, torch.float32)      # no half-precision solver
    eye = torch.eye(C, dtype=solve, device=k.device)
    M = torch.linalg.solve_triangular(eye + A, torch.diag_embed(beta).to(solve),
                                      upper=False).to(A.dtype)  # (B, H, n, C, C)
    MK = M @ (g.exp()[..., None] * k)            # M diag(G) K: (B, H, n, C, D_k)
    MV = M @ v                                                 # M V: (B, H, n, C, D_v)
    scores = (q @ k.transpose(-2, -1)) * decay                 # (B, H, n, C, C)

    # the memory S: (B, H, D_k, D_v)
    S = k.new_zeros(B, H, D_k, v.shape[-1]) if state is None else state
    outputs = []
    # chunk i's slices by unbind: the backward pass stays linear in the number of chunks
    per_chunk = (x.unbind(2) for x in (MV, MK, g, q, k, scores))
    for MV_i, MK_i, g_i, q_i, k_i, scores_i in zip(*per_chunk, strict=True):
        U = MV_i - MK_i @ S                                    # (B, H, C, D_v): errors
        G = g_i.exp()[..., None]                               # (B, H, C, 1)
        outputs.append(G * (q_i @ S) + scores_i @ U)           # (B, H, C, D_v)
        last = g_i[..., -1:]                                   # (B, H, 1): log G_C
        k_decayed = (last - g_i).exp()[..., None] * k_i        # (B, H, C, D_k)
        S = last.exp()[..., None] * S + k_decayed.transpose(-2, -1) @ U
    return torch.cat(outputs, dim=2)[:, :, :T], S               # (B, H, T, D_v)


class DeltaNet(nn.Module):
    """Multi-head DeltaNet: the delta rule as a causal sequence layer.

        q_t, k_t = normalize(W^Q x_t), normalize(W^K x_t),   v_t = W^V x_t,
        beta_t = sigmoid(w_beta^T x_t),   log alpha_t = -softplus(w_alpha^T x_t + b),
        S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,
        out = Concat(S_t^T q_t per head) W^O

    per head, as :class:`~seqbook.linear_attention.LinearAttention` with the delta rule
    in place of the Hebbian sum and no normaliser: the keys and queries have unit
    length, and each head has its own beta_t (and alpha_t). ``gated=False`` is DeltaNet
    (Yang et al., 2024), alpha_t = 1; ``gated=True`` is gated DeltaNet (Yang, Kautz &
    Hatamizadeh, 2025) with the gate started near 1 (b = -5: alpha_t ~ 0.993). The
    papers' layers add a short convolution after the q, k, v projections and an output norm,
    which this one leaves out. ``forward`` runs :func:`delta_rule_chunked` and returns the state
    after the sequence, so generation can go on from it.

    Args:
        embed_dim: model width; divisible by ``num_heads``.
        num_heads: number of heads, each of ``head_dim = embed_dim // num_heads``.
        gated: whether the memory decays by a gate alpha_t computed from the input.
        chunk_size: chunk length of :func:`delta_rule_chunked`.

    Shape:
        x: (B, T, embed_dim), state: (B, H, D_h, D_h) or None
        -> output: (B, T, embed_dim), state: (B, H, D_h, D_h).
    """

    def __init__(self, embed_dim: int, num_heads: int = 1, gated: bool = False,
                 chunk_size: int = 64):
        super().__init__()
        self.embed_dim = check_positive_int("embed_dim", embed_dim)
        self.num_heads = check_positive_int("num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim must be divisible by num_heads, got "
                             f"{embed_dim} and {num_heads}")
        self.gated = check_flag("gated", gated)
        self.chunk_size = check_positive_int("chunk_size", chunk_size)
        self.head_dim = embed_dim // num_heads
        E, H = embed_dim, num_heads
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(E, E) for _ in range(3))
        self.beta_proj = nn.Linear(E, H)
        self.gate_proj = nn.Linear(E, H) if gated else None
        if gated:
            nn.init.constant_(self.gate_proj.bias, -5.0)  # alpha_t near 1: keep at first
        self.out_proj = nn.Linear(E, E)

    def _check_forward(self, x, state=None) -> None:
        E, H, D = self.embed_dim, self.num_heads, self.head_dim
        check_float_tensor("x", x, shape=(None, None, E), names=f"(B, T, {E})")
        check_like("x", x, self.q_proj.weight)
        if state is not None:
            B = x.shape[0]
            check_tensor("state", state, shape=(B, H, D, D), names=f"({B}, {H}, {D}, {D})")
            check_like("state", state, self.q_proj.weight)

    @checked(_check_forward)
    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(output, state)``: the state after the last step, to go on from."""
        B, T, E = x.shape
        heads = (B, T, self.num_heads, self.head_dim)
        q, k, v = (p(x).view(heads).transpose(1, 2)             # (B, H, T, D_h)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)   # unit queries and keys
        beta = torch.sigmoid(self.beta_proj(x)).transpose(1, 2)  # (B, H, T)
        log_alpha = None
        if self.gated:
            log_alpha = -F.softplus(self.gate_proj(x)).transpose(1, 2)  # (B, H, T)
        out, state = delta_rule_chunked(q, k, v, beta, log_alpha, state, self.chunk_size)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, E)), state

    def extra_repr(self) -> str:
        return f"{self.embed_dim}, num_heads={self.num_heads}, gated={self.gated}"
