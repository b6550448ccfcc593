"""Chapter 4's exercise checks (seqbook.exercises.ch04): each passes a right answer (also written
another way, in float32 or as NumPy), calls the untouched starter "not attempted", gives the
find-the-bug starters their symptom (not the fix), and names what is wrong in each typical wrong
answer."""

import math

import numpy as np
import torch
import torch.nn.functional as F
from test_exercise_cells import FIX_WORDS

from seqbook.attention import lengths_to_mask
from seqbook.decoding import PAD_ID, greedy_decode
from seqbook.exercises import check


def starter(*args):
    raise NotImplementedError  # your code here


def f32(t):
    """A float64 tensor as float32 (anything else as it is): the answer computed in float32."""
    return t.float() if t.dtype == torch.float64 else t


# --- additive attention with v_a = 0 ------------------------------------------------------------


def test_uniform():
    def right(h, lengths):
        real = lengths_to_mask(lengths, h.shape[1])
        w = real / lengths[:, None]  # float32 weights: right at their precision
        return (w[..., None] * h).sum(1), w

    def masked_mean(h, lengths):
        real = lengths_to_mask(lengths, h.shape[1]).to(h.dtype)
        w = real / real.sum(1, keepdim=True)
        return torch.einsum("bs,bsd->bd", w, h), w

    def everywhere(h, lengths):
        w = torch.full(h.shape[:2], 1 / h.shape[1], dtype=h.dtype)
        return h.mean(1), w

    def mean_of_all(h, lengths):
        return h.mean(1), masked_mean(h, lengths)[1]

    assert check("ex-ch4-uniform", right)
    assert check("ex-ch4-uniform", masked_mean)
    assert check("ex-ch4-uniform", lambda h, n: tuple(t.numpy() for t in masked_mean(h, n)))
    assert check("ex-ch4-uniform", lambda h, n: masked_mean(h.float(), n))
    assert check("ex-ch4-uniform", starter).status == "not attempted"
    assert "padding included" in check("ex-ch4-uniform", everywhere).message
    assert "averages the padding" in check("ex-ch4-uniform", mean_of_all).message
    assert "pair (context, weights)" in check("ex-ch4-uniform", lambda h, n: h).message


    def cast_up(h, lengths):  # the reader's case: float32 weights cast to the annotations' dtype
        real = lengths_to_mask(lengths, h.shape[1])
        w = (real / lengths[:, None]).to(h.dtype)
        return (w[..., None] * h).sum(1), w

    def eos_counted(h, lengths):  # the lengths taken to count <eos> as well
        real = lengths_to_mask(lengths, h.shape[1]).to(h.dtype)
        w = real / (lengths[:, None] + 1)
        return (w[..., None] * h).sum(1), w

    def over_padded_length(h, lengths):  # 1/S at the real positions, S the padded length
        w = lengths_to_mask(lengths, h.shape[1]).to(h.dtype) / h.shape[1]
        return (w[..., None] * h).sum(1), w

    assert check("ex-ch4-uniform", cast_up)
    assert "1/(n + 1)" in check("ex-ch4-uniform", eos_counted).message
    assert "S the padded length" in check("ex-ch4-uniform", over_padded_length).message
    zeros = check("ex-ch4-uniform", lambda h, n: (h[:, 0] * 0, torch.zeros(h.shape[:2])))
    assert "every weight is 0" in zeros.message


# --- find the bug: padding in the softmax ------------------------------------------------------


