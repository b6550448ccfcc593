"""Chapter 6's exercise checks (seqbook.exercises.ch06): each passes a right answer, calls the
untouched starter "not attempted" (the find-the-bug starters get their bug named), and names what
is wrong in each typical wrong answer."""

import copy
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from seqbook.attention import causal_mask, scaled_dot_product_attention
from seqbook.exercises import check
from seqbook.exercises.ch06 import top_p_cases, top_p_exact_case
from seqbook.kv_cache import KVCache
from seqbook.rope import apply_rope
from seqbook.sampling import top_p
from seqbook.transformer import positional_frequencies, residual


def starter(*args):
    raise NotImplementedError  # your code here


def test_dot():
    def right(k, d_model):
        return torch.cos(positional_frequencies(d_model).double() * k).sum()

    def from_the_table(k, d_model):  # float32 table, one position: also right
        from seqbook.transformer import positional_encoding
        pe = positional_encoding(200, d_model)
        return float(pe[50] @ pe[50 + k])

    def in_float32(k, d_model):  # float32 frequencies: right to float32's precision
        return torch.cos(positional_frequencies(d_model) * k).sum()

    def in_numpy(k, d_model):
        return np.cos(positional_frequencies(d_model).numpy().astype(np.float64) * k).sum()

    def as_list(k, d_model):  # a one-element list is a number too
        return [math.fsum(math.cos(w * k) for w in positional_frequencies(d_model).tolist())]

    name = "ex-ch6-dot"
    every_index = check(name, lambda k, d: torch.cos(
        10000.0 ** (-2 * torch.arange(d, dtype=torch.float64) / d) * k).sum())
    assert "d_model frequencies" in every_index.message
    for answer in (right, from_the_table, in_float32, in_numpy, as_list):
        assert check(name, answer), answer.__name__
    assert check(name, starter).status == "not attempted"
    assert "twice too large" in check(name, lambda k, d: 2 * right(k, d)).message
    assert "sum sines" in check(
        name, lambda k, d: torch.sin(positional_frequencies(d).double() * k).sum()).message
    assert "squared norm" in check(name, lambda k, d: right(k, d) if k else 0.0).message
    assert "offset k = 1" in check(name, lambda k, d: 0.0).message
    assert "offset k = 1" in check(name, lambda k, d: d / 2).message
    no_two = lambda k, d: math.fsum(math.cos(10000 ** (-i / d) * k) for i in range(d // 2))  # noqa: E731
    assert "10000^(-2i / d_model)" in check(name, no_two).message
    even_columns = lambda k, d: math.fsum(  # noqa: E731
        math.cos(10000 ** (-2 * i / d) * k) for i in range(0, d, 2))
    assert "applied twice" in check(name, even_columns).message
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
    no_out_proj = check(name, lambda d, f: (right(d, f)[0] - d * d - d, right(d, f)[1]))
    assert "output projection W^O" in no_out_proj.message
    ff_no_bias = check(name, lambda d, f: (right(d, f)[0] - f - d, right(d, f)[1]))
    assert "feed-forward network's two linear maps have biases" in ff_no_bias.message
    one_bias = check(name, lambda d, f: (right(d, f)[0] - d, right(d, f)[1]))
    assert "one vector of d numbers" in one_bias.message
    gain_only = check(name, lambda d, f: (right(d, f)[0] - 2 * d, right(d, f)[1]))
    assert "gain only" in gain_only.message
    four_d = check(name, lambda d, f: (right(d, 4 * d)[0], right(d, f)[1]))
    assert "4d wide" in four_d.message
    ff_in_bias = check(name, lambda d, f: (right(d, f)[0] - f, right(d, f)[1]))
    assert "its first linear map has d_ff" in ff_in_bias.message
    assert "swapped" in check(name, lambda d, f: right(d, f)[::-1]).message


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

    def with_norms(first, second):  # post-LN with other LayerNorms (norm1, norm2 or fresh ones)
        def answer(layer, x, key_padding_mask=None):
            norms = {"norm1": layer.norm1, "norm2": layer.norm2,
                     "fresh": nn.LayerNorm(x.shape[-1], dtype=x.dtype),
                     "bare": lambda t: F.layer_norm(t, t.shape[-1:])}
            a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask,
                                   need_weights=False)
            x = norms[first](x + a)
            return norms[second](x + layer.ff(x))
        return answer

    def via_residual(layer, x, key_padding_mask=None):  # the book's own wrapper, post-LN
        def attend(h):
            return layer.self_attn(h, h, h, key_padding_mask=key_padding_mask,
                                   need_weights=False)[0]
        x = residual(x, attend, layer.norm1, layer.dropout1, norm_first=False)
        return residual(x, layer.ff, layer.norm2, layer.dropout2, norm_first=False)

    def flag(layer, x, key_padding_mask=None):  # no parts: the layer switched to post-LN for good
        layer.norm_first = False
        return layer(x, key_padding_mask=key_padding_mask)

    def fresh_float32(layer, x, key_padding_mask=None):  # nn.LayerNorm(D) is float32
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = nn.LayerNorm(x.shape[-1])(x + a)
        return nn.LayerNorm(x.shape[-1])(x + layer.ff(x))

    name = "ex-ch6-postln"
    for answer in (right, via_residual):
        assert check(name, answer), answer.__name__
    assert check(name, starter).status == "not attempted"
    assert "swapped" in check(name, with_norms("norm2", "norm1")).message
    assert "norm1 is used after both" in check(name, with_norms("norm1", "norm1")).message
    assert "norm2 is used after both" in check(name, with_norms("norm2", "norm2")).message
    for first, second, which in (("fresh", "fresh", "both"), ("bare", "bare", "both"),
                                 ("norm1", "bare", "second"), ("fresh", "norm2", "first")):
        message = check(name, with_norms(first, second)).message
        assert "without the layer's gain and shift" in message and which in message, message
    assert check(name, fresh_float32).status == "fail"
    assert "pre-LN arrangement" in check(name, pre_ln).message
    assert "not normalised" in check(name, one_norm).message
    assert "on the branches" in check(name, on_the_branch).message
    assert "padding mask" in check(name, no_mask).message
    inverted = check(name, lambda layer, x, key_padding_mask=None: right(
        layer, x, ~key_padding_mask))
    assert "inverted" in inverted.message

    def no_residual(layer, x, key_padding_mask=None):
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        h = layer.norm1(a)
        return layer.norm2(h + layer.ff(h))

    assert "first residual is missing" in check(name, no_residual).message

    def ff_by_hand(layer, x, key_padding_mask=None):  # the FFN's own dropout left out
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = layer.norm1(x + layer.dropout1(a))
        f = layer.ff.linear2(F.relu(layer.ff.linear1(x)))
        return layer.norm2(x + layer.dropout2(f))

    assert "layer.ff.dropout" in check(name, ff_by_hand).message

    def ff_by_hand_with_dropout(layer, x, key_padding_mask=None):  # right, written out
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = layer.norm1(x + layer.dropout1(a))
        f = layer.ff.linear2(layer.ff.dropout(F.relu(layer.ff.linear1(x))))
        return layer.norm2(x + layer.dropout2(f))

    assert check(name, ff_by_hand_with_dropout)

    def ff_dropout_on_output(layer, x, key_padding_mask=None):  # called, on the wrong tensor
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = layer.norm1(x + layer.dropout1(a))
        f = layer.ff.dropout(layer.ff.linear2(F.relu(layer.ff.linear1(x))))
        return layer.norm2(x + layer.dropout2(f))

    assert "something else than the feed-forward" in check(name, ff_dropout_on_output).message

    def ff_on_rows(layer, x, key_padding_mask=None):  # right: the FFN called on (B * T, D)
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = layer.norm1(x + layer.dropout1(a))
        f = layer.ff(x.reshape(-1, x.shape[-1])).reshape(x.shape)
        return layer.norm2(x + layer.dropout2(f))

    def ff_by_hand_on_rows(layer, x, key_padding_mask=None):  # right: written out, on rows
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = layer.norm1(x + layer.dropout1(a))
        rows = x.reshape(-1, x.shape[-1])
        f = layer.ff.linear2(layer.ff.dropout(F.relu(layer.ff.linear1(rows))))
        return layer.norm2(x + layer.dropout2(f.reshape(x.shape)))

    for answer in (ff_on_rows, ff_by_hand_on_rows):
        assert check(name, answer), answer.__name__
    assert "switched the layer's norm_first" in check(name, flag).message

    def flag_restored(layer, x, key_padding_mask=None):  # switched back: still no parts used
        layer.norm_first = False
        try:
            return layer(x, key_padding_mask=key_padding_mask)
        finally:
            layer.norm_first = True

    def copy_switched(layer, x, key_padding_mask=None):
        post = copy.deepcopy(layer)
        post.norm_first = False
        return post(x, key_padding_mask=key_padding_mask)

    for answer in (flag_restored, copy_switched):
        assert "calls the layer itself" in check(name, answer).message

    def dropout_on_sum(layer, x, key_padding_mask=None):  # the review's case: right in eval mode
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = layer.norm1(layer.dropout1(x + a))
        return layer.norm2(x + layer.dropout2(layer.ff(x)))

    def no_dropout(layer, x, key_padding_mask=None):
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = layer.norm1(x + a)
        return layer.norm2(x + layer.ff(x))

    assert "dropout1 is applied to something else" in check(name, dropout_on_sum).message

    def dropouts_swapped(layer, x, key_padding_mask=None):  # same rates: the same function
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = layer.norm1(x + layer.dropout2(a))
        return layer.norm2(x + layer.dropout1(layer.ff(x)))

    assert "dropout1 and dropout2 are swapped" in check(name, dropouts_swapped).message
    assert "the module dropout1 is never called" in check(name, no_dropout).message

    def ff_reads_input(layer, x, key_padding_mask=None):
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        h = layer.norm1(x + layer.dropout1(a))
        return layer.norm2(h + layer.dropout2(layer.ff(x)))

    def input_twice(layer, x, key_padding_mask=None):
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        h = layer.norm1(x + layer.dropout1(a))
        return layer.norm2(x + h + layer.dropout2(layer.ff(h)))

    assert "reads the layer's input x" in check(name, ff_reads_input).message
    def second_residual_from_input(layer, x, key_padding_mask=None):
        a, _ = layer.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        h = layer.norm1(x + layer.dropout1(a))
        return layer.norm2(x + layer.dropout2(layer.ff(h)))

    assert "added twice" in check(name, input_twice).message
    assert "second residual adds" in check(name, second_residual_from_input).message


def test_sliding():
    def right(model, ids, block, stride):
        model.eval()
        windows = ids.unfold(0, block + 1, stride)
        nll, count = 0.0, 0
        for w in windows.split(100):  # in batches, as a learner might
            logits, _ = model(w[:, :-1])
            losses = F.cross_entropy(logits.transpose(1, 2), w[:, 1:], reduction="none")
            nll += losses[:, -stride:].sum().item()
            count += losses[:, -stride:].numel()
        return math.exp(nll / count)

    def every_prediction(model, ids, block, stride):
        model.eval()
        windows = ids.unfold(0, block + 1, stride)
        logits, _ = model(windows[:, :-1])
        return math.exp(F.cross_entropy(logits.transpose(1, 2), windows[:, 1:]).item())

    def mean_loss(model, ids, block, stride):
        return math.log(right(model, ids, block, stride))

    def window_by_window(model, ids, block, stride):  # one window at a time, then train() again
        model.eval()
        losses = []
        for start in range(0, len(ids) - block, stride):
            w = ids[start : start + block + 1]
            logits, _ = model(w[None, :-1])
            losses.append(F.cross_entropy(logits[0, -stride:], w[-stride:], reduction="none"))
        model.train()
        return torch.cat(losses).mean().exp()

    def in_numpy(model, ids, block, stride):
        return np.float64(right(model, ids, block, stride))

    def one_off(model, ids, block, stride):  # targets gathered one position early
        model.eval()
        windows = ids.unfold(0, block + 1, stride)
        logits, _ = model(windows[:, :-1])
        targets = windows[:, -stride - 1 : -1]
        losses = F.cross_entropy(logits[:, -stride:].transpose(1, 2), targets, reduction="none")
        return math.exp(losses.mean().item())

    assert "shifted by one" in check("ex-ch6-sliding", one_off).message

    def in_training_mode(model, ids, block, stride):  # no model.eval(): dropout stays on
        windows = ids.unfold(0, block + 1, stride)
        logits, _ = model(windows[:, :-1])
        losses = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")
        return math.exp(losses[:, -stride:].mean().item())

    def first_window_whole(model, ids, block, stride):  # Hugging Face's perplexity guide
        model.eval()
        windows = ids.unfold(0, block + 1, stride)
        logits, _ = model(windows[:, :-1])
        losses = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")
        return torch.cat([losses[0], losses[1:, -stride:].flatten()]).mean().exp()

    def windows_of_block(model, ids, block, stride):  # one id short
        model.eval()
        windows = ids.unfold(0, block, stride)
        logits, _ = model(windows[:, :-1])
        losses = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")
        return losses[:, -stride:].mean().exp()

    assert "Hugging Face's perplexity guide" in check("ex-ch6-sliding",
                                                       first_window_whole).message
    assert "one too few" in check("ex-ch6-sliding", windows_of_block).message

    def kept_one_early(model, ids, block, stride):  # the same numbers as windows of block ids
        model.eval()
        windows = ids.unfold(0, block + 1, stride)
        logits, _ = model(windows[:, :-1])
        losses = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")
        return losses[:, -stride - 1:-1].mean().exp()

    def first_stride(model, ids, block, stride):  # the predictions with the least context
        model.eval()
        windows = ids.unfold(0, block + 1, stride)
        logits, _ = model(windows[:, :-1])
        losses = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")
        return losses[:, :stride].mean().exp()

    assert "losses[:, -stride:]" in check("ex-ch6-sliding", kept_one_early).message
    assert "first stride predictions" in check("ex-ch6-sliding", first_stride).message

    def scored(model, ids, block, step, stride):  # the last stride losses of windows step apart
        model.eval()
        windows = ids.unfold(0, block + 1, step)
        logits, _ = model(windows[:, :-1])
        return F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")[
            :, -stride:]

    per_token = check("ex-ch6-sliding", lambda m, i, b, s: scored(m, i, b, s, s).exp().mean())
    assert "the tokens' perplexities" in per_token.message
    by_block = check("ex-ch6-sliding", lambda m, i, b, s: scored(m, i, b, b, s).mean().exp())
    assert "start block = 16 ids apart" in by_block.message

    def one_batch_of_256(model, ids, block, stride):  # drops the windows after the first 256
        return right(model, ids[: 256 * stride + block], block, stride)

    def mean_of_window_perplexities(model, ids, block, stride):
        model.eval()
        windows = ids.unfold(0, block + 1, stride)
        logits, _ = model(windows[:, :-1])
        losses = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")
        return losses[:, -stride:].mean(1).exp().mean().item()

    name = "ex-ch6-sliding"
    for answer in (right, window_by_window, in_numpy):
        assert check(name, answer), answer.__name__
    assert check(name, starter).status == "not attempted"
    assert "training mode" in check(name, in_training_mode).message
    assert "text of 521 ids" in check(name, one_batch_of_256).message
    assert "windows' perplexities" in check(name, mean_of_window_perplexities).message

    def last_window_dropped(model, ids, block, stride):  # range stops one window early
        model.eval()
        losses = []
        for start in range(0, len(ids) - block - 1, stride):
            w = ids[start : start + block + 1]
            logits, _ = model(w[None, :-1])
            losses.append(F.cross_entropy(logits[0, -stride:], w[-stride:], reduction="none"))
        return torch.cat(losses).mean().exp()

    assert "last window is missing" in check(name, last_window_dropped).message

    def end_aligned(model, ids, block, stride, new_only=False):  # one more window at the end
        model.eval()
        starts = list(range(0, len(ids) - block, stride))
        losses = [F.cross_entropy(model(ids[None, s : s + block])[0][0, -stride:],
                                  ids[s + block - stride + 1 : s + block + 1], reduction="none")
                  for s in starts]
        covered = starts[-1] + block  # the last id scored
        if covered < len(ids) - 1:
            end = ids[-(block + 1):]
            tail = F.cross_entropy(model(end[None, :-1])[0][0], end[1:], reduction="none")
            losses.append(tail[-(len(ids) - 1 - covered):] if new_only else tail[-stride:])
        return torch.cat(losses).mean().exp()

    for new_only in (False, True):
        message = check(name, lambda m, i, b, s, n=new_only: end_aligned(m, i, b, s, n)).message
        assert "one more window that ends at the text's end" in message
        assert "a text of 163 ids" in message

    def always_end_aligned(model, ids, block, stride):  # the extra window even when it repeats
        model.eval()
        starts = list(range(0, len(ids) - block, stride)) + [len(ids) - block - 1]
        losses = [F.cross_entropy(model(ids[None, s : s + block])[0][0, -stride:],
                                  ids[s + block - stride + 1 : s + block + 1], reduction="none")
                  for s in starts]
        return torch.cat(losses).mean().exp()

    twice = check(name, always_end_aligned).message
    assert "a text of 161 ids" in twice and "scores its predictions twice" in twice
    assert "every prediction" in check(name, every_prediction).message
    assert "exponential" in check(name, mean_loss).message


