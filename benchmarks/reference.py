"""A fixed reference workload: how fast a host is at the book's kind of work.

The chapters' times in ``perf/notebooks.json`` belong to the machine that measured them, and
machines differ, sometimes even two sold under the same name. The reference workload is a few seconds
of the work the chapters spend their time on, on one thread, timed the same way on every host:

* ``gru``: 150 training steps of chapter 3's memory-task classifier (a GRU of 32 units on PyTorch's
  fused kernel, batches of 64 sequences of 50 tokens): many small operations, as most chapters;
* ``gpt``: 50 training steps of chapter 6's character GPT (2 layers, width 64, batches of 16
  windows of 64 characters): matrix products and attention.

``python -m benchmarks --reference`` times it on this host and compares it with the time recorded in
``perf/notebooks.json``; the ratio scales that file's times to this host. On one shared host, runs
a few minutes apart differed by about 15 % (2.02 to 2.36 s on a 2-core AMD EPYC): a ratio says which
host is faster only beyond that.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from seqbook.data import first_token_task
from seqbook.gpt import GPT, GPTConfig
from seqbook.rnn import SequenceClassifier
from seqbook.utils import seed_everything

REFERENCE_STEPS = {"gru": 150, "gpt": 50}


def _gru_steps(steps: int) -> None:
    seed_everything(0)
    model = SequenceClassifier(16, 8, hidden_size=32, cell="gru", embed_dim=16, fast=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        ids, target = first_token_task(64, 50, generator=g)
        loss = F.cross_entropy(model(ids), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _gpt_steps(steps: int) -> None:
    seed_everything(0)
    config = GPTConfig(vocab_size=64, block_size=64, n_layer=2, n_head=4, n_embd=64,
                       dropout=0.0, init_std=0.08, fast=True)
    model = GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x = torch.randint(64, (16, 64), generator=g)
        y = torch.randint(64, (16, 64), generator=g)
        loss = model(x, y)[1]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def reference_workload(repeats: int = 5, steps: dict[str, int] | None = None) -> dict:
    """Time the reference workload on one thread: the best of ``repeats`` runs of each part.

    Returns ``{"gru": s, "gpt": s, "total": s, "steps": {...}, "repeats": repeats}``, seconds
    rounded to milliseconds. ``steps`` replaces :data:`REFERENCE_STEPS` (for a quick test).
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    steps = {**REFERENCE_STEPS, **(steps or {})}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = {}
        for name, run in (("gru", _gru_steps), ("gpt", _gpt_steps)):
            run(2)  # warm-up: first calls, allocations
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                run(steps[name])
                times.append(time.perf_counter() - start)
            best[name] = round(min(times), 3)
    finally:
        torch.set_num_threads(threads)
    return {**best, "total": round(best["gru"] + best["gpt"], 3), "steps": steps,
            "repeats": repeats}
