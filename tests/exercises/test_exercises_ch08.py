"""Chapter 8's exercise checks (seqbook.exercises.ch08): each passes a right answer, calls the
untouched starter "not attempted" (the find-the-bug starters get their bug named), and names what
is wrong in each typical wrong answer."""

import math

import torch

from seqbook import vsa
from seqbook.exercises import check


def starter(*args):
    raise NotImplementedError  # your code here


def wrap(x):
    return torch.remainder(x + 1.0, 2.0) - 1.0


# --- binding ------------------------------------------------------------------------------------------


def test_bind_invariance():
    name = "ex-ch8-bind-invariance"
    assert check(name, lambda a, b: wrap(a + b))
    assert check(name, vsa.bind)
    # atan2 puts the angle pi at +1 instead of -1: the same angle
    assert check(name, lambda a, b: torch.atan2(torch.sin(math.pi * (a + b)),
                                                torch.cos(math.pi * (a + b))) / math.pi)
    assert check(name, lambda a, b: wrap(a.float() + b.float()))  # in float32
    assert check(name, lambda a, b: wrap(a + b).numpy())
    assert check(name, lambda a, b: torch.remainder(a + b - 1.0, 2.0) - 1.0)  # shifted the other way
    assert check(name, starter).status == "not attempted"
    assert "outside [-1, 1]" in check(name, lambda a, b: a + b).message
    assert "torch.fmod" in check(name, lambda a, b: torch.fmod(a + b + 1.0, 2.0) - 1.0).message
    # wrapped only above 1 (no fmod in it): the message names what happens below -1
    assert "sums below -1 stay below -1" in check(
        name, lambda a, b: torch.where(a + b >= 1, a + b - 2, a + b)).message
    assert "off by 1" in check(name, lambda a, b: torch.remainder(a + b, 2.0) - 1.0).message
    assert "unbinding" in check(name, lambda a, b: wrap(a - b)).message
    assert "does not add" in check(name, lambda a, b: wrap(a * b)).message
    assert "shape" in check(name, lambda a, b: a[:3]).message
    phasors = (lambda a, b: torch.polar(torch.ones_like(a), math.pi * a)  # noqa: E731
               * torch.polar(torch.ones_like(b), math.pi * b))
    assert "complex numbers" in check(name, phasors).message
    assert "radians" in check(name, lambda a, b: torch.angle(phasors(a, b))).message
    no_pi = (lambda a, b: torch.angle(torch.polar(torch.ones_like(a), a)  # noqa: E731
                                      * torch.polar(torch.ones_like(b), b)) / math.pi)
    assert "exp(i pi x)" in check(name, no_pi).message


# --- find the bug: unbinding ---------------------------------------------------------------------


def test_unbind():
    def buggy(a, b):  # the starter of the exercise
        return torch.remainder(a + b + 1.0, 2.0) - 1.0

    def conjugate(a, b):  # multiply by the conjugate phasor, in complex64
        za, zb = (torch.polar(torch.ones_like(x), math.pi * x).to(torch.complex64) for x in (a, b))
        return torch.angle(za * zb.conj()) / math.pi

    name = "ex-ch8-unbind"
    assert check(name, lambda a, b: wrap(a - b))
    assert check(name, vsa.unbind)
    assert check(name, conjugate)
    assert check(name, lambda a, b: wrap(a.float() - b.float()).numpy())
    assert check(name, starter).status == "not attempted"
    # the starter: what the learner sees, not what to change
    message = check(name, buggy).message
    assert "is not x" in message and "unrelated symbol" in message
    assert "power" not in message and "subtract" not in message
    assert "gives -x" in check(name, lambda a, b: wrap(b - a)).message
    assert "outside [-1, 1]" in check(name, lambda a, b: a - b).message
    assert "does not give x back" in check(name, lambda a, b: a).message
    # the fmod slip is not told to use the formula it wrote
    fmod = check(name, lambda a, b: torch.fmod(a - b + 1.0, 2.0) - 1.0).message
    assert "torch.fmod" in fmod and "(x + 1) mod 2 - 1" not in fmod
    assert "off by 1" in check(name, lambda a, b: torch.remainder(a - b, 2.0) - 1.0).message
    in_radians = (lambda a, b: torch.angle(  # noqa: E731
        torch.polar(torch.ones_like(a), math.pi * a)
        * torch.polar(torch.ones_like(b), math.pi * b).conj()))
    assert "radians" in check(name, in_radians).message


