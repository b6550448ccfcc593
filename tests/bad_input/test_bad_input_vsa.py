"""Bad input to seqbook.vsa: every public callable refuses it clearly, or handles a legal edge.

Each ``ERRORS`` case must end in a ValueError/TypeError raised by seqbook whose message holds the
words listed (the argument's name and the expected or actual value, shape or dtype). Each edge case
below them is a legal input whose result is checked.
"""

import math

import numpy as np
import pytest
import torch
from tolerance import approx, assert_close

from seqbook import molecules, vsa, vsa_family, vsa_models
from seqbook.vsa import CrossAttentionBlock, PhasorLinear, PhasorMLP, ResidualBlock, SelfAttentionBlock
from seqbook.vsa_models import Codebook, SymbolProjection, VSAAttentionClassifier, VSAResNet
from tests.badinput import assert_clear_error, table

NAN, INF = float("nan"), float("inf")


def sym(*shape, dtype=torch.float32, seed=0):
    """Random symbols of ``shape`` (..., D), angles in [-1, 1); consumes no global random numbers."""
    g = torch.Generator().manual_seed(seed)
    return (2 * torch.rand(shape, generator=g, dtype=dtype) - 1).contiguous()


def ph(*shape, dtype=torch.float32, seed=0):
    """Unit phasors exp(i pi x) of ``shape``."""
    return vsa.to_phasor(sym(*shape, dtype=dtype, seed=seed))


def with_nan(x, value=NAN):
    x = x.clone()
    x.view(-1)[0] = value
    return x


A, B = sym(2, 8), sym(2, 8, seed=1)
Q, K, V = sym(2, 8), sym(4, 8, seed=1), sym(4, 8, seed=2)
ZA, ZB = ph(2, 8), ph(2, 8, seed=1)
ZQ, ZK, ZV = ph(2, 8), ph(4, 8, seed=1), ph(4, 8, seed=2)
X3 = sym(2, 3, 8)  # (B, T, D) for the blocks
IMG = torch.rand(2, 3, 4, generator=torch.Generator().manual_seed(3))  # (B, rows, cols)

ERRORS, case = table()


# ------------------------------------------------------------------ wrap, to_complex, from_complex

case("wrap-x-list", lambda: vsa.wrap([0.5]), "x", "torch.Tensor", "list")
case("wrap-x-int", lambda: vsa.wrap(torch.tensor([1, 3])), "x", "floating-point", "torch.int64")
case("wrap-x-complex", lambda: vsa.wrap(ZA), "x", "complex64")
case("wrap-x-nan", lambda: vsa.wrap(with_nan(A)), "x", "finite")
case("wrap-x-inf", lambda: vsa.wrap(with_nan(A, INF)), "x", "finite")

case("to_complex-x-list", lambda: vsa.to_complex([0.5]), "x", "torch.Tensor")
case("to_complex-x-int", lambda: vsa.to_complex(torch.tensor([1, 0])), "x", "torch.int64")
case("to_complex-x-rank0", lambda: vsa.to_complex(torch.tensor(0.5)), "x", "(..., D)", "()")
case("to_complex-x-D0", lambda: vsa.to_complex(torch.zeros(2, 0)), "x", "D >= 1", "(2, 0)")
case("to_complex-x-float16", lambda: vsa.to_complex(A.half()), "x", "float32 or float64", "torch.float16")
case("to_complex-x-bfloat16", lambda: vsa.to_complex(A.bfloat16()), "x", "torch.bfloat16")
case("to_complex-x-nan", lambda: vsa.to_complex(with_nan(A)), "x", "finite")

case("from_complex-z-real", lambda: vsa.from_complex(A), "z", "complex tensor", "torch.float32")
case("from_complex-z-list", lambda: vsa.from_complex([1j]), "z", "torch.Tensor")
case("from_complex-z-complex32", lambda: vsa.from_complex(torch.zeros(3, dtype=torch.complex32)),
     "z", "complex64 or complex128", "torch.complex32")

# ------------------------------------------------------------------ random_symbols

case("random_symbols-n-0", lambda: vsa.random_symbols(0, 4), "n", "int >= 1", "0")
case("random_symbols-n-negative", lambda: vsa.random_symbols(-3, 4), "n", "int >= 1", "-3")
case("random_symbols-n-float", lambda: vsa.random_symbols(2.5, 4), "n", "int", "2.5")
case("random_symbols-n-bool", lambda: vsa.random_symbols(True, 4), "n", "bool")
case("random_symbols-dim-0", lambda: vsa.random_symbols(3, 0), "dim", "int >= 1", "0")
case("random_symbols-dim-str", lambda: vsa.random_symbols(3, "4"), "dim", "str")
case("random_symbols-generator-int", lambda: vsa.random_symbols(3, 4, generator=0), "generator", "int")
case("random_symbols-dtype-int", lambda: vsa.random_symbols(3, 4, dtype=torch.int64), "dtype", "torch.int64")
case("random_symbols-dtype-str", lambda: vsa.random_symbols(3, 4, dtype="float32"), "dtype", "float32")
case("random_symbols-device-bad", lambda: vsa.random_symbols(3, 4, device="nowhere"), "device", "nowhere")

# ------------------------------------------------------------------ similarity

case("similarity-a-list", lambda: vsa.similarity([0.5], B), "a", "torch.Tensor")
case("similarity-a-int", lambda: vsa.similarity(torch.zeros(2, 8, dtype=torch.long), B), "a", "torch.int64")
case("similarity-b-complex", lambda: vsa.similarity(A, ZB), "b", "complex64")
case("similarity-a-rank0", lambda: vsa.similarity(torch.tensor(0.5), B), "a", "(..., D)", "()")
case("similarity-pairwise-a-rank1", lambda: vsa.similarity(A[0], B, pairwise=True),
     "a", "(..., ?, D)", "(8,)")
case("similarity-D-mismatch", lambda: vsa.similarity(A, B[:, :7]),
     "same symbol dimension D", "(2, 8)", "(2, 7)")
case("similarity-a-D0", lambda: vsa.similarity(torch.zeros(2, 0), torch.zeros(2, 0)), "a", "D >= 1", "(2, 0)")
case("similarity-pairwise-D0", lambda: vsa.similarity(torch.zeros(2, 0), torch.zeros(3, 0), pairwise=True),
     "a", "D >= 1")
case("similarity-batch-mismatch", lambda: vsa.similarity(A, sym(3, 8)),
     "leading dims of a and b", "(2,)", "(3,)")
case("similarity-pairwise-batch-mismatch", lambda: vsa.similarity(sym(2, 3, 8), sym(4, 5, 8), pairwise=True),
     "leading dims of a and b", "(2,)", "(4,)")
case("similarity-pairwise-dtype-mismatch", lambda: vsa.similarity(A, B.double(), pairwise=True),
     "a and b", "same dtype", "torch.float64")
case("similarity-a-nan", lambda: vsa.similarity(with_nan(A), B), "a", "[-1, 1]", "nan")
case("similarity-b-inf", lambda: vsa.similarity(A, with_nan(B, INF)), "b", "[-1, 1]", "inf")
case("similarity-a-radians", lambda: vsa.similarity(A * math.pi, B), "a", "[-1, 1]")
case("similarity-pairwise-str", lambda: vsa.similarity(A, B, pairwise="yes"), "pairwise", "bool", "str")

# ------------------------------------------------------------------ bundle

case("bundle-symbols-list", lambda: vsa.bundle([[0.5]]), "symbols", "torch.Tensor")
case("bundle-symbols-rank1", lambda: vsa.bundle(A[0]), "symbols", "(..., ?, D)", "(8,)")
case("bundle-symbols-int", lambda: vsa.bundle(torch.zeros(2, 3, dtype=torch.long)), "symbols", "torch.int64")
case("bundle-symbols-D0", lambda: vsa.bundle(torch.zeros(3, 0)), "symbols", "D >= 1", "(3, 0)")
case("bundle-empty-set", lambda: vsa.bundle(torch.zeros(0, 4)), "empty set", "(0, 4)")
case("bundle-dim-last", lambda: vsa.bundle(A, dim=-1), "dim must name a set dimension", "dim=-1")
case("bundle-dim-out-of-range", lambda: vsa.bundle(A, dim=5), "dim", "dim=5")
case("bundle-dim-float", lambda: vsa.bundle(A, dim=0.0), "dim", "int", "float")
case("bundle-dim-bool", lambda: vsa.bundle(A, dim=False), "dim", "bool")
case("bundle-symbols-nan", lambda: vsa.bundle(with_nan(A)), "symbols", "[-1, 1]", "nan")

