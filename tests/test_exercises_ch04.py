"""Chapter 4's exercise checks (seqbook.exercises.ch04): each passes a right answer, calls the
untouched starter "not attempted" (the find-the-bug starters get their bugs named), and names what
is wrong in each typical wrong answer."""

import math

import torch
import torch.nn.functional as F

from seqbook.attention import lengths_to_mask
from seqbook.exercises import check


def starter(*args):
    raise NotImplementedError  # your code here


# --- additive attention with v_a = 0 ------------------------------------------------------------


def test_uniform():
    def right(h, lengths):
        real = lengths_to_mask(lengths, h.shape[1])
        w = real / lengths[:, None]
        return (w[..., None] * h).sum(1), w

    def everywhere(h, lengths):
        w = torch.full(h.shape[:2], 1 / h.shape[1], dtype=h.dtype)
        return h.mean(1), w

    def mean_of_all(h, lengths):
        return h.mean(1), right(h, lengths)[1]

    assert check("ex-ch4-uniform", right)
    assert check("ex-ch4-uniform", starter).status == "not attempted"
    assert "padding included" in check("ex-ch4-uniform", everywhere).message
    assert "averages the padding" in check("ex-ch4-uniform", mean_of_all).message
    assert "pair (context, weights)" in check("ex-ch4-uniform", lambda h, n: h).message


# --- find the bug: padding in the softmax ------------------------------------------------------


def attention(s_prev, h, mask, W_a, U_a, b, v_a, how="right"):
    e = torch.tanh((s_prev @ W_a.T)[:, None] + h @ U_a.T + b) @ v_a  # (B, S)
    if how == "right":
        e = e.masked_fill(~mask, float("-inf"))
    alpha = torch.softmax(e, dim=-1)
    if how == "after":
        alpha = alpha * mask
    return (alpha[..., None] * h).sum(1), alpha


def test_padding_bug():
    buggy = check("ex-ch4-padding-bug", lambda *a: attention(*a, how="buggy"))
    assert buggy.status == "fail"
    assert "of a source of length 3 gets weight: the softmax runs over the padding" \
        in buggy.message
    assert check("ex-ch4-padding-bug", attention)
    assert check("ex-ch4-padding-bug", starter).status == "not attempted"
    after = check("ex-ch4-padding-bug", lambda *a: attention(*a, how="after"))
    assert "do not sum to one" in after.message


# --- find the bug: the decoder reads the wrong state -------------------------------------------


def step(dec, y_prev, s_prev, memory, bug=None):
    e = dec.embedding(y_prev)
    query = dec.init_state(memory) if bug == "s0" else s_prev
    c, _ = dec.context(query, memory)
    s = dec.cell(torch.cat([e, c], dim=-1), s_prev)
    if bug == "luong":  # the starter's bug
        c, _ = dec.context(s, memory)
    return dec.out(torch.cat([s, c, e], dim=-1)), s


def test_context_bug():
    assert check("ex-ch4-context-bug", step)
    assert check("ex-ch4-context-bug", starter).status == "not attempted"
    luong = check("ex-ch4-context-bug", lambda *a: step(*a, bug="luong"))
    assert "computed from the new state s_i" in luong.message
    assert "from s_0 at every step" in check("ex-ch4-context-bug",
                                             lambda *a: step(*a, bug="s0")).message
    no_e = check("ex-ch4-context-bug", lambda *a: (step(*a)[0] * 2, step(*a)[1]))
    assert "logits are not" in no_e.message


# --- Luong's multiplicative score --------------------------------------------------------------


def luong(s, h, mask, W, scale=1.0):
    e = torch.einsum("bd,bsd->bs", s @ W, h) * scale
    w = torch.softmax(e.masked_fill(~mask, -math.inf), -1)
    return (w[..., None] * h).sum(1), w


def test_luong():
    assert check("ex-ch4-luong", luong)
    assert check("ex-ch4-luong", starter).status == "not attempted"
    scaled = check("ex-ch4-luong", lambda s, h, m, W: luong(s, h, m, W, 1 / math.sqrt(4)))
    assert "divided by sqrt(d)" in scaled.message
    unmasked = check("ex-ch4-luong", lambda s, h, m, W: luong(s, h, torch.ones_like(m), W))
    assert "the softmax runs over the padding" in unmasked.message
    assert "raised" in check("ex-ch4-luong", lambda s, h, m, W: luong(s, h, m, W.T)).message


# --- the year's share of attention ---------------------------------------------------------------


def share(w, sources, rows=4, first=-2, last=0):
    return sum(w[k, :rows, len(s) + first:len(s) + last].sum(-1).mean().item()
               for k, s in enumerate(sources)) / len(sources)


def test_year():
    assert check("ex-ch4-year", share)
    assert check("ex-ch4-year", starter).status == "not attempted"
    assert "<eos> position" in check("ex-ch4-year", lambda w, s: share(w, s, 4, -1, 1)).message
    assert "four outputs" in check("ex-ch4-year", lambda w, s: share(w, s, 2)).message
    assert "[0, 1]" in check("ex-ch4-year", lambda w, s: 4 * share(w, s)).message
    assert "a number" in check("ex-ch4-year", lambda w, s: "70%").message


# --- exposure bias: the loss without a teacher ----------------------------------------------------


def free_running(model, src, src_lengths, tgt, teacher=False, ignore=0):
    memory = model.encode(src, src_lengths)
    state, prev, logits = None, tgt[:, 0], []
    for i in range(tgt.shape[1] - 1):
        out, state = model.decode_step(prev, state, memory)
        logits.append(out)
        prev = tgt[:, i + 1] if teacher else out.argmax(-1)
    return F.cross_entropy(torch.stack(logits, 1).flatten(0, 1), tgt[:, 1:].flatten(),
                           ignore_index=ignore)


def test_exposure():
    assert check("ex-ch4-exposure", free_running)
    assert check("ex-ch4-exposure", starter).status == "not attempted"
    forced = check("ex-ch4-exposure", lambda *a: free_running(*a, teacher=True))
    assert "teacher-forced loss" in forced.message
    assert "padding after <eos>" in check("ex-ch4-exposure",
                                          lambda *a: free_running(*a, ignore=-100)).message
    assert "a number" in check("ex-ch4-exposure", lambda *a: None and 1 or [1.0]).message