def attention(s_prev, h, mask, W_a, U_a, b, v_a, how="right"):
    e = torch.tanh((s_prev @ W_a.T)[:, None] + h @ U_a.T + b) @ v_a  # (B, S)
    if how == "right":
        e = e.masked_fill(~mask, float("-inf"))
    elif how == "-40":
        e = e.masked_fill(~mask, -40.0)
    elif how == "add -40":
        e = e - 40.0 * (~mask)
    elif how == "-1e9":
        e = e.masked_fill(~mask, -1e9)
    elif how == "where":
        e = torch.where(mask, e, torch.finfo(e.dtype).min)
    elif how == "inverted":
        e = e.masked_fill(mask, float("-inf"))
    elif how == "zero":
        e = e.masked_fill(~mask, 0.0)
    elif how == "times":
        e = e * mask
    alpha = torch.softmax(e, dim=-1)
    if how in ("after", "renormalise"):
        alpha = alpha * mask
    if how == "renormalise":
        alpha = alpha / alpha.sum(-1, keepdim=True)
    return (alpha[..., None] * h).sum(1), alpha


def test_padding_bug():
    name = "ex-ch4-padding-bug"
    buggy = check(name, lambda *a: attention(*a, how="buggy"))  # the starter
    assert buggy.status == "fail"
    assert "of a source of length 3 gets weight" in buggy.message
    assert not FIX_WORDS.search(buggy.message), buggy.message  # the symptom, not the fix
    assert check(name, attention)
    assert check(name, starter).status == "not attempted"
    assert "do not sum to one" in check(name, lambda *a: attention(*a, how="after")).message
    # a constant "mask": energies far below -40 (or padding energies far above) let it leak
    for how in ("-40", "add -40"):
        soft = check(name, lambda *a, how=how: attention(*a, how=how))
        assert soft.status == "fail" and "finite fill" in soft.message, (how, soft)
    assert "gets weight" in check(name, lambda *a: attention(*a, how="inverted")).message
    for how in ("zero", "times"):  # a fix tried: the padding's energies 0, not -inf
        assert "set to 0, not removed" in check(name, lambda *a, how=how: attention(*a, how=how)
                                                ).message
    zeroed = check(name, lambda s, h, m, *w: attention(s, h * m[..., None], m, *w, how="none"))
    assert "gets weight" in zeroed.message
    # other right answers: a huge negative number, the smallest float, renormalising after the
    # softmax; in float64, in float32 and as NumPy arrays
    for how in ("-1e9", "where", "renormalise"):
        assert check(name, lambda *a, how=how: attention(*a, how=how)), how
        assert check(name, lambda *a, how=how: attention(*map(f32, a), how=how)), how
    assert check(name, lambda *a: tuple(t.numpy() for t in attention(*a)))


# --- find the bug: the decoder reads the wrong state -------------------------------------------


def step(dec, y_prev, s_prev, memory, bug=None):
    e = dec.embedding(y_prev)
    query = dec.init_state(memory) if bug == "s0" else s_prev
    c, _ = dec.context(query, memory)
    s = dec.cell(torch.cat([e, c], dim=-1), s_prev)
    if bug == "no mask":  # the context over every position, padding included
        c, _ = dec.attention(query, memory.annotations)
        s = dec.cell(torch.cat([e, c], dim=-1), s_prev)
    if bug == "luong":  # the starter's bug
        c, _ = dec.context(s, memory)
    if bug == "order":
        return dec.out(torch.cat([c, s, e], dim=-1)), s
    if bug == "old state":
        return dec.out(torch.cat([s_prev, c, e], dim=-1)), s
    return dec.out(torch.cat([s, c, e], dim=-1)), s


def test_context_bug():
    name = "ex-ch4-context-bug"
    assert check(name, step)
    assert check(name, starter).status == "not attempted"
    luong = check(name, lambda *a: step(*a, bug="luong"))  # the starter
    assert luong.message.endswith("the new state s_i is right, but the logits differ from those "
                                  "of eq. (4.9)")
    assert "context" not in luong.message  # the symptom only: where it comes from is the bug
    assert not FIX_WORDS.search(luong.message), luong.message  # the symptom, not the fix
    assert "from s_0 at every step" in check(name, lambda *a: step(*a, bug="s0")).message
    assert "memory.mask" in check(name, lambda *a: step(*a, bug="no mask")).message
    for bug in ("order", "old state"):
        assert "logits are not" in check(name, lambda *a, bug=bug: step(*a, bug=bug)).message
    no_e = check(name, lambda *a: (step(*a)[0] * 2, step(*a)[1]))
    assert "logits are not" in no_e.message

    def via_update(dec, y_prev, s_prev, memory):  # the decoder's own attend-and-update
        e = dec.embedding(y_prev)
        s, c, _ = dec.update(e, s_prev, memory)
        return dec.out(torch.cat([s, c, e], dim=-1)), s

    assert check(name, via_update)
    assert check(name, lambda *a: tuple(t.numpy() for t in step(*a)))