# ------------------------------------------------------------------ bind, unbind, fractional_power

case("bind-a-list", lambda: vsa.bind([0.5], B), "a", "torch.Tensor")
case("bind-b-int", lambda: vsa.bind(A, torch.zeros(2, 8, dtype=torch.long)), "b", "torch.int64")
case("bind-a-complex", lambda: vsa.bind(ZA, B), "a", "complex64")
case("bind-a-rank0", lambda: vsa.bind(torch.tensor(0.5), B), "a", "(..., D)", "()")
case("bind-D-mismatch", lambda: vsa.bind(A, B[:, :7]), "same symbol dimension", "(2, 8)", "(2, 7)")
case("bind-D0", lambda: vsa.bind(torch.zeros(2, 0), torch.zeros(2, 0)), "a", "D >= 1")
case("bind-batch-mismatch", lambda: vsa.bind(A, sym(3, 8)), "leading dims of a and b", "(2,)", "(3,)")
case("bind-b-out-of-range", lambda: vsa.bind(A, torch.full_like(A, 1.5)), "b", "[-1, 1]", "1.5")
case("bind-a-nan", lambda: vsa.bind(with_nan(A), B), "a", "[-1, 1]", "nan")
case("bind-power-nan", lambda: vsa.bind(A, B, power=NAN), "power must be finite", "nan")
case("bind-power-inf-tensor", lambda: vsa.bind(A, B, power=torch.tensor([INF])), "power must be finite")
case("bind-power-str", lambda: vsa.bind(A, B, power="1"), "power", "str")
case("bind-power-bool", lambda: vsa.bind(A, B, power=True), "power", "bool")
case("bind-power-complex", lambda: vsa.bind(A, B, power=torch.tensor([1j])), "power", "torch.complex64")
case("bind-power-shape", lambda: vsa.bind(A, B, power=torch.ones(5)), "a, b and power", "(5,)", "(2, 8)")
case("unbind-D-mismatch", lambda: vsa.unbind(A, B[:, :7]), "same symbol dimension", "(2, 7)")
case("unbind-b-nan", lambda: vsa.unbind(A, with_nan(B)), "b", "[-1, 1]")
case("unbind-batch-mismatch", lambda: vsa.unbind(A, sym(3, 8)), "leading dims of a and b")

case("fractional_power-base-rank2", lambda: vsa.fractional_power(A, 0.5),
     "base must have shape (D,)", "(2, 8)")
case("fractional_power-base-int", lambda: vsa.fractional_power(torch.zeros(8, dtype=torch.long), 0.5),
     "base", "torch.int64")
case("fractional_power-base-D0", lambda: vsa.fractional_power(torch.zeros(0), 0.5), "base", "D >= 1", "(0,)")
case("fractional_power-base-out-of-range", lambda: vsa.fractional_power(A[0] * 4, 0.5), "base", "[-1, 1]")
case("fractional_power-x-nan", lambda: vsa.fractional_power(A[0], torch.tensor([0.5, NAN])),
     "x must be finite")
case("fractional_power-x-inf", lambda: vsa.fractional_power(A[0], INF), "x must be finite")
case("fractional_power-x-str", lambda: vsa.fractional_power(A[0], "a"), "x", "real number", "str")
case("fractional_power-x-complex", lambda: vsa.fractional_power(A[0], 1j), "x", "real number", "complex")
case("fractional_power-x-bool", lambda: vsa.fractional_power(A[0], True), "x", "real number", "True")

# ------------------------------------------------------------------ generalized_bundle

case("generalized_bundle-a-list", lambda: vsa.generalized_bundle([[0.5]]), "a", "torch.Tensor")
case("generalized_bundle-a-rank1", lambda: vsa.generalized_bundle(A[0]), "a", "(..., ?, D)", "(8,)")
case("generalized_bundle-a-int", lambda: vsa.generalized_bundle(torch.zeros(2, 3, dtype=torch.long)),
     "a", "torch.int64")
case("generalized_bundle-a-nan", lambda: vsa.generalized_bundle(with_nan(A)), "a", "finite")
case("generalized_bundle-a-empty-set",
     lambda: vsa.generalized_bundle(torch.zeros(0, 8), w_r=torch.ones(1, 0)),
     "empty set", "(0, 8)")
case("generalized_bundle-a-D0", lambda: vsa.generalized_bundle(torch.zeros(2, 0)), "a", "D >= 1")
case("generalized_bundle-w_r-shape", lambda: vsa.generalized_bundle(A, w_r=torch.ones(1, 5)),
     "w_r must have shape (R, 2)", "(1, 5)")
case("generalized_bundle-w_r-R0", lambda: vsa.generalized_bundle(A, w_r=torch.ones(0, 2)),
     "w_r", "R >= 1", "(0, 2)")
case("generalized_bundle-w_r-list", lambda: vsa.generalized_bundle(A, w_r=[[1.0, 1.0]]),
     "w_r", "torch.Tensor")
case("generalized_bundle-w_r-float64",
     lambda: vsa.generalized_bundle(A, w_r=torch.ones(1, 2, dtype=torch.float64)),
     "w_r", "torch.float64", "torch.float32")
case("generalized_bundle-w_p-shape", lambda: vsa.generalized_bundle(A, w_p=torch.zeros(7, 3)),
     "w_p must have shape (8, P)", "(7, 3)")
case("generalized_bundle-w_p-rank3", lambda: vsa.generalized_bundle(A, w_p=torch.zeros(1, 8, 3)),
     "w_p must have shape (8, P)", "(1, 8, 3)")
case("generalized_bundle-w_p-P0", lambda: vsa.generalized_bundle(A, w_p=torch.zeros(8, 0)), "w_p", "P >= 1")
case("generalized_bundle-w_p-nan", lambda: vsa.generalized_bundle(A, w_p=with_nan(torch.zeros(8, 3))),
     "w_p", "finite")
case("generalized_bundle-bias-str", lambda: vsa.generalized_bundle(A, bias="1"), "bias", "str")
case("generalized_bundle-bias-bool", lambda: vsa.generalized_bundle(A, bias=True), "bias", "bool")
case("generalized_bundle-bias-bool-tensor", lambda: vsa.generalized_bundle(A, bias=torch.tensor(True)),
     "bias", "torch.bool")
case("generalized_bundle-bias-nan", lambda: vsa.generalized_bundle(A, bias=NAN), "bias", "finite")
case("generalized_bundle-bias-complex-inf", lambda: vsa.generalized_bundle(A, bias=complex(1, INF)),
     "bias", "finite")
case("generalized_bundle-bias-shape",
     lambda: vsa.generalized_bundle(A, w_p=torch.zeros(8, 3), bias=torch.ones(5)),
     "bias", "(5,)", "(2, 3)")

# ------------------------------------------------------------------ PhasorLinear, PhasorMLP, ResidualBlock

case("PhasorLinear-in_features-0", lambda: PhasorLinear(0, 4), "in_features", "int >= 1", "0")
case("PhasorLinear-in_features-negative", lambda: PhasorLinear(-2, 4), "in_features", "-2")
case("PhasorLinear-in_features-float", lambda: PhasorLinear(8.0, 4), "in_features", "int", "float")
case("PhasorLinear-in_features-bool", lambda: PhasorLinear(True, 4), "in_features", "bool")
case("PhasorLinear-out_features-0", lambda: PhasorLinear(8, 0), "out_features", "int >= 1", "0")
case("PhasorLinear-out_features-str", lambda: PhasorLinear(8, "4"), "out_features", "str")
case("PhasorLinear-bias-str", lambda: PhasorLinear(8, 4, bias="yes"), "bias", "bool", "str")
case("PhasorLinear-bias_init-str", lambda: PhasorLinear(8, 4, bias_init="1"), "bias_init", "str")
case("PhasorLinear-bias_init-bool", lambda: PhasorLinear(8, 4, bias_init=True), "bias_init", "bool")
case("PhasorLinear-bias_init-nan", lambda: PhasorLinear(8, 4, bias_init=complex(NAN, 0)),
     "bias_init", "finite")
