"""Checks of chapter 6's exercises (the transformer)."""

from __future__ import annotations

import copy
import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from .. import decoding
from ..attention import causal_mask, scaled_dot_product_attention
from ..gpt import GPT, GPTConfig
from ..llama import RMSNorm
from ..rope import apply_rope, rope_angles
from ..sampling import top_p
from ..transformer import ACTIVATIONS, DecoderLayer, EncoderLayer, positional_frequencies
from ..utils import count_parameters
from .core import (
    CallWatch,
    Wrong,
    agrees,
    at_most_digits,
    call,
    close,
    cut_off,
    exercise,
    expect,
    name_slip,
    number,
    returned_tensor,
    tolerance,
    two_numbers,
)

F64 = torch.float64


# ---------------------------------------------------------------------------------------------
# The dot product of two positional codes.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch6-dot", hints=[
    "Take one column pair, (sin a, cos a) at pos and (sin(a + b), cos(a + b)) at pos + k, "
    "multiply them out, and use the angle-addition formulas.",
    "Each column pair contributes cos(w_i k), with no pos in it; positional_frequencies(d_model) "
    "gives the w_i. There are d_model / 2 pairs.",
])
def check_dot(fn):
    for d in (8, 64):
        w = positional_frequencies(d).to(F64)
        for k in (1, 5, 40, -3, 0):
            out = number(call(fn, k, d, what="pe_dot"), "pe_dot", "must return")
            ref = torch.cos(w * k).sum().item()
            if math.isclose(out, ref, rel_tol=1e-4, abs_tol=1e-4):
                continue
            if math.isclose(out, 2 * ref, rel_tol=1e-4, abs_tol=1e-4):
                raise Wrong("the dot product is twice too large: each (sin, cos) pair contributes "
                            "one cosine, and there are d_model / 2 pairs")
            if k == 0:
                raise Wrong("at k = 0 the dot product is the squared norm of a code: every pair "
                            "(sin a, cos a) has norm 1")
            if math.isclose(out, torch.sin(w * k).sum().item(), rel_tol=1e-4, abs_tol=1e-4):
                raise Wrong("you sum sines: sin a sin(a + b) + cos a cos(a + b) is a cosine")
            w_no_two = 10000.0 ** (-torch.arange(d // 2, dtype=F64) / d)
            if math.isclose(out, torch.cos(w_no_two * k).sum().item(), rel_tol=1e-4,
                            abs_tol=1e-4):
                raise Wrong("the frequencies are 10000^(-i / d_model): pair i turns at "
                            "w_i = 10000^(-2i / d_model), as positional_frequencies gives them")
            w_cols = 10000.0 ** (-2 * torch.arange(0, d, 2, dtype=F64) / d)
            if math.isclose(out, torch.cos(w_cols * k).sum().item(), rel_tol=1e-4,
                            abs_tol=1e-4):
                raise Wrong("the 2 is applied twice: in 10000^(-2i / d_model), i numbers "
                            "the column pairs (0, 1, 2, ...), so 2i already runs over the "
                            "even columns")
            w_all = 10000.0 ** (-2 * torch.arange(d, dtype=F64) / d)
            if math.isclose(out, torch.cos(w_all * k).sum().item(), rel_tol=1e-4, abs_tol=1e-4):
                raise Wrong("the sum runs over d_model frequencies, i = 0 .. d_model - 1: there "
                            "are d_model / 2 column pairs, one frequency each")
            raise Wrong(f"the dot product is wrong at offset k = {k} (d_model = {d}): it is a sum "
                        "of cos(w_i k) over the d_model / 2 column pairs, with the w_i of "
                        "positional_frequencies")


# ---------------------------------------------------------------------------------------------
# Counting the parameters of the layers.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch6-params", hints=[
    "Count each piece on its own: an attention sublayer, the feed-forward network, a LayerNorm; "
    "every linear map has a bias.",
    "An attention sublayer has four d x d projections (queries, keys, values, output), each "
    "with a bias; the feed-forward network two linear maps, d to d_ff and back; a LayerNorm a "
    "gain and a bias of d numbers each. Count how many weights the heads add to these.",
    "The encoder layer has one attention and two LayerNorms; the decoder layer has two "
    "attentions (self and cross) and three LayerNorms.",
])
def check_params(fn):
    # the first case tells the slips apart: d, 4d, d_ff and d^2 + d all differ there
    for d, d_ff, heads in ((12, 20, 3), (64, 256, 4), (8, 8, 1)):
        out = two_numbers(call(fn, d, d_ff, what="layer_params"))
        expect(isinstance(out, (tuple, list)) and len(out) == 2,
               "layer_params must return a pair (encoder layer, decoder layer)")
        enc, dec = (number(v, "layer_params", "must return") for v in out)
        true_enc = count_parameters(EncoderLayer(d, heads, d_ff))
        true_dec = count_parameters(DecoderLayer(d, heads, d_ff))
        if enc == true_enc and dec == true_dec:
            continue
        if (enc, dec) == (true_dec, true_enc):
            raise Wrong("the two counts are swapped: layer_params returns (encoder layer, "
                        "decoder layer)")
        if enc == true_enc - 4 * d - d_ff - d:
            raise Wrong("the encoder count has no biases: every linear map has one")
        if enc == true_enc - 4 * d:
            raise Wrong("the encoder count is 4d short: the two LayerNorms (a gain and a bias "
                        "of d numbers each), or the four biases of the attention's projections?")
        if enc == true_enc - d * d - d:
            raise Wrong("the encoder count is d^2 + d short: the attention has four projections, "
                        "W^Q, W^K, W^V and the output projection W^O, each with a bias")
        if enc == true_enc - d_ff - d:
            raise Wrong("the feed-forward network's two linear maps have biases too: d_ff and d "
                        "numbers")
        if heads > 1 and enc in (true_enc + (heads - 1) * 4 * d * d,
                                 true_enc + (heads - 1) * (4 * d * d + 4 * d)):
            raise Wrong("the heads split d, they do not multiply the projections")
        if enc == true_enc - d:
            raise Wrong("one vector of d numbers is missing: each of the attention's four "
                        "projections has a bias, so does the feed-forward network's second map, "
                        "and each LayerNorm has a gain and a shift")
        if enc == true_enc - 2 * d:
            raise Wrong("the two LayerNorms are counted with their gain only: each also has a "
                        "shift, d numbers more")
        if enc == true_enc - (2 * d + 1) * (d_ff - 4 * d):
            raise Wrong("the feed-forward network is 4d wide in this count: its width is d_ff")
        if enc == true_enc - d_ff:
            raise Wrong("one bias of the feed-forward network is missing: its first linear map "
                        "has d_ff of them")
        if enc == true_enc - 4 * d + 4:
            raise Wrong("the LayerNorms' gain and shift are counted as one number each: they are "
                        "vectors of d numbers, one per feature")
        expect(enc == true_enc, f"the encoder layer count is wrong for d = {d}, d_ff = {d_ff}")
        if dec == true_dec - 2 * d:
            raise Wrong("the decoder count has two LayerNorms: it has three, one per sublayer")
        if dec == true_enc:
            raise Wrong("the decoder count equals the encoder's: the decoder also has a "
                        "cross-attention sublayer and its LayerNorm")
        raise Wrong(f"the decoder layer count is wrong for d = {d}, d_ff = {d_ff}")


# ---------------------------------------------------------------------------------------------
# Post-LN from the parts of a pre-LN layer.
# ---------------------------------------------------------------------------------------------


