"""One small training loop that every chapter reuses.

The loop is deliberately plain: the chapters show what a model computes; this file only moves
batches to the device, steps the optimiser, clips gradients and records the losses.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn
from tqdm import tqdm

from .utils import get_device, seed_everything


@dataclass
class History:
    """Losses recorded during :func:`fit`: one value per step, and one per evaluation."""

    step_loss: list[float] = field(default_factory=list)
    eval_step: list[int] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)

    @property
    def final_loss(self) -> float:
        """The mean training loss over the last 10% of steps (at least one step)."""
        if not self.step_loss:
            raise ValueError("no training step was recorded")
        tail = max(1, len(self.step_loss) // 10)
        return sum(self.step_loss[-tail:]) / tail


def _to_device(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


def fit(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, object], torch.Tensor],
    batches: Iterable,
    steps: int,
    lr: float = 1e-3,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    clip: float | None = 1.0,
    device: torch.device | str | None = None,
    seed: int | None = 0,
    eval_fn: Callable[[nn.Module], float] | None = None,
    eval_every: int = 0,
    progress: bool = True,
    desc: str = "train",
) -> History:
    """Train ``model`` for ``steps`` optimiser steps and return the loss history.

    Args:
        model: the module to train (moved to ``device``).
        loss_fn: ``loss_fn(model, batch) -> scalar loss``; the batch is already on the device.
        batches: an iterable of batches; it is cycled if it runs out before ``steps``.
        steps: number of optimiser steps.
        lr: learning rate of the default optimiser (AdamW) when ``optimizer`` is None.
        optimizer, scheduler: optional; the scheduler is stepped once per optimiser step.
        clip: clip the global gradient norm to this value (None: no clipping).
        device: where to train; default :func:`seqbook.utils.get_device`.
        seed: seeds every generator before training (None: leave them alone).
        eval_fn: ``eval_fn(model) -> float``, called every ``eval_every`` steps and at the end,
            in eval mode under ``torch.no_grad()``.
        progress: show a tqdm progress bar (never when the environment sets ``TQDM_DISABLE``).

    Returns:
        A :class:`History` with the per-step losses, the evaluations and the gradient norms.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if seed is not None:
        seed_everything(seed)
    device = torch.device(device) if device is not None else get_device()
    model.to(device)
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=lr)
    history = History()

    def evaluate(step: int) -> None:
        model.eval()
        with torch.no_grad():
            history.eval_step.append(step)
            history.eval_loss.append(float(eval_fn(model)))
        model.train()

    model.train()
    iterator = iter(batches)
    # an explicit disable= overrides tqdm's own TQDM_DISABLE variable, so honour it here
    disable = not progress or bool(os.environ.get("TQDM_DISABLE"))
    bar = tqdm(range(1, steps + 1), desc=desc, disable=disable, leave=False)
    for step in bar:
        try:
            batch = next(iterator)
        except StopIteration:
            iterator = iter(batches)
            batch = next(iterator)
        loss = loss_fn(model, _to_device(batch, device))
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss became {loss.item()} at step {step}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), clip if clip else math.inf)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        history.step_loss.append(loss.item())
        history.grad_norm.append(float(norm))
        if eval_fn is not None and eval_every and step % eval_every == 0 and step != steps:
            evaluate(step)
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    if eval_fn is not None:
        evaluate(steps)
    model.eval()
    return history


def random_batches(*tensors: torch.Tensor, batch_size: int, generator: torch.Generator | None = None):
    """An endless stream of random mini-batches drawn (without replacement per epoch) from tensors
    that share their first dimension."""
    n = tensors[0].shape[0]
    for t in tensors:
        if t.shape[0] != n:
            raise ValueError(f"all tensors must share dim 0: got {[tuple(x.shape) for x in tensors]}")
    while True:
        order = torch.randperm(n, generator=generator)
        for start in range(0, n - batch_size + 1, batch_size):
            idx = order[start : start + batch_size]
            yield tuple(t[idx] for t in tensors)
