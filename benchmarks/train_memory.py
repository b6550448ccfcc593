"""What GPT-2-small's training step saves for its backward pass, counted on the CPU, eager and compiled.

Run it from the root of the repository (about four minutes on two cores, most of it compiling)::

    python -m benchmarks.train_memory --json perf/train_memory.json

The model is the GPU throughput run's (:func:`benchmarks.gpu.gpt_throughput.gpt_config`: GPT-2-small,
tied embedding, tanh GELU, on the fused attention path) under bf16 autocast, as on the GPU. For
three ways of running its step, :func:`seqbook.memory.saved_tensor_bytes` counts the bytes autograd
saves in one forward pass, at batch 1 and three lengths:

* ``eager``: the model as the chapters run it;
* ``compiled``: ``torch.compile(model)``, as the GPU run times it; the model returns its logits
  and its loss, and the step differentiates the loss;
* ``compiled_loss_only``: the same model compiled inside a module that returns only the loss.

With the fused attention no saved tensor has a T x T shape, so everything saved grows in
proportion to the tokens: the differences between the lengths give the bytes a token (the script
checks that both differences agree), and the rest is what does not grow, autocast's bf16 copies of
the weights. For each way the backward pass is profiled once, to see whether it fills a gradient
of the logits with zeros: a compiled function's backward pass takes a gradient for each of its
outputs, and autograd fills the one for an output that the loss does not depend on (the returned
logits) with zeros, a tensor the size of the logits. Last, the peak of a whole forward and
backward pass is taken from the profiler's record of allocations, at batch 2 and 4 of 1024 tokens:
what the step holds at its peak beyond the tensors it saved, a token (``beyond_saved_per_token``)
and in all.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from seqbook.gpt import GPT
from seqbook.memory import saved_tensor_bytes
from seqbook.utils import set_fast

from .gpu.gpt_throughput import gpt_config
from .report import finish

LENGTHS = (64, 128, 192)
PEAK_BATCHES, PEAK_LENGTH = (2, 4), 1024  # the peak of a whole step: at 2048 and 4096 tokens


class LossOnly(nn.Module):
    """A model that returns (logits, loss), returning (None, loss): compiled, its graph's only
    output is the loss."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, idx, targets):
        return None, self.model(idx, targets)[1]


