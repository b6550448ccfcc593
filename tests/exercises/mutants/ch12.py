"""Equivalent mutants of the appendix on several devices (see README.md). The ring's sizes and
tensor parallelism's traffic are asked to within 0.01 % (the exercises say so, and the checks accept
exactly that); the mutants listed for them change the answer by far less."""

_WITHIN = "within the 0.01 % the exercise asks for"
_HOOK = "within the 0.1 % the exercise asks for"
_INSIDE = ("the output layer's backward and then the other buckets' all-reduce, 1.17 ms, end "
           "inside the 1.37 ms backward pass, so the maximum is the backward pass and e does not "
           "depend on t_head here (the answer's first number does)")

EQUIVALENT = {
    "ex-dist-ring": {
        "M:0 124475904 -> 124475903": "one parameter of 124 475 904: 8e-9 relative, " + _WITHIN,
        "M:0 124475904 -> 124475905": "one parameter of 124 475 904: 8e-9 relative, " + _WITHIN,
        "answer:0 1000000.0 -> 999999.0": "1e-6 relative, " + _WITHIN,
        "answer:0 1000000.0 -> 1000001.0": "1e-6 relative, " + _WITHIN,
    },
    "ex-dist-tp": {
        "megabytes:0 1000000.0 -> 999999.0": "1e-6 relative, within the 0.01 % the exercise asks for",
        "megabytes:0 1000000.0 -> 1000001.0": "1e-6 relative, within the 0.01 % the exercise asks for",
    },
    "ex-dist-pipeline": {  # the search for the smallest m, which is 40, anywhere in its range
        "smallest:0 range's end + 1": "the search stops at 40, far below its end",
        "smallest:0 range's end - 1": "the search stops at 40, far below its end",
        "smallest:0 1000 -> 999": "the search stops at 40, far below its end",
        "smallest:0 1000 -> 1001": "the search stops at 40, far below its end",
        "smallest:0 1000 -> 2000": "the search stops at 40, far below its end",
        "smallest:0 1 -> 0": "m = 0 and m = 1 idle far more than 7 %: the search still stops at 40",
        "smallest:0 1 -> 2": "m = 1 idles far more than 7 %: the search still stops at 40",
        "smallest:0 <= -> <": "no m gives exactly 7 % (3/42 and 3/43 lie on either side), so "
                              "'at most' and 'below' find the same m (the target was chosen so)",
    },
    "ex-dist-bf16-hook": {
        "grads:0 124475904 -> 124475903": "one parameter of 124 475 904: 1e-8 relative, " + _HOOK,
        "grads:0 124475904 -> 124475905": "one parameter of 124 475 904: 1e-8 relative, " + _HOOK,
        "last_bucket:0 44147712 -> 44147711": "one gradient of 44 147 712: 2e-8 relative, "
                                              + _HOOK,
        "last_bucket:0 44147712 -> 44147713": "one gradient of 44 147 712: 2e-8 relative, "
                                              + _HOOK,
        "e_bf16:0 swap the first two arguments of max": "the maximum is symmetric",
        "e_bf16:0 + -> - #3": _INSIDE + " (t_head - t_rest is smaller still)",
        "e_bf16:0 drop the right operand of + #3": _INSIDE + " (t_head alone is shorter still)",
        "e_bf16:0 drop the left operand of + #3": _INSIDE + " (t_rest alone is shorter still)",
        "answer:0 1000.0 -> 1001.0": "1e-3 relative, just within the 0.1 % the exercise asks for",
    },
    "ex-dist-accumulate": {
        "accumulate_gradients:1 True -> False":
            "x and y have the same B rows, so x.chunk(k) and y.chunk(k) always have the same "
            "length and zip's strict check never fires",
    },
}
