"""The book, notebook by notebook: each chapter executed top to bottom in a fresh kernel, timed.

The chapters are found beside this package, in the repository's ``chapters/`` folder. The kernels get
a copy of this process's environment with ``TQDM_DISABLE=1`` unless it is set; ``SEQBOOK_DATA`` is
passed on when it is set, and otherwise left unset, so that seqbook's loaders use their own default.
The environment of the calling process is not changed.
"""

from __future__ import annotations

import os
import re
import resource
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

CHAPTERS = Path(__file__).resolve().parent.parent / "chapters"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours of a traceback


def chapter_notebooks(folder: Path = CHAPTERS) -> list[Path]:
    """The chapter notebooks (``01_*.ipynb``, ``02_*.ipynb``, ...) in order."""
    return sorted(Path(folder).glob("[0-9]*.ipynb"))


#: nbclient's words for a kernel that never came up (it lost a race for a port, or died at start)
_NEVER_STARTED = ("Kernel didn't respond", "Kernel died before replying to kernel_info")


def time_notebook(path: Path, timeout: int = 3600, kernel_name: str = "python3",
                  one_thread: bool = False) -> dict:
    """Execute one notebook top to bottom in a fresh kernel (with nbclient, the executor behind
    ``jupyter nbconvert --execute``) and return its row: wall time, CPU time of its kernel, number
    of code cells, status. Nothing is written back to the notebook. ``one_thread``: the kernel gets
    ``OMP_NUM_THREADS=1``, so that PyTorch starts on one thread even where a chapter keeps its
    default."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    env = dict(os.environ)
    env.setdefault("TQDM_DISABLE", "1")
    if one_thread:
        env["OMP_NUM_THREADS"] = "1"
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    for attempt in range(3):  # a kernel that never started is started again, twice at most
        client = NotebookClient(nb, timeout=timeout, kernel_name=kernel_name,
                                resources={"metadata": {"path": str(path.parent)}})
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        status, note = "ok", ""
        try:
            client.execute(env=env)
        except CellExecutionError as err:  # a cell raised: its last line, without colour codes
            status, note = "error", _ANSI.sub("", str(err)).strip().splitlines()[-1][:200]
        except Exception as err:  # a dead kernel, a timeout: a row, not a lost run
            status, note = "error", f"{type(err).__name__}: {err}".strip()[:200]
            # Kernels started at once over TCP can pick the same free port; the one that loses
            # never answers. Nothing of the notebook ran, so it is timed again from the start.
            if attempt < 2 and any(words in str(err) for words in _NEVER_STARTED):
                continue
        break
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)  # the finished kernel
    cells = sum(c.cell_type == "code" for c in nb.cells)
    return {"notebook": path.name, "wall_s": round(wall, 1), "kernel_cpu_s": round(cpu, 1),
            "cells": cells, "status": status, "note": note, "slowest_cells": slowest_cells(nb)}


def slowest_cells(nb, k: int = 5) -> list[dict]:
    """The ``k`` code cells that took longest, from the timestamps nbclient records in each cell's
    metadata (``execution``: from the kernel's start of the cell to its reply): each with its
    position in the notebook, its id and seconds, the slowest first."""
    times = []
    for i, cell in enumerate(nb.cells):
        stamps = cell.get("metadata", {}).get("execution", {})
        start, end = stamps.get("iopub.execute_input"), stamps.get("shell.execute_reply")
        if cell.cell_type == "code" and start and end:
            seconds = (datetime.fromisoformat(end.replace("Z", "+00:00"))
                       - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()
            times.append({"cell": i, "id": cell.get("id", ""), "s": round(seconds, 1)})
    return sorted(times, key=lambda t: -t["s"])[:k]


def time_notebooks(notebooks: list[Path], timeout: int = 3600, kernel_name: str = "python3",
                   log: Callable[[str], None] | None = None, jobs: int = 1,
                   expected_s: dict[str, float] | None = None) -> list[dict]:
    """Time each notebook with :func:`time_notebook`; returns the rows in the order given.

    ``jobs`` notebooks run at once, each in its own worker process and kernel, on one thread
    (``one_thread`` of :func:`time_notebook`; the chapters that train set one thread themselves):
    two at a time keep the two cores of a 2-core machine busy, and no kernel starts threads that
    would wait for the other's core. A chapter that starts processes of its own (chapter 12's
    ranks) takes more than its core while they run.
    With ``jobs > 1`` the longest notebooks start first, by ``expected_s`` (name -> seconds, e.g.
    an earlier run's), so that the last one to start is short.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    paths = [Path(p) for p in notebooks]

    def report(row: dict) -> None:
        if log:
            log(f"{row['notebook']:<32} {row['wall_s']:8.1f} s wall {row['kernel_cpu_s']:8.1f} s "
                f"kernel CPU  {row['status']} {row['note']}")

    if jobs == 1:
        rows = []
        for path in paths:
            rows.append(time_notebook(path, timeout, kernel_name))
            report(rows[-1])
        return rows
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    expected_s = expected_s or {}
    order = sorted(range(len(paths)), key=lambda i: -expected_s.get(paths[i].name, 0.0))
    rows: list[dict | None] = [None] * len(paths)
    # spawn: a fresh interpreter per worker, whatever the caller has imported or started
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(time_notebook, paths[i], timeout, kernel_name, True): i
                   for i in order}
        for future in as_completed(futures):
            rows[futures[future]] = future.result()
            report(rows[futures[future]])
    return rows
