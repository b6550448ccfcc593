"""Checks of the appendix on training with several devices (data parallelism, sharding)."""

from __future__ import annotations

import math
import random
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .core import Wrong, call, close, exercise, expect, number_list, time_limit

F64 = torch.float64


def _near(x: float, y: float, rel: float = 1e-3) -> bool:
    return abs(x - y) <= rel * abs(y)


# ---------------------------------------------------------------------------------------------
# The traffic of a ring all-reduce.
# ---------------------------------------------------------------------------------------------

RING = {"parameters": 124_475_904, "bytes": 4, "devices": (8, 64)}  # GPT-2-small, float32 grads
UNPADDED = 124_439_808  # the same model with GPT-2's own vocabulary of 50 257 tokens


@exercise("ex-dist-ring", hints=[
    "The ring splits the buffer into N chunks and runs two phases, a reduce-scatter and an "
    "all-gather; in every step of either phase each device sends one chunk.",
    "Each phase has N - 1 steps, so each device sends 2 (N - 1) chunks of M / N bytes, with M the "
    "bytes of all the gradients (4 per float32 number). Divide by 10**6 for MB.",
])
def check_ring(answer):
    got = number_list(answer, ("the size for 8 GPUs", "the size for 64 GPUs"),
                      "a pair (MB sent by each GPU with 8 GPUs, with 64 GPUs)")
    M = RING["parameters"] * RING["bytes"]
    rights = [2 * (N - 1) / N * M / 1e6 for N in RING["devices"]]
    if all(_near(value, right, 1e-4) for value, right in zip(got, rights[::-1], strict=True)):
        raise Wrong("the two sizes are swapped: the first is for 8 GPUs, the second for 64")
    for value, N, right in zip(got, RING["devices"], rights, strict=True):
        if value != right and any(value == round(right, digits) for digits in (0, -1)):
            raise Wrong(f"the size for {N} GPUs is rounded to whole MB or tens of MB: the check "
                        "compares it to within 0.01 %, so give it with at least one decimal")
        if _near(value, right / 2):
            raise Wrong(f"the size for {N} GPUs is half of what the ring sends: either it counts "
                        "one phase only (the all-gather must still send the summed chunks "
                        "round), or 2 bytes a number (under autocast the gradients that DDP "
                        "all-reduces are float32)")
        megabits = "in megabits: give it in MB, megabytes (10**6 bytes of 8 bits)"
        if _near(value, right * 8) and N != 8:
            raise Wrong(f"the size for {N} GPUs is {megabits}")
        if _near(value, right * N):
            either = "either it is in megabits (MB are bytes), or it" if N == 8 else "it"
            raise Wrong(f"the size for {N} GPUs is {N} times too large: {either} sends the whole "
                        "buffer at every step, where each step of the ring sends one chunk, 1/N "
                        "of the gradients")
        if _near(value, right / 1e3):
            raise Wrong(f"the size for {N} GPUs is in GB: give it in MB (10**6 bytes)")
        if _near(value, 2 * right):
            raise Wrong(f"the size for {N} GPUs is twice too large: it counts what each GPU "
                        "receives as well as what it sends; count only what it sends")
        if _near(value, right * 1e6 / 2**20):
            raise Wrong(f"the size for {N} GPUs is in MiB (2**20 bytes): give it in MB "
                        "(10**6 bytes)")
        if _near(value, 2 * M / 1e6):
            raise Wrong(f"the size for {N} GPUs is the limit for very many GPUs: keep the factor "
                        "(N - 1) / N")
        if _near(value, right * UNPADDED / RING["parameters"], 1e-4):
            raise Wrong(f"the size for {N} GPUs counts GPT-2's own vocabulary of 50 257 tokens: "
                        "the book's model pads it to 50 304 (124 475 904 parameters)")
        if _near(value, right, 1e-3) and not _near(value, right, 1e-4):
            raise Wrong(f"the size for {N} GPUs is close, but not to within 0.01 %: give more "
                        "digits, or recount the bytes")
        expect(_near(value, right, 1e-4), f"the size for {N} GPUs is not what the ring sends "
               "(to within 0.01 %): count the chunks each GPU sends in both phases, and the bytes "
               "of a chunk")


# ---------------------------------------------------------------------------------------------
# The memory of ZeRO's stages.
# ---------------------------------------------------------------------------------------------

ZERO = {"parameters": 1.5e9, "devices": 16}


def _zero_bytes(params: float, N: int, grad: int = 2) -> tuple[float, float, float]:
    """Bytes per GPU of ZeRO stages 1, 2, 3 with AdamW in mixed precision: 2 bytes of bf16
    weights, ``grad`` bytes of gradients (2 in bf16, 4 in float32) and 12 of optimiser states a
    parameter."""
    weights, states = 2 * params, 12 * params
    grads = grad * params
    return (weights + grads + states / N, weights + (grads + states) / N,
            (weights + grads + states) / N)


