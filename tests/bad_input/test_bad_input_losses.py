"""Bad input to seqbook.losses: every public callable refuses it clearly, or handles a legal edge.

Each ``ERRORS`` case must end in a ValueError/TypeError raised by seqbook whose message holds the
words listed (the argument's name and the expected or actual value, shape or dtype). The legal edge
inputs below them (masked and ignored rows, extreme logits, dtypes) are checked for their result.
"""

# Cases: 288 bad inputs, every one a clear error; plus 12 tests (17 with their parameters) of legal
# edge inputs: ignored and masked rows with their gradients, dtypes, NumPy numbers, empty batches, meta.

import math

import matplotlib
import numpy as np
import pytest
import torch

from seqbook import losses as L
from seqbook import plot, vsa_models
from tests.badinput import INF, NAN, assert_clear_error, floats, table, with_value

matplotlib.use("Agg")



Z = floats(4, 5)  # logits (B, C)
Z3 = floats(2, 3, 5)  # logits (B, T, C)
Y = torch.tensor([0, 1, 4, 2])  # targets (B,)
Y3 = torch.tensor([[0, 1, 4], [2, 3, 0]])
P = torch.softmax(floats(4, 5, seed=1), -1)  # probabilities (N, C)
Q = torch.softmax(floats(4, 5, seed=2), -1)
ANGLES = 2 * torch.rand(3, 8, generator=torch.Generator().manual_seed(3)) - 1  # (B, n)
CODEBOOK = 2 * torch.rand(5, 8, generator=torch.Generator().manual_seed(4)) - 1  # (C, n)
LABELS = torch.tensor([0, 4, 2])

ERRORS, case = table()


BAD_BETAS = [("0", 0.0, "> 0"), ("negative", -2.0, "-2.0"), ("inf", INF, "finite"), ("nan", NAN, "finite"),
             ("str", "1", "str"), ("bool", True, "bool"), ("none", None, "NoneType")]

# ------------------------------------------------------------------ logsumexp, free_energy, log_softmax

for name in ("logsumexp", "free_energy", "log_softmax"):
    fn = getattr(L, name)
    case(f"{name}-z-list", lambda fn=fn: fn([1.0, 2.0]), "z", "torch.Tensor", "list")
    case(f"{name}-z-scalar", lambda fn=fn: fn(torch.tensor(1.0)), "z", "(..., C)", "scalar")
    case(f"{name}-z-int", lambda fn=fn: fn(Y), "z", "floating-point", "torch.int64")
    case(f"{name}-z-bool", lambda fn=fn: fn(Z > 0), "z", "torch.bool")
    case(f"{name}-z-C0", lambda fn=fn: fn(Z[:, :0]), "z", "C >= 1", "(4, 0)")
    case(f"{name}-z-nan", lambda fn=fn: fn(with_value(Z)), "z", "NaN")
    case(f"{name}-z-posinf", lambda fn=fn: fn(with_value(Z, INF)), "z", "+inf")
for name in ("logsumexp", "free_energy"):
    fn = getattr(L, name)
    for label, beta, word in BAD_BETAS:
        case(f"{name}-beta-{label}", lambda fn=fn, beta=beta: fn(Z, beta), "beta", word)

# ------------------------------------------------------------------ smooth_labels

case("smooth_labels-target-list", lambda: L.smooth_labels([0, 1], 3), "target", "torch.Tensor", "list")
case("smooth_labels-target-float", lambda: L.smooth_labels(Y.float(), 5), "target", "integer",
     "torch.float32")
case("smooth_labels-target-bool", lambda: L.smooth_labels(Y > 0, 5), "target", "torch.bool")
case("smooth_labels-target-too-large", lambda: L.smooth_labels(Y, 4), "target", "[0, 4)", "[0, 4]")
case("smooth_labels-target-negative", lambda: L.smooth_labels(torch.tensor([-1, 2]), 5), "target", "[-1, 2]")
case("smooth_labels-num_classes-0", lambda: L.smooth_labels(Y, 0), "num_classes", ">= 1", "0")
case("smooth_labels-num_classes-float", lambda: L.smooth_labels(Y, 5.0), "num_classes", "int", "5.0")
case("smooth_labels-num_classes-bool", lambda: L.smooth_labels(Y, True), "num_classes", "bool")
case("smooth_labels-label_smoothing-negative", lambda: L.smooth_labels(Y, 5, -0.1), "label_smoothing", "-0.1")
case("smooth_labels-label_smoothing-above-1", lambda: L.smooth_labels(Y, 5, 1.5), "label_smoothing", "1.5")
case("smooth_labels-label_smoothing-nan", lambda: L.smooth_labels(Y, 5, NAN), "label_smoothing", "finite")
case("smooth_labels-label_smoothing-str", lambda: L.smooth_labels(Y, 5, "0.1"), "label_smoothing", "str")
case("smooth_labels-dtype-int", lambda: L.smooth_labels(Y, 5, dtype=torch.int64), "dtype", "torch.int64")
case("smooth_labels-dtype-str", lambda: L.smooth_labels(Y, 5, dtype="float32"), "dtype", "float32")

