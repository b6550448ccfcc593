"""Checks of chapter 4's exercises (Bahdanau attention)."""

from __future__ import annotations

import functools
import numbers

import numpy as np
import torch
import torch.nn.functional as F

from ..attention import lengths_to_mask
from ..decoding import EOS_ID, PAD_ID
from ..seq2seq import Seq2Seq
from .core import (
    Wrong,
    agrees,
    call,
    close,
    exercise,
    expect,
    expect_shape,
    float32_values,
    returned_pair,
)

F64 = torch.float64


def _annotations(seed: int, B: int = 3, S: int = 5, D: int = 4):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, S, D, generator=g, dtype=F64)
    lengths = torch.tensor([S, 3, 1][:B])
    return g, h, lengths, lengths_to_mask(lengths, S)


def _masked_softmax(e: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Eq. (4.7) over the real positions: the reference weights, exactly 0 at the padding."""
    return torch.softmax(e.masked_fill(~real, float("-inf")), dim=-1)


def _number(out, what: str) -> torch.Tensor:
    """The learner's number (Python or NumPy, or a one-element tensor or array) as a 0-d tensor
    at its own precision, or a :class:`Wrong`."""
    if isinstance(out, bool | np.bool_) or not isinstance(
            out, numbers.Real | torch.Tensor | np.ndarray | np.generic):
        raise Wrong(f"{what} must return a number, got {type(out).__name__}")
    t = out if isinstance(out, torch.Tensor) else torch.as_tensor(np.asarray(out))
    expect(t.numel() == 1 and t.dtype != torch.bool and not t.is_complex(),
           f"{what} must return one number, got {t.numel()} values of type {t.dtype}")
    return t.reshape(()).detach().cpu()


def _padding_slips(weights: torch.Tensor, real: torch.Tensor, fix: str = "",
                   large: bool = False, word: str = "energies", later: bool = False) -> bool:
    """Name the typical mistakes with padding: weight on it, a finite fill value (-40) in place of
    -inf, a softmax over the wrong axis, rows that no longer sum to one. ``fix`` is added to the
    first message (not for a find-the-bug exercise, whose first message states the symptom only).
    ``large``: the case whose real energies are far below 0, where a finite fill value leaks.
    ``word``: what the exercise calls the numbers under the softmax (energies, scores).
    ``later``: a ``large`` case follows, which judges a tiny but nonzero weight on the padding.
    Returns True when it left that judgement to the ``large`` case (the caller then skips this
    case's remaining comparisons, which the tiny weight would fail for another reason)."""
    on_padding = weights.masked_fill(real, 0).abs()
    if (on_padding > 1e-12).any() and not large:
        b, j = (int(t) for t in (on_padding > 1e-12).nonzero()[0])
        n = int(real[b].sum())
        raise Wrong(f"position {j} of a source of length {n} gets weight, so the context of this "
                    f"source changes with the padding of its batch{fix}")
    tiny = bool((on_padding != 0).any()) and float(on_padding.max()) < 1e-12
    if tiny and later:  # a finite fill far below energies of order 1: judged on `large`
        return True
    if tiny:
        raise Wrong(f"the padding's weight is tiny ({float(on_padding.max()):.0e}) but not exactly "
                    f"0: a finite fill hides the padding only while all the real {word} stay "
                    "far above it; fill with -inf, or the most negative float, so that the "
                    f"padding's weight is exactly 0 whatever the {word}")
    if (on_padding != 0).any():
        raise Wrong(f"the padding gets weight: little while the {word} are of order 1, much once "
                    f"the real {word} fall below the fill value. A finite fill such as -40 hides "
                    f"the padding only while every real one stays well above it; the "
                    f"padding's weight must be exactly 0 whatever the {word} (fill with -inf, "
                    f"or a number far below any real one)")
    sums = weights.sum(-1)
    if bool((weights == 0).all()):
        raise Wrong("every weight is 0: each row must be a distribution over the source's real "
                    "positions, summing to one")
    if not close(sums, torch.ones(sums.shape, dtype=F64), n=weights.shape[-1]):
        if weights.shape[0] > 1 and close(weights.sum(0), torch.ones(weights.shape[-1]),
                                          n=weights.shape[0]):
            raise Wrong("the weights sum to one over the batch (dim 0), not over the source "
                        "positions: the softmax runs over the wrong dimension")
        raise Wrong("the weights of a padded source do not sum to one: each row must be a "
                    "softmax over the real positions (zeroing them after the softmax leaves the "
                    "real positions with too little weight; exponentials not divided by their "
                    "sum are not normalised at all)")
    return False


# ---------------------------------------------------------------------------------------------
# Additive attention with v_a = 0.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch4-uniform", hints=[
    "With v_a = 0 every energy e_ij is 0, whatever the query and the keys. What does a softmax "
    "make of equal energies?",
    "The mask still applies: padding gets weight 0, and each of the n real positions of a "
    "source gets 1/n (the lengths count <eos>, a real position). The context is then a plain "
    "mean, over the real positions only.",
])
def check_uniform(fn):
    _, h, lengths, real = _annotations(40)
    out = call(fn, h.clone(), lengths.clone(), what="uniform_attention")
    context, weights = returned_pair(out, "uniform_attention", "(context, weights)")
    if weights.shape == (h.shape[0], h.shape[-1]) and context.shape == real.shape:
        raise Wrong("uniform_attention returns (weights, context): return (context, weights), "
                    "in this order")
    expect_shape(weights, real.shape, "the weights")
    expect_shape(context, (h.shape[0], h.shape[-1]), "the context")
    ref_w = _masked_softmax(torch.zeros(real.shape, dtype=F64), real)  # e_ij = 0 when v_a = 0
    ref = (ref_w[..., None] * h).sum(1)
    if close(weights, torch.full_like(ref_w, 1 / h.shape[1])):
        raise Wrong("every position gets 1/S, padding included: the mask still hides the "
                    "padding, so a source of length n spreads its weight over n positions")
    if float32_values(weights):  # float32 weights (a bool mask over the lengths), cast up
        weights = weights.float()
    n = real.sum(-1, keepdim=True).to(F64)
    if close(weights, real / h.shape[1]):
        raise Wrong("each real position gets 1/S, S the padded length: a source of length n "
                    "spreads its weight over its n real positions, 1/n each")
    for shift in (1, -1):
        if close(weights, real / (n + shift).clamp(min=1)):
            raise Wrong(f"each real position gets 1/(n {'+' if shift > 0 else '-'} 1): a source "
                        "of length n spreads its weight over its n real positions, 1/n each")
    # <eos> left out of the average: each source's last real position gets 0, the rest 1/(n - 1)
    last = real & ~F.pad(real[:, 1:], (0, 1), value=False)  # (B, S): the last real position
    longer = n[:, 0] > 1  # sources with a position besides <eos>
    without_eos = torch.where(real & ~last, 1 / (n - 1).clamp(min=1), torch.zeros((), dtype=F64))
    if weights.is_floating_point() and close(weights[longer].to(F64), without_eos[longer]):
        raise Wrong("each source's last real position, <eos>, gets no weight: the lengths count "
                    "<eos>, so a source of length n has n real positions, 1/n each")
    if (weights.is_floating_point() and torch.isnan(weights).any()
            and not (weights.nan_to_num().masked_fill(real, 0).abs() > 1e-12).any()):
        raise Wrong("the weights hold NaN: a division by zero? Every source has at least one real "
                    "position (its length counts <eos>), so none should divide by 0")
    _padding_slips(weights, real, ": give the padding weight 0 (with energies, mask them with "
                                  "-inf before the softmax)")
    expect(close(weights, ref_w), "the weights are not uniform over the real positions")
    if close(context, h.mean(1)) or close(context, h.sum(1) / n):
        raise Wrong("the context averages the padding too: it is the mean of the real "
                    "annotations only")
    # weights made in float32 (a bool mask divided by the lengths) make a float32 context
    low = weights.dtype if weights.is_floating_point() else F64
    expect(close(context.to(low), ref, n=h.shape[1]), "the weights are right but the context is "
           "not their average of the annotations")
    # the same batch padded with two more positions: no source fills the batch any more
    wide = F.pad(h, (0, 0, 0, 2))  # (B, S + 2, D)
    narrow = ("on a batch padded beyond its longest source the function {what}: the mask must "
              "have the width of h (h.shape[1]), not of the longest source "
              "(lengths_to_mask(lengths, h.shape[1]))")
    try:
        out = call(fn, wide.clone(), lengths.clone(), what="uniform_attention")
    except Wrong as err:
        raise Wrong(narrow.format(what=f"fails ({err})")) from None
    context2, weights2 = returned_pair(out, "uniform_attention", "(context, weights)")
    if tuple(weights2.shape) == tuple(real.shape):
        raise Wrong(narrow.format(what="returns weights as wide as the longest source"))
    expect_shape(weights2, (h.shape[0], h.shape[1] + 2), "the weights")
    if float32_values(weights2):
        weights2 = weights2.float()
    expect(close(weights2, F.pad(ref_w, (0, 2))) and close(context2.to(low), ref,
           n=h.shape[1]), "on a batch padded with two more positions the weights or the context "
           "change: padding must not matter")