def _post_ln_case():
    """A PyTorch post-LN layer and our pre-LN layer with the same weights, in float64.

    Both LayerNorms get random gains and shifts, different for the two, so that norm1, norm2
    and a LayerNorm without gain and shift are three different functions."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        post = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, norm_first=False,
                                          batch_first=True).double().eval()
        with torch.no_grad():
            for norm in (post.norm1, post.norm2):
                norm.weight.copy_(1 + 0.5 * torch.randn(16, dtype=F64))
                norm.bias.copy_(0.5 * torch.randn(16, dtype=F64))
        pre = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, norm_first=True,
                                         batch_first=True).double()
        pre.load_state_dict(post.state_dict())
        x = torch.randn(2, 7, 16, dtype=F64)
    ours = EncoderLayer.from_torch(pre).eval()
    pad = torch.tensor([[False] * 7, [False] * 4 + [True] * 3])
    return post, ours, x, pad


def _post_ln_with(layer, x, pad, first, second):
    """Post-LN with the LayerNorms ``first`` (after attention) and ``second`` (after the FFN)."""
    a = layer.self_attn(x, x, x, key_padding_mask=pad, need_weights=False)[0]
    h = first(x + a)
    return second(h + layer.ff(h))


def _post_ln_norm_slip(layer, out, x, pad):
    """What is wrong with the LayerNorms of ``out``, when another choice of them explains it."""
    d = x.shape[-1]

    def bare(t):
        return F.layer_norm(t, (d,), eps=layer.norm1.eps)

    norms = {"norm1": layer.norm1, "norm2": layer.norm2, "bare": bare}
    for first, second in ((f, s) for f in norms for s in norms):
        if (first, second) == ("norm1", "norm2"):
            continue
        if not close(out, _post_ln_with(layer, x, pad, norms[first], norms[second]), n=64):
            continue
        if "bare" in (first, second):
            where = {(True, True): "both LayerNorms", (True, False): "the first LayerNorm",
                     (False, True): "the second LayerNorm"}[first == "bare", second == "bare"]
            verb = "normalise" if where == "both LayerNorms" else "normalises"
            return (f"{where} {verb} without the layer's gain and shift: a fresh LayerNorm "
                    "(or F.layer_norm without weight and bias) is not the layer's norm1 and "
                    "norm2, which carry learned gains and shifts")
        if (first, second) == ("norm2", "norm1"):
            return ("norm1 and norm2 are swapped: norm1 belongs to the attention sublayer, "
                    "norm2 to the feed-forward one")
        return (f"{first} is used after both residual sums: each sublayer has its own "
                "LayerNorm (norm1 after attention, norm2 after the feed-forward network)")
    return None


@exercise("ex-ch6-postln", hints=[
    "Pre-LN normalises the input of each sublayer; post-LN normalises the sum of the residual "
    "and the sublayer's output.",
    "First x = norm1(x + attention(x)), then x = norm2(x + ff(x)); call self_attn with "
    "key_padding_mask and need_weights=False, and keep the dropouts where the layer has them.",
])
def check_postln(fn):
    post, ours, x, pad = _post_ln_case()
    arrangement = ours.norm_first
    # in eval mode a dropout is the identity, so the output cannot show where the learner put
    # it: record what dropout1 and dropout2 are applied to
    seen = {"dropout1": [], "dropout2": [], "layer": [], "ff.dropout": [], "ff": []}
    hooks = [getattr(ours, name).register_forward_pre_hook(
        lambda _, args, name=name: seen[name].append(args[0])) for name in ("dropout1", "dropout2")]
    hooks.append(ours.ff.dropout.register_forward_pre_hook(
        lambda _, args: seen["ff.dropout"].append(args[0])))
    hooks.append(ours.ff.register_forward_pre_hook(lambda _, args: seen["ff"].append(True)))
    # the layer called as a whole (a copy of it too, which copies the hook): no parts used
    hooks.append(ours.register_forward_pre_hook(lambda _, args: seen["layer"].append(True)))
    with torch.no_grad():
        expected = post(x, src_key_padding_mask=pad)
        try:
            out = returned_tensor(call(fn, ours, x.clone(), pad, what="post_ln_forward"),
                                  "post_ln_forward")
        finally:
            for hook in hooks:
                hook.remove()
        expect(ours.norm_first == arrangement, "post_ln_forward switched the layer's norm_first: "
               "build the post-LN computation from the layer's parts and leave the layer as it is")
        expect(out.shape == x.shape, f"post_ln_forward must return x's shape {tuple(x.shape)}, "
               f"got {tuple(out.shape)}")
        if close(out, expected, n=64):
            expect(not seen["layer"], "post_ln_forward calls the layer itself (or a copy of it): "
                   "build the post-LN computation from the layer's parts, self_attn, ff, norm1, "
                   "norm2 and the dropouts")
            _dropout_placement(seen, ours, x, pad)
            return
        if close(out, ours(x, key_padding_mask=pad), n=64):
            raise Wrong("this is the pre-LN arrangement: post-LN normalises after the residual "
                        "sum, not before the sublayer")
        slip = _post_ln_norm_slip(ours, out, x, pad)
        if slip:
            raise Wrong(slip)
        a = ours.self_attn(x, x, x, key_padding_mask=pad, need_weights=False)[0]
        h = ours.norm1(x + a)
        if close(out, h + ours.ff(h), n=64):
            raise Wrong("the second residual sum is not normalised: apply norm2 after adding "
                        "the feed-forward output")
        branch = x + ours.norm1(a)
        if close(out, branch + ours.norm2(ours.ff(branch)), n=64):
            raise Wrong("the LayerNorms sit on the branches: post-LN normalises the sum "
                        "x + sublayer(x), residual included")
        if close(out, _post_ln_with(ours, x, None, ours.norm1, ours.norm2), n=64):
            raise Wrong("the padding mask is missing: pass key_padding_mask to self_attn")
        if close(out, _post_ln_with(ours, x, ~pad, ours.norm1, ours.norm2), n=64):
            raise Wrong("the padding mask is inverted: key_padding_mask is True at the padding, "
                        "as the layer receives it; pass it on as it is")
        no_residual = ours.norm1(a)
        for out_no_residual in (ours.norm2(ours.ff(no_residual)),
                                ours.norm2(no_residual + ours.ff(no_residual))):
            if close(out, out_no_residual, n=64):
                raise Wrong("the first residual is missing: post-LN normalises the sum "
                            "x + attention(x), the sublayer's input added back")
        if close(out, ours.norm2(h + ours.ff(x)), n=64):
            raise Wrong("the feed-forward network reads the layer's input x: it reads the "
                        "output of the first sublayer, norm1(x + attention)")
        if close(out, ours.norm2(x + ours.ff(h)), n=64):
            raise Wrong("the second residual adds the layer's input x: each sublayer adds its "
                        "output to its own input, and the second sublayer's input is "
                        "norm1(x + attention)")
        if close(out, ours.norm2(h + x + ours.ff(h)), n=64):
            raise Wrong("the input x is added twice: each sublayer adds its output to its own "
                        "input, and the second sublayer's input is norm1(x + attention)")
    raise Wrong("the output differs from PyTorch's post-LN layer with the same weights")


def _dropout_placement(seen: dict, layer, x, pad) -> None:
    """``seen[name]``: what the learner's post_ln_forward applied ``layer.<name>`` to."""
    a = layer.self_attn(x, x, x, key_padding_mask=pad, need_weights=False)[0]
    h = layer.norm1(x + a)  # PyTorch's post-LN, with this layer's weights
    expected = {"dropout1": (a, "the attention output"), "dropout2": (layer.ff(h), "the "
                "feed-forward output")}

    def applied_to(name, value):
        return any(v.shape == value.shape and close(v, value, n=64) for v in seen[name])

    expect(not (applied_to("dropout1", expected["dropout2"][0])
                and applied_to("dropout2", a) and not applied_to("dropout1", a)),
           "dropout1 and dropout2 are swapped. With equal rates the layer computes the same "
           "function, but the check matches the layer's modules by name, as PyTorch's layer "
           "uses them: dropout1 on the attention output, dropout2 on the feed-forward output")
    for name, (value, what) in expected.items():
        expect(seen[name], f"the module {name} is never called: keep the layer's dropouts where "
               f"the layer has them, layer.{name} on {what} before the residual sum (in eval "
               "mode a dropout does nothing, which is why the output still matches; the check "
               "follows the layer's dropout modules, so F.dropout with their rate is not seen)")
        expect(applied_to(name, value),
               f"{name} is applied to something else than {what}: it must act on {what} alone, "
               "before the residual sum and the LayerNorm")
    expect(seen["ff.dropout"], "the feed-forward network's own dropout, layer.ff.dropout on its "
           "hidden units, is never called: call layer.ff as a whole (or apply layer.ff.dropout "
           "between the activation and linear2), as PyTorch's layer does (the check follows the "
           "dropout modules, so F.dropout with their rate is not seen)")
    if seen["ff"]:
        return  # layer.ff called as a whole applies its dropout where it belongs
    hidden = ACTIVATIONS[layer.ff.activation](layer.ff.linear1(h))  # the FFN's hidden units
    expect(any(v.numel() == hidden.numel() and close(v.reshape(hidden.shape), hidden, n=64)
               for v in seen["ff.dropout"]),
           "layer.ff.dropout is applied to something else than the feed-forward network's hidden "
           "units: it acts between the activation and linear2, as in layer.ff")


# ---------------------------------------------------------------------------------------------
# Perplexity with a sliding window.
# ---------------------------------------------------------------------------------------------


