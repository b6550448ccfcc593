"""Losses and the information quantities behind them.

Everything here works along the last dimension of its inputs. Cross-entropy is built from a
log-sum-exp written out (subtract the maximum before exponentiating), so logits of any size give
finite losses. Reading order:

1. ``logsumexp`` / ``free_energy`` / ``log_softmax``: the stable core (and its physics name).
2. ``cross_entropy``: the classification and language-model loss, equal to ``F.cross_entropy``
   with its label-smoothing and ``ignore_index`` conventions; ``focal_loss``: cross-entropy
   weighted by (1 - q_y)^gamma; ``chunked_cross_entropy``: the same
   mean for an output layer's logits ``h @ weight.T``, a chunk of rows at a time, never holding them
   all; ``AdaptiveSoftmax``: an output layer whose exact distribution costs little for frequent
   classes.
3. ``entropy``, ``kl_divergence``, ``cross_entropy_dist``, ``perplexity``: the quantities of
   eqs. (9.1)-(9.2) of the book, on probability vectors.
4. ``expected_calibration_error``, ``calibration_bins``: calibration (drawn by
   :func:`seqbook.plot.reliability_diagram`).
(The phasor-similarity loss of the VSA chapter, 1 - similarity, and similarities used as logits
are :func:`seqbook.vsa_models.similarity_loss` and :func:`seqbook.vsa_models.similarity_logits`.)

Inputs are checked once per call, before anything is computed, and a bad one ends in a ValueError or
TypeError that names the argument: logits are floating-point with at least one class and hold no NaN
or +inf (-inf is a legal masked class); targets are integer ids in [0, C) (or ``ignore_index``);
probabilities lie in [0, 1] and sum to 1 along the last dim (within 1e-3); sizes are ints >= 1;
``beta``, ``base``, ``scale``, ``label_smoothing`` and ``gamma`` are finite numbers in their range.
The value checks read the tensors once per call (one GPU sync) and pass on the ``meta`` device.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .checks import (
    autocast_enabled,
    check_choice,
    check_finite,
    check_flag,
    check_float_tensor,
    check_ids,
    check_int,
    check_like,
    check_number,
    check_positive_int,
    check_tensor,
    checked,
    has_values,
    optional,
    shape_of,
)

__all__ = [
    "logsumexp", "free_energy", "log_softmax", "smooth_labels", "cross_entropy",
    "focal_loss", "chunked_cross_entropy", "AdaptiveSoftmax", "entropy",
    "kl_divergence", "cross_entropy_dist", "perplexity", "calibration_bins",
    "expected_calibration_error", "macro_auroc",
]

INF = math.inf


def _has_values(x: torch.Tensor) -> bool:
    """Whether a value check can read ``x`` (see :func:`seqbook.checks.has_values`) and it is not empty."""
    return has_values(x) and x.numel() > 0


def _check_z(z) -> None:
    """z: a floating-point (..., C) tensor, C >= 1, no NaN and no +inf (-inf: a masked class)."""
    if not isinstance(z, torch.Tensor):
        raise TypeError(f"z must be a torch.Tensor, got {type(z).__name__}")
    if z.dim() == 0:
        raise ValueError("z must have at least one dimension (..., C), got a scalar of shape ()")
    if not z.is_floating_point():
        raise TypeError(f"z must be a floating-point tensor, got {z.dtype}")
    if z.shape[-1] == 0:
        raise ValueError(f"z must have at least one class (..., C) with C >= 1, got shape {shape_of(z)}")
    if _has_values(z) and bool((torch.isnan(z) | (z == INF)).any()):
        raise ValueError("z must not hold NaN or +inf (-inf is allowed: a class with probability 0)")

# ---------------------------------------------------------------------------------------------
# 1. Log-sum-exp, free energy, log-softmax.
# ---------------------------------------------------------------------------------------------


def logsumexp(z: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    r"""Smooth maximum of ``z`` along the last dimension at inverse temperature ``beta``.

    .. math:: \operatorname{lse}(\beta, z) = \beta^{-1} \log \sum_k \exp(\beta z_k)
              = m + \beta^{-1} \log \sum_k \exp(\beta (z_k - m)),\quad m = \max_k z_k

    Subtracting the maximum makes every exponent <= 0, so nothing overflows; the largest term is
    exp(0) = 1, so the sum is >= 1 and its log is finite. ``max(z) <= lse <= max(z) + log(C)/beta``.

    ``beta`` is a finite number > 0. An all -inf row gives -inf; an empty batch an empty result.

    Shape:
        z: (..., C) -> (...)
    """
    _check_z(z)
    check_number("beta", beta, 0.0, low_open=True)
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


@checked(_check_z)
def log_softmax(z: torch.Tensor) -> torch.Tensor:
    r"""``log softmax(z)_k = z_k - lse(z)`` along the last dimension.

    Computed as ``(z_k - m) - log sum_j exp(z_j - m)`` with ``m = max z``: both terms
    are small, so no precision is lost subtracting two large numbers (e.g. logits near
    1e4 in float32). A row of -inf only (every class masked) gives NaN.

    Shape:
        z: (..., C) -> (..., C)
    """
    m = z.max(dim=-1, keepdim=True).values.detach()  # (..., 1), a constant shift
    # all -inf rows: shift by 0, not by -inf (the result is still NaN, see above)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    shifted = z - m  # (..., C), every entry <= 0
    return shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))


# ---------------------------------------------------------------------------------------------
# 2. Cross-entropy on logits.
# ---------------------------------------------------------------------------------------------


def smooth_labels(target: torch.Tensor, num_classes: int, label_smoothing: float = 0.0,
                  dtype: torch.dtype | None = None) -> torch.Tensor:
    r"""The smoothed target distribution of eq. (9.7) of the book: ``(1 - eps) * onehot(y) + eps / C``.

    The smoothing mass ``eps`` is spread uniformly over all C classes, the true one included (this
    is PyTorch's convention), so the true class gets ``1 - eps + eps / C``.

    Shape:
        target: (...) integer ids in [0, C) -> (..., C) of ``dtype`` (default: torch's default dtype),
        a floating-point dtype; ``num_classes`` C is an int >= 1.
    """
    num_classes = check_int("num_classes", num_classes, 1)
    label_smoothing = check_number("label_smoothing", label_smoothing, 0.0, 1.0)
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating-point torch.dtype or None, got {dtype!r}")
    _check_target_range(target, num_classes, None)
    onehot = torch.nn.functional.one_hot(target.long(), num_classes).to(dtype or torch.get_default_dtype())
    return (1.0 - label_smoothing) * onehot + label_smoothing / num_classes


def _check_target_range(target: torch.Tensor, num_classes: int, ignore_index: int | None) -> None:
    """target: an integer tensor with ids in [0, num_classes), or equal to ignore_index (one sync)."""
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"target must be a torch.Tensor of integer class ids, got {type(target).__name__}")
    if target.dtype == torch.bool or target.is_floating_point() or target.is_complex():
        raise TypeError(f"target must hold integer class ids, got dtype {target.dtype}")
    if not _has_values(target):
        return
    valid = target if ignore_index is None else target[target != ignore_index]
    if not valid.numel():
        return
    lo, hi = torch.stack([valid.min(), valid.max()]).tolist()
    if lo < 0 or hi >= num_classes:
        extra = "" if ignore_index is None else f" (or ignore_index={ignore_index})"
        raise ValueError(f"target must lie in [0, {num_classes}){extra}, got values in [{lo}, {hi}]")


def _check_cross_entropy(logits, target, ignore_index) -> None:
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dim() not in (2, 3):
        raise ValueError(f"logits must have shape (B, C) or (B, T, C), got {tuple(logits.shape)}")
    if not logits.is_floating_point():
        raise TypeError(f"logits must be a floating-point tensor, got dtype {logits.dtype}")
    C = logits.shape[-1]
    if C < 1:
        raise ValueError(f"logits must have at least one class, got shape {tuple(logits.shape)}")
    if logits.numel() == 0:
        raise ValueError(
            f"logits must not be empty (B, T >= 1: no positions to average), got shape {tuple(logits.shape)}"
        )
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"target must be a torch.Tensor of integer class ids, got {type(target).__name__}")
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        want = "(B,)" if logits.dim() == 2 else "(B, T)"
        raise ValueError(
            f"target must have shape {want} = {tuple(logits.shape[:-1])} to match logits "
            f"{tuple(logits.shape)}, got {tuple(target.shape)}"
        )
    _check_target_range(target, C, ignore_index)
    keep = torch.ones_like(target, dtype=torch.bool) if ignore_index is None else target != ignore_index
    if _has_values(logits):  # one sync for both value checks
        bad = (torch.isnan(logits) | (logits == INF)).any()
        dead = ((logits == -INF).all(-1) & keep).any()  # a kept position with no finite logit
        bad, dead = torch.stack([bad, dead]).tolist()
        if bad:
            raise ValueError("logits must not hold NaN or +inf (-inf is allowed: a masked class)")
        if dead:
            raise ValueError(
                "logits must have a finite entry at every position that is not ignored, "
                "got a row of -inf only (every class masked) whose target is not ignore_index"
            )


@checked(_check_cross_entropy, label_smoothing=partial(check_number, low=0.0, high=1.0),
         ignore_index=optional(partial(check_int, minimum=None)))
def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    label_smoothing: float = 0.0,
    ignore_index: int | None = None,
) -> torch.Tensor:
    r"""Mean cross-entropy between softmax(logits) and the (smoothed) one-hot targets.

    For one position with logits z, true class y, q = softmax(z), eps = label_smoothing:

    .. math:: \ell = (1 - \varepsilon)\,[-\log q_y]
              + \frac{\varepsilon}{C} \sum_{k=1}^{C} [-\log q_k],
              \qquad -\log q_k = \operatorname{lse}(z) - z_k

    which is eq. (9.1) of the book with the target of eq. (9.7). The loss is averaged
    over the positions whose target is not ``ignore_index`` (ignored positions count
    neither in the sum nor in the divisor), exactly like ``F.cross_entropy`` with
    ``reduction="mean"``. An ignored position contributes exactly 0 and gets an exact
    zero gradient, even if its logits are all -inf. If every position is ignored the
    mean is 0/0 = NaN, as in PyTorch. Half-precision logits are computed in float32.

    -inf logits are legal (a masked class): a true class at -inf gives a loss of +inf,
    and so does label smoothing > 0 on a row with a -inf class. A position that is not
    ignored needs at least one finite logit; NaN and +inf are refused.

    Shape:
        logits: (B, C) or (B, T, C)
        target: (B,) or (B, T), integer ids in [0, C) or equal to ``ignore_index``
        output: scalar
    """
    z = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
    C = z.shape[-1]
    keep = torch.ones_like(target, dtype=torch.bool)  # the positions that count
    if ignore_index is not None:  # ignored rows: logits 0, a finite log-softmax
        keep = target != ignore_index
        z = torch.where(keep.unsqueeze(-1), z, z.new_zeros(()))
    logq = log_softmax(z)  # (B, [T,] C) log-probabilities, z_k - lse(z)
    y = torch.where(keep, target, torch.zeros_like(target)).long()  # ignored: any id
    nll = -logq.gather(-1, y.unsqueeze(-1)).squeeze(-1)  # (B, [T]) -log q_y
    loss = (1.0 - label_smoothing) * nll
    if label_smoothing > 0:  # the uniform part of eq. (9.7)
        loss = loss + label_smoothing / C * (-logq.sum(-1))  # (B, [T])
    loss = torch.where(keep, loss, torch.zeros_like(loss))
    return loss.sum() / keep.sum()


@checked(_check_cross_entropy, gamma=partial(check_number, low=0.0),
         ignore_index=optional(partial(check_int, minimum=None)))
def focal_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    gamma: float = 2.0,
    ignore_index: int | None = None,
) -> torch.Tensor:
    r"""Mean focal loss (Lin et al., 2017): cross-entropy, less of it where the model is sure.

    For one position with logits z, true class y and q = softmax(z):

    .. math:: \ell = -(1 - q_y)^{\gamma} \log q_y

    With gamma = 0 it is :func:`cross_entropy`. With gamma > 0 a position the model
    already gets right with confidence (q_y near 1) adds almost nothing, so the loss
    keeps working on the others. Positions whose target is ``ignore_index`` count
    neither in the sum nor in the divisor, as in :func:`cross_entropy`, with the same
    input rules. 1 - q_y is computed as -expm1(log q_y), accurate when q_y is near 1,
    and kept above the smallest normal number, so that a position predicted with
    probability 1 has loss and gradient 0 for every gamma >= 0 (not NaN).

    Shape:
        logits: (B, C) or (B, T, C)
        target: (B,) or (B, T), integer ids in [0, C) or equal to ``ignore_index``
        output: scalar
    """
    z = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
    keep = torch.ones_like(target, dtype=torch.bool)  # the positions that count
    if ignore_index is not None:  # ignored rows: logits 0, a finite log-softmax
        keep = target != ignore_index
        z = torch.where(keep.unsqueeze(-1), z, z.new_zeros(()))
    y = torch.where(keep, target, torch.zeros_like(target)).long()  # ignored: any id
    logq_y = log_softmax(z).gather(-1, y.unsqueeze(-1)).squeeze(-1)  # (B, [T])
    tiny = torch.finfo(logq_y.dtype).tiny
    p_wrong = (-torch.expm1(logq_y)).clamp(min=tiny)  # 1 - q_y, never exactly 0
    loss = -p_wrong**gamma * logq_y  # (B, [T])
    loss = torch.where(keep, loss, torch.zeros_like(loss))
    return loss.sum() / keep.sum()


def _check_chunked_cross_entropy(h, weight, target, ignore_index) -> None:
    check_float_tensor("h", h, ndim=2, names="(N, D)")
    D = h.shape[1]
    check_float_tensor("weight", weight, shape=(None, D), names=f"(V, D) with D = {D}, as h's")
    if weight.dtype != h.dtype and not autocast_enabled(h):
        raise TypeError(f"weight must have h's dtype, {h.dtype}, got {weight.dtype}")
    check_ids("target", target, weight.shape[0], ignore_index, shape=(h.shape[0],),
              names=f"(N,) with N = {h.shape[0]}, as h's")
    check_finite("h", h)
    check_finite("weight", weight)


@checked(_check_chunked_cross_entropy, chunk_size=check_positive_int,
         ignore_index=optional(partial(check_int, minimum=None)))
def chunked_cross_entropy(
    h: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    chunk_size: int = 4096,
    ignore_index: int | None = None,
) -> torch.Tensor:
    r"""Mean cross-entropy of the logits ``h @ weight.T``, never holding all of them.

    An output layer turns N hidden states into N x V logits; for a large vocabulary V
    that matrix, and what the backward pass keeps of it, outweighs everything else in
    the step. The rows are taken ``chunk_size`` at a time, K being the kept rows:

    .. math:: \ell = \frac{1}{|K|} \sum_{i \in K}
              \big[\operatorname{lse}(W h_i) - (W h_i)_{y_i}\big]

    Each chunk's loss runs under :func:`torch.utils.checkpoint.checkpoint`, which keeps
    only the chunk's inputs and computes its logits again in the backward pass, so the
    logits take a few chunk-sized matrices of memory at a time (logits, log-softmax,
    gradient), whatever N is. The sums are divided once, by the number of kept rows:
    the result equals ``cross_entropy(h @ weight.T, target, ...)`` for any chunk size
    (every row ignored: 0/0 = NaN). The logits are scored in float32, or float64 for
    float64 inputs; bfloat16 inputs give bfloat16 logits first, as an autocast product
    would, and those are what is scored.

    Shape:
        h: (N, D); weight: (V, D), the output layer, no bias;
        target: (N,) ids in [0, V) or ``ignore_index``; output: scalar
    """
    skip = -100 if ignore_index is None else ignore_index  # F.cross_entropy's default
    dtype = torch.promote_types(h.dtype, torch.float32)  # float32, or float64

    def chunk_nll(h, weight, target):  # the summed loss of one chunk of rows
        logits = (h @ weight.T).to(dtype)  # (n, V): this chunk's logits only
        return F.cross_entropy(logits, target, ignore_index=skip, reduction="sum")

    total = h.new_zeros((), dtype=dtype)
    for h_c, y_c in zip(h.split(chunk_size), target.split(chunk_size), strict=True):
        total = total + checkpoint(chunk_nll, h_c, weight, y_c, use_reentrant=False)
    kept = target.numel() if ignore_index is None else (target != ignore_index).sum()
    return total / kept


class AdaptiveSoftmax(nn.Module):
    r"""Adaptive softmax (Grave et al., 2017): an exact distribution over V classes that
    costs little for the frequent ones.

    The classes are numbered by falling frequency and cut at ``cutoffs``
    c_1 < ... < c_k < V into a shortlist [0, c_1) and k clusters [c_i, c_{i+1})
    (c_{k+1} = V). The head scores the shortlist and one entry per cluster; cluster i
    scores its own classes from h projected to D_i = D // div_value^i dimensions:

    .. math:: \log p(y \mid h) = \begin{cases}
              \log p_0(y \mid h) & y < c_1 \\
              \log p_0(c_1 + i - 1 \mid h) + \log p_i(y - c_i \mid h)
              & c_i \le y < c_{i+1}
              \end{cases}

    with p_0 = softmax(W_0 h) over the c_1 + k head entries and p_i = softmax(B_i A_i h)
    over cluster i (A_i: D_i x D, B_i: (c_{i+1} - c_i) x D_i). The probabilities of
    all V classes sum to 1. Same weights and layout as
    ``nn.AdaptiveLogSoftmaxWithLoss(..., head_bias=False)``: ``head`` is its ``head``,
    ``tail[i]`` its ``tail[i]``.

    Args:
        in_features: D, the size of the hidden state.
        num_classes: V, the classes, numbered by falling frequency.
        cutoffs: c_1 < ... < c_k, the first class of each cluster.
        div_value: each cluster's projection is div_value times narrower than the last.

    Shape:
        forward: h (N, D), target (N,) ids in [0, V) -> the mean negative
        log-likelihood (scalar); log_prob: h (N, D) -> (N, V).
    """

    def __init__(self, in_features: int, num_classes: int, cutoffs: list[int],
                 div_value: float = 4.0):
        super().__init__()
        D = check_positive_int("in_features", in_features)
        V = check_positive_int("num_classes", num_classes, minimum=2)
        div_value = check_number("div_value", div_value, low=1.0)
        if not isinstance(cutoffs, (list, tuple)):
            raise TypeError(f"cutoffs must be a list of ints, got {type(cutoffs).__name__}")
        if not cutoffs:
            raise ValueError("cutoffs must hold at least one int, got []")
        for i, c in enumerate(cutoffs):
            check_int(f"cutoffs[{i}]", c)
        if list(cutoffs) != sorted(set(cutoffs)) or cutoffs[-1] >= V:
            raise ValueError(f"cutoffs must be increasing ints in [1, num_classes - 1 = "
                             f"{V - 1}], got {list(cutoffs)}")
        if D // div_value ** len(cutoffs) < 1:
            raise ValueError(f"in_features // div_value**{len(cutoffs)} must be >= 1 (the last "
                             f"cluster's width), got {D} // {div_value}**{len(cutoffs)} "
                             f"= {D // div_value ** len(cutoffs):g}")
        self.in_features, self.num_classes = D, V
        self.cutoffs = [int(c) for c in cutoffs] + [V]
        k = len(cutoffs)
        widths = [int(D // div_value ** (i + 1)) for i in range(k)]  # D_1, ..., D_k
        self.head = nn.Linear(D, self.cutoffs[0] + k, bias=False)
        self.tail = nn.ModuleList(
            nn.Sequential(
                nn.Linear(D, widths[i], bias=False),  # A_i
                nn.Linear(widths[i], self.cutoffs[i + 1] - self.cutoffs[i], bias=False),  # B_i
            )
            for i in range(k)
        )

    def _check_forward(self, h, target=None) -> None:  # forward's and log_prob's
        D = self.in_features
        check_float_tensor("h", h, shape=(None, D), names=f"(N, {D})")
        check_like("h", h, self.head.weight)
        if target is not None:
            N = h.shape[0]
            check_ids("target", target, self.num_classes, shape=(N,),
                      names=f"(N,) with N = {N}, as h's")
            if target.dtype == torch.uint8:  # indexing would read it as a mask
                raise TypeError("target must hold int64 or int32 ids (torch.uint8 indexes as a "
                                "mask), got torch.uint8")

    @checked(_check_forward)
    def forward(self, h: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        shortlist = self.cutoffs[0]
        head_logp = F.log_softmax(self.head(h), dim=-1)  # (N, c_1 + k)
        logp = h.new_zeros(target.shape)  # (N,): log p(y | h) of each row
        in_head = target < shortlist
        logp[in_head] = head_logp[in_head, target[in_head]]
        for i, tail in enumerate(self.tail):  # only the rows whose class is in cluster i
            lo, hi = self.cutoffs[i], self.cutoffs[i + 1]
            rows = (lo <= target) & (target < hi)
            tail_logp = F.log_softmax(tail(h[rows]), dim=-1)  # (n_i, c_{i+1} - c_i)
            in_tail = tail_logp.gather(1, (target[rows] - lo)[:, None]).squeeze(1)
            logp[rows] = head_logp[rows, shortlist + i] + in_tail
        return -logp.mean()

    @checked(_check_forward)
    def log_prob(self, h: torch.Tensor) -> torch.Tensor:
        """The log-probabilities of all V classes, (N, V): every cluster is scored."""
        shortlist = self.cutoffs[0]
        head_logp = F.log_softmax(self.head(h), dim=-1)  # (N, c_1 + k)
        parts = [head_logp[:, :shortlist]]
        for i, tail in enumerate(self.tail):
            cluster = head_logp[:, shortlist + i, None]  # (N, 1)
            parts.append(cluster + F.log_softmax(tail(h), dim=-1))
        return torch.cat(parts, dim=-1)  # (N, V)


# ---------------------------------------------------------------------------------------------
# 3. Entropy, KL divergence, cross-entropy between distributions, perplexity.
# ---------------------------------------------------------------------------------------------


def _log_base(base: float | None) -> float:
    """log(base): base is None (nats) or a finite number > 0 and != 1."""
    if base is None:
        return 1.0
    base = check_number("base", base, 0.0, low_open=True)
    if base == 1:
        raise ValueError(f"base must be > 0 and != 1, got {base}")
    return math.log(base)


def _check_probs(name: str, p: torch.Tensor) -> None:
    """p: a floating-point (..., C) tensor, C >= 1, entries in [0, 1], each row summing to 1.

    The entries and the sum may be off by rounding: 1e-3, or 4 eps of a half-precision dtype. One sync.
    """
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of probabilities, got {type(p).__name__}")
    if p.dim() == 0:
        raise ValueError(f"{name} must have shape (..., C), got a scalar")
    if not p.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {p.dtype}")
    if p.shape[-1] == 0:
        raise ValueError(f"{name} must have at least one class (..., C) with C >= 1, got shape {shape_of(p)}")
    if not _has_values(p):
        return
    q = p.detach().float()
    total = q.sum(-1)
    lo, hi, tlo, thi = torch.stack([q.min(), q.max(), total.min(), total.max()]).tolist()
    atol = max(1e-3, 4 * torch.finfo(p.dtype).eps)
    if not (0 <= lo and hi <= 1 + atol):  # also catches NaN
        raise ValueError(f"{name} must be non-negative and at most 1 (probabilities along the last dim), "
                         f"got values in [{lo:.4g}, {hi:.4g}]")
    if not (abs(tlo - 1) <= atol and abs(thi - 1) <= atol):
        raise ValueError(f"{name} must sum to 1 along the last dim, got sums in [{tlo:.4g}, {thi:.4g}]")


def entropy(p: torch.Tensor, base: float | None = None) -> torch.Tensor:
    r"""Shannon entropy ``H(p) = -sum_k p_k log p_k`` along the last dim, with 0 log 0 = 0.

    ``base=None`` gives nats, ``base=2`` bits.

    Shape:
        p: (..., C) probabilities -> (...)
    """
    _check_probs("p", p)
    return -torch.special.xlogy(p, p).sum(-1) / _log_base(base)


def _check_pair(p: torch.Tensor, q: torch.Tensor) -> None:
    for name, x in (("p", p), ("q", q)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of probabilities, got {type(x).__name__}")
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
    r"""Cross-entropy between two distributions, eq. (9.1) of the book: ``H(p, q) = -sum_k p_k log q_k``.

    Equals ``entropy(p) + kl_divergence(p, q)`` (eq. (9.2)).

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

    A tensor gives a tensor of its dtype (float16 and bfloat16: float32), a number a Python float.
    ``nll`` must be >= 0 and not NaN; +inf (a symbol given probability 0) gives +inf, and so does
    a Python number too large for exp.
    """
    scale = _log_base(base)
    if isinstance(nll, torch.Tensor):
        if not nll.is_floating_point():
            raise TypeError(f"nll must be a floating-point tensor of losses, got {nll.dtype}")
        if nll.numel() == 0:
            raise ValueError("nll is empty: need at least one negative log-likelihood, got shape "
                             f"{shape_of(nll)}")
        if _has_values(nll) and bool((torch.isnan(nll) | (nll < 0)).any()):
            raise ValueError("nll must hold losses >= 0 (negative log-likelihoods), "
                             "got a negative or NaN entry")
        mean = nll.mean() if nll.dtype in (torch.float32, torch.float64) else nll.float().mean()
        return torch.exp(mean * scale)
    nll = check_number("nll", nll, 0.0, allow_inf=True)
    try:
        return math.exp(nll * scale)
    except OverflowError:
        return math.inf


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

    ``probs`` must hold N >= 1 rows of probabilities (entries in [0, 1], each row summing to 1),
    ``target`` ids in [0, C), ``n_bins`` an int >= 1.
    """
    _check_calibration(probs, target)
    n_bins = check_int("n_bins", n_bins, 1)
    return _calibration_bins(probs, target, n_bins)


def _check_calibration(probs: torch.Tensor, target: torch.Tensor) -> None:
    check_tensor("probs", probs, nonempty=False)
    if probs.dim() != 2:
        raise ValueError(f"probs must have shape (N, C), got {tuple(probs.shape)}")
    if probs.shape[0] == 0:
        raise ValueError(f"probs must hold at least one prediction (N >= 1), got shape {tuple(probs.shape)}")
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"target must be a torch.Tensor of integer class ids, got {type(target).__name__}")
    if target.shape != probs.shape[:1]:
        raise ValueError(f"target must have shape (N,) = ({probs.shape[0]},), got {tuple(target.shape)}")
    _check_probs("probs", probs)
    _check_target_range(target, probs.shape[1], None)


def _calibration_bins(probs: torch.Tensor, target: torch.Tensor, n_bins: int):
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


def expected_calibration_error(probs: torch.Tensor, target: torch.Tensor, n_bins: int = 15, *,
                               bins: str = "width", classwise: bool = False) -> float:
    r"""Expected calibration error (Guo et al., 2017): the gap between confidence and accuracy,
    averaged over confidence bins weighted by the share of predictions in each.

    .. math:: \mathrm{ECE} = \sum_b \frac{n_b}{N} \left| \mathrm{acc}_b - \mathrm{conf}_b \right|

    0 means that among predictions made with confidence c, a fraction c is right.

    ``bins="width"`` cuts [0, 1] into ``n_bins`` equal-width bins (as :func:`calibration_bins`);
    ``bins="mass"`` sorts the predictions by confidence and cuts them into ``n_bins`` groups of
    equal size (one more in the first N mod n_bins; equal confidences all go to the first bin
    they reach, which may then hold more), so that the bins resolve confidence where the
    predictions are (Nixon et al., 2019; Roelofs et al., 2022). ``classwise=True`` bins every class's
    probability p_k over all N predictions, with acc_b the share of bin b whose label is k and
    conf_b its mean p_k, and averages the C errors (Kull et al., 2019): it sees the
    probabilities below the largest, which the top-label ECE ignores.

    Shape:
        probs: (N, C) probabilities; target: (N,) ids
    """
    _check_calibration(probs, target)
    n_bins = check_int("n_bins", n_bins, 1)
    bins = check_choice("bins", bins, ("width", "mass"))
    probs = probs.detach().double()
    if not check_flag("classwise", classwise):
        conf, pred = probs.max(dim=-1)  # (N,)
        return _binned_gap(conf, (pred == target).double(), n_bins, bins)
    hits = F.one_hot(target.long(), probs.shape[1]).double()  # (N, C): label k or not
    return sum(_binned_gap(p_k, hit_k, n_bins, bins)  # one class at a time: p_k of every row
               for p_k, hit_k in zip(probs.T.contiguous(), hits.T, strict=True)) / probs.shape[1]


def _binned_gap(conf: torch.Tensor, hit: torch.Tensor, n_bins: int, bins: str) -> float:
    """sum_b n_b / N |mean hit - mean conf| over the bins of conf (N,) (see above)."""
    if bins == "width":
        edges = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64, device=conf.device)
        idx = torch.bucketize(conf, edges[1:-1], right=False).clamp(0, n_bins - 1)  # (N,)
    else:  # equal mass: the rank of each confidence, cut into n_bins nearly equal groups
        sorted_conf, order = torch.sort(conf, stable=True)
        by_rank = torch.empty_like(order)  # the bin of each rank
        ranks = torch.arange(len(conf), device=conf.device)
        for b, group in enumerate(torch.tensor_split(ranks, n_bins)):
            by_rank[group] = b
        # equal confidences share the first bin they reach: the order of the rows cannot matter
        _, tie, counts = torch.unique_consecutive(sorted_conf, return_inverse=True,
                                                  return_counts=True)
        first = torch.cumsum(counts, 0) - counts  # the first rank of each distinct confidence
        idx = torch.empty_like(order)
        idx[order] = by_rank[first[tie]]
    count = torch.zeros(n_bins, dtype=torch.float64, device=conf.device).index_add_(
        0, idx, torch.ones_like(conf))
    gap = torch.zeros_like(count).index_add_(0, idx, hit - conf)  # summed over each bin
    return float(gap.abs().sum() / len(conf))


