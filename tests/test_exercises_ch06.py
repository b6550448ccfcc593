"""Chapter 6's exercise checks (seqbook.exercises.ch06): each passes a right answer, calls the
untouched starter "not attempted" (the find-the-bug starters get their bug named), and names what
is wrong in each typical wrong answer."""

import math

import torch
import torch.nn.functional as F

from seqbook.attention import causal_mask, scaled_dot_product_attention
from seqbook.exercises import check
from seqbook.kv_cache import KVCache
from seqbook.rope import apply_rope
from seqbook.transformer import positional_frequencies


def starter(*args):
    raise NotImplementedError  # your code here


def test_dot():
    def right(k, d_model):
        return torch.cos(positional_frequencies(d_model).double() * k).sum()

    def from_the_table(k, d_model):  # float32 table, one position: also right
        from seqbook.transformer import positional_encoding
        pe = positional_encoding(200, d_model)
        return float(pe[50] @ pe[50 + k])

    name = "ex-ch6-dot"
    assert check(name, right)
    assert check(name, from_the_table)
    assert check(name, starter).status == "not attempted"
    assert "twice too large" in check(name, lambda k, d: 2 * right(k, d)).message
    assert "sum sines" in check(
        name, lambda k, d: torch.sin(positional_frequencies(d).double() * k).sum()).message
    assert "squared norm" in check(name, lambda k, d: right(k, d) if k else 0.0).message
    assert "offset k = 1" in check(name, lambda k, d: 0.0).message
    assert "offset k = 1" in check(name, lambda k, d: d / 2).message
    assert "must return a number" in check(name, lambda k, d: "many").message


def test_params():
    def right(d, d_ff):
        return 4 * d**2 + 2 * d * d_ff + 9 * d + d_ff, 8 * d**2 + 2 * d * d_ff + 15 * d + d_ff

    name = "ex-ch6-params"
    assert check(name, right)
    assert check(name, starter).status == "not attempted"
    no_bias = check(name, lambda d, f: (4 * d**2 + 2 * d * f + 4 * d, 8 * d**2 + 2 * d * f))
    assert "no biases" in no_bias.message
    no_ln = check(name, lambda d, f: (right(d, f)[0] - 4 * d, right(d, f)[1]))
    assert "LayerNorms" in no_ln.message
    two_ln = check(name, lambda d, f: (right(d, f)[0], right(d, f)[1] - 2 * d))
    assert "three" in two_ln.message
    same = check(name, lambda d, f: (right(d, f)[0], right(d, f)[0]))
    assert "cross-attention" in same.message
    assert "must return a pair" in check(name, lambda d, f: 5).message


def test_postln():
    def right(layer, x, key_padding_mask=None):
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = layer.norm1(x + layer.dropout1(a))
        return layer.norm2(x + layer.dropout2(layer.ff(x)))

    def pre_ln(layer, x, key_padding_mask=None):
        return layer(x, key_padding_mask=key_padding_mask)

    def one_norm(layer, x, key_padding_mask=None):
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = layer.norm1(x + a)
        return x + layer.ff(x)

    def on_the_branch(layer, x, key_padding_mask=None):
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = x + layer.norm1(a)
        return x + layer.norm2(layer.ff(x))

    def no_mask(layer, x, key_padding_mask=None):
        return right(layer, x)

    name = "ex-ch6-postln"
    assert check(name, right)
    assert check(name, starter).status == "not attempted"
    assert "pre-LN arrangement" in check(name, pre_ln).message
    assert "not normalised" in check(name, one_norm).message
    assert "on the branches" in check(name, on_the_branch).message
    assert "padding mask" in check(name, no_mask).message


def test_sliding():
    def right(model, ids, block, stride):
        windows = ids.unfold(0, block + 1, stride)
        nll, count = 0.0, 0
        for w in windows.split(3):  # in batches, as a learner might
            logits, _ = model(w[:, :-1])
            losses = F.cross_entropy(logits.transpose(1, 2), w[:, 1:], reduction="none")
            nll += losses[:, -stride:].sum().item()
            count += losses[:, -stride:].numel()
        return math.exp(nll / count)

    def every_prediction(model, ids, block, stride):
        windows = ids.unfold(0, block + 1, stride)
        logits, _ = model(windows[:, :-1])
        return math.exp(F.cross_entropy(logits.transpose(1, 2), windows[:, 1:]).item())

    def mean_loss(model, ids, block, stride):
        return math.log(right(model, ids, block, stride))

    name = "ex-ch6-sliding"
    assert check(name, right)
    assert check(name, starter).status == "not attempted"
    assert "every prediction" in check(name, every_prediction).message
    assert "exponential" in check(name, mean_loss).message


