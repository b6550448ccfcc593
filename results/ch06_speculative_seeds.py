"""Chapter 6's speculative decoding repeated over seeds: the rotary GPT and its pair-count draft.

For each seed the rotary GPT is trained with exactly the chapter's recipe (``train_gpt`` of
``results/ch06_seeds.py``, seed 0 is the chapter's run up to the CPU's rounding); the draft,
``seqbook.lm.BigramLM`` of the training text, does not change with the seed. Measured as the
chapter's cells measure them:

* the share of guesses kept, alpha: at temperature 1 the mean over the held-out positions of
  sum_y min(p(y), q(y)); at temperature 0 the share of positions whose most probable characters
  agree;
* tokens per pass of the model for k = 1, 2, 3, 4, 6, 8 guesses per round, at temperatures 1 and 0:
  eight prompts of 16 held-out characters continued by 48, each k with the generator seeded by k
  (and the seed);
* whether the rounds at temperature 0 write the greedy text (float64, k = 1, 4, 8);
* alpha at temperature 0 measured on the greedy continuations of the eight prompts themselves
  (the text the rounds write), against eq. (tokens) with it.

Run from the repository root (``SEQBOOK_DATA`` must point at the data)::

    python results/ch06_speculative_seeds.py [--out results/ch06_speculative_seeds.json] [--seeds 0 1 2]
"""

from __future__ import annotations

import copy
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ch06_seeds import LM, THREADS, train_gpt  # noqa: E402
from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.batching import lm_chunks  # noqa: E402
from seqbook.data import time_machine_ids  # noqa: E402
from seqbook.gpt import GPTConfig  # noqa: E402
from seqbook.lm import BigramLM  # noqa: E402
from seqbook.speculative import speculative_generate  # noqa: E402
from seqbook.utils import small_model_threads  # noqa: E402

KS = (1, 2, 3, 4, 6, 8)


def predicted(a: float, k: int) -> float:
    """The chapter's eq. (tokens): mean tokens per round if each guess is kept with probability a."""
    return sum(a**i for i in range(k + 1))


