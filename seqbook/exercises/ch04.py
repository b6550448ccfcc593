"""Checks of chapter 4's exercises (Bahdanau attention)."""

from __future__ import annotations

import numbers

import torch
import torch.nn.functional as F

from ..attention import AdditiveAttention, lengths_to_mask, scaled_dot_product_attention
from ..seq2seq import PAD_ID, Seq2Seq
from .core import Wrong, call, close, exercise, expect, expect_shape, returned_pair

F64 = torch.float64


def _annotations(seed: int, B: int = 3, S: int = 5, D: int = 4):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, S, D, generator=g, dtype=F64)
    lengths = torch.tensor([S, 3, 1][:B])
    return g, h, lengths, lengths_to_mask(lengths, S)


def _close(actual: torch.Tensor, expected: torch.Tensor, n: int = 1) -> bool:
    """``close`` at the precision of the answer (float32 weights from a bool mask are right too)."""
    if actual.is_floating_point() and torch.finfo(actual.dtype).eps > torch.finfo(F64).eps:
        expected = expected.to(actual.dtype)
    return close(actual, expected, n=n)


def _padding_slips(weights: torch.Tensor, real: torch.Tensor) -> None:
    """Name the typical mistakes with padding: weight on it, or rows that no longer sum to one."""
    leak = (weights.abs() > 1e-12) & ~real
    if leak.any():
        b, j = (int(t) for t in leak.nonzero()[0])
        n = int(real[b].sum())
        raise Wrong(f"position {j} of a source of length {n} gets weight: the softmax runs over "
                    "the padding too. Mask the energies before the softmax")
    sums = weights.sum(-1)
    if not _close(sums, torch.ones(sums.shape, dtype=F64), n=weights.shape[-1]):
        raise Wrong("the weights of a padded source do not sum to one: zeroing them after the "
                    "softmax leaves the real positions with too little weight")


# ---------------------------------------------------------------------------------------------
# Additive attention with v_a = 0.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch4-uniform", hints=[
    "With v_a = 0 every energy e_ij is 0, whatever the query and the keys. What does a softmax "
    "make of equal energies?",
    "The mask still applies: padding gets weight 0, and each of the n real positions of a "
    "source gets 1/n. The context is then a plain mean, over the real positions only.",
])
def check_uniform(fn):
    _, h, lengths, real = _annotations(40)
    out = call(fn, h.clone(), lengths.clone(), what="uniform_attention")
    context, weights = returned_pair(out, "uniform_attention", "(context, weights)")
    expect_shape(weights, real.shape, "the weights")
    expect_shape(context, (h.shape[0], h.shape[-1]), "the context")
    att = AdditiveAttention(3, h.shape[-1], 5).to(F64)
    with torch.no_grad():
        att.v_a.weight.zero_()
        ref, ref_w = att(torch.randn(h.shape[0], 3, dtype=F64), h, mask=real)
    if _close(weights, torch.full_like(ref_w, 1 / h.shape[1])):
        raise Wrong("every position gets 1/S, padding included: the mask still hides the "
                    "padding, so a source of length n spreads its weight over n positions")
    _padding_slips(weights, real)
    expect(_close(weights, ref_w), "the weights are not uniform over the real positions")
    if close(context, h.mean(1)):
        raise Wrong("the context averages the padding too: it is the mean of the real "
                    "annotations only")
    low = weights.dtype if weights.is_floating_point() else F64  # float32 weights are fine
    expect(_close(context.to(low), ref, n=h.shape[1]), "the weights are right but the context "
           "is not their average of the annotations")


# ---------------------------------------------------------------------------------------------
# Find the bug: attention that reads the padding.
# ---------------------------------------------------------------------------------------------


def _additive_case(seed: int):
    _, h, lengths, real = _annotations(seed, S=6, D=4)
    torch.manual_seed(seed)
    att = AdditiveAttention(3, 4, 5).to(F64)
    s_prev = torch.randn(h.shape[0], 3, generator=torch.Generator().manual_seed(seed + 1),
                         dtype=F64)
    return att, s_prev, h, real


