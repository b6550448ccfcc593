"""Chapter 4's two failure analyses over random seeds: which date formats fail, and how long copies fail.

The models are trained exactly as in ``results/ch04_seeds.py`` (the chapter's recipe; seed 0 is the
chapter's run). Reported per seed:

* dates: the errors of both models on the test dates written ``yyyy/mm/dd`` (the one format that
  gives the year first) and on all the others; for the model without attention, the format, among
  those with at least 20 test dates, with the highest share of errors (formats are told apart by
  their shape: a year -> #, other numbers -> 9, words -> a, as the chapter's cell does);
* copy (the attention model only): for each length from 16 (the longest in training) to 24, the
  wrong outputs, the position (1-based) of their first wrong character, and how many are shorter
  than the string, or as long.

Run from the repository root (``SEQBOOK_DATA`` must point at the data), one CPU thread (about half
a minute a seed)::

    python results/ch04_failures_seeds.py [--seeds 0 1 2 3 4 5]
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "results"))

import ch04_seeds as base  # noqa: E402
from runinfo import provenance, script_parser, write_result  # noqa: E402

from seqbook.data import copy_dataset, date_dataset  # noqa: E402
from seqbook.decoding import translate  # noqa: E402
from seqbook.utils import small_model_threads  # noqa: E402

YEAR_FIRST = "#/9/9"  # the shape of yyyy/mm/dd
COPY_LENGTHS = range(16, 25)


def shape(source: str) -> str:
    """A source's format: a year -> #, other numbers -> 9, words -> a (the chapter's cell 4b2b176e)."""
    source = re.sub(r"\d{4}", "#", source)
    return re.sub(r"[^\W\d_]+", "a", re.sub(r"\d+", "9", source))


def dates_by_format(dates, seed: int) -> dict:
    sources = [s for s, _ in dates.test]
    targets = [t for _, t in dates.test]
    formats = [shape(s) for s in sources]
    count = Counter(formats)
    out = {"year_first_test_dates": count[YEAR_FIRST]}
    for name, attention in base.NAMES:
        model, _ = base.trained(dates, "dates", attention, seed, name)
        pred = translate(model, sources, dates.src_vocab, dates.tgt_vocab, dates.max_target_len)
        wrong = Counter(f for f, t, p in zip(formats, targets, pred, strict=True) if p != t)
        rate = {f: wrong[f] / count[f] for f in count if count[f] >= 20}
        out[name] = dict(errors=sum(wrong.values()), year_first_errors=wrong[YEAR_FIRST],
                         hardest_format=max(rate, key=rate.get),
                         year_first_error_rate=round(rate[YEAR_FIRST], 4))
    return out


def first_wrong(source: str, output: str) -> int:
    """The 1-based position of the first character in which output differs from source."""
    return next((i + 1 for i, (a, b) in enumerate(zip(source, output, strict=False))
                 if a != b),
                min(len(source), len(output)) + 1)


def copy_failures(copy, seed: int) -> dict:
    model, _ = base.trained(copy, "copy", True, seed, "attention")
    sources = [s for s, _ in copy.test if len(s) in COPY_LENGTHS]
    pred = translate(model, sources, copy.src_vocab, copy.tgt_vocab, base.COPY_TEST_MAX_LEN + 1)
    out = {}
    for length in COPY_LENGTHS:
        pairs = [(s, p) for s, p in zip(sources, pred, strict=True) if len(s) == length]
        wrong = [(s, p) for s, p in pairs if p != s]
        positions = [first_wrong(s, p) for s, p in wrong]
        out[str(length)] = dict(
            strings=len(pairs), wrong=len(wrong),
            median_first_wrong=statistics.median(positions) if positions else None,
            first_wrong_by_half_length=sum(q <= length // 2 for q in positions),
            shorter=sum(len(p) < len(s) for s, p in wrong),
            same_length=sum(len(p) == len(s) for s, p in wrong))
    return out


def main(argv=None) -> None:
    parser = script_parser(__file__, __doc__, seeds=tuple(range(6)))
    args = parser.parse_args(argv)
    small_model_threads(base.DEVICE, 1)
    dates = date_dataset(base.DATES_TRAIN, base.DATES_TEST, seed=0)
    copy = copy_dataset(base.COPY_TRAIN, base.COPY_MAX_LEN, base.COPY_PER_LENGTH,
                        test_max_len=base.COPY_TEST_MAX_LEN, seed=0)
    runs = []
    for seed in args.seeds:
        run = dict(seed=seed, dates=dates_by_format(dates, seed), copy=copy_failures(copy, seed))
        runs.append(run)
        d, c = run["dates"], run["copy"]
        print(f"seed {seed}: yyyy/mm/dd errors {d['attention']['year_first_errors']} of "
              f"{d['attention']['errors']} (attention), {d['no attention']['year_first_errors']} "
              f"of {d['year_first_test_dates']} (plain, hardest {d['no attention']['hardest_format']});"
              f" copy at 20: {c['20']}", flush=True)

    plain = [r["dates"]["no attention"] for r in runs]
    att = [r["dates"]["attention"] for r in runs]
    long = [r["copy"][str(n)] for r in runs for n in COPY_LENGTHS if n >= 18]
    wrong_long = sum(c["wrong"] for c in long)
    claims = {
        "yyyy/mm/dd is the plain model's hardest format at every seed": all(
            p["hardest_format"] == YEAR_FIRST for p in plain),
        "the plain model gets at least 75 % of the yyyy/mm/dd dates wrong at every seed": all(
            p["year_first_error_rate"] >= 0.75 for p in plain),
        "most of the attention model's errors are on yyyy/mm/dd at every seed": all(
            2 * a["year_first_errors"] > a["errors"] for a in att),
        "most of the attention model's errors are on yyyy/mm/dd at some seeds, not at others": 0 < sum(
            2 * a["year_first_errors"] > a["errors"] for a in att) < len(att),
        "from length 18 on, most wrong copies go wrong in the first half of the string": sum(
            c["first_wrong_by_half_length"] for c in long) > wrong_long / 2,
        "from length 18 on, most wrong copies are shorter than the string": sum(
            c["shorter"] for c in long) > wrong_long / 2,
    }
    summary = {
        "attention_year_first_share": [f"{a['year_first_errors']}/{a['errors']}" for a in att],
        "plain_year_first_errors": [p["year_first_errors"] for p in plain],
        "year_first_test_dates": runs[0]["dates"]["year_first_test_dates"],
        "copy_18_24": dict(wrong=wrong_long,
                           first_wrong_by_half_length=sum(c["first_wrong_by_half_length"]
                                                          for c in long),
                           shorter=sum(c["shorter"] for c in long),
                           same_length=sum(c["same_length"] for c in long)),
    }
    recipe = dict(script="results/ch04_seeds.py's recipe (the chapter's)",
                  copy_lengths=list(COPY_LENGTHS), threads=1)
    write_result(args.out, dict(**provenance(), recipe=recipe, runs=runs, summary=summary,
                                claims=claims))


if __name__ == "__main__":
    main()
