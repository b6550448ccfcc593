"""Checks of the performance appendix's exercises (where the time goes)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from .core import (
    Wrong,
    agrees,
    at_most_digits,
    call,
    cut_off,
    exercise,
    expect,
    name_slip,
    number,
    number_list,
)


def _number(value, what: str) -> float:
    """The learner's number as a float (see :func:`number`), refused if computed in half
    precision."""
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]  # [x] means x, in half precision too
    half = (torch.float16, torch.bfloat16)
    if isinstance(value, torch.Tensor) and value.dtype in half or isinstance(
            value, np.float16 | np.ndarray) and np.asarray(value).dtype == np.float16:
        single = np.asarray(value.float() if isinstance(value, torch.Tensor) else value)
        # a short number such as 1.125 is exact in half precision too: that is the answer given
        if single.size != 1 or not at_most_digits(single.item(), 4):
            raise Wrong(f"{what} was computed in half precision, which keeps about 3 "
                        "significant digits: compute it in float64 (a Python float)")
        value = single.item()
    return number(value, what)


def _numbers(answer, names: tuple[str, ...], shape: str) -> list[float]:
    """The learner's answer as ``len(names)`` floats (see :func:`number_list`)."""
    return number_list(answer, names, shape, read=_number)


# ---------------------------------------------------------------------------------------------
# The exponent of a scaling curve, from its three longest sequences.
# ---------------------------------------------------------------------------------------------


def _reference_exponent(lengths, ms) -> float:
    return float(np.polyfit(np.log(lengths[-3:]), np.log(ms[-3:]), 1)[0])


@exercise("ex-perf-slopes", hints=[
    "A power law time = c T^k is a straight line in log-log axes: log t = log c + k log T.",
    "Take the logarithms of the last three lengths and of the last three times, fit a straight "
    "line (np.polyfit(x, y, 1)) of log t against log T, and return its slope.",
])
def check_slopes(exponent):
    rng = np.random.default_rng(0)
    # series of 6, 7, 5 and 4 lengths: "the three longest" is not a fixed slice of the list;
    # the last, unevenly spaced, tells a fit from the slope between its two ends (for
    # doublings the fit's middle point weighs nothing)
    for k, lengths in ((1.0, [64, 128, 256, 512, 1024, 2048]),
                       (1.6, [32, 64, 128, 256, 512, 1024, 2048]),
                       (2.3, [128, 256, 512, 1024, 2048]),
                       (1.8, [100, 300, 400, 1000])):
        # fixed costs flatten the short lengths, as in the measured curves
        ms = [0.5 + 1e-4 * T**k * math.exp(rng.normal(0.0, 0.02)) for T in lengths]
        given = list(lengths), list(ms)
        got = _number(call(exponent, *given, what="exponent"), "the exponent")
        expect(given == (lengths, ms), "exponent changed the lists it was given (the lengths or "
               "the times) in place: the figure's data would change with it; work on a copy")
        ref = _reference_exponent(lengths, ms)
        last = np.log(lengths[-3:]), np.log(ms[-3:])
        semilog = float(np.polyfit(last[0], ms[-3:], 1)[0])  # t against ln T
        # ... or against log2 T or log10 T, whose slopes are ln 2 or ln 10 times as large
        if any(agrees(got, semilog * c, 3) and not agrees(semilog * c, ref, 3)
               for c in (1.0, math.log(2), math.log(10))):
            raise Wrong("the fit is of the times against the logarithms of the lengths: take "
                        "the logarithm of the times too, so that T^k becomes a line of slope k")
        inverted = float(np.polyfit(last[1], last[0], 1)[0])  # log T against log t
        if (abs(got * ref - 1) < 0.02 or agrees(got, inverted, 3)) and abs(ref - 1) > 0.1:
            raise Wrong("the fit is of log T against log t: the exponent is the slope of log "
                        "time against log length")
        every = float(np.polyfit(np.log(lengths), np.log(ms), 1)[0])
        if agrees(got, every, 3) and not agrees(every, ref, 3):
            raise Wrong("the fit uses every length: take the three longest only, where the "
                        "fixed costs no longer hide the growth")
        for n in range(2, len(lengths)):  # another number of the longest, or the shortest
            for where, part in (("longest", slice(-n, None)), ("shortest", slice(None, n))):
                fit = float(np.polyfit(np.log(lengths[part]), np.log(ms[part]), 1)[0])
                if (n != 3 or where == "shortest") and agrees(got, fit, 3) and not agrees(
                        fit, ref, 3):
                    raise Wrong(f"the fit uses the {n} {where} lengths of a series of "
                                f"{len(lengths)}: take the three longest, where the fixed "
                                "costs no longer hide the growth")
        line = np.polyfit(last[0], last[1], 1)  # (slope, intercept) of log t against log T
        if agrees(got, float(line[1]), 3) and not agrees(float(line[1]), ref, 3):
            raise Wrong("that is the intercept of the fitted line: the exponent is its slope, "
                        "the first number np.polyfit returns")
        linear = float(np.polyfit(lengths[-3:], ms[-3:], 1)[0])  # ms per unit of T
        if agrees(got, linear, 3) and not agrees(linear, ref, 3):
            raise Wrong("the fit is of the times against the lengths themselves: on a linear "
                        "scale the slope is milliseconds per position; take the logarithms of "
                        "both first, so that T^k becomes a line of slope k")
        ends = math.log(ms[-1] / ms[-3]) / math.log(lengths[-1] / lengths[-3])
        if agrees(got, ends, 3) and not agrees(ends, ref, 3):
            raise Wrong("that is the slope between the first and the last of the three points: "
                        "on lengths that double, as the figure's do, it equals the fitted line's "
                        "(the middle point then weighs nothing), but on this series, lengths "
                        f"{', '.join(map(str, lengths))}, it does not; fit a straight line "
                        "through all three (np.polyfit)")
        if cut_off(got, ref) and not agrees(got, ref, 3):
            raise Wrong(f"for a series of {len(lengths)} lengths the exponent is cut off after 3 "
                        "significant digits: round it to the nearest instead")
        if agrees(got, ref, 2) and not agrees(got, ref, 3):
            raise Wrong(f"for a series of {len(lengths)} lengths the exponent is right to 2 "
                        "significant digits only: give it to 3 (do not round it so far)")
        expect(agrees(got, ref, 3),  # to 3 significant digits, as the exercise asks
               f"for a series of {len(lengths)} lengths the exponent is not the slope of log "
               "time against log length over the three longest sequences (to 3 significant "
               "digits)")


