"""Bad input to seqbook.delta_rule: ``delta_rule_recurrent``, ``delta_rule_chunked`` and
``DeltaNet`` refuse it clearly, or handle a legal edge.

Each ``ERRORS`` case must end in a ValueError/TypeError raised by seqbook whose message holds
the words listed (the argument's name and the expected or actual shape, dtype or value). The two
functions share one validator, so every tensor case runs against both. The legal edge inputs
below are checked for their result.
"""

# Cases: 112 rejected (35 tensor cases for each form, 6 chunk sizes, 19 constructor arguments,
# 17 forward calls), every one a clear error; plus one test of legal edge inputs.

from __future__ import annotations

import numpy as np
import pytest
import torch

from seqbook.delta_rule import DeltaNet, delta_rule_chunked, delta_rule_recurrent
from tests.badinput import BAD_FLAGS, BAD_SIZES, assert_clear_error, floats, table

# q, k (B, H, T, D_k) = (2, 3, 5, 4), v (2, 3, 5, 6), beta and log_alpha (2, 3, 5),
# state (2, 3, 4, 6): D_v differs from D_k, so a transposed state is caught.
Q, K, V = floats(2, 3, 5, 4, seed=0), floats(2, 3, 5, 4, seed=1), floats(2, 3, 5, 6, seed=2)
BETA, LOG_ALPHA = torch.rand(2, 3, 5), -torch.rand(2, 3, 5)
STATE = floats(2, 3, 4, 6, seed=3)
FUNCTIONS = {"delta_rule_recurrent": delta_rule_recurrent, "delta_rule_chunked": delta_rule_chunked}
ONE_DTYPE = "q, k, v, beta, log_alpha and state must have one dtype"
ONE_DEVICE = "q, k, v, beta, log_alpha and state must be on one device"


ERRORS, case = table()


def call(fn, q=Q, k=K, v=V, beta=BETA, log_alpha=LOG_ALPHA, state=STATE):
    return lambda: fn(q, k, v, beta, log_alpha, state)


