"""Equivalent mutants of chapter 4's exercise solutions (see README.md)."""

EQUIVALENT = {
    "ex-ch4-padding-bug": {
        "bahdanau_attention:7 drop -": "softmax(e, dim=1) is softmax(e, dim=-1): the energies "
                                       "are (B, S) by the exercise's contract",
    },
    "ex-ch4-context-bug": {
        "decoder_step:2 swap with the next statement": "the embedding and the context read "
                                                       "different inputs and neither reads the "
                                                       "other's result",
        "decoder_step:4 drop -": "cat(dim=1) is cat(dim=-1): E y and c_i are (B, ·), two "
                                 "dimensions by the exercise's contract",
        "decoder_step:5 drop -": "cat(dim=1) is cat(dim=-1): s_i, c_i and E y are (B, ·), two "
                                 "dimensions by the exercise's contract",
    },
    "ex-ch4-luong": {
        "luong_attention:4 drop -": "softmax(e, dim=1) is softmax(e, dim=-1): the scores are "
                                    "(B, S) by the exercise's contract",
    },
    "ex-ch4-year": {
        "year_share:5 drop -": "weights[k, 0:4, a:b] is two-dimensional, so sum(1) is sum(-1)",
    },
    "ex-ch4-exposure": {
        "free_running_loss:6 swap with the next statement": "appending the logits and taking "
                                                            "their argmax do not read each "
                                                            "other's result",
        "free_running_loss:7 drop -": "argmax(1) is argmax(-1): a step's logits are (B, V)",
    },
}
