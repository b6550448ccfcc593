"""Chapter 4 (Bahdanau attention) over several random seeds: dates, alignment, copy task, beams.

Every model is trained with exactly the recipe of ``chapters/04_bahdanau.ipynb``: the configuration
of cell ``8c60ee7f`` (dates: 10,000 training and 1,000 test pairs, embedding 32, hidden 48, 225
steps, lr 2e-2; copy: 10,000 strings of 1..16 letters, 50 test strings per length 1..32, embedding
16, hidden 64, 350 steps, lr 1.5e-2; batches of 128), ``Seq2Seq(..., attention=..., fast=True)`` and
``fit_seq2seq``, one CPU thread. The data sets are the chapter's (``date_dataset(..., seed=0)``,
``copy_dataset(..., seed=0)``); the seed changes the initial weights (``seed_everything(seed)``
before the model is built, as the chapter's ``make_model`` does with 0) and the order of the
batches (``fit_seq2seq(..., seed=seed)``). Seed 0 is the chapter's own run.

Reported per seed:

* dates: exact match of both models on the 1,000 unseen dates (greedy), their final training
  losses, the number of errors, whether every output has the form YYYY-MM-DD, how many wrong
  digits the errors have, for how many of the plain model's errors the model gives its own output
  a higher log-probability than the true date, and the exact match with beam widths 3 and 5;
  the outputs that are not of the form YYYY-MM-DD are counted (and the first three kept);
* alignment: the share of attention that each output field (year, month, day) puts on the same
  field of the source, over the test sources in the ``dd/mm/yyyy`` format (cell ``9f67b10d``);
* copy task: exact match by length (1..32) for both models; the mean over lengths 8..16 (cell ``4a835b4d``),
  the accuracy at length 16 and the mean over the lengths 17..32, longer than any training string.

Run from the repository root (``SEQBOOK_DATA`` must point at the data)::

    python results/ch04_seeds.py [--out results/ch04_seeds.json] [--seeds 0 1 ... 11]
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.batching import encode_pairs  # noqa: E402
from seqbook.data import copy_dataset, date_dataset  # noqa: E402
from seqbook.decoding import greedy_decode, translate  # noqa: E402
from seqbook.seq2seq import (  # noqa: E402
    Seq2Seq,
    exact_match,
    exact_match_by_length,
)
from seqbook.train import fit_seq2seq  # noqa: E402
from seqbook.utils import seed_everything, small_model_threads  # noqa: E402
from seqbook.vocab import Vocab  # noqa: E402

PAD_ID = Vocab.pad_id

# chapter 4, cell 8c60ee7f
DATES_TRAIN, DATES_TEST = 10_000, 1_000
DATES_EMB, DATES_HIDDEN, DATES_STEPS, DATES_LR = 32, 48, 225, 2e-2
COPY_TRAIN, COPY_MAX_LEN, COPY_TEST_MAX_LEN, COPY_PER_LENGTH = 10_000, 16, 32, 50
COPY_EMB, COPY_HIDDEN, COPY_STEPS, COPY_LR = 16, 64, 350, 1.5e-2
BATCH = 128
NAMES = (("attention", True), ("no attention", False))
DEVICE = torch.device("cpu")


def make_model(data, emb, hidden, attention, seed):
    """Cell ``4511e0d2``'s ``make_model`` with ``seed`` instead of 0."""
    seed_everything(seed)
    return Seq2Seq(
        len(data.src_vocab),
        len(data.tgt_vocab),
        embed_dim=emb,
        hidden_size=hidden,
        attention=attention,
        fast=True,
    ).to(DEVICE)


RECIPES = {
    "dates": (DATES_EMB, DATES_HIDDEN, DATES_STEPS, DATES_LR),
    "copy": (COPY_EMB, COPY_HIDDEN, COPY_STEPS, COPY_LR),
}


def trained(data, task: str, attention: bool, seed: int, desc: str):
    """The chapter's model for ``task`` ("dates" or "copy"), built and trained: (model, history)."""
    emb, hidden, steps, lr = RECIPES[task]
    model = make_model(data, emb, hidden, attention, seed)
    history = fit_seq2seq(
        model, data, steps, BATCH, lr, seed=seed, device=DEVICE, progress=False, desc=desc
    )
    return model, history


@torch.no_grad()
def sequence_logprob(model, pairs, data) -> torch.Tensor:
    """log p(target <eos> | source) under teacher forcing, one number per pair (padding left out)."""
    model.eval()
    src, src_lengths, tgt = encode_pairs(pairs, data.src_vocab, data.tgt_vocab)
    logp = torch.log_softmax(model(src, src_lengths, tgt[:, :-1]), -1)
    token = logp.gather(-1, tgt[:, 1:, None])[..., 0]
    return (token * (tgt[:, 1:] != PAD_ID)).sum(1)


