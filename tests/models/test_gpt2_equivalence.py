"""GPT.from_hf: seqbook's GPT with the weights of a Hugging Face GPT-2 computes GPT-2's function.

Every model here is a small, randomly initialised ``transformers.GPT2LMHeadModel``: nothing is
downloaded. The module is skipped when ``transformers`` is not installed (it is an optional extra:
``pip install seqbook[hf]``).
"""

import sys
import time

import pytest
import torch
import torch.nn.functional as F
from tolerance import assert_close, assert_same_math

from seqbook import pretrained
from seqbook.gpt import GPT
from seqbook.utils import set_fast

transformers = pytest.importorskip("transformers")

F64 = torch.float64
SMALL = dict(n_layer=2, n_head=2, n_embd=32, n_positions=16, vocab_size=50, resid_pdrop=0.0, embd_pdrop=0.0,
             attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0)


def gpt2(device, dtype=F64, attn_implementation="sdpa", **changes):
    """A random GPT-2 of the SMALL sizes (with ``changes``), every parameter drawn from N(0, 0.3^2).

    The weights are drawn in float64 after the model is cast, so they are not float32 numbers: a copy
    that passed through float32 would be caught. Biases and LayerNorm parameters are random too (GPT-2
    starts them at 0 and 1, which would hide a bias copied to the wrong place)."""
    config = transformers.GPT2Config(**{**SMALL, **changes})
    model = transformers.GPT2LMHeadModel._from_config(config, attn_implementation=attn_implementation)
    model = model.to(device=device, dtype=dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model


def gpt_terms(D, T, n_layer, d_ff, V):
    """The length of the sums behind one logit: per layer two LayerNorms (2D each), attention (input
    projection D, scores D, softmax and weighted sum 2T, W^O D) and the MLP (D + d_ff); then ln_f (2D),
    the head (D) and, for a loss, the log-sum-exp over V."""
    return n_layer * (8 * D + 2 * T + d_ff) + 3 * D + V


def shifted(idx):
    """GPT-2's labels convention: ``labels=idx`` scores idx[:, 1:] from the prefix; ours takes the
    targets position by position, so the last position is ignored (-100)."""
    return torch.cat([idx[:, 1:], torch.full_like(idx[:, :1], -100)], dim=1)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_from_hf_equals_gpt2(attn_implementation, device):
    hf = gpt2(device, attn_implementation=attn_implementation)
    ours = GPT.from_hf(hf)
    c = ours.config
    assert (c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd, c.d_ff) == (50, 16, 2, 2, 32, 128)
    assert (c.positional, c.activation, c.layer_norm_eps, c.bias, c.tie_weights) == (
        "learned", "gelu_tanh", 1e-5, True, True)
    assert ours.lm_head.weight is ours.tok_emb.weight and not ours.training
    assert ours.tok_emb.weight.dtype == F64 and ours.tok_emb.weight.device.type == device.type
    idx = torch.randint(0, 50, (3, 16), device=device)
    n = gpt_terms(32, 16, 2, 128, 50)
    with torch.no_grad():
        ref = hf(idx, labels=idx)
        expected_loss = F.cross_entropy(ref.logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten())  # float64
        for fast in (True, False):
            logits, loss = set_fast(ours, fast)(idx, shifted(idx))
            assert_same_math(logits, ref.logits, n=n)
            assert_same_math(loss, expected_loss, n=n + idx.numel())
            # Hugging Face computes its loss in float32 (it upcasts the logits with .float()).
            assert_close(loss.float(), ref.loss, n=n + idx.numel())


@pytest.mark.parametrize("changes", [
    {"tie_word_embeddings": False},
    {"activation_function": "gelu"},
    {"activation_function": "relu", "n_inner": 48},
    {"activation_function": "gelu_pytorch_tanh", "layer_norm_epsilon": 1e-3},
], ids=["untied", "gelu", "relu-n_inner", "gelu_pytorch_tanh-eps"])
def test_from_hf_follows_the_config(changes):
    hf = gpt2(torch.device("cpu"), attn_implementation="eager", **changes)
    ours = GPT.from_hf(hf)
    assert (ours.lm_head.weight is ours.tok_emb.weight) == changes.get("tie_word_embeddings", True)
    idx = torch.randint(0, 50, (2, 11))
    n = gpt_terms(32, 11, 2, changes.get("n_inner") or 128, 50)
    with torch.no_grad():
        assert_same_math(ours(idx)[0], hf(idx).logits, n=n)


def test_from_hf_gradients_equal_gpt2():
    hf = gpt2(torch.device("cpu"))
    ours = GPT.from_hf(hf)
    idx = torch.randint(0, 50, (2, 12))
    F.cross_entropy(hf(idx).logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten()).backward()
    ours(idx, shifted(idx))[1].backward()
    n = 2 * gpt_terms(32, 12, 2, 128, 50) + idx.numel()
    t = hf.transformer
    assert_same_math(ours.tok_emb.weight.grad, t.wte.weight.grad, n=n)  # embedding and tied head
    assert_same_math(ours.pos_emb.weight.grad, t.wpe.weight.grad, n=n)
    q_grad = t.h[0].attn.c_attn.weight.grad[:, :32].T  # Conv1D (in, out): the query block, transposed
    assert_same_math(ours.blocks[0].self_attn.q_proj.weight.grad, q_grad, n=n)
    assert_same_math(ours.blocks[1].ff.linear2.bias.grad, t.h[1].mlp.c_proj.bias.grad, n=n)


def test_from_hf_greedy_generation_equals_gpt2():
    hf = gpt2(torch.device("cpu"))
    ours = GPT.from_hf(hf)
    idx = torch.randint(1, 50, (2, 4))
    with torch.no_grad():
        expected = hf.generate(idx, attention_mask=torch.ones_like(idx), max_new_tokens=10, min_new_tokens=10,
                               do_sample=False)
    assert torch.equal(ours.generate(idx, 10, temperature=0), expected)


def test_from_hf_keeps_dtype_and_mode():
    hf = gpt2(torch.device("cpu"), dtype=torch.float32).train()
    ours = GPT.from_hf(hf, fast=False)
    assert ours.training and ours.tok_emb.weight.dtype == torch.float32 and not ours.config.fast
    assert torch.equal(ours.blocks[1].ff.linear1.weight, hf.transformer.h[1].mlp.c_fc.weight.T)


# --- loading the real weights: never hangs, says why when it cannot -----------------------------------


NOT_CACHED = "seqbook-tests/no-such-model"  # a name no cache holds


def test_load_pretrained_gpt2_offline_says_why(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    start = time.perf_counter()
    with pytest.raises(pretrained.PretrainedUnavailable, match="not in the local cache"):
        pretrained.load_pretrained_gpt2(NOT_CACHED, timeout=1.0)
    assert time.perf_counter() - start < 30


def test_load_pretrained_gpt2_unreachable_hub_times_out(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing answers
    with pytest.raises(pretrained.PretrainedUnavailable, match="cannot be reached"):
        pretrained.load_pretrained_gpt2(NOT_CACHED, timeout=0.5)


def test_load_pretrained_gpt2_without_transformers(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now fails
    with pytest.raises(pretrained.PretrainedUnavailable, match="transformers is not installed"):
        pretrained.load_pretrained_gpt2()


@pytest.mark.parametrize(("kwargs", "words"), [({"name": ""}, "name"), ({"name": 3}, "name"),
                                               ({"timeout": 0}, "timeout"), ({"timeout": "1"}, "timeout")])
def test_load_pretrained_gpt2_bad_arguments(kwargs, words):
    with pytest.raises((ValueError, TypeError), match=words):
        pretrained.load_pretrained_gpt2(**kwargs)