# ------------------------------------------------------------------ cross_entropy

ce = L.cross_entropy
case("cross_entropy-logits-list", lambda: ce([[0.0, 1.0]], Y[:1]), "logits", "torch.Tensor", "list")
case("cross_entropy-logits-rank1", lambda: ce(Z[0], Y[0]), "logits", "(B, C) or (B, T, C)", "(5,)")
case("cross_entropy-logits-rank4", lambda: ce(Z3[None], Y3[None]), "logits", "(1, 2, 3, 5)")
case("cross_entropy-logits-int", lambda: ce(Z.long(), Y), "logits", "floating-point", "torch.int64")
case("cross_entropy-logits-C0", lambda: ce(Z[:, :0], Y), "logits", "at least one class", "(4, 0)")
case("cross_entropy-logits-B0", lambda: ce(Z[:0], Y[:0]), "logits", "not be empty", "(0, 5)")
case("cross_entropy-logits-T0", lambda: ce(Z3[:, :0], Y3[:, :0]), "logits", "not be empty", "(2, 0, 5)")
case("cross_entropy-logits-nan", lambda: ce(with_value(Z), Y), "logits", "NaN")
case("cross_entropy-logits-posinf", lambda: ce(with_value(Z, INF), Y), "logits", "+inf")
case("cross_entropy-logits-all-masked-row", lambda: ce(Z.index_fill(0, torch.tensor([1]), -INF), Y),
     "logits", "-inf only", "not ignore_index")
case("cross_entropy-target-list", lambda: ce(Z, [0, 1, 4, 2]), "target", "torch.Tensor", "list")
case("cross_entropy-target-float", lambda: ce(Z, Y.float()), "target", "integer class ids", "torch.float32")
case("cross_entropy-target-bool", lambda: ce(Z, Y > 0), "target", "torch.bool")
case("cross_entropy-target-batch", lambda: ce(Z, Y[:3]), "target", "(B,) = (4,)", "(3,)")
case("cross_entropy-target-rank", lambda: ce(Z3, Y3[0]), "target", "(B, T) = (2, 3)", "(3,)")
case("cross_entropy-target-too-large", lambda: ce(Z, torch.tensor([0, 1, 5, 2])), "target", "[0, 5)", "5]")
case("cross_entropy-target-negative", lambda: ce(Z, torch.tensor([0, -1, 4, 2])), "target", "[0, 5)", "[-1,")
case("cross_entropy-target-not-ignored-value", lambda: ce(Z, torch.tensor([0, -100, 4, 2]), ignore_index=-1),
     "target", "ignore_index=-1", "-100")
case("cross_entropy-label_smoothing-negative", lambda: ce(Z, Y, label_smoothing=-0.1), "label_smoothing",
     "-0.1")
case("cross_entropy-label_smoothing-above-1", lambda: ce(Z, Y, label_smoothing=1.1), "label_smoothing", "1.1")
case("cross_entropy-label_smoothing-nan", lambda: ce(Z, Y, label_smoothing=NAN), "label_smoothing", "finite")
case("cross_entropy-label_smoothing-tensor", lambda: ce(Z, Y, label_smoothing=torch.ones(2)),
     "label_smoothing", "Tensor")
case("cross_entropy-ignore_index-float", lambda: ce(Z, Y, ignore_index=-100.0), "ignore_index", "int",
     "-100.0")
case("cross_entropy-ignore_index-bool", lambda: ce(Z, Y, ignore_index=False), "ignore_index", "bool")
case("cross_entropy-ignore_index-str", lambda: ce(Z, Y, ignore_index="pad"), "ignore_index", "str")