# --- Luong's multiplicative score --------------------------------------------------------------


def luong(s, h, mask, W, scale=1.0, fill=-math.inf, dim=-1):
    e = torch.einsum("bd,bsd->bs", s @ W, h) * scale
    w = torch.softmax(e.masked_fill(~mask, fill), dim)
    return (w[..., None] * h).sum(1), w


def test_luong():
    name = "ex-ch4-luong"
    assert check(name, luong)
    assert check(name, starter).status == "not attempted"
    scaled = check(name, lambda s, h, m, W: luong(s, h, m, W, 1 / math.sqrt(4)))
    assert "divided by sqrt(d)" in scaled.message
    unmasked = check(name, lambda s, h, m, W: luong(s, h, torch.ones_like(m), W))
    assert "gets weight" in unmasked.message and "-inf" in unmasked.message
    soft = check(name, lambda s, h, m, W: luong(s, h, m, W, fill=-40.0))
    assert "finite fill" in soft.message
    assert "scores" in soft.message and "energ" not in soft.message  # the exercise's word
    batch = check(name, lambda s, h, m, W: luong(s, h, m, W, dim=0))
    assert "over the batch" in batch.message
    assert "raised" in check(name, lambda s, h, m, W: luong(s, h, m, W.T)).message

    def keys_first(s, h, mask, W):  # (W h_j) . s, with a batched matrix product
        e = ((h @ W.T) @ s[:, :, None])[..., 0]
        w = torch.softmax(torch.where(mask, e, -math.inf), -1)
        return torch.bmm(w[:, None], h)[:, 0], w

    assert check(name, keys_first)

    def scores_as_weights(s, h, mask, W):  # the masked scores returned, no softmax
        e = torch.einsum("bd,bsd->bs", s @ W, h).masked_fill(~mask, -math.inf)
        return (torch.softmax(e, -1)[..., None] * h).sum(1), e

    assert "not a softmax" in check(name, scores_as_weights).message

    def exp_as_weights(s, h, mask, W):  # positive, but not normalised
        e = torch.einsum("bd,bsd->bs", s @ W, h).masked_fill(~mask, -math.inf)
        return (torch.softmax(e, -1)[..., None] * h).sum(1), e.exp()

    assert "not divided by their sum" in check(name, exp_as_weights).message
    assert check(name, lambda *a: luong(*map(f32, a)))
    assert check(name, lambda *a: tuple(t.numpy() for t in luong(*a)))


# --- the year's share of attention ---------------------------------------------------------------


def share(w, sources, rows=4, first=-2, last=0):
    return sum(w[k, :rows, len(s) + first:len(s) + last].sum(-1).mean().item()
               for k, s in enumerate(sources)) / len(sources)


