"""Bad input to seqbook.hopfield: every public callable refuses it clearly, or handles a legal edge.

Each ``ERRORS`` case must end in a ValueError/TypeError raised by seqbook whose message holds the
words listed (the argument's name and the expected or actual value, shape or dtype); the recall loops
run under a timeout. The legal edge inputs below them are checked for their result.
"""

# Cases: 286 bad inputs (265 calls + 21 recall loops under a timeout), every one a clear error;
# plus 11 tests of legal edge inputs (empty batches, masks, NumPy sizes, dtypes, meta).

import math

import numpy as np
import pytest
import torch

from seqbook import hopfield as hf
from seqbook.hopfield import Hopfield, HopfieldLayer, HopfieldPooling
from tests.badinput import INF, NAN, assert_clear_error, assert_clear_error_in_time, floats, table, with_value


def binary(*shape, seed=0, dtype=torch.float32):
    """Random states in {-1, +1}; consumes no global random numbers."""
    g = torch.Generator().manual_seed(seed)
    return (2 * torch.randint(0, 2, shape, generator=g) - 1).to(dtype)


N = 6
X = binary(3, N)  # (P, N) binary patterns
S = binary(2, N, seed=1)  # (B, N) binary states
W = hf.hebbian_weights(X)  # (N, N)
CP, CQ = floats(4, 5), floats(2, 5, seed=1)  # continuous patterns (P, d) and queries (Q, d)
R, Y = floats(2, 3, 8), floats(2, 4, 6, seed=1)  # layer inputs (B, L, d_r), (B, S, d_y)

ERRORS, case = table()
LOOPS, loop = table()  # calls that loop (recall, dense_recall): run under a timeout


# ------------------------------------------------------------------ hebbian_weights

case("hebbian-patterns-list", lambda: hf.hebbian_weights([[1.0, -1.0]]), "patterns", "torch.Tensor", "list")
case("hebbian-patterns-int", lambda: hf.hebbian_weights(X.long()), "patterns", "floating-point",
     "torch.int64")
case("hebbian-patterns-bool", lambda: hf.hebbian_weights(X > 0), "patterns", "torch.bool")
case("hebbian-patterns-rank1", lambda: hf.hebbian_weights(X[0]), "patterns", "(P, N)", "(6,)")
case("hebbian-patterns-rank3", lambda: hf.hebbian_weights(X[None]), "patterns", "(P, N)", "(1, 3, 6)")
case("hebbian-patterns-P0", lambda: hf.hebbian_weights(X[:0]), "patterns", "P, N >= 1", "(0, 6)")
case("hebbian-patterns-N0", lambda: hf.hebbian_weights(X[:, :0]), "patterns", "P, N >= 1", "(3, 0)")
case("hebbian-patterns-not-binary", lambda: hf.hebbian_weights(X * 0.5), "patterns", "-1 and +1", "0.5")
case("hebbian-patterns-nan", lambda: hf.hebbian_weights(with_value(X)), "patterns", "-1 and +1", "nan")
case("hebbian-normalize-int", lambda: hf.hebbian_weights(X, normalize=1), "normalize", "bool", "int")
case("hebbian-normalize-str", lambda: hf.hebbian_weights(X, normalize="yes"), "normalize", "bool", "str")
case("hebbian-normalize-None", lambda: hf.hebbian_weights(X, normalize=None), "normalize", "NoneType")

# ------------------------------------------------------------------ energy

case("energy-W-list", lambda: hf.energy([[0.0]], S), "W", "torch.Tensor")
case("energy-W-int", lambda: hf.energy(W.long(), S), "W", "floating-point", "torch.int64")
case("energy-W-rank1", lambda: hf.energy(W[0], S), "W", "(..., N, N)", "(6,)")
case("energy-W-not-square", lambda: hf.energy(W[:, :5], S), "W", "(..., N, N)", "(6, 5)")
case("energy-W-N0", lambda: hf.energy(torch.zeros(0, 0), S), "W", "N >= 1", "(0, 0)")
case("energy-W-nan", lambda: hf.energy(with_value(W), S), "W", "finite")
case("energy-W-inf", lambda: hf.energy(with_value(W, INF), S), "W", "finite")
case("energy-state-list", lambda: hf.energy(W, [1.0] * N), "state", "torch.Tensor")
case("energy-state-int", lambda: hf.energy(W, S.long()), "state", "floating-point", "torch.int64")
case("energy-state-rank0", lambda: hf.energy(W, torch.tensor(1.0)), "state", "(..., 6)", "()")
case("energy-state-last-dim", lambda: hf.energy(W, S[:, :5]), "state", "(..., 6)", "(2, 5)")
case("energy-state-nan", lambda: hf.energy(W, with_value(S)), "state", "finite")
case("energy-batch-mismatch", lambda: hf.energy(W.expand(3, N, N), S), "W", "state", "(3,)", "(2,)")