case("PhasorLinear-init_scale-negative", lambda: PhasorLinear(8, 4, init_scale=-1.0),
     "init_scale", ">= 0.0", "-1.0")
case("PhasorLinear-init_scale-nan", lambda: PhasorLinear(8, 4, init_scale=NAN), "init_scale", "finite")
case("PhasorLinear-init_scale-inf", lambda: PhasorLinear(8, 4, init_scale=INF), "init_scale", "finite")
case("PhasorLinear-init_scale-str", lambda: PhasorLinear(8, 4, init_scale="1"), "init_scale", "str")

for method in ("forward", "pre_activation"):
    def call(x, method=method):
        layer = PhasorLinear(8, 4)
        return getattr(layer, method)(x)

    case(f"PhasorLinear.{method}-x-list", lambda call=call: call([0.5] * 8), "x", "torch.Tensor", "list")
    case(f"PhasorLinear.{method}-x-int", lambda call=call: call(torch.zeros(2, 8, dtype=torch.long)),
         "x", "floating-point", "torch.int64")
    case(f"PhasorLinear.{method}-x-complex", lambda call=call: call(ZA), "x", "torch.complex64")
    case(f"PhasorLinear.{method}-x-rank0", lambda call=call: call(torch.tensor(0.5)), "x", "(..., 8)", "()")
    case(f"PhasorLinear.{method}-x-last-dim", lambda call=call: call(A[:, :7]),
         "x must have shape (..., 8)", "(2, 7)")
    case(f"PhasorLinear.{method}-x-float64", lambda call=call: call(A.double()),
         "x", "torch.float32", "torch.float64")
    case(f"PhasorLinear.{method}-x-float16", lambda call=call: call(A.half()),
         "x", "torch.float32", "torch.float16")
    case(f"PhasorLinear.{method}-x-meta", lambda call=call: call(A.to("meta")), "x", "device", "meta")

case("PhasorMLP-dim-0", lambda: PhasorMLP(0), "dim", "int >= 1", "0")
case("PhasorMLP-hidden-0", lambda: PhasorMLP(8, d_ff=0), "d_ff", "int >= 1", "0")
case("PhasorMLP-hidden-float", lambda: PhasorMLP(8, d_ff=4.5), "d_ff", "float")
case("PhasorMLP-out_scale-negative", lambda: PhasorMLP(8, out_scale=-1), "out_scale", ">= 0.0")
case("PhasorMLP.forward-x-last-dim", lambda: PhasorMLP(8)(A[:, :7]), "x must have shape (..., 8)", "(2, 7)")
case("PhasorMLP.forward-x-float64", lambda: PhasorMLP(8)(A.double()), "x", "torch.float64")

case("ResidualBlock-dim-0", lambda: ResidualBlock(0), "dim", "int >= 1", "0")
case("ResidualBlock-dim-negative", lambda: ResidualBlock(-8), "dim", "-8")
case("ResidualBlock-hidden-0", lambda: ResidualBlock(8, d_ff=0), "d_ff", "int >= 1", "0")
case("ResidualBlock-skip-str", lambda: ResidualBlock(8, skip="no"), "skip", "bool", "str")
case("ResidualBlock-out_scale-negative", lambda: ResidualBlock(8, out_scale=-0.5), "out_scale", ">= 0.0")
case("ResidualBlock-out_scale-nan", lambda: ResidualBlock(8, out_scale=NAN), "out_scale", "finite")
case("ResidualBlock.forward-x-last-dim", lambda: ResidualBlock(8)(A[:, :7]),
     "x must have shape (..., 8)", "(2, 7)")
case("ResidualBlock.forward-x-rank0", lambda: ResidualBlock(8)(torch.tensor(0.5)), "x", "(..., 8)", "()")
case("ResidualBlock.forward-x-int", lambda: ResidualBlock(8)(torch.zeros(2, 8, dtype=torch.long)),
     "x", "torch.int64")
case("ResidualBlock.forward-x-float64", lambda: ResidualBlock(8)(A.double()), "x", "torch.float64")

# ------------------------------------------------------------------ vsa_attention

case("vsa_attention-q-list", lambda: vsa.vsa_attention([[0.5]], K, V), "q", "torch.Tensor")
case("vsa_attention-q-rank1", lambda: vsa.vsa_attention(Q[0], K, V), "q", "(..., ?, D)", "(8,)")
case("vsa_attention-k-int", lambda: vsa.vsa_attention(Q, torch.zeros(4, 8, dtype=torch.long), V),
     "k", "torch.int64")
case("vsa_attention-v-complex", lambda: vsa.vsa_attention(Q, K, ZV), "v", "complex64")
case("vsa_attention-qk-D-mismatch", lambda: vsa.vsa_attention(Q, K[:, :7], V),
     "q and k", "same symbol dimension")
case("vsa_attention-kv-Tk-mismatch", lambda: vsa.vsa_attention(Q, K, V[:3]),
     "k and v", "same number", "(3, 8)")
case("vsa_attention-q-D0", lambda: vsa.vsa_attention(torch.zeros(2, 0), torch.zeros(4, 0), V), "q", "D >= 1")
case("vsa_attention-v-D0", lambda: vsa.vsa_attention(Q, K, torch.zeros(4, 0)), "v", "D >= 1", "(4, 0)")
case("vsa_attention-batch-mismatch", lambda: vsa.vsa_attention(sym(2, 3, 8), sym(3, 4, 8), sym(3, 4, 8)),
     "leading dims of q, k and v", "(2,)", "(3,)")
case("vsa_attention-dtype-mismatch", lambda: vsa.vsa_attention(Q.double(), K, V), "q, k and v", "same dtype",
     "torch.float64")
case("vsa_attention-v-nan", lambda: vsa.vsa_attention(Q, K, with_nan(V)), "v", "[-1, 1]")
case("vsa_attention-mask-float", lambda: vsa.vsa_attention(Q, K, V, mask=torch.ones(2, 4)),
     "mask must be a bool", "torch.float32")
case("vsa_attention-mask-int64", lambda: vsa.vsa_attention(Q, K, V, mask=torch.ones(2, 4, dtype=torch.long)),
     "mask", "torch.int64")
case("vsa_attention-mask-uint8", lambda: vsa.vsa_attention(Q, K, V, mask=torch.ones(2, 4, dtype=torch.uint8)),
     "mask", "torch.uint8")
case("vsa_attention-mask-list", lambda: vsa.vsa_attention(Q, K, V, mask=[[True] * 4] * 2), "mask", "list")
case("vsa_attention-mask-shape", lambda: vsa.vsa_attention(Q, K, V, mask=torch.ones(3, 5, dtype=torch.bool)),
     "mask must broadcast", "(2, 4)", "(3, 5)")
case("vsa_attention-mask-extra-dims",
     lambda: vsa.vsa_attention(Q, K, V, mask=torch.ones(5, 2, 4, dtype=torch.bool)),
     "mask must broadcast", "(2, 4)", "(5, 2, 4)")
case("vsa_attention-fast-str", lambda: vsa.vsa_attention(Q, K, V, fast="yes"), "fast", "bool")

# ------------------------------------------------------------------ the phasor fast path