@exercise("ex-dist-zero", hints=[
    "Count the 16 bytes of a parameter by kind: bf16 weights (2), bf16 gradients (2), and the "
    "optimiser's states, the float32 master copy and Adam's two moments (4 + 4 + 4).",
    "Stage 1 divides the 12 bytes of optimiser states by N, stage 2 also the gradients, stage 3 "
    "all 16; multiply by the parameters and divide by 2**30 for GiB. With float32 gradients a "
    "parameter has 18 bytes, and stage 2 divides the gradients' 4 of them.",
])
def check_zero(answer):
    got = number_list(answer, ("the stage-1 size", "the stage-2 size", "the stage-3 size",
                               "the stage-2 size with float32 gradients"),
                      "a 4-tuple (GiB per GPU with ZeRO stage 1, stage 2, stage 3, and stage 2 "
                      "with float32 gradients)")
    P, N = ZERO["parameters"], ZERO["devices"]
    fp32 = [b / 2**30 for b in _zero_bytes(P, N, grad=4)]  # the three stages, float32 gradients
    right = [b / 2**30 for b in _zero_bytes(P, N)] + [fp32[1]]
    for value, r, stage in zip(got, right, ("stage-1", "stage-2", "stage-3",
                                            "float32-gradient stage-2"), strict=True):
        for factor, unit in ((2**10, "MiB (2**20 bytes)"), (2**30, "bytes"),
                             (2**30 / 1e6, "MB (10**6 bytes)")):
            if _near(value, r * factor):
                raise Wrong(f"the {stage} size is in {unit}: give it in GiB (2**30 bytes)")
        if _near(value, r * 2**30 / 1e9):
            # bytes / 10**9, which is also the GiB of 1.5 * 2**30 parameters
            raise Wrong(f"the {stage} size is either in GB (10**9 bytes) or for "
                        "1.5 * 2**30 parameters: give GiB (2**30 bytes) of 1.5 * 10**9 "
                        "parameters")
    autocast = ((8 * P + 8 * P / N) / 2**30, (4 * P + 12 * P / N) / 2**30, 16 * P / N / 2**30)
    if all(_near(v, a) for v, a in zip(got[:3], autocast, strict=True)):
        raise Wrong("that is autocast's split, float32 weights and gradients (4 + 4 bytes whole "
                    "in stage 1, 4 in stage 2): the exercise asks for ZeRO's, bf16 weights and "
                    "gradients (2 + 2 bytes) beside the float32 master copy and moments")
    if _near(got[0], (4 * P + 8 * P / N) / 2**30):
        raise Wrong("the stage-1 size leaves out the float32 master copy of the weights, which the "
                    "optimiser keeps beside Adam's two moments")
    if any(_near(v, 16 * P / 2**30) for v in got[:3]):
        raise Wrong("one size is a whole copy of the model states (16 bytes a parameter): every "
                    "stage divides something by the number of GPUs")
    if got[:3] == sorted(got[:3]) and got[:3] != right[:3]:
        raise Wrong("the sizes grow from stage 1 to stage 3: each stage shards more, so each "
                    "needs less memory per GPU")
    for value, r, stage, kept in zip(got[:3], right[:3], (1, 2, 3),
                                     ("the weights and gradients stay whole",
                                      "the weights stay whole", "nothing stays whole"),
                                     strict=True):
        if not _near(value, r) and _near(value, r, rel=1e-2):
            raise Wrong(f"the stage-{stage} size is close, but not within 0.1 %: round less (or "
                        "check the sizes)")
        expect(_near(value, r), f"the stage-{stage} size is not right: {kept}, and the rest of the "
               "16 bytes a parameter is divided among the GPUs")
    got_fp32 = got[3]
    if _near(got_fp32, (4 * P + 14 * P / N) / 2**30):
        raise Wrong("the float32-gradient stage-2 size keeps the 4 bytes of gradients whole and "
                    "divides the weights' 2: stage 2 shards the gradients and keeps the bf16 "
                    "weights whole")
    if _near(got_fp32, right[1]):
        raise Wrong("the fourth size is stage 2 with bf16 gradients again: with float32 "
                    "gradients a parameter has 18 bytes, 4 of them gradients")
    if _near(got_fp32, fp32[0]):
        raise Wrong("the fourth size keeps the float32 gradients whole, as stage 1 does: stage 2 "
                    "divides them among the GPUs too")
    if _near(got_fp32, fp32[2]):
        raise Wrong("the fourth size divides all 18 bytes, as stage 3 does: stage 2 keeps the "
                    "bf16 weights whole")
    if not _near(got_fp32, right[3]) and _near(got_fp32, right[3], rel=1e-2):
        raise Wrong("the float32-gradient stage-2 size is close, but not within 0.1 %: round "
                    "less (or check the size)")
    expect(_near(got_fp32, right[3]), "the float32-gradient stage-2 size is not right: the 2 bytes "
           "of bf16 weights stay whole, and the 4 bytes of gradients and 12 of optimiser states "
           "are divided among the GPUs")


# ---------------------------------------------------------------------------------------------
# The traffic of tensor parallelism.
# ---------------------------------------------------------------------------------------------

# GPT-2-small's blocks (12 heads), 4-way tensor parallelism, one micro-batch of 16 x 1024 tokens, bf16
TP = {"layers": 12, "embed_dim": 768, "sequences": 16, "tokens": 1024, "devices": 4, "bytes": 2}


@exercise("ex-dist-tp", hints=[
    "Count the all-reduces of one block in one step: a block has two split layers, the attention "
    "and the feed-forward network, and each has one all-reduce in the forward pass (g) and one "
    "in the backward pass (f). Each carries a whole (B, T, D) tensor.",
    "A ring all-reduce of a buffer of M bytes makes each GPU send 2 (N - 1) / N times M, and here "
    "M = B T D numbers of 2 bytes. Multiply by the 4 all-reduces of a block and by the 12 "
    "blocks; divide by 10**6 for MB.",
])
def check_tensor_parallel(answer):
    count, got = number_list(answer, ("the number of all-reduces", "the MB"),
                             "a pair: (all-reduces per step, MB each GPU sends per step)")
    N, L = TP["devices"], TP["layers"]
    buffer = TP["sequences"] * TP["tokens"] * TP["embed_dim"] * TP["bytes"]  # one (B, T, D) tensor
    ring = 2 * (N - 1) / N
    right_count = 4 * L  # f and g, forward and backward, in each of the two split layers
    right = right_count * ring * buffer / 1e6
    counts = {
        L * 2: "two all-reduces a block where there are four: one forward (g) and one backward "
               "(f) for each of the two split layers, the attention and the feed-forward network",
        L: "one all-reduce a block where there are four (two forward, two backward)",
        L * 8: "eight all-reduces a block: f and g each all-reduce in one pass only (g in the "
               "forward pass, f in the backward pass)",
        L * 6: "six all-reduces a block: recomputing the activations would repeat the forward "
               "ones, but here nothing is recomputed",
        4: "the all-reduces of one block: the model has 12 blocks. (The 12 heads do not divide "
           "them: each all-reduce carries the sum of all the heads' terms.)",
        4 * L * 12: "one all-reduce per head: each all-reduce carries the sum of all the heads' "
                    "terms, one a split layer",
    }
    if count != right_count:
        raise Wrong("the number of all-reduces is not right"
                    + (f": the answer counts {counts[count]}." if count in counts else
                       ": count them in one block, in both passes, then in the 12 blocks."))
    slips = [
        (right / 2, "the MB are half of what each GPU sends. Either they take (N - 1) / N of the "
                    "buffer, one phase of the ring (a ring all-reduce sends 2 (N - 1) / N), or "
                    "they count numbers, not bytes (2 bytes a number in bf16)."),
        (right / 4, "the MB are a quarter of what each GPU sends. They give each all-reduce 1/N of "
                    "the (B, T, D) tensor (each carries the whole tensor: every rank holds its own "
                    "term of the whole output), or take one phase of the ring and count numbers."),
        (right * 2.5, "the MB make the feed-forward network's all-reduces carry its hidden layer, "
                      "(B, T, 4D): they come after W_2, on the (B, T, D) output."),
        (right * 2, "the MB are twice too large. They count 4 bytes a number (the activations and "
                    "their gradients are bf16, 2 bytes), or what each GPU receives as well as what "
                    "it sends, or each GPU sending its whole buffer to each of the other N - 1 GPUs "
                    "(a ring sends 2 (N - 1) / N of it)."),
        (right * 1.5, "the MB give the backward all-reduces float32 gradients, as autocast with "
                      "float32 weights would: the statement's model is in bf16, so both passes "
                      "carry 2 bytes a number."),
        (right / TP["sequences"], "the MB are the traffic of one sequence's activations: the "
                                  "micro-batch has 16 sequences, and every all-reduce carries all "
                                  "of them."),
        (right / L, "the MB are the traffic of one block: the model has 12 blocks."),
        (right / ring, "the MB count each buffer once: a ring all-reduce makes each GPU send "
                       "2 (N - 1) / N times the buffer."),
        (right / (N - 1), "the MB take the ring's factor as 2 / N: it is 2 (N - 1) / N."),
        (right * N / (N - 1), "the MB send twice the buffer, the limit for very many GPUs: keep "
                              "the factor 2 (N - 1) / N."),
        (right * N, "the MB are N times what each GPU sends. Either they add up what all the GPUs "
                    "send (the question asks for each GPU), or they send the whole buffer at "
                    "every step of the ring, where each step sends one chunk, 1/N of it."),
        (right * 1e6 / 2**20, "the MB are in MiB (2**20 bytes): give them in MB (10**6 bytes)."),
        (right * 1e6, "the MB are in bytes: give them in MB (10**6 bytes)."),
        (right / 1e3, "the MB are in GB: give them in MB (10**6 bytes)."),
    ]
    if _near(got, right, rel=1e-4):
        return
    for value, message in slips:
        if _near(got, value, rel=1e-4):
            raise Wrong("the number of all-reduces is right, but " + message)
    if _near(got, right, rel=1e-2):
        raise Wrong("the MB are close, but not within 0.01 %: check B, T and D (all 1024 "
                    "positions of a sequence take part), then round less")
    raise Wrong("the number of all-reduces is right, but the MB are not what each GPU sends: "
                "the bytes of the tensor each one carries, and the share of it that a ring makes "
                "each GPU send")


