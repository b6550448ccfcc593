"""Training: one small loop that every chapter reuses, the learning-rate schedules, and the
training functions of the chapters' models built on the loop.

The loop, :func:`fit`, is deliberately plain: the chapters show what a model computes; this file
only moves batches to the device, steps the optimiser, clips gradients and records the losses.
:func:`train_lm` (truncated backpropagation through time, chapters 2, 3 and 6) and
:func:`fit_seq2seq` (translation, chapters 4 and 6) are thin wrappers around it;
:func:`warmup_schedule` gives the warm-up schedules of chapter 6.
"""

from __future__ import annotations

import math
import numbers
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm  # a widget in Jupyter (removed when done), text in a terminal

from .batching import bucket_batches
from .checks import (
    check_count,
    check_flag,
    check_generator,
    check_ids,
    check_int,
    check_lm_chunks,
    check_module,
    check_number,
    check_positive_int,
    check_str,
    check_tensor,
    checked,
    optional,
    readers_code,
)
from .data import TranslationData
from .lm import detach_state
from .utils import as_device, get_device, seed_everything
from .vsa_models import codebook_loss


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
        clip: clip the global gradient norm to this value, a number >= 0. ``None``, ``0`` and
            ``inf`` all mean no clipping (the norm is still recorded).
        device: where to train; default :func:`seqbook.utils.get_device`.
        seed: seeds every generator before training (None: leave them alone).
        eval_fn: ``eval_fn(model) -> float``, called every ``eval_every`` steps and at the end,
            in eval mode under ``torch.no_grad()``.
        eval_every: an int >= 0; 0 evaluates only at the end (also ignored without ``eval_fn``).
        progress: show a tqdm progress bar (never when the environment sets ``TQDM_DISABLE``).

    ``lr = 0`` is legal (the parameters do not move). ``batches`` must yield at least one batch;
    an iterator that runs out before ``steps`` (a generator, say) cannot be cycled and is an error.

    ``loss_fn`` and ``eval_fn`` are the reader's code: the package functions they call check their
    arguments (a model's ids against its vocabulary, say) even when ``fit`` runs inside another
    checked call such as :func:`train_lm` (:func:`seqbook.checks.readers_code`).

    Returns:
        A :class:`History` with the per-step losses, the evaluations and the gradient norms.
    """
    check_module("model", model)
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable as loss_fn(model, batch), got {type(loss_fn).__name__}")
    if isinstance(batches, (str, bytes)) or not isinstance(batches, Iterable):
        raise TypeError(f"batches must be an iterable of batches, got {type(batches).__name__}")
    steps = check_int("steps", steps, 1)
    lr = check_number("lr", lr, low=0.0)
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}")
    if scheduler is not None and not callable(getattr(scheduler, "step", None)):
        raise TypeError(f"scheduler must have a step() method (an LRScheduler) or be None, "
                        f"got {type(scheduler).__name__}")
    clip = math.inf if clip is None else check_number("clip", clip, low=0.0, allow_inf=True)
    if eval_fn is not None and not callable(eval_fn):
        raise TypeError(f"eval_fn must be callable as eval_fn(model) or None, got {type(eval_fn).__name__}")
    eval_every = check_int("eval_every", eval_every, 0)
    progress = check_flag("progress", progress)
    check_str("desc", desc)
    if optimizer is None and not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"model has no trainable parameters to optimise ({type(model).__name__})")
    device = as_device("device", device) if device is not None else get_device()
    if seed is not None:
        seed_everything(seed)
    model.to(device)
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=lr)
    history = History()

    def evaluate_vsa(step: int) -> None:
        model.eval()
        with torch.no_grad():
            history.eval_step.append(step)
            with readers_code():
                value = eval_fn(model)
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = value.item()
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"eval_fn must return a number, got {type(value).__name__}")
            history.eval_loss.append(float(value))
        model.train()

    def next_batch(iterator, step: int):
        try:
            return iterator, next(iterator)
        except StopIteration:
            pass
        if step == 1:
            raise ValueError("batches must yield at least one batch, got an empty iterable") from None
        iterator = iter(batches)
        try:
            return iterator, next(iterator)
        except StopIteration:
            raise ValueError(f"batches ran out after {step - 1} steps and cannot start again (an iterator "
                             "or generator); pass a list or an endless generator") from None

    model.train()
    iterator = iter(batches)
    # an explicit disable= overrides tqdm's own TQDM_DISABLE variable, so honour it here
    disable = not progress or bool(os.environ.get("TQDM_DISABLE"))
    bar = tqdm(range(1, steps + 1), desc=desc, disable=disable, leave=False)
    for step in bar:
        iterator, batch = next_batch(iterator, step)
        with readers_code():  # the reader's loss and model: their calls into seqbook are checked
            loss = loss_fn(model, _to_device(batch, device))
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            got = f"shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise ValueError(f"loss_fn must return a scalar loss tensor, got {got}")
        if not loss.requires_grad:
            raise ValueError("loss_fn must return a loss that depends on the model's parameters "
                             "(it does not require grad)")
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss became {loss.item()} at step {step}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), clip if clip else math.inf)  # 0: no clipping
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        history.step_loss.append(loss.item())
        history.grad_norm.append(float(norm))
        if eval_fn is not None and eval_every and step % eval_every == 0 and step != steps:
            evaluate_vsa(step)
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    if eval_fn is not None:
        evaluate_vsa(steps)
    model.eval()
    return history


def random_batches(*tensors: torch.Tensor, batch_size: int, generator: torch.Generator | None = None):
    """An endless stream of random mini-batches drawn (without replacement per epoch) from tensors
    that share their first dimension.

    ``batch_size`` is an int in [1, N]: each epoch yields the N // batch_size full batches of a
    fresh permutation (the remainder is left out). The arguments are checked when it is called,
    before the first batch is asked for.
    """
    if not tensors:
        raise ValueError("tensors must hold at least one tensor, got none")
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensors[{i}] must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() == 0:
            raise ValueError(f"tensors[{i}] must have a first (example) dimension, got shape ()")
    n = tensors[0].shape[0]
    for t in tensors:
        if t.shape[0] != n:
            raise ValueError(f"all tensors must share dim 0: got {[tuple(x.shape) for x in tensors]}")
    if n == 0:
        shapes = [tuple(x.shape) for x in tensors]
        raise ValueError(f"tensors must hold at least one example, got shapes {shapes}")
    batch_size = check_int("batch_size", batch_size, 1)
    if batch_size > n:
        raise ValueError(f"batch_size must be <= the number of examples {n}, got {batch_size}")
    check_generator("generator", generator)
    return _random_batches(tensors, n, batch_size, generator)


def _random_batches(tensors, n: int, batch_size: int, generator):
    while True:
        order = torch.randperm(n, generator=generator)
        for start in range(0, n - batch_size + 1, batch_size):
            idx = order[start : start + batch_size]
            yield tuple(t[idx] for t in tensors)


# ---------------------------------------------------------------------------------------------
# Learning-rate schedules: the warm-up of Vaswani et al. (2017) and its variants.
# ---------------------------------------------------------------------------------------------


def noam_lr(step: int, embed_dim: int, warmup_steps: int) -> float:
    """The learning rate of Vaswani et al. (2017), section 5.3::

        lr(step) = embed_dim^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

    It grows linearly for ``warmup_steps`` steps, peaks at ``(embed_dim * warmup_steps)^-0.5`` and
    then decays as ``1/sqrt(step)``. Steps count from 1 (step 0 is treated as step 1; a negative
    step is an error).
    """
    step = check_int("step", step, minimum=0)
    embed_dim = check_positive_int("embed_dim", embed_dim)
    warmup_steps = check_int("warmup_steps", warmup_steps, minimum=None)
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be >= 1, got {warmup_steps}")
    step = max(int(step), 1)
    return embed_dim**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def warmup_factor(step: int, warmup_steps: int, total_steps: int | None = None, kind: str = "cosine",
                  min_factor: float = 0.0) -> float:
    """The multiplier of the peak learning rate at optimiser step ``step`` (counting from 0).

    Linear warm-up from ``1/warmup_steps`` to 1 over the first ``warmup_steps`` steps, then

    - ``"inverse_sqrt"``: ``sqrt(warmup_steps / (step + 1))``, the shape of :func:`noam_lr`;
    - ``"cosine"``: half a cosine from 1 down to ``min_factor`` at ``total_steps``;
    - ``"linear"``: a straight line from 1 down to ``min_factor`` at ``total_steps``;
    - ``"constant"``: 1.

    ``warmup_steps=0`` skips the warm-up. ``min_factor`` is in [0, 1].
    """
    step = check_int("step", step, minimum=0)
    warmup_steps = check_int("warmup_steps", warmup_steps, minimum=None)
    if total_steps is not None:
        total_steps = check_int("total_steps", total_steps)
    min_factor = check_number("min_factor", min_factor, 0.0, 1.0)
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
    if kind not in ("inverse_sqrt", "cosine", "linear", "constant"):
        raise ValueError(f"kind must be 'inverse_sqrt', 'cosine', 'linear' or 'constant', got {kind!r}")
    if kind in ("cosine", "linear") and (total_steps is None or total_steps <= warmup_steps):
        raise ValueError(f"kind={kind!r} needs total_steps > warmup_steps, got {total_steps}")
    s = step + 1  # the number of steps taken once this one is done
    if s <= warmup_steps:
        return s / warmup_steps
    if kind == "inverse_sqrt":
        return math.sqrt(warmup_steps / s) if warmup_steps else 1.0 / math.sqrt(s)
    if kind == "constant":
        return 1.0
    progress = min(1.0, (s - warmup_steps) / (total_steps - warmup_steps))
    decay = 0.5 * (1 + math.cos(math.pi * progress)) if kind == "cosine" else 1 - progress
    return min_factor + (1 - min_factor) * decay


def warmup_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int | None = None,
                    kind: str = "cosine", min_factor: float = 0.0) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` that multiplies the optimiser's learning rate by :func:`warmup_factor`.

    Step it once per optimiser step (``seqbook.train.fit`` does). With ``kind="inverse_sqrt"`` and
    a peak learning rate of ``(embed_dim * warmup_steps)^-0.5`` it reproduces :func:`noam_lr`.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    warmup_factor(0, warmup_steps, total_steps, kind, min_factor)  # validate the arguments now
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_factor(step, warmup_steps, total_steps, kind, min_factor)
    )


# ---------------------------------------------------------------------------------------------
# Training loops of the chapters' models: truncated BPTT for language models, and translation.
# ---------------------------------------------------------------------------------------------


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy of next-token logits (B, T, V) against targets (B, T). Unchecked."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class ChunksInOrder:
    """The chunks of :func:`seqbook.data.lm_chunks` in order, as ``(k, inputs[k], targets[k])``.

    Iterable again and again (one pass each time), so :func:`seqbook.train.fit` can cycle
    through the text; ``k = 0`` starts a new pass.
    """

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor):
        check_tensor("inputs", inputs, ndim=3, names="(num_chunks, B, T)")  # not empty: a pass visits
        check_tensor("targets", targets, shape=tuple(inputs.shape),       # at least one chunk
                     names=f"{tuple(inputs.shape)}, the shape of inputs")
        self.inputs, self.targets = inputs, targets

    def __iter__(self) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        for k in range(self.inputs.shape[0]):
            yield k, self.inputs[k], self.targets[k]


def _check_train_lm(model, inputs, targets) -> None:
    check_lm_chunks(inputs, targets, model)  # at least one chunk of at least one token
    size = getattr(getattr(model, "config", None), "vocab_size", None)  # a GPT states it in its config
    if isinstance(size, int) and not isinstance(getattr(model, "vocab_size", None), int):
        check_ids("inputs", inputs, size)
        check_ids("targets", targets, size)


@checked(_check_train_lm)
def train_lm(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    steps: int,
    lr: float = 3e-3,
    clip: float | None = 1.0,
    device: torch.device | str | None = None,
    seed: int | None = 0,
    eval_fn=None,
    eval_every: int = 0,
    progress: bool = True,
    desc: str = "lm",
    optimizer: torch.optim.Optimizer | None = None,
) -> History:
    """Train a recurrent language model with truncated backpropagation through time.

    The chunks are visited in order, so row b of chunk k continues row b of chunk k-1 and the final
    state of one chunk is the initial state of the next: the model sees the whole text as one long
    sequence. Before each chunk the state is detached (gradients flow back at most T steps), and
    at the start of every pass over the text it is reset to zeros. Gradients are clipped to
    global norm ``clip``. The optimiser is AdamW (or ``optimizer``); the loop is
    :func:`seqbook.train.fit`.

    Args:
        model: ``model(ids, state) -> (logits, state)``, e.g. :class:`CharLM`.
        inputs, targets: (num_chunks, B, T) from :func:`seqbook.data.lm_chunks`, at least one
            chunk; every id in [0, vocab_size) when the model states its ``vocab_size`` (or its
            ``config.vocab_size``), and the model checks its inputs at every step.
        steps: optimiser steps (one chunk each).

    Returns:
        The :class:`seqbook.train.History` of per-step losses (mean cross-entropy in nats).
    """
    carried = {"state": None}

    def loss_fn(model, batch):
        k, x, y = batch
        state = None if k == 0 else detach_state(carried["state"])
        logits, carried["state"] = model(x, state)
        return lm_loss(logits, y)

    return fit(
        model,
        loss_fn,
        ChunksInOrder(inputs, targets),
        steps=steps,
        lr=lr,
        optimizer=optimizer,
        clip=clip,
        device=device,
        seed=seed,
        eval_fn=eval_fn,
        eval_every=eval_every,
        progress=progress,
        desc=desc,
    )


def _embedding_rows(module) -> int | None:
    return module.num_embeddings if isinstance(module, nn.Embedding) else None


def _check_vocab_sizes(model: nn.Module, data: TranslationData) -> None:
    """The vocabularies of ``data`` fit the model's embeddings (:class:`seqbook.seq2seq.Seq2Seq`
    or :class:`seqbook.transformer.Seq2SeqTransformer`): checked once for all the data, not for
    the batches that happen to be drawn."""
    encoder, decoder = getattr(model, "encoder", None), getattr(model, "decoder", None)
    sizes = {"src_vocab": _embedding_rows(getattr(model, "src_embed", getattr(encoder, "embedding", None))),
             "tgt_vocab": _embedding_rows(getattr(model, "tgt_embed", getattr(decoder, "embedding", None)))}
    for name, rows in sizes.items():
        n = len(getattr(data, name))
        if rows is not None and n > rows:
            side = "source" if name == "src_vocab" else "target"
            raise ValueError(f"data.{name} must fit the model's {side} vocabulary of {rows} ids, got "
                             f"{n} tokens")


def fit_seq2seq(model: nn.Module, data: TranslationData, steps: int, batch_size: int = 128,
                lr: float = 5e-3, seed: int = 0, device=None, progress: bool = True,
                desc: str = "seq2seq") -> History:
    """Train ``model`` (anything with ``loss(src, src_lengths, tgt)``) on ``data.train``.

    Adam with a one-cycle learning-rate schedule (warm up to ``lr`` over the first 10% of the
    steps, then anneal), gradient clipping at 1, length-bucketed batches; see
    :func:`seqbook.train.fit`. Deterministic for a given ``seed``.
    """
    if not callable(getattr(model, "loss", None)) or not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module with a loss(src, src_lengths, tgt) method, got "
                        f"{type(model).__name__}")
    _check_model(model)  # parameters for the optimiser
    if not isinstance(data, TranslationData):
        raise TypeError(f"data must be a TranslationData, got {type(data).__name__}")
    if not data.train:
        raise ValueError(f"data.train must hold at least one (source, target) pair, got {data.train!r}")
    steps, seed = check_int("steps", steps), check_int("seed", seed, minimum=None)
    batch_size = check_int("batch_size", batch_size, maximum=len(data.train))
    lr = check_number("lr", lr, low=0.0, low_open=True)
    _check_vocab_sizes(model, data)
    generator = torch.Generator().manual_seed(seed)
    src, src_lengths, tgt = data.tensors("train")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps, pct_start=0.1)
    return fit(model, lambda m, batch: m.loss(*batch),
               bucket_batches(src, src_lengths, tgt, batch_size, generator),
               steps=steps, optimizer=optimizer, scheduler=schedule, clip=1.0, device=device, seed=seed,
               progress=progress, desc=desc)


# ---------------------------------------------------------------------------------------------
# Training the VSA classifiers of chapter 8 (RMSprop, as the authors' code).
# ---------------------------------------------------------------------------------------------


def _similarities(model: nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
    with readers_code():  # the reader's model checks its inputs, called from inside seqbook too
        out = model(*inputs)
    return out[0] if isinstance(out, tuple) else out  # attention models also return their scores


def vsa_loss(model: nn.Module, batch) -> torch.Tensor:
    """``loss_fn`` for :func:`seqbook.train.fit`: mean(1 - similarity to the true class symbol).

    ``batch`` is ``(*inputs, labels)``: ``(images, labels)``, or ``(symbols, mask, labels)``."""
    *inputs, labels = batch
    return codebook_loss(_similarities(model, *inputs), labels)


def _check_model(model) -> None:
    check_module("model", model)
    if next(model.parameters(), None) is None:
        raise ValueError(f"model must have parameters (they give the device), got {type(model).__name__}")


def _check_split(name: str, tensors: tuple, labels: bool) -> int:
    """``tensors`` (named ``name``): a tuple of tensors with one first dimension N >= 1, the last one
    integer labels (N,) when ``labels``; returns N."""
    if not isinstance(tensors, (tuple, list)):
        raise TypeError(f"{name} must be a tuple of tensors {'(*inputs, labels)' if labels else ''}, "
                        f"got {type(tensors).__name__}")
    if len(tensors) < (2 if labels else 1):
        what = "(*inputs, labels): at least two tensors" if labels else "at least one tensor"
        raise ValueError(f"{name} must hold {what}, got {len(tensors)}")
    for i, t in enumerate(tensors):
        check_tensor(f"{name}[{i}]", t, ndim=range(1, 100), names="(N, ...)", nonempty=False)
    n = tensors[0].shape[0]
    if any(t.shape[0] != n for t in tensors) or n == 0:
        raise ValueError(f"{name} must hold tensors that share their first dimension N >= 1, got shapes "
                         f"{[tuple(t.shape) for t in tensors]}")
    if labels:
        check_ids(f"{name}[{len(tensors) - 1}]", tensors[-1], shape=(n,), names=f"({n},) (labels)")
    return n


def _check_predict(model, *inputs, batch_size=1000) -> None:
    _check_model(model)
    _check_split("inputs", inputs, labels=False)
    check_positive_int("batch_size", batch_size)


@checked(_check_predict)
@torch.no_grad()
def predict_similarities(model: nn.Module, *inputs: torch.Tensor, batch_size: int = 1000) -> torch.Tensor:
    """The similarities to every class symbol (N, C) for a whole split, in eval mode, on the CPU.

    ``inputs`` are the model's inputs for N examples (e.g. images, or symbols and their mask);
    ``batch_size`` (an int >= 1) of them go through the model at a time."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    sims = [_similarities(model, *(x[start:start + batch_size].to(device) for x in inputs)).cpu()
            for start in range(0, len(inputs[0]), batch_size)]
    model.train(was_training)
    return torch.cat(sims)


