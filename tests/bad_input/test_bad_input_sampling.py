"""Bad input to seqbook.sampling: every rule, ``warp`` and ``sample`` refuse it with the right error
class raised by seqbook, whose message starts with the argument's name ("k must ...").
"""

import pytest
import torch

from seqbook.sampling import min_p, sample, temperature, top_k, top_p, warp
from tests.badinput import INF, NAN, assert_clear_error, table

GOOD = torch.randn(2, 5)
WITH_NAN = torch.tensor([[0.0, NAN]])
PLUS_INF = torch.tensor([[0.0, INF]])
DEAD = torch.tensor([[0.0, 1.0], [-INF, -INF]])  # a row with no token left

TYPE_ERRORS, type_error = table()  # words: the start of the message, "<argument> must"
type_error("top_k-logits-list", lambda: top_k([[1.0, 2.0]], 1), "logits must")
type_error("top_k-logits-int", lambda: top_k(torch.tensor([[1, 2]]), 1), "logits must")
type_error("top_p-logits-complex", lambda: top_p(torch.zeros(2, 3, dtype=torch.complex64), 0.5),
           "logits must")
type_error("top_k-k-float", lambda: top_k(GOOD, 2.0), "k must")
type_error("top_k-k-bool", lambda: top_k(GOOD, True), "k must")
type_error("top_k-k-None", lambda: top_k(GOOD, None), "k must")
type_error("top_p-p-str", lambda: top_p(GOOD, "0.9"), "p must")
type_error("min_p-p-None", lambda: min_p(GOOD, None), "p must")
type_error("temperature-t-str", lambda: temperature(GOOD, "hot"), "t must")
type_error("sample-top_k-float", lambda: sample(GOOD, top_k=1.5), "top_k must")
type_error("sample-generator-int", lambda: sample(GOOD, generator=0), "generator must")

VALUE_ERRORS, value_error = table()  # the same, for a ValueError
value_error("min_p-logits-0-dim", lambda: min_p(torch.tensor(1.0), 0.1), "logits must")
value_error("temperature-logits-empty", lambda: temperature(torch.zeros(2, 0), 1.0), "logits must")
value_error("top_p-logits-nan", lambda: top_p(WITH_NAN, 0.5), "logits must")
value_error("min_p-logits-plus-inf", lambda: min_p(PLUS_INF, 0.5), "logits must")
value_error("top_k-logits-dead-row", lambda: top_k(DEAD, 1), "logits must")
value_error("sample-logits-nan", lambda: sample(WITH_NAN), "logits must")
value_error("top_k-k-0", lambda: top_k(GOOD, 0), "k must")
value_error("top_k-k-negative", lambda: top_k(GOOD, -2), "k must")
value_error("top_p-p-0", lambda: top_p(GOOD, 0.0), "p must")
value_error("top_p-p-above-1", lambda: top_p(GOOD, 1.5), "p must")
value_error("top_p-p-negative", lambda: top_p(GOOD, -0.1), "p must")
value_error("top_p-p-nan", lambda: top_p(GOOD, NAN), "p must")
value_error("min_p-p-negative", lambda: min_p(GOOD, -0.01), "p must")
value_error("min_p-p-above-1", lambda: min_p(GOOD, 1.01), "p must")
value_error("temperature-t-0", lambda: temperature(GOOD, 0.0), "t must", "greedy")
value_error("temperature-t-negative", lambda: temperature(GOOD, -1.0), "t must")
value_error("temperature-t-inf", lambda: temperature(GOOD, INF), "t must")
value_error("temperature-t-nan", lambda: temperature(GOOD, NAN), "t must")
value_error("warp-temperature-0", lambda: warp(GOOD, 0.0), "temperature must")
value_error("warp-top_k-0", lambda: warp(GOOD, top_k=0), "top_k must")
value_error("warp-top_p-0", lambda: warp(GOOD, top_p=0.0), "top_p must")
value_error("warp-min_p-2", lambda: warp(GOOD, min_p=2.0), "min_p must")
value_error("sample-temperature-negative", lambda: sample(GOOD, -0.5), "temperature must")
value_error("sample-temperature-inf", lambda: sample(GOOD, INF), "temperature must")
value_error("sample-top_p-above-1", lambda: sample(GOOD, top_p=1.1), "top_p must")
value_error("sample-min_p-negative", lambda: sample(GOOD, min_p=-1), "min_p must")
value_error("sample-logits-dead-row", lambda: sample(DEAD), "logits must")


@pytest.mark.parametrize(("fn", "words"), TYPE_ERRORS)
def test_wrong_types_are_refused_by_name(fn, words):
    message = assert_clear_error(fn, *words, exc=TypeError)
    assert message.startswith(words[0]), message


@pytest.mark.parametrize(("fn", "words"), VALUE_ERRORS)
def test_wrong_values_are_refused_by_name(fn, words):
    message = assert_clear_error(fn, *words, exc=ValueError)
    assert message.startswith(words[0]), message


def test_zero_temperature_points_to_greedy():
    assert_clear_error(lambda: temperature(GOOD, 0), "greedy", exc=ValueError)
