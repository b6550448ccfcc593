"""The transformer, from positional encoding to an encoder-decoder and a GPT-style language model.

Read top to bottom, this file follows chapter 6 of the book:

1. :func:`positional_encoding` (eqs. (6.1)-(6.2) of the book), :func:`positional_frequencies`, the
   :class:`PositionalEncoding` module, and :func:`relative_position_matrix`, the rotation that
   moves a positional code ``k`` steps along the sequence;
2. :class:`LayerNorm` written out (eq. (6.8)) and the position-wise :class:`FeedForward` network;
3. pre-LN :class:`EncoderLayer` and :class:`DecoderLayer` (eq. (6.6); post-LN with
   ``norm_first=False``), each with ``from_torch`` that copies ``nn.TransformerEncoderLayer`` /
   ``nn.TransformerDecoderLayer`` (``batch_first=True``);
4. :class:`Seq2SeqTransformer`, the encoder-decoder of Vaswani et al. (2017) with source padding
   and target causal and padding masks, teacher-forced ``loss``, the decoding protocol of
   :mod:`seqbook.decoding` and ``from_torch`` that copies ``nn.Transformer(batch_first=True)`` with
   embeddings and output layer;
The decoder-only language model built from these layers, :class:`~seqbook.gpt.GPT`, lives in
:mod:`seqbook.gpt`, and the loading of pretrained weights in :mod:`seqbook.pretrained`.
The learning-rate schedules of the chapter (:func:`~seqbook.train.warmup_schedule`) live in
:mod:`seqbook.train`.

Mask conventions follow ``nn.MultiheadAttention`` (these layers are the package's drop-in twins of
PyTorch's, the one exception to its rule that True means "may attend"): a boolean
``key_padding_mask`` of shape (B, S) is True at padding, and a boolean ``attn_mask`` of shape (T, S)
is True where attention is *not* allowed (float masks are added to the scores); ``is_causal=True``
blocks the future. Attention itself lives in :mod:`seqbook.attention`. Every attention module and
every :class:`LayerNorm` here runs the readable code the chapters print (``fast=False``, the
default) or, with ``fast=True`` (switched for a whole model by :func:`seqbook.utils.set_fast`),
PyTorch's fused kernels: ``torch.nn.functional.scaled_dot_product_attention`` and
``torch.nn.functional.layer_norm``. Both give the same numbers.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention, fused_switch
from .checks import (
    check_attn_mask,
    check_choice,
    check_even,
    check_features,
    check_flag,
    check_float_tensor,
    check_ids,
    check_int,
    check_lengths,
    check_number,
    check_padding_mask,
    check_positive_int,
    check_probability,
    check_same_dtype,
    check_sequence,
    check_token_ids,
    checked,
    has_values,
)

__all__ = [
    "positional_frequencies", "positional_encoding", "relative_position_matrix", "PositionalEncoding",
    "LayerNorm", "FeedForward", "ACTIVATIONS", "residual", "EncoderLayer", "DecoderLayer",
    "Seq2SeqTransformer",
]

# ---------------------------------------------------------------------------------------------
# 1. Positional encoding.
# ---------------------------------------------------------------------------------------------


# The sizes and the base of the sinusoidal encoding, the same for the three functions below.
_POSITIONAL = {"embed_dim": check_even, "base": partial(check_number, low=1.0, low_open=True)}


@checked(**_POSITIONAL)
def positional_frequencies(embed_dim: int, base: float = 10000.0) -> torch.Tensor:
    """The angular frequencies ``w_i = base^(-2i/embed_dim)``, i = 0 .. embed_dim/2 - 1, of eqs. (6.1)-(6.2).

    Shape:
        Output: (embed_dim // 2,), float32, from 1 down to nearly ``1/base``.
    """
    return torch.exp(-math.log(base) * torch.arange(0, embed_dim, 2, dtype=torch.float64) / embed_dim).float()


@checked(max_len=check_positive_int, **_POSITIONAL)
def positional_encoding(
    max_len: int, embed_dim: int, base: float = 10000.0
) -> torch.Tensor:
    """Sinusoidal positional encoding of Vaswani et al. (2017), eqs. (6.1)-(6.2)::

        PE[pos, 2i]     = sin(pos / base^(2i/embed_dim))
        PE[pos, 2i + 1] = cos(pos / base^(2i/embed_dim))

    Even columns hold sines and odd columns cosines; column pair i turns with
    frequency ``w_i`` (:func:`positional_frequencies`), fast in the first columns and
    slow in the last.

    Shape:
        Output: (max_len, embed_dim), float32. Row ``pos`` is the code of ``pos``.
    """
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (L, 1)
    w = positional_frequencies(embed_dim, base).double()[None, :]  # (1, D/2)
    pe = torch.empty(max_len, embed_dim, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * w)
    pe[:, 1::2] = torch.cos(pos * w)
    return pe.float()


@checked(k=check_number, **_POSITIONAL)
def relative_position_matrix(k: int | float, embed_dim: int, base: float = 10000.0) -> torch.Tensor:
    """The fixed linear map ``M_k`` with ``PE[pos + k] = M_k @ PE[pos]`` for every ``pos``.

    By the angle-addition formulas each (sin, cos) pair of the encoding is rotated by the angle
    ``k * w_i``, so ``M_k`` is block diagonal with 2x2 blocks::

        [[ cos(k w_i),  sin(k w_i)],
         [-sin(k w_i),  cos(k w_i)]]

    It depends on the offset ``k`` only, never on ``pos``, and ``M_j @ M_k = M_(j+k)``.

    Shape:
        Output: (embed_dim, embed_dim), float32.
    """
    angle = float(k) * positional_frequencies(embed_dim, base).double()  # (D/2,)
    c, s = torch.cos(angle), torch.sin(angle)
    m = torch.zeros(embed_dim, embed_dim, dtype=torch.float64)
    i = torch.arange(0, embed_dim, 2)
    m[i, i], m[i, i + 1] = c, s
    m[i + 1, i], m[i + 1, i + 1] = -s, c
    return m.float()


class PositionalEncoding(nn.Module):
    """Add the sinusoidal code of :func:`positional_encoding` to a batch of embeddings, then dropout.

    Shape:
        Input: (B, T, embed_dim) with T <= max_len. Output: same shape.
    """

    def __init__(self, embed_dim: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__()
        self.register_buffer("pe", positional_encoding(max_len, embed_dim), persistent=False)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))

    def _check_forward(self, x, offset) -> None:
        max_len, embed_dim = self.pe.shape
        if x.dim() != 3 or x.shape[-1] != embed_dim:
            raise ValueError(f"x must have shape (B, T, {embed_dim}), got {tuple(x.shape)}")
        offset = check_int("offset", offset, minimum=0)
        if offset + x.shape[1] > max_len:
            raise ValueError(f"sequence of length {x.shape[1]} (offset {offset}) exceeds max_len={max_len}")

    @checked(_check_forward, x=partial(check_float_tensor, nonempty=False))
    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        T = x.shape[1]
        return self.dropout(x + self.pe[offset : offset + T].to(x.dtype))  # (B, T, D)


# ---------------------------------------------------------------------------------------------
# 2. Layer normalisation and the position-wise feed-forward network.
# ---------------------------------------------------------------------------------------------


class LayerNorm(nn.Module):
    """Layer normalisation (Ba et al., 2016), eq. (6.8) of the book, written out::

        LayerNorm(x) = a * (x - mean(x)) / sqrt(var(x) + eps) + b

    The mean and the *biased* variance are taken over the last dimension, one token at a time, and
    ``eps`` sits inside the square root: exactly what ``nn.LayerNorm`` computes.

    ``eps=0`` is legal but gives NaN on a token whose features are all equal. ``fast=True`` runs
    :meth:`forward_fused` instead, PyTorch's ``F.layer_norm`` on the same parameters (same
    numbers; :func:`seqbook.utils.set_fast` switches it).

    Shape:
        Input: (..., embed_dim). Output: same shape, and the input's dtype (as ``nn.LayerNorm``).
    """

    fast = fused_switch("forward")

    def __init__(self, embed_dim: int, eps: float = 1e-5, bias: bool = True, fast: bool = False):
        super().__init__()
        embed_dim = check_positive_int("embed_dim", embed_dim)
        self.eps = check_number("eps", eps, low=0.0)
        check_flag("bias", bias)
        self.weight = nn.Parameter(torch.ones(embed_dim))  # the gain a
        self.bias = nn.Parameter(torch.zeros(embed_dim)) if bias else None  # the bias b
        self.fast = check_flag("fast", fast)

    def _check_forward(self, x: torch.Tensor) -> None:
        check_features("x", x, self.weight.shape[0])

    @checked(_check_forward)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        y = (x - mean) / torch.sqrt(var + self.eps) * self.weight
        y = y + self.bias if self.bias is not None else y
        return y.to(x.dtype)  # a no-op when x has the weights' dtype

    @checked(_check_forward)
    def forward_fused(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` by PyTorch's kernel, ``F.layer_norm``: the same numbers, one
        fused operation, with the gain and the bias in ``x``'s dtype."""
        weight = self.weight.to(x.dtype)  # a no-op when x has the weights' dtype
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.layer_norm(x, weight.shape, weight, bias, self.eps)

    @classmethod
    def from_torch(cls, m: nn.LayerNorm, fast: bool = False) -> LayerNorm:
        """A copy of a one-dimensional, affine ``nn.LayerNorm``."""
        if not isinstance(m, nn.LayerNorm):
            raise TypeError(f"m must be an nn.LayerNorm, got {type(m).__name__}")
        if len(m.normalized_shape) != 1 or m.weight is None:
            raise ValueError(f"need an affine nn.LayerNorm over one dimension, got {m}")
        ours = cls(m.normalized_shape[0], eps=m.eps, bias=m.bias is not None, fast=fast)
        ours.to(m.weight.device, m.weight.dtype)  # before copying: a float32 copy would round float64
        ours.weight.data.copy_(m.weight.data)
        if m.bias is not None:
            ours.bias.data.copy_(m.bias.data)
        return ours.to(m.weight.device, m.weight.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}" + (", fast=True" if self.fast else "")


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU with the tanh approximation of GPT-2: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    return F.gelu(x, approximate="tanh")