def test_causal_mask():
    name = "ex-ch6-causal-mask"

    def buggy(T):  # the starter of the exercise
        return torch.ones(T, T, dtype=torch.bool).triu(0)

    assert check(name, lambda T: torch.ones(T, T, dtype=torch.bool).triu(1))
    assert check(name, lambda T: ~causal_mask(T))
    assert check(name, starter).status == "not attempted"
    message = check(name, buggy).message
    # the symptom, not the exercise's question (what the first query's weights look like)
    assert "blocks keys that a query may read" in message and "first" not in message
    no_self = lambda T: ~causal_mask(T) | torch.eye(T, dtype=torch.bool) & (torch.arange(T) > 0)  # noqa: E731
    assert "may not read its own key" in check(name, no_self).message
    assert "polarity is flipped" in check(name, causal_mask).message
    transposed = check(name, lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1)).message
    assert "wrong way round" in transposed and "blocks the past" in transposed
    assert "future leaks" in check(name, lambda T: torch.ones(T, T, dtype=torch.bool).triu(2)
                                   ).message
    float01 = check(name, lambda T: torch.ones(T, T).triu(1)).message
    assert "boolean" in float01 and "added to the scores" in float01
    additive = check(name, nn.Transformer.generate_square_subsequent_mask).message
    assert "additive float form" in additive, additive


