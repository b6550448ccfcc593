"""The block of today's open models, Llama-style (Touvron et al., 2023), as small objects.

:class:`RMSNorm`, :class:`SwiGLU`, :class:`GroupedQueryAttention`, the pre-norm
:class:`LlamaBlock` made of them, and :class:`Llama`, a decoder-only language model of such
blocks (sizes in :class:`LlamaConfig`, nanoGPT's names as :class:`~seqbook.gpt.GPTConfig`), with
``generate`` (optionally with a :class:`~seqbook.kv_cache.KVCache` per block) and ``from_hf``,
which copies a Hugging Face ``transformers.LlamaForCausalLM``.

What differs from GPT-2's block (:class:`~seqbook.gpt.GPT`), one change at a time:

* **RMSNorm** instead of LayerNorm (Zhang & Sennrich, 2019): each token is divided by its root
  mean square and scaled by a gain; no mean is subtracted and there is no bias.
* **SwiGLU** instead of the GELU MLP (Shazeer, 2020): ``down(silu(gate(x)) * up(x))``, three
  matrices instead of two, a gate that multiplies the hidden units.
* **No biases** in any linear map, and no dropout.
* **RoPE** (:mod:`seqbook.rope`) instead of learned positions added to the tokens: every attention
  layer turns its queries and keys by their positions' angles, so scores see relative offsets.
* **Grouped-query attention** (Ainslie et al., 2023): ``num_heads`` query heads share
  ``num_kv_heads`` key/value heads, a group of ``num_heads // num_kv_heads`` query heads per
  key/value head. The key-value cache holds ``num_kv_heads`` heads, so it is ``num_heads //
  num_kv_heads`` times smaller than multi-head attention's (``num_kv_heads == num_heads``);
  ``num_kv_heads == 1`` is multi-query attention (Shazeer, 2019).
* The output layer is usually a matrix of its own (``tie_weights=False``).

The pre-norm residual stream itself is GPT-2's: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import scaled_dot_product_attention
from .checks import (
    check_count,
    check_features,
    check_flag,
    check_number,
    check_positive_int,
    check_rotary,
    check_same_dtype,
    check_sequence,
    check_targets,
    check_token_ids,
    checked,
)
from .decoding import check_generate, generate_tokens
from .kv_cache import KVCache, check_cache, check_caches
from .rope import apply_rope, rope_angles

__all__ = ["RMSNorm", "SwiGLU", "GroupedQueryAttention", "LlamaBlock", "LlamaConfig", "Llama"]


class RMSNorm(nn.Module):
    """Root-mean-square layer normalisation (Zhang & Sennrich, 2019)::

        RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g

    LayerNorm (eq. (6.8)) without the mean and without the bias: each token is scaled
    to unit root mean square, then every feature by its gain ``g``.

    Computed in ``x``'s dtype. (Hugging Face's ``LlamaRMSNorm`` computes in float32
    whatever the input: the same numbers for float32, more exact for float16 and
    bfloat16, float32-rounded for float64.)

    Shape:
        Input: (..., embed_dim). Output: same shape.
    """

    def __init__(self, embed_dim: int, eps: float = 1e-6):
        super().__init__()
        embed_dim = check_positive_int("embed_dim", embed_dim)
        self.eps = check_number("eps", eps, low=0.0)
        self.weight = nn.Parameter(torch.ones(embed_dim))  # the gain g

    def _check_forward(self, x: torch.Tensor) -> None:
        check_features("x", x, self.weight.shape[0])

    @checked(_check_forward)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return x / rms * self.weight  # (..., D)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class SwiGLU(nn.Module):
    """The gated feed-forward network of Llama (Shazeer, 2020)::

        SwiGLU(x) = W_down (silu(W_gate x) * W_up x),    silu(z) = z * sigmoid(z)

    One hidden layer of width ``d_ff`` is the gate, squashed by SiLU (Swish); it
    multiplies the other, linear one, feature by feature. Three matrices instead of
    the two of :class:`~seqbook.transformer.FeedForward`, so Llama takes
    ``d_ff`` near 8/3 ``embed_dim`` to keep the weights of a 4 ``embed_dim`` MLP.

    Shape:
        Input: (..., embed_dim). Output: same shape.
    """

    def __init__(self, embed_dim: int, d_ff: int, bias: bool = False):
        super().__init__()
        embed_dim = check_positive_int("embed_dim", embed_dim)
        d_ff = check_positive_int("d_ff", d_ff)
        check_flag("bias", bias)
        self.embed_dim = embed_dim
        self.gate_proj = nn.Linear(embed_dim, d_ff, bias=bias)
        self.up_proj = nn.Linear(embed_dim, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, embed_dim, bias=bias)

    def _check_forward(self, x: torch.Tensor) -> None:
        check_features("x", x, self.embed_dim)
        check_same_dtype("x", x, self.gate_proj.weight.dtype)

    @checked(_check_forward)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.gate_proj(x)) * self.up_proj(x)  # (..., d_ff)
        return self.down_proj(h)  # (..., D)


def _check_heads(embed_dim, num_heads, num_kv_heads) -> tuple[int, int, int]:
    embed_dim = check_positive_int("embed_dim", embed_dim)
    num_heads = check_positive_int("num_heads", num_heads)
    num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads)
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim must be divisible by num_heads, got embed_dim={embed_dim}, "
                         f"num_heads={num_heads}")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads must be divisible by num_kv_heads (whole groups of query heads), "
                         f"got num_heads={num_heads}, num_kv_heads={num_kv_heads}")
    if (embed_dim // num_heads) % 2:
        raise ValueError("embed_dim // num_heads must be even for RoPE (dimensions turn in pairs), "
                         f"got {embed_dim} // {num_heads} = {embed_dim // num_heads}")
    return embed_dim, num_heads, num_kv_heads


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with grouped queries (Ainslie et al., 2023) and RoPE.

    ``num_heads`` query heads, ``num_kv_heads`` key and value heads: each key/value
    head serves a group of G = ``num_heads // num_kv_heads`` query heads, whose queries
    are stacked into one block of G * T rows against the group's keys in eq. (5.2)::

        head_h = softmax(R q_h (R k_g)^T / sqrt(D_h) + causal) v_g,    g = h // group

    where ``R`` turns queries and keys by their positions (RoPE, ``apply_rope``). With a
    ``window`` of w, the mask also blocks the keys more than w - 1 positions back (sliding-window
    attention, as Mistral's; :func:`~seqbook.attention.causal_mask`).
    ``num_kv_heads == num_heads`` is multi-head attention; ``num_kv_heads == 1`` is
    multi-query attention (Shazeer, 2019). A ``cache`` keeps the ``num_kv_heads`` keys
    and values, before the repeat: that is the memory grouped queries save.

    Shape:
        x: (B, T, embed_dim); rotary: (cos, sin), each (T, D_h), from rope_angles for
        the positions of x's tokens. Output: (B, T, embed_dim) and the attention
        weights (B, num_heads, T, S), S = T plus the positions kept in the cache.
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int, bias: bool = False,
                 window: int | None = None):
        super().__init__()
        embed_dim, num_heads, num_kv_heads = _check_heads(embed_dim, num_heads, num_kv_heads)
        check_flag("bias", bias)
        self.window = None if window is None else check_positive_int("window", window)
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim = D_h = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, num_heads * D_h, bias=bias)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * D_h, bias=bias)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * D_h, bias=bias)
        self.out_proj = nn.Linear(num_heads * D_h, embed_dim, bias=bias)

    def extra_repr(self) -> str:
        window = "" if self.window is None else f", window={self.window}"
        return f"{self.embed_dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}{window}"

    def _check_forward(self, x, rotary, cache) -> None:
        check_sequence("x", x, self.embed_dim, self.q_proj.weight.dtype)
        check_rotary("rotary", rotary, x.shape[1], self.head_dim)
        if cache is not None:
            check_cache("cache", cache, x.shape[1], self.window)

    @checked(_check_forward)
    def forward(
        self,
        x: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, _ = x.shape
        H, H_kv, D_h = self.num_heads, self.num_kv_heads, self.head_dim
        q = self.q_proj(x).view(B, T, H, D_h).transpose(1, 2)  # (B, H, T, D_h)
        k = self.k_proj(x).view(B, T, H_kv, D_h).transpose(1, 2)  # (B, H_kv, T, D_h)
        v = self.v_proj(x).view(B, T, H_kv, D_h).transpose(1, 2)  # (B, H_kv, T, D_h)
        q, k = apply_rope(q, *rotary), apply_rope(k, *rotary)  # turn by position
        if cache is not None:  # keep the new keys and values, attend over all kept
            k, v = cache.append(k, v)  # (B, H_kv, S, D_h)
        S, G = k.shape[2], H // H_kv
        # The G query heads of a group read the same keys: stack their queries into one
        # block of G * T rows, so that each key and value is read once per group.
        q = q.reshape(B, H_kv, G * T, D_h)  # (B, H_kv, G*T, D_h)
        # Query i sits at position S - T + i and sees the keys up to there,
        mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)
        if self.window is not None:  # or, with a window, the last `window` of them
            mask = mask.triu(S - T - self.window + 1)  # (T, S)
        out, weights = scaled_dot_product_attention(q, k, v, mask.repeat(G, 1))
        out = out.reshape(B, H, T, D_h).transpose(1, 2)  # (B, T, H, D_h)
        out = self.out_proj(out.reshape(B, T, H * D_h))  # concatenate the heads
        return out, weights.reshape(B, H, T, S)  # (B, T, D), (B, H, T, S)


class LlamaBlock(nn.Module):
    """One pre-norm Llama block: the residual stream of GPT-2, Llama's sublayers::

        x = x + GroupedQueryAttention(RMSNorm_1(x))
        x = x + SwiGLU(RMSNorm_2(x))

    Shape:
        x: (B, T, embed_dim); rotary and cache: see :class:`GroupedQueryAttention`.
        Output: (B, T, embed_dim).
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int, d_ff: int,
                 eps: float = 1e-6, window: int | None = None):
        super().__init__()
        self.embed_dim = embed_dim = check_positive_int("embed_dim", embed_dim)
        self.norm1 = RMSNorm(embed_dim, eps)
        self.self_attn = GroupedQueryAttention(embed_dim, num_heads, num_kv_heads, window=window)
        self.norm2 = RMSNorm(embed_dim, eps)
        self.ff = SwiGLU(embed_dim, d_ff)

    def _check_forward(self, x, rotary, cache) -> None:
        self.self_attn._check_forward(x, rotary, cache)

    @checked(_check_forward)
    def forward(
        self,
        x: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        a, _ = self.self_attn(self.norm1(x), rotary, cache)  # (B, T, D)
        x = x + a
        return x + self.ff(self.norm2(x))  # (B, T, D)


@dataclass
class LlamaConfig:
    """The sizes of a :class:`Llama` model (nanoGPT's names, as ``GPTConfig``).

    Sizes are ints >= 1 (NumPy ints are accepted and stored as ``int``). ``n_head``
    must divide ``n_embd`` with an even head width ``n_embd // n_head`` (RoPE turns
    pairs), and ``n_kv_head`` must divide ``n_head``. ``d_ff=None`` becomes 8/3
    ``n_embd`` rounded up to a multiple of 8: the SwiGLU then has about the weights
    of a 4 ``n_embd`` two-matrix MLP.
    """

    vocab_size: int
    block_size: int = 128  # longest context the model sees
    n_layer: int = 4
    n_head: int = 4
    n_kv_head: int = 2  # key/value heads: n_head is multi-head, 1 multi-query attention
    n_embd: int = 128
    d_ff: int | None = None  # default: 8/3 n_embd, rounded up to a multiple of 8
    rms_norm_eps: float = 1e-6
    rope_base: float = 10000.0  # Hugging Face's rope_theta
    tie_weights: bool = False  # share the token embedding with the output layer
    init_std: float = 0.02  # std of the initial weights (HF's initializer_range)
    sliding_window: int | None = None  # attend to the last w positions only (Mistral); None: all

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_kv_head", "n_embd"):
            setattr(self, name, check_positive_int(name, getattr(self, name)))
        if self.d_ff is None:  # 8 * ceil(n_embd / 3) = 8/3 n_embd rounded up to a multiple of 8
            self.d_ff = 8 * -(-self.n_embd // 3)
        self.d_ff = check_positive_int("d_ff", self.d_ff)
        if self.n_embd % self.n_head:
            raise ValueError(
                f"n_embd must be divisible by n_head, got n_embd={self.n_embd}, n_head={self.n_head}"
            )
        if self.n_head % self.n_kv_head:
            raise ValueError(
                "n_head must be divisible by n_kv_head (whole groups of query heads), "
                f"got n_head={self.n_head}, n_kv_head={self.n_kv_head}"
            )
        if (self.n_embd // self.n_head) % 2:
            raise ValueError(
                "n_embd // n_head must be even for RoPE (dimensions turn in pairs), "
                f"got {self.n_embd} // {self.n_head} = {self.n_embd // self.n_head}"
            )
        self.rms_norm_eps = check_number("rms_norm_eps", self.rms_norm_eps, low=0.0)
        self.rope_base = check_number("rope_base", self.rope_base, low=1.0)
        self.tie_weights = check_flag("tie_weights", self.tie_weights)
        self.init_std = check_number("init_std", self.init_std, low=0.0)
        if self.sliding_window is not None:
            self.sliding_window = check_positive_int("sliding_window", self.sliding_window)


class Llama(nn.Module):
    """A decoder-only language model of Llama blocks (Touvron et al., 2023).

    Token embeddings (no position embeddings: RoPE turns queries and keys inside every
    attention layer), ``n_layer`` :class:`LlamaBlock` s, a final :class:`RMSNorm` and a
    linear head over the vocabulary, optionally tied to the token embedding.

    ``forward(idx, caches=...)`` with one :class:`~seqbook.kv_cache.KVCache` per block
    continues a sequence whose earlier tokens are in the caches: ``idx`` holds the new
    tokens only, at positions ``caches[0].length`` onwards.

    Shape:
        idx: (B, T) ids with T <= block_size. ``forward`` returns logits
        (B, T, vocab_size) and, when ``targets`` (B, T) are given (-100 = ignored),
        the mean cross-entropy (else None).
    """

    def __init__(self, config: LlamaConfig):
        super().__init__()
        if not isinstance(config, LlamaConfig):
            raise TypeError(f"config must be a LlamaConfig, got {type(config).__name__}")
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.n_embd)
        self.blocks = nn.ModuleList([
            LlamaBlock(c.n_embd, c.n_head, c.n_kv_head, c.d_ff, c.rms_norm_eps, c.sliding_window)
            for _ in range(c.n_layer)
        ])
        self.norm_f = RMSNorm(c.n_embd, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        for m in self.modules():  # as Hugging Face's Llama: N(0, init_std^2), norms' gains 1
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=c.init_std)
        if c.tie_weights:
            self.lm_head.weight = self.tok_emb.weight

    @classmethod
    def from_hf(cls, model) -> Llama:
        """A copy of a Hugging Face ``transformers.LlamaForCausalLM``: the same function, in our modules.

        A ``MistralForCausalLM`` is the same model with a sliding window: it is copied the same
        way, with its ``sliding_window``. The sizes, ``rms_norm_eps``, ``rope_theta`` (our
        ``rope_base``) and the tying of the embedding to ``lm_head`` are read from ``model``;
        ``block_size`` is its ``max_position_embeddings``. Hugging Face's names map to ours as
        ``q_proj, k_proj, v_proj, o_proj -> self_attn.q_proj, k_proj, v_proj, out_proj``,
        ``mlp.gate_proj, up_proj, down_proj -> ff.gate_proj, up_proj, down_proj``,
        ``input_layernorm, post_attention_layernorm -> norm1, norm2``, ``model.norm -> norm_f``,
        ``model.embed_tokens -> tok_emb``. The copy has ``model``'s dtype, device, train/eval mode
        and the embedding's ``padding_idx`` (whose row gets no gradient; it is not part of the
        config or the state dict).

        The function is the same; the rounding is not quite: Hugging Face computes RMSNorm, the
        rotary angles and (with ``attn_implementation="eager"``) the softmax in float32 whatever
        the model's dtype, this copy in the model's dtype. ``transformers`` is needed only to make
        ``model``.

        Raises:
            TypeError: ``model`` is neither a ``LlamaForCausalLM`` nor a ``MistralForCausalLM``.
            ValueError: ``model`` has something this class lacks: biases, an activation other than
                SiLU, scaled RoPE (``rope_type`` other than ``"default"``), a ``head_dim`` other
                than ``hidden_size // num_attention_heads`` or attention dropout.
        """
        try:
            from transformers import LlamaForCausalLM, MistralForCausalLM
        except ImportError:  # without transformers there is no model to copy
            LlamaForCausalLM = MistralForCausalLM = None
        if LlamaForCausalLM is None or not isinstance(model, (LlamaForCausalLM, MistralForCausalLM)):
            raise TypeError(f"model must be a transformers LlamaForCausalLM or MistralForCausalLM, "
                            f"got {type(model).__name__}")
        hf, m = model.config, model.model
        D, H = hf.hidden_size, hf.num_attention_heads
        rope = dict(getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {})
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        base = rope.get("rope_theta", getattr(hf, "rope_theta", None))
        head_dim = getattr(hf, "head_dim", None) or D // H
        required = {
            "attention_bias": (getattr(hf, "attention_bias", False), False),
            "mlp_bias": (getattr(hf, "mlp_bias", False), False),
            "hidden_act": (hf.hidden_act, "silu"),
            "rope_type": (rope_type, "default"),
            "head_dim": (head_dim, D // H),
            "attention_dropout": (float(getattr(hf, "attention_dropout", 0.0)), 0.0),
        }
        for name, (got, wanted) in required.items():
            if got != wanted:
                raise ValueError(f"model must have config.{name}={wanted!r} (as Llama has), got {got!r}")
        emb = m.embed_tokens.weight  # (V, D)
        config = LlamaConfig(
            vocab_size=emb.shape[0], block_size=hf.max_position_embeddings, n_layer=len(m.layers),
            n_head=H, n_kv_head=hf.num_key_value_heads, n_embd=D, d_ff=m.layers[0].mlp.gate_proj.out_features,
            rms_norm_eps=m.norm.variance_epsilon, rope_base=base,
            tie_weights=model.lm_head.weight is emb, init_std=hf.initializer_range,
            sliding_window=getattr(hf, "sliding_window", None),  # Mistral's; Llama has none
        )
        ours = cls(config).to(emb.device, emb.dtype)  # the dtype first: copying into float32 would round
        ours.tok_emb.padding_idx = m.embed_tokens.padding_idx
        with torch.no_grad():
            ours.tok_emb.weight.copy_(emb)
            for block, layer in zip(ours.blocks, m.layers, strict=True):
                block.norm1.weight.copy_(layer.input_layernorm.weight)
                block.norm2.weight.copy_(layer.post_attention_layernorm.weight)
                a, hf_a = block.self_attn, layer.self_attn
                for ours_name, hf_name in (("q_proj", "q_proj"), ("k_proj", "k_proj"), ("v_proj", "v_proj"),
                                           ("out_proj", "o_proj")):
                    getattr(a, ours_name).weight.copy_(getattr(hf_a, hf_name).weight)
                for name in ("gate_proj", "up_proj", "down_proj"):
                    getattr(block.ff, name).weight.copy_(getattr(layer.mlp, name).weight)
            ours.norm_f.weight.copy_(m.norm.weight)
            if not config.tie_weights:
                ours.lm_head.weight.copy_(model.lm_head.weight)
        return ours.train(model.training)

    def _check_forward(self, idx, targets, caches) -> None:
        check_token_ids("idx", idx, self.config.vocab_size)
        T = idx.shape[1]
        if targets is not None:
            check_targets("targets", targets, idx, self.config.vocab_size)
        if caches is not None:
            check_caches("caches", caches, len(self.blocks), T, self.config.block_size,
                         idx.shape[0], window=self.config.sliding_window)
        elif T > self.config.block_size:
            raise ValueError(f"idx has length {T} > block_size={self.config.block_size}")

    @checked(_check_forward)
    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        caches: Sequence[KVCache] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        c = self.config
        start = caches[0].length if caches else 0  # positions already in the caches
        T = idx.shape[1]
        positions = torch.arange(start, start + T, device=idx.device)
        rotary = rope_angles(positions, c.n_embd // c.n_head, c.rope_base)  # (T, D_h) x 2
        x = self.tok_emb(idx)  # (B, T, D): no position code is added
        for i, block in enumerate(self.blocks):
            x = block(x, rotary, caches[i] if caches else None)  # (B, T, D)
        logits = self.lm_head(self.norm_f(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten().long())
        return logits, loss

    @checked(check_generate, max_new_tokens=check_count, use_cache=check_flag)
    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 0.0,
                 top_k: int | None = None, generator: torch.Generator | None = None,
                 forbid: Sequence[int] = (), use_cache: bool = False) -> torch.Tensor:
        """Extend ``idx`` (B, T) by ``max_new_tokens`` tokens; returns (B, T + max_new_tokens).

        The rule of :meth:`seqbook.gpt.GPT.generate` and :func:`seqbook.decoding.sample_next`, greedy
        by default (``temperature=0``). Each step feeds the last ``block_size`` tokens.
        ``use_cache=True`` keeps every block's ``n_kv_head`` keys and values in a
        :class:`~seqbook.kv_cache.KVCache`: the prompt runs once, then each step runs the one new
        token, with the same tokens as without the cache. Once the sequence outgrows
        ``block_size`` the window slides and the steps run without the cache.

        Shape:
            idx: (B, T) ids with T >= 1 -> (B, T + max_new_tokens)
        """
        return generate_tokens(self, idx, max_new_tokens, temperature, top_k, forbid, generator,
                               use_cache)