# ---------------------------------------------------------------------------------------------
# Find the bug: attention that reads the padding.
# ---------------------------------------------------------------------------------------------


def _additive_cases():
    """Two batches (s_prev, h, mask, W_a, U_a, b, v_a): random weights with energies of order 1,
    and weights built so that the real energies are about -55 and the padding's above 0 (a finite
    fill value such as -40 then lets the padding in)."""
    _, h, _, real = _annotations(41, S=6, D=4)
    g = torch.Generator().manual_seed(42)
    B, D, Q, A = h.shape[0], 4, 3, 5
    usual = (torch.randn(B, Q, generator=g, dtype=F64), h,
             torch.randn(A, Q, generator=g, dtype=F64) / 2, torch.randn(A, D, generator=g,
                                                                       dtype=F64) / 2,
             torch.randn(A, generator=g, dtype=F64) / 2, torch.randn(A, generator=g, dtype=F64))
    noise = torch.randn(h.shape, generator=g, dtype=F64)
    large = (torch.randn(B, Q, generator=g, dtype=F64),
             torch.where(real[..., None], -0.6 + 0.15 * noise, 0.05 + 0.1 * noise),
             0.3 * torch.randn(A, Q, generator=g, dtype=F64),
             0.4 + 0.4 * torch.rand(A, D, generator=g, dtype=F64),
             0.2 * torch.randn(A, generator=g, dtype=F64),
             12 + 2 * torch.rand(A, generator=g, dtype=F64))
    return [(s, h, real, W_a, U_a, b, v_a) for s, h, W_a, U_a, b, v_a in (usual, large)]


