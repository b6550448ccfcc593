"""Chapter 5's surname classifier with positions, trained as long as chapter 2's RNN, over seeds.

Chapter 5 compares its one-layer attention classifier (400 steps of 64 names) with chapter 2's
RNN classifier, which saw about 1.6 times as many names in its 1500 steps of batches of one
length, and scored higher at every seed. This script asks whether the extra training explains the
gap. It trains the chapter's model with positions (``NameClassifier`` of ``ch05_seeds.py``, the
same split, batch size and learning rate) for two longer budgets: as many names as chapter 2's
RNN saw (its 1500 batches held about 42,000 names: 656 batches of 64), and as many steps as it took
(1500). Only the seed and the number of steps change.

Reported per run and budget: the train and test accuracies. The claims compare the test
accuracies with those of chapter 2's RNN in ``results/ch02_seeds.json``.

Run from the repository root::

    python results/ch05_longer_seeds.py [--out results/ch05_longer_seeds.json] [--seeds 0 1 2]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ch05_seeds import BATCH, LR, MAX_LEN, THREADS, accuracy, name_data, train_classifier  # noqa: E402
from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.utils import small_model_threads  # noqa: E402

BUDGETS = {"names": 656, "steps": 1500}  # chapter 2's names seen (656 x 64), its steps


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__, seeds=(0, 1, 2))
    args = parser.parse_args(argv)
    device = torch.device("cpu")
    small_model_threads(device, THREADS)
    vocab, languages, X_train, y_train, X_test, y_test, _ = name_data()
    ch2_runs = json.loads((ROOT / "results" / "ch02_seeds.json").read_text())["runs"]
    ch2 = [r["names"]["unidirectional"]["accuracy"] for r in ch2_runs]

    runs = []
    for seed in tqdm(args.seeds, desc="chapter 5, longer"):
        run = dict(seed=seed)
        for budget, steps in BUDGETS.items():
            model = train_classifier(seed, steps, True, len(vocab), len(languages),
                                     X_train, y_train)
            run[budget] = dict(steps=steps, train=accuracy(model, X_train, y_train),
                               test=accuracy(model, X_test, y_test))
        runs.append(run)
        tqdm.write(f"seed {seed}: {run}")

    test = {b: [r[b]["test"] for r in runs] for b in BUDGETS}
    gap = {b: [r[b]["train"] - r[b]["test"] for r in runs] for b in BUDGETS}
    claims = {
        "trained as long as chapter 2's RNN, the model stays below every seed of that RNN":
            max(test["names"] + test["steps"]) < min(ch2),
        "with 1500 steps the training accuracy exceeds the test accuracy by more than 15 points":
            min(gap["steps"]) > 0.15,
    }
    summary = dict(
        ch2_rnn_test=dict(min=min(ch2), max=max(ch2), n=len(ch2)),
        **{f"test_{b}": dict(min=min(t), mean=statistics.mean(t), max=max(t))
           for b, t in test.items()},
        **{f"train_minus_test_{b}": dict(min=min(g), max=max(g)) for b, g in gap.items()},
    )
    result = dict(**provenance(), recipe=dict(budgets=BUDGETS, batch=BATCH, lr=LR,
                                              max_len=MAX_LEN),
                  runs=runs, summary=summary, claims=claims)
    write_result(args.out, result)
    print(summary)


if __name__ == "__main__":
    main()
