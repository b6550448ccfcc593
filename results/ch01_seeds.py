"""Chapter 1's trained word and character vectors over seeds.

The recipe is that of ``chapters/01_embeddings.ipynb``: *The Time Machine* split with
``split_text(text, 0.1)``, a vocabulary of the 1000 most frequent training words, CBOW with one
word on each side (``context_windows(ids, window=1)``), vectors of 64, 400 steps of
``random_batches(batch_size=512)``, AdamW(lr=1e-2, weight_decay=0.5), one CPU thread; the same
CBOW with a table for each side (left and right neighbour), its batches from a generator of its
own seeded with the seed; then the
exercise "Character vectors": a CBOW of size 8 on the previous character of the normalised text,
300 steps of 512, lr 1e-2, drawing its batches from the same generator; and skip-gram with
negative sampling on the same pairs (each centre word with its left and with its right word), 5
noise words drawn by count to the power 3/4, vectors of 64, 400 steps of 1024 pairs, AdamW(lr=1e-2,
weight_decay=0), its batches and noise words from generators of their own seeded with the seed
(and the same skip-gram trained for 2000 steps, to see the rare pairs fitted).
Only the seed changes: it goes to ``seed_everything`` (whose generator draws CBOW's batches), to
``torch.manual_seed`` before each model and to ``fit``. Seed 0 is the chapter's run.

Reported per run, as the chapter measures them: CBOW's held-out loss (and at step 100) against the
unigram baseline, the held-out loss of the CBOW with a table for each side, the norm of the
``<pad>`` row after training over its initial norm, for each of
the chapter's four query words how many words of its group are among its 10 nearest neighbours,
the rate at which the nearest neighbour of the 64 labelled words has the same word class (trained,
initial, chance); for skip-gram the same neighbour counts and rate, and how closely its scores
u_c . e_w follow the shifted PMI, log p(w, c) / (p(w) p_3/4(c)) - log 5, over the pairs seen at
least five times and over all seen pairs (Pearson correlation, mean difference); for the
character model the held-out loss against the unigram baseline and the
count-based bigram table, and the mean cosine similarity of vowel pairs and of vowel-consonant pairs.

Run from the repository root (``SEQBOOK_DATA`` must point at the data)::

    python results/ch01_seeds.py [--out results/ch01_seeds.json] [--seeds 0 1 2 3 4 5 6]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.batching import context_windows  # noqa: E402
from seqbook.data import load_time_machine, split_text  # noqa: E402
from seqbook.embeddings import (  # noqa: E402
    CBOW,
    SkipGram,
    nearest_neighbours,
    unigram_cross_entropy,
)
from seqbook.train import fit, random_batches  # noqa: E402
from seqbook.utils import seed_everything, small_model_threads  # noqa: E402
from seqbook.vocab import Vocab, normalize_text, tokenize_chars, tokenize_words  # noqa: E402

VOCAB_SIZE, EMB_DIM, STEPS, BATCH_SIZE = 1000, 64, 400, 512
K_NOISE, SG_BATCH, SG_LONG_STEPS = 5, 1024, 2000
LR, WEIGHT_DECAY = 1e-2, 0.5
CHAR_STEPS, CHAR_DIM = 300, 8
THREADS = 1

GROUPS = {  # the chapter's neighbour checks: query word -> (name, group)
    "could": ("modal verbs", {"would", "should", "might", "must", "can", "cannot", "will",
                              "shall", "may"}),
    "eyes": ("body parts", {"ears", "hair", "head", "feet", "hands", "face", "shoulder", "arms",
                            "hand", "lips"}),
    "he": ("pronouns and names", {"i", "she", "we", "they", "you", "filby"}),
    "white": ("colours", {"yellow", "grey", "black", "red", "bronze", "green", "brown", "silver",
                          "blue", "pale", "golden"}),
}
CATEGORIES = {  # the chapter's 64 labelled words
    "pronoun": "i he she we they you",
    "determiner": "the a this my his their our some these",
    "preposition": "of in at on with from into upon by through under",
    "verb, past tense": "was had saw came went felt found seemed thought looked heard began",
    "modal verb": "could would should might must can will shall",
    "noun": "eyes hands head face feet door machine hill light world",
    "adjective": "little white great strange small dark black old",
}


def loss_fn(model, batch):
    context, centre = batch
    return F.cross_entropy(model(context), centre)


class SidedCBOW(torch.nn.Module):
    """The chapter's CBOW with a table for each side: E_left[l] + E_right[r]."""

    def __init__(self, vocab_size: int, embed_dim: int):
        super().__init__()
        self.left = torch.nn.Embedding(vocab_size, embed_dim)
        self.right = torch.nn.Embedding(vocab_size, embed_dim)
        self.out = torch.nn.Linear(embed_dim, vocab_size)

    def forward(self, context):
        return self.out(self.left(context[:, 0]) + self.right(context[:, 1]))