@exercise("ex-ch4-padding-bug", hints=[
    "Run it on the same source twice, once padded with two more positions than the other: should "
    "the context change?",
    "Padding must get weight exactly 0, and the real positions must share all of it. Where in "
    "eqs. (4.6)-(4.8) can the mask act so that both hold?",
    "Set the energies of the padding to -inf (or the most negative float) before the softmax: "
    "e.masked_fill(~mask, float('-inf')).",
])
def check_padding_bug(fn):
    att, s_prev, h, real = _additive_case(41)
    W_a, U_a, b, v_a = att.W_a.weight, att.U_a.weight, att.U_a.bias, att.v_a.weight[0]
    with torch.no_grad():
        out = call(fn, s_prev.clone(), h.clone(), real.clone(), W_a, U_a, b, v_a,
                   what="bahdanau_attention")
        context, weights = returned_pair(out, "bahdanau_attention", "(context, weights)")
        ref, ref_w = att(s_prev, h, mask=real)
    expect_shape(weights, real.shape, "the weights")
    expect_shape(context, ref.shape, "the context")
    _padding_slips(weights, real)
    expect(close(weights, ref_w, n=5), "the weights differ from eqs. (4.7)-(4.8) on the real "
           "positions")
    expect(close(context, ref, n=6), "the weights are right but the context is not their "
           "average of the annotations, eq. (4.6)")


# ---------------------------------------------------------------------------------------------
# Find the bug: the decoder's context read from the wrong state.
# ---------------------------------------------------------------------------------------------


def _decoder_case(seed: int):
    torch.manual_seed(seed)
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
    return s, {
        "new state": dec.out(torch.cat([s, c_new, e], dim=-1)),
        "first state": dec.out(torch.cat([s_0, c_0, e], dim=-1)),
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
        raise Wrong("the read-out uses a context computed from the new state s_i (the order of "
                    "Luong et al.): eq. (4.9) reads the one context c_i, computed from s_(i-1), "
                    "in both the update and the read-out")
    if close(logits, slips["first state"], n=10):
        raise Wrong("the context is computed from s_0 at every step: the query is the previous "
                    "state s_(i-1), which changes from step to step")
    expect(close(s, ref_s, n=10), "the new state is not the GRU's update of s_(i-1) with "
           "[E y_(i-1); c_i]")
    expect(close(logits, ref_logits, n=10), "the new state is right but the logits are not "
           "W_o [s_i; c_i; E y_(i-1)] + b_o")


# ---------------------------------------------------------------------------------------------
# Luong's multiplicative score.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch4-luong", hints=[
    "The score of position j is a number s^T W h_j: first the vector s^T W, of the width of an "
    "annotation, then its dot product with every h_j (torch.einsum or a batched @).",
    "Mask the padding before the softmax as AdditiveAttention does, and return the weighted "
    "average of the annotations with the weights. Luong et al. do not scale their scores.",
])
def check_luong(fn):
    _, h, lengths, real = _annotations(43, S=6, D=4)
    g = torch.Generator().manual_seed(44)
    s = torch.randn(h.shape[0], 3, generator=g, dtype=F64)
    W = torch.randn(3, 4, generator=g, dtype=F64)
    out = call(fn, s.clone(), h.clone(), real.clone(), W.clone(), what="luong_attention")
    context, weights = returned_pair(out, "luong_attention", "(context, weights)")
    expect_shape(weights, real.shape, "the weights")
    expect_shape(context, (h.shape[0], h.shape[-1]), "the context")
    q = (s @ W)[:, None]  # (B, 1, 2n)
    ref, ref_w = (t[:, 0] for t in scaled_dot_product_attention(q, h, h, mask=real[:, None],
                                                                scale=1.0))
    scaled = scaled_dot_product_attention(q, h, h, mask=real[:, None])[1][:, 0]
    _padding_slips(weights, real)
    if close(weights, scaled, n=4):
        raise Wrong("the scores are divided by sqrt(d): that is the transformer's scaled dot "
                    "product; Luong's general score is s^T W h_j as it is")
    expect(close(weights, ref_w, n=4), "the weights are not the softmax of s^T W h_j over the "
           "real positions")
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
    w = torch.softmax(e.masked_fill(~real, float("-inf")), dim=-1)

    def share(rows, first, last):
        return sum(w[k, rows, len(s) + first:len(s) + last].sum(-1).mean().item()
                   for k, s in enumerate(YEAR_SOURCES)) / N

    answer = call(fn, w.clone(), list(YEAR_SOURCES), what="year_share")
    if isinstance(answer, torch.Tensor) and answer.numel() == 1:
        answer = answer.item()
    expect(isinstance(answer, numbers.Real) and not isinstance(answer, bool),
           f"year_share must return a number, got {type(answer).__name__}")
    expect(0.0 <= answer <= 1.0, "a share must lie in [0, 1]: average the four rows rather "
           "than adding them up")
    if abs(answer - share(slice(0, 4), -1, 1)) < 1e-9:
        raise Wrong("you counted the <eos> position: the source's last two characters are at "
                    "n - 2 and n - 1, and <eos> follows them")
    if abs(answer - share(slice(0, 2), -2, 0)) < 1e-9:
        raise Wrong("only the first two year digits are counted: the year has four outputs, "
                    "rows 0 to 3")
    expect(abs(answer - share(slice(0, 4), -2, 0)) < 1e-9,
           "the share differs from the mean weight of the four year outputs on the last two "
           "source characters")


