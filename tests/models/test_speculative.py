"""``seqbook.speculative`` and ``seqbook.lm.BigramLM``.

- ``verify`` emits the tokens Hugging Face's ``_speculative_sampling`` emits, draw for draw, from the
  same random state;
- the tokens ``speculative_generate`` emits are distributed as the model's own samples: the
  frequencies of every 3-token continuation over many runs against their exact probabilities (a
  chi-square test that refuses the draft's distribution and a verify step without its residual);
- at temperature 0 it gives ``GPT.generate``'s greedy tokens, with any draft and any k;
- a draft equal to the model keeps every guess: ceil(n / (k + 1)) passes;
- ``BigramLM`` is the table of pair counts.

Bad input: at the end of this file.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from seqbook.gpt import GPT, GPTConfig
from seqbook.lm import BigramLM, evaluate_perplexity
from seqbook.speculative import probabilities, speculative_generate, verify
from tests.badinput import assert_clear_error

V = 5


def tiny_gpt(seed: int, vocab: int = V, block: int = 32, std: float = 0.5) -> GPT:
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=vocab, block_size=block, n_layer=1, n_head=2, n_embd=16, init_std=std)
    return GPT(cfg).double().eval()


def random_pq(seed: int, k: int, vocab: int = 7, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    zq = torch.randn(1, k, vocab, generator=g, dtype=dtype) * 2
    zp = torch.randn(1, k + 1, vocab, generator=g, dtype=dtype) * 2
    q, p = zq.softmax(-1), zp.softmax(-1)
    drafted = torch.multinomial(q[0], 1, generator=g)[:, 0]
    return zp, zq, p[0], q[0], drafted


def test_probabilities_is_the_softmax_at_a_temperature_and_one_hot_at_zero():
    z = torch.tensor([[1.0, 3.0, 3.0, -2.0], [0.5, float("-inf"), 0.0, 0.1]])
    torch.testing.assert_close(probabilities(z, 0.7), (z / 0.7).softmax(-1))
    one_hot = torch.tensor([[0.0, 1, 0, 0], [1, 0, 0, 0]])  # the first of a tie
    assert torch.equal(probabilities(z, 0), one_hot)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_verify_emits_hugging_face_s_tokens_draw_for_draw(dtype):
    hf = pytest.importorskip("transformers.generation.utils")
    lengths = Counter()
    for seed in range(300):
        k = 1 + seed % 5
        zp, zq, p, q, drafted = random_pq(seed, k, dtype=dtype)
        candidates = torch.cat([torch.tensor([[3, 1]]), drafted[None]], dim=1)  # a prompt, then the drafts
        torch.manual_seed(seed)
        theirs, n = hf._speculative_sampling(candidates, zq, k, zp)
        torch.manual_seed(seed)
        ours = verify(p, q, drafted)
        assert torch.equal(ours, theirs[0]), seed
        assert len(ours) == int(n) + 1
        lengths[len(ours) - 1 == k] += 1
    assert lengths[True] > 10 and lengths[False] > 10  # both branches ran


def test_verify_with_a_generator_and_no_drafts():
    p = torch.tensor([[0.1, 0.9]])
    out = verify(p, p[:0], torch.zeros(0, dtype=torch.long), torch.Generator().manual_seed(0))
    assert out.shape == (1,)  # no guess: one token drawn from p
    a = verify(*random_pq(1, 3)[2:], generator=torch.Generator().manual_seed(5))
    b = verify(*random_pq(1, 3)[2:], generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b)


def test_one_round_emits_the_model_s_distribution():
    """k = 1 by Monte Carlo: the first token has p_1, and when the guess is kept the second has p_2."""
    _, _, p, q, _ = random_pq(0, 1, vocab=4)
    g = torch.Generator().manual_seed(0)
    first, second, n = torch.zeros(4), torch.zeros(4), 15_000
    for _ in range(n):
        drafted = torch.multinomial(q[0], 1, generator=g)
        out = verify(p, q, drafted, g)
        first[out[0]] += 1
        if len(out) == 2:
            second[out[1]] += 1
    assert (first / n - p[0].float()).abs().sum() / 2 < 0.015
    accept = torch.minimum(p[0], q[0]).sum().item()  # P(the guess is kept) = sum of min(p, q)
    assert abs(second.sum().item() / n - accept) < 0.015
    assert (second / second.sum() - p[1].float()).abs().sum() / 2 < 0.025


def exact_continuations(model, prompt, n, temperature):
    """P(every continuation of n tokens) under the model at the temperature, by enumeration."""
    probs = {(): 1.0}
    for _ in range(n):
        nxt = {}
        for seq, pr in probs.items():
            x = torch.cat([prompt, torch.tensor([seq], dtype=torch.long)], 1) if seq else prompt
            dist = probabilities(model(x)[0][0, -1], temperature)
            for t in range(V):
                nxt[seq + (t,)] = pr * dist[t].item()
        probs = nxt
    return probs


def chi_square(counts: Counter, probs: dict, runs: int) -> tuple[float, int]:
    """Pearson's statistic over the cells with an expected count of at least 5 (the rest pooled)."""
    stat, pooled_obs, pooled_exp, cells = 0.0, 0, 0.0, 0
    for seq, pr in probs.items():
        expected = pr * runs
        if expected >= 5:
            stat += (counts[seq] - expected) ** 2 / expected
            cells += 1
        else:
            pooled_obs += counts[seq]
            pooled_exp += expected
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / pooled_exp
        cells += 1
    return stat, cells - 1