# ------------------------------------------------------------------ focal_loss
fl = L.focal_loss
case("focal_loss-logits-rank1", lambda: fl(Z[0], Y[0]), "logits", "(B, C) or (B, T, C)", "(5,)")
case("focal_loss-logits-nan", lambda: fl(with_value(Z), Y), "logits", "NaN")
case("focal_loss-target-batch", lambda: fl(Z, Y[:3]), "target", "(B,) = (4,)", "(3,)")
case("focal_loss-target-too-large", lambda: fl(Z, torch.tensor([0, 1, 5, 2])), "target", "[0, 5)", "5]")
case("focal_loss-gamma-negative", lambda: fl(Z, Y, gamma=-1.0), "gamma", ">= 0", "-1.0")
case("focal_loss-gamma-nan", lambda: fl(Z, Y, gamma=NAN), "gamma", "finite")
case("focal_loss-gamma-tensor", lambda: fl(Z, Y, gamma=torch.ones(2)), "gamma", "Tensor")
case("focal_loss-ignore_index-float", lambda: fl(Z, Y, ignore_index=-100.0), "ignore_index", "int", "-100.0")

# -------------------------------------------------------------- entropy, kl_divergence, cross_entropy_dist

for name in ("entropy", "kl_divergence", "cross_entropy_dist"):
    fn = getattr(L, name)
    pair = name != "entropy"

    def call(p, q=None, base=None, fn=fn, pair=pair):
        return fn(p, Q if q is None else q, base) if pair else fn(p, base)

    case(f"{name}-p-list", lambda call=call: call([0.5, 0.5]), "p", "torch.Tensor", "list")
    case(f"{name}-p-scalar", lambda call=call: call(torch.tensor(1.0), torch.tensor(1.0)), "p", "scalar")
    case(f"{name}-p-int", lambda call=call: call(torch.ones(4, 1, dtype=torch.long), Q[:, :1] / Q[:, :1]),
         "p", "floating-point", "torch.int64")
    case(f"{name}-p-C0", lambda call=call: call(P[:, :0], Q[:, :0]), "p", "C >= 1", "(4, 0)")
    case(f"{name}-p-negative", lambda call=call: call(torch.tensor([1.5, -0.5]), torch.tensor([0.5, 0.5])),
         "p", "non-negative", "-0.5")
    case(f"{name}-p-above-1", lambda call=call: call(torch.tensor([[2.0, 0.0]]), Q[:1, :2] / Q[:1, :2].sum()),
         "p", "at most 1", "2")
    case(f"{name}-p-nan", lambda call=call: call(with_value(P)), "p", "probabilities", "nan")
    case(f"{name}-p-logits", lambda call=call: call(Z), "p", "non-negative")
    case(f"{name}-p-not-normalised", lambda call=call: call(P * 0.5), "p", "sum to 1", "0.5")
    for label, base, word in (("1", 1, "!= 1"), ("0", 0, "> 0"), ("negative", -2, "-2"),
                              ("inf", INF, "finite"), ("str", "2", "str")):
        case(f"{name}-base-{label}", lambda call=call, base=base: call(P, base=base), "base", word)
for name in ("kl_divergence", "cross_entropy_dist"):
    fn = getattr(L, name)
    case(f"{name}-q-list", lambda fn=fn: fn(P, [0.2] * 5), "q", "torch.Tensor", "list")
    case(f"{name}-shape-mismatch", lambda fn=fn: fn(P, Q[:3]), "p and q", "same shape", "(4, 5)", "(3, 5)")
    case(f"{name}-q-negative", lambda fn=fn: fn(P, Q - 0.5), "q", "non-negative")
    case(f"{name}-q-not-normalised", lambda fn=fn: fn(P, Q * 0.5), "q", "sum to 1", "0.5")

# ------------------------------------------------------------------ perplexity

case("perplexity-nll-list", lambda: L.perplexity([1.0, 2.0]), "nll", "list")
case("perplexity-nll-str", lambda: L.perplexity("2.0"), "nll", "str")
case("perplexity-nll-bool", lambda: L.perplexity(True), "nll", "bool")
case("perplexity-nll-nan", lambda: L.perplexity(NAN), "nll", "finite")
case("perplexity-nll-negative", lambda: L.perplexity(-1.0), "nll", ">= 0", "-1.0")
case("perplexity-nll-empty", lambda: L.perplexity(torch.tensor([])), "nll", "empty", "(0,)")
case("perplexity-nll-int-tensor", lambda: L.perplexity(torch.tensor([1, 2])), "nll", "floating-point",
     "torch.int64")
case("perplexity-nll-tensor-nan", lambda: L.perplexity(torch.tensor([1.0, NAN])), "nll", "NaN")
case("perplexity-nll-tensor-negative", lambda: L.perplexity(torch.tensor([1.0, -3.0])), "nll", ">= 0")
BAD_BASES = [("1", 1.0, "!= 1"), ("0", 0.0, "> 0"), ("nan", NAN, "finite"), ("bool", True, "bool")]
for label, base, word in BAD_BASES:
    case(f"perplexity-base-{label}", lambda base=base: L.perplexity(1.0, base=base), "base", word)