def sliding_reference(model, ids, block, stride, last_only=True, first_all=False, width=None,
                      drop_last=False, per_window=False, per_token=False, step=None, tail=None,
                      unshifted=False, first_only=False):
    """The sliding-window perplexity of the exercise, and its typical slips: every prediction
    scored (``last_only=False``), the first window's every prediction scored too
    (``first_all``, as Hugging Face's perplexity guide does), windows of ``width`` ids, the
    last window left out (``drop_last``), the mean of the windows' perplexities
    (``per_window``), the mean of the tokens' perplexities (``per_token``), windows that start
    ``step`` ids apart instead of ``stride``, and one more window that ends at the text's end
    (``tail``): scoring its last stride predictions (``"window"``) or only the predictions no
    other window scored (``"new"``); with ``unshifted``, each prediction is scored against the
    id it has just read instead of the next one; with ``first_only``, the first stride
    predictions of each window are scored instead of the last."""
    windows = ids.unfold(0, block + 1 if width is None else width,
                         stride if step is None else step)  # (N, block + 1)
    if drop_last:
        windows = windows[:-1]
    logits, _ = model(windows[:, :-1])
    targets = windows[:, :-1] if unshifted else windows[:, 1:]
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    scored = losses[:, -stride:] if last_only else losses
    if first_only:
        scored = losses[:, :stride]
    if per_window:
        return scored.double().mean(-1).exp().mean().item()
    if per_token:
        return scored.double().exp().mean().item()
    if first_all:
        scored = torch.cat([losses[0], losses[1:, -stride:].flatten()])
    if tail is not None:
        end = ids[-(block + 1):]
        end_logits, _ = model(end[None, :-1])
        end_losses = F.cross_entropy(end_logits[0], end[1:], reduction="none")
        unscored = (len(ids) - block - 1) % stride  # the ids after the last window
        extra = end_losses[-stride:] if tail == "window" else end_losses[block - unscored:]
        scored = torch.cat([scored.flatten(), extra])
    return math.exp(scored.double().mean().item())


@functools.cache
def _gpt_prototype(positional: str, block_size: int, seed: int, dropout: float) -> GPT:
    """A small seeded GPT in float64, made once; checks hand out copies only."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        config = GPTConfig(vocab_size=12, block_size=block_size, n_layer=2, n_head=2, n_embd=16,
                           dropout=dropout, init_std=0.3, positional=positional)
        return GPT(config).double().eval()


def _small_gpt(positional="learned", block_size=16, seed=0, dropout=0.0) -> GPT:
    """A fresh copy of a small GPT (in evaluation mode), for the learner's code to run."""
    return copy.deepcopy(_gpt_prototype(positional, block_size, seed, dropout))


#: (block, stride, length of the text): the last two make 257 and 256 windows, so that a
#: solution that runs the windows in batches of 256 has one window over, and none over.
# the first three texts end where a window ends; the last leaves two ids that no window scores
SLIDING_CASES = ((16, 4, 161), (8, 2, 521), (8, 8, 2049), (16, 4, 163))


@functools.cache
def _sliding_expected(block: int, stride: int, length: int) -> float:
    with torch.no_grad():
        return sliding_reference(_gpt_prototype("learned", 16, 0, 0.1), _sliding_text()[:length],
                                 block, stride)


def _sliding_text() -> torch.Tensor:
    length = max(n for _, _, n in SLIDING_CASES)
    return torch.randint(12, (length,), generator=torch.Generator().manual_seed(1))


def _dropout_watch(model):
    """Hooks that record whether a dropout of ``model`` ran in training mode."""
    seen = []
    hooks = [m.register_forward_pre_hook(lambda m, args: seen.append(m.training))
             for m in model.modules() if isinstance(m, nn.Dropout)]
    return seen, hooks


@exercise("ex-ch6-sliding", hints=[
    "Cut the text into windows of block + 1 ids that start stride ids apart; each window gives "
    "block inputs and the block next ids.",
    "ids.unfold(0, block + 1, stride) makes all windows at once. Run the model on the inputs, "
    "take the cross-entropy of every prediction (reduction='none') and keep only the last "
    "stride columns.",
    "The perplexity is exp of the mean of the kept losses, over all windows together; measure "
    "in evaluation mode, model.eval(), so that dropout is off.",
])
def check_sliding(fn):
    model = _small_gpt(dropout=0.1)  # comes in training mode, as after a training loop
    text = _sliding_text()
    for block, stride, length in SLIDING_CASES:
        ids = text[:length]
        model.train()
        seen, hooks = _dropout_watch(model)
        try:
            with torch.no_grad():
                out = call(fn, model, ids.clone(), block, stride, what="sliding_perplexity")
        finally:
            for h in hooks:
                h.remove()
        out = number(out, "sliding_perplexity", "must return")
        ref = _sliding_expected(block, stride, length)
        if math.isclose(out, ref, rel_tol=1e-6):
            continue
        model = _small_gpt(dropout=0.1)  # the learner's copy may have changed
        if any(seen):
            raise Wrong("the model ran in training mode: its dropout zeroes activations at "
                        "random while you measure; call model.eval() first")
        with torch.no_grad():
            every = sliding_reference(model, ids, block, stride, last_only=False)
        if stride < block and math.isclose(out, every, rel_tol=1e-6):
            raise Wrong("you score every prediction of each window: only the last stride "
                        "predictions have at least block - stride + 1 characters of context")
        if math.isclose(out, math.log(ref), rel_tol=1e-6):
            raise Wrong("you return the mean loss: the perplexity is its exponential")
        with torch.no_grad():
            first_all = sliding_reference(model, ids, block, stride, first_all=True)
            narrow = sliding_reference(model, ids, block, stride, width=block)
        if stride < block and math.isclose(out, first_all, rel_tol=1e-6):
            raise Wrong("you score every prediction of the first window (as Hugging Face's "
                        "perplexity guide does): here only the last stride predictions of each "
                        "window count, the first window's too, so that every scored prediction "
                        "has at least block - stride + 1 characters of context")
        if math.isclose(out, narrow, rel_tol=1e-6):
            raise Wrong("the scored predictions are one place early: either the windows hold "
                        "block ids, one too few (a window needs block + 1, block inputs and the "
                        "block next ids), or the kept losses are shifted by one (the last stride "
                        "columns are losses[:, -stride:])")
        with torch.no_grad():
            first = sliding_reference(model, ids, block, stride, first_only=True)
        if stride < block and math.isclose(out, first, rel_tol=1e-6):
            raise Wrong("you score the first stride predictions of each window: the last stride "
                        "ones are those with the most context, block - stride + 1 characters or "
                        "more")
        with torch.no_grad():
            short = sliding_reference(model, ids, block, stride, drop_last=True)
            averaged = sliding_reference(model, ids, block, stride, per_window=True)
        if math.isclose(out, short, rel_tol=1e-6):
            raise Wrong(f"the last window is missing (block={block}, stride={stride}, a text "
                        f"of {length} ids): windows start at 0, stride, ... up to "
                        "len(ids) - block - 1 included")
        if math.isclose(out, averaged, rel_tol=1e-6):
            raise Wrong("you average the windows' perplexities: the perplexity is exp of the "
                        "mean loss over all scored predictions together")
        with torch.no_grad():
            tokens = sliding_reference(model, ids, block, stride, per_token=True)
            by_block = sliding_reference(model, ids, block, stride, step=block)
        if math.isclose(out, tokens, rel_tol=1e-6):
            raise Wrong("you average the tokens' perplexities, exp of each loss: the perplexity "
                        "is exp of the mean loss over all scored predictions")
        with torch.no_grad():
            ends = [sliding_reference(model, ids, block, stride, tail=t) for t in ("window", "new")]
        if any(math.isclose(out, e, rel_tol=1e-6) for e in ends):
            tiles = (length - block - 1) % stride == 0  # the last window ends on the last id
            raise Wrong(f"one more window that ends at the text's end is scored (block={block}, "
                        f"stride={stride}, a text of {length} ids): windows start at 0, stride, "
                        "... only while block + 1 ids fit, and "
                        + ("here the last of them already ends at the text's end, so the extra "
                           "window scores its predictions twice" if tiles else
                           "the ids after the last such window are not scored"))
        with torch.no_grad():
            unshifted = sliding_reference(model, ids, block, stride, unshifted=True)
        if math.isclose(out, unshifted, rel_tol=1e-6):
            raise Wrong("each prediction is scored against the id it has just read: the targets "
                        "are the inputs shifted by one, the window's ids 1 to block")
        if stride < block and math.isclose(out, by_block, rel_tol=1e-6):
            raise Wrong(f"the windows start block = {block} ids apart: they start stride = "
                        f"{stride} apart, so that consecutive windows overlap and each scores "
                        "only its last stride predictions")
        raise Wrong(f"the perplexity is wrong for block={block}, stride={stride} on a text of "
                    f"{length} ids")


