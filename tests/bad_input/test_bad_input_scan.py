"""Bad input to seqbook.scan: the scans and ``MinGRU`` refuse it with a ValueError/TypeError raised
by seqbook that names the argument.
"""

import pytest
import torch

from seqbook.scan import MinGRU, blelloch_scan, linear_recurrence, log_space_scan, parallel_scan
from tests.badinput import assert_clear_error, table

A3, B3 = torch.rand(2, 5, 3), torch.randn(2, 5, 3)

ERRORS, case = table()
case("b-rank-1", lambda: parallel_scan(torch.rand(5), torch.randn(5)), "b", "(5,)")
case("a-shape", lambda: parallel_scan(torch.rand(2, 4, 3), B3), "a", "(2, 5, 3)", "(2, 4, 3)")
case("log_a-shape", lambda: log_space_scan(torch.rand(2, 5, 2), B3), "log_a", "(2, 5, 2)")
case("h0-shape", lambda: linear_recurrence(A3, B3, torch.zeros(2, 4)), "h0", "(2, 3)", "(2, 4)")
case("b-int", lambda: parallel_scan(A3, torch.ones(2, 5, 3, dtype=torch.long)), "b", "int64")
case("dtypes", lambda: parallel_scan(A3.double(), B3), "a, b", "float64", "float32")
case("empty", lambda: parallel_scan(A3[:, :0], B3[:, :0]), "b", "(2, 0, 3)")
case("blelloch-a", lambda: blelloch_scan(torch.rand(2, 4, 3), B3), "a", "(2, 5, 3)", "(2, 4, 3)")
case("blelloch-h0", lambda: blelloch_scan(A3, B3, torch.zeros(2, 4)), "h0", "(2, 3)", "(2, 4)")
case("gru-x-width", lambda: MinGRU(3, 4)(torch.randn(2, 5, 2)), "x", "(B, T, 3)", "(2, 5, 2)")
case("gru-h0-shape", lambda: MinGRU(3, 4)(B3, torch.zeros(2, 4)), "h0", "(1, 2, 4)")
case("gru-dtype", lambda: MinGRU(3, 4)(B3.double()), "x", "float64")
case("gru-size", lambda: MinGRU(0, 4), "input_size", "0")


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)
