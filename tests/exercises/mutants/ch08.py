"""Equivalent mutants of chapter 8's exercise solutions (see README.md): each computes the
solution's values on every valid input."""

EQUIVALENT = {
    "ex-ch8-bind-invariance": {
        "bind_:1 + -> -": "the remainder modulo 2 is the same for x + 1 and x - 1, which differ "
        "by 2",
    },
    "ex-ch8-unbind": {
        "unbind_:1 + -> -": "the remainder modulo 2 is the same for x + 1 and x - 1, which differ "
        "by 2",
    },
    "ex-ch8-bundle": {
        "bundle_:1 swap with the next statement": "the real and the imaginary parts are computed "
        "from the symbols alone, so their order does not matter",
    },
    "ex-ch8-attention": {
        "attention:2 swap the first two arguments of zk.conj().transpose": "transpose(-1, -2) "
        "and transpose(-2, -1) are the same swap",
    },
    "ex-ch8-order": {
        "add_positions:2 swap the first two arguments of bind": "binding adds the angles, and "
        "addition commutes: bind(codes, rows) is bind(rows, codes), broadcast the same way",
    },
}