def test_rope_values():
    name = "ex-ch6-rope-values"

    def right(q, k, v, cos, sin):
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return scaled_dot_product_attention(q, k, v, causal_mask(q.shape[2]))[0]

    def backwards(q, k, v, cos, sin):  # both turned the other way: offset-only, not (6.10)
        q, k = apply_rope(q, cos, -sin), apply_rope(k, cos, -sin)
        return scaled_dot_product_attention(q, k, v, causal_mask(q.shape[2]))[0]

    assert "the other way" in check(name, backwards).message

    def buggy(q, k, v, cos, sin):  # the starter of the exercise
        q, k, v = apply_rope(q, cos, sin), apply_rope(k, cos, sin), apply_rope(v, cos, sin)
        return scaled_dot_product_attention(q, k, v, causal_mask(q.shape[2]))[0]

    def fused(q, k, v, cos, sin):
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def not_causal(q, k, v, cos, sin):
        return scaled_dot_product_attention(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v)[0]

    def float32_promoted(q, k, v, cos, sin):  # float32 arithmetic, returned as float64
        out = right(*(x.float() for x in (q, k, v, cos, sin)))
        return out.numpy() * np.float64(1.0)

    assert check(name, right)
    assert check(name, fused)
    assert check(name, float32_promoted)
    assert check(name, starter).status == "not attempted"
    message = check(name, buggy).message
    assert "run the shift test" in message and "different" not in message  # not its result

    def flipped_mask(q, k, v, cos, sin):  # True = blocked, the previous exercise's convention
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return scaled_dot_product_attention(q, k, v, ~causal_mask(q.shape[2]))[0]

    def neighbour_pairs(q, k, v, cos, sin):  # RoFormer's pairs (2i, 2i + 1)
        def turn(x):
            c, s = cos[:, :4], sin[:, :4]
            x1, x2 = x[..., ::2], x[..., 1::2]
            out = torch.empty_like(x)
            out[..., ::2], out[..., 1::2] = x1 * c - x2 * s, x1 * s + x2 * c
            return out
        return scaled_dot_product_attention(turn(q), turn(k), v, causal_mask(q.shape[2]))[0]

    assert "polarity is flipped" in check(name, flipped_mask).message
    assert "neighbouring pairs" in check(name, neighbour_pairs).message

    def book_pairs(q, k, v, cos, sin):  # eq. (rope) as printed: pairs (2i, 2i + 1), its R
        def turn(x):
            c, s = cos[:, :4], sin[:, :4]
            x1, x2 = x[..., ::2], x[..., 1::2]
            return torch.stack((x1 * c + x2 * s, -x1 * s + x2 * c), dim=-1).flatten(-2)
        return scaled_dot_product_attention(turn(q), turn(k), v, causal_mask(q.shape[2]))[0]

    message = check(name, book_pairs).message
    assert "R of eq. (rope)" in message and "apply_rope's" in message, message
    for one_side in (
        lambda q, k, v, cos, sin: scaled_dot_product_attention(
            apply_rope(q, cos, sin), k, v, causal_mask(q.shape[2]))[0],
        lambda q, k, v, cos, sin: scaled_dot_product_attention(
            apply_rope(q, cos, sin), apply_rope(k, cos, -sin), v, causal_mask(q.shape[2]))[0],
    ):
        assert "must both be turned" in check(name, one_side).message
    assert "nothing is turned" in check(
        name, lambda q, k, v, c, s: scaled_dot_product_attention(
            q, k, v, causal_mask(q.shape[2]))[0]).message
    assert "causal mask" in check(name, not_causal).message


