"""Checks of chapter 2's exercises (recurrent neural networks)."""

from __future__ import annotations

import torch
from torch import nn

from .core import Wrong, call, close, exercise, expect


def _model_with_gradients(seed: int, scale: float) -> nn.Module:
    """A small network whose gradients have a known size (scaled by ``scale``)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    x = torch.randn(16, 4, dtype=torch.float64)
    (model(x).square().sum() * scale).backward()
    return model


def _grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


@exercise("ex-ch2-clip", hints=[
    "The global norm is the length of one long vector made of every gradient: the square root of "
    "the sum of all squared entries, over all parameters together, not per parameter.",
    "If that norm exceeds max_norm, every gradient is multiplied by the same factor "
    "max_norm / norm; otherwise nothing changes. Multiply in place (p.grad.mul_) so the "
    "optimiser sees the clipped gradients.",
    "Skip parameters whose .grad is None, and return the norm measured before clipping.",
])
def check_clip(clip_):
    for seed, scale, max_norm in [(0, 100.0, 1.0), (1, 1e-3, 1.0), (2, 50.0, 5.0)]:
        model, ref = _model_with_gradients(seed, scale), _model_with_gradients(seed, scale)
        before = _grads(model).clone()
        norm = call(clip_, model.parameters(), max_norm, what="clip_")
        ref_norm = nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
        after = _grads(model)
        large = before.norm() > max_norm
        expect(norm is not None, "clip_ returns nothing: it must return the norm before clipping")
        try:
            norm = torch.as_tensor(norm, dtype=torch.float64).reshape(())
        except (TypeError, ValueError, RuntimeError) as err:
            raise Wrong(f"clip_ must return the norm as a number or a 0-dim tensor, got "
                        f"{type(norm).__name__}") from err
        expect(close(norm, ref_norm, n=before.numel()),
               "the returned norm is not the global norm of all gradients before clipping")
        if large:
            expect(after.norm() <= max_norm * (1 + 1e-6),
                   "the norm is not capped at max_norm: after clipping, the gradients are still longer")
            cosine = torch.dot(after, before) / (after.norm() * before.norm())
            expect(cosine > 1 - 1e-9, "clipping changed the direction of the gradient: every "
                   "gradient must be scaled by the same factor")
        else:
            expect(torch.equal(after, before), "gradients shorter than max_norm must stay unchanged")
        # PyTorch divides by norm + 1e-6; an answer without that epsilon is right too
        expect(torch.allclose(after, _grads(ref), rtol=1e-5, atol=1e-12),
               "the clipped gradients differ from what clipping by the global norm gives")