# ---------------------------------------------------------------------------------------------
# Find the bug: a causal mask off by one.
# ---------------------------------------------------------------------------------------------


@exercise("ex-ch6-causal-mask", hints=[
    "Write out the mask for T = 3 and read it row by row: row i lists the keys that query i "
    "must not see.",
    "In nn.MultiheadAttention's attn_mask (and MultiHeadAttention's) True means blocked. Query i "
    "may read keys 0 .. i, itself included; "
    "what does triu's diagonal argument include?",
])
def check_causal_mask(fn):
    for T in (4, 7, 1):
        mask = returned_tensor(call(fn, T, what="causal_attn_mask"), "causal_attn_mask")
        expect(mask.shape == (T, T), f"the mask for T = {T} must have shape ({T}, {T}), got "
               f"{tuple(mask.shape)}")
        if mask.dtype != torch.bool and mask.is_floating_point() and mask.shape == (T, T):
            blocked = ~causal_mask(T)
            if torch.equal(torch.isinf(mask) & (mask < 0), blocked) and not mask[~blocked].any():
                raise Wrong("this is the additive float form of the causal mask (what "
                            "nn.Transformer.generate_square_subsequent_mask returns): right for "
                            "PyTorch's attention, but the exercise asks for the boolean form, "
                            "True = blocked")
            raise Wrong(f"the mask must be boolean (True = blocked), got {mask.dtype}: a float "
                        "attn_mask is added to the scores, so 0s and 1s would nudge them by 1 "
                        "instead of blocking anything")
        expect(mask.dtype == torch.bool, f"the mask must be boolean (True = blocked), got "
               f"{mask.dtype}")
        blocked = ~causal_mask(T)
        if torch.equal(mask, blocked):
            continue
        if T > 1 and torch.equal(mask, causal_mask(T)):
            raise Wrong("the polarity is flipped: in nn.MultiheadAttention's attn_mask True means "
                        "blocked, and "
                        "your mask blocks the past")
        if T > 1 and torch.equal(mask, blocked.T):
            raise Wrong("the mask is turned the wrong way round: it blocks the past and lets the "
                        "future in, whereas query i reads keys 0 .. i and no later one")
        if bool(mask.diagonal().any()):
            if bool(mask[0].all()):  # the starter: where it goes wrong, not what follows
                raise Wrong("the mask blocks keys that a query may read. Which keys may query i "
                            "read?")
            raise Wrong("some query may not read its own key: query i reads keys 0 .. i, itself "
                        "included")
        if bool((~mask & blocked).any()):
            raise Wrong("some query sees a later key: the future leaks in")
        raise Wrong("the mask blocks keys a query may read: query i reads keys 0 .. i")


# ---------------------------------------------------------------------------------------------
# Find the bug: RoPE that turns the values too.
# ---------------------------------------------------------------------------------------------


def _rope_neighbour_pairs(x, cos, sin):
    """RoPE with RoFormer's pairs (x[2i], x[2i + 1]), turned by the angles of rope_angles."""
    half = x.shape[-1] // 2
    c, s = cos[..., :half], sin[..., :half]  # pair i's angle, as rope_angles lays it out
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


@exercise("ex-ch6-rope-values", hints=[
    "Which vectors meet in a dot product whose value should depend on the offset only?",
    "RoPE turns queries and keys; the value of a token is what the query reads, not how it "
    "scores it.",
])
def check_rope_values(fn):
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=g, dtype=F64) for _ in range(3))
    positions = torch.arange(6)
    cos, sin = rope_angles(positions, 8)
    mask = causal_mask(6)
    q_turned, k_turned = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    ref = scaled_dot_product_attention(q_turned, k_turned, v, mask)[0]
    out = returned_tensor(call(fn, q.clone(), k.clone(), v.clone(), cos, sin,
                               what="rope_attention"), "rope_attention")
    expect(out.shape == v.shape, f"rope_attention must return v's shape {tuple(v.shape)}, got "
           f"{tuple(out.shape)}")
    if close(out, ref, n=8 * 6) or close(out.float(), ref.float(), n=8 * 6):
        return  # float32 arithmetic promoted back to float64 (a NumPy float64 scalar) is right too
    turned_v = scaled_dot_product_attention(q_turned, k_turned, apply_rope(v, cos, sin), mask)[0]
    if close(out, turned_v, n=8 * 6):  # the starter: its symptom, not the shift test's result
        raise Wrong("the output is not causal attention with rotary positions; run the shift "
                    "test of the exercise on it")
    if close(out, scaled_dot_product_attention(q_turned, k_turned, v, ~mask)[0], n=8 * 6):
        raise Wrong("the mask's polarity is flipped: scaled_dot_product_attention's mask is True "
                    "where a query may attend (causal_mask); True = blocked is the convention of "
                    "MultiHeadAttention's attn_mask")
    neighbours = [_rope_neighbour_pairs(t, cos, sin) for t in (q, k)]
    if close(out, scaled_dot_product_attention(*neighbours, v, mask)[0], n=8 * 6):
        raise Wrong("the queries and keys are turned in neighbouring pairs (x[2i], x[2i + 1]), "
                    "RoFormer's layout; rope_angles lays cos and sin out for the pairs "
                    "(x[i], x[i + D/2]), which apply_rope turns")
    book_pairs = [_rope_neighbour_pairs(t, cos, -sin) for t in (q, k)]
    if close(out, scaled_dot_product_attention(*book_pairs, v, mask)[0], n=8 * 6):
        raise Wrong("the queries and keys are turned in neighbouring pairs (x[2i], x[2i + 1]) by "
                    "the R of eq. (rope): a rotary code too, but not apply_rope's, which turns "
                    "the pairs (x[i], x[i + D/2]) that rope_angles lays cos and sin out for, "
                    "the other way; the exercise asks for apply_rope's")
    if close(out, scaled_dot_product_attention(q, k, v, mask)[0], n=8 * 6):
        raise Wrong("nothing is turned: without RoPE the attention does not see positions")
    if close(out, scaled_dot_product_attention(q_turned, k_turned, v)[0], n=8 * 6):
        raise Wrong("every query sees every key: keep the causal mask")
    one_side = [scaled_dot_product_attention(q_turned, k, v, mask)[0],
                scaled_dot_product_attention(q, k_turned, v, mask)[0],
                scaled_dot_product_attention(q_turned, apply_rope(k, cos, -sin), v, mask)[0]]
    backwards = [apply_rope(t, cos, -sin) for t in (q, k)]
    if close(out, scaled_dot_product_attention(*backwards, v, mask)[0], n=8 * 6):
        raise Wrong("the queries and keys are both turned the other way (by -sin): a rotary "
                    "code too, whose scores see only the offset, but not the one rope_angles "
                    "and apply_rope lay out; turn both with apply_rope(t, cos, sin)")
    if any(close(out, wrong, n=8 * 6) for wrong in one_side):
        raise Wrong("the queries and the keys must both be turned, each by the angle of its own "
                    "position in the same direction: then their dot product sees only the offset")
    raise Wrong("the output differs from causal attention over turned queries and keys")


# ---------------------------------------------------------------------------------------------
# The memory of a key-value cache.
# ---------------------------------------------------------------------------------------------

KV_MEMORY = {"n_layer": 12, "n_embd": 768, "T": 1024, "B": 8, "bytes": 4}


