"""Equivalent mutants of the performance appendix's exercise solutions (see README.md)."""

EQUIVALENT = {
    "ex-perf-kv-memory": {
        "gqa_bf16:0 // -> /": "the width 768 of the exercise is a multiple of 4, so 768 / 4 is "
                              "768 // 4",
    },
}
