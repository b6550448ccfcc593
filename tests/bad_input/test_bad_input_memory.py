"""Bad input to seqbook.memory: ``saved_tensor_bytes`` refuses it with a TypeError raised by seqbook
that names the argument; a bad call inside the reader's forward pass is refused as it would be
outside."""

import pytest
import torch

from seqbook.gpt import GPT, GPTConfig
from seqbook.memory import saved_tensor_bytes
from tests.badinput import assert_clear_error, table

GPT_TINY = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8, dropout=0.0))
IDX = torch.zeros(1, 4, dtype=torch.long)

ERRORS, case = table()
case("fn-tensor", lambda: saved_tensor_bytes(torch.zeros(2)), "fn", "Tensor")
case("fn-None", lambda: saved_tensor_bytes(None), "fn", "NoneType")
case("model-tensor", lambda: saved_tensor_bytes(lambda: None, torch.zeros(2)), "model", "Tensor")
case("model-params", lambda: saved_tensor_bytes(lambda: None, GPT_TINY.parameters()), "model",
     "Module", "generator")
case("inner-call-checked",  # the reader's forward pass: the model's own checks still run
     lambda: saved_tensor_bytes(lambda: GPT_TINY(IDX + 11), GPT_TINY), "idx", "11")


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)
