"""The README's times for the notebooks hold for the run recorded in perf/notebooks.json."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_s_notebook_times_match_the_recorded_run():
    readme = " ".join((ROOT / "README.md").read_text().split())
    record = json.loads((ROOT / "perf" / "notebooks.json").read_text())
    seconds = {r["notebook"]: r["wall_s"] for r in record["notebooks"]}
    together = record["total_wall_s"]  # two at a time
    *rest, second, first = sorted(seconds, key=seconds.get)  # the two longest last
    words = {10: "ten", 11: "eleven", 9: "nine"}
    assert (f"{words[len(rest)]} took at most {round(seconds[rest[-1]])} s each, the longest, "
            f"chapters {int(first[:2])} and {int(second[:2])}, {round(seconds[first])} s and "
            f"{round(seconds[second])} s; all {len(seconds)} took about "
            f"{round(together / 30) / 2:g} minutes together." in readme)  # to half a minute


def test_the_recorded_run_has_the_reference_workload_the_readme_offers():
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "`python -m benchmarks --reference` times a fixed workload" in readme
    meta = json.loads((ROOT / "perf" / "notebooks.json").read_text())["meta"]
    reference = meta["reference_s"]  # what --reference compares a machine with
    assert 0 < reference["gru"] and 0 < reference["gpt"] and reference["repeats"] == 5
    assert f"the best of five runs: {reference['total']:.1f} s on that machine" in readme


def test_the_benchmarks_readme_quotes_the_recorded_reference_time():
    readme = " ".join((ROOT / "benchmarks" / "README.md").read_text().split())
    total = json.loads((ROOT / "perf" / "notebooks.json").read_text())["meta"]["reference_s"]["total"]
    assert f"({total:.1f} s in the record of `perf/notebooks.json`)" in readme


def test_the_introduction_s_notebook_times_match_the_recorded_run():
    intro = " ".join((ROOT / "intro.md").read_text().split())
    record = json.loads((ROOT / "perf" / "notebooks.json").read_text())
    seconds = {int(r["notebook"][:2]): r["wall_s"] for r in record["notebooks"]}
    long = sorted(n for n, s in seconds.items() if s >= 60)
    def listed(items):  # "a", "a and b", "a, b and c"
        items = list(items)
        return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]

    minutes = listed(f"{round(seconds[n] / 30) / 2:g}" for n in long)
    words = {1: "one", 2: "two", 3: "three"}
    chapters = listed(map(str, long))
    assert (f"all but {words[len(long)]} in under a minute, chapters {chapters} in about "
            f"{minutes} minutes)" in intro)
