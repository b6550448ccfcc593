"""Linear attention: attention without the softmax is a recurrent network.

Softmax attention weighs value v_j by exp(q_i . k_j). Linear attention (Katharopoulos
et al., 2020, "Transformers are RNNs") replaces that similarity by a dot product of
feature maps, phi(q_i) . phi(k_j), with phi(x) = elu(x) + 1 > 0:

    out_i = sum_j phi(q_i)^T phi(k_j) v_j / sum_j phi(q_i)^T phi(k_j)
          = phi(q_i)^T (sum_j phi(k_j) v_j^T) / phi(q_i)^T (sum_j phi(k_j)).

Read left to right it is attention with T x T weights
(:func:`linear_attention_quadratic`); grouped on the right, the sums over j are
computed once, in O(T D^2) instead of O(T^2 D) (:func:`linear_attention`). With a
causal mask the sums run over j <= i: they are the states of a recurrent network,

    S_i = S_{i-1} + phi(k_i) v_i^T,    z_i = z_{i-1} + phi(k_i),
    out_i = phi(q_i)^T S_i / phi(q_i)^T z_i,

a matrix state of constant size, whatever the length of the context
(:func:`linear_attention_recurrent`, :func:`linear_attention_step`).
:func:`linear_attention_chunked` mixes the two: the quadratic form inside chunks, the
state between them, the fast causal form for long sequences.

Every form divides by the normaliser plus ``eps`` (1e-6, as the paper's code), so all
of them compute the same numbers. Layout: heads as (B, H, T, D_h), as in
:mod:`seqbook.attention`; the recurrent state is the pair (S, z).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .attention import causal_mask
from .checks import (
    autocast_enabled,
    check_flag,
    check_float_tensor,
    check_generator,
    check_ids,
    check_layer_input,
    check_like,
    check_number,
    check_positive_int,
    check_tensor,
    check_vectors,
    checked,
)

__all__ = [
    "elu_feature_map",
    "taylor_feature_map",
    "PositiveRandomFeatures",
    "linear_attention",
    "linear_attention_quadratic",
    "linear_attention_chunked",
    "linear_attention_recurrent",
    "linear_attention_step",
    "LinearAttention",
    "LinearAttentionLM",
]

State = tuple[torch.Tensor, torch.Tensor]


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1, the feature map of Katharopoulos et al. (2020).

    Positive everywhere (so every normaliser is > 0), and smooth: its gradient never
    vanishes as relu's does for negative inputs.

    Shape:
        x: any -> output: the same.
    """
    return F.elu(x) + 1