def skipgram_run(seed: int, vocab_size: int, x_train, y_train, device, steps: int = STEPS) -> dict:
    """The chapter's skip-gram: its table E and how its scores follow the shifted PMI."""
    words = torch.cat([y_train, y_train])  # each centre word with its left, then right word
    neighbours = torch.cat([x_train[:, 0], x_train[:, 1]])
    counts = torch.bincount(neighbours, minlength=vocab_size).double() ** 0.75
    noise_probs = counts / counts.sum()
    noise_gen = torch.Generator().manual_seed(seed)

    def sgns_loss(model, batch):
        w, c = batch
        noise = torch.multinomial(noise_probs, K_NOISE * len(w), True, generator=noise_gen)
        candidates = torch.cat([c[:, None], noise.view(len(w), K_NOISE).to(device)], dim=1)
        scores = model(w, candidates)
        labels = torch.zeros_like(scores)
        labels[:, 0] = 1.0
        return F.binary_cross_entropy_with_logits(scores, labels, reduction="sum") / len(w)

    torch.manual_seed(seed)
    model = SkipGram(vocab_size, EMB_DIM).to(device)
    history = fit(
        model, sgns_loss,
        random_batches(words, neighbours, batch_size=SG_BATCH,
                       generator=torch.Generator().manual_seed(seed)),
        steps=steps, optimizer=torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0),
        device=device, seed=seed, progress=False,
    )
    pairs = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)
    pairs.index_put_((words, neighbours), torch.ones(len(words), dtype=torch.float64),
                     accumulate=True)
    p_wc = pairs / pairs.sum()
    pmi = torch.log(p_wc / (p_wc.sum(1, keepdim=True) * noise_probs))
    table = model.embedding.weight.detach().cpu()
    scores = (table @ model.context.weight.detach().cpu().T).double()
    fit_pmi = {}
    for min_count in (1, 5):
        seen = pairs >= min_count
        target = pmi[seen] - np.log(K_NOISE)
        fit_pmi[min_count] = dict(
            pairs=int(seen.sum()),
            correlation=float(np.corrcoef(target.numpy(), scores[seen].numpy())[0, 1]),
            mean_difference=float((scores[seen] - target).mean()),
        )
    return dict(final_loss=history.step_loss[-1], pmi_seen_5=fit_pmi[5], pmi_seen_1=fit_pmi[1],
                table=table)