def test_kv_memory():
    name = "ex-ch6-kv-memory"
    right = 2 * 12 * 8 * 1024 * 768 * 4
    for answer in (right, float(right), 6.04e8, 6.0398e8, np.int64(right), np.float32(right),
                   torch.tensor(right), np.array([right])):
        assert check(name, answer), answer
    assert not check(name, 6.05e8)  # a digit off at 3 significant digits
    assert not check(name, 6.0e8)  # 2 significant digits
    assert check(name, ...).status == "not attempted"
    assert "gigabytes" in check(name, 0.604).message
    assert "gibibytes" in check(name, 0.5625).message
    assert "megabytes" in check(name, 604).message
    assert "in bits" in check(name, right * 8).message
    assert "already holds all 12 heads" in check(name, right * 12).message
    assert "keys and the values" in check(name, 3.02e8).message
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

    def careful(model, idx, max_new_tokens):  # no last call whose logits go unused
        caches = [KVCache(model.config.block_size) for _ in model.blocks]
        logits, _ = model.forward(idx, caches=caches)  # forward(...) itself is seen too
        for step in range(max_new_tokens):
            next_id = logits[:, -1].argmax(-1, keepdim=True)
            idx = torch.cat([idx, next_id], dim=1)
            if step < max_new_tokens - 1:
                logits, _ = model.forward(next_id, caches=caches)
        return idx

    def prompt_token_by_token(model, idx, max_new_tokens):  # the cache filled one at a time
        caches = [KVCache(model.config.block_size) for _ in model.blocks]
        for t in range(idx.shape[1]):
            logits, _ = model(idx[:, t : t + 1], caches=caches)
        for _ in range(max_new_tokens):
            next_id = logits[:, -1].argmax(-1)
            idx = torch.cat([idx, next_id[:, None]], dim=1)
            logits, _ = model(next_id[:, None], caches=caches)
        return idx

    def no_cache(model, idx, max_new_tokens):  # right tokens, the whole prefix at each step
        for _ in range(max_new_tokens):
            logits, _ = model(idx)
            idx = torch.cat([idx, logits[:, -1].argmax(-1)[:, None]], dim=1)
        return idx

    def in_two_chunks(model, idx, max_new_tokens):  # right: the prompt in two calls
        caches = [KVCache(model.config.block_size) for _ in model.blocks]
        model(idx[:, :2], caches=caches)
        logits, _ = model(idx[:, 2:], caches=caches)
        for _ in range(max_new_tokens):
            next_id = logits[:, -1:].argmax(-1)  # (B, 1)
            idx = torch.cat([idx, next_id], dim=1)
            logits, _ = model(next_id, caches=caches)
        return idx

    def hugging_face_style(model, idx, max_new_tokens):  # right: the last token in the loop
        caches = [KVCache(idx.shape[1] + max_new_tokens) for _ in model.blocks]
        model(idx[:, :-1], caches=caches)
        for _ in range(max_new_tokens):
            logits, _ = model(idx[:, -1:], caches=caches)
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return idx

    def previous_token(model, idx, max_new_tokens):  # feeds the token before the newest
        caches = [KVCache(model.config.block_size) for _ in model.blocks]
        logits, _ = model(idx, caches=caches)
        for _ in range(max_new_tokens):
            idx = torch.cat([idx, logits[:, -1].argmax(-1)[:, None]], dim=1)
            logits, _ = model(idx[:, -2:-1], caches=caches)
        return idx

    def last_two(model, idx, max_new_tokens):  # feeds the last two tokens at every step
        caches = [KVCache(model.config.block_size) for _ in model.blocks]
        logits, _ = model(idx, caches=caches)
        for _ in range(max_new_tokens):
            idx = torch.cat([idx, logits[:, -1].argmax(-1)[:, None]], dim=1)
            logits, _ = model(idx[:, -2:], caches=caches)
        return idx

    def prompt_without_first(model, idx, max_new_tokens):  # the prompt's first token lost
        caches = [KVCache(model.config.block_size) for _ in model.blocks]
        logits, _ = model(idx[:, 1:], caches=caches)
        for _ in range(max_new_tokens):
            next_id = logits[:, -1].argmax(-1)
            idx = torch.cat([idx, next_id[:, None]], dim=1)
            logits, _ = model(next_id[:, None], caches=caches)
        return idx

    def whole_via_forward(model, idx, max_new_tokens):  # whole_sequence, through forward
        caches = [KVCache(model.config.block_size) for _ in model.blocks]
        for _ in range(max_new_tokens):
            logits, _ = model.forward(idx, caches=caches)
            idx = torch.cat([idx, logits[:, -1].argmax(-1)[:, None]], dim=1)
        return idx

    def one_cache_for_all_blocks(model, idx, max_new_tokens):  # [cache] * n_layer
        caches = [KVCache(model.config.block_size)] * len(model.blocks)
        logits, _ = model(idx, caches=caches)
        for _ in range(max_new_tokens):
            next_id = logits[:, -1].argmax(-1)
            idx = torch.cat([idx, next_id[:, None]], dim=1)
            logits, _ = model(next_id[:, None], caches=caches)
        return idx

    def row_by_row(model, idx, max_new_tokens):  # right: one set of caches per row
        return torch.cat([right(model, idx[r : r + 1], max_new_tokens)
                          for r in range(idx.shape[0])])

    def while_loop(model, idx, max_new_tokens):  # right: caches exactly as long as needed
        end = idx.shape[1] + max_new_tokens
        caches = [KVCache(end) for _ in model.blocks]
        logits = model(idx, caches=caches)[0]
        while idx.shape[1] < end:
            idx = torch.cat([idx, logits[:, -1:].argmax(-1)], dim=1)
            if idx.shape[1] < end:
                logits = model(idx[:, -1:], caches=caches)[0]
        return idx

    def shifted_by_hand(model, idx, max_new_tokens):  # moves the caches' length one on
        caches = [KVCache(model.config.block_size) for _ in model.blocks]
        logits, _ = model(idx, caches=caches)
        for cache in caches:
            cache.length += 1
        for _ in range(max_new_tokens):
            next_id = logits[:, -1].argmax(-1)
            idx = torch.cat([idx, next_id[:, None]], dim=1)
            logits, _ = model(next_id[:, None], caches=caches)
        return idx

    def squeezed(model, idx, max_new_tokens):  # .squeeze() drops the batch of one row
        caches = [KVCache(model.config.block_size) for _ in model.blocks]
        logits, _ = model(idx, caches=caches)
        for _ in range(max_new_tokens):
            next_id = logits[:, -1].argmax(-1).squeeze()
            idx = torch.cat([idx, next_id.reshape(-1, 1)], dim=1)
            logits, _ = model(next_id.reshape(idx.shape[0], 1).squeeze(), caches=caches)
        return idx

    def prompt_only(model, idx, max_new_tokens):  # caches for the prompt, then none
        caches = [KVCache(model.config.block_size) for _ in model.blocks]
        logits, _ = model(idx, caches=caches)
        for _ in range(max_new_tokens):
            next_id = logits[:, -1].argmax(-1)
            idx = torch.cat([idx, next_id[:, None]], dim=1)
            logits, _ = model(next_id[:, None])
        return idx

    def newest_without_caches(model, idx, max_new_tokens):  # no caches, the newest token only
        logits, _ = model(idx)
        for _ in range(max_new_tokens):
            next_id = logits[:, -1].argmax(-1)
            idx = torch.cat([idx, next_id[:, None]], dim=1)
            logits, _ = model(next_id[:, None])
        return idx

    def stale_logits(model, idx, max_new_tokens):  # feeds right, never reads the new logits
        caches = [KVCache(model.config.block_size) for _ in model.blocks]
        logits, _ = model(idx, caches=caches)
        for _ in range(max_new_tokens):
            next_id = logits[:, -1].argmax(-1)
            idx = torch.cat([idx, next_id[:, None]], dim=1)
            model(next_id[:, None], caches=caches)
        return idx

    def transposed(model, idx, max_new_tokens):  # feeds shape (1, B)
        caches = [KVCache(model.config.block_size) for _ in model.blocks]
        logits, _ = model(idx, caches=caches)
        for _ in range(max_new_tokens):
            next_id = logits[:, -1].argmax(-1)
            idx = torch.cat([idx, next_id[:, None]], dim=1)
            logits, _ = model(next_id[None], caches=caches)
        return idx

    def too_small(model, idx, max_new_tokens):  # caches for the prompt only
        caches = [KVCache(idx.shape[1]) for _ in model.blocks]
        logits, _ = model(idx, caches=caches)
        for _ in range(max_new_tokens):
            next_id = logits[:, -1].argmax(-1)
            idx = torch.cat([idx, next_id[:, None]], dim=1)
            logits, _ = model(next_id[:, None], caches=caches)
        return idx

    with torch.no_grad():
        for answer in (row_by_row, while_loop):
            assert check(name, answer), (answer.__name__, check(name, answer).message)
        for answer, words in ((shifted_by_hand, "caches held 6 positions, but 5 tokens"),
                              (squeezed, "greedy_with_cache raised"),
                              (prompt_only, "a call after the first passed no caches"),
                              (newest_without_caches, "no call passed caches"),
                              (stale_logits, "look at how each token is chosen"),
                              (transposed, "caches hold 2 sequences, got idx with 1"),
                              (too_small, "caches hold max_len=5 positions: 5 kept + 1 new")):
            message = check(name, answer).message
            assert words in message, (answer.__name__, message)
        for answer in (right, careful, prompt_token_by_token):
            assert check(name, answer)
        message = check(name, no_cache).message
        assert "5, 6, 7, 8, ... positions per call without caches" in message, message
        assert "68 positions a row for a sequence of 13" in message, message
        # the library's loop, with or without its cache, is not the exercise's
        for kwargs in ({}, {"use_cache": True}):
            message = check(name, lambda m, i, n, kw=kwargs: m.generate(i, n, temperature=0,
                                                                         **kw)).message
            assert "calls model.generate" in message, message
        from seqbook.decoding import generate_tokens

        message = check(name, lambda m, i, n: generate_tokens(m, i, n, 0.0, None, (), None,
                                                              True)).message
        assert "generate_tokens, its loop" in message, message
        assert sys.getprofile() is None  # the watch is gone after the check
        assert check(name, starter).status == "not attempted"
        message = check(name, fresh_caches).message
        assert "found its caches empty 8 times" in message, message
        message = check(name, whole_sequence).message
        assert "fed the prompt again, 6 tokens, to caches that already held 5" in message, message
        for answer in (in_two_chunks, hugging_face_style):
            assert check(name, answer), check(name, answer).message
        for answer, words in ((previous_token, "token 5 they were fed is"),
                              (last_two, "token 5 they were fed is"),
                              (prompt_without_first, "token 0 they were fed is"),
                              (whole_via_forward, "fed the prompt again"),
                              (one_cache_for_all_blocks, "distinct KVCache")):
            message = check(name, answer).message
            assert words in message, (answer.__name__, message)
        assert "shape (2, 13)" in check(name, lambda m, i, n: i).message