# ------------------------------------------------------------------ update_sync, update_async

for name in ("update_sync", "update_async"):
    fn = getattr(hf, name)
    case(f"{name}-W-int", lambda fn=fn: fn(W.long(), S), "W", "floating-point", "torch.int64")
    case(f"{name}-W-not-square", lambda fn=fn: fn(W[:5], S), "W", "(..., N, N)", "(5, 6)")
    case(f"{name}-W-inf", lambda fn=fn: fn(with_value(W, INF), S), "W", "finite")
    case(f"{name}-state-list", lambda fn=fn: fn(W, [1.0] * N), "state", "torch.Tensor")
    case(f"{name}-state-int", lambda fn=fn: fn(W, S.long()), "state", "torch.int64")
    case(f"{name}-state-last-dim", lambda fn=fn: fn(W, S[:, :5]), "state", "(..., 6)", "(2, 5)")
    case(f"{name}-state-not-binary", lambda fn=fn: fn(W, S * 0.5), "state", "-1 and +1", "0.5")
    case(f"{name}-state-zeros", lambda fn=fn: fn(W, torch.zeros(N)), "state", "-1 and +1", "0.0")
    case(f"{name}-state-nan", lambda fn=fn: fn(W, with_value(S)), "state", "-1 and +1", "nan")
    case(f"{name}-batch-mismatch", lambda fn=fn: fn(W.expand(3, N, N), S), "W", "state", "(3,)", "(2,)")

case("update_async-W-batch-larger", lambda: hf.update_async(W.expand(2, 2, N, N), S), "W", "state", "(2, 2)")
case("update_async-order-float-tensor", lambda: hf.update_async(W, S, order=torch.tensor([0.0, 1.0])),
     "order", "integer tensor", "torch.float32")
case("update_async-order-bool-tensor", lambda: hf.update_async(W, S, order=torch.ones(N, dtype=torch.bool)),
     "order", "torch.bool")
case("update_async-order-2d-tensor", lambda: hf.update_async(W, S, order=torch.zeros(2, 2, dtype=torch.long)),
     "order", "1-D", "(2, 2)")
case("update_async-order-int", lambda: hf.update_async(W, S, order=3), "order", "sequence", "int")
case("update_async-order-str", lambda: hf.update_async(W, S, order="012"), "order", "str")
case("update_async-order-float-entry", lambda: hf.update_async(W, S, order=[0, 1.5]), "order", "float", "1.5")
case("update_async-order-bool-entry", lambda: hf.update_async(W, S, order=[True]), "order", "bool")
case("update_async-order-too-large", lambda: hf.update_async(W, S, order=[0, 6]), "order", "[0, 5]", "6")
case("update_async-order-negative", lambda: hf.update_async(W, S, order=[-1]), "order", "[0, 5]", "-1")
case("update_async-generator-int", lambda: hf.update_async(W, S, generator=0), "generator", "int")

# ------------------------------------------------------------------ recall (a loop: under a timeout)

loop("recall-mode-bad", lambda: hf.recall(W, S, mode="parallel"), "mode", "'async' or 'sync'", "parallel")
loop("recall-mode-none", lambda: hf.recall(W, S, mode=None), "mode", "None")
loop("recall-max_sweeps-0", lambda: hf.recall(W, S, max_sweeps=0), "max_sweeps", ">= 1", "0")
loop("recall-max_sweeps-negative", lambda: hf.recall(W, S, max_sweeps=-5), "max_sweeps", "-5")
loop("recall-max_sweeps-float", lambda: hf.recall(W, S, max_sweeps=2.5), "max_sweeps", "int",
     "2.5")
loop("recall-max_sweeps-inf", lambda: hf.recall(W, S, max_sweeps=INF), "max_sweeps", "int", "inf")
loop("recall-max_sweeps-bool", lambda: hf.recall(W, S, max_sweeps=True), "max_sweeps", "bool")
loop("recall-W-not-square", lambda: hf.recall(W[:, :5], S), "W", "(..., N, N)")
loop("recall-W-nan", lambda: hf.recall(with_value(W), S), "W", "finite")
loop("recall-state-last-dim", lambda: hf.recall(W, S[:, :5]), "state", "(..., 6)", "(2, 5)")
loop("recall-state-not-binary", lambda: hf.recall(W, S * 0.5), "state", "-1 and +1")
loop("recall-state-int", lambda: hf.recall(W, S.long()), "state", "torch.int64")
loop("recall-batch-mismatch", lambda: hf.recall(W.expand(3, N, N), S), "W", "state", "(3,)")
loop("recall-generator-str", lambda: hf.recall(W, S, generator="0"), "generator", "str")

