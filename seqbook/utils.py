"""Small helpers every chapter uses: pick a device, seed every random generator, switch the fused
paths (:func:`set_fast`) and print the package's code (:func:`show_source`)."""

from __future__ import annotations

import ast
import inspect
import os
import platform
import random
import subprocess
import textwrap

import numpy as np
import torch

from .checks import check_flag, check_int

# Every seed that Python, NumPy (taken mod 2**32) and torch.manual_seed all accept.
_SEED_MIN, _SEED_MAX = -(2**63), 2**64 - 1


def as_device(name: str, device) -> torch.device:
    """``torch.device(device)``, with a clear error for a bad name or an absent accelerator."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"{name} must be a str or torch.device such as 'cpu' or 'cuda', "
                        f"got {type(device).__name__} {device!r}")
    try:
        device = torch.device(device)
    except RuntimeError:
        raise ValueError(f"{name} must name a torch device such as 'cpu' or 'cuda', got {device!r}") from None
    mps = getattr(torch.backends, "mps", None)
    available = {"cuda": torch.cuda.is_available(), "mps": mps is not None and mps.is_available()}
    if not available.get(device.type, True):
        raise ValueError(f"{name} is {str(device)!r}, but this machine has no {device.type} device")
    return device


def get_device() -> torch.device:
    """Return the best available device: CUDA, then Apple's MPS, then the CPU.

    Set the environment variable ``SEQBOOK_DEVICE`` (e.g. ``cpu``) to override the choice; a name
    torch does not know, or an accelerator this machine lacks, is an error.
    """
    forced = os.environ.get("SEQBOOK_DEVICE")
    if forced:
        return as_device("SEQBOOK_DEVICE", forced)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's ``random``, NumPy and PyTorch (CPU and every GPU).

    ``seed`` is a Python or NumPy integer in [-2**63, 2**64 - 1] (what ``torch.manual_seed``
    accepts; NumPy gets ``seed % 2**32``).

    Returns a ``torch.Generator`` seeded with the same value, handy for data shuffling
    that must not depend on how many random numbers the model consumed.
    """
    seed = check_int("seed", seed, minimum=_SEED_MIN, maximum=_SEED_MAX)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def cpu_name() -> str:
    """The CPU's model name as Linux reports it (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def code_commit(also: tuple[str, ...] = ()) -> str | None:
    """The git commit of the package's code, for the record of a result: ``SEQBOOK_COMMIT`` if
    set (a copy of the repository sent elsewhere names the commit it was copied from), else the
    checkout's ``HEAD``, with ``+dirty`` when ``seqbook/`` or ``benchmarks/`` (or a folder named
    in ``also``, e.g. ``"chapters"`` for a record of the notebooks) has uncommitted changes; None
    when neither is known."""
    if os.environ.get("SEQBOOK_COMMIT"):
        return os.environ["SEQBOOK_COMMIT"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=30)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "seqbook", "benchmarks", *also],
                               cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0 or not head.stdout.strip():
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def count_parameters(model: torch.nn.Module) -> int:
    """Number of trainable parameters of ``model``."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def small_model_threads(device: torch.device | str, threads: int = 1) -> None:
    """On the CPU, run PyTorch with ``threads`` threads (default one); elsewhere do nothing.

    The book's models are small, and for small tensors extra CPU threads buy little: the work per
    operation is too short to split. On a machine whose cores are busy with other work, threads that
    wait for each other can make a training run many times slower. On a GPU the setting is irrelevant.
    """
    threads = check_int("threads", threads)
    if as_device("device", device).type == "cpu":
        torch.set_num_threads(threads)


def set_fast(model: torch.nn.Module, fast: bool) -> torch.nn.Module:
    """Switch every part of ``model`` that has a fused twin to the fused (``fast=True``) or the
    readable (``fast=False``) computation, and return ``model``.

    The parts with a ``fast`` switch are the recurrent cells and layers of :mod:`seqbook.rnn` (and
    so the language models, classifiers and encoder-decoders built from them),
    :class:`~seqbook.attention.MultiHeadAttention` (and so every transformer layer) and the VSA
    attention blocks. Both computations use the same parameters and give the same values (the tests
    check it), so the switch may be flipped at any time. Every such module defaults to
    ``fast=False``: what runs is the code the chapters print, unless a chapter asks for speed.

    Raises:
        TypeError: ``model`` is not an ``nn.Module`` or ``fast`` is not a bool.
        ValueError: ``model`` contains no module with a ``fast`` switch (the call would do nothing).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    fast = check_flag("fast", fast)
    switched = 0
    for m in model.modules():
        if isinstance(getattr(m, "fast", None), bool):
            m.fast = fast
            switched += 1
    if not switched:
        raise ValueError(f"model has no module with a fast switch (a fused twin path), got "
                         f"{type(model).__name__}")
    return model



def show_source(obj, docstring: bool = True) -> None:
    """Print the source code of a function, method or class, the way the chapters show the package:
    whole, without the ``@checked(...)`` line that runs its argument checks (they live in the
    validator, which is not printed).

    Args:
        obj: a function, method or class (of seqbook or anything else with Python source).
        docstring: ``False`` leaves the docstring out.

    Raises:
        TypeError: ``obj`` has no source (a built-in, a lambda defined in a notebook cell, ...).
    """
    print(_source_text(obj, docstring), end="")


def _source_text(obj, docstring: bool = True) -> str:
    docstring = check_flag("docstring", docstring)
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (TypeError, OSError) as err:
        raise TypeError(f"obj must be a function, method or class with Python source, got {obj!r}") from err
    lines = source.splitlines(keepends=True)
    node = ast.parse(source).body[0]
    # @checked(validator) runs the argument checks, which are not the math: its lines are left
    # out, on the object and on every method of a printed class.
    skip = set()
    for fn in ast.walk(node):
        for deco in getattr(fn, "decorator_list", []):
            if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "checked":
                skip.update(range(deco.lineno - 1, deco.end_lineno))
    first = node.body[0]
    has_doc = ast.get_docstring(node, clean=False) is not None
    body_start = first.end_lineno if has_doc else first.lineno - 1
    head = [line for i, line in enumerate(lines[: first.lineno - 1]) if i not in skip]
    doc = lines[first.lineno - 1 : first.end_lineno] if has_doc else []
    body = [line for i, line in enumerate(lines) if i >= body_start and i not in skip]
    return "".join(head + (doc if docstring else []) + body)
