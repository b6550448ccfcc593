"""Bad input to seqbook.linear_attention: the kernels, ``LinearAttention`` and ``LinearAttentionLM``
refuse it with a ValueError/TypeError raised by seqbook that names the argument.
"""

import pytest
import torch

from seqbook.linear_attention import (
    LinearAttention,
    LinearAttentionLM,
    PositiveRandomFeatures,
    linear_attention,
    linear_attention_chunked,
    linear_attention_recurrent,
    taylor_feature_map,
)
from tests.badinput import assert_clear_error, table

F64 = torch.float64

Q, K, V = (torch.randn(2, 3, 5, 4) for _ in range(3))

ERRORS, case = table()
case("q-rank", lambda: linear_attention(Q[0], K, V), "q", "(B, H, T, D_k)", "(3, 5, 4)")
case("k-width", lambda: linear_attention(Q, K[..., :3], V), "k", "(2, 3, S, 4)", "(2, 3, 5, 3)")
case("v-length", lambda: linear_attention(Q, K, V[:, :, :4]), "v", "(2, 3, 5, D_v)", "(2, 3, 4, 4)")
case("causal-length", lambda: linear_attention(Q, K[:, :, :4], V[:, :, :4],
                                               causal=True), "k", "T = 5", "4")
case("dtype", lambda: linear_attention(Q, K.double(), V), "q, k, v", "float64")
case("int", lambda: linear_attention(Q.long(), K, V), "q", "int64")
case("causal-flag", lambda: linear_attention(Q, K, V, causal=1), "causal", "int")
case("feature_map", lambda: linear_attention(Q, K, V, feature_map="elu"), "feature_map", "str")
case("eps", lambda: linear_attention(Q, K, V, eps=-1.0), "eps", "-1.0")
case("chunk_size", lambda: linear_attention_chunked(Q, K, V, chunk_size=0), "chunk_size", "0")
case("state", lambda: linear_attention_recurrent(Q, K, V, (torch.zeros(2, 3, 4, 4),
                                                           torch.zeros(2, 3, 5))), "z", "(2, 3, 4)",
     "(2, 3, 5)")
case("module-heads", lambda: LinearAttention(6, num_heads=4), "embed_dim", "num_heads")
case("module-x", lambda: LinearAttention(8, 2)(torch.randn(2, 5, 6)), "x", "(B, T, 8)", "(2, 5, 6)")
case("module-dtype", lambda: LinearAttention(8, 2)(torch.randn(2, 5, 8, dtype=F64)), "x", "float64")
case("lm-ids", lambda: LinearAttentionLM(10, 8, 2)(torch.randn(2, 5)), "ids", "float32")
case("lm-range", lambda: LinearAttentionLM(10, 8, 2)(torch.full((2, 5), 10)), "ids", "10")
case("lm-state", lambda: LinearAttentionLM(10, 8, 2)(torch.zeros(2, 5, dtype=torch.long),
                                                     [None]), "state", "2 pairs")
case("lm-state-shape", lambda: LinearAttentionLM(10, 8, 2, num_layers=1).step(
        torch.zeros(2, dtype=torch.long), [(torch.zeros(2, 2, 4, 4), torch.zeros(2, 2, 3))]), "state[0][1]",
     "(2, 2, 4)", "(2, 2, 3)")
case("lm-step-ids", lambda: LinearAttentionLM(10, 8, 2).step(
        torch.zeros(2, 1, dtype=torch.long)), "ids", "(B,)", "(2, 1)")
case("lm-heads", lambda: LinearAttentionLM(10, 6, num_heads=4), "embed_dim", "num_heads")
case("lm-d_ff", lambda: LinearAttentionLM(10, 8, 2, d_ff=0), "d_ff", "0")
case("taylor-type", lambda: taylor_feature_map([1.0, 2.0]), "x", "list")
case("taylor-int", lambda: taylor_feature_map(torch.ones(3, dtype=torch.long)), "x", "int64")
case("taylor-scalar", lambda: taylor_feature_map(torch.tensor(1.0)), "x", "(..., d)", "0-D")
case("prf-d", lambda: PositiveRandomFeatures(0, 8), "d", "0")
case("prf-m", lambda: PositiveRandomFeatures(4, 2.5), "m", "2.5")
case("prf-generator", lambda: PositiveRandomFeatures(4, 8, generator=0), "generator", "int")
case("prf-x", lambda: PositiveRandomFeatures(4, 8)(torch.randn(3, 5)), "x", "(..., 4)", "(3, 5)")
case("prf-dtype", lambda: PositiveRandomFeatures(4, 8)(torch.randn(3, 4, dtype=F64)), "x",
     "float64")


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)
