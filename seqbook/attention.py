"""Attention: scaled dot-product attention, masks and multi-head attention.

The functional core is :func:`scaled_dot_product_attention`, eq. (5.2) of the book,

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V,

written out so that it can be read (and checked against ``F.scaled_dot_product_attention``).
:class:`MultiHeadAttention`, eqs. (5.10)-(5.11), runs it once per head on learned projections
(:meth:`MultiHeadAttention.attend`); with ``fast=True`` the same computation runs on PyTorch's fused
kernel instead (:meth:`MultiHeadAttention.attend_fused`, switched by :func:`fused_switch`).

Mask conventions. Inside seqbook a boolean mask is True where a query **may attend** (a real
token): the ``mask`` of :func:`scaled_dot_product_attention` (as ``attn_mask`` of
``F.scaled_dot_product_attention``), :class:`AdditiveAttention`, and the helpers :func:`causal_mask`
and :func:`lengths_to_mask`. A float mask is added to the scores (``-inf`` blocks). The one
exception is the drop-in twin of ``nn.MultiheadAttention``: :class:`MultiHeadAttention` (and the
transformer layers built on it) take PyTorch's own ``key_padding_mask`` and ``attn_mask``, where
True means **blocked**, under PyTorch's names so the polarity is visible at the call:
``key_padding_mask=~lengths_to_mask(lengths)``, ``attn_mask=~causal_mask(T)`` (or ``is_causal=True``).

A query row whose keys are all blocked gets zero weights and a zero output (PyTorch may give NaN).
"""

from __future__ import annotations

import math
from functools import cache, partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .checks import (
    INTEGER_DTYPES,
    autocast_enabled,
    check_attn_mask,
    check_bool_mask,
    check_flag,
    check_float_tensor,
    check_int,
    check_lengths,
    check_mask,
    check_number,
    check_padding_mask,
    check_positive_int,
    check_probability,
    check_same_dtype,
    check_tensor,
    checked,
    has_values,
    optional,
    shape_of,
)

__all__ = [
    "scaled_dot_product_attention",
    "causal_mask",
    "lengths_to_mask",
    "padding_to_attn_mask",
    "restrict_mask",
    "softmax_with_sink",
    "fused_attention",
    "fused_switch",
    "MultiHeadAttention",
    "AdditiveAttention",
]


@checked(L=partial(check_int, minimum=0), S=optional(partial(check_int, minimum=0)),
         window=optional(check_positive_int))
def causal_mask(L: int, S: int | None = None, device=None, window: int | None = None
                ) -> torch.Tensor:
    """Boolean (L, S) mask, True where query ``i`` may attend to key ``j``, i.e. ``j <= i``.

    The lower triangle, aligned top-left as in ``F.scaled_dot_product_attention(is_causal=True)``.
    Pass it as ``mask`` to :func:`scaled_dot_product_attention`; :class:`MultiHeadAttention` (PyTorch's
    convention, True = blocked) wants its negation ``~causal_mask(L)`` or simply ``is_causal=True``.
    ``L = 0`` or ``S = 0`` (no queries or no keys) gives an empty mask.

    With a ``window`` of w positions (sliding-window attention, Beltagy et al., 2020; Jiang et al.,
    2023) query ``i`` sees only its own key and the w - 1 before it, ``i - w < j <= i``, a band
    of width w that ends at the diagonal.

    Shape:
        Output: (L, S) with S = L by default.
    """
    S = L if S is None else S
    mask = torch.ones(L, S, dtype=torch.bool, device=device).tril()  # j <= i
    if window is not None:
        mask = mask.triu(1 - window)  # and j > i - window
    return mask


def _check_lengths_to_mask(lengths, max_len) -> None:
    if lengths.dtype not in INTEGER_DTYPES:
        raise TypeError(f"lengths must be an integer tensor, got {lengths.dtype}")
    if max_len is None:
        if lengths.numel() and lengths.device.type == "meta":
            raise ValueError("max_len must be given for lengths on the meta device (no values to read)")
        if lengths.numel() and has_values(lengths) and int(lengths.min()) < 0:
            raise ValueError(f"lengths must be >= 0, found {int(lengths.min())}")
    else:
        max_len = check_int("max_len", max_len, minimum=0)
        check_lengths("lengths", lengths, max_len, minimum=0, of="the mask (max_len)")