def _energies(s_prev, h, W_a, U_a, b, v_a):
    """Eq. (4.8): the energies of every source position, (B, S)."""
    return torch.tanh((s_prev @ W_a.T)[:, None] + h @ U_a.T + b) @ v_a


def _additive(s_prev, h, real, W_a, U_a, b, v_a):
    """Eqs. (4.6)-(4.8), the reference: (context, weights)."""
    alpha = _masked_softmax(_energies(s_prev, h, W_a, U_a, b, v_a), real)
    return (alpha[..., None] * h).sum(1), alpha


@exercise("ex-ch4-padding-bug", hints=[
    "Run it on the same source twice, once padded with two more positions than the other: should "
    "the context change?",
    "Padding must get weight exactly 0, and the real positions must share all of it. Where in "
    "eqs. (4.6)-(4.8) can the mask act so that both hold?",
    "Set the energies of the padding to -inf (or the most negative float) before the softmax: "
    "e.masked_fill(~mask, float('-inf')).",
])
def check_padding_bug(fn):
    for case, args in enumerate(_additive_cases()):
        with torch.no_grad():
            out = call(fn, *(a.clone() for a in args), what="bahdanau_attention")
            context, weights = returned_pair(out, "bahdanau_attention", "(context, weights)")
            ref, ref_w = _additive(*args)
        real = args[2]
        expect_shape(weights, real.shape, "the weights")
        expect_shape(context, ref.shape, "the context")
        s_prev, h, _, W_a, U_a, b, v_a = args
        e = _energies(s_prev, h, W_a, U_a, b, v_a)  # (B, S)
        if close(weights, torch.softmax(e.masked_fill(~real, 0.0), -1), n=5):  # a fix tried
            raise Wrong("the padding's energies are set to 0, not removed: the softmax still "
                        "gives each padded position the weight e^0 / Z; fill them with -inf")
        if _padding_slips(weights, real, large=case == 1, later=case == 0):  # the symptom only
            continue
        expect(close(weights, ref_w, n=5), "the weights differ from eqs. (4.7)-(4.8) on the "
               "real positions")
        expect(close(context, ref, n=6), "the weights are right but the context is not their "
               "average of the annotations, eq. (4.6)")


