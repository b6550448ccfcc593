"""Chapter 3's two caveats about the plain RNN, measured: its size on the memory task, its learning rate.

The chapter's RNN of 32 units has a third of the parameters in the layer of the GRU of 32 units
(1,600 against 4,800), and its language model trains at the GRU's learning rate of 0.01, where
chapter 2 trained an RNN at 0.003. The chapter says that either may be part of the RNN's deficit;
this script measures both, with everything else exactly as ``results/ch03_seeds.py`` (the
chapter's recipe, one CPU thread, seeds 0 to 6):

* **wide RNN** (memory task): ``memory_run`` of ``results/ch03_seeds.py`` for the RNN whose layer has
  as many parameters as the GRU's of 32 units (hidden size 61: 4,819 against 4,800), at T = 10, 25,
  50 and 100; the test accuracy where the early stop ends the run and after the full 250 steps.
* **RNN language model at lr 0.003**: ``lm_run``'s RNN (256 units, 200 steps of ``train_lm``, clip 1)
  at chapter 2's learning rate instead of 0.01; the held-out perplexity at the end and every 50
  steps.

The chapter reads the JSON beside the results of ``results/ch03_seeds.json`` (same seeds, same data).

Run from the repository root (``SEQBOOK_DATA`` must point at the data)::

    python results/ch03_rnn_controls_seeds.py [--seeds 0 1 2 3 4 5 6]

(The committed file holds seeds 0 to 19: the first seven are ``results/ch03_seeds.json``'s.)
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "results"))

import ch03_seeds as base  # noqa: E402
from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.batching import lm_chunks  # noqa: E402
from seqbook.data import time_machine_ids  # noqa: E402
from seqbook.lm import CharLM, evaluate_perplexity  # noqa: E402
from seqbook.rnn import GRU, RNN  # noqa: E402
from seqbook.train import train_lm  # noqa: E402
from seqbook.utils import count_parameters, seed_everything, small_model_threads  # noqa: E402

SLOW_LR = 3e-3  # chapter 2's


def matched_hidden() -> int:
    """The RNN's hidden size whose layer has about as many parameters as the GRU's of 32 units."""
    gru = count_parameters(GRU(base.MEM_EMBED, base.MEM_HIDDEN))
    return min(range(base.MEM_HIDDEN, 4 * base.MEM_HIDDEN),
               key=lambda h: abs(count_parameters(RNN(base.MEM_EMBED, h)) - gru))


def wide_rnn_run(length, seed, hidden) -> dict:
    narrow = base.MEM_HIDDEN
    base.MEM_HIDDEN = hidden  # memory_model reads the module's hidden size when it builds
    try:
        return base.memory_run("rnn", length, seed)
    finally:
        base.MEM_HIDDEN = narrow


def slow_lm_run(seed, vocab, x_train, y_train, x_valid, y_valid) -> dict:
    seed_everything(seed)
    lm = CharLM(len(vocab), hidden_size=base.LM_HIDDEN["rnn"], cell="rnn", embed_dim=32, fast=True)
    history = train_lm(lm, x_train, y_train, steps=base.LM_STEPS, lr=SLOW_LR, clip=1.0,
                       device=base.DEVICE, seed=seed,
                       eval_fn=lambda m: math.log(evaluate_perplexity(m, x_valid, y_valid)),
                       eval_every=50, progress=False)
    return dict(perplexity=round(evaluate_perplexity(lm, x_valid, y_valid), 4),
                eval_loss=[round(v, 4) for v in history.eval_loss])


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__, seeds=(0, 1, 2, 3, 4, 5, 6))
    args = parser.parse_args(argv)
    small_model_threads(base.DEVICE, 1)
    hidden = matched_hidden()
    params = {name: count_parameters(layer) for name, layer in (
        ("rnn_32", RNN(base.MEM_EMBED, base.MEM_HIDDEN)), ("gru_32", GRU(base.MEM_EMBED, base.MEM_HIDDEN)),
        (f"rnn_{hidden}", RNN(base.MEM_EMBED, hidden)))}
    vocab, train_ids, valid_ids = time_machine_ids()
    x_train, y_train = lm_chunks(train_ids, base.LM_BATCH, base.LM_SEQ)
    x_valid, y_valid = lm_chunks(valid_ids, 8, 128)

    runs = []
    for seed in args.seeds:
        start = time.perf_counter()
        wide = {str(t): wide_rnn_run(t, seed, hidden) for t in base.LENGTHS}
        run = dict(seed=seed, wide_rnn=wide,
                   rnn_lm_slow=slow_lm_run(seed, vocab, x_train, y_train, x_valid, y_valid))
        run["seconds"] = round(time.perf_counter() - start, 1)
        runs.append(run)
        print(f"seed {seed} ({run['seconds']} s): wide RNN "
              + " ".join(f"{wide[str(t)]['early_accuracy']:.2f}/{wide[str(t)]['full_accuracy']:.2f}"
                         for t in base.LENGTHS)
              + f"; RNN LM at lr {SLOW_LR}: {run['rnn_lm_slow']['perplexity']:.2f}", flush=True)

    def acc(t, key="early_accuracy"):
        return [r["wide_rnn"][str(t)][key] for r in runs]

    slow = [r["rnn_lm_slow"]["perplexity"] for r in runs]
    summary = dict(
        hidden=hidden, parameters=params,
        wide_rnn={str(t): dict(early=acc(t), full=acc(t, "full_accuracy"),
                               steps=acc(t, "early_steps"), mean_early=float(np.mean(acc(t))))
                  for t in base.LENGTHS},
        rnn_lm_slow=dict(min=min(slow), max=max(slow), values=slow),
    )
    unigram = base.unigram_perplexity(train_ids, valid_ids, len(vocab))
    def solved(t):  # runs above 0.9, the chapter's bar for a solved length
        return sum(a > 0.9 for a in acc(t))

    summary["wide_rnn_solved"] = {str(t): solved(t) for t in base.LENGTHS}
    claims = {
        "wide RNN at T = 50 and 100: fewer than a third of the runs above 0.9 at each length":
            max(solved(50), solved(100)) < len(runs) / 3,
        "wide RNN at T = 50 and 100: the mean of the runs above 0.3": bool(min(
            np.mean(acc(50)), np.mean(acc(100))) > 0.3),
        "RNN LM at lr 0.003: no run diverges (every one below 0.4 of the unigram perplexity)":
            max(slow) < 0.4 * unigram,
    }
    result = dict(**provenance(),
                  recipe=dict(hidden=hidden, slow_lr=SLOW_LR, base="results/ch03_seeds.py", threads=1),
                  runs=runs, summary=summary, claims=claims)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