# ------------------------------------------------------------------ calibration

for name in ("calibration_bins", "expected_calibration_error", "reliability_diagram"):
    fn = getattr(plot if name == "reliability_diagram" else L, name)
    case(f"{name}-probs-list", lambda fn=fn: fn([[1.0, 0.0]], Y[:1]), "probs", "torch.Tensor", "list")
    case(f"{name}-probs-rank1", lambda fn=fn: fn(P[0], Y), "probs", "(N, C)", "(5,)")
    case(f"{name}-probs-rank3", lambda fn=fn: fn(P[None], Y), "probs", "(N, C)", "(1, 4, 5)")
    case(f"{name}-probs-N0", lambda fn=fn: fn(P[:0], Y[:0]), "probs", "N >= 1", "(0, 5)")
    case(f"{name}-probs-C0", lambda fn=fn: fn(P[:, :0], Y), "probs", "C >= 1", "(4, 0)")
    case(f"{name}-probs-int", lambda fn=fn: fn(torch.eye(4, dtype=torch.long), Y), "probs", "floating-point")
    case(f"{name}-probs-logits", lambda fn=fn: fn(Z * 5, Y), "probs", "non-negative")
    case(f"{name}-probs-above-1", lambda fn=fn: fn(torch.tensor([[1.5, -0.5]]), Y[:1]), "probs", "at most 1")
    case(f"{name}-probs-nan", lambda fn=fn: fn(with_value(P), Y), "probs", "nan")
    case(f"{name}-probs-not-normalised", lambda fn=fn: fn(torch.full((4, 5), 0.5), Y), "probs",
         "sum to 1", "2.5")
    case(f"{name}-target-list", lambda fn=fn: fn(P, [0, 1, 4, 2]), "target", "torch.Tensor", "list")
    case(f"{name}-target-float", lambda fn=fn: fn(P, Y.float()), "target", "integer", "torch.float32")
    case(f"{name}-target-shape", lambda fn=fn: fn(P, Y[:3]), "target", "(N,) = (4,)", "(3,)")
    case(f"{name}-target-too-large", lambda fn=fn: fn(P, torch.tensor([0, 1, 5, 2])), "target", "[0, 5)")
    case(f"{name}-target-negative", lambda fn=fn: fn(P, torch.tensor([0, -1, 4, 2])), "target", "[-1,")
    case(f"{name}-n_bins-0", lambda fn=fn: fn(P, Y, 0), "n_bins", ">= 1", "0")
    case(f"{name}-n_bins-float", lambda fn=fn: fn(P, Y, 10.0), "n_bins", "int", "10.0")
    case(f"{name}-n_bins-bool", lambda fn=fn: fn(P, Y, True), "n_bins", "bool")
case("expected_calibration_error-bins-name", lambda: L.expected_calibration_error(P, Y, bins="equal"),
     "bins", "'mass', 'width'", "'equal'")
case("expected_calibration_error-bins-int", lambda: L.expected_calibration_error(P, Y, bins=3), "bins",
     "one of", "int")
case("expected_calibration_error-classwise-float",
     lambda: L.expected_calibration_error(P, Y, classwise=1.0), "classwise", "bool", "float")
case("reliability_diagram-title-int", lambda: plot.reliability_diagram(P, Y, title=3), "title", "str", "int")

# ------------------------------------------------------------------ similarity_logits, similarity_loss