def dates_run(dates, seed: int) -> dict:
    sources = [s for s, _ in dates.test]
    targets = [t for _, t in dates.test]
    max_len = dates.max_target_len
    iso = re.compile(r"\d{4}-\d{2}-\d{2}")
    out = {}
    for name, attention in NAMES:
        model, history = trained(dates, "dates", attention, seed, name)
        pred = translate(model, sources, dates.src_vocab, dates.tgt_vocab, max_len)
        wrong = [(s, t, p) for s, t, p in zip(sources, targets, pred, strict=True) if p != t]
        # wrong characters of an error of the right length (None if the length differs)
        digits_wrong = [
            sum(a != b for a, b in zip(t, p, strict=True)) if len(p) == len(t) else None for _, t, p in wrong
        ]
        row = dict(
            accuracy=exact_match(pred, targets),
            final_train_loss=round(history.final_loss, 5),
            errors=len(wrong),
            all_iso=all(iso.fullmatch(p) is not None for p in pred),
            not_iso=sum(iso.fullmatch(p) is None for p in pred),
            not_iso_examples=[[s, p] for s, p in zip(sources, pred, strict=True)
                              if iso.fullmatch(p) is None][:3],
            errors_1_2_digits=sum(d is not None and 1 <= d <= 2 for d in digits_wrong),
        )
        if wrong:
            own = sequence_logprob(model, [(s, p) for s, _, p in wrong], dates)
            true = sequence_logprob(model, [(s, t) for s, t, _ in wrong], dates)
            row["errors_own_output_scored_higher"] = int((own > true).sum())
        else:
            row["errors_own_output_scored_higher"] = 0
        for width in (3, 5):
            beam = translate(model, sources, dates.src_vocab, dates.tgt_vocab, max_len, beam_width=width)
            row[f"accuracy_beam{width}"] = exact_match(beam, targets)
            if width == 5:
                row["errors_beam5_also_greedy_errors"] = sum(
                    b != t and g != t for b, g, t in zip(beam, pred, targets, strict=True)
                )
        if attention:
            row["field_mass"] = field_mass(model, dates, sources, max_len)
        out[name] = row
    return out


@torch.no_grad()
def field_mass(model, dates, sources, max_len) -> dict:
    """Cell ``9f67b10d``: the attention each output field puts on the same source field (dd/mm/yyyy)."""
    src, src_lengths, _ = dates.tensors("test")
    numeric = [i for i, s in enumerate(sources) if re.fullmatch(r"\d{2}/\d{2}/\d{4}", s)]
    _, w = greedy_decode(model, src[numeric], src_lengths[numeric], max_len, return_attention=True)
    fields = {
        "year": (range(0, 4), range(6, 10)),
        "month": (range(5, 7), range(3, 5)),
        "day": (range(8, 10), range(0, 2)),
    }
    return {f: round(w[:, list(o)][:, :, list(s)].sum(-1).mean().item(), 4) for f, (o, s) in fields.items()}