@checked(x=check_vectors)
def taylor_feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = (1, x / d^(1/4), vec(x x^T) / sqrt(2 d)): Based's map (Arora et al., 2024).

        phi(q)^T phi(k) = 1 + q.k / sqrt(d) + (q.k)^2 / (2 d),

    the first three terms of the Taylor series of exp(q.k / sqrt(d)), the similarity of
    softmax attention. It is at least 1/2 for every q and k (1 + y + y^2 / 2 has its
    minimum 1/2 at y = -1), so every normaliser is > 0; d features become 1 + d + d^2.

    Shape:
        x: (..., d) -> output: (..., 1 + d + d^2).
    """
    d = x.shape[-1]
    x = x / d**0.25
    outer = (x[..., :, None] * x[..., None, :]).flatten(-2) / 2**0.5  # (..., d * d)
    return torch.cat([torch.ones_like(x[..., :1]), x, outer], dim=-1)


class PositiveRandomFeatures(nn.Module):
    """phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(m), x' = x / d^(1/4): Performer's positive
    random features (Choromanski et al., 2021, FAVOR+).

    With the m rows of W drawn from N(0, I), every feature is positive and
    E_W[phi(q)^T phi(k)] = exp(q.k / sqrt(d)), the similarity of softmax attention; the
    error of one draw falls as 1 / sqrt(m). W is drawn once, here, and kept (a buffer);
    the paper also draws orthogonal rows and may redraw them during training.

    Shape:
        x: (..., d) -> output: (..., m).
    """

    @checked(d=check_positive_int, m=check_positive_int, generator=check_generator)
    def __init__(self, d: int, m: int, generator: torch.Generator | None = None):
        super().__init__()
        self.d, self.m = d, m
        # (m, d): m rows drawn from N(0, I), once; a buffer, moved by .to() but not trained
        self.register_buffer("W", torch.randn(m, d, generator=generator))

    def _check_forward(self, x) -> None:
        check_layer_input("x", x, self.W, (..., self.d))

    @checked(_check_forward)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x / self.d**0.25
        squared = (x * x).sum(dim=-1, keepdim=True) / 2       # (..., 1)
        return torch.exp(x @ self.W.T - squared) / self.m**0.5  # (..., m)

    def extra_repr(self) -> str:
        return f"d={self.d}, m={self.m}"


def _check_qkv(q, k, v, causal, feature_map, eps) -> None:
    """q (B, H, T, D_k), k (B, H, S, D_k), v (B, H, S, D_v), one dtype; causal S = T."""
    check_float_tensor("q", q, ndim=4, names="(B, H, T, D_k)")
    B, H, T, Dk = q.shape
    check_float_tensor("k", k, shape=(B, H, None, Dk), names=f"({B}, {H}, S, {Dk})")
    S = k.shape[2]
    check_float_tensor("v", v, shape=(B, H, S, None), names=f"({B}, {H}, {S}, D_v)")
    if causal and S != T:
        raise ValueError(f"k must have T = {T} steps like q when causal, got {S}")
    if not q.dtype == k.dtype == v.dtype and not autocast_enabled(q):
        got = f"{q.dtype}, {k.dtype}, {v.dtype}"
        raise TypeError(f"q, k, v must have one dtype, got {got}")
    if not callable(feature_map):
        got = type(feature_map).__name__
        raise TypeError(f"feature_map must be callable, got {got}")
    check_number("eps", eps, low=0.0)


def _check_linear_attention(q, k, v, causal=False, feature_map=elu_feature_map,
                            eps=1e-6) -> None:
    _check_qkv(q, k, v, check_flag("causal", causal), feature_map, eps)


def _check_causal(q, k, v, state=None, feature_map=elu_feature_map, eps=1e-6) -> None:
    """The causal forms: q, k, v as :func:`_check_qkv` with S = T, and a state if given (the form
    by chunks takes none)."""
    _check_qkv(q, k, v, True, feature_map, eps)
    if state is not None:
        _check_state(state, q, v)


@checked(_check_linear_attention)
def linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    feature_map: Callable = elu_feature_map,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Linear attention in its parallel form (Katharopoulos et al., 2020).

        out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j) + eps)

    Non-causal: the sums run over every key, computed once: O(T D_k D_v). Causal: over
    j <= i, as cumulative sums along time, every prefix state S_i at once (memory
    O(T D_k D_v); :func:`linear_attention_chunked` needs far less).

    Args:
        q, k, v: queries, keys, values, heads first.
        causal: query i sees keys j <= i only (then S = T).
        feature_map: phi, applied to q and k; :func:`elu_feature_map` by default.
        eps: added to the normaliser.

    Shape:
        q: (B, H, T, D_k), k: (B, H, S, D_k), v: (B, H, S, D_v) -> (B, H, T, D_v).
    """
    q, k = feature_map(q), feature_map(k)                    # (B, H, T|S, D_k)
    if not causal:
        kv = k.transpose(-2, -1) @ v                         # (B, H, D_k, D_v)
        z = k.sum(dim=-2)                                    # (B, H, D_k)
        numerator = q @ kv                                   # (B, H, T, D_v)
        denominator = q @ z[..., None]                       # (B, H, T, 1)
    else:
        kv = torch.einsum("bhtk,bhtv->bhtkv", k, v).cumsum(dim=2)  # (B, H, T, D_k, D_v)
        z = k.cumsum(dim=2)                                  # (B, H, T, D_k)
        numerator = torch.einsum("bhtk,bhtkv->bhtv", q, kv)  # (B, H, T, D_v)
        denominator = (q * z).sum(dim=-1, keepdim=True)      # (B, H, T, 1)
    return numerator / (denominator + eps)                   # (B, H, T, D_v)