# ------------------------------------------------------------------ dense_energy and the dense updates

for name in ("dense_energy", "dense_update_sync", "dense_update_async"):
    fn = getattr(hf, name)
    case(f"{name}-patterns-list", lambda fn=fn: fn([[1.0] * N], S), "patterns", "torch.Tensor")
    case(f"{name}-patterns-int", lambda fn=fn: fn(X.long(), S), "patterns", "torch.int64")
    case(f"{name}-patterns-rank1", lambda fn=fn: fn(X[0], S), "patterns", "(P, N)", "(6,)")
    case(f"{name}-patterns-P0", lambda fn=fn: fn(X[:0], S), "patterns", "P, N >= 1", "(0, 6)")
    case(f"{name}-state-int", lambda fn=fn: fn(X, S.long()), "state", "torch.int64")
    case(f"{name}-state-last-dim", lambda fn=fn: fn(X, S[:, :5]), "state", "(..., 6)", "(2, 5)")
    case(f"{name}-state-rank0", lambda fn=fn: fn(X, torch.tensor(1.0)), "state", "(..., 6)", "()")
    case(f"{name}-F-str", lambda fn=fn: fn(X, S, F="cosh"), "F", "positive int", "'exp'", "cosh")
    case(f"{name}-F-0", lambda fn=fn: fn(X, S, F=0), "F", "positive int", "0")
    case(f"{name}-F-negative", lambda fn=fn: fn(X, S, F=-2), "F", "-2")
    case(f"{name}-F-float", lambda fn=fn: fn(X, S, F=2.0), "F", "float", "2.0")
    case(f"{name}-F-bool", lambda fn=fn: fn(X, S, F=True), "F", "bool")
    case(f"{name}-F-none", lambda fn=fn: fn(X, S, F=None), "F", "NoneType")

case("dense_energy-patterns-nan", lambda: hf.dense_energy(with_value(X), S), "patterns", "finite")
case("dense_energy-state-inf", lambda: hf.dense_energy(X, with_value(S, INF)), "state", "finite")
for name in ("dense_update_sync", "dense_update_async"):
    fn = getattr(hf, name)
    case(f"{name}-patterns-not-binary", lambda fn=fn: fn(X * 2, S), "patterns", "-1 and +1", "2.0")
    case(f"{name}-state-not-binary", lambda fn=fn: fn(X, S * 0.5), "state", "-1 and +1", "0.5")
    case(f"{name}-F-overflows-float32", lambda fn=fn: fn(X, S, F=60), "F = 60", "overflows", "torch.float32")
    case(f"{name}-F-overflows-float16", lambda fn=fn: fn(X.half(), S.half(), F=6), "F = 6", "torch.float16")
case("dense_update_async-order-too-large", lambda: hf.dense_update_async(X, S, order=[9]), "order",
     "[0, 5]", "9")
case("dense_update_async-generator-int", lambda: hf.dense_update_async(X, S, generator=1), "generator", "int")

# an empty order would update no neuron: refused (issue 35, the class of empty inputs)
case("update_async-order-empty", lambda: hf.update_async(W, S, order=[]), "order", "empty")
case("update_async-order-empty-tensor", lambda: hf.update_async(W, S, order=torch.zeros(0, dtype=torch.long)),
     "order", "empty")
case("dense_update_async-order-empty", lambda: hf.dense_update_async(X, S, order=()), "order", "empty")

# the sweeps the chapter prints are public: checked at their door too
case("async_sweep-order-empty", lambda: hf.async_sweep(W, S, []), "order", "empty")
case("async_sweep-order-None", lambda: hf.async_sweep(W, S, None), "order", "NoneType")
case("async_sweep-order-too-large", lambda: hf.async_sweep(W, S, [6]), "order", "[0, 5]", "6")
case("async_sweep-order-float", lambda: hf.async_sweep(W, S, [0.5]), "order", "float")
case("async_sweep-W-not-square", lambda: hf.async_sweep(W[:5], S, [0]), "W", "(..., N, N)", "(5, 6)")
case("async_sweep-state-not-binary", lambda: hf.async_sweep(W, S * 0.5, [0]), "state", "-1 and +1")
case("dense_async_sweep-order-empty", lambda: hf.dense_async_sweep(X, S, 2, []), "order", "empty")
case("dense_async_sweep-order-too-large", lambda: hf.dense_async_sweep(X, S, 2, [9]), "order", "[0, 5]", "9")
case("dense_async_sweep-F-0", lambda: hf.dense_async_sweep(X, S, 0, [0]), "F", "0")
case("dense_async_sweep-patterns-not-binary", lambda: hf.dense_async_sweep(X * 2, S, 2, [0]), "patterns",
     "-1 and +1")

