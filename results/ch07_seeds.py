"""Chapter 7's trained results over several seeds: the learned ten-entry memory and Hopfield pooling.

Both experiments use exactly the chapter's code (cells ``label-readout``, ``5a8ccad8``,
``185f7759`` and ``e7196166`` of ``chapters/07_hopfield.ipynb``), one CPU thread:

* ``lookup``: scikit-learn's digits, centred and scaled to unit length, split 1000 stored / 797 new
  by ``torch.randperm(..., generator=manual_seed(0))`` (the data, fixed). A ``HopfieldLayer`` with
  W_Q = I, beta = 10 and ten stored patterns, trained 1000 steps of Adam (lr 1e-2) on batches of 64:
  memory random and fixed, class means and fixed, learned from random. Seed ``s`` replaces the
  chapter's three training seeds 0, 1, 2 (the layer's initial weights, the batch order, the random
  memory) by ``s``, ``s + 1``, ``s + 2``, so seed 0 is the chapter's run. The untrained label readout
  at beta = 10 (all 1000 stored digits) is the yardstick.
* ``mil``: bags of 30 to 100 digit images, positive when exactly one is a 2 (4000 training bags from
  generator seed 10, 1000 test bags from seed 11: the data, fixed). ``BagClassifier`` with Hopfield
  pooling (beta = 2), mean pooling or max pooling (each coordinate's largest value over the real
  instances), ``MIL_STEPS`` = 400 steps of ``fit`` (lr 3e-3) on batches of 32.
  Seed ``s`` replaces the model's seed 0 by ``s`` and the batch order's seed 12 by ``12 + s``.
* ``mil, bags redrawn``: the same three poolings and seeds on another draw of the bags (the
  train/test split of the digits and the 4000 training bags from generator seed ``100 + s``, the
  1000 test bags from ``200 + s``), so that what the bags decide is measured too.

Run from the repository root::

    python results/ch07_seeds.py [--seeds 0 1 2 ... 31]

At some seeds Hopfield pooling never leaves chance (its loss stays at ln 2 for all 400 steps), on the
chapter's bags as on redrawn ones (a reader's seeds 12 to 27 found one such seed, 25, and one at 89 %,
12): the claims about Hopfield pooling hold where its loss left chance, and the summary counts the
seeds where it did not.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runinfo import provenance, write_result  # noqa: E402

from seqbook.attention import lengths_to_mask  # noqa: E402
from seqbook.hopfield import HopfieldLayer, HopfieldPooling, retrieve  # noqa: E402
from seqbook.train import fit, random_batches  # noqa: E402
from seqbook.utils import small_model_threads  # noqa: E402

OUT = ROOT / "results" / "ch07_seeds.json"
MIL_STEPS = 400
DEVICE = torch.device("cpu")

digits = load_digits()
digit_labels = torch.tensor(digits.target)

# ---- cell label-readout: the digits as unit vectors, 1000 stored and 797 new ----
x_digits = torch.tensor(digits.data, dtype=torch.float64)
x_digits = F.normalize(x_digits - x_digits.mean(0), dim=1)
y_digits = digit_labels
order = torch.randperm(len(x_digits), generator=torch.Generator().manual_seed(0))
stored, new = order[:1000], order[1000:]


def label_readout(beta: float) -> float:
    stored_labels = F.one_hot(y_digits[stored], 10).double()
    _, weights = retrieve(x_digits[stored], x_digits[new], beta=beta, return_weights=True)
    return ((weights @ stored_labels).argmax(1) == y_digits[new]).double().mean().item()


# ---- cell 5a8ccad8 ----
def train_lookup(memory, learn_memory, seed, steps=1000):
    torch.manual_seed(seed)
    layer = HopfieldLayer(input_dim=64, num_stored=len(memory), key_dim=64, value_dim=10, beta=10.0)
    with torch.no_grad():
        layer.w_q.weight.copy_(torch.eye(64))
        layer.stored.copy_(memory)
    layer.w_q.weight.requires_grad_(False)
    layer.stored.requires_grad_(learn_memory)
    layer = layer.to(DEVICE)
    x_train, y_train = x_digits[stored].float().to(DEVICE), y_digits[stored].to(DEVICE)

    def loss_fn(model, batch):
        x, y = batch
        return F.cross_entropy(model(x[:, None])[0][:, 0], y)

    trainable = [p for p in layer.parameters() if p.requires_grad]
    batches = random_batches(
        x_train, y_train, batch_size=64, generator=torch.Generator().manual_seed(seed + 1)
    )
    fit(layer, loss_fn, batches, steps, optimizer=torch.optim.Adam(trainable, lr=1e-2), progress=False)
    with torch.no_grad():
        scores = layer(x_digits[new].float().to(DEVICE)[:, None])[0][:, 0]
    return layer, (scores.argmax(1).cpu() == y_digits[new]).double().mean().item()


def lookup_runs(seed: int) -> dict:
    random_memory = F.normalize(torch.randn(10, 64, generator=torch.Generator().manual_seed(seed + 2)), dim=1)
    class_means = torch.stack([x_digits[stored][y_digits[stored] == c].mean(0) for c in range(10)])
    class_means = F.normalize(class_means, dim=1).float()
    out = {}
    for name, memory, learn in [
        ("random, fixed", random_memory, False),
        ("class means, fixed", class_means, False),
        ("learned (from random)", random_memory, True),
    ]:
        layer, out[name] = train_lookup(memory, learn, seed)
    lengths = layer.stored.norm(dim=1).tolist()
    out["learned entry length min"], out["learned entry length max"] = min(lengths), max(lengths)
    return {k: round(v, 4) for k, v in out.items()}


# ---- cell 185f7759: the bags (the chapter's draw: generator seeds 10 and 11) ----
digit_x = torch.tensor(digits.data, dtype=torch.float32) / 16
NEEDLE, MIN_LEN, MAX_LEN = 2, 30, 100


def make_bags(idx, n, generator):
    needles, others = idx[digit_labels[idx] == NEEDLE], idx[digit_labels[idx] != NEEDLE]
    lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (n,), generator=generator)
    labels = torch.randint(0, 2, (n,), generator=generator)
    members = others[torch.randint(len(others), (n, MAX_LEN), generator=generator)]
    where = (torch.rand(n, generator=generator) * lengths).long()
    needle = needles[torch.randint(len(needles), (n,), generator=generator)]
    rows = torch.arange(n)
    members[rows, where] = torch.where(labels.bool(), needle, members[rows, where])
    mask = lengths_to_mask(lengths, MAX_LEN)
    return digit_x[members] * mask[..., None], mask, labels.float(), where, needle


def draw_bags(train_seed: int, test_seed: int):
    """The chapter's bags when (train_seed, test_seed) = (10, 11); other seeds redraw them."""
    g = torch.Generator().manual_seed(train_seed)
    bag_order = torch.randperm(len(digit_x), generator=g)
    train_idx, test_idx = bag_order[:1200], bag_order[1200:]
    train_bags = make_bags(train_idx, 4000, g)[:3]
    test = make_bags(test_idx, 1000, torch.Generator().manual_seed(test_seed))
    return train_bags, test