# ---------------------------------------------------------------------------------------------
# The pipeline's idle time: GPipe's fill and drain.
# ---------------------------------------------------------------------------------------------

# p stages of equal cost, m micro-batches (and the smallest m for the target idle share); a
# stage takes t_f for a micro-batch's forward pass and 2 t_f for its backward pass
PIPE = {"stages": 4, "micro_batches": 8, "backward": 2, "target": 0.07}


def _smallest_m(idle_share) -> int:
    """The smallest number of micro-batches m whose ``idle_share(m)`` is at most the target."""
    return next(n for n in range(1, 10**6) if idle_share(n) <= PIPE["target"])


def _idle_share(m: int) -> float:
    """The share of GPipe's step that each of the p stages idles with m micro-batches."""
    p = PIPE["stages"]
    return (p - 1) / (m + p - 1)


def _pipe_right() -> tuple[float, float, int]:
    p, m, k = PIPE["stages"], PIPE["micro_batches"], PIPE["backward"]
    return (m + p - 1) * (1 + k), _idle_share(m), _smallest_m(_idle_share)


@exercise("ex-dist-pipeline", hints=[
    "Follow the first micro-batch: it reaches the last stage after p - 1 forward passes, one on "
    "each stage before it, and the other micro-batches follow it one behind the other. The "
    "backward passes do the same, from the last stage back to the first.",
    "Count the forward passes' time in steps of t_f and the backward passes' in steps of 2 t_f; "
    "a GPU is busy only while its stage runs the m micro-batches, in both passes. For the "
    "smallest m, solve the idle share <= 0.07 for a whole number.",
])
def check_pipeline(answer):
    got = number_list(answer, ("the step's time", "the idle share", "the smallest m"),
                      "a triple (the step's time in units of t_f with m = 8, the share of it that "
                      "each GPU idles, the smallest m for an idle share of at most 7 %)")
    p, m, k = PIPE["stages"], PIPE["micro_batches"], PIPE["backward"]
    step, idle, smallest = _pipe_right()
    time_slips = [
        (m * (1 + k), "the step's time is the time each GPU is busy, m (t_f + 2 t_f): the "
                      "pipeline also fills and drains, and the last stage starts only after "
                      "p - 1 forward passes of the stages before it"),
        (m + p - 1, "the step's time is either in units of t_f + 2 t_f, a micro-batch's two "
                    "passes on one stage (give it in units of t_f), or it leaves out the backward "
                    "passes, 2 t_f a micro-batch on every stage"),
        ((m + p - 1) * 2, "the step's time counts the backward pass as long as the forward "
                          "pass: it takes 2 t_f"),
        (m * p * (1 + k), "the step's time runs the stages one after the other for each "
                          "micro-batch: a stage passes a micro-batch on and starts the next one"),
        ((m + p) * (1 + k), "the step's time counts p steps of filling: the first micro-batch "
                            "reaches the last stage after p - 1"),
        (m * (1 + k) + (p - 1), "the step's time counts the pipeline's filling at t_f a stage "
                                "but not its draining: the backward passes wait p - 1 times too, "
                                "2 t_f each"),
        (m * (1 + k) + 2 * (p - 1), "the step's time counts the pipeline's filling and draining "
                                    "at t_f a stage: in the backward passes each of the p - 1 "
                                    "waits lasts 2 t_f"),
    ]
    for value, message in time_slips:
        if _near(got[0], value, 1e-6):
            raise Wrong(message)
    expect(_near(got[0], step, 1e-6), "the step's time is not right: follow the first "
           "micro-batch through the stages, then the others behind it, in both passes")
    if _near(got[1], (p - 1) * (1 + k)):
        raise Wrong("the idle share is the idle time in units of t_f: divide it by the step's "
                    "time")
    if _near(got[1], (p - 1) / m):
        raise Wrong("the idle share is (p - 1) / m, the idle time over the busy time (Narayanan "
                    "et al.'s bubble fraction): the question asks for the idle time over the "
                    "step's")
    if abs(got[1] - 100 * idle) <= 0.5:
        raise Wrong("the idle share is a percentage: give it as a share between 0 and 1")
    if _near(got[1], 1 - idle):
        raise Wrong("that is the share of the step that each GPU is busy: the question asks for "
                    "the share it idles")
    if _near(got[1], (p - 1) / p):
        raise Wrong("the idle share is that of a single batch going through the stages, "
                    "(p - 1) / p: the m micro-batches keep the stages busy together")
    # the method is right, the rounding not: to one or two decimals, or cut off at three
    coarse = [round(idle, 1), round(idle, 2), math.floor(idle * 100) / 100,
              math.floor(idle * 1000) / 1000]
    if any(_near(got[1], c) for c in coarse):
        raise Wrong("the idle share is close, but not right to three decimals: round it to the "
                    "nearest, to three decimals, or give it exactly")
    expect(abs(got[1] - idle) <= 5e-4, "the idle share is not right (to three decimals): divide "
           "the time each GPU waits by the step's time")
    expect(float(got[2]).is_integer(), "the smallest m must be a whole number of micro-batches")
    n, target = int(got[2]), f"{PIPE['target']:.0%}".replace("%", " %")
    expect(n >= 1, f"m = {n:.3g}: a step needs at least one micro-batch")
    if n == _smallest_m(lambda i: (p - 1) / i):
        raise Wrong(f"m = {n} keeps (p - 1) / m, the idle time over the busy time, at most "
                    f"{target}: the question asks for the idle share of the step, "
                    "(p - 1) / (m + p - 1)")
    if n > smallest:
        raise Wrong(f"m = {n:.6g} is enough, but a smaller m already keeps the idle share at "
                    f"most {target}")
    expect(n == smallest, f"with m = {n} the idle share is {_idle_share(n):.3f}, more than "
           f"{target}")