# The activations of the feed-forward network, by name.
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": _gelu_tanh}


class FeedForward(nn.Module):
    """The position-wise feed-forward network ``W_2 dropout(act(W_1 x + b_1)) + b_2``.

    The same two-layer MLP is applied to every position on its own; ``d_ff`` is usually 4 * embed_dim.

    Shape:
        Input: (..., embed_dim). Output: same shape.
    """

    def __init__(self, embed_dim: int, d_ff: int, dropout: float = 0.0, activation: str = "relu",
                 bias: bool = True):
        super().__init__()
        embed_dim, d_ff = check_positive_int("embed_dim", embed_dim), check_positive_int("d_ff", d_ff)
        dropout = check_probability("dropout", dropout)
        check_choice("activation", activation, ACTIVATIONS)
        check_flag("bias", bias)
        self.activation = activation
        self.linear1 = nn.Linear(embed_dim, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, embed_dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def _check_forward(self, x: torch.Tensor) -> None:
        d = self.linear1.in_features
        if x.dim() == 0 or x.shape[-1] != d:
            raise ValueError(f"x must have shape (..., {d}), got {tuple(x.shape)}")
        check_same_dtype("x", x, self.linear1.weight.dtype)

    @checked(_check_forward, x=partial(check_float_tensor, nonempty=False))
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = ACTIVATIONS[self.activation](self.linear1(x))  # (..., d_ff)
        return self.linear2(self.dropout(h))  # (..., embed_dim)


# ---------------------------------------------------------------------------------------------
# 3. Pre-LN encoder and decoder layers.
# ---------------------------------------------------------------------------------------------


def _check_layer_args(embed_dim, num_heads, d_ff, dropout, activation, eps, bias, fast,
                      norm_first=True) -> None:
    """The constructor arguments of the encoder and decoder layers, named as the layers name them."""
    embed_dim = check_positive_int("embed_dim", embed_dim)
    num_heads = check_positive_int("num_heads", num_heads)
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim must be divisible by num_heads, got embed_dim={embed_dim}, "
                         f"num_heads={num_heads}")
    if d_ff is not None:
        check_positive_int("d_ff", d_ff)
    check_probability("dropout", dropout)
    check_choice("activation", activation, ACTIVATIONS)
    check_number("eps", eps, low=0.0)
    check_flag("bias", bias)
    check_flag("fast", fast)
    check_flag("norm_first", norm_first)


