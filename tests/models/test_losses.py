import math

import pytest
import torch
import torch.nn.functional as F
from tolerance import approx, assert_close, assert_same_math, tol

from seqbook.losses import (
    AdaptiveSoftmax,
    calibration_bins,
    chunked_cross_entropy,
    cross_entropy,
    cross_entropy_dist,
    entropy,
    expected_calibration_error,
    focal_loss,
    free_energy,
    kl_divergence,
    log_softmax,
    logsumexp,
    perplexity,
    smooth_labels,
)
from seqbook.vsa_models import similarity_logits, similarity_loss


def _torch_ce(logits, target, **kw):
    """F.cross_entropy wants the classes in dim 1: (B, C, T) for sequences."""
    if logits.dim() == 3:
        logits = logits.transpose(1, 2)
    return F.cross_entropy(logits, target, **kw)


# --- log-sum-exp -------------------------------------------------------------------------------


@pytest.mark.parametrize("beta", [0.5, 1.0, 3.0])
def test_logsumexp_matches_torch_and_gradient_is_softmax(device, beta):
    z = torch.randn(4, 5, 7, device=device, dtype=torch.float64, requires_grad=True)
    out = logsumexp(z, beta)
    assert_same_math(out, torch.logsumexp(beta * z, dim=-1) / beta, n=7)
    (grad,) = torch.autograd.grad(out.sum(), z)
    assert_same_math(grad, torch.softmax(beta * z, dim=-1), n=2 * 7)
    assert_same_math(free_energy(z, beta), -out, n=7)


def test_logsumexp_large_beta_tends_to_max_and_bounds():
    z = torch.tensor([[1.0, 3.0, 2.5], [-4.0, 0.0, 0.1]], dtype=torch.float64)
    mx = z.max(-1).values
    rounding = tol(torch.float64, n=3, scale=4.0)["atol"]  # log-sum-exp of 3 terms of size <= 4
    for beta in [1.0, 10.0, 100.0]:
        lse = logsumexp(z, beta)
        assert torch.all(lse >= mx) and torch.all(lse <= mx + math.log(3) / beta + rounding)
    # the bound log(3) / beta is loose here: the runner-up is >= 0.1 below the max, so it adds
    # exp(-1e4 * 0.1) / 1e4 = 0 and only rounding is left
    assert_close(logsumexp(z, 1e4), mx, n=3)


def test_logsumexp_extreme_values_and_gradcheck():
    z = torch.tensor([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4]])
    out = logsumexp(z)
    assert torch.isfinite(out).all()
    assert_close(out, torch.tensor([1e4, -1e4 + math.log(3)]), n=3)
    assert logsumexp(torch.full((2,), -math.inf)).item() == -math.inf
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: logsumexp(t, 2.0), (x,))
    assert_same_math(log_softmax(x), F.log_softmax(x, -1), n=4)


def test_logsumexp_bad_input():
    with pytest.raises(ValueError, match="scalar"):
        logsumexp(torch.tensor(1.0))
    with pytest.raises(ValueError, match="beta"):
        logsumexp(torch.randn(3), beta=0.0)


# --- cross-entropy -----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 2), (8, 5), (3, 6, 11), (2, 1, 4), (5, 9, 3)])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.37, 1.0])
def test_cross_entropy_matches_torch(device, shape, smoothing):
    g = torch.Generator().manual_seed(sum(shape))
    logits = (3 * torch.randn(*shape, generator=g, dtype=torch.float64)).to(device).requires_grad_()
    target = torch.randint(0, shape[-1], shape[:-1], generator=g).to(device)
    ours = cross_entropy(logits, target, label_smoothing=smoothing)
    ref = _torch_ce(logits, target, label_smoothing=smoothing)
    n = math.prod(shape)  # log-softmax over C, then the mean over the positions
    assert_same_math(ours, ref, n=n)
    (g_ours,) = torch.autograd.grad(ours, logits)
    (g_ref,) = torch.autograd.grad(ref, logits)
    assert_same_math(g_ours, g_ref, n=n)


