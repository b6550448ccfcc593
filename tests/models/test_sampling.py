"""``seqbook.sampling``: each rule equals its Hugging Face logits warper value for value (the -inf
pattern and the kept logits, ``torch.equal``), ``warp`` equals HF's processor list in HF's order,
``sample`` draws only kept tokens and reproducibly (bad input: tests/bad_input/test_bad_input_sampling.py).

Top-p and ties: HF sorts with an unstable ``torch.sort``, so where tied tokens straddle the cut
it keeps some of them by the sort's order; ``top_p`` keeps all of them (as ``top_k`` does). The
comparison with HF is exact on every row where no tie straddles the cut, and the straddling rows
are checked separately (HF keeps a subset of ours, the difference being tokens tied at the cut).
"""

from __future__ import annotations

import pytest
import torch

from seqbook import sampling
from seqbook.sampling import min_p, sample, temperature, top_k, top_p, warp

SHAPES = [(1, 1), (3, 2), (4, 5), (5, 16), (6, 17), (8, 33), (4, 50)]
INF = float("inf")


def hf():
    """HF's logits_process module, or skip the test when transformers is missing."""
    return pytest.importorskip("transformers.generation.logits_process")


def logits_batch(B: int, V: int, seed: int, dtype=torch.float32, ties: bool = True) -> torch.Tensor:
    """(B, V) seeded logits: smooth rows, rows with -inf entries, a row finite at one id only and,
    with ``ties``, rows of a few repeated values (ties everywhere, and ties with -inf)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, V, generator=g, dtype=torch.float64) * 3
    rows = torch.arange(B)
    if ties:
        tied = rows % 3 == 1
        x[tied] = torch.randint(-2, 3, (int(tied.sum()), V), generator=g).double()
    holes = (torch.rand(B, V, generator=g) < 0.3) & (rows % 2 == 0)[:, None]
    holes[torch.arange(B), x.argmax(-1)] = False                       # a finite entry per row
    x = x.masked_fill(holes, -INF)
    if B > 2 and V > 1:
        x[-1] = -INF
        x[-1, int(torch.randint(V, (1,), generator=g))] = 0.5          # one finite logit
    return x.to(dtype)


def tail_removed(x: torch.Tensor, p: float) -> torch.Tensor:
    """How many tokens HF's top-p removes per row (the count does not depend on tie order)."""
    tail = x.sort(-1).values.softmax(-1).cumsum(-1)
    return (tail <= 1 - p).sum(-1).clamp(max=x.shape[-1] - 1)


# --------------------------------------------------------------------- each rule equals HF's warper


@pytest.mark.parametrize("B,V", SHAPES)
def test_temperature_equals_hf(B, V):
    lp = hf()
    for dtype in (torch.float32, torch.float64):
        x = logits_batch(B, V, seed=V, dtype=dtype)
        for t in (0.25, 0.7, 1.0, 3.0):
            assert torch.equal(temperature(x, t), lp.TemperatureLogitsWarper(t)(None, x))


