"""Bad input to seqbook.recall: ``mqar`` and ``mqar_updates`` refuse it with a ValueError/TypeError
raised by seqbook that names the argument.
"""

import pytest

from seqbook.recall import mqar, mqar_updates
from tests.badinput import assert_clear_error, table

ERRORS, case = table()
case("pairs", lambda: mqar(0, 2), "num_pairs", "0")
case("too-many-pairs", lambda: mqar(9, 2, num_keys=8), "num_pairs", "num_keys=8", "9")
case("batch", lambda: mqar(4, 2.5), "batch_size", "2.5")
case("queries", lambda: mqar(4, 2, num_queries=0), "num_queries", "0")
case("values", lambda: mqar(4, 2, num_values=-1), "num_values", "-1")
case("generator", lambda: mqar(4, 2, generator=0), "generator", "int")

UPDATE_ERRORS, update_case = table()
update_case("writes", lambda: mqar_updates(0, 2), "num_writes", "0")
update_case("odd", lambda: mqar_updates(5, 2), "num_writes", "multiple", "5")
update_case("per-key", lambda: mqar_updates(4, 2, 0), "writes_per_key", "0")
update_case("too-many", lambda: mqar_updates(20, 2, num_keys=8), "num_keys=8", "20")
update_case("batch", lambda: mqar_updates(4, 2.5), "batch_size", "2.5")
update_case("generator", lambda: mqar_updates(4, 2, generator=0), "generator", "int")


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)


@pytest.mark.parametrize(("fn", "words"), UPDATE_ERRORS)
def test_bad_input_to_updates_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)
