import pytest
import torch
from torch import nn

from seqbook.train import fit, random_batches
from seqbook.utils import seed_everything


def _regression_problem(n=256):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
    return x, y


def mse(model, batch):
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


def test_fit_decreases_the_loss_of_a_tiny_model(device):
    x, y = _regression_problem()
    model = nn.Linear(4, 1)
    history = fit(model, mse, random_batches(x, y, batch_size=32), steps=200, lr=0.05,
                  device=device, progress=False, eval_fn=lambda m: mse(m, (x.to(device), y.to(device))),
                  eval_every=50)
    assert history.final_loss < 0.05 * history.step_loss[0]
    assert history.eval_step == [50, 100, 150, 200]
    assert history.eval_loss[-1] < history.eval_loss[0]
    assert next(model.parameters()).device.type == device.type
    assert not model.training  # fit leaves the model in eval mode


def test_fit_clips_gradients():
    x, y = _regression_problem()
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # keep the weights fixed
    history = fit(model, lambda m, b: 1000 * mse(m, b), random_batches(x, y, batch_size=32),
                  steps=3, optimizer=optimizer, clip=1.0, device="cpu", progress=False)
    # the recorded norm is the one before clipping; the applied update used norm <= 1
    assert min(history.grad_norm) > 1.0
    assert all(p.grad.norm() <= 1.0 + 1e-5 for p in model.parameters())


def test_fit_is_reproducible_with_a_seed():
    x, y = _regression_problem()
    runs = []
    for _ in range(2):
        seed_everything(5)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        gen = torch.Generator().manual_seed(1)
        runs.append(fit(model, mse, random_batches(x, y, batch_size=16, generator=gen), steps=20,
                        device="cpu", progress=False, seed=5).step_loss)
    assert runs[0] == runs[1]


def test_fit_cycles_a_finite_loader():
    x, y = _regression_problem(64)
    batches = [(x[:32], y[:32]), (x[32:], y[32:])]
    history = fit(nn.Linear(4, 1), mse, batches, steps=5, device="cpu", progress=False)
    assert len(history.step_loss) == 5


def test_fit_bad_input():
    with pytest.raises(ValueError, match="steps must be an int >= 1"):
        fit(nn.Linear(1, 1), mse, [], steps=0)
    with pytest.raises(ValueError, match="share dim 0"):
        next(random_batches(torch.zeros(3, 1), torch.zeros(4, 1), batch_size=2))


def test_fit_stops_on_a_non_finite_loss():
    x, y = _regression_problem(32)
    with pytest.raises(FloatingPointError, match="loss became nan"):
        fit(nn.Linear(4, 1), lambda m, b: mse(m, b) * float("nan"), [(x, y)], steps=2,
            device="cpu", progress=False)