def test_year():
    name = "ex-ch4-year"
    assert check(name, share)
    assert check(name, starter).status == "not attempted"
    assert "<eos> position" in check(name, lambda w, s: share(w, s, 4, -1, 1)).message
    assert "four outputs" in check(name, lambda w, s: share(w, s, 2)).message
    assert "[0, 1]" in check(name, lambda w, s: 4 * share(w, s)).message
    assert "percentage" in check(name, lambda w, s: 100 * share(w, s)).message
    assert "percentage" in check(name, lambda w, s: round(100 * share(w, s))).message
    assert "one too early" in check(name, lambda w, s: share(w, s, 4, -3, -1)).message
    assert "every output row" in check(name, lambda w, s: share(w, s, 11)).message
    first_two = check(name, lambda w, s: w[:, :4, :2].sum(-1).mean().item())
    assert "first two source characters" in first_two.message
    assert "differs" in check(name, lambda w, s: share(w, s, 4, -4, -2)).message
    padded = check(name, lambda w, s: w[:, :4, -2:].sum(-1).mean().item())
    assert "last two columns of the padded weights" in padded.message
    assert "a number" in check(name, lambda w, s: "70%").message
    # a 0-d tensor, NumPy numbers, float32 weights, and the precision the exercise states
    assert check(name, lambda w, s: torch.tensor(share(w, s)))
    assert check(name, lambda w, s: np.float32(share(w, s)))
    assert check(name, lambda w, s: share(w.float(), s))

    def rounded(digits, off=0):
        def answer(w, s):
            x = share(w, s)
            unit = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
            return round(x / unit) * unit + off * unit
        return answer

    assert check(name, rounded(4))
    assert not check(name, rounded(4, off=1))  # a digit off at that precision
    assert not check(name, rounded(3))  # 3 digits are not enough (here)


# --- exposure bias: the loss without a teacher ----------------------------------------------------


def free_running(model, src, src_lengths, tgt, teacher=False, ignore=0, per_sequence=False,
                 reduction="mean", shift=1):
    memory = model.encode(src, src_lengths)
    state, prev, logits = None, tgt[:, 0], []
    for i in range(tgt.shape[1] - 1):
        out, state = model.decode_step(prev, state, memory)
        logits.append(out)
        prev = tgt[:, i + 1] if teacher else out.argmax(-1)
    logits = torch.stack(logits, 1)
    if per_sequence:
        each = F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=ignore,
                               reduction="none")
        return (each.sum(1) / (tgt[:, 1:] != ignore).sum(1)).mean()
    targets = tgt[:, 1:] if shift else tgt[:, :-1]
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=ignore,
                           reduction=reduction)


def greedy_then_forced(model, src, src_lengths, tgt):
    """Greedy decoding first (which reads <pad> after its own <eos>), then the teacher-forced
    logits of its own outputs."""
    T = tgt.shape[1] - 1
    ys = greedy_decode(model, src, src_lengths, T)
    ys = F.pad(ys, (0, T - ys.shape[1]), value=PAD_ID)
    logits = model(src, src_lengths, torch.cat([tgt[:, :1], ys[:, :-1]], 1))
    return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD_ID)


def test_exposure():
    name = "ex-ch4-exposure"
    assert check(name, free_running)
    assert check(name, starter).status == "not attempted"
    forced = check(name, lambda *a: free_running(*a, teacher=True))
    assert "teacher-forced loss" in forced.message
    assert "padding after <eos>" in check(name, lambda *a: free_running(*a, ignore=-100)).message
    per_sequence = check(name, lambda *a: free_running(*a, per_sequence=True))
    assert "each sequence's mean" in per_sequence.message
    summed = check(name, lambda *a: free_running(*a, reduction="sum"))
    assert "sum of the losses" in summed.message
    assert "predict the next one" in check(name, lambda *a: free_running(*a, shift=0)).message
    assert "a number" in check(name, lambda *a: [1.0]).message
    # <pad> after the decoder's own <eos> (greedy_decode's convention) is right too, and the check
    # does meet an <eos> (the two conventions give different losses on its batch)
    assert check(name, greedy_then_forced)
    assert check(name, lambda *a: free_running(*a).item())
    assert check(name, lambda *a: free_running(*a).numpy())
    assert check(name, lambda *a: np.float64(free_running(*a).item()))


def test_exposure_refuses_greedy_output_cut_short():
    def greedy_unpadded(model, src, src_lengths, tgt):  # a reader's answer, wrong in general
        T = tgt.shape[1] - 1
        ys = greedy_decode(model, src, src_lengths, T)  # shorter if every row stops early
        logits = model(src, src_lengths, torch.cat([tgt[:, :1], ys[:, :-1]], 1))
        targets = tgt[:, 1 : ys.shape[1] + 1]
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD_ID)

    result = check("ex-ch4-exposure", greedy_unpadded)
    assert result.status == "fail" and "writes <eos> at its first step" in result.message


