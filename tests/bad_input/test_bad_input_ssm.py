"""Bad input to seqbook.ssm: the SSM functions, ``MambaBlock``, ``Mamba2Block``, ``DiagonalSSM`` and
``MambaLM`` refuse it with a ValueError/TypeError raised by seqbook that names the argument.
"""

import pytest
import torch

from seqbook.ssm import (
    DiagonalSSM,
    Mamba2Block,
    MambaBlock,
    MambaLM,
    decay_mask,
    discretize_zoh,
    dplr_kernel,
    hippo_legs,
    legendre_basis,
    legs_scan,
    selective_scan,
    selective_scan_parallel,
    ssd_attention_form,
    ssd_chunk_scan,
    ssd_recurrent,
    ssm_convolution,
    ssm_kernel,
    ssm_recurrent,
)
from tests.badinput import assert_clear_error, table
from tests.ssm_inputs import diagonal_system, selective_inputs

F64 = torch.float64

# float32 inputs of the model tests' shapes: x, delta (B, T, E) = (2, 5, 3), A (E, N) = (3, 4), B and C
# (B, T, N), D (E,); and A2, B2 (E, N) of a diagonal SSM
X, DELTA, A_, B_, C_, D_ = selective_inputs(2, 5, 3, 4, dtype=torch.float32)
A2, B2 = diagonal_system(3, 4, dtype=torch.float32)[:2]

ERRORS, case = table()
case("zoh-B-shape", lambda: discretize_zoh(A2, B2[:, :3], torch.ones(3)), "B", "(3, 4)", "(3, 3)")
case("zoh-delta", lambda: discretize_zoh(A2, B2, torch.ones(4)), "delta", "(3,)", "(4,)")
case("recurrent-x-rank", lambda: ssm_recurrent(X[0], A2, B2, B2), "x", "(batch, T, E)")
case("recurrent-A_bar", lambda: ssm_recurrent(X, A2[:2], B2, B2), "A_bar", "(3, N)", "(2, 4)")
case("kernel-length", lambda: ssm_kernel(A2, B2, B2, 0), "length", "0")
case("conv-short-K", lambda: ssm_convolution(X, torch.randn(3, 4)), "K", "T = 5", "4")
case("conv-fft", lambda: ssm_convolution(X, torch.randn(3, 5), fft="yes"), "fft", "str")
case("scan-delta", lambda: selective_scan(X, DELTA[:, :4], A_, B_, C_), "delta", "(2, 5, 3)", "(2, 4, 3)")
case("scan-A", lambda: selective_scan(X, DELTA, A_.T, B_, C_), "A", "(3, N)", "(4, 3)")
case("scan-C", lambda: selective_scan_parallel(X, DELTA, A_, B_, C_[..., :3]), "C", "(2, 5, 4)", "(2, 5, 3)")
case("scan-D", lambda: selective_scan(X, DELTA, A_, B_, C_, D_[:2]), "D", "(3,)")
case("scan-dtype", lambda: selective_scan(X, DELTA.double(), A_, B_, C_), "delta", "float64", "float32")
case("scan-int", lambda: selective_scan(X.long(), DELTA, A_, B_, C_), "x", "int64")
case("ssd-log_a", lambda: ssd_attention_form(torch.randn(2, 3, 5, 4),
                                             torch.rand(2, 3, 4),
                                             torch.randn(2, 3, 5, 2),
                                             torch.randn(2, 3, 5, 2)), "log_a", "(2, 3, 5)", "(2, 3, 4)")
case("ssd-C", lambda: ssd_recurrent(torch.randn(2, 3, 5, 4), torch.rand(2, 3, 5),
                                    torch.randn(2, 3, 5, 2), torch.randn(2, 3, 5, 3)), "C", "(2, 3, 5, 2)")
case("mask-scalar", lambda: decay_mask(torch.tensor(0.5)), "log_a", "(..., T)")
case("hippo-d_state", lambda: hippo_legs("4"), "d_state", "str")
case("legendre-x-int", lambda: legendre_basis(torch.arange(3), 4), "x", "int64")
case("legs-x-rank", lambda: legs_scan(torch.randn(2, 3, 4), 4), "x", "(T,) or (batch, T)", "(2, 3, 4)")
case("legs-x-int", lambda: legs_scan(torch.arange(5), 4), "x", "int64")
case("chunk-initial_state", lambda: ssd_chunk_scan(torch.randn(2, 3, 5, 4), torch.rand(2, 3, 5),
                                                  torch.randn(2, 3, 5, 2), torch.randn(2, 3, 5, 2),
                                                  initial_state=torch.zeros(2, 3, 4, 2)),
     "initial_state", "(2, 3, 2, 4)", "(2, 3, 4, 2)")
case("chunk-return", lambda: ssd_chunk_scan(torch.randn(2, 3, 5, 4), torch.rand(2, 3, 5),
                                           torch.randn(2, 3, 5, 2), torch.randn(2, 3, 5, 2),
                                           return_final_state=1), "return_final_state", "int")
