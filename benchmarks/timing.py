"""How a pair of functions is timed: warm-up, calibration, then interleaved samples and their median.

Every timing of the harness goes through :func:`measure`. The helpers around it turn a forward closure
into what is timed (a forward pass under ``torch.no_grad()``, or forward + backward with the gradients
cleared after each call) and wait for the device where that is needed.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn


def _scalar(out) -> torch.Tensor:
    """A scalar to differentiate: the sum of the (first) output; the real part of a complex one."""
    while isinstance(out, (tuple, list)):
        out = out[0]
    if out.is_complex():
        out = out.real
    return out.sum()


def runner(fn: Callable[[], object], leaves: list[torch.Tensor], backward: bool) -> Callable[[], None]:
    """What is timed: ``fn()`` under ``torch.no_grad()``, or ``fn()`` and a backward pass from the sum
    of its output, after which the gradients of ``leaves`` are cleared."""
    if not backward:
        def forward():
            with torch.no_grad():
                fn()
        return forward

    def forward_backward():
        _scalar(fn()).backward()
        for t in leaves:
            t.grad = None  # like optimizer.zero_grad(set_to_none=True)
    return forward_backward


def sync_for(device: torch.device) -> Callable[[], None]:
    """The call that waits for ``device`` to finish its queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def set_mode(modules: list[nn.Module], train: bool) -> None:
    """Training mode (forward + backward timings) or evaluation mode (forward timings) for ``modules``."""
    for m in modules:
        m.train(train)


def measure(fns: list[Callable[[], None]], sync: Callable[[], None] = lambda: None, repeats: int = 11,
            warmup: int = 2, min_sample_s: float = 0.002, budget_s: float = 2.0,
            clock: Callable[[], float] = time.perf_counter) -> list[dict]:
    """Median time per call of each function in ``fns``, timed interleaved.

    After ``warmup`` calls of each, one call of each calibrates ``number``, the calls per sample (the
    same for all, so that one sample lasts at least ``min_sample_s``). Then up to ``repeats`` rounds
    take one sample of every function, in an order that alternates between rounds; fewer rounds (at
    least 3, or ``repeats`` if smaller) are taken when ``repeats`` rounds would exceed ``budget_s``.

    ``clock`` is wall time by default; ``time.process_time`` (CPU time of this process) is steadier
    on a machine shared with other jobs, and equals wall time when torch runs one thread on the CPU.

    Returns one dict per function: ``ms`` (median per call), ``min_ms``, ``samples``, ``number``.
    """
    for _ in range(warmup):
        for f in fns:
            f()
    sync()
    first = []
    for f in fns:
        t0 = clock()
        f()
        sync()
        first.append(clock() - t0)
    slowest = max(max(first), 1e-7)
    number = max(1, math.ceil(min_sample_s / slowest)) if repeats > 1 else 1
    per_round = number * sum(max(t, 1e-7) for t in first)
    rounds = repeats if repeats <= 3 else max(3, min(repeats, int(budget_s / per_round)))
    samples: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            t0 = clock()
            for _ in range(number):
                fns[i]()
            sync()
            samples[i].append((clock() - t0) / number)
    return [{"ms": 1e3 * statistics.median(s), "min_ms": 1e3 * min(s), "samples": len(s), "number": number}
            for s in samples]


def time_row(row: dict, build: Callable[[], tuple[Callable[[], object], list[torch.Tensor]]],
             device: torch.device, repeats: int) -> dict:
    """Fill ``row`` with the forward and forward+backward times of one computation on ``device``.

    ``build()`` makes the inputs and returns ``(call, leaves)``: what :func:`runner` times, and the
    tensors whose gradients it clears. ``row`` gets ``forward_ms`` and ``forward_backward_ms``
    (medians of :func:`measure`, ``repeats`` samples after one warm-up call) and, on a GPU,
    ``max_memory_gib``, the peak allocated while both ran. Running out of GPU memory, or any other
    error, becomes the row's ``status`` instead: one failing size must not cost the others.
    """
    sync = sync_for(device)
    cuda = device.type == "cuda"
    try:
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        call, leaves = build()
        for key, backward in (("forward_ms", False), ("forward_backward_ms", True)):
            sample = measure([runner(call, leaves, backward)], sync, repeats=repeats, warmup=1)[0]
            row[key] = round(sample["ms"], 3)
        if cuda:
            row["max_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
    except torch.OutOfMemoryError:
        row["status"] = "skipped: out of GPU memory"
    except Exception as exc:  # noqa: BLE001 - reported in the row
        row["status"] = f"error: {type(exc).__name__}: {exc}"[:300]
    finally:
        call = leaves = None
        if cuda:
            torch.cuda.empty_cache()
    return row
