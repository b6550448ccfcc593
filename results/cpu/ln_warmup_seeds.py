"""Chapter 6's post-LN / pre-LN x warm-up experiment repeated over seeds and two peak learning rates.

The settings are those of the chapter's cell (the date task, three encoder and three decoder layers
of width 32, 100 steps of 32 pairs, AdamW, label smoothing 0.1, cosine decay with 0 or 50 warm-up
steps); the seed sets the initial weights and the order of the batches. Run from the repository root:

    python results/cpu/ln_warmup_seeds.py

It writes results/cpu/ln_warmup_seeds.json: the final training loss of each run, and its loss on the
1,000 held-out dates (with the same label smoothing) given each date's own source and given the
source of another date (the sources permuted by a fixed permutation): the gap between the two says
how much the model reads its source.
"""

import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's seqbook, whatever is installed

from seqbook.batching import bucket_batches  # noqa: E402
from seqbook.data import date_dataset  # noqa: E402
from seqbook.train import fit, warmup_schedule  # noqa: E402
from seqbook.transformer import Seq2SeqTransformer  # noqa: E402
from seqbook.utils import code_commit, cpu_name, seed_everything, small_model_threads  # noqa: E402

SEEDS, LRS, STEPS, WARMUP = (0, 1, 2, 3), (0.02, 0.01), 100, 50


def final_loss(data, tensors, norm_first: bool, warmup: int, seed: int, lr: float) -> dict:
    src, src_lengths, tgt = tensors
    seed_everything(seed)
    model = Seq2SeqTransformer(len(data.src_vocab), len(data.tgt_vocab), embed_dim=32, num_heads=4,
                               num_encoder_layers=3, num_decoder_layers=3, d_ff=64, dropout=0.0,
                               norm_first=norm_first, fast=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    scheduler = warmup_schedule(optimizer, warmup, STEPS, kind="cosine")
    batches = bucket_batches(src, src_lengths, tgt, 32, torch.Generator().manual_seed(seed), pool=1)
    history = fit(model, lambda m, b: m.loss(*b, label_smoothing=0.1), batches, steps=STEPS,
                  optimizer=optimizer, scheduler=scheduler, device="cpu", seed=seed, progress=False)
    own, other = source_gap(model, data.tensors("test"))
    return {"final_train_loss": round(history.final_loss, 4), "test_loss": round(own, 4),
            "test_loss_other_source": round(other, 4)}


def source_gap(model, test) -> tuple[float, float]:
    """The chapter's cell: held-out loss with each date's own source and with another date's."""
    src, lengths, tgt = test
    perm = torch.randperm(len(src), generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        own = model.loss(src, lengths, tgt, label_smoothing=0.1).item()
        other = model.loss(src[perm], lengths[perm], tgt, label_smoothing=0.1).item()
    return own, other


def main() -> None:
    small_model_threads("cpu")
    data = date_dataset(10_000, 1_000, seed=0)
    tensors = data.tensors("train")
    start, runs = time.perf_counter(), []
    for lr in LRS:
        for seed in SEEDS:
            for norm in ("post-LN", "pre-LN"):
                for warmup in (0, WARMUP):
                    losses = final_loss(data, tensors, norm == "pre-LN", warmup, seed, lr)
                    runs.append({"lr": lr, "seed": seed, "norm": norm, "warmup": warmup, **losses})
                    print(runs[-1], flush=True)
    result = {"commit": code_commit(), "device_name": f"{cpu_name()}", "threads": 1,
              "torch": torch.__version__, "steps": STEPS, "seconds": round(time.perf_counter() - start, 1),
              "runs": runs}
    with open(ROOT / "results" / "cpu" / "ln_warmup_seeds.json", "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