# --- find the bug: bundling ----------------------------------------------------------------------


def test_bundle():
    def buggy(symbols):  # the starter of the exercise
        return torch.remainder(symbols.sum(0) + 1.0, 2.0) - 1.0

    def right(symbols):
        re, im = torch.cos(math.pi * symbols).sum(0), torch.sin(math.pi * symbols).sum(0)
        return torch.atan2(im, re) / math.pi

    def radians(symbols):
        return right(symbols) * math.pi

    def no_pi(symbols):
        return torch.atan2(torch.sin(symbols).sum(0), torch.cos(symbols).sum(0)) / math.pi

    def complex64(symbols):
        z = torch.polar(torch.ones_like(symbols), math.pi * symbols).to(torch.complex64)
        return torch.angle(z.sum(0)) / math.pi

    name = "ex-ch8-bundle"
    assert check(name, right)
    assert check(name, vsa.bundle)
    assert check(name, lambda s: vsa.from_complex(vsa.to_complex(s).sum(0)))
    assert check(name, complex64)
    assert check(name, lambda s: right(s).numpy())
    assert check(name, starter).status == "not attempted"
    # the starter: what the learner sees, not what to change
    message = check(name, buggy).message
    assert "two copies of one symbol" in message and "unrelated symbol" in message
    assert "phasor" not in message and "add" not in message.split()
    assert "averaging the angles" in check(name, lambda s: s.mean(0)).message
    assert "radians" in check(name, radians).message
    assert "exp(i pi x)" in check(name, no_pi).message
    # the slips that have pi right are not sent to look for it
    re_im = (lambda s: (torch.cos(math.pi * s).sum(0), torch.sin(math.pi * s).sum(0)))
    swapped = check(name, lambda s: torch.atan2(*re_im(s)) / math.pi).message
    assert "swapped" in swapped and "pi" not in swapped
    quadrant = check(name, lambda s: torch.atan(re_im(s)[1] / re_im(s)[0]) / math.pi).message
    assert "quadrant" in quadrant and "exp(i pi" not in quadrant
    assert "dim 0" in check(name, lambda s: right(s.T)).message
    # the complex sum returned as it is, without its angle
    assert "complex numbers" in check(
        name, lambda s: torch.polar(torch.ones_like(s), math.pi * s).sum(0)).message


# --- the bandwidth of the fractional power encoding ---------------------------------------------


def test_bandwidth():
    def no_pi(d, beta):
        t = beta * d
        return torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t)

    name = "ex-ch8-bandwidth"
    assert check(name, lambda d, beta: torch.sinc(beta * d))
    assert check(name, starter).status == "not attempted"
    assert "narrow" in check(name, lambda d, beta: torch.sinc(d / beta)).message
    assert "has a pi in it" in check(name, no_pi).message
    assert "NaN" in check(name, lambda d, beta: torch.sin(math.pi * beta * d)
                          / (math.pi * beta * d)).message
    assert "at d = 0, where it must be 1" in check(name, lambda d, beta: torch.sin(
        math.pi * beta * d) / (math.pi * beta * d)).message
    power = check(name, lambda d, beta: torch.sinc(d) ** beta).message  # NaN away from d = 0
    assert "where sinc is negative" in power and "at d = 0" not in power
    root = check(name, lambda d, beta: torch.sqrt(torch.sinc(beta * d))).message
    assert "a root or a log of it" in root
    assert "one similarity per distance" in check(name, lambda d, beta: d[:5]).message
    assert "must return a tensor" in check(name, lambda d, beta: beta).message

    def integral(d, beta):  # the mean of cos(pi beta d u) over a fine grid of u in [0, 1]
        u = torch.linspace(0, 1, 20001, dtype=d.dtype)
        return torch.cos(math.pi * beta * d[:, None] * u).mean(-1)

    assert "a numerical estimate" in check(name, integral).message

    def measured(d, beta):  # the mean similarity of random fractional power codes: noisy
        base = vsa.random_symbols(1, 8192, generator=torch.Generator().manual_seed(1),
                                  dtype=d.dtype)[0]
        codes = vsa.fractional_power(base, beta * d)
        return torch.cos(math.pi * codes).mean(-1)  # similarity to the code of 0, all angles 0

    assert "a measurement over random codes" in check(name, measured).message