loop("dense_recall-max_sweeps-0", lambda: hf.dense_recall(X, S, max_sweeps=0), "max_sweeps",
     ">= 1")
loop("dense_recall-max_sweeps-float", lambda: hf.dense_recall(X, S, max_sweeps=1e9), "max_sweeps", "int")
loop("dense_recall-patterns-not-binary", lambda: hf.dense_recall(X * 0.5, S), "patterns",
     "-1 and +1")
loop("dense_recall-state-last-dim", lambda: hf.dense_recall(X, S[:, :5]), "state", "(..., 6)")
loop("dense_recall-F-str", lambda: hf.dense_recall(X, S, F="tanh"), "F", "tanh")
loop("dense_recall-F-overflow", lambda: hf.dense_recall(X, S, F=60), "F = 60", "overflows")
loop("dense_recall-generator-int", lambda: hf.dense_recall(X, S, generator=1), "generator", "int")

# ------------------------------------------------------------------ continuous_energy, retrieve

BAD_BETAS = [("0", 0.0, "> 0"), ("negative", -1.0, "-1.0"), ("inf", INF, "finite"), ("nan", NAN, "finite"),
             ("str", "1", "str"), ("bool", True, "bool"), ("none", None, "NoneType"),
             ("vector", torch.ones(2), "Tensor")]
for label, beta, word in BAD_BETAS:
    case(f"continuous_energy-beta-{label}", lambda beta=beta: hf.continuous_energy(CP, CQ, beta),
         "beta", word)
    case(f"retrieve-beta-{label}", lambda beta=beta: hf.retrieve(CP, CQ, beta), "beta", word)

case("continuous_energy-patterns-int", lambda: hf.continuous_energy(CP.long(), CQ, 1.0), "patterns",
     "torch.int64")
case("continuous_energy-patterns-rank3", lambda: hf.continuous_energy(CP[None], CQ, 1.0), "patterns",
     "(P, N)")
case("continuous_energy-patterns-P0", lambda: hf.continuous_energy(CP[:0], CQ, 1.0), "patterns", "(0, 5)")
case("continuous_energy-patterns-nan", lambda: hf.continuous_energy(with_value(CP), CQ, 1.0), "patterns",
     "finite")
case("continuous_energy-state-last-dim", lambda: hf.continuous_energy(CP, CQ[:, :4], 1.0),
     "state", "(..., 5)", "(2, 4)")
case("continuous_energy-state-inf", lambda: hf.continuous_energy(CP, with_value(CQ, INF), 1.0), "state",
     "finite")
case("continuous_energy-state-complex", lambda: hf.continuous_energy(CP, CQ.to(torch.complex64), 1.0),
     "state", "torch.complex64")

case("retrieve-patterns-list", lambda: hf.retrieve([[1.0]], CQ, 1.0), "patterns", "torch.Tensor")
case("retrieve-patterns-int", lambda: hf.retrieve(CP.long(), CQ, 1.0), "patterns", "torch.int64")
case("retrieve-patterns-rank1", lambda: hf.retrieve(CP[0], CQ, 1.0), "patterns", "(P, d) or (B, P, d)",
     "(5,)")
case("retrieve-patterns-rank4", lambda: hf.retrieve(CP[None, None], CQ, 1.0), "patterns", "(1, 1, 4, 5)")
case("retrieve-patterns-P0", lambda: hf.retrieve(CP[:0], CQ, 1.0), "patterns", "P, d >= 1", "(0, 5)")
case("retrieve-patterns-d0", lambda: hf.retrieve(CP[:, :0], CQ[:, :0], 1.0), "patterns", "P, d >= 1",
     "(4, 0)")
case("retrieve-patterns-nan", lambda: hf.retrieve(with_value(CP), CQ, 1.0), "patterns", "finite")
case("retrieve-queries-list", lambda: hf.retrieve(CP, [[1.0] * 5], 1.0), "queries", "torch.Tensor")
case("retrieve-queries-int", lambda: hf.retrieve(CP, CQ.long(), 1.0), "queries", "torch.int64")
case("retrieve-queries-rank0", lambda: hf.retrieve(CP, torch.tensor(1.0), 1.0), "queries", "(..., 5)", "()")
case("retrieve-queries-last-dim", lambda: hf.retrieve(CP, CQ[:, :4], 1.0), "queries", "(..., 5)", "(2, 4)")
case("retrieve-queries-nan", lambda: hf.retrieve(CP, with_value(CQ), 1.0), "queries", "finite")
case("retrieve-batch-mismatch", lambda: hf.retrieve(CP.expand(3, 4, 5), CQ.expand(2, 2, 5), 1.0),
     "queries", "patterns", "(2,)", "(3,)")