# ---------------------------------------------------------------------------------------------
# The all-reduce in bfloat16: what a communication hook buys at 512 GPUs.
# ---------------------------------------------------------------------------------------------

# GPT-2-small, DDP's last bucket (the embeddings and most of the first block: 44 147 712
# gradients, as the chapter's cell and tests/models/test_ddp_buckets.py find), a fixed batch of
# 2**19 tokens on 512 GPUs, an assumed 500 000 tokens/s per GPU, an output layer that takes 0.27
# of the backward pass (the chapter counts its FLOPs), rings across servers at 400 GB/s
HOOK = {"parameters": 124_475_904, "last": 44_147_712, "embedding": 50_304 * 768,
        "tokens": 2**19, "devices": 512, "rate": 500_000, "head": 0.27, "beta": 400e9,
        # the chapter's own numbers, that a learner may take instead of the exercise's: its
        # h (4 V D over the backward FLOPs), the share of the backward pass done when the first
        # bucket is complete, and e counted bucket by bucket with the exercise's numbers
        # (tests/models/test_ddp_buckets.py recounts all three)
        "cell_head": 0.27122, "first_ready": 0.28778, "by_bucket_e": 0.81951}
_COMPUTE = ("; or check the compute: 1024 tokens at 500 000 tokens/s, 2.048 ms, two thirds of it "
            "the backward pass")


_BY_BUCKET_OR_RATE = ("the efficiency is counted bucket by bucket, as the chapter's cell counts "
                      "float32 (the exercise asks for the bound of eq. overlap), or uses the "
                      "chapter's measured rate (the exercise assumes 500 000 tokens/s)")


def _hook_efficiency(bytes_=2, beta=HOOK["beta"], tokens=None, overlap=True, last=True,
                     last_bytes=None, ring=True, rate=HOOK["rate"], last_params=HOOK["last"],
                     head=HOOK["head"], forward=True):
    """e of eq. (overlap) for the exercise's run, with optional slips."""
    N = HOOK["devices"]
    tokens = HOOK["tokens"] // N if tokens is None else tokens
    last_bytes = bytes_ if last_bytes is None else last_bytes
    M_last = last_bytes * last_params
    M = bytes_ * (HOOK["parameters"] - last_params) + M_last  # the last bucket at its own bytes

    def all_reduce(nbytes):
        return (2 * (N - 1) / N if ring else 1) * nbytes / beta

    compute = tokens / rate
    backward = 2 * compute / 3
    if not overlap:
        return compute / (compute + all_reduce(M))
    if not last:  # the last bucket overlapped too
        return compute / (compute / 3 + max(backward, head * backward + all_reduce(M)))
    step = max(backward, head * backward + all_reduce(M - M_last)) + all_reduce(M_last)
    return compute / (step + compute / 3 if forward else step)


def _rounded(got: float, right: float) -> bool:
    """Whether ``got`` is ``right`` rounded to 1-3 decimals or significant digits."""
    digits = [round(right, k) for k in (1, 2, 3)]
    digits += [float(f"{right:.{k}g}") for k in (1, 2, 3)]
    return any(abs(got - d) <= 1e-12 * max(1.0, abs(d)) for d in digits)


def _hook_ms() -> tuple[float, float, float, float]:
    """The exercise's run in ms: one GPU's compute, the output layer's backward, the other
    buckets' all-reduce in bfloat16, and the ring's ms a byte."""
    N, P, L = HOOK["devices"], HOOK["parameters"], HOOK["last"]
    compute = HOOK["tokens"] // N / HOOK["rate"] * 1e3
    per_byte = 2 * (N - 1) / N / HOOK["beta"] * 1e3
    return compute, HOOK["head"] * 2 * compute / 3, per_byte * 2 * (P - L), per_byte


def _hook_time(end_ms, right_e):
    """Why the end of the other buckets' all-reduce ``end_ms`` (not within 0.1 % of the
    right time) is wrong."""
    P, L, E = HOOK["parameters"], HOOK["last"], HOOK["embedding"]
    N, h = HOOK["devices"], HOOK["head"]
    compute, head, rest, per_byte = _hook_ms()
    right_ms = head + rest
    if _rounded(end_ms, right_ms):
        raise Wrong("the time is close, but not within 0.1 %: round less")
    expect(end_ms > 0, "the time must be positive (in ms)")
    for value, message in [
        (right_e, "the pair is swapped: (ms until the other buckets' all-reduce ends, e)"),
        (HOOK["cell_head"] / h * head + rest, "the output layer's share is the exercise's "
                                              "h = 0.27, not the chapter's 27.1 %; or the time "
                                              "takes the ring's factor as 2: it is "
                                              "2 (N - 1) / N"),
        (HOOK["first_ready"] / h * head + rest, "the bound lets the other buckets' all-reduce "
                                                "start when the output layer's backward ends, at "
                                                "h = 0.27 of the backward pass, not when the "
                                                "first bucket is complete"),
        (compute / 3 + right_ms, "that counts from the start of the step: the question counts "
                                 "from the start of the backward pass"),
        (compute / 3 + 2 * compute / 3 + per_byte * 2 * L, "that is the whole step, with the "
                                                          "last bucket: the question asks when "
                                                          "the other buckets' all-reduce ends"),
        (rest, "the other buckets' all-reduce cannot start at once: no gradient is complete "
               "before the output layer's backward, h = 0.27 of the backward pass"),
        (h * compute + rest, "h is a share of the backward pass, two thirds of the compute, "
                             "not of the whole compute"),
        (2 * compute / 3, "that is the end of the backward pass: the question asks when the "
                          "other buckets' all-reduce ends"),
        (right_ms + per_byte * 2 * L, "the time includes the last bucket's all-reduce, which "
                                      "starts only after the backward pass: the other buckets "
                                      "are all but its 44 147 712 gradients"),
        (head + 2 * rest, "the all-reduce time is that of float32 gradients: in bfloat16 every "
                          "bucket carries 2 bytes a gradient"),
        (right_ms / 1e3, "the time is in seconds: give it in ms"),
        (right_ms * 1e3, "the time is in microseconds: give it in ms"),
        (head + per_byte * 2 * (P - E), "the all-reduce time leaves out the embedding alone: "
                                        "DDP's last bucket holds 44 147 712 gradients (the "
                                        "embeddings and most of the first block), and the other "
                                        "buckets hold the rest"),
        (head + per_byte * 2 * L, "that is the last bucket's all-reduce: the question asks for "
                                  "the other buckets', all but the last"),
        (head * HOOK["rate"] / 512_464 + rest, "the output layer's backward uses the chapter's "
                                               "measured rate: the exercise assumes 500 000 "
                                               "tokens/s"),
        (head + rest * 8, "the all-reduce time is at one network card's 50 GB/s: a server's "
                          "eight cards carry the rings together, 400 GB/s (bytes, not bits)"),
        (head + rest * 400 / 450, "the all-reduce time is at NVLink's 450 GB/s, inside one "
                                  "server: 512 GPUs span many servers, where the rings run at "
                                  "400 GB/s"),
        (head + rest * N / (2 * (N - 1)), "the all-reduce time sends the buffer once: the ring "
                                          "makes each GPU send 2 (N - 1) / N times it"),
        (head + rest * N / (N - 1), "the all-reduce time takes the ring's factor as 2: it is "
                                    "2 (N - 1) / N, 0.2 % less at N = 512"),
    ]:
        if _near(end_ms, value):
            raise Wrong(message)
    if _near(end_ms, right_ms, rel=1e-2):
        raise Wrong("the time is close, but not within 0.1 %: round less (or check the sizes)")
    raise Wrong("the time is not right (to within 0.1 %): the output layer's backward, h of the "
                "backward pass, then the ring's bandwidth term, 2 (N - 1) / N times the bytes of "
                "the other buckets in bfloat16, over 400 GB/s")


