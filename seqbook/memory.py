"""What a training step holds in memory: the tensors autograd saves for the backward pass.

A training step holds the **weights**; the **optimizer's states** (AdamW keeps two numbers a
weight, its moving averages m and v); the **gradients** of the weights, written during the backward
pass; the **activations**, the intermediate results that the forward pass saves because the
backward pass needs them (a matrix product ``x @ W`` saves ``x`` to compute ``W``'s gradient, a
GELU saves its input, an attention kernel its queries, keys, values, output and each row's
log-sum-exp); and, during the backward pass, the **gradients of the activations**, each until the
layer below has used it. With bf16 autocast the weights, gradients and AdamW's states are float32,
4 + 4 + 8 = 16 bytes a weight (Rajbhandari et al., 2020, count the same 16 for mixed precision with
float16 copies), and autocast keeps a bf16 copy of every weight that a matrix product reads.

The first three are fixed by the model; the activations grow with the tokens of a step, and for
a GPT of any useful batch they are most of the memory. :func:`saved_tensor_bytes` counts them: it
runs a forward pass under :func:`torch.autograd.graph.saved_tensors_hooks`, which hands every
tensor autograd saves to a function of ours before it is kept, and adds up the bytes of their
storages, each storage once (a view saves its base, and one tensor may be saved by two
operations). ``torch.compile``'s graphs save through the same hooks, so the same count shows
what the compiler chooses to keep, and what it recomputes in the backward pass instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .checks import check_callable, check_module, checked, optional, readers_code

__all__ = ["saved_tensor_bytes"]


@checked(fn=check_callable, model=optional(check_module))
def saved_tensor_bytes(
    fn: Callable[[], Any], model: nn.Module | None = None
) -> tuple[Any, int]:
    """Run ``fn()`` and count the bytes of the tensors autograd saves for its backward pass.

    Each storage is counted once; the parameters of ``model``, which are held anyway, are not
    counted (a copy of one, such as autocast's bf16 copy of a weight, is). Returns ``fn()``'s
    result, so that the backward pass can still run, and the bytes.

    Example: ``loss, saved = saved_tensor_bytes(lambda: model(idx, targets)[1], model)``.
    """
    params = model.parameters() if model is not None else []
    held = {p.untyped_storage().data_ptr() for p in params}  # storage addresses
    counted = {}  # storage address -> bytes

    def pack(t):  # autograd calls this with every tensor it saves; we keep t as it is
        storage = t.untyped_storage()
        if storage.data_ptr() not in held:
            counted[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with readers_code():  # fn is the reader's code: its calls are checked
            out = fn()
    return out, sum(counted.values())
