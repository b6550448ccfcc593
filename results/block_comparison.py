"""GPT-2 block vs Llama block (MHA, GQA, MQA) on chapter 6's character-level language model.

Every model is trained with exactly the recipe of ``chapters/06_transformer.ipynb`` (its config
cell, id ``9e526653``, the ``train_gpt`` cell, id ``74b5fcd2``, and the rotary GPT of its section on
rotary positions): *The Time Machine* as ids, windows of ``block_size`` = 64 characters
(``lm_chunks(train_ids, 1, 64)``), AdamW(lr, weight_decay=0.01), ``warmup_schedule(..., kind="cosine",
min_factor=0.1)``, ``fit`` for 400 steps of ``random_batches(..., batch_size=16)``, one CPU
thread. The only change is the seed (``--seeds``; the JSON holds 0 to 4), which is passed to
``seed_everything`` before the model is built, to the batches' generator and to ``fit``. (The
chapter runs seed 0 everywhere; with dropout 0 the training draws no random numbers from the global
generator, so ``fit``'s re-seeding does not change anything.)

The models:

* ``gpt2_rope``: ``GPTConfig(..., positional="rope", block_size=256, fast=True)``, the chapter's rotary GPT.
* ``llama_mha``: ``LlamaConfig(n_kv_head=4, tie_weights=True, block_size=256)``, multi-head attention.
* ``llama_gqa2``: the same with ``n_kv_head=2`` (grouped-query attention, groups of 2).
* ``llama_mqa``: the same with ``n_kv_head=1`` (multi-query attention).
* ``llama_mha_scaled``: ``llama_mha`` with GPT-2's scaled residual projections, a control: after
  the Llama's own initialisation, ``out_proj`` and ``down_proj`` are drawn again from
  N(0, (init_std / sqrt(2 n_layer))^2), as ``GPT`` draws its ``out_proj`` and ``linear2``. The
  blocks differ; this takes the one difference in initialisation out of the comparison.

Reported per run: parameters, held-out perplexity at the training length 64
(``evaluate_perplexity(model, *lm_chunks(valid_ids, 16, 64), carry_state=False)``, as the ``train_gpt`` cell),
and milliseconds per training step: the median over the run of the time between the starts of
consecutive steps (taken by a ``time.perf_counter`` in the loss function, so forward, backward,
clipping, optimiser and scheduler are all inside), and the mean (whole ``fit`` / steps).

Note on timing: the GPT runs the fused attention (``fast=True``, ``F.scaled_dot_product_attention``);
``seqbook.llama`` has no fused path and runs the readable attention, which builds the weights.

Run from the repository root (``SEQBOOK_DATA`` must point at the data)::

    python results/block_comparison.py [--out results/block_comparison.json] [--seeds 0 1 2]

``--recompute-claims FILE`` rewrites the claims of a result file from its stored runs, and notes when
(the claims are the chapter's sentences, which changed after the runs of the committed file).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

# this checkout's seqbook, not whichever one is installed (``python results/...`` puts results/ first)
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runinfo import provenance, script_parser, write_result  # noqa: E402

import seqbook  # noqa: E402
from seqbook.batching import lm_chunks  # noqa: E402
from seqbook.data import time_machine_ids  # noqa: E402
from seqbook.gpt import GPT, GPTConfig  # noqa: E402
from seqbook.llama import Llama, LlamaConfig  # noqa: E402
from seqbook.lm import evaluate_perplexity  # noqa: E402
from seqbook.train import fit, random_batches, warmup_schedule  # noqa: E402
from seqbook.utils import count_parameters, seed_everything, small_model_threads  # noqa: E402

# chapter 6's config cell (id 9e526653), CPU settings (the chapter's LM dict)
LM = dict(
    block_size=64,
    n_layer=2,
    n_head=4,
    n_embd=64,
    dropout=0.0,
    batch_size=16,
    init_std=0.08,
    steps=400,
    lr=1e-2,
    warmup=30,
    long_contexts=(128, 256),
)
THREADS = 1
MODELS = ("gpt2_rope", "llama_mha", "llama_gqa2", "llama_mqa", "llama_mha_scaled")
KV_HEADS = {"llama_mha": 4, "llama_gqa2": 2, "llama_mqa": 1, "llama_mha_scaled": 4}


def make_model(name: str, vocab_size: int, **changes) -> torch.nn.Module:
    """The model ``name``; ``changes`` go to a Llama's config (``sliding_window=8``, say)."""
    block_size = max(LM["long_contexts"])  # 256, as the chapter's rotary GPT
    sizes = dict(
        vocab_size=vocab_size,
        block_size=block_size,
        n_layer=LM["n_layer"],
        n_head=LM["n_head"],
        n_embd=LM["n_embd"],
        init_std=LM["init_std"],
    )
    if name == "gpt2_rope":
        return GPT(GPTConfig(**sizes, dropout=LM["dropout"], positional="rope", fast=True))
    model = Llama(LlamaConfig(**sizes, n_kv_head=KV_HEADS[name], tie_weights=True, **changes))
    if name == "llama_mha_scaled":  # GPT-2's scaling of the projections into the residual stream
        std = LM["init_std"] / math.sqrt(2 * LM["n_layer"])
        for param_name, p in model.named_parameters():
            if param_name.endswith(("out_proj.weight", "down_proj.weight")):
                torch.nn.init.normal_(p, mean=0.0, std=std)
    return model


