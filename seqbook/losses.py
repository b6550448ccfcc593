"""Losses and the information quantities behind them.

Everything here works along the last dimension of its inputs. Cross-entropy is built from a
log-sum-exp written out (subtract the maximum before exponentiating), so logits of any size give
finite losses. Reading order:

1. ``logsumexp`` / ``free_energy`` / ``log_softmax``: the stable core (and its physics name).
2. ``cross_entropy``: the classification and language-model loss, equal to ``F.cross_entropy``
   with its label-smoothing and ``ignore_index`` conventions.
3. ``entropy``, ``kl_divergence``, ``cross_entropy_dist``, ``perplexity``: the quantities of
   eq. (7.1)-(7.2) on probability vectors.
4. ``expected_calibration_error``, ``calibration_bins``, ``reliability_diagram``: calibration.
5. ``similarity_loss``, ``similarity_logits``: the phasor-similarity loss of the VSA chapter
   (1 - similarity), and similarities used as logits.
"""

from __future__ import annotations

import math

import torch

from .vsa import _similarity as _fhrr_similarity  # mean cos(pi (a - b)), unchecked: x is trained freely

# ---------------------------------------------------------------------------------------------
# 1. Log-sum-exp, free energy, log-softmax.
# ---------------------------------------------------------------------------------------------


def logsumexp(z: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    r"""Smooth maximum of ``z`` along the last dimension at inverse temperature ``beta``.

    .. math:: \operatorname{lse}(\beta, z) = \beta^{-1} \log \sum_k \exp(\beta z_k)
              = m + \beta^{-1} \log \sum_k \exp(\beta (z_k - m)),\quad m = \max_k z_k

    Subtracting the maximum makes every exponent <= 0, so nothing overflows; the largest term is
    exp(0) = 1, so the sum is >= 1 and its log is finite. ``max(z) <= lse <= max(z) + log(C)/beta``.

    Shape:
        z: (..., C) -> (...)
    """
    if z.dim() == 0:
        raise ValueError("z must have at least one dimension (..., C), got a scalar")
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    m = z.max(dim=-1, keepdim=True).values.detach()  # (..., 1); a constant shift, no gradient needed
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # all -inf rows: keep -inf, no NaN
    out = m + torch.log(torch.exp(beta * (z - m)).sum(dim=-1, keepdim=True)) / beta  # (..., 1)
    return out.squeeze(-1)


def free_energy(z: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    r"""Helmholtz free energy of states with energies ``E_k = -z_k`` at inverse temperature ``beta``.

    .. math:: F = -\beta^{-1} \log \sum_k \exp(-\beta E_k) = -\operatorname{lse}(\beta, z)

    Its Boltzmann distribution is ``softmax(beta * z)``; cross-entropy is ``E_y - F`` (beta = 1).

    Shape:
        z: (..., C) -> (...)
    """
    return -logsumexp(z, beta)


def log_softmax(z: torch.Tensor) -> torch.Tensor:
    r"""``log softmax(z)_k = z_k - lse(z)`` along the last dimension.

    Computed as ``(z_k - m) - log sum_j exp(z_j - m)`` with ``m = max z``: both terms are small, so
    no precision is lost subtracting two large numbers (e.g. logits near 1e4 in float32).

    Shape:
        z: (..., C) -> (..., C)
    """
    if z.dim() == 0:
        raise ValueError("z must have at least one dimension (..., C), got a scalar")
    m = z.max(dim=-1, keepdim=True).values.detach()  # (..., 1)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    shifted = z - m  # (..., C), every entry <= 0
    return shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))


# ---------------------------------------------------------------------------------------------
# 2. Cross-entropy on logits.
# ---------------------------------------------------------------------------------------------


def smooth_labels(target: torch.Tensor, num_classes: int, label_smoothing: float = 0.0,
                  dtype: torch.dtype | None = None) -> torch.Tensor:
    r"""The smoothed target distribution of eq. (7.3): ``(1 - eps) * onehot(y) + eps / C``.

    The smoothing mass ``eps`` is spread uniformly over all C classes, the true one included (this
    is PyTorch's convention), so the true class gets ``1 - eps + eps / C``.

    Shape:
        target: (...) integer ids in [0, C) -> (..., C) of ``dtype`` (default: torch's default dtype)
    """
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    _check_target_range(target, num_classes, None)
    onehot = torch.nn.functional.one_hot(target, num_classes).to(dtype or torch.get_default_dtype())
    return (1.0 - label_smoothing) * onehot + label_smoothing / num_classes


