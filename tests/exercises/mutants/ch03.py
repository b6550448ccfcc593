"""Equivalent mutants of chapter 3's exercise solutions (see README.md)."""

EQUIVALENT = {
    "ex-ch3-gate-order": {
        "gru_step:1 drop -": "chunk(3, dim=1) is chunk(3, dim=-1): x @ weight_ih.T is (B, 3H), "
                             "two dimensions by the exercise's contract",
        "gru_step:2 drop -": "chunk(3, dim=1) is chunk(3, dim=-1): h @ weight_hh.T is (B, 3H), "
                             "two dimensions by the exercise's contract",
        "gru_step:3 swap with the next statement": "z and r are computed from different names "
                                                   "and neither reads the other",
    },
    "ex-ch3-elman": {
        "gru_as_elman:2 0 -> -1": "rnn.cells[-1] is rnn.cells[0]: the exercise's RNN has one "
                                  "layer",
        "gru_as_elman:3 0 -> -1": "gru.cells[-1] is gru.cells[0]: the GRU is made with one layer "
                                  "on the line above",
        "gru_as_elman:3 0 -> -1 #2": "rnn.cells[-1] is rnn.cells[0]: the exercise's RNN has one "
                                     "layer",
        "gru_as_elman:5 swap with the next statement": "chunk returns views: the biases taken "
                                                       "before the loop are the same storage, "
                                                       "filled after it either way",
        "gru_as_elman:11 40.0 -> 39.0": "the gates' weights are 0, so r = sigma(39) and z = "
                                        "sigma(-40): within 1.2e-17 of 1 and 0, as with 40, for "
                                        "every input; the states agree to float64's rounding",
        "gru_as_elman:11 40.0 -> 41.0": "r = sigma(41) is within 2e-18 of 1, as sigma(40) is, "
                                        "for every input (the gates' weights are 0)",
        "gru_as_elman:11 40.0 -> 80.0": "r = sigma(80) is 1 in float64, as sigma(40) is, for "
                                        "every input (the gates' weights are 0)",
        "gru_as_elman:12 40.0 -> 39.0": "z = sigma(-39) < 1.2e-17: z h adds less than float64's "
                                        "rounding to the candidate, for every input (the gates' "
                                        "weights are 0)",
        "gru_as_elman:12 40.0 -> 41.0": "z = sigma(-41) < 2e-18, as negligible as sigma(-40), "
                                        "for every input (the gates' weights are 0)",
        "gru_as_elman:12 40.0 -> 80.0": "z = sigma(-80) < 2e-35, as negligible as sigma(-40), "
                                        "for every input (the gates' weights are 0)",
    },
}
