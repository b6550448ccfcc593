"""Embeddings: turning discrete tokens, and chunks of anything, into vectors.

Chapter 1 of the book uses this module. It holds

- :func:`patchify` and :class:`PatchEmbedding`: cut an image into square patches and project each
  patch linearly into a token vector (the "tokens of anything" recipe of vision transformers);
- :class:`CBOW` (trained on :func:`seqbook.data.context_windows`): a continuous bag-of-words
  model that learns word vectors by predicting a word from its neighbours;
- :class:`SkipGram`: skip-gram's scores, trained with negative sampling to tell a word's real
  neighbours from noise words;
- :func:`unigram_cross_entropy`: the baseline every language model must beat;
- :func:`nearest_neighbours` and :func:`pca`: the two ways we look at learned vectors.
"""

from __future__ import annotations

import torch
from torch import nn

from .checks import (
    check_finite,
    check_float_tensor,
    check_ids,
    check_int,
    check_like,
    check_number,
    check_tensor,
    checked,
)

# ---------------------------------------------------------------------------------------------
# Tokens of anything: image patches.
# ---------------------------------------------------------------------------------------------


def _check_images(images) -> None:
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"images must be a torch.Tensor, got {type(images).__name__}")
    if images.dim() not in (3, 4):
        raise ValueError(f"images must have shape (B, H, W) or (B, C, H, W), got {tuple(images.shape)}")
    check_tensor("images", images)  # not empty


def _check_patchify(images: torch.Tensor, patch: int) -> None:
    _check_images(images)
    patch = check_int("patch", patch, 1)
    H, W = images.shape[-2:]
    if H % patch or W % patch:
        raise ValueError(
            f"patch must divide the image height and width: got patch={patch} for images of "
            f"shape {tuple(images.shape)}"
        )


@checked(_check_patchify)
def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """Cut images into non-overlapping ``patch x patch`` squares, each a flat vector.

    Patches are numbered row by row (left to right, then top to bottom). Inside a
    patch the values are ordered (channel, row, column), the order of a ``Conv2d``
    weight, so a linear map of the patches equals a convolution with
    ``kernel_size = stride = patch``.

    Shape:
        - images: (B, H, W) or (B, C, H, W)
        - output: (B, N, C * patch * patch) with N = (H / patch) * (W / patch)
    """
    if images.dim() == 3:
        images = images.unsqueeze(1)  # (B, 1, H, W)
    B, C, H, W = images.shape
    h, w = H // patch, W // patch
    x = images.reshape(B, C, h, patch, w, patch)  # (B, C, h, p, w, p)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, h, w, C, p, p)
    return x.reshape(B, h * w, C * patch * patch)  # (B, N, C*p*p)