# ---------------------------------------------------------------------------------------------
# Find the bug: the decoder's context read from the wrong state.
# ---------------------------------------------------------------------------------------------


def _decoder_case(seed: int):
    torch.manual_seed(seed)  # the model's initial weights (the global state is restored by check)
    model = Seq2Seq(src_vocab_size=12, tgt_vocab_size=9, embed_dim=4, hidden_size=5).to(F64)
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 12, (3, 6), generator=g)
    memory = model.encode(src, torch.tensor([6, 4, 2]))
    s_prev = torch.randn(3, 5, generator=g, dtype=F64)
    y_prev = torch.randint(4, 9, (3,), generator=g)
    return model, memory, s_prev, y_prev


def _step_variants(dec, y_prev, s_prev, memory):
    """Logits of eq. (4.9) and of its typical slips, with the new state."""
    e = dec.embedding(y_prev)
    c, _ = dec.context(s_prev, memory)
    s = dec.cell(torch.cat([e, c], dim=-1), s_prev)
    c_new, _ = dec.context(s, memory)
    c_0, _ = dec.context(dec.init_state(memory), memory)
    s_0 = dec.cell(torch.cat([e, c_0], dim=-1), s_prev)
    c_all, _ = dec.attention(s_prev, memory.annotations)  # no mask: the padding counts too
    s_all = dec.cell(torch.cat([e, c_all], dim=-1), s_prev)
    return s, {
        "new state": dec.out(torch.cat([s, c_new, e], dim=-1)),
        "first state": dec.out(torch.cat([s_0, c_0, e], dim=-1)),
        "no mask": dec.out(torch.cat([s_all, c_all, e], dim=-1)),
    }


@exercise("ex-ch4-context-bug", hints=[
    "Write the step next to eq. (4.9): which state does each line read, s_{i-1} or s_i?",
    "The context c_i is computed once per step, from s_{i-1}, and the same c_i enters both the "
    "update of the GRU and the read-out.",
])
def check_context_bug(fn):
    model, memory, s_prev, y_prev = _decoder_case(42)
    dec = model.decoder
    with torch.no_grad():
        out = call(fn, dec, y_prev.clone(), s_prev.clone(), memory, what="decoder_step")
        logits, s = returned_pair(out, "decoder_step", "(logits, state)")
        ref_logits, ref_s = model.decode_step(y_prev, s_prev, memory)
        _, slips = _step_variants(dec, y_prev, s_prev, memory)
    expect_shape(logits, ref_logits.shape, "the logits")
    expect_shape(s, ref_s.shape, "the new state")
    if close(s, ref_s, n=10) and close(logits, slips["new state"], n=10):
        # the starter's bug: the symptom only
        raise Wrong("the new state s_i is right, but the logits differ from those of eq. (4.9)")
    if close(logits, slips["first state"], n=10):
        raise Wrong("the context is computed from s_0 at every step: the query is the previous "
                    "state s_(i-1), which changes from step to step")
    if close(logits, slips["no mask"], n=10):
        raise Wrong("the context reads the padding of the shorter sources: pass the source's "
                    "mask, memory.mask, to the attention")
    expect(close(s, ref_s, n=10), "the new state is not the GRU's update of s_(i-1) with "
           "[E y_(i-1); c_i]")
    expect(close(logits, ref_logits, n=10), "the new state is right but the logits are not "
           "W_o [s_i; c_i; E y_(i-1)] + b_o")


# ---------------------------------------------------------------------------------------------
# Luong's multiplicative score.
# ---------------------------------------------------------------------------------------------


def _luong_cases():
    """Two batches (s, h, mask, W): random ones, with scores of order 1, and one whose real scores
    are about -55 and whose padding's are about +10 (a finite fill value then lets it in)."""
    _, h, _, real = _annotations(43, S=6, D=4)
    g = torch.Generator().manual_seed(44)
    s = torch.randn(h.shape[0], 2, generator=g, dtype=F64)  # n = 2: annotations of 2n = 4
    W = torch.randn(2, 4, generator=g, dtype=F64)
    q = s @ W  # (B, D): the score of h_j is q . h_j
    target = torch.where(real, -55 + 2 * torch.randn(real.shape, generator=g, dtype=F64), 10.0)
    shift = target - torch.einsum("bd,bsd->bs", q, h)
    large = h + shift[..., None] * (q / (q * q).sum(-1, keepdim=True))[:, None]
    return [(s, h, real, W), (s, large, real, W)]