def test_speculative_generate_samples_the_model_s_distribution():
    stats = pytest.importorskip("scipy.stats")
    model, prompt, n, runs, temperature = tiny_gpt(0, std=0.6), torch.tensor([[1, 2]]), 3, 3000, 0.8
    draft = BigramLM(torch.randint(0, V, (200,), generator=torch.Generator().manual_seed(1)), V).double()
    probs = exact_continuations(model, prompt, n, temperature)
    g = torch.Generator().manual_seed(0)
    counts = Counter()
    for _ in range(runs):
        out, _ = speculative_generate(model, draft, prompt, n, k=2, temperature=temperature, generator=g)
        counts[tuple(out[0, 2:].tolist())] += 1
    stat, dof = chi_square(counts, probs, runs)
    assert stats.chi2.sf(stat, dof) > 1e-4, (stat, dof)
    # the test can see a wrong sampler: the draft's own distribution is refused
    draft_probs = exact_continuations(draft, prompt, n, temperature)
    g = torch.Generator().manual_seed(0)
    wrong = Counter()
    for _ in range(runs // 3):
        out = prompt
        for _ in range(n):
            nxt = torch.multinomial(probabilities(draft(out)[0][0, -1], temperature), 1, generator=g)
            out = torch.cat([out, nxt[None]], 1)
        wrong[tuple(out[0, 2:].tolist())] += 1
    assert stats.chi2.sf(*chi_square(wrong, probs, runs // 3)) < 1e-6
    assert stats.chi2.sf(*chi_square(wrong, draft_probs, runs // 3)) > 1e-4  # ... which is q's


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("draft_kind", ["bigram", "gpt"])
def test_greedy_speculative_decoding_is_greedy_decoding(k, draft_kind):
    model = tiny_gpt(0, vocab=11, block=40)
    ids = torch.randint(0, 11, (300,), generator=torch.Generator().manual_seed(2))
    draft = BigramLM(ids, 11).double() if draft_kind == "bigram" else tiny_gpt(3, vocab=11, block=40)
    prompt = torch.tensor([[4, 1, 7]])
    out, passes = speculative_generate(model, draft, prompt, 37, k=k, temperature=0)
    assert torch.equal(out, model.generate(prompt, 37, temperature=0))
    assert math.ceil(37 / (k + 1)) <= passes <= 37


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rope"])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_the_cache_changes_nothing_but_the_work(positional, k):
    """With use_cache=True every pass runs only the positions its caches lack, the caches forget
    the rejected guesses, and the tokens and the passes are those of the loop without a cache,
    draw for draw (float64: the two loops' probabilities differ by rounding only)."""
    torch.manual_seed(5)
    cfg = GPTConfig(vocab_size=11, block_size=48, n_layer=2, n_head=2, n_embd=16, init_std=0.5,
                    positional=positional)
    model = GPT(cfg).double().eval()
    ids = torch.randint(0, 11, (300,), generator=torch.Generator().manual_seed(2))
    draft = BigramLM(ids, 11).double()
    prompt = torch.tensor([[4, 1, 7, 2]])
    ran = []  # the number of positions of every pass of the model
    hook = model.tok_emb.register_forward_pre_hook(lambda m, a: ran.append(a[0].shape[1]))
    try:
        for temperature, seed in [(0.0, 0), (1.0, 1), (1.0, 2), (0.7, 3)]:
            runs = {}
            for use_cache in (False, True):
                ran.clear()
                out, passes = speculative_generate(
                    model, draft, prompt, 40, k=k, temperature=temperature,
                    generator=torch.Generator().manual_seed(seed), use_cache=use_cache)
                runs[use_cache] = (out, passes, list(ran))
            (plain, plain_passes, plain_ran), (cached, cached_passes, cached_ran) = runs.values()
            assert torch.equal(cached, plain) and cached_passes == plain_passes
            # every position runs once, except guesses that were rejected and the last
            # position emitted, which the next pass runs again
            assert cached_ran[0] == 4 + min(k, 39) and sum(cached_ran) < sum(plain_ran)
            assert sum(cached_ran) <= 44 + (k + 1) * cached_passes
            assert max(cached_ran[1:]) <= k + 1
            if temperature == 0:
                assert torch.equal(cached, model.generate(prompt, 40, temperature=0))
    finally:
        hook.remove()


@pytest.mark.parametrize("k", [1, 2, 4, 6])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_draft_equal_to_the_model_keeps_every_guess(k, temperature):
    model = tiny_gpt(1)
    out, passes = speculative_generate(model, model, torch.tensor([[0]]), 20, k=k, temperature=temperature,
                                       generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 21) and passes == math.ceil(20 / (k + 1))


def test_zero_new_tokens_and_one():
    model = tiny_gpt(1)
    prompt = torch.tensor([[0, 1]])
    assert torch.equal(speculative_generate(model, model, prompt, 0)[0], prompt)
    out, passes = speculative_generate(model, model, prompt, 1, k=5)
    assert out.shape == (1, 3) and passes == 1  # no room to guess: one pass, one token


def test_bigram_lm_is_the_table_of_pair_counts():
    ids = torch.tensor([0, 1, 1, 2, 0, 1, 2, 2])
    lm = BigramLM(ids, 4, smoothing=0.5)
    pairs = Counter(zip(ids[:-1].tolist(), ids[1:].tolist(), strict=True))
    for a in range(4):
        row = torch.tensor([pairs[a, b] + 0.5 for b in range(4)])
        torch.testing.assert_close(lm.log_probs[a].exp(), row / row.sum())
    logits, loss = lm(ids[None, :-1])
    assert loss is None and logits.shape == (1, 7, 4)
    assert not any(p.requires_grad for p in lm.parameters())
    x, y = ids[None, None, :-1], ids[None, None, 1:]
    nll = -lm.log_probs[ids[:-1], ids[1:]].double().mean()
    assert math.isclose(evaluate_perplexity(lm, x, y, carry_state=False), nll.exp().item(), rel_tol=1e-6)


# ---------------------------------------------------------------------------------------------
# Bad input.
# ---------------------------------------------------------------------------------------------

MODEL = tiny_gpt(0, block=8)
DRAFT = BigramLM(torch.tensor([0, 1, 2, 3, 4, 0]), V)
P = torch.full((3, V), 1.0 / V)
GOOD = torch.tensor([[1, 2]])

BAD = [
    ("probabilities-nan", lambda: probabilities(torch.tensor([0.0, float("nan")])), ValueError,
     "logits must"),
    ("probabilities-negative-t", lambda: probabilities(torch.zeros(3), -1.0), ValueError, "temperature must"),
    ("verify-p-1d", lambda: verify(torch.ones(V) / V, P[:2], torch.tensor([0, 1])), ValueError, "p must"),
    ("verify-p-rows", lambda: verify(P, P[:1], torch.tensor([0])), ValueError, "p must have k + 1 = 2"),
    ("verify-q-width", lambda: verify(P, P[:2, :3], torch.tensor([0, 1])), ValueError, "q must"),
    ("verify-drafted-float", lambda: verify(P, P[:2], torch.tensor([0.0, 1.0])), TypeError, "drafted must"),
    ("verify-drafted-beyond", lambda: verify(P, P[:2], torch.tensor([0, V])), ValueError, "drafted must"),
    ("verify-q-zero", lambda: verify(P, torch.eye(V)[:2], torch.tensor([0, 3])), ValueError, "q must give"),
    ("verify-generator", lambda: verify(P, P[:2], torch.tensor([0, 1]), generator=1), TypeError,
     "generator must"),
    ("generate-model", lambda: speculative_generate("gpt", DRAFT, GOOD, 2), TypeError, "model must"),
    ("generate-draft-vocab", lambda: speculative_generate(MODEL, BigramLM(torch.tensor([0, 1]), 3), GOOD, 2),
     ValueError, "draft must have the model's vocab_size 5"),
    ("generate-draft-no-vocab", lambda: speculative_generate(MODEL, torch.nn.Linear(2, 2), GOOD, 2),
     TypeError, "draft must"),
    ("generate-batch", lambda: speculative_generate(MODEL, DRAFT, GOOD.repeat(2, 1), 2), ValueError,
     "idx must hold one"),
    ("generate-idx-beyond", lambda: speculative_generate(MODEL, DRAFT, torch.tensor([[1, V]]), 2), ValueError,
     "idx must"),
    ("generate-too-long", lambda: speculative_generate(MODEL, DRAFT, GOOD, 8), ValueError,
     "idx's 2 tokens and max_new_tokens=8 must fit in model's block_size 8"),
    ("generate-k-0", lambda: speculative_generate(MODEL, DRAFT, GOOD, 2, k=0), ValueError, "k must"),
    ("generate-negative", lambda: speculative_generate(MODEL, DRAFT, GOOD, -1), ValueError,
     "max_new_tokens must"),
    ("generate-temperature", lambda: speculative_generate(MODEL, DRAFT, GOOD, 2, temperature=float("nan")),
     ValueError, "temperature must"),
    ("generate-generator", lambda: speculative_generate(MODEL, DRAFT, GOOD, 2, generator=0), TypeError,
     "generator must"),
    ("generate-use-cache", lambda: speculative_generate(MODEL, DRAFT, GOOD, 2, use_cache=1), TypeError,
     "use_cache must"),
    ("generate-use-cache-no-blocks", lambda: speculative_generate(DRAFT, DRAFT, GOOD, 2, use_cache=True),
     TypeError, "use_cache=True needs a model with one attention block per KVCache"),
    ("bigram-ids-2d", lambda: BigramLM(torch.zeros(2, 3, dtype=torch.long), V), ValueError, "ids must"),
    ("bigram-one-token", lambda: BigramLM(torch.tensor([1]), V), ValueError, "ids must hold at least 2"),
    ("bigram-ids-beyond", lambda: BigramLM(torch.tensor([1, V]), V), ValueError, "ids must"),
    ("bigram-vocab-0", lambda: BigramLM(torch.tensor([0, 0]), 0), ValueError, "vocab_size must"),
    ("bigram-smoothing-0", lambda: BigramLM(torch.tensor([0, 1]), V, smoothing=0.0), ValueError,
     "smoothing must"),
    ("bigram-forward-beyond", lambda: DRAFT(torch.tensor([[0, V]])), ValueError, "idx must"),
    ("bigram-forward-1d", lambda: DRAFT(torch.tensor([0, 1])), ValueError, "idx must"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input_is_refused_clearly(case):
    _, call, error, words = case
    assert_clear_error(call, words, exc=error)
