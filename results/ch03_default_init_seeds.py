"""Chapter 3's exercise ex-ch3-default-init over more random seeds: the GRU at T = 50 without the keep bias.

The exercise's solution trains the chapter's GRU on the memory task at T = 50 once, from the seed
``MEM_SEED``, with PyTorch's default initialisation instead of ``init_keep_bias(..., 3.0)``, and
finds it near chance after the 250 steps, where the GRU started in keep mode solves the task. This
script runs the same ``memory_run`` of ``results/ch03_seeds.py`` (the chapter's recipe, one CPU
thread) with the default initialisation at seeds 0 to 4, and records the mean update gate before
training on 200 test sequences, the test accuracy where the early stop ends the run and after the
full budget. The keep-bias runs of the same seeds are ``results/ch03_seeds.json``'s.

Run from the repository root::

    python results/ch03_default_init_seeds.py [--seeds 0 1 2 3 4]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "results"))

import ch03_seeds as base  # noqa: E402
from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.data import first_token_task  # noqa: E402
from seqbook.utils import small_model_threads  # noqa: E402

T = 50


def mean_gate_at_start(seed) -> float:
    model = base.memory_model("gru", None, seed)
    ids, _ = first_token_task(200, T, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        _, _, gates = model.rnn(model.embed(ids), return_gates=True)
    return round(gates["z"].mean().item(), 4)


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__, seeds=(0, 1, 2, 3, 4))
    args = parser.parse_args(argv)
    small_model_threads(base.DEVICE, 1)
    runs = []
    for seed in args.seeds:
        start = time.perf_counter()
        trained = base.memory_run("gru", T, seed, keep_bias=None)  # PyTorch's initialisation
        run = dict(seed=seed, z_start=mean_gate_at_start(seed), **trained)
        run["seconds"] = round(time.perf_counter() - start, 1)
        runs.append(run)
        print(f"seed {seed} ({run['seconds']} s): mean z at the start {run['z_start']:.3f}, "
              f"accuracy {run['early_accuracy']:.3f} / {run['full_accuracy']:.3f}", flush=True)
    early = [r["early_accuracy"] for r in runs]
    full = [r["full_accuracy"] for r in runs]
    summary = dict(early=early, full=full, z_start=[r["z_start"] for r in runs])
    claims = {
        "GRU at T = 50 without the keep bias: every run below 0.3 after the 250 steps":
            max(early + full) < 0.3,
        "GRU without the keep bias: the mean update gate starts between 0.4 and 0.6 at every seed":
            all(0.4 < r["z_start"] < 0.6 for r in runs),
    }
    result = dict(**provenance(), recipe=dict(T=T, base="results/ch03_seeds.py", keep_bias=None,
                                              threads=1),
                  runs=runs, summary=summary, claims=claims)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