# ---------------------------------------------------------------------------------------------
# The size of a KV cache.
# ---------------------------------------------------------------------------------------------

KV = {"n_layer": 12, "width": 768, "T": 16384, "batch": 8}


@exercise("ex-perf-kv-memory", hints=[
    "For every layer, sequence and position the cache keeps a key and a value, each of D numbers.",
    "Multiply 2 * n_layer * B * T * D numbers by the bytes of one number (4 in float32, 2 in "
    "bf16) and divide by 2**30 for GiB; grouped-query attention with 4 query heads per key-value "
    "head keeps keys and values of D / 4 numbers.",
])
def check_kv_memory(answer):
    fp32, gqa = _numbers(answer, ("the float32 size", "the grouped-query size"),
                         "a pair (GiB in float32, GiB in bf16 with grouped-query attention)")
    numbers_ = 2 * KV["n_layer"] * KV["batch"] * KV["T"] * KV["width"]
    right_fp32 = numbers_ * 4 / 2**30

    def near(x, y):  # to 2 significant digits, as the exercise asks
        return agrees(x, y, 2)

    if not near(fp32, right_fp32):
        if near(fp32, right_fp32 / 8) and near(gqa, right_fp32):
            raise Wrong("the two numbers are in the wrong order: first the float32 size, then "
                        "the grouped-query size")
        if near(fp32, right_fp32 / 2):
            raise Wrong("the float32 size is half what it should be: the cache holds keys and "
                        "values, or a float32 number takes 4 bytes")
        if near(fp32, right_fp32 / KV["n_layer"]):
            raise Wrong("the float32 size counts one layer: every layer keeps its own cache")
        if near(fp32, right_fp32 / KV["batch"]):
            raise Wrong("the float32 size counts one sequence: the batch holds 8")
        if near(fp32, numbers_ * 4 / 1e9):
            raise Wrong("the float32 size is in GB (10**9 bytes): give it in GiB (2**30 bytes)")
        raise Wrong("the float32 size is not the cache's size to 2 significant digits: count "
                    "the numbers per layer, sequence and position, then the bytes")
    if near(gqa, right_fp32 / 8):
        return
    if gqa == round(gqa, 1) and abs(gqa - math.ceil(right_fp32 / 8 * 10) / 10) < 1e-9:
        raise Wrong("the grouped-query size is rounded up: to 2 significant digits, round to "
                    "the nearest")
    if near(gqa, right_fp32 / 2 / 3):
        raise Wrong("the grouped-query size keeps a third of the bf16 cache: one key-value head "
                    "for every 4 query heads makes 12 / 4 = 3 key-value heads of the 12, a "
                    "quarter of the keys and values")
    if near(gqa, right_fp32 / 2):
        raise Wrong("the grouped-query size is that of the full cache in bf16: with one "
                    "key-value head per 4 query heads, keys and values shrink too")
    if near(gqa, right_fp32 / 4):
        raise Wrong("the grouped-query size is a quarter of the float32 size: that is "
                    "grouped-query attention in float32; bf16 halves it again")
    if near(gqa, numbers_ / 4 * 2 / 1e9):
        raise Wrong("the grouped-query size is in GB (10**9 bytes): give it in GiB (2**30 bytes)")
    if abs(gqa - float(f"{right_fp32 / 8:.1g}")) < 1e-9:  # the 1-digit rounding, 1
        raise Wrong("the grouped-query size is right to 1 significant digit only: give it to 2")
    raise Wrong("the grouped-query size is not right to 2 significant digits: bf16 halves the "
                "float32 size, and keeping one key-value head for every 4 query heads divides "
                "it by 4")