def test_rmsnorm():
    name = "ex-ch6-rmsnorm"

    def right(x, weight, eps=1e-6):
        return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight

    def with_rsqrt(x, weight, eps=1e-6):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    def with_norm(x, weight, eps=1e-6):
        d = x.shape[-1]
        return x / torch.sqrt(x.norm(dim=-1, keepdim=True) ** 2 / d + eps) * weight

    def in_float64(x, weight, eps=1e-6):
        return right(x.double(), weight.double(), eps)

    def in_float32(x, weight, eps=1e-6):
        return right(x.float(), weight.float(), eps)

    def in_numpy(x, weight, eps=1e-6):
        x, weight = x.numpy(), weight.numpy()
        return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * weight

    def layer_norm(x, weight, eps=1e-6):
        return F.layer_norm(x, x.shape[-1:], weight, None, eps)

    def centred(x, weight, eps=1e-6):
        return right(x - x.mean(-1, keepdim=True), weight, eps)

    def eps_outside(x, weight, eps=1e-6):
        return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * weight

    def wrong_axis(x, weight, eps=1e-6):
        return x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * weight

    def whole_tensor(x, weight, eps=1e-6):
        return x / torch.sqrt(x.pow(2).mean() + eps) * weight

    def by_the_norm(x, weight, eps=1e-6):
        return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * weight

    def in_place(x, weight, eps=1e-6):
        return x.div_(torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)).mul_(weight)

    def like_hugging_face(x, weight, eps=1e-6):  # in float32, cast back to x's dtype
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight

    def by_the_std(x, weight, eps=1e-6):
        return x / torch.sqrt(x.var(-1, keepdim=True) + eps) * weight

    def gain_first(x, weight, eps=1e-6):
        return right(x * weight, torch.ones_like(weight), eps)

    def layer_norm_eps(x, weight, eps=1e-6):
        return right(x, weight, 1e-5)

    for answer in (right, with_rsqrt, with_norm, in_float64, in_float32, in_numpy,
                   like_hugging_face):
        assert check(name, answer), answer.__name__
    assert "standard deviation" in check(name, by_the_std).message
    assert "before the normalisation" in check(name, gain_first).message
    assert "1e-5 here" in check(name, layer_norm_eps).message
    assert check(name, starter).status == "not attempted"
    assert "LayerNorm" in check(name, layer_norm).message
    assert "LayerNorm" in check(name, centred).message
    assert "outside the square root" in check(name, eps_outside).message
    assert "eps is not used" in check(name, lambda x, w, eps=1e-6: right(x, w, 0.0)).message
    assert "wrong axis" in check(name, wrong_axis).message
    assert "wrong axis" in check(name, whole_tensor).message
    assert "weight is missing" in check(name, lambda x, w, eps=1e-6: right(x, 1.0, eps)).message
    assert "norm of each token" in check(name, by_the_norm).message
    assert "square root is missing" in check(
        name, lambda x, w, eps=1e-6: x / (x.pow(2).mean(-1, keepdim=True) + eps) * w).message
    assert "ignores the eps" in check(name, lambda x, w, eps=1e-6: right(x, w)).message
    assert "in place" in check(name, in_place).message
    assert "must return a tensor" in check(name, lambda x, w, eps=1e-6: 1.0).message

    def var_plus_mean(x, weight, eps=1e-6):  # x.var's default divides by D - 1
        ms = x.var(-1, keepdim=True) + x.mean(-1, keepdim=True) ** 2
        return x / torch.sqrt(ms + eps) * weight

    assert "divides by D - 1" in check(name, var_plus_mean).message