@checked(_check_linear_attention)
def linear_attention_quadratic(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    feature_map: Callable = elu_feature_map,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Linear attention read as attention: weights phi(q_i)^T phi(k_j), normalised.

        w_ij = phi(q_i)^T phi(k_j) / (sum_j' phi(q_i)^T phi(k_j') + eps),
        out_i = sum_j w_ij v_j

    Softmax attention (eq. (5.2)) with exp(q . k / sqrt(d_k)) replaced by a kernel
    phi(q) . phi(k); the causal mask zeroes w_ij for j > i. It builds the T x S weights
    (O(T^2) memory), which :func:`linear_attention` never forms; same numbers.

    Returns:
        ``(output, weights)``, like
        :func:`~seqbook.attention.scaled_dot_product_attention`.

    Shape:
        q: (B, H, T, D_k), k: (B, H, S, D_k), v: (B, H, S, D_v)
        -> output: (B, H, T, D_v), weights: (B, H, T, S).
    """
    q, k = feature_map(q), feature_map(k)                    # (B, H, T|S, D_k)
    scores = q @ k.transpose(-2, -1)                         # (B, H, T, S)
    if causal:
        scores = scores.masked_fill(~causal_mask(q.shape[2], device=q.device), 0.0)
    weights = scores / (scores.sum(dim=-1, keepdim=True) + eps)  # (B, H, T, S)
    return weights @ v, weights                              # (B, H, T, D_v)


@checked(_check_causal, chunk_size=check_positive_int)
def linear_attention_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    chunk_size: int = 64,
    feature_map: Callable = elu_feature_map,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Causal linear attention by chunks: quadratic inside a chunk, recurrent across.

    Cut the sequence into chunks of C steps. Query i of a chunk sees the keys of the
    earlier chunks through their summed state (S, z), taken before the chunk, and the
    keys of its own chunk up to itself through the masked quadratic form:

        out_i = (phi(q_i)^T S + sum_{j<=i in chunk} w_ij v_j)
                / (phi(q_i)^T z + sum_{j<=i in chunk} w_ij + eps),

    with w_ij = phi(q_i)^T phi(k_j).

    The states before every chunk are one cumulative sum over T / C chunk sums. Memory
    O(T (C + D_v) + (T / C) D_k D_v), every step a matrix product: the fastest causal
    form for long sequences (the scheme of Mamba-2's and fast linear attention kernels).
    The sequence is padded to a multiple of C after the feature map, so the padded keys
    and values are 0 (not phi(0)); they come after every real query and change nothing.

    Shape:
        q, k: (B, H, T, D_k), v: (B, H, T, D_v) -> (B, H, T, D_v).
    """
    B, H, T, _ = q.shape
    C = chunk_size
    q, k = feature_map(q), feature_map(k)                    # (B, H, T, D_k)
    pad = (-T) % C
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))  # (B, H, n C, D)
    n = (T + pad) // C
    q, k, v = (x.reshape(B, H, n, C, -1) for x in (q, k, v))  # (B, H, n, C, D)

    kv = k.transpose(-2, -1) @ v                             # (B, H, n, D_k, D_v)
    S = torch.cat([torch.zeros_like(kv[:, :, :1]), kv[:, :, :-1]], dim=2).cumsum(dim=2)
    z = k.sum(dim=-2)                                        # (B, H, n, D_k)
    z = torch.cat([torch.zeros_like(z[:, :, :1]), z[:, :, :-1]], dim=2).cumsum(dim=2)

    mask = causal_mask(C, device=q.device)                   # (C, C)
    scores = torch.where(mask, q @ k.transpose(-2, -1), 0.0)  # (B, H, n, C, C)
    numerator = q @ S + scores @ v                           # (B, H, n, C, D_v)
    denominator = q @ z[..., None] + scores.sum(dim=-1, keepdim=True)  # (B, H, n, C, 1)
    out = numerator / (denominator + eps)                    # (B, H, n, C, D_v)
    return out.reshape(B, H, n * C, -1)[:, :, :T]            # (B, H, T, D_v)


