"""Equivalent mutants of chapter 6's exercise solutions (see README.md): each computes what the
solution computes on every valid input, for the reason given."""

EQUIVALENT = {
    "ex-ch6-dot": {
        "pe_dot:1 drop .double(...)":
            "the same sum in float32, right to float32's precision: the check judges an answer "
            "at its own precision, as it must for a learner who works in float32",
    },
    "ex-ch6-postln": {
        "post_ln_forward:1 False -> True":
            "need_weights=True only returns the attention weights as well; the solution "
            "discards them (a, _ = ...), and the output is computed the same way",
    },
    "ex-ch6-cached-generation": {
        "greedy_with_cache:4 drop - #2":
            "argmax(1) of logits[:, -1], which is always (B, V): dim 1 is the last dim",
    },
    "ex-ch6-sliding": {
        "sliding_perplexity:3 0 -> -1":
            "ids is 1-D (the exercise's contract), so dim -1 is dim 0",
        "sliding_perplexity:8 swap the first two arguments of logits.transpose":
            "transpose(2, 1) is transpose(1, 2)",
        "sliding_perplexity:1 swap with the next statement":
            "model.eval() and reading the parameters' device commute: eval() changes neither",
        "sliding_perplexity:9 swap with the next statement":
            "the two running sums (nll and count) are independent: either may be added first",
    },
    "ex-ch6-streaming-mask": {
        "streaming_mask:1 swap with the next statement":
            "the query and key index grids are built independently: either may come first",
    },
}