def tensor_cases(name, fn):
    """The tensor cases, for either form ``fn`` called ``name``."""
    case(f"{name}-k-list", call(fn, k=K.tolist()), "k", "torch.Tensor", "list")
    case(f"{name}-k-rank3", call(fn, k=K[0]), "k", "(B, H, T, D_k)", "(3, 5, 4)")
    case(f"{name}-k-rank5", call(fn, k=K[None]), "k", "(B, H, T, D_k)", "(1, 2, 3, 5, 4)")
    case(f"{name}-k-empty-T", call(fn, k=K[:, :, :0]), "k", "empty", "(2, 3, 0, 4)")
    case(f"{name}-k-int", call(fn, k=K.long()), "k", "floating-point", "torch.int64")
    case(f"{name}-q-None", call(fn, q=None), "q", "torch.Tensor", "NoneType")
    case(f"{name}-q-rank3", call(fn, q=Q[0]), "q", "(2, 3, 5, 4)", "(3, 5, 4)")
    case(f"{name}-q-width", call(fn, q=Q[..., :3]), "q", "(2, 3, 5, 4) like k", "(2, 3, 5, 3)")
    case(f"{name}-q-length", call(fn, q=Q[:, :, :4]), "q", "(2, 3, 5, 4)", "(2, 3, 4, 4)")
    case(f"{name}-q-heads", call(fn, q=Q[:, :2]), "q", "(2, 3, 5, 4)", "(2, 2, 5, 4)")
    case(f"{name}-q-int", call(fn, q=Q.int()), "q", "floating-point", "torch.int32")
    case(f"{name}-v-rank3", call(fn, v=V[0]), "v", "(2, 3, 5, D_v)", "(3, 5, 6)")
    case(f"{name}-v-length", call(fn, v=V[:, :, :4]), "v", "(2, 3, 5, D_v)", "(2, 3, 4, 6)")
    case(f"{name}-v-batch", call(fn, v=V[:1]), "v", "(2, 3, 5, D_v)", "(1, 3, 5, 6)")
    case(f"{name}-v-int", call(fn, v=V.long()), "v", "floating-point", "torch.int64")
    case(f"{name}-beta-float", call(fn, beta=0.5), "beta", "torch.Tensor", "float")
    case(f"{name}-beta-per-channel", call(fn, beta=BETA[..., None]), "beta", "(2, 3, 5)", "(2, 3, 5, 1)")
    case(f"{name}-beta-length", call(fn, beta=BETA[..., :4]), "beta", "(2, 3, 5)", "(2, 3, 4)")
    case(f"{name}-beta-heads", call(fn, beta=BETA[:, :1]), "beta", "(2, 3, 5)", "(2, 1, 5)")
    case(f"{name}-beta-bool", call(fn, beta=BETA > 0.5), "beta", "floating-point", "torch.bool")
    case(f"{name}-log_alpha-rank4", call(fn, log_alpha=LOG_ALPHA[..., None]), "log_alpha", "(2, 3, 5)",
         "(2, 3, 5, 1)")
    case(f"{name}-log_alpha-length", call(fn, log_alpha=LOG_ALPHA[..., 1:]), "log_alpha", "(2, 3, 5)",
         "(2, 3, 4)")
    case(f"{name}-log_alpha-int", call(fn, log_alpha=LOG_ALPHA.long()), "log_alpha", "floating-point",
         "torch.int64")
    case(f"{name}-state-papers-layout", call(fn, state=STATE.mT), "state", "(2, 3, 4, 6)", "(2, 3, 6, 4)")
    case(f"{name}-state-batch", call(fn, state=STATE[:1]), "state", "(2, 3, 4, 6)", "(1, 3, 4, 6)")
    case(f"{name}-state-rank3", call(fn, state=STATE[0]), "state", "(2, 3, 4, 6)", "(3, 4, 6)")
    case(f"{name}-state-tuple", call(fn, state=(STATE, STATE)), "state", "torch.Tensor", "tuple")
    case(f"{name}-state-int", call(fn, state=STATE.long()), "state", "floating-point", "torch.int64")
    case(f"{name}-v-float64", call(fn, v=V.double()), ONE_DTYPE, "v torch.float64", "q torch.float32")
    case(f"{name}-beta-float64", call(fn, beta=BETA.double()), ONE_DTYPE, "beta torch.float64")
    case(f"{name}-log_alpha-float16", call(fn, log_alpha=LOG_ALPHA.half()), ONE_DTYPE,
         "log_alpha torch.float16")
    case(f"{name}-state-float64", call(fn, state=STATE.double()), ONE_DTYPE, "state torch.float64")
    case(f"{name}-q-bfloat16-no-gate", lambda: fn(Q.bfloat16(), K, V, BETA), ONE_DTYPE, "q torch.bfloat16")
    case(f"{name}-state-meta", call(fn, state=STATE.to("meta")), ONE_DEVICE, "state meta", "k cpu")
    case(f"{name}-v-meta", call(fn, v=V.to("meta")), ONE_DEVICE, "v meta")


for name, fn in FUNCTIONS.items():
    tensor_cases(name, fn)
for kind, value, word in BAD_SIZES + [("None", None, "NoneType")]:
    case(f"delta_rule_chunked-chunk_size-{kind}",
         lambda value=value: delta_rule_chunked(Q, K, V, BETA, chunk_size=value), "chunk_size", word)


# --- DeltaNet(embed_dim, num_heads, gated, chunk_size) and its forward(x, state)
for kind, value, word in BAD_SIZES:
    case(f"DeltaNet-embed_dim-{kind}", lambda value=value: DeltaNet(value), "embed_dim", word)
    case(f"DeltaNet-num_heads-{kind}", lambda value=value: DeltaNet(8, value), "num_heads", word)
    case(f"DeltaNet-chunk_size-{kind}", lambda value=value: DeltaNet(8, 2, chunk_size=value), "chunk_size",
         word)
for kind, value, word in BAD_FLAGS:
    case(f"DeltaNet-gated-{kind}", lambda value=value: DeltaNet(8, 2, gated=value), "gated", word)
