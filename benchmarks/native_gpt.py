"""A GPT-2 built from PyTorch's native layers only: the floor the fused path is measured against.

The same function as :class:`seqbook.gpt.GPT` with learned positions, biases, GPT-2's tanh GELU
(nanoGPT's ``model.py`` uses the exact ``nn.GELU()``), a final LayerNorm and tied embeddings,
written the way nanoGPT's ``model.py`` writes it: every piece is one of PyTorch's own kernels
(``nn.Embedding``, ``nn.LayerNorm``, ``nn.Linear``, ``F.scaled_dot_product_attention`` with
``is_causal=True``, ``F.gelu(approximate="tanh")``), and the query, key and value projections are
one ``nn.Linear`` of width 3 D, as in nanoGPT and GPT-2.
No dropout (the benchmark trains with none), no checks, no cache: nothing but the computation.
:func:`copy_from_hf` gives it the weights of Hugging Face's ``GPT2LMHeadModel`` (whose names and
layout are GPT-2's), as :meth:`seqbook.gpt.GPT.from_hf` does for seqbook's model, so that the three
models timed side by side compute one function (``benchmarks.gpt_cpu_step`` asserts equal losses
before it times anything).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)  # W_Q, W_K, W_V stacked: one matrix product
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)  # 3 x (B, T, D)
        q, k, v = (t.view(B, T, self.n_head, D // self.n_head).transpose(1, 2)
                   for t in (q, k, v))  # (B, H, T, D_h)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D_h)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))  # (B, T, D)


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, eps: float):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=eps)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd, eps=eps)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.fc_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        h = F.gelu(self.fc(self.ln_2(x)), approximate="tanh")  # (B, T, 4D)
        return x + self.fc_proj(h)


class NativeGPT(nn.Module):
    """GPT-2 of the given sizes from PyTorch's native layers; ``forward`` returns (logits, loss)."""

    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int,
                 eps: float = 1e-5):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, eps) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=eps)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        # GPT-2's initialisation, as nanoGPT's: N(0, 0.02), the projections into the residual
        # stream scaled by 1 / sqrt(2 L), biases zero (PyTorch's defaults give the tied
        # embedding N(0, 1): logits of standard deviation ~ sqrt(D) and a first loss in the
        # hundreds instead of ln V)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                scaled = name.endswith(("attn.proj.weight", "fc_proj.weight"))
                nn.init.normal_(p, std=0.02 / (2 * n_layer) ** 0.5 if scaled else 0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]  # (B, T, D)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


@torch.no_grad()
def copy_from_hf(native: NativeGPT, hf: nn.Module) -> NativeGPT:
    """Give ``native`` the weights of Hugging Face's ``GPT2LMHeadModel`` ``hf``, which keeps each
    linear map as a ``Conv1D`` whose weight is (in, out), the transpose of ``nn.Linear``'s."""
    t = hf.transformer
    native.wte.weight.copy_(t.wte.weight)  # the head is tied to it in both models
    native.wpe.weight.copy_(t.wpe.weight)
    for n, h in zip(native.h, t.h, strict=True):
        n.ln_1.load_state_dict(h.ln_1.state_dict())
        n.ln_2.load_state_dict(h.ln_2.state_dict())
        for lin, conv in ((n.attn.qkv, h.attn.c_attn), (n.attn.proj, h.attn.c_proj),
                          (n.fc, h.mlp.c_fc), (n.fc_proj, h.mlp.c_proj)):
            lin.weight.copy_(conv.weight.T)
            lin.bias.copy_(conv.bias)
    native.ln_f.load_state_dict(t.ln_f.state_dict())
    return native