def _check_target_range(target: torch.Tensor, num_classes: int, ignore_index: int | None) -> None:
    if target.dtype in (torch.bool,) or target.is_floating_point() or target.is_complex():
        raise ValueError(f"target must hold integer class ids, got dtype {target.dtype}")
    valid = target if ignore_index is None else target[target != ignore_index]
    if valid.numel() and (valid.min() < 0 or valid.max() >= num_classes):
        lo, hi = int(valid.min()), int(valid.max())
        extra = "" if ignore_index is None else f" (or ignore_index={ignore_index})"
        raise ValueError(f"target must lie in [0, {num_classes}){extra}, got values in [{lo}, {hi}]")


def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    label_smoothing: float = 0.0,
    ignore_index: int | None = None,
) -> torch.Tensor:
    r"""Mean cross-entropy between softmax(logits) and the (optionally smoothed) one-hot targets.

    For one position with logits z and true class y, with q = softmax(z) and eps = label_smoothing:

    .. math:: \ell = (1 - \varepsilon)\,[-\log q_y] + \frac{\varepsilon}{C} \sum_{k=1}^{C} [-\log q_k],
              \qquad -\log q_k = \operatorname{lse}(z) - z_k

    which is eq. (7.1) with the target of eq. (7.3). The loss is averaged over the positions whose
    target is not ``ignore_index`` (ignored positions count neither in the sum nor in the divisor),
    exactly like ``torch.nn.functional.cross_entropy(..., reduction="mean")``. If every position is
    ignored the mean is 0/0 = NaN, as in PyTorch. Half-precision logits are computed in float32.

    Shape:
        logits: (B, C) or (B, T, C)
        target: (B,) or (B, T), integer ids in [0, C) or equal to ``ignore_index``
        output: scalar
    """
    if logits.dim() not in (2, 3):
        raise ValueError(f"logits must have shape (B, C) or (B, T, C), got {tuple(logits.shape)}")
    if not logits.is_floating_point():
        raise ValueError(f"logits must be a floating-point tensor, got dtype {logits.dtype}")
    C = logits.shape[-1]
    if C < 1:
        raise ValueError(f"logits must have at least one class, got shape {tuple(logits.shape)}")
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        want = "(B,)" if logits.dim() == 2 else "(B, T)"
        raise ValueError(
            f"target must have shape {want} = {tuple(logits.shape[:-1])} to match logits "
            f"{tuple(logits.shape)}, got {tuple(target.shape)}"
        )
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    _check_target_range(target, C, ignore_index)

    z = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
    logq = log_softmax(z)  # (B, [T,] C) log-probabilities, z_k - lse(z)
    keep = torch.ones_like(target, dtype=torch.bool) if ignore_index is None else target != ignore_index
    safe = torch.where(keep, target, torch.zeros_like(target))  # ignored ids may be out of range
    nll = -logq.gather(-1, safe.unsqueeze(-1)).squeeze(-1)  # (B, [T]) -log q_y
    loss = (1.0 - label_smoothing) * nll
    if label_smoothing > 0:
        loss = loss + label_smoothing / C * (-logq.sum(-1))  # (B, [T]) uniform part of eq. (7.3)
    loss = torch.where(keep, loss, torch.zeros_like(loss))
    return loss.sum() / keep.sum()


# ---------------------------------------------------------------------------------------------
# 3. Entropy, KL divergence, cross-entropy between distributions, perplexity.
# ---------------------------------------------------------------------------------------------


def _log_base(base: float | None) -> float:
    if base is None:
        return 1.0
    if not (base > 0 and base != 1):
        raise ValueError(f"base must be > 0 and != 1, got {base}")
    return math.log(base)


def _check_probs(name: str, p: torch.Tensor) -> None:
    if p.dim() == 0:
        raise ValueError(f"{name} must have shape (..., C), got a scalar")
    if not p.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {p.dtype}")
    if bool((p < 0).any()):
        raise ValueError(f"{name} must be non-negative (a probability vector along the last dim)")
    total = p.detach().sum(-1)
    if not torch.allclose(total, torch.ones_like(total), atol=1e-3, rtol=0):
        raise ValueError(f"{name} must sum to 1 along the last dim, got sums in "
                         f"[{float(total.min()):.4g}, {float(total.max()):.4g}]")


