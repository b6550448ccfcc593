"""seqbook.llama: RMSNorm, SwiGLU, grouped-query attention and the Llama model, proved equal to
Hugging Face's ``LlamaForCausalLM`` in float64 (logits, loss, every gradient, greedy generation with
and without a cache), the cache that holds num_kv_heads heads, bad input and the meta device.

Every Hugging Face model here is small and random: nothing is downloaded. The module is skipped when
``transformers`` is not installed.

Hugging Face's Llama rounds to float32 in three places whatever the model's dtype: RMSNorm casts its
input to float32, the rotary angles are computed in float32, and the eager attention takes its
softmax in float32 (``softmax(..., dtype=torch.float32)``). A float64 Hugging Face model is therefore
only float32-exact. The fixture ``hf_float64`` lifts those three casts (each replacement is Hugging
Face's code with float32 replaced by the wider of float32 and the input's dtype), so that the proofs
run at the package's float64 tolerance; ``test_stock_hugging_face_agrees_to_float32`` compares with
the unpatched model at float32's tolerance.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from tolerance import assert_close, assert_same_math, tol

from seqbook.kv_cache import KVCache
from seqbook.llama import GroupedQueryAttention, Llama, LlamaBlock, LlamaConfig, RMSNorm, SwiGLU
from seqbook.rope import rope_angles

transformers = pytest.importorskip("transformers")
from transformers.models.llama import modeling_llama  # noqa: E402

F64 = torch.float64
V, D, L, H, D_FF, T_MAX = 61, 32, 2, 4, 48, 64
SMALL = dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, intermediate_size=D_FF,
             max_position_embeddings=T_MAX, rope_theta=10000.0, attention_bias=False, rms_norm_eps=1e-6,
             bos_token_id=None, eos_token_id=None, pad_token_id=None)
KV_HEADS = [1, 2, 4]


def hf_llama(num_key_value_heads, tie=False, attn_implementation="eager", dtype=F64, **changes):
    """A random ``LlamaForCausalLM`` of the SMALL sizes, every parameter (the RMSNorm gains too) drawn
    from N(0, 0.3^2) after the cast to ``dtype``, so that a copy through float32 would be caught."""
    config = transformers.LlamaConfig(**{**SMALL, **changes}, num_key_value_heads=num_key_value_heads,
                                      tie_word_embeddings=tie)
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation=attn_implementation)
    model = model.to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model


def widen_float32_casts(monkeypatch, modeling, prefix: str) -> None:
    """Patch a Hugging Face Llama-family module (``modeling_llama`` with prefix ``"Llama"``,
    ``modeling_mistral`` with ``"Mistral"``): its RMSNorm, rotary angles and eager softmax compute
    in the wider of float32 and the input's dtype instead of float32."""

    def rms_norm(self, hidden_states):  # <Prefix>RMSNorm.forward, upcast to at least float32
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.promote_types(input_dtype, torch.float32))
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def rotary(self, x, position_ids):  # <Prefix>RotaryEmbedding.forward, with float64 frequencies
        dim, base = 2 * self.inv_freq.shape[0], self.config.rope_parameters["rope_theta"]
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=F64, device=x.device) / dim))
        freqs = position_ids[..., None].to(F64) * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling
        return cos.to(x.dtype), sin.to(x.dtype)

    def eager(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        key_states = modeling.repeat_kv(key, module.num_key_value_groups)
        value_states = modeling.repeat_kv(value, module.num_key_value_groups)
        attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        wide = torch.promote_types(query.dtype, torch.float32)  # Hugging Face: dtype=torch.float32
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=wide).to(query.dtype)
        attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
        attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
        return attn_output, attn_weights

    monkeypatch.setattr(getattr(modeling, f"{prefix}RMSNorm"), "forward", rms_norm)
    monkeypatch.setattr(getattr(modeling, f"{prefix}RotaryEmbedding"), "forward", rotary)
    monkeypatch.setattr(modeling, "eager_attention_forward", eager)


@pytest.fixture
def hf_float64(monkeypatch):
    """Hugging Face's Llama with its three float32 roundings computed in the model's dtype instead."""
    widen_float32_casts(monkeypatch, modeling_llama, "Llama")


def llama_terms(T, d_ff=D_FF):
    """The length of the sums behind one logit (see tolerance.py): per layer two RMSNorms (D each),
    attention (projections D, scores D_h, softmax and weighted sum 2T, W^O D) and the SwiGLU (D + d_ff);
    then the final norm and the head (2D)."""
    return L * (6 * D + 2 * T + d_ff) + 2 * D


