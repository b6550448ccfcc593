"""The book, notebook by notebook: each chapter executed top to bottom in a fresh kernel, timed.

The chapters are found beside this package, in the repository's ``chapters/`` folder. The kernels get
a copy of this process's environment with ``TQDM_DISABLE=1`` unless it is set; ``SEQBOOK_DATA`` is
passed on when it is set, and otherwise left unset, so that seqbook's loaders use their own default.
The environment of the calling process is not changed.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from pathlib import Path

CHAPTERS = Path(__file__).resolve().parent.parent / "chapters"


def chapter_notebooks(folder: Path = CHAPTERS) -> list[Path]:
    """The chapter notebooks (``01_*.ipynb``, ``02_*.ipynb``, ...) in order."""
    return sorted(Path(folder).glob("[0-9]*.ipynb"))


def time_notebooks(notebooks: list[Path], timeout: int = 3600, kernel_name: str = "python3",
                   log: Callable[[str], None] | None = None) -> list[dict]:
    """Execute each notebook top to bottom in a fresh kernel (with nbclient, the executor behind
    ``jupyter nbconvert --execute``) and record its wall time and the CPU time of its kernel.
    Nothing is written back to the notebooks."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    env = dict(os.environ)
    env.setdefault("TQDM_DISABLE", "1")
    results = []
    for path in notebooks:
        path = Path(path)
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, timeout=timeout, kernel_name=kernel_name,
                                resources={"metadata": {"path": str(path.parent)}})
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        status, note = "ok", ""
        try:
            client.execute(env=env)
        except CellExecutionError as err:
            status, note = "error", str(err).strip().splitlines()[-1][:200]
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)  # the finished kernel
        cells = sum(c.cell_type == "code" for c in nb.cells)
        results.append({"notebook": path.name, "wall_s": round(wall, 1), "kernel_cpu_s": round(cpu, 1),
                        "cells": cells, "status": status, "note": note})
        if log:
            log(f"{path.name:<32} {wall:8.1f} s wall {cpu:8.1f} s kernel CPU  {status} {note}")
    return results
