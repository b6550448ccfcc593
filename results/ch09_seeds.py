"""Chapter 9's calibration experiment over several seeds: label smoothing, focal loss, margins, temperature.

Exactly the recipe of ``chapters/09_losses.ipynb`` (cells ``696c6570``-``6a40c2c3`` and the solution of the
temperature exercise), one CPU thread: Fashion-MNIST average-pooled to 14 x 14, the first 2000
training images, an MLP 196-128-128-10 trained for 800 steps of batch 128 with ``fit`` (AdamW,
lr 3e-3, weight decay 0.01, the gradient norm clipped at 1), once with label smoothing 0 and once
with 0.1, scored on all 10 000 test images (ECE with 15 bins). Seed ``s`` replaces the chapter's
seed 0 in ``seed_everything`` before the network is built and for the batches' generator (both
networks of one seed start from the same weights).

Per run: training and test accuracy, mean confidence, ECE (also with equal-mass bins, and
classwise, and the classwise ECE split into the lowest, middle and top bins), the mean probability
in the lowest bin of every class's probability and the share of those entries that are the label,
test NLL, and the mean training margin
z_y - max_{k != y} z_k at the end; for the smoothed network also that margin over the correctly
classified training images only, and the margin to the *mean* wrong logit, z_y - mean_{k != y} z_k
(m* = log(p'_y / p'_k) assumes equal wrong logits). For the unsmoothed network: the temperature T
fitted (bisection on beta = 1/T, the exercise's solution) on the first 5000 test images and the ECE on the
other 5000 before and after.

The control (``CONTROL_TRAIN`` = 10 000 training images, seeds ``CONTROL_SEEDS``, everything else the
same): the regime matters. With five times the data in the same 800 steps (a fifth of the epochs)
the unsmoothed network no longer over-fits, and it is the smoothed one whose ECE is larger:
smoothing is not a calibration method. The long control trains on the same 10 000 images for
``CONTROL_LONG_STEPS`` = 4000 steps, as many epochs as the main runs: the network over-fits again,
and smoothing lowers its ECE again. The focal loss (gamma = ``GAMMA`` = 3, Mukhoti et al.'s fixed
choice) is run beside both, on the same batches.

Run from the repository root::

    python results/ch09_seeds.py [--seeds 0 1 ... 14]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runinfo import provenance, write_result  # noqa: E402

from seqbook.data import load_fashion_mnist  # noqa: E402
from seqbook.losses import cross_entropy, expected_calibration_error, focal_loss  # noqa: E402
from seqbook.train import fit, random_batches  # noqa: E402
from seqbook.utils import seed_everything, small_model_threads  # noqa: E402

OUT = ROOT / "results" / "ch09_seeds.json"
N_TRAIN, STEPS, HIDDEN, BATCH, LR, EPS, N_BINS, EVAL_EVERY = (2000, 800, 128, 128, 3e-3, 0.1, 15, 50)
GAMMA = 3.0  # the focal loss's, Mukhoti et al.'s fixed choice
CONTROL_TRAIN, CONTROL_SEEDS = 10000, (0, 1, 2)
CONTROL_LONG_STEPS = STEPS * CONTROL_TRAIN // N_TRAIN  # 4000: as many epochs as the main runs
C = 10
M_STAR = math.log((1 - EPS + EPS / C) / (EPS / C))  # eq. (9.8): 4.5109
DEVICE = torch.device("cpu")


def margins(z: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per example: z_y - max of the wrong logits, and z_y - mean of the wrong logits."""
    true = z.gather(1, y[:, None]).squeeze(1)
    wrong = z.scatter(1, y[:, None], -math.inf)
    mean_wrong = (z.sum(1) - true) / (z.shape[1] - 1)
    return true - wrong.max(1).values, true - mean_wrong


def fit_temperature(logits, target):
    """The chapter's solution: the T that minimises the NLL, by bisection on beta = 1 / T."""
    def slope(beta):  # d NLL / d beta: the mean of E_q[z] - z_y, which grows with beta
        q = torch.softmax(beta * logits, -1)
        return ((q * logits).sum(-1) - logits.gather(-1, target[:, None])[:, 0]).mean()

    lo, hi = 0.0, 100.0  # beta = 1 / T in [0, 100]: any T above 0.01
    for _ in range(30):  # bisection on the sign of the slope: 100 / 2**30 < 1e-7
        mid = (lo + hi) / 2
        if slope(mid) < 0:
            lo = mid
        else:
            hi = mid
    return 2 / (lo + hi)  # T = 1 / beta


