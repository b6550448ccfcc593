"""Equivalent mutants of chapter 9's exercise solutions (see README.md): each computes the same
as the solution on every valid input, for the reason given."""

_TWO_D = "the exercise's inputs are 2-D, (B, C), so dim 1 is dim -1"
_ONE_WIDE = "the indexed dimension has size 1 (keepdim or [:, None]), so index -1 is index 0"
_BISECTION = ("the bracket and the number of halvings set the precision of beta, about 1e-7, "
              "far below the 3 significant digits the exercise asks")

EQUIVALENT = {
    "ex-ch9-bigram": {
        "bigram_logits:2 drop the left operand of -":
            "torch.ones(1) broadcasts to every index of index_put_: every pair still adds 1",
        "bigram_logits:1 swap with the next statement":
            "the two statements make two new tensors, neither reading the other",
        "bigram_logits:3 swap with the next statement":
            "adding 1 to every cell before or after counting the pairs gives the same table",
    },
    "ex-ch9-overflow-bug": {
        "cross_entropy_:1 drop -": _TWO_D,
        "cross_entropy_:2 drop -": _TWO_D,
        "cross_entropy_:3 drop -": _TWO_D,
        "cross_entropy_:2 0 -> -1": _ONE_WIDE,
        "cross_entropy_:3 0 -> -1": _ONE_WIDE,
    },
    "ex-ch9-smoothing-bug": {
        "smoothed_loss:3 0 -> 1":
            "the class read at a pad is multiplied by 0 afterwards; class 1 exists as class 0 "
            "does (C >= 2)",
        "smoothed_loss:3 0 -> -1 #2": _ONE_WIDE,
    },
    "ex-ch9-temperature": {
        "fit_temperature:3 drop -": _TWO_D,
        "fit_temperature:4 drop -": _TWO_D,
        "fit_temperature:4 drop - #2": _TWO_D,
        "fit_temperature:4 0 -> -1": _ONE_WIDE,
        "fit_temperature:4 mean -> sum":
            "bisection reads only the sign of the slope, and a sum is N times the mean",
        "fit_temperature:8 < -> <=":
            "the two differ only where the slope is exactly 0, at the minimum itself, and "
            "bisection converges to it either way",
        "fit_temperature:2 swap with the next statement":
            "defining slope and setting the bracket do not touch each other",
        "fit_temperature:5 0.0 -> -1.0":
            "the slope grows with beta on the whole line (the NLL is convex in beta), so the "
            "wider bracket holds the same root; " + _BISECTION,
        "fit_temperature:5 100.0 -> 99.0":
            "a network needing T below 0.0101 would be 99 times under-confident, outside the "
            "solution's range (T above 0.01) but for this sliver; " + _BISECTION,
        "fit_temperature:5 100.0 -> 101.0": "a wider bracket holds the same root; " + _BISECTION,
        "fit_temperature:5 100.0 -> 200.0": "a wider bracket holds the same root; " + _BISECTION,
        "fit_temperature:6 range's end + 1": _BISECTION,
        "fit_temperature:6 range's end - 1": _BISECTION,
        "fit_temperature:6 30 -> 29": _BISECTION,
        "fit_temperature:6 30 -> 31": _BISECTION,
        "fit_temperature:6 30 -> 60": _BISECTION,
    },
    "ex-ch9-focal-weights": {
        "weighted_focal_loss:1 drop -": "the exercise's logits are 2-D, (N, C), so dim 1 is dim -1",
        "weighted_focal_loss:1 drop - #2": "the exercise's logits are 2-D, (N, C), so dim 1 is dim -1",
        "weighted_focal_loss:1 0 -> -1": "gather returns (N, 1): its column 0 is its column -1",
    },
    "ex-ch9-infonce": {
        "info_nce:1 drop -": "the exercise's x and y are 2-D, (N, D), so dim 1 is dim -1",
        "info_nce:1 drop - #2": "the exercise's x and y are 2-D, (N, D), so dim 1 is dim -1",
    },
}