def _check_labels_fit(model, **splits) -> None:
    """The labels (the last tensor) of every split index the model's class symbols, when it has a
    codebook: checked for the whole split, not for the rows that happen to be drawn."""
    codes = getattr(getattr(model, "codebook", None), "codes", None)
    if isinstance(codes, torch.Tensor):
        for name, split in splits.items():
            check_ids(f"{name}[{len(split) - 1}]", split[-1], codes.shape[0])


def _check_evaluate(model, *data, batch_size=1000) -> None:
    _check_model(model)
    _check_split("data", data, labels=True)
    _check_labels_fit(model, data=data)
    check_positive_int("batch_size", batch_size)


@checked(_check_evaluate)
@torch.no_grad()
def evaluate_vsa(model: nn.Module, *data: torch.Tensor, batch_size: int = 1000) -> tuple[float, float]:
    """Accuracy (nearest class symbol) and mean loss over a whole split ``(*inputs, labels)``;
    returns ``(accuracy, loss)``. Every label must lie in [0, C) for the model's C classes."""
    *inputs, labels = data
    sims = predict_similarities(model, *inputs, batch_size=batch_size)
    labels = labels.cpu()
    loss = float(codebook_loss(sims, labels))  # checks every label against the C classes
    correct = int((sims.argmax(-1) == labels).sum())
    return correct / len(labels), loss