def test_causal_mask():
    name = "ex-ch6-causal-mask"

    def buggy(T):  # the starter of the exercise
        return torch.ones(T, T, dtype=torch.bool).triu(0)

    assert check(name, lambda T: torch.ones(T, T, dtype=torch.bool).triu(1))
    assert check(name, lambda T: ~causal_mask(T))
    assert check(name, starter).status == "not attempted"
    assert "diagonal is blocked" in check(name, buggy).message
    assert "polarity is flipped" in check(name, causal_mask).message
    assert "future leaks" in check(name, lambda T: torch.ones(T, T, dtype=torch.bool).triu(2)
                                   ).message
    assert "boolean" in check(name, lambda T: torch.ones(T, T).triu(1)).message


def test_rope_values():
    name = "ex-ch6-rope-values"

    def right(q, k, v, cos, sin):
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return scaled_dot_product_attention(q, k, v, causal_mask(q.shape[2]))[0]

    def buggy(q, k, v, cos, sin):  # the starter of the exercise
        q, k, v = apply_rope(q, cos, sin), apply_rope(k, cos, sin), apply_rope(v, cos, sin)
        return scaled_dot_product_attention(q, k, v, causal_mask(q.shape[2]))[0]

    def fused(q, k, v, cos, sin):
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def not_causal(q, k, v, cos, sin):
        return scaled_dot_product_attention(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v)[0]

    assert check(name, right)
    assert check(name, fused)
    assert check(name, starter).status == "not attempted"
    assert "values are turned too" in check(name, buggy).message
    assert "nothing is turned" in check(
        name, lambda q, k, v, c, s: scaled_dot_product_attention(
            q, k, v, causal_mask(q.shape[2]))[0]).message
    assert "causal mask" in check(name, not_causal).message


def test_kv_memory():
    name = "ex-ch6-kv-memory"
    right = 2 * 12 * 8 * 1024 * 768 * 4
    assert check(name, right)
    assert check(name, float(right))
    assert check(name, ...).status == "not attempted"
    assert "keys and the values" in check(name, right // 2).message
    assert "multiply by the bytes" in check(name, 2 * 12 * 8 * 1024 * 768).message
    assert "12 layers" in check(name, right // 12).message
    assert "batch has 8" in check(name, right // 8).message
    assert "all 12 heads" in check(name, 2 * 12 * 8 * 1024 * 64 * 4).message
    assert "number of bytes is wrong" in check(name, 12345).message
    assert "must be a number" in check(name, "300 MB").message


def test_cached_generation():
    name = "ex-ch6-cached-generation"

    def right(model, idx, max_new_tokens):
        caches = [KVCache(model.config.block_size) for _ in model.blocks]
        logits, _ = model(idx, caches=caches)
        for _ in range(max_new_tokens):
            next_id = logits[:, -1].argmax(-1)
            idx = torch.cat([idx, next_id[:, None]], dim=1)
            logits, _ = model(next_id[:, None], caches=caches)
        return idx

    def fresh_caches(model, idx, max_new_tokens):  # forgets what the caches hold
        for _ in range(max_new_tokens):
            caches = [KVCache(model.config.block_size) for _ in model.blocks]
            logits, _ = model(idx[:, -1:], caches=caches)
            idx = torch.cat([idx, logits[:, -1].argmax(-1)[:, None]], dim=1)
        return idx

    def whole_sequence(model, idx, max_new_tokens):
        caches = [KVCache(model.config.block_size) for _ in model.blocks]
        for _ in range(max_new_tokens):
            logits, _ = model(idx, caches=caches)
            idx = torch.cat([idx, logits[:, -1].argmax(-1)[:, None]], dim=1)
        return idx

    with torch.no_grad():
        assert check(name, right)
        assert check(name, lambda m, i, n: m.generate(i, n, temperature=0, use_cache=True))
        assert check(name, starter).status == "not attempted"
        assert "first new token is already wrong" in check(name, fresh_caches).message
        assert "one new token at a time" in check(name, whole_sequence).message
        assert "shape (2, 17)" in check(name, lambda m, i, n: i).message
