"""Slips that fresh readers of chapters 1, 2, 4, 5, 7 and 9 wrote and that a check once accepted,
or answered with a misleading message: each must now be refused, with the message that names it.
"""

import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from seqbook.attention import lengths_to_mask
from seqbook.bpe import pretokenize
from seqbook.exercises import check
from seqbook.exercises.ch01 import _by_length, _in_rounds
from seqbook.exercises.ch07 import _exp_sweep


def _learn_merges(text, num_merges, count):
    """Byte-level BPE training with ``count(word)`` giving the pairs a piece contributes."""
    words = Counter(tuple(bytes([b]) for b in p.encode("utf-8")) for p in pretokenize(text))
    merges = []
    for _ in range(num_merges):
        counts = Counter()
        for word, f in words.items():
            for pair in count(word):
                counts[pair] += f
        if not counts:
            break
        a, b = max(counts, key=counts.get)
        merges.append((a, b))
        merged = Counter()
        for word, f in words.items():
            out, i = [], 0
            while i < len(word):
                if word[i : i + 2] == (a, b):
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += f
        words = merged
    return merges


def _pairs(word):  # eq. (1.2): every adjacent pair, overlaps included
    return [(word[i], word[i + 1]) for i in range(len(word) - 1)]


def _runs_once(word):  # a run such as "aaa" counted as str.count counts it
    pairs, i = [], 0
    while i < len(word) - 1:
        pairs.append((word[i], word[i + 1]))
        run = word[i] == word[i + 1] and i + 2 < len(word) and word[i + 2] == word[i]
        i += 2 if run else 1
    return pairs


def _wordpiece(word, vocab, unknown):
    pieces, start = [], 0
    while start < len(word):
        prefix = "##" if start else ""
        for end in range(len(word), start, -1):
            if prefix + word[start:end] in vocab:
                pieces.append(prefix + word[start:end])
                break
        else:
            if unknown == "empty":
                return []
            pieces.append("[UNK]")
            end = start + 1
        start = end
    return pieces


def _bahdanau(fill):
    def attention(s_prev, h, mask, W_a, U_a, b, v_a):
        e = torch.tanh((s_prev @ W_a.T)[:, None] + h @ U_a.T + b) @ v_a
        alpha = torch.softmax(e.masked_fill(~mask, fill), dim=-1)
        return (alpha[..., None] * h).sum(1), alpha
    return attention


def _uniform(h, lengths, width=True):
    real = lengths_to_mask(lengths, h.shape[1]) if width else lengths_to_mask(lengths)
    w = real / lengths[:, None]
    return (w.to(h.dtype)[..., None] * h).sum(1), w


def _phi(z):
    return 0.5 * math.erfc(-z / math.sqrt(2))


def _stable(sign=-1.0, root=True, digits=None):
    def stable_probabilities(N, P):
        z = (N - 1) / (P - 1)
        p = _phi(sign * (math.sqrt(z) if root else z))
        one, every = (1 - p) ** N, (1 - p) ** (N * P)
        return (one, every) if digits is None else (round(one, digits), round(every, digits))
    return stable_probabilities


def _response_logprob(logits, ids, mask):
    lp = torch.log(torch.softmax(logits[:, :-1], -1)).gather(-1, ids[:, 1:, None])[..., 0]
    return (lp * mask[:, 1:]).sum(1)


def _dpo_loss(pc, pr, rc, rr, beta):
    return -F.logsigmoid(beta * ((pc - rc) - (pr - rr))).mean()


def _bigram(base):
    def bigram_logits(ids, C):
        pairs = torch.ones(C, C, dtype=torch.float64)
        pairs.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64),
                         accumulate=True)
        return torch.log(pairs / pairs.sum(1, keepdim=True)) / math.log(base)
    return bigram_logits


def _bptt(W_ih, W_hh, W_y, xs, ys, sign=1.0):
    T, m = xs.shape[0], W_hh.shape[0]
    hs = [torch.zeros(m, dtype=xs.dtype)]
    for t in range(T):
        hs.append(torch.tanh(W_ih @ xs[t] + W_hh @ hs[-1]))
    grads = [torch.zeros_like(W) for W in (W_ih, W_hh, W_y)]
    carried = torch.zeros(m, dtype=xs.dtype)
    for t in range(T, 0, -1):
        e = sign * (W_y @ hs[t] - ys[t - 1]) / T
        grads[2] += torch.outer(e, hs[t])
        a = (1 - hs[t] ** 2) * (W_y.T @ e + carried)
        grads[0] += torch.outer(a, xs[t - 1])
        grads[1] += torch.outer(a, hs[t - 1])
        carried = W_hh.T @ a
    return tuple(grads)