case("to_phasor-x-list", lambda: vsa.to_phasor([0.5]), "x", "torch.Tensor")
case("to_phasor-x-int", lambda: vsa.to_phasor(torch.zeros(2, 8, dtype=torch.long)), "x", "torch.int64")
case("to_phasor-x-complex", lambda: vsa.to_phasor(ZA), "x", "real floating-point", "complex64")
case("to_phasor-x-rank0", lambda: vsa.to_phasor(torch.tensor(0.5)), "x", "(..., D)", "()")
case("to_phasor-x-D0", lambda: vsa.to_phasor(torch.zeros(2, 0)), "x", "D >= 1")
case("to_phasor-x-float16", lambda: vsa.to_phasor(A.half()), "x", "float32 or float64", "torch.float16")
case("to_phasor-x-bfloat16", lambda: vsa.to_phasor(A.bfloat16()), "x", "float32 or float64", "torch.bfloat16")
case("to_phasor-x-nan", lambda: vsa.to_phasor(with_nan(A)), "x", "finite")
case("to_phasor-x-inf", lambda: vsa.to_phasor(with_nan(A, -INF)), "x", "finite")

case("from_phasor-z-real", lambda: vsa.from_phasor(A), "z", "complex tensor", "torch.float32")
case("from_phasor-z-list", lambda: vsa.from_phasor([1j]), "z", "torch.Tensor")
case("from_phasor-z-complex32", lambda: vsa.from_phasor(torch.zeros(2, 3, dtype=torch.complex32)),
     "z", "torch.complex32")
case("from_phasor-z-rank0", lambda: vsa.from_phasor(ZA[0, 0]), "z", "(..., D)", "()")
case("from_phasor-z-D0", lambda: vsa.from_phasor(torch.zeros(2, 0, dtype=torch.complex64)), "z", "D >= 1")

for name in ("bind_phasor", "unbind_phasor"):
    fn = getattr(vsa, name)
    case(f"{name}-a-real", lambda fn=fn: fn(A, ZB), "a", "complex tensor of phasors")
    case(f"{name}-b-list", lambda fn=fn: fn(ZA, [1j]), "b", "torch.Tensor")
    case(f"{name}-a-complex32", lambda fn=fn: fn(torch.zeros(2, 8, dtype=torch.complex32), ZB),
         "a", "complex32")
    case(f"{name}-D-mismatch", lambda fn=fn: fn(ZA, ZB[:, :7]), "same symbol dimension", "(2, 8)", "(2, 7)")
    case(f"{name}-batch-mismatch", lambda fn=fn: fn(ZA, ph(3, 8)), "leading dims of a and b", "(2,)", "(3,)")
    case(f"{name}-D0", lambda fn=fn: fn(ZA[:, :0], ZB[:, :0]), "a", "D >= 1")

case("bundle_phasor-z-real", lambda: vsa.bundle_phasor(A), "z", "complex tensor")
case("bundle_phasor-z-rank1", lambda: vsa.bundle_phasor(ZA[0]), "z", "(..., ?, D)", "(8,)")
case("bundle_phasor-z-D0", lambda: vsa.bundle_phasor(ZA[:, :0]), "z", "D >= 1")
case("bundle_phasor-empty-set", lambda: vsa.bundle_phasor(torch.zeros(0, 4, dtype=torch.complex64)),
     "empty set", "(0, 4)")
case("bundle_phasor-dim-last", lambda: vsa.bundle_phasor(ZA, dim=-1), "dim must name a set dimension")
case("bundle_phasor-dim-float", lambda: vsa.bundle_phasor(ZA, dim=1.5), "dim", "float")
case("bundle_phasor-normalize-str", lambda: vsa.bundle_phasor(ZA, normalize="yes"), "normalize", "bool")

case("similarity_phasor-a-real", lambda: vsa.similarity_phasor(A, ZB), "a", "complex tensor of phasors")
case("similarity_phasor-D-mismatch", lambda: vsa.similarity_phasor(ZA, ZB[:, :7]),
     "same symbol dimension", "(2, 7)")
case("similarity_phasor-D0", lambda: vsa.similarity_phasor(ZA[:, :0], ZB[:, :0]), "a", "D >= 1", "(2, 0)")
case("similarity_phasor-pairwise-D0", lambda: vsa.similarity_phasor(ZA[:, :0], ZB[:, :0], pairwise=True),
     "a", "D >= 1")
case("similarity_phasor-pairwise-rank1", lambda: vsa.similarity_phasor(ZA[0], ZB, pairwise=True),
     "a", "(..., ?, D)", "(8,)")
case("similarity_phasor-batch-mismatch", lambda: vsa.similarity_phasor(ZA, ph(3, 8)), "leading dims", "(3,)")
case("similarity_phasor-pairwise-dtype-mismatch",
     lambda: vsa.similarity_phasor(ZA, ph(3, 8, dtype=torch.float64), pairwise=True),
     "same dtype", "torch.complex128")
case("similarity_phasor-pairwise-str", lambda: vsa.similarity_phasor(ZA, ZB, pairwise=1), "pairwise", "int")

case("vsa_attention_phasor-q-real", lambda: vsa.vsa_attention_phasor(Q, ZK, ZV), "q", "complex tensor")
case("vsa_attention_phasor-kv-Tk-mismatch", lambda: vsa.vsa_attention_phasor(ZQ, ZK, ZV[:1]),
     "same number of symbols Tk")
case("vsa_attention_phasor-qk-D-mismatch", lambda: vsa.vsa_attention_phasor(ZQ, ZK[:, :7], ZV), "q and k")
case("vsa_attention_phasor-dtype-mismatch",
     lambda: vsa.vsa_attention_phasor(ZQ, ZK, ph(4, 8, dtype=torch.float64)),
     "same dtype", "torch.complex128")
case("vsa_attention_phasor-batch-mismatch",
     lambda: vsa.vsa_attention_phasor(ph(2, 3, 8), ph(3, 4, 8), ph(3, 4, 8)), "leading dims of q, k and v")
case("vsa_attention_phasor-mask-float", lambda: vsa.vsa_attention_phasor(ZQ, ZK, ZV, mask=torch.ones(2, 4)),
     "mask must be a bool")
case("vsa_attention_phasor-mask-shape",
     lambda: vsa.vsa_attention_phasor(ZQ, ZK, ZV, mask=torch.ones(2, 5, dtype=torch.bool)),
     "mask must broadcast", "(2, 4)", "(2, 5)")
case("vsa_attention_phasor-mask-list", lambda: vsa.vsa_attention_phasor(ZQ, ZK, ZV, mask=[True]),
     "mask", "list")

# ------------------------------------------------------------------ attention blocks

case("SelfAttentionBlock-dim-0", lambda: SelfAttentionBlock(0), "dim", "int >= 1", "0")
case("SelfAttentionBlock-dim-float", lambda: SelfAttentionBlock(8.0), "dim", "float")
case("SelfAttentionBlock-d_ff-0", lambda: SelfAttentionBlock(8, d_ff=0),
     "d_ff", "int >= 1")
case("SelfAttentionBlock-d_ff-negative", lambda: SelfAttentionBlock(8, d_ff=-4),
     "d_ff", "-4")
case("CrossAttentionBlock-dim-0", lambda: CrossAttentionBlock(0), "dim", "int >= 1", "0")
case("CrossAttentionBlock-num_queries-0", lambda: CrossAttentionBlock(8, num_queries=0), "num_queries", "0")
case("CrossAttentionBlock-num_queries-float", lambda: CrossAttentionBlock(8, num_queries=2.0),
     "num_queries", "float")
case("CrossAttentionBlock-d_ff-0", lambda: CrossAttentionBlock(8, d_ff=0),
     "d_ff", "int >= 1")

