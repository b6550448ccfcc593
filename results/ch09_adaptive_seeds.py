"""Chapter 9's adaptive softmax against the full softmax over seeds: the same bigram model, the same steps.

The recipe of ``chapters/09_losses.ipynb`` (section "Cheaper classes: the adaptive softmax"), one CPU
thread: *The Time Machine* normalised and split with ``split_text(text, 0.1)``; a byte-level BPE of
4096 merges trained on the training part; the token ids renumbered by falling frequency in the
training text. A bigram model, an embedding of 64 numbers for the previous token, followed either by
a full softmax (``nn.Linear(64, V, bias=False)``) or by ``AdaptiveSoftmax(64, V, [200, 1000])``;
200 steps of Adam (lr 1e-2) on batches of 512 (previous, next) pairs drawn at random. Seed ``s``
goes to ``torch.manual_seed`` before each model (both start from the same embedding) and to the
generator of the batches (both see the same batches).

Per run: the held-out loss of both models and of the add-one unigram model on the same tokens,
and the time per training step on the machine that ran it (not claimed: it depends on the
machine). The multiply-adds per training token of both output layers do not depend on the seed.

Run from the repository root (``SEQBOOK_DATA`` must point at the data)::

    python results/ch09_adaptive_seeds.py [--seeds 0 1 2 3 4]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.bpe import train_bpe  # noqa: E402
from seqbook.data import load_time_machine, split_text  # noqa: E402
from seqbook.losses import AdaptiveSoftmax  # noqa: E402
from seqbook.vocab import normalize_text  # noqa: E402

MERGES, D, CUTOFFS, DIV = 4096, 64, [200, 1000], 4.0
STEPS, BATCH, LR = 200, 512, 1e-2


def data() -> dict:
    text = normalize_text(load_time_machine())
    train_text, valid_text = split_text(text, valid_frac=0.1)
    tok = train_bpe(train_text, vocab_size=256 + MERGES)
    train, valid = torch.tensor(tok.encode(train_text)), torch.tensor(tok.encode(valid_text))
    V = len(tok)
    counts = torch.bincount(train, minlength=V)
    rank = torch.empty(V, dtype=torch.long)
    rank[counts.argsort(descending=True, stable=True)] = torch.arange(V)
    return dict(V=V, train=rank[train], valid=rank[valid], counts=counts.sort(descending=True).values)


def multiply_adds(counts: torch.Tensor) -> dict:
    """Per training token, on average over the training text's tokens: the output layer's
    multiply-adds for the full softmax and for the adaptive one (head, then the target's
    cluster only)."""
    V, edges = len(counts), [*CUTOFFS, len(counts)]
    share = counts.double() / counts.sum()
    adaptive = D * (CUTOFFS[0] + len(CUTOFFS))
    for i in range(len(CUTOFFS)):
        width = int(D // DIV ** (i + 1))
        in_cluster = share[edges[i]:edges[i + 1]].sum().item()
        adaptive += in_cluster * (D * width + width * (edges[i + 1] - edges[i]))
    return dict(full=D * V, adaptive=adaptive, ratio=D * V / adaptive)


def train(kind: str, seed: int, d: dict) -> dict:
    torch.manual_seed(seed)
    emb = nn.Embedding(d["V"], D)
    if kind == "full":
        out = nn.Linear(D, d["V"], bias=False)
        def loss_fn(h, y): return F.cross_entropy(out(h), y)
    else:
        out = AdaptiveSoftmax(D, d["V"], CUTOFFS, DIV)
        def loss_fn(h, y): return out(h, y)
    opt = torch.optim.Adam([*emb.parameters(), *out.parameters()], lr=LR)
    x, y = d["train"][:-1], d["train"][1:]
    gen = torch.Generator().manual_seed(seed)
    seconds = 0.0
    for _ in range(STEPS):
        i = torch.randint(0, len(x), (BATCH,), generator=gen)
        start = time.perf_counter()
        loss = loss_fn(emb(x[i]), y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        seconds += time.perf_counter() - start
    with torch.no_grad():
        valid_loss = loss_fn(emb(d["valid"][:-1]), d["valid"][1:]).item()
    return dict(valid_loss=round(valid_loss, 4), ms_per_step=round(seconds / STEPS * 1e3, 2))


def main(argv=None) -> None:
    args = script_parser(__file__, __doc__, seeds=(0, 1, 2, 3, 4)).parse_args(argv)
    torch.set_num_threads(1)
    d = data()
    add_one = torch.bincount(d["train"], minlength=d["V"]).double() + 1
    unigram = -torch.log(add_one / add_one.sum())[d["valid"]].mean().item()
    runs = []
    for seed in args.seeds:
        run = dict(seed=seed, full=train("full", seed, d), adaptive=train("adaptive", seed, d))
        print(run, flush=True)
        runs.append(run)
    gaps = [r["adaptive"]["valid_loss"] - r["full"]["valid_loss"] for r in runs]
    cost = multiply_adds(d["counts"])
    result = dict(
        **provenance(),
        recipe=dict(MERGES=MERGES, D=D, CUTOFFS=CUTOFFS, DIV=DIV, STEPS=STEPS, BATCH=BATCH, LR=LR,
                    V=d["V"], train_tokens=len(d["train"]), valid_tokens=len(d["valid"])),
        unigram_valid_loss=round(unigram, 4),
        multiply_adds=cost,
        runs=runs,
        claims={
            "both models below the unigram model's held-out loss at every seed": all(
                max(r["full"]["valid_loss"], r["adaptive"]["valid_loss"]) < unigram for r in runs),
            "after the same steps the adaptive softmax within 0.1 nats of the full one, on "
            "either side, at every seed": max(abs(g) for g in gaps) < 0.1,
            "the adaptive output layer takes over 10 times fewer multiply-adds per token":
                cost["ratio"] > 10,
        },
    )
    write_result(args.out, result)


if __name__ == "__main__":
    main()