@exercise("ex-ch6-kv-memory", hints=[
    "Count what one token leaves behind in one layer, then multiply by the layers, the "
    "positions and the sequences of the batch.",
    "Each layer keeps a key and a value of n_embd numbers (all heads together) per token and "
    "sequence; a float32 number takes 4 bytes.",
])
def check_kv_memory(answer):
    c = KV_MEMORY
    answer = number(answer, "answer")
    right = 2 * c["n_layer"] * c["B"] * c["T"] * c["n_embd"] * c["bytes"]
    if agrees(answer, right, digits=3):
        return
    slips = (
        (right / 2, "that is half: the cache keeps the keys and the values, and a float32 "
                    "number takes 4 bytes"),
        (right / c["bytes"], "that is the number of numbers: multiply by the bytes each takes"),
        (right / c["n_layer"], "that is 12 times too small: every one of the 12 layers keeps "
                               "its own keys and values, for all 12 heads (n_embd numbers per "
                               "token)"),
        (right / c["B"], "that is one sequence: the batch has 8"),
        (right / 1e9, "that is in gigabytes: give the number of bytes"),
        (right / 2**30, "that is in gibibytes: give the number of bytes"),
        (right / 1e6, "that is in megabytes: give the number of bytes"),
        (right / 2**20, "that is in mebibytes: give the number of bytes"),
        (right * 8, "that is in bits: give the number of bytes (8 bits each)"),
        (right * 12, "that is 12 times too large: n_embd = 768 already holds all 12 heads "
                     "(12 heads of 64), and each of the 12 layers counts once"),
    )
    name_slip(answer, slips, digits=3)
    if agrees(answer, right, digits=2):  # the count is right, its third digit is not
        if at_most_digits(answer, 2):
            raise Wrong("the count is close, but has at most two significant digits: give (at "
                        "least) three")
        if cut_off(answer, right):
            raise Wrong("the count is close, but not right to 3 significant digits: round it to "
                        "the nearest rather than cut it off, or give it exactly")
        raise Wrong("the count is close, but its third digit is off: recount, or give the "
                    "exact count")
    raise Wrong("the number of bytes is wrong (to 3 significant digits): count keys and values, "
                "layers, sequences, positions, width and bytes per number")


# ---------------------------------------------------------------------------------------------
# Greedy generation with a cache, written by the learner.
# ---------------------------------------------------------------------------------------------


def _watch_calls(model):
    """Wrap the GPT ``model``'s forward (``model(...)`` and ``model.forward(...)`` alike) to record
    every call as the pair (the tokens passed, the positions its caches held before the call;
    None: no caches). Returns the record and a function that removes the wrapper."""
    calls = []

    def forward(*args, **kwargs):
        idx = args[0] if args else kwargs.get("idx")
        caches = args[4] if len(args) > 4 else kwargs.get("caches")
        try:
            held = caches[0].length if caches else None
        except (TypeError, IndexError, AttributeError):
            held = None  # not caches: the model's own check will say so
        calls.append((idx.detach().clone() if isinstance(idx, torch.Tensor) else None, held))
        return type(model).forward(model, *args, **kwargs)

    model.forward = forward
    return calls, lambda: delattr(model, "forward")


def _refed(calls, prompt: torch.Tensor) -> None:
    """Wrong, if a call fed caches that already held tokens the prompt again (the whole sequence
    at every step): the caches keep what they are fed, so they then hold it twice."""
    P = prompt.shape[1]
    for idx, held in calls:
        if held and idx is not None and idx.dim() == 2 and idx.shape[1] > 1:
            n = min(idx.shape[1], P)
            if idx.shape[0] == prompt.shape[0] and torch.equal(idx[:, :n], prompt[:, :n]):
                raise Wrong(f"a call fed the prompt again, {idx.shape[1]} tokens, to caches that "
                            f"already held {held}: the caches keep every token fed to them, so "
                            "after the prompt each step must feed only the newest token, shape "
                            "(B, 1)")


def _feeding(calls, out: torch.Tensor, prompt: torch.Tensor) -> None:
    """Wrong unless the caches were fed ``out``, the learner's own sequence, each position once
    and in order: the prompt, then each new token after it is chosen (the last may be left out).
    One set of caches for all the rows, or one per group of rows, in order."""
    sessions = []  # one list of calls' tokens per set of caches, from the call that found them empty
    for idx, held in calls:
        if idx is None or idx.dim() != 2:
            continue
        if held is None:
            if sessions:
                raise Wrong("a call after the first passed no caches: the model then sees only "
                            "that call's tokens, from position 0. Pass the same caches to every "
                            "call")
            continue
        if held == 0 or not sessions:
            sessions.append([])
        fed = sum(t.shape[1] for t in sessions[-1])
        if held != fed:
            raise Wrong(f"before a call the caches held {held} positions, but {fed} tokens had been "
                        "fed to them: leave their length to the model")
        sessions[-1].append(idx)
    if not sessions:
        return
    B, L = out.shape
    sizes = [sess[0].shape[0] for sess in sessions]
    if len(sessions) > 1 and sum(sizes) != B:  # not one set of caches per group of rows
        _refed(calls, prompt)
        raise Wrong(f"the model found its caches empty {len(sessions)} times: new caches were made "
                    "inside the loop, so they forget the prompt and the tokens before. Make them "
                    "once, before the loop")
    start = 0
    for sess, b in zip(sessions, sizes, strict=True):
        rows = slice(start, start + b) if len(sessions) > 1 else slice(None)
        start += b
        fed, seq = torch.cat(sess, dim=1), out[rows]
        n = min(fed.shape[1], L)
        differ = (fed[:, :n] != seq[:, :n]).any(0).nonzero()
        if len(differ):
            _refed(calls, prompt)  # the likeliest cause first
            j = int(differ[0])
            row = int((fed[:, j] != seq[:, j]).nonzero()[0])
            where = ("the sequence starts with the prompt: feed all of it first"
                     if j < prompt.shape[1] else "feed each new token once, right after choosing it")
            raise Wrong(f"the tokens fed to the caches are not the sequence in order: the caches "
                        f"keep every token fed to them, at the next position, and token {j} they "
                        f"were fed is {int(fed[row, j])} where your sequence has {int(seq[row, j])}"
                        f": {where}")
        if fed.shape[1] > L:
            raise Wrong(f"the caches were fed {fed.shape[1]} tokens, more than the {L} of the "
                        "sequence: feed the prompt once, then each new token once")
        if fed.shape[1] < L - 1:
            raise Wrong(f"the caches were fed only the first {fed.shape[1]} of the sequence's {L} "
                        "tokens: after the prompt, feed each new token to them, and choose the "
                        "next one from the logits that call returns")


#: (positions, seed of the model, seed of the prompt, rows): greedy continuations that vary
#: from token to token, one case with two rows and one with a single row (a (B,) squeezed to a
#: scalar fails there)
CACHED_CASES = (("learned", 14, 16, 2), ("rope", 18, 7, 1))


#: the package's generation loop itself (seen under its checking and no_grad wrappers)
LIBRARY_LOOP = {"seqbook.decoding.generate_tokens": decoding.generate_tokens}


@functools.cache
def _greedy_tokens(positional: str, seed: int, prompt_seed: int, rows: int, prompt: int,
                   steps: int) -> torch.Tensor:
    """The prompt of the check and its greedy continuation (made once; compare, never edit)."""
    idx = torch.randint(12, (2, prompt), generator=torch.Generator().manual_seed(prompt_seed))
    return _gpt_prototype(positional, 24, seed, 0.0).generate(idx[:rows], steps, temperature=0)


@exercise("ex-ch6-cached-generation", hints=[
    "Make one KVCache per block, run the whole prompt once with caches=..., then loop: pick the "
    "most likely next token and feed only that token.",
    "model(idx, caches=caches) returns the logits of the new positions; the next token is the "
    "argmax of the last row, logits[:, -1].argmax(-1). The caches know how many positions they "
    "hold, and the model reads its positions from them.",
    "After the prompt, every call passes one token, shape (B, 1): next_id[:, None]. Append it to "
    "the sequence with torch.cat.",
])
def check_cached_generation(fn):
    prompt, steps = 5, 8
    for positional, seed, prompt_seed, rows in CACHED_CASES:
        model = _small_gpt(positional, block_size=24, seed=seed)
        expected = _greedy_tokens(positional, seed, prompt_seed, rows, prompt, steps)
        idx = expected[:, :prompt].clone()
        calls, unwatch = _watch_calls(model)
        generated = []

        def generate(*args, model=model, generated=generated, **kwargs):  # the library's
            generated.append(True)
            return type(model).generate(model, *args, **kwargs)

        model.generate = generate
        try:
            with CallWatch(LIBRARY_LOOP) as watch:
                out = call(fn, model, idx.clone(), steps, what="greedy_with_cache")
        except Wrong:
            _refed(calls, idx)  # the likeliest cause first
            raise
        finally:
            del model.generate
            unwatch()
        expect(not generated and not watch.used, "greedy_with_cache calls model.generate (or the package's "
               "generate_tokens, its loop): the exercise asks for the loop itself, the prompt run "
               "once and then one new token per step")
        out = returned_tensor(out, "greedy_with_cache")
        expect(out.shape == (rows, prompt + steps), f"greedy_with_cache(model, idx of shape "
               f"({rows}, {prompt}), {steps}) must return shape ({rows}, {prompt + steps}), got "
               f"{tuple(out.shape)}")
        expect(torch.equal(out[:, :prompt], idx), "the result must start with the prompt")
        _feeding(calls, out, idx)
        without = all(h is None for _, h in calls)  # no call passed caches
        if not torch.equal(out, expected):
            first_wrong = int((out != expected).any(0).nonzero()[0])
            if first_wrong == prompt:
                raise Wrong("the first new token is already wrong: it is the argmax of the "
                            "prompt's last logits")
            if without:
                raise Wrong(f"the tokens agree up to position {first_wrong - 1} and then differ, "
                            "and no call passed caches=...: make one KVCache per block and pass "
                            "them to every call")
            raise Wrong(f"the tokens agree up to position {first_wrong - 1} and then differ "
                        f"({positional} positions). The caches were fed your sequence in order, "
                        "so look at how each token is chosen: the argmax of the last position's "
                        "logits, from the call that fed the token before it")
        # The method: with a cache every position runs once (a last call whose logits are
        # not used is fine); without one, each step runs the whole sequence again.
        positions = [idx_.shape[-1] for idx_, _ in calls if idx_ is not None]
        tokens = sum(idx_.numel() for idx_, _ in calls if idx_ is not None)
        if tokens > rows * (prompt + steps):
            shown = ", ".join(map(str, positions[:4]))
            raise Wrong(f"the tokens are right, but the model runs {shown}, ... positions per "
                        f"call{' without caches' * without}: {tokens // rows} positions a row for "
                        f"a sequence of {prompt + steps}. With a cache the prompt runs once and "
                        "each step runs only the newest token")