class BagClassifier(nn.Module):
    def __init__(self, pooling, d=32):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, d), nn.ReLU(), nn.Linear(d, d))
        self.pool = HopfieldPooling(d, beta=2.0) if pooling == "hopfield" else None
        self.pooling = pooling
        self.head = nn.Linear(d, 1)

    def forward(self, x, mask):
        h = self.encoder(x)
        if self.pool is not None:
            z = self.pool(h, mask)[0][:, 0]
        elif self.pooling == "max":
            z = h.masked_fill(~mask[..., None], float("-inf")).amax(1)
        else:
            m = mask[..., None].float()
            z = (h * m).sum(1) / m.sum(1)
        return self.head(z).squeeze(-1)


def bag_loss(model, batch):
    x, mask, y = batch
    return F.binary_cross_entropy_with_logits(model(x, mask), y)


# ---- cells e7196166-30ce3056 ----
def mil_runs(seed: int, bags=None) -> dict:
    train_bags, (test_x, test_mask, test_y, test_where, test_needle) = bags or draw_bags(10, 11)
    out = {}
    for pooling in ["hopfield", "mean", "max"]:
        torch.manual_seed(seed)
        model = BagClassifier(pooling)
        batches = random_batches(
            *train_bags, batch_size=32, generator=torch.Generator().manual_seed(12 + seed)
        )
        history = fit(model, bag_loss, batches, steps=MIL_STEPS, lr=3e-3, device=DEVICE, progress=False)
        model.eval()
        with torch.no_grad():
            pred = model(test_x, test_mask) > 0
        out[f"{pooling} accuracy"] = (pred.float() == test_y).float().mean().item()
        out[f"{pooling} final loss"] = history.final_loss
        if pooling == "hopfield":
            with torch.no_grad():
                _, w = model.pool(model.encoder(test_x), test_mask)
            w, pos = w[:, 0], test_y.bool()
            out["needle found"] = (w[pos].argmax(-1) == test_where[pos]).float().mean().item()
    out = {k: round(v, 4) for k, v in out.items()}
    out["needle images in the test bags"] = len(test_needle[test_y.bool()].unique())
    return out


def at_chance(run: dict) -> bool:
    """Hopfield pooling's training loss never left ln 2 = 0.693 (it answers one class)."""
    return run["hopfield final loss"] > 0.6


