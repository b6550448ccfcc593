"""Chapter 10's exercise checks (seqbook.exercises.ch10): each passes a right answer, calls the
untouched starter "not attempted" (the find-the-bug starter gets its bug named), and names what is
wrong in each typical wrong answer."""

import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.linalg import solve_triangular

from seqbook.delta_rule import delta_rule_chunked, delta_rule_recurrent
from seqbook.exercises import check
from seqbook.ssm import decay_mask, ssd_attention_form, ssd_chunk_scan, ssd_recurrent
from tests.random_state import assert_random_state_untouched


def starter(*args):
    raise NotImplementedError  # your code here


# --- the size of the state ----------------------------------------------------------------------


def test_state_size():
    T, D = 4096, 64
    assert check("ex-ch10-state-size", (2 * T * D, D * D + D))
    assert check("ex-ch10-state-size", ...).status == "not attempted"
    assert "a key and a value" in check("ex-ch10-state-size", (T * D, D * D + D)).message
    assert "count z too" in check("ex-ch10-state-size", (2 * T * D, D * D)).message
    assert "swapped" in check("ex-ch10-state-size", (D * D + D, 2 * T * D)).message
    assert "does not grow with T" in check("ex-ch10-state-size", (2 * T * D, 2 * T * D)).message
    assert "must be a pair" in check("ex-ch10-state-size", 5).message
    assert "must be a number" in check("ex-ch10-state-size", ("many", 3)).message
    for dtype in (torch.float16, torch.bfloat16):  # the review's case: 4161 rounds to 4160
        half = check("ex-ch10-state-size", torch.tensor([2 * T * D, D * D + D], dtype=dtype))
        assert "cannot hold these counts" in half.message


@pytest.mark.parametrize("answer", [
    (2 * 4096 * 64, 64 * 65),
    (524288.0, 4160.0),
    (np.int64(524288), np.float32(4160)),
    [torch.tensor(524288), torch.tensor(4160.0, dtype=torch.float64)],
    np.array([524288, 4160]),
    torch.tensor([524288, 4160]),
], ids=["ints", "whole-floats", "numpy-scalars", "0-d-tensors", "array", "tensor"])
def test_state_size_accepts_exact_counts_of_any_type(answer):
    assert check("ex-ch10-state-size", answer)


@pytest.mark.parametrize("answer", [(5.24e5, 4160), (524288, 4.16e3 + 1), (524289, 4160)],
                         ids=["cache-rounded", "state-off-by-one", "cache-off-by-one"])
def test_state_size_wants_the_exact_count(answer):
    result = check("ex-ch10-state-size", answer)
    assert result.status == "fail" and "exact count" in result.message, result
    assert "524288" not in result.message and "4160" not in result.message


# --- the cache of a hybrid ----------------------------------------------------------------------

ALL_ATTENTION = 32 * 131_072 * 2 * 4096 * 2  # 64 GiB
HYBRID_ATTENTION = 4 * 131_072 * 2 * 4096 * 2  # 8 GiB
STATES = 28 * 2 * 4096 * 16 * 4  # 14 MiB, in float32