def train(name: str, seed: int, vocab_size: int, x_win, y_win, device, **changes
          ) -> tuple[torch.nn.Module, dict]:
    """Cell ``74b5fcd2``'s ``train_gpt`` with ``seed`` instead of 0; returns the model and its timings."""
    seed_everything(seed)
    model = make_model(name, vocab_size, **changes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LM["lr"], weight_decay=0.01)
    scheduler = warmup_schedule(optimizer, LM["warmup"], LM["steps"], kind="cosine", min_factor=0.1)
    stamps: list[float] = []

    def loss_fn(m, b):
        stamps.append(time.perf_counter())  # the start of each step's forward pass
        return m(*b)[1]

    start = time.perf_counter()
    history = fit(
        model,
        loss_fn,
        random_batches(
            x_win, y_win, batch_size=LM["batch_size"], generator=torch.Generator().manual_seed(seed)
        ),
        steps=LM["steps"],
        optimizer=optimizer,
        scheduler=scheduler,
        device=device,
        seed=seed,
        progress=False,
        desc=f"{name}, seed {seed}",
    )
    seconds = time.perf_counter() - start
    steps = [b - a for a, b in zip(stamps[:-1], stamps[1:], strict=True)]  # steps 1..N-1, each complete
    return model, dict(
        seconds=seconds,
        ms_per_step=1e3 * statistics.median(steps),
        ms_per_step_mean=1e3 * seconds / LM["steps"],
        final_train_loss=history.final_loss,
    )


def chapter_data():
    """The CPU with one thread, and the chapter's data: the vocabulary, the (N, T) training
    windows and their targets, the held-out chunks and theirs."""
    device = torch.device("cpu")
    small_model_threads(device, THREADS)
    vocab, train_ids, valid_ids = time_machine_ids()
    x_win, y_win = (t[:, 0] for t in lm_chunks(train_ids, 1, LM["block_size"]))  # (N, T) windows
    valid_x, valid_y = lm_chunks(valid_ids, 16, LM["block_size"])
    return device, vocab, x_win, y_win, valid_x, valid_y