def top_p_buggy(logits, p):  # the starter of ex-ch6-top-p-bug
    """Keep the most probable tokens whose probability sums to at least p."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cum > p
    remove[..., 0] = False  # always keep the most probable token
    remove = remove.scatter(-1, order, remove)
    return logits.masked_fill(remove, float("-inf"))


def top_p_fixed(logits, p):  # the solution of ex-ch6-top-p-bug
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    cum = probs.cumsum(dim=-1)
    remove = cum - probs >= p  # the tokens before this one already hold p
    remove = remove.scatter(-1, order, remove)
    return logits.masked_fill(remove, float("-inf"))


def _top_p_mask(logits, p):
    """The right mask in sorted order, the sort, and the sorted probabilities."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    return probs.cumsum(dim=-1) - probs >= p, order, probs


def test_top_p_cases_have_no_token_near_the_cut():
    for logits, p in top_p_cases():
        probs = logits.double().softmax(-1).sort(-1, descending=True).values
        before = probs.cumsum(-1) - probs
        assert float((before - p).abs().min()) > 1e-4
        assert torch.equal(torch.isfinite(top_p_fixed(logits, p)),
                           torch.isfinite(top_p(logits, p)))


def test_top_p_exact_case_is_exact():
    """The tokens before the third of the exact row hold exactly p, in float32 and float64."""
    logits, p = top_p_exact_case()
    for dtype in (torch.float32, torch.float64):
        probs = logits.to(dtype).softmax(-1).sort(-1, descending=True).values
        before = probs.cumsum(-1) - probs
        assert float(before[0, 2]) == p and float(before[0, 1]) < p
        assert torch.isfinite(top_p_fixed(logits.to(dtype), p)).sum() == 2
        assert torch.isfinite(top_p(logits.to(dtype), p)).sum() == 4  # top_p keeps the ties


