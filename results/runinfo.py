"""What every multi-seed script in ``results/`` records beside its numbers.

A committed result names the commit that produced it, the command, the machine and the date, so a
reader can tell which code the numbers belong to and rerun them. Each script does::

    from runinfo import provenance, script_parser, write_result

    result = dict(**provenance(), recipe=..., runs=[...], summary=..., claims=...)
    write_result("results/<name>.json", result)

``runs`` is a list of dicts with at least ``seed``; ``claims`` maps each sentence the book states to
whether it held on every seed (the chapter asserts the same against the file).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # this checkout's seqbook, not whichever one is installed
    sys.path.insert(0, str(ROOT))

from seqbook.utils import cpu_name  # noqa: E402


def commit() -> str:
    """``HEAD`` of this checkout, short; ``+dirty`` if a tracked file under seqbook/ or results/ changed."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "seqbook", "results"],
            capture_output=True, text=True, check=True, cwd=ROOT,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("SEQBOOK_COMMIT", "unknown")
    return head + ("+dirty" if dirty else "")


def machine() -> str:
    return (
        f"{platform.platform()}; {cpu_name()}; torch {torch.__version__}; "
        f"{torch.get_num_threads()} thread(s) (os.cpu_count()={os.cpu_count()})"
    )


def provenance() -> dict:
    """The fields every result file starts with: commit, command, machine, date (UTC)."""
    return dict(
        commit=commit(),
        command=" ".join([Path(sys.executable).name, *sys.argv]),
        machine=machine(),
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )


def script_parser(script: str, doc: str, seeds=(0, 1, 2)) -> argparse.ArgumentParser:
    """The command line of a results script: its docstring's first line as the description,
    ``--out`` (default ``results/<script's name>.json``) and ``--seeds`` (at least three by default)."""
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "results" / f"{Path(script).stem}.json"))
    parser.add_argument("--seeds", type=int, nargs="+", default=list(seeds))
    return parser


def write_result(path: str | Path, result: dict, report: bool = True) -> Path:
    """Write ``result`` as indented JSON (one file a script), creating the folder if needed, and
    (``report``) print whether each of its ``claims`` held."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    if report:
        for claim, holds in result.get("claims", {}).items():
            print(f"{claim}: {holds}")
        print(f"written to {path}")
    return path