def copy_run(copy, seed: int) -> dict:
    sources = [s for s, _ in copy.test]
    out = {}
    for name, attention in NAMES:
        model, history = trained(copy, "copy", attention, seed, name)
        pred = translate(model, sources, copy.src_vocab, copy.tgt_vocab, COPY_TEST_MAX_LEN + 1)
        n, acc, _ = exact_match_by_length(pred, copy.test)
        by_len = {int(k): round(float(a), 4) for k, a in zip(n, acc, strict=True)}
        out[name] = dict(
            final_train_loss=round(history.final_loss, 5),
            by_length=by_len,
            mean_8_16=round(float(np.mean([by_len[k] for k in range(8, COPY_MAX_LEN + 1)])), 4),
            at_16=by_len[COPY_MAX_LEN],
            mean_17_32=round(
                float(np.mean([by_len[k] for k in range(COPY_MAX_LEN + 1, COPY_TEST_MAX_LEN + 1)])), 4
            ),
            # the first length at which fewer than half the strings are copied exactly
            first_below_half=next((k for k in sorted(by_len) if by_len[k] < 0.5), None),
        )
    return out


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__, seeds=tuple(range(12)))
    args = parser.parse_args(argv)
    small_model_threads(DEVICE, 1)

    dates = date_dataset(DATES_TRAIN, DATES_TEST, seed=0)
    copy = copy_dataset(COPY_TRAIN, COPY_MAX_LEN, COPY_PER_LENGTH, test_max_len=COPY_TEST_MAX_LEN, seed=0)
    runs = []
    for seed in args.seeds:
        start = time.perf_counter()
        run = dict(seed=seed, dates=dates_run(dates, seed), copy=copy_run(copy, seed))
        run["seconds"] = round(time.perf_counter() - start, 1)
        runs.append(run)
        d, c = run["dates"], run["copy"]
        print(
            f"seed {seed}: dates {d['attention']['accuracy']:.3f} / {d['no attention']['accuracy']:.3f}, "
            f"copy 8..16 {c['attention']['mean_8_16']:.2f} / {c['no attention']['mean_8_16']:.2f}, "
            f"at 16 {c['attention']['at_16']:.2f}, fields {d['attention']['field_mass']} "
            f"({run['seconds']} s)",
            flush=True,
        )

    def col(part, name, key):
        return [r[part][name][key] for r in runs]

    summary = {}
    for part, keys in (
        ("dates", ("accuracy", "accuracy_beam3", "accuracy_beam5", "errors")),
        ("copy", ("mean_8_16", "at_16", "mean_17_32", "first_below_half")),
    ):
        for name, _ in NAMES:
            for key in keys:
                v = col(part, name, key)
                summary[f"{part} {name} {key}"] = dict(
                    min=min(v), max=max(v), mean=round(statistics.mean(v), 4)
                )
    att, plain = "attention", "no attention"
    claims = {
        "date exact match with attention above 0.94 at every seed": min(col("dates", att, "accuracy")) > 0.94,
        "date exact match with attention at least 0.98 at every seed": min(col("dates", att, "accuracy"))
        >= 0.98,
        "date exact match without attention between 0.7 and 0.85 at every seed": all(
            0.7 < a < 0.85 for a in col("dates", plain, "accuracy")
        ),
        "attention beats no attention on dates by more than 0.1 at every seed": all(
            r["dates"][att]["accuracy"] > r["dates"][plain]["accuracy"] + 0.1 for r in runs
        ),
        "attention model's final training loss lower at every seed": all(
            r["dates"][att]["final_train_loss"] < r["dates"][plain]["final_train_loss"] for r in runs
        ),
        "at most 5 of the 1,000 outputs of either model not of the form YYYY-MM-DD at every seed":
        all(r["dates"][n]["not_iso"] <= 5 for r in runs for n, _ in NAMES),
        "most plain-model errors are wrong in 1 or 2 digits at every seed": all(
            r["dates"][plain]["errors_1_2_digits"] > 0.5 * r["dates"][plain]["errors"] for r in runs
        ),
        "plain model scores its own wrong output higher than the truth for most errors at every seed": all(
            r["dates"][plain]["errors_own_output_scored_higher"] > 0.8 * r["dates"][plain]["errors"]
            for r in runs
        ),
        "beam 3 and 5 never more than 0.01 below greedy at every seed": all(
            r["dates"][n][f"accuracy_beam{w}"] >= r["dates"][n]["accuracy"] - 0.01
            for r in runs
            for n, _ in NAMES
            for w in (3, 5)
        ),
        "beam 5 leaves most plain-model errors wrong at every seed": all(
            r["dates"][plain]["errors_beam5_also_greedy_errors"] > 0.8 * r["dates"][plain]["errors"]
            for r in runs
        ),
        "each field puts more than half its attention on its source field at most seeds": sum(
            min(r["dates"][att]["field_mass"].values()) > 0.5 for r in runs
        ) > len(runs) / 2,
        "copy mean over 8..16 with attention above 0.7 at every seed": min(col("copy", att, "mean_8_16"))
        > 0.7,
        "copy mean over 8..16 with attention above 0.8 at every seed": min(col("copy", att, "mean_8_16"))
        > 0.8,
        "copy mean over 8..16 without attention below 0.1 at every seed": max(col("copy", plain, "mean_8_16"))
        < 0.1,
        "attention copies less at length 16 than its mean over 8..16 at every seed": all(
            r["copy"][att]["at_16"] < r["copy"][att]["mean_8_16"] for r in runs
        ),
        "plain model falls below one half at or before length 8 at every seed": all(
            r["copy"][plain]["first_below_half"] is not None and r["copy"][plain]["first_below_half"] <= 8
            for r in runs
        ),
        "attention below 0.2 on lengths 17..32 at every seed": max(col("copy", att, "mean_17_32")) < 0.2,
    }
    result = dict(
        **provenance(),
        recipe=dict(
            DATES_TRAIN=DATES_TRAIN,
            DATES_TEST=DATES_TEST,
            DATES_EMB=DATES_EMB,
            DATES_HIDDEN=DATES_HIDDEN,
            DATES_STEPS=DATES_STEPS,
            DATES_LR=DATES_LR,
            COPY_TRAIN=COPY_TRAIN,
            COPY_MAX_LEN=COPY_MAX_LEN,
            COPY_TEST_MAX_LEN=COPY_TEST_MAX_LEN,
            COPY_PER_LENGTH=COPY_PER_LENGTH,
            COPY_EMB=COPY_EMB,
            COPY_HIDDEN=COPY_HIDDEN,
            COPY_STEPS=COPY_STEPS,
            COPY_LR=COPY_LR,
            BATCH=BATCH,
            threads=1,
            data="date_dataset(..., seed=0) and copy_dataset(..., seed=0), the chapter's",
            seed="seed_everything(seed) before each model, fit_seq2seq(..., seed=seed)",
        ),
        runs=runs,
        summary=summary,
        claims=claims,
    )
    write_result(args.out, result)


if __name__ == "__main__":
    main()