# --- the capacity of a record ---------------------------------------------------------------------


def test_capacity():
    name = "ex-ch8-capacity"
    assert check(name, lambda n: math.pi * n / 50)
    assert check(name, lambda n: int(math.pi * n / 50))
    assert check(name, lambda n: torch.tensor(math.pi * n / 50))
    assert check(name, starter).status == "not attempted"
    assert "1/sqrt(2n)" in check(name, lambda n: math.pi * n / 100).message
    assert "in proportion to n" in check(name, lambda n: math.sqrt(n)).message
    assert "constant is off" in check(name, lambda n: math.pi * n / 25).message
    assert "round down" in check(name, lambda n: math.ceil(math.pi * n / 50)).message
    # rounding to the nearest: right for n = 64, ..., 4096, up for n = 24 (1.51)
    assert "round down" in check(name, lambda n: round(math.pi * n / 50)).message
    assert "must return a number" in check(name, lambda n: "many").message
    assert "do not subtract 1" in check(name, lambda n: int(math.pi * n / 50) - 1).message
    assert "just above" in check(name, lambda n: int(math.pi * n / 50) + 1).message
    one_decimal = check(name, lambda n: math.floor(10 * math.pi * n / 50) / 10).message
    assert "not the largest" in one_decimal and "whole number" in one_decimal
    # a wrong constant is named as one, rounded or not (4 and 4.5 noise spreads)
    for c in (32, 40.5):
        for rounding in (math.floor, float):
            message = check(name, lambda n, c=c, r=rounding: r(math.pi * n / c)).message
            assert "constant is off" in message and "too large" in message
    # below the bound but not the largest K: neither the bound nor its floor
    for slip in (lambda n: math.pi * n / 50 - 0.5, lambda n: math.pi * n / 50 - 1):
        assert "not the largest" in check(name, slip).message


# --- position codes -----------------------------------------------------------------------------------


def test_order():
    def right(rows, base):
        return vsa.bind(rows, vsa.fractional_power(base, torch.arange(rows.shape[1])))

    def from_one(rows, base):
        return vsa.bind(rows, vsa.fractional_power(base, torch.arange(1, rows.shape[1] + 1)))

    def bundled(rows, base):
        codes = vsa.fractional_power(base, torch.arange(rows.shape[1])).expand_as(rows)
        return vsa.bundle(torch.stack([rows, codes], dim=-2))

    def unbound(rows, base):
        return vsa.unbind(rows, vsa.fractional_power(base, torch.arange(rows.shape[1])))

    def unwrapped(rows, base):
        return rows + torch.arange(rows.shape[1])[:, None] * base

    def loop_float32(rows, base):  # a loop over t, in float32
        rows, base = rows.float(), base.float()
        return torch.stack([wrap(rows[:, t] + t * base) for t in range(rows.shape[1])], dim=1)

    name = "ex-ch8-order"
    assert check(name, right)
    assert check(name, loop_float32)
    assert check(name, lambda rows, base: vsa.bind(
        vsa.fractional_power(base, torch.arange(rows.shape[1])), rows))  # binding commutes
    assert check(name, starter).status == "not attempted"
    assert "b^(t+1)" in check(name, from_one).message
    assert "bundled" in check(name, bundled).message
    assert "unbound" in check(name, unbound).message
    assert "outside [-1, 1]" in check(name, unwrapped).message
    assert "shape" in check(name, lambda rows, base: base).message


