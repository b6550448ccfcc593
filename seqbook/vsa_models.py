"""The networks of Olin-Ammentorp and Bazhenov (2022), built from the FHRR operations and
layers of :mod:`seqbook.vsa`.

From pixels to symbols (:class:`SymbolProjection`), from symbols to classes (:class:`Codebook`
of class symbols, :func:`codebook_loss`, :func:`similarity_logits`, :func:`similarity_loss`),
and the paper's Fashion-MNIST classifiers (:class:`VSAResNet`, :class:`VSAAttentionClassifier`,
built by name with :func:`build_classifier`; their published accuracies in
:data:`PAPER_ACCURACY`). Molecules as sets of bond symbols are in :mod:`seqbook.molecules`.
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import nn

from .checks import (
    check_bool_mask,
    check_choice,
    check_count,
    check_flag,
    check_float_tensor,
    check_ids,
    check_layer_input,
    check_module_input,
    check_number,
    check_positive_int,
    check_probability,
    check_symbols_and_codebook,
    checked,
    optional,
)
from .vsa import (
    CrossAttentionBlock,
    PhasorLinear,
    ResidualBlock,
    SelfAttentionBlock,
    fhrr_similarity,
    fhrr_wrap,
    random_symbols,
)

# The Fashion-MNIST test accuracies that Olin-Ammentorp and Bazhenov (2022) report for their models.
PAPER_ACCURACY = {"self": 0.886, "cross": 0.855, "resnet": 0.858}

__all__ = [
    "PAPER_ACCURACY", "SymbolProjection", "Codebook", "codebook_loss", "VSAResNet",
    "VSAAttentionClassifier", "similarity_logits", "similarity_loss", "build_classifier",
]


# ---------------------------------------------------------------------------------------------
# From pixels to symbols and from symbols to classes.
# ---------------------------------------------------------------------------------------------


class SymbolProjection(nn.Module):
    """Encode real vectors as symbols: a fixed Gaussian random projection, LayerNorm, scale, wrap,

    ``s = wrap(LayerNorm(x P) / sigma)``,  P ~ N(0, 1) of shape (in_features, embed_dim), not trained.

    With ``sigma = 3`` almost all normalised values already lie in [-1, 1]; the wrap makes sure
    (it does not change the phasor ``exp(i pi s)``). ``sigma`` must be finite and > 0. The forward
    pass checks shapes and dtypes but reads no values: a NaN input gives NaN symbols.

    Shape:
        Input: (..., in_features). Output: (..., embed_dim), angles in [-1, 1).
    """

    @checked(in_features=check_positive_int, embed_dim=check_positive_int,
             sigma=partial(check_number, low=0.0, low_open=True))
    def __init__(self, in_features: int, embed_dim: int, sigma: float = 3.0):
        super().__init__()
        self.in_features, self.sigma = int(in_features), sigma
        self.register_buffer("projection", torch.randn(in_features, embed_dim))
        self.norm = nn.LayerNorm(embed_dim)

    def _check_forward(self, x) -> None:
        check_layer_input("x", x, self.projection, (..., self.in_features))

    @checked(_check_forward)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fhrr_wrap(self.norm(x @ self.projection) / self.sigma)


class Codebook(nn.Module):
    """A fixed random symbol per class; the forward pass returns the similarity to each of them.

    ``sparsity`` in [0, 1): the share of each code's angles set to 0 (the authors' code uses 0.75 for
    its attention classifiers). The codes then agree on those entries, so an output near angle 0
    everywhere starts out similar to every class, and only the other entries tell classes apart.

    Shape:
        Input: (B, embed_dim) (or (embed_dim,) for one symbol).
        Output: (B, num_classes), similarities in [-1, 1].
    """

    @checked(num_classes=check_positive_int, embed_dim=check_positive_int, sparsity=check_probability)
    def __init__(self, num_classes: int, embed_dim: int, sparsity: float = 0.0):
        super().__init__()
        codes = random_symbols(num_classes, embed_dim)
        if sparsity > 0:
            codes = codes * (torch.rand(num_classes, embed_dim) >= sparsity)  # a share `sparsity` set to 0
        self.sparsity = float(sparsity)
        self.register_buffer("codes", codes)

    def _check_forward(self, y) -> None:
        check_layer_input("y", y, self.codes, (..., self.codes.shape[-1]))

    @checked(_check_forward)
    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return fhrr_similarity(y, self.codes, pairwise=True)


def _check_codebook_loss(similarities, labels) -> None:
    b, c = similarities.shape
    check_ids("labels", labels, num_classes=c, shape=(b,), names=f"({b},) (B of similarities {(b, c)})")
    if labels.device != similarities.device:
        raise ValueError(f"labels must be on the device of similarities, {similarities.device}, "
                         f"got {labels.device}")


@checked(_check_codebook_loss, similarities=partial(check_float_tensor, ndim=2, names="(B, C)"))
def codebook_loss(similarities: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The paper's loss: ``mean(1 - sim(output, code of the true class))``, in [0, 2].

    ``labels`` may have any integer dtype; every label must lie in [0, C). The similarities' values
    are not read: a NaN similarity (a diverged model) gives a NaN loss, as torch's losses do.

    Shape:
        similarities (B, C) with B, C >= 1, labels (B,) int -> scalar.
    """
    return (1.0 - similarities.gather(1, labels.long()[:, None]).squeeze(1)).mean()


