"""Chapter 6's rotary GPT past its training length: unseen offsets or more keys?

For each seed the rotary GPT is trained with exactly the chapter's recipe (``train_gpt`` of
``results/ch06_seeds.py``; seed 0 is the chapter's run up to the CPU's rounding) and read on the
held-out text in windows of 256 characters, four times its training length, twice:

* with full causal attention, as the chapter's positions cell does;
* with every query of every layer limited to the keys at offsets 0 to 63, the offsets it was
  trained on (the chapter's ``band_attend``, copied below unchanged).

Both reads meet four times as many keys per query at the end of a window as in training only in
the first; so if the band restores the training-length perplexity, the harm comes from the keys
at unseen offsets. Also recorded, for the full read: the mean weight that each layer's queries at
positions 192 to 255 put on keys at offsets of 64 or more, against the share a uniform spread
over the keys would give them.

Run from the repository root (``SEQBOOK_DATA`` must point at the data), one CPU thread::

    python results/ch06_rope_band_seeds.py [--seeds 0 1 ... 9]
"""

from __future__ import annotations

import copy
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ch06_seeds import LM, THREADS, position_losses, train_gpt  # noqa: E402
from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.batching import lm_chunks  # noqa: E402
from seqbook.data import time_machine_ids  # noqa: E402
from seqbook.gpt import GPTConfig  # noqa: E402
from seqbook.utils import small_model_threads  # noqa: E402

LONG = max(LM["long_contexts"])  # 256
FAR_QUERIES = (192, LONG)  # the last quarter of a long window


def band_attend(attend, width):
    """`attend` with every query limited to its own key and the width - 1 before it."""

    def banded(q, k, v, mask=None, is_causal=False, need_weights=False):
        T = q.shape[-2]
        band = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        band = band.triu(-(width - 1))  # (T, T): True where i - width < j <= i
        return attend(q, k, v, band, need_weights=need_weights)

    return banded


def run_seed(seed, vocab, train_ids, valid_ids, device) -> dict:
    cfg = GPTConfig(vocab_size=len(vocab), block_size=LONG, n_layer=LM["n_layer"],
                    n_head=LM["n_head"], n_embd=LM["n_embd"], dropout=LM["dropout"],
                    init_std=LM["init_std"], fast=True)
    cfg = replace(cfg, positional="rope")
    x_win, y_win = (t[:, 0] for t in lm_chunks(train_ids, 1, LM["block_size"]))
    rope = train_gpt(cfg, seed, x_win, y_win, device).eval()
    banded = copy.deepcopy(rope)
    for block in banded.blocks:
        block.self_attn.attend = band_attend(block.self_attn.attend, LM["block_size"])
    ppl = lambda m, L: math.exp(position_losses(m, valid_ids, L, device).mean().item())  # noqa: E731
    out = {"ppl_64": ppl(rope, LM["block_size"]), "ppl_256": ppl(rope, LONG),
           "ppl_256_band": ppl(banded, LONG)}
    # the weight on far keys, full attention, queries 192 to 255
    n = (len(valid_ids) - 1) // LONG
    with torch.no_grad():
        rope(valid_ids[: n * LONG].view(n, LONG).to(device), need_weights=True)
    i = torch.arange(LONG)
    far = (i[:, None] - i[None, :]) >= LM["block_size"]  # (T, T): key at offset >= 64
    a, b = FAR_QUERIES
    out["far_weight"] = [
        (block.attn_weights.cpu() * far).sum(-1).mean((0, 1))[a:b].mean().item()
        for block in rope.blocks
    ]
    out["far_uniform"] = (far.sum(-1) / (i + 1))[a:b].float().mean().item()
    return out


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__, seeds=tuple(range(10)))
    args = parser.parse_args(argv)
    device = torch.device("cpu")
    small_model_threads(device, THREADS)
    vocab, train_ids, valid_ids = time_machine_ids()
    runs = []
    for seed in args.seeds:
        start = time.perf_counter()
        run = dict(seed=seed, **run_seed(seed, vocab, train_ids, valid_ids, device))
        run["seconds"] = round(time.perf_counter() - start, 1)
        runs.append(run)
        print(run, flush=True)

    def every(f):
        return all(f(r) for r in runs)

    claims = {
        "at 256 characters with full attention, above 1.3 times the perplexity at 64":
            every(lambda r: r["ppl_256"] > 1.3 * r["ppl_64"]),
        "at 256 characters with each query limited to offsets 0-63, within 5 % of the "
        "perplexity at 64": every(lambda r: r["ppl_256_band"] < 1.05 * r["ppl_64"]),
        "at queries 192-255 every layer puts more weight on the keys at offsets >= 64 than a "
        "uniform spread would": every(lambda r: min(r["far_weight"]) > r["far_uniform"]),
    }
    summary = {
        key: [min(r[key] for r in runs), max(r[key] for r in runs)]
        for key in ("ppl_64", "ppl_256", "ppl_256_band")
    }
    summary["band_over_64"] = [min(r["ppl_256_band"] / r["ppl_64"] for r in runs),
                               max(r["ppl_256_band"] / r["ppl_64"] for r in runs)]
    summary["far_weight"] = [min(min(r["far_weight"]) for r in runs),
                             max(max(r["far_weight"]) for r in runs)]
    summary["far_uniform"] = runs[0]["far_uniform"]
    summary["mean_seconds_per_seed"] = statistics.mean(r["seconds"] for r in runs)
    recipe = dict(LM, band=LM["block_size"], long=LONG, far_queries=list(FAR_QUERIES))
    result = dict(**provenance(), recipe=recipe, runs=runs, summary=summary, claims=claims)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