# ---------------------------------------------------------------------------------------------
# Ranking quality: the area under the ROC curve, one class against the rest.
# ---------------------------------------------------------------------------------------------


def _check_macro_auroc(similarities, labels) -> None:
    if similarities.is_complex() or not similarities.is_floating_point():
        raise TypeError(f"similarities must be a real floating-point tensor, got {similarities.dtype}")
    n, c = similarities.shape
    if n == 0 or c < 2:
        raise ValueError(f"similarities must have shape (N, C) with N >= 1 and C >= 2 classes, "
                         f"got {shape_of(similarities)}")
    check_ids("labels", labels, c, shape=(n,), names=f"({n},) (N of similarities {(n, c)})")
    if not _has_values(similarities):
        return
    if not bool(torch.isfinite(similarities).all()):
        raise ValueError("similarities must be finite, got a NaN or infinite entry")
    missing = sorted(set(range(c)) - set(labels.unique().tolist()))
    if missing:
        raise ValueError(f"labels must hold every class 0..{c - 1} at least once (a class without an "
                         f"example has no ROC curve), got none of class {missing[0]}")


@checked(_check_macro_auroc, similarities=partial(check_tensor, ndim=2, names="(N, C)", nonempty=False))
def macro_auroc(similarities: torch.Tensor, labels: torch.Tensor) -> float:
    """The area under the ROC curve of each class against the rest, scored by its similarity,
    averaged over the classes (one-vs-rest macro AUROC).

    Shape:
        similarities: (N, C) finite real scores, C >= 2; labels: (N,) integer ids in [0, C), every
        class present at least once -> a float in [0, 1].
    """
    from sklearn.metrics import roc_auc_score

    sims, labels = similarities.detach().cpu().numpy(), labels.cpu().numpy()
    return float(sum(roc_auc_score(labels == c, sims[:, c]) for c in range(sims.shape[1])) / sims.shape[1])
