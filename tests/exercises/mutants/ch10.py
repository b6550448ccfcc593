"""Chapter 10's equivalent mutants: each computes what the solution computes on every valid
input (see README.md)."""

EQUIVALENT = {
    "ex-ch10-decay-mask": {
        "decay_mask_:1 swap with the next statement":
            "T = log_a.shape[-1] and A = log_a.cumsum(-1) read only log_a and neither reads the "
            "other",
        "decay_mask_:2 swap with the next statement":
            "A = log_a.cumsum(-1) and past = torch.ones(T, T).tril() do not read each other",
    },
    "ex-ch10-causal-linear-attention": {
        "causal_linear_attention:2 2 -> 0":
            "S starts as a (d_k, d_v) matrix of zeros instead of (B, H, d_k, d_v): the first "
            "update broadcasts it to the full shape, and zeros plus the outer products are the "
            "same sums",
        "causal_linear_attention:3 2 -> 0":
            "z starts as d_k zeros instead of (B, H, d_k): broadcast by the first update, the "
            "same sums",
        "causal_linear_attention:9 0 -> -1":
            "q_t[..., None, :] @ S has a single row, so index -1 of that axis is index 0",
        "causal_linear_attention:1 swap with the next statement":
            "S = q.new_zeros(...) reads only q's shape, dtype and device, which the feature map "
            "keeps",
        "causal_linear_attention:2 swap with the next statement":
            "the zero S and the zero z are made independently of each other",
    },
    "ex-ch10-chunked": {
        "ssd_chunked:2 2 -> 0":
            "h starts as an (N, P) matrix of zeros instead of (batch, H, N, P): C_i^T h is zero "
            "either way, and the first chunk's update broadcasts it to the full shape",
        "ssd_chunked:7 swap the first two arguments of Bc.transpose":
            "transpose(-1, -2) is transpose(-2, -1)",
        "ssd_chunked:7 drop -":
            "transpose(2, -1) is transpose(-2, -1) for the exercise's 4-D (batch, H, c, N) "
            "tensors",
        "ssd_chunked:10 swap the first two arguments of (Bc * to_end[..., None]).transpose":
            "transpose(-1, -2) is transpose(-2, -1)",
        "ssd_chunked:10 drop - #2":
            "transpose(2, -1) is transpose(-2, -1) for the exercise's 4-D tensors",
        "ssd_chunked:1 swap with the next statement":
            "T = x.shape[2] and the zero state h do not read each other",
        "ssd_chunked:6 swap with the next statement":
            "cum and inside are computed from the chunk's inputs independently of each other",
        "ssd_chunked:8 swap with the next statement":
            "appending the chunk's outputs and computing to_end do not read each other",
    },
    "ex-ch10-ut": {
        "chunk_errors:1 zeros_like -> ones_like":
            "the loop writes row t before any later row reads it and reads only the rows U[:t] "
            "already written, so U's initial values never enter the result",
    },
}