@pytest.mark.parametrize("ignore_index", [-100, 0, 2])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_ignore_index_matches_torch(device, ignore_index, smoothing):
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(4, 6, 5, generator=g, dtype=torch.float64).to(device).requires_grad_()
    target = torch.randint(0, 5, (4, 6), generator=g)
    target[0, 3:] = ignore_index  # a padded tail
    target[2, -1] = ignore_index
    target = target.to(device)
    ours = cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=ignore_index)
    ref = _torch_ce(logits, target, label_smoothing=smoothing, ignore_index=ignore_index)
    assert_same_math(ours, ref, n=4 * 6 * 5)
    (g_ours,) = torch.autograd.grad(ours, logits)
    (g_ref,) = torch.autograd.grad(ref, logits)
    assert_same_math(g_ours, g_ref, n=4 * 6 * 5)
    # ignored positions receive no gradient at all
    assert torch.all(g_ours[target == ignore_index] == 0)


@pytest.mark.parametrize("gamma", [0.0, 0.5, 2.0, 3.0])
def test_focal_loss_is_its_formula_and_cross_entropy_at_gamma_0(device, gamma):
    g = torch.Generator().manual_seed(8)
    logits = torch.randn(4, 6, 5, generator=g, dtype=torch.float64).to(device).requires_grad_()
    target = torch.randint(0, 5, (4, 6), generator=g)
    target[1, 2:] = -100  # a padded tail
    target = target.to(device)
    ours = focal_loss(logits, target, gamma=gamma, ignore_index=-100)
    keep = target != -100
    q_y = logits.softmax(-1).gather(-1, target.clamp(min=0)[..., None])[..., 0][keep]
    ref = (-((1 - q_y) ** gamma) * q_y.log()).mean()  # Lin et al.'s eq., written directly
    assert_same_math(ours, ref, n=4 * 6 * 5)
    (g_ours,) = torch.autograd.grad(ours, logits)
    (g_ref,) = torch.autograd.grad(ref, logits)
    assert_same_math(g_ours, g_ref, n=4 * 6 * 5)
    assert torch.all(g_ours[~keep] == 0)  # ignored positions: no gradient
    if gamma == 0:
        torch.testing.assert_close(ours, _torch_ce(logits, target, ignore_index=-100))


@pytest.mark.parametrize("gamma", [0.0, 0.25, 1.0, 2.0])
def test_focal_loss_of_a_sure_position_is_zero_with_zero_gradient(gamma):
    # q_y rounds to exactly 1: (1 - q_y)^gamma has an infinite slope there for gamma < 1
    logits = torch.tensor([[200.0, 0.0, 0.0], [0.0, 1.0, 0.0]], requires_grad=True)
    target = torch.tensor([0, 1])
    loss = focal_loss(logits, target, gamma=gamma)
    (grad,) = torch.autograd.grad(loss, logits)
    assert torch.isfinite(grad).all() and torch.all(grad[0] == 0)
    other = focal_loss(logits[1:].detach(), target[1:], gamma=gamma)
    torch.testing.assert_close(loss, other / 2)  # the sure row adds 0 to the sum


def test_focal_loss_down_weights_confident_positions():
    # the same two rows with gamma = 2: the confident one loses far more of its loss
    logits = torch.tensor([[3.0, 0.0, 0.0], [0.3, 0.0, 0.0]])
    target = torch.tensor([0, 0])
    ce = torch.stack([cross_entropy(logits[i : i + 1], target[i : i + 1]) for i in (0, 1)])
    fl = torch.stack([focal_loss(logits[i : i + 1], target[i : i + 1]) for i in (0, 1)])
    ratio = fl / ce  # (1 - q_y)^2 per row
    assert ratio[0] < 0.02 < 0.3 < ratio[1] < 1


def test_focal_loss_half_precision_is_computed_in_float32():
    logits = torch.randn(6, 4, dtype=torch.float64)
    target = torch.randint(0, 4, (6,))
    half = focal_loss(logits.to(torch.bfloat16), target)
    assert half.dtype == torch.float32
    torch.testing.assert_close(half, focal_loss(logits.to(torch.bfloat16).float(), target))


