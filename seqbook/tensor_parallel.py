r"""Tensor parallelism (Shoeybi et al., 2019): the matrices of a GPT block split over N processes.

Megatron-LM's rule for the two-layer MLP of a block, :math:`Y = \mathrm{act}(X W_1) W_2`: cut
:math:`W_1` by its columns and :math:`W_2` by its rows, ``d_ff / N`` hidden units per rank. Rank r
computes :math:`\mathrm{act}(X W_1^{(r)})` on its own, because the activation acts on each hidden
unit alone, and :math:`\mathrm{act}(X W_1^{(r)}) W_2^{(r)}` is its share of a sum over the ranks:

.. math::
    Y = \sum_{r=0}^{N-1} \mathrm{act}(X W_1^{(r)}) \, W_2^{(r)} .

One all-reduce adds the shares. Attention splits the same way by heads: the query, key and value
projections by their columns (rank r computes ``num_heads / N`` whole heads), the output projection
by its rows. Two operators carry the communication:

* ``f``, :class:`CopyToRanks`: the identity in the forward pass; in the backward pass, the sum of
  the input's gradient over the ranks (every rank's share of the layer reads the same input);
* ``g``, :class:`SumOverRanks`: the all-reduce in the forward pass; the identity in the backward.

So a block costs two all-reduces of a (B, T, embed_dim) tensor in the forward pass and two in the
backward pass, and each rank keeps ``1/N`` of the block's matrices. LayerNorms, the embeddings and
the head stay whole on every rank, and their gradients come out equal on every rank without
communication. Every rank reads the same batch. Dropout is refused: it would need the random
states that Megatron-LM keeps in step across the ranks (the same masks on the whole tensors,
different ones on the shares).

Without a process group (or with one of size 1) the layers run in one process, and equal the
layers they were cut from.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .attention import fused_attention
from .checks import check_int, check_rotary, check_sequence, checked
from .gpt import GPT, CausalSelfAttention, GPTBlock
from .rope import apply_rope
from .transformer import ACTIVATIONS, FeedForward

__all__ = [
    "all_reduce",
    "CopyToRanks",
    "SumOverRanks",
    "column_shard",
    "row_shard",
    "add_bias",
    "TensorParallelFeedForward",
    "TensorParallelAttention",
    "TensorParallelGPTBlock",
    "parallelize_gpt",
]


def all_reduce(x: torch.Tensor, group=None) -> torch.Tensor:
    """The sum of ``x`` over the ranks of ``group`` (None: the default group), as a new tensor.

    In one process without a process group, or in a group of one, it is a copy of ``x``.

    Shape:
        x: any. Output: the same.
    """
    x = x.clone()  # the sum is a new tensor; x is left alone
    if dist.is_initialized() and dist.get_world_size(group) > 1:  # else: one process
        dist.all_reduce(x, group=group)  # in place, on the copy
    return x


class CopyToRanks(torch.autograd.Function):
    """Megatron-LM's ``f``: the identity forward; the gradient summed over the ranks backward.

    Call it as ``CopyToRanks.apply(x, group)`` where a layer's shares start to read ``x``.

    Shape:
        x: any shape -> the same.
    """

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x  # the identity

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad, ctx.group), None  # the shares' gradients for x, added


class SumOverRanks(torch.autograd.Function):
    """Megatron-LM's ``g``: the shares summed over the ranks forward; the identity backward.

    Call it as ``SumOverRanks.apply(y, group)`` where a layer's shares end.

    Shape:
        y: any shape, the same on every rank -> the same.
    """

    @staticmethod
    def forward(ctx, y, group):
        return all_reduce(y, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None  # the sum is on every rank; so is its gradient


def _world(group, layer: nn.Module, kind: type, **sizes: int) -> tuple[int, int]:
    """(rank, world size) of ``group`` for a layer of ``kind`` whose ``sizes`` split over it."""
    if not isinstance(layer, kind):
        raise TypeError(f"layer must be a {kind.__name__}, got {type(layer).__name__}")
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"group must be a torch.distributed ProcessGroup or None, got {type(group).__name__}")
    if dist.is_initialized():
        rank, size = dist.get_rank(group), dist.get_world_size(group)
    elif group is None:
        rank, size = 0, 1  # one process, no group
    else:
        raise ValueError("group was given, but torch.distributed is not initialised")
    for name, value in sizes.items():
        if value % size:
            raise ValueError(f"layer's {name} must be divisible by the {size} ranks of the group, "
                             f"got {value}")
    drops = {m.p for m in layer.modules() if isinstance(m, nn.Dropout)}
    drops |= {m.dropout for m in layer.modules() if isinstance(m, CausalSelfAttention)}
    if any(p > 0 for p in drops):
        raise ValueError(f"layer must have no dropout (tensor-parallel layers keep no shared random state), "
                         f"got dropout {max(drops)}")
    return rank, size


def _block(linear: nn.Linear, features: str, rank: int, world_size: int) -> slice:
    """Rank ``rank``'s block of ``linear``'s ``features`` ("out_features" or "in_features")."""
    world_size = check_int("world_size", world_size, 1)
    rank = check_int("rank", rank, 0, world_size - 1)
    if not isinstance(linear, nn.Linear) or getattr(linear, features) % world_size:
        raise ValueError(f"linear must be an nn.Linear whose {features} divide by world_size={world_size}, "
                         f"got {linear!r}")
    n = getattr(linear, features) // world_size
    return slice(rank * n, (rank + 1) * n)


def column_shard(linear: nn.Linear, rank: int, world_size: int) -> nn.Linear:
    """Rank ``rank``'s share of ``linear``'s outputs: n = out_features / world_size of them.

    Rows ``rank * n`` to ``(rank + 1) * n - 1`` of the weight (out, in) and of the bias; a copy.
    """
    rows = _block(linear, "out_features", rank, world_size)
    w, b = linear.weight, linear.bias
    shard = nn.Linear(w.shape[1], rows.stop - rows.start, bias=b is not None, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        shard.weight.copy_(w[rows])  # (n, in)
        if b is not None:
            shard.bias.copy_(b[rows])
    return shard


def row_shard(linear: nn.Linear, rank: int, world_size: int) -> nn.Linear:
    """Rank ``rank``'s share of ``linear``'s inputs: n = in_features / world_size of them.

    Columns ``rank * n`` to ``(rank + 1) * n - 1`` of the weight (out, in), and the whole bias; a
    copy. The bias belongs after the sum over the ranks: add it there, once (the layers below call
    ``F.linear(x, shard.weight)`` and add ``shard.bias`` after the sum).
    """
    cols = _block(linear, "in_features", rank, world_size)
    w, b = linear.weight, linear.bias
    shard = nn.Linear(cols.stop - cols.start, w.shape[0], bias=b is not None, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        shard.weight.copy_(w[:, cols])  # (out, n)
        if b is not None:
            shard.bias.copy_(b)  # whole
    return shard


def add_bias(y: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
    """``y + linear.bias``, or ``y`` when ``linear`` has no bias."""
    return y if linear.bias is None else y + linear.bias


def _check_input(self, x, rotary=None) -> None:
    """x (B, T, embed_dim) of the layer's dtype; RoPE's angles for T positions of head_dim."""
    check_sequence("x", x, self.embed_dim, self.dtype)
    if rotary is not None:
        check_rotary("rotary", rotary, x.shape[1], self.head_dim)


class TensorParallelFeedForward(nn.Module):
    r"""This rank's share of a :class:`~seqbook.transformer.FeedForward`: ``d_ff / N`` hidden units.

    .. math::
        Y = g\big(\mathrm{act}(f(X) W_1^{(r)} + b_1^{(r)}) \, W_2^{(r)}\big) + b_2

    with :math:`W_1^{(r)}` this rank's columns of :math:`W_1` (``linear1``, a
    :func:`column_shard`), :math:`W_2^{(r)}` its rows of :math:`W_2` (``linear2``, a
    :func:`row_shard`, whose bias :math:`b_2` is whole and added once, after the sum).

    Args:
        layer: the whole FeedForward (no dropout); its weights are copied, not shared.
        group: the process group (None: the default group, or one process without a group).

    Shape:
        x: (B, T, embed_dim). Output: (B, T, embed_dim), the same on every rank.
    """

    def __init__(self, layer: FeedForward, group=None):
        super().__init__()
        d_ff = getattr(getattr(layer, "linear1", None), "out_features", 0)
        rank, size = _world(group, layer, FeedForward, d_ff=d_ff)
        self.group, self.activation = group, layer.activation
        self.embed_dim = layer.linear1.in_features
        self.linear1 = column_shard(layer.linear1, rank, size)  # (d_ff / N, D)
        self.linear2 = row_shard(layer.linear2, rank, size)  # (D, d_ff / N), b_2 whole

    @property
    def dtype(self) -> torch.dtype:
        return self.linear1.weight.dtype

    @checked(_check_input)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = CopyToRanks.apply(x, self.group)  # f
        h = ACTIVATIONS[self.activation](self.linear1(x))  # (B, T, d_ff / N)
        y = F.linear(h, self.linear2.weight)  # (B, T, D): this rank's term of the sum
        y = SumOverRanks.apply(y, self.group)  # g: the sum of the terms
        return add_bias(y, self.linear2)  # b_2, once


class TensorParallelAttention(nn.Module):
    r"""This rank's ``num_heads / N`` heads of a :class:`~seqbook.gpt.CausalSelfAttention`.

    .. math::
        Y = g\Big(\sum_{h \in \text{rank } r} \mathrm{head}_h\big(f(X)\big) \, W^O_h\Big) + b^O

    The query, key and value projections are :func:`column_shard` s (rank r's heads are heads
    ``r H / N`` to ``(r + 1) H / N - 1``), the output projection a :func:`row_shard`, and the
    heads are computed by :func:`~seqbook.attention.fused_attention` (PyTorch's
    ``F.scaled_dot_product_attention``), causal. ``rotary`` turns queries and
    keys by RoPE as in the whole layer. No KV cache.

    Args:
        layer: the whole CausalSelfAttention (no dropout); its weights are copied.
        group: the process group (None: the default group, or one process without a group).

    Shape:
        x: (B, T, embed_dim); rotary: each (T, head_dim). Output: (B, T, embed_dim), the same on
        every rank.
    """

    def __init__(self, layer: CausalSelfAttention, group=None):
        super().__init__()
        rank, size = _world(group, layer, CausalSelfAttention, num_heads=getattr(layer, "num_heads", 0))
        self.group = group
        self.embed_dim, self.head_dim = layer.embed_dim, layer.head_dim
        self.num_heads = layer.num_heads // size  # this rank's heads
        self.q_proj = column_shard(layer.q_proj, rank, size)  # (H / N * Dh, D)
        self.k_proj = column_shard(layer.k_proj, rank, size)
        self.v_proj = column_shard(layer.v_proj, rank, size)
        self.out_proj = row_shard(layer.out_proj, rank, size)  # (D, H / N * Dh), b^O whole

    @property
    def dtype(self) -> torch.dtype:
        return self.q_proj.weight.dtype

    @checked(_check_input)
    def forward(self, x: torch.Tensor, rotary=None) -> torch.Tensor:
        B, T, _ = x.shape
        Hr, Dh = self.num_heads, self.head_dim  # Hr = H / N: this rank's heads
        x = CopyToRanks.apply(x, self.group)  # f
        q = self.q_proj(x).view(B, T, Hr, Dh).transpose(1, 2)  # (B, Hr, T, Dh)
        k = self.k_proj(x).view(B, T, Hr, Dh).transpose(1, 2)  # (B, Hr, T, Dh)
        v = self.v_proj(x).view(B, T, Hr, Dh).transpose(1, 2)  # (B, Hr, T, Dh)
        if rotary is not None:  # RoPE, as in the whole layer
            q, k = apply_rope(q, *rotary), apply_rope(k, *rotary)
        out = fused_attention(q, k, v, is_causal=True)  # (B, Hr, T, Dh)
        out = out.transpose(1, 2).reshape(B, T, Hr * Dh)  # this rank's heads side by side
        out = F.linear(out, self.out_proj.weight)  # this rank's term of the sum
        out = SumOverRanks.apply(out, self.group)  # g: (B, T, D)
        return add_bias(out, self.out_proj)  # b^O, once


class TensorParallelGPTBlock(nn.Module):
    """This rank's share of a :class:`~seqbook.gpt.GPTBlock`: the pre-LN block of eq. (6.6) with
    a :class:`TensorParallelAttention` and a :class:`TensorParallelFeedForward`; both LayerNorms
    are whole copies on every rank::

        x = x + TensorParallelAttention(LayerNorm_1(x))
        x = x + TensorParallelFeedForward(LayerNorm_2(x))

    It takes the arguments a :class:`~seqbook.gpt.GPT` passes to its blocks; a KV cache and the
    attention weights are refused (tensor parallelism here is for training).

    Shape:
        x: (B, T, embed_dim); rotary: each (T, head_dim). Output: (B, T, embed_dim).
    """

    def __init__(self, block: GPTBlock, group=None):
        super().__init__()
        _world(group, block, GPTBlock)
        self.norm1 = copy.deepcopy(block.norm1)
        self.self_attn = TensorParallelAttention(block.self_attn, group)
        self.norm2 = copy.deepcopy(block.norm2)
        self.ff = TensorParallelFeedForward(block.ff, group)
        self.embed_dim, self.head_dim = block.embed_dim, block.self_attn.head_dim

    @property
    def dtype(self) -> torch.dtype:
        return self.self_attn.dtype

    @checked(_check_input)
    def forward(self, x: torch.Tensor, rotary=None, cache=None, need_weights: bool = False) -> torch.Tensor:
        if cache is not None or need_weights:  # a GPT's generate(use_cache=True), or its plots
            raise NotImplementedError("a TensorParallelGPTBlock keeps no KV cache and returns no attention "
                                      f"weights, got cache={cache!r}, need_weights={need_weights!r}")
        x = x + self.self_attn(self.norm1(x), rotary)  # (B, T, D)
        return x + self.ff(self.norm2(x))  # (B, T, D)


def parallelize_gpt(model: GPT, group=None) -> GPT:
    """A copy of ``model`` whose blocks are this rank's :class:`TensorParallelGPTBlock` s.

    The embeddings, the last LayerNorm and the head stay whole on every rank. Every rank must
    build it from the same ``model`` (the same weights) and feed it the same batches.

    Raises:
        TypeError: ``model`` is not a GPT, or ``group`` not a process group.
        ValueError: the model has dropout, or its heads or ``d_ff`` do not divide by the ranks.
    """
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a seqbook GPT, got {type(model).__name__}")
    blocks = nn.ModuleList(TensorParallelGPTBlock(b, group) for b in model.blocks)
    return copy.deepcopy(model, {id(model.blocks): blocks})  # the rest copied, the blocks cut
