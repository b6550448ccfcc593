"""Equivalent mutants of chapter 7's exercise solutions (see README.md): each computes the
solution's values on every valid input."""

EQUIVALENT = {
    "ex-ch7-zscore": {
        "centre:1 drop -": "x is (P, d) by the exercise's contract, so dim 1 is dim -1",
        "to_common_norm:1 drop -": "x is (P, d) by the exercise's contract, so dim 1 is dim -1",
        "to_common_norm:1 drop - #2": "x is (P, d), so x.shape[1] is x.shape[-1]",
    },
    "ex-ch7-dense-exp": {
        "dense_exp_sweep:1 swap with the next statement": "the overlaps of state and of its "
        "clone are the same numbers",
        "dense_exp_sweep:5 * -> /": "state[:, i] is +1 or -1, and dividing by +-1 is "
        "multiplying by it, exactly",
        "dense_exp_sweep:6 drop -": "state is (B, N) by the exercise's contract, so the "
        "overlaps are (B, P) and dim 1 is dim -1",
        "dense_exp_sweep:6 drop - #2": "state is (B, N), so the overlaps are (B, P) and dim 1 "
        "is dim -1",
        "dense_exp_sweep:8 * -> /": "new is +1 or -1, and dividing by +-1 is multiplying by "
        "it, exactly",
    },
    "ex-ch7-separation": {
        "separation:4 drop -": "the overlap matrix is (P, P), so dim 1 is dim -1",
        "separation:4 1 -> 0": "the overlap matrix G = X X^T and its diagonal mask are "
        "symmetric, so the maximum over a column is the maximum over the row",
        "separation:4 1 -> 2": "dim -2 of the (P, P) overlap matrix is dim 0, and the matrix "
        "is symmetric: the maximum over a column is the maximum over the row",
    },
    "ex-ch7-cache": {
        "cache_probs:6 drop -": "the scores are (T, T), so dim 1 is dim -1",
        "cache_probs:2 swap with the next statement": "the two index grids t and i are made "
        "independently of each other",
    },
}
