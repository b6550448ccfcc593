"""How close is close enough: the tolerance policy of the unit tests, and its helpers.

Why any tolerance at all. Two computations of one function rarely agree to the last bit, because a
floating-point sum depends on the order of its additions, and that order changes with the CPU kernel
(PyTorch picks AVX-512, AVX2 or plain code at run time; ``ATEN_CPU_CAPABILITY=default|avx2|avx512``
forces one), with the number of threads (each sums its own block, then the blocks are added), with
the GPU, and with the library (MKL, oneDNN, cuBLAS, cuDNN). A tolerance that passes on one machine by
luck fails on the next, so every tolerance here follows from the dtype and the size of the sums.

The formula. Every rounding has relative error at most eps/2 (eps = ``torch.finfo(dtype).eps``:
1.2e-7 for float32, 2.2e-16 for float64). A sum of n terms is off by at most about n * eps times the
size of its terms in the worst case (every rounding in the same direction), and by about sqrt(n) * eps
typically (independent roundings add up like a random walk); two summation orders differ by as much.
We allow::

    rtol = SAFETY * sqrt(n) * eps,    atol = rtol * scale,    SAFETY = 32

* n counts the terms summed into one compared element along the whole computation: the inner
  dimension of a matrix product, d_k + S for attention, the sum of these over the layers a value passes
  through, the same again for a gradient, plus B * T for a parameter gradient summed over a batch of
  sequences. Only sqrt(n) enters, so a rough count is enough.
* scale is the size of the terms the error is relative to. The tests feed values of order 1, so a
  result that is near 0 by cancellation still carries the rounding error of order-1 terms: scale is
  max(1, max |expected|).
* SAFETY = 32: the largest of m compared elements sits about 4 standard deviations out, about
  1.6 * sqrt(n) * eps for m = 10^4; 32 leaves a factor 20 for what the random-walk model leaves out:
  exp, tanh and sin in vector kernels are 1-2 ulp off the scalar ones, softmax and angles amplify
  errors a little, GPUs split sums further. Measured on AVX-512, AVX2 and default kernels with 1 and 2
  threads, the largest float32 error is below a quarter of this tolerance in every test.

The rules.

1. A test that proves "same math" (our module against PyTorch's built-in, a fast path against the
   readable one, a batch against a loop, a module against its equations) runs in float64 and calls
   :func:`assert_same_math`. Its tolerance is about 1e-14 * sqrt(n): any summation order passes, while
   a missing term, a wrong scale or a hidden float32 step (an error of 1e-8 or more) fails.
2. A float32 comparison stays only where float32 itself is the point (the dtype the chapters train
   in, PyTorch's fused float32 kernels, a property such as "the weights sum to 1" of the default
   module); it calls :func:`assert_close`, the same formula at float32's eps.
3. A tolerance that bounds a modelling error rather than rounding (a softmax at large beta that is
   nearly a max, a Monte Carlo estimate of a kernel) is written out with its reason next to it.
4. What must be exact (ids, masks, decoded sequences, counts, zeros on padding) is compared exactly:
   ``torch.equal``, ``==``.
5. ``tests/conftest.py`` turns TF32 off on CUDA (it rounds matrix-product inputs to 10 bits, eps 1e-3)
   and seeds torch before every test, so no result depends on which tests ran before (pytest-randomly
   reseeds ``random`` and numpy for every test, not torch).
"""

import math

import pytest
import torch

__all__ = ["SAFETY", "tol", "assert_close", "assert_same_math", "approx"]

SAFETY = 32


def tol(dtype: torch.dtype, n: int = 1, scale: float = 1.0) -> dict[str, float]:
    """``dict(rtol=, atol=)`` for ``torch.testing.assert_close``: rtol = SAFETY sqrt(n) eps(dtype),
    atol = rtol * scale. Integer and bool dtypes get 0 and 0 (exact)."""
    if not (dtype.is_floating_point or dtype.is_complex):
        return {"rtol": 0.0, "atol": 0.0}
    rtol = SAFETY * math.sqrt(max(int(n), 1)) * torch.finfo(dtype).eps
    return {"rtol": rtol, "atol": rtol * float(scale)}


def _scale(expected: torch.Tensor) -> float:
    """max(1, max |expected|) over the finite elements."""
    if not (expected.is_floating_point() or expected.is_complex()) or expected.numel() == 0:
        return 1.0
    size = expected.detach().abs()
    size = size[torch.isfinite(size)]
    return max(1.0, size.max().item()) if size.numel() else 1.0


def assert_close(actual: torch.Tensor, expected: torch.Tensor, n: int = 1, scale: float | None = None,
                 msg=None) -> None:
    """``torch.testing.assert_close`` with the policy's tolerance for ``expected``'s dtype and sums of
    ``n`` terms. ``scale`` defaults to max(1, max |expected|); pass the size of the terms where they
    are larger than the result (log-sum-exp of logits of size 1e4, say)."""
    scale = _scale(expected) if scale is None else scale
    torch.testing.assert_close(actual, expected, **tol(expected.dtype, n, scale), msg=msg)


def assert_same_math(actual: torch.Tensor, expected: torch.Tensor, n: int = 1, scale: float | None = None,
                     msg=None) -> None:
    """:func:`assert_close` for a float64 proof that two computations are the same function."""
    if expected.dtype not in (torch.float64, torch.complex128):
        raise TypeError(f"a same-math comparison runs in float64, got {expected.dtype}")
    assert_close(actual, expected, n, scale, msg=msg)


def approx(expected: float, dtype: torch.dtype = torch.float64, n: int = 1):
    """``pytest.approx`` with the policy's tolerance, for a Python number computed in ``dtype`` (Python
    floats are float64) from sums of ``n`` terms."""
    size = abs(expected) if math.isfinite(expected) else 1.0
    t = tol(dtype, n, max(1.0, size))
    return pytest.approx(expected, rel=t["rtol"], abs=t["atol"])
