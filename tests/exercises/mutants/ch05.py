"""Equivalent mutants of chapter 5's exercise solutions (see README.md): each computes the same
values as the solution on every valid input, so no check can refuse it."""

EQUIVALENT = {
    "ex-ch5-local": {
        "local_mask:3 operands of - swapped":
            "|i - j| = |j - i|: the absolute value makes the distance table symmetric",
    },
    "ex-ch5-heads-loop": {
        "heads_loop:10 + -> -":
            "the key bias b adds q_i . b to every score of query i, the same for all keys, and a "
            "softmax does not change when a row of scores is shifted by a constant; -b likewise",
        "heads_loop:10 drop the right operand of +":
            "dropping the key bias removes the same per-row constant q_i . b from the scores: the "
            "softmax, and so the weights and the output, are unchanged for every input",
    },
    "ex-ch5-merge": {
        "merge:6 swap the first two arguments of torch.maximum": "the maximum is symmetric",
        "merge:7 0.0 -> -1.0":
            "the stand-in is used only where m = -inf, that is where m1 = m2 = -inf, and there "
            "exp(-inf - c) = 0 for every finite stand-in c",
        "merge:7 0.0 -> 1.0":
            "the stand-in is used only where m1 = m2 = -inf, and exp(-inf - c) = 0 for every "
            "finite c",
    },
}