def test_exposure_names_a_loss_cut_at_the_model_s_own_eos():
    def cut(model, src, src_lengths, tgt, include=0):  # scoring stops at the model's <eos>
        memory = model.encode(src, src_lengths)
        state, prev, logits = None, tgt[:, 0], []
        for _ in range(tgt.shape[1] - 1):
            out, state = model.decode_step(prev, state, memory)
            logits.append(out)
            prev = out.argmax(-1)
        logits = torch.stack(logits, 1)  # (B, T - 1, V)
        wrote = logits.argmax(-1) == 3  # <eos>
        alive = (wrote.cumsum(1) - include * wrote.long()) == 0
        targets = tgt[:, 1:].masked_fill(~alive, PAD_ID)
        return F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=PAD_ID)

    for include in (0, 1):
        result = check("ex-ch4-exposure", lambda *a, k=include: cut(*a, include=k))
        assert result.status == "fail" and "its own <eos>" in result.message, result


def test_exposure_meets_an_eos():
    from seqbook.exercises import EXERCISES

    seen = []

    def spy(model, src, src_lengths, tgt):
        seen.append((greedy_then_forced(model, src, src_lengths, tgt).item(),
                     free_running(model, src, src_lengths, tgt).item()))
        return free_running(model, src, src_lengths, tgt)

    assert check("ex-ch4-exposure", spy) and EXERCISES
    (after_eos_pad, after_eos_argmax), _ = seen  # the second case: <eos> at once
    assert abs(after_eos_pad - after_eos_argmax) > 1e-3


def test_year_names_rows_one_to_four_and_exposure_a_zero_start():
    def rows_1_to_4(w, sources):
        return sum(w[k, 1:5, len(s) - 2:len(s)].sum(-1).mean().item()
                   for k, s in enumerate(sources)) / len(sources)

    assert "rows 1 to 4" in check("ex-ch4-year", rows_1_to_4).message

    def zero_start(model, src, src_lengths, tgt):
        memory = model.encode(src, src_lengths)
        state = torch.zeros_like(model.decoder.init_state(memory))
        prev, logits = tgt[:, 0], []
        for _ in range(tgt.shape[1] - 1):
            out, state = model.decode_step(prev, state, memory)
            logits.append(out)
            prev = out.argmax(-1)
        logits = torch.stack(logits, 1)
        return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD_ID)

    assert "state of zeros" in check("ex-ch4-exposure", zero_start).message


def test_uniform_names_eos_left_out():

    from seqbook.attention import lengths_to_mask

    def without_eos(h, lengths, guard=True):  # n - 1 real characters, <eos> not counted
        mask = lengths_to_mask(lengths - 1, h.shape[1])
        n = (lengths - 1).clamp(min=1) if guard else lengths - 1
        w = mask.double() / n[:, None].double()
        return (w[..., None] * h).sum(1), w

    for guard in (True, False):  # unguarded: 0/0 for a source of length 1
        result = check("ex-ch4-uniform", lambda h, lengths, g=guard: without_eos(h, lengths, g))
        assert not result and "<eos>, gets no weight" in result.message, result


def test_uniform_inverted_mask_is_told_about_the_padding_not_nan():
    from seqbook.attention import lengths_to_mask

    def inverted(h, lengths):  # weight on the padding; 0/0 = NaN where a source has none
        pad = ~lengths_to_mask(lengths, h.shape[1])
        w = pad.double() / pad.sum(-1, keepdim=True).double()
        return (w.nan_to_num()[..., None] * h).sum(1), w

    result = check("ex-ch4-uniform", inverted)
    assert not result and "gets weight" in result.message and "NaN" not in result.message, result
