"""Rotary position embeddings (seqbook.rope): the rotation of Hugging Face's Llama in float64, the
score's dependence on the offset only, and RoPE inside the GPT."""

import pytest
import torch
from tolerance import assert_close, assert_same_math

from seqbook.gpt import GPT, GPTConfig
from seqbook.rope import apply_rope, rope_angles, rotate_half


def test_rotation_equals_hugging_face_llama_in_float64(device):
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    q = torch.randn(2, 3, 7, 8, dtype=torch.float64, device=device)
    k = torch.randn(2, 3, 7, 8, dtype=torch.float64, device=device)
    cos, sin = rope_angles(torch.arange(7, dtype=torch.float64, device=device), 8)
    q_hf, k_hf = llama.apply_rotary_pos_emb(q, k, cos[None], sin[None])
    assert_same_math(apply_rope(q, cos, sin), q_hf, n=2)
    assert_same_math(apply_rope(k, cos, sin), k_hf, n=2)


def test_angles_equal_hugging_face_llama_rotary_embedding(device):
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    config = llama.LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=64)
    rotary = llama.LlamaRotaryEmbedding(config).to(device)
    x = torch.zeros(1, dtype=torch.float32, device=device)
    positions = torch.arange(64, device=device)
    cos_hf, sin_hf = rotary(x, positions[None])  # float32 angles: compared at float32's tolerance
    cos, sin = rope_angles(positions, 16)
    assert_close(cos.float(), cos_hf[0], n=64)
    assert_close(sin.float(), sin_hf[0], n=64)


def test_score_depends_on_the_offset_only():
    q, k = torch.randn(2, 16, dtype=torch.float64)

    def score(m, n):
        cos, sin = rope_angles(torch.tensor([m, n], dtype=torch.float64), 16)
        rq = apply_rope(q.view(1, 1, 1, 16).expand(1, 1, 2, 16), cos, sin)[0, 0, 0]
        rk = apply_rope(k.view(1, 1, 1, 16).expand(1, 1, 2, 16), cos, sin)[0, 0, 1]
        return rq @ rk

    for m, n in [(0, 3), (5, 2), (7, 7)]:
        for shift in (1, 10, 1000):
            assert score(m + shift, n + shift).item() == pytest.approx(score(m, n).item(), rel=1e-10)
    assert abs(score(0, 3) - score(0, 4)) > 1e-3  # and it does depend on the offset


def test_rotation_keeps_lengths_and_turns_a_quarter():
    x = torch.randn(2, 2, 5, 6, dtype=torch.float64)
    cos, sin = rope_angles(torch.arange(5.0, dtype=torch.float64), 6)
    assert_same_math(apply_rope(x, cos, sin).norm(dim=-1), x.norm(dim=-1), n=6)
    assert_same_math(rotate_half(rotate_half(x)), -x)


def test_gpt_with_rope_has_no_position_table_and_attends_by_offset():
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=20, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.0,
                       positional="rope")
    model = GPT(config).double().eval()
    assert not hasattr(model, "pos_emb") and not hasattr(model, "pos_code")
    idx = torch.randint(20, (2, 16))
    logits, _ = model(idx)
    assert logits.shape == (2, 16, 20) and torch.isfinite(logits).all()
    # Causal: the logits of the first 8 positions do not depend on the last 8 tokens.
    other = idx.clone()
    other[:, 8:] = (other[:, 8:] + 1) % 20
    assert_same_math(model(other)[0][:, :8], logits[:, :8], n=64)


@pytest.mark.parametrize("bad, match", [
    (dict(head_dim=7), "head_dim must be even"),
    (dict(positions=torch.zeros(2, 3)), "positions must be 1-D"),
])
def test_bad_input(bad, match):
    args = dict(positions=torch.arange(4), head_dim=8) | bad
    with pytest.raises(ValueError, match=match):
        rope_angles(**args)
    with pytest.raises(ValueError, match="n_embd // n_head must be even"):
        GPTConfig(vocab_size=5, n_embd=6, n_head=2, positional="rope")
    with pytest.raises(ValueError, match=r"cos must have shape \(5, 8\)"):
        apply_rope(torch.randn(1, 1, 5, 8), torch.ones(4, 8), torch.ones(5, 8))
