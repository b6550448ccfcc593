"""Chapter 3 (GRU) over more random seeds: the memory task, the trained update gate, the language model.

Every model is trained with exactly the recipe of ``chapters/03_gru.ipynb`` (the configuration of
cell ``c0c21fd5``, ``train_memory`` of cell ``6640c188``, the language models of cell ``ef3e7ca1``;
cells are named by their ids, which do not move when cells are added), one CPU thread.

* **Memory task** (remember the first token, T = 10, 25, 50, 100; RNN, GRU and LSTM of hidden size
  32; at most 250 AdamW steps at lr 1e-2 in blocks of 10, batches of 64, the gated models started
  with ``init_keep_bias(..., 3.0)``). The chapter runs seed 0; this script runs seeds
  0 to 6. Each run is trained *once*, block by block, exactly as ``train_memory``: the test accuracy
  is recorded at the block where the chapter's early stop would end the run (mean training loss of
  the block below 0.02), and training then goes on to the full budget of 250 steps, where the
  accuracy is recorded again. (A run that goes on draws the same batches and takes the same steps as
  a run without the early stop, so the second number is that of a run without it.)
* **The update gate** (cell ``f27dc33b``): for the GRU trained at T = 100 and stopped early, as the chapter
  uses it, the memory units per sequence and the mean update gate of the memory units at step 1 and
  at steps 2..100 and of the other units, on the chapter's 200 test sequences.
* **Language model** (cell ``ef3e7ca1``): ``CharLM`` with an RNN of 256 units and a GRU of 145 units on *The
  Time Machine*, 200 steps of ``train_lm`` (chunks of 64 in 32 rows, lr 1e-2, clip 1); held-out
  perplexity, seeds 0 to 6. The seed sets the initial weights (``seed_everything(seed)`` before the
  model is built) and is passed to ``train_lm``; the chunks are visited in order whatever the seed.

Run from the repository root (``SEQBOOK_DATA`` must point at the data)::

    python results/ch03_seeds.py [--out results/ch03_seeds.json] [--seeds 0 1 2 3 4 5 6]
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.batching import lm_chunks  # noqa: E402
from seqbook.data import first_token_task, time_machine_ids  # noqa: E402
from seqbook.gating import init_keep_bias  # noqa: E402
from seqbook.lm import CharLM, evaluate_perplexity, unigram_perplexity  # noqa: E402
from seqbook.rnn import SequenceClassifier  # noqa: E402
from seqbook.train import fit, train_lm  # noqa: E402
from seqbook.utils import seed_everything, small_model_threads  # noqa: E402

# chapter 3, cell c0c21fd5
LENGTHS = [10, 25, 50, 100]
MEM_HIDDEN, MEM_EMBED, MEM_BATCH, MEM_STEPS, MEM_LR = 32, 16, 64, 250, 1e-2
MEM_BLOCK, MEM_SOLVED = 10, 0.02
KEEP_BIAS = 3.0
LM_HIDDEN = {"rnn": 256, "gru": 145}
LM_BATCH, LM_SEQ, LM_STEPS, LM_LR = 32, 64, 200, 1e-2
CELLS = ["rnn", "gru", "lstm"]
DEVICE = torch.device("cpu")


# cell 6640c188, unchanged but for the device
def memory_batches(length, seed):
    g = torch.Generator().manual_seed(1000 * seed + length)
    while True:
        yield first_token_task(MEM_BATCH, length, generator=g)


def memory_model(cell, keep_bias=KEEP_BIAS, seed=0):
    seed_everything(seed)
    model = SequenceClassifier(16, 8, hidden_size=MEM_HIDDEN, cell=cell, embed_dim=MEM_EMBED, fast=True)
    if cell != "rnn" and keep_bias is not None:
        init_keep_bias(model.rnn, keep_bias)
    return model


def memory_accuracy(model, length, n=1000):
    ids, target = first_token_task(n, length, generator=torch.Generator().manual_seed(123))
    with torch.no_grad():
        pred = model.eval()(ids.to(DEVICE)).argmax(-1).cpu()
    return (pred == target).float().mean().item()


def gate_statistics(model) -> dict:
    """Cell ``f27dc33b`` on a GRU trained at T = 100."""
    T = LENGTHS[-1]
    test_ids, _ = first_token_task(200, T, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        _, _, gates = model.rnn(model.embed(test_ids.to(DEVICE)), return_gates=True)
    z = gates["z"][0].cpu()
    kept = torch.cat([z[:, 1:].flip(1).cumprod(1).flip(1), torch.ones_like(z[:, :1])], 1)
    weights_T = (1 - z) * kept
    memory = weights_T[:, 0, :] > 0.5
    z_units = z.transpose(1, 2)
    other = z_units[~memory]  # (units of all sequences that are not memory units, T)
    r_units = gates["r"][0].cpu().transpose(1, 2)  # the reset gates: (B, H, T)
    return dict(
        memory_units=round(memory.sum(1).float().mean().item(), 3),
        z_memory_first=round(z_units[memory][:, 0].mean().item(), 4) if memory.any() else None,
        z_memory_later=round(z_units[memory][:, 1:].mean().item(), 4) if memory.any() else None,
        z_other=round(other.mean().item(), 4),
        # non-memory units whose mean update gate is above 0.85 (they leak over ~7 steps or more)
        other_units_mean_z_above_085=round((other.mean(1) > 0.85).float().mean().item(), 4),
        # the mean reset gate over the steps, of the memory units and of the others
        r_memory=round(r_units[memory].mean().item(), 4) if memory.any() else None,
        r_other=round(r_units[~memory].mean().item(), 4),
    )


def memory_run(cell, length, seed, keep_bias=KEEP_BIAS) -> dict:
    """``train_memory`` of cell ``6640c188``, continued to the full budget after the early stop."""
    model = memory_model(cell, keep_bias, seed).to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=MEM_LR)
    batches, done, row = memory_batches(length, seed), 0, {}
    while done < MEM_STEPS:
        history = fit(
            model,
            lambda m, b: F.cross_entropy(m(b[0]), b[1]),
            batches,
            steps=min(MEM_BLOCK, MEM_STEPS - done),
            optimizer=optimizer,
            device=DEVICE,
            seed=seed if done == 0 else None,
            progress=False,
        )
        done += len(history.step_loss)
        if "early_steps" not in row and np.mean(history.step_loss) < MEM_SOLVED:
            row.update(early_steps=done, early_accuracy=memory_accuracy(model, length))
            if cell == "gru" and length == LENGTHS[-1]:
                row["gates"] = gate_statistics(model)
    row["full_accuracy"] = memory_accuracy(model, length)
    if "early_steps" not in row:  # never stopped: the two runs are the same
        row.update(early_steps=MEM_STEPS, early_accuracy=row["full_accuracy"])
        if cell == "gru" and length == LENGTHS[-1]:
            row["gates"] = gate_statistics(model)
    return row


def lm_run(seed, vocab, x_train, y_train, x_valid, y_valid) -> dict:
    out = {}
    for cell in ("rnn", "gru"):
        seed_everything(seed)
        lm = CharLM(len(vocab), hidden_size=LM_HIDDEN[cell], cell=cell, embed_dim=32, fast=True)
        history = train_lm(
            lm,
            x_train,
            y_train,
            steps=LM_STEPS,
            lr=LM_LR,
            clip=1.0,
            device=DEVICE,
            seed=seed,
            eval_fn=lambda m: math.log(evaluate_perplexity(m, x_valid, y_valid)),
            eval_every=50,
            progress=False,
        )
        out[cell] = dict(
            perplexity=round(evaluate_perplexity(lm, x_valid, y_valid), 4),
            eval_loss=[round(v, 4) for v in history.eval_loss],
        )
    return out


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__, seeds=(0, 1, 2, 3, 4, 5, 6))
    args = parser.parse_args(argv)
    small_model_threads(DEVICE, 1)

    vocab, train_ids, valid_ids = time_machine_ids()
    x_train, y_train = lm_chunks(train_ids, LM_BATCH, LM_SEQ)
    x_valid, y_valid = lm_chunks(valid_ids, 8, 128)
    ppl_unigram = unigram_perplexity(train_ids, valid_ids, len(vocab))

    runs = []
    for seed in args.seeds:
        start = time.perf_counter()
        memory = {cell: {str(t): memory_run(cell, t, seed) for t in LENGTHS} for cell in CELLS}
        run = dict(seed=seed, memory=memory, lm=lm_run(seed, vocab, x_train, y_train, x_valid, y_valid))
        run["seconds"] = round(time.perf_counter() - start, 1)
        runs.append(run)
        print(
            f"seed {seed} ({run['seconds']} s): "
            + "; ".join(
                f"{c} "
                + " ".join(
                    f"{memory[c][str(t)]['early_accuracy']:.2f}/{memory[c][str(t)]['full_accuracy']:.2f}"
                    for t in LENGTHS
                )
                for c in CELLS
            )
            + f"; gates {memory['gru']['100'].get('gates')}; lm {run['lm']['rnn']['perplexity']:.2f} "
            f"{run['lm']['gru']['perplexity']:.2f}",
            flush=True,
        )

    def acc(cell, t, key="early_accuracy"):
        return [r["memory"][cell][str(t)][key] for r in runs]

    gates = [r["memory"]["gru"]["100"]["gates"] for r in runs]
    ppl = {c: [r["lm"][c]["perplexity"] for r in runs] for c in ("rnn", "gru")}
    summary = dict(
        memory={
            c: {
                str(t): dict(early=acc(c, t), full=acc(c, t, "full_accuracy"), steps=acc(c, t, "early_steps"))
                for t in LENGTHS
            }
            for c in CELLS
        },
        gates=gates,
        perplexity=dict(
            unigram=round(ppl_unigram, 4),
            **{c: dict(min=min(v), max=max(v), values=v) for c, v in ppl.items()},
        ),
    )
    claims = {
        # the chapter: most runs solve T = 10 and at least one fails outright; and a run that
        # solved it can lose part of the solution when it trains on
        "RNN at T = 10: more than half the runs above 0.9 and at least one below 0.5 (early stop)":
            2 * sum(a > 0.9 for a in acc("rnn", 10)) > len(runs) and min(acc("rnn", 10)) < 0.5,
        "RNN at T = 10: some run loses more than 0.01 of its accuracy when it trains on": any(
            b < a - 0.01 for a, b in zip(acc("rnn", 10), acc("rnn", 10, "full_accuracy"), strict=True)
        ),
        "RNN at T = 25: no run solves it (every run below 0.95), and the runs lie more than 0.3 apart":
            max(acc("rnn", 25)) < 0.95 and max(acc("rnn", 25)) - min(acc("rnn", 25)) > 0.3,
        "RNN at T = 50 and 100: every run below 0.3": max(acc("rnn", 50) + acc("rnn", 100)) < 0.3,
        "GRU: every run at every length above 0.95 with the early stop": min(
            a for t in LENGTHS for a in acc("gru", t)
        )
        > 0.95,
        "GRU: every run at every length above 0.95 after the full 250 steps": min(
            a for t in LENGTHS for a in acc("gru", t, "full_accuracy")
        )
        > 0.95,
        "LSTM at T = 10, 25, 50: every run above 0.95": min(a for t in LENGTHS[:-1] for a in acc("lstm", t))
        > 0.95,
        "LSTM at T = 100: every run below 0.3": max(acc("lstm", 100)) < 0.3,
        "gated runs: the early stop does not change the accuracy by more than 0.01": all(
            abs(r["memory"][c][str(t)]["early_accuracy"] - r["memory"][c][str(t)]["full_accuracy"]) <= 0.01
            for r in runs
            for c in ("gru", "lstm")
            for t in LENGTHS
        ),
        "GRU at T = 100: memory units write at step 1 (z < 0.3) and keep later (z > 0.9) at every seed": all(
            g["z_memory_first"] is not None and g["z_memory_first"] < 0.3 and g["z_memory_later"] > 0.9
            for g in gates
        ),
        "GRU at T = 100: z of memory units later > 0.95 > z of other units at every seed": all(
            g["z_memory_later"] is not None and g["z_memory_later"] > 0.95 > g["z_other"] for g in gates
        ),
        "GRU at T = 100: at least one memory unit per sequence on average at every seed": all(
            g["memory_units"] >= 1 for g in gates
        ),
        "LM: GRU perplexity below RNN's by more than 0.15 at every seed": all(
            r["lm"]["gru"]["perplexity"] < r["lm"]["rnn"]["perplexity"] - 0.15 for r in runs
        ),
        # the RNN's training at lr 0.01 can diverge at a seed or two (the chapter says how often)
        "LM: the GRU below 0.4 of the unigram perplexity at every seed, the RNN at all but two at most":
            max(ppl["gru"]) < 0.4 * ppl_unigram
            and sum(p >= 0.4 * ppl_unigram for p in ppl["rnn"]) <= 2,
        "LM: GRU's held-out loss below RNN's at every evaluation (50, 100, 150, 200) at every seed": all(
            g < rn
            for r in runs
            for g, rn in zip(r["lm"]["gru"]["eval_loss"], r["lm"]["rnn"]["eval_loss"], strict=True)
        ),
    }
    result = dict(
        **provenance(),
        recipe=dict(
            LENGTHS=LENGTHS,
            MEM_HIDDEN=MEM_HIDDEN,
            MEM_EMBED=MEM_EMBED,
            MEM_BATCH=MEM_BATCH,
            MEM_STEPS=MEM_STEPS,
            MEM_LR=MEM_LR,
            MEM_BLOCK=MEM_BLOCK,
            MEM_SOLVED=MEM_SOLVED,
            KEEP_BIAS=KEEP_BIAS,
            LM_HIDDEN=LM_HIDDEN,
            LM_BATCH=LM_BATCH,
            LM_SEQ=LM_SEQ,
            LM_STEPS=LM_STEPS,
            LM_LR=LM_LR,
            threads=1,
        ),
        runs=runs,
        summary=summary,
        claims=claims,
    )
    write_result(args.out, result)


if __name__ == "__main__":
    main()