@dataclass
class VSARun:
    """What one training run returns: the history, evaluations along the way and the test result."""

    history: History
    eval_steps: list[int] = field(default_factory=list)
    eval_accuracy: list[float] = field(default_factory=list)
    test_accuracy: float = float("nan")
    test_loss: float = float("nan")
    seconds: float = 0.0


def _check_train_vsa(model, train, test, batch_size, device) -> None:
    """The arguments that need the data or the model, before anything runs; the labels of both
    splits whole (not the rows that happen to be sampled), against the model's classes when it has a
    codebook."""
    _check_model(model)
    n = _check_split("train", train, labels=True)
    _check_split("test", test, labels=True)
    if len(test) != len(train):
        raise ValueError(f"test must hold as many tensors as train, {len(train)}, got {len(test)}")
    _check_labels_fit(model, train=train, test=test)  # the paper's models: labels index their classes
    batch_size = check_positive_int("batch_size", batch_size)
    if batch_size > n:
        raise ValueError(f"batch_size must be <= the {n} examples of train, got {batch_size}")
    if device is not None:
        as_device("device", device)


@checked(_check_train_vsa, steps=check_positive_int, lr=partial(check_number, low=0.0),
         alpha=partial(check_number, low=0.0, high=1.0, high_open=True),
         eps=partial(check_number, low=0.0, low_open=True),
         clip=optional(partial(check_number, low=0.0, allow_inf=True)), seed=partial(check_int, minimum=None),
         eval_every=check_count, eval_size=check_positive_int, progress=check_flag,
         desc=check_str)
