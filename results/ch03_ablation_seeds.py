"""Chapter 3 (GRU) over more random seeds: the memory units of the GRU trained at T = 100, ablated.

For each seed the GRU of the memory task is trained at T = 100 exactly as ``train_memory`` of
``chapters/03_gru.ipynb`` (cell ``6640c188``: blocks of 10 AdamW steps until the mean training loss
of a block is below 0.02, at most 250 steps; the recipe of ``results/ch03_seeds.py``, whose
functions this script imports), one CPU thread. On the chapter's 200 test sequences it then finds
each sequence's memory units (cell ``f27dc33b``: units whose final state draws more than half its
weight from the candidate written at step 1) and runs cell ``ch3-ablation``: the test accuracy when
each sequence's memory units are set to zero after every step, when as many of its other units are
(five random draws), and when the memory units (or every unit that holds more than 1 % of the first
candidate) are zeroed in the final state only; and which symbols the model with its memory units
zeroed answers.

Run from the repository root::

    python results/ch03_ablation_seeds.py [--out results/ch03_ablation_seeds.json] [--seeds 0 1 ... 9]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ch03_seeds as recipe  # noqa: E402
from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.data import first_token_task  # noqa: E402
from seqbook.train import fit  # noqa: E402
from seqbook.utils import small_model_threads  # noqa: E402

T = 100
DEVICE = recipe.DEVICE


def train_gru(seed):
    """``train_memory("gru", 100, seed)`` of cell ``6640c188``: the model and the steps taken."""
    model = recipe.memory_model("gru", recipe.KEEP_BIAS, seed).to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.MEM_LR)
    batches, done = recipe.memory_batches(T, seed), 0
    while done < recipe.MEM_STEPS:
        history = fit(
            model,
            lambda m, b: F.cross_entropy(m(b[0]), b[1]),
            batches,
            steps=min(recipe.MEM_BLOCK, recipe.MEM_STEPS - done),
            optimizer=optimizer,
            device=DEVICE,
            seed=seed if done == 0 else None,
            progress=False,
        )
        done += len(history.step_loss)
        if np.mean(history.step_loss) < recipe.MEM_SOLVED:
            break
    return model.eval(), done


def ablation(model) -> dict:
    """Cells ``f27dc33b`` (the memory units) and ``ch3-ablation`` (the accuracies)."""
    test_ids, target = first_token_task(200, T, generator=torch.Generator().manual_seed(7))
    x = model.embed(test_ids.to(DEVICE))
    with torch.no_grad():
        states, _, gates = model.rnn(x, return_gates=True)
    z = gates["z"][0].cpu()
    kept = torch.cat([z[:, 1:].flip(1).cumprod(1).flip(1), torch.ones_like(z[:, :1])], 1)
    share_first = ((1 - z) * kept)[:, 0, :]  # (B, H): w_{T,1}
    memory = share_first > 0.5
    cell = model.rnn.cells[0]

    def answers_without(drop):
        with torch.no_grad():
            h = x.new_zeros(len(x), recipe.MEM_HIDDEN)
            for t in range(T):
                h = cell(x[:, t], h).masked_fill(drop.to(DEVICE), 0.0)
            return model.head(h).argmax(-1).cpu()

    def right_without(drop):
        return answers_without(drop) == target

    def as_many_others(g):
        drop = torch.zeros_like(memory)
        for b, row in enumerate(memory):
            others = (~row).nonzero().flatten()
            picked = torch.randperm(len(others), generator=g)[: int(row.sum())]
            drop[b, others[picked]] = True
        return drop

    g = torch.Generator().manual_seed(0)
    has_units = memory.any(1)
    answers_no_memory = answers_without(memory)
    right_no_memory = answers_no_memory == target
    others = [right_without(as_many_others(g)) for _ in range(5)]

    def right_at_end(drop):
        with torch.no_grad():
            h_final = states[:, -1].masked_fill(drop.to(DEVICE), 0.0)
            return model.head(h_final).argmax(-1).cpu() == target

    # the symbols that no memory unit keeps, in any test sequence, and what the ablated model
    # answers on the sequences that have memory units
    kept_by_none = [c for c in range(8) if not memory[target == c].any()]
    answer = answers_no_memory[has_units]
    unkept = torch.isin(answer, torch.tensor(kept_by_none, dtype=answer.dtype))
    return dict(
        memory_units=round(memory.sum(1).float().mean().item(), 3),
        with_memory_units=round(has_units.float().mean().item(), 4),
        accuracy_intact=round(right_without(torch.zeros_like(memory)).float().mean().item(), 4),
        accuracy_memory_zeroed=round(right_no_memory.float().mean().item(), 4),
        accuracy_memory_zeroed_with_units=round(right_no_memory[has_units].float().mean().item(), 4),
        accuracy_others_zeroed=[round(r.float().mean().item(), 4) for r in others],
        accuracy_others_zeroed_with_units=[round(r[has_units].float().mean().item(), 4)
                                           for r in others],
        accuracy_memory_zeroed_at_end_only=round(right_at_end(memory).float().mean().item(), 4),
        # every unit that holds more than 1 % of the first candidate, zeroed in the final state
        accuracy_holders_zeroed_at_end_only=round(
            right_at_end(share_first > 0.01).float().mean().item(), 4),
        symbols_kept_by_no_memory_unit=kept_by_none,
        ablated_answers_symbol_kept_by_none=round(unkept.float().mean().item(), 4),
    )


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__, seeds=tuple(range(10)))
    args = parser.parse_args(argv)
    small_model_threads(DEVICE, 1)
    runs = []
    for seed in args.seeds:
        start = time.perf_counter()
        model, steps = train_gru(seed)
        run = dict(seed=seed, steps=steps, **ablation(model))
        run["seconds"] = round(time.perf_counter() - start, 1)
        runs.append(run)
        print(run, flush=True)
    claims = {
        "every seed's GRU solves T = 100 (test accuracy above 0.95)": all(
            r["accuracy_intact"] > 0.95 for r in runs
        ),
        "memory units zeroed after every step: below every draw of as many other units": all(
            r["accuracy_memory_zeroed"] < min(r["accuracy_others_zeroed"]) for r in runs
        ),
        "the same on the sequences that have memory units": all(
            r["accuracy_memory_zeroed_with_units"] < min(r["accuracy_others_zeroed_with_units"])
            for r in runs
        ),
        "memory units zeroed after every step: more than 0.3 lost on the sequences that have one":
        all(r["accuracy_memory_zeroed_with_units"] < r["accuracy_intact"] - 0.3 for r in runs),
        "memory units zeroed in the final state only: above zeroing them after every step": all(
            r["accuracy_memory_zeroed_at_end_only"] > r["accuracy_memory_zeroed"] for r in runs
        ),
    }
    result = dict(
        **provenance(),
        recipe=dict(
            T=T,
            MEM_HIDDEN=recipe.MEM_HIDDEN,
            MEM_EMBED=recipe.MEM_EMBED,
            MEM_BATCH=recipe.MEM_BATCH,
            MEM_STEPS=recipe.MEM_STEPS,
            MEM_LR=recipe.MEM_LR,
            MEM_BLOCK=recipe.MEM_BLOCK,
            MEM_SOLVED=recipe.MEM_SOLVED,
            KEEP_BIAS=recipe.KEEP_BIAS,
            test_sequences=200,
            other_draws=5,
            threads=1,
        ),
        runs=runs,
        claims=claims,
    )
    write_result(args.out, result)


if __name__ == "__main__":
    main()
