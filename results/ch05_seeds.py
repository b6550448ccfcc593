"""Chapter 5's surname classifier, with and without positions, over seeds.

The recipe is that of ``chapters/05_self_attention.ipynb`` (section "Experiment: which language is
this surname?"): the names of ``seqbook.data.load_names`` split as in chapter 2
(``random.Random(0)``, 80 % for training), padded or cut to 16 characters, the chapter's
``NameClassifier`` (copied below from the chapter's cell: a character embedding, optionally plus
learned positions, one 4-head ``seqbook.attention.MultiHeadAttention`` with a padding mask and a
residual connection, a LayerNorm and GELU feed-forward network, mean pooling, a linear layer),
400 steps of ``random_batches(batch_size=64)`` with ``fit(lr=5e-3)``, one CPU thread. Only the seed
changes: it goes to ``seed_everything`` before the model is built, to the batches' generator and to
``fit``. Seed 0 is the chapter's run. The split does not change with the seed.

Reported per run: the train and test accuracies of both models, and, for the model with positions,
how the attention weights of its four heads are spread on the chapter's two names ("johansson",
"gonzalez"): the share of (head, query) rows whose two largest weights sum to more than one half.

Run from the repository root::

    python results/ch05_seeds.py [--out results/ch05_seeds.json] [--seeds 0 1 2 3 4]
"""

from __future__ import annotations

import random
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.attention import MultiHeadAttention  # noqa: E402
from seqbook.batching import pad_sequences  # noqa: E402
from seqbook.data import load_names  # noqa: E402
from seqbook.train import fit, random_batches  # noqa: E402
from seqbook.utils import seed_everything, small_model_threads  # noqa: E402
from seqbook.vocab import Vocab  # noqa: E402

MAX_LEN = 16
STEPS, BATCH, LR = 400, 64, 5e-3  # the chapter's config
THREADS = 1


class NameClassifier(nn.Module):
    # One self-attention layer over characters, mean-pooled into a language prediction.
    # (The chapter's cell, unchanged.)

    def __init__(self, vocab_size, n_classes, d=32, heads=4, max_len=MAX_LEN, positions=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d)
        self.pos = nn.Parameter(0.1 * torch.randn(max_len, d)) if positions else None
        self.attn = MultiHeadAttention(d, heads)
        self.norm = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.out = nn.Linear(d, n_classes)

    def forward(self, ids, need_weights=False):
        pad = ids == Vocab.pad_id  # (B, T), True at padding
        x = self.embed(ids)  # (B, T, d)
        if self.pos is not None:
            x = x + self.pos[: ids.shape[1]]
        h, weights = self.attn(x, x, x, key_padding_mask=pad, need_weights=need_weights,
                               average_attn_weights=False)
        x = x + h
        x = x + self.ff(self.norm(x))
        keep = (~pad).unsqueeze(-1).to(x.dtype)  # (B, T, 1)
        logits = self.out((x * keep).sum(1) / keep.sum(1).clamp(min=1))
        return (logits, weights) if need_weights else logits


def name_data():
    """Chapter 2's split of the names, encoded as the chapter encodes them: (vocab, languages,
    X_train, y_train, X_test, y_test, the majority class's test accuracy)."""
    pairs = load_names()
    languages = sorted({lang for _, lang in pairs})
    order = list(range(len(pairs)))
    random.Random(0).shuffle(order)
    cut = int(0.8 * len(pairs))
    train_pairs = [pairs[i] for i in order[:cut]]
    test_pairs = [pairs[i] for i in order[cut:]]
    vocab = Vocab([list(name) for name, _ in train_pairs])

    def encode(batch):
        ids, _ = pad_sequences([vocab.encode(list(name)) for name, _ in batch], max_len=MAX_LEN)
        return ids, torch.tensor([languages.index(lang) for _, lang in batch])

    X_train, y_train = encode(train_pairs)
    X_test, y_test = encode(test_pairs)
    majority_class = int(np.bincount(y_train.numpy()).argmax())
    majority = (y_test == majority_class).float().mean().item()
    return vocab, languages, X_train, y_train, X_test, y_test, majority


def accuracy(model, X, y) -> float:
    """The share of the rows of X whose language the model, on the CPU, predicts right."""
    model.eval()
    with torch.no_grad():
        return (model(X).argmax(-1) == y).float().mean().item()


def train_classifier(seed: int, steps: int, positions: bool, n_symbols: int, n_classes: int,
                     X_train, y_train) -> NameClassifier:
    """The chapter's recipe on the CPU: the model and the batches drawn from ``seed``."""
    seed_everything(seed)
    model = NameClassifier(n_symbols, n_classes, positions=positions)
    batches = random_batches(X_train, y_train, batch_size=BATCH,
                             generator=torch.Generator().manual_seed(seed))
    fit(model, lambda m, b: F.cross_entropy(m(b[0]), b[1]), batches, steps=steps, lr=LR,
        device=torch.device("cpu"), seed=seed, progress=False)
    return model


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__, seeds=(0, 1, 2, 3, 4))
    args = parser.parse_args(argv)
    device = torch.device("cpu")
    small_model_threads(device, THREADS)
    vocab, languages, X_train, y_train, X_test, y_test, majority = name_data()

    names = ["johansson", "gonzalez"]
    runs = []
    for seed in tqdm(args.seeds, desc="chapter 5 seeds"):
        run = dict(seed=seed)
        for positions in (False, True):
            model = train_classifier(seed, STEPS, positions, len(vocab), len(languages),
                                     X_train, y_train)
            key = "with_positions" if positions else "without_positions"
            run[key] = dict(train=accuracy(model, X_train, y_train),
                            test=accuracy(model, X_test, y_test))
        ids = pad_sequences([vocab.encode(list(nm)) for nm in names], max_len=MAX_LEN)[0]
        with torch.no_grad():
            _, weights = model.eval()(ids.to(device), need_weights=True)  # (B, H, T, T)
        rows = [weights[b, :, : len(nm), : len(nm)].reshape(-1, len(nm))
                for b, nm in enumerate(names)]
        top2 = torch.cat([r.topk(2, dim=-1).values.sum(-1) for r in rows])
        run["rows_top2_over_half"] = (top2 > 0.5).float().mean().item()
        runs.append(run)
        tqdm.write(f"seed {seed}: {run}")

    bag = [r["without_positions"]["test"] for r in runs]
    pos = [r["with_positions"]["test"] for r in runs]
    gain = [p - b for p, b in zip(pos, bag, strict=True)]
    claims = {
        "both models are more than 20 points above the majority class":
            min(bag + pos) > majority + 0.2,
        "positions raise the test accuracy": all(g > 0 for g in gain),
        "positions do not lower the test accuracy by more than 2 points":
            all(g > -0.02 for g in gain),
        "most rows of the heads put more than half their weight on one or two keys":
            all(r["rows_top2_over_half"] > 0.5 for r in runs),
    }
    summary = dict(
        majority=majority,
        test_without_positions=dict(min=min(bag), mean=statistics.mean(bag), max=max(bag)),
        test_with_positions=dict(min=min(pos), mean=statistics.mean(pos), max=max(pos)),
        gain_points=dict(min=100 * min(gain), mean=100 * statistics.mean(gain),
                         max=100 * max(gain)),
    )
    result = dict(**provenance(), recipe=dict(steps=STEPS, batch=BATCH, lr=LR, max_len=MAX_LEN),
                  runs=runs, summary=summary, claims=claims)
    write_result(args.out, result)
    print(summary)


if __name__ == "__main__":
    main()