def train_vsa(model: nn.Module, train: tuple[torch.Tensor, ...],
              test: tuple[torch.Tensor, ...], steps: int, batch_size: int = 128,
              lr: float = 1e-3, alpha: float = 0.9, eps: float = 1e-8, clip: float | None = None,
              device: torch.device | str | None = None, seed: int = 0, eval_every: int = 0,
              eval_size: int = 1000, progress: bool = True, desc: str = "vsa") -> VSARun:
    """Train with RMSprop (the optimiser of the authors' code: learning rate ``lr``, smoothing
    ``alpha``) on random mini-batches of ``train`` and measure accuracy on the whole of ``test`` at
    the end. ``train`` and ``test`` are ``(*inputs, labels)``: ``(images, labels)``, or
    ``(symbols, mask, labels)`` for encoded molecules.

    Every ``eval_every`` steps (0: never) the accuracy on the first ``eval_size`` test images is
    recorded, for learning curves (``eval_size`` an int >= 1; all of them if there are fewer).

    Every argument is checked before training starts (``eval_size`` too when ``eval_every`` is 0):
    ``lr`` >= 0, ``alpha`` in [0, 1), ``eps`` > 0, ``batch_size`` in [1, N] for the N training
    examples, and every label of both splits in [0, C) for the model's C classes.
    """
    device = as_device("device", device) if device is not None else get_device()
    generator = seed_everything(seed)
    model.to(device)
    # Shuffling uses a seeded CPU generator: the same batches on every device.
    batches = random_batches(*(t.to(device) for t in train), batch_size=batch_size, generator=generator)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=lr, alpha=alpha, eps=eps)
    run = VSARun(history=History())
    held_out = [t[:eval_size] for t in test]

    def eval_fn(m: nn.Module) -> float:
        acc, loss = evaluate_vsa(m, *held_out)
        run.eval_accuracy.append(acc)
        return loss

    start = time.perf_counter()
    run.history = fit(model, vsa_loss, batches, steps, optimizer=optimizer, clip=clip, device=device,
                      seed=None, eval_fn=eval_fn if eval_every else None, eval_every=eval_every,
                      progress=progress, desc=desc)
    run.eval_steps = list(run.history.eval_step)
    run.test_accuracy, run.test_loss = evaluate_vsa(model, *test)
    run.seconds = time.perf_counter() - start
    return run