def _torch_activation(m: nn.Module) -> str:
    act = m.activation
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    if act is _gelu_tanh or (isinstance(act, nn.GELU) and act.approximate == "tanh"):
        return "gelu_tanh"
    raise ValueError(f"only relu, gelu and gelu with approximate='tanh' activations can be copied, got {act}")


def _check_torch_layer(m: nn.Module, kind: type) -> None:
    if not isinstance(m, kind):
        raise TypeError(f"m must be an nn.{kind.__name__}, got {type(m).__name__}")
    if not m.self_attn.batch_first:
        raise ValueError(f"m must be built with batch_first=True, got an nn.{kind.__name__} that is not")


def _copy_ff(ff: FeedForward, m: nn.Module) -> None:
    ff.to(m.linear1.weight.device, m.linear1.weight.dtype)  # before copying: float32 would round float64
    ff.linear1.load_state_dict(m.linear1.state_dict())
    ff.linear2.load_state_dict(m.linear2.state_dict())


def _check_residual(sublayer, norm, dropout) -> None:
    for name, f in (("sublayer", sublayer), ("norm", norm), ("dropout", dropout)):
        if not callable(f):
            raise TypeError(f"{name} must be callable on (B, T, D), got {type(f).__name__}")


@checked(_check_residual, x=partial(check_float_tensor, ndim=3, names="(B, T, D)", nonempty=False),
         norm_first=check_flag)