def entropy(p: torch.Tensor, base: float | None = None) -> torch.Tensor:
    r"""Shannon entropy ``H(p) = -sum_k p_k log p_k`` along the last dim, with 0 log 0 = 0.

    ``base=None`` gives nats, ``base=2`` bits.

    Shape:
        p: (..., C) probabilities -> (...)
    """
    _check_probs("p", p)
    return -torch.special.xlogy(p, p).sum(-1) / _log_base(base)


def _check_pair(p: torch.Tensor, q: torch.Tensor) -> None:
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {tuple(p.shape)} and {tuple(q.shape)}")
    _check_probs("p", p)
    _check_probs("q", q)


def kl_divergence(p: torch.Tensor, q: torch.Tensor, base: float | None = None) -> torch.Tensor:
    r"""Kullback-Leibler divergence ``D(p||q) = sum_k p_k log(p_k / q_k)`` along the last dim.

    Terms with p_k = 0 contribute 0; a class with p_k > 0 and q_k = 0 makes it +inf.

    Shape:
        p, q: (..., C) probabilities (same shape) -> (...)
    """
    _check_pair(p, q)
    return (torch.special.xlogy(p, p) - torch.special.xlogy(p, q)).sum(-1) / _log_base(base)


def cross_entropy_dist(p: torch.Tensor, q: torch.Tensor, base: float | None = None) -> torch.Tensor:
    r"""Cross-entropy between two distributions, eq. (7.1): ``H(p, q) = -sum_k p_k log q_k``.

    Equals ``entropy(p) + kl_divergence(p, q)`` (eq. 7.2).

    Shape:
        p, q: (..., C) probabilities (same shape) -> (...)
    """
    _check_pair(p, q)
    return -torch.special.xlogy(p, q).sum(-1) / _log_base(base)


def perplexity(nll: torch.Tensor | float, base: float | None = None) -> torch.Tensor | float:
    r"""Perplexity ``exp(mean negative log-likelihood)``: the effective number of equally likely
    choices the model hesitates between at each step.

    ``nll`` is a mean loss (a float or scalar tensor) or a tensor of per-token losses (averaged
    here), in nats, or in the unit of ``base`` (e.g. ``base=2`` for bits: perplexity = 2 ** nll).
    A uniform guess over C symbols has perplexity C.
    """
    scale = _log_base(base)
    if isinstance(nll, torch.Tensor):
        if nll.numel() == 0:
            raise ValueError("nll is empty: need at least one negative log-likelihood")
        return torch.exp(nll.float().mean() * scale)
    return math.exp(float(nll) * scale)


# ---------------------------------------------------------------------------------------------
# 4. Calibration.
# ---------------------------------------------------------------------------------------------


def calibration_bins(probs: torch.Tensor, target: torch.Tensor, n_bins: int = 15):
    """Bin predictions by confidence (the largest probability) into ``n_bins`` equal-width bins.

    Bin b holds the confidences in (b / n_bins, (b + 1) / n_bins] (the first also holds 0).

    Shape:
        probs: (N, C) probabilities; target: (N,) ids
    Returns:
        ``(confidence, accuracy, count)``, each of shape (n_bins,): the mean confidence and the
        accuracy inside each bin (0 for empty bins) and the number of predictions in it.
    """
    if probs.dim() != 2:
        raise ValueError(f"probs must have shape (N, C), got {tuple(probs.shape)}")
    if target.shape != probs.shape[:1]:
        raise ValueError(f"target must have shape (N,) = ({probs.shape[0]},), got {tuple(target.shape)}")
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    _check_target_range(target, probs.shape[1], None)
    probs = probs.detach().double()
    conf, pred = probs.max(dim=-1)  # (N,)
    correct = (pred == target).double()  # (N,)
    edges = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64, device=probs.device)
    idx = (torch.bucketize(conf, edges[1:-1], right=False)).clamp(0, n_bins - 1)  # (N,) bin ids
    count = torch.zeros(n_bins, dtype=torch.float64, device=probs.device)
    count.index_add_(0, idx, torch.ones_like(conf))  # (n_bins,)
    conf_sum = torch.zeros_like(count).index_add_(0, idx, conf)
    acc_sum = torch.zeros_like(count).index_add_(0, idx, correct)
    denom = count.clamp(min=1)
    return conf_sum / denom, acc_sum / denom, count.long()