for name in ("similarity_logits", "similarity_loss"):
    fn = getattr(vsa_models, name)

    def call(x=ANGLES, codebook=CODEBOOK, fn=fn, name=name):
        return fn(x, codebook) if name == "similarity_logits" else fn(x, codebook, LABELS[: len(x)])

    case(f"{name}-x-list", lambda call=call: call([[0.5] * 8]), "x", "torch.Tensor", "list")
    case(f"{name}-x-int", lambda call=call: call(ANGLES.long()), "x", "floating-point", "torch.int64")
    case(f"{name}-x-complex", lambda call=call: call(ANGLES.to(torch.complex64)), "x", "torch.complex64")
    case(f"{name}-x-rank1", lambda call=call: call(ANGLES[0]), "x", "(B, n) = (B, 8)", "(8,)")
    case(f"{name}-x-rank3", lambda call=call: call(ANGLES[None]), "x", "(B, n)", "(1, 3, 8)")
    case(f"{name}-x-n-mismatch", lambda call=call: call(ANGLES[:, :7]), "x", "(B, 8)", "codebook", "(3, 7)")
    case(f"{name}-x-nan", lambda call=call: call(with_value(ANGLES)), "x", "finite")
    case(f"{name}-x-inf", lambda call=call: call(with_value(ANGLES, INF)), "x", "finite")
    case(f"{name}-codebook-list", lambda call=call: call(codebook=[[0.5] * 8]), "codebook", "torch.Tensor")
    case(f"{name}-codebook-int", lambda call=call: call(codebook=CODEBOOK.long()), "codebook", "torch.int64")
    case(f"{name}-codebook-rank1", lambda call=call: call(codebook=CODEBOOK[0]), "codebook", "(C, n)", "(8,)")
    case(f"{name}-codebook-C0", lambda call=call: call(codebook=CODEBOOK[:0]), "codebook", "C, n >= 1",
         "(0, 8)")
    case(f"{name}-codebook-n0", lambda call=call: call(ANGLES[:, :0], CODEBOOK[:, :0]), "codebook", "(5, 0)")
    case(f"{name}-codebook-nan", lambda call=call: call(codebook=with_value(CODEBOOK)), "codebook", "finite")
for label, scale, word in (("nan", NAN, "finite"), ("inf", INF, "finite"), ("str", "2", "str"),
                           ("vector", torch.ones(3), "Tensor")):
    case(f"similarity_logits-scale-{label}",
         lambda scale=scale: vsa_models.similarity_logits(ANGLES, CODEBOOK, scale),
         "scale", word)
sl = vsa_models.similarity_loss
case("similarity_loss-x-B0", lambda: sl(ANGLES[:0], CODEBOOK, LABELS[:0]), "x", "B >= 1", "(0, 8)")
case("similarity_loss-target-list", lambda: sl(ANGLES, CODEBOOK, [0, 4, 2]), "target", "torch.Tensor", "list")
case("similarity_loss-target-float", lambda: sl(ANGLES, CODEBOOK, LABELS.float()), "target", "torch.float32")
case("similarity_loss-target-shape", lambda: sl(ANGLES, CODEBOOK, LABELS[:2]), "target", "(B,) = (3,)",
     "(2,)")
case("similarity_loss-target-too-large", lambda: sl(ANGLES, CODEBOOK, torch.tensor([0, 5, 1])), "target",
     "[0, 4]", "5")
case("similarity_loss-target-negative", lambda: sl(ANGLES, CODEBOOK, torch.tensor([0, -1, 1])), "target",
     "[0, 4]", "-1")


# ------------------------------------------------------------------ macro_auroc
# The review's example: labels outside [0, C) silently counted as "no class" (-3 gave 0.933 for a
# perfect ranking), labels all out of range gave nan with a warning from sklearn.
SIMS = torch.tensor([[.9, .05, .05], [.8, .1, .1], [.1, .8, .1], [.2, .7, .1], [.1, .1, .8], [.1, .2, .7]])
CLASSES = torch.tensor([0, 0, 1, 1, 2, 2])
au = L.macro_auroc
case("macro_auroc-labels-negative", lambda: au(SIMS, torch.tensor([-3, 0, 1, 1, 2, 2])), "labels", "[0, 2]",
     "-3")
case("macro_auroc-labels-too-large", lambda: au(SIMS, torch.tensor([0, 0, 1, 1, 2, 10**6])), "labels",
     "[0, 2]", str(10**6))
case("macro_auroc-labels-all-out-of-range", lambda: au(SIMS, torch.full((6,), 7)), "labels", "7")
case("macro_auroc-labels-float", lambda: au(SIMS, CLASSES.float()), "labels", "integer", "torch.float32")
case("macro_auroc-labels-list", lambda: au(SIMS, CLASSES.tolist()), "labels", "torch.Tensor", "list")
case("macro_auroc-labels-shape", lambda: au(SIMS, CLASSES[:4]), "labels", "(6,)", "(4,)")
case("macro_auroc-labels-class-missing", lambda: au(SIMS, torch.tensor([0, 0, 1, 1, 1, 1])), "labels",
     "every class", "2")
case("macro_auroc-similarities-list", lambda: au(SIMS.tolist(), CLASSES), "similarities", "torch.Tensor")
case("macro_auroc-similarities-int", lambda: au(SIMS.long(), CLASSES), "similarities", "torch.int64")
case("macro_auroc-similarities-rank1", lambda: au(SIMS[:, 0], CLASSES), "similarities", "(N, C)", "(6,)")
case("macro_auroc-similarities-one-class", lambda: au(SIMS[:, :1], CLASSES * 0), "similarities", "C >= 2",
     "(6, 1)")
