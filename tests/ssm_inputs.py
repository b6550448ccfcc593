"""Random inputs of the state-space models of ``seqbook.ssm``, shared by their tests
(``tests/models/test_ssm.py``) and their bad-input tests (``tests/bad_input/test_bad_input_ssm.py``)."""

from __future__ import annotations

import torch

F64 = torch.float64


def diagonal_system(E, N, device="cpu", dtype=F64):
    """A random stable diagonal SSM with steps large enough that the state matters:
    A, B, C (E, N), D, delta (E,)."""
    A = -(torch.rand(E, N, dtype=dtype, device=device) + 0.1)
    B = torch.randn(E, N, dtype=dtype, device=device)
    C = torch.randn(E, N, dtype=dtype, device=device)
    D = torch.randn(E, dtype=dtype, device=device)
    delta = torch.rand(E, dtype=dtype, device=device) + 0.1
    return A, B, C, D, delta


def selective_inputs(b, T, E, N, device="cpu", dtype=F64):
    """The arguments of a selective scan: x, delta (b, T, E), A (E, N), B, C (b, T, N), D (E,)."""
    x = torch.randn(b, T, E, dtype=dtype, device=device)
    delta = torch.rand(b, T, E, dtype=dtype, device=device) + 0.05
    A = -(torch.rand(E, N, dtype=dtype, device=device) + 0.1)
    B = torch.randn(b, T, N, dtype=dtype, device=device)
    C = torch.randn(b, T, N, dtype=dtype, device=device)
    D = torch.randn(E, dtype=dtype, device=device)
    return x, delta, A, B, C, D