@exercise("ex-ch4-luong", hints=[
    "The score of position j is a number s^T W h_j: first the vector s^T W, of the width of an "
    "annotation, then its dot product with every h_j (torch.einsum or a batched @).",
    "Mask the padding before the softmax as AdditiveAttention does, and return the weighted "
    "average of the annotations with the weights. Luong et al. do not scale their scores.",
])
def check_luong(fn):
    for case, (s, h, real, W) in enumerate(_luong_cases()):
        out = call(fn, s.clone(), h.clone(), real.clone(), W.clone(), what="luong_attention")
        context, weights = returned_pair(out, "luong_attention", "(context, weights)")
        expect_shape(weights, real.shape, "the weights")
        expect_shape(context, (h.shape[0], h.shape[-1]), "the context")
        scores = torch.einsum("bd,bsd->bs", s @ W, h)
        ref_w = _masked_softmax(scores, real)
        ref = (ref_w[..., None] * h).sum(1)
        w = weights.detach().to(F64)
        expect(bool(torch.isfinite(w).all()) and not bool((w < 0).any()),
               "the weights have negative or infinite entries, so they are not a softmax: each "
               "row must be a distribution over the source (are these the scores themselves?)")
        if _padding_slips(weights, real, ". Mask the scores with -inf before the softmax",
                          large=case == 1, word="scores", later=case == 0):
            continue
        if close(weights, _masked_softmax(scores / h.shape[-1] ** 0.5, real), n=4):
            raise Wrong("the scores are divided by sqrt(d): that is the transformer's scaled dot "
                        "product; Luong's general score is s^T W h_j as it is")
        expect(close(weights, ref_w, n=4), "the weights are not the softmax of s^T W h_j over "
               "the real positions")
        expect(close(context, ref, n=6), "the weights are right but the context is not their "
               "average of the annotations")


# ---------------------------------------------------------------------------------------------
# Where the year comes from.
# ---------------------------------------------------------------------------------------------

YEAR_SOURCES = ["3/5/32", "12/11/89", "1/1/00", "28/2/71", "9/10/45"]


@exercise("ex-ch4-year", hints=[
    "For source k of length n (characters, without <eos>), the year's two digits are its last "
    "two characters, at positions n - 2 and n - 1; position n holds <eos>.",
    "Take the weights of the four year outputs (rows 0 to 3), add up each row's weight on those "
    "two positions, and average over the four rows and then over the sources.",
])
def check_year(fn):
    g = torch.Generator().manual_seed(45)
    N, T_out, S = len(YEAR_SOURCES), 11, max(len(s) for s in YEAR_SOURCES) + 1
    e = torch.randn(N, T_out, S, generator=g, dtype=F64) * 2
    real = lengths_to_mask(torch.tensor([len(s) + 1 for s in YEAR_SOURCES]), S)[:, None]
    w = _masked_softmax(e, real)

    def share(rows, first, last):
        return sum(w[k, rows, len(s) + first:len(s) + last].sum(-1).mean().item()
                   for k, s in enumerate(YEAR_SOURCES)) / N

    answer = float(_number(call(fn, w.clone(), list(YEAR_SOURCES), what="year_share"),
                           "year_share"))
    if 1.0 < answer <= 100.0 and agrees(answer / 100, share(slice(0, 4), -2, 0), 2):
        raise Wrong("that is the share as a percentage: give it as a fraction in [0, 1]")
    expect(0.0 <= answer <= 1.0, "a share must lie in [0, 1]: average the four rows rather "
           "than adding them up")
    if agrees(answer, share(slice(0, 4), -1, 1), 4):
        raise Wrong("you counted the <eos> position: the source's last two characters are at "
                    "n - 2 and n - 1, and <eos> follows them")
    if agrees(answer, share(slice(0, 2), -2, 0), 4):
        raise Wrong("only the first two year digits are counted: the year has four outputs, "
                    "rows 0 to 3")
    if agrees(answer, share(slice(1, 5), -2, 0), 4):
        raise Wrong("rows 1 to 4 are counted: the weights' rows start after <sos>, so row 0 is "
                    "already the first year digit; the year is rows 0 to 3")
    if agrees(answer, share(slice(0, T_out), -2, 0), 4):
        raise Wrong("every output row is averaged: the year is the first four outputs, rows 0 "
                    "to 3")
    if agrees(answer, share(slice(0, 4), -3, -1), 4):
        raise Wrong("the positions are one too early: the source's last two characters are at "
                    "n - 2 and n - 1 (0-based), for a source of n characters")
    padded = w[:, 0:4, -2:].sum(-1).mean().item()
    if agrees(answer, padded, 4) and not agrees(padded, share(slice(0, 4), -2, 0), 4):
        raise Wrong("those are the last two columns of the padded weights, which are <eos> or "
                    "padding for the shorter sources: take each source's own positions n - 2 and "
                    "n - 1")
    first = w[:, 0:4, 0:2].sum(-1).mean().item()
    if agrees(answer, first, 4):
        raise Wrong("that is the weight on the first two source characters: the year's two "
                    "digits are the last two characters of each source")
    expect(agrees(answer, share(slice(0, 4), -2, 0), 4),
           "the share differs from the mean weight of the four year outputs on the last two "
           "source characters (to 4 significant digits)")


