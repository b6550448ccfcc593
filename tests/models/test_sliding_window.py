"""Sliding-window attention and attention sinks: the window mask equals Hugging Face's, a
``Llama`` with a ``sliding_window`` equals ``MistralForCausalLM`` in float64 (logits, loss, every
gradient, greedy generation with and without its rolling cache), the rolling cache keeps only
the last ``window - 1`` positions and gives the full pass's logits, the reach of a stack of
windows is exactly ``n_layer * (window - 1)`` positions, and ``softmax_with_sink`` equals the
attention of Hugging Face's gpt-oss. Every Hugging Face model here is small and random: nothing is
downloaded.
"""

import pytest
import torch
import torch.nn.functional as F
from test_llama import hf_name, widen_float32_casts
from tolerance import assert_close, assert_same_math

from seqbook.attention import causal_mask, softmax_with_sink
from seqbook.gpt import GPT, GPTConfig
from seqbook.kv_cache import KVCache, RollingKVCache
from seqbook.llama import GroupedQueryAttention, Llama, LlamaConfig
from seqbook.rope import rope_angles

transformers = pytest.importorskip("transformers")
from transformers.masking_utils import sliding_window_causal_mask_function  # noqa: E402
from transformers.models.gpt_oss import modeling_gpt_oss  # noqa: E402
from transformers.models.mistral import modeling_mistral  # noqa: E402

F64 = torch.float64
V, D, H, D_FF = 61, 32, 4, 48


# --- the mask ------------------------------------------------------------------------------------


@pytest.mark.parametrize("window", [1, 2, 3, 7, 12, 40])
@pytest.mark.parametrize("T", [1, 5, 12])
def test_window_mask_equals_hugging_face(T, window):
    allowed = sliding_window_causal_mask_function(window)
    i, j = torch.arange(T)[:, None], torch.arange(T)  # their rule is written for tensors
    theirs = allowed(torch.tensor(0), torch.tensor(0), i, j)
    ours = causal_mask(T, window=window)
    assert torch.equal(ours, theirs)
    assert torch.equal(ours.sum(1), torch.arange(1, T + 1).clamp(max=window))  # keys per query
    if window >= T:
        assert torch.equal(ours, causal_mask(T))


def test_window_mask_with_more_keys_than_queries_is_the_square_one_cut():
    assert torch.equal(causal_mask(4, 9, window=3), causal_mask(9, window=3)[:4, :9])


# --- Mistral ------------------------------------------------------------------------------------


@pytest.fixture
def mistral_float64(monkeypatch):
    """Hugging Face's Mistral with its float32 roundings (RMSNorm, rotary angles, softmax) done in
    the model's dtype instead, as ``hf_float64`` of ``test_llama.py`` does for Llama."""
    widen_float32_casts(monkeypatch, modeling_mistral, "Mistral")


def hf_mistral(window, kv_heads=2, n_layer=3, block_size=64):
    config = transformers.MistralConfig(
        vocab_size=V, hidden_size=D, intermediate_size=D_FF, num_hidden_layers=n_layer,
        num_attention_heads=H, num_key_value_heads=kv_heads, max_position_embeddings=block_size,
        sliding_window=window, rope_theta=10000.0, rms_norm_eps=1e-6, bos_token_id=None,
        eos_token_id=None, pad_token_id=None)
    model = transformers.MistralForCausalLM._from_config(config, attn_implementation="eager")
    model = model.to(F64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model


@pytest.mark.parametrize("window", [1, 3, 8])
def test_llama_with_a_window_equals_mistral(window, mistral_float64):
    hf = hf_mistral(window)
    ours = Llama.from_hf(hf)
    assert ours.config.sliding_window == window
    idx = torch.randint(V, (3, 20), generator=torch.Generator().manual_seed(window))
    n = 3 * (6 * D + 2 * 20 + D_FF) + 2 * D  # the terms behind one logit (test_llama's llama_terms)
    ref = hf(idx)
    expected_loss = F.cross_entropy(ref.logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten())
    targets = torch.cat([idx[:, 1:], torch.full_like(idx[:, :1], -100)], dim=1)
    logits, loss = ours(idx, targets)
    assert_same_math(logits, ref.logits, n=n)
    assert_same_math(loss, expected_loss, n=n + V)
    expected_loss.backward()
    loss.backward()
    hf_params = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        assert_same_math(p.grad, hf_params[hf_name(name)].grad, n=2 * n + idx.numel(), msg=name)
    # the window matters: the same weights without it give other logits
    full = Llama(LlamaConfig(**{**vars(ours.config), "sliding_window": None})).to(F64)
    full.load_state_dict(ours.state_dict())
    with torch.no_grad():
        assert (full(idx)[0] - logits).abs().max() > 1e-3


@pytest.mark.parametrize("window", [1, 4])
def test_greedy_generation_equals_mistral_with_the_rolling_cache(window, mistral_float64):
    hf = hf_mistral(window, block_size=32)
    ours = Llama.from_hf(hf)
    prompt = torch.tensor([[5, 17, 3, 42, 8, 23]])
    expected, hf_cached = (hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20,
                                       do_sample=False, use_cache=use_cache) for use_cache in (False, True))
    # With a window of 1, Hugging Face's own cached tokens (transformers 5.24) differ from its
    # uncached ones, which follow the definition; ours agree with the uncached
    if window > 1:
        assert torch.equal(hf_cached, expected)
    for use_cache in (False, True):
        assert torch.equal(ours.generate(prompt, 20, use_cache=use_cache), expected)