case("macro_auroc-similarities-empty", lambda: au(SIMS[:0], CLASSES[:0]), "similarities", "N >= 1", "(0, 3)")
case("macro_auroc-similarities-nan", lambda: au(with_value(SIMS), CLASSES), "similarities", "finite")
case("macro_auroc-similarities-complex", lambda: au(SIMS.to(torch.complex64), CLASSES), "similarities",
     "complex64")


# ------------------------------------------------------------------ chunked_cross_entropy

H = floats(4, 3)  # hidden states (N, D)
W = floats(5, 3, seed=5)  # the output layer (V, D)
cce = L.chunked_cross_entropy
case("chunked_cross_entropy-h-list", lambda: cce([[0.0, 1.0, 2.0]], W, Y[:1]), "h", "torch.Tensor", "list")
case("chunked_cross_entropy-h-rank3", lambda: cce(H[None], W, Y), "h", "(N, D)", "(1, 4, 3)")
case("chunked_cross_entropy-h-int", lambda: cce(H.long(), W, Y), "h", "floating-point", "torch.int64")
case("chunked_cross_entropy-h-empty", lambda: cce(H[:0], W, Y[:0]), "h", "not be empty", "(0, 3)")
case("chunked_cross_entropy-h-nan", lambda: cce(with_value(H), W, Y), "h", "finite", "NaN")
case("chunked_cross_entropy-weight-D", lambda: cce(H, W[:, :2], Y), "weight", "(V, D) with D = 3", "(5, 2)")
case("chunked_cross_entropy-weight-dtype", lambda: cce(H, W.double(), Y), "weight", "torch.float32",
     "torch.float64")
case("chunked_cross_entropy-weight-inf", lambda: cce(H, with_value(W, INF), Y), "weight", "finite", "inf")
case("chunked_cross_entropy-target-float", lambda: cce(H, W, Y.float()), "target", "integer", "torch.float32")
case("chunked_cross_entropy-target-N", lambda: cce(H, W, Y[:3]), "target", "(N,) with N = 4", "(3,)")
case("chunked_cross_entropy-target-too-large", lambda: cce(H, W, torch.tensor([0, 1, 5, 2])), "target",
     "[0, 4]", "5")
case("chunked_cross_entropy-target-not-ignored", lambda: cce(H, W, torch.tensor([0, -100, 4, 2]),
                                                             ignore_index=-1), "target", "-100")
case("chunked_cross_entropy-chunk_size-0", lambda: cce(H, W, Y, chunk_size=0), "chunk_size", ">= 1", "0")
case("chunked_cross_entropy-chunk_size-float", lambda: cce(H, W, Y, chunk_size=2.0), "chunk_size", "int",
     "float")
case("chunked_cross_entropy-ignore_index-float", lambda: cce(H, W, Y, ignore_index=-1.0), "ignore_index",
     "int", "float")

# ------------------------------------------------------------------ AdaptiveSoftmax

ASM = L.AdaptiveSoftmax(3, 5, [2], div_value=2.0)
case("AdaptiveSoftmax-in_features-0", lambda: L.AdaptiveSoftmax(0, 5, [2], div_value=2.0), "in_features",
     ">= 1", "0")
case("AdaptiveSoftmax-num_classes-1", lambda: L.AdaptiveSoftmax(3, 1, [2], div_value=2.0), "num_classes",
     ">= 2", "1")
case("AdaptiveSoftmax-cutoffs-int", lambda: L.AdaptiveSoftmax(3, 5, 2), "cutoffs", "list", "int")
case("AdaptiveSoftmax-cutoffs-empty", lambda: L.AdaptiveSoftmax(3, 5, []), "cutoffs", "at least one", "[]")
case("AdaptiveSoftmax-cutoffs-float", lambda: L.AdaptiveSoftmax(3, 5, [2.0]), "cutoffs[0]", "int", "float")
case("AdaptiveSoftmax-cutoffs-0", lambda: L.AdaptiveSoftmax(3, 5, [0]), "cutoffs[0]", ">= 1", "0")
case("AdaptiveSoftmax-cutoffs-order", lambda: L.AdaptiveSoftmax(8, 9, [4, 2]), "cutoffs", "increasing",
     "[4, 2]")
case("AdaptiveSoftmax-cutoffs-V", lambda: L.AdaptiveSoftmax(3, 5, [5]), "cutoffs", "num_classes - 1 = 4",
     "[5]")
