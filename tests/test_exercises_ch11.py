"""The performance appendix's checkers pass the solutions, name the usual slips, and see starters."""

from __future__ import annotations

import numpy as np

from seqbook.exercises import check

GIB = 2 * 12 * 8 * 16384 * 768 * 4 / 2**30  # the float32 cache of the exercise


def verdict(name, answer):
    result = check(name, answer)
    return result.status, result.message


def test_slopes():
    def exponent(lengths, ms):
        return np.polyfit(np.log(lengths[-3:]), np.log(ms[-3:]), 1)[0]

    def starter(lengths, ms):
        raise NotImplementedError

    assert check("ex-perf-slopes", exponent)
    assert verdict("ex-perf-slopes", starter)[0] == "not attempted"
    status, message = verdict("ex-perf-slopes",
                              lambda n, t: np.polyfit(np.log(n), np.log(t), 1)[0])
    assert status == "fail" and "every length" in message
    status, message = verdict("ex-perf-slopes",
                              lambda n, t: np.polyfit(np.log(t[-3:]), np.log(n[-3:]), 1)[0])
    assert status == "fail" and "log time against log length" in message
    status, message = verdict("ex-perf-slopes", lambda n, t: "fast")
    assert status == "fail" and "must be a number" in message


def test_kv_memory():
    assert check("ex-perf-kv-memory", (GIB, GIB / 8))
    assert verdict("ex-perf-kv-memory", ...)[0] == "not attempted"
    for answer, fragment in [((GIB / 2, GIB / 8), "half"),
                             ((GIB / 12, GIB / 8), "one layer"),
                             ((GIB * 2**30 / 1e9, GIB / 8), "GB"),
                             ((GIB, GIB / 2), "shrink too"),
                             ((GIB, GIB / 4), "grouped-query size is not right"),
                             ((GIB,), "pair")]:
        status, message = verdict("ex-perf-kv-memory", answer)
        assert status == "fail" and fragment in message, (answer, message)