# ---------------------------------------------------------------------------------------------
# The MFU of another run.
# ---------------------------------------------------------------------------------------------

MFU = {"parameters": 124_475_904, "positions": 1024 * 768, "n_layer": 12, "T": 1024,
       "D": 768, "batch": 32, "step_s": 0.250, "peak": 312e12}


@exercise("ex-perf-mfu", hints=[
    "MFU = (FLOPs the model needs per token) x (tokens per second) / (the GPU's peak FLOP/s).",
    "Per token, 6 N for the matrix products of the forward and backward passes, with N the "
    "parameters outside the position table, plus 12 L T D for attention; a step trains on "
    "32 x 1024 tokens in 0.25 s, and the A100's peak is 312e12 FLOP/s.",
])
def check_mfu(answer):
    m = MFU
    got = _number(answer, "answer")
    tokens_per_s = m["batch"] * m["T"] / m["step_s"]
    attention = 12 * m["n_layer"] * m["T"] * m["D"]
    n = m["parameters"] - m["positions"]

    def mfu(flops_per_token, peak=m["peak"], rate=tokens_per_s):
        return flops_per_token * rate / peak

    right = mfu(6 * n + attention)
    if agrees(got, right, 3):
        return
    slips = [
        (100 * right, "the MFU is a percentage: give it as a fraction (0.5 for 50 %)"),
        (mfu(6 * n), "the count leaves out attention's 12 L T D FLOPs per token"),
        (mfu(6 * m["parameters"]),
         "two slips: the count includes the position table (a lookup, no matrix product) and "
         "leaves out attention's 12 L T D FLOPs per token"),
        (mfu(6 * m["parameters"] + attention),
         "the count includes the position table: looking a position up is no matrix product, "
         "so N leaves its 1024 x 768 numbers out"),
        (mfu(2 * n + attention / 3), "the count is the forward pass only (2 N): training adds "
                                     "the backward pass, twice as much again (6 N in all)"),
        (mfu(6 * n + attention, rate=tokens_per_s / m["batch"]),
         "the tokens per second count one sequence a step: a step trains on 32 sequences"),
        (mfu(6 * n + attention, rate=tokens_per_s / m["T"]),
         "the tokens per second count one token per sequence: each sequence has 1024"),
        (mfu(6 * n + attention, peak=989.4e12), "that is the H200's peak, the GPU of the "
         "section's run: the A100's dense bf16 peak is 312 TFLOP/s"),
        (mfu(6 * n + attention, peak=624e12), "624 TFLOP/s is the A100's peak with 2:4 "
                                              "structured sparsity: its dense bf16 peak is 312"),
        (mfu(6 * (n - m["D"] * 50_304) + attention),
         "N leaves out the token embedding, as Kaplan et al.'s non-embedding count does: here "
         "it is tied to the output layer, a 768 x 50 304 matrix product every token pays for, "
         "so it counts in N (only the position table is left out)"),
        (mfu(6 * n + attention, peak=312), "the peak is 312e12 FLOP/s, not 312: TFLOP/s are "
                                           "10**12 FLOP/s"),
        (mfu(6 * n + attention, peak=312 * 2**40), "a TFLOP/s is 10**12 FLOP/s, not 2**40"),
        ((6 * n + attention) * tokens_per_s / 1e12, "that is the model's TFLOP/s: divide them "
                                                    "by the peak, 312 TFLOP/s"),
        (mfu(8 * n + attention * 4 / 3), "that counts a forward pass recomputed for "
         "checkpointing (8 N), the hardware FLOPs of a run that recomputes; this run recomputes "
         "nothing, and the MFU counts the model's own 6 N in any case"),
        (mfu(8 * n + attention), "that counts a forward pass recomputed for checkpointing "
         "(8 N), the hardware FLOPs of a run that recomputes; the MFU counts the model's own "
         "6 N"),
        (mfu(6 * n + attention / 2), "the section counts the whole T x T matrix (12 L T D), "
                                     "although a causal kernel skips half of it"),
        (mfu(6 * (n + m["D"] * 50_304) + attention),
         "the tied embedding is one matrix, counted once among the 124 475 904 parameters"),
    ]
    name_slip(got, slips, 3)
    if agrees(got, right, 2):
        if not at_most_digits(got, 2) and any(agrees(got, mfu(6 * rounded + attention), 3)
                                              for rounded in (124e6, 124e6 - m["positions"])):
            raise Wrong("right to 2 significant digits only: the third is off because the "
                        "parameters were rounded to 124 million; use the exact count, "
                        "124 475 904, less the position table")
        raise Wrong("right to 2 significant digits: give 3, as the exercise asks")
    if got > 1:
        raise Wrong("an MFU above 1 would beat the GPU's peak: T in 12 L T D is the context "
                    "(1024), and every number must be in FLOPs and seconds")
    raise Wrong("the MFU is not right to 3 significant digits: the model's FLOPs per token "
                "times the tokens per second, over the peak")