case("AdaptiveSoftmax-div_value-small", lambda: L.AdaptiveSoftmax(3, 5, [2], div_value=0.5), "div_value",
     ">= 1.0", "0.5")
case("AdaptiveSoftmax-too-narrow", lambda: L.AdaptiveSoftmax(3, 9, [2, 4], div_value=2.0),
     "in_features // div_value**2", ">= 1", "3 // 2.0**2")
case("AdaptiveSoftmax-h-rank3", lambda: ASM(H[None], Y), "h", "(N, 3)", "(1, 4, 3)")
case("AdaptiveSoftmax-h-int", lambda: ASM(H.long(), Y), "h", "floating-point", "torch.int64")
case("AdaptiveSoftmax-h-dtype", lambda: ASM(H.double(), Y), "h", "torch.float32", "torch.float64")
case("AdaptiveSoftmax-target-float", lambda: ASM(H, Y.float()), "target", "integer", "torch.float32")
case("AdaptiveSoftmax-target-uint8", lambda: ASM(H, Y.to(torch.uint8)), "target", "int64", "torch.uint8")
case("AdaptiveSoftmax-target-N", lambda: ASM(H, Y[:3]), "target", "(N,) with N = 4", "(3,)")
case("AdaptiveSoftmax-target-too-large", lambda: ASM(H, torch.tensor([0, 1, 5, 2])), "target", "[0, 4]",
     "5")
case("AdaptiveSoftmax-log_prob-h", lambda: ASM.log_prob(H[:, :2]), "h", "(N, 3)", "(4, 2)")


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)


def test_case_count_is_written_at_the_top():
    with open(__file__, encoding="utf-8") as f:
        assert f"# Cases: {len(ERRORS)} bad inputs" in f.read()


# ------------------------------------------------------------------ legal edge inputs


def finite(*tensors):
    return all(bool(torch.isfinite(t).all()) for t in tensors)


@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_ignored_rows_of_minus_inf_give_zero_loss_and_zero_gradient(dtype, smoothing):
    target = torch.tensor([0, -100, 2, -100])
    z = Z.to(dtype).index_fill(0, torch.tensor([1]), -INF).requires_grad_()
    loss = ce(z, target, label_smoothing=smoothing, ignore_index=-100)
    kept = ce(Z.to(dtype)[[0, 2]], target[[0, 2]], label_smoothing=smoothing)
    assert torch.equal(loss, kept)  # the ignored rows contribute exactly nothing
    loss.backward()
    assert finite(z.grad) and torch.equal(z.grad[[1, 3]], torch.zeros(2, 5, dtype=dtype))


def test_masked_classes_are_legal():
    z = Z.clone()
    z[:, 3] = -INF  # class 3 masked everywhere; no target is 3
    zg = z.clone().requires_grad_()
    loss = ce(zg, Y)
    loss.backward()
    assert torch.isfinite(loss) and finite(zg.grad) and torch.equal(zg.grad[:, 3], torch.zeros(4))
    assert ce(z, torch.tensor([3, 1, 4, 2])).item() == INF  # the true class masked: probability 0
    assert ce(z, Y, label_smoothing=0.1).item() == INF  # smoothing puts mass on the masked class
    assert torch.equal(L.logsumexp(torch.full((2, 3), -INF)), torch.full((2,), -INF))
    assert L.log_softmax(torch.full((3,), -INF)).isnan().all()  # documented: no distribution


def test_every_position_ignored_is_nan_like_pytorch_with_zero_gradient():
    z = Z.clone().requires_grad_()
    loss = ce(z, torch.full((4,), -100), ignore_index=-100)
    assert loss.isnan() and torch.nn.functional.cross_entropy(Z, torch.full((4,), -100)).isnan()
    loss.backward()
    assert torch.equal(z.grad, torch.zeros(4, 5))


def test_small_integer_target_dtypes_are_accepted():
    expected = ce(Z, Y)
    for dtype in (torch.int32, torch.int16, torch.uint8, torch.int8):
        assert torch.equal(ce(Z, Y.to(dtype)), expected)
        assert torch.equal(L.smooth_labels(Y.to(dtype), 5), L.smooth_labels(Y, 5))
        assert torch.equal(vsa_models.similarity_loss(ANGLES, CODEBOOK, LABELS.to(dtype)),
                           vsa_models.similarity_loss(ANGLES, CODEBOOK, LABELS))
    assert L.expected_calibration_error(P, Y.to(torch.uint8)) == L.expected_calibration_error(P, Y)