# ---------------------------------------------------------------------------------------------
# RMSNorm, written by the learner.
# ---------------------------------------------------------------------------------------------


def _tensor(out, what: str) -> torch.Tensor:
    """The learner's result as a tensor (a NumPy array is fine too), or a :class:`Wrong`."""
    return returned_tensor(out, what).detach()


#: (shape, dtype, eps passed to the learner's function (None: its default 1e-6), seed)
RMS_CASES = (((2, 5, 16), F64, None, 60), ((3, 8), torch.float32, None, 61),
             ((4, 12), F64, 1e-5, 62))


def _rms_case(shape, dtype, seed):
    """Seeded tokens with a non-zero mean, features of different scales and one tiny token
    (values about 1e-4, where eps matters), and gains in [0.5, 2]."""
    g = torch.Generator().manual_seed(seed)
    d = shape[-1]
    scales = torch.logspace(-1, 1, d, dtype=F64)[torch.randperm(d, generator=g)]
    x = torch.randn(shape, generator=g, dtype=F64) * scales + 1.5
    x.view(-1, d)[1] *= 1e-4
    weight = 0.5 + 1.5 * torch.rand(d, generator=g, dtype=F64)
    return x.to(dtype), weight.to(dtype)


def _rms_slips(x, weight, eps, ref):
    """The typical wrong answers for input ``x`` (float64) and what each gets wrong."""
    d = x.shape[-1]
    ms = x.pow(2).mean(-1, keepdim=True)
    tiny = "on a token of tiny values (the check has one, about 1e-4 in size) "
    slips = [
        (x / torch.sqrt(ms + eps), "the weight is missing: after the division every feature is "
                                   "scaled by its own gain"),
        (x / (ms.sqrt() + eps) * weight, "eps is added outside the square root: " + tiny
                                          + "that divides by a much smaller number than RMSNorm "
                                          "does"),
        (x / ms.sqrt() * weight, "eps is not used: " + tiny + "the result is then far too "
                                 "large"),
        *((x / torch.sqrt(ms + torch.finfo(dtype).eps) * weight,
           f"eps is the machine epsilon of {dtype}, which F.rms_norm uses when it is not given "
           f"one: pass eps = {eps:g}, RMSNorm's") for dtype in (torch.float32, F64)),
        (x / (ms + eps) * weight, "the square root is missing: the token is divided by the mean "
                                  "of its squares, not by their root"),
    ]
    norm = ("you divide by the norm of each token, the square root of the sum of its squares: "
            "RMSNorm divides by the root of their mean, so the result is sqrt(D) times too small")
    total = x.pow(2).sum(-1, keepdim=True)
    slips += [(x / torch.sqrt(total + eps) * weight, norm),
              (x / (total.sqrt() + eps) * weight, norm),
              (x / total.sqrt() * weight, norm), (ref / math.sqrt(d), norm)]
    spread = ("you divide by the standard deviation of each token, its spread around its mean: "
              "RMSNorm divides by the root of the mean of the squares, with no mean subtracted")
    for unbiased in (False, True):
        var = x.var(-1, keepdim=True, unbiased=unbiased)
        slips.append((x / torch.sqrt(var + eps) * weight, spread))
    var_plus_mean = x.var(-1, keepdim=True) + x.mean(-1, keepdim=True).pow(2)  # unbiased var
    slips.append((x / torch.sqrt(var_plus_mean + eps) * weight, "the variance here divides by "
                  "D - 1 (x.var's default): the mean of the squares is var(unbiased=False) + "
                  "mean^2, or simply the mean of x ** 2"))
    if eps != 1e-5:
        slips.append((x / torch.sqrt(ms + 1e-5) * weight, "eps is 1e-5 here, PyTorch's LayerNorm "
                      f"default, where rms_norm was asked for eps = {eps:g}"))
    xw = x * weight
    slips.append((xw / torch.sqrt(xw.pow(2).mean(-1, keepdim=True) + eps), "the weight multiplies "
                  "x before the normalisation, which then undoes it: normalise first, then "
                  "multiply each feature by its weight"))
    axis = ("the mean of the squares runs over the wrong axis: each token (a row along the last "
            "axis) is divided by its own root mean square")
    for dim in range(x.dim() - 1):
        slips.append((x / torch.sqrt(x.pow(2).mean(dim, keepdim=True) + eps) * weight, axis))
    slips.append((x / torch.sqrt(x.pow(2).mean() + eps) * weight, axis))
    slips.append((x / torch.sqrt(x.pow(2).mean(tuple(range(1, x.dim())), keepdim=True) + eps)
                  * weight, axis))
    return slips


def _rows_centred(t: torch.Tensor) -> bool:
    """Whether every row of ``t`` has mean 0 (up to rounding), as a LayerNorm's output has."""
    size = t.abs().amax(-1).clamp_min(1e-300)
    return bool((t.mean(-1).abs() <= 1e-4 * size).all())


@exercise("ex-ch6-rmsnorm", hints=[
    "Read \"root mean square\" from right to left: square every entry, take the mean of the "
    "squares, then the square root. RMSNorm divides x by that number; nothing is subtracted.",
    "Each token is normalised on its own: the mean runs over its features, the last axis "
    "(dim=-1, keepdim=True, so that it broadcasts against x), and then every feature is "
    "multiplied by its weight.",
    "eps keeps the division safe when a token is nearly zero: it is added to the mean of the "
    "squares, under the square root: x / sqrt(mean(x^2) + eps).",
])
def check_rmsnorm(fn):
    for shape, dtype, eps, seed in RMS_CASES:
        x, weight = _rms_case(shape, dtype, seed)
        given = x.clone()
        args = (given, weight.clone()) if eps is None else (given, weight.clone(), eps)
        out = _tensor(call(fn, *args, what="rms_norm"), "rms_norm")
        expect(torch.equal(given, x), "rms_norm changes x in place: the caller's tensor must "
               "stay as it was")
        expect(out.shape == x.shape, f"rms_norm must return x's shape {tuple(x.shape)}, got "
               f"{tuple(out.shape)}")
        expect(out.is_floating_point(), f"rms_norm must return floats, got {out.dtype}")
        eps = 1e-6 if eps is None else eps
        norm = RMSNorm(shape[-1], eps).to(dtype)
        with torch.no_grad():
            norm.weight.copy_(weight)
            ref = norm(x)
        n = shape[-1]
        if close(out, ref, n):
            continue
        if dtype == F64 and close(out.float(), ref.float(), n):
            continue  # computed in float32 and cast back, as Hugging Face's LlamaRMSNorm does
        x64, w64 = x.double(), weight.double()
        if _rows_centred(out.double() / w64) or _rows_centred(out.double()):
            raise Wrong("the mean of each token is subtracted: that is LayerNorm. RMSNorm keeps "
                        "the mean and only rescales each token")
        for slip, message in _rms_slips(x64, w64, eps, ref.double()):
            if close(out, slip.expand(shape).to(dtype), n):
                raise Wrong(message)

        if eps != 1e-6 and close(out, x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True)
                                                          + 1e-6) * w64, n):
            raise Wrong(f"rms_norm ignores the eps it is given: called with eps = {eps}, it "
                        "must use that eps")
        raise Wrong(f"the result differs from RMSNorm for x of shape {shape}")


