"""A decoder-only (GPT-style) language model, nanoGPT style (Radford et al., 2019).

Read top to bottom, as nanoGPT's ``model.py``: :class:`CausalSelfAttention` (chapter 5's
:class:`~seqbook.attention.MultiHeadAttention` over one sequence, causal, whose queries and keys
RoPE may turn and whose keys and values a :class:`~seqbook.kv_cache.KVCache` may keep),
:class:`GPTBlock` (the pre-LN layer of eq. (6.6) around it and a feed-forward network),
:class:`GPTConfig` (the sizes, nanoGPT's names) and :class:`GPT`: token embeddings, positions
(learned, sinusoidal or rotary, :mod:`seqbook.rope`: :meth:`GPT.positions`), ``n_layer`` blocks, a
final LayerNorm and a linear head, with ``generate`` (optionally with a KV cache per block) and
``from_hf``, which copies a Hugging Face GPT-2 (``transformers.GPT2LMHeadModel``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention
from .checks import (
    check_choice,
    check_count,
    check_flag,
    check_number,
    check_positive_int,
    check_probability,
    check_rotary,
    check_sequence,
    check_targets,
    check_token_ids,
    checked,
)
from .decoding import check_generate, generate_tokens
from .kv_cache import KVCache, check_cache, check_caches
from .rope import apply_rope, rope_angles
from .transformer import (
    ACTIVATIONS,
    FeedForward,
    LayerNorm,
    positional_encoding,
    residual,
)

__all__ = ["POSITIONAL", "CausalSelfAttention", "GPTBlock", "GPTConfig", "GPT"]

POSITIONAL = ("learned", "sinusoidal", "rope")


def _check_rotary_and_cache(self, x, rotary, cache) -> None:
    """The inputs of a GPT block or its attention: x (B, T, D); RoPE's angles for T positions;
    a cache with room for T more."""
    attn = getattr(self, "self_attn", self)
    check_sequence("x", x, attn.embed_dim, attn.q_proj.weight.dtype)
    T = x.shape[1]
    if rotary is not None:
        check_rotary("rotary", rotary, T, attn.head_dim)
    if cache is not None:
        check_cache("cache", cache, T)


class CausalSelfAttention(MultiHeadAttention):
    """The attention of a GPT block: chapter 5's multi-head attention over one sequence ``x``
    (queries, keys and values all from ``x``), causal, as ``MultiHeadAttention(x, x, x,
    is_causal=True)`` computes it, with two additions for generation:

    * ``rotary``, the ``(cos, sin)`` of :func:`seqbook.rope.rope_angles` for the positions of x's
      tokens: queries and keys are turned by their positions (RoPE) before they meet;
    * ``cache``, a :class:`~seqbook.kv_cache.KVCache`: the new keys and values are appended to
      those of earlier calls, and the queries attend to all of them: the T new tokens sit at the
      last T of the S positions, and the i-th of them sees the keys up to its own position,
      S - T + i (with an empty cache, the causal mask; for one new token, every key kept).

    The parameters, ``fast`` and ``from_torch`` are :class:`MultiHeadAttention`'s.

    Shape:
        x: (B, T, embed_dim); rotary: each (T, head_dim). Output: (B, T, embed_dim) and the
        per-head weights (B, num_heads, T, S) or None, S = T plus the positions kept in the cache.
    """

    @checked(_check_rotary_and_cache, need_weights=check_flag)
    def forward(
        self,
        x: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T, E = x.shape
        H, Dh = self.num_heads, self.head_dim
        q = self.q_proj(x).view(B, T, H, Dh).transpose(1, 2)  # (B, H, T, Dh)
        k = self.k_proj(x).view(B, T, H, Dh).transpose(1, 2)  # (B, H, T, Dh)
        v = self.v_proj(x).view(B, T, H, Dh).transpose(1, 2)  # (B, H, T, Dh)
        if rotary is not None:  # RoPE: turn queries and keys by their positions' angles
            q, k = apply_rope(q, *rotary), apply_rope(k, *rotary)
        if cache is not None:  # keep the new keys and values, attend over all kept so far
            k, v = cache.append(k, v)  # (B, H, S, Dh)
        S = k.shape[2]  # the keys: S - T kept before x, then x's own T
        if S == T or T == 1:  # a whole sequence (causal), or one token that sees every key
            out, weights = self.attend(q, k, v, is_causal=S == T, need_weights=need_weights)
        else:  # T tokens past S - T kept ones: the i-th sees the keys up to S - T + i
            mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)  # (T, S)
            out, weights = self.attend(q, k, v, mask, need_weights=need_weights)
        out = out.transpose(1, 2).reshape(B, T, E)  # concatenate the heads: (B, T, E)
        return self.out_proj(out), weights


class GPTBlock(nn.Module):
    """One block of the GPT: the pre-LN layer of eq. (6.6) with causal self-attention::

        x = x + Dropout(CausalSelfAttention(LayerNorm_1(x)))
        x = x + Dropout(FeedForward(LayerNorm_2(x)))

    The parts and their names are those of :class:`~seqbook.transformer.EncoderLayer` called with
    ``is_causal=True``; the attention is a :class:`CausalSelfAttention`, which takes RoPE's angles
    and a KV cache. Arguments as for ``EncoderLayer`` (pre-LN only, GELU by default).

    Shape:
        x: (B, T, embed_dim); rotary and cache: see :class:`CausalSelfAttention`.
        Output: (B, T, embed_dim). After a call with ``need_weights=True`` the per-head weights
        (B, num_heads, T, S) are kept in ``attn_weights``.
    """

    def __init__(self, embed_dim: int, num_heads: int, d_ff: int | None = None, dropout: float = 0.1,
                 activation: str = "gelu", eps: float = 1e-5, bias: bool = True, fast: bool = False):
        super().__init__()
        embed_dim = check_positive_int("embed_dim", embed_dim)
        if d_ff is not None:
            check_positive_int("d_ff", d_ff)
        self.embed_dim = embed_dim
        self.norm1 = LayerNorm(embed_dim, eps, bias, fast)
        self.self_attn = CausalSelfAttention(embed_dim, num_heads, dropout=dropout, bias=bias, fast=fast)
        self.dropout1 = nn.Dropout(dropout)
        self.norm2 = LayerNorm(embed_dim, eps, bias, fast)
        self.ff = FeedForward(embed_dim, d_ff or 4 * embed_dim, dropout, activation, bias)
        self.dropout2 = nn.Dropout(dropout)
        self.attn_weights: torch.Tensor | None = None

    @checked(_check_rotary_and_cache, need_weights=check_flag)
    def forward(
        self,
        x: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor:
        def attend(h):  # causal self-attention: (B, T, D) -> (B, T, D)
            a, w = self.self_attn(h, rotary, cache, need_weights)
            self.attn_weights = None if w is None else w.detach()  # (B, H, T, S)
            return a

        x = residual(x, attend, self.norm1, self.dropout1)
        return residual(x, self.ff, self.norm2, self.dropout2)  # (B, T, D)


@dataclass
class GPTConfig:
    """The sizes of a :class:`GPT` model (names as in nanoGPT).

    Sizes are ints >= 1 (NumPy ints are accepted and stored as ``int``), ``dropout`` is in [0, 1).
    ``init_std=0`` is legal (every weight starts at zero) but rarely useful.
    """

    vocab_size: int
    block_size: int = 128  # longest context the model sees
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    d_ff: int | None = None  # default 4 * n_embd
    dropout: float = 0.1
    bias: bool = True
    tie_weights: bool = True  # share the token embedding with the output layer
    positional: str = "learned"  # "learned" (GPT-2), "sinusoidal" (eqs. (6.1)-(6.2)) or "rope"
    activation: str = "gelu"  # "relu", "gelu" or "gelu_tanh" (GPT-2's tanh approximation)
    layer_norm_eps: float = 1e-5  # the eps of every LayerNorm (GPT-2: 1e-5)
    init_std: float = 0.02  # std of the initial weights (GPT-2 uses 0.02 at every width)
    fast: bool = False

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            setattr(self, name, check_positive_int(name, getattr(self, name)))
        if self.d_ff is not None:
            self.d_ff = check_positive_int("d_ff", self.d_ff)
        if self.n_embd % self.n_head:
            raise ValueError(
                f"n_embd must be divisible by n_head, got n_embd={self.n_embd}, n_head={self.n_head}"
            )
        self.dropout = check_probability("dropout", self.dropout)
        for name in ("bias", "tie_weights", "fast"):
            check_flag(name, getattr(self, name))
        check_choice("positional", self.positional, POSITIONAL)
        if self.positional == "sinusoidal" and self.n_embd % 2:
            raise ValueError(f"n_embd must be even for positional='sinusoidal', got {self.n_embd}")
        if self.positional == "rope" and (self.n_embd // self.n_head) % 2:
            raise ValueError(
                "n_embd // n_head must be even for positional='rope' (dimensions turn in pairs), "
                f"got {self.n_embd} // {self.n_head} = {self.n_embd // self.n_head}"
            )
        check_choice("activation", self.activation, ACTIVATIONS)
        self.layer_norm_eps = check_number("layer_norm_eps", self.layer_norm_eps, low=0.0)
        self.init_std = check_number("init_std", self.init_std, low=0.0)


# Hugging Face's names of the activations GPT can copy (``transformers.activations.ACT2FN``).
_HF_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


class GPT(nn.Module):
    """A decoder-only transformer language model (Radford et al., 2019), nanoGPT style.

    Token and position embeddings, ``n_layer`` pre-LN :class:`GPTBlock` s with causal
    self-attention (no cross-attention: there is no encoder), a final LayerNorm and a linear head
    over the vocabulary, optionally tied to the token embedding. Positions (:meth:`positions`) are
    learned (GPT-2), sinusoidal (eqs. (6.1)-(6.2), added to the token embeddings scaled by
    ``sqrt(n_embd)`` as in Vaswani et al. and :class:`~seqbook.transformer.Seq2SeqTransformer`) or
    rotary (``positional="rope"``, :mod:`seqbook.rope`: queries and keys are rotated by their
    positions inside every attention layer).

    ``forward(idx, caches=...)`` with one :class:`~seqbook.kv_cache.KVCache` per block continues a
    sequence whose earlier tokens are in the caches: ``idx`` holds the new tokens only, at positions
    ``caches[0].length`` onwards (how :meth:`generate` runs with ``use_cache=True``).

    Shape:
        idx: (B, T) ids with T <= block_size. ``forward`` returns logits (B, T, vocab_size) and,
        when ``targets`` (B, T) are given, the mean cross-entropy (else None).
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.n_embd)
        if c.positional == "learned":
            self.pos_emb = nn.Embedding(c.block_size, c.n_embd)
        elif c.positional == "sinusoidal":
            self.register_buffer("pos_code", positional_encoding(c.block_size, c.n_embd), persistent=False)
        # "rope": no code is added to the tokens; the blocks rotate queries and keys instead
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList([
            GPTBlock(c.n_embd, c.n_head, c.d_ff, c.dropout, c.activation, c.layer_norm_eps, c.bias, c.fast)
            for _ in range(c.n_layer)
        ])
        self.ln_f = LayerNorm(c.n_embd, c.layer_norm_eps, c.bias, c.fast)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=c.init_std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for name, p in self.named_parameters():  # GPT-2: scale the projections into the residual stream
            if name.endswith(("out_proj.weight", "linear2.weight")):
                nn.init.normal_(p, mean=0.0, std=c.init_std / math.sqrt(2 * c.n_layer))
        if c.tie_weights:
            self.lm_head.weight = self.tok_emb.weight

    @classmethod
    def from_hf(cls, model, fast: bool = False) -> GPT:
        """A copy of a Hugging Face ``transformers.GPT2LMHeadModel``: the same function, in our modules.

        GPT-2 is this class with learned positions, ``activation="gelu_tanh"`` (Hugging Face's
        ``"gelu_new"``), biases, ``layer_norm_eps=1e-5``, a final LayerNorm and tied embeddings; the
        sizes, the activation, the eps and the tying are read from ``model``. Hugging Face stores
        each linear map as a ``Conv1D`` whose weight is the transpose of ``nn.Linear``'s, (in, out),
        and packs the query, key and value projections into one ``c_attn`` of width 3 * n_embd; the
        copy splits and transposes them. It has ``model``'s dtype, device and train/eval mode.

        Dropout sits where :class:`GPTBlock` puts it (also after the feed-forward activation,
        which GPT-2 does not do), so the two agree exactly in eval mode or with zero dropout.
        ``transformers`` is needed only to make ``model``; seqbook does not import it otherwise.

        Raises:
            TypeError: ``model`` is not a ``GPT2LMHeadModel`` (for instance a ``GPT2Config``, a
                ``GPT2Model`` without the head, or another architecture).
            ValueError: ``model`` has something this class lacks: cross-attention, attention scores
                scaled other than by ``1/sqrt(d_k)``, another activation, or different dropout rates
                for the embeddings, the attention weights and the residual branches.
        """
        try:
            from transformers import GPT2LMHeadModel
        except ImportError:  # without transformers there is no GPT2LMHeadModel to copy
            GPT2LMHeadModel = None
        if GPT2LMHeadModel is None or not isinstance(model, GPT2LMHeadModel):
            raise TypeError(f"model must be a transformers GPT2LMHeadModel, got {type(model).__name__}")
        check_flag("fast", fast)
        hf, t = model.config, model.transformer
        if getattr(hf, "model_type", None) != "gpt2":
            raise ValueError(f"model must have a GPT2Config, got config.model_type={hf.model_type!r}")
        if hf.add_cross_attention:
            raise ValueError("model must have no cross-attention (GPT has no encoder to attend to), "
                             "got config.add_cross_attention=True")
        if not hf.scale_attn_weights or hf.scale_attn_by_inverse_layer_idx:
            raise ValueError("model must scale attention scores by 1/sqrt(d_k) only, got config."
                             f"scale_attn_weights={hf.scale_attn_weights}, "
                             f"scale_attn_by_inverse_layer_idx={hf.scale_attn_by_inverse_layer_idx}")
        activation = _HF_ACTIVATIONS.get(hf.activation_function)
        if activation is None:
            raise ValueError(f"model's config.activation_function must be one of {sorted(_HF_ACTIVATIONS)}, "
                             f"got {hf.activation_function!r}")
        rates = {"embd_pdrop": hf.embd_pdrop, "attn_pdrop": hf.attn_pdrop, "resid_pdrop": hf.resid_pdrop}
        if len(set(rates.values())) > 1:
            raise ValueError(f"model must use one dropout rate everywhere (GPT has one), got config {rates}")
        wte = t.wte.weight  # (V, D)
        D = wte.shape[1]
        config = GPTConfig(
            vocab_size=wte.shape[0], block_size=t.wpe.num_embeddings, n_layer=len(t.h),
            n_head=t.h[0].attn.num_heads, n_embd=D, d_ff=t.h[0].mlp.c_fc.weight.shape[1],
            dropout=hf.resid_pdrop, bias=True, tie_weights=model.lm_head.weight is wte,
            positional="learned", activation=activation, layer_norm_eps=t.ln_f.eps, fast=fast,
        )
        ours = cls(config).to(wte.device, wte.dtype)  # the dtype first: copying into float32 would round

        def linear(lin: nn.Linear, w: torch.Tensor, b: torch.Tensor) -> None:
            lin.weight.copy_(w.T)  # Conv1D keeps (in, out), nn.Linear (out, in)
            lin.bias.copy_(b)

        def norm(ln: LayerNorm, hf_ln: nn.LayerNorm) -> None:
            ln.weight.copy_(hf_ln.weight)
            ln.bias.copy_(hf_ln.bias)

        with torch.no_grad():
            ours.tok_emb.weight.copy_(wte)
            ours.pos_emb.weight.copy_(t.wpe.weight)
            for block, h in zip(ours.blocks, t.h, strict=True):
                norm(block.norm1, h.ln_1)
                norm(block.norm2, h.ln_2)
                a = block.self_attn
                w_q, w_k, w_v = h.attn.c_attn.weight.split(D, dim=1)  # (D, 3D) -> 3 x (D, D)
                b_q, b_k, b_v = h.attn.c_attn.bias.split(D)
                linear(a.q_proj, w_q, b_q)
                linear(a.k_proj, w_k, b_k)
                linear(a.v_proj, w_v, b_v)
                linear(a.out_proj, h.attn.c_proj.weight, h.attn.c_proj.bias)
                linear(block.ff.linear1, h.mlp.c_fc.weight, h.mlp.c_fc.bias)
                linear(block.ff.linear2, h.mlp.c_proj.weight, h.mlp.c_proj.bias)
            norm(ours.ln_f, t.ln_f)
            if not config.tie_weights:
                ours.lm_head.weight.copy_(model.lm_head.weight)
        return ours.train(model.training)

    def _check_forward(self, idx, targets, caches) -> None:
        c = self.config
        check_token_ids("idx", idx, c.vocab_size, c.block_size, "block_size")
        if targets is not None:
            check_targets("targets", targets, idx, c.vocab_size)
        if caches is not None:
            check_caches("caches", caches, len(self.blocks), idx.shape[1], c.block_size,
                         idx.shape[0])

    @checked(_check_forward, need_weights=check_flag,
             label_smoothing=partial(check_probability, allow_one=True))
    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        need_weights: bool = False,
        label_smoothing: float = 0.0,
        caches: Sequence[KVCache] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits of the next token at every position of ``idx``, and their loss on
        ``targets``. With ``caches`` (one :class:`~seqbook.kv_cache.KVCache` per block),
        ``idx`` holds only the new tokens, at the positions after those the caches keep: a
        prompt for empty caches, then one token per call (or several: speculative decoding).
        """
        start = caches[0].length if caches else 0  # positions already in the caches
        x, rotary = self.positions(self.tok_emb(idx), start)  # (B, T, D); RoPE's angles
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            x = block(x, rotary, caches[i] if caches else None, need_weights)  # (B, T, D)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten().long(),
                                   label_smoothing=label_smoothing)
        return logits, loss

    def positions(self, x: torch.Tensor, start: int = 0
                  ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """Give the token embeddings ``x`` their positions ``start, start + 1, ...``: add
        the learned code, or the sinusoidal one to the tokens scaled by sqrt(D) (as
        Vaswani et al.); for RoPE add nothing and return the angles by which every block
        turns its queries and keys. Unchecked: :meth:`forward` checks.

        Shape:
            x: (B, T, D) -> (B, T, D) and RoPE's (cos, sin), each (T, D_h), or None.
        """
        c, T = self.config, x.shape[1]
        if c.positional == "learned":
            return x + self.pos_emb.weight[start : start + T], None  # (T, D) to each row
        if c.positional == "sinusoidal":
            return x * math.sqrt(c.n_embd) + self.pos_code[start : start + T], None
        steps = torch.arange(start, start + T, device=x.device)
        return x, rope_angles(steps, c.n_embd // c.n_head)  # cos, sin: (T, D_h)

    @checked(check_generate, max_new_tokens=check_count, use_cache=check_flag)
    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None,
                 forbid: Sequence[int] = (), use_cache: bool = False) -> torch.Tensor:
        """Extend ``idx`` (B, T) by ``max_new_tokens`` sampled tokens; returns (B, T + max_new_tokens).

        Each step feeds the last ``block_size`` tokens and draws the next token from the final logits
        with :func:`seqbook.decoding.sample_next`, the sampling rule of every language model of the
        book: ids in ``forbid`` (e.g. the reserved ``<pad> <unk> <sos> <eos>``) are never drawn,
        ``temperature=0`` picks the most likely token (greedy), otherwise the logits are divided by
        ``temperature``, cut to the ``top_k`` largest (optional) and sampled from the softmax.
        ``generator`` makes the samples reproducible. ``max_new_tokens=0`` returns ``idx`` unchanged.
        Logits are sampled in float32, or in float64 for a float64 model. ``idx`` may be longer than
        ``block_size``: only its end is read. Its checks are :meth:`forward`'s, so a mistake gives
        the same error at both doors.

        ``use_cache=True`` keeps every layer's keys and values in a :class:`~seqbook.kv_cache.KVCache`:
        the prompt runs once, then each step runs the one new token (O(T) work per token instead of
        a whole forward pass over the prefix), with the same tokens as without the cache. Once the
        sequence outgrows ``block_size`` the window slides, every position changes, and the steps
        run without the cache, as they would with ``use_cache=False``.

        Shape:
            idx: (B, T) ids with T >= 1 -> (B, T + max_new_tokens)
        """
        return generate_tokens(self, idx, max_new_tokens, temperature, top_k, forbid, generator,
                               use_cache)
