"""The key-value cache (seqbook.kv_cache) and cached generation: the same logits and the same
tokens as without the cache, the memory formula, and bad input."""

from itertools import pairwise

import pytest
import torch
from tolerance import assert_same_math

from seqbook.attention import MultiHeadAttention
from seqbook.gpt import GPT, CausalSelfAttention, GPTConfig
from seqbook.kv_cache import KVCache
from seqbook.utils import set_fast

POSITIONAL = ["learned", "sinusoidal", "rope"]


def small_gpt(positional: str, block_size: int = 24, device="cpu") -> GPT:
    config = GPTConfig(vocab_size=30, block_size=block_size, n_layer=2, n_head=2, n_embd=16,
                       dropout=0.0, positional=positional)
    return GPT(config).double().to(device).eval()


@pytest.mark.parametrize("positional", POSITIONAL)
@pytest.mark.parametrize("fast", [False, True])
def test_cached_logits_equal_a_full_forward_pass(positional, fast, device):
    model = set_fast(small_gpt(positional, device=device), fast)
    idx = torch.randint(30, (3, 20), device=device)
    full, _ = model(idx)  # (B, T, V)
    caches = [KVCache(24) for _ in model.blocks]
    prompt, _ = model(idx[:, :7], caches=caches)
    steps = [model(idx[:, t:t + 1], caches=caches)[0] for t in range(7, 20)]
    cached = torch.cat([prompt, *steps], dim=1)
    assert caches[0].length == 20
    assert_same_math(cached, full, n=2 * (16 + 20))


@pytest.mark.parametrize("positional", POSITIONAL)
@pytest.mark.parametrize("fast", [False, True])
def test_several_new_tokens_past_a_filled_cache_equal_a_full_forward_pass(positional, fast,
                                                                          device):
    """Chunks of 1 to 6 tokens past the kept ones (chunked prefill, a speculative pass): each new
    token sees the kept keys and the new ones up to its own position, nothing after it."""
    model = set_fast(small_gpt(positional, device=device), fast)
    idx = torch.randint(30, (3, 22), device=device)
    full, _ = model(idx)  # (B, T, V)
    caches = [KVCache(24) for _ in model.blocks]
    bounds = [0, 5, 6, 9, 13, 19, 20, 22]  # chunks of 5, 1, 3, 4, 6, 1, 2 tokens
    cached = torch.cat([model(idx[:, a:b], caches=caches)[0]
                        for a, b in pairwise(bounds)], dim=1)
    assert caches[0].length == 22
    assert_same_math(cached, full, n=2 * (16 + 22))


@pytest.mark.parametrize("fast", [False, True])
def test_the_weights_of_a_chunk_past_a_filled_cache_are_zero_after_each_new_token(fast):
    torch.manual_seed(0)
    attn = CausalSelfAttention(8, 2, fast=fast).double()
    x = torch.randn(3, 13, 8, dtype=torch.float64)
    cache = KVCache(16)
    attn(x[:, :9], cache=cache)
    out, weights = attn(x[:, 9:], cache=cache, need_weights=True)  # 4 new past 9 kept
    assert weights.shape == (3, 2, 4, 13)
    after = torch.ones(4, 13, dtype=torch.bool).triu(10)  # key s after new token i: s > 9 + i
    assert torch.all(weights[..., after] == 0) and torch.all(weights[..., ~after] > 0)
    assert_same_math(out, attn(x)[0][:, 9:], n=2 * (8 + 13))


@pytest.mark.parametrize("positional", POSITIONAL)
def test_a_cache_forgets_what_follows_its_length(positional, device):
    """Moving ``length`` back forgets the positions after it (how speculative decoding drops
    rejected guesses): what is appended next writes over them, and the logits are those of the
    sequence without the forgotten tokens."""
    model = small_gpt(positional, device=device)
    idx = torch.randint(30, (2, 12), device=device)
    wrong = torch.randint(30, (2, 4), device=device)
    caches = [KVCache(24) for _ in model.blocks]
    model(torch.cat([idx[:, :8], wrong], dim=1), caches=caches)  # 8 right, 4 to forget
    for cache in caches:
        cache.length = 8
    logits, _ = model(idx[:, 8:], caches=caches)
    assert_same_math(logits, model(idx)[0][:, 8:], n=2 * (16 + 12))


@pytest.mark.parametrize("positional", POSITIONAL)
def test_generation_gives_the_same_tokens_with_and_without_the_cache(positional, device):
    model = small_gpt(positional, device=device)
    idx = torch.randint(30, (2, 5), device=device)
    greedy = model.generate(idx, 30, temperature=0)  # 35 tokens: the window slides past 24
    assert torch.equal(model.generate(idx, 30, temperature=0, use_cache=True), greedy)
    sampled = [model.generate(idx, 30, generator=torch.Generator(device).manual_seed(7),
                              use_cache=use_cache, top_k=10) for use_cache in (False, True)]
    assert torch.equal(*sampled)