case("retrieve-steps-0", lambda: hf.retrieve(CP, CQ, 1.0, steps=0), "steps", ">= 1", "0")
case("retrieve-steps-float", lambda: hf.retrieve(CP, CQ, 1.0, steps=1.0), "steps", "int", "1.0")
case("retrieve-steps-bool", lambda: hf.retrieve(CP, CQ, 1.0, steps=True), "steps", "bool")
case("retrieve-return_weights-int", lambda: hf.retrieve(CP, CQ, 1.0, return_weights=1), "return_weights",
     "bool")

# ------------------------------------------------------------------ neighbour_probs

NEXT = torch.tensor([0, 2, 1, 2])  # the next token of each of the 4 keys CP
for label, beta, word in BAD_BETAS:
    case(f"neighbour_probs-beta-{label}", lambda beta=beta: hf.neighbour_probs(CQ, CP, NEXT, 3, beta),
         "beta", word)
case("neighbour_probs-keys-list", lambda: hf.neighbour_probs(CQ, [[1.0] * 5], NEXT, 3, 1.0), "keys",
     "torch.Tensor")
case("neighbour_probs-keys-int", lambda: hf.neighbour_probs(CQ, CP.long(), NEXT, 3, 1.0), "keys",
     "torch.int64")
case("neighbour_probs-keys-rank3", lambda: hf.neighbour_probs(CQ, CP[None], NEXT, 3, 1.0), "keys",
     "(P, d)", "(1, 4, 5)")
case("neighbour_probs-keys-N0", lambda: hf.neighbour_probs(CQ, CP[:0], NEXT[:0], 3, 1.0), "keys",
     "(0, 5)")
case("neighbour_probs-keys-nan", lambda: hf.neighbour_probs(CQ, with_value(CP), NEXT, 3, 1.0), "keys",
     "finite")
case("neighbour_probs-queries-int", lambda: hf.neighbour_probs(CQ.long(), CP, NEXT, 3, 1.0), "queries",
     "torch.int64")
case("neighbour_probs-queries-last-dim", lambda: hf.neighbour_probs(CQ[:, :4], CP, NEXT, 3, 1.0),
     "queries", "(Q, 5)", "(2, 4)")
case("neighbour_probs-queries-rank1", lambda: hf.neighbour_probs(CQ[0], CP, NEXT, 3, 1.0), "queries",
     "(Q, 5)", "(5,)")
case("neighbour_probs-queries-inf", lambda: hf.neighbour_probs(with_value(CQ, INF), CP, NEXT, 3, 1.0),
     "queries", "finite")
case("neighbour_probs-next_tokens-float", lambda: hf.neighbour_probs(CQ, CP, NEXT.float(), 3, 1.0),
     "next_tokens", "integer", "torch.float32")
case("neighbour_probs-next_tokens-length", lambda: hf.neighbour_probs(CQ, CP, NEXT[:3], 3, 1.0),
     "next_tokens", "(4,)", "(3,)")
case("neighbour_probs-next_tokens-range", lambda: hf.neighbour_probs(CQ, CP, NEXT, 2, 1.0),
     "next_tokens", "[0, 1]", "2")
case("neighbour_probs-next_tokens-negative", lambda: hf.neighbour_probs(CQ, CP, -NEXT - 1, 3, 1.0),
     "next_tokens", "-3")
case("neighbour_probs-vocab_size-0", lambda: hf.neighbour_probs(CQ, CP, NEXT, 0, 1.0), "vocab_size",
     ">= 1", "0")
case("neighbour_probs-vocab_size-float", lambda: hf.neighbour_probs(CQ, CP, NEXT, 3.0, 1.0),
     "vocab_size", "int", "3.0")

# ------------------------------------------------------------------ the layers: constructors