# ---------------------------------------------------------------------------------------------
# Which side of the ridge: an H100 and a product of a batch of 16 tokens.
# ---------------------------------------------------------------------------------------------

RIDGE = {"peak_tflops": 989.4, "bandwidth_tbs": 3.35, "batch": 16, "width": 4096}


def _ridge_answer(peak=RIDGE["peak_tflops"], bandwidth=RIDGE["bandwidth_tbs"],
                  m=RIDGE["batch"], flops=2, bytes_=2, output=True):
    """(ridge point, intensity, ceiling in TFLOP/s) of the exercise, with optional slips."""
    k = n = RIDGE["width"]
    ridge = peak / bandwidth  # TFLOP/s over TB/s: FLOP/byte
    moved = m * k + k * n + (m * n if output else 0)
    intensity = flops * m * k * n / (bytes_ * moved)
    return ridge, intensity, min(peak, intensity * bandwidth)


@exercise("ex-perf-ridge", hints=[
    "The ridge point is the peak over the bandwidth, in FLOP per byte; a product of an m x k by "
    "a k x n matrix does 2mkn FLOPs and, in bf16, moves 2(mk + kn + mn) bytes.",
    "Here m = 16 and k = n = 4096. The roofline allows min(peak, intensity x bandwidth): "
    "989.4 TFLOP/s and 3.35 TB/s, so the third number is in TFLOP/s.",
])
def check_ridge(answer):
    got = _numbers(answer, ("the ridge point", "the intensity", "the ceiling"),
                   "a triple (ridge point in FLOP/byte, intensity in FLOP/byte, ceiling in "
                   "TFLOP/s)")
    ridge, intensity, ceiling = got
    right = _ridge_answer()
    peak, bandwidth = RIDGE["peak_tflops"], RIDGE["bandwidth_tbs"]

    def near(x, y):  # to 4 significant digits, as the exercise asks
        return agrees(x, y, 4)

    def same(xs, ys):
        return all(near(x, y) for x, y in zip(xs, ys, strict=True))

    if not same(got, right) and any(same(got, order) for order in itertools.permutations(right)):
        raise Wrong("the three numbers are right but in another order: the triple is (ridge "
                    "point, intensity, ceiling)")
    if not near(ridge, right[0]):
        name_slip(ridge, [
            (1 / right[0], "the ridge point is the peak over the bandwidth, not its inverse"),
            (peak / 4.8, "4.8 TB/s is the H200's bandwidth: the H100 SXM moves 3.35 TB/s"),
            (1979 / bandwidth, "1 979 TFLOP/s is NVIDIA's peak with 2:4 structured sparsity: the "
                           "dense bf16 peak is 989.4"),
            (right[0] * 1e12, "the peak and the bandwidth are both in units of 10**12: their "
                              "ratio is in FLOP/byte as it stands"),
            (right[0] / 1e12, "the peak is in TFLOP/s and the bandwidth in bytes/s: put both "
                              "in units of 10**12 (or both in units of 1)"),
            (right[0] / 1e3, "the bandwidth is in GB/s and the peak in TFLOP/s: 3.35 TB/s is "
                             "3.35e12 bytes/s"),
            (right[0] * 1e12 / 2**40, "a TB is 10**12 bytes, not 2**40"),
        ], 4)
        raise Wrong("the ridge point is not right to 4 significant digits: the peak FLOP/s over "
                    "the bandwidth in bytes per second")
    if not near(intensity, right[1]):
        name_slip(intensity, [
            (_ridge_answer(bytes_=1)[1], "the intensity counts numbers, not bytes: a bf16 "
                                         "number takes two"),
            (_ridge_answer(flops=1)[1], "the intensity is half the right one: each of the mkn "
                                        "products is a multiply and an add (2mkn FLOPs), and "
                                        "a bf16 number takes 2 bytes, not 4"),
            (_ridge_answer(m=1)[1], "the intensity is that of one token: the batch has 16, "
                                    "so each weight read serves 16 tokens"),
            (_ridge_answer(output=False)[1], "the intensity leaves out 16 x 4096 numbers: "
                                             "the activations read or the output written"),
            (RIDGE["batch"], "the intensity counts only the weights' bytes (2mkn FLOPs over 2kn "
                             "bytes): the activations read and the output written move bytes "
                             "too"),
        ], 4)
        if cut_off(intensity, right[1], 4):  # 15.87 for 15.876 (the others round as they cut)
            raise Wrong("the intensity is cut off after 4 significant digits: round it to the "
                        "nearest instead")
        raise Wrong("the intensity is not right to 4 significant digits: 2mkn FLOPs over "
                    "2(mk + kn + mn) bytes, with m = 16 and k = n = 4096")
    # the learner's own intensity (right to 4 digits) times the bandwidth is right too
    if near(ceiling, right[2]) or near(ceiling, intensity * bandwidth):
        return
    name_slip(ceiling, [
        (peak, "the ceiling is the peak, as if the product were compute-bound: its intensity "
               "is left of the ridge, so memory bounds it"),
        (right[2] * 1e12, "the ceiling is in FLOP/s: give it in TFLOP/s"),
        (right[2] * 1e3, "the ceiling is in GFLOP/s: give it in TFLOP/s"),
        (right[2] / 1e3, "the ceiling is in PFLOP/s: give it in TFLOP/s"),
        (right[1] * 4.8, "4.8 TB/s is the H200's bandwidth: the H100 SXM moves 3.35 TB/s"),
        (right[2] / peak, "that is the fraction of the peak: give the ceiling itself, in "
                          "TFLOP/s"),
        (100 * right[2] / peak, "that is the percentage of the peak: give the ceiling itself, "
                                "in TFLOP/s"),
        (right[2] * 2**40 / 1e12, "a TB is 10**12 bytes, not 2**40"),
    ], 4)
    raise Wrong("the ceiling is not right to 4 significant digits: min(peak, intensity x "
                "bandwidth), in TFLOP/s")


