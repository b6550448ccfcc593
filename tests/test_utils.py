import random

import numpy as np
import pytest
import torch

from seqbook.utils import count_parameters, get_device, seed_everything


def test_seed_everything_repeats_every_generator():
    seed_everything(123)
    a = (random.random(), np.random.rand(), torch.rand(3))
    seed_everything(123)
    b = (random.random(), np.random.rand(), torch.rand(3))
    assert a[0] == b[0] and a[1] == b[1] and torch.equal(a[2], b[2])


def test_seed_everything_returns_a_seeded_generator():
    g1, g2 = seed_everything(7), seed_everything(7)
    assert torch.equal(torch.rand(4, generator=g1), torch.rand(4, generator=g2))


def test_seed_everything_rejects_non_int():
    with pytest.raises(TypeError, match="seed must be an int"):
        seed_everything("7")


def test_get_device(monkeypatch):
    monkeypatch.delenv("SEQBOOK_DEVICE", raising=False)
    device = get_device()
    assert device.type in {"cpu", "cuda", "mps"}
    assert (device.type == "cuda") == torch.cuda.is_available()
    monkeypatch.setenv("SEQBOOK_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")


def test_count_parameters():
    model = torch.nn.Linear(3, 2)
    assert count_parameters(model) == 8
    model.bias.requires_grad_(False)
    assert count_parameters(model) == 6


def test_small_model_threads_sets_cpu_threads_only():
    from seqbook.utils import small_model_threads

    before = torch.get_num_threads()
    try:
        small_model_threads("cpu", threads=1)
        assert torch.get_num_threads() == 1
        small_model_threads("meta", threads=3)  # not the CPU: left alone
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