# ---------------------------------------------------------------------------------------------
# Find the bug: a top-p filter that keeps too little.
# ---------------------------------------------------------------------------------------------

#: The handmade rows: the token that carries the sum across p matters in the first.
TOP_P_HANDMADE = ((0.25, 0.08, 0.35, 0.12, 0.2), (0.06, 0.8, 0.04, 0.07, 0.03))


def top_p_cases():
    """(logits, p) pairs: handmade rows, then seeded rows of several shapes (a single row, a
    (B, T, V) block); no token sits near the cut."""
    handmade = torch.tensor(TOP_P_HANDMADE, dtype=F64).log() + 3.0
    g = torch.Generator().manual_seed(63)
    wide = 2 * torch.randn(4, 50, generator=g)
    peaked = 3 * torch.randn(3, 20, generator=g, dtype=F64)
    row = 1.5 * torch.randn(30, generator=g, dtype=F64)
    block = 2 * torch.randn(2, 3, 20, generator=g)
    return [(handmade.float(), 0.7), (wide, 0.9), (wide, 0.5), (wide, 0.2), (peaked, 0.75),
            (row, 0.6), (block, 0.8)]


def top_p_exact_case():
    """A row whose probabilities are exact in floating point, (1/4, 1/4, 1/4, 1/4, 0, ...),
    with p = 1/2: the tokens before the third hold exactly p, so it is not needed. Four tokens
    tie: the two most probable of them are any two (or all four, as top_p keeps ties)."""
    return torch.tensor([[0.0, -800, 0, -800, 0, -800, 0, -800]]), 0.5


def _complements(probs: torch.Tensor, p: float) -> list[torch.Tensor]:
    """Kept sets (in the order of the ids) that hold about 1 - p of the probability."""
    sp, order = probs.sort(dim=-1, descending=True)
    cum = sp.cumsum(-1)
    below = cum <= 1 - p
    forced = below.clone()
    forced[..., 0] = True
    shifted = cum - sp < 1 - p
    return [torch.zeros_like(k).scatter(-1, order, k) for k in (below, forced, shifted)]


def _top_p_diagnose(out: torch.Tensor, logits: torch.Tensor, p: float) -> None:
    """Return quietly when ``out`` is right for ``logits`` and ``p``; else a :class:`Wrong`."""
    z = logits.double()
    probs = z.softmax(-1)
    o = out.double()
    expect(not torch.isnan(o).any(), f"for p = {p} top_p_filter returns NaN")
    keep = torch.isfinite(o)
    low = torch.float32 if torch.float32 in (out.dtype, logits.dtype) else F64
    atol = tolerance(low, n=z.shape[-1], scale=float(z.abs().max()))["atol"]
    diff = torch.where(keep, o - z, torch.nan)
    spread = diff.nan_to_num(-math.inf).amax(-1) + diff.nan_to_num(math.inf).amin(-1).neg()
    if not bool((spread[keep.any(-1)] <= atol).all()):  # a row shift (log-softmax) is fine
        if bool((o >= 0).all() and (o <= 1).all() and (o.sum(-1) <= 1 + 1e-4).all()):
            raise Wrong("top_p_filter returns probabilities: it must return logits, which the "
                        "caller turns into probabilities with a softmax")
        zero = (o == 0) & (z != 0)
        if zero.any() and torch.allclose(o[~zero], z[~zero], rtol=0, atol=atol):
            raise Wrong("the removed tokens get the logit 0: after the softmax a logit of 0 is "
                        "still a token that can be drawn, so nothing is really removed")
        huge = o <= -1e6
        if huge.any() and torch.allclose(o[~huge], z[~huge], rtol=0, atol=atol):
            raise Wrong("the removed tokens get a large negative logit rather than -inf: give "
                        "them -inf, so that they are removed exactly and a later filter or a "
                        "check with isfinite sees them as removed")
        ordered = z.sort(-1, descending=True).values
        if torch.allclose(o[keep], ordered[keep], rtol=0, atol=atol):
            raise Wrong("the result is in sorted order: the logits must come back in the order "
                        "of the token ids")
        raise Wrong("the kept tokens' logits are changed: top-p only removes tokens, the others "
                    "keep their logits")
    ref = torch.isfinite(top_p(logits, p))
    if torch.equal(keep, ref):
        return
    least_kept = probs.masked_fill(~keep, math.inf).amin(-1)
    most_removed = probs.masked_fill(keep, -math.inf).amax(-1)
    ordered = bool((most_removed <= least_kept).all())
    # With ties at the cut, the smallest nucleus may take any of the tied tokens (or all of
    # them, as top_p does); without ties both counts are the same.
    sp = probs.sort(-1, descending=True).values
    smallest = (sp.cumsum(-1) - sp < p).sum(-1).clamp(min=1)
    count = keep.sum(-1)
    if ordered and bool(((count == smallest) | (count == ref.sum(-1))).all()):
        return
    if not ordered:
        raise Wrong("the kept tokens are not the most probable ones: a removed token is more "
                    "probable than a kept one. Is the mask, made in sorted order, applied to the "
                    "tokens it was made for?")
    candidates = _complements(probs, p)  # at p = 0.5 they are the set itself: no complement
    if p != 0.5 and all(any(torch.equal(keep[i], c[i]) for c in candidates)
                        for i in range(len(keep))):
        raise Wrong(f"for p = {p} the kept tokens hold about 1 - p of the probability instead "
                    "of at least p: the complement is confused")
    expect(keep.any(-1).all(), f"for p = {p} a row keeps no token at all: the most probable "
           "token is always kept")
    mass = (probs * keep).sum(-1)
    if bool((mass < p).any()):
        raise Wrong(f"for p = {p} the kept tokens' probability sums to less than p: the nucleus "
                    "is too small")
    cut = sp.gather(-1, smallest[:, None] - 1) == sp.gather(-1, smallest[:, None].clamp(
        max=sp.shape[-1] - 1))
    tied = (" (At this cut several tokens have the same probability: keep either just enough "
            "of them or, as the chapter's top_p does, all of them, but not some in between.)"
            if bool(cut.any()) else "")
    raise Wrong(f"for p = {p} the nucleus is larger than needed: without its least probable "
                "token the rest still sums to at least p (a prefix that sums to exactly p is "
                "already enough: a token goes once the tokens before it hold p or more, >= p, "
                "not > p; the widely copied form, the mask cum > p shifted right by one, also "
                f"keeps the token after a prefix that sums to exactly p).{tied}")


@exercise("ex-ch6-top-p-bug", hints=[
    "Work one row by hand: probabilities (0.35, 0.25, 0.2, 0.12, 0.08) and p = 0.7. Which "
    "tokens must be kept to hold at least 0.7, and which does top_p_filter keep?",
    "Look at the token whose probability carries the sum across p. What is its cumulative "
    "probability, and what does the mask cum > p do with it?",
    "A token is needed as long as the tokens before it sum to less than p: compare p with the "
    "probability *before* each token, cum - probs, not with cum, which includes the token "
    "itself.",
])
def check_top_p_bug(fn):
    for logits, p in (*top_p_cases(), top_p_exact_case()):
        given = logits.clone()
        out = _tensor(call(fn, given, p, what="top_p_filter"), "top_p_filter")
        expect(torch.equal(given, logits), "top_p_filter changes the logits it is given, in "
               "place: the caller's tensor must stay as it was")
        expect(out.shape == logits.shape, f"top_p_filter must return the logits' shape "
               f"{tuple(logits.shape)}, got {tuple(out.shape)}")
        expect(out.is_floating_point(), f"top_p_filter must return logits (floats), got "
               f"{out.dtype}")
        v = logits.shape[-1]
        try:
            _top_p_diagnose(out.reshape(-1, v), logits.reshape(-1, v), p)
        except Wrong:
            if _top_p_right_when_normalised(fn, logits, p):
                raise Wrong(f"for p = {p} top_p_filter is right for log-probabilities but not "
                            "for the same logits shifted by a constant, which the softmax "
                            "ignores: are the numbers summed probabilities, softmax(logits), "
                            "or exp(logits) without normalising?") from None
            if logits.dim() == 1 and _top_p_right_on_batch(fn, logits, p):
                raise Wrong(f"top_p_filter is right for a batch of rows (B, V) but not for one "
                            f"row of shape ({v},): filter along the last axis, whatever the axes "
                            "before it (a loop over logits.shape[0] takes the entries of a "
                            "single row for rows)") from None
            raise