def claims_of(runs: list[dict]) -> dict[str, bool]:
    """The sentences chapter 6 states about these runs (its block comparison asserts them too)."""
    seeds = sorted({r["seed"] for r in runs})
    ppl = {(r["model"], r["seed"]): r["perplexity"] for r in runs}

    def diff(name):  # seed by seed, against GPT-2's block
        return [ppl[name, s] - ppl["gpt2_rope", s] for s in seeds]

    def spread(name):
        return max(ppl[name, s] for s in seeds) - min(ppl[name, s] for s in seeds)

    claims = {"llama_mha behind gpt2_rope at every seed": min(diff("llama_mha")) > 0}
    for name in ("llama_gqa2", "llama_mqa"):
        behind = sum(d > 0.01 for d in diff(name))
        level = sum(abs(d) <= 0.01 for d in diff(name))
        claims[f"{name}: behind gpt2_rope (by more than 0.01) at some seeds, ahead at others"] = (
            0 < behind < len(seeds) - level)
        ahead = sum(ppl[name, s] < ppl["llama_mha", s] for s in seeds)
        claims[f"{name} ahead of llama_mha at most seeds, not at every one"] = (
            len(seeds) / 2 < ahead < len(seeds))
    mean = {n: sum(diff(n)) / len(seeds) for n in ("llama_mha", "llama_mha_scaled")}
    claims["llama_mha_scaled closes part of llama_mha's gap to gpt2_rope, on average"] = (
        0 < mean["llama_mha_scaled"] < mean["llama_mha"])
    claims["every Llama's perplexity spreads more over the seeds than gpt2_rope's"] = all(
        spread(n) > spread("gpt2_rope") for n in MODELS[1:])
    return claims


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__)
    parser.add_argument("--recompute-claims", metavar="FILE",
                        help="rewrite only the claims of FILE from its stored runs, and exit")
    args = parser.parse_args(argv)
    if args.recompute_claims:
        result = json.loads(Path(args.recompute_claims).read_text())
        result["claims"] = claims_of(result["runs"])
        made, now = result["commit"], provenance()["commit"]
        result["claims_recomputed"] = f"at commit {now}, from the runs stored here (made at {made})"
        write_result(args.recompute_claims, result)
        return
    device, vocab, x_win, y_win, valid_x, valid_y = chapter_data()

    runs = []
    jobs = [(name, seed) for seed in args.seeds for name in MODELS]
    bar = tqdm(jobs, desc="block comparison")
    for name, seed in bar:
        bar.set_postfix(model=name, seed=seed)
        model, timing = train(name, seed, len(vocab), x_win, y_win, device)
        ppl = evaluate_perplexity(model, valid_x, valid_y, carry_state=False)
        runs.append(
            dict(
                model=name,
                seed=seed,
                parameters=count_parameters(model),
                perplexity=round(ppl, 4),
                ms_per_step=round(timing["ms_per_step"], 3),
                ms_per_step_mean=round(timing["ms_per_step_mean"], 3),
                seconds=round(timing["seconds"], 2),
                final_train_loss=round(timing["final_train_loss"], 4),
            )
        )
        tqdm.write(
            f"{name:11} seed {seed}: {runs[-1]['parameters']:>6} parameters, perplexity {ppl:.3f}, "
            f"{timing['ms_per_step']:.1f} ms/step (median)"
        )

    summary = {}
    for name in MODELS:
        rows = [r for r in runs if r["model"] == name]
        ppl = [r["perplexity"] for r in rows]
        summary[name] = dict(
            parameters=rows[0]["parameters"],
            perplexity_min=min(ppl),
            perplexity_mean=round(statistics.mean(ppl), 4),
            perplexity_max=max(ppl),
            ms_per_step_mean=round(statistics.mean(r["ms_per_step"] for r in rows), 3),
        )
    claims = claims_of(runs)
    result = dict(
        **provenance(),
        seqbook=str(Path(seqbook.__file__).parent),
        recipe=LM,
        models={
            "gpt2_rope": (
                "GPTConfig(positional='rope', block_size=256, dropout=0, fast=True), fused attention"
            ),
            "llama_mha": "LlamaConfig(n_kv_head=4, tie_weights=True, block_size=256), readable attention",
            "llama_gqa2": "LlamaConfig(n_kv_head=2, tie_weights=True, block_size=256), readable attention",
            "llama_mqa": "LlamaConfig(n_kv_head=1, tie_weights=True, block_size=256), readable attention",
            "llama_mha_scaled": (
                "llama_mha with out_proj and down_proj drawn from N(0, (init_std / sqrt(2 n_layer))^2), "
                "GPT-2's scaled residual projections"
            ),
        },
        perplexity="evaluate_perplexity(model, *lm_chunks(valid_ids, 16, 64), carry_state=False)",
        ms_per_step="median over steps 2..400 of the time between the starts of consecutive steps",
        runs=runs,
        summary=summary,
        claims=claims,
    )

    print(f"\n{'model':11} {'params':>7} {'ppl min':>8} {'mean':>8} {'max':>8} {'ms/step':>8}")
    for name, s in summary.items():
        print(
            f"{name:11} {s['parameters']:>7} {s['perplexity_min']:>8.3f} {s['perplexity_mean']:>8.3f} "
            f"{s['perplexity_max']:>8.3f} {s['ms_per_step_mean']:>8.2f}"
        )
    write_result(args.out, result)


if __name__ == "__main__":
    main()