def test_macro_auroc_legal_inputs():
    assert L.macro_auroc(SIMS, CLASSES) == 1.0
    assert L.macro_auroc(SIMS.double(), CLASSES.to(torch.uint8)) == 1.0  # any integer dtype, float64
    # two classes: class 0 ranked perfectly; class 1 wins 7.5 of its 8 pairs (one tie at 0.1)
    assert L.macro_auroc(SIMS[:, :2], torch.tensor([0, 0, 1, 1, 1, 1])) == pytest.approx((1 + 7.5 / 8) / 2)


def test_numpy_numbers_are_accepted():
    assert torch.equal(L.smooth_labels(Y, np.int64(5), np.float64(0.1)), L.smooth_labels(Y, 5, 0.1))
    assert torch.equal(ce(Z, Y, np.float64(0.1), ignore_index=np.int64(-100)),
                       ce(Z, Y, 0.1, ignore_index=-100))
    assert torch.equal(L.logsumexp(Z, np.float32(2.0)), L.logsumexp(Z, 2.0))
    assert L.calibration_bins(P, Y, np.int64(4))[2].shape == (4,)
    assert L.perplexity(np.float64(1.0), base=np.int64(2)) == 2.0


def test_perplexity_keeps_the_dtype_and_overflows_to_inf():
    nll = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert L.perplexity(nll).dtype == torch.float64
    assert L.perplexity(nll.float()).dtype == torch.float32
    assert L.perplexity(nll.half()).dtype == torch.float32
    assert L.perplexity(1e6) == math.inf == L.perplexity(torch.tensor(1e6)).item()
    assert L.perplexity(INF) == math.inf
    assert L.perplexity(0) == 1.0


def test_empty_batches_of_elementwise_functions_give_empty_results():
    assert L.logsumexp(torch.zeros(0, 5)).shape == (0,)
    assert L.log_softmax(torch.zeros(0, 5)).shape == (0, 5)
    assert L.smooth_labels(Y[:0], 5).shape == (0, 5)
    assert L.entropy(torch.zeros(0, 5)).shape == (0,)
    assert L.kl_divergence(torch.zeros(0, 5), torch.zeros(0, 5)).shape == (0,)
    assert vsa_models.similarity_logits(ANGLES[:0], CODEBOOK).shape == (0, 5)


def test_probabilities_tolerate_rounding_in_their_dtype():
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        p = torch.softmax(floats(3, 50, dtype=torch.float64), -1).to(dtype)
        assert finite(L.entropy(p).float())
        assert 0 <= L.expected_calibration_error(p, torch.tensor([0, 1, 2])) <= 1
    assert finite(L.entropy(torch.tensor([1.0 + 5e-4, 0.0])))  # inside the 1e-3 tolerance


def test_calibration_and_the_diagram_agree():
    ece = L.expected_calibration_error(P, Y, 5)
    ax = plot.reliability_diagram(P, Y, 5, title="toy")
    assert any(f"ECE = {ece:.3f}" in t.get_text() for t in ax.get_legend().get_texts())
    assert 0 <= ece <= 1


def test_similarity_edges():
    assert torch.equal(vsa_models.similarity_logits(ANGLES, CODEBOOK, 0), torch.zeros(3, 5))  # scale 0: legal
    flipped = vsa_models.similarity_logits(ANGLES, CODEBOOK, -1.0)
    assert torch.equal(flipped, -vsa_models.similarity_logits(ANGLES, CODEBOOK))
    # x may leave [-1, 1]: the cosine is periodic
    wrapped = vsa_models.similarity_loss(ANGLES + 2, CODEBOOK, LABELS)
    assert abs(wrapped.item() - vsa_models.similarity_loss(ANGLES, CODEBOOK, LABELS).item()) < 1e-5
    assert vsa_models.similarity_logits(ANGLES, CODEBOOK.double()).dtype == torch.float64


def test_value_checks_pass_on_meta():
    meta = torch.device("meta")
    assert ce(Z.to(meta), Y.to(meta), ignore_index=-100).device == meta
    assert L.entropy(P.to(meta)).device == meta
    assert L.logsumexp(Z.to(meta)).device == meta
    assert L.chunked_cross_entropy(floats(4, 3).to(meta), floats(5, 3).to(meta), Y.to(meta),
                                   chunk_size=3, ignore_index=-1).device == meta
    assert L.perplexity(torch.ones(3, device=meta)).device == meta
    assert vsa_models.similarity_loss(ANGLES.to(meta), CODEBOOK.to(meta), LABELS.to(meta)).device == meta
