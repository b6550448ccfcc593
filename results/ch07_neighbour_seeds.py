"""Chapter 7's nearest-neighbour language model over three seeds: chapter 6's GPT with a
Hopfield memory of its training text.

For each seed (0, 1, 2) the script trains chapter 6's character GPT with exactly the chapter's
recipe (``train_gpt`` of ``results/ch06_seeds.py``: learned positions, 400 steps, one CPU
thread) and then:

* **the memory:** the context vector of every training position (the final LayerNorm's output,
  what the output layer reads) as a key, the character that follows it as its value: the
  training text cut into windows of 64, 156,736 keys;
* **the held-out text** cut into windows of 64 the same way, its first half for choosing
  beta and lambda (the *tuning* half), its second half for reporting them (the *test* half);
* **the grid:** beta in BETAS and lambda in LAMBDAS; the pair with the lowest perplexity
  on the tuning half is reported on the test half, beside the model alone (lambda = 0) and
  the memory alone (lambda = 1, at the chosen beta);
* **the chapter's numbers:** at the chapter's beta and lambda, the perplexities on the
  chapter's 16 test windows (positions 8704 to 9727 of the cut held-out text);
* **the memory's size:** at the chosen beta, the test-half perplexity with a random quarter and
  a random half of the training keys (one fixed draw), lambda chosen again for each size on the
  tuning half, beside all the keys;
* **which text the memory holds:** the same with the first and with the last quarter of the
  training text's keys (the held-out text is the end of the book).

The retrieval runs with two threads; only the training needs the chapter's one thread to
follow the chapter's trajectory. The chapter asserts its sentences against ``claims``.

Run from the repository root (``SEQBOOK_DATA`` must point at the data)::

    python results/ch07_neighbour_seeds.py [--out results/ch07_neighbour_seeds.json]
        [--seeds 0 1 2]
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "results"))

from ch06_seeds import LM, train_gpt  # noqa: E402
from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.batching import lm_chunks  # noqa: E402
from seqbook.data import time_machine_ids  # noqa: E402
from seqbook.gpt import GPTConfig  # noqa: E402
from seqbook.hopfield import neighbour_probs  # noqa: E402
from seqbook.utils import small_model_threads  # noqa: E402

BETAS = (0.25, 0.5, 1.0, 2.0, 4.0)
LAMBDAS = tuple(round(0.05 * i, 2) for i in range(1, 20))
CHAPTER_BETA, CHAPTER_LAMBDA = 1.0, 0.85  # the chapter's config cell
CHAPTER_WINDOWS = slice(136, 152)  # the chapter's 16 test windows
SIZES = (0.25, 0.5)  # random fractions of the keys, beside all of them


@torch.no_grad()
def context_vectors(model, x: torch.Tensor) -> torch.Tensor:
    """What the output layer reads at every position: (n, T) ids -> (n * T, D)."""
    h, rotary = model.positions(model.tok_emb(x))
    for block in model.blocks:
        h = block(h, rotary)
    return model.ln_f(h).flatten(0, 1)


@torch.no_grad()
def log_probs(model, x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(model(x)[0], -1).flatten(0, 1)  # (n * T, V)


def memory_log_probs(queries, keys, values, vocab_size, beta) -> torch.Tensor:
    p = torch.cat([neighbour_probs(q, keys, values, vocab_size, beta) for q in queries.split(512)])
    return p.clamp_min(1e-30).log()


def nll(log_p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return -log_p.gather(1, y[:, None]).squeeze(1)


def mixed_nll(lm: torch.Tensor, memory: torch.Tensor, y: torch.Tensor, lam: float) -> torch.Tensor:
    """-log((1 - lam) p_LM(y) + lam p_memory(y)) per position."""
    return nll(torch.logaddexp(lm + math.log1p(-lam), memory + math.log(lam)), y)


def ppl(n: torch.Tensor) -> float:
    return round(math.exp(n.double().mean().item()), 4)


def memory_part(idx, queries, keys, values, V, beta, lm, y, tune, test) -> dict:
    """The memory of the keys ``idx`` at ``beta``, lambda chosen on the tuning half."""
    m = memory_log_probs(queries, keys[idx], values[idx], V, beta)
    best = min(LAMBDAS, key=lambda la: ppl(mixed_nll(lm[tune], m[tune], y[tune], la)))
    return dict(keys=len(idx), lam=best, memory=ppl(nll(m[test], y[test])),
                mixed=ppl(mixed_nll(lm[test], m[test], y[test], best)))


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__)
    args = parser.parse_args(argv)
    device = torch.device("cpu")
    vocab, train_ids, valid_ids = time_machine_ids()
    V = len(vocab)
    T = LM["block_size"]
    x_win, y_win = (t[:, 0] for t in lm_chunks(train_ids, 1, T))  # (N, T)
    vx, vy = (t[:, 0] for t in lm_chunks(valid_ids, 1, T))  # (272, T)
    half = len(vx) // 2
    assert CHAPTER_WINDOWS.start == half
    cfg = GPTConfig(vocab_size=V, block_size=T, n_layer=LM["n_layer"], n_head=LM["n_head"],
                    n_embd=LM["n_embd"], dropout=LM["dropout"], init_std=LM["init_std"], fast=True)

    runs = []
    for seed in args.seeds:
        small_model_threads(device, 1)
        model = train_gpt(cfg, seed, x_win, y_win, device).eval()
        torch.set_num_threads(2)
        keys, values = context_vectors(model, x_win), y_win.flatten()
        queries, y = context_vectors(model, vx), vy.flatten()
        lm = log_probs(model, vx)
        tune, test = slice(0, half * T), slice(half * T, None)
        memory = {b: memory_log_probs(queries, keys, values, V, b) for b in BETAS}
        grid = {(b, lam): ppl(mixed_nll(lm[tune], memory[b][tune], y[tune], lam))
                for b in BETAS for lam in LAMBDAS}
        beta, lam = min(grid, key=grid.get)
        chapter = slice(CHAPTER_WINDOWS.start * T, CHAPTER_WINDOWS.stop * T)
        m_ch = memory[CHAPTER_BETA][chapter]
        def part(idx, ctx=(queries, keys, values, V, beta, lm, y, tune, test)) -> dict:
            return memory_part(idx, *ctx)

        drawn = torch.randperm(len(keys), generator=torch.Generator().manual_seed(seed))
        sizes = {str(frac): part(drawn[: int(frac * len(keys))]) for frac in SIZES}
        sizes["1.0"] = dict(keys=len(keys), lam=lam, memory=ppl(nll(memory[beta][test], y[test])),
                            mixed=ppl(mixed_nll(lm[test], memory[beta][test], y[test], lam)))
        quarter = len(keys) // 4
        quarters = {"first": part(torch.arange(quarter)),
                    "last": part(torch.arange(len(keys) - quarter, len(keys)))}
        run = dict(
            seed=seed,
            keys=len(keys),
            beta=beta,
            lam=lam,
            tune=dict(lm=ppl(nll(lm[tune], y[tune])), mixed=grid[(beta, lam)],
                      memory_by_beta={str(b): ppl(nll(memory[b][tune], y[tune])) for b in BETAS}),
            test=dict(lm=ppl(nll(lm[test], y[test])), memory=ppl(nll(memory[beta][test], y[test])),
                      mixed=ppl(mixed_nll(lm[test], memory[beta][test], y[test], lam))),
            chapter=dict(lm=ppl(nll(lm[chapter], y[chapter])), memory=ppl(nll(m_ch, y[chapter])),
                         mixed=ppl(mixed_nll(lm[chapter], m_ch, y[chapter], CHAPTER_LAMBDA))),
            sizes=sizes,
            quarters=quarters,
        )
        runs.append(run)
        print(f"seed {seed}: beta {beta}, lambda {lam}; test LM {run['test']['lm']}, memory "
              f"{run['test']['memory']}, mixed {run['test']['mixed']}; chapter {run['chapter']}; "
              f"sizes {sizes}; quarters {quarters}", flush=True)

    claims = {
        "the mixture beats the model alone on the test half at every seed, by more than 5 %":
            all(r["test"]["mixed"] < 0.95 * r["test"]["lm"] for r in runs),
        "the memory alone beats the model alone on the test half at every seed":
            all(r["test"]["memory"] < r["test"]["lm"] for r in runs),
        "the mixture beats the memory alone on the test half at every seed":
            all(r["test"]["mixed"] < r["test"]["memory"] for r in runs),
        "at the chapter's beta and lambda the mixture beats the model on the chapter's windows":
            all(r["chapter"]["mixed"] < r["chapter"]["lm"] for r in runs),
        "a larger random memory gives a lower mixed perplexity at every seed":
            all(r["sizes"]["0.25"]["mixed"] > r["sizes"]["0.5"]["mixed"] > r["sizes"]["1.0"]["mixed"]
                for r in runs),
        "the first quarter of the book helps more than the last at every seed":
            all(r["quarters"]["first"]["mixed"] < r["quarters"]["last"]["mixed"] for r in runs),
    }
    result = dict(
        **provenance(),
        recipe=LM,
        model="chapter 6's GPT with learned positions: " + str(asdict(cfg)),
        keys="context vectors (final LayerNorm output) of the training text in windows of 64",
        tuning="the first 136 held-out windows of 64; test: the last 136",
        betas=list(BETAS),
        lambdas=list(LAMBDAS),
        chapter_beta=CHAPTER_BETA,
        chapter_lambda=CHAPTER_LAMBDA,
        chapter_windows=[CHAPTER_WINDOWS.start, CHAPTER_WINDOWS.stop],
        runs=runs,
        claims=claims,
    )
    for claim, held in claims.items():
        print(f"{'held' if held else 'FAILED'}: {claim}")
    write_result(args.out, result)


if __name__ == "__main__":
    main()