class VSAResNet(nn.Module):
    """The trainability test of the paper (figures 2 and 3): a whole image as one symbol, then
    ``num_layers`` blocks of two phasor layers (2 * num_layers layers), with or without binding
    skips, read out by similarity to a class codebook.

    ``num_layers=0`` is allowed (projection and codebook only).

    Shape:
        Input: (B, *image_shape), e.g. (B, 28, 28). Output: (B, num_classes) similarities.
    """

    @checked(embed_dim=check_positive_int, num_layers=check_count, skip=check_flag,
             in_features=check_positive_int, num_classes=check_positive_int,
             d_ff=optional(check_positive_int), out_scale=partial(check_number, low=0.0),
             codebook_sparsity=check_probability)
    def __init__(self, embed_dim: int = 1024, num_layers: int = 12, skip: bool = True, in_features: int = 784,
                 num_classes: int = 10, d_ff: int | None = None, out_scale: float = 0.25,
                 codebook_sparsity: float = 0.0):
        super().__init__()
        self.embed = SymbolProjection(in_features, embed_dim)
        self.blocks = nn.Sequential(*[ResidualBlock(embed_dim, d_ff, skip, out_scale)
                                      for _ in range(num_layers)])
        self.codebook = Codebook(num_classes, embed_dim, codebook_sparsity)

    def _check_forward(self, images) -> None:
        n = self.embed.in_features
        shape = f"(B, ...) with {n} values per image"
        check_module_input("images", images, self.embed.projection, shape, 2)
        if math.prod(images.shape[1:]) != n:
            raise ValueError(f"images must have shape {shape}, got {tuple(images.shape)}")

    @checked(_check_forward)
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images.flatten(1))  # (B, D)
        return self.codebook(self.blocks(x))  # (B, C)


class VSAAttentionClassifier(nn.Module):
    """The classifier of the paper (figure 6): a set of input symbols, one self- or cross-attention
    block, a phasor layer that reduces the flattened output to one symbol, and a class codebook.

    Only the input encoding depends on the domain. For images (``cols`` an int) every row becomes a
    symbol through one shared fixed random projection (figure 6a). With ``cols=None`` the input is
    already a padded set of ``rows`` symbols of dimension ``embed_dim``, for example molecules encoded
    by :class:`seqbook.molecules.MoleculeEncoder` (figure 6b), and ``mask`` (B, rows), True at real
    symbols, says which are padding: no query looks at a padding symbol, and self-attention outputs at padding
    positions are set to angle 0 before the reduction, so padding content cannot change the result.

    The inputs carry no position code of their own; the self-attention model still knows their
    order through the final flattening layer (its weights differ per position), while the
    cross-attention block is blind to it: permuting the rows does not change its output.
    ``fast=True`` runs the block's attention on the phasor fast path (same values).

    Shape:
        Input: (B, rows, cols) images, or (B, rows, embed_dim) symbols with an optional bool mask
        (B, rows). Output: ``(similarities, scores)`` of shapes (B, num_classes) and the attention
        scores of the block.
    """

    @checked(kind=partial(check_choice, choices=("self", "cross")), embed_dim=check_positive_int,
             num_queries=check_positive_int,
             rows=check_positive_int, cols=optional(check_positive_int), num_classes=check_positive_int,
             d_ff=optional(check_positive_int), codebook_sparsity=check_probability, fast=check_flag)
    def __init__(self, embed_dim: int = 1024, kind: str = "self", num_queries: int = 32, rows: int = 28,
                 cols: int | None = 28, num_classes: int = 10, d_ff: int | None = None,
                 codebook_sparsity: float = 0.0, fast: bool = False):
        super().__init__()
        self.kind, self.rows, self.embed_dim = kind, int(rows), int(embed_dim)
        self.cols = None if cols is None else int(cols)
        self.embed = SymbolProjection(cols, embed_dim) if cols is not None else None
        if kind == "self":
            self.block = SelfAttentionBlock(embed_dim, d_ff, fast)
            tokens = rows
        else:
            self.block = CrossAttentionBlock(embed_dim, num_queries, d_ff, fast)
            tokens = num_queries
        self.reduce = PhasorLinear(tokens * embed_dim, embed_dim)
        self.codebook = Codebook(num_classes, embed_dim, codebook_sparsity)

    def _check_forward(self, x, mask) -> None:
        last = self.cols if self.cols is not None else self.embed_dim
        check_layer_input("x", x, self.reduce.weight, (None, self.rows, last), f"(B, {self.rows}, {last})")
        if mask is None:
            return
        check_bool_mask("mask", mask, shape=x.shape[:2], names=f"(B, {self.rows}) = {tuple(x.shape[:2])}")
        if mask.device != x.device:
            raise ValueError(f"mask must be on the device of x, {x.device}, got {mask.device}")

    @checked(_check_forward)
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None):
        if self.embed is not None:
            x = self.embed(x)  # (B, rows, cols) images -> (B, rows, D) symbols
        key_mask = None if mask is None else mask[:, None, :]  # (B, 1, T): True at real symbols
        h, scores = self.block(x, key_mask)  # (B, T, D)
        if mask is not None and self.kind == "self":
            h = h.masked_fill(~mask[..., None], 0.0)  # padding positions carry angle 0
        y = self.reduce(h.flatten(1))  # (B, D)
        return self.codebook(y), scores