for label, make in (
    ("Hopfield", lambda **kw: Hopfield(**{"state_dim": 8, **kw})),
    ("HopfieldPooling", lambda **kw: HopfieldPooling(**{"input_dim": 8, **kw})),
    ("HopfieldLayer", lambda **kw: HopfieldLayer(**{"input_dim": 8, "num_stored": 4, **kw})),
):
    first = "state_dim" if label == "Hopfield" else "input_dim"
    case(f"{label}-{first}-0", lambda make=make, first=first: make(**{first: 0}), first, ">= 1", "0")
    case(f"{label}-{first}-negative", lambda make=make, first=first: make(**{first: -4}), first, "-4")
    case(f"{label}-{first}-float", lambda make=make, first=first: make(**{first: 8.0}), first, "int", "8.0")
    case(f"{label}-{first}-bool", lambda make=make, first=first: make(**{first: True}), first, "bool")
    case(f"{label}-{first}-none", lambda make=make, first=first: make(**{first: None}), first, "NoneType")
    case(f"{label}-key_dim-0", lambda make=make: make(key_dim=0), "key_dim", ">= 1", "0")
    case(f"{label}-key_dim-str", lambda make=make: make(key_dim="4"), "key_dim", "str")
    case(f"{label}-value_dim-0", lambda make=make: make(value_dim=0), "value_dim", ">= 1", "0")
    case(f"{label}-value_dim-float", lambda make=make: make(value_dim=2.5), "value_dim", "2.5")
    for blabel, beta, word in BAD_BETAS[:5]:
        case(f"{label}-beta-{blabel}", lambda make=make, beta=beta: make(beta=beta), "beta", word)
    case(f"{label}-bias-int", lambda make=make: make(bias=1), "bias", "bool", "int")

case("Hopfield-stored_dim-0", lambda: Hopfield(8, stored_dim=0), "stored_dim", ">= 1", "0")
case("Hopfield-stored_dim-float", lambda: Hopfield(8, stored_dim=6.0), "stored_dim", "6.0")
case("Hopfield-steps-0", lambda: Hopfield(8, steps=0), "steps", ">= 1", "0")
case("Hopfield-steps-float", lambda: Hopfield(8, steps=1.5), "steps", "1.5")
case("HopfieldPooling-num_queries-0", lambda: HopfieldPooling(8, num_queries=0), "num_queries", ">= 1", "0")
case("HopfieldPooling-num_queries-bool", lambda: HopfieldPooling(8, num_queries=True), "num_queries", "bool")
case("HopfieldLayer-num_stored-0", lambda: HopfieldLayer(8, 0), "num_stored", ">= 1", "0")
case("HopfieldLayer-num_stored-float", lambda: HopfieldLayer(8, 4.0), "num_stored", "4.0")

# ------------------------------------------------------------------ the layers: forward


def hopfield():
    torch.manual_seed(0)
    return Hopfield(8, stored_dim=6, key_dim=4)


def pooling():
    torch.manual_seed(0)
    return HopfieldPooling(6, num_queries=2)


def layer():
    torch.manual_seed(0)
    return HopfieldLayer(8, 5)


MASK = torch.ones(2, 4, dtype=torch.bool)
case("Hopfield.forward-R-list", lambda: hopfield()([[[0.0] * 8]], Y), "R", "torch.Tensor", "list")
case("Hopfield.forward-R-rank2", lambda: hopfield()(R[0], Y), "R", "(B, length, 8)", "(3, 8)")
case("Hopfield.forward-R-rank4", lambda: hopfield()(R[None], Y), "R", "(B, length, 8)", "(1, 2, 3, 8)")
case("Hopfield.forward-R-last-dim", lambda: hopfield()(R[..., :7], Y), "R", "(B, length, 8)", "(2, 3, 7)")
case("Hopfield.forward-R-int", lambda: hopfield()(R.long(), Y), "R", "dtype", "torch.float32", "torch.int64")
case("Hopfield.forward-R-float64", lambda: hopfield()(R.double(), Y), "R", "torch.float32", "torch.float64")
case("Hopfield.forward-Y-last-dim", lambda: hopfield()(R, Y[..., :5]), "Y", "(B, length, 6)", "(2, 4, 5)")
case("Hopfield.forward-Y-float16", lambda: hopfield()(R, Y.half()), "Y", "torch.float16")


def under_autocast(fn):
    with torch.autocast("cpu", torch.bfloat16):
        return fn()


case("Hopfield.forward-Y-float64-autocast", lambda: under_autocast(lambda: hopfield()(R, Y.double())),
     "Y", "but float64", "torch.float64")
case("Hopfield.forward-batch-mismatch", lambda: hopfield()(R, Y[:1]), "R and Y", "same batch size",
     "(2, 3, 8)", "(1, 4, 6)")
case("Hopfield.forward-mask-list", lambda: hopfield()(R, Y, [[True] * 4] * 2), "mask", "(2, 4)", "list")
case("Hopfield.forward-mask-shape", lambda: hopfield()(R, Y, MASK[:, :3]), "mask", "(2, 4)", "(2, 3)")
case("Hopfield.forward-mask-batch", lambda: hopfield()(R, Y, MASK[:1]), "mask", "(2, 4)", "(1, 4)")
case("Hopfield.forward-mask-3d", lambda: hopfield()(R, Y, MASK[:, None]), "mask", "(2, 4)", "(2, 1, 4)")
case("Hopfield.forward-mask-int64", lambda: hopfield()(R, Y, MASK.long()), "mask", "bool", "torch.int64")
case("Hopfield.forward-mask-float", lambda: hopfield()(R, Y, MASK.float()), "mask", "bool", "torch.float32")