@pytest.mark.parametrize("B,V", SHAPES)
def test_top_k_equals_hf(B, V):
    lp = hf()
    for dtype in (torch.float32, torch.float64):
        x = logits_batch(B, V, seed=V + 1, dtype=dtype)
        for k in sorted({1, 2, 3, max(1, V // 2), V, V + 7}):
            assert torch.equal(top_k(x, k), lp.TopKLogitsWarper(top_k=k)(None, x)), k


def test_top_k_keeps_ties_and_all_when_k_reaches_v():
    x = torch.tensor([[1.0, 3.0, 2.0, 3.0, 2.0, -INF]])
    assert torch.equal(top_k(x, 1), torch.tensor([[-INF, 3.0, -INF, 3.0, -INF, -INF]]))
    assert torch.equal(top_k(x, 3), torch.tensor([[-INF, 3.0, 2.0, 3.0, 2.0, -INF]]))
    assert torch.equal(top_k(x, 6), x) and torch.equal(top_k(x, 100), x)


TOP_PS = (0.05, 0.3, 0.5, 0.8, 0.9, 0.99, 1.0)


@pytest.mark.parametrize("B,V", SHAPES)
def test_top_p_equals_hf_without_ties(B, V):
    """Smooth rows (no ties but the -inf ones, which never sit at the cut), -inf holes, a row
    finite at one id: equal to HF everywhere."""
    lp = hf()
    for dtype in (torch.float32, torch.float64):
        x = logits_batch(B, V, seed=V + 2, dtype=dtype, ties=False)
        for p in TOP_PS:
            assert torch.equal(top_p(x, p), lp.TopPLogitsWarper(top_p=p)(None, x)), p


@pytest.mark.parametrize("B,V", SHAPES)
def test_top_p_with_ties(B, V):
    """Rows full of ties: equal to HF on every row where no tie straddles the cut; where one does,
    HF keeps a subset of ours and the extra tokens are tied with the least logit kept."""
    lp = hf()
    for dtype in (torch.float32, torch.float64):
        x = logits_batch(4 * B, V, seed=V + 3, dtype=dtype)
        compared = straddled = 0
        for p in TOP_PS:
            ours, theirs = top_p(x, p), lp.TopPLogitsWarper(top_p=p)(None, x)
            kept, kept_hf = ours > -INF, theirs > -INF
            clean = kept.sum(-1) == V - tail_removed(x, p)                   # no tie across the cut
            assert torch.equal(ours[clean], theirs[clean]), p
            assert torch.equal(kept_hf.sum(-1), V - tail_removed(x, p))     # HF keeps the count exactly
            assert not (kept_hf & ~kept).any()                               # HF's set is inside ours
            least = ours.masked_fill(~kept, INF).amin(-1, keepdim=True)
            extra = kept & ~kept_hf
            assert torch.equal(extra, extra & (x == least))                  # the extra ones tie at the cut
            assert torch.equal(theirs[kept_hf], ours[kept_hf])
            compared += int(clean.sum())
            straddled += int((~clean).sum())
        assert compared > 0
        if V >= 5:
            assert straddled > 0  # the data do exercise a straddling tie


def test_top_p_ties_off_the_cut_equal_hf():
    """Hand-made ties that do not straddle the cut: each p puts the cut on the last token of a
    group of ties, so HF's result does not depend on its (unstable) sort."""
    lp = hf()
    x = torch.tensor([[2.0, 0.0, 2.0, 0.0, -1.0, 0.0, -INF, 2.0] * 3])   # V = 24: HF's sort is not stable
    probs = x[0].softmax(-1).double()
    mass = 0.0
    for value in (2.0, 0.0, -1.0):                                       # the groups, most probable first
        group = probs[x[0] == value]
        mass += float(group.sum())
        for p in (mass - float(group[0]) / 2, mass - float(group[0]) / 4):   # inside the last member
            p = min(p, 1.0)
            assert torch.equal(top_p(x, p) > -INF, x >= value), p
            assert torch.equal(top_p(x, p), lp.TopPLogitsWarper(top_p=p)(None, x)), p
    assert torch.equal(top_p(x, 1.0), lp.TopPLogitsWarper(top_p=1.0)(None, x))


def test_top_p_rule_on_a_small_example():
    z = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()
    assert torch.equal(top_p(z, 0.5) > -INF, torch.tensor([True, False, False, False]))
    assert torch.equal(top_p(z, 0.6) > -INF, torch.tensor([True, True, False, False]))   # crosses: kept
    assert torch.equal(top_p(z, 0.9) > -INF, torch.tensor([True, True, True, False]))
    assert torch.equal(top_p(z, 1.0) > -INF, torch.ones(4, dtype=torch.bool))
    # p = 1 removes a token whose probability underflows to 0 in the dtype (as HF does)
    assert torch.equal(top_p(torch.tensor([0.0, -200.0]), 1.0), torch.tensor([0.0, -INF]))


def test_top_p_does_not_depend_on_the_order_of_the_ids():
    x = logits_batch(12, 40, seed=5)
    perm = torch.randperm(40, generator=torch.Generator().manual_seed(1))
    for p in TOP_PS:
        assert torch.equal(top_p(x[:, perm], p), top_p(x, p)[:, perm])


@pytest.mark.parametrize("B,V", SHAPES)
def test_min_p_equals_hf(B, V):
    lp = hf()
    for dtype in (torch.float32, torch.float64):
        x = logits_batch(B, V, seed=V + 4, dtype=dtype)
        for p in (0.0, 0.01, 0.1, 0.3, 0.5, 0.9, 1.0):
            assert torch.equal(min_p(x, p), lp.MinPLogitsWarper(min_p=p)(None, x)), p
        assert torch.equal(min_p(x, 0.0), x)


# ------------------------------------------------------------------ composition and the draw


COMBOS = [(1.0, None, None, None), (0.7, 5, None, None), (1.3, None, 0.9, None), (0.8, None, None, 0.1),
          (0.6, 4, 0.8, 0.05), (2.0, 1, 0.5, 0.5), (1.0, 50, 1.0, 0.0), (0.9, 3, None, 0.2)]


def hf_list(t, k, p, mp):
    lp = hf()
    procs = [lp.TemperatureLogitsWarper(t)]
    if k is not None:
        procs.append(lp.TopKLogitsWarper(top_k=k))
    if p is not None:
        procs.append(lp.TopPLogitsWarper(top_p=p))
    if mp is not None:
        procs.append(lp.MinPLogitsWarper(min_p=mp))
    return lp.LogitsProcessorList(procs)


@pytest.mark.parametrize("t,k,p,mp", COMBOS)
def test_warp_equals_hf_processor_list(t, k, p, mp):
    for B, V in SHAPES:
        x = logits_batch(B, V, seed=V + 6, ties=False)
        dummy = torch.zeros(B, 1, dtype=torch.long)
        assert torch.equal(warp(x, t, k, p, mp), hf_list(t, k, p, mp)(dummy, x)), (B, V)
    assert sampling.WARPERS == (temperature, top_k, top_p, min_p)


@pytest.mark.parametrize("t,k,p,mp", COMBOS)
def test_sample_draws_what_hf_draws(t, k, p, mp):
    """Same generator state, same probabilities: the same ids as HF's sampling step."""
    x = logits_batch(64, 30, seed=7, ties=False)
    ours = sample(x, t, k, p, mp, generator=torch.Generator().manual_seed(3))
    probs = hf_list(t, k, p, mp)(torch.zeros(64, 1, dtype=torch.long), x).softmax(-1)
    theirs = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(3)).squeeze(1)
    assert ours.dtype == torch.int64 and torch.equal(ours, theirs)


def test_sample_is_reproducible_and_never_draws_a_removed_token():
    x = logits_batch(6, 25, seed=8)                                       # ties and -inf holes
    allowed = warp(x, 0.9, 6, 0.8, 0.05) > -INF                           # (6, 25)
    many = x.expand(2000, 6, 25)                                          # 2000 draws per row
    ids = sample(many, 0.9, 6, 0.8, 0.05, generator=torch.Generator().manual_seed(0))
    assert ids.shape == (2000, 6)
    assert allowed.gather(1, ids.T).all()
    drawn = torch.zeros_like(allowed).scatter_(1, ids.T, True)
    assert torch.equal(drawn, allowed)                                    # and every kept one is drawn
    again = sample(many, 0.9, 6, 0.8, 0.05, generator=torch.Generator().manual_seed(0))
    assert torch.equal(ids, again)


def test_temperature_zero_is_argmax():
    x = logits_batch(2 * 3 * 4, 11, seed=9).reshape(2, 3, 4, 11)
    ids = sample(x, temperature=0, top_k=2, top_p=0.5, min_p=0.3)
    assert ids.shape == (2, 3, 4) and torch.equal(ids, x.argmax(-1))
    assert torch.equal(sample(torch.tensor([0.0, 2.0, 2.0, -INF]), 0.0), torch.tensor(1))


def test_sample_leading_dims_and_vectors():
    x = logits_batch(6, 9, seed=10)
    flat = sample(x, 0.8, top_k=4, generator=torch.Generator().manual_seed(2))
    nested = sample(x.reshape(2, 3, 9), 0.8, top_k=4, generator=torch.Generator().manual_seed(2))
    assert torch.equal(nested, flat.reshape(2, 3))
    one = sample(x[0], generator=torch.Generator().manual_seed(2))
    assert one.shape == () and one.dtype == torch.int64


def test_sample_half_precision_uses_float32():
    x = logits_batch(4, 10, seed=11)
    a = sample(x.half(), 0.7, 3, generator=torch.Generator().manual_seed(5))
    b = sample(x.half().float(), 0.7, 3, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b)


# ------------------------------------------------------------------ shapes, dtypes, no mutation


RULES = [(temperature, 0.7), (top_k, 3), (top_p, 0.8), (min_p, 0.2)]


@pytest.mark.parametrize("rule,arg", RULES, ids=lambda r: getattr(r, "__name__", str(r)))
def test_rules_on_any_leading_dims_without_changing_the_input(rule, arg):
    x = logits_batch(24, 13, seed=12)
    before = x.clone()
    flat = rule(x, arg)
    assert torch.equal(x, before)
    assert flat is not x and flat.dtype == x.dtype
    assert torch.equal(rule(x.reshape(2, 3, 4, 13), arg), flat.reshape(2, 3, 4, 13))
    assert torch.equal(rule(x[5], arg), flat[5])                          # a single row (V,)
    assert (flat.amax(-1) == x.amax(-1)).all() or rule is temperature     # the top token stays
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        out = rule(x.to(dtype), arg)
        assert out.dtype == dtype and out.shape == x.shape


@pytest.mark.parametrize("rule,arg", RULES, ids=lambda r: getattr(r, "__name__", str(r)))
def test_a_row_finite_at_one_id_keeps_it(rule, arg):
    x = torch.full((2, 7), -INF)
    x[0, 3], x[1, 0] = 1.5, -40.0
    out = rule(x, arg)
    assert torch.equal(out > -INF, x > -INF)


def test_meta_tensors_give_meta_outputs():
    x = torch.empty(2, 3, 17, device="meta")
    for rule, arg in RULES:
        out = rule(x, arg)
        assert out.is_meta and out.shape == x.shape and out.dtype == x.dtype
    assert warp(x, 0.8, 4, 0.9, 0.1).is_meta
    ids = sample(x, 0.8, 4, 0.9, 0.1)
    assert ids.is_meta and ids.shape == (2, 3) and ids.dtype == torch.int64
    assert sample(x, 0.0).shape == (2, 3)


def test_legal_edges():
    x = logits_batch(3, 6, seed=13)
    assert torch.equal(top_k(x, 6), x) and torch.equal(top_p(x, 1.0), top_p(x, 1))
    assert torch.equal(min_p(x, 0), x)
    assert torch.equal(top_k(x, torch.tensor(2).numpy()[()]), top_k(x, 2))   # a NumPy int
    assert torch.equal(top_k(torch.tensor([[4.0]]), 1), torch.tensor([[4.0]]))
    assert torch.equal(sample(torch.tensor([[4.0]])), torch.tensor([0]))