@checked(_check_lengths_to_mask, lengths=partial(check_tensor, shape=(None,), names="(B,)", nonempty=False))
def lengths_to_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """Boolean mask (B, T) that is True at **real tokens** and False at padding: the package's
    convention (True = may attend). PyTorch's ``key_padding_mask`` (True = padding) is its negation,
    ``~lengths_to_mask(lengths)``.

    ``T`` is ``max_len``, or else the longest length (an empty ``lengths`` then gives a (0, 0)
    mask). A length is never above ``max_len``: a mask cannot hold more real tokens than it has
    positions (``max_len = 0`` is the empty mask of sequences that are all empty).

    Shape:
        lengths: (B,) integers. Output: (B, T).
    """
    if max_len is None:
        max_len = int(lengths.max()) if lengths.numel() else 0
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]  # (B, T)


def padding_to_attn_mask(key_padding_mask: torch.Tensor, heads: bool = True) -> torch.Tensor:
    """Turn a (B, S) key padding mask (True = pad) into a boolean attention mask (True = attend).

    The result broadcasts against the (B, H, L, S) scores of multi-head attention (``heads=True``,
    shape (B, 1, 1, S)) or the (B, L, S) scores of single-head attention (``heads=False``,
    shape (B, 1, S)), ready for :func:`scaled_dot_product_attention`.
    """
    check_flag("heads", heads)
    if not isinstance(key_padding_mask, torch.Tensor):
        got = type(key_padding_mask).__name__
        raise TypeError(f"key_padding_mask must be a bool torch.Tensor, got {got}")
    if key_padding_mask.dtype != torch.bool:
        raise TypeError(f"key_padding_mask must be a bool tensor (True = pad), got {key_padding_mask.dtype}")
    if key_padding_mask.dim() != 2:
        raise ValueError(
            f"key_padding_mask must be a bool tensor of shape (B, S), got {key_padding_mask.dtype} "
            f"of shape {shape_of(key_padding_mask)}"
        )
    attend = ~key_padding_mask  # (B, S)
    return attend[:, None, None, :] if heads else attend[:, None, :]


def _check_attention(q, k, v, mask, scale) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_float_tensor(name, t, nonempty=False)
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(
            f"q, k, v must have at least 2 dims (..., length, dim), "
            f"got {shape_of(q)}, {shape_of(k)}, {shape_of(v)}"
        )
    L, d_k = q.shape[-2:]
    S = k.shape[-2]
    if k.shape[-1] != d_k:
        raise ValueError(f"k must have shape (..., S, {d_k}) to match q, got {shape_of(k)}")
    if v.shape[-2] != S:
        raise ValueError(f"v must have shape (..., {S}, d_v) to match k's length, got {shape_of(v)}")
    if S == 0 or d_k == 0:
        raise ValueError(f"k must have shape (..., S, d_k) with S, d_k >= 1, got {shape_of(k)}")
    if not q.dtype == k.dtype == v.dtype and not autocast_enabled(q):
        raise TypeError(f"q, k, v must have the same dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if scale is not None and not isinstance(scale, torch.Tensor):
        check_number("scale", scale)
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError as err:
        raise ValueError(
            f"leading dims of q, k, v must broadcast, got {shape_of(q)}, {shape_of(k)}, {shape_of(v)}"
        ) from err
    if mask is not None:  # the mask as given, before is_causal combines it
        score_shape = (*batch, L, S)
        check_mask("mask", mask)
        try:
            ok = torch.broadcast_shapes(mask.shape, score_shape) == torch.Size(score_shape)
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"mask must broadcast to {score_shape} (..., L, S), got {shape_of(mask)}")


