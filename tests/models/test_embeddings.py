import math

import pytest
import torch
from tolerance import approx, assert_close, assert_same_math
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

# --- patchify / PatchEmbedding ----------------------------------------------------------------


def test_patchify_shape_and_order(device):
    images = torch.arange(2 * 8 * 8, dtype=torch.float32, device=device).reshape(2, 8, 8)
    patches = patchify(images, 4)
    assert patches.shape == (2, 4, 16)
    # row-major patch order: top-left, top-right, bottom-left, bottom-right (pixels are copied: exact)
    assert torch.equal(patches[1, 0], images[1, :4, :4].reshape(-1))
    assert torch.equal(patches[1, 1], images[1, :4, 4:].reshape(-1))
    assert torch.equal(patches[1, 2], images[1, 4:, :4].reshape(-1))
    assert torch.equal(patches[0, 3], images[0, 4:, 4:].reshape(-1))


@pytest.mark.parametrize("patch", [1, 2, 4, 8])
def test_patchify_keeps_every_pixel(patch):
    images = torch.randn(3, 2, 8, 8)
    patches = patchify(images, patch)
    assert patches.shape == (3, (8 // patch) ** 2, 2 * patch * patch)
    assert_close(patches.sum(dim=(1, 2)), images.sum(dim=(1, 2, 3)), n=2 * 8 * 8)  # the same sum, reordered


def test_patchify_rectangular_and_channels():
    images = torch.randn(1, 3, 4, 6)
    patches = patchify(images, 2)
    assert patches.shape == (1, 6, 12)
    assert torch.equal(patches[0, 1], images[0, :, :2, 2:4].reshape(-1))


def test_patchify_bad_input():
    with pytest.raises(ValueError, match=r"patch must divide.*\(2, 8, 8\)"):
        patchify(torch.zeros(2, 8, 8), 3)
    with pytest.raises(ValueError, match=r"images must have shape .*got \(8, 8\)"):
        patchify(torch.zeros(8, 8), 4)
    with pytest.raises(ValueError, match="patch must be an int >= 1"):
        patchify(torch.zeros(1, 8, 8), 0)


@pytest.mark.parametrize("channels", [1, 3])
def test_patch_embedding_equals_conv(device, channels):
    torch.manual_seed(0)
    conv = nn.Conv2d(channels, 5, kernel_size=4, stride=4).to(device=device, dtype=torch.float64)
    ours = PatchEmbedding.from_torch(conv)
    images = torch.randn(2, channels, 8, 12, device=device, dtype=torch.float64)
    expected = conv(images).flatten(2).transpose(1, 2)  # (B, N, dim)
    out = ours(images)
    assert out.shape == (2, 6, 5)
    assert_same_math(out, expected, n=channels * 16)  # one 4 x 4 patch per output
    expected.sum().backward()
    out.sum().backward()
    assert_same_math(ours.proj.weight.grad, conv.weight.grad.reshape(5, -1), n=2 * 6)  # summed over B * N


def test_patch_embedding_grey_images_and_errors():
    m = PatchEmbedding(patch=2, embed_dim=7)
    assert m(torch.randn(4, 8, 8)).shape == (4, 16, 7)
    with pytest.raises(ValueError, match="1 channel"):
        m(torch.randn(4, 3, 8, 8))
    with pytest.raises(ValueError, match="kernel_size == stride"):
        PatchEmbedding.from_torch(nn.Conv2d(1, 4, kernel_size=3, stride=1))


# --- CBOW and its data --------------------------------------------------------------------------


def test_context_windows_small_example():
    ids = torch.tensor([10, 11, 12, 13, 14])
    contexts, centers = context_windows(ids, window=1)
    assert contexts.tolist() == [[10, 12], [11, 13], [12, 14]]
    assert centers.tolist() == [11, 12, 13]
    contexts, centers = context_windows(ids, window=2)
    assert contexts.tolist() == [[10, 11, 13, 14]]
    assert centers.tolist() == [12]


def test_context_windows_bad_input():
    with pytest.raises(ValueError, match="more than 2"):
        context_windows(torch.tensor([1, 2]), window=1)
    with pytest.raises(ValueError, match=r"ids must have shape \(N,\), got \(2, 3\)"):
        context_windows(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="window"):
        context_windows(torch.arange(5), window=0)


def test_cbow_sums_context_embeddings(device):
    torch.manual_seed(0)
    m = CBOW(vocab_size=11, embed_dim=4).to(device=device, dtype=torch.float64)
    context = torch.tensor([[1, 2], [3, 3]], device=device)
    logits = m(context)
    assert logits.shape == (2, 11)
    E = m.embedding.weight
    h = torch.stack([E[1] + E[2], 2 * E[3]])
    assert_same_math(logits, h @ m.out.weight.T + m.out.bias, n=2 + 4 + 1)
    with pytest.raises(ValueError, match=r"context must have shape \(B, K\)"):
        m(torch.tensor([1, 2], device=device))


def test_cbow_learns_a_deterministic_rule():
    # the centre copies the left word, the right word is noise: a context-free model cannot beat log(5)
    torch.manual_seed(0)
    left, right = torch.randint(0, 5, (2, 64))
    context, center = torch.stack([left, right + 5], 1), left
    m = CBOW(10, 16)
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    for _ in range(50):
        loss = nn.functional.cross_entropy(m(context), center)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 < math.log(5)


def test_skipgram_scores_are_dot_products(device):
    torch.manual_seed(0)
    m = SkipGram(vocab_size=11, embed_dim=4).to(device=device, dtype=torch.float64)
    # word2vec's start: E uniform in [-0.5/d, 0.5/d], U zero
    assert m.embedding.weight.abs().max() <= 0.5 / 4 and not m.context.weight.any()
    nn.init.normal_(m.context.weight)
    words = torch.tensor([1, 5], device=device)
    candidates = torch.tensor([[2, 7, 7], [5, 0, 10]], device=device)
    scores = m(words, candidates)
    assert scores.shape == (2, 3)
    E, U = m.embedding.weight, m.context.weight
    expected = torch.stack([U[candidates[b]] @ E[words[b]] for b in range(2)])
    assert_same_math(scores, expected, n=4)


def test_skipgram_negative_sampling_loss_and_gradient():
    # the binary cross-entropy with labels 1, 0, ..., 0 is -log s(u_c.e) - sum_i log s(-u_ci.e),
    # and its gradient for e_w is -(1 - s(u_c.e)) u_c + sum_i s(u_ci.e) u_ci
    torch.manual_seed(1)
    m = SkipGram(8, 5).double()
    nn.init.normal_(m.context.weight)
    words, candidates = torch.tensor([3]), torch.tensor([[4, 0, 6]])
    scores = m(words, candidates)
    labels = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    loss = nn.functional.binary_cross_entropy_with_logits(scores, labels, reduction="sum")
    s = scores[0]
    assert_close(loss, -(nn.functional.logsigmoid(s[0]) + nn.functional.logsigmoid(-s[1:]).sum()))
    loss.backward()
    U = m.context.weight.detach()
    sig = torch.sigmoid(s.detach())
    grad_e = -(1 - sig[0]) * U[4] + sig[1] * U[0] + sig[2] * U[6]
    assert_close(m.embedding.weight.grad[3], grad_e)
    assert not m.embedding.weight.grad[[0, 1, 2, 4, 5, 6, 7]].any()  # only the word's row


def test_skipgram_learns_which_words_are_neighbours():
    # words 0-4 are always followed by 5-9 (word w by w + 5); noise words drawn uniformly
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    m = SkipGram(10, 8)
    opt = torch.optim.Adam(m.parameters(), lr=0.05)
    for _ in range(200):
        words = torch.randint(0, 5, (64,), generator=g)
        candidates = torch.cat([words[:, None] + 5, torch.randint(0, 10, (64, 3), generator=g)], 1)
        labels = torch.zeros(64, 4)
        labels[:, 0] = 1
        loss = nn.functional.binary_cross_entropy_with_logits(m(words, candidates), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        scores = m(torch.arange(5), torch.arange(10).expand(5, 10))  # (5, 10)
    assert torch.equal(scores.argmax(1), torch.arange(5) + 5)


def test_unigram_cross_entropy_by_hand():
    train = torch.tensor([0, 0, 0, 1])  # q = (3/4, 1/4, 0)
    test = torch.tensor([0, 1])
    expected = -(math.log(0.75) + math.log(0.25)) / 2
    assert unigram_cross_entropy(train, test, 3) == approx(expected, n=4)  # computed in float64
    assert unigram_cross_entropy(train, torch.tensor([2]), 3) == math.inf
    smoothed = unigram_cross_entropy(train, torch.tensor([2]), 3, alpha=1.0)
    assert smoothed == approx(-math.log(1 / 7), n=4)
    with pytest.raises(ValueError, match="must have shape"):
        unigram_cross_entropy(train[None], test, 3)
    with pytest.raises(ValueError, match="empty"):
        unigram_cross_entropy(train, test[:0], 3)


# --- looking at vectors -----------------------------------------------------------------------


def test_nearest_neighbours(device):
    vectors = torch.tensor([[1.0, 0.0], [2.0, 0.1], [0.0, 1.0], [-1.0, -0.5]], device=device,
                           dtype=torch.float64)
    sims, ids = nearest_neighbours(vectors, torch.tensor([0, 2], device=device), k=2)
    assert ids.tolist() == [[1, 2], [1, 0]]
    assert_same_math(sims[0, 0], torch.cosine_similarity(vectors[0], vectors[1], dim=0), n=2)
    assert sims.shape == (2, 2) and torch.all(sims[:, 0] >= sims[:, 1])
    with pytest.raises(ValueError, match="k must be"):
        nearest_neighbours(vectors, torch.tensor([0]), k=4)


def test_pca_matches_sklearn():
    decomposition = pytest.importorskip("sklearn.decomposition")
    torch.manual_seed(0)
    x = torch.randn(50, 6, dtype=torch.float64) * torch.tensor([5.0, 3, 1, 1, 1, 1], dtype=torch.float64)
    ours = pca(x, 2)
    ref = torch.from_numpy(decomposition.PCA(2).fit_transform(x.numpy()))
    # equal up to the sign of each component; sklearn's SVD and ours sum 50 x 6 values in other orders
    assert_same_math(ours.abs(), ref.abs(), n=50 * 6)
    assert torch.equal(pca(-x, 2), pca(-x, 2))  # deterministic
    with pytest.raises(ValueError, match="k must be"):
        pca(x, 7)