def run(seed: int, lm_data, draft, device) -> dict:
    vocab, train_ids, valid_ids = lm_data
    cfg = GPTConfig(vocab_size=len(vocab), block_size=max(LM["long_contexts"]), n_layer=LM["n_layer"],
                    n_head=LM["n_head"], n_embd=LM["n_embd"], dropout=LM["dropout"],
                    init_std=LM["init_std"], fast=True, positional="rope")
    x_win, y_win = (t[:, 0] for t in lm_chunks(train_ids, 1, LM["block_size"]))
    model = train_gpt(cfg, seed, x_win, y_win, device).eval()
    W = LM["block_size"]
    n = (len(valid_ids) - 1) // W
    x = valid_ids[: n * W].view(n, W).to(device)
    y = valid_ids[1 : n * W + 1].view(n, W).to(device)
    with torch.no_grad():
        p_all = model(x)[0].double().softmax(-1)
        q_all = draft(x)[0].double().softmax(-1)
    out = dict(
        ppl_model=math.exp(F.nll_loss(p_all.log().flatten(0, 1), y.flatten()).item()),
        ppl_draft=math.exp(F.nll_loss(q_all.log().flatten(0, 1), y.flatten()).item()),
        alpha={"1": torch.minimum(p_all, q_all).sum(-1).mean().item(),
               "0": (p_all.argmax(-1) == q_all.argmax(-1)).double().mean().item()},
    )
    starts = (torch.arange(8) * (len(valid_ids) // 8)).tolist()
    prompts = [valid_ids[s : s + 16][None].to(device) for s in starts]
    n_new = W - 16
    with torch.no_grad():  # the greedy continuations: alpha on the text the rounds write
        written = torch.cat([model.generate(p, n_new, temperature=0) for p in prompts])
        agree = model(written)[0].argmax(-1) == draft(written)[0].argmax(-1)  # (8, W)
    out["alpha_greedy"] = agree[:, 15:-1].double().mean().item()  # predicting the new ones
    out["per_pass"] = {}
    for t in (1.0, 0.0):
        for k in KS:
            g = torch.Generator(device).manual_seed(1000 * seed + k)
            passes = sum(speculative_generate(model, draft, p, n_new, k=k, temperature=t, generator=g)[1]
                         for p in prompts)
            out["per_pass"][f"{t:g},{k}"] = len(prompts) * n_new / passes
    model64, draft64 = copy.deepcopy(model).double(), copy.deepcopy(draft).double()
    prompt = torch.tensor([vocab.encode(list("the time traveller"))], device=device)
    greedy = model64.generate(prompt, W - prompt.shape[1], temperature=0)
    out["greedy_equal"] = all(
        torch.equal(speculative_generate(model64, draft64, prompt, W - prompt.shape[1], k=k,
                                         temperature=0)[0], greedy)
        for k in (1, 4, 8))
    return out


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__)
    args = parser.parse_args(argv)
    device = torch.device("cpu")
    small_model_threads(device, THREADS)
    lm_data = time_machine_ids()
    vocab, train_ids, _ = lm_data
    draft = BigramLM(train_ids, len(vocab)).to(device)
    runs = []
    for seed in args.seeds:
        start = time.perf_counter()
        r = dict(seed=seed, **run(seed, lm_data, draft, device))
        r["seconds"] = round(time.perf_counter() - start, 1)
        runs.append(r)
        print(f"seed {seed}: {r}")

    def every(f):
        return all(f(r) for r in runs)

    def gaps(r, t, a=None):  # measured tokens per pass over eq. (tokens), minus 1, at every k
        a = r["alpha"][t] if a is None else a
        return [r["per_pass"][f"{t},{k}"] / predicted(a, k) - 1 for k in KS]

    def gaps_greedy(r):  # temperature 0, alpha measured on the greedy continuations
        return gaps(r, "0", r["alpha_greedy"])

    summary = dict(
        alpha={t: [min(r["alpha"][t] for r in runs), max(r["alpha"][t] for r in runs)] for t in ("1", "0")},
        per_pass_k4={t: [min(r["per_pass"][f"{t},4"] for r in runs),
                         max(r["per_pass"][f"{t},4"] for r in runs)] for t in ("1", "0")},
        gap_range={t: [min(min(gaps(r, t)) for r in runs), max(max(gaps(r, t)) for r in runs)]
                   for t in ("1", "0")},
        alpha_greedy=[min(r["alpha_greedy"] for r in runs), max(r["alpha_greedy"] for r in runs)],
        gap_greedy=[min(min(gaps_greedy(r)) for r in runs), max(max(gaps_greedy(r)) for r in runs)],
    )
    claims = {
        "at temperature 0 the rounds write the greedy text (k = 1, 4, 8)": every(lambda r: r["greedy_equal"]),
        "more guesses are kept at temperature 1 than at temperature 0":
            every(lambda r: r["alpha"]["1"] > r["alpha"]["0"]),
        "with k = 4 one pass gives more than 1.5 tokens at both temperatures":
            every(lambda r: min(r["per_pass"]["1,4"], r["per_pass"]["0,4"]) > 1.5),
        "at temperature 1 the measured tokens per pass are within 15 % of eq. (tokens) at every k":
            every(lambda r: max(map(abs, gaps(r, "1"))) < 0.15),
        "at temperature 0, with alpha measured on the greedy continuations, the measured tokens per "
        "pass are at most 5 % above eq. (tokens) and at most 20 % below it at every k":
            every(lambda r: -0.2 < min(gaps_greedy(r)) and max(gaps_greedy(r)) < 0.05),
    }
    result = dict(**provenance(), recipe=dict(LM=LM, ks=KS, prompts=8, prompt_length=16, new=48),
                  runs=runs, summary=summary, claims=claims)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
