"""Every multi-seed result in ``results/`` says where it came from and covers at least three seeds.

A script ``results/<name>.py`` writes ``results/<name>.json``; the chapters assert their claims against
these files, so a file without its commit, or a claim resting on fewer than three seeds, fails here.
"""

import json
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[2] / "results"
SCRIPTS = sorted(p for p in RESULTS.glob("*.py") if p.stem != "runinfo")


def test_there_are_multi_seed_scripts():
    assert SCRIPTS, "no results/*.py script found"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_each_script_has_its_result(script):
    out = script.with_suffix(".json")
    assert out.exists(), f"{script.name} has no committed result {out.name}"
    result = json.loads(out.read_text())
    for key in ("commit", "command", "machine", "runs"):
        assert key in result, f"{out.name} lacks {key!r}"
    assert result["commit"] and result["commit"] != "unknown", f"{out.name} names no commit"
    assert script.name in result["command"], f"{out.name} was not written by {script.name}"
    seeds = {run["seed"] for run in result["runs"]}
    assert len(seeds) >= 3, f"{out.name} covers seeds {sorted(seeds)}, fewer than three"
    for claim, holds in result.get("claims", {}).items():
        assert isinstance(holds, bool), f"{out.name}: claim {claim!r} is not true/false"