def classwise_parts(probs: torch.Tensor, y: torch.Tensor) -> dict:
    """The classwise ECE (equal widths) split by bins: the share of the lowest bin, of the
    middle ones up to 0.8, of those above 0.8 and of the top one; and, pooled over the bins of
    (1/15, 6/15], the share of entries that are the label minus their mean probability
    (positive: those classes, mostly runners-up, are given too little)."""
    p = probs.double().cpu()
    hits = F.one_hot(y.cpu(), p.shape[1]).double()
    C = p.shape[1]
    edges = torch.linspace(0, 1, N_BINS + 1, dtype=torch.float64)
    b = torch.bucketize(p, edges[1:-1]).clamp(0, N_BINS - 1)  # (N, C): the bin of every q_k
    key = (b + N_BINS * torch.arange(C)).flatten()  # (class, bin) pairs
    gap = torch.zeros(C * N_BINS, dtype=torch.float64).index_add_(0, key, (hits - p).flatten())
    count = torch.zeros(C * N_BINS, dtype=torch.float64).index_add_(
        0, key, torch.ones(key.shape, dtype=torch.float64))
    gap, count = gap.view(C, N_BINS), count.view(C, N_BINS)
    part = gap.abs().sum(0) / len(y) / C  # (N_BINS,): each bin's share of the classwise ECE
    return dict(
        cw_low=part[0].item(),
        cw_mid=part[1:12].sum().item(),  # q_k in (1/15, 12/15]
        cw_high=part[12:].sum().item(),  # q_k above 0.8: the confident predictions
        cw_top=part[-1].item(),
        # q_k in (1/15, 6/15]: mostly runner-up classes
        runner_gap=(gap[:, 1:6].sum() / count[:, 1:6].sum()).item(),
    )