# --- VSA attention from scratch --------------------------------------------------------------------


def attention(q, k, v, mask=None, softmax=False, scale=1.0, angles=False, flip=False,
              swap=False, fill=0.0):
    cq, sq, ck, sk = torch.cos(math.pi * q), torch.sin(math.pi * q), torch.cos(math.pi * k), \
        torch.sin(math.pi * k)
    scores = (cq @ ck.transpose(-2, -1) + sq @ sk.transpose(-2, -1)) / q.shape[-1] * scale
    if mask is not None:
        scores = scores.masked_fill(mask if flip else ~mask, -math.inf if softmax else fill)
    if softmax:
        scores = torch.softmax(scores, -1).nan_to_num(0.0)
    if angles:
        return scores @ v, scores
    re, im = scores @ torch.cos(math.pi * v), scores @ torch.sin(math.pi * v)
    return (torch.atan2(re, im) if swap else torch.atan2(im, re)) / math.pi, scores


def test_attention():
    def float32(q, k, v, mask=None):
        return attention(q.float(), k.float(), v.float(), mask)

    def einsum_complex(q, k, v, mask=None):  # another formulation: einsum over complex phasors
        zq, zk, zv = (torch.polar(torch.ones_like(x), math.pi * x) for x in (q, k, v))
        scores = torch.einsum("bqd,bkd->bqk", zq, zk.conj()).real / q.shape[-1]
        if mask is not None:
            scores = scores * mask
        return torch.angle(torch.einsum("bqk,bkd->bqd", scores.to(zv.dtype), zv)) / math.pi, scores

    name = "ex-ch8-attention"
    assert check(name, attention)
    assert check(name, vsa.vsa_attention)
    assert check(name, float32)
    assert check(name, einsum_complex)
    assert check(name, lambda q, k, v, m: tuple(t.numpy() for t in attention(q, k, v, m)))
    assert check(name, starter).status == "not attempted"
    assert "no softmax" in check(name, lambda q, k, v, m: attention(q, k, v, m, softmax=True)
                                 ).message
    assert "no 1/sqrt(d)" in check(name, lambda q, k, v, m: attention(
        q, k, v, m, scale=1 / math.sqrt(q.shape[-1]))).message
    assert "divided by sqrt(D)" in check(name, lambda q, k, v, m: attention(  # chapter 5's habit
        q, k, v, m, scale=math.sqrt(q.shape[-1]))).message
    assert "phasors" in check(name, lambda q, k, v, m: attention(q, k, v, m, angles=True)).message
    assert "mask is reversed" in check(name, lambda q, k, v, m: attention(q, k, v, m, flip=True)
                                       ).message
    assert "masked keys still count" in check(name, lambda q, k, v, m: attention(q, k, v)).message
    assert "in radians" in check(name, lambda q, k, v, m: (
        math.pi * attention(q, k, v, m)[0], attention(q, k, v, m)[1])).message
    assert "arguments are swapped" in check(name, lambda q, k, v, m: (
        attention(q, k, v, m, swap=True))).message
    assert "-inf + inf = NaN" in check(name, lambda q, k, v, m: (
        attention(q, k, v, m, fill=-math.inf))).message
    assert "the pair (output, scores)" in check(name, lambda q, k, v, m: q).message

    def normalised(q, k, v, mask=None, fill=0.0, by_sum=False):  # softmax's habits without it
        zq, zk, zv = (torch.polar(torch.ones_like(x), math.pi * x) for x in (q, k, v))
        scores = (zq @ zk.conj().mT).real / q.shape[-1]
        if mask is not None:
            scores = scores.masked_fill(~mask, fill)
        w = scores / scores.sum(-1, keepdim=True) if by_sum else scores
        return torch.angle(w.to(zv.dtype) @ zv) / math.pi, scores

    for fill in (-1e4, -1e9, -1e30):  # any large negative fill, not only softmax's -1e9
        assert "a masked key's score is 0" in check(name, lambda q, k, v, m, f=fill: normalised(
            q, k, v, m, fill=f)).message

    def empty_half(q, k, v, mask=None):  # right, but a query with no key gets 0.5, not 0
        out, scores = normalised(q, k, v, mask)
        if mask is not None:
            out = torch.where(mask.any(-1, keepdim=True), out, torch.full_like(out, 0.5))
        return out, scores

    assert "differs from VSA attention with a mask" in check(name, empty_half).message
    assert "turns the output by pi" in check(name, lambda q, k, v, m: normalised(
        q, k, v, m, by_sum=True)).message
    assert check(name, lambda q, k, v, m: normalised(q, k, v, m))

    def radians(q, k, v, mask=None, pi_in_values=False):  # cos(a - b), as the paper prints
        scores = (torch.cos(q) @ torch.cos(k).mT + torch.sin(q) @ torch.sin(k).mT) / q.shape[-1]
        if mask is not None:
            scores = scores.masked_fill(~mask, 0.0)
        c = math.pi if pi_in_values else 1.0
        re, im = scores @ torch.cos(c * v), scores @ torch.sin(c * v)
        return torch.atan2(im, re) / c, scores

    for pi_in_values in (False, True):
        assert "divided by pi" in check(name, lambda q, k, v, m, p=pi_in_values: radians(
            q, k, v, m, p)).message
    # the exercise forbids a (Tq, Tk, D) tensor of angle differences: right values, wrong method
    assert "(Tq, Tk, D)" in check(name, differences).message

    def per_sequence(q, k, v, mask=None):  # a (Tq, Tk, D) tensor for each sequence in turn
        outs = [differences(q[b:b + 1], k[b:b + 1], v[b:b + 1],
                            None if mask is None else mask[b:b + 1]) for b in range(len(q))]
        return torch.cat([o for o, _ in outs]), torch.cat([s for _, s in outs])

    assert "(Tq, Tk, D)" in check(name, per_sequence).message
    # one matrix product, however the phasors are held: right answers, whatever their sizes
    assert check(name, one_polar)
    assert check(name, features)
    assert check(name, phasor_path)
    # the forbidden tensor reshaped is still the forbidden tensor
    def flat_queries(q, k, v, mask=None):  # (B Tq, Tk, D)
        B, Tq, D = q.shape
        diff = q.reshape(B * Tq, 1, D) - k.repeat_interleave(Tq, 0)
        scores = torch.cos(math.pi * diff).mean(-1).view(B, Tq, -1)
        return read_scores(scores, v, mask)

    def flat_keys(q, k, v, mask=None):  # (B, Tq, Tk D)
        diff = (q[..., :, None, :] - k[..., None, :, :]).flatten(-2)
        scores = torch.cos(math.pi * diff).view(*diff.shape[:-1], k.shape[-2], -1).mean(-1)
        return read_scores(scores, v, mask)

    def flat_pairs(q, k, v, mask=None):  # (B Tq Tk, D)
        diff = (q[..., :, None, :] - k[..., None, :, :]).reshape(-1, q.shape[-1])
        scores = torch.cos(math.pi * diff).mean(-1).view(*q.shape[:-1], k.shape[-2])
        return read_scores(scores, v, mask)

    def key_blocks(q, k, v, mask=None):  # right: each key phasor as a real 2 x 2 block
        c, s = torch.cos(math.pi * k), torch.sin(math.pi * k)
        blocks = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)
        re_k = blocks[..., 0, 0]  # (B, Tk, D): cos, read back from the blocks
        im_k = blocks[..., 1, 0]
        scores = (torch.cos(math.pi * q) @ re_k.mT + torch.sin(math.pi * q) @ im_k.mT)
        return read_scores(scores / q.shape[-1], v, mask)

    assert check(name, key_blocks)
    for reshaped in (flat_queries, flat_keys, flat_pairs):
        assert "(Tq, Tk, D)" in check(name, reshaped).message
    complex_scores = check(name, lambda q, k, v, m: scores_slip(q, k, v, m, "complex")).message
    assert "complex" in complex_scores
    # slips in the scores are named as such, not blamed on the values
    assert "conjugated" in check(name, lambda q, k, v, m: scores_slip(q, k, v, m, "conj")).message
    assert "absolute value" in check(name, lambda q, k, v, m: scores_slip(q, k, v, m, "abs")
                                     ).message
    assert "divide the sum by D" in check(name, lambda q, k, v, m: scores_slip(q, k, v, m, "sum")
                                          ).message
    assert "conjugate the keys only" in check(name, lambda q, k, v, m: scores_slip(
        q, k, v, m, "values")).message


