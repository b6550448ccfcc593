"""Chapter 2's language model under other budgets: trained four times longer, and truncated shorter or longer.

The chapter trains its RNN language model (256 units, ``CharLM(..., cell="rnn")``) for 600 steps
of 32 rows of 64 characters, AdamW at 3e-3, clipping at 1 (``results/ch02_seeds.py``'s
``lm_run``), and compares it with n-gram tables: the best Witten-Bell table stays ahead. Two
questions the chapter's text answers from this file:

* trained longer: the held-out perplexity every 300 steps up to 2,400 steps (the same recipe, the
  chunks visited in order, pass after pass): its lowest value and where, and the last;
* truncated otherwise: 600 steps with the same 2,048 characters a step, cut into 128 rows of 16,
  32 rows of 64 (the chapter's) or 8 rows of 256, so that gradients flow back at most 16, 64 or 256 steps.

Run from the repository root (``SEQBOOK_DATA`` must point at the data), one CPU thread (a few
minutes a seed)::

    python results/ch02_budget_seeds.py [--seeds 0 1 2]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "results"))

import ch02_seeds as base  # noqa: E402
from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.batching import lm_chunks  # noqa: E402
from seqbook.data import time_machine_ids  # noqa: E402
from seqbook.lm import evaluate_perplexity  # noqa: E402
from seqbook.utils import small_model_threads  # noqa: E402

LONG_STEPS, EVAL_EVERY = 2400, 300
CHUNKS = ((128, 16), (32, 64), (8, 256))  # (B, T): 2,048 characters a step each
WITTEN_BELL = 4.07  # the chapter's best table (cell ch2-ngram-wb), for the claims below


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__)
    args = parser.parse_args(argv)
    small_model_threads(base.DEVICE, 1)
    vocab, train_ids, valid_ids = time_machine_ids()
    x_valid, y_valid = lm_chunks(valid_ids, 8, 128)
    chunks = {(B, T): lm_chunks(train_ids, B, T) for B, T in CHUNKS}
    runs = []
    for seed in args.seeds:
        _, history = base.train_rnn_lm(
            seed, len(vocab), *chunks[base.LM_BATCH, base.LM_SEQ], steps=LONG_STEPS,
            eval_fn=lambda m: math.log(evaluate_perplexity(m, x_valid, y_valid)),
            eval_every=EVAL_EVERY)
        curve = {int(s): round(math.exp(v), 4)
                 for s, v in zip(history.eval_step, history.eval_loss, strict=True)}
        best = min(curve, key=curve.get)
        # the chapter's chunks, at its 600 steps, are the long run's evaluation at step 600
        truncation = {str(base.LM_SEQ): curve[base.LM_STEPS]}
        for B, T in CHUNKS:
            if (B, T) != (base.LM_BATCH, base.LM_SEQ):
                lm, _ = base.train_rnn_lm(seed, len(vocab), *chunks[B, T])
                truncation[str(T)] = round(evaluate_perplexity(lm, x_valid, y_valid), 4)
        runs.append(dict(seed=seed, longer=dict(curve=curve, best_step=best,
                                                best=curve[best], last=curve[max(curve)]),
                         truncation=truncation))
        print(seed, runs[-1], flush=True)

    best = [r["longer"]["best"] for r in runs]
    ppl = {T: [r["truncation"][str(T)] for r in runs] for _, T in CHUNKS}
    claims = {
        "trained up to 2,400 steps, the RNN never reaches the Witten-Bell table's 4.07 at any seed":
            min(best) > WITTEN_BELL,
        "the held-out perplexity rises again after its lowest point at every seed": all(
            r["longer"]["last"] > r["longer"]["best"] and r["longer"]["best_step"] < LONG_STEPS
            for r in runs),
        "with the same characters a step, chunks of 16, 64 and 256 end within 5 % of each other "
        "at every seed": all(max(v) <= 1.05 * min(v) for v in zip(*ppl.values(), strict=True)),
    }
    summary = dict(best_range=[min(best), max(best)],
                   best_steps=[r["longer"]["best_step"] for r in runs],
                   last_range=[min(r["longer"]["last"] for r in runs),
                               max(r["longer"]["last"] for r in runs)],
                   truncation_range={T: [min(v), max(v)] for T, v in ppl.items()})
    recipe = dict(hidden=base.LM_HIDDEN, batch=base.LM_BATCH, seq=base.LM_SEQ, lr=3e-3, clip=1.0,
                  long_steps=LONG_STEPS, eval_every=EVAL_EVERY, chunks=CHUNKS,
                  steps=base.LM_STEPS, threads=1)
    write_result(args.out, dict(**provenance(), recipe=recipe, runs=runs, summary=summary,
                                claims=claims))


if __name__ == "__main__":
    main()