def test_memory_is_two_keys_and_values_per_layer_and_position():
    config = GPTConfig(vocab_size=30, block_size=64, n_layer=3, n_head=4, n_embd=32)
    model = GPT(config).eval()
    caches = [KVCache(config.block_size) for _ in model.blocks]
    B = 5
    model(torch.randint(30, (B, 10)), caches=caches)
    # 2 (keys and values) x n_layer x B x T_max x D numbers of 4 bytes (float32)
    expected = 2 * config.n_layer * B * config.block_size * config.n_embd * 4
    assert sum(c.nbytes() for c in caches) == expected
    assert caches[0].keys.shape == (B, config.n_head, config.block_size, config.n_embd // config.n_head)


@pytest.mark.parametrize("fast", [False, True])
def test_causal_self_attention_with_a_cache_equals_causal_attention(fast):
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).double()
    attn = CausalSelfAttention(8, 2, fast=fast).double()
    attn.load_state_dict(mha.state_dict())
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    full, _ = mha(x, x, x, is_causal=True, need_weights=False)
    assert_same_math(attn(x)[0], full, n=16)
    cache = KVCache(6)
    parts = [attn(x[:, :3], cache=cache)[0]]
    parts += [attn(x[:, t:t + 1], cache=cache)[0] for t in range(3, 6)]
    assert_same_math(torch.cat(parts, dim=1), full, n=16)


def test_bad_input():
    cache = KVCache(4)
    with pytest.raises(ValueError, match="max_len must be"):
        KVCache(0)
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="max_len=4 positions: 3 kept"):
        cache.append(torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4))
    with pytest.raises(ValueError, match=r"k must have shape \(1, 2, T, 4\)"):
        cache.append(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    with pytest.raises(ValueError, match="v must have shape"):
        KVCache(4).append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 2, 4))
    attn = CausalSelfAttention(8, 2)
    x = torch.randn(1, 2, 8)
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        attn(x, cache=[])
    kept = KVCache(4)
    kept.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="max_len=4 positions: 3 kept"):
        attn(x, cache=kept)
    with pytest.raises(TypeError, match="cache"):  # chapter 5's MultiHeadAttention takes none
        MultiHeadAttention(8, 2)(x, x, x, cache=KVCache(4))
    model = small_gpt("learned", block_size=8)
    with pytest.raises(TypeError, match="caches must be a sequence of 2 KVCache"):
        model(torch.zeros(1, 2, dtype=torch.long), caches=[KVCache(8)])
    with pytest.raises(ValueError, match=r"caches must be 2 distinct KVCache.*\[KVCache\(...\)\] \* 2"):
        model(torch.zeros(1, 2, dtype=torch.long), caches=[KVCache(8)] * 2)
    small = [KVCache(5) for _ in model.blocks]  # room for 5, not for the 6th
    model(torch.zeros(1, 5, dtype=torch.long), caches=small)
    with pytest.raises(ValueError, match=r"caches hold max_len=5 positions: 5 kept \+ 1 new is too many"):
        model(torch.zeros(1, 1, dtype=torch.long), caches=small)
    for cache in small:
        cache.length = 6  # by hand, past max_len
    with pytest.raises(ValueError, match="caches must hold 0 to max_len=5 positions, got length=6"):
        model(torch.zeros(1, 1, dtype=torch.long), caches=small)
    with pytest.raises(ValueError, match="caches hold 1 sequences, got idx with 2"):
        filled = [KVCache(8) for _ in model.blocks]
        model(torch.zeros(1, 2, dtype=torch.long), caches=filled)
        model(torch.zeros(2, 1, dtype=torch.long), caches=filled)
    caches = [KVCache(8) for _ in model.blocks]
    model(torch.zeros(1, 6, dtype=torch.long), caches=caches)
    with pytest.raises(ValueError, match="the caches hold 6 positions: with idx's 3 more.*block_size=8"):
        model(torch.zeros(1, 3, dtype=torch.long), caches=caches)
    for _ in range(2):
        model(torch.zeros(1, 1, dtype=torch.long), caches=caches)
    with pytest.raises(ValueError, match="the caches hold 8 positions.*passes block_size=8"):
        model(torch.zeros(1, 1, dtype=torch.long), caches=caches)
    with pytest.raises(TypeError, match="use_cache"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 2, use_cache=1)