def phasor_path(q, k, v, mask=None):  # the package's own phasor path
    out, scores = vsa.vsa_attention_phasor(
        vsa.to_phasor(q), vsa.to_phasor(k), vsa.to_phasor(v), mask
    )
    return vsa.from_phasor(out), scores


def one_polar(q, k, v, mask=None):  # the queries and keys turned into phasors together
    z = torch.polar(torch.ones_like(torch.cat([q, k], -2)), math.pi * torch.cat([q, k], -2))
    zq, zk = z[..., : q.shape[-2], :], z[..., q.shape[-2]:, :]
    scores = (zq @ zk.conj().transpose(-2, -1)).real / q.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    zv = torch.polar(torch.ones_like(v), math.pi * v)
    return torch.angle(scores.to(zv.dtype) @ zv) / math.pi, scores


def features(q, k, v, mask=None):  # cell 61's real feature map [cos, sin] / sqrt(n)
    def phi(x):
        return torch.cat([torch.cos(math.pi * x), torch.sin(math.pi * x)], -1) / x.shape[-1] ** 0.5

    return read_scores(phi(q) @ phi(k).transpose(-2, -1), v, mask)


def read_scores(scores, v, mask):
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    re, im = scores @ torch.cos(math.pi * v), scores @ torch.sin(math.pi * v)
    return torch.atan2(im, re) / math.pi, scores