def residual(x: torch.Tensor, sublayer, norm: nn.Module, dropout: nn.Module,
             norm_first: bool = True) -> torch.Tensor:
    """One sublayer of a transformer layer with its residual connection, eq. (6.6)::

        pre-LN (norm_first=True):   x + Dropout(Sublayer(LayerNorm(x)))
        post-LN (norm_first=False): LayerNorm(x + Dropout(Sublayer(x)))    (eq. (6.7))

    Shape:
        x: (B, T, D); ``sublayer`` maps (B, T, D) to (B, T, D). Output: (B, T, D).
    """
    if norm_first:
        return x + dropout(sublayer(norm(x)))
    return norm(x + dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """One pre-LN transformer encoder layer: two sublayers, each wrapped as in eq. (6.6) of the book::

        x = x + Dropout(SelfAttention(LayerNorm_1(x)))
        x = x + Dropout(FeedForward(LayerNorm_2(x)))

    The residual stream ``x`` is never normalised itself; every sublayer reads a normalised copy and
    adds its result back (Xiong et al., 2020). With ``norm_first=False`` the layer is the post-LN
    original of Vaswani et al. (eq. (6.7) of the book), which normalises after each residual sum::

        x = LayerNorm_1(x + Dropout(SelfAttention(x)))
        x = LayerNorm_2(x + Dropout(FeedForward(x)))
 With ``is_causal=True`` (or a causal ``attn_mask``)
    the same layer is the block of a decoder-only (GPT-style) model.

    Args:
        embed_dim: model width; num_heads must divide it.
        num_heads: number of attention heads.
        d_ff: hidden width of the feed-forward network (default 4 * embed_dim).
        dropout: dropout on the attention weights, inside the feed-forward net and on each sublayer
            output, as in ``nn.TransformerEncoderLayer``.
        activation: ``"relu"`` (the original), ``"gelu"`` or ``"gelu_tanh"`` (GPT-2's tanh approximation).
        fast: run attention and the LayerNorms on PyTorch's fused kernels (see
            :class:`seqbook.attention.MultiHeadAttention` and :class:`LayerNorm`); the readable
            attention runs when weights are asked for.
        norm_first: pre-LN (True, the default) or post-LN (False), as in ``nn.TransformerEncoderLayer``.

    Shape:
        x: (B, T, embed_dim); key_padding_mask: (B, T), bool, True at padding; attn_mask: (T, T),
        True where attention is blocked (or additive floats). Output: (B, T, embed_dim). After a
        call with ``need_weights=True`` the per-head weights (B, num_heads, T, T) are kept in
        ``attn_weights``.
    """

    def __init__(self, embed_dim: int, num_heads: int, d_ff: int | None = None, dropout: float = 0.1,
                 activation: str = "relu", eps: float = 1e-5, bias: bool = True, fast: bool = False,
                 norm_first: bool = True):
        super().__init__()
        _check_layer_args(embed_dim, num_heads, d_ff, dropout, activation, eps, bias, fast, norm_first)
        self.embed_dim, self.norm_first = embed_dim, norm_first
        self.norm1 = LayerNorm(embed_dim, eps, bias, fast)
        self.self_attn = MultiHeadAttention(embed_dim, num_heads, dropout=dropout, bias=bias, fast=fast)
        self.dropout1 = nn.Dropout(dropout)
        self.norm2 = LayerNorm(embed_dim, eps, bias, fast)
        self.ff = FeedForward(embed_dim, d_ff or 4 * embed_dim, dropout, activation, bias)
        self.dropout2 = nn.Dropout(dropout)
        self.attn_weights: torch.Tensor | None = None

    def _check_forward(self, x, key_padding_mask, attn_mask) -> None:
        check_sequence("x", x, self.embed_dim, self.norm1.weight.dtype)
        B, T, _ = x.shape
        if key_padding_mask is not None:
            check_padding_mask("key_padding_mask", key_padding_mask, B, T)
        if attn_mask is not None:
            check_attn_mask("attn_mask", attn_mask, B, self.self_attn.num_heads, T, T)

    @checked(_check_forward, is_causal=check_flag, need_weights=check_flag)
    def forward(
        self,
        x: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> torch.Tensor:
        def attend(h):  # self-attention: (B, T, D) -> (B, T, D)
            a, w = self.self_attn(h, h, h, key_padding_mask, attn_mask, need_weights,
                                  is_causal, average_attn_weights=False)
            self.attn_weights = None if w is None else w.detach()  # (B, H, T, T)
            return a

        x = residual(x, attend, self.norm1, self.dropout1, self.norm_first)
        return residual(x, self.ff, self.norm2, self.dropout2, self.norm_first)  # (B, T, D)

    @classmethod
    def from_torch(cls, m: nn.TransformerEncoderLayer, fast: bool = False) -> EncoderLayer:
        """A copy of ``nn.TransformerEncoderLayer(..., batch_first=True)``, pre-LN or post-LN as ``m`` is."""
        _check_torch_layer(m, nn.TransformerEncoderLayer)
        embed_dim = m.self_attn.embed_dim
        ours = cls(embed_dim, m.self_attn.num_heads, m.linear1.out_features, m.dropout.p,
                   _torch_activation(m), m.norm1.eps, m.linear1.bias is not None, fast, m.norm_first)
        ours.self_attn = MultiHeadAttention.from_torch(m.self_attn, fast=fast)
        ours.norm1, ours.norm2 = (LayerNorm.from_torch(n, fast) for n in (m.norm1, m.norm2))
        _copy_ff(ours.ff, m)
        return ours.to(m.linear1.weight.device, m.linear1.weight.dtype)


class DecoderLayer(nn.Module):
    """One pre-LN transformer decoder layer: three sublayers wrapped as in eq. (6.6) of the book::

        x = x + Dropout(MaskedSelfAttention(LayerNorm_1(x)))
        x = x + Dropout(CrossAttention(LayerNorm_2(x), memory))
        x = x + Dropout(FeedForward(LayerNorm_3(x)))

    The cross-attention takes its queries from the decoder and its keys and values from the
    encoder output ``memory`` (figure 1 of Vaswani et al., 2017). Arguments as for :class:`EncoderLayer`;
    with ``norm_first=False`` each sublayer is wrapped post-LN, ``x = LayerNorm_i(x + Dropout(Sublayer(x)))``.

    Shape:
        x: (B, T, embed_dim); memory: (B, S, embed_dim); tgt_mask: (T, T), True = blocked;
        tgt_key_padding_mask: (B, T); memory_key_padding_mask: (B, S), True at padding.
        Output: (B, T, embed_dim). With ``need_weights=True`` the per-head weights are kept in
        ``self_attn_weights`` (B, H, T, T) and ``cross_attn_weights`` (B, H, T, S).
    """

    def __init__(self, embed_dim: int, num_heads: int, d_ff: int | None = None, dropout: float = 0.1,
                 activation: str = "relu", eps: float = 1e-5, bias: bool = True, fast: bool = False,
                 norm_first: bool = True):
        super().__init__()
        _check_layer_args(embed_dim, num_heads, d_ff, dropout, activation, eps, bias, fast, norm_first)
        self.embed_dim, self.norm_first = embed_dim, norm_first
        self.norm1 = LayerNorm(embed_dim, eps, bias, fast)
        self.self_attn = MultiHeadAttention(embed_dim, num_heads, dropout=dropout, bias=bias, fast=fast)
        self.dropout1 = nn.Dropout(dropout)
        self.norm2 = LayerNorm(embed_dim, eps, bias, fast)
        self.cross_attn = MultiHeadAttention(embed_dim, num_heads, dropout=dropout, bias=bias, fast=fast)
        self.dropout2 = nn.Dropout(dropout)
        self.norm3 = LayerNorm(embed_dim, eps, bias, fast)
        self.ff = FeedForward(embed_dim, d_ff or 4 * embed_dim, dropout, activation, bias)
        self.dropout3 = nn.Dropout(dropout)
        self.self_attn_weights: torch.Tensor | None = None
        self.cross_attn_weights: torch.Tensor | None = None

    def _check_forward(self, x, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask,
                       memory_mask) -> None:
        check_sequence("x", x, self.embed_dim, self.norm1.weight.dtype)
        check_sequence("memory", memory, self.embed_dim, self.norm1.weight.dtype)
        if memory.shape[0] != x.shape[0]:
            raise ValueError(
                f"memory must have shape ({x.shape[0]}, S, {self.embed_dim}), got {tuple(memory.shape)}"
            )
        (B, T, _), S, H = x.shape, memory.shape[1], self.self_attn.num_heads
        for name, mask, keys in (("tgt_key_padding_mask", tgt_key_padding_mask, T),
                                 ("memory_key_padding_mask", memory_key_padding_mask, S)):
            if mask is not None:
                check_padding_mask(name, mask, B, keys)
        for name, mask, keys in (("tgt_mask", tgt_mask, T), ("memory_mask", memory_mask, S)):
            if mask is not None:
                check_attn_mask(name, mask, B, H, T, keys)

    @checked(_check_forward, tgt_is_causal=check_flag, need_weights=check_flag)
    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        tgt_is_causal: bool = False,
        need_weights: bool = False,
    ) -> torch.Tensor:
        def self_attend(h):  # over the target prefix: (B, T, D) -> (B, T, D)
            a, w = self.self_attn(h, h, h, tgt_key_padding_mask, tgt_mask, need_weights,
                                  tgt_is_causal, average_attn_weights=False)
            self.self_attn_weights = None if w is None else w.detach()  # (B, H, T, T)
            return a

        def cross_attend(h):  # over the encoder's output: (B, T, D) -> (B, T, D)
            a, w = self.cross_attn(h, memory, memory, memory_key_padding_mask, memory_mask,
                                   need_weights, average_attn_weights=False)
            self.cross_attn_weights = None if w is None else w.detach()  # (B, H, T, S)
            return a

        x = residual(x, self_attend, self.norm1, self.dropout1, self.norm_first)
        x = residual(x, cross_attend, self.norm2, self.dropout2, self.norm_first)
        return residual(x, self.ff, self.norm3, self.dropout3, self.norm_first)  # (B, T, D)

    @classmethod
    def from_torch(cls, m: nn.TransformerDecoderLayer, fast: bool = False) -> DecoderLayer:
        """A copy of ``nn.TransformerDecoderLayer(..., batch_first=True)``, pre-LN or post-LN as ``m`` is."""
        _check_torch_layer(m, nn.TransformerDecoderLayer)
        ours = cls(m.self_attn.embed_dim, m.self_attn.num_heads, m.linear1.out_features, m.dropout.p,
                   _torch_activation(m), m.norm1.eps, m.linear1.bias is not None, fast, m.norm_first)
        ours.self_attn = MultiHeadAttention.from_torch(m.self_attn, fast=fast)
        ours.cross_attn = MultiHeadAttention.from_torch(m.multihead_attn, fast=fast)
        norms = (m.norm1, m.norm2, m.norm3)
        ours.norm1, ours.norm2, ours.norm3 = (LayerNorm.from_torch(n, fast) for n in norms)
        _copy_ff(ours.ff, m)
        return ours.to(m.linear1.weight.device, m.linear1.weight.dtype)


# ---------------------------------------------------------------------------------------------
# 4. The encoder-decoder transformer.
# ---------------------------------------------------------------------------------------------


class Seq2SeqTransformer(nn.Module):
    """The encoder-decoder transformer of Vaswani et al. (2017) (their figure 1), in pre-LN form.

    Source and target tokens are embedded, scaled by sqrt(embed_dim), and added to the sinusoidal
    :class:`PositionalEncoding`. The encoder stack attends over the source, ignoring padding (the
    source ``key_padding_mask`` is ``src == pad_id``); the decoder stack attends causally over the
    target prefix, ignoring target padding, and, through cross-attention, over the encoder output
    (source padding masked again). A final LayerNorm closes each stack, and a linear layer
    maps decoder states to target-vocabulary logits. ``norm_first=False`` builds the post-LN layers
    of the paper (the final LayerNorms stay, as in ``nn.Transformer``). :meth:`from_torch` copies an
    ``nn.Transformer`` with its embeddings and output layer.

    Training uses teacher forcing: ``forward(src, tgt_in)`` with ``tgt_in = <sos> y_1 .. y_{T-1}``
    predicts ``y_1 .. y_T`` at once. For decoding it has the two methods of the decoding protocol of
    :mod:`seqbook.decoding`, as the recurrent :class:`seqbook.seq2seq.Seq2Seq` does, so that
    :func:`~seqbook.decoding.greedy_decode`, :func:`~seqbook.decoding.beam_search` and
    :func:`~seqbook.decoding.translate` work for both: :meth:`encode` runs the encoder once, and
    :meth:`decode_step` predicts the next token. Its state is the target prefix written so far; each
    step reruns the decoder over the whole prefix (no cache of keys and values: simple, and fast
    enough for short outputs).

    Shape:
        src: (B, S) ids; tgt: (B, T) ids. Output of ``forward``: logits (B, T, tgt_vocab_size).
        decode_step: prev_tokens (B,), state (B, t) or None -> logits (B, tgt_vocab_size), state (B, t + 1).
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, embed_dim: int = 128, num_heads: int = 4,
                 num_encoder_layers: int = 2, num_decoder_layers: int = 2, d_ff: int | None = None,
                 dropout: float = 0.1, max_len: int = 256, pad_id: int = 0, activation: str = "relu",
                 fast: bool = False, norm_first: bool = True):
        super().__init__()
        src_vocab_size = check_positive_int("src_vocab_size", src_vocab_size)
        tgt_vocab_size = check_positive_int("tgt_vocab_size", tgt_vocab_size)
        check_positive_int("num_encoder_layers", num_encoder_layers)
        check_positive_int("num_decoder_layers", num_decoder_layers)
        _check_layer_args(embed_dim, num_heads, d_ff, dropout, activation, 1e-5, True, fast, norm_first)
        pad_id = check_int("pad_id", pad_id, minimum=0, maximum=min(src_vocab_size, tgt_vocab_size) - 1)
        self.embed_dim, self.pad_id = embed_dim, pad_id
        self.src_embed = nn.Embedding(src_vocab_size, embed_dim, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, embed_dim, padding_idx=pad_id)
        self.pos = PositionalEncoding(embed_dim, max_len, dropout)
        layer_args = (embed_dim, num_heads, d_ff, dropout, activation)
        self.encoder = nn.ModuleList([EncoderLayer(*layer_args, fast=fast, norm_first=norm_first)
                                      for _ in range(num_encoder_layers)])
        self.decoder = nn.ModuleList([DecoderLayer(*layer_args, fast=fast, norm_first=norm_first)
                                      for _ in range(num_decoder_layers)])
        self.encoder_norm = LayerNorm(embed_dim, fast=fast)
        self.decoder_norm = LayerNorm(embed_dim, fast=fast)
        self.generator = nn.Linear(embed_dim, tgt_vocab_size)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        with torch.no_grad():
            self.src_embed.weight[pad_id].zero_()
            self.tgt_embed.weight[pad_id].zero_()

    @classmethod
    def from_torch(cls, transformer: nn.Transformer, src_embedding: nn.Embedding, tgt_embedding: nn.Embedding,
                   generator: nn.Linear, pad_id: int | None = None, max_len: int = 256,
                   fast: bool = False) -> Seq2SeqTransformer:
        """A copy of ``nn.Transformer(..., batch_first=True)`` (pre-LN or post-LN) with its embeddings and
        output layer: ours computes the same logits as this composition of PyTorch modules::

            pe = positional_encoding(max_len, embed_dim)                     # (max_len, embed_dim)
            x = src_embedding(src) * sqrt(embed_dim) + pe[:S]                # (B, S, embed_dim)
            y = tgt_embedding(tgt) * sqrt(embed_dim) + pe[:T]                # (B, T, embed_dim)
            h = transformer(x, y, src_key_padding_mask=src == pad_id,
                            tgt_mask=nn.Transformer.generate_square_subsequent_mask(T), tgt_is_causal=True,
                            tgt_key_padding_mask=tgt == pad_id, memory_key_padding_mask=src == pad_id)
            logits = generator(h)                                          # (B, T, tgt_vocab_size)

        ``nn.Transformer`` closes its encoder and decoder stacks with a LayerNorm, as ours does
        (``encoder_norm``, ``decoder_norm``). ``pad_id`` defaults to the embeddings' ``padding_idx``.
        The copy has the transformer's dtype, device and train/eval mode; its positional dropout has
        the layers' rate.

        Raises:
            TypeError: an argument is not the module named (``nn.Transformer``, ``nn.Embedding``,
                ``nn.Linear``).
            ValueError: ``transformer`` mixes pre-LN and post-LN layers, is sequence-first or has custom
                stacks without the
                final LayerNorm; an embedding or ``generator`` does not fit ``embed_dim``; ``generator``
                and ``tgt_embedding`` disagree on the target vocabulary; the modules' dtypes differ; or
                there is no ``pad_id``.
        """
        if not isinstance(transformer, nn.Transformer):
            raise TypeError(f"transformer must be an nn.Transformer, got {type(transformer).__name__}")
        enc, dec = transformer.encoder, transformer.decoder
        for stack, kinds in ((enc, (nn.TransformerEncoder, nn.TransformerEncoderLayer)),
                             (dec, (nn.TransformerDecoder, nn.TransformerDecoderLayer))):
            if not isinstance(stack, kinds[0]) or not all(isinstance(m, kinds[1]) for m in stack.layers):
                raise ValueError("transformer must have PyTorch's own encoder and decoder stacks, "
                                 f"got a custom {type(stack).__name__}")
            if not isinstance(stack.norm, nn.LayerNorm):
                raise ValueError(f"transformer's {type(stack).__name__} must end with an nn.LayerNorm "
                                 f"(as nn.Transformer builds it), got {stack.norm}")
            if not all(m.self_attn.batch_first for m in stack.layers):
                raise ValueError("transformer must be built with batch_first=True, got a sequence-first one")
        D, first = transformer.d_model, enc.layers[0]
        if len({m.norm_first for m in (*enc.layers, *dec.layers)}) != 1:
            raise ValueError("transformer's layers must be all pre-LN or all post-LN (one norm_first), "
                             "got both")
        dtype = first.linear1.weight.dtype
        for name, m, kind in (("src_embedding", src_embedding, nn.Embedding),
                              ("tgt_embedding", tgt_embedding, nn.Embedding),
                              ("generator", generator, nn.Linear)):
            if not isinstance(m, kind):
                raise TypeError(f"{name} must be an nn.{kind.__name__}, got {type(m).__name__}")
            if m.weight.dtype != dtype:
                raise ValueError(f"{name} must have the transformer's dtype {dtype}, got {m.weight.dtype}")
        for name, emb in (("src_embedding", src_embedding), ("tgt_embedding", tgt_embedding)):
            if emb.embedding_dim != D or emb.max_norm is not None:
                raise ValueError(f"{name} must be an nn.Embedding(num_embeddings, {D}) without max_norm, "
                                 f"got {emb}")
        if generator.in_features != D or generator.out_features != tgt_embedding.num_embeddings:
            raise ValueError(f"generator must be an nn.Linear({D}, {tgt_embedding.num_embeddings}) "
                             f"(embed_dim to the target vocabulary of tgt_embedding), got {generator}")
        if pad_id is None:
            given = {e.padding_idx for e in (src_embedding, tgt_embedding) if e.padding_idx is not None}
            if len(given) != 1:
                raise ValueError("pad_id must be given when src_embedding and tgt_embedding do not name one "
                                 f"padding_idx, got padding_idx {src_embedding.padding_idx} and "
                                 f"{tgt_embedding.padding_idx}")
            pad_id = given.pop()
        check_flag("fast", fast)
        ours = cls(src_embedding.num_embeddings, tgt_embedding.num_embeddings, D, first.self_attn.num_heads,
                   len(enc.layers), len(dec.layers), first.linear1.out_features, first.dropout.p, max_len,
                   pad_id, _torch_activation(first), fast, first.norm_first)
        ours.to(first.linear1.weight.device, dtype)  # before copying: a float32 copy would round float64
        ours.encoder = nn.ModuleList([EncoderLayer.from_torch(m, fast) for m in enc.layers])
        ours.decoder = nn.ModuleList([DecoderLayer.from_torch(m, fast) for m in dec.layers])
        ours.encoder_norm = LayerNorm.from_torch(enc.norm, fast)
        ours.decoder_norm = LayerNorm.from_torch(dec.norm, fast)
        ours.generator = nn.Linear(D, generator.out_features, bias=generator.bias is not None,
                                   device=generator.weight.device, dtype=dtype)
        with torch.no_grad():
            ours.src_embed.weight.copy_(src_embedding.weight)
            ours.tgt_embed.weight.copy_(tgt_embedding.weight)
            ours.generator.load_state_dict(generator.state_dict())
        return ours.train(transformer.training)

    def _embed(self, embed: nn.Embedding, ids: torch.Tensor, name: str) -> torch.Tensor:
        return self.pos(embed(ids) * math.sqrt(self.embed_dim))  # (B, T, D)

    def _check_encode(self, src, src_lengths) -> None:
        check_token_ids("src", src, self.src_embed.num_embeddings, self.pos.pe.shape[0])
        if src_lengths is not None:
            check_ids("src_lengths", src_lengths, shape=(src.shape[0],))
            check_lengths("src_lengths", src_lengths, src.shape[1], of="src")

    @checked(_check_encode, need_weights=check_flag)
    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor | None = None,
               need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the encoder (the first method of the decoding protocol of :mod:`seqbook.decoding`).

        ``src_lengths`` is not needed, since padding is found from ``pad_id``; it is accepted (and
        its shape checked) so that this model is called as :meth:`seqbook.seq2seq.Seq2Seq.encode` is.

        Shape:
            src: (B, S) ids, src_lengths: (B,) or None -> ``(memory, src_pad)``: memory
            (B, S, embed_dim) and the source padding mask (B, S), True at padding
        """
        src_pad = src == self.pad_id  # (B, S), True at padding
        x = self._embed(self.src_embed, src, "src")
        for layer in self.encoder:
            x = layer(x, key_padding_mask=src_pad, need_weights=need_weights)
        return self.encoder_norm(x), src_pad

    def _check_decode(self, tgt, memory, src_pad) -> None:
        check_token_ids("tgt", tgt, self.tgt_embed.num_embeddings, self.pos.pe.shape[0])
        check_sequence("memory", memory, self.embed_dim, self.generator.weight.dtype)
        B, S = memory.shape[:2]
        if tgt.shape[0] != B:
            raise ValueError(f"tgt must have shape ({B}, T) to match memory, got {tuple(tgt.shape)}")
        check_padding_mask("src_pad", src_pad, B, S)

    @checked(_check_decode, need_weights=check_flag)
    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_pad: torch.Tensor,
               need_weights: bool = False) -> torch.Tensor:
        """Run the decoder over the target prefix ``tgt`` (B, T). Returns logits (B, T, tgt_vocab_size)."""
        # The causal mask already hides right padding from every real token; masking it as well
        # changes only the outputs at padded positions (never used), which then match nn.Transformer's.
        tgt_pad = tgt == self.pad_id  # (B, T), True at padding
        y = self._embed(self.tgt_embed, tgt, "tgt")
        for layer in self.decoder:
            y = layer(y, memory, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad,
                      tgt_is_causal=True, need_weights=need_weights)
        return self.generator(self.decoder_norm(y))

    def _check_forward(self, src, tgt) -> None:
        check_token_ids("src", src, self.src_embed.num_embeddings, self.pos.pe.shape[0])
        check_token_ids("tgt", tgt, self.tgt_embed.num_embeddings, self.pos.pe.shape[0])
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(
                f"src and tgt must share the batch size, got {tuple(src.shape)} and {tuple(tgt.shape)}"
            )

    @checked(_check_forward, need_weights=check_flag)
    def forward(self, src: torch.Tensor, tgt: torch.Tensor, need_weights: bool = False) -> torch.Tensor:
        memory, src_pad = self.encode(src, None, need_weights)  # (B, S, D)
        return self.decode(tgt, memory, src_pad, need_weights)  # (B, T, V)

    def _check_loss(self, src, src_lengths, tgt) -> None:
        if not isinstance(tgt, torch.Tensor):
            raise TypeError(f"tgt must be an integer tensor of shape (B, T>=2), got {type(tgt).__name__}")
        if tgt.dim() != 2 or tgt.shape[1] < 2:
            raise ValueError(f"tgt must have shape (B, T>=2) (<sos> ... <eos>), got {tuple(tgt.shape)}")
        check_token_ids("tgt", tgt, self.tgt_embed.num_embeddings, self.pos.pe.shape[0])
        self._check_encode(src, src_lengths)  # src_lengths too, though padding is found from pad_id
        if has_values(tgt) and not bool((tgt[:, 1:] != self.pad_id).any()):
            raise ValueError(f"tgt must hold at least one target that is not padding (pad_id={self.pad_id}): "
                             f"the mean loss over no token is undefined")

    @checked(_check_loss, label_smoothing=partial(check_probability, allow_one=True))
    def loss(self, src: torch.Tensor, src_lengths: torch.Tensor | None, tgt: torch.Tensor,
             label_smoothing: float = 0.0) -> torch.Tensor:
        """Teacher-forced mean cross-entropy of ``tgt[:, 1:]`` given ``tgt[:, :-1]``, padding ignored.

        ``tgt`` is ``<sos> y_1 .. y_T <eos>``, padded. The signature matches
        :meth:`seqbook.seq2seq.Seq2Seq.loss` (``src_lengths`` is not needed: padding is found from
        ``pad_id``), so :func:`seqbook.train.fit_seq2seq` trains this model too.
        """
        logits = self(src, tgt[:, :-1])  # (B, T-1, V)
        return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=self.pad_id,
                               label_smoothing=float(label_smoothing))

    def _check_decode_step(self, prev_tokens, state, memory) -> None:
        if not isinstance(memory, tuple) or len(memory) != 2:
            error = ValueError if isinstance(memory, tuple) else TypeError
            got = f"{len(memory)} items" if error is ValueError else type(memory).__name__
            raise error(f"memory must be the pair (memory, src_pad) returned by encode, got {got}")
        states, src_pad = memory
        check_sequence("memory[0]", states, self.embed_dim, self.generator.weight.dtype)
        check_padding_mask("memory[1]", src_pad, *states.shape[:2])
        B, V = states.shape[0], self.tgt_embed.num_embeddings
        check_ids("prev_tokens", prev_tokens, V, shape=(B,))
        if state is not None:
            check_ids("state", state, V, shape=(B, None), names=f"({B}, t)")

    @checked(_check_decode_step, need_weights=check_flag)
    def decode_step(self, prev_tokens: torch.Tensor, state: torch.Tensor | None,
                    memory: tuple[torch.Tensor, torch.Tensor], need_weights: bool = False):
        """One step of the decoding protocol of :mod:`seqbook.decoding`: append ``prev_tokens`` to the
        target prefix ``state`` and predict the token after it.

        The state is the prefix itself, ``<sos> y_1 .. y_{i-1}`` (None before the first step, whose
        ``prev_tokens`` is ``<sos>``). There is no cache: the decoder reruns over the whole prefix
        at every step, so writing T tokens costs T decoder passes over up to T positions. With
        ``need_weights`` the step also returns the cross-attention of the last decoder layer from
        the new position, averaged over its heads (as ``nn.MultiheadAttention`` reports weights).

        Shape:
            prev_tokens: (B,) ids; state: (B, t) ids or None; memory: ``encode``'s pair
            (B, S, embed_dim) and (B, S) -> logits (B, tgt_vocab_size), state (B, t + 1)
            [, weights (B, S)]

        Raises:
            TypeError: ``memory`` is not the pair returned by :meth:`encode`.
            ValueError: ``prev_tokens`` or ``state`` have the wrong shape or ids outside the target
                vocabulary, or the prefix would grow past the model's ``max_len`` positions.
        """
        states, src_pad = memory
        prefix = prev_tokens[:, None]                                           # (B, 1)
        if state is not None:
            prefix = torch.cat([state, prefix], dim=1)                          # (B, t + 1)
        longest = self.pos.pe.shape[0]  # a limit of the model, met while decoding: checked here
        if prefix.shape[1] > longest:
            raise ValueError(f"the target prefix would grow to {prefix.shape[1]} positions, past the "
                             f"model's max_len={longest}: decode at most {longest} tokens "
                             f"(max_len <= {longest})")
        logits = self.decode(prefix, states, src_pad, need_weights)[:, -1]      # (B, V)
        if not need_weights:
            return logits, prefix
        weights = self.decoder[-1].cross_attn_weights[:, :, -1].mean(1)        # (B, H, S) -> (B, S)
        return logits, prefix, weights