def test_ignore_index_equals_masked_mean_and_is_padding_invariant():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 8, 6, generator=g, dtype=torch.float64)
    target = torch.randint(1, 6, (3, 8), generator=g)
    mask = torch.ones(3, 8, dtype=torch.bool)
    mask[1, 5:] = False
    target[~mask] = 0
    per_tok = -F.log_softmax(logits, -1).gather(-1, target[..., None]).squeeze(-1)
    n = 6 + 3 * 8  # log-softmax over 6 classes, mean over 24 positions
    assert_same_math(cross_entropy(logits, target, ignore_index=0), per_tok[mask].mean(), n=n)
    # padding two more (arbitrary) positions onto every row changes nothing
    logits2 = torch.cat([logits, torch.randn(3, 2, 6, generator=g, dtype=torch.float64)], 1)
    target2 = torch.cat([target, torch.zeros(3, 2, dtype=torch.long)], 1)
    longer = cross_entropy(logits2, target2, ignore_index=0)
    assert_same_math(longer, cross_entropy(logits, target, ignore_index=0), n=n + 6)


def test_cross_entropy_all_ignored_is_nan_like_torch():
    logits = torch.randn(2, 3, 4)
    target = torch.full((2, 3), -100)
    assert torch.isnan(cross_entropy(logits, target, ignore_index=-100))
    assert torch.isnan(_torch_ce(logits, target, ignore_index=-100))


def test_cross_entropy_stable_for_huge_logits(device):
    logits = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4], [1e4, 1e4, 1e4]], device=device)
    target = torch.tensor([0, 0, 2], device=device)
    loss_each = [cross_entropy(logits[i : i + 1], target[i : i + 1]) for i in range(3)]
    assert all(torch.isfinite(v) for v in loss_each)
    # float32 sums of 3 terms of size up to 2e4: rounding is relative to that size, not to the result
    assert_close(loss_each[0], torch.tensor(0.0, device=device), n=3, scale=2e4)
    assert_close(loss_each[1], torch.tensor(2e4 + math.log(2), device=device), n=3, scale=2e4)
    assert_close(loss_each[2], torch.tensor(math.log(3), device=device), n=3, scale=2e4)
    logits = logits.requires_grad_()
    for smoothing in [0.0, 0.1]:
        ours = cross_entropy(logits, target, label_smoothing=smoothing)
        ref = F.cross_entropy(logits, target, label_smoothing=smoothing)
        assert torch.isfinite(ours)
        assert_close(ours, ref, n=3 * 3, scale=2e4)
        (grad,) = torch.autograd.grad(ours, logits)
        assert torch.isfinite(grad).all()
    # the naive formula log(sum(exp(z))) overflows where ours does not
    assert not torch.isfinite(torch.log(torch.exp(logits.detach()).sum(-1))).all()


def test_cross_entropy_half_precision_is_computed_in_float32():
    logits = torch.randn(4, 10).to(torch.bfloat16)
    target = torch.randint(0, 10, (4,))
    out = cross_entropy(logits, target)
    assert out.dtype == torch.float32
    assert_close(out, F.cross_entropy(logits.float(), target), n=10 + 4)


def test_label_smoothing_gradient_is_softmax_minus_smoothed_target():
    logits = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([0, 1, 2, 3, 0, 1])
    eps = 0.3
    (grad,) = torch.autograd.grad(cross_entropy(logits, target, label_smoothing=eps), logits)
    q_prime = smooth_labels(target, 4, eps, dtype=torch.float64)
    assert_close(q_prime.sum(-1), torch.ones(6, dtype=torch.float64), n=4)
    assert_close(q_prime[0], torch.tensor([0.775, 0.075, 0.075, 0.075], dtype=torch.float64), n=1)
    assert_same_math(grad * 6, torch.softmax(logits, -1) - q_prime, n=2 * 4 + 6)
    assert grad.abs().max() * 6 <= 1