def test_top_p_bug():
    name = "ex-ch6-top-p-bug"

    def strictly_more(logits, p):  # the mass before a token must exceed p for it to go
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        remove = probs.cumsum(dim=-1) - probs > p
        remove = remove.scatter(-1, order, remove)
        return logits.masked_fill(remove, float("-inf"))

    def rows_only(logits, p):  # dim=1: right for a (B, V) batch only
        sorted_logits, order = logits.sort(dim=1, descending=True)
        probs = sorted_logits.softmax(dim=1)
        remove = probs.cumsum(dim=1) - probs >= p
        remove = remove.scatter(1, order, remove)
        return logits.masked_fill(remove, float("-inf"))

    def stable(logits, p):  # a stable sort: the first tied ids are kept
        sorted_logits, order = logits.sort(dim=-1, descending=True, stable=True)
        probs = sorted_logits.softmax(dim=-1)
        remove = probs.cumsum(dim=-1) - probs >= p
        remove = remove.scatter(-1, order, remove)
        return logits.masked_fill(remove, float("-inf"))

    def shifted(logits, p):  # keep = the mass before a token is below p
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        keep = probs.cumsum(dim=-1) - probs < p
        keep = keep.scatter(-1, order, keep)
        return logits.masked_fill(~keep, float("-inf"))

    def ascending(logits, p):  # as Hugging Face's TopPLogitsWarper
        sorted_logits, order = logits.sort(dim=-1)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cum <= 1 - p
        remove[..., -1:] = False
        remove = remove.scatter(-1, order, remove)
        return logits.masked_fill(remove, float("-inf"))

    def log_probs(logits, p):  # the same distribution: a row shift of the logits
        return top_p(logits, p).log_softmax(-1)

    def complement(logits, p):
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cum > 1 - p
        remove[..., 0] = False
        remove = remove.scatter(-1, order, remove)
        return logits.masked_fill(remove, float("-inf"))

    def below_one_minus_p(logits, p):
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        keep = sorted_logits.softmax(dim=-1).cumsum(dim=-1) < 1 - p
        keep = keep.scatter(-1, order, keep)
        return logits.masked_fill(~keep, float("-inf"))

    def probabilities(logits, p):
        return top_p_fixed(logits, p).softmax(-1)

    def zeros(logits, p):
        remove, order, _ = _top_p_mask(logits, p)
        return logits.masked_fill(remove.scatter(-1, order, remove), 0.0)

    def in_place(logits, p):
        remove, order, _ = _top_p_mask(logits, p)
        return logits.masked_fill_(remove.scatter(-1, order, remove), float("-inf"))

    def unsorted_mask(logits, p):  # the mask of the sorted row applied to the ids
        remove, _, _ = _top_p_mask(logits, p)
        return logits.masked_fill(remove, float("-inf"))

    def sorted_result(logits, p):
        remove, _, _ = _top_p_mask(logits, p)
        return logits.sort(dim=-1, descending=True).values.masked_fill(remove, float("-inf"))

    def too_large(logits, p):  # keeps one token more than needed
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        remove = probs.cumsum(dim=-1) - probs > p
        remove[..., 1:] = remove[..., :-1].clone()
        remove = remove.scatter(-1, order, remove)
        return logits.masked_fill(remove, float("-inf"))

    for answer in (top_p_fixed, shifted, ascending, top_p, log_probs, stable,
                   lambda z, p: top_p_fixed(z.double(), p), lambda z, p: top_p_fixed(z, p).numpy()):
        assert check(name, answer)
    assert check(name, starter).status == "not attempted"
    bug = check(name, top_p_buggy)
    assert bug.status == "fail"
    assert "sums to less than p" in bug.message
    for word in ("cross", "shift", "exclusive", "before"):  # the fix is not given away
        assert word not in bug.message
    assert "complement" in check(name, complement).message
    assert "complement" in check(name, below_one_minus_p).message
    assert "probabilities" in check(name, probabilities).message
    assert "logit 0" in check(name, zeros).message
    assert "in place" in check(name, in_place).message
    assert "not the most probable" in check(name, unsorted_mask).message
    assert "sorted order" in check(name, sorted_result).message
    assert "larger than needed" in check(name, too_large).message
    assert "larger than needed" in check(name, strictly_more).message

    def shift_right(logits, p):  # the classic fix of cum > p: a token more where a prefix is p
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        remove = sorted_logits.softmax(dim=-1).cumsum(dim=-1) > p
        remove[..., 1:] = remove[..., :-1].clone()
        remove[..., 0] = False
        return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))

    ties = check(name, shift_right).message  # the exact case has four tied tokens at the cut
    assert "larger than needed" in ties and "the same probability" in ties
    assert "IndexError" in check(name, rows_only).message or not check(name, rows_only)
    assert "must return a tensor" in check(name, lambda z, p: z.tolist()).message

    def row_loop(logits, p):  # a loop over logits.shape[0]: a (V,) row is taken as V rows
        return torch.stack([top_p_fixed(logits[r], p) for r in range(logits.shape[0])])

    def minus_1e9(logits, p):  # removed tokens at -1e9 instead of -inf
        out = top_p_fixed(logits, p)
        return out.masked_fill(out.isinf(), -1e9)

    assert "one row of shape" in check(name, row_loop).message

    def unnormalised(logits, p):  # exp where the softmax belongs
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.exp()
        remove = probs.cumsum(dim=-1) - probs >= p
        return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))

    assert "without normalising" in check(name, unnormalised).message
    assert "large negative logit" in check(name, minus_1e9).message