case("HopfieldPooling.forward-Y-list", lambda: pooling()([[[0.0] * 6]]), "Y", "torch.Tensor")
case("HopfieldPooling.forward-Y-rank2", lambda: pooling()(Y[0]), "Y", "(B, length, 6)", "(4, 6)")
case("HopfieldPooling.forward-Y-last-dim", lambda: pooling()(Y[..., :5]), "Y", "(B, length, 6)", "(2, 4, 5)")
case("HopfieldPooling.forward-Y-int", lambda: pooling()(Y.long()), "Y", "torch.int64")
case("HopfieldPooling.forward-Y-float64", lambda: pooling()(Y.double()), "Y", "torch.float64")
case("HopfieldPooling.forward-mask-shape", lambda: pooling()(Y, MASK[:, :3]), "mask", "(2, 4)", "(2, 3)")
case("HopfieldPooling.forward-mask-uint8", lambda: pooling()(Y, MASK.to(torch.uint8)), "mask", "torch.uint8")
case("HopfieldPooling.forward-mask-tuple", lambda: pooling()(Y, (True,)), "mask", "tuple")

case("HopfieldLayer.forward-R-list", lambda: layer()([[[0.0] * 8]]), "R", "torch.Tensor")
case("HopfieldLayer.forward-R-rank2", lambda: layer()(R[0]), "R", "(B, length, 8)", "(3, 8)")
case("HopfieldLayer.forward-R-last-dim", lambda: layer()(R[..., :7]), "R", "(B, length, 8)", "(2, 3, 7)")
case("HopfieldLayer.forward-R-int", lambda: layer()(R.long()), "R", "torch.int64")
case("HopfieldLayer.forward-R-bfloat16", lambda: layer()(R.bfloat16()), "R", "torch.bfloat16")


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)


@pytest.mark.parametrize(("fn", "words"), LOOPS)
def test_bad_input_to_loops_is_refused_in_time(fn, words):
    assert_clear_error_in_time(fn, *words, seconds=20)


CASES = len(ERRORS) + len(LOOPS)


def test_case_count_is_written_at_the_top():
    with open(__file__, encoding="utf-8") as f:
        assert f"# Cases: {CASES} bad inputs" in f.read()


# ------------------------------------------------------------------ legal edge inputs


def finite(*tensors):
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def test_numpy_sizes_and_numbers_are_accepted():
    n = np.int64
    assert Hopfield(n(8), n(6), n(4), n(3), beta=np.float64(0.5), steps=n(2))(R, Y)[0].shape == (2, 3, 3)
    assert HopfieldPooling(n(6), num_queries=n(2))(Y)[0].shape == (2, 2, 6)
    assert HopfieldLayer(n(8), n(5))(R)[0].shape == (2, 3, 8)
    assert torch.equal(hf.recall(W, S, max_sweeps=n(3), generator=torch.Generator().manual_seed(0))[0],
                       hf.recall(W, S, max_sweeps=3, generator=torch.Generator().manual_seed(0))[0])
    assert torch.equal(hf.dense_update_sync(X, S, F=n(3)), hf.dense_update_sync(X, S, F=3))
    assert torch.equal(hf.update_async(W, S, order=np.array([2, 0])), hf.update_async(W, S, order=[2, 0]))
    assert torch.equal(hf.retrieve(CP, CQ, np.float64(2.0), steps=n(2)), hf.retrieve(CP, CQ, 2.0, steps=2))
    assert torch.equal(hf.neighbour_probs(CQ, CP, NEXT, n(3), np.float64(2.0)),
                       hf.neighbour_probs(CQ, CP, NEXT, 3, 2.0))
    unnormalised = hf.hebbian_weights(X, normalize=False)
    assert torch.equal(hf.hebbian_weights(X, normalize=np.bool_(False)), unnormalised)
    # a one-element tensor beta is the same number
    assert torch.equal(hf.continuous_energy(CP, CQ, torch.tensor(2.0)), hf.continuous_energy(CP, CQ, 2.0))