@checked(_check_attention, dropout_p=partial(check_probability, allow_one=True), is_causal=check_flag)
def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, eq. (5.2) of the book: ``softmax(q k^T / sqrt(d_k) + mask) v``.

    Each query is compared with every key by a dot product; the scores, divided by sqrt(d_k) so that
    their spread does not grow with the dimension, go through a softmax over the keys, and the
    output is the resulting weighted average of the values.

    Args:
        q, k, v: queries, keys and values; leading (batch, head) dimensions must broadcast.
        mask: optional. Boolean: True where a query may attend to a key (the convention of
            ``F.scaled_dot_product_attention``). Floating point: added to the scores
            (``-inf`` blocks). Must broadcast to (..., L, S).
        dropout_p: dropout on the attention weights (applied whenever > 0, as in PyTorch).
        is_causal: also block keys after the query (top-left aligned lower triangle); combined
            with ``mask`` if both are given.
        scale: multiplier of the scores; ``1 / sqrt(d_k)`` by default.

    Returns:
        ``(output, weights)``; ``weights`` are the softmax probabilities before dropout. A query
        whose keys are all masked gets zero weights and a zero output (not NaN).

    Shape:
        q: (..., L, d_k), k: (..., S, d_k), v: (..., S, d_v), mask: broadcastable to (..., L, S).
        output: (..., L, d_v), weights: (..., L, S). An empty batch or L = 0 gives empty outputs;
        S = 0 or d_k = 0 is refused. ``scale=0`` is legal (uniform weights). NaN or inf in the
        inputs are not looked for (that would cost a GPU sync per call): they propagate as in PyTorch.
    """
    L, S, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d_k) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., L, S)

    if is_causal:  # also block the keys after each query: keep the triangle j <= i
        causal = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        mask = restrict_mask(mask, causal)  # (..., L, S)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.to(scores.dtype)

    if mask is None:
        weights = torch.softmax(scores, dim=-1)  # (..., L, S)
    else:
        # A row with every key blocked would be softmax(-inf, ..., -inf) = NaN. Give it
        # finite scores and zero its weights afterwards, so neither the output nor the
        # gradients see a NaN.
        dead = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., L, 1)
        scores = scores.masked_fill(dead, 0.0)
        weights = torch.softmax(scores, dim=-1).masked_fill(dead, 0.0)  # (..., L, S)

    attn = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return attn @ v, weights  # (..., L, d_v), (..., L, S)


def _check_restrict_mask(mask, allowed) -> None:
    if mask is not None:
        check_mask("mask", mask)
        try:
            torch.broadcast_shapes(mask.shape, allowed.shape)
        except RuntimeError:
            raise ValueError(f"mask and allowed must broadcast, got {shape_of(mask)} and "
                             f"{shape_of(allowed)}") from None


@checked(_check_restrict_mask, allowed=check_bool_mask)
def restrict_mask(mask: torch.Tensor | None, allowed: torch.Tensor) -> torch.Tensor:
    """Block, in ``mask``, every pair that ``allowed`` (bool, True = may attend) does not allow.

    ``mask`` follows :func:`scaled_dot_product_attention`: None (everything allowed), bool (True =
    may attend) or float (added to the scores). A bool mask is and-ed with ``allowed``; a float
    one gets ``-inf`` where ``allowed`` is False.
    """
    if mask is None:
        return allowed
    if mask.dtype == torch.bool:
        return mask & allowed
    return mask.masked_fill(~allowed, float("-inf"))


def _check_softmax_with_sink(scores, sink) -> None:
    if scores.dim() < 1 or scores.shape[-1] == 0:
        raise ValueError(f"scores must have shape (..., S) with S >= 1, got {shape_of(scores)}")
    if sink.dtype != scores.dtype or sink.device != scores.device:
        raise TypeError(f"sink must have the dtype and device of scores, {scores.dtype} on "
                        f"{scores.device}, got {sink.dtype} on {sink.device}")
    lead = scores.shape[:-1]
    try:
        fits = torch.broadcast_shapes(sink.shape, lead) == lead
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"sink must broadcast to scores' shape without its last dim, "
                         f"{tuple(lead)}, got {shape_of(sink)}")


@checked(_check_softmax_with_sink, scores=check_float_tensor, sink=check_float_tensor)
def softmax_with_sink(scores: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    """Attention weights with a sink (gpt-oss; OpenAI, 2025): a softmax over the S
    scores and one extra logit ``sink``, whose share is then dropped::

        a_j = exp(s_j) / (exp(sink) + sum_k exp(s_k)),    sum_j a_j < 1

    The sink is a key with a zero value: a query that matches nothing can give it most
    of its weight and so read almost nothing. ``-inf`` scores (masked keys) get weight
    0; a row of ``-inf`` scores gives all its weight to the sink.

    Shape:
        scores: (..., S); sink: broadcastable to (...), e.g. (H, 1) for one logit per
        head of (B, H, T, S) scores. Output: (..., S).
    """
    sink = sink.expand(scores.shape[:-1]).unsqueeze(-1)  # (..., 1)
    weights = torch.cat([scores, sink], dim=-1).softmax(dim=-1)  # (..., S + 1)
    return weights[..., :-1]  # the sink's share is dropped


def fused_switch(method: str) -> property:
    """The ``fast`` switch of a module whose ``method`` has a fused twin, ``method + "_fused"``.

    The readable ``method`` is what the chapters print; its twin computes the same with PyTorch's
    fused kernel. ``module.fast = True`` (the constructor's ``fast=``, or
    :func:`seqbook.utils.set_fast` for a whole model) makes every call of ``module.method`` run
    the twin, by setting it as an attribute of the instance; ``False`` removes that attribute, so
    the class's readable method runs again. Neither method has a branch for the other, and
    ``torch.compile`` sees whichever is set. Use it in the class body:
    ``fast = fused_switch("attend")``.
    """
    fused = f"{method}_fused"

    def get(self) -> bool:
        return method in self.__dict__

    def set(self, flag: bool) -> None:
        if check_flag("fast", flag):
            self.__dict__[method] = getattr(self, fused)  # the bound twin shadows the method
        else:
            self.__dict__.pop(method, None)

    return property(get, set, doc=f"Whether calls of ``{method}`` run ``{fused}`` (PyTorch's fused "
                                  f"kernel) instead of the readable ``{method}``.")


class MultiHeadAttention(nn.Module):
    """Multi-head attention, eqs. (5.10)-(5.11), batch-first; a drop-in for ``nn.MultiheadAttention``.

        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)                       (5.10)
        MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O                (5.11)

    The h per-head projections W_i^Q (d_model x d_model/h) are stored side by side as one
    ``nn.Linear(embed_dim, embed_dim)`` per role (``q_proj``, ``k_proj``, ``v_proj``); splitting its
    output into h chunks gives the heads. ``out_proj`` is W^O.

    Args:
        embed_dim: model width d_model; must be divisible by ``num_heads``.
        num_heads: number of heads h; each works in ``head_dim = embed_dim // num_heads`` dims.
        dropout: dropout on the attention weights (training mode only).
        bias: whether the four projections have biases.
        kdim, vdim: feature sizes of ``key`` and ``value`` (default ``embed_dim``).
        fast: run :meth:`attend` on PyTorch's fused kernel, :meth:`attend_fused`
            (``F.scaled_dot_product_attention``), whenever the weights are not asked for. Same
            numbers; the ``fast`` attribute switches it at any time (:func:`fused_switch`). With
            ``need_weights=True`` the readable path always runs, because the fused kernels do not
            return the weights (``nn.MultiheadAttention`` behaves the same way).

    Masks follow ``nn.MultiheadAttention``: a boolean mask is True where attention is **blocked**,
    a float ``attn_mask`` is added to the scores. ``key_padding_mask`` is bool only (True at
    padding): a float one is refused with a ``TypeError``, since a float copy of a bool mask would
    be added to the scores rather than block the padding.

    Shape:
        query: (B, L, embed_dim), key: (B, S, kdim), value: (B, S, vdim),
        key_padding_mask: (B, S), attn_mask: (L, S), (B * num_heads, L, S) or (B, num_heads, L, S).
        output: (B, L, embed_dim); weights: (B, L, S) averaged over heads, or (B, num_heads, L, S).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        fast: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__()
        embed_dim = check_positive_int("embed_dim", embed_dim)
        num_heads = check_positive_int("num_heads", num_heads)
        kdim = None if kdim is None else check_positive_int("kdim", kdim)
        vdim = None if vdim is None else check_positive_int("vdim", vdim)
        dropout = check_probability("dropout", dropout)
        check_flag("bias", bias)
        check_flag("fast", fast)
        if embed_dim % num_heads != 0:
            raise ValueError(
                f"embed_dim must be divisible by num_heads, got embed_dim={embed_dim}, num_heads={num_heads}"
            )
        factory = {"device": device, "dtype": dtype}
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.dropout = dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)  # W^Q of all heads
        self.k_proj = nn.Linear(self.kdim, embed_dim, bias=bias, **factory)  # W^K of all heads
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias, **factory)  # W^V of all heads
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)  # W^O
        self.reset_parameters()
        self.fast = fast

    def reset_parameters(self) -> None:
        r"""Xavier-uniform weights for each of the four projections, and zero biases.

        ``nn.MultiheadAttention`` starts otherwise: Xavier-uniform over its packed (3E, E)
        ``in_proj_weight`` (a range :math:`\sqrt 2` narrower than ours when kdim = vdim = E) and
        ``nn.Linear``'s default for ``out_proj.weight``. :meth:`from_torch` copies its weights where
        the same start matters.
        """
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(proj.weight)
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kdim={self.kdim}, "
            f"vdim={self.vdim}, dropout={self.dropout}, fast={self.fast}"
        )

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention, fast: bool = False) -> MultiHeadAttention:
        """Copy the weights of an ``nn.MultiheadAttention`` so that ours computes the same function.

        Handles both the packed ``in_proj_weight`` (q, k, v stacked, when kdim = vdim = embed_dim)
        and the separate ``q/k/v_proj_weight`` (other kdim/vdim). Ours is always batch-first: call
        it with (B, L, E) tensors whatever ``m.batch_first`` is.
        """
        if not isinstance(m, nn.MultiheadAttention):
            raise TypeError(f"m must be an nn.MultiheadAttention, got {type(m).__name__}")
        if m.bias_k is not None or m.add_zero_attn:
            raise ValueError("add_bias_kv and add_zero_attn are not supported by MultiHeadAttention")
        w = m.out_proj.weight
        ours = cls(
            m.embed_dim, m.num_heads, dropout=m.dropout, bias=m.in_proj_bias is not None,
            kdim=m.kdim, vdim=m.vdim, fast=fast, device=w.device, dtype=w.dtype,
        )
        E = m.embed_dim
        with torch.no_grad():
            if m._qkv_same_embed_dim:
                w_q, w_k, w_v = m.in_proj_weight.split(E, dim=0)
            else:
                w_q, w_k, w_v = m.q_proj_weight, m.k_proj_weight, m.v_proj_weight
            ours.q_proj.weight.copy_(w_q)
            ours.k_proj.weight.copy_(w_k)
            ours.v_proj.weight.copy_(w_v)
            ours.out_proj.weight.copy_(m.out_proj.weight)
            if m.in_proj_bias is not None:
                b_q, b_k, b_v = m.in_proj_bias.split(E, dim=0)
                ours.q_proj.bias.copy_(b_q)
                ours.k_proj.bias.copy_(b_k)
                ours.v_proj.bias.copy_(b_v)
                ours.out_proj.bias.copy_(m.out_proj.bias)
        return ours

    def merge_masks(self, key_padding_mask, attn_mask, B: int, L: int, S: int):
        """Combine both masks into one mask for (B, H, L, S) scores in the *attend* convention.

        Returns None, a bool tensor (True = attend) or a float tensor (added to the scores), each
        broadcastable to (B, H, L, S).
        """
        H = self.num_heads
        parts = []
        if key_padding_mask is not None:
            parts.append(key_padding_mask[:, None, None, :])  # (B, 1, 1, S)
        if attn_mask is not None:
            if shape_of(attn_mask) == (B * H, L, S):
                parts.append(attn_mask.view(B, H, L, S))
            else:
                parts.append(attn_mask)  # (L, S) broadcasts as (1, 1, L, S); or (B or 1, H or 1, L, S)
        if not parts:
            return None
        if all(p.dtype == torch.bool for p in parts):
            blocked = parts[0] if len(parts) == 1 else parts[0] | parts[1]
            return ~blocked  # True = attend
        # Some mask is additive: turn boolean ones into 0 / -inf and add them up.
        dtype = self.q_proj.weight.dtype
        additive = [
            torch.zeros(p.shape, dtype=dtype, device=p.device).masked_fill(p, float("-inf"))
            if p.dtype == torch.bool else p
            for p in parts
        ]
        return additive[0] if len(additive) == 1 else additive[0] + additive[1]

    fast = fused_switch("attend")

    def _check_forward(self, query, key, value, key_padding_mask, attn_mask) -> None:
        E = self.embed_dim
        for name, t in (("query", query), ("key", key), ("value", value)):
            check_float_tensor(name, t, nonempty=False)
        if query.dim() != 3 or query.shape[-1] != E:
            raise ValueError(f"query must have shape (B, L, {E}), got {shape_of(query)}")
        B, L, _ = query.shape
        if key.dim() != 3 or key.shape[0] != B or key.shape[-1] != self.kdim:
            raise ValueError(f"key must have shape ({B}, S, {self.kdim}), got {shape_of(key)}")
        S = key.shape[1]
        if value.dim() != 3 or value.shape[:2] != key.shape[:2] or value.shape[-1] != self.vdim:
            raise ValueError(
                f"value must have shape ({B}, {S}, {self.vdim}) to match key, got {shape_of(value)}"
            )
        if B == 0 or L == 0 or S == 0:
            raise ValueError(
                f"query and key must not be empty (B, L, S >= 1), got query {shape_of(query)} "
                f"and key {shape_of(key)}"
            )
        for name, t in (("query", query), ("key", key), ("value", value)):
            check_same_dtype(name, t, self.q_proj.weight.dtype)
        if key_padding_mask is not None:
            check_padding_mask("key_padding_mask", key_padding_mask, B, S)
        if attn_mask is not None:
            check_attn_mask("attn_mask", attn_mask, B, self.num_heads, L, S)

    @checked(_check_forward, need_weights=check_flag, is_causal=check_flag, average_attn_weights=check_flag)
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        is_causal: bool = False,
        average_attn_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` to ``key``/``value`` with every head, eqs. (5.10)-(5.11).

        Masks and shapes: see the class; ``is_causal=True`` blocks the keys after each
        query. Returns ``(output, weights)``, the weights None if ``need_weights=False``.
        """
        B, L, E = query.shape
        S, H, Dh = key.shape[1], self.num_heads, self.head_dim
        # one mask or None: bool (True = attend) or float (added to the scores)
        mask = self.merge_masks(key_padding_mask, attn_mask, B, L, S)

        # Project, then split the embedding into H heads of Dh dims each.
        q = self.q_proj(query).view(B, L, H, Dh).transpose(1, 2)  # (B, H, L, Dh)
        k = self.k_proj(key).view(B, S, H, Dh).transpose(1, 2)  # (B, H, S, Dh)
        v = self.v_proj(value).view(B, S, H, Dh).transpose(1, 2)  # (B, H, S, Dh)
        out, weights = self.attend(q, k, v, mask, is_causal, need_weights)  # (B, H, L, Dh)

        out = out.transpose(1, 2).reshape(B, L, E)  # concatenate the heads: (B, L, E)
        if need_weights and average_attn_weights:
            weights = weights.mean(dim=1)  # (B, L, S): the heads' average
        return self.out_proj(out), weights

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None = None, is_causal: bool = False,
               need_weights: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Eq. (5.2) for every head at once, with dropout on the weights while training.

        ``mask`` as in :func:`scaled_dot_product_attention` (True = may attend). Unchecked:
        :meth:`forward` checks its inputs.

        Shape:
            q: (B, H, L, Dh), k, v: (B, H, S, Dh) -> (B, H, L, Dh) and the weights
            (B, H, L, S), or None when ``need_weights=False``.
        """
        dropout_p = self.dropout if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal)
        return out, (weights if need_weights else None)

    def attend_fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     mask: torch.Tensor | None = None, is_causal: bool = False,
                     need_weights: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`attend` on PyTorch's fused kernel, ``F.scaled_dot_product_attention``: the
        same output, computed without storing the weights, so a call that asks for them runs
        :meth:`attend`. What ``fast=True`` makes every call of ``attend`` run.

        Shape:
            as :meth:`attend`; the weights are None.
        """
        if need_weights:  # the fused kernel never stores the weights: compute them readably
            # (named through the class: with fast=True, self.attend is this method)
            return MultiHeadAttention.attend(self, q, k, v, mask, is_causal, need_weights)
        dropout_p = self.dropout if self.training else 0.0
        return fused_attention(q, k, v, mask, dropout_p, is_causal), None  # (B, H, L, Dh)


def fused_attention(q, k, v, mask=None, dropout_p: float = 0.0, is_causal: bool = False
                    ) -> torch.Tensor:
    """:func:`scaled_dot_product_attention`'s output computed by PyTorch's fused kernels.

    ``F.scaled_dot_product_attention`` with the package's handling of fully masked rows (zeros,
    no NaN); ``mask`` as in :func:`scaled_dot_product_attention` (True = may attend). Unchecked:
    the fast path of :class:`MultiHeadAttention`, which checks its inputs.

    Shape:
        q: (B, H, L, D_h), k: (B, H, S, D_h), v: (B, H, S, D_v) -> (B, H, L, D_v)
    """
    if mask is None:
        return _sdpa(q, k, v, dropout_p=dropout_p, is_causal=is_causal)
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:  # F refuses is_causal together with a mask: fold it into the mask
        causal = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()  # (L, S)
        mask = restrict_mask(mask, causal)
    if mask.dtype == torch.bool:
        dead = ~mask.any(dim=-1, keepdim=True)
        mask = mask | dead  # let dead rows attend anywhere; their output is zeroed below
    else:
        dead = torch.isneginf(mask).all(dim=-1, keepdim=True)
        mask = mask.masked_fill(dead, 0.0).to(q.dtype)
    out = _sdpa(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    return out.masked_fill(dead, 0.0)  # (B, H, L, Dh)


def _sdpa(q, k, v, **kwargs) -> torch.Tensor:
    """``F.scaled_dot_product_attention``, on its math kernel where the fused one fails.

    PyTorch 2.13's fused bfloat16 kernel on a CPU with AMX raises "pack_vnni2 is only
    supported when avx512 is supported" when ``ATEN_CPU_CAPABILITY`` dispatches below
    avx512 (it asks the CPU, not the dispatched capability): there, and only for bfloat16
    on the CPU (autocast included), the math kernel computes the same attention.
    """
    bf16 = q.dtype == torch.bfloat16 or (
        torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16)
    if q.device.type == "cpu" and bf16 and _cpu_fused_bf16_fails():
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, **kwargs)
    return F.scaled_dot_product_attention(q, k, v, **kwargs)


@cache
def _cpu_fused_bf16_fails() -> bool:
    """Whether the fused CPU kernel refuses bfloat16 here (see :func:`_sdpa`): one small call."""
    x = torch.zeros(1, 1, 64, 32, dtype=torch.bfloat16)  # long enough for the packed path
    try:
        with torch.no_grad(), torch.autocast("cpu", enabled=False):
            F.scaled_dot_product_attention(x, x, x, is_causal=True)
    except RuntimeError:
        return True
    return False


class AdditiveAttention(nn.Module):
    r"""Additive attention of Bahdanau et al. (2014), eqs. (4.6)-(4.8) of the book.

    A one-hidden-layer network scores how well each key matches the query, a softmax over the
    keys turns the scores into weights, and the output is the weighted average of the values:

    .. math::
        e_j = v_a^\top \tanh(W_a q + U_a k_j + b_a), \qquad
        \alpha_j = \frac{\exp e_j}{\sum_{j'} \exp e_{j'}}, \qquad
        c = \sum_j \alpha_j v_j .

    In the encoder-decoder of chapter 4 the query is the previous decoder state
    :math:`s_{i-1}`, and the keys and values are both the encoder annotations :math:`h_j`.
    ``U_a`` carries the only bias, :math:`b_a` (a second one on ``W_a`` would add nothing).

    Args:
        query_dim: size of a query vector (rows of ``W_a``'s input).
        key_dim: size of a key vector.
        hidden_dim: width of the scoring network (output size of ``W_a`` and ``U_a``).

    ``mask`` follows :func:`scaled_dot_product_attention`: a boolean tensor that is True where the
    query may attend (a real source token) and False at padding, e.g. :func:`lengths_to_mask`.
    Masked keys get a weight of exactly 0; a query whose keys are all masked gets zero weights and
    a zero context (not NaN).

    Shape:
        query: (B, D_q) for one query per sequence, or (B, L, D_q) for L queries.
        keys: (B, S, D_k).  values: (B, S, D_v), default ``keys``.  mask: (B, S) bool.
        projected_keys: optional (B, S, hidden_dim), the output of :meth:`project_keys`.
        Output: ``context`` (B, D_v) or (B, L, D_v), and ``weights`` (B, S) or (B, L, S).
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int):
        super().__init__()
        query_dim = check_positive_int("query_dim", query_dim)
        key_dim = check_positive_int("key_dim", key_dim)
        hidden_dim = check_positive_int("hidden_dim", hidden_dim)
        self.query_dim, self.key_dim, self.hidden_dim = query_dim, key_dim, hidden_dim
        self.W_a = nn.Linear(query_dim, hidden_dim, bias=False)  # the query's projection
        self.U_a = nn.Linear(key_dim, hidden_dim)                # the keys' projection (with the bias)
        self.v_a = nn.Linear(hidden_dim, 1, bias=False)          # one energy per (query, key) pair

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """``U_a k_j`` for every key, (B, S, key_dim) -> (B, S, hidden_dim).

        The keys stay the same while a decoder runs, so it computes this once and passes it to
        :meth:`forward` as ``projected_keys`` at every step.
        """
        check_float_tensor("keys", keys, nonempty=False)
        if keys.dim() != 3 or keys.shape[-1] != self.key_dim:
            raise ValueError(f"keys must have shape (B, S, {self.key_dim}), got {shape_of(keys)}")
        check_same_dtype("keys", keys, self.U_a.weight.dtype)
        return self.U_a(keys)

    def _check_forward(self, query, keys, values, mask, projected_keys) -> None:
        values = keys if values is None else values
        check_float_tensor("values", values, nonempty=False)
        if mask is not None and not isinstance(mask, torch.Tensor):
            raise TypeError(f"mask must be a bool torch.Tensor, got {type(mask).__name__}")
        if keys.dim() != 3 or keys.shape[-1] != self.key_dim:
            raise ValueError(f"keys must have shape (B, S, {self.key_dim}), got {shape_of(keys)}")
        B, S = keys.shape[:2]
        if S == 0:
            raise ValueError(f"keys must hold at least one position: shape (B, S>=1, {self.key_dim}), "
                             f"got {shape_of(keys)}")
        if query.dim() not in (2, 3) or query.shape[0] != B or query.shape[-1] != self.query_dim:
            raise ValueError(f"query must have shape ({B}, {self.query_dim}) or ({B}, L, {self.query_dim}), "
                             f"got {shape_of(query)}")
        if values.dim() != 3 or values.shape[:2] != (B, S):
            raise ValueError(f"values must have shape ({B}, {S}, D_v), got {shape_of(values)}")
        if mask is not None and mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor (True = real token), got {mask.dtype}")
        if mask is not None and shape_of(mask) != (B, S):
            raise ValueError(f"mask must be a bool tensor of shape ({B}, {S}), got {mask.dtype} "
                             f"of shape {shape_of(mask)}")
        if projected_keys is not None and shape_of(projected_keys) != (B, S, self.hidden_dim):
            raise ValueError(f"projected_keys must have shape ({B}, {S}, {self.hidden_dim}), "
                             f"got {shape_of(projected_keys)}")
        if B == 0:
            raise ValueError(f"keys must hold at least one sequence (B >= 1), got {shape_of(keys)}")
        if query.dim() == 3 and query.shape[1] == 0:
            raise ValueError(f"query must hold at least one query (L >= 1), got {shape_of(query)}")
        dtype = self.W_a.weight.dtype
        tensors = (("query", query), ("keys", keys), ("values", values), ("projected_keys", projected_keys))
        for name, t in tensors:
            if t is not None:
                check_same_dtype(name, t, dtype)

    @checked(_check_forward, keys=partial(check_float_tensor, nonempty=False),
             query=partial(check_float_tensor, nonempty=False),
             projected_keys=optional(partial(check_float_tensor, nonempty=False)))
    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        projected_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        values = keys if values is None else values
        one_query = query.dim() == 2
        if one_query:
            query = query.unsqueeze(1)  # (B, 1, D_q)
        uk = self.U_a(keys) if projected_keys is None else projected_keys  # (B, S, A)
        wq = self.W_a(query)  # (B, L, A)
        e = self.v_a(torch.tanh(wq.unsqueeze(2) + uk.unsqueeze(1))).squeeze(-1)  # (B, L, S)
        if mask is not None:
            mask = mask.unsqueeze(1)  # (B, 1, S)
            e = e.masked_fill(~mask, torch.finfo(e.dtype).min)
        weights = torch.softmax(e, dim=-1)  # (B, L, S)
        if mask is not None:  # exact zeros; a row with every key masked becomes all 0
            weights = weights.masked_fill(~mask, 0.0)
        context = weights @ values  # (B, L, D_v)
        if one_query:
            return context.squeeze(1), weights.squeeze(1)
        return context, weights

    def extra_repr(self) -> str:
        return f"query_dim={self.query_dim}, key_dim={self.key_dim}, hidden_dim={self.hidden_dim}"