def test_cross_entropy_bad_input():
    logits = torch.randn(4, 5)
    with pytest.raises(ValueError, match=r"target must lie in \[0, 5\).*\[0, 5\]"):
        cross_entropy(logits, torch.tensor([0, 1, 2, 5]))
    with pytest.raises(ValueError, match=r"target must lie in"):
        cross_entropy(logits, torch.tensor([0, -1, 2, 3]))
    with pytest.raises(ValueError, match=r"target must have shape \(B,\) = \(4,\).*got \(3,\)"):
        cross_entropy(logits, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"target must have shape \(B, T\) = \(2, 3\).*got \(2, 4\)"):
        cross_entropy(torch.randn(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"logits must have shape \(B, C\) or \(B, T, C\), got \(5,\)"):
        cross_entropy(torch.randn(5), torch.tensor(1))
    with pytest.raises(ValueError, match=r"logits must have shape .*got \(1, 2, 3, 4\)"):
        cross_entropy(torch.randn(1, 2, 3, 4), torch.zeros(1, 2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="integer class ids"):
        cross_entropy(logits, torch.zeros(4))
    with pytest.raises(ValueError, match="label_smoothing"):
        cross_entropy(logits, torch.zeros(4, dtype=torch.long), label_smoothing=1.5)
    with pytest.raises(TypeError, match="floating-point"):
        cross_entropy(torch.zeros(4, 5, dtype=torch.long), torch.zeros(4, dtype=torch.long))
    # the ignore value itself may be out of range
    assert torch.isfinite(cross_entropy(logits, torch.tensor([0, -100, 2, 4]), ignore_index=-100))


# --- the chunked cross-entropy of an output layer ----------------------------------------------


@pytest.mark.parametrize("chunk_size", [1, 5, 16, 37, 4096])
@pytest.mark.parametrize("ignore_index", [None, -100, 3])
def test_chunked_cross_entropy_equals_the_full_loss_and_gradients(device, chunk_size, ignore_index):
    g = torch.Generator().manual_seed(chunk_size)
    h = torch.randn(37, 8, generator=g, dtype=torch.float64).to(device).requires_grad_()
    w = torch.randn(11, 8, generator=g, dtype=torch.float64).to(device).requires_grad_()
    y = torch.randint(0, 11, (37,), generator=g).to(device)
    if ignore_index is not None:
        y[:6] = ignore_index  # the whole first chunk ignored, for the small chunk sizes
        y[10::4] = ignore_index
    out = chunked_cross_entropy(h, w, y, chunk_size=chunk_size, ignore_index=ignore_index)
    want = F.cross_entropy(h @ w.T, y, ignore_index=-100 if ignore_index is None else ignore_index)
    assert out.dtype == torch.float64
    assert_same_math(out, want, n=37 * 11)
    for a, b in zip(torch.autograd.grad(out, (h, w)), torch.autograd.grad(want, (h, w)), strict=True):
        assert_same_math(a, b, n=37 * 11)


def test_chunked_cross_entropy_keeps_no_logits_for_the_backward_pass():
    N, D, V = 64, 4, 1000
    h, w = torch.randn(N, D, requires_grad=True), torch.randn(V, D, requires_grad=True)
    y = torch.randint(0, V, (N,))
    shapes = []

    def pack(t):
        shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = chunked_cross_entropy(h, w, y, chunk_size=8)
    assert shapes and all(math.prod(s) <= V * D for s in shapes), shapes  # inputs and their views
    loss.backward()  # the logits are computed again, a chunk at a time
    assert h.grad.shape == (N, D) and w.grad.shape == (V, D)


def test_chunked_cross_entropy_scores_half_precision_in_float32():
    g = torch.Generator().manual_seed(0)
    h, w = torch.randn(20, 8, generator=g), torch.randn(30, 8, generator=g)
    y = torch.randint(0, 30, (20,), generator=g)
    out = chunked_cross_entropy(h.bfloat16(), w.bfloat16(), y, chunk_size=7)
    assert out.dtype == torch.float32
    want = F.cross_entropy((h.bfloat16() @ w.bfloat16().T).float(), y)
    torch.testing.assert_close(out, want, rtol=1e-2, atol=1e-2)  # bfloat16 products, any blocking
    assert torch.isnan(chunked_cross_entropy(h, w, torch.full((20,), -1), ignore_index=-1))  # 0 / 0


# --- the adaptive softmax ----------------------------------------------------------------------


@pytest.mark.parametrize(("D", "V", "cutoffs", "div_value"),
                         [(16, 100, [10, 40], 4.0), (8, 20, [3], 2.0), (32, 50, [5, 10, 30], 2.0),
                          (12, 30, [29], 3.0)])
def test_adaptive_softmax_equals_torch(device, D, V, cutoffs, div_value):
    torch.manual_seed(V)
    ours = AdaptiveSoftmax(D, V, cutoffs, div_value).double().to(device)
    ref = torch.nn.AdaptiveLogSoftmaxWithLoss(D, V, cutoffs, div_value=div_value).double().to(device)
    ref.load_state_dict(ours.state_dict())  # the same names and shapes
    h = torch.randn(200, D, dtype=torch.float64, device=device, requires_grad=True)
    y = torch.randint(0, V, (200,), device=device)
    y[:3] = torch.tensor([0, V - 1, cutoffs[0]])  # both ends, and the first class of a cluster
    loss, want = ours(h, y), ref(h, y).loss
    assert_same_math(loss, want, n=V)
    for a, b in zip(torch.autograd.grad(loss, (h, *ours.parameters())),
                    torch.autograd.grad(want, (h, *ref.parameters())), strict=True):
        assert_same_math(a, b, n=V)
    logp = ours.log_prob(h)
    assert logp.shape == (200, V)
    assert_same_math(logp, ref.log_prob(h), n=V)
    assert_same_math(logp.exp().sum(-1), torch.ones(200, dtype=torch.float64, device=device), n=V)
    # the loss is the mean of the rows' log-probabilities of their targets
    assert_same_math(loss, -logp.gather(1, y[:, None]).mean(), n=V)


def test_adaptive_softmax_scores_a_cluster_only_for_its_rows():
    ours = AdaptiveSoftmax(16, 30, [5, 15])
    seen = []
    for i, tail in enumerate(ours.tail):
        tail.register_forward_hook(lambda m, inp, out, i=i: seen.append((i, inp[0].shape[0])))
    y = torch.tensor([0, 1, 6, 7, 8, 2])  # three rows in cluster 0, none in cluster 1
    ours(torch.randn(6, 16), y).backward()
    assert seen == [(0, 3), (1, 0)]
    assert all(p.grad is not None for p in ours.head.parameters())
    assert torch.count_nonzero(ours.tail[1][1].weight.grad) == 0  # no row: no gradient


# --- entropy, KL, cross-entropy between distributions, perplexity --------------------------------


def test_entropy_kl_identities(device):
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(5, 8, generator=g, dtype=torch.float64), -1).to(device)
    q = torch.softmax(torch.randn(5, 8, generator=g, dtype=torch.float64), -1).to(device)
    # eq. (7.2): H(p, q) = H(p) + D(p || q), in nats and in bits
    n = 2 * 8  # sums over C = 8, twice for the sum of two of them
    for base in [None, 2]:
        assert_same_math(cross_entropy_dist(p, q, base), entropy(p, base) + kl_divergence(p, q, base), n=n)
    assert_same_math(entropy(p, 2), entropy(p) / math.log(2), n=n)
    # Gibbs' inequality, and D(p || p) = 0
    assert torch.all(kl_divergence(p, q) > 0)
    assert_close(kl_divergence(p, p), torch.zeros(5, dtype=torch.float64, device=device), n=n)
    # against torch.distributions and F.kl_div
    ref_h = torch.distributions.Categorical(probs=p).entropy()
    assert_same_math(entropy(p), ref_h, n=n)
    assert_same_math(kl_divergence(p, q), F.kl_div(q.log(), p, reduction="none").sum(-1), n=n)
    # uniform distribution: the largest entropy, log C
    u = torch.full((8,), 1 / 8, dtype=torch.float64)
    assert_close(entropy(u, 2), torch.tensor(3.0, dtype=torch.float64), n=8)


def test_zero_log_zero_is_zero():
    p = torch.tensor([0.5, 0.5, 0.0])
    q = torch.tensor([0.25, 0.25, 0.5])
    assert_close(entropy(p, 2), torch.tensor(1.0), n=3)
    assert_close(kl_divergence(p, q, 2), torch.tensor(1.0), n=3)
    assert entropy(torch.tensor([1.0, 0.0, 0.0])).item() == 0.0
    assert kl_divergence(q, p).item() == math.inf  # q puts mass where p has none


def test_cross_entropy_on_logits_equals_distribution_form():
    logits = torch.randn(6, 5, dtype=torch.float64)
    target = torch.randint(0, 5, (6,))
    for eps in [0.0, 0.25]:
        q_prime = smooth_labels(target, 5, eps, dtype=torch.float64)
        direct = cross_entropy_dist(q_prime, torch.softmax(logits, -1)).mean()
        assert_same_math(cross_entropy(logits, target, label_smoothing=eps), direct, n=2 * 5 + 6)


def test_distribution_bad_input():
    with pytest.raises(ValueError, match="same shape"):
        kl_divergence(torch.full((3,), 1 / 3), torch.full((4,), 1 / 4))
    with pytest.raises(ValueError, match="non-negative"):
        entropy(torch.tensor([1.5, -0.5]))
    with pytest.raises(ValueError, match="sum to 1"):
        entropy(torch.tensor([0.5, 0.6]))
    with pytest.raises(ValueError, match="base"):
        entropy(torch.tensor([0.5, 0.5]), base=1)


def test_perplexity():
    assert perplexity(math.log(27)) == approx(27.0)  # Python floats: float64
    assert perplexity(3.0, base=2) == approx(8.0)
    nll = torch.tensor([math.log(2.0), math.log(8.0)])
    assert_close(perplexity(nll), torch.tensor(4.0), n=2)  # exp of the mean, not the mean of exps
    # a uniform model over C classes has perplexity C
    logits = torch.zeros(10, 13)
    uniform = perplexity(cross_entropy(logits, torch.randint(0, 13, (10,))))
    assert_close(uniform, torch.tensor(13.0), n=13 + 10)
    with pytest.raises(ValueError, match="empty"):
        perplexity(torch.tensor([]))


# --- calibration -------------------------------------------------------------------------------


def test_expected_calibration_error():
    # 4 predictions at confidence 0.75, three right: bin accuracy 0.75, gap 0
    probs = torch.tensor([[0.75, 0.25]] * 4)
    target = torch.tensor([0, 0, 0, 1])
    f32 = torch.float32  # the bins are float32 means of at most 4 numbers
    assert expected_calibration_error(probs, target, n_bins=10) == approx(0.0, f32, n=4)
    conf, acc, count = calibration_bins(probs, target, n_bins=10)
    assert int(count.sum()) == 4 and int(count[7]) == 4  # 0.75 falls in (0.7, 0.8]
    assert acc[7].item() == approx(0.75, f32, n=4) and conf[7].item() == approx(0.75, f32, n=4)
    # two right at confidence 0.5 (bin 4), one wrong at 0.625 (bin 6): ECE = (2*0.5 + 0.625) / 3
    probs = torch.tensor([[0.5, 0.5], [0.5, 0.5], [0.625, 0.375]])
    ece = expected_calibration_error(probs, torch.tensor([0, 0, 1]), n_bins=10)
    assert ece == approx((2 * 0.5 + 0.625) / 3, f32, n=4)
    # a perfectly calibrated toy set: confidence 1 and always right
    assert expected_calibration_error(torch.eye(3), torch.arange(3)) == approx(0.0, f32, n=4)
    # always wrong with confidence 1: ECE 1
    assert expected_calibration_error(torch.eye(3), torch.tensor([1, 2, 0])) == approx(1.0, f32, n=4)
    with pytest.raises(ValueError, match=r"probs must have shape \(N, C\)"):
        expected_calibration_error(torch.rand(3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"target must have shape \(N,\)"):
        expected_calibration_error(torch.eye(3), torch.zeros(2, dtype=torch.long))


def _binned_gap_loops(conf: list[float], hit: list[float], n_bins: int, bins: str) -> float:
    """sum_b n_b / N |acc_b - conf_b|, written with Python lists: bins of equal width, or of
    equal size over the predictions sorted by confidence (the first N mod n_bins one larger)."""
    n = len(conf)
    if bins == "width":
        members = [[i for i in range(n) if min(max(math.ceil(conf[i] * n_bins) - 1, 0),
                                               n_bins - 1) == b] for b in range(n_bins)]
    else:
        order = sorted(range(n), key=lambda i: conf[i])
        sizes = [n // n_bins + (b < n % n_bins) for b in range(n_bins)]
        bin_of_rank = [b for b, size in enumerate(sizes) for _ in range(size)]
        first_bin = {}  # equal confidences: all in the bin of the first of them
        for rank, i in enumerate(order):
            first_bin.setdefault(conf[i], bin_of_rank[rank])
        members = [[i for i in range(n) if first_bin[conf[i]] == b] for b in range(n_bins)]
    total = 0.0
    for m in members:
        if m:
            acc = sum(hit[i] for i in m) / len(m)
            mean_conf = sum(conf[i] for i in m) / len(m)
            total += len(m) / n * abs(acc - mean_conf)
    return total


@pytest.mark.parametrize("bins", ["width", "mass"])
@pytest.mark.parametrize("n_bins", [1, 10, 15])
def test_expected_calibration_error_bins_and_classwise(bins, n_bins):
    g = torch.Generator().manual_seed(n_bins)
    probs = torch.softmax(2 * torch.randn(1003, 7, generator=g, dtype=torch.float64), -1)
    target = torch.randint(7, (1003,), generator=g)
    conf, pred = probs.max(-1)
    top = _binned_gap_loops(conf.tolist(), (pred == target).double().tolist(), n_bins, bins)
    f64 = torch.float64
    assert expected_calibration_error(probs, target, n_bins, bins=bins) == approx(top, f64, n=1003)
    per_class = [_binned_gap_loops(probs[:, k].tolist(), (target == k).double().tolist(), n_bins,
                                   bins) for k in range(7)]
    assert expected_calibration_error(probs, target, n_bins, bins=bins, classwise=True) == approx(
        sum(per_class) / 7, f64, n=1003)


@pytest.mark.parametrize("classwise", [False, True])
def test_expected_calibration_error_ties_and_few_predictions(classwise):
    # confidences on a grid of eighths: many ties, which equal-mass bins keep together, so the
    # order of the rows cannot change the value
    g = torch.Generator().manual_seed(3)
    probs = torch.softmax(3 * torch.randn(500, 6, generator=g, dtype=torch.float64), -1)
    probs = (probs * 8).round().clamp(min=1) / 8
    probs = probs / probs.sum(-1, keepdim=True)
    target = torch.randint(6, (500,), generator=g)
    perm = torch.randperm(500, generator=g)
    f64 = torch.float64
    for n_bins in (4, 15):
        e = expected_calibration_error(probs, target, n_bins, bins="mass", classwise=classwise)
        assert expected_calibration_error(probs[perm], target[perm], n_bins, bins="mass",
                                          classwise=classwise) == approx(e, f64, n=500)
        if classwise:
            want = sum(_binned_gap_loops(probs[:, k].tolist(), (target == k).double().tolist(),
                                         n_bins, "mass") for k in range(6)) / 6
        else:
            conf, pred = probs.max(-1)
            want = _binned_gap_loops(conf.tolist(), (pred == target).double().tolist(), n_bins,
                                     "mass")
        assert e == approx(want, f64, n=500)
    # the uniform classifier on balanced labels, sorted or not: one bin, a gap of 0
    uniform, labels = torch.full((40, 4), 0.25), torch.arange(40) % 4
    for y in (labels, labels.sort().values):
        assert expected_calibration_error(uniform, y, bins="mass", classwise=classwise) == approx(
            0.0, torch.float32, n=40)
    # fewer predictions than bins: empty bins add nothing
    few, few_y = probs[:3], target[:3]
    for bins in ("width", "mass"):
        e = expected_calibration_error(few, few_y, 15, bins=bins, classwise=classwise)
        e_one_each = expected_calibration_error(few, few_y, 3, bins="mass", classwise=classwise)
        if bins == "mass" and not classwise:  # three predictions, three bins: one each at most
            assert e == approx(e_one_each, f64, n=3)
            conf, pred = few.max(-1)
            if len(set(conf.tolist())) == 3:  # a bin each: the mean of |hit - confidence|
                assert e == approx(((pred == few_y).double() - conf).abs().mean().item(), f64, n=3)
        assert 0 <= e <= 1


def test_expected_calibration_error_by_hand():
    # equal mass, two bins: the confidences 0.6, 0.7 (one right) and 0.8, 0.9
    # (both right): |0.5 - 0.65| / 2 + |1 - 0.85| / 2 = 0.15
    probs = torch.tensor([[0.6, 0.4], [0.3, 0.7], [0.8, 0.2], [0.1, 0.9]], dtype=torch.float64)
    target = torch.tensor([0, 0, 0, 1])
    f64 = torch.float64
    assert expected_calibration_error(probs, target, 2, bins="mass") == approx(0.15, f64, n=4)
    # equal width, two bins: all four above 0.5, one bin: |0.75 - 0.75| = 0
    assert expected_calibration_error(probs, target, 2) == approx(0.0, f64, n=4)
    # a classifier that knows nothing, on balanced labels: calibrated class by class too
    uniform = torch.full((20, 4), 0.25)
    labels = torch.arange(20) % 4
    assert expected_calibration_error(uniform, labels, classwise=True) == approx(
        0.0, torch.float32, n=20)
    # the default is the top-label ECE with equal-width bins of calibration_bins
    c, a, n = calibration_bins(probs, target, 15)
    assert expected_calibration_error(probs, target) == approx(
        float((n / n.sum() * (a - c).abs()).sum()), f64, n=4)
    with pytest.raises(ValueError, match=r"bins must be one of \['mass', 'width'\], got 'equal'"):
        expected_calibration_error(probs, target, bins="equal")
    with pytest.raises(TypeError, match="classwise must be a bool"):
        expected_calibration_error(probs, target, classwise=1.0)


# --- similarity loss ---------------------------------------------------------------------------


def test_similarity_loss():
    g = torch.Generator().manual_seed(0)
    codebook = 2 * torch.rand(4, 512, generator=g) - 1
    target = torch.tensor([0, 3])
    n = 512 + 2  # the mean over D = 512, then over the batch
    assert_close(similarity_loss(codebook[target], codebook, target), torch.tensor(0.0), n=n)
    # opposite phases: similarity -1, loss 2; random symbols: similarity about 0, loss about 1
    opposite = codebook[target] + 1.0
    assert_close(similarity_loss(opposite, codebook, target), torch.tensor(2.0), n=n)
    assert abs(similarity_loss(codebook[[1, 2]], codebook, target).item() - 1.0) < 0.15
    x = torch.zeros(2, 512, requires_grad=True)
    loss = similarity_loss(x, codebook, target)
    (grad,) = torch.autograd.grad(loss, x)
    expected = -math.pi / 512 * torch.sin(math.pi * (codebook[target] - 0.0)) / 2
    assert_close(grad, expected, n=2)  # elementwise: a sine and a few products
    with pytest.raises(ValueError, match="codebook"):
        similarity_loss(torch.zeros(2, 8), codebook, target)


def test_similarity_logits():
    g = torch.Generator().manual_seed(1)
    codebook = 2 * torch.rand(5, 64, generator=g, dtype=torch.float64) - 1
    x = 2 * torch.rand(3, 64, generator=g, dtype=torch.float64) - 1
    logits = similarity_logits(x, codebook, scale=4.0)
    assert logits.shape == (3, 5)
    expected = 4.0 * torch.cos(math.pi * (x[1] - codebook[2])).mean()
    assert_same_math(logits[1, 2], expected, n=64)
    # the similarity loss is 1 minus the (scale 1) logit of the true class
    target = torch.tensor([4, 0, 2])
    sims = similarity_logits(x, codebook).gather(1, target[:, None]).squeeze(1)
    assert_same_math(similarity_loss(x, codebook, target), (1 - sims).mean(), n=64 + 3)
    with pytest.raises(ValueError, match=r"x must have shape \(B, n\)"):
        similarity_logits(torch.zeros(3, 63), codebook)
