"""Bad input for every public callable of ``seqbook.utils``: a clear error, or a correct edge result.

Cases: 24 rejected (each a ValueError/TypeError raised by seqbook that names the argument) and 7 legal
edge checks.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from seqbook import utils
from seqbook.rnn import GRU
from tests.badinput import BAD_FLAGS, assert_clear_error, table

ERRORS, case = table()
case("seed_everything-float", lambda: utils.seed_everything(1.5), "seed", "float")
case("seed_everything-None", lambda: utils.seed_everything(None), "seed", "NoneType")
case("seed_everything-bool", lambda: utils.seed_everything(True), "seed", "bool")
case("seed_everything-str", lambda: utils.seed_everything("1"), "seed", "str")
case("seed_everything-too-large", lambda: utils.seed_everything(2**64), "seed", "<=")
case("seed_everything-too-small", lambda: utils.seed_everything(-(2**63) - 1), "seed", ">=")
case("seed_everything-tensor", lambda: utils.seed_everything(torch.tensor(3)), "seed", "Tensor")
case("count_parameters-None", lambda: utils.count_parameters(None), "model", "NoneType")
case("count_parameters-tensor", lambda: utils.count_parameters(torch.zeros(3)), "model", "Tensor")
case("count_parameters-list", lambda: utils.count_parameters([nn.Linear(2, 2)]), "model", "list")
case("small_model_threads-threads-0", lambda: utils.small_model_threads("cpu", 0), "threads", ">= 1", "0")
case("small_model_threads-threads-negative", lambda: utils.small_model_threads("cpu", -2), "threads", "-2")
case("small_model_threads-threads-float", lambda: utils.small_model_threads("cpu", 1.5), "threads", "float")
case("small_model_threads-threads-bool", lambda: utils.small_model_threads("cpu", True), "threads", "bool")
case("small_model_threads-device-int", lambda: utils.small_model_threads(5), "device", "int")
case("small_model_threads-device-None", lambda: utils.small_model_threads(None), "device", "NoneType")
case("small_model_threads-device-unknown", lambda: utils.small_model_threads("gpu0"), "device", "'gpu0'")
case("set_fast-model-without-switch", lambda: utils.set_fast(nn.GRU(2, 2), True), "model", "fast switch")
for kind, value, word in BAD_FLAGS:
    case(f"set_fast-fast-{kind}", lambda v=value: utils.set_fast(GRU(2, 2), v), "fast", word)
    case(f"show_source-docstring-{kind}", lambda v=value: utils.show_source(utils.set_fast, docstring=v),
         "docstring", word)


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)


@pytest.mark.parametrize("value", ["not-a-device", "cuda:x"])
def test_get_device_bad_environment(monkeypatch, value):
    monkeypatch.setenv("SEQBOOK_DEVICE", value)
    assert_clear_error(utils.get_device, "SEQBOOK_DEVICE", repr(value))


@pytest.fixture
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_legal_edge_inputs(monkeypatch, keep_threads):
    monkeypatch.setenv("SEQBOOK_DEVICE", "cpu")
    assert utils.get_device() == torch.device("cpu")
    assert isinstance(utils.seed_everything(np.int64(3)), torch.Generator)
    a = torch.rand(2, generator=utils.seed_everything(-1))
    assert torch.equal(a, torch.rand(2, generator=utils.seed_everything(-1)))  # negative seeds are fine
    assert utils.count_parameters(nn.Identity()) == 0
    assert utils.count_parameters(nn.Linear(2, 3)) == 9
    utils.small_model_threads(torch.device("cpu"), np.int64(1))
    assert torch.get_num_threads() == 1
    assert utils.set_fast(GRU(2, 2), np.bool_(True)).fast is True  # NumPy's bool, stored as a bool