def one_seed(seed, x_train, y_train, x_test, y_test, steps=STEPS) -> dict:
    def make_mlp():
        seed_everything(seed)
        return nn.Sequential(
            nn.Linear(196, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10)
        )

    def train_margin(model):
        return margins(model(x_train), y_train)[0].mean()

    losses = {  # the three losses: cross-entropy, smoothed, focal
        "plain": lambda m, b: cross_entropy(m(b[0]), b[1]),
        "smooth": lambda m, b: cross_entropy(m(b[0]), b[1], label_smoothing=EPS),
        "focal": lambda m, b: focal_loss(m(b[0]), b[1], gamma=GAMMA),
    }
    out = {}
    for tag, loss_fn in losses.items():
        model = make_mlp()
        generator = seed_everything(seed)
        history = fit(
            model,
            loss_fn,
            random_batches(x_train, y_train, batch_size=BATCH, generator=generator),
            steps=steps,
            lr=LR,
            device=DEVICE,
            eval_fn=train_margin,
            eval_every=EVAL_EVERY,
            progress=False,
        )
        with torch.no_grad():
            logits, z_train = model(x_test), model(x_train)
        probs = logits.softmax(-1)
        correct = z_train.argmax(1) == y_train
        to_max, to_mean = margins(z_train, y_train)
        r = dict(
            train_acc=correct.float().mean().item(),
            acc=(probs.argmax(1) == y_test).float().mean().item(),
            conf=probs.max(1).values.mean().item(),
            ece=expected_calibration_error(probs, y_test, N_BINS),
            ece_mass=expected_calibration_error(probs, y_test, N_BINS, bins="mass"),
            ece_classwise=expected_calibration_error(probs, y_test, N_BINS, classwise=True),
            # the lowest equal-width bin of every q_k (mostly classes an image clearly is not):
            # its mean probability and the share of its entries that are the label
            low_q=probs[probs <= 1 / N_BINS].mean().item(),
            low_label=F.one_hot(y_test, 10).bool()[probs <= 1 / N_BINS].float().mean().item(),
            **classwise_parts(probs, y_test),
            nll=cross_entropy(logits, y_test).item(),
            brier=((probs - F.one_hot(y_test, 10).to(probs.dtype)) ** 2).sum(1).mean().item(),
            final_margin=history.eval_loss[-1],
            margin_curve=[round(v, 3) for v in history.eval_loss],
            margin_correct_only=to_max[correct].mean().item(),
            margin_to_mean_wrong=to_mean.mean().item(),
        )
        if tag == "plain":
            half = slice(0, 5000), slice(5000, None)
            t = fit_temperature(logits[half[0]], y_test[half[0]])
            r.update(
                temperature=t,
                ece_half_before=expected_calibration_error(
                    logits[half[1]].softmax(-1), y_test[half[1]], N_BINS
                ),
                ece_half_after=expected_calibration_error(
                    (logits[half[1]] / t).softmax(-1), y_test[half[1]], N_BINS
                ),
            )
        out[tag] = {
            k: (round(float(v), 4) if not isinstance(v, list) else v) for k, v in r.items()
        }
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(15)))
    args = parser.parse_args(argv)
    small_model_threads(DEVICE, 1)
    pool = lambda x: F.avg_pool2d(x[:, None], 2).flatten(1)  # noqa: E731
    x_train, y_train = load_fashion_mnist("train")
    x_test, y_test = load_fashion_mnist("test")
    x_many, y_many = pool(x_train[:CONTROL_TRAIN]), y_train[:CONTROL_TRAIN]
    x_train, y_train, x_test = pool(x_train[:N_TRAIN]), y_train[:N_TRAIN], pool(x_test)
    control = []  # the same recipe on five times the training images
    for seed in CONTROL_SEEDS:
        both = one_seed(seed, x_many, y_many, x_test, y_test)
        keep = ("train_acc", "acc", "conf", "ece", "ece_mass", "ece_classwise", "nll")
        control.append(dict(seed=seed, **{k: {f: v[f] for f in keep} for k, v in both.items()}))
        rs = [control[-1][tag] for tag in ("plain", "smooth", "focal")]
        print(f"control seed {seed} (plain/smooth/focal): "
              + " ".join(f"{k} " + "/".join(f"{r[k]:.3f}" for r in rs) for k in keep), flush=True)
    control_long = []  # the same images for as many epochs as the main runs
    for seed in CONTROL_SEEDS:
        both = one_seed(seed, x_many, y_many, x_test, y_test, steps=CONTROL_LONG_STEPS)
        control_long.append(
            dict(seed=seed, **{k: {f: v[f] for f in keep} for k, v in both.items()})
        )
        rs = [control_long[-1][tag] for tag in ("plain", "smooth", "focal")]
        print(f"long control seed {seed} (plain/smooth/focal): "
              + " ".join(f"{k} " + "/".join(f"{r[k]:.3f}" for r in rs) for k in keep), flush=True)
    runs = []
    for seed in args.seeds:
        runs.append(dict(seed=seed, **one_seed(seed, x_train, y_train, x_test, y_test)))
        p, s, f = runs[-1]["plain"], runs[-1]["smooth"], runs[-1]["focal"]
        print(f"seed {seed} focal: acc {f['acc']:.3f} conf {f['conf']:.3f} ECE {f['ece']:.3f}")
        print(f"seed {seed} (plain/smooth/focal): ECE, equal-mass bins "
              + "/".join(f"{r['ece_mass']:.3f}" for r in (p, s, f)) + ", classwise "
              + "/".join(f"{r['ece_classwise']:.3f}" for r in (p, s, f)))
        print(
            f"seed {seed}: acc {p['acc']:.3f}/{s['acc']:.3f} ECE {p['ece']:.3f}/{s['ece']:.3f} "
            f"margin {p['final_margin']:.2f}/{s['final_margin']:.2f} "
            f"(correct only {s['margin_correct_only']:.2f}, "
            f"to mean wrong {s['margin_to_mean_wrong']:.2f}) T {p['temperature']:.2f} "
            f"ECE half {p['ece_half_before']:.3f} -> {p['ece_half_after']:.3f}",
            flush=True,
        )
    P, S = [r["plain"] for r in runs], [r["smooth"] for r in runs]
    FOC = [r["focal"] for r in runs]
    summary = {
        f"{tag} {k}": dict(
            min=min(r[k] for r in rs),
            max=max(r[k] for r in rs),
            mean=round(statistics.mean(r[k] for r in rs), 4),
        )
        for tag, rs in [("plain", P), ("smooth", S), ("focal", FOC)]
        for k in rs[0]
        if not isinstance(rs[0][k], list)
    }
    summary["m_star"] = round(M_STAR, 4)
    summary["seeds where the Brier score ranks the smoothed network below the focal one"] = [
        r["seed"] for r in runs if r["smooth"]["brier"] < r["focal"]["brier"]
    ]
    pairs = list(zip(P, S, strict=True))
    claims = {
        "both networks above 78% test accuracy at every seed": all(
            min(p["acc"], s["acc"]) > 0.78 for p, s in pairs
        ),
        "accuracies within 4 points of each other at every seed": all(
            abs(p["acc"] - s["acc"]) < 0.04 for p, s in pairs
        ),
        "the smoothed network at least as accurate at every seed": all(
            s["acc"] >= p["acc"] for p, s in pairs
        ),
        "unsmoothed mean confidence 5+ points above its accuracy at every seed": all(
            p["conf"] > p["acc"] + 0.05 for p in P
        ),
        "smoothed ECE less than half the unsmoothed at every seed": all(
            s["ece"] < p["ece"] / 2 for p, s in pairs
        ),
        "smoothed ECE 3+ points below the unsmoothed at every seed": all(
            s["ece"] < p["ece"] - 0.03 for p, s in pairs
        ),
        "unsmoothed final margin more than 1.5 times the smoothed at every seed": all(
            p["final_margin"] > 1.5 * s["final_margin"] for p, s in pairs
        ),
        "smoothed mean margin below m* at every seed": all(s["final_margin"] < M_STAR for s in S),
        "smoothed margin over correctly classified images alone still below m* at every seed": all(
            s["margin_correct_only"] < M_STAR for s in S
        ),
        "smoothed margin to the mean wrong logit within 0.3 of m* at every seed": all(
            abs(s["margin_to_mean_wrong"] - M_STAR) < 0.3 for s in S
        ),
        "fitted temperature above 1 and held-out ECE more than halved at every seed": all(
            p["temperature"] > 1 and p["ece_half_after"] < p["ece_half_before"] / 2 for p in P
        ),
        f"with {CONTROL_TRAIN} training images the smoothed ECE is the larger at every control seed": all(
            r["smooth"]["ece"] > r["plain"]["ece"] for r in control
        ),
        "proper scores: NLL and Brier score of the smoothed network below the unsmoothed at every "
        "seed": all(s["nll"] < p["nll"] and s["brier"] < p["brier"] for p, s in pairs),
        "proper scores: the focal network's NLL below the smoothed one's at every seed": all(
            f["nll"] < s["nll"] for s, f in zip(S, FOC, strict=True)
        ),
        "focal loss: ECE less than half the unsmoothed at every seed": all(
            f["ece"] < p["ece"] / 2 for p, f in zip(P, FOC, strict=True)
        ),
        "focal loss: test accuracy within 2 points below the unsmoothed or above it at every seed": all(
            f["acc"] > p["acc"] - 0.02 for p, f in zip(P, FOC, strict=True)
        ),
        f"with {CONTROL_TRAIN} training images the focal ECE is the larger at every control seed": all(
            r["focal"]["ece"] > r["plain"]["ece"] for r in control
        ),
        "equal-mass bins: smoothed and focal ECE less than half the unsmoothed at every seed": all(
            max(s["ece_mass"], f["ece_mass"]) < p["ece_mass"] / 2
            for p, s, f in zip(P, S, FOC, strict=True)
        ),
        "classwise: smoothed ECE between half the unsmoothed and the unsmoothed at every seed": all(
            p["ece_classwise"] / 2 < s["ece_classwise"] < p["ece_classwise"] for p, s in pairs
        ),
        "lowest bin: unsmoothed mean q_k below half its share of labels, smoothed mean q_k above "
        "its share and above eps / C, at every seed": all(
            p["low_q"] < p["low_label"] / 2 and s["low_label"] < s["low_q"] and EPS / 10 < s["low_q"]
            for p, s in pairs
        ),
        "classwise, by bins: smoothing lowers the lowest bin's share and the share above 0.8 at "
        "every seed": all(s["cw_low"] < p["cw_low"] and s["cw_high"] < p["cw_high"] for p, s in pairs),
        "q_k in (1/15, 6/15]: the label more often than the mean q_k says, with and without "
        "smoothing, at every seed": all(p["runner_gap"] > 0 and s["runner_gap"] > 0 for p, s in pairs),
        "classwise: focal ECE below the unsmoothed at every seed": all(
            f["ece_classwise"] < p["ece_classwise"] for p, f in zip(P, FOC, strict=True)
        ),
        f"with {CONTROL_TRAIN} training images the classwise ECE is smallest unsmoothed and largest "
        "focal at every control seed": all(
            r["plain"]["ece_classwise"] < r["smooth"]["ece_classwise"] < r["focal"]["ece_classwise"]
            for r in control
        ),
        f"with {CONTROL_TRAIN} training images for {CONTROL_LONG_STEPS} steps the unsmoothed "
        "network fits 5+ points more of its training images than of the test images, and is "
        "over-confident, at every control seed": all(
            r["plain"]["train_acc"] > r["plain"]["acc"] + 0.05
            and r["plain"]["conf"] > r["plain"]["acc"] for r in control_long
        ),
        f"with {CONTROL_TRAIN} training images for {CONTROL_LONG_STEPS} steps smoothing and the "
        "focal loss lower the ECE at every control seed": all(
            max(r["smooth"]["ece"], r["focal"]["ece"]) < r["plain"]["ece"] for r in control_long
        ),
    }
    result = dict(
        **provenance(),
        recipe=dict(
            N_TRAIN=N_TRAIN,
            STEPS=STEPS,
            HIDDEN=HIDDEN,
            BATCH=BATCH,
            LR=LR,
            EPS=EPS,
            N_BINS=N_BINS,
            EVAL_EVERY=EVAL_EVERY,
            CONTROL_TRAIN=CONTROL_TRAIN,
            CONTROL_LONG_STEPS=CONTROL_LONG_STEPS,
            GAMMA=GAMMA,
        ),
        runs=runs,
        control=control,
        control_long=control_long,
        summary=summary,
        claims=claims,
    )
    write_result(OUT, result)


if __name__ == "__main__":
    main()
