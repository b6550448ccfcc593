"""Bad input for every public callable of ``seqbook.embeddings``: a clear error, or a correct edge result.

Cases: 87 rejected (each a ValueError/TypeError raised by seqbook that names the argument) and
13 legal edge checks in ``test_legal_edge_inputs``.
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
    SkipGram,
    nearest_neighbours,
    patchify,
    pca,
    unigram_cross_entropy,
)
from tests.badinput import assert_clear_error, table

IMG = torch.rand(2, 8, 8)
PE = PatchEmbedding(4, 6)
CB = CBOW(10, 4)
SG = SkipGram(10, 4)
W2 = torch.tensor([1, 2])
IDS = torch.tensor([4, 5, 6, 7, 4, 5])
VEC = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))


def with_entry(x, value):
    x = x.clone()
    x.view(-1)[0] = value
    return x


ERRORS, case = table()
case("patchify-2d", lambda: patchify(torch.rand(8, 8), 4), "images", "(B, H, W)", "(8, 8)")
case("patchify-5d", lambda: patchify(torch.rand(1, 1, 1, 8, 8), 4), "images", "(1, 1, 1, 8, 8)")
case("patchify-empty", lambda: patchify(torch.rand(0, 8, 8), 4), "images", "empty", "(0, 8, 8)")
case("patchify-list", lambda: patchify([[1.0]], 1), "images", "list")
case("patchify-patch-0", lambda: patchify(IMG, 0), "patch", ">= 1", "0")
case("patchify-patch-negative", lambda: patchify(IMG, -4), "patch", "-4")
case("patchify-patch-float", lambda: patchify(IMG, 4.0), "patch", "float")
case("patchify-patch-bool", lambda: patchify(IMG, True), "patch", "bool")
case("patchify-patch-not-dividing", lambda: patchify(IMG, 3), "patch", "divide", "(2, 8, 8)")
case("PatchEmbedding-patch-0", lambda: PatchEmbedding(0, 4), "patch", "0")
case("PatchEmbedding-embed_dim-0", lambda: PatchEmbedding(4, 0), "embed_dim", ">= 1", "0")
case("PatchEmbedding-embed_dim-negative", lambda: PatchEmbedding(4, -1), "embed_dim", "-1")
case("PatchEmbedding-embed_dim-float", lambda: PatchEmbedding(4, 6.0), "embed_dim", "float")
case("PatchEmbedding-in_channels-0", lambda: PatchEmbedding(4, 6, 0), "in_channels", "0")
case("PatchEmbedding-in_channels-bool", lambda: PatchEmbedding(4, 6, True), "in_channels", "bool")
case("PatchEmbedding.forward-channels", lambda: PE(torch.rand(2, 3, 8, 8)), "images", "1 channel",
     "(2, 3, 8, 8)")
case("PatchEmbedding.forward-2d", lambda: PE(torch.rand(8, 8)), "images", "(8, 8)")
case("PatchEmbedding.forward-float64", lambda: PE(IMG.double()), "images", "torch.float32", "torch.float64")
case("PatchEmbedding.forward-int", lambda: PE(torch.ones(2, 8, 8, dtype=torch.long)), "images",
     "floating-point", "torch.int64")
case("PatchEmbedding.forward-uint8", lambda: PE(torch.ones(2, 8, 8, dtype=torch.uint8)), "images",
     "torch.uint8")
case("PatchEmbedding.forward-not-dividing", lambda: PE(torch.rand(2, 6, 6)), "patch", "divide")
case("PatchEmbedding.forward-empty", lambda: PE(torch.rand(0, 8, 8)), "images", "empty")
case("PatchEmbedding.from_torch-linear", lambda: PatchEmbedding.from_torch(nn.Linear(4, 4)), "conv", "Conv2d",
     "Linear")
case("PatchEmbedding.from_torch-overlapping", lambda: PatchEmbedding.from_torch(nn.Conv2d(1, 4, 4, 2)),
     "conv", "kernel_size == stride")
case("PatchEmbedding.from_torch-no-bias",
     lambda: PatchEmbedding.from_torch(nn.Conv2d(1, 4, 4, 4, bias=False)), "conv", "bias=False")
case("context_windows-2d", lambda: context_windows(IDS.view(2, 3)), "ids", "(N,)", "(2, 3)")
case("context_windows-float", lambda: context_windows(IDS.float()), "ids", "integer", "torch.float32")
case("context_windows-list", lambda: context_windows([1, 2, 3]), "ids", "list")
case("context_windows-window-0", lambda: context_windows(IDS, 0), "window", ">= 1", "0")
case("context_windows-window-negative", lambda: context_windows(IDS, -1), "window", "-1")
case("context_windows-window-float", lambda: context_windows(IDS, 1.5), "window", "float")
case("context_windows-too-short", lambda: context_windows(IDS[:2], 1), "ids", "more than 2", "got 2")
case("context_windows-empty", lambda: context_windows(IDS[:0], 1), "ids", "got 0")
case("CBOW-vocab_size-0", lambda: CBOW(0, 4), "vocab_size", ">= 1", "0")
case("CBOW-vocab_size-float", lambda: CBOW(10.0, 4), "vocab_size", "float")
case("CBOW-embed_dim-0", lambda: CBOW(10, 0), "embed_dim", "0")
case("CBOW-embed_dim-negative", lambda: CBOW(10, -4), "embed_dim", "-4")
case("CBOW.forward-1d", lambda: CB(torch.tensor([1, 2])), "context", "(B, K)", "(2,)")
case("CBOW.forward-3d", lambda: CB(torch.ones(1, 2, 2, dtype=torch.long)), "context", "(B, K)")
case("CBOW.forward-id-too-large", lambda: CB(torch.tensor([[1, 10]])), "context", "[0, 9]", "10")
case("CBOW.forward-id-negative", lambda: CB(torch.tensor([[-1, 2]])), "context", "[0, 9]", "-1")
case("CBOW.forward-float", lambda: CB(torch.tensor([[1.0, 2.0]])), "context", "integer", "torch.float32")
case("CBOW.forward-empty-B", lambda: CB(torch.ones(0, 2, dtype=torch.long)), "context", "empty")
case("CBOW.forward-empty-K", lambda: CB(torch.ones(2, 0, dtype=torch.long)), "context", "empty")
case("SkipGram-vocab_size-0", lambda: SkipGram(0, 4), "vocab_size", ">= 1", "0")
case("SkipGram-embed_dim-float", lambda: SkipGram(10, 4.0), "embed_dim", "float")
case("SkipGram.forward-words-2d", lambda: SG(W2[None], torch.tensor([[3]])), "words", "(B,)", "(1, 2)")
case("SkipGram.forward-candidates-1d", lambda: SG(W2, torch.tensor([3, 4])), "candidates", "(B, C)",
     "B = 2", "(2,)")
case("SkipGram.forward-batch-mismatch", lambda: SG(W2, torch.tensor([[3, 4, 5]])), "candidates",
     "B = 2", "(1, 3)")
case("SkipGram.forward-word-too-large", lambda: SG(torch.tensor([1, 10]), torch.tensor([[3], [4]])),
     "words", "[0, 9]", "10")
case("SkipGram.forward-candidate-negative", lambda: SG(W2, torch.tensor([[3], [-1]])), "candidates",
     "[0, 9]", "-1")
case("SkipGram.forward-float-words", lambda: SG(W2.float(), torch.tensor([[3], [4]])), "words",
     "integer", "torch.float32")
case("SkipGram.forward-empty-C", lambda: SG(W2, torch.ones(2, 0, dtype=torch.long)), "candidates",
     "empty")
case("unigram_cross_entropy-2d", lambda: unigram_cross_entropy(IDS[None], IDS, 10), "train_ids", "(N,)",
     "(1, 6)")
case("unigram_cross_entropy-test-2d", lambda: unigram_cross_entropy(IDS, IDS[None], 10), "test_ids", "(N,)")
case("unigram_cross_entropy-empty-train", lambda: unigram_cross_entropy(IDS[:0], IDS, 10), "train_ids",
     "empty")
case("unigram_cross_entropy-empty-test", lambda: unigram_cross_entropy(IDS, IDS[:0], 10), "test_ids", "empty")
case("unigram_cross_entropy-float-ids", lambda: unigram_cross_entropy(IDS.float(), IDS, 10), "train_ids",
     "integer")
case("unigram_cross_entropy-train-id-too-large", lambda: unigram_cross_entropy(IDS, IDS, 6), "train_ids",
     "[0, 5]", "7")
case("unigram_cross_entropy-test-id-too-large", lambda: unigram_cross_entropy(IDS, torch.tensor([12]), 10),
     "test_ids", "[0, 9]", "12")
case("unigram_cross_entropy-negative-id", lambda: unigram_cross_entropy(IDS, torch.tensor([-1]), 10),
     "test_ids", "-1")
case("unigram_cross_entropy-vocab_size-0", lambda: unigram_cross_entropy(IDS, IDS, 0), "vocab_size", "0")
case("unigram_cross_entropy-vocab_size-float", lambda: unigram_cross_entropy(IDS, IDS, 10.0), "vocab_size",
     "float")
case("unigram_cross_entropy-alpha-negative", lambda: unigram_cross_entropy(IDS, IDS, 10, alpha=-1.0), "alpha",
     ">= 0", "-1.0")
case("unigram_cross_entropy-alpha-nan", lambda: unigram_cross_entropy(IDS, IDS, 10, alpha=math.nan), "alpha",
     "nan")
case("unigram_cross_entropy-alpha-inf", lambda: unigram_cross_entropy(IDS, IDS, 10, alpha=math.inf), "alpha",
     "inf")
case("unigram_cross_entropy-alpha-str", lambda: unigram_cross_entropy(IDS, IDS, 10, alpha="1"), "alpha",
     "str")
case("nearest_neighbours-vectors-1d", lambda: nearest_neighbours(VEC[0], torch.tensor([0])), "vectors",
     "(V, d)", "(3,)")
case("nearest_neighbours-vectors-int", lambda: nearest_neighbours(VEC.long(), torch.tensor([0])), "vectors",
     "floating-point")
case("nearest_neighbours-vectors-nan",
     lambda: nearest_neighbours(with_entry(VEC, math.nan), torch.tensor([0])), "vectors", "finite")
case("nearest_neighbours-vectors-empty", lambda: nearest_neighbours(VEC[:, :0], torch.tensor([0])), "vectors",
     "empty")
case("nearest_neighbours-query-2d", lambda: nearest_neighbours(VEC, torch.tensor([[0]])), "query", "(Q,)")
case("nearest_neighbours-query-float", lambda: nearest_neighbours(VEC, torch.tensor([0.0])), "query",
     "integer")
case("nearest_neighbours-query-too-large", lambda: nearest_neighbours(VEC, torch.tensor([6])), "query",
     "[0, 5]", "6")
case("nearest_neighbours-query-negative", lambda: nearest_neighbours(VEC, torch.tensor([-1])), "query", "-1")
case("nearest_neighbours-k-0", lambda: nearest_neighbours(VEC, torch.tensor([0]), k=0), "k must be", "0")
case("nearest_neighbours-k-too-large", lambda: nearest_neighbours(VEC, torch.tensor([0]), k=6), "k must be",
     "[1, 5]", "6")
case("nearest_neighbours-k-float", lambda: nearest_neighbours(VEC, torch.tensor([0]), k=2.0), "k must be",
     "float")
case("pca-1d", lambda: pca(VEC[0]), "x", "(N, d)", "(3,)")
case("pca-3d", lambda: pca(VEC[None]), "x", "(N, d)")
case("pca-empty", lambda: pca(VEC[:0]), "x", "empty", "(0, 3)")
case("pca-int", lambda: pca(VEC.long()), "x", "floating-point", "torch.int64")
case("pca-nan", lambda: pca(with_entry(VEC, math.nan)), "x", "finite")
case("pca-inf", lambda: pca(with_entry(VEC, math.inf)), "x", "finite")
case("pca-k-0", lambda: pca(VEC, 0), "k must be", "0")
case("pca-k-too-large", lambda: pca(VEC, 4), "k must be", "[1, 3]", "4")
case("pca-k-bool", lambda: pca(VEC, True), "k must be", "bool")


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
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
    assert SG(torch.tensor([9], dtype=torch.int32), torch.tensor([[0]])).shape == (1, 1)
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