def test_checks_leave_the_random_state_alone():
    answers = {
        "ex-ch6-rmsnorm": lambda x, w, eps=1e-6: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True)
                                                                + eps) * w,
        "ex-ch6-top-p-bug": top_p_buggy,
    }
    for name, answer in answers.items():
        for a in (answer, starter):
            state = torch.get_rng_state()
            check(name, a)
            assert torch.equal(torch.get_rng_state(), state), name


def test_spec_speedup():
    name = "ex-ch6-spec-speedup"

    def closed(alpha, k, c):
        tokens = k + 1 if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
        return tokens / (1 + c * k)

    def by_distribution(alpha, k, c):  # sum over the number kept, n < k rejected at n + 1
        tokens = sum((n + 1) * alpha**n * (1 - alpha) for n in range(k)) + (k + 1) * alpha**k
        return torch.tensor(tokens / (k * c + 1))

    for right in (closed, by_distribution, lambda a, k, c: np.float64(closed(a, k, c))):
        assert check(name, right)
    assert check(name, starter).status == "not attempted"
    no_case = lambda a, k, c: (1 - a ** (k + 1)) / ((1 - a) * (k * c + 1))  # noqa: E731
    assert "alpha = 1" in check(name, no_case).message

    def no_case_numpy(a, k, c):  # NumPy's 0 / 0 is nan (with a warning), not an error
        with np.errstate(invalid="ignore"):
            return (1 - np.float64(a) ** (k + 1)) / ((1 - np.float64(a)) * (k * c + 1))

    assert "alpha = 1" in check(name, no_case_numpy).message
    tokens = lambda a, k: sum(a**i for i in range(k + 1))  # noqa: E731
    assert "tokens per round" in check(name, lambda a, k, c: tokens(a, k)).message
    assert "model's own pass" in check(name, lambda a, k, c: tokens(a, k) / (k * c)).message
    assert "k + 1 draft steps" in check(name, lambda a, k, c: tokens(a, k) / ((k + 1) * c + 1)).message
    assert "kept guesses" in check(name, lambda a, k, c: (tokens(a, k) - 1) / (k * c + 1)).message
    assert "one token short" in check(name, lambda a, k, c: tokens(a, k - 1) / (k * c + 1)).message
    assert "rejection ends" in check(name, lambda a, k, c: (1 + k * a) / (k * c + 1)).message
    assert "other way round" in check(name, lambda a, k, c: (k * c + 1) / tokens(a, k)).message
    other = check(name, lambda a, k, c: 2.0).message  # names no expected value
    assert "your function gives 2" in other and "times as fast" not in other
    assert "must return a number" in check(name, lambda a, k, c: "fast").message


def test_streaming_mask():
    label = "ex-ch6-streaming-mask"

    def grids(T):
        return torch.arange(T)[:, None], torch.arange(T)[None, :]

    def right(T, window, sinks):
        i, j = grids(T)
        return (j <= i) & ((j > i - window) | (j < sinks))

    def from_the_window_mask(T, window, sinks):  # the book's band, then the sinks' columns
        mask = causal_mask(T, window=window).clone()
        mask[:, :sinks] = True
        return mask & causal_mask(T)

    def with_loops(T, window, sinks):
        return torch.tensor([[j <= i and (j > i - window or j < sinks) for j in range(T)]
                             for i in range(T)])

    def in_numpy(T, window, sinks):
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        return (j <= i) & ((j > i - window) | (j < sinks))

    for fn in (right, from_the_window_mask, with_loops, in_numpy):
        assert check(label, fn), fn.__name__
    untouched = check(label, starter)
    assert untouched.status == "not attempted"

    def slip(make):
        def fn(T, window, sinks):
            i, j = grids(T)
            return make(i, j, window, sinks)
        return fn

    wrong = {
        "True where a query may attend": slip(lambda i, j, w, s: ~((j <= i) & ((j > i - w) | (j < s)))),
        "the sinks are missing": slip(lambda i, j, w, s: (j <= i) & (j > i - w)),
        "the sinks are causal too": slip(lambda i, j, w, s: (j <= i) & (j > i - w) | (j < s)),
        "keep j <= i": slip(lambda i, j, w, s: (j > i - w) | (j < s)),
        "window + 1 keys": slip(lambda i, j, w, s: (j <= i) & ((j >= i - w) | (j < s))),
        "window - 1 keys": slip(lambda i, j, w, s: (j <= i) & ((j > i - w + 1) | (j < s))),
        "one sink too many": slip(lambda i, j, w, s: (j <= i) & ((j > i - w) | (j <= s))),
        "one sink too few": slip(lambda i, j, w, s: (j <= i) & ((j > i - w) | (j < s - 1))),
        "not exclusive or": slip(lambda i, j, w, s: (j <= i) & ((j > i - w) ^ (j < s))),
        "bool tensor": slip(lambda i, j, w, s: ((j <= i) & ((j > i - w) | (j < s))).float()),
        "must have shape": slip(lambda i, j, w, s: ((j <= i) & ((j > i - w) | (j < s)))[None]),
        "query 0 must not read key 1": slip(lambda i, j, w, s: (j <= i + 1) & ((j > i - w) | (j < s))),
        "combine bool tensors with &, | and ~": slip(lambda i, j, w, s: (j <= i) & (j > i - w | j < s)),
        "and, or or not on tensors": slip(lambda i, j, w, s: (j <= i) and ((j > i - w) or (j < s))),
    }
    for words, fn in wrong.items():
        result = check(label, fn)
        assert not result and words in result.message, (words, result.message)


def test_named_slips_from_a_fresh_reading():
    def params_scalar_norms(d, d_ff):  # a LayerNorm's gain and shift as one number each
        attention, ff = 4 * d * d + 4 * d, d * d_ff + d_ff + d_ff * d + d
        return attention + ff + 2 * 2, 2 * attention + ff + 3 * 2

    assert "counted as one number each" in check("ex-ch6-params", params_scalar_norms).message
    default_eps = check("ex-ch6-rmsnorm", lambda x, w, eps=1e-6: F.rms_norm(x, x.shape[-1:], w))
    assert "machine epsilon" in default_eps.message

    def special_case(alpha, k, c):  # 1 / (k c + 1) at alpha = 1: one token a round, not k + 1
        if alpha == 1:
            return 1 / (k * c + 1)
        return (1 - alpha ** (k + 1)) / (1 - alpha) / (k * c + 1)

    message = check("ex-ch6-spec-speedup", special_case).message
    assert "alpha = 1.0, k = 3" in message and "counts only the kept guesses" not in message
