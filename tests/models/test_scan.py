"""Gated linear recurrences (seqbook.scan): the doubling scan, the work-efficient scan and
the log-space scan give the loop's states, for any length; their gradients; MinGRU in parallel and step
by step."""

import pytest
import torch
from tolerance import assert_close, assert_same_math

from seqbook.scan import (
    MinGRU,
    blelloch_scan,
    linear_recurrence,
    log_space_scan,
    parallel_scan,
)

F64 = torch.float64
LENGTHS = [1, 2, 3, 7, 8, 13, 33]  # powers of two and not, and a single step


def gates_and_inputs(T, device, shape=(2, 3, 4), dtype=F64):
    """Gates in (0.5, 1), inputs of both signs, an initial state: (B, T, *), (B, *)."""
    B, *rest = shape
    a = torch.rand(B, T, *rest, dtype=dtype, device=device) * 0.5 + 0.5
    b = torch.randn(B, T, *rest, dtype=dtype, device=device)
    h0 = torch.randn(B, *rest, dtype=dtype, device=device)
    return a, b, h0


@pytest.mark.parametrize("T", LENGTHS)
def test_parallel_scan_equals_the_loop(T, device):
    a, b, h0 = gates_and_inputs(T, device)
    for start in (None, h0):
        expected = linear_recurrence(a, b, start)
        assert expected.shape == b.shape
        assert_same_math(parallel_scan(a, b, start), expected, n=T)


@pytest.mark.parametrize("T", LENGTHS + [5, 6, 31, 64, 65])
def test_blelloch_scan_equals_the_loop(T, device):
    # odd lengths at every level of the recursion, powers of two and one more
    a, b, h0 = gates_and_inputs(T, device)
    for start in (None, h0):
        assert_same_math(blelloch_scan(a, b, start), linear_recurrence(a, b, start), n=T)


def test_blelloch_scan_does_linear_work():
    # the products it computes: about 3T for T a power of two (2 per composition on the
    # way up, 1 per step down), against the doubling scan's 2 per position and round
    from torch.overrides import TorchFunctionMode

    class Products(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.numbers = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if getattr(func, "__name__", None) == "mul":
                self.numbers += out.numel()
            return out

    a, b, _ = gates_and_inputs(1024, "cpu", shape=(1, 1))
    counts = {}
    for fn in (blelloch_scan, parallel_scan):
        with Products() as products:
            fn(a, b)
        counts[fn.__name__] = products.numbers
    assert counts["blelloch_scan"] <= 3 * 1024
    assert counts["parallel_scan"] >= 10 * 1024  # 2 per position and round, 10 rounds, less


@pytest.mark.parametrize("T", LENGTHS)
def test_log_space_scan_equals_the_loop(T, device):
    a, b, h0 = gates_and_inputs(T, device)
    b[:, 0] = 0.0  # an exact zero input takes the tiny-number path of both parts
    for start in (None, h0):
        expected = linear_recurrence(a, b, start)
        # rounding grows like eps * |sum log a| (documented), at most 0.7 T here
        assert_same_math(log_space_scan(a.log(), b, start), expected, n=T * T)


def test_loop_is_the_recurrence_by_hand():
    a = torch.tensor([[0.5, 0.25, 1.0]], dtype=F64)
    b = torch.tensor([[1.0, 2.0, -3.0]], dtype=F64)
    h = linear_recurrence(a, b, torch.tensor([4.0], dtype=F64))
    assert h.tolist() == [[3.0, 2.75, -0.25]]  # 0.5*4+1, 0.25*3+2, 2.75-3


def test_scans_keep_dtype_and_device(device):
    a, b, _ = gates_and_inputs(5, device, dtype=torch.float32)
    for fn, first in ((parallel_scan, a), (blelloch_scan, a), (log_space_scan, a.log())):
        out = fn(first, b)
        assert out.dtype == torch.float32 and out.device.type == device.type
        assert_close(out, linear_recurrence(a, b), n=25)


def test_log_space_scan_survives_products_that_underflow():
    # prod a_r = 0.01^400 = 1e-800 underflows float64; the naive form exp(A) times
    # cumsum(b exp(-A)) would give 0 * inf. The two scans stay finite and agree.
    a = torch.full((1, 400, 2), 0.01, dtype=F64)
    b = torch.randn(1, 400, 2, dtype=F64)
    expected = linear_recurrence(a, b)
    assert torch.isfinite(log_space_scan(a.log(), b)).all()
    assert_same_math(log_space_scan(a.log(), b), expected, n=400 * 400)
    assert_same_math(parallel_scan(a, b), expected, n=400)


@pytest.mark.parametrize("fn", ["linear_recurrence", "parallel_scan", "blelloch_scan",
                                "log_space_scan"])
def test_gradcheck(fn):
    a, b, h0 = gates_and_inputs(5, "cpu", shape=(2, 3))
    f = {"linear_recurrence": linear_recurrence, "parallel_scan": parallel_scan,
         "blelloch_scan": blelloch_scan,
         "log_space_scan": lambda a, b, h0: log_space_scan(a.log(), b, h0)}[fn]
    b = b + 0.1 * b.sign()  # keep b away from 0, where b+ and b- have a kink
    inputs = tuple(t.requires_grad_() for t in (a, b, h0))
    assert torch.autograd.gradcheck(f, inputs)


@pytest.mark.parametrize("T", [1, 6, 17])
def test_min_gru_parallel_equals_step_by_step(T, device):
    gru = MinGRU(3, 5).to(device, F64)
    x = torch.randn(2, T, 3, dtype=F64, device=device)
    h0 = torch.randn(1, 2, 5, dtype=F64, device=device)
    for start in (None, h0):
        output, h_n = gru(x, start)
        h = torch.zeros(2, 5, dtype=F64, device=device) if start is None else start[0]
        steps = []
        for t in range(T):
            h = gru.step(x[:, t], h)
            steps.append(h)
        assert output.shape == (2, T, 5) and h_n.shape == (1, 2, 5)
        assert_same_math(output, torch.stack(steps, dim=1), n=3 * T)
        assert torch.equal(h_n[0], output[:, -1])


def test_min_gru_is_its_equations():
    gru = MinGRU(2, 3).double()
    x = torch.randn(1, 1, 2, dtype=F64)
    h0 = torch.randn(1, 1, 3, dtype=F64)
    z = torch.sigmoid(x @ gru.linear_z.weight.T + gru.linear_z.bias)
    h_tilde = x @ gru.linear_h.weight.T + gru.linear_h.bias
    output, _ = gru(x, h0)
    assert_same_math(output, (1 - z) * h0 + z * h_tilde, n=2)


def test_min_gru_gradients_flow_through_the_scan():
    gru = MinGRU(2, 3).double()
    x = torch.randn(2, 4, 2, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: gru(x)[0], (x,))
