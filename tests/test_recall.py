"""Multi-query associative recall (seqbook.recall.mqar): the layout of a sequence, the
answers, reproducibility, and clear errors."""

import pytest
import torch

from seqbook.recall import mqar
from tests.badinput import assert_clear_error


@pytest.mark.parametrize("n, m", [(1, 1), (4, 16), (32, 8), (128, 3)])
def test_layout_and_answers(n, m):
    keys, values, targets = mqar(n, 5, num_queries=m, num_keys=128, num_values=16,
                                 generator=torch.Generator().manual_seed(n))
    for t in (keys, values, targets):
        assert t.shape == (5, n + m) and t.dtype == torch.int64
    pair_keys, pair_values = keys[:, :n], values[:, :n]
    assert ((keys >= 0) & (keys < 128)).all()
    assert ((pair_values >= 0) & (pair_values < 16)).all()
    assert (values[:, n:] == 16).all()  # the blank at every query
    assert (targets[:, :n] == -100).all()  # no loss at the pairs
    for b in range(5):
        assert len(set(pair_keys[b].tolist())) == n  # distinct keys
        stored = dict(zip(pair_keys[b].tolist(), pair_values[b].tolist(), strict=True))
        for key, target in zip(keys[b, n:].tolist(), targets[b, n:].tolist(), strict=True):
            assert stored[key] == target  # a query asks a stored key for its value


def test_a_generator_makes_it_reproducible():
    first = mqar(8, 3, generator=torch.Generator().manual_seed(7))
    again = mqar(8, 3, generator=torch.Generator().manual_seed(7))
    other = mqar(8, 3, generator=torch.Generator().manual_seed(8))
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], other[0])


def test_queries_cover_the_pairs_and_the_values_are_balanced():
    keys, _, targets = mqar(4, 2000, num_queries=4, num_values=4,
                            generator=torch.Generator().manual_seed(0))
    position = (keys[:, 4:, None] == keys[:, None, :4]).float().argmax(-1)  # (B, m)
    share = torch.bincount(position.flatten(), minlength=4) / position.numel()
    assert torch.allclose(share, torch.full((4,), 0.25), atol=0.02)
    share = torch.bincount(targets[:, 4:].flatten(), minlength=4) / (2000 * 4)
    assert torch.allclose(share, torch.full((4,), 0.25), atol=0.02)


BAD = {
    "pairs": (lambda: mqar(0, 2), "num_pairs", "0"),
    "too-many-pairs": (lambda: mqar(9, 2, num_keys=8), "num_pairs", "num_keys=8", "9"),
    "batch": (lambda: mqar(4, 2.5), "batch_size", "2.5"),
    "queries": (lambda: mqar(4, 2, num_queries=0), "num_queries", "0"),
    "values": (lambda: mqar(4, 2, num_values=-1), "num_values", "-1"),
    "generator": (lambda: mqar(4, 2, generator=0), "generator", "int"),
}


@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_bad_input_raises_a_clear_error(case):
    fn, *words = case
    assert_clear_error(fn, *words)