@exercise("ex-dist-bf16-hook", hints=[
    "In bfloat16 every bucket carries 2 bytes a gradient instead of 4: the other buckets and the "
    "last bucket are both halved. The compute does not change.",
    "One GPU computes 1024 tokens at 500 000 tokens/s; take the ring's bandwidth term at "
    "400 GB/s, and count the step with the bound of the section on overlapping the all-reduce "
    "(t_step >= t_c / 3 + max(...) + t_last), M and M_last in bfloat16. The other "
    "buckets' all-reduce starts when the output layer's backward ends; does it end before the "
    "backward pass?",
])
def check_bf16_hook(answer):
    end_ms, got = number_list(answer, ("the time", "the efficiency"),
                              "a pair (ms until the other buckets' all-reduce ends, the "
                              "efficiency e)")
    _, head_ms, rest_ms, _ = _hook_ms()
    right = _hook_efficiency()
    if not _near(end_ms, head_ms + rest_ms):
        _hook_time(end_ms, right)
    if _near(got, right):
        return
    if _rounded(got, right):  # before the slips: 0.82 is also near the measured rate's e
        raise Wrong("the efficiency is close, but not within 0.1 %: round less")
    if _near(got, 100 * right):
        raise Wrong("the efficiency is a fraction, not a percentage: give 0.5 for 50 %")
    if 0.999 <= got <= 1:  # what overlapping the last bucket, or the whole batch a GPU, gives
        raise Wrong("an efficiency of 1 leaves nothing to the all-reduce: the last bucket cannot "
                    "overlap (the embedding's gradient is complete only at the end of the "
                    "backward pass), and each of the 512 GPUs computes only 1024 tokens")
    slips = [
        (_hook_efficiency(bytes_=4), "the efficiency is that of float32 gradients, the cell's: "
                                     "in bfloat16 every bucket carries half the bytes" + _COMPUTE),
        (_hook_efficiency(last_bytes=4), "the efficiency keeps the last bucket in float32: the "
                                         "hook casts every bucket, the last one too"),
        (_hook_efficiency(last_params=HOOK["embedding"]),
         "the efficiency takes the embedding alone as the last bucket: DDP's last bucket holds "
         "44 147 712 gradients"),
        (_hook_efficiency(overlap=False), "the efficiency is that without overlap: DDP "
                                          "all-reduces the other buckets during the backward "
                                          "pass (eq. overlap)"),
        (HOOK["by_bucket_e"], _BY_BUCKET_OR_RATE),
        (_hook_efficiency(rate=512_464), _BY_BUCKET_OR_RATE),  # 0.02 % apart
        (_hook_efficiency(ring=False), "the efficiency sends each bucket once: the ring makes "
                                       "each GPU send 2 (N - 1) / N times it" + _COMPUTE),
        (_hook_efficiency(last=False), "the efficiency overlaps the last bucket too: it cannot "
                                       "overlap (the embedding's gradient is complete only at "
                                       "the end of the backward pass); or the step leaves out "
                                       "the backward pass after the output layer"),
        (_hook_efficiency(forward=False), "the step leaves out the forward pass: e = t_c / t_step, "
                                          "and the step is the forward pass, the backward pass "
                                          "beside the other buckets' all-reduce, and the last "
                                          "bucket's all-reduce"),
        (_hook_efficiency(bytes_=4, head=0), "the efficiency is that of float32 gradients, and "
                                             "without the output layer's backward before the "
                                             "other buckets: count the step with the overlap bound, "
                                             "every bucket in bfloat16"),
    ]
    for value, message in slips:
        if _near(got, value):
            raise Wrong(message)
    if _near(got, right, rel=1e-2):
        raise Wrong("the efficiency is close, but not within 0.1 %: round less (or check the "
                    "sizes)")
    expect(0 < got <= 1, "an efficiency is a share of the ideal speed-up, between 0 and 1")
    raise Wrong("the efficiency is not right: count the step as the forward pass, the backward "
                "pass beside the output layer's backward and then the other buckets' all-reduce, "
                "and the last bucket's all-reduce after it, every bucket in bfloat16" + _COMPUTE)


# ---------------------------------------------------------------------------------------------
# Find the bug: a sampler that gives every rank the same data.
# ---------------------------------------------------------------------------------------------


def _indices(out, what: str, size: int, num_windows: int) -> torch.Tensor:
    if isinstance(out, np.ndarray):
        out = torch.from_numpy(out.copy())  # a NumPy array of indices means the same
    if not isinstance(out, torch.Tensor):
        raise Wrong(f"{what} must return a tensor of indices, got {type(out).__name__}")
    expect(not out.is_floating_point() and not out.is_complex() and out.dtype != torch.bool,
           f"{what} must return integer indices, got {out.dtype}")
    expect(out.dim() == 1 and out.numel() == size,
           f"{what} must return {size} indices (batch_size // world_size), got shape "
           f"{tuple(out.shape)}")
    expect(bool(((out >= 0) & (out < num_windows)).all()),
           f"{what} returned indices outside [0, num_windows)")
    return out.long()


