"""Multi-query associative recall (seqbook.recall.mqar): the layout of a sequence, the
answers and reproducibility (bad input: tests/bad_input/test_bad_input_recall.py)."""

import pytest
import torch

from seqbook.recall import mqar, mqar_updates


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


@pytest.mark.parametrize("n, r, m", [(2, 2, 1), (8, 2, 16), (32, 2, 8), (12, 3, 5), (6, 1, 4)])
def test_updates_ask_for_the_last_value_written(n, r, m):
    keys, values, targets = mqar_updates(n, 6, r, num_queries=m, num_keys=64, num_values=16,
                                         generator=torch.Generator().manual_seed(n))
    for t in (keys, values, targets):
        assert t.shape == (6, n + m) and t.dtype == torch.int64
    assert (values[:, n:] == 16).all() and (targets[:, :n] == -100).all()
    for b in range(6):
        written = keys[b, :n].tolist()
        assert all(written.count(key) == r for key in written)  # every key r times
        last = {}
        for key, value in zip(written, values[b, :n].tolist(), strict=True):
            last[key] = value  # later writes replace earlier ones
        for key, target in zip(keys[b, n:].tolist(), targets[b, n:].tolist(), strict=True):
            assert last[key] == target


def test_updates_change_the_value_of_a_key_often():
    keys, values, targets = mqar_updates(16, 500, generator=torch.Generator().manual_seed(0))
    changed = total = 0
    for b in range(500):
        seen = {}
        for key, value in zip(keys[b, :16].tolist(), values[b, :16].tolist(), strict=True):
            if key in seen:
                changed += seen[key] != value
                total += 1
            seen[key] = value
    assert total == 500 * 8 and abs(changed / total - 15 / 16) < 0.02  # new values, mostly