Z4 = torch.ones(4, dtype=torch.complex64)
case("dplr-P", lambda: dplr_kernel(Z4, Z4[:3], Z4, Z4, 0.1, 8), "P", "(4,)", "(3,)")
case("dplr-real", lambda: dplr_kernel(Z4.real, Z4, Z4, Z4, 0.1, 8), "Lambda", "complex", "float32")
case("dplr-dtype", lambda: dplr_kernel(Z4, Z4, Z4.to(torch.complex128), Z4, 0.1, 8), "B", "complex128")
case("dplr-step", lambda: dplr_kernel(Z4, Z4, Z4, Z4, 0.0, 8), "step", "0")
case("block-u", lambda: MambaBlock(8)(torch.randn(2, 5, 6)), "u", "(batch, T, 8)", "(2, 5, 6)")
case("block-dtype", lambda: MambaBlock(8)(torch.randn(2, 5, 8, dtype=F64)), "u", "float64")
case("block-scan", lambda: MambaBlock(8, scan="fft"), "scan", "'fft'")
case("block-dt_rank", lambda: MambaBlock(8, dt_rank="big"), "dt_rank", "str")
case("ssm-layer-x", lambda: DiagonalSSM(3)(torch.randn(2, 5, 4)), "x", "(batch, T, 3)")
case("step-u", lambda: MambaBlock(8).step(torch.randn(2, 5, 8)), "u", "(batch, 8)", "(2, 5, 8)")
case("step-state", lambda: MambaBlock(8).step(torch.randn(2, 8), torch.zeros(2, 16)), "state", "pair")
case("step-h", lambda: MambaBlock(8, d_state=4).step(
        torch.randn(2, 8), (torch.zeros(2, 16, 3), torch.zeros(2, 16, 5))), "h", "(2, 16, 4)", "(2, 16, 5)")
case("step-conv", lambda: MambaBlock(8).step(
        torch.randn(2, 8), (torch.zeros(2, 16, 4), torch.zeros(2, 16, 16))), "conv_state", "(2, 16, 3)",
     "(2, 16, 4)")
case("chunk-size", lambda: ssd_chunk_scan(torch.randn(2, 3, 5, 4), torch.rand(2, 3, 5),
                                         torch.randn(2, 3, 5, 2), torch.randn(2, 3, 5, 2), 0),
     "chunk_size", "0")
case("chunk-B", lambda: ssd_chunk_scan(torch.randn(2, 3, 5, 4), torch.rand(2, 3, 5),
                                      torch.randn(2, 3, 4, 2), torch.randn(2, 3, 5, 2)),
     "B", "(2, 3, 5, N)", "(2, 3, 4, 2)")
case("m2-head_dim", lambda: Mamba2Block(8, head_dim=5), "head_dim", "16", "5")
case("m2-groups", lambda: Mamba2Block(8, head_dim=4, n_groups=3), "n_groups", "heads, 4", "3")
case("m2-eps", lambda: Mamba2Block(8, eps=0.0), "eps", "0")
case("m2-u", lambda: Mamba2Block(8, head_dim=4)(torch.randn(2, 5, 6)), "u", "(batch, T, 8)",
     "(2, 5, 6)")
case("m2-dtype", lambda: Mamba2Block(8, head_dim=4)(torch.randn(2, 5, 8, dtype=F64)), "u",
     "float64")
case("m2-step-u", lambda: Mamba2Block(8, head_dim=4).step(torch.randn(2, 5, 8)), "u",
     "(batch, 8)", "(2, 5, 8)")
case("m2-step-state", lambda: Mamba2Block(8, head_dim=4).step(torch.randn(2, 8),
                                                              torch.zeros(2, 16)), "state", "pair")
case("m2-step-h", lambda: Mamba2Block(8, d_state=4, head_dim=4).step(
        torch.randn(2, 8), (torch.zeros(2, 24, 3), torch.zeros(2, 4, 4, 5))), "h",
     "(2, 4, 4, 4)", "(2, 4, 4, 5)")
case("m2-step-conv", lambda: Mamba2Block(8, d_state=4, head_dim=4).step(
        torch.randn(2, 8), (torch.zeros(2, 16, 3), torch.zeros(2, 4, 4, 4))), "conv_state",
     "(2, 24, 3)", "(2, 16, 3)")
case("lm-ids", lambda: MambaLM(10, 8)(torch.zeros(2, 5)), "ids", "float32")
case("lm-range", lambda: MambaLM(10, 8)(torch.full((2, 5), -1)), "ids", "-1")
case("lm-step-ids", lambda: MambaLM(10, 8).step(torch.zeros(2, 3, dtype=torch.long)), "ids", "(B,)")
case("lm-state", lambda: MambaLM(10, 8, num_layers=2).step(
        torch.zeros(2, dtype=torch.long), [None]), "state", "2 pairs")
case("lm-scan", lambda: MambaLM(10, 8, scan="fft"), "scan", "'fft'")
case("lm-mamba2", lambda: MambaLM(10, 8, mamba2="yes"), "mamba2", "str")
case("lm-mamba2-head_dim", lambda: MambaLM(10, 8, mamba2=True, head_dim=5), "head_dim", "16", "5")


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)