def shifted(idx):
    """Hugging Face's ``labels=idx`` scores idx[:, 1:] from the prefix (it shifts inside); our targets
    are the next tokens position by position, so the last position is ignored (-100)."""
    return torch.cat([idx[:, 1:], torch.full_like(idx[:, :1], -100)], dim=1)


def hf_name(ours: str) -> str:
    """Our parameter name -> Hugging Face's."""
    if ours == "tok_emb.weight":
        return "model.embed_tokens.weight"
    if ours == "norm_f.weight":
        return "model.norm.weight"
    if ours == "lm_head.weight":
        return ours
    for a, b in (("blocks.", "model.layers."), ("norm1", "input_layernorm"),
                 ("norm2", "post_attention_layernorm"), ("self_attn.out_proj", "self_attn.o_proj"),
                 ("ff.", "mlp.")):
        ours = ours.replace(a, b)
    return ours


# --- the model equals Hugging Face's -----------------------------------------------------------------


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("kv_heads", KV_HEADS)
def test_from_hf_equals_llama_logits_loss_and_gradients(kv_heads, tie, hf_float64):
    hf = hf_llama(kv_heads, tie)
    ours = Llama.from_hf(hf)
    c = ours.config
    assert (c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.d_ff) == (
        V, T_MAX, L, H, kv_heads, D, D_FF)
    assert (c.rms_norm_eps, c.rope_base, c.tie_weights) == (1e-6, 10000.0, tie)
    assert (ours.lm_head.weight is ours.tok_emb.weight) == tie and not ours.training
    assert ours.blocks[0].self_attn.k_proj.weight.shape == (kv_heads * D // H, D)
    assert ours.tok_emb.weight.dtype == F64

    idx = torch.randint(0, V, (3, 20))
    n = llama_terms(20)
    ref = hf(idx, labels=idx)
    expected_loss = F.cross_entropy(ref.logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten())  # float64
    logits, loss = ours(idx, shifted(idx))
    assert_same_math(logits, ref.logits, n=n)
    assert_same_math(loss, expected_loss, n=n + V)
    assert ref.loss.dtype == torch.float32  # Hugging Face upcasts the logits with .float() for its loss
    assert_close(loss.float(), ref.loss, n=n + V)

    expected_loss.backward()
    loss.backward()
    hf_params = dict(hf.named_parameters())
    names = [name for name, _ in ours.named_parameters()]
    assert len(names) == len(hf_params)  # one name per tensor: a tied head is the embedding
    for name, p in ours.named_parameters():
        assert_same_math(p.grad, hf_params[hf_name(name)].grad, n=2 * n + idx.numel(), msg=name)


def test_from_hf_with_sdpa_and_a_padding_index(hf_float64):
    hf = hf_llama(2, attn_implementation="sdpa", pad_token_id=3)
    ours = Llama.from_hf(hf)
    assert ours.tok_emb.padding_idx == 3
    idx = torch.randint(0, V, (2, 12))
    idx[:, 4] = 3
    logits, loss = ours(idx, shifted(idx))
    ref = hf(idx).logits
    assert_same_math(logits, ref, n=llama_terms(12))
    F.cross_entropy(ref[:, :-1].flatten(0, 1), idx[:, 1:].flatten()).backward()
    loss.backward()
    assert not ours.tok_emb.weight.grad[3].any()  # the padding row learns nothing, as in Hugging Face
    assert_same_math(ours.tok_emb.weight.grad, hf.model.embed_tokens.weight.grad, n=2 * llama_terms(12))


def test_stock_hugging_face_agrees_to_float32():
    """Without the fixture, Hugging Face's float64 Llama is float32-exact: our float64 copy agrees to
    float32's tolerance (and fails float64's, which shows that the fixture is needed)."""
    hf = hf_llama(2)
    ours = Llama.from_hf(hf)
    idx = torch.randint(0, V, (2, 20))
    with torch.no_grad():
        logits, ref = ours(idx)[0], hf(idx).logits
    scale = ref.abs().max().item()
    torch.testing.assert_close(logits, ref, **tol(torch.float32, llama_terms(20), scale=scale))
    assert (logits - ref).abs().max() > 1e-10


@pytest.mark.parametrize("kv_heads", KV_HEADS)
def test_greedy_generation_equals_hugging_face(kv_heads, hf_float64):
    hf = hf_llama(kv_heads)
    ours = Llama.from_hf(hf)
    idx = torch.randint(0, V, (2, 5))
    with torch.no_grad():
        expected = [hf.generate(idx, attention_mask=torch.ones_like(idx), max_new_tokens=10, do_sample=False,
                                use_cache=use_cache) for use_cache in (False, True)]
    assert expected[0].shape == (2, 15) and torch.equal(*expected)
    for use_cache in (False, True):
        assert torch.equal(ours.generate(idx, 10, use_cache=use_cache), expected[0])


# --- the layers --------------------------------------------------------------------------------------


def test_rms_norm_equals_hugging_face():
    x = torch.randn(3, 7, D)
    ours, hf = RMSNorm(D, eps=1e-5), modeling_llama.LlamaRMSNorm(D, eps=1e-5)
    with torch.no_grad():
        ours.weight.normal_()
        hf.weight.copy_(ours.weight)
    assert_close(ours(x), hf(x), n=D)  # float32: Hugging Face computes in float32, as we do
    # float64: Hugging Face rounds to float32 here; its formula in float64 is ours
    ours, x = ours.double(), x.double().requires_grad_()
    expected = hf.weight.double() * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))
    assert_same_math(ours(x), expected, n=D)
    assert_close(ours(x).float(), hf.double()(x).float(), n=D)