# ---------------------------------------------------------------------------------------------
# Exposure bias: the loss without a teacher.
# ---------------------------------------------------------------------------------------------


def _free_running_logits(model, memory, tgt, pad_after_eos: bool, zero_start: bool = False):
    """The logits of every step when the decoder reads its own greedy predictions; with
    ``pad_after_eos`` it reads <pad> after its own <eos>, as greedy_decode does; with
    ``zero_start`` it starts from a state of zeros instead of s_0 (a slip)."""
    state, prev, logits = None, tgt[:, 0], []
    if zero_start:
        state = torch.zeros_like(model.decoder.init_state(memory))
    done = torch.zeros(tgt.shape[0], dtype=torch.bool)
    for _ in range(tgt.shape[1] - 1):
        step_logits, state = model.decode_step(prev, state, memory)
        logits.append(step_logits)
        prev = step_logits.argmax(-1)
        if pad_after_eos:
            prev = prev.masked_fill(done, PAD_ID)
            done = done | (prev == EOS_ID)
    return torch.stack(logits, 1)  # (B, T - 1, V)


def _loss(logits, tgt, ignore_pad: bool = True):
    return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(),
                           ignore_index=PAD_ID if ignore_pad else -100)


def _exposure_case(early_eos: bool = False):
    """A fresh model (the learner may change it) and a batch with <eos> and padding; with
    ``early_eos`` the model writes <eos> at every step, so that greedy decoding stops at once."""
    torch.manual_seed(46)  # the model's initial weights (the global state is restored by check)
    model = Seq2Seq(src_vocab_size=12, tgt_vocab_size=9, embed_dim=4, hidden_size=6).to(F64)
    model.eval()
    if early_eos:
        with torch.no_grad():
            model.decoder.out.bias[EOS_ID] += 50.0
    g = torch.Generator().manual_seed(46)
    src = torch.randint(4, 12, (4, 6), generator=g)
    src_lengths = torch.tensor([6, 5, 3, 2])
    tgt = torch.randint(4, 9, (4, 7), generator=g)
    tgt[:, 0] = 2  # <sos>
    tgt[1, 5], tgt[1, 6] = 3, PAD_ID  # <eos> then padding
    tgt[2, 3], tgt[2, 4:] = 3, PAD_ID
    return model, src, src_lengths, tgt


