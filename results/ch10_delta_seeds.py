"""Chapter 10's delta-rule results over several random seeds.

The section "The delta rule" of ``chapters/10_recurrence.ipynb`` runs three experiments; this
script runs each with the chapter's exact CPU configuration, changing only the random seed. Seed 0
is the chapter's own run; seeds 1, 2, ... shift every seed the chapter uses by ``10_000 * seed``,
as results/ch10_seeds.py does:

* **capacity** (cell "capacity"): chapter 7's memory of N = 100 neurons stores P random +-1
  patterns by Hebb's rule (``hebbian_weights``, zero diagonal; and with the diagonal P/N kept,
  as the delta rule's memory keeps its own) or by the delta rule (keys
  x / sqrt(N), values x, beta = 1, one pass or three passes over the patterns); one synchronous
  update from a cue with 10 of its 100 bits flipped must give the pattern back exactly. 20
  memories per P; ``Generator(7 + 10_000 * seed)``.
* **MQAR** (cell "delta_mqar"): the MQAR models of results/ch10_seeds.py (same task, training
  and seeds) with a ``DeltaNet`` layer, plain or gated, as the mixing layer: one head of width 16,
  a state of 16 x 16 = 256 numbers.
* **MQAR with updates** (cell "delta_updates"): ``mqar_updates``, every key written twice with a new
  value, the last one asked for; n = 8, 16, 32 writes, for softmax attention, linear attention,
  the gated recurrence with N = 16, DeltaNet and gated DeltaNet; otherwise as MQAR. The chapter
  trains these with 8 writes only (seed 0) and reads every number of writes over the seeds,
  8 included, from this script's JSON.

The chapter reads the JSON and asserts the claims; the numbers of the plain-MQAR models without
the delta rule come from results/ch10_seeds.json (same seeds, same data).

Run from the repository root, one CPU thread::

    python results/ch10_delta_seeds.py [--seeds 0 1 2 ... 11]
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "results"))

import ch10_seeds  # noqa: E402
from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.delta_rule import DeltaNet, delta_rule_recurrent  # noqa: E402
from seqbook.hopfield import hebbian_weights  # noqa: E402
from seqbook.utils import small_model_threads  # noqa: E402

SHIFT = ch10_seeds.SHIFT

# --- capacity: the chapter's configuration cell ---
CAP_N, CAP_NETS, CAP_FLIPS = 100, 20, 10
CAP_P = [5, 10, 15, 20, 25, 30, 40, 50]
CAP_PASSES = (1, 3)

# --- MQAR with updates ---
UPDATE_WRITES = [8, 16, 32]


class DeltaMix(nn.Module):
    """One DeltaNet head as a (batch, T, d) -> (batch, T, d) layer (the chapter's)."""

    def __init__(self, d, gated=False):
        super().__init__()
        self.delta = DeltaNet(d, 1, gated=gated, chunk_size=16)

    def forward(self, x):
        return self.delta(x)[0]


ch10_seeds.MQAR_MODELS["DeltaNet"] = lambda d: DeltaMix(d)
ch10_seeds.MQAR_MODELS["gated DeltaNet"] = lambda d: DeltaMix(d, gated=True)
DELTA_MODELS = ["DeltaNet", "gated DeltaNet"]
UPDATE_MODELS = ["softmax attention", "linear attention", "gated recurrence, N = 16",
                 *DELTA_MODELS]


def flip_bits(x, n_flips, generator):
    flip = torch.rand(x.shape, generator=generator).argsort(-1) < n_flips
    return torch.where(flip, -x, x)


def one_update(W, cue):
    """sign(cue W), a neuron whose field is 0 keeping its value (chapter 7's rule)."""
    h = cue @ W
    return torch.where(h == 0, cue, torch.sign(h))


def capacity(seed):
    """Fraction of patterns recalled exactly in one update, per P, for each rule."""
    g = torch.Generator().manual_seed(7 + SHIFT * seed)
    N, f64 = CAP_N, torch.float64
    out = {"Hebb": [], "Hebb, diagonal kept": [],
           **{f"delta, {r} pass{'es' * (r > 1)}": [] for r in CAP_PASSES}}
    for P in CAP_P:
        x = (torch.randint(0, 2, (CAP_NETS, P, N), generator=g) * 2 - 1).to(f64)
        cue = flip_bits(x, CAP_FLIPS, g)

        def exact(W, x=x, cue=cue):
            return (one_update(W, cue) == x).all(-1).double().mean().item()

        W = torch.stack([hebbian_weights(p) for p in x])  # (nets, N, N), zero diagonal
        out["Hebb"].append(exact(W))
        out["Hebb, diagonal kept"].append(exact(W + P / N * torch.eye(N, dtype=f64)))
        k = (x / math.sqrt(N))[:, None]  # (nets, 1, P, N): unit keys
        for r in CAP_PASSES:
            keys, values = k.repeat(1, 1, r, 1), x[:, None].repeat(1, 1, r, 1)
            _, S = delta_rule_recurrent(keys, keys, values, torch.ones(*keys.shape[:3], dtype=f64))
            out[f"delta, {r} pass{'es' * (r > 1)}"].append(exact(S[:, 0] / math.sqrt(N)))
    return out


def first_below_half(xs, acc):
    return next((x for x, a in zip(xs, acc, strict=True) if a < 0.5), None)


def main() -> None:
    parser = script_parser(__file__, __doc__, seeds=tuple(range(12)))
    parser.add_argument("--rescore", action="store_true",
                        help="recompute the summary and claims from the runs already in --out "
                             "(their provenance kept), without training")
    args = parser.parse_args()
    small_model_threads(torch.device("cpu"), 1)
    base = json.loads((ROOT / "results" / "ch10_seeds.json").read_text())
    old = json.loads(Path(args.out).read_text()) if args.rescore else None
    seeds = [r["seed"] for r in old["runs"]] if old else args.seeds
    # the claims compare with the plain-MQAR runs of the other layers at the same seeds
    missing = sorted(set(seeds) - {r["seed"] for r in base["runs"]})
    if missing:
        parser.error(f"seeds {missing} have no plain-MQAR runs in results/ch10_seeds.json; run "
                     "results/ch10_seeds.py at those seeds first")
    if old:
        summary, claims = score(old["runs"], base)
        old.update(summary=summary, claims=claims,
                   rescored={k: v for k, v in provenance().items() if k != "machine"})
        write_result(args.out, old)
        return
    runs = []
    for seed in args.seeds:
        start = time.perf_counter()
        run = {"seed": seed, "capacity": capacity(seed)}
        print(seed, "capacity", {k: [round(a, 3) for a in v] for k, v in run["capacity"].items()},
              flush=True)
        run["mqar"] = {}
        for name in DELTA_MODELS:
            rows = [ch10_seeds.train_mqar(name, n, seed=seed) for n in ch10_seeds.MQAR_PAIRS]
            run["mqar"][name] = [r["accuracy"] for r in rows]
            print(seed, "mqar", name, [f"{a:.3f}" for a in run["mqar"][name]], flush=True)
        run["updates"] = {}
        for name in UPDATE_MODELS:
            rows = [ch10_seeds.train_mqar(name, n, seed=seed, updates=True)
                    for n in UPDATE_WRITES]
            run["updates"][name] = [r["accuracy"] for r in rows]
            print(seed, "updates", name, [f"{a:.3f}" for a in run["updates"][name]], flush=True)
        run["seconds"] = time.perf_counter() - start
        runs.append(run)
    summary, claims = score(runs, base)
    recipe = dict(capacity=dict(N=CAP_N, nets=CAP_NETS, flips=CAP_FLIPS, P=CAP_P,
                                passes=list(CAP_PASSES)),
                  mqar=dict(pairs=ch10_seeds.MQAR_PAIRS, models=DELTA_MODELS, **ch10_seeds.MQAR),
                  updates=dict(writes=UPDATE_WRITES, writes_per_key=2, models=UPDATE_MODELS),
                  seed_shift=SHIFT, plain_mqar_baselines="results/ch10_seeds.json "
                  f"(commit {base['commit']})")
    result = dict(**provenance(), recipe=recipe, runs=runs, summary=summary, claims=claims)
    write_result(args.out, result)


def score(runs, base):
    """The summary and the claims (each True if it held on every seed) of ``runs``."""
    base_runs = {r["seed"]: r for r in base["runs"]}

    def every(pred):
        return all(pred(r) for r in runs)

    def plain(r, name):  # plain MQAR accuracies, from this file or results/ch10_seeds.json
        return r["mqar"][name] if name in r["mqar"] else base_runs[r["seed"]]["mqar"][name]["accuracy"]

    cap = lambda r, k: first_below_half(CAP_P, r["capacity"][k]) or 10**9  # noqa: E731
    upd = lambda r, k: r["updates"][k]  # noqa: E731
    lin, soft, g16 = "linear attention", "softmax attention", "gated recurrence, N = 16"
    claims = {
        "capacity: one pass of the delta rule recalls more patterns than Hebb's rule "
        "(falls below one half at a larger P)": every(
            lambda r: cap(r, "delta, 1 pass") > cap(r, "Hebb")),
        "capacity: one pass of the delta rule recalls more than Hebb's rule with its diagonal "
        "kept at every P from 10 to 30": every(
            lambda r: all(a > b for P, a, b in zip(CAP_P, r["capacity"]["delta, 1 pass"],
                                                   r["capacity"]["Hebb, diagonal kept"],
                                                   strict=True) if 10 <= P <= 30)),
        "capacity: three passes fall below one half no earlier than one pass": every(
            lambda r: cap(r, "delta, 3 passes") >= cap(r, "delta, 1 pass")),
        "capacity: three passes recall at least as well as one pass at every P <= 30": every(
            lambda r: all(a >= b for P, a, b in zip(CAP_P, r["capacity"]["delta, 3 passes"],
                                                    r["capacity"]["delta, 1 pass"], strict=True)
                          if P <= 30)),
        "updates: softmax attention without positions stays below 0.6 at every n": every(
            lambda r: max(upd(r, soft)) < 0.6),
        "updates: linear attention stays below 0.55 at every n": every(
            lambda r: max(upd(r, lin)) < 0.55),
        "updates: the gated recurrence is above linear attention at every n": every(
            lambda r: all(a > b for a, b in zip(upd(r, g16), upd(r, lin), strict=True))),
        "updates: DeltaNet is above linear attention at every n": every(
            lambda r: all(a > b for a, b in zip(upd(r, "DeltaNet"), upd(r, lin), strict=True))),
        # (a reader's seeds 12 and 13 put DeltaNet only 0.096 above linear attention with 8
        # writes, and gated DeltaNet below it with 16: the claims say no more than "above")
        "updates: gated DeltaNet is above linear attention with 8 writes": every(
            lambda r: upd(r, "gated DeltaNet")[0] > upd(r, lin)[0]),
        "updates: DeltaNet is above softmax attention with 8 writes": every(
            lambda r: upd(r, "DeltaNet")[0] > upd(r, soft)[0]),
        "updates: with 32 writes no fixed state is above 0.55": every(
            lambda r: max(upd(r, k)[-1] for k in (lin, g16, *DELTA_MODELS)) <= 0.55),
        "MQAR: softmax attention is above DeltaNet by > 0.3 at 64 pairs": every(
            lambda r: plain(r, soft)[-1] > plain(r, "DeltaNet")[-1] + 0.3),
        "MQAR: DeltaNet is below linear attention at 16, 32 and 64 pairs": every(
            lambda r: all(a < b for n, a, b in zip(ch10_seeds.MQAR_PAIRS, plain(r, "DeltaNet"),
                                                   plain(r, lin), strict=True) if n >= 16)),
        "MQAR: DeltaNet does not beat linear attention by more than 0.1 at any n": every(
            lambda r: all(a <= b + 0.1 for a, b in zip(plain(r, "DeltaNet"), plain(r, lin),
                                                         strict=True))),
    }
    names = list(runs[0]["capacity"])
    summary = {
        "capacity_first_P_below_half": {
            k: [first_below_half(CAP_P, r["capacity"][k]) for r in runs] for k in names},
        "capacity_range": {
            k: [[min(r["capacity"][k][i] for r in runs), max(r["capacity"][k][i] for r in runs)]
                for i in range(len(CAP_P))] for k in names},
        "mqar_range": {
            k: [[min(plain(r, k)[i] for r in runs), max(plain(r, k)[i] for r in runs)]
                for i in range(len(ch10_seeds.MQAR_PAIRS))]
            for k in [soft, lin, g16, *DELTA_MODELS]},
        "updates_range": {
            k: [[min(upd(r, k)[i] for r in runs), max(upd(r, k)[i] for r in runs)]
                for i in range(len(UPDATE_WRITES))] for k in UPDATE_MODELS},
        # on how many seeds each delta-rule layer beat the gated recurrence (a forget gate, no
        # delta rule), softmax attention and linear attention, at each number of writes
        "updates_seeds_above": {
            k: {other: [sum(upd(r, k)[i] > upd(r, other)[i] for r in runs)
                        for i in range(len(UPDATE_WRITES))] for other in (g16, soft, lin)}
            for k in DELTA_MODELS},
        "mean_seconds_per_seed": statistics.mean(r["seconds"] for r in runs),
    }
    return summary, claims


if __name__ == "__main__":
    main()