case("DeltaNet-heads-do-not-divide", lambda: DeltaNet(6, num_heads=4), "embed_dim", "num_heads", "6 and 4")


def layer(gated=False):
    torch.manual_seed(0)
    return DeltaNet(8, num_heads=2, gated=gated)


def under_autocast(fn):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return fn()


X = floats(2, 5, 8, seed=4)
S = floats(2, 2, 4, 4, seed=5)
case("DeltaNet.forward-x-list", lambda: layer()(X.tolist()), "x", "torch.Tensor", "list")
case("DeltaNet.forward-x-rank2", lambda: layer()(X[0]), "x", "(B, T, 8)", "(5, 8)")
case("DeltaNet.forward-x-rank4", lambda: layer()(X[None]), "x", "(B, T, 8)", "(1, 2, 5, 8)")
case("DeltaNet.forward-x-width", lambda: layer()(X[..., :6]), "x", "(B, T, 8)", "(2, 5, 6)")
case("DeltaNet.forward-x-empty", lambda: layer()(X[:, :0]), "x", "empty", "(2, 0, 8)")
case("DeltaNet.forward-x-int", lambda: layer()(X.long()), "x", "floating-point", "torch.int64")
case("DeltaNet.forward-x-float64", lambda: layer()(X.double()), "x", "torch.float32", "torch.float64")
case("DeltaNet.forward-x-float64-autocast", lambda: under_autocast(lambda: layer()(X.double())), "x",
     "torch.float32", "torch.float64")
case("DeltaNet.forward-x-meta", lambda: layer()(X.to("meta")), "x", "device", "meta")
case("DeltaNet.forward-state-tuple", lambda: layer()(X, (S, S[..., 0])), "state", "torch.Tensor", "tuple")
case("DeltaNet.forward-state-width", lambda: layer()(X, S[..., :3]), "state", "(2, 2, 4, 4)", "(2, 2, 4, 3)")
case("DeltaNet.forward-state-batch", lambda: layer(gated=True)(X, S[:1]), "state", "(2, 2, 4, 4)",
     "(1, 2, 4, 4)")
case("DeltaNet.forward-state-heads", lambda: layer()(X, S[:, :1]), "state", "(2, 2, 4, 4)", "(2, 1, 4, 4)")
case("DeltaNet.forward-state-rank3", lambda: layer()(X, S[0]), "state", "(2, 2, 4, 4)", "(2, 4, 4)")
case("DeltaNet.forward-state-int", lambda: layer()(X, S.long()), "state", "floating-point", "torch.int64")
case("DeltaNet.forward-state-float64", lambda: layer()(X, S.double()), "state", "torch.float32",
     "torch.float64")
case("DeltaNet.forward-state-meta", lambda: layer()(X, S.to("meta")), "state", "device", "meta")


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)


def test_legal_edge_inputs():
    # one step, one head, one feature; NumPy sizes; no gate and no state
    q, k, v = (floats(1, 1, 1, 1, seed=s) for s in range(3))
    beta = torch.full((1, 1, 1), 0.5)
    for fn in FUNCTIONS.values():
        out, state = fn(q, k, v, beta)
        assert out.shape == (1, 1, 1, 1) and state.shape == (1, 1, 1, 1)
    out, _ = delta_rule_chunked(Q, K, V, BETA, chunk_size=np.int64(2))
    assert out.shape == (2, 3, 5, 6)
    assert DeltaNet(np.int64(8), np.int64(2), gated=np.bool_(True), chunk_size=np.int32(3)).gated
    # half precision, one dtype throughout: the loop runs as given
    out, state = delta_rule_recurrent(*(x.bfloat16() for x in (Q, K, V, BETA, LOG_ALPHA, STATE)))
    assert out.dtype == state.dtype == torch.bfloat16
    # a float64 layer takes float64 input and state; a one-token sequence
    out, state = layer().double()(X[:, :1].double(), S.double())
    assert out.shape == (2, 1, 8) and state.dtype == torch.float64
    # on meta every shape check runs and the values are never read
    out, state = layer(gated=True).to("meta")(X.to("meta"), S.to("meta"))
    assert out.device.type == state.device.type == "meta"