def test_rms_norm_in_float64_equals_hugging_face_without_its_float32_cast(hf_float64):
    ours, hf = RMSNorm(D).double(), modeling_llama.LlamaRMSNorm(D).double()
    with torch.no_grad():
        ours.weight.normal_()
        hf.weight.copy_(ours.weight)
    x = torch.randn(3, 7, D, dtype=F64, requires_grad=True)
    y_ours, y_hf = ours(x), hf(x)
    assert_same_math(y_ours, y_hf, n=D)
    g = torch.randn_like(y_ours)
    assert_same_math(torch.autograd.grad(y_ours, x, g)[0], torch.autograd.grad(y_hf, x, g)[0], n=2 * D)


def test_swiglu_equals_hugging_face_mlp():
    config = transformers.LlamaConfig(**SMALL)
    hf = modeling_llama.LlamaMLP(config).double()
    ours = SwiGLU(D, D_FF).double()
    ours.load_state_dict(hf.state_dict())  # the same names: gate_proj, up_proj, down_proj
    x = torch.randn(2, 5, D, dtype=F64)
    assert_same_math(ours(x), hf(x), n=D + D_FF)


def test_grouped_query_attention_shares_keys_within_a_group():
    """Query heads 2g and 2g + 1 read key/value head g: with equal query weights they agree."""
    attn = GroupedQueryAttention(D, 4, 2).double()
    D_h = D // 4
    with torch.no_grad():
        w = attn.q_proj.weight.view(4, D_h, D)
        w[1], w[3] = w[0], w[2]
    x = torch.randn(2, 6, D, dtype=F64)
    _, weights = attn(x, rope_angles(torch.arange(6), D_h))
    assert weights.shape == (2, 4, 6, 6)
    assert_same_math(weights[:, 1], weights[:, 0])
    assert_same_math(weights[:, 3], weights[:, 2])
    assert not torch.allclose(weights[:, 0], weights[:, 2])
    assert torch.all(weights.triu(1) == 0)  # causal


@pytest.mark.parametrize("kv_heads", KV_HEADS)
def test_cached_logits_equal_a_full_forward_pass(kv_heads):
    model = Llama(LlamaConfig(vocab_size=V, block_size=24, n_layer=2, n_head=4, n_kv_head=kv_heads,
                              n_embd=D, init_std=0.3)).double()
    idx = torch.randint(V, (3, 20))
    full, _ = model(idx)
    caches = [KVCache(24) for _ in model.blocks]
    parts = [model(idx[:, :7], caches=caches)[0], model(idx[:, 7:10], caches=caches)[0]]  # prompt, chunk
    parts += [model(idx[:, t:t + 1], caches=caches)[0] for t in range(10, 20)]
    assert caches[0].length == 20
    assert_same_math(torch.cat(parts, dim=1), full, n=llama_terms(20))


