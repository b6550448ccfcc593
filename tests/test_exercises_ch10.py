"""Chapter 10's exercise checks (seqbook.exercises.ch10): each passes a right answer, calls the
untouched starter "not attempted" (the find-the-bug starter gets its bug named), and names what is
wrong in each typical wrong answer."""


import torch
import torch.nn.functional as F

from seqbook.exercises import check
from seqbook.ssm import decay_mask


def starter(*args):
    raise NotImplementedError  # your code here


# --- the size of the state ----------------------------------------------------------------------


def test_state_size():
    T, D = 4096, 64
    assert check("ex-ch10-state-size", (2 * T * D, D * D + D))
    assert check("ex-ch10-state-size", ...).status == "not attempted"
    assert "a key and a value" in check("ex-ch10-state-size", (T * D, D * D + D)).message
    assert "count z too" in check("ex-ch10-state-size", (2 * T * D, D * D)).message
    assert "does not grow with T" in check("ex-ch10-state-size", (2 * T * D, 2 * T * D)).message
    assert "must be a pair" in check("ex-ch10-state-size", 5).message
    assert "must be a number" in check("ex-ch10-state-size", ("many", 3)).message


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

    assert check("ex-ch10-combine", right)
    assert check("ex-ch10-combine", starter).status == "not attempted"
    assert "wrong order" in check("ex-ch10-combine", buggy).message
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
    assert check(name, starter).status == "not attempted"
    assert "not normalised" in check(name, unnormalised).message
    assert "steps up to t only" in check(name, not_causal).message
    assert "feature map" in check(name, no_phi).message
    assert "must not see later" in check(name, peeks_one_ahead).message
    assert "v's shape" in check(name, lambda q, k, v: q).message


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
    assert check("ex-ch10-zoh", starter).status == "not attempted"
    assert "Euler" in check("ex-ch10-zoh", euler_B).message
    assert "off by a factor" in check("ex-ch10-zoh", no_division).message
    assert "first-order" in check("ex-ch10-zoh", first_order_A).message
    assert "RuntimeError" in check("ex-ch10-zoh", wrong_axis).message


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

    assert check("ex-ch10-decay-mask", right)
    assert check("ex-ch10-decay-mask", decay_mask)
    assert check("ex-ch10-decay-mask", starter).status == "not attempted"
    assert "future" in check("ex-ch10-decay-mask", future_in).message
    assert "also multiplies a_j" in check("ex-ch10-decay-mask", includes_a_j).message
    assert "diagonal must be 1" in check("ex-ch10-decay-mask", zero_diagonal).message
    assert "(2, 3, 7, 7)" in check("ex-ch10-decay-mask", lambda log_a: log_a).message


# --- Mamba-2's chunked algorithm -----------------------------------------------------------------------


def chunked(x, log_a, B, C, chunk_size, carry=True):
    T = x.shape[2]
    h = x.new_zeros(*B.shape[:2], B.shape[-1], x.shape[-1])   # (batch, H, N, P)
    ys = []
    for s in range(0, T, chunk_size):
        xc, lc, Bc, Cc = (t[:, :, s:s + chunk_size] for t in (x, log_a, B, C))
        cum = lc.cumsum(-1)                                     # (batch, H, c)
        inside = (decay_mask(lc) * (Cc @ Bc.transpose(-2, -1))) @ xc
        ys.append(inside + cum.exp()[..., None] * (Cc @ h))
        if carry:
            to_end = (cum[..., -1:] - cum).exp()                # (batch, H, c)
            h = cum[..., -1, None, None].exp() * h + (Bc * to_end[..., None]).transpose(-2, -1) @ xc
    return torch.cat(ys, 2)


def test_chunked():
    def wrong_inside(x, log_a, B, C, chunk_size):
        y = chunked(x, log_a, B, C, chunk_size)
        return y + 0.1

    assert check("ex-ch10-chunked", chunked)
    assert check("ex-ch10-chunked", starter).status == "not attempted"
    no_carry = check("ex-ch10-chunked", lambda *a: chunked(*a, carry=False)).message
    assert "first chunk is right but a later one is not" in no_carry
    assert "first chunk is already wrong" in check("ex-ch10-chunked", wrong_inside).message