# ---------------------------------------------------------------------------------------------
# How many sequences fit on an H100, and how fast they generate.
# ---------------------------------------------------------------------------------------------

DECODE = {"n_layer": 12, "width": 768, "weights": 123_568_128, "context": 2048,
          "memory": 80e9, "bandwidth": 3.35e12, "peak": 989.4e12}  # an H100 SXM


def _decode_answer(bytes_=2, kv=2, layers=DECODE["n_layer"], context=DECODE["context"],
                   memory=DECODE["memory"], weights_in_memory=True, weights_read=True,
                   weights_flops=True, attention=1.0, weight_bytes=2,
                   bandwidth=DECODE["bandwidth"], flops_per_product=2, add=False):
    """(batch whose caches equal the weights, largest batch that fits, tokens per second at the
    floor, reading's floor over computing's) of the exercise, with optional slips."""
    N, D, t = DECODE["weights"], DECODE["width"], context
    per_sequence = bytes_ * kv * layers * t * D  # one sequence's cache, bytes
    equal = 2 * N / per_sequence  # the weights in bf16 over one cache
    fits = int((memory - weight_bytes * N * weights_in_memory) // per_sequence)
    read = (2 * N * weights_read + fits * per_sequence) / bandwidth
    compute = flops_per_product / 2 * (2 * N * fits * weights_flops
                                       + 2 * kv * layers * fits * t * D * attention) / DECODE["peak"]
    step = read + compute if add else max(read, compute)
    return equal, fits, fits / step, read / compute


@exercise("ex-perf-decode", hints=[
    "One sequence's cache holds a key and a value of D numbers per layer and token: 2 L t D "
    "numbers of 2 bytes in bf16. The weights take 2 N bytes.",
    "The largest batch is the whole number of caches that fit in 80e9 bytes less the weights'. "
    "Its step reads the weights and every cache once, and does 2 N B + 4 L B t D FLOPs: the "
    "floor is the longer of bytes / 3.35e12 and FLOPs / 989.4e12 seconds, the batch makes B "
    "tokens a step, and the last number is the first of those times over the second.",
])
def check_decode_batch(answer):
    equal, fits, rate, ratio = _numbers(
        answer, ("the batch of equal bytes", "the largest batch", "the tokens per second",
                 "the ratio of the floors"),
        "four numbers (the batch whose caches hold as much as the weights, the largest batch "
        "that fits, tokens per second, reading's floor over computing's)")
    right = _decode_answer()

    def near(x, y):  # to 3 significant digits, as the exercise asks (or rounding to them)
        return agrees(x, y, 3) or f"{x:.3g}" == f"{y:.3g}"

    if not near(equal, right[0]):
        name_slip(equal, [
            (1 / right[0], "the first number is inverted: the weights' bytes over one "
                           "sequence's cache"),
            (_decode_answer(kv=1)[0], "the first number is twice the right one: the weights "
                                      "are in bf16 (2 N bytes), and a cache holds a key and a "
                                      "value per layer and token"),
            (_decode_answer(layers=1)[0], "the first number counts one layer's (or one head's) "
                                          "cache: every layer keeps its own keys and values, "
                                          "all D = 768 numbers of them a token"),
            (_decode_answer(bytes_=4)[0], "the first number is half the right one: a cache of "
                                          "2048 tokens, in bf16 like the weights (2 bytes a "
                                          "number)"),
        ])
        if equal == int(equal) and abs(equal - right[0]) < 1:
            raise Wrong("the first number need not be a whole batch: give the weights' bytes over "
                        "one sequence's cache, a fraction, to 3 significant digits")
        raise Wrong("the batch whose caches hold as many bytes as the weights is not right to "
                    "3 significant digits: 2 N bytes over one sequence's 2 * 2 L t D")
    if fits != right[1]:
        expect(fits == int(fits), "the largest batch must be a whole number of sequences")
        if fits == right[1] + 1:
            raise Wrong(f"{int(fits)} sequences do not fit: with the weights their caches need "
                        "more than 80 GB. Round the number that fits down")
        name_slip(fits, [
            (_decode_answer(weights_in_memory=False)[1], "the weights take 2 N bytes of the "
                                                         "memory too: leave room for them"),
            (_decode_answer(memory=80 * 2**30)[1], "the exercise takes the memory as 80e9 bytes, not 80 GiB"),
            (_decode_answer(memory=141e9)[1], "141 GB is the H200's memory: the H100 holds 80 GB"),
            (_decode_answer(context=DECODE["context"] + 1)[1], "the caches hold t = 2048 tokens "
                                                                "each, not 2049"),
            (_decode_answer(weight_bytes=4)[1], "the weights are in bf16 too: 2 N bytes"),
            (_decode_answer(bytes_=4)[1], "the cache is in bf16: 2 bytes a number, not 4"),
            (_decode_answer(kv=1)[1], "the cache holds a key and a value per layer and token, "
                                      "not a key only"),
            (_decode_answer(layers=1)[1], "every layer keeps its own keys and values"),
        ], 6)
        raise Wrong("the largest batch is not right: the whole number of sequences whose caches "
                    "fit in 80e9 bytes beside the weights' 2 N")
    if not near(rate, right[2]):
        _rate_slip(rate, right)
    if agrees(ratio, right[3], 2) or f"{ratio:.2g}" == f"{right[3]:.2g}":
        return
    name_slip(ratio, [
        (1 / right[3], "the ratio is inverted: reading's floor over computing's"),
        (_decode_answer(bandwidth=4.8e12)[3], "4.8 TB/s is the H200's bandwidth: the H100 moves "
                                              "3.35 TB/s"),
        (_decode_answer(flops_per_product=1)[3], "a multiply and an add are two FLOPs: 2 N per "
                                                 "sequence and 4 L t D for attention"),
        (_decode_answer(attention=0)[3], "the arithmetic leaves out attention: the step "
                                         "also does 4 L B t D FLOPs with the caches"),
        (_decode_answer(attention=0.5)[3], "attention does 4 L B t D FLOPs, not 2 L B t D: two "
                                           "products with the caches (the scores with the "
                                           "keys, the mix of the values), each a multiply and "
                                           "an add per number read"),
        (_decode_answer(weights_flops=False)[3], "the arithmetic leaves out the matrix "
                                                 "products: 2 N FLOPs a sequence"),
    ], 2)
    raise Wrong("the ratio of the floors is not right to 2 significant digits: the seconds to "
                "read (bytes / 3.35e12) over the seconds to compute (FLOPs / 989.4e12)")


def _rate_slip(rate, right) -> None:
    """Wrong, naming the slip if it is a usual one: the tokens per second of the exercise."""
    equal, fits, rate_right, ratio = right  # the step is read-bound: rate = fits / read
    name_slip(rate, [  # the text writes this slip's number with 2 digits
        (rate_right / fits, "that is each sequence's rate, one token a step: the batch makes "
                            f"{fits} tokens a step"),
    ], digits=2)
    name_slip(rate, [
        (_decode_answer(weights_read=False)[2], "the step reads the weights as well as the "
                                                "caches"),
        (rate_right * ratio, "that is the arithmetic's floor: reading the caches takes far "
                             "longer, so memory sets the step"),
        (rate_right / 1e3, "give the tokens per second, not per millisecond (or in thousands)"),
        (_decode_answer(bandwidth=4.8e12)[2], "4.8 TB/s is the H200's bandwidth: the H100 moves "
                                              "3.35 TB/s"),
        (_decode_answer(bandwidth=3.35 * 2**40)[2], "a TB is 10**12 bytes, not 2**40"),
        (_decode_answer(add=True)[2], "the floor is the longer of the two times, not their sum"),
    ])
    raise Wrong("the tokens per second are not right to 3 significant digits: the batch's tokens "
                "over the longer floor, reading (weights and caches, bytes / 3.35e12) or "
                "computing (FLOPs / 989.4e12)")