def test_empty_batches_give_empty_results():
    e = torch.zeros(0, N)
    assert hf.energy(W, e).shape == (0,)
    assert hf.update_sync(W, e).shape == (0, N)
    assert hf.update_async(W, e).shape == (0, N)
    state, energies = hf.recall(W, e)
    assert state.shape == (0, N) and energies.shape[1:] == (0,)
    assert hf.dense_energy(X, e).shape == (0,)
    assert hf.dense_update_sync(X, e).shape == (0, N)
    assert hf.dense_recall(X, e).shape == (0, N)
    assert hf.continuous_energy(CP, torch.zeros(0, 5), 1.0).shape == (0,)
    out, w = hf.retrieve(CP, torch.zeros(0, 5), 1.0, return_weights=True)
    assert out.shape == (0, 5) and w.shape == (0, 4)
    assert hf.neighbour_probs(torch.zeros(0, 5), CP, NEXT, 3, 1.0).shape == (0, 3)
    assert hopfield()(R[:0], Y[:0])[0].shape == (0, 3, 4)
    assert hopfield()(R[:, :0], Y)[0].shape == (2, 0, 4)  # no state patterns
    assert pooling()(Y[:0])[0].shape == (0, 2, 6)
    assert layer()(R[:0])[0].shape == (0, 3, 8)


def test_update_async_repeats_and_the_sweeps_it_runs():
    assert torch.equal(hf.update_async(W, S, order=torch.tensor([1, 1])), hf.update_async(W, S, order=[1]))
    assert torch.equal(hf.async_sweep(W, S, [2, 0, 4]), hf.update_async(W, S, order=[2, 0, 4]))
    dense = hf.dense_async_sweep(X, S, 3, np.array([5, 1]))
    assert torch.equal(dense, hf.dense_update_async(X, S, 3, [5, 1]))


def test_single_query_keeps_a_memory_batch():
    patterns = floats(3, 4, 5)
    q = floats(5, seed=1)
    out, w = hf.retrieve(patterns, q, 1.0, return_weights=True)
    assert out.shape == (3, 5) and w.shape == (3, 4)
    assert torch.equal(out, hf.retrieve(patterns, q.expand(3, 1, 5), 1.0)[:, 0])
    out, w = hf.retrieve(CP, CQ[0], 1.0, return_weights=True)
    assert out.shape == (5,) and w.shape == (4,)


def test_mixed_float_dtypes_promote():
    assert hf.energy(W.double(), S).dtype == torch.float64
    assert hf.retrieve(CP.double(), CQ, 1.0).dtype == torch.float64
    assert hf.continuous_energy(CP, CQ.double(), 1.0).dtype == torch.float64
    assert hf.neighbour_probs(CQ, CP.double(), NEXT, 3, 1.0).dtype == torch.float64
    assert hf.dense_update_sync(X.double(), S).dtype == torch.float32  # cast to the state's dtype


def test_large_F_is_fine_in_float64_and_exp_never_overflows():
    assert hf.dense_update_sync(X.double(), S.double(), F=60).dtype == torch.float64
    big = binary(3, 200)
    out = hf.dense_update_async(big, big[:1], F="exp")
    assert torch.equal(out, big[:1])  # a stored pattern is a fixed point


def test_beta_tiny_and_huge_are_finite():
    for beta in (1e-30, 1e30):
        out, w = hf.retrieve(CP, CQ, beta, return_weights=True)
        assert finite(out, w)
        assert finite(hf.continuous_energy(CP, CQ, 1e-3))


@pytest.mark.parametrize("make", [hopfield, pooling])
def test_fully_masked_and_empty_sets_give_zeros_with_finite_gradients(make):
    module = make()
    y = Y.clone().requires_grad_()
    mask = MASK.clone()
    mask[1] = False  # the second set is fully masked
    args = (R, y, mask) if isinstance(module, Hopfield) else (y, mask)
    out, w = module(*args)
    assert torch.equal(out[1], torch.zeros_like(out[1])) and torch.equal(w[1], torch.zeros_like(w[1]))
    out.sum().backward()
    assert finite(y.grad) and all(finite(p.grad) for p in module.parameters() if p.grad is not None)
    empty = Y[:, :0]
    out, w = module(R, empty) if isinstance(module, Hopfield) else module(empty)
    assert torch.equal(out, torch.zeros_like(out)) and w.shape[-1] == 0


def test_layers_take_any_float_dtype_under_autocast():
    with torch.autocast("cpu", torch.bfloat16):
        assert finite(hopfield()(R.bfloat16(), Y.half())[0].float())
        assert finite(layer()(R.half())[0].float())


def test_binary_checks_pass_on_meta():
    meta = S.to("meta")
    assert hf.update_sync(W.to("meta"), meta).device.type == "meta"
    assert hf.dense_update_sync(X.to("meta"), meta).device.type == "meta"
    assert hf.hebbian_weights(X.to("meta")).device.type == "meta"


def test_recall_ends_within_max_sweeps():
    state, energies = hf.recall(W, S, mode="sync", max_sweeps=1)
    assert energies.shape[0] <= 2
    assert math.isfinite(float(energies[-1].sum()))