def one_seed(seed: int, text: str, device) -> dict:
    generator = seed_everything(seed)
    train_text, test_text = split_text(text, valid_frac=0.1)
    train_words, test_words = tokenize_words(train_text), tokenize_words(test_text)
    vocab = Vocab(train_words, max_size=VOCAB_SIZE)
    train_ids = torch.tensor(vocab.encode(train_words))
    test_ids = torch.tensor(vocab.encode(test_words))
    x_train, y_train = context_windows(train_ids, window=1)
    x_test, y_test = context_windows(test_ids, window=1)
    baseline = unigram_cross_entropy(y_train, y_test, len(vocab))

    torch.manual_seed(seed)
    model = CBOW(len(vocab), EMB_DIM).to(device)
    initial = model.embedding.weight.detach().cpu().clone()
    history = fit(
        model, loss_fn,
        random_batches(x_train, y_train, batch_size=BATCH_SIZE, generator=generator),
        steps=STEPS,
        optimizer=torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY),
        device=device, seed=seed,
        eval_fn=lambda m: F.cross_entropy(m(x_test.to(device)), y_test.to(device)).item(),
        eval_every=100, progress=False,
    )
    table = model.embedding.weight.detach().cpu()
    pad = vocab.pad_id
    shrink = table[pad].norm().item() / initial[pad].norm().item()
    torch.manual_seed(seed)
    sided = SidedCBOW(len(vocab), EMB_DIM).to(device)
    fit(
        sided, loss_fn,
        random_batches(x_train, y_train, batch_size=BATCH_SIZE,
                       generator=torch.Generator().manual_seed(seed)),
        steps=STEPS,
        optimizer=torch.optim.AdamW(sided.parameters(), lr=LR, weight_decay=WEIGHT_DECAY),
        device=device, seed=seed, progress=False,
    )
    with torch.no_grad():
        sided_loss = F.cross_entropy(sided(x_test.to(device)), y_test.to(device)).item()

    def top_words(word, k=10):
        _, n = nearest_neighbours(table, torch.tensor([vocab[word]]), k=k)
        return set(vocab.decode(n[0]))

    groups = {w: len(top_words(w) & group) for w, (_, group) in GROUPS.items()}
    chosen = [w for ws in CATEGORIES.values() for w in ws.split()]
    labels = [c for c, ws in CATEGORIES.items() for _ in ws.split()]
    chosen_ids = torch.tensor([vocab[w] for w in chosen])

    def same_class_rate(t):
        _, nearest = nearest_neighbours(t[chosen_ids], torch.arange(len(chosen)), k=1)
        return float(np.mean([labels[i] == labels[j]
                              for i, j in enumerate(nearest[:, 0].tolist())]))

    chance = float(np.mean([(labels.count(lab) - 1) / (len(labels) - 1) for lab in labels]))
    skipgram = skipgram_run(seed, len(vocab), x_train, y_train, device)
    sg_table = skipgram.pop("table")
    _, sg_nearest = nearest_neighbours(sg_table, torch.tensor([vocab[w] for w in GROUPS]), k=10)
    skipgram["group_neighbours"] = {w: len(set(vocab.decode(n)) & group) for (w, (_, group)), n
                                    in zip(GROUPS.items(), sg_nearest.tolist(), strict=True)}
    skipgram["same_class"] = same_class_rate(sg_table)
    longer = skipgram_run(seed, len(vocab), x_train, y_train, device, steps=SG_LONG_STEPS)
    longer["same_class"] = same_class_rate(longer.pop("table"))
    skipgram["longer"] = longer

    # the exercise "Character vectors", with the same generator as the chapter
    train_chars, test_chars = split_text(normalize_text(text), valid_frac=0.1)
    cvocab = Vocab(tokenize_chars(train_chars))
    tr = torch.tensor(cvocab.encode(tokenize_chars(train_chars)))
    te = torch.tensor(cvocab.encode(tokenize_chars(test_chars)))
    xc_train, yc_train = tr[:-1, None], tr[1:]
    xc_test, yc_test = te[:-1, None].to(device), te[1:].to(device)
    char_baseline = unigram_cross_entropy(yc_train, yc_test.cpu(), len(cvocab))
    torch.manual_seed(seed)
    char_model = CBOW(len(cvocab), CHAR_DIM).to(device)
    char_history = fit(
        char_model, loss_fn,
        random_batches(xc_train, yc_train, batch_size=512, generator=generator),
        steps=CHAR_STEPS, lr=1e-2, device=device, seed=seed, progress=False,
        eval_fn=lambda m: F.cross_entropy(m(xc_test), yc_test).item(),
    )
    letters = list("abcdefghijklmnopqrstuvwxyz")
    is_vowel = np.array([c in "aeiou" for c in letters])
    unit = F.normalize(char_model.embedding.weight.detach().cpu()[[cvocab[c] for c in letters]],
                       dim=1)
    cos = (unit @ unit.T).numpy()
    pair_counts = torch.ones(len(cvocab), len(cvocab))
    pair_counts.index_put_((tr[:-1], tr[1:]), torch.ones(len(tr) - 1), accumulate=True)
    bigram = pair_counts / pair_counts.sum(1, keepdim=True)
    return dict(
        seed=seed,
        cbow=dict(
            held_out_loss=history.eval_loss[-1],
            loss_at_step_100=history.eval_loss[0],
            baseline=baseline,
            pad_row_shrink=shrink,
            sided_held_out_loss=sided_loss,
            group_neighbours=groups,
            same_class_trained=same_class_rate(table),
            same_class_initial=same_class_rate(initial),
            same_class_chance=chance,
        ),
        skipgram=skipgram,
        chars=dict(
            held_out_loss=char_history.eval_loss[-1],
            baseline=char_baseline,
            table=-bigram[te[:-1], te[1:]].log().mean().item(),
            vowel_vowel=float(cos[np.ix_(is_vowel, is_vowel)][~np.eye(5, dtype=bool)].mean()),
            vowel_consonant=float(cos[np.ix_(is_vowel, ~is_vowel)].mean()),
        ),
    )


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__, seeds=(0, 1, 2, 3, 4, 5, 6))
    args = parser.parse_args(argv)
    device = torch.device("cpu")
    small_model_threads(device, THREADS)
    text = load_time_machine()
    runs = []
    for seed in tqdm(args.seeds, desc="chapter 1 seeds"):
        runs.append(one_seed(seed, text, device))
        tqdm.write(f"seed {seed}: {runs[-1]}")

    cb = [r["cbow"] for r in runs]
    sg = [r["skipgram"] for r in runs]
    ch = [r["chars"] for r in runs]
    claims = {
        "CBOW's held-out loss is more than 0.5 nats below the unigram baseline":
            all(c["held_out_loss"] < c["baseline"] - 0.5 for c in cb),
        "CBOW's held-out loss is below the baseline by step 100":
            all(c["loss_at_step_100"] < c["baseline"] for c in cb),
        "a CBOW with a table for each side is more than 0.2 nats below CBOW":
            all(c["sided_held_out_loss"] < c["held_out_loss"] - 0.2 for c in cb),
        "weight decay shrinks the <pad> row to less than half its norm":
            all(c["pad_row_shrink"] < 0.5 for c in cb),
        "could, eyes and he each have at least two words of their group among their 10 "
        "nearest neighbours": all(min(c["group_neighbours"][w] for w in ("could", "eyes", "he")) >= 2
                                  for c in cb),
        "the nearest neighbour has the same class for more than 70 % of the words, at least "
        "40 points more than before training":
            all(c["same_class_trained"] > 0.7
                and c["same_class_trained"] > c["same_class_initial"] + 0.4 for c in cb),
        "skip-gram's scores follow the shifted PMI of the pairs seen at least five times: "
        "correlation above 0.9, mean difference within 0.1":
            all(c["pmi_seen_5"]["correlation"] > 0.9
                and abs(c["pmi_seen_5"]["mean_difference"]) < 0.1 for c in sg),
        "over all seen pairs they follow it less closely, falling below it on average":
            all(c["pmi_seen_1"]["correlation"] < c["pmi_seen_5"]["correlation"] - 0.2
                and c["pmi_seen_1"]["mean_difference"] < -0.5 for c in sg),
        "skip-gram's nearest neighbour has the same class for more than 70 % of the words":
            all(c["same_class"] > 0.7 for c in sg),
        "trained for 2000 steps, its scores follow the shifted PMI over all seen pairs "
        "(correlation above 0.85, mean difference within 0.1)":
            all(c["longer"]["pmi_seen_1"]["correlation"] > 0.85
                and abs(c["longer"]["pmi_seen_1"]["mean_difference"]) < 0.1 for c in sg),
        "trained for 2000 steps, its nearest-neighbour rate is lower than after 400":
            all(c["longer"]["same_class"] < c["same_class"] for c in sg),
        "the character model is more than 0.3 nats below the unigram baseline":
            all(c["held_out_loss"] < c["baseline"] - 0.3 for c in ch),
        "the character model is above the bigram table, by less than 0.2 nats":
            all(c["table"] < c["held_out_loss"] < c["table"] + 0.2 for c in ch),
        "vowels are closer to vowels than to consonants by more than 0.2 in cosine":
            all(c["vowel_vowel"] > c["vowel_consonant"] + 0.2 for c in ch),
    }

    def spread(values):
        return dict(min=min(values), mean=statistics.mean(values), max=max(values))

    summary = dict(
        cbow_held_out_loss=spread([c["held_out_loss"] for c in cb]),
        sided_held_out_loss=spread([c["sided_held_out_loss"] for c in cb]),
        same_class_trained=spread([c["same_class_trained"] for c in cb]),
        skipgram_same_class=spread([c["same_class"] for c in sg]),
        skipgram_pmi_correlation_5=spread([c["pmi_seen_5"]["correlation"] for c in sg]),
        skipgram_pmi_correlation_1=spread([c["pmi_seen_1"]["correlation"] for c in sg]),
        char_held_out_loss=spread([c["held_out_loss"] for c in ch]),
        vowel_vowel=spread([c["vowel_vowel"] for c in ch]),
        vowel_consonant=spread([c["vowel_consonant"] for c in ch]),
    )
    result = dict(**provenance(), recipe=dict(vocab_size=VOCAB_SIZE, emb_dim=EMB_DIM,
                                              steps=STEPS, batch_size=BATCH_SIZE, lr=LR,
                                              weight_decay=WEIGHT_DECAY, k_noise=K_NOISE,
                                              skipgram_batch_size=SG_BATCH,
                                              skipgram_long_steps=SG_LONG_STEPS,
                                              char_steps=CHAR_STEPS, char_dim=CHAR_DIM),
                  runs=runs, summary=summary, claims=claims)
    write_result(args.out, result)
    print(summary)


if __name__ == "__main__":
    main()