def test_hybrid_cache():
    right = (ALL_ATTENTION, HYBRID_ATTENTION + STATES)
    assert check("ex-ch10-hybrid-cache", right)
    assert check("ex-ch10-hybrid-cache", ...).status == "not attempted"
    for answer, message in [
        ((HYBRID_ATTENTION + STATES, ALL_ATTENTION), "swapped"),
        ((ALL_ATTENTION // 2, HYBRID_ATTENTION + STATES), "half what it should be"),  # no V
        ((ALL_ATTENTION, HYBRID_ATTENTION // 2 + STATES), "half what it should be"),
        ((ALL_ATTENTION // 2, (HYBRID_ATTENTION + STATES) // 2), "half"),  # numbers, not bytes
        ((ALL_ATTENTION // 4, HYBRID_ATTENTION // 4 + STATES), "a quarter"),
        ((ALL_ATTENTION, HYBRID_ATTENTION), "keep their states too"),
        ((ALL_ATTENTION, HYBRID_ATTENTION + STATES // 2), "states are half"),
        # width d, not 2d, or 2 bytes, not 4: half; both: a quarter
        ((ALL_ATTENTION, HYBRID_ATTENTION + 28 * 4096 * 16 * 4), "states are half"),
        ((ALL_ATTENTION, HYBRID_ATTENTION + 28 * 4096 * 16 * 2), "a quarter of what"),
        ((ALL_ATTENTION, HYBRID_ATTENTION + STATES * 2), "twice what they should be"),
        ((68.7, 8.6), "wanted in bytes"),
        ((ALL_ATTENTION, 8.007), "wanted in bytes"),
        ((65536, 8199), "wanted in bytes"),  # MiB
        ((32 * 128_000 * 2 * 4096 * 2, 4 * 128_000 * 2 * 4096 * 2 + STATES), "not 128 000"),
        (torch.tensor([ALL_ATTENTION, HYBRID_ATTENTION + STATES], dtype=torch.bfloat16),
         "cannot hold these counts exactly"),
        ((ALL_ATTENTION, HYBRID_ATTENTION + 28 * 131_072 * 2 * 4096 * 4), "do not grow with T"),
        ((64, 8.008), "in bytes, not in KiB"),
        ((ALL_ATTENTION, HYBRID_ATTENTION + STATES + 1), "exact count"),
        ((ALL_ATTENTION, HYBRID_ATTENTION + 27 * 2 * 4096 * 16 * 4), "not the hybrid's"),
        ((ALL_ATTENTION, HYBRID_ATTENTION + 32 * 2 * 4096 * 16 * 4), "all 32 layers"),
        ((ALL_ATTENTION, HYBRID_ATTENTION + 28 * 2 * 4096 * (16 + 3) * 4), "convolution's inputs"),
        ((ALL_ATTENTION + 2 * 4096 * 2, HYBRID_ATTENTION + STATES), "exact count"),
        (5, "must be a pair"),
        (("many", 3), "must be a number"),
    ]:
        result = check("ex-ch10-hybrid-cache", answer)
        assert result.status == "fail" and message in result.message, (answer, result)
        assert str(ALL_ATTENTION) not in result.message  # no answer given away


@pytest.mark.parametrize("answer", [
    (68_719_476_736, 8_604_614_656),
    (6.8719476736e10, 8604614656.0),
    np.array([68_719_476_736, 8_604_614_656]),
    (torch.tensor(68_719_476_736), np.int64(8_604_614_656)),
    (2**36, 2**33 + 14 * 2**20),
], ids=["ints", "floats", "array", "tensor-and-numpy", "powers-of-two"])
def test_hybrid_cache_accepts_exact_counts_of_any_type(answer):
    assert check("ex-ch10-hybrid-cache", answer)


# --- find the bug: combine ----------------------------------------------------------------------


def test_combine():
    def right(first, second):
        (a1, b1), (a2, b2) = first, second
        return a1 * a2, a2 * b1 + b2

    def buggy(first, second):  # the starter of the exercise
        (a1, b1), (a2, b2) = first, second
        return a1 * a2, a1 * b2 + b1

    def sum_of_gates(first, second):
        (a1, b1), (a2, b2) = first, second
        return a1 + a2, a2 * b1 + b2

    def in_float32(first, second):
        (a1, b1), (a2, b2) = first, second
        return (a1 * a2).float(), (a2 * b1 + b2).float()

    def as_arrays(first, second):
        (a1, b1), (a2, b2) = first, second
        return (a1 * a2).numpy(), (a2.numpy() * b1.numpy() + b2.numpy())

    def with_addcmul(first, second):
        (a1, b1), (a2, b2) = first, second
        return a1 * a2, torch.addcmul(b2, a2, b1)

    assert check("ex-ch10-combine", right)
    assert check("ex-ch10-combine", in_float32)
    assert check("ex-ch10-combine", as_arrays)
    assert check("ex-ch10-combine", with_addcmul)
    # one tensor of the two stacked unpacks as the pair (a, b): right too
    assert check("ex-ch10-combine", lambda f, s: torch.stack(right(f, s)))
    assert check("ex-ch10-combine", lambda f, s: torch.stack(right(f, s)).numpy())
    assert "got Tensor" in check("ex-ch10-combine", lambda f, s: right(f, s)[0]).message

    def in_place(first, second):  # the right numbers, written over the first step's tensors
        (a1, b1), (a2, b2) = first, second
        b1.mul_(a2).add_(b2)
        return a1.mul_(a2), b1

    assert "changed its inputs a1 and b1 in place" in check("ex-ch10-combine", in_place).message
    assert check("ex-ch10-combine", starter).status == "not attempted"
    # the chapter stores this line under the starter: the symptom, not the fix
    assert repr(check("ex-ch10-combine", buggy)).replace("\n  ", " ") == (
        "✗ ex-ch10-combine: applied to a state h, the composite step does not give what the step "
        "(a1, b1) followed by the step (a2, b2) gives: its gate a is right, its input b is not")
    assert "product of the two gates" in check("ex-ch10-combine", sum_of_gates).message
    assert "pair (a, b)" in check("ex-ch10-combine", lambda f, s: f[0]).message


# --- causal linear attention ----------------------------------------------------------------------


def phi(x):
    return F.elu(x) + 1


def test_causal_linear_attention():
    def right(q, k, v, eps=0.0):
        q, k = phi(q), phi(k)
        S = torch.einsum("bhtk,bhtv->bhtkv", k, v).cumsum(2)
        z = k.cumsum(2)
        return torch.einsum("bhtk,bhtkv->bhtv", q, S) / ((q * z).sum(-1, keepdim=True) + eps)

    def loop(q, k, v):
        q, k = phi(q), phi(k)
        S = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])
        z = q.new_zeros(*q.shape[:2], q.shape[-1])
        out = []
        for t in range(q.shape[2]):
            S = S + k[:, :, t, :, None] * v[:, :, t, None, :]
            z = z + k[:, :, t]
            qt = q[:, :, t]
            out.append((qt[..., None, :] @ S)[..., 0, :] / (qt * z).sum(-1, keepdim=True))
        return torch.stack(out, 2)

    def unnormalised(q, k, v):
        q, k = phi(q), phi(k)
        return torch.einsum("bhtk,bhtkv->bhtv", q,
                            torch.einsum("bhtk,bhtv->bhtkv", k, v).cumsum(2))

    def float32_state(q, k, v):  # the review's case: torch.zeros makes a float32 state
        q, k = phi(q), phi(k)
        S = torch.zeros(*q.shape[:2], q.shape[-1], v.shape[-1])
        z = torch.zeros(*q.shape[:2], q.shape[-1])
        out = []
        for t in range(q.shape[2]):
            S += k[:, :, t, :, None] * v[:, :, t, None, :]
            z += k[:, :, t]
            qt = q[:, :, t]
            out.append((qt[..., :, None] * S).sum(-2) / (qt * z).sum(-1, keepdim=True))
        return torch.stack(out, 2)

    assert "float32's precision only" in check("ex-ch10-causal-linear-attention",
                                               float32_state).message

    def guarded_features(q, k, v):  # the guard put into phi instead of the normaliser
        q, k = phi(q) + 1e-6, phi(k) + 1e-6
        S = torch.einsum("bhtk,bhtv->bhtkv", k, v).cumsum(2)
        return torch.einsum("bhtk,bhtkv->bhtv", q, S) / (q * k.cumsum(2)).sum(-1, keepdim=True)

    guarded = check("ex-ch10-causal-linear-attention", guarded_features).message
    assert "constant of about 1e-06 is added to the features of the queries and keys" in guarded

    def guarded_keys(q, k, v, c=1e-6):  # the guard on the keys' features only
        q, k = phi(q), phi(k) + c
        S = torch.einsum("bhtk,bhtv->bhtkv", k, v).cumsum(2)
        return torch.einsum("bhtk,bhtkv->bhtv", q, S) / (q * k.cumsum(2)).sum(-1, keepdim=True)

    keys_only = check("ex-ch10-causal-linear-attention", guarded_keys).message
    assert "constant of about 1e-06 is added to the features of the keys" in keys_only
    off_grid = check("ex-ch10-causal-linear-attention",
                     lambda q, k, v: guarded_keys(q, k, v, 5e-6)).message
    assert "about 5e-06" in off_grid

    def relu_features(q, k, v):  # a feature map that can be 0: some normalisers are 0
        q, k = torch.relu(q), torch.relu(k)
        S = torch.einsum("bhtk,bhtv->bhtkv", k, v).cumsum(2)
        return torch.einsum("bhtk,bhtkv->bhtv", q, S) / (q * k.cumsum(2)).sum(-1, keepdim=True)

    assert "NaN entries" in check("ex-ch10-causal-linear-attention", relu_features).message

    def not_causal(q, k, v):
        q, k = phi(q), phi(k)
        return (q @ (k.transpose(-2, -1) @ v)) / (q @ k.sum(2)[..., None])

    def no_phi(q, k, v):
        S = torch.einsum("bhtk,bhtv->bhtkv", k, v).cumsum(2)
        return torch.einsum("bhtk,bhtkv->bhtv", q, S) / (q * k.cumsum(2)).sum(-1, keepdim=True)

    def peeks_one_ahead(q, k, v):  # an off-by-one: step t reads the key and value of t + 1
        k = torch.cat([k[:, :, 1:], k[:, :, -1:]], 2)
        v = torch.cat([v[:, :, 1:], v[:, :, -1:]], 2)
        return right(q, k, v)

    name = "ex-ch10-causal-linear-attention"
    assert check(name, right)
    assert check(name, lambda q, k, v: right(q, k, v, eps=1e-6))
    assert check(name, loop)
    assert check(name, lambda q, k, v: right(q, k, v, eps=1e-7))
    assert check(name, lambda q, k, v: right(q.float(), k.float(), v.float()))
    assert check(name, lambda q, k, v: right(q, k, v).numpy())
    assert check(name, starter).status == "not attempted"
    eps = check(name, lambda q, k, v: right(q, k, v, eps=1e-4))
    assert eps.status == "fail" and "constant of about 1e-04 added to the normaliser" in \
        eps.message, eps
    assert "not normalised" in check(name, unnormalised).message

    def elu_only(q, k, v):  # the feature map without its + 1
        q, k = F.elu(q), F.elu(k)
        S = torch.einsum("bhtk,bhtv->bhtkv", k, v).cumsum(2)
        return torch.einsum("bhtk,bhtkv->bhtv", q, S) / (q * k.cumsum(2)).sum(-1, keepdim=True)

    def by_steps(q, k, v):  # the average over the steps instead of the normaliser
        t = torch.arange(1, q.shape[2] + 1, dtype=q.dtype)[:, None]
        return unnormalised(q, k, v) / t

    assert "elu alone can be negative" in check(name, elu_only).message
    scaled = check(name, lambda q, k, v: right(q / q.shape[-1] ** 0.5, k, v)).message
    assert "divided by sqrt(d)" in scaled
    assert "number of steps t" in check(name, by_steps).message
    assert "steps up to t only" in check(name, not_causal).message
    assert "feature map" in check(name, no_phi).message
    assert "must not see later" in check(name, peeks_one_ahead).message
    def phi_on_keys_only(q, k, v):
        k = phi(k)
        S = torch.einsum("bhtk,bhtv->bhtkv", k, v).cumsum(2)
        return torch.einsum("bhtk,bhtkv->bhtv", q, S) / (q * k.cumsum(2)).sum(-1, keepdim=True)

    assert "keys only" in check(name, phi_on_keys_only).message

    def exclusive(q, k, v):  # the reader's case: S_(t-1), the steps before t only
        q, k = phi(q), phi(k)
        S = torch.einsum("bhtk,bhtv->bhtkv", k, v).cumsum(2)
        S = torch.cat([torch.zeros_like(S[:, :, :1]), S[:, :, :-1]], 2)
        z = torch.cat([torch.zeros_like(k[:, :, :1]), k.cumsum(2)[:, :, :-1]], 2)
        return torch.einsum("bhtk,bhtkv->bhtv", q, S) / ((q * z).sum(-1, keepdim=True) + 1e-6)

    assert "sums of the steps before it" in check(name, exclusive).message
    assert "v's shape" in check(name, lambda q, k, v: q).message

    def clamped(q, k, v):  # the review's case: mLSTM's max(., 1), right while normalisers are >= 1
        q, k = phi(q), phi(k)
        S = torch.einsum("bhtk,bhtv->bhtkv", k, v).cumsum(2)
        den = (q * k.cumsum(2)).sum(-1, keepdim=True).clamp(min=1)
        return torch.einsum("bhtk,bhtkv->bhtv", q, S) / den

    assert "is the normaliser clamped" in check(name, clamped).message


# --- the zero-order hold -----------------------------------------------------------------------------


def test_zoh():
    def right(A, B, delta):
        A_bar = torch.exp(delta[:, None] * A)
        return A_bar, (A_bar - 1) / A * B

    def euler_B(A, B, delta):
        return torch.exp(delta[:, None] * A), delta[:, None] * B

    def no_division(A, B, delta):
        A_bar = torch.exp(delta[:, None] * A)
        return A_bar, (A_bar - 1) * B

    def first_order_A(A, B, delta):
        A_bar = 1 + delta[:, None] * A
        return A_bar, (A_bar - 1) / A * B

    def wrong_axis(A, B, delta):  # delta along the states instead of the channels
        A_bar = torch.exp(delta[None, :] * A)
        return A_bar, (A_bar - 1) / A * B

    assert check("ex-ch10-zoh", right)
    f32 = check("ex-ch10-zoh", lambda A, B, d: [x.double() for x in right(A.float(), B.float(),
                                                                          d.float())])
    assert "float32's precision only" in f32.message
    assert check("ex-ch10-zoh", starter).status == "not attempted"
    assert "Euler" in check("ex-ch10-zoh", euler_B).message
    assert "off by a factor" in check("ex-ch10-zoh", no_division).message
    assert "first-order" in check("ex-ch10-zoh", first_order_A).message
    assert "RuntimeError" in check("ex-ch10-zoh", wrong_axis).message

    def no_trailing_axis(A, B, delta):  # the reader's slip: delta (E,) against A (E, N)
        A_bar = torch.exp(delta * A)
        return A_bar, (A_bar - 1) / A * B

    def wrong_sign(A, B, delta):
        A_bar = torch.exp(delta[:, None] * A)
        return A_bar, (1 - A_bar) / A * B

    def over_delta(A, B, delta):
        A_bar = torch.exp(delta[:, None] * A)
        return A_bar, (A_bar - 1) / (delta[:, None] * A) * B

    assert "delta[:, None]" in check("ex-ch10-zoh", no_trailing_axis).message
    assert "wrong sign" in check("ex-ch10-zoh", wrong_sign).message
    assert "divided by Delta" in check("ex-ch10-zoh", over_delta).message


# --- the kernel of a complex diagonal SSM ------------------------------------------------------------


def _s4d_right(A, B, C, delta, length):
    A_bar = torch.exp(delta * A)
    B_bar = (A_bar - 1) / A * B
    return 2 * ((C * B_bar)[:, None] * A_bar[:, None] ** torch.arange(length)).sum(0).real


def test_s4d_kernel_accepts_right_answers_written_differently():
    def with_conjugates(A, B, C, delta, length):  # both members of each pair, complex sum
        A2, B2, C2 = (torch.cat([t, t.conj()]) for t in (A, B, C))
        A_bar = torch.exp(delta * A2)
        k = torch.arange(length, dtype=torch.float64)
        return (C2[:, None] * A_bar[:, None] ** k * ((A_bar - 1) / A2 * B2)[:, None]).sum(0).real

    def loop(A, B, C, delta, length):
        out = []
        state = (torch.exp(delta * A) - 1) / A * B  # the state after the impulse, B_bar
        for _ in range(length):
            out.append(2 * (C * state).sum().real)
            state = torch.exp(delta * A) * state
        return torch.stack(out)

    def in_numpy(A, B, C, delta, length):
        A, B, C = A.numpy(), B.numpy(), C.numpy()
        A_bar = np.exp(delta * A)
        return 2 * np.real(((C * (A_bar - 1) / A * B)[:, None]
                            * A_bar[:, None] ** np.arange(length)).sum(0))

    def in_complex64(A, B, C, delta, length):
        return _s4d_right(A.to(torch.complex64), B.to(torch.complex64), C.to(torch.complex64),
                          delta, length)

    for answer in (_s4d_right, with_conjugates, loop, in_numpy, in_complex64):
        assert check("ex-ch10-s4d", answer), answer.__name__


def test_s4d_kernel_names_each_slip():
    def half(A, B, C, delta, length):
        return _s4d_right(A, B, C, delta, length) / 2

    def double(A, B, C, delta, length):
        return _s4d_right(A, B, C, delta, length) * 2

    def euler(A, B, C, delta, length):
        return _s4d_right(A, B * delta * A / (torch.exp(delta * A) - 1), C, delta, length)

    def bilinear(A, B, C, delta, length):
        A_bar = (1 + delta / 2 * A) / (1 - delta / 2 * A)
        B_bar = delta * B / (1 - delta / 2 * A)
        return 2 * ((C * B_bar)[:, None] * A_bar[:, None] ** torch.arange(length)).sum(0).real

    def late(A, B, C, delta, length):
        return _s4d_right(A, B * torch.exp(delta * A), C, delta, length)

    def magnitude(A, B, C, delta, length):
        A_bar = torch.exp(delta * A)
        return 2 * ((C * (A_bar - 1) / A * B)[:, None] * A_bar[:, None] ** torch.arange(length)).sum(0).abs()

    def real_A(A, B, C, delta, length):
        return _s4d_right(A.real.to(A.dtype), B, C, delta, length)

    def complex_out(A, B, C, delta, length):
        return _s4d_right(A, B, C, delta, length).to(torch.complex128)

    def short(A, B, C, delta, length):
        return _s4d_right(A, B, C, delta, length - 1)

    def conj_C(A, B, C, delta, length):  # C's conjugate: a different real system
        return _s4d_right(A, B, C.conj(), delta, length)

    def complex64_inside(A, B, C, delta, length):  # NumPy: complex64 ** int64 gives complex128
        A, B, C = (np.asarray(t).astype(np.complex64) for t in (A, B, C))
        A_bar = np.exp(delta * A)
        return 2 * np.real((C * (A_bar - 1) / A * B) @ (A_bar[:, None] ** np.arange(length)))

    assert check("ex-ch10-s4d", starter).status == "not attempted"
    for fn, words in ((half, "half"), (double, "twice what"), (euler, "Euler"),
                      (bilinear, "bilinear"), (late, "one step late"),
                      (magnitude, "real part"), (real_A, "imaginary part of A"),
                      (complex_out, "must be real"), (short, "shape (50,)"),
                      (conj_C, "C is conjugated"),
                      (complex64_inside, "right to float32's precision only")):
        result = check("ex-ch10-s4d", fn)
        assert result.status == "fail" and words in result.message, (fn.__name__, result)


# --- the decay mask -----------------------------------------------------------------------------------


def test_decay_mask():
    def right(log_a):
        T = log_a.shape[-1]
        cum = log_a.cumsum(-1)
        L = (cum[..., :, None] - cum[..., None, :]).exp()
        return L.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), 0.0)

    def future_in(log_a):
        cum = log_a.cumsum(-1)
        return (cum[..., :, None] - cum[..., None, :]).exp()

    def includes_a_j(log_a):
        return right(log_a) * log_a.exp()[..., None, :]

    def zero_diagonal(log_a):
        return right(log_a).tril(-1)

    def masks_the_exponent(log_a):  # the chapter's solution: finite gradients at any length
        T = log_a.shape[-1]
        cum = log_a.cumsum(-1)
        past = torch.ones(T, T, dtype=torch.bool).tril()
        return (cum[..., :, None] - cum[..., None, :]).masked_fill(~past, -float("inf")).exp()

    def clamps_the_exponent(log_a):  # exp(min(A_i - A_j, 0)) is 1 above the diagonal: then tril
        cum = log_a.cumsum(-1)
        return (cum[..., :, None] - cum[..., None, :]).clamp(max=0).exp().tril()

    def into_float32_zeros(log_a):  # a product loop written into a float32 buffer
        return mask_by_entries(log_a, dtype=torch.float32)

    def with_numpy(log_a):
        a = np.exp(log_a.numpy())
        T = a.shape[-1]
        L = np.zeros(a.shape + (T,))
        for i in range(T):
            for j in range(i + 1):
                L[..., i, j] = np.prod(a[..., j + 1:i + 1], axis=-1)
        return L

    def ratio_of_products(log_a):  # the reader's case: cumulative products, then ratios
        P = log_a.exp().cumprod(-1)
        return (P[..., :, None] / P[..., None, :]).tril()

    assert "ratio of two such products is 0 / 0" in check("ex-ch10-decay-mask",
                                                           ratio_of_products).message

    def after_in_float64(log_a):  # the running sum in float64 only pushes the overflow further
        return future_in(log_a.double()).tril().to(log_a.dtype)

    def after_with_numpy(log_a):
        cum = np.cumsum(log_a.numpy(), axis=-1)
        return np.tril(np.exp(cum[..., :, None] - cum[..., None, :]))

    # zeros put in after exp: the right values, but exp overflows first on a long sequence (and
    # the gradient there is NaN), with or without a gradient, in float64 too, and in NumPy
    overflow = "overflows to inf (its exponent reaches 99)"
    for fn in (right, lambda log_a: future_in(log_a).tril(), after_with_numpy,
               lambda log_a: future_in(log_a).detach().tril()):
        after = check("ex-ch10-decay-mask", fn)
        assert after.status == "fail" and overflow in after.message, after
    in_float64 = check("ex-ch10-decay-mask", after_in_float64).message
    assert "gates of e^-10 in float64" in in_float64 and "reaches 990" in in_float64
    assert check("ex-ch10-decay-mask", masks_the_exponent)
    assert check("ex-ch10-decay-mask", clamps_the_exponent)
    assert check("ex-ch10-decay-mask", into_float32_zeros)
    assert check("ex-ch10-decay-mask", with_numpy)
    assert check("ex-ch10-decay-mask", lambda log_a: masks_the_exponent(log_a.float()))
    assert check("ex-ch10-decay-mask", decay_mask)
    assert check("ex-ch10-decay-mask", starter).status == "not attempted"
    # the chapter stores this line under the starter: the symptom, not the fix
    assert repr(check("ex-ch10-decay-mask", future_in)).replace("\n  ", " ") == (
        "✗ ex-ch10-decay-mask: for T = 7, L has entries above 1 (L[0, 6] = 16.39 in the first "
        "sequence): a product of gates, each at most 1, never exceeds 1")
    assert "also multiplies a_j" in check("ex-ch10-decay-mask", includes_a_j).message
    assert "diagonal must be 1" in check("ex-ch10-decay-mask", zero_diagonal).message
    assert "(2, 3, 7, 7)" in check("ex-ch10-decay-mask", lambda log_a: log_a).message


# --- Mamba-2's chunked algorithm -----------------------------------------------------------------------


def chunked(x, log_a, B, C, chunk_size, carry=True, as_list=False):
    T = x.shape[2]
    h = x.new_zeros(*B.shape[:2], B.shape[-1], x.shape[-1])   # (batch, H, N, P)
    ys, states = [], []
    for s in range(0, T, chunk_size):
        xc, lc, Bc, Cc = (t[:, :, s:s + chunk_size] for t in (x, log_a, B, C))
        cum = lc.cumsum(-1)                                     # (batch, H, c)
        inside = (decay_mask(lc) * (Cc @ Bc.transpose(-2, -1))) @ xc
        ys.append(inside + cum.exp()[..., None] * (Cc @ h))
        if carry:
            to_end = (cum[..., -1:] - cum).exp()                # (batch, H, c)
            h = cum[..., -1, None, None].exp() * h + (Bc * to_end[..., None]).transpose(-2, -1) @ xc
        states.append(h)
    return torch.cat(ys, 2), states if as_list else torch.stack(states, 2)


def chunked_einsum(x, log_a, B, C, chunk_size):  # an einsum form, chunks as a new axis
    b, H, T, P = x.shape
    h = x.new_zeros(b, H, B.shape[-1], P)
    ys, states = [], []
    for s in range(0, T, chunk_size):
        xc, lc, Bc, Cc = (t[:, :, s:s + chunk_size] for t in (x, log_a, B, C))
        cum = lc.cumsum(-1)
        c = lc.shape[-1]
        seg = cum[..., :, None] - cum[..., None, :]
        L = seg.masked_fill(~torch.ones(c, c, dtype=torch.bool).tril(), -float("inf")).exp()
        ys.append(torch.einsum("bhij,bhin,bhjn,bhjp->bhip", L, Cc, Bc, xc)
                  + torch.einsum("bhi,bhin,bhnp->bhip", cum.exp(), Cc, h))
        w = (cum[..., -1:] - cum).exp()
        h = cum[..., -1, None, None].exp() * h + torch.einsum("bhj,bhjn,bhjp->bhnp", w, Bc, xc)
        states.append(h)
    return torch.cat(ys, 2), torch.stack(states, 2)


def recurrence(x, log_a, B, C, chunk_size):  # the plain recurrence, chunk_size ignored
    h = x.new_zeros(*B.shape[:2], B.shape[-1], x.shape[-1])
    ys = []
    for t in range(x.shape[2]):
        h = log_a[:, :, t, None, None].exp() * h + B[:, :, t, :, None] * x[:, :, t, None, :]
        ys.append((C[:, :, t, None, :] @ h)[..., 0, :])
    return torch.stack(ys, 2)


def read_at_once(cum, Cc, h):  # the entering state's part of a chunk's y, one product
    return cum.exp()[..., None] * (Cc @ h)


def chunked_by(decay_mask=lambda lc, cum: decay_mask(lc), read=read_at_once):
    """A right ssd_chunked whose chunks' decay masks come from ``decay_mask(lc, cum)`` and the
    entering state's part of y from ``read(cum, Cc, h)``; in a loop (slowly), torch calls that
    grow with the chunk's length, though no state is made from the last."""
    def ssd_chunked(x, log_a, B, C, chunk_size):
        h = x.new_zeros(*B.shape[:2], B.shape[-1], x.shape[-1])
        ys, states = [], []
        for s in range(0, x.shape[2], chunk_size):
            xc, lc, Bc, Cc = (t[:, :, s:s + chunk_size] for t in (x, log_a, B, C))
            cum = lc.cumsum(-1)
            L = decay_mask(lc, cum)
            ys.append((L * (Cc @ Bc.transpose(-2, -1))) @ xc + read(cum, Cc, h))
            h = cum[..., -1, None, None].exp() * h \
                + (Bc * (cum[..., -1:] - cum).exp()[..., None]).transpose(-2, -1) @ xc
            states.append(h)
        return torch.cat(ys, 2), torch.stack(states, 2)
    return ssd_chunked


def mask_by_entries(lc, cum=None, dtype=None):  # calls that grow with the chunk's length squared
    c = lc.shape[-1]
    L = lc.new_zeros(*lc.shape, c, dtype=dtype)
    for i in range(c):
        for j in range(i + 1):
            L[..., i, j] = lc[..., j + 1:i + 1].sum(-1).exp()
    return L


def mask_by_rows(lc, cum):  # a reader's answer: calls that grow with the chunk's length
    c = lc.shape[-1]
    L = lc.new_zeros(*lc.shape, c)
    for i in range(c):
        L[..., i, :i + 1] = torch.exp(cum[..., i:i + 1] - cum[..., :i + 1])
    return L


chunked_mask_loop, chunked_mask_rows = chunked_by(mask_by_entries), chunked_by(mask_by_rows)


def read_by_broadcast(cum, Cc, h):  # a reader's answer: row by row, broadcasting and a sum
    rows = [(cum[..., i, None, None].exp() * Cc[..., i, :, None] * h).sum(-2)
            for i in range(cum.shape[-1])]  # a state-shaped product per position
    return torch.stack(rows, 2)


def read_by_index(cum, Cc, h):  # row by row, h read by indexing, through .mT and its .shape
    rows = []
    for i in range(cum.shape[-1]):
        assert h.shape[-2] == Cc.shape[-1]  # reads, which must not count as writes into h
        rows.append(cum[..., i, None].exp() * (h[:, :].mT @ Cc[..., i, :, None])[..., 0])
    return torch.stack(rows, 2)


# right: the entering state read row by row, no state made from the last
chunked_reading_rows = chunked_by(read=read_by_broadcast)
chunked_reading_rows_by_index = chunked_by(read=read_by_index)


def test_chunked_accepts():
    name = "ex-ch10-chunked"
    assert check(name, chunked)
    assert check(name, chunked_mask_loop)
    assert check(name, chunked_mask_rows)
    assert check(name, chunked_reading_rows)
    assert check(name, chunked_reading_rows_by_index)
    assert check(name, chunked_einsum)
    assert check(name, lambda *a: chunked(*a, as_list=True))  # a list of the states
    assert check(name, lambda x, *a: chunked(x.float(), *(t.float() for t in a[:3]), a[3]))
    assert check(name, lambda *a: tuple(t.numpy() for t in chunked(*a)))


def test_chunked_names_a_last_chunk_that_is_shorter():
    def whole_chunks_only(x, log_a, B, C, chunk_size):  # assumes chunk_size divides T
        b, H, T, P = x.shape
        x.unflatten(2, (-1, chunk_size))
        return chunked(x, log_a, B, C, chunk_size)

    message = check("ex-ch10-chunked", whole_chunks_only).message
    assert "the last chunk has 3 steps only" in message, message


def test_chunked_sees_the_chunks():
    name = "ex-ch10-chunked"

    def ignores_chunks(x, log_a, B, C, chunk_size):  # one chunk, whatever chunk_size says
        return chunked(x, log_a, B, C, x.shape[2])

    def final_state_only(x, log_a, B, C, chunk_size):
        y, states = chunked(x, log_a, B, C, chunk_size)
        return y, states[:, :, -1]

    def entering_states(x, log_a, B, C, chunk_size):
        y, states = chunked(x, log_a, B, C, chunk_size)
        return y, torch.cat([torch.zeros_like(states[:, :, :1]), states[:, :, :-1]], 2)

    def with_the_zero_state(x, log_a, B, C, chunk_size):
        y, states = chunked(x, log_a, B, C, chunk_size)
        return y, torch.cat([torch.zeros_like(states[:, :, :1]), states], 2)

    def states_not_decayed(x, log_a, B, C, chunk_size):
        y, states = chunked(x, log_a, B, C, chunk_size)
        return y, states / 0.9

    def updates_in_place(x, log_a, B, C, chunk_size):  # every kept state is the same tensor
        h = x.new_zeros(*B.shape[:2], B.shape[-1], x.shape[-1])
        ys, states = [], []
        for s in range(0, x.shape[2], chunk_size):
            xc, lc, Bc, Cc = (t[:, :, s:s + chunk_size] for t in (x, log_a, B, C))
            cum = lc.cumsum(-1)
            ys.append((decay_mask(lc) * (Cc @ Bc.transpose(-2, -1))) @ xc
                      + cum.exp()[..., None] * (Cc @ h))
            h *= cum[..., -1, None, None].exp()
            h += (Bc * (cum[..., -1:] - cum).exp()[..., None]).transpose(-2, -1) @ xc
            states.append(h)
        return torch.cat(ys, 2), torch.stack(states, 2)

    assert "every state in states is the last one" in check(name, updates_in_place).message
    for answer in (recurrence, lambda x, log_a, B, C, c: ssd_recurrent(x, log_a, B, C),
                   lambda x, log_a, B, C, c: ssd_attention_form(x, log_a, B, C)):
        result = check(name, answer)
        assert result.status == "fail" and "returns one tensor" in result.message, result
    assert "T = 11 steps make 3 chunks, but states holds 1 state" in check(name, ignores_chunks).message
    assert "a single state" in check(name, final_state_only).message
    assert "the state that enters chunk" in check(name, entering_states).message
    assert "zero state before the first chunk" in check(name, with_the_zero_state).message
    assert "the state after chunk 0" in check(name, states_not_decayed).message


def test_chunked_wrong_outputs():
    def wrong_inside(x, log_a, B, C, chunk_size):
        y, states = chunked(x, log_a, B, C, chunk_size)
        return y + 0.1, states

    name = "ex-ch10-chunked"
    assert check(name, starter).status == "not attempted"
    no_carry = check(name, lambda *a: chunked(*a, carry=False)).message
    assert "first chunk of y is right but a later one is not" in no_carry
    assert "first chunk of y is already wrong" in check(name, wrong_inside).message
    assert "pair (y, states)" in check(name, lambda *a: chunked(*a)[:1]).message
    assert "y must have x's shape" in check(name, lambda *a: (a[0][:, :, :-1], a[1])).message
    assert "must be a function" in check(name, "chunks").message
    no_states = check(name, lambda *a: (chunked(*a)[0], None)).message
    assert "states, the second item of the pair (y, states), must be a tensor, got NoneType" \
        in no_states
    assert "y, the first item" in check(name, lambda *a: ("y", chunked(*a)[1])).message


def every_state(x, log_a, B, C):  # the loop over time: the outputs and the state after each step
    h = x.new_zeros(*B.shape[:2], B.shape[-1], x.shape[-1])
    ys, hs = [], []
    for t in range(x.shape[2]):
        h = log_a[:, :, t, None, None].exp() * h + B[:, :, t, :, None] * x[:, :, t, None, :]
        ys.append((C[:, :, t, None, :] @ h)[..., 0, :])
        hs.append(h)
    return torch.stack(ys, 2), torch.stack(hs, 2)


def _at_chunk_ends(hs, chunk_size):
    T = hs.shape[2]
    return hs[:, :, [min(end, T) - 1 for end in range(chunk_size, T + chunk_size, chunk_size)]]


def loop_keeping_boundaries(x, log_a, B, C, chunk_size):  # a step per position, h kept per chunk
    y, hs = every_state(x, log_a, B, C)
    return y, _at_chunk_ends(hs, chunk_size)


def attention_form_and_loop(x, log_a, B, C, chunk_size):  # y at once, the states from the loop
    return ssd_attention_form(x, log_a, B, C), _at_chunk_ends(every_state(x, log_a, B, C)[1],
                                                             chunk_size)


def attention_form_and_chunk_states(x, log_a, B, C, chunk_size):  # y over the whole sequence
    return ssd_attention_form(x, log_a, B, C), chunked(x, log_a, B, C, chunk_size)[1]


def whole_mask_cut_in_blocks(x, log_a, B, C, chunk_size):  # the T x T mask, then its blocks
    L = decay_mask(log_a)
    h = x.new_zeros(*B.shape[:2], B.shape[-1], x.shape[-1])
    ys, states = [], []
    for s in range(0, x.shape[2], chunk_size):
        e = s + chunk_size
        xc, lc, Bc, Cc = (t[:, :, s:e] for t in (x, log_a, B, C))
        cum = lc.cumsum(-1)
        ys.append((L[..., s:e, s:e] * (Cc @ Bc.transpose(-2, -1))) @ xc
                  + cum.exp()[..., None] * (Cc @ h))
        h = cum[..., -1, None, None].exp() * h \
            + (Bc * (cum[..., -1:] - cum).exp()[..., None]).transpose(-2, -1) @ xc
        states.append(h)
    return torch.cat(ys, 2), torch.stack(states, 2)


def steps_per_sequence_and_head(x, log_a, B, C, chunk_size):
    """Wrong: a step per position, in loops over the batch and the heads, an (N, P) state each
    (a reader's answer)."""
    b, H, T, _ = x.shape
    y, states = torch.zeros_like(x), []
    hs = {(i, j): x.new_zeros(B.shape[-1], x.shape[-1]) for i in range(b) for j in range(H)}
    for s in range(0, T, chunk_size):
        kept = x.new_zeros(b, H, B.shape[-1], x.shape[-1])
        for i in range(b):
            for j in range(H):
                h = hs[i, j]
                for t in range(s, min(s + chunk_size, T)):
                    h = torch.exp(log_a[i, j, t]) * h + torch.outer(B[i, j, t], x[i, j, t])
                    y[i, j, t] = C[i, j, t] @ h
                hs[i, j] = kept[i, j] = h
        states.append(kept)
    return y, torch.stack(states, 2)


def steps_state_reordered(x, log_a, B, C, chunk_size):
    """Wrong: a step per position with the state laid out (b, P, H, N) (a reader's answer)."""
    b, H, T, P = x.shape
    h, ys, states = x.new_zeros(b, P, H, B.shape[-1]), [], []
    for s in range(0, T, chunk_size):
        for t in range(s, min(s + chunk_size, T)):
            h = log_a[:, None, :, t, None].exp() * h \
                + torch.einsum("bhn,bhp->bphn", B[:, :, t], x[:, :, t])
            ys.append(torch.einsum("bhn,bphn->bhp", C[:, :, t], h))
        states.append(h.permute(0, 2, 3, 1))
    return torch.stack(ys, 2), torch.stack(states, 2)


def steps_copied_into_views(x, log_a, B, C, chunk_size):
    """Wrong: a step per position, each state copied into a view of a preallocated tensor,
    or written there by out=."""
    b, H, T, P = x.shape
    hs = x.new_zeros(b, H, T + 1, B.shape[-1], P)
    for t in range(T):
        step = log_a[:, :, t, None, None].exp() * hs[:, :, t]
        if t % 2:
            hs[:, :, t + 1].copy_(step + B[:, :, t, :, None] * x[:, :, t, None, :])
        else:
            torch.add(step, B[:, :, t, :, None] * x[:, :, t, None, :], out=hs[:, :, t + 1])
    y = (C[..., None, :] @ hs[:, :, 1:])[..., 0, :]
    return y, _at_chunk_ends(hs[:, :, 1:], chunk_size)


def steps_by_columns(x, log_a, B, C, chunk_size):
    """Wrong: a step per position with the state kept as P columns of N numbers, so that no
    tensor has the state's shape."""
    b, H, T, P = x.shape
    cols = [x.new_zeros(b, H, B.shape[-1]) for _ in range(P)]
    ys, kept = [], []
    for t in range(T):
        a = log_a[:, :, t, None].exp()
        cols = [a * c + B[:, :, t] * x[:, :, t, p, None] for p, c in enumerate(cols)]
        ys.append(torch.stack([(C[:, :, t] * c).sum(-1) for c in cols], -1))
        if (t + 1) % chunk_size == 0 or t == T - 1:
            kept.append(torch.stack(cols, -1))
    return torch.stack(ys, 2), torch.stack(kept, 2)


def steps_written_in_place(x, log_a, B, C, chunk_size):
    """Wrong: a step per position, each state written into a preallocated tensor of all the
    states (no new tensor is made per step)."""
    b, H, T, P = x.shape
    hs = x.new_zeros(b, H, T + 1, B.shape[-1], P)
    for t in range(T):
        hs[:, :, t + 1] = log_a[:, :, t, None, None].exp() * hs[:, :, t] \
            + B[:, :, t, :, None] * x[:, :, t, None, :]
    y = (C[..., None, :] @ hs[:, :, 1:])[..., 0, :]
    return y, _at_chunk_ends(hs[:, :, 1:], chunk_size)


def test_chunked_sees_the_method():
    name = "ex-ch10-chunked"
    for answer in (loop_keeping_boundaries, attention_form_and_loop, steps_per_sequence_and_head,
                   steps_state_reordered, steps_written_in_place, steps_copied_into_views,
                   steps_by_columns):
        result = check(name, answer)
        assert result.status == "fail" and "runs a step per position inside a chunk" \
            in result.message, result
    for answer in (attention_form_and_chunk_states, whole_mask_cut_in_blocks):
        result = check(name, answer)
        assert result.status == "fail" and "makes a T x T matrix" in result.message, result
    # the main text's ssd_chunk_scan, copied, passes every state at once: no loop over chunks
    result = check(name, states_passed_at_once)
    assert result.status == "fail" and "as many torch calls for 8 chunks as for 2" \
        in result.message, result
    result = check(name, package_outputs_and_loop)
    assert result.status == "fail" and "calls seqbook.ssm.ssd_chunk_scan" in result.message, result


def states_passed_at_once(x, log_a, B, C, chunk_size):  # ssd_chunk_scan, its states kept
    T, c = x.shape[2], chunk_size
    pad = -T % c
    x, B, C = (torch.nn.functional.pad(t, (0, 0, 0, pad)).unflatten(2, (-1, c))
               for t in (x, B, C))
    log_a = torch.nn.functional.pad(log_a, (0, pad)).unflatten(2, (-1, c))
    cum = log_a.cumsum(-1)
    y = (decay_mask(log_a) * (C @ B.transpose(-2, -1))) @ x
    S = (B * (cum[..., -1:] - cum).exp()[..., None]).transpose(-2, -1) @ x
    h = torch.einsum("...kj,...jnp->...knp", decay_mask(cum[..., -1]), S)
    h_in = torch.cat([torch.zeros_like(h[:, :, :1]), h[:, :, :-1]], dim=2)
    y = y + cum.exp()[..., None] * (C @ h_in)
    return y.flatten(2, 3)[:, :, :T], h


def package_outputs_and_loop(x, log_a, B, C, chunk_size):  # y from the package, h by a loop
    return ssd_chunk_scan(x, log_a, B, C, chunk_size), chunked(x, log_a, B, C, chunk_size)[1]


# --- the delta rule overwrites: one worked memory --------------------------------------------------


HEBB_READ, DELTA_READ = (4.0, 1.0), (3.0, -1.0)


@pytest.mark.parametrize("answer", [
    (HEBB_READ, DELTA_READ),
    [list(HEBB_READ), list(DELTA_READ)],
    (np.array(HEBB_READ, dtype=np.float32), torch.tensor(DELTA_READ, dtype=torch.float16)),
    np.array([HEBB_READ, DELTA_READ]),
    torch.tensor([HEBB_READ, DELTA_READ], dtype=torch.bfloat16),
    ([torch.tensor(4.0), 1], (3 + 1e-8, -1.0)),
    ((4 - 9e-7, 1 + 9e-7), (3 + 9e-7, -1 - 9e-7)),
], ids=["tuples", "lists", "numpy-and-half", "array-2x2", "tensor-bfloat16", "mixed",
        "within-1e-6"])
def test_overwrite_accepts(answer):
    assert check("ex-ch10-overwrite", answer)


@pytest.mark.parametrize("answer, says", [
    ((DELTA_READ, HEBB_READ), "wrong order"),
    ((DELTA_READ, DELTA_READ), "only the new value"),
    (((1.0, 2.0), DELTA_READ), "Hebb read-out is what the memory returned before"),
    (((5.0, 1.0), DELTA_READ), "Hebb read-out is not right"),
    ((HEBB_READ, HEBB_READ), "equals the Hebb read-out"),
    ((HEBB_READ, (2.0, -3.0)), "the error that the delta rule writes"),
    ((HEBB_READ, (-1.0, 5.0)), "wrong sign"),
    ((HEBB_READ, (1.0, 2.0)), "delta read-out is what the memory returned before"),
    ((HEBB_READ, (3.0, -1.001)), "delta read-out is not right"),
    ((HEBB_READ, (3.0, -1.000002)), "delta read-out is not right"),
    (((4.000002, 1.0), DELTA_READ), "Hebb read-out is not right"),
    ((HEBB_READ, (3.0, -1.0, 0.0)), "got 3"),
    ((np.zeros((3, 2)), DELTA_READ), "a whole state"),
    ((HEBB_READ, "3, -1"), "must be two numbers"),
    ((HEBB_READ,), "must be a pair"),
    (7, "must be a pair"),
], ids=["swapped", "hebb-forgets-old", "hebb-unchanged", "hebb-other", "delta-adds",
        "delta-error", "delta-sign", "delta-unchanged", "delta-imprecise", "delta-2e-6-off",
        "hebb-2e-6-off", "three-numbers",
        "a-state", "a-string", "one-read-out", "a-number"])
def test_overwrite_refuses(answer, says):
    result = check("ex-ch10-overwrite", answer)
    assert result.status == "fail" and says in result.message, result


def test_overwrite_not_attempted():
    assert check("ex-ch10-overwrite", ...).status == "not attempted"


# --- find the bug: one write of the delta rule ----------------------------------------------------


def hebb_write(S, k, v, beta):  # the starter of the exercise: the read-out is never subtracted
    write = torch.einsum("bk,bv->bkv", k, v)  # k_t v_t^T, the outer product
    return S + beta[:, None, None] * write  # a step of size beta_t


def delta_write(S, k, v, beta):
    read = torch.einsum("bkv,bk->bv", S, k)  # (B, D_v): S_(t-1)^T k_t
    error = beta[:, None] * (v - read)
    return S + torch.einsum("bk,bv->bkv", k, error)


def delta_write_gated_form(S, k, v, beta):  # (I - beta k k^T) S + beta k v^T
    eye = torch.eye(S.shape[1], dtype=S.dtype)
    b = beta[:, None, None]
    return (eye - b * k[:, :, None] * k[:, None, :]) @ S + b * k[:, :, None] * v[:, None, :]


def delta_write_eye_in_float32(S, k, v, beta):  # torch promotes the float32 eye to float64
    eye = torch.eye(S.shape[1])
    b = beta[:, None, None]
    return (eye - b * k[:, :, None] * k[:, None, :]) @ S + b * k[:, :, None] * v[:, None, :]


def delta_write_loop(S, k, v, beta):
    out = []
    for S_i, k_i, v_i, b_i in zip(S, k, v, beta, strict=True):
        out.append(S_i + b_i * torch.outer(k_i, v_i - S_i.T @ k_i))
    return torch.stack(out)


def delta_write_package(S, k, v, beta):
    kk, vv = k[:, None, None], v[:, None, None]
    return delta_rule_recurrent(kk, kk, vv, beta[:, None, None], state=S[:, None])[1][:, 0]


def delta_write_in_place(S, k, v, beta):  # the write goes into S itself, which it returns
    S += _outer(k, beta[:, None] * (v - _read(S, k)))
    return S


def _read(S, k):
    return torch.einsum("bkv,bk->bv", S, k)


def _outer(k, e):
    return torch.einsum("bk,bv->bkv", k, e)


DELTA_SLIPS = {
    "read-wrong-side": (lambda S, k, v, b: S + _outer(k, b[:, None] * (v - (S @ k[:, :, None])[..., 0])),
                        "wrong side of S"),
    "beta-on-v-only": (lambda S, k, v, b: S + _outer(k, b[:, None] * v - _read(S, k)),
                       "fraction beta of the way"),
    "no-beta": (lambda S, k, v, b: S + _outer(k, v - _read(S, k)), "beta has no effect"),
    "normalises-k": (lambda S, k, v, b: delta_write(S, F.normalize(k, dim=-1), v, b),
                     "right for unit keys only"),
    "normalised-lms": (lambda S, k, v, b: S + _outer(k, b[:, None] * (v - _read(S, k)))
                       / (k * k).sum(-1)[:, None, None], "normalised LMS"),
    "normalised-lms-eps": (lambda S, k, v, b: S + _outer(k, b[:, None] * (v - _read(S, k)))
                           / (1e-6 + (k * k).sum(-1))[:, None, None], "|k|^2 + 1e-06"),
    "normalised-lms-eps-0.1": (lambda S, k, v, b: S + _outer(k, b[:, None] * (v - _read(S, k)))
                               / (0.1 + (k * k).sum(-1))[:, None, None], "|k|^2 + 0.1"),
    "sign-of-error": (lambda S, k, v, b: S + _outer(k, b[:, None] * (_read(S, k) - v)), "away from v"),
    "minus-the-write": (lambda S, k, v, b: S - _outer(k, b[:, None] * (v - _read(S, k))),
                        "away from v"),
    "drops-S": (lambda S, k, v, b: _outer(k, b[:, None] * (v - _read(S, k))), "lost what the memory"),
    "outer-transposed": (lambda S, k, v, b: S + _outer(b[:, None] * (v - _read(S, k)), k),
                         "wrong axes"),
    "first-beta-only": (lambda S, k, v, b: S + _outer(k, b[0] * (v - _read(S, k))), "of the batch"),
    "first-key-only": (lambda S, k, v, b: S + _outer(k[:1].expand_as(k), b[:, None] * (v - _read(S, k))),
                       "of the batch"),
    "read-sums-wrong-dim": (lambda S, k, v, b: S + _outer(k, b[:, None] * (v - (S * k[:, :, None]).sum(2))),
                            "(with B = 3, D_k = 4, D_v = 2, unit keys, beta = 1, S = 0)"),
    "loop-misses-last-memory": (lambda S, k, v, b: torch.cat([delta_write(S[:-1], k[:-1], v[:-1], b[:-1]),
                                                            S[-1:]]), "of the batch"),
    "beta-squared": (lambda S, k, v, b: S + _outer(k, b[:, None] ** 2 * (v - _read(S, k))),
                     "with beta = 1 and unit keys the memory returns v"),
}


@pytest.mark.parametrize("fn", [delta_write, delta_write_gated_form, delta_write_eye_in_float32,
                                delta_write_loop, delta_write_package, delta_write_in_place],
                         ids=["einsum", "gated-form", "eye-in-float32", "loop", "package",
                              "in-place"])
def test_delta_bug_accepts(fn):
    assert check("ex-ch10-delta-bug", fn)


@pytest.mark.parametrize("name", list(DELTA_SLIPS))
def test_delta_bug_refuses_slips(name):
    fn, says = DELTA_SLIPS[name]
    result = check("ex-ch10-delta-bug", fn)
    assert result.status == "fail" and says in result.message, result


def test_delta_bug_starter_gets_its_symptom_only():
    # the chapter stores this line under the starter: the symptom, not the fix
    assert repr(check("ex-ch10-delta-bug", hebb_write)).replace("\n  ", " ") == (
        "✗ ex-ch10-delta-bug: after writing (k, v) with beta = 1 and a unit key, the memory does "
        "not return v for k")


def test_delta_bug_other_wrong_answers():
    def changes_k(S, k, v, beta):
        k /= 1.0 + k.norm(dim=-1, keepdim=True)
        return delta_write(S, k, v, beta)

    def clears_S(S, k, v, beta):  # S changed in place, but not to the state it returns
        out = delta_write(S, k, v, beta)
        S.zero_()
        return out

    def hebb_in_place(S, k, v, beta):  # the starter's write, in place
        S += beta[:, None, None] * torch.einsum("bk,bv->bkv", k, v)
        return S

    def squeezes(S, k, v, beta):  # right, except for a batch of one memory
        return delta_write(S.squeeze(), k.squeeze(), v.squeeze(), beta.squeeze())

    def forgets_to_write_v(S, k, v, beta):  # the gated form without its last term
        eye = torch.eye(S.shape[1], dtype=S.dtype)
        return (eye - beta[:, None, None] * k[:, :, None] * k[:, None, :]) @ S

    def reads_from_the_new_state(S, k, v, beta):
        S_new = S + _outer(k, beta[:, None] * v)
        return S_new - _outer(k, beta[:, None] * _read(S_new, k))

    name = "ex-ch10-delta-bug"
    assert check(name, starter).status == "not attempted"
    assert "changed its argument k in place" in check(name, changes_k).message
    assert "S does not hold the new state it returns" in check(name, clears_S).message
    assert "the memory does not return v for k" in check(name, hebb_in_place).message
    assert "B = 1" in check(name, squeezes).message
    assert "into an empty memory" in check(name, forgets_to_write_v).message
    assert check(name, reads_from_the_new_state).status == "fail"
    assert "TypeError" in check(name, lambda S, k, v: S).message
    assert "must return a tensor" in check(name, lambda S, k, v, beta: (S, k)).message
    assert "S's shape" in check(name, lambda S, k, v, beta: S[0]).message
    assert "must be a function" in check(name, 3).message


# --- the errors of one chunk, by forward substitution ---------------------------------------------


def chunk_errors(k, v, beta):
    U = torch.zeros_like(v)
    for t in range(k.shape[0]):
        U[t] = beta[t] * (v[t] - (k[:t] @ k[t]) @ U[:t])
    return U


def chunk_errors_with_state(k, v, beta):  # the memory written step by step, S^T k_t read from it
    S = k.new_zeros(k.shape[1], v.shape[1])
    rows = []
    for k_t, v_t, b_t in zip(k, v, beta, strict=True):
        u_t = b_t * (v_t - S.T @ k_t)
        S = S + torch.outer(k_t, u_t)
        rows.append(u_t)
    return torch.stack(rows)


def chunk_errors_gram(k, v, beta):  # the dot products once, then one row after another
    gram = k @ k.T
    U = []
    for t in range(len(k)):
        read = sum((gram[t, j] * U[j] for j in range(t)), torch.zeros_like(v[t]))
        U.append(beta[t] * (v[t] - read))
    return torch.stack(U)


def chunk_errors_numpy(k, v, beta):
    k, v, beta = k.numpy(), v.numpy(), beta.numpy()
    U = np.zeros_like(v)
    for t in range(len(k)):
        U[t] = beta[t] * (v[t] - (k[:t] @ k[t]) @ U[:t])
    return U


def chunk_errors_float32(k, v, beta):  # U in the default dtype whatever the inputs
    U = torch.zeros(v.shape)
    for t in range(k.shape[0]):
        U[t] = beta[t] * (v[t] - (k[:t] @ k[t]) @ U[:t].to(k.dtype))
    return U


def _rows(k, v, step):
    U = torch.zeros_like(v)
    for t in range(len(k)):
        U[t] = step(t, U, (k[:t] @ k[t]) @ U[:t])  # the last argument: what S_(t-1) returns for k_t
    return U


def _plus(k, v, b):
    return _rows(k, v, lambda t, U, read: b[t] * (v[t] + read))


def _values_not_errors(k, v, b):
    return _rows(k, v, lambda t, U, read: b[t] * (v[t] - (k[:t] @ k[t]) @ (b[:t, None] * v[:t])))


def _beta_on_v_only(k, v, b):
    return _rows(k, v, lambda t, U, read: b[t] * v[t] - read)


def _loop_from_1(k, v, b):  # for t in range(1, C)
    return _rows(k, v, lambda t, U, read: U[t] if t == 0 else b[t] * (v[t] - read))


def _loop_stops_early(k, v, b):  # for t in range(C - 1)
    return _rows(k, v, lambda t, U, read: U[t] if t == len(k) - 1 else b[t] * (v[t] - read))


def _misses_last_step(k, v, b):  # the sum over j < t - 1
    return _rows(k, v, lambda t, U, read: b[t] * (v[t] - (k[:t - 1] @ k[t]) @ U[:t - 1]) if t
                 else b[t] * v[t])


def _beta_of_j(k, v, b):  # beta_j inside the sum instead of beta_t outside
    return _rows(k, v, lambda t, U, read: b[t] * v[t] - (b[:t] * (k[:t] @ k[t])) @ U[:t])


def _no_beta(k, v, b):  # beta forgotten altogether
    return _rows(k, v, lambda t, U, read: v[t] - (k[:t] @ k[t]) @ U[:t])


def _beta_on_read_only(k, v, b):  # beta scales what the memory returns, not v_t
    return _rows(k, v, lambda t, U, read: v[t] - b[t] * (k[:t] @ k[t]) @ U[:t])


def _wrong_dim(k, v, b):
    return _rows(k, v, lambda t, U, read: b[t] * (v[t] - (k[:t] * k[t]).sum(0) @ U[:t]))


def _swapped_operands(k, v, b):
    return _rows(k, v, lambda t, U, read: b[t] * (v[t] - U[:t] @ (k[:t] @ k[t])))


UT_SLIPS = {
    "no-sum": (lambda k, v, b: b[:, None] * v, "every row is beta_t v_t"),
    "plus": (_plus, "instead of taking it away"),
    "values-not-errors": (_values_not_errors, "runs over the values v_j"),
    "beta-on-v-only": (_beta_on_v_only, "scales v_t only"),
    "no-beta": (_no_beta, "beta is missing"),
    "beta-on-read-only": (_beta_on_read_only, "scales only what the memory returns"),
    "loop-from-1": (_loop_from_1, "the first row U[0] is already wrong"),
    "loop-stops-early": (_loop_stops_early, "U[0] to U[5] are right and U[6] is not"),
    "misses-last-step": (_misses_last_step, "U[0] is right and U[1] is not"),
    "beta-of-j": (_beta_of_j, "U[0] is right and U[1] is not"),
    "wrong-dim": (_wrong_dim, "RuntimeError"),
    "swapped-operands": (_swapped_operands, "RuntimeError"),
    "transposed": (lambda k, v, b: chunk_errors(k, v, b).T, "v's shape"),
    "normalised-keys": (lambda k, v, b: chunk_errors(k / k.norm(dim=-1, keepdim=True), v, b),
                        "the keys are normalised"),
}


def solves(k, v, beta):
    A = (beta[:, None] * (k @ k.T)).tril(-1)
    return torch.linalg.solve_triangular(torch.eye(len(k), dtype=k.dtype) + A, beta[:, None] * v,
                                         upper=False)


def solves_imported(k, v, beta):
    A = (beta[:, None] * (k @ k.T)).tril(-1)
    return solve_triangular(torch.eye(len(k), dtype=k.dtype) + A, beta[:, None] * v, upper=False)


def inverts(k, v, beta):
    A = (beta[:, None] * (k @ k.T)).tril(-1)
    return (torch.eye(len(k), dtype=k.dtype) + A).inverse() @ (beta[:, None] * v)


def inverts_linalg(k, v, beta):
    A = (beta[:, None] * (k @ k.T)).tril(-1)
    return torch.linalg.inv(torch.eye(len(k), dtype=k.dtype) + A) @ (beta[:, None] * v)


def inverts_by_operator(k, v, beta):  # an operator overload has no Python code to see
    A = (beta[:, None] * (k @ k.T)).tril(-1)
    return torch.ops.aten.linalg_inv(torch.eye(len(k), dtype=k.dtype) + A) @ (beta[:, None] * v)


def inverts_by_power(k, v, beta):
    A = (beta[:, None] * (k @ k.T)).tril(-1)
    return torch.linalg.matrix_power(torch.eye(len(k), dtype=k.dtype) + A, -1) @ (beta[:, None] * v)


def inverts_by_svd(k, v, beta):
    A = (beta[:, None] * (k @ k.T)).tril(-1)
    U, S, Vh = torch.linalg.svd(torch.eye(len(k), dtype=k.dtype) + A)
    return Vh.T @ ((U.T @ (beta[:, None] * v)) / S[:, None])


def solves_by_cramer(k, v, beta):  # determinants solve a linear system too
    M = torch.eye(len(k), dtype=k.dtype) + (beta[:, None] * (k @ k.T)).tril(-1)
    b = beta[:, None] * v
    out = torch.empty_like(b)
    for i in range(len(k)):
        for j in range(b.shape[1]):
            Mi = M.clone()
            Mi[:, i] = b[:, j]
            out[i, j] = torch.linalg.det(Mi) / torch.linalg.det(M)
    return out


def solves_numpy(k, v, beta):
    A = (beta[:, None] * (k @ k.T)).tril(-1)
    return torch.from_numpy(np.linalg.solve((torch.eye(len(k), dtype=k.dtype) + A).numpy(),
                                            (beta[:, None] * v).numpy()))


def reads_the_states(k, v, beta):  # the package's loop, one step at a time, errors from the states
    S = k.new_zeros(1, 1, k.shape[1], v.shape[1])
    rows = []
    for t in range(len(k)):
        args = (x[t].view(1, 1, 1, -1) for x in (k, k, v))
        _, S_new = delta_rule_recurrent(*args, beta[t].view(1, 1, 1), state=S)
        rows.append((S_new - S)[0, 0].T @ k[t] / (k[t] @ k[t]))
        S = S_new
    return torch.stack(rows)


def chunk_errors_neumann(k, v, beta):
    """(I + A)^-1 as the series I - A + A^2 - ...: exact, since A is strictly lower triangular
    (A^C = 0), and no solver: a right answer the check accepts, though not the one asked for."""
    A = (beta[:, None] * (k @ k.T)).tril(-1)
    term = U = beta[:, None] * v
    for _ in range(len(k) - 1):
        term = -A @ term
        U = U + term
    return U


def chunk_errors_float64_buffer(k, v, beta):  # float64 rows, products in the inputs' dtype
    U = torch.zeros(v.shape, dtype=torch.float64)
    for t in range(k.shape[0]):
        U[t] = beta[t] * (v[t] - (k[:t] @ k[t]).to(U.dtype) @ U[:t])
    return U


@pytest.mark.parametrize("fn", [chunk_errors, chunk_errors_with_state, chunk_errors_gram,
                                chunk_errors_numpy, chunk_errors_float32, chunk_errors_neumann,
                                chunk_errors_float64_buffer],
                         ids=["rows", "state", "gram", "numpy", "float32", "neumann",
                              "float64 buffer"])
def test_ut_accepts(fn):
    assert check("ex-ch10-ut", fn)


@pytest.mark.parametrize("name", list(UT_SLIPS))
def test_ut_refuses_slips(name):
    fn, says = UT_SLIPS[name]
    result = check("ex-ch10-ut", fn)
    assert result.status == "fail" and says in result.message, result


@pytest.mark.parametrize("fn, called", [
    (solves, "torch.linalg.solve_triangular"),
    (solves_imported, "torch.linalg.solve_triangular"),
    (inverts, "Tensor.inverse"),
    (inverts_linalg, "torch.linalg.inv"),
    (solves_numpy, "numpy.linalg.solve"),
    (inverts_by_operator, "torch.ops.aten.linalg_inv_ex"),
    (inverts_by_power, "torch.ops.aten.linalg_inv_ex"),
    (inverts_by_svd, "torch.ops.aten._linalg_svd"),
    (solves_by_cramer, "torch.linalg.det"),
    (reads_the_states, "seqbook.delta_rule.delta_rule_recurrent"),
    (lambda k, v, b: delta_rule_chunked(*(x[None, None] for x in (k, k, v, b)))[0][0, 0],
     "seqbook.delta_rule.delta_rule_chunked"),
], ids=["solve_triangular", "imported-name", "Tensor.inverse", "linalg.inv", "numpy",
        "aten-operator", "matrix-power", "svd", "cramer", "package", "package-chunked"])
def test_ut_sees_the_method(fn, called):
    result = check("ex-ch10-ut", fn)
    assert result.status == "fail" and f"calls {called}" in result.message, result
    assert "forward substitution" in result.message
    assert sys.getprofile() is None  # the watch is gone after the check


def test_ut_sees_scipy_imported_inside():
    pytest.importorskip("scipy")

    def solves_with_scipy(k, v, beta):
        from scipy.linalg import solve_triangular as scipy_solve

        A = (beta[:, None] * (k @ k.T)).tril(-1)
        eye = torch.eye(len(k), dtype=k.dtype)
        return torch.as_tensor(scipy_solve((eye + A).numpy(), (beta[:, None] * v).numpy(),
                                           lower=True))

    result = check("ex-ch10-ut", solves_with_scipy)
    assert result.status == "fail" and "calls scipy.linalg.solve_triangular" in result.message


def test_ut_other_answers():
    def changes_v(k, v, beta):
        for t in range(k.shape[0]):
            v[t] = beta[t] * (v[t] - (k[:t] @ k[t]) @ v[:t])
        return v

    name = "ex-ch10-ut"
    assert repr(check(name, starter)).replace("\n  ", " ") == ("… ex-ch10-ut: chunk_errors still raises "
                                          "NotImplementedError: write its body, then run this cell "
                                          "again")
    assert "in place" in check(name, changes_v).message
    assert "must return a tensor" in check(name, lambda k, v, b: chunk_errors(k, v, b).tolist()).message
    assert "floating-point" in check(name, lambda k, v, b: chunk_errors(k, v, b).long()).message
    assert "TypeError" in check(name, lambda k, v: v).message
    assert "must be a function" in check(name, "U").message


# --- every check leaves the learner's random state alone ------------------------------------------


@pytest.mark.parametrize("name, answer", [
    ("ex-ch10-overwrite", (HEBB_READ, DELTA_READ)),
    ("ex-ch10-overwrite", (DELTA_READ, HEBB_READ)),
    ("ex-ch10-delta-bug", delta_write),
    ("ex-ch10-delta-bug", hebb_write),
    ("ex-ch10-ut", chunk_errors),
    ("ex-ch10-ut", UT_SLIPS["plus"][0]),
    ("ex-ch10-ut", solves),
    ("ex-ch10-state-size", (2 * 4096 * 64, 64 * 65)),
    ("ex-ch10-combine", lambda f, s: (f[0] * s[0], s[0] * f[1] + s[1])),
    ("ex-ch10-decay-mask", decay_mask),
    ("ex-ch10-chunked", chunked),
    ("ex-ch10-chunked", recurrence),
])
def test_the_random_state_is_untouched(name, answer):
    assert_random_state_untouched(lambda: check(name, answer))


def test_second_reading_slips():
    def in_place_exp(log_a):  # exp_ writes over its input: the overflow is still seen
        with torch.no_grad():
            cum = log_a.cumsum(-1)
            return (cum[..., :, None] - cum[..., None, :]).exp_().tril()

    def exp_out(log_a):
        with torch.no_grad():
            cum = log_a.cumsum(-1)
            d = cum[..., :, None] - cum[..., None, :]
            torch.exp(d, out=d)
            return d.tril()

    for fn in (in_place_exp, exp_out):
        assert "overflows to inf" in check("ex-ch10-decay-mask", fn).message

    def system(k, v, beta):
        A = (beta[:, None] * (k @ k.T)).tril(-1)
        return torch.eye(len(k), dtype=k.dtype) + A, beta[:, None] * v

    def ldl(k, v, beta):  # on the normal equations
        M, r = system(k, v, beta)
        LD, pivots = torch.linalg.ldl_factor(M.T @ M)
        return torch.linalg.ldl_solve(LD, pivots, M.T @ r)

    def eigh(k, v, beta):
        M, r = system(k, v, beta)
        w, Q = torch.linalg.eigh(M.T @ M)
        return Q @ ((Q.T @ (M.T @ r)) / w[:, None])

    for fn, called in ((ldl, "linalg_ldl_factor_ex"), (eigh, "_linalg_eigh")):
        assert f"calls torch.ops.aten.{called}" in check("ex-ch10-ut", fn).message


def test_ut_sees_scipy_sparse():
    pytest.importorskip("scipy")

    def sparse_solve(k, v, beta):
        import scipy.sparse
        import scipy.sparse.linalg

        A = (beta[:, None] * (k @ k.T)).tril(-1)
        M = scipy.sparse.csr_matrix((torch.eye(len(k), dtype=k.dtype) + A).numpy())
        return torch.from_numpy(scipy.sparse.linalg.spsolve_triangular(
            M, (beta[:, None] * v).numpy(), lower=True))

    message = check("ex-ch10-ut", sparse_solve).message
    assert "calls scipy.sparse.linalg.spsolve_triangular" in message



def test_messages_after_the_fresh_reading_of_2026_12_04():
    """Slips a reader found misnamed: each now gets its own message."""
    from seqbook.exercises import check
    from seqbook.exercises.ch10 import OVERWRITE, _hybrid_cache_bytes, _overwrite_reads

    def combine_swapped(first, second):
        (a1, b1), (a2, b2) = first, second
        return a2 * b1 + b2, a1 * a2

    assert "swapped" in check("ex-ch10-combine", combine_swapped).message

    def bilinear(A, B, delta):
        dA = delta[:, None] * A
        return (1 + dA / 2) / (1 - dA / 2), delta[:, None] * B / (1 - dA / 2)

    assert "bilinear" in check("ex-ch10-zoh", bilinear).message
    only_a = check("ex-ch10-zoh", lambda A, B, delta: torch.exp(delta[:, None] * A)).message
    assert "(A_bar, B_bar)" in only_a

    def starter(log_a):  # the find-the-bug starter: a symptom, not the bug's name
        A = log_a.cumsum(dim=-1)
        return (A[..., :, None] - A[..., None, :]).exp()

    message = check("ex-ch10-decay-mask", starter).message
    assert "above 1" in message and "future" not in message and "mask" not in message

    def times_mask(log_a):  # masking after exp by a product: inf * 0 = NaN
        T = log_a.shape[-1]
        A = log_a.cumsum(dim=-1)
        past = torch.ones(T, T, dtype=log_a.dtype).tril()
        return (A[..., :, None] - A[..., None, :]).exp() * past

    assert "gives NaN" in check("ex-ch10-decay-mask", times_mask).message
    before, hebb, _ = _overwrite_reads()
    half = before + (torch.tensor(OVERWRITE["value"], dtype=torch.float64) - before) / 2
    answer = (tuple(hebb.tolist()), tuple(half.tolist()))
    assert "beta = 1/2" in check("ex-ch10-overwrite", answer).message
    all_attention, attention_only, states = _hybrid_cache_bytes()
    answer = (all_attention, attention_only + 2 * states)  # states in float64
    assert "4 bytes a number" in check("ex-ch10-hybrid-cache", answer).message

    def zoh_swapped(A, B, delta):
        dA = delta[:, None] * A
        return torch.expm1(dA) / A * B, torch.exp(dA)

    assert "swapped" in check("ex-ch10-zoh", zoh_swapped).message
