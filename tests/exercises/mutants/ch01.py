"""Equivalent mutants of chapter 1's exercise solutions (see README.md)."""

EQUIVALENT = {
    "ex-ch1-wordpiece": {
        "wordpiece_encode:4 range's end - 1": "the extra end = start tries the empty piece, '' or "
        "'##', which no vocabulary of the check holds (nor BERT's), so nothing changes",
    },
    "ex-ch1-patch-size": {
        "answer:0 // -> /": "8 / p equals 8 // p for every side p that divides 8 (1, 2, 4, 8, the "
        "sides asked for), and the check takes 64.0 tokens as 64, as it should",
    },
}
