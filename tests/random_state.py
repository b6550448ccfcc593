"""One assertion for the exercise tests: a check leaves the learner's random state as it found it."""

import random

import numpy as np
import torch


def assert_random_state_untouched(call) -> None:
    """Run ``call()`` from a known torch, NumPy and Python random state and assert that all three
    are unchanged afterwards."""
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    call()
    assert torch.equal(torch.get_rng_state(), states[0])
    assert np.array_equal(np.random.get_state()[1], states[1])
    assert random.getstate() == states[2]