class PatchEmbedding(nn.Module):
    """Project every image patch to an ``embed_dim``-dimensional token:  t_n = vec(patch_n) A^T + b.

    Chapter 1's patch equation, with A = ``self.proj.weight`` of shape (embed_dim, C * patch * patch).

    Args:
        patch: side of the square patches (must divide the image sides).
        embed_dim: size of each token vector.
        in_channels: channels of the images (1 for grey-scale).

    Shape:
        - images: (B, H, W) or (B, C, H, W)
        - output: (B, N, embed_dim) with N = (H / patch) * (W / patch)
    """

    def __init__(self, patch: int, embed_dim: int, in_channels: int = 1):
        super().__init__()
        patch, embed_dim = check_int("patch", patch, 1), check_int("embed_dim", embed_dim, 1)
        in_channels = check_int("in_channels", in_channels, 1)
        self.patch, self.in_channels = patch, in_channels
        self.proj = nn.Linear(in_channels * patch * patch, embed_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _check_images(images)
        check_like("images", images, self.proj.weight)
        channels = 1 if images.dim() == 3 else images.shape[1]
        if channels != self.in_channels:
            raise ValueError(
                f"images must have {self.in_channels} channel(s), got shape {tuple(images.shape)}"
            )
        return self.proj(patchify(images, self.patch))  # (B, N, embed_dim)

    @classmethod
    def from_torch(cls, conv: nn.Conv2d) -> PatchEmbedding:
        """Copy a ``Conv2d`` with ``kernel_size == stride`` (and a bias), the usual ViT patch layer."""
        if not isinstance(conv, nn.Conv2d):
            raise TypeError(f"conv must be an nn.Conv2d, got {type(conv).__name__}")
        k, s = conv.kernel_size, conv.stride
        if k[0] != k[1] or tuple(s) != tuple(k) or conv.padding not in ((0, 0), "valid") or conv.bias is None:
            raise ValueError(
                f"conv must have square kernel_size == stride, no padding and a bias, got "
                f"kernel_size={k}, stride={s}, padding={conv.padding}, bias={conv.bias is not None}"
            )
        m = cls(k[0], conv.out_channels, conv.in_channels)
        m = m.to(device=conv.weight.device, dtype=conv.weight.dtype)
        with torch.no_grad():
            m.proj.weight.copy_(conv.weight.reshape(conv.out_channels, -1))  # (embed_dim, C*p*p)
            m.proj.bias.copy_(conv.bias)
        return m


# ---------------------------------------------------------------------------------------------
# Learned word vectors: continuous bag of words.
# ---------------------------------------------------------------------------------------------


class CBOW(nn.Module):
    """Continuous bag of words: predict a word from the sum of its neighbours' embeddings.

        p(w_t | context) = softmax((sum_k E[w_{t+k}]) U^T + c)

    ``E`` (``self.embedding``) holds the word vectors we are after; ``U, c`` (``self.out``) turn
    a summed context vector into one score per word of the vocabulary.

    Args:
        vocab_size: number of token ids V.
        embed_dim: size d of each word vector.

    Shape:
        - context: (B, K) token ids (K neighbours per example)
        - output: (B, V) logits of the centre word
    """

    def __init__(self, vocab_size: int, embed_dim: int):
        super().__init__()
        self.vocab_size = check_int("vocab_size", vocab_size, 1)
        embed_dim = check_int("embed_dim", embed_dim, 1)
        self.embedding = nn.Embedding(vocab_size, embed_dim)  # E: (V, d)
        self.out = nn.Linear(embed_dim, vocab_size)  # U: (V, d), c: (V,)

    def _check_forward(self, context: torch.Tensor) -> None:
        check_ids("context", context, self.vocab_size, shape=(None, None), names="(B, K)")

    @checked(_check_forward)
    def forward(self, context: torch.Tensor) -> torch.Tensor:
        h = self.embedding(context).sum(dim=1)  # (B, K, d) -> (B, d)
        return self.out(h)  # (B, V)


class SkipGram(nn.Module):
    """Skip-gram's scores for negative sampling: a dot product for each (word, candidate) pair.

        score(w, c) = u_c^T e_w

    ``E`` (``self.embedding``) holds the word vectors e_w, ``U`` (``self.context``) the vectors u_c
    of the words seen as neighbours. Negative sampling (Mikolov et al., 2013) gives a word w, as
    candidates, a real neighbour c and k noise words c_1..c_k, and minimises

        -log sigma(score(w, c)) - sum_i log sigma(-score(w, c_i))

    (binary cross-entropy with the labels 1, 0, ..., 0). The tables start as word2vec's do: E
    uniform in [-0.5/d, 0.5/d], U zero.

    Args:
        vocab_size: number of token ids V.
        embed_dim: size d of each vector.

    Shape:
        - words: (B,) token ids
        - candidates: (B, C) token ids (e.g. a neighbour, then k noise words)
        - output: (B, C) scores
    """

    def __init__(self, vocab_size: int, embed_dim: int):
        super().__init__()
        self.vocab_size = check_int("vocab_size", vocab_size, 1)
        embed_dim = check_int("embed_dim", embed_dim, 1)
        self.embedding = nn.Embedding(vocab_size, embed_dim)  # E: (V, d)
        self.context = nn.Embedding(vocab_size, embed_dim)  # U: (V, d)
        nn.init.uniform_(self.embedding.weight, -0.5 / embed_dim, 0.5 / embed_dim)
        nn.init.zeros_(self.context.weight)

    def _check_forward(self, words: torch.Tensor, candidates: torch.Tensor) -> None:
        check_ids("words", words, self.vocab_size, shape=(None,), names="(B,)")
        check_ids("candidates", candidates, self.vocab_size, shape=(words.shape[0], None),
                  names=f"(B, C) with B = {words.shape[0]}, the length of words")

    @checked(_check_forward)
    def forward(self, words: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        e = self.embedding(words)  # (B, d)
        u = self.context(candidates)  # (B, C, d)
        return (u * e[:, None, :]).sum(dim=-1)  # (B, C)


def unigram_cross_entropy(
    train_ids: torch.Tensor, test_ids: torch.Tensor, vocab_size: int, alpha: float = 0.0
) -> float:
    """Cross-entropy, in nats per token, of ``test_ids`` under the unigram distribution of ``train_ids``.

        q(w) = (count(w) + alpha) / (N_train + alpha V),   H = -mean_t log q(test_t)

    This is the loss of a model that ignores the context and always predicts word frequencies;
    a model that uses context must do better. ``alpha > 0`` adds Laplace smoothing; with
    ``alpha = 0`` a test token never seen in training gives ``inf`` (documented, not an error).
    Every id must lie in [0, vocab_size).

    Shape:
        - train_ids: (N_train,), test_ids: (N_test,)
    """
    vocab_size = check_int("vocab_size", vocab_size, 1)
    check_ids("train_ids", train_ids, vocab_size, shape=(None,), names="(N,)")
    check_ids("test_ids", test_ids, vocab_size, shape=(None,), names="(N,)")
    alpha = check_number("alpha", alpha, low=0.0)
    counts = torch.bincount(train_ids, minlength=vocab_size).double() + alpha  # (V,)
    q = counts / counts.sum()
    return float(-torch.log(q[test_ids]).mean())


# ---------------------------------------------------------------------------------------------
# Looking at vectors.
# ---------------------------------------------------------------------------------------------


def nearest_neighbours(
    vectors: torch.Tensor, query: torch.Tensor, k: int = 5
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` rows of ``vectors`` most cosine-similar to each query row (the query itself excluded).

        cos(u, v) = u . v / (|u| |v|)

    Shape:
        - vectors: (V, d) e.g. an embedding table
        - query: (Q,) row ids into ``vectors``
        - output: similarities (Q, k) in decreasing order, and the ids (Q, k) of the neighbours
    """
    check_float_tensor("vectors", vectors, shape=(None, None), names="(V, d)")
    check_finite("vectors", vectors)
    check_ids("query", query, vectors.shape[0], shape=(None,), names="(Q,)", nonempty=False)
    k = check_int("k", k, 1)
    if k >= vectors.shape[0]:
        raise ValueError(f"k must be in [1, {vectors.shape[0] - 1}], got {k}")
    unit = torch.nn.functional.normalize(vectors, dim=1)  # (V, d)
    sims = unit[query] @ unit.T  # (Q, V)
    sims[torch.arange(len(query), device=sims.device), query] = -float("inf")  # not itself
    return sims.topk(k, dim=1)


def pca(x: torch.Tensor, k: int = 2) -> torch.Tensor:
    """Project rows of ``x`` onto their first ``k`` principal components (exact, via the SVD).

    The sign of each component is fixed so that its largest loading is positive, so the same
    data always gives the same picture.

    float16 and bfloat16 input is computed in float32 and returned in its own dtype.

    Shape:
        - x: (N, d)
        - output: (N, k)
    """
    check_float_tensor("x", x, shape=(None, None), names="(N, d)")
    check_finite("x", x)
    k = check_int("k", k, 1)
    if k > min(x.shape):
        raise ValueError(f"k must be in [1, {min(x.shape)}] for x of shape {tuple(x.shape)}, got {k}")
    dtype = x.dtype
    if dtype in (torch.float16, torch.bfloat16):  # the SVD has no half-precision kernels
        x = x.float()
    centred = x - x.mean(dim=0, keepdim=True)  # (N, d)
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)  # vh: (min(N, d), d)
    components = vh[:k]  # (k, d)
    idx = components.abs().argmax(dim=1)
    signs = torch.sign(components[torch.arange(k, device=x.device), idx])
    return (centred @ (components * signs[:, None]).T).to(dtype)  # (N, k)
