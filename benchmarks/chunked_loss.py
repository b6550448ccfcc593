"""The output layer and the cross-entropy in one pass over slices of the rows: no (N, V) logits.

A language model's last two steps, ``logits = h @ W.T`` and the mean cross-entropy over N rows and
a vocabulary of V, ordinarily write the whole (N, V) matrix of logits to memory, read it back for
the softmax, and write and read its gradient of the same size in the backward pass: for
GPT-2-small at 64 x 1024 tokens, 3.3 billion numbers each way. :class:`ChunkedLinearCrossEntropy`
takes ``chunk`` rows at a time instead and, since the loss is the last thing the model computes,
works out the gradients of ``h`` and ``W`` in the forward pass while the slice's logits are at hand
(as Liger-Kernel's fused linear cross-entropy does); the backward pass only scales them by the
incoming gradient. With L = logsumexp(z) - z_y for each row's logits z = W h, the gradient is
dL/dz = softmax(z) - onehot(y), so

    dL/dh = (softmax(z) - onehot(y)) W / N,     dL/dW = sum over rows of (softmax(z) - onehot(y))^T h / N.

:class:`ChunkedLossGPT` runs :class:`seqbook.gpt.GPT`'s layers and this loss; the GPU throughput
script times it as the variant ``chunked-ce``. Both are benchmark code, not the book's.
"""

from __future__ import annotations

import torch
from torch import nn


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """``mean(cross_entropy(h @ weight.T, targets))``, ``chunk`` rows at a time.

    The products run in ``dtype`` (bfloat16 on a GPU, as autocast would), the softmax and the
    sums in float32. Shape: h (N, D), weight (V, D), targets (N,) -> a scalar.
    """

    @staticmethod
    def forward(ctx, h, weight, targets, chunk: int, dtype: torch.dtype):
        with torch.autocast(h.device.type, enabled=False):
            n = h.shape[0]
            hc, wc = h.to(dtype), weight.to(dtype)
            grad_h = torch.empty_like(hc)
            grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
            loss = torch.zeros((), dtype=torch.float32, device=h.device)
            for start in range(0, n, chunk):
                rows, y = hc[start : start + chunk], targets[start : start + chunk]
                z = (rows @ wc.T).float()  # (n_c, V): this slice's logits only
                lse = torch.logsumexp(z, dim=-1)  # (n_c,)
                loss = loss + (lse - z.gather(1, y[:, None]).squeeze(1)).sum()
                g = torch.exp(z - lse[:, None])  # softmax
                g.scatter_add_(1, y[:, None], -torch.ones_like(lse[:, None]))  # - onehot(y)
                g = (g / n).to(dtype)  # dL/dz of the mean loss, (n_c, V)
                grad_h[start : start + chunk] = g @ wc  # (n_c, D)
                grad_w += (g.T @ rows).float()  # (V, D)
        ctx.save_for_backward(grad_h, grad_w)
        ctx.h_dtype = h.dtype
        return loss / n

    @staticmethod
    def backward(ctx, grad_loss):
        grad_h, grad_w = ctx.saved_tensors
        return (grad_h * grad_loss).to(ctx.h_dtype), grad_w * grad_loss, None, None, None


class ChunkedLossGPT(nn.Module):
    """``gpt``'s forward pass (learned or sinusoidal positions, no cache) with its output layer and
    loss computed by :class:`ChunkedLinearCrossEntropy`; returns ``(None, loss)``."""

    def __init__(self, gpt: nn.Module, chunk: int = 8192, dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.gpt, self.chunk, self.dtype = gpt, chunk, dtype

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):
        g = self.gpt
        x, rotary = g.positions(g.tok_emb(idx))  # (B, T, D)
        x = g.drop(x)
        for block in g.blocks:
            x = block(x, rotary)
        h = g.ln_f(x).flatten(0, 1)  # (B T, D)
        loss = ChunkedLinearCrossEntropy.apply(h, g.lm_head.weight, targets.flatten(),
                                               self.chunk, self.dtype)
        return None, loss
