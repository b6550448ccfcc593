"""HRR, MAP and BSC (seqbook.vsa_family): equal to torch-hd, and the algebra each one promises."""

import math

import pytest
import torch
import torch.nn.functional as F
from tolerance import assert_same_math

from seqbook import vsa_family as vf

F64 = torch.float64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def test_hrr_map_bsc_equal_torchhd(device):
    torchhd = pytest.importorskip("torchhd")

    def plain(t):
        return t.as_subclass(torch.Tensor)

    a = torch.randn(4, 3, 64, generator=_gen(0), dtype=F64).to(device)
    b = torch.randn(4, 3, 64, generator=_gen(1), dtype=F64).to(device)
    hrr = lambda t: t.as_subclass(torchhd.HRRTensor)  # noqa: E731
    assert_same_math(vf.hrr_bind(a, b), plain(torchhd.bind(hrr(a), hrr(b))), n=64)
    assert_same_math(vf.hrr_unbind(a, b), plain(torchhd.bind(hrr(a), hrr(b).inverse())), n=64)
    sa, sb = torch.sign(a), torch.sign(b)
    mapt = lambda t: t.as_subclass(torchhd.MAPTensor)  # noqa: E731
    assert torch.equal(vf.map_bind(sa, sb), plain(torchhd.bind(mapt(sa), mapt(sb))))
    bits_a, bits_b = (torch.rand(4, 64, generator=_gen(s)) < 0.5 for s in (2, 3))
    bsc = lambda t: t.as_subclass(torchhd.BSCTensor)  # noqa: E731
    assert torch.equal(vf.bsc_bind(bits_a, bits_b), plain(torchhd.bind(bsc(bits_a), bsc(bits_b))))
    odd = torch.rand(5, 64, generator=_gen(4)) < 0.5  # K odd: no ties, no coin
    assert torch.equal(vf.bsc_bundle(odd), plain(torchhd.multibundle(bsc(odd))))


def test_hrr_bind_is_circular_convolution_and_unbind_its_correlation():
    n = 7
    a, b = torch.randn(n, generator=_gen(0), dtype=F64), torch.randn(n, generator=_gen(1), dtype=F64)
    conv = torch.stack([sum(a[k] * b[(j - k) % n] for k in range(n)) for j in range(n)])
    corr = torch.stack([sum(a[(j + k) % n] * b[k] for k in range(n)) for j in range(n)])
    assert_same_math(vf.hrr_bind(a, b), conv, n=n)
    assert_same_math(vf.hrr_unbind(a, b), corr, n=n)


def test_unbinding_recovers_the_bound_symbol():
    n = 2048
    x, k = (F.normalize(torch.randn(n, generator=_gen(s), dtype=F64), dim=0) for s in (0, 1))
    back = vf.hrr_unbind(vf.hrr_bind(x, k), k)  # x plus noise of about the same size
    assert F.cosine_similarity(back, x, dim=0) > 0.6
    assert abs(F.cosine_similarity(vf.hrr_bind(x, k), x, dim=0)) < 4 / math.sqrt(n)  # unlike x
    s, t = (torch.sign(torch.randn(n, generator=_gen(s))) for s in (2, 3))
    assert torch.equal(vf.map_bind(vf.map_bind(s, t), t), s)  # its own inverse
    p, q = (torch.rand(n, generator=_gen(s)) < 0.5 for s in (4, 5))
    assert torch.equal(vf.bsc_bind(vf.bsc_bind(p, q), q), p)
    # XOR is the product of the bipolar forms (-1)^bit
    assert torch.equal(1 - 2 * vf.bsc_bind(p, q).float(), (1 - 2 * p.float()) * (1 - 2 * q.float()))


def test_bsc_bundle_is_a_majority_with_random_ties():
    x = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 1], [1, 1, 0, 1]], dtype=torch.bool)  # K = 3
    assert vf.bsc_bundle(x).tolist() == [True, True, False, True]
    ties = torch.tensor([[1, 0] * 500, [0, 1] * 500], dtype=torch.bool)  # K = 2: every bit a tie
    drawn = vf.bsc_bundle(ties, generator=_gen(0))
    assert 0.4 < drawn.float().mean() < 0.6
    assert torch.equal(drawn, vf.bsc_bundle(ties, generator=_gen(0)))  # the generator decides
    assert vf.bsc_bundle(ties[:1]).tolist() == ties[0].tolist()  # one member: itself