def zero_filled(loss: torch.Tensor, shape: list[int]) -> bool:
    """Run ``loss.backward()`` under the profiler: whether it fills a tensor of ``shape`` with
    zeros (``aten::zero_`` or ``aten::fill_``)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        loss.backward()
    return any(e.name in ("aten::zero_", "aten::fill_") and e.input_shapes
               and list(e.input_shapes[0]) == shape for e in prof.events())


def largest_saved(fn, model: nn.Module, T: int, most: int = 6) -> list[list]:
    """The ``most`` largest of the tensors that autograd saves while ``fn()`` runs over T tokens
    and that grow with them (a dimension of T; so no copy of a weight), as ``[dtype, shape,
    bytes]``: what the bytes a token are made of."""
    held = {p.untyped_storage().data_ptr() for p in model.parameters()}
    found = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in held and T in t.shape:
            found[s.data_ptr()] = [str(t.dtype).removeprefix("torch."), list(t.shape), s.nbytes()]
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn().backward()
    model.zero_grad(set_to_none=True)
    return sorted(found.values(), key=lambda r: -r[2])[:most]


def count(step_model: nn.Module, model: nn.Module, T: int, vocab_size: int) -> tuple[int, bool, Callable]:
    """Bytes saved by one forward pass of ``step_model`` at batch 1 and length T, whether its
    backward pass zero-fills a tensor the size of the logits, and the forward pass itself."""
    gen = torch.Generator().manual_seed(T)
    idx, targets = (torch.randint(vocab_size, (1, T), generator=gen) for _ in range(2))

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return step_model(idx, targets)[1]

    loss, saved = saved_tensor_bytes(forward, model)
    filled = zero_filled(loss, [1, T, vocab_size])
    model.zero_grad(set_to_none=True)
    return saved, filled, forward


def step_peak(step_model: nn.Module, model: nn.Module, batch: int, T: int, vocab_size: int
              ) -> tuple[int, int]:
    """The most memory that a forward and backward pass of ``step_model`` over ``batch`` x T
    tokens held at once, above what was held before it (the weights), and the bytes that its
    forward pass saved: from the allocations and frees that ``torch.profiler`` records with
    ``profile_memory=True``, added up in order (PyTorch's memory timeline; its private
    ``_memory_profile``, as ``export_memory_timeline`` reads it)."""
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import Action, MemoryProfileTimeline
    gen = torch.Generator().manual_seed(batch * T)
    idx, targets = (torch.randint(vocab_size, (batch, T), generator=gen) for _ in range(2))

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return step_model(idx, targets)[1]

    loss, saved = saved_tensor_bytes(forward, model)  # compiles for this shape, if compiled
    loss.backward()
    model.zero_grad(set_to_none=True)  # as the GPU run's steps do: no gradient held before
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 with_stack=True) as prof:
        forward().backward()
    model.zero_grad(set_to_none=True)
    held = top = 0
    for _, action, _, size in MemoryProfileTimeline(prof._memory_profile()).timeline:
        held += {Action.CREATE: size, Action.DESTROY: -size}.get(action, 0)
        top = max(top, held)
    return top, saved


def measure(way: str, model: nn.Module, vocab_size: int) -> dict:
    if way == "eager":
        step_model = model
    elif way == "compiled":
        step_model = torch.compile(model, dynamic=False)
    else:
        step_model = torch.compile(LossOnly(model), dynamic=False)
    t0 = time.perf_counter()
    counts = [count(step_model, model, T, vocab_size) for T in LENGTHS]
    largest = largest_saved(counts[-1][2], model, LENGTHS[-1])  # at the longest length
    saved = [c[0] for c in counts]
    filled = [c[1] for c in counts]
    steps = [(b - a) / (T1 - T0) for a, b, T0, T1 in
             zip(saved, saved[1:], LENGTHS, LENGTHS[1:], strict=False)]  # bytes a token
    if len(set(steps)) != 1 or steps[0] != int(steps[0]):
        raise RuntimeError(f"{way}: the bytes saved do not grow in proportion to the tokens: "
                           f"{dict(zip(LENGTHS, saved, strict=True))}")
    peaks = [step_peak(step_model, model, b, PEAK_LENGTH, vocab_size) for b in PEAK_BATCHES]
    tokens = [b * PEAK_LENGTH for b in PEAK_BATCHES]
    beyond = [top - saved_ for top, saved_ in peaks]  # held at the peak besides the saved
    beyond_per_token = (beyond[1] - beyond[0]) / (tokens[1] - tokens[0])
    torch._dynamo.reset()
    per_token = int(steps[0])
    return {"saved_bytes": {str(T): s for T, s in zip(LENGTHS, saved, strict=True)},
            "bytes_per_token": per_token,
            "fixed_bytes": saved[0] - per_token * LENGTHS[0],
            "logits_gradient_zero_filled": all(filled),
            "zero_filled_at": [T for T, f in zip(LENGTHS, filled, strict=True) if f],
            "largest_saved": largest,
            "peak": {"tokens": tokens, "peak_bytes": [p for p, _ in peaks],
                     "saved_bytes": [s for _, s in peaks],
                     "beyond_saved_per_token": round(beyond_per_token, 1),
                     "beyond_saved_fixed": round(beyond[0] - beyond_per_token * tokens[0])},
            "seconds": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", type=Path, default=None, help="write the result here")
    p.add_argument("--ways", default="eager,compiled,compiled_loss_only",
                   help="comma-separated: eager, compiled, compiled_loss_only")
    args = p.parse_args(argv)
    started = time.perf_counter()
    config = gpt_config(dry=False)
    torch.manual_seed(0)
    model = set_fast(GPT(config), True)
    params = sum(p.numel() for p in model.parameters())
    matrices = sum(m.weight.numel() for m in model.modules()
                   if isinstance(m, nn.Linear))  # the weights a matrix product reads
    result = {
        "model": {"n_layer": config.n_layer, "n_head": config.n_head, "n_embd": config.n_embd,
                  "block_size": config.block_size, "vocab_size": config.vocab_size,
                  "activation": config.activation, "parameters": params,
                  "matrix_weights": matrices},
        "autocast": "bf16", "attention": "F.scaled_dot_product_attention (fast=True)",
        "lengths": list(LENGTHS), "batch": 1,
    }
    for way in args.ways.split(","):
        result[way] = measure(way, model, config.vocab_size)
        print(way, result[way], flush=True)
    # the GPU run of perf/gpt.json computed GELU exactly (up to commit a65c586): its compiled
    # graph saves the same bytes as the tanh GELU's counted here
    torch.manual_seed(0)
    exact = set_fast(GPT(dataclasses.replace(config, activation="gelu")), True)
    T = LENGTHS[0]
    result["compiled_exact_gelu"] = {
        "activation": "gelu", "length": T,
        "saved_bytes": count(torch.compile(exact, dynamic=False), exact, T, config.vocab_size)[0]}
    torch._dynamo.reset()
    print("compiled_exact_gelu", result["compiled_exact_gelu"], flush=True)
    return finish(result, torch.device("cpu"), started, "benchmarks.train_memory", argv, args.json)


if __name__ == "__main__":
    main()
