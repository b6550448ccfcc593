"""Small helpers every chapter uses: pick a device, seed every random generator."""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def get_device() -> torch.device:
    """Return the best available device: CUDA, then Apple's MPS, then the CPU.

    Set the environment variable ``SEQBOOK_DEVICE`` (e.g. ``cpu``) to override the choice.
    """
    forced = os.environ.get("SEQBOOK_DEVICE")
    if forced:
        return torch.device(forced)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's ``random``, NumPy and PyTorch (CPU and every GPU).

    Returns a ``torch.Generator`` seeded with the same value, handy for data shuffling
    that must not depend on how many random numbers the model consumed.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def count_parameters(model: torch.nn.Module) -> int:
    """Number of trainable parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def small_model_threads(device: torch.device | str, threads: int = 1) -> None:
    """On the CPU, run PyTorch with ``threads`` threads (default one); elsewhere do nothing.

    The book's models are small, and for small tensors extra CPU threads buy little: the work per
    operation is too short to split. On a machine whose cores are busy with other work, threads that
    wait for each other can make a training run many times slower. On a GPU the setting is irrelevant.
    """
    if torch.device(device).type == "cpu":
        torch.set_num_threads(threads)