# --- the rolling cache ---------------------------------------------------------------------------


def windowed_llama(window, n_layer=2, block_size=40, kv_heads=2):
    config = LlamaConfig(vocab_size=V, block_size=block_size, n_layer=n_layer, n_head=H, n_kv_head=kv_heads,
                         n_embd=D, init_std=0.3, sliding_window=window)
    return Llama(config).double()


@pytest.mark.parametrize("window", [1, 2, 5, 30])
def test_the_rolling_cache_gives_the_full_pass_and_keeps_window_minus_one(window):
    model = windowed_llama(window)
    idx = torch.randint(V, (2, 24), generator=torch.Generator().manual_seed(0))
    full, _ = model(idx)
    caches = [RollingKVCache(40, window) for _ in model.blocks]
    parts = [model(idx[:, :7], caches=caches)[0], model(idx[:, 7:10], caches=caches)[0]]
    for t in range(10, 24):
        parts.append(model(idx[:, t : t + 1], caches=caches)[0])
        kept = min(t + 1, window - 1)
        assert caches[0].length == t + 1 and caches[1].keys.shape == (2, 2, kept, D // H)
        assert caches[0].nbytes() == 2 * 2 * 2 * kept * (D // H) * 8  # keys and values, float64
    assert_same_math(torch.cat(parts, dim=1), full, n=2 * (6 * D + 2 * 24 + 88) + 2 * D)


def test_the_full_cache_also_serves_a_window():
    model = windowed_llama(3)
    idx = torch.randint(V, (1, 12), generator=torch.Generator().manual_seed(1))
    caches = [KVCache(40) for _ in model.blocks]
    parts = [model(idx[:, :5], caches=caches)[0]] + [model(idx[:, t : t + 1], caches=caches)[0]
                                                      for t in range(5, 12)]
    assert_same_math(torch.cat(parts, dim=1), model(idx)[0], n=2 * (6 * D + 24 + 88) + 2 * D)


def test_the_rolling_cache_frees_what_it_forgets():
    cache = RollingKVCache(100, 4)
    for _ in range(10):
        cache.append(torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8))
    assert cache.length == 50 and cache.keys.shape == (1, 2, 3, 8)
    assert cache.keys.untyped_storage().nbytes() == cache.keys.nbytes  # no hidden older positions


def test_the_reach_of_a_stack_of_windows():
    """After n_layer layers with a window of w, the last position's logits depend on exactly the
    last n_layer * (w - 1) + 1 inputs."""
    for n_layer, window in ((1, 4), (2, 4), (3, 3), (2, 1)):
        model = windowed_llama(window, n_layer=n_layer)
        x = model.tok_emb(torch.randint(V, (1, 30))).detach().requires_grad_(True)
        angles = rope_angles(torch.arange(30), D // H)
        h = x
        for block in model.blocks:
            h = block(h, angles)
        h[0, -1].sum().backward()
        reached = (x.grad[0].abs().sum(-1) > 0).nonzero().flatten()
        assert reached.tolist() == list(range(29 - n_layer * (window - 1), 30)), (n_layer, window)
        assert model.blocks[0].self_attn.window == window


# --- attention sinks -----------------------------------------------------------------------------


def test_softmax_with_sink_equals_gpt_oss():
    B, T, D_h = 2, 6, 8
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D_h, dtype=F64, generator=g) for _ in range(3))
    sinks = torch.randn(H, dtype=F64, generator=g)
    module = type("Attention", (), dict(num_key_value_groups=1, sinks=sinks, training=False))()
    for window in (None, 2):
        allowed = causal_mask(T, window=window)
        additive = torch.zeros(T, T, dtype=F64).masked_fill(~allowed, float("-inf"))
        out_hf, weights_hf = modeling_gpt_oss.eager_attention_forward(
            module, q, k, v, additive, scaling=D_h**-0.5)
        scores = (q @ k.transpose(-2, -1) * D_h**-0.5).masked_fill(~allowed, float("-inf"))
        weights = softmax_with_sink(scores, sinks[:, None])
        assert_same_math(weights, weights_hf, n=T + 1)
        assert_same_math((weights @ v).transpose(1, 2), out_hf, n=2 * T + 1)
        assert torch.all(weights.sum(-1) < 1)