def expected_calibration_error(probs: torch.Tensor, target: torch.Tensor, n_bins: int = 15) -> float:
    r"""Expected calibration error (Guo et al., 2017) with equal-width confidence bins.

    .. math:: \mathrm{ECE} = \sum_b \frac{n_b}{N} \left| \mathrm{acc}_b - \mathrm{conf}_b \right|

    0 means that among predictions made with confidence c, a fraction c is right.

    Shape:
        probs: (N, C) probabilities; target: (N,) ids
    """
    conf, acc, count = calibration_bins(probs, target, n_bins)
    return float((count.double() / count.sum() * (acc - conf).abs()).sum())


def reliability_diagram(probs: torch.Tensor, target: torch.Tensor, n_bins: int = 15, ax=None,
                        title: str | None = None):
    """Plot accuracy against confidence per bin, with the diagonal of perfect calibration.

    Bars below the diagonal are over-confident bins, bars above it under-confident ones; the
    legend gives the ECE. Returns the matplotlib axes.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    conf, acc, count = (t.cpu().numpy() for t in calibration_bins(probs, target, n_bins))
    ece = expected_calibration_error(probs, target, n_bins)
    ax = ax or plt.gca()
    width = 1.0 / n_bins
    centers = (np.arange(n_bins) + 0.5) * width
    filled = count > 0
    ax.bar(centers[filled], acc[filled], width=width * 0.95, color="tab:blue", alpha=0.8,
           label=f"accuracy (ECE = {ece:.3f})")
    low = np.minimum(acc, conf)[filled]  # the gap bar spans accuracy..confidence, whichever is higher
    ax.bar(centers[filled], np.abs(conf - acc)[filled], bottom=low, width=width * 0.95, color="none",
           edgecolor="tab:red", hatch="///", lw=0.8, label="gap to mean confidence")
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("confidence (max probability)")
    ax.set_ylabel("accuracy in bin")
    ax.legend(loc="upper left", fontsize=8)
    if title:
        ax.set_title(title)
    return ax


# ---------------------------------------------------------------------------------------------
# 5. The phasor-similarity loss of the VSA chapter.
# ---------------------------------------------------------------------------------------------


def similarity_logits(x: torch.Tensor, codebook: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    r"""``scale * sim(x_i, s_k)`` for every output symbol and every class symbol.

    Feeding these to :func:`cross_entropy` gives a softmax classifier over similarities, the
    alternative to :func:`similarity_loss` that also pushes the wrong classes away.

    Shape:
        x: (B, n) angles in [-1, 1]; codebook: (C, n) -> (B, C)
    """
    if x.dim() != 2 or codebook.dim() != 2 or x.shape[1] != codebook.shape[1]:
        raise ValueError(f"x must have shape (B, n) and codebook (C, n), got {tuple(x.shape)} and "
                         f"{tuple(codebook.shape)}")
    return scale * _fhrr_similarity(x[:, None, :], codebook[None, :, :])  # (B, C)


def similarity_loss(x: torch.Tensor, codebook: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    r"""Mean of ``1 - sim(x_i, codebook[y_i])``: the loss of Olin-Ammentorp and Bazhenov (2022).

    .. math:: \ell = 1 - \frac{1}{n} \sum_{j=1}^{n} \cos\big(\pi (x_j - s_{y,j})\big)

    Only the true class's symbol enters; it lies in [0, 2] and is 0 when x equals that symbol.

    Shape:
        x: (B, n) angles in [-1, 1]; codebook: (C, n); target: (B,) ids -> scalar
    """
    if x.dim() != 2 or codebook.dim() != 2 or x.shape[1] != codebook.shape[1]:
        raise ValueError(f"x must have shape (B, n) and codebook (C, n), got {tuple(x.shape)} and "
                         f"{tuple(codebook.shape)}")
    if target.shape != x.shape[:1]:
        raise ValueError(f"target must have shape (B,) = ({x.shape[0]},), got {tuple(target.shape)}")
    _check_target_range(target, codebook.shape[0], None)
    return (1.0 - _fhrr_similarity(x, codebook[target])).mean()