def test_the_cache_holds_num_kv_heads_heads():
    B, T = 2, 9
    nbytes = {}
    for kv_heads in KV_HEADS:
        model = Llama(LlamaConfig(vocab_size=V, block_size=T_MAX, n_layer=2, n_head=4, n_kv_head=kv_heads,
                                  n_embd=D))
        caches = [KVCache(T_MAX) for _ in model.blocks]
        model(torch.randint(V, (B, T)), caches=caches)
        assert caches[0].keys.shape == caches[1].values.shape == (B, kv_heads, T_MAX, D // 4)
        nbytes[kv_heads] = sum(c.nbytes() for c in caches)
        assert nbytes[kv_heads] == 2 * 2 * B * T_MAX * kv_heads * (D // 4) * 4  # float32
    assert nbytes[4] == 4 * nbytes[1] == 2 * nbytes[2]  # multi-query: num_heads times smaller


def test_generation_with_and_without_the_cache_past_block_size():
    model = Llama(LlamaConfig(vocab_size=V, block_size=8, n_layer=2, n_head=4, n_kv_head=2, n_embd=D,
                              init_std=0.3)).double()
    idx = torch.randint(V, (2, 3))
    greedy = model.generate(idx, 9)  # 12 tokens: the window slides past 8
    assert greedy.shape == (2, 12)
    assert torch.equal(model.generate(idx, 9, use_cache=True), greedy)
    sampled = [model.generate(idx, 9, temperature=1.0, top_k=10, use_cache=use_cache,
                              generator=torch.Generator().manual_seed(3)) for use_cache in (False, True)]
    assert torch.equal(*sampled)


def test_config_defaults_and_init():
    c = LlamaConfig(vocab_size=10, n_embd=128)
    assert c.d_ff == 344 and c.n_kv_head == 2 and not c.tie_weights  # 8/3 * 128 = 341.3 -> 344
    model = Llama(LlamaConfig(vocab_size=10, n_embd=64, tie_weights=True, init_std=0.5))
    assert model.lm_head.weight is model.tok_emb.weight
    assert model.blocks[0].ff.up_proj.weight.std().item() == pytest.approx(0.5, rel=0.1)
    assert torch.all(model.norm_f.weight == 1) and model.blocks[0].self_attn.q_proj.bias is None
    block = LlamaBlock(16, 4, 2, 24)
    assert block(torch.randn(1, 3, 16), rope_angles(torch.arange(3), 4)).shape == (1, 3, 16)


# --- bad input, meta device --------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "error", "words"), [
    (lambda: LlamaConfig(vocab_size=10, n_head=4, n_kv_head=3), ValueError,
     "n_head must be divisible by n_kv_head"),
    (lambda: LlamaConfig(vocab_size=10, n_embd=30, n_head=4), ValueError,
     "n_embd must be divisible by n_head"),
    (lambda: LlamaConfig(vocab_size=10, n_embd=12, n_head=4, n_kv_head=1), ValueError, "must be even"),
    (lambda: LlamaConfig(vocab_size=0), ValueError, "vocab_size"),
    (lambda: LlamaConfig(vocab_size=10, n_kv_head=2.0), TypeError, "n_kv_head"),
    (lambda: LlamaConfig(vocab_size=10, rms_norm_eps=-1.0), ValueError, "rms_norm_eps"),
    (lambda: LlamaConfig(vocab_size=10, rope_base=0.5), ValueError, "rope_base"),
    (lambda: LlamaConfig(vocab_size=10, tie_weights=1), TypeError, "tie_weights"),
    (lambda: Llama({"vocab_size": 10}), TypeError, "config"),
    (lambda: GroupedQueryAttention(32, 4, 3), ValueError, "num_heads must be divisible by num_kv_heads"),
    (lambda: GroupedQueryAttention(32, 0, 1), ValueError, "num_heads"),
    (lambda: SwiGLU(8, 0), ValueError, "d_ff"),
    (lambda: RMSNorm(8, eps=-1), ValueError, "eps"),
    (lambda: Llama.from_hf(transformers.LlamaConfig(**SMALL)), TypeError, "model"),
])
def test_bad_construction(make, error, words):
    with pytest.raises(error, match=words):
        make()


ROT3 = rope_angles(torch.arange(3), 4)  # the angles of 3 positions, head width 4


