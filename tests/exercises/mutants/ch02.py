"""Equivalent mutants of chapter 2's exercise solutions (see README.md)."""

EQUIVALENT = {
    "ex-ch2-clip": {
        "clip_:3 > -> >=": "at norm == max_norm the factor max_norm / norm is exactly 1, so "
        "clipping there changes nothing",
    },
    "ex-ch2-tbptt-bug": {
        "tbptt_pass:2 True -> False": "zip's strict only matters when inputs and targets have "
        "different numbers of chunks; the exercise gives both from lm_chunks, always as many",
    },
    "ex-ch2-bptt": {
        "bptt:2 0 -> -1": "W_hh.shape[-1] is W_hh.shape[0]: W_hh is square (m, m)",
        "bptt:2 0 -> 1": "W_hh.shape[1] is W_hh.shape[0]: W_hh is square (m, m)",
        "bptt:6 0 -> -1": "zeros_like(hs[-1]) is zeros_like(hs[0]): every state has h_0's shape "
        "and dtype",
        "bptt:6 0 -> 1": "zeros_like(hs[1]) is zeros_like(hs[0]): every state has h_0's shape "
        "and dtype",
        "bptt:3 swap with the next statement": "the forward loop (writes hs) and the three "
        "zeros_like buffers (read the weights only) touch different names",
        "bptt:5 swap with the next statement": "the zeros_like buffers and from_later's zeros "
        "touch different names",
        "bptt:11 swap with the next statement": "dW_y += ... and dW_ih += ... update different "
        "buffers from the same inputs",
        "bptt:12 swap with the next statement": "dW_ih += ... and dW_hh += ... update different "
        "buffers from the same inputs",
    },
}