def _global_random_states():
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def _same_random_states(a, b) -> bool:
    return (torch.equal(a[0], b[0]) and a[1][0] == b[1][0] and np.array_equal(a[1][1], b[1][1])
            and a[1][2:] == b[1][2:] and a[2] == b[2])


def _set_random_states(states) -> None:
    torch.set_rng_state(states[0])
    np.random.set_state(states[1])
    random.setstate(states[2])


@exercise("ex-dist-sampler-bug", hints=[
    "Call the function for rank 0 and rank 1 of 2 processes at the same step and compare what "
    "they return.",
    "Every rank seeds its generator with (seed, step) alone, so every rank draws the same numbers. "
    "That is right for the global batch, which must not depend on the number of processes: draw "
    "it whole, then cut it.",
    "Draw batch_size indices with the generator, then return this rank's contiguous share, "
    "batch[rank * share:(rank + 1) * share].",
])
def check_sampler(rank_batch):
    learners = _global_random_states()
    try:
        # a known global state, which a function that reseeds or draws from it would change
        torch.manual_seed(20240917)
        np.random.seed(20240917)
        random.seed(20240917)
        _check_sampler(rank_batch)
    finally:
        _set_random_states(learners)  # the learner's random state, as it was


_REPLAY = ("rank_batch {}: it seems to replay the "
           "stream from step 0, so that each batch costs more than the one before (a run of a "
           "million steps would spend most of its time drawing batches). Give the generator the "
           "pair itself, default_rng([seed, step]), which starts the stream of any step at once")


def _expect_fresh_stream_per_step(rank_batch) -> None:
    """A :class:`Wrong` if consecutive steps share windows: a stream advanced by the step (or by
    fewer numbers than a batch uses) makes step s + 1 repeat most of step s. Among 10**6 windows,
    two independent batches of 64 share none in 99.6 % of draws."""
    num_windows, batch = 10**6, 64
    draws = [_indices(call(rank_batch, num_windows, batch, step, 0, 1, 3, what="rank_batch"),
                      "rank_batch", batch, num_windows) for step in (5, 6)]
    shared = len(set(draws[0].tolist()) & set(draws[1].tolist()))
    expect(shared <= 4, f"steps 5 and 6 share {shared} of their {batch} windows (among "
           f"{num_windows:,}): their random streams overlap, as when a generator is advanced by "
           "the step rather than by all the numbers a batch uses. Give each (seed, step) a "
           "stream of its own, default_rng([seed, step])")


def _expect_time_flat_in_step(rank_batch, num_windows: int) -> None:
    """A :class:`Wrong` if drawing a batch takes longer the later the step: the answer replays
    the stream, which the checks at steps near 10**9 below would wait hours for."""
    def seconds(step: int) -> float:
        best = math.inf
        for _ in range(3):  # the fastest of three: a pause of the machine is not the answer's
            start = time.perf_counter()
            call(rank_batch, num_windows, 8, step, 0, 1, 3, what="rank_batch")
            best = min(best, time.perf_counter() - start)
        return best

    with time_limit(5.0, _REPLAY.format("had not returned after 5 s of work at step 1,000,000")):
        early, late = seconds(1), seconds(10**6)
    expect(late < max(0.01, 100 * early), _REPLAY.format(
        f"takes {late / early:,.0f} times as long at step 1,000,000 as at step 1"))


def _expect_every_window(rank_batch) -> None:
    """A :class:`Wrong` if some window can never be drawn (an upper bound of num_windows - 1 in
    integers, whose upper bound is excluded): with 8 windows, 40 batches of 8 draw each of them
    (a window is missed with probability below 10**-17; without replacement, every batch)."""
    drawn = set()
    for step in range(40):
        out = call(rank_batch, 8, 8, step, 0, 1, 5, what="rank_batch")
        drawn |= set(_indices(out, "rank_batch", 8, 8).tolist())
    missing = sorted(set(range(8)) - drawn)
    if missing:
        why = {0: " (the draw starts above 0: integers(num_windows, ...) starts at 0)",
               7: " (integers(num_windows, ...) excludes its upper bound already)"}
        raise Wrong(f"with num_windows = 8, window {missing[0]} is never drawn in 40 batches of "
                    f"8: draw every index from 0 to num_windows - 1{why.get(missing[0], '')}")