@functools.lru_cache(maxsize=2)
def _exposure_references(early_eos: bool = False) -> dict[str, torch.Tensor]:
    """The losses of the right answer and of the typical slips, computed once on a model of
    their own (0-d tensors, which nothing modifies)."""
    model, src, src_lengths, tgt = _exposure_case(early_eos)
    with torch.no_grad():
        memory = model.encode(src, src_lengths)
        logits = _free_running_logits(model, memory, tgt, pad_after_eos=False)
        each = F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=PAD_ID,
                               reduction="none")  # (B, T - 1)
        return {
            "free": _loss(logits, tgt),
            "pad after eos": _loss(_free_running_logits(model, memory, tgt, True), tgt),
            "forced": model.loss(src, src_lengths, tgt),
            "with padding": _loss(logits, tgt, ignore_pad=False),
            "per sequence": (each.sum(1) / (tgt[:, 1:] != PAD_ID).sum(1)).mean(),
            "summed": each.sum(),
            "shifted": F.cross_entropy(logits.transpose(1, 2), tgt[:, :-1], ignore_index=PAD_ID),
            "zero start": _loss(_free_running_logits(model, memory, tgt, False, zero_start=True),
                                tgt),
            **{f"cut at own eos {k}": _cut_at_own_eos(logits, each, tgt, k) for k in (0, 1)},
        }


def _cut_at_own_eos(logits, each, tgt, include: int) -> torch.Tensor:
    """The loss of only the steps before the decoder's own first <eos> (``include`` = 1: and of
    that step too), as if scoring stopped where greedy_decode stops."""
    is_eos = (logits.argmax(-1) == EOS_ID).long()  # (B, T - 1)
    before = is_eos.cumsum(1) - include * is_eos == 0  # no <eos> written before this step
    keep = before & (tgt[:, 1:] != PAD_ID)
    return each[keep].sum() / keep.sum().clamp(min=1)


@exercise("ex-ch4-exposure", hints=[
    "Start as model.loss does, from <sos> (tgt[:, 0]) and the encoder's memory, and call "
    "model.decode_step once per target position (its state is None at the first step). "
    "Compute the loss of the true next character at every step.",
    "What the decoder reads at the next step is its own most probable character, "
    "logits.argmax(-1), not tgt[:, i + 1].",
    "Stack the logits of all steps and use F.cross_entropy with ignore_index=Vocab.pad_id (0), so "
    "that padding after <eos> does not count.",
])
def check_exposure(fn):
    for early_eos in (False, True):
        _exposure_case_verdict(fn, early_eos)


#: the loss of each typical slip (a key of _exposure_references) and what to say about it
_EXPOSURE_SLIPS = {
    "forced": "that is the teacher-forced loss: at test time the decoder reads its own previous "
              "prediction, not the true character",
    "with padding": "the padding after <eos> is counted in the loss: ignore the <pad> targets as "
                    "model.loss does",
    "per sequence": "that is the mean over the sequences of each sequence's mean loss: the loss is "
                    "the mean over all real target characters of the batch, as in model.loss",
    "summed": "that is the sum of the losses: the loss is their mean over the real target "
              "characters, as in model.loss",
    "shifted": "step i's logits are scored against tgt[:, i], the true character at the position "
               "the decoder has just read: they predict the next one, tgt[:, i + 1]",
    "zero start": "the decoder starts from a state of zeros: its first state is s_0, computed "
                  "from the encoder's memory (pass state=None to decode_step at the first step)",
}


def _exposure_case_verdict(fn, early_eos: bool) -> None:
    model, src, src_lengths, tgt = _exposure_case(early_eos)
    with torch.no_grad():
        out = _number(call(fn, model, src, src_lengths, tgt.clone(), what="free_running_loss"),
                      "free_running_loss")
    ref = _exposure_references(early_eos)
    n = tgt.shape[0] * tgt.shape[1]
    # after its own <eos> the decoder may read <pad> (as greedy_decode feeds it) or go on reading
    # its argmax: both are fair readings of the exercise
    if close(out, ref["free"], n=n) or close(out, ref["pad after eos"], n=n):
        return
    if early_eos:
        raise Wrong("right on a model that writes letters, wrong on one that writes <eos> at "
                    "its first step: the loss must still score every true character of tgt, "
                    "even after the decoder has written <eos> (greedy_decode stops there, so "
                    "its output is shorter than the targets)")
    if any(close(out, ref[f"cut at own eos {k}"], n=n) for k in (0, 1)):
        raise Wrong("the loss stops where the decoder writes its own <eos>: it must still score "
                    "every true character of tgt after that (greedy_decode stops there, so its "
                    "output is shorter than the targets)")
    for key, message in _EXPOSURE_SLIPS.items():
        if close(out, ref[key], n=n):
            raise Wrong(message)
    raise Wrong("the loss differs from the mean cross-entropy of the true characters when the "
                "decoder reads its own greedy predictions")
