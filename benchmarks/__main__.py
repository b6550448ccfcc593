"""Benchmarks: seqbook's modules timed against PyTorch's built-ins and torch-hd.

Run it from the root of the repository::

    python -m benchmarks                          # every pair, book sizes and 4x, table on stdout
    python -m benchmarks --scaling --out perf     # + time against sequence length; perf/cpu.{txt,json}
    python -m benchmarks --clock cpu              # CPU time instead of wall time: for a busy machine
    python -m benchmarks --smoke                  # tiny sizes, one repeat: the CI check that it runs
    python -m benchmarks --device cuda --out perf # the same on a GPU: perf/cuda.{txt,json}
    python -m benchmarks --notebooks --out perf   # time every chapter notebook: perf/notebooks.json
    python -m benchmarks --notebooks --jobs 2     # the same, two notebooks at a time (2 cores)
    python -m benchmarks --reference              # this host's speed against perf/notebooks.json's

The pieces, in the order a run uses them: :mod:`benchmarks.layers` builds the pairs (each of our
layers and its reference) and times them, with :func:`benchmarks.timing.measure`;
:mod:`benchmarks.scaling` times them against sequence length; :mod:`benchmarks.notebooks` times the
chapters, after :mod:`benchmarks.reference` has timed a fixed workload that says how fast the host
is; :mod:`benchmarks.report` describes the machine and writes the table and the JSON file.
The FHRR rows need torch-hd (``pip install -e ".[bench]"``); without it they are reported as skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from .layers import GROUPS, SIZES, TARGETS, run_pairs
from .notebooks import chapter_notebooks, time_notebooks
from .reference import reference_workload
from .report import format_table, machine_info, write_result
from .scaling import SCALING_LENGTHS, run_scaling


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes, one repeat, no warm-up: checks that it runs")
    p.add_argument("--sizes", choices=("book", "4x", "all"), default="all", help="which sizes (default all)")
    p.add_argument("--groups", nargs="+", choices=GROUPS, default=list(GROUPS),
                   help="which pairs (default all)")
    p.add_argument("--scaling", action="store_true",
                   help="also time against sequence length (the log-log figure)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads (default 1: steadier on a shared machine; 0 keeps torch's)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall time (default), or this process's CPU time: steadier on a busy machine, "
                        "meaningful with --threads 1 on the CPU only")
    p.add_argument("--repeats", type=int, default=11, help="samples per timing, at most (default 11)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for <device>.txt and <device>.json (<device>-smoke.* with --smoke)")
    p.add_argument("--notebooks", nargs="*", type=Path, default=None, metavar="NOTEBOOK",
                   help="instead: execute these notebooks (default chapters/*.ipynb) and record their time")
    p.add_argument("--jobs", type=int, default=1,
                   help="with --notebooks: notebooks executed at once, each kernel on its own core "
                        "(default 1)")
    p.add_argument("--reference", action="store_true",
                   help="instead: time the reference workload on this host and compare it with the one "
                        "recorded in perf/notebooks.json (or --out's notebooks.json)")
    p.add_argument("--quiet", action="store_true", help="do not print rows as they are measured")
    return p


def main(argv: list[str] | None = None) -> dict:
    """Parse ``argv``, run, print the table, write ``--out``; returns the result dict."""
    args = _parser().parse_args(argv)
    threads = torch.get_num_threads()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        return _main(args, argv)
    finally:
        torch.set_num_threads(threads)  # leave the caller's setting as it was


def _main(args: argparse.Namespace, argv: list[str] | None) -> dict:
    log = None if args.quiet else (lambda s: print(s, flush=True))
    command = "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv)
    t0 = time.perf_counter()

    if args.reference:
        return _reference(args.out or Path(__file__).resolve().parents[1] / "perf")

    if args.notebooks is not None:
        notebooks = args.notebooks or chapter_notebooks()
        if args.jobs < 1:
            raise SystemExit(f"--jobs must be >= 1, got {args.jobs}")
        expected = {}  # the longest first, by the last recorded run (if any)
        last = args.out / "notebooks.json" if args.out else None
        if args.jobs > 1 and last is not None and last.exists():
            expected = {r["notebook"]: r["wall_s"] for r in json.loads(last.read_text())["notebooks"]}
        reference = reference_workload()  # before the notebooks, on an idle machine
        if log:
            log(f"reference workload: {reference['total']:.2f} s")
        start = time.perf_counter()
        rows = time_notebooks(notebooks, log=log, jobs=args.jobs, expected_s=expected)
        # the commit is dirty when what the notebooks run and read (chapters/, results/) changed
        meta = {**machine_info("cpu", commit_also=("chapters", "results")), "command": command,
                "jobs": args.jobs}
        meta["torch_threads"] = (
            "each notebook's own setting (the chapters that train set one thread)" if args.jobs == 1
            else "one in every kernel: the chapters' own setting, and OMP_NUM_THREADS=1")
        # total_wall_s: start to end of the whole run; sum_wall_s: the notebooks one after another
        meta["reference_s"] = reference  # python -m benchmarks --reference compares a host with it
        result = {"meta": meta, "notebooks": rows,
                  "total_wall_s": round(time.perf_counter() - start, 1),
                  "sum_wall_s": round(sum(r["wall_s"] for r in rows), 1)}
        if args.out:
            write_result(args.out, "notebooks", result)
        if any(r["status"] != "ok" for r in rows):
            raise SystemExit(1)
        return result

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    if args.clock == "cpu" and (device.type != "cpu" or torch.get_num_threads() != 1):
        raise SystemExit("--clock cpu measures CPU time: use it with --device cpu --threads 1")
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.smoke:
        sizes, repeats, warmup, budget = ("smoke",), 1, 0, 0.0
    else:
        sizes = ("book", "4x") if args.sizes == "all" else (args.sizes,)
        repeats, warmup, budget = args.repeats, 2, 1.0
    result = {"meta": {**machine_info(device), "command": command, "clock": args.clock, "sizes": list(sizes),
                       "sizes_detail": {s: SIZES[s] for s in sizes}, "targets": TARGETS}}
    result["rows"] = run_pairs(sizes, device, args.groups, repeats, warmup, budget, log, clock)
    if args.scaling:
        lengths = (4, 8) if args.smoke else SCALING_LENGTHS
        result["scaling"] = run_scaling(lengths, device, repeats=1 if args.smoke else 5,
                                        warmup=warmup and 1, budget_s=budget, log=log, clock=clock)
    result["meta"]["elapsed_s"] = round(time.perf_counter() - t0, 1)
    table = format_table(result)
    print(table)
    if args.out:
        write_result(args.out, device.type + ("-smoke" if args.smoke else ""), result, table)
    if any(r["status"] == "error" for r in result["rows"]):
        raise SystemExit(1)
    return result


def _reference(folder: Path) -> dict:
    """Time the reference workload here; print it beside the one in ``folder/notebooks.json``."""
    here = reference_workload()
    print(f"this host ({machine_info('cpu')['cpu']}): reference workload {here['total']:.2f} s "
          f"(GRU steps {here['gru']:.2f} s, GPT steps {here['gpt']:.2f} s), one thread")
    recorded_file = folder / "notebooks.json"
    recorded = None
    if recorded_file.exists():
        meta = json.loads(recorded_file.read_text())["meta"]
        recorded = meta.get("reference_s")
        if recorded:
            ratio = here["total"] / recorded["total"]
            print(f"{recorded_file}: {recorded['total']:.2f} s on {meta['cpu']} (commit "
                  f"{meta['commit'][:7]}); this host takes {ratio:.2f} times as long: scale that "
                  "file's notebook times by it")
    if not recorded:
        print(f"{recorded_file} records no reference workload: nothing to compare with")
    return {"here": here, "recorded": recorded}


if __name__ == "__main__":
    main()