def _check_sampler(rank_batch):
    num_windows = 1000
    by_seed = {}
    for seed in (3, 8):
        for batch_size in (8, 12):
            singles = []
            for step in (1, 2, 3):
                def draw(rank, world_size, step=step, batch_size=batch_size, seed=seed):
                    before = _global_random_states()
                    out = call(rank_batch, num_windows, batch_size, step, rank, world_size, seed,
                               what="rank_batch")
                    expect(_same_random_states(before, _global_random_states()),
                           "rank_batch changes the global random state (it reseeds or draws from "
                           "the default generator of torch, NumPy or random): every other random "
                           "number of the run would change with it")
                    return _indices(out, "rank_batch", batch_size // world_size, num_windows)

                one = draw(0, 1)
                expect(torch.equal(one, draw(0, 1)),
                       "rank_batch gives different indices when called twice with the same "
                       "arguments: the batch must follow from (seed, step) alone")
                singles.append(one)
                by_seed.setdefault((batch_size, step), []).append(one)
                for world_size in (2, 4):
                    if batch_size % world_size:
                        continue
                    shares = [draw(rank, world_size) for rank in range(world_size)]
                    if all(torch.equal(shares[0], s) for s in shares[1:]):
                        # the starter's symptom, not its cause (the exercise asks for that)
                        raise Wrong(f"with {world_size} processes, the ranks together do not "
                                    "train on the batch that one process draws for the same "
                                    "step")
                    together = torch.cat(shares).sort().values
                    repeats = [len(t) - len(set(t.tolist())) for t in (together, one)]
                    drawn_from_one = set(together.tolist()) <= set(one.tolist())
                    expect(not drawn_from_one or repeats[0] <= repeats[1],  # a window twice
                           f"with {world_size} processes, the ranks' shares overlap: some windows "
                           "are trained on by two ranks and others by none. Cut the batch into "
                           "shares that do not overlap")
                    expect(torch.equal(together, one.sort().values),
                           f"the {world_size} ranks together do not train on the batch that one "
                           "process draws for the same step: the run would change with the number "
                           "of processes")
            expect(not all(torch.equal(singles[0], s) for s in singles[1:]),
                   "every step draws the same batch: the windows must change from step to step")
    expect(not all(torch.equal(*pair) for pair in by_seed.values()),
           "seeds 3 and 8 give the same windows at every step: runs started with different seeds "
           "would train on the same data in the same order (is the seed left out, or shifted "
           "above the low 32 bits that torch's generators keep?)")
    _expect_fresh_stream_per_step(rank_batch)
    _expect_time_flat_in_step(rank_batch, num_windows)
    _expect_every_window(rank_batch)
    # (seed, step) pairs that one number made of the two merges: seed + step, seed ^ step or
    # seed * step for the first; M * seed + step and M * step + seed, for the usual multipliers
    # M, for the others (all below 2**32: NumPy's SeedSequence splits a larger int into 32-bit
    # words and pads fewer than four with zeros, so default_rng([2**32 + 1, 0]) is
    # default_rng([1, 1]))
    multipliers = (10, 100, 1000, 10**4, 10**5, 10**6, 10**7, 10**8, 10**9, 10**9 + 7, 2**8,
                   2**16, 2**20, 2**31, 1009, 7919, 10007, 12345, 31337, 99991, 1_000_003)
    pairs = [((1, 2), (2, 1)), ((0, 2), (1, 1)), ((1, 11), (11, 1))]  # the last: joined as text
    pairs += [pair for M in multipliers for pair in (((0, M + 1), (1, 1)), ((M + 1, 0), (1, 1)))]
    for (seed_a, step_a), (seed_b, step_b) in pairs:
        with time_limit(5.0, _REPLAY.format(
                f"had not returned after 5 s of work at step {max(step_a, step_b):,}")):
            a, b = (_indices(call(rank_batch, num_windows, 8, step, 0, 1, seed,
                                  what="rank_batch"), "rank_batch", 8, num_windows)
                    for seed, step in ((seed_a, step_a), (seed_b, step_b)))
        if torch.equal(a, b):
            raise Wrong(f"seed {seed_a} at step {step_a} draws the same windows as seed {seed_b} "
                        f"at step {step_b}: one number made of the two makes distinct pairs "
                        "collide. Give the generator the pair itself, default_rng([seed, step])")
    # any other multiplier up to 2**14: seed 1 at step 1 against seed 0 at step M + 1 and seed
    # M + 1 at step 0, the collisions of M * seed + step and M * step + seed
    def windows(seed: int, step: int) -> torch.Tensor:
        return _indices(call(rank_batch, num_windows, 8, step, 0, 1, seed, what="rank_batch"),
                        "rank_batch", 8, num_windows)

    first = windows(1, 1)
    # the same seed, far apart: a step cut to fewer bits (step % 1000, step & 0xFFFF) repeats
    for k in (1000, 1024, 4096, 10**4, 2**16, 10**5, 10**6, 2**24):
        with time_limit(5.0, _REPLAY.format(f"had not returned after 5 s of work at step {1 + k:,}")):
            again = windows(1, 1 + k)
        if torch.equal(again, first):
            raise Wrong(f"seed 1 draws the same windows at step 1 and at step {1 + k:,}: the "
                        f"batches repeat (is the step cut, as in step % {k}?). Give the generator "
                        "the whole pair, default_rng([seed, step])")
    with time_limit(20.0, _REPLAY.format("had not returned after 20 s of work up to step 16,385")):
        for k in range(3, 2**14 + 2):
            for seed, step in ((0, k), (k, 0)):
                if torch.equal(windows(seed, step), first):
                    raise Wrong(f"seed 1 at step 1 draws the same windows as seed {seed} at step "
                                f"{step}: one number made of the two makes distinct pairs "
                                "collide. Give the generator the pair itself, "
                                "default_rng([seed, step])")
    # torch's generators keep the low 32 bits of a seed: seeds 1 and 1 + 2**32 collide at any
    # step for every M * seed + step given to torch, whatever M is (larger M than the search above)
    # (the exercise promises seeds below 2**32: an answer that refuses a larger one is not wrong)
    with time_limit(5.0, _REPLAY.format("had not returned after 5 s of work at step 5")):
        try:
            a, b = (_indices(call(rank_batch, num_windows, 8, 5, 0, 1, seed, what="rank_batch"),
                             "rank_batch", 8, num_windows) for seed in (1, 1 + 2**32))
        except Wrong:
            a = b = None
    if a is not None and torch.equal(a, b):
        raise Wrong("seeds 1 and 1 + 2**32 draw the same windows at step 5: torch's generator "
                    "keeps only the low 32 bits of a seed, so a number made of seed and step "
                    "collides. Give the generator the pair itself, default_rng([seed, step])")
    _expect_seeds_that_do_not_collide(windows, first)


class _SeedRecorder:
    """While in use, writes down the seeds that code gives ``np.random.default_rng`` and the
    ``manual_seed`` of a ``torch.Generator`` (as ``("numpy" | "torch", seed)``), by replacing the
    two names in their modules; code that imported them under other names is not seen."""

    def __enter__(self) -> list:
        self.seeds, self.saved = [], (np.random.default_rng, torch.Generator)
        seeds, default_rng, generator = self.seeds, *self.saved

        def recording_default_rng(seed=None, *args, **kwargs):
            entropy = seed.entropy if isinstance(seed, np.random.SeedSequence) else seed
            seeds.append(("numpy", entropy))
            return default_rng(seed, *args, **kwargs)

        class RecordingGenerator(generator):
            def manual_seed(self, seed):
                seeds.append(("torch", seed))
                return super().manual_seed(seed)

        np.random.default_rng, torch.Generator = recording_default_rng, RecordingGenerator
        return self.seeds

    def __exit__(self, *exc) -> None:
        np.random.default_rng, torch.Generator = self.saved


def _expect_seeds_that_do_not_collide(windows, first: torch.Tensor) -> None:
    """A :class:`Wrong` for one integer made of seed and step, by any multiplier (the fixed list
    above covers the usual ones): read the integers the answer seeds its generator with at (0, 0),
    (1, 0) and (0, 1); if they grow by A with the seed and by B with the step, the pair (0, 1 + A /
    B) or (1 + B / A, 0) is given the integer of (1, 1), and draws its windows (checked, below
    2**32). A torch generator keeps a seed's low 32 bits, so its seeds are read modulo 2**32 (a
    hash of the pair cut to 32 bits collides no more than a 32-bit hash does, and passes)."""
    given = {}
    for seed, step in ((0, 0), (1, 0), (0, 1)):
        with _SeedRecorder() as seeds:
            windows(seed, step)
        if len(seeds) != 1 or not isinstance(seeds[0][1], (int, np.integer)):
            return  # not one integer: the pair itself, or a mix this check does not read
        kind, value = seeds[0]
        given[seed, step] = int(value) % 2**32 if kind == "torch" else int(value)
    by_seed, by_step = given[1, 0] - given[0, 0], given[0, 1] - given[0, 0]
    pairs = []
    if by_seed > 0 and by_step > 0 and by_seed % by_step == 0:
        pairs.append((0, 1 + by_seed // by_step))
    if by_seed > 0 and by_step > 0 and by_step % by_seed == 0:
        pairs.append((1 + by_step // by_seed, 0))
    for seed, step in pairs:
        if seed < 2**32 and step < 2**32 and torch.equal(windows(seed, step), first):
            raise Wrong(f"seed 1 at step 1 draws the same windows as seed {seed} at step "
                        f"{step}: one number made of the two makes distinct pairs collide. Give "
                        "the generator the pair itself, default_rng([seed, step])")


# ---------------------------------------------------------------------------------------------
# Gradient accumulation.
# ---------------------------------------------------------------------------------------------


def _accumulation_case(batch: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):  # nn.Linear's own initialisation: not the learner's RNG
        model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).to(F64)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=F64))
    x = torch.randn(batch, 5, generator=g, dtype=F64)
    y = torch.randint(3, (batch,), generator=g)
    return model, x, y


def _grads(model) -> list[torch.Tensor | None]:
    return [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]


@exercise("ex-dist-accumulate", hints=[
    "The loss of the whole batch is the mean over B examples; the loss of a micro-batch is the "
    "mean over B / k. How do the k micro-batch means combine into the batch mean?",
    "backward() adds to .grad: call it once per micro-batch, each time on the micro-batch's loss "
    "divided by k, and never zero the gradients in between.",
])
def check_accumulate(accumulate_gradients):
    for batch, k, seed in ((12, 1, 0), (12, 3, 1), (12, 4, 2), (8, 8, 3)):
        model, x, y = _accumulation_case(batch, seed)
        reference, _, _ = _accumulation_case(batch, seed)
        F.cross_entropy(reference(x), y).backward()
        want = _grads(reference)
        sizes: list[int] = []
        events: list[str] = []
        no_graph: list[int] = []  # micro-batches whose first layer kept no graph

        def forward(_m, args, sizes=sizes, events=events):
            sizes.append(args[0].shape[0])
            events.append("F")

        # a backward pass is seen in the graph, where it reaches a micro-batch's first layer,
        # however the learner started it (backward(), torch.autograd.grad, a name imported)
        def traversed(_m, _args, out, events=events, no_graph=no_graph):
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.register_hook(lambda grad: events.append("B"))
            else:
                no_graph.append(1)

        # on the first layer, which runs whether the learner calls model(x) or model.forward(x)
        hooks = (model[0].register_forward_pre_hook(forward),
                 model[0].register_forward_hook(traversed))
        x0, y0 = x.clone(), y.clone()
        try:
            call(accumulate_gradients, model, x, y, k, what="accumulate_gradients")
        finally:
            for hook in hooks:
                hook.remove()
        expect(torch.equal(x, x0) and torch.equal(y, y0), "accumulate_gradients changed x or y")
        expect(sizes == [batch // k] * k,
               f"with B = {batch} and k = {k} the model ran on batches of sizes {sizes}: run it on "
               f"k micro-batches of B / k = {batch // k} examples each")
        got = _grads(model)
        expect(all(g is not None for g in got),
               "some parameters have no gradient after accumulate_gradients: call backward()")
        backwards = events.count("B")
        if no_graph:
            raise Wrong(f"with k = {k}, {len(no_graph)} of the micro-batches ran without a graph "
                        "(under torch.no_grad(), or on detached weights): they add nothing to "
                        "the gradients. Every micro-batch's loss must be run backward")
        if backwards < k:
            were = "was" if backwards == 1 else "were"
            raise Wrong(f"with k = {k}, only {backwards} of the micro-batches' losses {were} run "
                        "backward: the others add nothing to the gradients. Run backward on each "
                        "micro-batch's loss, divided by k")
        if k > 1 and backwards and events.index("B") > events.index("F") + 1:
            raise Wrong(f"with k = {k} the model ran several micro-batches before the first "
                        "backward pass: every micro-batch's graph (its activations) stays in "
                        "memory until then, as if the whole batch ran at once, and that memory is "
                        "what accumulation is meant to save")
        if backwards > k:
            raise Wrong(f"with k = {k}, the backward passes went through the micro-batches' "
                        f"graphs {backwards} times, not once each: a backward pass reached back "
                        "into a graph already run backward (a loss run backward twice, or a "
                        "running sum of the losses, kept with retain_graph=True): that repeats "
                        "backward work, can add those gradients again, and keeps the graphs in "
                        "memory. Run backward once on each micro-batch's own loss")
        expect(events == ["F", "B"] * k,
               f"with k = {k} the forward and backward passes ran in the order {''.join(events)} "
               "(F forward, B backward): each micro-batch's backward pass must follow its own "
               "forward pass, so that its graph is freed before the next micro-batch runs")
        if all(close(g, w) for g, w in zip(got, want, strict=True)):
            continue
        n = len(want)
        if k > 1 and all(close(g, k * w) for g, w in zip(got, want, strict=True)):
            raise Wrong(f"with k = {k} the gradients are k times the whole batch's: each "
                        "micro-batch's mean loss counts fully")
        if all(close(g, k / batch * w) for g, w in zip(got, want, strict=True)):
            if k == 1:
                raise Wrong(f"with B = {batch} and k = 1 the gradients are 1 / B times the "
                            "batch's: the loss, already a mean over the examples, was divided "
                            "again, by B (or by the micro-batch's size, the same at k = 1); "
                            "divide each micro-batch's loss by k only")
            raise Wrong(f"with B = {batch} and k = {k} the gradients are k / B times the whole "
                        "batch's: each micro-batch's mean loss was divided by the whole batch's "
                        "size B; it is already a mean over its examples: divide it by k")
        per_example = k * k / batch  # each micro-batch's mean divided by its B / k examples
        if all(close(g, per_example * w) for g, w in zip(got, want, strict=True)):
            raise Wrong(f"with B = {batch} and k = {k} the gradients are k**2 / B times the whole "
                        "batch's: each micro-batch's mean loss was divided by its number of "
                        "examples; it is already a mean over them")
        last, _, _ = _accumulation_case(batch, seed)
        F.cross_entropy(last(x[-(batch // k):]), y[-(batch // k):]).backward()
        for scale in (1.0, 1.0 / k):
            if k > 1 and all(close(g, scale * w) for g, w in zip(got, _grads(last), strict=True)):
                raise Wrong(f"with k = {k} only the last micro-batch's gradient is left: "
                            "the earlier ones were zeroed or overwritten")
        raise Wrong(f"with k = {k} the accumulated gradients differ from the gradient of the whole "
                    f"batch's mean loss (checked on {n} parameter tensors in float64)")
