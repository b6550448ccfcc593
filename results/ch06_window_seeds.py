"""How far back chapter 6's character Llama reads, over three seeds: windows at inference, a
window in training, and the weight on the first position (attention sinks).

For each seed (0, 1, 2) the script trains the chapter's Llama with multi-head attention
(``llama_mha`` of ``results/block_comparison.py``: the recipe of ``chapters/06_transformer.ipynb``,
one CPU thread) and then:

* **windows at inference:** copies its weights into ``LlamaConfig(sliding_window=w)`` for
  w = 1, 2, 3, 4, 6, 8, 12, 16, 32 and 64 and measures the held-out perplexity at the training
  length 64 (``evaluate_perplexity(model, *lm_chunks(valid_ids, 16, 64), carry_state=False)``),
  w = 64 being full attention;
* **a window in training:** trains the same model with ``sliding_window=8`` from the start, with
  the same recipe and seed, and measures it the same way;
* **the first position's weight:** on 64 held-out windows of 64 characters, the mean attention
  weight that queries at positions 16 to 63 give to position 0, for every head of both layers,
  against the weight 1/(i + 1) that uniform attention would give.

The chapter asserts its sentences against ``claims``.

Run from the repository root (``SEQBOOK_DATA`` must point at the data)::

    python results/ch06_window_seeds.py [--out results/ch06_window_seeds.json] [--seeds 0 1 2]
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "results"))

from block_comparison import LM, chapter_data, train  # noqa: E402
from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.llama import Llama  # noqa: E402
from seqbook.lm import evaluate_perplexity  # noqa: E402

WINDOWS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)
TRAIN_WINDOW = 8
FIRST_FROM = 16  # queries at positions 16..63 are scored for the first position's weight


def with_window(model: Llama, window: int | None) -> Llama:
    """A copy of ``model`` whose attention reads only the last ``window`` positions."""
    config = dataclasses.replace(model.config, sliding_window=window)
    windowed = Llama(config)
    windowed.load_state_dict(model.state_dict())
    return windowed.eval()


@torch.no_grad()
def first_position_weight(model: Llama, x: torch.Tensor) -> list[list[float]]:
    """Per layer and head, the mean weight that queries at FIRST_FROM.. give to position 0."""
    weights = []
    hooks = [block.self_attn.register_forward_hook(lambda m, i, out: weights.append(out[1]))
             for block in model.blocks]
    model.eval()
    model(x)
    for h in hooks:
        h.remove()
    return [[round(v, 4) for v in w[:, :, FIRST_FROM:, 0].mean((0, 2)).tolist()] for w in weights]


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__)
    args = parser.parse_args(argv)
    device, vocab, x_win, y_win, valid_x, valid_y = chapter_data()
    probe = valid_x[:4].flatten(0, 1)  # (64, 64): 64 held-out windows
    uniform = statistics.mean(1 / (i + 1) for i in range(FIRST_FROM, LM["block_size"]))

    runs = []
    for seed in args.seeds:
        model, _ = train("llama_mha", seed, len(vocab), x_win, y_win, device)
        ppl = {w: round(evaluate_perplexity(with_window(model, w), valid_x, valid_y, carry_state=False), 4)
               for w in WINDOWS}
        first = first_position_weight(model, probe)

        # the same model trained with a window from the start
        trained_windowed, _ = train("llama_mha", seed, len(vocab), x_win, y_win, device,
                                    sliding_window=TRAIN_WINDOW)
        assert trained_windowed.config.sliding_window == TRAIN_WINDOW
        ppl_trained = evaluate_perplexity(trained_windowed, valid_x, valid_y, carry_state=False)
        runs.append(dict(seed=seed, perplexity_by_window={str(w): p for w, p in ppl.items()},
                         perplexity_trained_window=round(ppl_trained, 4), first_position_weight=first))
        print(f"seed {seed}: " + ", ".join(f"w={w} {p:.3f}" for w, p in ppl.items())
              + f"; trained with w={TRAIN_WINDOW}: {ppl_trained:.3f}; first-position weight max "
              f"{max(max(r) for r in first):.4f} (uniform {uniform:.4f})", flush=True)

    full = {r["seed"]: r["perplexity_by_window"][str(LM["block_size"])] for r in runs}
    gap8 = [r["perplexity_by_window"]["8"] - full[r["seed"]] for r in runs]
    claims = {
        "a window of 1 (no context) is far worse than full attention at every seed":
            all(r["perplexity_by_window"]["1"] > 1.5 * full[r["seed"]] for r in runs),
        "a window of 8 at inference is within 0.05 of full attention at every seed":
            all(abs(g) < 0.05 for g in gap8),
        "trained with a window of 8, lower perplexity than trained with full attention at every seed":
            all(r["perplexity_trained_window"] < full[r["seed"]] for r in runs),
        "every head gives position 0 less than uniform weight at every seed":
            all(v < uniform for r in runs for layer in r["first_position_weight"] for v in layer),
    }
    result = dict(
        **provenance(),
        recipe=LM,
        model="llama_mha of results/block_comparison.py: LlamaConfig(n_kv_head=4, tie_weights=True, "
              "block_size=256), trained on 64-character windows",
        windows=list(WINDOWS),
        train_window=TRAIN_WINDOW,
        perplexity="evaluate_perplexity(model, *lm_chunks(valid_ids, 16, 64), carry_state=False)",
        first_position_weight=(f"mean weight of queries at positions {FIRST_FROM}..63 on position 0, "
                               "per layer and head, on 64 held-out windows of 64 characters"),
        uniform_first_position_weight=round(uniform, 4),
        runs=runs,
        claims=claims,
    )
    for claim, held in claims.items():
        print(f"{'held' if held else 'FAILED'}: {claim}")
    write_result(args.out, result)


if __name__ == "__main__":
    main()