def _top_p_right_when_normalised(fn, logits: torch.Tensor, p: float) -> bool:
    """Whether ``fn`` keeps the right tokens once the logits are log-probabilities (a right
    answer does the same for any shift; one that sums exp(logits) is right only then)."""
    normalised = logits - logits.logsumexp(-1, keepdim=True)
    try:
        out = fn(normalised.clone(), p)
        v = logits.shape[-1]
        _top_p_diagnose(torch.as_tensor(out).reshape(-1, v), normalised.reshape(-1, v), p)
    except Exception:
        return False
    return True


def _top_p_right_on_batch(fn, row: torch.Tensor, p: float) -> bool:
    """Whether ``fn`` gives the right filter for ``row`` made a batch of one row, (1, V)."""
    try:
        out = _tensor(call(fn, row[None].clone(), p, what="top_p_filter"), "top_p_filter")
        if out.shape != (1, row.shape[-1]):
            return False
        _top_p_diagnose(out, row[None], p)
    except Wrong:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Speculative decoding: when is it faster?
# ---------------------------------------------------------------------------------------------

SPEC_ALPHA_ONE = ("at alpha = 1 every guess is kept and a round emits k + 1 tokens: a closed form "
                  "with 1 - alpha in a denominator needs that case on its own")
# k = 3 before k = 1: at k = 1 a special case alpha = 1 -> 1 / (k c + 1) equals a slip's value
SPEC_GRID = [(a, k, c) for a in (0.0, 0.3, 0.6, 0.9, 1.0) for k in (3, 1, 5) for c in (0.05, 0.2, 0.0)]


def _spec_slips(alpha: float, k: int, c: float) -> list[tuple[float, str]]:
    """What a slip gives at (alpha, k, c), and what to say about it."""
    def ratio(tokens, time):
        return tokens / time if time else float("inf")

    tokens = sum(alpha**i for i in range(k + 1))
    return [
        (tokens, "that is the tokens per round: a round also costs the draft's k steps, each c of "
                 "a pass"),
        (ratio(tokens, k * c), "that leaves out the model's own pass: a round is k draft steps and "
                               "one pass of the model"),
        (ratio(tokens, (k + 1) * c + 1), "that charges k + 1 draft steps: the draft makes k guesses "
                                         "a round"),
        (ratio(tokens - 1, k * c + 1), "that counts only the kept guesses: every round also draws "
                                       "one token of its own"),
        (ratio(tokens - alpha**k, k * c + 1), "that stops one token short when every guess is kept: "
                                              "the round then draws one more from the model"),
        (ratio(1 + k * alpha, k * c + 1), "that keeps each guess whatever happened to the ones "
                                          "before: a rejection ends the round"),
        (ratio(k * c + 1, tokens), "that is the ratio the other way round: the time per token with "
                                   "speculative decoding over the time without"),
    ]


@exercise("ex-ch6-spec-speedup", hints=[
    "Measure time in passes of the model. Without a draft a token takes one pass. A round of "
    "speculative decoding takes k draft steps, k c passes, plus one pass of the model.",
    "A round emits 1 + alpha + ... + alpha^k tokens on average, eq. (6.24); the speed-up is "
    "the tokens per round divided by the time per round. At alpha = 1 every guess is kept.",
])
def check_spec_speedup(fn):
    for alpha, k, c in SPEC_GRID:
        at = f"alpha = {alpha}, k = {k}, c = {c}"
        try:
            out = call(fn, alpha, k, c, what=f"speedup({alpha}, {k}, {c})")
        except Wrong as err:
            if alpha == 1:
                raise Wrong(f"{err}. {SPEC_ALPHA_ONE[0].upper()}{SPEC_ALPHA_ONE[1:]}") from err
            raise
        out = number(out, "speedup", "must return", finite=False)  # alpha = 1 is named below
        right = sum(alpha**i for i in range(k + 1)) / (k * c + 1)
        if math.isclose(out, right, rel_tol=1e-6, abs_tol=1e-9):
            continue
        expect(math.isfinite(out), f"speedup gives {out} at {at}: {SPEC_ALPHA_ONE}")
        for slip, message in _spec_slips(alpha, k, c):
            if math.isclose(out, slip, rel_tol=1e-6, abs_tol=1e-9):
                raise Wrong(f"at {at} your function gives {out:.6g}: {message}")
        raise Wrong(f"at {at} your function gives {out:.6g}, which is not the tokens a round "
                    "emits on average divided by the passes a round takes")


# ---------------------------------------------------------------------------------------------
# StreamingLLM's mask: a window and the first tokens.
# ---------------------------------------------------------------------------------------------

# (T, window, sinks): windows inside and beyond T, no sinks, sinks overlapping the window, more
# sinks than positions, a window of one
STREAMING_GRID = ((10, 3, 2), (9, 1, 3), (8, 4, 0), (12, 4, 4), (6, 9, 1), (7, 2, 7), (5, 3, 9))


def _streaming_slips(T: int, window: int, sinks: int) -> list[tuple[torch.Tensor, str]]:
    """The masks of typical slips, each with what it gets wrong."""
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    causal, recent, first = j <= i, j > i - window, j < sinks
    return [
        (~(causal & (recent | first)), "the polarity is flipped: streaming_mask returns True "
                                        "where a query may attend (as the exercise asks), not where "
                                        "it is blocked"),
        (causal & recent, "the sinks are missing: every query may also read the first `sinks` "
                          "positions"),
        (recent & causal | first, "a query reads a sink that comes after it: the sinks are "
                                  "causal too (j <= i)"),
        ((recent | first), "the mask lets queries read later keys: keep j <= i"),
        (causal & ((j >= i - window) | first), "the window holds window + 1 keys: query i reads "
                                               "its own key and the window - 1 before it"),
        (causal & ((j > i - window + 1) | first), "the window holds window - 1 keys: query i "
                                                  "reads its own key and the window - 1 before it"),
        (causal & (recent | (j <= sinks)), "one sink too many: the sinks are positions "
                                           "0 .. sinks - 1"),
        (causal & (recent | (j < sinks - 1)), "one sink too few: the sinks are positions "
                                              "0 .. sinks - 1"),
        (causal & (recent | first) & ~(recent & first), "a key that is both a sink and in the "
                                                        "window is blocked: or, not exclusive or"),
    ]


@exercise("ex-ch6-streaming-mask", hints=[
    "Make two index grids, i = torch.arange(T)[:, None] for the queries and j = "
    "torch.arange(T)[None, :] for the keys; every condition is then one comparison of the two, "
    "a (T, T) bool tensor.",
    "Combine the conditions with &, | and ~ (Python's and, or and not do not work on tensors), "
    "and put every comparison in parentheses: & and | bind more tightly than < and <=. The "
    "window's w keys include the query's own.",
])
def check_streaming_mask(fn):
    for T, window, sinks in STREAMING_GRID:
        what = f"streaming_mask({T}, {window}, {sinks})"
        try:
            out = call(fn, T, window, sinks, what="streaming_mask")
        except Wrong as err:
            if "Boolean value of Tensor" in str(err):
                raise Wrong("streaming_mask used and, or or not on tensors (or a comparison "
                            "without parentheses, since & and | bind more tightly than <=): "
                            "combine bool tensors with &, | and ~") from err
            raise
        mask = returned_tensor(out, "streaming_mask").cpu()  # an answer on a GPU is fine
        expect(mask.dtype == torch.bool, f"the mask must be a bool tensor (True = may attend), "
                                         f"got {mask.dtype}")
        expect(tuple(mask.shape) == (T, T), f"{what} must have shape ({T}, {T}), got "
                                            f"{tuple(mask.shape)}")
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        right = (j <= i) & ((j > i - window) | (j < sinks))
        if torch.equal(mask, right):
            continue
        for slip, message in _streaming_slips(T, window, sinks):
            if torch.equal(mask, slip):
                raise Wrong(f"{what}: {message}")
        wrong = (mask != right).nonzero()[0].tolist()
        raise Wrong(f"{what}: query {wrong[0]} {'may' if right[wrong[0], wrong[1]] else 'must not'} "
                    f"read key {wrong[1]} (True where j <= i and (j > i - window or j < sinks))")