def test_softmax_with_sink_limits_and_gradient():
    s = torch.randn(3, 5, dtype=F64)
    assert_close(softmax_with_sink(s, torch.tensor(float("-inf"), dtype=F64)), s.softmax(-1))
    blocked = torch.full((2, 4), float("-inf"), dtype=F64)
    assert torch.equal(softmax_with_sink(blocked, torch.zeros(2, dtype=F64)), torch.zeros(2, 4, dtype=F64))
    sink = torch.randn(3, dtype=F64, requires_grad=True)
    scores = s.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(softmax_with_sink, (scores, sink))
    # the sink's share is sigmoid(sink - logsumexp(scores))
    share = 1 - softmax_with_sink(s, sink.detach()).sum(-1)
    assert_close(share, torch.sigmoid(sink.detach() - s.logsumexp(-1)))


# --- bad input, meta ----------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda: causal_mask(4, window=0), ValueError, "window"),
    (lambda: causal_mask(4, window=2.0), TypeError, "window"),
    (lambda: LlamaConfig(vocab_size=10, sliding_window=0), ValueError, "sliding_window"),
    (lambda: LlamaConfig(vocab_size=10, sliding_window="4"), TypeError, "sliding_window"),
    (lambda: GroupedQueryAttention(16, 4, 2, window=-1), ValueError, "window"),
    (lambda: RollingKVCache(8, 0), ValueError, "window"),
    (lambda: RollingKVCache(8, None), TypeError, "window"),
    (lambda: windowed_llama(3)(torch.zeros(1, 2, dtype=torch.long),
                               caches=[RollingKVCache(40, 4) for _ in range(2)]),
     ValueError, "RollingKVCache for window=4.*a window of 3"),
    (lambda: windowed_llama(None)(torch.zeros(1, 2, dtype=torch.long),
                                  caches=[RollingKVCache(40, 4) for _ in range(2)]),
     ValueError, "window=4.*all earlier positions"),
    (lambda: GPT(GPTConfig(vocab_size=V, block_size=8, n_layer=1, n_head=2, n_embd=8))(
        torch.zeros(1, 2, dtype=torch.long), caches=[RollingKVCache(8, 3)]),
     ValueError, "RollingKVCache for window=3"),
    (lambda: windowed_llama(3).blocks[0].self_attn(torch.randn(1, 2, D, dtype=F64),
                                                   _angles(2), cache=RollingKVCache(8, 2)),
     ValueError, "cache is a RollingKVCache for window=2"),
    (lambda: softmax_with_sink(torch.randn(2, 3), torch.randn(3)), ValueError, "sink must broadcast"),
    (lambda: softmax_with_sink(torch.randn(2, 3), torch.randn(2, dtype=F64)), TypeError, "sink must have"),
    (lambda: softmax_with_sink(torch.randn(2, 0), torch.randn(2)), ValueError, "scores"),
    (lambda: softmax_with_sink(torch.ones(2, 3, dtype=torch.long), torch.ones(2)), TypeError, "scores"),
    (lambda: softmax_with_sink(torch.randn(2, 3), 0.5), TypeError, "sink"),
])
def test_bad_input(call, error, words):
    with pytest.raises(error, match=words):
        call()


def _angles(T):
    return tuple(a.double() for a in rope_angles(torch.arange(T), D // H))


def test_on_meta():
    with torch.device("meta"):
        config = LlamaConfig(vocab_size=V, block_size=16, n_layer=2, n_head=4, n_embd=D, sliding_window=3)
        model = Llama(config)
        scores, sink = torch.randn(2, 4, 5, 6), torch.randn(4, 1)
    assert softmax_with_sink(scores, sink).shape == (2, 4, 5, 6)
    idx = torch.zeros(2, 5, dtype=torch.long, device="meta")
    caches = [RollingKVCache(16, 3) for _ in model.blocks]
    model(idx, caches=caches)
    logits, _ = model(idx[:, :1], caches=caches)
    assert logits.shape == (2, 1, V) and caches[0].keys.shape == (2, 2, 2, D // 4)
