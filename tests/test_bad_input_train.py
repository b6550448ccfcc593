"""Bad input for every public callable of ``seqbook.train``: a clear error in time, never a hang.

Cases: 49 rejected (each a ValueError/TypeError raised by seqbook that names the argument, run under
a timeout) and 8 legal edge checks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from seqbook import train
from seqbook.train import History, fit, random_batches
from tests.badinput import assert_clear_error, assert_clear_error_in_time, finishes

X, Y = torch.randn(8, 3), torch.randn(8, 1)
BATCHES = [(X, Y)]


def mse(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).mean()


def run(**kwargs):
    """``fit`` of a tiny linear model on the CPU, with ``kwargs`` overriding the defaults."""
    args = dict(model=nn.Linear(3, 1), loss_fn=mse, batches=BATCHES, steps=2, device="cpu", progress=False)
    args.update(kwargs)
    return fit(**args)


def one_shot():
    yield (X, Y)


REJECTED = {
    # --- fit(model, loss_fn, batches, steps, lr, optimizer, scheduler, clip, device, seed, eval_fn, ...)
    "fit-model-None": (lambda: run(model=None), "model", "NoneType"),
    "fit-model-function": (lambda: run(model=lambda x: x), "model", "function"),
    "fit-model-no-parameters": (lambda: run(model=nn.ReLU()), "model", "no trainable parameters"),
    "fit-loss_fn-None": (lambda: run(loss_fn=None), "loss_fn", "NoneType"),
    "fit-loss_fn-returns-vector": (lambda: run(loss_fn=lambda m, b: (m(b[0]) - b[1]) ** 2), "loss_fn",
                                   "scalar", "(8, 1)"),
    "fit-loss_fn-returns-float": (lambda: run(loss_fn=lambda m, b: 1.0), "loss_fn", "scalar", "float"),
    "fit-loss_fn-no-grad": (lambda: run(loss_fn=lambda m, b: torch.tensor(1.0)), "loss_fn", "grad"),
    "fit-batches-empty-list": (lambda: run(batches=[]), "batches", "at least one batch"),
    "fit-batches-empty-generator": (lambda: run(batches=iter([])), "batches", "at least one batch"),
    "fit-batches-generator-runs-out": (lambda: run(batches=one_shot(), steps=3), "batches", "ran out",
                                       "after 1 steps"),
    "fit-batches-None": (lambda: run(batches=None), "batches", "NoneType"),
    "fit-batches-int": (lambda: run(batches=5), "batches", "int"),
    "fit-batches-str": (lambda: run(batches="xy"), "batches", "str"),
    "fit-steps-0": (lambda: run(steps=0), "steps", ">= 1", "0"),
    "fit-steps-negative": (lambda: run(steps=-5), "steps", "-5"),
    "fit-steps-float": (lambda: run(steps=2.0), "steps", "float"),
    "fit-steps-inf": (lambda: run(steps=math.inf), "steps", "float"),
    "fit-steps-bool": (lambda: run(steps=True), "steps", "bool"),
    "fit-steps-None": (lambda: run(steps=None), "steps", "NoneType"),
    "fit-lr-negative": (lambda: run(lr=-1e-3), "lr", ">= 0", "-0.001"),
    "fit-lr-nan": (lambda: run(lr=math.nan), "lr", "nan"),
    "fit-lr-inf": (lambda: run(lr=math.inf), "lr", "inf"),
    "fit-lr-str": (lambda: run(lr="0.1"), "lr", "str"),
    "fit-optimizer-wrong-type": (lambda: run(optimizer="adam"), "optimizer", "str"),
    "fit-scheduler-wrong-type": (lambda: run(scheduler=5), "scheduler", "int"),
    "fit-clip-negative": (lambda: run(clip=-1.0), "clip", ">= 0", "-1.0"),
    "fit-clip-nan": (lambda: run(clip=math.nan), "clip", "nan"),
    "fit-clip-str": (lambda: run(clip="1"), "clip", "str"),
    "fit-device-int": (lambda: run(device=3), "device", "int"),
    "fit-device-unknown": (lambda: run(device="gpu"), "device", "'gpu'"),
    "fit-seed-float": (lambda: run(seed=1.5), "seed", "float"),
    "fit-seed-str": (lambda: run(seed="0"), "seed", "str"),
    "fit-eval_fn-not-callable": (lambda: run(eval_fn=1.0), "eval_fn", "float"),
    "fit-eval_fn-returns-str": (lambda: run(eval_fn=lambda m: "low"), "eval_fn", "number", "str"),
    "fit-eval_every-negative": (lambda: run(eval_every=-1), "eval_every", ">= 0", "-1"),
    "fit-eval_every-float": (lambda: run(eval_every=0.5), "eval_every", "float"),
    "fit-desc-int": (lambda: run(desc=3), "desc", "int"),
    # --- random_batches(*tensors, batch_size, generator): checked when called, before any batch
    "random_batches-batch_size-0": (lambda: random_batches(X, Y, batch_size=0), "batch_size", ">= 1", "0"),
    "random_batches-batch_size-negative": (lambda: random_batches(X, Y, batch_size=-2), "batch_size", "-2"),
    "random_batches-batch_size-float": (lambda: random_batches(X, batch_size=2.0), "batch_size", "float"),
    "random_batches-batch_size-bool": (lambda: random_batches(X, batch_size=True), "batch_size", "bool"),
    "random_batches-batch_size-above-N": (lambda: random_batches(X, Y, batch_size=9), "batch_size", "<= ",
                                          "8", "got 9"),
    "random_batches-no-tensors": (lambda: random_batches(batch_size=2), "tensors", "at least one"),
    "random_batches-empty": (lambda: random_batches(torch.zeros(0, 3), batch_size=1), "tensors",
                             "at least one example", "(0, 3)"),
    "random_batches-list": (lambda: random_batches([1, 2, 3], batch_size=1), "tensors[0]", "list"),
    "random_batches-0d": (lambda: random_batches(torch.tensor(3.0), batch_size=1), "tensors[0]", "()"),
    "random_batches-dim0-mismatch": (lambda: random_batches(X, Y[:5], batch_size=2), "share dim 0",
                                     "(8, 3)", "(5, 1)"),
    "random_batches-generator-wrong": (lambda: random_batches(X, batch_size=2, generator=0), "generator",
                                       "int"),
}


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_bad_input_gives_a_clear_error_in_time(case):
    fn, *words = REJECTED[case]
    assert_clear_error_in_time(fn, *words, seconds=30)


def test_final_loss_of_an_empty_history():
    assert_clear_error(lambda: History().final_loss, "no training step")


def test_legal_edge_inputs():
    # clip = 0, None and inf all mean "no clipping"; lr = 0 leaves the parameters alone
    for clip in (0, 0.0, None, math.inf):
        assert len(run(clip=clip).grad_norm) == 2
    model = nn.Linear(3, 1)
    before = model.weight.detach().clone()
    run(model=model, lr=0.0, steps=np.int64(3))
    assert torch.equal(model.weight.detach(), before)
    # eval_every=0: one evaluation at the end; a tensor result counts as a number
    h = run(eval_fn=lambda m: torch.tensor(0.25), eval_every=0, steps=3)
    assert h.eval_step == [3] and h.eval_loss == [0.25]
    h = run(eval_fn=lambda m: 1.0, eval_every=np.int64(1), steps=3, seed=None, device=torch.device("cpu"))
    assert h.eval_step == [1, 2, 3]
    # a generator long enough for every step is fine
    assert len(run(batches=iter([(X, Y)] * 3), steps=3).step_loss) == 3
    # random_batches: batch_size = N gives the whole set, permuted, again and again
    stream = random_batches(X, Y, batch_size=np.int64(8), generator=torch.Generator().manual_seed(0))
    (bx, by), _ = finishes(lambda: next(stream))
    assert bx.shape == (8, 3) and by.shape == (8, 1)
    assert sorted(bx[:, 0].tolist()) == sorted(X[:, 0].tolist())
    assert train.History().grad_norm == []