# ---------------------------------------------------------------------------------------------
# Exposure bias: the loss without a teacher.
# ---------------------------------------------------------------------------------------------


def _free_running(model, src, src_lengths, tgt, teacher: bool, ignore_pad: bool = True):
    memory = model.encode(src, src_lengths)
    state, prev, logits = None, tgt[:, 0], []
    for i in range(tgt.shape[1] - 1):
        step_logits, state = model.decode_step(prev, state, memory)
        logits.append(step_logits)
        prev = tgt[:, i + 1] if teacher else step_logits.argmax(-1)
    logits = torch.stack(logits, 1)
    return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(),
                           ignore_index=PAD_ID if ignore_pad else -100)


@exercise("ex-ch4-exposure", hints=[
    "Start as model.loss does, from <sos> (tgt[:, 0]) and the encoder's memory, and call "
    "model.decode_step once per target position. Compute the loss of the true next character "
    "at every step.",
    "What the decoder reads at the next step is its own most probable character, "
    "logits.argmax(-1), not tgt[:, i + 1].",
    "Stack the logits of all steps and use F.cross_entropy with ignore_index=PAD_ID (0), so "
    "that padding after <eos> does not count.",
])
def check_exposure(fn):
    torch.manual_seed(46)
    model = Seq2Seq(src_vocab_size=12, tgt_vocab_size=9, embed_dim=4, hidden_size=6).to(F64)
    model.eval()
    g = torch.Generator().manual_seed(46)
    src = torch.randint(4, 12, (4, 6), generator=g)
    src_lengths = torch.tensor([6, 5, 3, 2])
    tgt = torch.randint(4, 9, (4, 7), generator=g)
    tgt[:, 0] = 2  # <sos>
    tgt[1, 5], tgt[1, 6] = 3, PAD_ID  # <eos> then padding
    tgt[2, 3], tgt[2, 4:] = 3, PAD_ID
    with torch.no_grad():
        out = call(fn, model, src, src_lengths, tgt.clone(), what="free_running_loss")
        if isinstance(out, torch.Tensor) and out.numel() == 1:
            out = out.item()
        expect(isinstance(out, numbers.Real) and not isinstance(out, bool),
               f"free_running_loss must return a number, got {type(out).__name__}")
        ref = _free_running(model, src, src_lengths, tgt, teacher=False).item()
        forced = model.loss(src, src_lengths, tgt).item()
        with_pad = _free_running(model, src, src_lengths, tgt, False, ignore_pad=False).item()
    if abs(out - forced) < 1e-9:
        raise Wrong("that is the teacher-forced loss: at test time the decoder reads its own "
                    "previous prediction, not the true character")
    if abs(out - with_pad) < 1e-9:
        raise Wrong("the padding after <eos> is counted in the loss: ignore the <pad> targets "
                    "as model.loss does")
    expect(abs(out - ref) < 1e-9, "the loss differs from the mean cross-entropy of the true "
           "characters when the decoder reads its own greedy predictions")