# ---------------------------------------------------------------------------------------------
# Similarity losses for training against a codebook of class symbols (chapters 8 and 9).
# ---------------------------------------------------------------------------------------------


@checked(check_symbols_and_codebook, scale=check_number)
def similarity_logits(x: torch.Tensor, codebook: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    r"""``scale * sim(x_i, s_k)`` for every output symbol and every class symbol.

    Feeding these to :func:`cross_entropy` gives a softmax classifier over similarities, the
    alternative to :func:`similarity_loss` that also pushes the wrong classes away.

    ``scale`` is any finite number (0 gives zeros, a negative one flips the order). x is trained
    freely and may leave [-1, 1] (the cosine is periodic); x and codebook must be finite.

    Shape:
        x: (B, n) angles in [-1, 1]; codebook: (C, n) -> (B, C)
    """
    return scale * fhrr_similarity(x[:, None, :], codebook[None, :, :])  # (B, C)


def _check_similarity_loss(x, codebook, target) -> None:
    check_symbols_and_codebook(x, codebook)
    if x.shape[0] == 0:
        raise ValueError(f"x must hold at least one symbol (B >= 1) to average over, "
                         f"got shape {tuple(x.shape)}")
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"target must be a torch.Tensor of integer class ids, got {type(target).__name__}")
    if target.shape != x.shape[:1]:
        raise ValueError(f"target must have shape (B,) = ({x.shape[0]},), got {tuple(target.shape)}")
    check_ids("target", target, codebook.shape[0])


@checked(_check_similarity_loss)
def similarity_loss(x: torch.Tensor, codebook: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    r"""Mean of ``1 - sim(x_i, codebook[y_i])``: the loss of Olin-Ammentorp and Bazhenov (2022).

    .. math:: \ell = 1 - \frac{1}{n} \sum_{j=1}^{n} \cos\big(\pi (x_j - s_{y,j})\big)

    Only the true class's symbol enters; it lies in [0, 2] and is 0 when x equals that symbol.

    Shape:
        x: (B, n) angles in [-1, 1], B >= 1; codebook: (C, n); target: (B,) ids -> scalar
    """
    return (1.0 - fhrr_similarity(x, codebook[target.long()])).mean()


# ---------------------------------------------------------------------------------------------
# The paper's classifiers, built by name.
# ---------------------------------------------------------------------------------------------


# ``kind`` is one of the three models; the other arguments are checked whichever ``kind`` uses them.
@checked(kind=partial(check_choice, choices=("self", "cross", "resnet")), embed_dim=check_positive_int,
         num_layers=check_count, skip=check_flag, num_queries=check_positive_int,
         out_scale=partial(check_number, low=0.0), d_ff=optional(check_positive_int),
         codebook_sparsity=check_probability)
def build_classifier(kind: str, embed_dim: int, num_layers: int = 12, skip: bool = True,
                     num_queries: int = 32, out_scale: float = 0.25, d_ff: int | None = None,
                     codebook_sparsity: float = 0.0) -> nn.Module:
    """``kind`` in {"self", "cross", "resnet"}: the paper's two attention classifiers or the deep
    residual network of its figure 3 (``out_scale``: initial scale of each block's last layer;
    ``d_ff``: hidden width of the attention blocks' MLP, default ``embed_dim`` as in the authors'
    code; ``codebook_sparsity``: share of each class symbol's angles set to 0). Every argument
    is checked, also those the chosen ``kind`` does not use (``num_layers``, ``skip`` and
    ``out_scale`` belong to ``"resnet"``, ``num_queries`` and ``d_ff`` to the attention models)."""
    if kind == "resnet":
        return VSAResNet(embed_dim, num_layers=num_layers, skip=skip, out_scale=out_scale,
                         codebook_sparsity=codebook_sparsity)
    return VSAAttentionClassifier(embed_dim, kind=kind, num_queries=num_queries, d_ff=d_ff,
                                  codebook_sparsity=codebook_sparsity)
