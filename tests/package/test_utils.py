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


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_small_model_threads_reads_the_device_as_every_function_does():
    from seqbook.utils import small_model_threads

    with pytest.raises(ValueError, match="device is 'cuda', but this machine has no cuda device"):
        small_model_threads("cuda")  # as_device's check, the package's one reading of a device


def _example(x, y=1):
    """Add, then scale.

    Shape: anything that broadcasts.
    """
    if x is None:
        raise ValueError("x")
    total = x + y  # the teaching line
    return 2 * total


def test_show_source_prints_whole_with_or_without_docstring(capsys):
    from seqbook.utils import show_source

    show_source(_example)
    whole = capsys.readouterr().out
    assert whole.startswith("def _example(x, y=1):\n") and '"""Add, then scale.' in whole
    assert whole.endswith("    return 2 * total\n")
    show_source(_example, docstring=False)
    bare = capsys.readouterr().out
    assert "Add, then scale" not in bare and "if x is None" in bare
    assert bare.endswith("    total = x + y  # the teaching line\n    return 2 * total\n")


def test_show_source_methods_are_dedented(capsys):
    from seqbook.rnn import GRUCell
    from seqbook.utils import show_source

    show_source(GRUCell.step)
    out = capsys.readouterr().out
    assert out.startswith("def step(self, xw") and "\n    z = torch.sigmoid" in out
    from seqbook.vsa import SelfAttentionBlock

    show_source(SelfAttentionBlock.forward)
    out = capsys.readouterr().out
    assert out.startswith("def forward(self, x") and "@checked" not in out  # its checks are not the math


def test_show_source_bad_input():
    from seqbook.utils import show_source

    with pytest.raises(TypeError, match="obj must be a function, method or class with Python source"):
        show_source(len)
    with pytest.raises(TypeError, match="docstring must be a bool, got str"):
        show_source(_example, docstring="no")