def linear_attention_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: State | None = None,
    feature_map: Callable = elu_feature_map,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, State]:
    """One step of causal linear attention as a recurrent network: constant-size state.

        S_t = S_{t-1} + phi(k_t) v_t^T,   z_t = z_{t-1} + phi(k_t),
        out_t = phi(q_t)^T S_t / (phi(q_t)^T z_t + eps)

    For generation: feed the new token's q, k, v and the state; the state does not grow
    with the context, unlike a KV cache. Unchecked (it runs once per token);
    :func:`linear_attention_recurrent` checks its arguments and loops over it.

    Returns:
        ``(out, (S, z))``.

    Shape:
        q, k: (B, H, D_k), v: (B, H, D_v), state: S (B, H, D_k, D_v) and z (B, H, D_k),
        zeros by default -> out: (B, H, D_v).
    """
    q, k = feature_map(q), feature_map(k)                    # (B, H, D_k)
    if state is None:
        S = q.new_zeros(*k.shape, v.shape[-1])               # (B, H, D_k, D_v)
        z = torch.zeros_like(k)                              # (B, H, D_k)
    else:
        S, z = state
    S = S + k[..., :, None] * v[..., None, :]                # (B, H, D_k, D_v)
    z = z + k                                                # (B, H, D_k)
    numerator = (q[..., None, :] @ S).squeeze(-2)            # (B, H, D_v)
    denominator = (q * z).sum(dim=-1, keepdim=True)          # (B, H, 1)
    return numerator / (denominator + eps), (S, z)


@checked(_check_causal)
def linear_attention_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: State | None = None,
    feature_map: Callable = elu_feature_map,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, State]:
    """Causal linear attention, one step at a time (Katharopoulos et al., 2020).

    Loops :func:`linear_attention_step` over time, from ``state`` (zeros by default):
    the same numbers as ``linear_attention(q, k, v, causal=True)`` from a zero state.

    Returns:
        ``(output, (S, z))``, the state after the last step, as a recurrent layer's
        ``(output, h_n)``.

    Shape:
        q, k: (B, H, T, D_k), v: (B, H, T, D_v), state: S (B, H, D_k, D_v) and
        z (B, H, D_k) -> output: (B, H, T, D_v).
    """
    outputs = []
    # step t's slices by unbind: the backward pass stays linear in T
    for q_t, k_t, v_t in zip(q.unbind(2), k.unbind(2), v.unbind(2), strict=True):
        out, state = linear_attention_step(q_t, k_t, v_t, state, feature_map, eps)
        outputs.append(out)                                  # (B, H, D_v)
    return torch.stack(outputs, dim=2), state                # (B, H, T, D_v)


def _check_state(state, q, v) -> None:
    B, H, _, Dk = q.shape
    Dv = v.shape[-1]
    if not isinstance(state, (tuple, list)) or len(state) != 2:
        raise TypeError(f"state must be a pair (S, z), got {type(state).__name__}")
    S, z = state
    check_tensor("S", S, shape=(B, H, Dk, Dv), names=f"({B}, {H}, {Dk}, {Dv})")
    check_tensor("z", z, shape=(B, H, Dk), names=f"({B}, {H}, {Dk})")
    if not S.dtype == z.dtype == q.dtype:
        raise TypeError(f"S, z must have q's dtype {q.dtype}, got {S.dtype}, {z.dtype}")