def spread(rows: list[dict]) -> dict:
    return {
        k: dict(
            min=min(r[k] for r in rows),
            max=max(r[k] for r in rows),
            mean=round(statistics.mean(r[k] for r in rows), 4),
        )
        for k in rows[0]
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(32)))
    args = parser.parse_args(argv)
    small_model_threads(DEVICE, 1)
    readout10 = round(label_readout(10), 4)
    runs = []
    for seed in args.seeds:
        runs.append(dict(seed=seed, lookup=lookup_runs(seed), mil=mil_runs(seed)))
        # the same seed with the bags redrawn: train split and bags from 100 + seed, test bags
        # from 200 + seed
        runs[-1]["mil, bags redrawn"] = mil_runs(seed, draw_bags(100 + seed, 200 + seed))
        print(runs[-1], flush=True)
    lk = [r["lookup"] for r in runs]
    mil = [r["mil"] for r in runs]
    redrawn = [r["mil, bags redrawn"] for r in runs]
    learned = [r["learned (from random)"] for r in lk]
    over_means = [r["learned (from random)"] - r["class means, fixed"] for r in lk]
    max_minus_hopfield = [r["max accuracy"] - r["hopfield accuracy"] for r in redrawn]
    hopfield_stuck = [r["seed"] for r in runs if at_chance(r["mil, bags redrawn"])]
    fixed_stuck = [r["seed"] for r in runs if at_chance(r["mil"])]
    learned_mil = [m for m in mil if not at_chance(m)]  # the chapter's bags, where it learned
    fixed_gap = [r["max accuracy"] - r["hopfield accuracy"] for r in learned_mil]
    summary = {
        "label readout, beta 10 (untrained)": readout10,
        **{f"lookup {k}": v for k, v in spread(lk).items()},
        "lookup learned minus class means": dict(
            min=round(min(over_means), 4), max=round(max(over_means), 4)
        ),
        **{f"mil {k}": v for k, v in spread(mil).items()},
        "mil, seeds where Hopfield pooling stays at chance": fixed_stuck,
        "mil, where Hopfield pooling learned": spread(learned_mil),
        "mil, where Hopfield pooling learned, max minus hopfield accuracy": dict(
            min=round(min(fixed_gap), 4), max=round(max(fixed_gap), 4)
        ),
        **{f"mil, bags redrawn, {k}": v for k, v in spread(redrawn).items()},
        "mil, bags redrawn, seeds where Hopfield pooling stays at chance": hopfield_stuck,
        "mil, bags redrawn, max minus hopfield accuracy": dict(
            min=round(min(max_minus_hopfield), 4), max=round(max(max_minus_hopfield), 4)
        ),
    }
    claims = {
        "learned memory more than 15 points above the fixed random one at every seed": all(
            r["learned (from random)"] > r["random, fixed"] + 0.15 for r in lk
        ),
        "learned memory above the fixed class means at every seed": all(x > 0 for x in over_means),
        "learned memory below the beta-10 label readout, by less than 8 points, at every seed": all(
            0 < readout10 - a < 0.08 for a in learned
        ),
        "Hopfield pooling above 85% at every seed where its loss left chance": all(
            r["hopfield accuracy"] > 0.85 for r in learned_mil
        ),
        "Hopfield pooling stays at chance at fewer than one seed in ten": (
            10 * len(fixed_stuck) < len(mil)
        ),
        "Hopfield pooling more than 10 points above mean pooling where its loss left chance": all(
            r["hopfield accuracy"] > r["mean accuracy"] + 0.1 for r in learned_mil
        ),
        "max pooling above 90% at every seed": all(r["max accuracy"] > 0.9 for r in mil),
        "max pooling more than 10 points above mean pooling at every seed": all(
            r["max accuracy"] > r["mean accuracy"] + 0.1 for r in mil
        ),
        "largest pooling weight on the needle in more than 85% of positive bags where Hopfield "
        "pooling learned": all(r["needle found"] > 0.85 for r in learned_mil),
        "bags redrawn: max pooling above 90% at every draw": all(r["max accuracy"] > 0.9 for r in redrawn),
        "bags redrawn: max pooling more than 10 points above mean pooling at every draw": all(
            r["max accuracy"] > r["mean accuracy"] + 0.1 for r in redrawn
        ),
        "bags redrawn: Hopfield pooling above 80% at every draw where its loss left chance": all(
            r["hopfield accuracy"] > 0.8 for r in redrawn if not at_chance(r)
        ),
        "bags redrawn: Hopfield pooling stays at chance at fewer than one draw in ten": (
            10 * len(hopfield_stuck) < len(redrawn)
        ),
    }
    result = dict(
        **provenance(),
        recipe=dict(
            lookup="cell 5a8ccad8: 1000 steps, Adam lr 1e-2, batch 64, beta 10",
            mil=f"cell e7196166: {MIL_STEPS} steps, lr 3e-3, batch 32, beta 2; hopfield, mean, max",
            mil_redrawn="the same, on bags drawn from generator seeds 100 + seed and 200 + seed",
        ),
        runs=runs,
        summary=summary,
        claims=claims,
    )
    write_result(OUT, result)
    print(summary)


if __name__ == "__main__":
    main()
