"""The appendix on several devices: its checkers pass the solutions, name the usual slips, see the
starters, and leave the learner's random state alone."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from seqbook.exercises import check

# --- ex-dist-ring ---------------------------------------------------------------------------------

M = 124_475_904 * 2  # GPT-2-small's gradients in bf16, bytes


def ring_mb(N, per_number=2, phases=2, chunk=True, unit=1e6):
    sent = phases * (N - 1) * (124_475_904 * per_number) / (N if chunk else 1)
    return sent / unit


RING = (ring_mb(8), ring_mb(64))


def verdict(name, *answer):
    result = check(name, *answer)
    return result.status, result.message


def test_ring():
    assert check("ex-dist-ring", RING)
    assert check("ex-dist-ring", [np.float32(RING[0]), RING[1] * (1 + 5e-4)])  # 0.1 % allowed
    assert verdict("ex-dist-ring", ...)[0] == "not attempted"
    for answer, fragment in [
        ((ring_mb(8, phases=1), RING[1]), "one phase"),
        ((RING[0], ring_mb(64, chunk=False)), "whole buffer"),
        ((ring_mb(8, per_number=4), RING[1]), "2 bytes"),
        ((ring_mb(8, unit=2**20), RING[1]), "MiB"),
        ((RING[0], 2 * M / 1e6), "(N - 1) / N"),
        ((RING[0], RING[1] * 1.01), "not what the ring sends"),
        ((RING[0],), "pair"),
        ((RING[0], "big"), "must be a number"),
        ((RING[0], float("nan")), "finite"),
        ((True, RING[1]), "must be a number"),
    ]:
        status, message = verdict("ex-dist-ring", answer)
        assert status == "fail" and fragment in message, (answer, message)


# --- ex-dist-zero ---------------------------------------------------------------------------------

P, N = 1.5e9, 16
ZERO = ((4 * P + 12 * P / N) / 2**30, (2 * P + 14 * P / N) / 2**30, 16 * P / N / 2**30)


def test_zero():
    assert check("ex-dist-zero", ZERO)
    assert check("ex-dist-zero", list(ZERO))
    assert verdict("ex-dist-zero", ...)[0] == "not attempted"
    gb = tuple(v * 2**30 / 1e9 for v in ZERO)
    for answer, fragment in [
        (gb, "GB"),
        (((4 * P + 8 * P / N) / 2**30, *ZERO[1:]), "master copy"),
        ((16 * P / 2**30, *ZERO[1:]), "whole copy"),
        (tuple(reversed(ZERO)), "grow from stage 1 to stage 3"),
        ((ZERO[1], ZERO[1], ZERO[2]), "stage-1 size is not right"),
        ((ZERO[0], ZERO[0] * 0.9, ZERO[2]), "stage-2 size is not right"),
        ((ZERO[0], ZERO[1], ZERO[2] * 2), "stage-3 size is not right"),
        (ZERO[:2], "triple"),
    ]:
        status, message = verdict("ex-dist-zero", answer)
        assert status == "fail" and fragment in message, (answer, message)


# --- ex-dist-sampler-bug --------------------------------------------------------------------------


def buggy(num_windows, batch_size, step, rank, world_size, seed=0):
    generator = torch.Generator().manual_seed(1000 * seed + step)
    share = batch_size // world_size
    return torch.randint(num_windows, (share,), generator=generator)


def fixed(num_windows, batch_size, step, rank, world_size, seed=0):
    generator = torch.Generator().manual_seed(1000 * seed + step)
    batch = torch.randint(num_windows, (batch_size,), generator=generator)
    share = batch_size // world_size
    return batch[rank * share:(rank + 1) * share]


def strided(num_windows, batch_size, step, rank, world_size, seed=0):
    # another right answer: every world_size-th window of the global batch
    generator = torch.Generator().manual_seed(1000 * seed + step)
    batch = torch.randperm(num_windows, generator=generator)[:batch_size]
    return batch[rank::world_size]


def per_rank_seed(num_windows, batch_size, step, rank, world_size, seed=0):
    generator = torch.Generator().manual_seed(1000 * seed + 100 * rank + step)
    return torch.randint(num_windows, (batch_size // world_size,), generator=generator)


def test_sampler():
    assert check("ex-dist-sampler-bug", fixed)
    assert check("ex-dist-sampler-bug", strided)
    status, message = verdict("ex-dist-sampler-bug", buggy)
    assert status == "fail" and "every rank trains on the same windows" in message
    assert "generator" not in message and "slice" not in message  # the symptom, not the fix

    def starter(*args):
        raise NotImplementedError

    assert verdict("ex-dist-sampler-bug", starter)[0] == "not attempted"
    for answer, fragment in [
        (per_rank_seed, "number of processes"),
        (lambda n, b, s, r, w, seed=0: fixed(n, b, s, r, w, seed).tolist(), "tensor of indices"),
        (lambda n, b, s, r, w, seed=0: fixed(n, b, s, r, w, seed).double(), "integer"),
        (lambda n, b, s, r, w, seed=0: fixed(n, b, s, 0, 1, seed), "indices (batch_size"),
        (lambda n, b, s, r, w, seed=0: fixed(n, b, s, r, w, seed) + n, "outside"),
        (lambda n, b, s, r, w, seed=0: torch.randint(n, (b // w,)), "called twice"),
        (lambda n, b, s, r, w, seed=0: fixed(n, b, 1, r, w, seed), "every step draws the same"),
        (lambda n, b, s, r, w, seed=0: 1 / 0, "ZeroDivisionError"),
    ]:
        status, message = verdict("ex-dist-sampler-bug", answer)
        assert status == "fail" and fragment in message, message


# --- ex-dist-accumulate ---------------------------------------------------------------------------


def accumulate_gradients(model, x, y, k):
    for xs, ys in zip(x.chunk(k), y.chunk(k), strict=True):
        (F.cross_entropy(model(xs), ys) / k).backward()


def summed(model, x, y, k):
    for xs, ys in zip(x.chunk(k), y.chunk(k), strict=True):
        F.cross_entropy(model(xs), ys).backward()


def last_only(model, x, y, k):
    for xs, ys in zip(x.chunk(k), y.chunk(k), strict=True):
        model.zero_grad()
        (F.cross_entropy(model(xs), ys) / k).backward()


def whole_batch(model, x, y, k):
    F.cross_entropy(model(x), y).backward()


def sum_reduction(model, x, y, k):
    for xs, ys in zip(x.chunk(k), y.chunk(k), strict=True):
        F.cross_entropy(model(xs), ys, reduction="sum").backward()


def test_accumulate():
    assert check("ex-dist-accumulate", accumulate_gradients)

    def loss_sum_then_backward(model, x, y, k):  # another right answer: one backward of the mean
        pairs = zip(x.chunk(k), y.chunk(k), strict=True)
        sum(F.cross_entropy(model(xs), ys) for xs, ys in pairs).div(k).backward()

    assert check("ex-dist-accumulate", loss_sum_then_backward)

    def starter(model, x, y, k):
        raise NotImplementedError

    assert verdict("ex-dist-accumulate", starter)[0] == "not attempted"
    for answer, fragment in [
        (summed, "k times the whole batch's"),
        (last_only, "only the last micro-batch"),
        (whole_batch, "micro-batches of B / k"),
        (sum_reduction, "differ from the gradient"),
        (lambda model, x, y, k: [model(xs) for xs in x.chunk(k)], "no gradient"),
        (lambda model, x, y, k: x.mul_(2), "changed x or y"),
    ]:
        status, message = verdict("ex-dist-accumulate", answer)
        assert status == "fail" and fragment in message, (answer, message)


# --- every check leaves the learner's random state alone ------------------------------------------


@pytest.mark.parametrize("name, answer", [
    ("ex-dist-ring", RING),
    ("ex-dist-zero", ZERO),
    ("ex-dist-sampler-bug", fixed),
    ("ex-dist-sampler-bug", buggy),
    ("ex-dist-accumulate", accumulate_gradients),
    ("ex-dist-accumulate", summed),
])
def test_the_random_state_is_untouched(name, answer):
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    check(name, answer)
    assert torch.equal(torch.get_rng_state(), states[0])
    assert np.array_equal(np.random.get_state()[1], states[1])
    assert random.getstate() == states[2]