class LinearAttention(nn.Module):
    """Causal multi-head linear attention: projections around :func:`linear_attention`.

        head_i = LinearAttention(x W_i^Q, x W_i^K, x W_i^V),
        out = Concat(head_1, ..., head_h) W^O

    as :class:`~seqbook.attention.MultiHeadAttention` (eqs. (5.10)-(5.11)) with the
    softmax replaced by the feature map. Self-attention, causal, for language models:
    ``forward`` runs the chunked parallel form on a whole sequence and also returns the
    recurrent state after it, so that generation can go on one token at a time
    (``forward(x_next, state)`` then runs the recurrent form from ``state``).

    Args:
        embed_dim: model width; divisible by ``num_heads``.
        num_heads: number of heads, each of ``head_dim = embed_dim // num_heads``.
        bias: whether the four projections have biases.
        chunk_size: chunk length of :func:`linear_attention_chunked`.

    Shape:
        x: (B, T, embed_dim), state: S (B, H, D_h, D_h) and z (B, H, D_h)
        -> output: (B, T, embed_dim), state.
    """

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True,
                 chunk_size: int = 64):
        super().__init__()
        self.embed_dim = check_positive_int("embed_dim", embed_dim)
        self.num_heads = check_positive_int("num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim must be divisible by num_heads, got "
                             f"{embed_dim} and {num_heads}")
        check_flag("bias", bias)
        self.chunk_size = check_positive_int("chunk_size", chunk_size)
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _check_forward(self, x, state=None) -> None:
        E = self.embed_dim
        check_tensor("x", x, shape=(None, None, E), names=f"(B, T, {E})")
        check_like("x", x, self.q_proj.weight)  # the state: linear_attention_recurrent

    @checked(_check_forward)
    def forward(
        self, x: torch.Tensor, state: State | None = None
    ) -> tuple[torch.Tensor, State]:
        """Returns ``(output, state)``: the chunked form from a zero state, the
        recurrent form from a given one."""
        E = self.embed_dim
        B, T, _ = x.shape
        heads = (B, T, self.num_heads, self.head_dim)
        q, k, v = (p(x).view(heads).transpose(1, 2)           # (B, H, T, D_h)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        if state is None:
            out = linear_attention_chunked(q, k, v, self.chunk_size)  # (B, H, T, D_h)
            phi_k = elu_feature_map(k)                        # (B, H, T, D_h)
            state = (phi_k.transpose(-2, -1) @ v, phi_k.sum(dim=2))
        else:
            out, state = linear_attention_recurrent(q, k, v, state)
        out = out.transpose(1, 2).reshape(B, T, E)           # (B, T, E)
        return self.out_proj(out), state

    def extra_repr(self) -> str:
        return f"{self.embed_dim}, num_heads={self.num_heads}"


class LinearAttentionLM(nn.Module):
    """A language model of linear-attention blocks: a GPT whose attention is linear.

        x_0 = E[ids]
        x <- x + LinearAttention(LN(x)),   x <- x + MLP(LN(x))     (num_layers times)
        logits = LN(x) W_E^T                (the head shares the token embedding)

    :class:`~seqbook.gpt.GPT`'s pre-LN blocks (the MLP is Linear -> GELU -> Linear,
    ``d_ff = 4 * embed_dim`` by default) with :class:`LinearAttention` in place of
    softmax attention (Katharopoulos et al., 2020), and no position embedding: the
    first layer's causal sums hold the set of tokens that came before, not their order
    (later layers see order only indirectly, through what the layers below computed at
    each position), and a model without positions reads a context of any length. It is a
    recurrent network with one (S, z) per layer and head as its state: :meth:`forward`
    runs the chunked parallel form on a whole sequence and returns the states after it,
    :meth:`step` runs one token from them, in constant time and memory per token.

    Weights start as GPT-2's: normal with standard deviation ``init_std``, biases zero.

    Args:
        vocab_size: number of token ids.
        embed_dim: model width; divisible by ``num_heads``.
        num_heads: heads of each :class:`LinearAttention`.
        num_layers: number of blocks.
        d_ff: hidden width of the MLP (default ``4 * embed_dim``).
        chunk_size: chunk length of :func:`linear_attention_chunked`.
        init_std: standard deviation of the initial weights.

    Shape:
        ids: (B, T) int64; state: a list of ``num_layers`` pairs (S (B, H, D_h, D_h),
        z (B, H, D_h)) or None (zeros) -> logits: (B, T, vocab_size), state.
    """

    def __init__(self, vocab_size: int, embed_dim: int = 64, num_heads: int = 4,
                 num_layers: int = 2, d_ff: int | None = None, chunk_size: int = 64,
                 init_std: float = 0.02):
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        E = check_positive_int("embed_dim", embed_dim)
        self.num_layers = check_positive_int("num_layers", num_layers)
        d_ff = 4 * E if d_ff is None else check_positive_int("d_ff", d_ff)
        check_number("init_std", init_std, low=0.0)
        self.embed = nn.Embedding(vocab_size, E)
        self.attn = nn.ModuleList([LinearAttention(E, num_heads, chunk_size=chunk_size)
                                   for _ in range(num_layers)])
        self.norm1 = nn.ModuleList([nn.LayerNorm(E) for _ in range(num_layers)])
        self.norm2 = nn.ModuleList([nn.LayerNorm(E) for _ in range(num_layers)])
        self.mlp = nn.ModuleList([
            nn.Sequential(nn.Linear(E, d_ff), nn.GELU(), nn.Linear(d_ff, E))
            for _ in range(num_layers)])
        self.norm = nn.LayerNorm(E)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=init_std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def _check_state(self, state, batch: int) -> None:
        if state is None:
            return
        n = self.num_layers
        if not isinstance(state, (tuple, list)) or len(state) != n:
            raise TypeError(f"state must be a list of {n} pairs (S, z), one per layer, "
                            f"got {type(state).__name__}")
        a = self.attn[0]
        H, D = a.num_heads, a.head_dim
        for i, layer_state in enumerate(state):
            if not isinstance(layer_state, (tuple, list)) or len(layer_state) != 2:
                raise TypeError(f"state[{i}] must be a pair (S, z), "
                                f"got {type(layer_state).__name__}")
            S, z = layer_state
            check_tensor(f"state[{i}][0]", S, shape=(batch, H, D, D),
                         names=f"({batch}, {H}, {D}, {D})")
            check_tensor(f"state[{i}][1]", z, shape=(batch, H, D),
                         names=f"({batch}, {H}, {D})")
            check_like(f"state[{i}][0]", S, self.embed.weight)
            check_like(f"state[{i}][1]", z, self.embed.weight)

    def _check_forward(self, ids, state=None) -> None:
        check_ids("ids", ids, self.vocab_size, shape=(None, None), names="(B, T)")
        self._check_state(state, ids.shape[0])

    @checked(_check_forward)
    def forward(self, ids: torch.Tensor, state: list[State] | None = None
                ) -> tuple[torch.Tensor, list[State]]:
        """Returns ``(logits, state)``: the states after the last token, to go on from."""
        x = self.embed(ids)                                  # (B, T, E)
        new_state = []
        for i in range(self.num_layers):
            h, s = self.attn[i](self.norm1[i](x), None if state is None else state[i])
            x = x + h                                        # (B, T, E)
            x = x + self.mlp[i](self.norm2[i](x))            # (B, T, E)
            new_state.append(s)
        logits = self.norm(x) @ self.embed.weight.T          # (B, T, V)
        return logits, new_state

    def _check_step(self, ids, state=None) -> None:
        check_ids("ids", ids, self.vocab_size, shape=(None,), names="(B,)")
        self._check_state(state, ids.shape[0])

    @checked(_check_step)
    def step(self, ids: torch.Tensor, state: list[State] | None = None
             ) -> tuple[torch.Tensor, list[State]]:
        """One token per sequence, for generation: ``(logits (B, V), state)``.

        The recurrent form of every layer, eq. (10.4): the work per token does not
        depend on how many tokens came before.
        """
        logits, state = self(ids[:, None], state)  # checked at step's door, not again
        return logits[:, 0], state