def small_model(block_size=8):
    config = LlamaConfig(vocab_size=10, block_size=block_size, n_layer=2, n_head=4, n_kv_head=2, n_embd=16)
    return Llama(config)


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda m: m(torch.tensor([[1, 10]])), ValueError, r"idx must hold ids in \[0, 9\], found 10"),
    (lambda m: m(torch.tensor([[-1, 2]])), ValueError, "idx must hold ids"),
    (lambda m: m(torch.zeros(1, 9, dtype=torch.long)), ValueError, "idx has length 9.*block_size=8"),
    (lambda m: m(torch.zeros(1, 3)), TypeError, "idx must be an int64 or int32"),
    (lambda m: m(torch.zeros(3, dtype=torch.long)), ValueError,
     r"idx must have shape \(B, T\)"),
    (lambda m: m(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long)), ValueError,
     r"targets must have shape \(1, 3\)"),
    (lambda m: m(torch.zeros(1, 3, dtype=torch.long), torch.full((1, 3), -100)), ValueError,
     "targets must hold"),
    (lambda m: m(torch.zeros(1, 3, dtype=torch.long), caches=[KVCache(8)]), TypeError, "caches must be"),
    (lambda m: m.generate(torch.zeros(1, 3, dtype=torch.long), -1), ValueError, "max_new_tokens"),
    (lambda m: m.generate(torch.zeros(1, 3, dtype=torch.long), 2, use_cache=1), TypeError, "use_cache"),
    (lambda m: m.generate(torch.zeros(1, 3, dtype=torch.long), 2, temperature=-1.0), ValueError,
     "temperature"),
    (lambda m: m.blocks[0].self_attn(torch.randn(1, 3, 15), rope_angles(torch.arange(3), 4)), ValueError,
     r"x must have shape \(B, T, 16\)"),
    (lambda m: m.blocks[0].self_attn(torch.randn(1, 3, 16), rope_angles(torch.arange(2), 4)), ValueError,
     r"rotary\[0\] must have shape \(3, 4\)"),
    (lambda m: m.blocks[0].self_attn(torch.randn(1, 3, 16), None), TypeError, "rotary must be"),
    (lambda m: m.blocks[0].self_attn(torch.randn(1, 3, 16).double(), rope_angles(torch.arange(3), 4)),
     TypeError, "x must have the dtype"),
    (lambda m: m.blocks[0].self_attn(torch.randn(1, 3, 16), ROT3, cache=KVCache(2)), ValueError,
     "cache holds max_len=2"),
    (lambda m: m.blocks[0].self_attn(torch.randn(1, 3, 16), ROT3, cache={}), TypeError,
     "cache must be a KVCache"),
    (lambda m: m.norm_f(torch.randn(2, 15)), ValueError, r"x must have shape \(\.\.\., 16\)"),
    (lambda m: m.blocks[0].ff(torch.randn(2, 15)), ValueError, r"x must have shape \(\.\.\., 16\)"),
])
def test_bad_input(call, error, words):
    with pytest.raises(error, match=words):
        call(small_model())


def test_caches_past_block_size():
    model = small_model()
    caches = [KVCache(8) for _ in model.blocks]
    model(torch.zeros(1, 6, dtype=torch.long), caches=caches)
    with pytest.raises(ValueError, match="the caches hold 6 positions.*block_size=8"):
        model(torch.zeros(1, 3, dtype=torch.long), caches=caches)


@pytest.mark.parametrize(("changes", "words"), [
    ({"attention_bias": True}, "attention_bias"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"head_dim": 16}, "head_dim"),
    ({"attention_dropout": 0.1}, "attention_dropout"),
    ({"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}}, "rope_type"),
])
def test_from_hf_refuses_what_llama_lacks(changes, words):
    with pytest.raises(ValueError, match=words):
        Llama.from_hf(hf_llama(2, dtype=torch.float32, **changes))


def test_from_hf_keeps_dtype_and_mode():
    hf = hf_llama(2, dtype=torch.float32).train()
    ours = Llama.from_hf(hf)
    assert ours.training and ours.tok_emb.weight.dtype == torch.float32
    assert torch.equal(ours.blocks[1].self_attn.out_proj.weight, hf.model.layers[1].self_attn.o_proj.weight)


def test_forward_and_backward_on_meta():
    config = LlamaConfig(vocab_size=V, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=D)
    with torch.device("meta"):
        model = Llama(config)
    idx = torch.zeros(2, 5, dtype=torch.long, device="meta")
    logits, loss = model(idx, idx)
    assert logits.device.type == "meta" and logits.shape == (2, 5, V) and loss.shape == ()
    loss.backward()
    assert all(p.grad is not None and p.grad.device.type == "meta" for p in model.parameters())
    caches = [KVCache(16) for _ in model.blocks]
    model(idx, caches=caches)
    logits, _ = model(idx[:, :1], caches=caches)
    assert logits.shape == (2, 1, V) and caches[0].keys.shape == (2, 2, 16, D // 4)
    assert math.prod(caches[0].keys.shape) == 2 * 2 * 16 * 8