for cls, q in ((SelfAttentionBlock, None), (CrossAttentionBlock, 2)):
    def block(cls=cls, q=q):
        return cls(8) if q is None else cls(8, num_queries=q)

    n = cls.__name__
    tq = 3 if q is None else q
    case(f"{n}.forward-x-list", lambda block=block: block()([[[0.5] * 8]]), "x", "torch.Tensor")
    case(f"{n}.forward-x-int", lambda block=block: block()(torch.zeros(2, 3, 8, dtype=torch.long)),
         "x", "torch.int64")
    case(f"{n}.forward-x-complex", lambda block=block: block()(vsa.to_phasor(X3)), "x", "torch.complex64")
    case(f"{n}.forward-x-rank2", lambda block=block: block()(X3[0]), "x must have shape (B, T, 8)", "(3, 8)")
    case(f"{n}.forward-x-rank4", lambda block=block: block()(X3[None]),
         "x must have shape (B, T, 8)", "(1, 2, 3, 8)")
    case(f"{n}.forward-x-last-dim", lambda block=block: block()(X3[..., :7]), "x must have shape (B, T, 8)",
         "(2, 3, 7)")
    case(f"{n}.forward-x-float64", lambda block=block: block()(X3.double()),
         "x", "torch.float32", "torch.float64")
    case(f"{n}.forward-x-meta", lambda block=block: block()(X3.to("meta")), "x", "device", "meta")
    case(f"{n}.forward-mask-float", lambda block=block, tq=tq: block()(X3, torch.ones(2, tq, 3)),
         "mask must be a bool", "torch.float32")
    case(f"{n}.forward-mask-int64",
         lambda block=block, tq=tq: block()(X3, torch.ones(2, tq, 3, dtype=torch.long)),
         "mask", "torch.int64")
    case(f"{n}.forward-mask-list", lambda block=block: block()(X3, [[True]]), "mask", "list")
    case(f"{n}.forward-mask-shape",
         lambda block=block: block()(X3, mask=torch.ones(2, 5, 5, dtype=torch.bool)),
         "mask must broadcast", f"(2, {tq}, 3)", "(2, 5, 5)")
    case(f"{n}.forward-mask-batch",
         lambda block=block, tq=tq: block()(X3, torch.ones(3, tq, 3, dtype=torch.bool)),
         "mask must broadcast", f"(2, {tq}, 3)", f"(3, {tq}, 3)")

# ------------------------------------------------------------------ projection, codebook, loss, classifiers

case("SymbolProjection-sigma-0", lambda: SymbolProjection(4, 6, sigma=0.0), "sigma", "> 0.0", "0.0")
case("SymbolProjection-sigma-negative", lambda: SymbolProjection(4, 6, sigma=-3.0), "sigma", "> 0.0", "-3.0")
case("SymbolProjection-sigma-nan", lambda: SymbolProjection(4, 6, sigma=NAN), "sigma", "finite")
case("SymbolProjection-sigma-inf", lambda: SymbolProjection(4, 6, sigma=INF), "sigma", "finite")
case("SymbolProjection-sigma-str", lambda: SymbolProjection(4, 6, sigma="3"), "sigma", "str")
case("SymbolProjection-in_features-0", lambda: SymbolProjection(0, 6), "in_features", "int >= 1")
case("SymbolProjection-dim-0", lambda: SymbolProjection(4, 0), "dim", "int >= 1")
case("SymbolProjection-dim-float", lambda: SymbolProjection(4, 6.0), "dim", "float")
case("SymbolProjection.forward-x-list", lambda: SymbolProjection(4, 6)([1.0] * 4), "x", "torch.Tensor")
case("SymbolProjection.forward-x-int", lambda: SymbolProjection(4, 6)(torch.ones(2, 4, dtype=torch.long)),
     "x", "torch.int64")
case("SymbolProjection.forward-x-last-dim", lambda: SymbolProjection(4, 6)(torch.ones(2, 5)),
     "x must have shape (..., 4)", "(2, 5)")
case("SymbolProjection.forward-x-rank0", lambda: SymbolProjection(4, 6)(torch.tensor(1.0)),
     "x", "(..., 4)", "()")
case("SymbolProjection.forward-x-float64",
     lambda: SymbolProjection(4, 6)(torch.ones(2, 4, dtype=torch.float64)),
     "x", "torch.float64")

case("Codebook-num_classes-0", lambda: Codebook(0, 8), "num_classes", "int >= 1", "0")
case("Codebook-num_classes-float", lambda: Codebook(2.5, 8), "num_classes", "float")
case("Codebook-dim-0", lambda: Codebook(3, 0), "dim", "int >= 1", "0")
case("Codebook.forward-y-last-dim", lambda: Codebook(3, 8)(A[:, :7]), "y must have shape (..., 8)", "(2, 7)")
case("Codebook.forward-y-int", lambda: Codebook(3, 8)(torch.zeros(2, 8, dtype=torch.long)),
     "y", "torch.int64")
case("Codebook.forward-y-float64", lambda: Codebook(3, 8)(A.double()), "y", "torch.float64")
case("Codebook.forward-y-list", lambda: Codebook(3, 8)([0.5] * 8), "y", "torch.Tensor")
case("Codebook.forward-y-rank0", lambda: Codebook(3, 8)(torch.tensor(0.5)), "y", "(..., 8)", "()")

SIMS, LABELS = torch.rand(2, 3), torch.tensor([0, 2])
case("codebook_loss-similarities-list", lambda: vsa_models.codebook_loss([[0.5]], LABELS),
     "similarities", "torch.Tensor")
case("codebook_loss-similarities-rank1", lambda: vsa_models.codebook_loss(SIMS[0], LABELS),
     "similarities", "(B, C)", "(3,)")
case("codebook_loss-similarities-rank3", lambda: vsa_models.codebook_loss(SIMS[None], LABELS),
     "similarities", "(1, 2, 3)")
case("codebook_loss-similarities-int",
     lambda: vsa_models.codebook_loss(torch.ones(2, 3, dtype=torch.long), LABELS),
     "similarities", "floating-point", "torch.int64")
case("codebook_loss-B0",
     lambda: vsa_models.codebook_loss(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long)),
     "similarities", "empty", "(0, 3)")
case("codebook_loss-C0", lambda: vsa_models.codebook_loss(torch.zeros(2, 0), LABELS),
     "similarities", "empty", "(2, 0)")
case("codebook_loss-labels-float", lambda: vsa_models.codebook_loss(SIMS, LABELS.float()),
     "labels", "integer", "float32")
case("codebook_loss-labels-batch", lambda: vsa_models.codebook_loss(SIMS, torch.tensor([0, 1, 2])),
     "labels", "(2,)", "(3,)")
case("codebook_loss-labels-rank2", lambda: vsa_models.codebook_loss(SIMS, LABELS[:, None]),
     "labels", "(2,)", "(2, 1)")
case("codebook_loss-labels-too-big", lambda: vsa_models.codebook_loss(SIMS, torch.tensor([0, 3])),
     "labels", "[0, 2]", "3")
case("codebook_loss-labels-negative", lambda: vsa_models.codebook_loss(SIMS, torch.tensor([0, -1])),
     "labels", "-1")

case("VSAResNet-dim-0", lambda: VSAResNet(0, 1, in_features=12), "dim", "int >= 1")
case("VSAResNet-num_layers-negative", lambda: VSAResNet(8, -1, in_features=12), "num_layers", ">= 0", "-1")
case("VSAResNet-num_layers-float", lambda: VSAResNet(8, 2.5, in_features=12), "num_layers", "float")
case("VSAResNet-skip-str", lambda: VSAResNet(8, 1, skip="yes", in_features=12), "skip", "bool")
case("VSAResNet-in_features-0", lambda: VSAResNet(8, 1, in_features=0), "in_features", "int >= 1")
case("VSAResNet-num_classes-0", lambda: VSAResNet(8, 1, in_features=12, num_classes=0),
     "num_classes", "int >= 1")
case("VSAResNet-hidden-0", lambda: VSAResNet(8, 1, in_features=12, d_ff=0), "d_ff", "int >= 1")
case("VSAResNet-out_scale-negative", lambda: VSAResNet(8, 1, in_features=12, out_scale=-1.0),
     "out_scale", ">= 0.0")
case("VSAResNet.forward-images-list", lambda: VSAResNet(8, 1, in_features=12)([[0.5] * 12]),
     "images", "torch.Tensor")
case("VSAResNet.forward-images-rank1", lambda: VSAResNet(8, 1, in_features=12)(IMG.flatten()[:12]),
     "images", "12 values per image", "(12,)")
case("VSAResNet.forward-images-size", lambda: VSAResNet(8, 1, in_features=12)(IMG[:, :, :3]),
     "images", "12 values per image", "(2, 3, 3)")
