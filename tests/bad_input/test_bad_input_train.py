"""Bad input for every public callable of ``seqbook.train``: a clear error in time, never a hang.

Cases: 102 rejected (each a ValueError/TypeError raised by seqbook that names the argument, run under
a timeout) and 12 legal edge checks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from seqbook import batching, data, train
from seqbook.lm import CharLM
from seqbook.seq2seq import Seq2Seq
from seqbook.train import History, evaluate_vsa, fit, predict_similarities, random_batches, train_vsa
from seqbook.vsa_models import build_classifier
from tests.badinput import (
    BAD_FLAGS,
    BAD_SIZES,
    assert_clear_error,
    assert_clear_error_in_time,
    finishes,
    table,
)

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


LM = CharLM(10, hidden_size=4, embed_dim=3)
LM_X, LM_Y = batching.lm_chunks(torch.arange(40) % 10, 2, 4)
PAIRS = data.copy_dataset(8, 3, 1, seed=0, alphabet="abc")
S2S = Seq2Seq(len(PAIRS.src_vocab), len(PAIRS.tgt_vocab), embed_dim=4, hidden_size=5)
SMALL_S2S = Seq2Seq(len(PAIRS.src_vocab) - 1, len(PAIRS.tgt_vocab), embed_dim=4, hidden_size=5)


class NoParameters(nn.Module):
    def loss(self, src, src_lengths, tgt):
        return torch.zeros(())


ERRORS, case = table()
case("fit-model-None", lambda: run(model=None), "model", "NoneType")
case("fit-model-function", lambda: run(model=lambda x: x), "model", "function")
case("fit-model-no-parameters", lambda: run(model=nn.ReLU()), "model", "no trainable parameters")
case("fit-loss_fn-None", lambda: run(loss_fn=None), "loss_fn", "NoneType")
case("fit-loss_fn-returns-vector", lambda: run(loss_fn=lambda m, b: (m(b[0]) - b[1]) ** 2), "loss_fn",
     "scalar", "(8, 1)")
case("fit-loss_fn-returns-float", lambda: run(loss_fn=lambda m, b: 1.0), "loss_fn", "scalar", "float")
case("fit-loss_fn-no-grad", lambda: run(loss_fn=lambda m, b: torch.tensor(1.0)), "loss_fn", "grad")
case("fit-batches-empty-list", lambda: run(batches=[]), "batches", "at least one batch")
case("fit-batches-empty-generator", lambda: run(batches=iter([])), "batches", "at least one batch")
case("fit-batches-generator-runs-out", lambda: run(batches=one_shot(), steps=3), "batches", "ran out",
     "after 1 steps")
case("fit-batches-None", lambda: run(batches=None), "batches", "NoneType")
case("fit-batches-int", lambda: run(batches=5), "batches", "int")
case("fit-batches-str", lambda: run(batches="xy"), "batches", "str")
case("fit-steps-0", lambda: run(steps=0), "steps", ">= 1", "0")
case("fit-steps-negative", lambda: run(steps=-5), "steps", "-5")
case("fit-steps-float", lambda: run(steps=2.0), "steps", "float")
case("fit-steps-inf", lambda: run(steps=math.inf), "steps", "float")
case("fit-steps-bool", lambda: run(steps=True), "steps", "bool")
case("fit-steps-None", lambda: run(steps=None), "steps", "NoneType")
case("fit-lr-negative", lambda: run(lr=-1e-3), "lr", ">= 0", "-0.001")
case("fit-lr-nan", lambda: run(lr=math.nan), "lr", "nan")
case("fit-lr-inf", lambda: run(lr=math.inf), "lr", "inf")
case("fit-lr-str", lambda: run(lr="0.1"), "lr", "str")
case("fit-optimizer-wrong-type", lambda: run(optimizer="adam"), "optimizer", "str")
case("fit-scheduler-wrong-type", lambda: run(scheduler=5), "scheduler", "int")
case("fit-clip-negative", lambda: run(clip=-1.0), "clip", ">= 0", "-1.0")
case("fit-clip-nan", lambda: run(clip=math.nan), "clip", "nan")
case("fit-clip-str", lambda: run(clip="1"), "clip", "str")
case("fit-device-int", lambda: run(device=3), "device", "int")
case("fit-device-unknown", lambda: run(device="gpu"), "device", "'gpu'")
case("fit-seed-float", lambda: run(seed=1.5), "seed", "float")
case("fit-seed-str", lambda: run(seed="0"), "seed", "str")
case("fit-eval_fn-not-callable", lambda: run(eval_fn=1.0), "eval_fn", "float")
case("fit-eval_fn-returns-str", lambda: run(eval_fn=lambda m: "low"), "eval_fn", "number", "str")
case("fit-eval_every-negative", lambda: run(eval_every=-1), "eval_every", ">= 0", "-1")
case("fit-eval_every-float", lambda: run(eval_every=0.5), "eval_every", "float")
case("fit-desc-int", lambda: run(desc=3), "desc", "int")
case("random_batches-batch_size-0", lambda: random_batches(X, Y, batch_size=0), "batch_size", ">= 1", "0")
case("random_batches-batch_size-negative", lambda: random_batches(X, Y, batch_size=-2), "batch_size", "-2")
case("random_batches-batch_size-float", lambda: random_batches(X, batch_size=2.0), "batch_size", "float")
case("random_batches-batch_size-bool", lambda: random_batches(X, batch_size=True), "batch_size", "bool")
case("random_batches-batch_size-above-N", lambda: random_batches(X, Y, batch_size=9), "batch_size", "<= ",
     "8", "got 9")
case("random_batches-no-tensors", lambda: random_batches(batch_size=2), "tensors", "at least one")
case("random_batches-empty", lambda: random_batches(torch.zeros(0, 3), batch_size=1), "tensors",
     "at least one example", "(0, 3)")
case("random_batches-list", lambda: random_batches([1, 2, 3], batch_size=1), "tensors[0]", "list")
case("random_batches-0d", lambda: random_batches(torch.tensor(3.0), batch_size=1), "tensors[0]", "()")
case("random_batches-dim0-mismatch", lambda: random_batches(X, Y[:5], batch_size=2), "share dim 0", "(8, 3)",
     "(5, 1)")
case("random_batches-generator-wrong", lambda: random_batches(X, batch_size=2, generator=0), "generator",
     "int")


# --- every flag through check_flag: progress of fit and of the recipes built on it (the review's
# example: fit(progress="yes") ran with a bar)
for kind, value, word in BAD_FLAGS:
    case(f"fit-progress-{kind}", lambda v=value: run(progress=v), "progress", word)
case("train_lm-progress-str", lambda: train.train_lm(LM, LM_X, LM_Y, steps=1, device="cpu",
                                                            progress="yes"), "progress", "str")
case("fit_seq2seq-progress-int",
     lambda: train.fit_seq2seq(S2S, PAIRS, steps=1, batch_size=4, device="cpu", progress=1), "progress",
     "int")

# --- train_vsa, predict_similarities, evaluate_vsa: every number checked by seqbook before torch's
# RMSprop or a loop sees it, every argument whether or not it is used, the labels of both splits whole
IMAGES = torch.rand(32, 28, 28, generator=torch.Generator().manual_seed(0))
LABELS = torch.randint(0, 10, (32,), generator=torch.Generator().manual_seed(0))
VSA = build_classifier("resnet", 16, num_layers=1)


def vsa_run(**kwargs):
    args = dict(model=VSA, train=(IMAGES, LABELS), test=(IMAGES, LABELS), steps=2, batch_size=8,
                eval_every=1, device="cpu", progress=False)
    args.update(kwargs)
    return train_vsa(**args)


def labels_with(value, row=-1):
    labels = LABELS.clone()
    labels[row] = value
    return labels


case("train_vsa-eval_size-negative", lambda: vsa_run(eval_size=-1), "eval_size", ">= 1", "-1")
case("train_vsa-eval_size-bool", lambda: vsa_run(eval_size=True), "eval_size", "bool")
case("train_vsa-eval_size-0-unused", lambda: vsa_run(eval_every=0, eval_size=0), "eval_size", "0")
case("train_vsa-lr-negative", lambda: vsa_run(lr=-0.1), "lr", ">= 0", "-0.1")
case("train_vsa-lr-nan", lambda: vsa_run(lr=math.nan), "lr", "nan")
case("train_vsa-lr-str", lambda: vsa_run(lr="0.1"), "lr", "str")
case("train_vsa-alpha-negative", lambda: vsa_run(alpha=-0.5), "alpha", ">= 0", "-0.5")
case("train_vsa-alpha-1", lambda: vsa_run(alpha=1.0), "alpha", "< 1", "1.0")
case("train_vsa-alpha-nan", lambda: vsa_run(alpha=math.nan), "alpha", "nan")
case("train_vsa-eps-0", lambda: vsa_run(eps=0.0), "eps", "> 0", "0.0")
case("train_vsa-eps-str", lambda: vsa_run(eps="1e-8"), "eps", "str")
case("train_vsa-clip-negative", lambda: vsa_run(clip=-1.0), "clip", ">= 0")
case("train_vsa-batch_size-0", lambda: vsa_run(batch_size=0), "batch_size", ">= 1", "0")
case("train_vsa-batch_size-above-N", lambda: vsa_run(batch_size=33), "batch_size", "32", "33")
case("train_vsa-steps-0", lambda: vsa_run(steps=0), "steps", "0")
case("train_vsa-seed-float", lambda: vsa_run(seed=0.5), "seed", "float")
case("train_vsa-device-unknown", lambda: vsa_run(device="gpu"), "device", "'gpu'")
case("train_vsa-eval_every-negative", lambda: vsa_run(eval_every=-2), "eval_every", "-2")
case("train_vsa-desc-int", lambda: vsa_run(desc=3), "desc", "int")
case("train_vsa-model-function", lambda: vsa_run(model=lambda x: x), "model", "function")
case("train_vsa-train-dim0-mismatch", lambda: vsa_run(train=(IMAGES, LABELS[:5])), "train", "(32, 28, 28)",
     "(5,)")
case("train_vsa-train-tensor", lambda: vsa_run(train=IMAGES), "train", "tuple", "Tensor")
case("train_vsa-train-no-labels", lambda: vsa_run(train=(IMAGES,)), "train", "labels", "1")
case("train_vsa-train-list-item", lambda: vsa_run(train=(IMAGES, LABELS.tolist())), "train[1]", "list")
case("train_vsa-train-float-labels", lambda: vsa_run(train=(IMAGES, LABELS.float())), "train[1]", "integer")
case("train_vsa-test-parts", lambda: vsa_run(test=(IMAGES, IMAGES, LABELS)), "test", "2", "3")
case("train_vsa-train-label-too-large", lambda: vsa_run(train=(IMAGES, labels_with(10)), steps=1), "train[1]",
     "[0, 9]", "10")
case("train_vsa-train-label-negative", lambda: vsa_run(train=(IMAGES, labels_with(-1, row=5)), steps=1),
     "train[1]", "-1")
case("train_vsa-test-label-too-large", lambda: vsa_run(test=(IMAGES, labels_with(12))), "test[1]", "12")
case("predict_similarities-model-None", lambda: predict_similarities(None, IMAGES), "model", "NoneType")
case("predict_similarities-no-inputs", lambda: predict_similarities(VSA), "inputs", "at least one")
case("predict_similarities-inputs-list", lambda: predict_similarities(VSA, IMAGES.tolist()), "inputs[0]",
     "list")
case("evaluate_vsa-labels-missing", lambda: evaluate_vsa(VSA, IMAGES), "data", "labels")
case("evaluate_vsa-labels-shape", lambda: evaluate_vsa(VSA, IMAGES, LABELS[:, None]), "data[1]", "(32,)")
case("evaluate_vsa-label-too-large", lambda: evaluate_vsa(VSA, IMAGES, labels_with(10)), "data[1]", "[0, 9]",
     "10")
case("evaluate_vsa-labels-dim0", lambda: evaluate_vsa(VSA, IMAGES, LABELS[:4]), "data", "(4,)")
case("fit_seq2seq-src_vocab-too-large", lambda: train.fit_seq2seq(SMALL_S2S, PAIRS, steps=1, batch_size=4,
                                                                  device="cpu", progress=False),
     "data.src_vocab", str(len(PAIRS.src_vocab)))
case("fit_seq2seq-model-no-parameters", lambda: train.fit_seq2seq(NoParameters(), PAIRS, steps=1), "model",
     "parameters")
case("noam_lr-step-negative", lambda: train.noam_lr(-1, 512, 10), "step", ">= 0", "-1")
for kind, value, word in BAD_SIZES:
    case(f"predict_similarities-batch_size-{kind}",
         lambda v=value: predict_similarities(VSA, IMAGES[:4], batch_size=v), "batch_size", word)
    case(f"evaluate_vsa-batch_size-{kind}",
         lambda v=value: evaluate_vsa(VSA, IMAGES[:4], LABELS[:4], batch_size=v), "batch_size", word)


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly_in_time(fn, words):
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
    # train_vsa: NumPy numbers and bools, alpha = 0, an eval_size above the test set (all of it)
    run_ = vsa_run(progress=np.bool_(False), alpha=0.0, eval_size=np.int64(1000), batch_size=np.int64(8))
    assert run_.eval_steps == [1, 2] and 0.0 <= run_.test_accuracy <= 1.0
    assert predict_similarities(VSA, IMAGES[:3], batch_size=np.int64(2)).shape == (3, 10)
    accuracy, loss = evaluate_vsa(VSA, IMAGES[:3], LABELS[:3].to(torch.int32), batch_size=5)
    assert 0.0 <= accuracy <= 1.0 and 0.0 <= loss <= 2.0
    assert run(progress=np.bool_(False)).step_loss
