"""Equivalent mutants of the performance appendix's exercise solutions (see README.md)."""

EQUIVALENT = {
    "ex-perf-mfu": {
        "answer:0 312000000000000.0 -> 311999999999999.0": "one FLOP/s off a peak of 3.12e14 moves "
        "the MFU by 3e-15 of itself, far below the 3 significant digits the exercise asks for",
        "answer:0 312000000000000.0 -> 312000000000001.0": "the same, one FLOP/s the other way",
    },
    "ex-perf-ridge": {
        "ceiling:0 swap the first two arguments of min": "min is symmetric: min(a, b) is min(b, a)",
        "ceiling:0 1000000000000.0 -> 999999999999.0": "dividing by 1e12 - 1 instead of 1e12 moves "
        "the ceiling by 1e-12 of itself, far below the 4 significant digits the exercise asks for",
        "ceiling:0 1000000000000.0 -> 1000000000001.0": "the same, one the other way",
    },
    "ex-perf-decode": {
        "fits:0 // -> /": "int() of the quotient 1056.36 is 1056 as its floor division is",
        "rate:0 swap the first two arguments of max": "max is symmetric: max(a, b) is max(b, a)",
        "read:0 2 -> 3": "3N bytes of weights instead of 2N add 0.15 % to the 80 GB a step reads: "
        "the rate, 44,170 tokens/s, still rounds to the 44,200 asked for (3 significant "
        "digits), and the ratio to 69",
    },
    "ex-perf-kv-memory": {
        "gqa_bf16:0 // -> /": "the width 768 of the exercise is a multiple of 4, so 768 / 4 is "
                              "768 // 4",
    },
}