case("VSAResNet.forward-images-int",
     lambda: VSAResNet(8, 1, in_features=12)(torch.ones(2, 12, dtype=torch.uint8)),
     "images", "torch.uint8")
case("VSAResNet.forward-images-float64", lambda: VSAResNet(8, 1, in_features=12)(IMG.double()),
     "images", "torch.float64")

case("VSAAttentionClassifier-kind", lambda: VSAAttentionClassifier(8, kind="both"), "kind", "'both'")
case("VSAAttentionClassifier-kind-int", lambda: VSAAttentionClassifier(8, kind=3), "kind", "3")
case("VSAAttentionClassifier-dim-0", lambda: VSAAttentionClassifier(0), "dim", "int >= 1")
case("VSAAttentionClassifier-num_queries-0", lambda: VSAAttentionClassifier(8, "cross", num_queries=0),
     "num_queries", "int >= 1")
case("VSAAttentionClassifier-rows-0", lambda: VSAAttentionClassifier(8, rows=0), "rows", "int >= 1")
case("VSAAttentionClassifier-cols-negative", lambda: VSAAttentionClassifier(8, cols=-1), "cols", "-1")
case("VSAAttentionClassifier-num_classes-0", lambda: VSAAttentionClassifier(8, num_classes=0), "num_classes")
case("VSAAttentionClassifier-d_ff-0", lambda: VSAAttentionClassifier(8, d_ff=0), "d_ff")
for kind in ("self", "cross"):
    def classifier(kind=kind):
        return VSAAttentionClassifier(8, kind, num_queries=2, rows=3, cols=4)

    case(f"VSAAttentionClassifier-{kind}.forward-images-list", lambda c=classifier: c()([[0.5]]),
         "x", "Tensor")
    case(f"VSAAttentionClassifier-{kind}.forward-images-rank2", lambda c=classifier: c()(IMG[0]),
         "x must have shape (B, 3, 4)", "(3, 4)")
    case(f"VSAAttentionClassifier-{kind}.forward-images-rows", lambda c=classifier: c()(IMG[:, :2]),
         "x must have shape (B, 3, 4)", "(2, 2, 4)")
    case(f"VSAAttentionClassifier-{kind}.forward-images-int",
         lambda c=classifier: c()(torch.ones(2, 3, 4, dtype=torch.uint8)), "x", "torch.uint8")
    case(f"VSAAttentionClassifier-{kind}.forward-images-float64", lambda c=classifier: c()(IMG.double()),
         "x", "torch.float64")

    def on_symbols(kind=kind):
        return VSAAttentionClassifier(8, kind, num_queries=2, rows=3, cols=None)

    SYM = torch.zeros(2, 3, 8)
    case(f"VSAAttentionClassifier-{kind}.forward-symbols-dim", lambda c=on_symbols: c()(torch.zeros(2, 3, 4)),
         "x must have shape (B, 3, 8)", "(2, 3, 4)")
    case(f"VSAAttentionClassifier-{kind}.forward-mask-float",
         lambda c=on_symbols, x=SYM: c()(x, torch.ones(2, 3)), "mask", "bool", "torch.float32")
    case(f"VSAAttentionClassifier-{kind}.forward-mask-list",
         lambda c=on_symbols, x=SYM: c()(x, [[True] * 3] * 2), "mask", "bool", "list")
    case(f"VSAAttentionClassifier-{kind}.forward-mask-shape",
         lambda c=on_symbols, x=SYM: c()(x, torch.ones(2, 4, dtype=torch.bool)), "mask", "(2, 3)", "(2, 4)")
case("VSAAttentionClassifier-codebook_sparsity-1", lambda: VSAAttentionClassifier(8, codebook_sparsity=1.0),
     "codebook_sparsity", "1.0")
# codebook_sparsity is named as the caller wrote it (it said "sparsity", the Codebook's name)
case("VSAResNet-codebook_sparsity-negative", lambda: VSAResNet(16, num_layers=1, codebook_sparsity=-0.1),
     "codebook_sparsity", ">= 0", "-0.1")
case("VSAResNet-codebook_sparsity-nan", lambda: VSAResNet(8, 1, in_features=12, codebook_sparsity=NAN),
     "codebook_sparsity", "nan")
case("VSAAttentionClassifier-codebook_sparsity-str",
     lambda: VSAAttentionClassifier(8, codebook_sparsity="0.5"), "codebook_sparsity", "str")
case("build_classifier-codebook_sparsity-str", lambda: vsa_models.build_classifier("resnet", 8,
     codebook_sparsity="0.5"), "codebook_sparsity", "str")
case("VSAAttentionClassifier-fast-str", lambda: VSAAttentionClassifier(8, fast="yes"), "fast", "str")
# build_classifier checks every argument, also those the chosen kind does not use
bc = vsa_models.build_classifier
case("build_classifier-kind", lambda: bc("mlp", 8), "kind", "'resnet'", "'mlp'")
case("build_classifier-kind-None", lambda: bc(None, 8), "kind", "None")
case("build_classifier-self-num_layers-negative", lambda: bc("self", 8, num_layers=-1), "num_layers", "-1")
case("build_classifier-cross-skip-str", lambda: bc("cross", 8, skip="no"), "skip", "str")
case("build_classifier-self-out_scale-nan", lambda: bc("self", 8, out_scale=NAN), "out_scale", "nan")
case("build_classifier-resnet-num_queries-0", lambda: bc("resnet", 8, num_layers=1, num_queries=0),
     "num_queries", "0")
case("build_classifier-resnet-d_ff-0", lambda: bc("resnet", 8, num_layers=1, d_ff=0), "d_ff", "0")
case("build_classifier-embed_dim-float", lambda: bc("self", 8.0), "embed_dim", "float")
# MoleculeEncoder.encode: the molecules and max_bonds checked before anything is encoded
ENCODER = molecules.MoleculeEncoder(3, 2, 8)


class Molecules:
    def __init__(self, atoms, bonds, bond_features):
        self.atoms, self.bonds, self.bond_features = atoms, bonds, bond_features


MOLECULES = Molecules([torch.rand(3, 3)], [torch.tensor([[0, 1], [1, 2]])], [torch.rand(2, 2)])
case("MoleculeEncoder.encode-molecules-list", lambda: ENCODER.encode([1, 2]), "molecules", "list")
case("MoleculeEncoder.encode-molecules-counts", lambda: ENCODER.encode(Molecules(MOLECULES.atoms, [], [])),
     "molecules", "1, 0 and 0")
case("MoleculeEncoder.encode-max_bonds-0", lambda: ENCODER.encode(MOLECULES, 0), "max_bonds", "0")
case("MoleculeEncoder.encode-max_bonds-float", lambda: ENCODER.encode(MOLECULES, 2.5), "max_bonds", "float")
case("MoleculeEncoder.encode-max_bonds-too-small", lambda: ENCODER.encode(MOLECULES, 1), "max_bonds", "2")
case("Codebook-sparsity-negative", lambda: Codebook(3, 8, sparsity=-0.1), "sparsity", "-0.1")
case("Codebook-sparsity-str", lambda: Codebook(3, 8, sparsity="half"), "sparsity", "'half'")


