"""Bad input for every public callable of ``seqbook.embeddings``: a clear error, or a correct edge result.

Cases: 78 rejected (each a ValueError/TypeError raised by seqbook that names the argument) and
12 legal edge checks in ``test_legal_edge_inputs``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from seqbook.batching import context_windows
from seqbook.embeddings import (
    CBOW,
    PatchEmbedding,
    nearest_neighbours,
    patchify,
    pca,
    unigram_cross_entropy,
)
from tests.badinput import assert_clear_error

IMG = torch.rand(2, 8, 8)
PE = PatchEmbedding(4, 6)
CB = CBOW(10, 4)
IDS = torch.tensor([4, 5, 6, 7, 4, 5])
VEC = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))


def with_entry(x, value):
    x = x.clone()
    x.view(-1)[0] = value
    return x


REJECTED = {
    # --- patchify(images, patch)
    "patchify-2d": (lambda: patchify(torch.rand(8, 8), 4), "images", "(B, H, W)", "(8, 8)"),
    "patchify-5d": (lambda: patchify(torch.rand(1, 1, 1, 8, 8), 4), "images", "(1, 1, 1, 8, 8)"),
    "patchify-empty": (lambda: patchify(torch.rand(0, 8, 8), 4), "images", "empty", "(0, 8, 8)"),
    "patchify-list": (lambda: patchify([[1.0]], 1), "images", "list"),
    "patchify-patch-0": (lambda: patchify(IMG, 0), "patch", ">= 1", "0"),
    "patchify-patch-negative": (lambda: patchify(IMG, -4), "patch", "-4"),
    "patchify-patch-float": (lambda: patchify(IMG, 4.0), "patch", "float"),
    "patchify-patch-bool": (lambda: patchify(IMG, True), "patch", "bool"),
    "patchify-patch-not-dividing": (lambda: patchify(IMG, 3), "patch", "divide", "(2, 8, 8)"),
    # --- PatchEmbedding(patch, embed_dim, in_channels) and its forward
    "PatchEmbedding-patch-0": (lambda: PatchEmbedding(0, 4), "patch", "0"),
    "PatchEmbedding-embed_dim-0": (lambda: PatchEmbedding(4, 0), "embed_dim", ">= 1", "0"),
    "PatchEmbedding-embed_dim-negative": (lambda: PatchEmbedding(4, -1), "embed_dim", "-1"),
    "PatchEmbedding-embed_dim-float": (lambda: PatchEmbedding(4, 6.0), "embed_dim", "float"),
    "PatchEmbedding-in_channels-0": (lambda: PatchEmbedding(4, 6, 0), "in_channels", "0"),
    "PatchEmbedding-in_channels-bool": (lambda: PatchEmbedding(4, 6, True), "in_channels", "bool"),
    "PatchEmbedding.forward-channels": (lambda: PE(torch.rand(2, 3, 8, 8)), "images", "1 channel",
                                        "(2, 3, 8, 8)"),
    "PatchEmbedding.forward-2d": (lambda: PE(torch.rand(8, 8)), "images", "(8, 8)"),
    "PatchEmbedding.forward-float64": (lambda: PE(IMG.double()), "images", "torch.float32", "torch.float64"),
    "PatchEmbedding.forward-int": (lambda: PE(torch.ones(2, 8, 8, dtype=torch.long)), "images",
                                   "floating-point", "torch.int64"),
    "PatchEmbedding.forward-uint8": (lambda: PE(torch.ones(2, 8, 8, dtype=torch.uint8)), "images",
                                     "torch.uint8"),
    "PatchEmbedding.forward-not-dividing": (lambda: PE(torch.rand(2, 6, 6)), "patch", "divide"),
    "PatchEmbedding.forward-empty": (lambda: PE(torch.rand(0, 8, 8)), "images", "empty"),
    "PatchEmbedding.from_torch-linear": (lambda: PatchEmbedding.from_torch(nn.Linear(4, 4)), "conv",
                                         "Conv2d", "Linear"),
    "PatchEmbedding.from_torch-overlapping": (lambda: PatchEmbedding.from_torch(nn.Conv2d(1, 4, 4, 2)),
                                              "conv", "kernel_size == stride"),
    "PatchEmbedding.from_torch-no-bias": (
        lambda: PatchEmbedding.from_torch(nn.Conv2d(1, 4, 4, 4, bias=False)), "conv", "bias=False"),
    # --- context_windows(ids, window)
    "context_windows-2d": (lambda: context_windows(IDS.view(2, 3)), "ids", "(N,)", "(2, 3)"),
    "context_windows-float": (lambda: context_windows(IDS.float()), "ids", "integer", "torch.float32"),
    "context_windows-list": (lambda: context_windows([1, 2, 3]), "ids", "list"),
    "context_windows-window-0": (lambda: context_windows(IDS, 0), "window", ">= 1", "0"),
    "context_windows-window-negative": (lambda: context_windows(IDS, -1), "window", "-1"),
    "context_windows-window-float": (lambda: context_windows(IDS, 1.5), "window", "float"),
    "context_windows-too-short": (lambda: context_windows(IDS[:2], 1), "ids", "more than 2", "got 2"),
    "context_windows-empty": (lambda: context_windows(IDS[:0], 1), "ids", "got 0"),
    # --- CBOW(vocab_size, embed_dim) and its forward
    "CBOW-vocab_size-0": (lambda: CBOW(0, 4), "vocab_size", ">= 1", "0"),
    "CBOW-vocab_size-float": (lambda: CBOW(10.0, 4), "vocab_size", "float"),
    "CBOW-embed_dim-0": (lambda: CBOW(10, 0), "embed_dim", "0"),
    "CBOW-embed_dim-negative": (lambda: CBOW(10, -4), "embed_dim", "-4"),
    "CBOW.forward-1d": (lambda: CB(torch.tensor([1, 2])), "context", "(B, K)", "(2,)"),
    "CBOW.forward-3d": (lambda: CB(torch.ones(1, 2, 2, dtype=torch.long)), "context", "(B, K)"),
    "CBOW.forward-id-too-large": (lambda: CB(torch.tensor([[1, 10]])), "context", "[0, 9]", "10"),
    "CBOW.forward-id-negative": (lambda: CB(torch.tensor([[-1, 2]])), "context", "[0, 9]", "-1"),
    "CBOW.forward-float": (lambda: CB(torch.tensor([[1.0, 2.0]])), "context", "integer", "torch.float32"),
    "CBOW.forward-empty-B": (lambda: CB(torch.ones(0, 2, dtype=torch.long)), "context", "empty"),
    "CBOW.forward-empty-K": (lambda: CB(torch.ones(2, 0, dtype=torch.long)), "context", "empty"),
    # --- unigram_cross_entropy(train_ids, test_ids, vocab_size, alpha)
    "unigram_cross_entropy-2d": (lambda: unigram_cross_entropy(IDS[None], IDS, 10), "train_ids", "(N,)",
                                 "(1, 6)"),
    "unigram_cross_entropy-test-2d": (lambda: unigram_cross_entropy(IDS, IDS[None], 10), "test_ids", "(N,)"),
    "unigram_cross_entropy-empty-train": (lambda: unigram_cross_entropy(IDS[:0], IDS, 10), "train_ids",
                                          "empty"),
    "unigram_cross_entropy-empty-test": (lambda: unigram_cross_entropy(IDS, IDS[:0], 10), "test_ids",
                                         "empty"),
    "unigram_cross_entropy-float-ids": (lambda: unigram_cross_entropy(IDS.float(), IDS, 10), "train_ids",
                                        "integer"),
    "unigram_cross_entropy-train-id-too-large": (lambda: unigram_cross_entropy(IDS, IDS, 6), "train_ids",
                                                 "[0, 5]", "7"),
    "unigram_cross_entropy-test-id-too-large": (lambda: unigram_cross_entropy(IDS, torch.tensor([12]), 10),
                                                "test_ids", "[0, 9]", "12"),
    "unigram_cross_entropy-negative-id": (lambda: unigram_cross_entropy(IDS, torch.tensor([-1]), 10),
                                          "test_ids", "-1"),
    "unigram_cross_entropy-vocab_size-0": (lambda: unigram_cross_entropy(IDS, IDS, 0), "vocab_size", "0"),
    "unigram_cross_entropy-vocab_size-float": (lambda: unigram_cross_entropy(IDS, IDS, 10.0), "vocab_size",
                                               "float"),
    "unigram_cross_entropy-alpha-negative": (lambda: unigram_cross_entropy(IDS, IDS, 10, alpha=-1.0),
                                             "alpha", ">= 0", "-1.0"),
    "unigram_cross_entropy-alpha-nan": (lambda: unigram_cross_entropy(IDS, IDS, 10, alpha=math.nan),
                                        "alpha", "nan"),
    "unigram_cross_entropy-alpha-inf": (lambda: unigram_cross_entropy(IDS, IDS, 10, alpha=math.inf),
                                        "alpha", "inf"),
    "unigram_cross_entropy-alpha-str": (lambda: unigram_cross_entropy(IDS, IDS, 10, alpha="1"), "alpha",
                                        "str"),
    # --- nearest_neighbours(vectors, query, k)
    "nearest_neighbours-vectors-1d": (lambda: nearest_neighbours(VEC[0], torch.tensor([0])), "vectors",
                                      "(V, d)", "(3,)"),
    "nearest_neighbours-vectors-int": (lambda: nearest_neighbours(VEC.long(), torch.tensor([0])), "vectors",
                                       "floating-point"),
    "nearest_neighbours-vectors-nan": (
        lambda: nearest_neighbours(with_entry(VEC, math.nan), torch.tensor([0])), "vectors", "finite"),
    "nearest_neighbours-vectors-empty": (lambda: nearest_neighbours(VEC[:, :0], torch.tensor([0])),
                                         "vectors", "empty"),
    "nearest_neighbours-query-2d": (lambda: nearest_neighbours(VEC, torch.tensor([[0]])), "query", "(Q,)"),
    "nearest_neighbours-query-float": (lambda: nearest_neighbours(VEC, torch.tensor([0.0])), "query",
                                       "integer"),
    "nearest_neighbours-query-too-large": (lambda: nearest_neighbours(VEC, torch.tensor([6])), "query",
                                           "[0, 5]", "6"),
    "nearest_neighbours-query-negative": (lambda: nearest_neighbours(VEC, torch.tensor([-1])), "query", "-1"),
    "nearest_neighbours-k-0": (lambda: nearest_neighbours(VEC, torch.tensor([0]), k=0), "k must be", "0"),
    "nearest_neighbours-k-too-large": (lambda: nearest_neighbours(VEC, torch.tensor([0]), k=6), "k must be",
                                       "[1, 5]", "6"),
    "nearest_neighbours-k-float": (lambda: nearest_neighbours(VEC, torch.tensor([0]), k=2.0), "k must be",
                                   "float"),
    # --- pca(x, k)
    "pca-1d": (lambda: pca(VEC[0]), "x", "(N, d)", "(3,)"),
    "pca-3d": (lambda: pca(VEC[None]), "x", "(N, d)"),
    "pca-empty": (lambda: pca(VEC[:0]), "x", "empty", "(0, 3)"),
    "pca-int": (lambda: pca(VEC.long()), "x", "floating-point", "torch.int64"),
    "pca-nan": (lambda: pca(with_entry(VEC, math.nan)), "x", "finite"),
    "pca-inf": (lambda: pca(with_entry(VEC, math.inf)), "x", "finite"),
    "pca-k-0": (lambda: pca(VEC, 0), "k must be", "0"),
    "pca-k-too-large": (lambda: pca(VEC, 4), "k must be", "[1, 3]", "4"),
    "pca-k-bool": (lambda: pca(VEC, True), "k must be", "bool"),
}


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_bad_input_gives_a_clear_error(case):
    fn, *words = REJECTED[case]
    assert_clear_error(fn, *words)


def test_legal_edge_inputs():
    assert patchify(torch.ones(1, 2, 4, 4, dtype=torch.long), np.int64(4)).shape == (1, 1, 32)
    assert patchify(IMG, 1).shape == (2, 64, 1)  # one pixel per patch
    assert PatchEmbedding(np.int64(8), 2)(IMG).shape == (2, 1, 2)  # one patch per image
    assert PE.double()(IMG.double()).dtype == torch.float64
    PE.float()
    contexts, centers = context_windows(torch.tensor([1, 2, 3], dtype=torch.int32))
    assert contexts.tolist() == [[1, 3]] and centers.tolist() == [2]
    assert CB(torch.tensor([[9, 0]], dtype=torch.int32)).shape == (1, 10)
    # alpha = 0 and a test id never seen in training: inf, as documented
    assert unigram_cross_entropy(IDS, torch.tensor([9]), 10) == math.inf
    assert math.isfinite(unigram_cross_entropy(IDS, torch.tensor([9]), 10, alpha=np.float64(0.5)))
    sims, ids = nearest_neighbours(VEC, torch.tensor([], dtype=torch.long), k=5)
    assert sims.shape == ids.shape == (0, 5)
    zero = torch.zeros(3, 2)  # zero vectors have cosine 0 to everything
    assert torch.equal(nearest_neighbours(zero, torch.tensor([0]), k=1)[0], torch.zeros(1, 1))
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        out = pca(VEC.to(dtype), k=2)
        assert out.dtype == dtype and out.shape == (6, 2) and torch.isfinite(out).all()
    assert pca(VEC[:1], 1).tolist() == [[0.0]]  # one point: no variance