def scores_slip(q, k, v, mask, slip):
    zq, zk, zv = (torch.polar(torch.ones_like(x), math.pi * x) for x in (q, k, v))
    products = zq @ (zk if slip == "conj" else zk.conj()).transpose(-2, -1)
    scores = {"abs": products.abs(), "complex": products}.get(slip, products.real)
    scores = scores if slip == "sum" else scores / q.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    zv = zv.conj() if slip == "values" else zv
    return torch.angle(scores.to(zv.dtype) @ zv) / math.pi, scores


def differences(q, k, v, mask=None):
    scores = torch.cos(math.pi * (q[..., :, None, :] - k[..., None, :, :])).mean(-1)
    return read_scores(scores, v, mask)


def test_capacity_names_only_the_slip_it_sees():
    import math

    # pi forgotten: not the 1/sqrt(n) spread, whatever n is
    assert "1/sqrt(n)" not in check("ex-ch8-capacity", lambda n: math.floor(n / 50)).message
    assert "1/sqrt(n)" in check("ex-ch8-capacity",
                                lambda n: math.floor(math.pi * n / 100)).message


def test_capacity_takes_a_numpy_array_of_one_number_and_attention_refuses_wrapped_angles():
    import numpy as np

    from seqbook.vsa import vsa_attention

    assert check("ex-ch8-capacity", lambda n: np.array(math.floor(math.pi * n / 50)))

    def wrapped(q, k, v, mask=None):
        out, scores = vsa_attention(q, k, v, mask=mask)
        return torch.remainder(out, 2), scores  # the same angles, in [0, 2)

    result = check("ex-ch8-attention", wrapped)
    assert not result and "outside [-1, 1]" in result.message