# One error type per mistake (CONTRIBUTING, "One way to check arguments"): phasors (a complex
# tensor) where angles belong, and angles (a real tensor) where phasors belong, are a wrong dtype,
# a TypeError, at every door.
WRONG_KIND = {
    "wrap": lambda: vsa.wrap(ZA),
    "to_complex": lambda: vsa.to_complex(ZA),
    "from_complex": lambda: vsa.from_complex(A),
    "similarity": lambda: vsa.similarity(A, ZB),
    "bundle": lambda: vsa.bundle(ZA[None]),
    "bind": lambda: vsa.bind(ZA, B),
    "unbind": lambda: vsa.unbind(A, ZB),
    "fractional_power": lambda: vsa.fractional_power(ZA[0], 0.5),
    "generalized_bundle": lambda: vsa.generalized_bundle(ZA),
    "vsa_attention": lambda: vsa.vsa_attention(Q, K, ZV),
    "to_phasor": lambda: vsa.to_phasor(ZA),
    "from_phasor": lambda: vsa.from_phasor(A),
    "bind_phasor": lambda: vsa.bind_phasor(A, ZB),
    "unbind_phasor": lambda: vsa.unbind_phasor(ZA, B),
    "bundle_phasor": lambda: vsa.bundle_phasor(A[None]),
    "similarity_phasor": lambda: vsa.similarity_phasor(ZA, B),
    "vsa_attention_phasor": lambda: vsa.vsa_attention_phasor(ZQ, ZK, V),
    "PhasorLinear.forward": lambda: PhasorLinear(8, 4)(ZA),
    "PhasorLinear.pre_activation": lambda: PhasorLinear(8, 4).pre_activation(ZA),
    "PhasorMLP.forward": lambda: PhasorMLP(8)(ZA),
    "ResidualBlock.forward": lambda: ResidualBlock(8)(ZA),
    "SelfAttentionBlock.forward": lambda: SelfAttentionBlock(8)(vsa.to_phasor(X3)),
    "CrossAttentionBlock.forward": lambda: CrossAttentionBlock(8, 2)(vsa.to_phasor(X3)),
    "SymbolProjection.forward": lambda: SymbolProjection(8, 6)(ZA),
    "Codebook.forward": lambda: Codebook(3, 8)(ZA),
    "VSAAttentionClassifier.forward": lambda: VSAAttentionClassifier(8, rows=3, cols=None)(
        vsa.to_phasor(X3)),
    "similarity_logits": lambda: vsa_models.similarity_logits(ZA, B),
    "codebook_loss": lambda: vsa_models.codebook_loss(ZA, LABELS),
}


@pytest.mark.parametrize("fn", WRONG_KIND.values(), ids=WRONG_KIND.keys())
def test_phasors_for_angles_and_angles_for_phasors_are_type_errors(fn):
    assert_clear_error(fn, exc=TypeError)


# ------------------------------------------------------------------ vsa_family: HRR, MAP and BSC

R8 = torch.randn(3, 8, generator=torch.Generator().manual_seed(6))
R7 = torch.randn(3, 7, generator=torch.Generator().manual_seed(7))
B8 = torch.rand(3, 8, generator=torch.Generator().manual_seed(5)) < 0.5
for fname in ("hrr_bind", "hrr_unbind", "map_bind"):
    fn = getattr(vsa_family, fname)
    case(f"{fname}-a-list", lambda fn=fn: fn([1.0, 2.0], R8), "a", "torch.Tensor", "list")
    case(f"{fname}-a-int", lambda fn=fn: fn(R8.long(), R8), "a", "floating-point", "torch.int64")
    case(f"{fname}-b-bool", lambda fn=fn: fn(R8, B8), "b", "floating-point", "torch.bool")
    case(f"{fname}-a-scalar", lambda fn=fn: fn(torch.tensor(1.0), R8), "a", "(..., n)", "scalar")
    case(f"{fname}-n", lambda fn=fn: fn(R8, R7), "same symbol dimension n", "(3, 8)", "(3, 7)")
    case(f"{fname}-broadcast", lambda fn=fn: fn(R8, R8[:2]), "leading dims", "(3,)", "(2,)")
case("bsc_bind-a-float", lambda: vsa_family.bsc_bind(R8, B8), "a", "bool", "torch.float32")
case("bsc_bind-b-list", lambda: vsa_family.bsc_bind(B8, [True]), "b", "torch.Tensor", "list")
case("bsc_bind-n", lambda: vsa_family.bsc_bind(B8, B8[:, :7]), "same symbol dimension n", "(3, 8)",
     "(3, 7)")
case("bsc_bundle-x-float", lambda: vsa_family.bsc_bundle(R8), "x", "bool", "torch.float32")
case("bsc_bundle-x-rank1", lambda: vsa_family.bsc_bundle(B8[0]), "x", "(K, n)", "(8,)")
case("bsc_bundle-x-rank3", lambda: vsa_family.bsc_bundle(B8[None]), "x", "(K, n)", "(1, 3, 8)")
case("bsc_bundle-generator-int", lambda: vsa_family.bsc_bundle(B8, generator=0), "generator", "int")


def test_vsa_family_passes_on_meta():
    meta = torch.device("meta")
    for fn in (vsa_family.hrr_bind, vsa_family.hrr_unbind, vsa_family.map_bind):
        assert fn(R8.to(meta), R8.to(meta)).device == meta
    assert vsa_family.bsc_bind(B8.to(meta), B8.to(meta)).device == meta


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)


# ------------------------------------------------------------------ legal edge inputs


def finite(*tensors):
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def test_numpy_integer_sizes_are_accepted():
    n = np.int64
    assert vsa.random_symbols(n(3), n(4)).shape == (3, 4)
    assert PhasorLinear(n(8), n(4))(A).shape == (2, 4)
    assert PhasorMLP(n(8), n(6))(A).shape == (2, 8)
    assert ResidualBlock(n(8), n(6))(A).shape == (2, 8)
    assert SelfAttentionBlock(n(8), n(6))(X3)[0].shape == (2, 3, 8)
    assert CrossAttentionBlock(n(8), n(2), n(6))(X3)[0].shape == (2, 2, 8)
    assert SymbolProjection(n(4), n(6))(torch.ones(2, 4)).shape == (2, 6)
    assert Codebook(n(3), n(8))(A).shape == (2, 3)
    assert VSAResNet(n(8), n(1), in_features=n(12), num_classes=n(3))(IMG).shape == (2, 3)
    sims, _ = VSAAttentionClassifier(n(8), "cross", n(2), n(3), n(4), n(5), n(6))(IMG)
    assert sims.shape == (2, 5)
    assert torch.equal(vsa.bundle(X3, dim=np.int64(0)), vsa.bundle(X3, dim=0))  # the same computation


def test_wrap_edges():
    assert vsa.wrap(torch.tensor(3.5)).item() == -0.5  # a single angle
    assert vsa.wrap(torch.zeros(0)).shape == (0,)
    assert vsa.wrap(A.double()).dtype == torch.float64


def test_conversion_edges():
    assert vsa.to_complex(torch.zeros(0, 4)).shape == (0, 4)
    assert vsa.to_phasor(torch.zeros(0, 4)).dtype == torch.complex64
    assert vsa.from_complex(torch.tensor(1j)).item() == approx(0.5, torch.float32)  # a single phasor
    zero = vsa.from_phasor(torch.zeros(2, 3, dtype=torch.complex64))  # documented: angle 0
    assert torch.equal(zero, torch.zeros(2, 3))


def test_empty_batches_give_empty_results():
    e = torch.zeros(0, 8)
    assert vsa.similarity(e, e).shape == (0,)
    assert vsa.similarity(e, B, pairwise=True).shape == (0, 2)
    assert vsa.similarity(A, e, pairwise=True).shape == (2, 0)
    assert vsa.bind(e, e).shape == (0, 8)
    assert vsa.bundle(torch.zeros(0, 3, 8)).shape == (0, 8)
    assert vsa.fractional_power(A[0], torch.zeros(0)).shape == (0, 8)
    assert vsa.similarity_phasor(ZA[:0], ZB[:0]).shape == (0,)
    assert vsa.bundle_phasor(torch.zeros(0, 3, 8, dtype=torch.complex64)).shape == (0, 8)
    out, scores = vsa.vsa_attention(torch.zeros(0, 8), K, V)  # Tq = 0
    assert out.shape == (0, 8) and scores.shape == (0, 4)
    assert PhasorLinear(8, 4)(e).shape == (0, 4)
    assert ResidualBlock(8)(e).shape == (0, 8)
    assert SymbolProjection(4, 6)(torch.zeros(0, 4)).shape == (0, 6)
    assert Codebook(3, 8)(e).shape == (0, 3)
    assert SelfAttentionBlock(8)(torch.zeros(0, 3, 8))[0].shape == (0, 3, 8)
    assert CrossAttentionBlock(8, 2)(torch.zeros(0, 3, 8))[0].shape == (0, 2, 8)
    assert VSAResNet(8, 1, in_features=12)(torch.zeros(0, 3, 4)).shape == (0, 10)
    for kind in ("self", "cross"):
        sims, _ = VSAAttentionClassifier(8, kind, num_queries=2, rows=3, cols=4)(torch.zeros(0, 3, 4))
        assert sims.shape == (0, 10)