SLIPS = {
    "bpe merged in rounds": ("ex-ch1-bpe-bug", (_in_rounds,), "each round merges the pairs"),
    "bpe merged shortest token first": ("ex-ch1-bpe-bug", (_by_length,), "the shortest token"),
    "bpe merged shortest token first, ties leftmost": (
        "ex-ch1-bpe-bug", (lambda p, m: _by_length(p, m, leftmost=True),), "the shortest token"),
    "bpe pairs counted without overlaps": (
        "ex-ch1-bpe-merges", (lambda t, n: _learn_merges(t, n, _runs_once),),
        "holds the pair (a, a) four times"),
    "bpe pairs counted once a piece": (
        "ex-ch1-bpe-merges", (lambda t, n: _learn_merges(t, n, lambda w: set(_pairs(w))),),
        "holds the pair (a, a) four times"),
    "wordpiece: no piece for an unknown word": (
        "ex-ch1-wordpiece", (lambda w, v: _wordpiece(w, v, "empty"),), "returns no piece at all"),
    "wordpiece: [UNK] inside a word": (
        "ex-ch1-wordpiece", (lambda w, v: _wordpiece(w, v, "each"),), "pieces and '[UNK]' together"),
    "cost: memory in MB": ("ex-ch1-cost", ((50_257 * 8192 * 4 / 1e6, 50_257 * 768 * 8192,
                                            8192 * 768),), "not in megabytes"),
    "bound: the entrywise power": (
        "ex-ch2-bound", (lambda W, K: torch.stack([torch.linalg.matrix_norm(W**k, ord=2)
                                                   for k in range(1, K + 1)]),),
        "raises every entry of W"),
    "bptt: the error's sign flipped": (
        "ex-ch2-bptt", (lambda *a: _bptt(*a, sign=-1.0),), "every gradient has the wrong sign"),
    "uniform: a mask as wide as the longest source": (
        "ex-ch4-uniform", (lambda h, n: _uniform(h, n, width=False),), "the width of h"),
    "uniform: the pair swapped": (
        "ex-ch4-uniform", (lambda h, n: _uniform(h, n)[::-1],), "in this order"),
    "padding bug: a fill of -100": (
        "ex-ch4-padding-bug", (_bahdanau(-100.0),), "tiny"),
    "hebb: divided by N - 1": (
        "ex-ch7-hebb", (lambda x: (x.T @ x - x.shape[0] * torch.eye(x.shape[1], dtype=x.dtype))
                        / (x.shape[1] - 1),), "divided by N - 1"),
    "perfect recall: Phi(+z)": ("ex-ch7-perfect-recall", (_stable(sign=1.0),), "about 0"),
    "perfect recall: no square root": (
        "ex-ch7-perfect-recall", (_stable(root=False),), "square root is missing"),
    "perfect recall: 3 decimal places": (
        "ex-ch7-perfect-recall", (_stable(digits=3),), "rounded to 3 decimal places"),
    "dense exp: overlaps never updated": (
        "ex-ch7-dense-exp", (lambda p, s, o: _exp_sweep(p, s, o, stale=True),),
        "overlaps are never updated"),
    "bigram: log base 2": ("ex-ch9-bigram", (_bigram(2.0),), "logarithms to base 2"),
    "dpo: log of the softmax": (
        "ex-ch9-dpo", (_response_logprob, _dpo_loss), "800 below the largest logit"),
}


@pytest.mark.parametrize("slip", SLIPS)
def test_the_slip_is_refused_and_named(slip):
    label, answer, words = SLIPS[slip]
    verdict = check(label, *answer)
    assert verdict.status == "fail" and words in verdict.message, verdict


def test_right_answers_written_otherwise_still_pass():
    assert check("ex-ch1-bpe-merges", lambda t, n: _learn_merges(t, n, _pairs))
    assert check("ex-ch4-uniform", _uniform)
    assert check("ex-ch4-padding-bug", _bahdanau(float("-inf")))
    assert check("ex-ch7-perfect-recall", _stable(digits=None))
    assert check("ex-ch9-bigram", _bigram(math.e))
    assert check("ex-ch2-bptt", _bptt)