def test_mixed_float_dtypes_promote_where_torch_does():
    assert vsa.similarity(A, B.double()).dtype == torch.float64  # element-wise: promotes
    assert vsa.bind(A, B.double()).dtype == torch.float64
    assert vsa.similarity_phasor(ZA, ph(2, 8, dtype=torch.float64)).dtype == torch.float64


def test_bind_power_edges():
    power = torch.tensor([0.5, 1.0, 2.0]).view(3, 1, 1)  # broadcasts: one binding per power
    assert vsa.bind(A, B, power=power).shape == (3, 2, 8)
    # the same numbers in another type: the same computation, the same bits
    assert torch.equal(vsa.bind(A, B, power=np.float64(0.5)), vsa.bind(A, B, power=0.5))
    assert torch.equal(vsa.bind(A, B, power=1), vsa.bind(A, B))
    assert torch.equal(vsa.fractional_power(A[0], torch.tensor([1, 2])),
                       vsa.fractional_power(A[0], torch.tensor([1.0, 2.0])))


def test_generalized_bundle_integer_bias_equals_float_bias():
    assert torch.equal(vsa.generalized_bundle(A, bias=1), vsa.generalized_bundle(A, bias=1.0))
    out = vsa.generalized_bundle(A, w_p=torch.zeros(8, 3), bias=torch.tensor([1, 1j, -1j]))
    assert_close(out, torch.tensor([[0.0, 0.5, -0.5]] * 2))  # float32 atan2 of the bias alone


@pytest.mark.parametrize("fast", [False, True], ids=["readable", "fast"])
def test_vsa_attention_fully_masked_row_and_no_keys(fast):
    q, k, v = (sym(3, 8, seed=s).requires_grad_() for s in range(3))
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False
    out, scores = vsa.vsa_attention(q, k, v, mask=mask, fast=fast)
    assert torch.equal(out[1], torch.zeros(8)) and torch.equal(scores[1], torch.zeros(3))
    out.sum().backward()
    assert finite(q.grad, k.grad, v.grad)
    # no keys at all (Tk = 0): every output is the angle 0, finite gradients
    q.grad = None
    out, scores = vsa.vsa_attention(q, torch.zeros(0, 8), torch.zeros(0, 8), fast=fast)
    assert torch.equal(out, torch.zeros(3, 8)) and scores.shape == (3, 0)
    out.sum().backward()
    assert finite(q.grad)


def test_vsa_attention_phasor_fully_masked_row():
    mask = torch.tensor([[True, False, True, True], [False] * 4])
    out, scores = vsa.vsa_attention_phasor(ZQ, ZK, ZV, mask=mask)
    assert torch.equal(out[1], torch.zeros(8, dtype=torch.complex64)) and finite(out.real, out.imag, scores)


@pytest.mark.parametrize("cls", [SelfAttentionBlock, CrossAttentionBlock])
def test_blocks_fully_masked_rows_and_broadcast_masks(cls):
    torch.manual_seed(0)
    block = cls(8) if cls is SelfAttentionBlock else cls(8, num_queries=3)
    x = X3.clone().requires_grad_()
    none = torch.zeros(2, 3, 3, dtype=torch.bool)  # every row masked
    y, scores = block(x, mask=none)
    assert finite(y) and torch.equal(scores, torch.zeros(2, 3, 3))
    y.sum().backward()
    assert finite(x.grad) and all(finite(p.grad) for p in block.parameters() if p.grad is not None)
    causal = torch.ones(3, 3, dtype=torch.bool).tril()  # (Tq, T) broadcasts over the batch
    y1, _ = block(X3, causal)
    y2, _ = block(X3, mask=causal.expand(2, 3, 3))
    assert torch.equal(y1, y2)


def test_blocks_with_no_input_symbols():
    torch.manual_seed(0)
    assert SelfAttentionBlock(8)(torch.zeros(2, 0, 8))[0].shape == (2, 0, 8)
    block = CrossAttentionBlock(8, num_queries=2)
    x = torch.zeros(2, 0, 8, requires_grad=True)
    y, scores = block(x)
    assert y.shape == (2, 2, 8) and scores.shape == (2, 2, 0) and finite(y)
    y.sum().backward()
    assert all(finite(p.grad) for p in block.parameters() if p.grad is not None)


def test_zero_scales_are_legal():
    layer = PhasorLinear(8, 4, init_scale=0)  # zero weights: every output is the bias's angle, 0
    assert torch.equal(layer(A), torch.zeros(2, 4))
    block = ResidualBlock(8, out_scale=0)  # the exact identity up to rounding
    assert_close(block(A), A, n=2)  # float32: x + 0 + 1, then - 1
    assert VSAResNet(8, num_layers=0, in_features=12)(IMG).shape == (2, 10)


def test_small_sigma_still_gives_symbols():
    out = SymbolProjection(4, 6, sigma=1e-3)(torch.randn(5, 4, generator=torch.Generator().manual_seed(0)))
    assert finite(out) and out.min() >= -1 and out.max() < 1


def test_build_classifier_and_encode_edges():
    build = vsa_models.build_classifier
    assert isinstance(build("resnet", 8, 0, np.bool_(False), np.int64(2)), VSAResNet)
    assert isinstance(build("cross", 8, num_layers=0, d_ff=None), VSAAttentionClassifier)
    symbols, mask = ENCODER.encode(MOLECULES, np.int64(3))
    assert symbols.shape == (1, 3, 8) and mask.tolist() == [[True, True, False]]


def test_codebook_edges():
    cb = Codebook(3, 8)
    assert cb(A[0]).shape == (3,)  # one symbol
    loss = vsa_models.codebook_loss(SIMS, LABELS)
    for dtype in (torch.int32, torch.int16, torch.uint8):
        assert torch.equal(vsa_models.codebook_loss(SIMS, LABELS.to(dtype)), loss)


def test_half_precision_where_torch_supports_it():
    """Angles in float16/bfloat16 work on the readable path and vsa_attention(fast=True); phasors
    need float32 or float64 (see the refusals above); PhasorLinear.pre_activation computes its
    complex value in float32 for half-precision layers and under autocast."""
    for dtype in (torch.float16, torch.bfloat16):
        a, b = A.to(dtype), B.to(dtype)
        assert vsa.similarity(a, b).dtype == dtype and vsa.bundle(a[None]).dtype == dtype
        assert vsa.vsa_attention(a, b, b, fast=True)[0].dtype == dtype
        layer = PhasorLinear(8, 4).to(dtype)
        assert layer.pre_activation(a).dtype == torch.complex64
    layer = PhasorLinear(8, 4)
    exact = layer.pre_activation(A)
    with torch.autocast("cpu", torch.bfloat16):
        z = layer.pre_activation(A)
        assert layer(A).shape == (2, 4)
        sims, _ = VSAAttentionClassifier(8, rows=3, cols=4)(IMG)
    assert z.dtype == torch.complex64 and finite(sims)
    # bfloat16 rounding of the inputs of 8-term sums (eps 2^-7; measured 0.005 of |z|): an explicit
    # bound, as the policy's 32 sqrt(n) eps would be 0.7 at bfloat16's eps and pass almost anything
    torch.testing.assert_close(z, exact, atol=0.1, rtol=0.05)


@pytest.mark.parametrize(("flag", "value"), [("--dim", "0"), ("--threads", "-1"), ("--train-size", "-5"),
                                             ("--blocks", "1.5"), ("--queries", "0")])
def test_vsa_train_command_line_refuses_bad_sizes(flag, value, capsys):
    """The command line checks its sizes itself and names the flag (argparse exits with status 2)."""
    from seqbook.vsa_train import main

    with pytest.raises(SystemExit) as info:
        main([flag, value])
    assert info.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err
